"""Our PRE_PLACEMENT lowering and pre-clustering graph against TF's live run
(tfxla_cluster/graph/lower_functional.py).

TF is recorded live, all functions in one process (tools/tf_record.py's ``record_batch``,
``TF_DUMP_GRAPH_PREFIX`` with ``TF_DUMP_GRAPH_NAME_FILTER='*'``): the function runtime's
``after_opt_group_pre_placement`` dump is TF's lowered graph before grappler, and
``before_mark_for_compilation``/``mark_for_compilation`` what TF's clustering saw and made. Small
functions: while loops (one reading a variable, an LSTM-like cell), a cond inside a loop body, a loop
inside a cond branch, nested conds, a Case and an If reading a variable behind control dependencies,
a nested tf.function holding a cond, loops fed by an inlined call's output, and a call to a
jit_compile function (which TF keeps a call). And ``big_add_n``, no control flow: an AddN large enough
for grappler's memory optimizer, which TF leaves out under auto-clustering (see
tests/graph/test_grappler_xla_jit_level.py; it shares this file's TF process).
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tf_record  # tools/ is on sys.path (setup.cfg pythonpath)

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


_v = tf.Variable(np.full((3, 3), 0.5, np.float32))


@tf.function(input_signature=[tf.TensorSpec((3, 3), tf.float32)])
def cond_in_while(x):
    def body(i, y):
        return i + 1, tf.cond(tf.reduce_sum(y) > 0.0, lambda: y * 0.5, lambda: y + 1.0)
    return tf.while_loop(lambda i, y: i < 3, body, [tf.constant(0), x])[1]


@tf.function
def _inner_cond(a):
    return tf.cond(tf.reduce_max(a) > 0.0, lambda: tf.exp(a), lambda: a - 2.0)


@tf.function(input_signature=[tf.TensorSpec((3, 3), tf.float32)])
def call_with_cond(x):
    return _inner_cond(x + 1.0) * 2.0


@tf.function(jit_compile=True)
def _jit_inner(a):
    return tf.sin(a) * 3.0


@tf.function(input_signature=[tf.TensorSpec((3, 3), tf.float32)])
def jit_call(x):
    return _jit_inner(x) + 1.0


@tf.function(input_signature=[tf.TensorSpec((3, 3), tf.float32), tf.TensorSpec((), tf.int32)])
def case_with_var(x, i):
    y = tf.switch_case(i, [lambda: x @ _v, lambda: x * 2.0])
    return tf.cond(i > 0, lambda: y + _v, lambda: y) - 1.0


@tf.function(input_signature=[tf.TensorSpec((3, 3), tf.float32)])
def nested_conds(x):
    def outer_true():
        return tf.cond(tf.reduce_min(x) > 0.0, lambda: x * 2.0, lambda: x * 3.0)
    return tf.cond(tf.reduce_sum(x) > 0.0, outer_true, lambda: x - 1.0) + 1.0


@tf.function(input_signature=[tf.TensorSpec((3, 3), tf.float32)])
def while_in_cond(x):
    def then():
        return tf.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, y * 0.5), [0, x])[1]
    return tf.cond(tf.reduce_sum(x) > 0.0, then, lambda: x)


@tf.function
def _inner_mul(a):
    return a * 3.0


@tf.function(input_signature=[tf.TensorSpec((3, 3), tf.float32)])
def call_then_loops(x):
    y = _inner_mul(x)   # the loop's and the cond's Switch nodes are named after the inlined call's output
    z = tf.while_loop(lambda i, t: i < 2, lambda i, t: (i + 1, t * 0.5), [0, y])[1]
    return tf.cond(tf.reduce_sum(y) > 0.0, lambda: z + y, lambda: z)


def _x33() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((3, 3)).astype(np.float32)


@tf.function(input_signature=[tf.TensorSpec((4096, 4096), tf.float32)])
def big_add_n(x):
    return tf.add_n([tf.sin(x), tf.cos(x), tf.exp(x)])


REGISTRY = {
    "small_while": lambda: (small_while, [np.ones((2, 4), np.float32)]),
    "lstm_like": lambda: (lstm_like, [np.random.default_rng(0).standard_normal((2, 5, 4)).astype(np.float32)]),
    "cond_in_while": lambda: (cond_in_while, [_x33()]),
    "call_with_cond": lambda: (call_with_cond, [_x33()]),
    "jit_call": lambda: (jit_call, [_x33()]),
    "case_with_var": lambda: (case_with_var, [_x33(), np.array(1, np.int32)]),
    "nested_conds": lambda: (nested_conds, [_x33()]),
    "while_in_cond": lambda: (while_in_cond, [-_x33()]),
    "call_then_loops": lambda: (call_then_loops, [_x33()]),
    "big_add_n": lambda: (big_add_n, [np.ones((4096, 4096), np.float32)]),
}
NAMES = list(REGISTRY)


@pytest.fixture(scope="module")
def tf_runs() -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="lower_functional_") as tmp:
        outs = [Path(tmp) / name for name in NAMES]
        metas = tf_record.record_batch([f"{__file__}:{n}" for n in NAMES], outs, FLAGS, annotated=False,
                                       named=("after_opt_group_pre_placement",))
        return {name: _read(meta, out) for name, meta, out in zip(NAMES, metas, outs)}


def _read(meta: dict[str, Any], out: Path) -> dict[str, Any]:
    runs = [r for r in meta["runs"] if r.get("is_user_function")]
    assert len(runs) == 1 and not meta.get("error"), meta.get("error") or meta.get("stderr_tail", "")[-2000:]
    return {"lowered": tf_record.load_graph_def(out / meta["named_dumps"]["after_opt_group_pre_placement"]),
            "before": tf_record.load_graph_def(out / runs[0]["dumps"]["before_mark_for_compilation"]),
            "clusters": tf_record.clusters_of(
                tf_record.load_graph_def(out / runs[0]["dumps"]["mark_for_compilation"]))}


def _nodes(graph_def) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(n.name, n.op, tuple(n.input)) for n in graph_def.node]


@pytest.mark.parametrize("name", NAMES)
def test_lowering_is_tfs_pre_placement_graph(tf_runs, name: str) -> None:
    from tfxla_cluster.graph.loader import graph_def_from_concrete
    from tfxla_cluster.graph.lower_functional import lower_functional_ops

    fn, _ = REGISTRY[name]()
    ours = lower_functional_ops(graph_def_from_concrete(fn.get_concrete_function(), inline=False))
    assert _nodes(ours) == _nodes(tf_runs[name]["lowered"])   # names, ops, inputs and node order


@pytest.mark.parametrize("name", NAMES)
def test_pre_clustering_graph_and_partition_are_tfs(tf_runs, name: str) -> None:
    import tfxla_cluster as txc

    fn, inputs = REGISTRY[name]()
    compiled = txc.function(fn, flags=FLAGS).get_compiled(*[tf.constant(a) for a in inputs])
    tf_side = tf_runs[name]
    assert _nodes(compiled.graph.graph_def) == _nodes(tf_side["before"])
    # Cluster numbers are process-global (here: earlier tests' clusters; in TF: eager ops' runs and the
    # functions recorded before in the same process), so both sides are numbered from their first cluster.
    assert _renumbered(compiled.mark_result.clusters) == _renumbered(tf_side["clusters"])
    assert compiled.mark_result.clusters or not tf_side["clusters"]


def _renumbered(clusters: dict[str, list[str]]) -> dict[str, list[str]]:
    first = min((int(c.rpartition("_")[2]) for c in clusters), default=0)
    return {f"cluster_{int(c.rpartition('_')[2]) - first}": sorted(m) for c, m in clusters.items()}
