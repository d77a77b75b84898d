"""Compiled functions called under a gradient tape (runtime/gradients.py), against TF's own
``tf.function`` under the same tape: TF builds the forward/backward pair, we compile and run both."""
import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster
from tfxla_cluster.errors import InvalidArgumentError

AUTO = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"


def _ours(fn, mode):
    return tfxla_cluster.function(fn, jit_compile=True) if mode == "jit" else tfxla_cluster.function(fn, flags=AUTO)


def _tf(fn, mode):
    return tf.function(fn, jit_compile=(mode == "jit"))


def _grads(f, x, variables):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    return y, tape.gradient(y, [x, *variables])


def _pair(compiled):
    """Our compiled forward and backward of ``compiled``'s one taped pair."""
    (_, forward, backward), = compiled._taped._pairs.values()
    return forward, backward._compiled


@pytest.mark.parametrize("mode", ["jit", "auto"])
def test_gradient_of_a_compiled_function_is_tfs(mode):
    v = tf.Variable(np.linspace(0.5, 1.5, 6, dtype=np.float32))

    def f(x):
        return tf.reduce_sum(tf.tanh(x * v) * x + tf.exp(-x) * v)

    x = tf.constant(np.linspace(-2, 2, 6, dtype=np.float32))
    ours, theirs = _ours(f, mode), _tf(f, mode)
    for _ in range(2):   # the second call reuses the compiled pair
        y, g = _grads(ours, x, [v])
        y_tf, g_tf = _grads(theirs, x, [v])
        np.testing.assert_allclose(y.numpy(), y_tf.numpy(), rtol=1e-6)
        for a, b in zip(g, g_tf):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-6, atol=1e-7)
    forward, backward = _pair(ours.get_compiled(x))
    # Both halves ran through our pipeline: clusters and launchers of their own.
    assert forward.launchers and backward is not None and backward.launchers
    assert len(forward.concrete.outputs) > 1   # the forward returns intermediates for the backward


def test_keras_model_gradients_under_an_outer_tape():
    tf.keras.utils.set_random_seed(3)
    model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(3)])
    x = tf.constant(np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32))

    def loss(x):
        return tf.reduce_mean(tf.square(model(x)))

    ours, theirs = tfxla_cluster.function(loss, jit_compile=True), tf.function(loss, jit_compile=True)
    results = []
    for f in (ours, theirs):
        with tf.GradientTape() as tape:
            value = f(x)
        results.append((value, tape.gradient(value, model.trainable_variables)))
    (v1, g1), (v2, g2) = results
    np.testing.assert_allclose(v1.numpy(), v2.numpy(), rtol=1e-6)
    assert all(a is not None for a in g1)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("mode", ["jit", "auto"])
def test_second_derivative_through_nested_tapes(mode):
    def f(x):
        return tf.reduce_sum(tf.sin(x) * x * x)

    x = tf.constant([0.3, -1.2, 2.5], tf.float32)
    out = []
    for g in (_ours(f, mode), _tf(f, mode)):
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = g(x)
            dy = inner.gradient(y, x)
        out.append((dy, outer.gradient(dy, x)))
    (d1, dd1), (d2, dd2) = out
    np.testing.assert_allclose(d1.numpy(), d2.numpy(), rtol=1e-6)
    np.testing.assert_allclose(dd1.numpy(), dd2.numpy(), rtol=1e-5)


def test_persistent_tape_and_unwatched_calls():
    def f(x):
        return x * x + 1.0

    g = tfxla_cluster.function(f, jit_compile=True)
    x, other = tf.constant([1.0, 2.0]), tf.constant(3.0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = g(x)
        z = g(tf.constant([5.0, 6.0]))   # a tape is active but watches nothing this call reads
        tape.watch(other)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [2.0, 4.0])
    assert tape.gradient(z, other) is None
    np.testing.assert_array_equal(z.numpy(), [26.0, 37.0])


def test_forward_accumulator_runs_tfs_function():
    def f(x):
        return tf.sin(x) * x

    x = tf.constant([0.5, 1.0])
    tangent = tf.constant([1.0, 0.0])
    out = []
    for g in (tfxla_cluster.function(f, jit_compile=True), tf.function(f)):
        with tf.autodiff.ForwardAccumulator(x, tangent) as acc:
            y = g(x)
        out.append((y.numpy(), acc.jvp(y).numpy()))
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-6)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-6)


def test_inside_another_functions_trace_with_a_tape():
    v = tf.Variable([1.0, 2.0])
    inner = tfxla_cluster.function(lambda x: tf.reduce_sum(tf.exp(x * v)), jit_compile=True)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = inner(x)
        return tape.gradient(y, [x, v])

    x = tf.constant([0.5, -0.5])
    gx, gv = step(x)
    np.testing.assert_allclose(gx.numpy(), (v * tf.exp(x * v)).numpy(), rtol=1e-6)
    np.testing.assert_allclose(gv.numpy(), (x * tf.exp(x * v)).numpy(), rtol=1e-6)


def test_a_loop_tf_cannot_differentiate_under_xla_is_rejected_as_tf_does():
    def f(x):
        _, a = tf.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, tf.sin(a) * x), [tf.constant(0), x])
        return tf.reduce_sum(a)

    x = tf.constant([1.0, 2.0])
    for g, cls in ((tfxla_cluster.function(f, jit_compile=True), InvalidArgumentError),
                   (tf.function(f, jit_compile=True), tf.errors.InvalidArgumentError)):
        with pytest.raises(cls, match="XLA compilation requires a fixed tensor list size"):
            _grads(g, x, [])
    # Under auto-clustering the loop's gradient runs (TF's kernels for the tensor lists): TF's values.
    y, (gx,) = _grads(_ours(f, "auto"), x, [])
    y_tf, (gx_tf,) = _grads(tf.function(f), x, [])
    np.testing.assert_allclose(y.numpy(), y_tf.numpy(), rtol=1e-6)
    np.testing.assert_allclose(gx.numpy(), gx_tf.numpy(), rtol=1e-5)
