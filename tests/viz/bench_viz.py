"""Benchmark (not a test): the clustering picture of big synthetic graphs.

Uses ``tools/bench_clustering.py``'s ``synthetic_graph(n)`` (random DAGs with barriers, constants and
control edges). For each size prints the seconds for: clustering, the model (with TF shape inference),
``.dot`` (everything: model + DOT text), ``.svg`` and ``.html`` with ``--collapse`` (our layered layout
included; the .html also lays out every cluster's inside, for expanding it in the page), a focus view (``--around`` a middle node, depth 3), and the ``report`` page: static (clustering,
reasons, advisor's static findings, collapsed picture, focus-ready) and, with ``--report-run``, run on
generated inputs (every cluster compiled, launched, timed against TF's kernels within the report's
timing budget; the run's own compile time is listed separately). Target: under 30 s each at 10k nodes. (The page's
opening time in Chromium: tools/viz_page_timing.py.)

    python tests/viz/bench_viz.py            # 10k nodes
    python tests/viz/bench_viz.py 1000 10000 --full-svg   # also lay out every node in the .svg
    python tests/viz/bench_viz.py 1000 10000 --report-run # also the report with run-time numbers
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def runnable(graph_def):
    """The synthetic graph with its DebugIdentity barriers given the ``tensor_name`` TF's kernel needs
    to run (clustering is unchanged: DebugIdentity still has no XLA kernel)."""
    for nd in graph_def.node:
        if nd.op == "DebugIdentity" and not nd.attr["tensor_name"].s:
            nd.attr["tensor_name"].s = (nd.input[0] + ":0").encode()
    return graph_def


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[10000])
    ap.add_argument("--full-svg", action="store_true", help="also time .svg of the uncollapsed graph")
    ap.add_argument("--report-run", action="store_true",
                    help="also time the report that runs the graph (compiles every cluster: slow)")
    args = ap.parse_args(argv)
    from bench_clustering import synthetic_graph

    import tfxla_cluster as txc
    from tfxla_cluster.graph import Graph
    from tfxla_cluster.report import build_report, write_report
    from tfxla_cluster.viz import write

    flags = txc.Flags.parse("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit")
    txc.mark_for_compilation(synthetic_graph(50), flags, state=txc.ProcessState())   # warm-up
    out = Path(tempfile.mkdtemp(prefix="tfxla-viz-bench-"))
    print(f"{'nodes':>7} {'clusters':>8} {'mark s':>7} {'.dot s':>7} {'collapsed .svg s':>16} "
          f"{'collapsed .html s':>17} {'focus .html s':>13} {'report s':>8}"
          + (f" {'full .svg s':>11}" if args.full_svg else "")
          + (f"  {'report+run s (run / timing / render)':>38}" if args.report_run else ""))
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

        def timed_report(graph_def, path: Path, run: bool) -> tuple[float, dict]:
            # The whole report from a fresh Graph: clustering, (run and timings,) advisor, page.
            t = time.perf_counter()
            report = build_report(Graph(runnable(graph_def)), flags=flags, run=run, input_shapes={"input": (16,)},
                                  calls=1, repeats=3, title=f"synthetic {n}")
            write_report(report, path)
            return time.perf_counter() - t, report.seconds

        t_dot = timed(f"g{n}.dot")
        t_svg = timed(f"g{n}_collapsed.svg", collapse=True)
        t_html = timed(f"g{n}_collapsed.html", collapse=True)
        t_focus = timed(f"g{n}_focus.html", around=f"n{n // 2}", depth=3)
        t_report, _ = timed_report(gd, out / f"r{n}.html", run=False)
        line = (f"{n:>7} {len(result.clusters):>8} {t_mark:>7.2f} {t_dot:>7.2f} {t_svg:>16.2f} {t_html:>17.2f} "
                f"{t_focus:>13.2f} {t_report:>8.2f}")
        if args.full_svg:
            line += f" {timed(f'g{n}.svg'):>11.2f}"
        if args.report_run:
            t_run, parts = timed_report(gd, out / f"r{n}_run.html", run=True)
            line += (f"  {t_run:>10.2f} ({parts.get('run', 0):.1f} / {parts.get('measure', 0):.1f} / "
                     f"{parts.get('render', 0):.1f})")
        print(line, flush=True)
    print(f"files in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
