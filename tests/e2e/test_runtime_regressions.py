"""Regression tests for the runtime bugs the issue-7 sweep found (tfxla_cluster/runtime/).

Each test names the bug it guards; the corpus (test_corpus_e2e.py) covers them too, these pin them
down on the smallest function that showed them.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc

AUTO = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"
ROOT = Path(__file__).resolve().parents[2]


def _no_fallback(fn, *args) -> None:
    compiled = fn.get_compiled(*args)
    assert compiled.launchers and not [l.stats.fallback_reason for l in compiled.launchers.values()
                                       if l.stats.fallback_reason]


def test_scalar_cluster_parameter_keeps_rank_0() -> None:
    """np.ascontiguousarray turned a 0-d parameter (a loop counter) into shape [1]."""
    def f(x):
        _, y = tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 2.0), [tf.constant(0), x])
        return y
    x = tf.constant([1.0, 2.0])
    ours = txc.function(f, flags=AUTO)
    np.testing.assert_allclose(ours(x), [8.0, 16.0])
    _no_fallback(ours, x)


def test_node_with_the_same_input_twice_keeps_both() -> None:
    """Encapsulation de-duplicated every input list: Switch(pred, pred) of a lowered cond lost one."""
    def f(x, flag):
        return tf.cond(flag, lambda: x * 2.0, lambda: x - 1.0)
    x = tf.constant([1.0, 2.0])
    ours = txc.function(f, flags=AUTO)
    np.testing.assert_allclose(ours(x, tf.constant(True)), [2.0, 4.0])
    np.testing.assert_allclose(ours(x, tf.constant(False)), [0.0, 1.0])


def test_colocation_with_a_clustered_node_is_rewritten() -> None:
    """A node colocated (``_class: loc:@n``) with a clustered node named a node that no longer exists."""
    def f(x):
        s = tf.reduce_sum(x)
        return tf.case([(s > 10.0, lambda: x * 10.0), (s > 0.0, lambda: x + 100.0)], default=lambda: -x)
    x = tf.constant([1.0, 2.0])
    ours = txc.function(f, flags=AUTO)
    np.testing.assert_allclose(ours(x), [101.0, 102.0])


def test_parameters_get_their_own_dtypes() -> None:
    """Parameter dtypes were looked up by launch-node position: an f32 input was cast to int64 when a
    cluster had an int64 variable and a float tensor input in different orders."""
    step = tf.Variable(np.int64(0))
    b = tf.Variable(np.ones((2,), np.float32))

    def f(x):
        y = tf.nn.relu(x) + b
        step.assign_add(1)
        b.assign(b * 0.5)
        return y, step.read_value()
    ours = txc.function(f, flags=AUTO)
    y, s = ours(tf.constant([-1.0, 3.0]))
    np.testing.assert_allclose(y, [1.0, 4.0])
    assert int(s) == 1 and b.numpy().tolist() == [0.5, 0.5]


def test_jit_compile_keeps_functional_control_flow() -> None:
    """jit_compile=True ran grappler, which lowers If/While to Switch/Merge (no XLA kernels)."""
    def f(x):
        _, y = tf.while_loop(lambda i, y: i < 4, lambda i, y: (i + 1, tf.cond(tf.reduce_sum(y) > 5.0,
                             lambda: y * 0.5, lambda: y + 1.0)), [tf.constant(0), x])
        return y
    x = tf.constant([1.0, 2.0])
    ours = txc.function(f, jit_compile=True)
    np.testing.assert_allclose(ours(x), tf.function(f)(x))
    assert {n.op for n in ours.get_compiled(x).graph.graph_def.node} & {"While", "StatelessWhile"}


def test_resource_args_carry_handle_shapes_into_grappler() -> None:
    """TF's runtime gives resource _Args _handle_dtypes/_handle_shapes before grappler, whose remapper
    then fuses MatMul + bias (into _FusedMatMul when TF's oneDNN is on); without them ours clustered
    MatMul and add. The expectation is TF's own pre-clustering graph of the same function, recorded live
    in this machine's oneDNN mode: node for node the same, and the same partition."""
    from tests.e2e import e2e_tf_clusters as tfc

    cmp = tfc.compare("var_reads", AUTO)
    assert not cmp.error, cmp.error
    assert (cmp.only_tf, cmp.only_ours, cmp.op_differences) == ([], [], {}), cmp.summary()
    assert cmp.same_partition, cmp.summary()
    w = tf.Variable(np.ones((3, 2), np.float32))
    b = tf.Variable(np.zeros((2,), np.float32))

    def f(x):
        return tf.nn.relu(tf.matmul(x, w) + b)
    ours = txc.function(f, flags=AUTO, input_signature=[tf.TensorSpec([4, 3], tf.float32)])
    np.testing.assert_allclose(ours(tf.ones((4, 3))), np.full((4, 2), 3.0))


def test_function_without_outputs_still_updates_variables() -> None:
    """The rewritten graph was pruned to the return values: a function returning nothing lost its
    variable updates (its control outputs), and packing its None result raised."""
    v = tf.Variable(1.0)
    count = tf.Variable(0)

    def step():
        v.assign_add(2.0)
        count.assign_add(1)
    for jit in (None, True):
        ours = txc.function(step, jit_compile=jit, flags=AUTO)
        assert ours() is None
    assert v.numpy() == 5.0 and count.numpy() == 2


def test_fallbacks_running_at_once_do_not_deadlock() -> None:
    """Two launch nodes falling back at once each ran a nested TF function, whose kernels need the
    inter-op pool the blocked launch nodes occupy: a deadlock on 2 cores. Runs in a subprocess with
    a small inter-op pool so a regression times out instead of hanging the test session."""
    script = textwrap.dedent("""
        import tensorflow as tf
        tf.config.threading.set_inter_op_parallelism_threads(2)
        import numpy as np
        import tfxla_cluster as txc
        from tfxla_cluster.errors import UnimplementedError
        from tfxla_cluster.runtime.launcher import Launcher

        def fail(self, arrays, key):
            raise UnimplementedError("forced fallback")
        Launcher.compile_signature = fail

        def f(x, y):
            a, b = tf.exp(x) * 2.0, tf.exp(y) * 3.0
            u, _ = tf.unique(tf.reshape(a, [-1]))
            v, _ = tf.unique(tf.reshape(b, [-1]))
            return tf.reduce_sum(u) + tf.reduce_sum(v)
        x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3) / 6)
        ours = txc.function(f, flags="%s")
        for _ in range(5):
            np.testing.assert_allclose(ours(x, x + 1.0), f(x, x + 1.0), rtol=1e-5)
        fallbacks = [l.stats.fallback_reason for l in ours.get_compiled(x, x + 1.0).launchers.values()]
        assert len(fallbacks) >= 2 and all(fallbacks), fallbacks
        print("OK")
    """ % AUTO)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
    env.pop("TF_XLA_FLAGS", None)
    try:
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                              timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail("concurrent TF fallbacks deadlocked")
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]
