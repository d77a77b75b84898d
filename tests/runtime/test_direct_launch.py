"""The direct call of a ``jit_compile=True`` function whose graph is one launch node (function._direct_plan):
the native op as one eager op without variables, TF's function (reads, launch, assigns in C++) with them;
values and variable updates against TF's XLA."""
import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.runtime import native

pytestmark = pytest.mark.skipif(not native.available() or native.disabled(),
                                reason="the native launch op is unavailable")


def _only_launcher(f, *args):
    compiled = f.get_compiled(*args)
    (launcher,) = compiled.launchers.values()
    return compiled, launcher


def test_without_variables_the_native_op_runs_eagerly_and_matches_tfs_xla():
    def body(x, y):
        return {"out": tf.tanh(x) * 2.0 + tf.reduce_max(y), "y": y}

    ours = txc.function(body, jit_compile=True)
    theirs = tf.function(body, jit_compile=True)
    x = tf.constant(np.linspace(-2, 2, 48, dtype=np.float32).reshape(6, 8))
    y = tf.constant(np.arange(5, dtype=np.float32))
    compiled, launcher = _only_launcher(ours, x, y)
    assert compiled._direct is not None and compiled._direct.run is not None
    for _ in range(2):   # the first call compiles (in the op's Python callback), the second runs natively
        got, want = ours(x, y), theirs(x, y)
        np.testing.assert_allclose(got["out"].numpy(), want["out"].numpy(), rtol=1e-6, atol=1e-6)
        assert got["y"].numpy().tolist() == y.numpy().tolist()
    assert native.native_executions(launcher) == 1 and launcher.stats.executions == 2


def test_with_variables_tfs_function_reads_launches_and_assigns_like_tfs_xla():
    init = np.arange(12, dtype=np.float32).reshape(3, 4) / 10.0

    def make():
        v = tf.Variable(init)
        w = tf.Variable(np.ones(4, np.float32))   # read, never written
        count = tf.Variable(0, dtype=tf.int64)

        def step(x):
            v.assign(v * 0.5 + tf.matmul(x, v) * w)
            count.assign_add(1)
            return tf.reduce_sum(v, axis=0), v.read_value()
        return step, (v, w, count)

    ours_step, ours_vars = make()
    tf_step, tf_vars = make()
    ours = txc.function(ours_step, jit_compile=True)
    theirs = tf.function(tf_step, jit_compile=True)
    x = tf.constant(np.eye(3, dtype=np.float32) * 0.3)
    compiled, launcher = _only_launcher(ours, x)
    assert compiled._direct is not None and compiled._direct.run is None   # TF's function runs it
    for _ in range(3):
        got, want = ours(x), theirs(x)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)
        for a, b in zip(ours_vars, tf_vars):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    assert int(ours_vars[2].numpy()) == 3
    assert native.native_executions(launcher) == 2
    # The compiler IR still goes through the direct plan's launcher, reading (never writing) the variables.
    assert "HloModule" in ours.experimental_get_compiler_ir(x)(stage="hlo")
    assert int(ours_vars[2].numpy()) == 3
