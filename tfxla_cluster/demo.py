"""``tfxla-cluster demo``: the whole path on a bundled model, in one screen.

Stage: user-facing tour. Loads a sample GraphDef from ``graphs/`` (default: a small transformer block
with layer norm, attention, GELU MLP and softmax cross-entropy) with its recorded inputs, turns it back
into a callable TF function, and then: clusters it as TF would (auto-clustering on, CPU global jit),
explains the decisions, prints one cluster's HLO before and after our XLA:CPU pipeline, runs it through
our compiled clusters, compares with TF (max abs error) and times TF graph mode, real XLA
(``jit_compile=True``) and ours.
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Callable

import numpy as np

AUTO_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"


def samples_dir() -> Path:
    """The bundled sample graphs: the copy a built wheel carries inside the package (``_graphs``, see
    ``setup.py``), else the source checkout's ``graphs/`` (editable install, or run from the tree)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_graphs", here.parent / "graphs"):
        if (candidate / "README.md").is_file():
            return candidate
    from tfxla_cluster.errors import NotFoundError

    raise NotFoundError(f"the sample graphs are missing: neither {here / '_graphs'} nor {here.parent / 'graphs'} "
                        "exists (reinstall tfxla_cluster)")


def function_from_sample(name: str, graphs_dir: Path | None = None) -> tuple[Callable, list[np.ndarray]]:
    """A TF-callable function built from ``graphs/<name>.pbtxt`` and its recorded inputs."""
    import tensorflow as tf

    from tfxla_cluster.errors import NotFoundError
    from tfxla_cluster.graph.io import read_graph_def

    graphs_dir = graphs_dir or samples_dir()
    meta_path = graphs_dir / f"{name}.json"
    if not meta_path.exists():
        samples = sorted(p.stem for p in graphs_dir.glob("*.json"))
        raise NotFoundError(f"no sample '{name}' in {graphs_dir}; samples: {', '.join(samples)}")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    gd = read_graph_def(graphs_dir / f"{name}.pbtxt")
    wrapped = tf.compat.v1.wrap_function(lambda: tf.graph_util.import_graph_def(gd, name=""), [])
    pruned = wrapped.prune([wrapped.graph.get_tensor_by_name(i["tensor"]) for i in meta["inputs"]],
                           [wrapped.graph.get_tensor_by_name(o["tensor"]) for o in meta["outputs"]])
    inputs_npz = np.load(graphs_dir / "tf" / name / "inputs.npz")
    arrays = [inputs_npz[i["name"]] for i in meta["inputs"]]

    def fn(*args):
        return pruned(*args)
    fn.__name__ = name
    return fn, arrays


def _entry(lines: list[str]) -> list[str]:
    """The ENTRY computation's lines (what a reader wants first)."""
    start = next((i for i, line in enumerate(lines) if line.startswith("ENTRY")), 0)
    return lines[start:]


def _median_ms(call: Callable, repeats: int = 20) -> float:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = call()
        for o in out if isinstance(out, (list, tuple)) else [out]:
            getattr(o, "numpy", lambda: None)()
        samples.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(samples)


def run(name: str = "transformer_block", hlo_lines: int = 25) -> int:
    import tensorflow as tf

    import tfxla_cluster as txc
    from tfxla_cluster.jit import explain

    fn, arrays = function_from_sample(name)
    tensors = [tf.constant(a) for a in arrays]
    print(f"== {name}: {', '.join(f'{a.dtype}{list(a.shape)}' for a in arrays)}")

    ours = txc.function(fn, flags=AUTO_FLAGS)
    compiled = ours.get_compiled(*tensors)
    print(f"\n== Clustering (TF_XLA_FLAGS='{AUTO_FLAGS}', TF's grappler first)")
    print(explain.explain(compiled.mark_result))

    t0 = time.perf_counter()
    got = ours(*tensors)
    first_ours = time.perf_counter() - t0
    want = tf.function(fn)(*tensors)
    errors = [float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64))))
              for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)) if np.asarray(g).size]
    print(f"\n== Result vs TF: max abs error {max(errors) if errors else 0.0:.3g} over {len(errors)} outputs")

    for cname, launcher in compiled.launchers.items():
        if not launcher.cache:
            print(f"   {cname}: ran on TF's kernels ({launcher.stats.fallback_reason})")
            continue
        entry = next(iter(launcher.cache.values()))
        before = entry.hlo_text.splitlines()
        after = entry.optimized_hlo_text.splitlines()
        print(f"\n== {cname}: HLO before optimization ({len(before)} lines; ENTRY, first {hlo_lines})")
        print("\n".join(_entry(before)[:hlo_lines]))
        print(f"\n== {cname}: after our XLA:CPU pipeline ({len(after)} lines, "
              f"{sum(1 for line in after if ' fusion(' in line)} fusions; ENTRY, first {hlo_lines})")
        print("\n".join(_entry(after)[:hlo_lines]))
        print(f"   compiled in {entry.compile_seconds:.2f} s ({entry.backend})")
        break

    graph_fn = tf.function(fn)
    xla_fn = tf.function(fn, jit_compile=True)
    xla_fn(*tensors)
    t_graph = _median_ms(lambda: graph_fn(*tensors))
    t_xla = _median_ms(lambda: xla_fn(*tensors))
    t_ours = _median_ms(lambda: ours(*tensors))
    print(f"\n== Time per call (median of 20): TF graph {t_graph:.2f} ms | real XLA {t_xla:.2f} ms | "
          f"ours {t_ours:.2f} ms (first call incl. compile {first_ours:.2f} s)")
    return 0
