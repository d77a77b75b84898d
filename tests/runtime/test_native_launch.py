"""The native launch op (issue 15): TfxlaLaunch nodes run compiled clusters inside TF's executor with no
Python per launch; results equal TF's; Python runs only on a new signature (and its errors are the op's
TF errors); concurrent launches compile each signature once; without a compiler it falls back loudly."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.runtime import launcher as launcher_mod
from tfxla_cluster.runtime import native

AUTO = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"
RNG = np.random.default_rng(0)

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native launch: {native.unavailable_reason()}")


def _ops(compiled) -> set[str]:
    return {n.op for n in compiled.graph_def.node}


def rnn(x, w, steps):
    """Clusters in a while-loop body and in both branches of a cond."""
    def body(i, h):
        h = tf.tanh(tf.matmul(h, w) + 0.5)
        h = tf.cond(i % 2 == 0, lambda: h * 2.0 - 0.5, lambda: tf.sigmoid(h))
        return i + 1, h
    return tf.while_loop(lambda i, h: i < steps, body, (tf.constant(0), x))[1]


def test_while_loop_and_cond_clusters_run_natively_and_equal_tf():
    f = txc.function(rnn, flags=AUTO)
    x = RNG.random((4, 16), np.float32)
    w = (RNG.random((16, 16), np.float32) - 0.5) * 0.3
    for steps in (0, 1, 7, 50):
        steps = tf.constant(steps)
        np.testing.assert_allclose(f(x, w, steps).numpy(), tf.function(rnn)(x, w, steps).numpy(),
                                   rtol=1e-5, atol=1e-6)
    compiled = f.get_compiled(x, w, steps)
    assert "TfxlaLaunch" in _ops(compiled) and "EagerPyFunc" not in _ops(compiled)
    total = sum(native.native_executions(la) for la in compiled.launchers.values())
    python = sum(la.stats.executions for la in compiled.launchers.values()) - total
    # Every launch after a signature's first ran in the kernel: Python ran one launch per compile.
    assert total > 100
    assert python == sum(la.stats.compiles for la in compiled.launchers.values())


def test_native_launch_inside_another_trace_equals_tf():
    """A jit_compile=True function called inside a tf.function (Keras train steps do this) is a graph op."""
    step = txc.function(lambda a, b: tf.nn.softmax(tf.matmul(a, b) * 0.5, axis=-1), jit_compile=True)

    @tf.function
    def outer(a, b):
        return step(a, b) + 1.0

    a, b = RNG.random((5, 7), np.float32), RNG.random((7, 3), np.float32)
    for _ in range(3):
        np.testing.assert_allclose(outer(a, b).numpy(), tf.nn.softmax(a @ b * 0.5, axis=-1).numpy() + 1.0,
                                   rtol=1e-5)
    (la,) = step.get_compiled(a, b).launchers.values()
    assert la.stats.compiles == 1 and native.native_executions(la) == 2


def test_compile_time_constant_inputs_key_the_native_entries():
    f = txc.function(lambda x, s: tf.reshape(x, s) * 2.0, jit_compile=True)

    @tf.function
    def outer(x, s):
        return f(x, s)

    x = tf.range(6, dtype=tf.float32)
    for shape in ([2, 3], [3, 2], [2, 3], [6, 1], [3, 2]):
        got = outer(x, tf.constant(shape))
        assert got.shape == tuple(shape)
        np.testing.assert_array_equal(got.numpy(), np.arange(6, dtype=np.float32).reshape(shape) * 2)
    (la,) = f.get_compiled(x, tf.constant([2, 3])).launchers.values()
    assert la.stats.compiles == 3 and la.stats.executions == 5 and native.native_executions(la) == 2


def test_errors_on_the_python_path_are_the_ops_tf_errors(monkeypatch):
    f = txc.function(lambda x: tf.exp(x) + 1.0, jit_compile=True)

    @tf.function
    def outer(x):
        return f(x) * 2.0

    def fail(self, arrays, key):
        raise InvalidArgumentError("shape check failed in the cluster")
    monkeypatch.setattr(launcher_mod.Launcher, "compile_signature", fail)
    with pytest.raises(tf.errors.InvalidArgumentError, match="shape check failed in the cluster"):
        outer(tf.ones([3]))


def test_observers_see_every_launch_while_installed():
    f = txc.function(rnn, flags=AUTO)
    x, w = RNG.random((2, 4), np.float32), RNG.random((4, 4), np.float32) * 0.1
    three, five = tf.constant(3), tf.constant(5)
    f(x, w, three)   # compiled; from now on native
    first = f.get_compiled(x, w, three)

    def python_launches(compiled) -> int:
        # Launches that went through Python: compiles, and a loop iteration that ran while another
        # iteration of the same cluster was compiling its signature (parallel_iterations).
        return sum(la.stats.executions - native.native_executions(la) for la in compiled.launchers.values())
    before_python = python_launches(first)
    seen = []

    def observer(launcher, compiled, arrays, outputs, seconds):
        seen.append(launcher.sig.name)
    launcher_mod.add_observer(observer)
    try:
        np.testing.assert_allclose(f(x, w, five).numpy(), tf.function(rnn)(x, w, five).numpy(), rtol=1e-5, atol=1e-6)
    finally:
        launcher_mod.remove_observer(observer)
    compiled = f.get_compiled(x, w, five)
    assert compiled is first
    assert len(seen) == python_launches(compiled) - before_python
    assert len(seen) > 10
    before = sum(native.native_executions(la) for la in compiled.launchers.values())
    f(x, w, five)
    assert sum(native.native_executions(la) for la in compiled.launchers.values()) > before


def test_eight_threads_mixed_signatures_compile_each_once():
    def g(x):
        return tf.nn.relu(x * 3.0 - 1.0) + tf.reduce_sum(x)

    f = txc.function(g, flags=AUTO, input_signature=[tf.TensorSpec([None], tf.float32)])
    outer = tf.function(lambda x: f(x) + 0.0, input_signature=[tf.TensorSpec([None], tf.float32)])
    sizes = [3, 5, 8, 13]
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def work(k: int) -> None:
        try:
            barrier.wait()
            for r in range(40):
                x = np.linspace(-1, 1, sizes[(k + r) % len(sizes)], dtype=np.float32)
                np.testing.assert_allclose(outer(x).numpy(), g(x).numpy(), rtol=1e-5, atol=1e-6)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    compiled = f.get_compiled(tf.TensorSpec([None], tf.float32))
    assert "TfxlaLaunch" in _ops(compiled)
    for la in compiled.launchers.values():
        assert la.stats.compiles == len(sizes), la.stats.causes
        assert la.stats.executions == 8 * 40
        assert native.native_executions(la) > 0


def test_without_a_compiler_it_falls_back_loudly_to_the_python_launch(tmp_path):
    script = textwrap.dedent(f"""
        import numpy as np, tensorflow as tf, tfxla_cluster as txc
        f = txc.function(lambda x: tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 2.0 + 1.0),
                                                 (0, x))[1], flags="{AUTO}")
        x = np.ones(4, np.float32)
        assert f(x).numpy().tolist() == [15.0] * 4
        print(sorted({{n.op for n in f.get_compiled(x).graph_def.node}}))
    """)
    env = dict(os.environ, TFXLA_NATIVE_CACHE=str(tmp_path), CC=str(tmp_path / "no-such-gcc"),
               PYTHONPATH=os.pathsep.join(sys.path), TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "EagerPyFunc" in done.stdout and "TfxlaLaunch" not in done.stdout
    warnings = [line for line in done.stderr.splitlines() if "Native launch unavailable" in line]
    assert len(warnings) == 1 and "no-such-gcc" in warnings[0]


def test_resource_variables_read_and_assigned_in_loop_clusters_equal_tf():
    """Variables move out of the native node: read before it, assigned after, in loop order."""
    def make():
        v = tf.Variable(np.full((4, 4), 0.5, np.float32))
        acc = tf.Variable(np.zeros((4,), np.float32))

        def step(x, n):
            def body(i, h):
                y = tf.tanh(tf.matmul(h, v) * 0.5)
                v.assign_add(y * 0.01)
                acc.assign(acc + tf.reduce_sum(y, axis=0))
                return i + 1, y
            return tf.while_loop(lambda i, h: i < n, body, (tf.constant(0), x))[1] + tf.reduce_sum(acc)
        return v, acc, step

    v1, acc1, ours = make()
    v2, acc2, theirs = make()
    f, g = txc.function(ours, flags=AUTO), tf.function(theirs)
    x = RNG.random((4, 4), np.float32)
    for n in (3, 10, 10):
        n = tf.constant(n)
        np.testing.assert_allclose(f(x, n).numpy(), g(x, n).numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(v1.numpy(), v2.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(acc1.numpy(), acc2.numpy(), rtol=1e-5, atol=1e-5)
    compiled = f.get_compiled(x, n)
    ops = _ops(compiled)
    assert "TfxlaLaunch" in ops and "EagerPyFunc" not in ops and "AssignVariableOp" in ops
    assert sum(native.native_executions(la) for la in compiled.launchers.values()) > 20


def test_jit_compile_function_with_a_variable_inside_a_trace_updates_it_like_tf():
    def make():
        w = tf.Variable(np.ones((3, 2), np.float32))
        return w, lambda x: w.assign_sub(0.1 * tf.matmul(tf.transpose(x), x)[:, :2]) * 2.0

    w1, body1 = make()
    w2, body2 = make()
    step = txc.function(body1, jit_compile=True)
    outer = tf.function(lambda x: step(x) + 1.0)
    ref = tf.function(lambda x: tf.function(body2, jit_compile=True)(x) + 1.0)
    x = RNG.random((5, 3), np.float32)
    for _ in range(3):
        np.testing.assert_allclose(outer(x).numpy(), ref(x).numpy(), rtol=1e-5)
    np.testing.assert_allclose(w1.numpy(), w2.numpy(), rtol=1e-5)
    (la,) = step.get_compiled(x).launchers.values()
    assert la.stats.compiles == 1 and native.native_executions(la) == 2


def test_thread_arena_grows_and_is_reused_across_signatures():
    """Launches on one thread share its temp arena: a bigger signature's launch grows it, a smaller one's
    reuses it (stale temps from the other never show through)."""
    fn = lambda a, b: tf.nn.softmax(tf.tanh(tf.matmul(a, b)) * 2.0, axis=-1) + 1.0  # noqa: E731
    f = txc.function(fn, jit_compile=True)
    args = {n: (RNG.random((n, 24), np.float32), RNG.random((24, n), np.float32)) for n in (3, 40)}
    for _ in range(3):
        for n in (3, 40, 3):
            a, b = args[n]
            np.testing.assert_allclose(f(a, b).numpy(), fn(a, b).numpy(), rtol=1e-5, atol=1e-6)
    compiled = f.get_compiled(*args[40])
    assert sum(native.native_executions(la) for la in compiled.launchers.values()) > 0
