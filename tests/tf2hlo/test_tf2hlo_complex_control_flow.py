"""Complex values beyond elementwise arithmetic, against TF's XLA (issue 18): carried in ``tf.while_loop``
state (also a data-dependent trip count), returned by ``tf.cond`` branches, passed to and returned by a
called ``tf.function``, held in TensorLists (``tf.map_fn``, ``tf.TensorArray``), and moved or summed by the
data-movement and linear ops (reshape, slices, concat, gather, pad, select, sum, mean, ...) that run on
each part (complex_ops.PARTWISE_OPS)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.tf2hlo import lower_function

Z = np.array([[1 + 2j, -3 + 0.5j, 0.25j], [2 - 1j, 1j, -1.5 + 0j]])


@tf.function(autograph=False)
def _inner(a):
    return a * a + tf.math.conj(a), tf.math.real(a)


def _control_flow(z):
    i, w = tf.while_loop(lambda i, w: i < 3, lambda i, w: (i + 1, w * z + 1.0), (0, z))
    n, v = tf.while_loop(lambda n, v: tf.abs(tf.reduce_sum(v)) < 100.0, lambda n, v: (n + 1, v * (1 + 1j)),
                         (0, z))
    c = tf.cond(tf.math.real(z[0, 0]) > 0, lambda: z * 2.0, lambda: tf.math.conj(z))
    called, re = _inner(z)
    mapped = tf.map_fn(lambda x: x * x - x[0], z)
    ta = tf.TensorArray(z.dtype, size=2)
    ta = tf.while_loop(lambda k, ta: k < 2, lambda k, ta: (k + 1, ta.write(k, tf.gather(z, k) * tf.cast(k + 1, z.dtype))),
                       (0, ta))[1]
    return w, n, v, c, called, re, mapped, ta.stack()


def _data_movement(z):
    y = tf.reshape(z, [3, 2])
    parts = tf.split(z, 3, axis=1)
    return (y, z[1, ::-1], tf.concat([z, tf.math.conj(z)], 0), tf.stack([z, z * 1j]), tf.unstack(z)[1],
            tf.gather(z, [2, 0], axis=1), tf.gather_nd(z, [[1, 2], [0, 0]]), tf.pad(z, [[1, 0], [0, 2]]),
            tf.reverse(z, [0]), tf.tile(z, [2, 1]), tf.where(tf.math.real(z) > 0, z, tf.math.conj(z)),
            tf.reduce_sum(z, 1), tf.reduce_mean(z), tf.transpose(z), tf.expand_dims(z, 0)[:, 1],
            parts[2], tf.tensor_scatter_nd_update(z, [[0, 1]], [5 - 5j]), tf.zeros_like(z),
            tf.fill([2], z[0, 0]), tf.linalg.band_part(tf.reshape(tf.tile(z, [1, 2]), [3, 4])[:, :3], 0, 0),
            tf.roll(z, 1, 1), tf.broadcast_to(z[0], [2, 3]), tf.add_n([z, z, z]), tf.shape(z), tf.size(z),
            tf.one_hot([0, 2], 3, on_value=tf.cast(2 - 1j, z.dtype), off_value=tf.cast(0.5j, z.dtype)))


def _compare(fn, z, tol) -> None:
    want = [w.numpy() for w in tf.nest.flatten(tf.function(fn, jit_compile=True)(tf.constant(z)))]
    concrete = tf.function(fn).get_concrete_function(tf.TensorSpec(z.shape, tf.as_dtype(z.dtype)))
    got = lower_function(concrete, z).run(z)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, k
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"output {k}")


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_in_loops_branches_calls_and_lists_equals_tf_xla(dtype) -> None:
    _compare(_control_flow, Z.astype(dtype), 1e-5 if dtype == np.complex64 else 1e-12)


def test_complex_data_movement_and_linear_ops_equal_tf_xla() -> None:
    _compare(_data_movement, Z.astype(np.complex64), 1e-6)


def test_complex_loop_compiled_by_us_equals_tf_xla() -> None:
    """The whole path (codegen and launch) with complex loop state and a complex TensorList."""
    def fn(z):
        w = tf.while_loop(lambda i, w: i < 4, lambda i, w: (i + 1, w * z - 0.5j), (0, z))[1]
        return w, tf.map_fn(lambda x: tf.reduce_sum(x) * x, z)

    z = tf.constant(Z.astype(np.complex128))
    want = tf.function(fn, jit_compile=True)(z)
    got = txc.function(fn, jit_compile=True)(z)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-12)


_UNARY = ["Exp", "Log", "Sqrt", "Rsqrt", "Sin", "Cos", "Tan", "Tanh", "Sinh", "Cosh", "Sign", "Reciprocal", "Expm1",
          "Log1p", "Sigmoid", "Acos", "Asin", "Atan", "Acosh", "Asinh", "Atanh", "OnesLike"]
_BINARY = ["Pow", "Equal", "NotEqual", "Xdivy", "Xlogy", "Xlog1py", "DivNoNan", "MulNoNan", "SquaredDifference"]


def _math(z, w):
    m = tf.reshape(tf.concat([z, w], 0), [2, 2, 3])
    u = z * tf.constant(0.9 + 0.05j, z.dtype)   # off the branch points (atan at ±i) where the forms differ
    return ([getattr(tf.raw_ops, op)(x=u) for op in _UNARY] + [getattr(tf.raw_ops, op)(x=z, y=w) for op in _BINARY]
            + [tf.matmul(m, m, adjoint_b=True), tf.einsum("bij,bkj->bik", m, m),
               tf.matmul(z, tf.cast(tf.math.real(w), z.dtype), transpose_b=True)])


def test_complex_math_and_products_equal_tf_xla() -> None:
    """Elementwise math as XLA's complex HLO, SquaredDifference |z - w|², and complex (batch) matmuls and einsum
    (four real products; adjoint conjugates) — through our whole compile path."""
    z = Z.astype(np.complex64)
    w = (Z[::-1] * (0.5 - 0.25j) + 0.125).astype(np.complex64)
    want = tf.function(_math, jit_compile=True)(z, w)
    got = txc.function(_math, jit_compile=True)(tf.constant(z), tf.constant(w))
    for k, (g, x) in enumerate(zip(got, want)):
        assert g.dtype == x.dtype and g.shape == x.shape, k
        np.testing.assert_allclose(g.numpy(), x.numpy(), rtol=2e-5, atol=2e-5, equal_nan=True, err_msg=str(k))
