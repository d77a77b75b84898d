"""Benchmark (not a test): the clustering picture of big synthetic graphs.

Uses ``tools/bench_clustering.py``'s ``synthetic_graph(n)`` (random DAGs with barriers, constants and
control edges). For each size prints the seconds for: clustering, the model (with TF shape inference),
``.dot`` (everything: model + DOT text), ``.svg`` and ``.html`` with ``--collapse`` (Graphviz layout
included), and a focus view (``--around`` a middle node, depth 3). Target: under 30 s each at 10k nodes.

    python tests/viz/bench_viz.py            # 10k nodes
    python tests/viz/bench_viz.py 1000 10000 --full-svg   # also lay out every node (slow: dot is O(n^2)-ish)
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[10000])
    ap.add_argument("--full-svg", action="store_true", help="also time .svg of the uncollapsed graph")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tools"))
    from bench_clustering import synthetic_graph

    import tfxla_cluster as txc
    from tfxla_cluster.graph import Graph
    from tfxla_cluster.viz import write

    flags = txc.Flags.parse("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit")
    txc.mark_for_compilation(synthetic_graph(50), flags, state=txc.ProcessState())   # warm-up
    out = Path(tempfile.mkdtemp(prefix="tfxla-viz-bench-"))
    print(f"{'nodes':>7} {'clusters':>8} {'mark s':>7} {'.dot s':>7} {'collapsed .svg s':>16} "
          f"{'collapsed .html s':>17} {'focus .html s':>13}" + (f" {'full .svg s':>11}" if args.full_svg else ""))
    for n in args.sizes:
        gd = synthetic_graph(n)
        t0 = time.perf_counter()
        result = txc.mark_for_compilation(Graph(gd), flags, state=txc.ProcessState())
        t_mark = time.perf_counter() - t0

        def timed(path: str, **kw) -> float:
            # Each timing starts from the clustering result on a fresh Graph copy, so shape inference
            # (cached per Graph) is paid every time, as in a CLI run.
            fresh = txc.mark_for_compilation(Graph(gd), flags, state=txc.ProcessState())
            t = time.perf_counter()
            write(fresh, out / path, flags=flags, title=f"synthetic {n}", **kw)
            return time.perf_counter() - t

        t_dot = timed(f"g{n}.dot")
        t_svg = timed(f"g{n}_collapsed.svg", collapse=True)
        t_html = timed(f"g{n}_collapsed.html", collapse=True)
        t_focus = timed(f"g{n}_focus.html", around=f"n{n // 2}", depth=3)
        line = (f"{n:>7} {len(result.clusters):>8} {t_mark:>7.2f} {t_dot:>7.2f} {t_svg:>16.2f} {t_html:>17.2f} "
                f"{t_focus:>13.2f}")
        if args.full_svg:
            line += f" {timed(f'g{n}.svg'):>11.2f}"
        print(line, flush=True)
    print(f"files in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
