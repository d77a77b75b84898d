"""Our While lowering and pre-clustering graph against TF's live run (tfxla_cluster/graph/lower_while.py).

TF is recorded live (tools/tf_record.py's child in a fresh process, ``TF_DUMP_GRAPH_PREFIX`` with
``TF_DUMP_GRAPH_NAME_FILTER='*'``): the function runtime's ``after_opt_group_pre_placement`` dump is TF's
lowered graph before grappler, and ``before_mark_for_compilation``/``mark_for_compilation`` what TF's
clustering saw and made. Two tiny functions: a while loop reading a variable, and an LSTM-like cell
(gates from variable reads, a state pair carried through the loop). Both recordings run concurrently.
"""
from __future__ import annotations

import concurrent.futures
import glob
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import tf_record  # noqa: E402

FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"

_w = tf.Variable(np.full((4, 4), 0.1, np.float32))
_k = tf.Variable(np.linspace(-0.5, 0.5, 4 * 12, dtype=np.float32).reshape(4, 12))
_u = tf.Variable(np.linspace(0.3, -0.3, 3 * 12, dtype=np.float32).reshape(3, 12))
_b = tf.Variable(np.zeros(12, np.float32))


@tf.function(input_signature=[tf.TensorSpec((2, 4), tf.float32)])
def small_while(x):
    def body(i, y):
        return i + 1, tf.tanh(y @ _w) + 0.1
    _, y = tf.while_loop(lambda i, y: i < 3, body, [tf.constant(0), x])
    return y


@tf.function(input_signature=[tf.TensorSpec((2, 5, 4), tf.float32)])
def lstm_like(x):
    steps = tf.transpose(x, [1, 0, 2])

    def body(t, h, c):
        z = steps[t] @ _k + h @ _u + _b
        i, f, o = tf.sigmoid(z[:, :3]), tf.sigmoid(z[:, 3:6]), tf.sigmoid(z[:, 6:9])
        c = f * c + i * tf.tanh(z[:, 9:])
        return t + 1, o * tf.tanh(c), c
    zeros = tf.zeros((2, 3))
    _, h, _ = tf.while_loop(lambda t, h, c: t < 5, body, [tf.constant(0), zeros, zeros], maximum_iterations=5)
    return h


REGISTRY = {
    "small_while": lambda: (small_while, [np.ones((2, 4), np.float32)]),
    "lstm_like": lambda: (lstm_like, [np.random.default_rng(0).standard_normal((2, 5, 4)).astype(np.float32)]),
}
NAMES = list(REGISTRY)


def _record(name: str, tmp: Path) -> dict[str, Any]:
    dump = tmp / name
    dump.mkdir()
    result_path = tmp / f"{name}.json"
    proc = subprocess.run([sys.executable, tf_record.__file__, "_child", f"{__file__}:{name}", str(result_path)],
                          env=tf_record.tf_env(FLAGS, str(dump)), capture_output=True, text=True, timeout=600,
                          errors="replace")
    fname = json.loads(result_path.read_text())["function_name"]
    runs = [r for r in tf_record.analyse(tf_record.parse_stderr(proc.stderr), dump)["runs"]
            if r["function"] == fname]
    assert len(runs) == 1, proc.stderr[-2000:]
    lowered, = glob.glob(f"{dump}/{fname}.*.main.after_opt_group_pre_placement.pbtxt")
    return {"lowered": tf_record.load_graph_def(lowered),
            "before": tf_record.load_graph_def(dump / runs[0]["dumps"]["before_mark_for_compilation"]),
            "clusters": tf_record.clusters_of(
                tf_record.load_graph_def(dump / runs[0]["dumps"]["mark_for_compilation"])),
            "clusters_before": runs[0]["clusters_before"]}


@pytest.fixture(scope="module")
def tf_runs() -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="lower_while_") as tmp, \
            concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(NAMES, pool.map(lambda n: _record(n, Path(tmp)), NAMES)))


def _nodes(graph_def) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(n.name, n.op, tuple(n.input)) for n in graph_def.node]


@pytest.mark.parametrize("name", NAMES)
def test_lowering_is_tfs_pre_placement_graph(tf_runs, name: str) -> None:
    from tfxla_cluster.graph.loader import graph_def_from_concrete
    from tfxla_cluster.graph.lower_while import lower_while_loops

    fn, _ = REGISTRY[name]()
    ours = lower_while_loops(graph_def_from_concrete(fn.get_concrete_function(), inline=False))
    assert ours is not None
    assert _nodes(ours) == _nodes(tf_runs[name]["lowered"])   # names, ops, inputs and node order


@pytest.mark.parametrize("name", NAMES)
def test_pre_clustering_graph_and_partition_are_tfs(tf_runs, name: str) -> None:
    import tfxla_cluster as txc

    fn, inputs = REGISTRY[name]()
    compiled = txc.function(fn, flags=FLAGS).get_compiled(*[tf.constant(a) for a in inputs])
    tf_side = tf_runs[name]
    assert _nodes(compiled.graph.graph_def) == _nodes(tf_side["before"])
    # Cluster numbers are process-global (here: earlier tests' clusters; in TF: eager ops' runs), so both
    # sides are numbered from their first cluster of this function.
    assert _renumbered(compiled.mark_result.clusters) == _renumbered(tf_side["clusters"])
    assert compiled.mark_result.clusters   # the loop's arithmetic forms a cluster


def _renumbered(clusters: dict[str, list[str]]) -> dict[str, list[str]]:
    first = min((int(c.rpartition("_")[2]) for c in clusters), default=0)
    return {f"cluster_{int(c.rpartition('_')[2]) - first}": sorted(m) for c, m in clusters.items()}
