"""Sums of a fused product (``reduce_sum(a * b)``, ``reduce_sum(a * 3)``, a convolution that algsimp made a
multiply and a reduce) against TF's XLA where the order decides inf or NaN: row 0 of a batch overflows to
+inf and row 1 to -inf. TF's XLA sums in order with each product fused into the running sum (one FMA) or
in LLVM's vector lanes (``elemental.row_lane_order``: a fused product of loads is vectorised like a buffer,
to one element too and over three reduced dimensions, but for two rows of a product of two loads, which stay
in order). Measured on Zen 3 (AVX2); elsewhere the expectations still come from TF on this machine."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc

MAX = np.float32(3.4028234663852886e+38)

SHAPES = [(1, 2, 3), (1, 4, 5), (2, 2, 3), (2, 4, 2), (3, 8, 3), (2, 2, 5, 2), (1, 4, 3, 8)]


def _operands(shape):
    a = np.zeros(shape, np.float32)
    b = np.ones(shape, np.float32)
    a[:, 0, :2] = MAX
    a[:, 1, :2] = -MAX
    b[:, 0, 0] = b[:, 1, 0] = 2.0
    c = np.ones(shape[2:3], np.float32)
    c[0] = 2.0
    return a, b, c


def _fns(axes):
    return {
        "a*b": lambda x, y, z: tf.reduce_sum(x * y, axis=axes),
        "a*3": lambda x, y, z: tf.reduce_sum(x * 3.0, axis=axes),
        "a*row": lambda x, y, z: tf.reduce_sum(x * tf.reshape(z, [-1] + [1] * (len(x.shape) - 3)), axis=axes),
    }


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("axes", [[1, 2], None], ids=["rows_cols", "all"])
def test_fused_product_sum_equals_tf_xla(shape, axes):
    a, b, c = _operands(shape)
    for name, fn in _fns(axes).items():
        want = tf.function(fn, jit_compile=True)(a, b, c).numpy()
        got = txc.function(fn, jit_compile=True)(a, b, c).numpy()
        assert np.array_equal(want, got, equal_nan=True), (name, want.reshape(-1)[:4], got.reshape(-1)[:4])


@pytest.mark.parametrize("kh,kw,batch", [(2, 3, 1), (2, 3, 2), (3, 3, 2), (1, 2, 2)])
def test_whole_window_conv_sum_equals_tf_xla(kh, kw, batch):
    """A one-channel Conv2D whose filter covers the image: multiply + reduce in both, each product fused
    into the sum (``max·3`` after ``-inf`` stays -inf; rounded products would meet as NaN)."""
    rng = np.random.default_rng(kh * 10 + kw + batch)
    fn = lambda x, w: tf.nn.conv2d(x, w, 1, "VALID")  # noqa: E731
    theirs, ours = tf.function(fn, jit_compile=True), txc.function(fn, jit_compile=True)
    for _ in range(6):
        x = rng.choice(np.array([MAX, -MAX, 1.5, -3.0, 0.0, MAX / 4], np.float32), size=(batch, kh, kw, 1))
        w = rng.choice(np.array([2.0, -2.0, 0.5, 3.0, -1.25, 0.0], np.float32), size=(kh, kw, 1, 1))
        assert np.array_equal(theirs(x, w).numpy(), ours(x, w).numpy(), equal_nan=True)


def test_one_element_lanes_fuse_each_product():
    """A sum to one element in row lanes of x·broadcast(row): TF's vector FMAs keep max·1.25 exact until
    -max/4·1.25 brings it back (finite); rounded products would overflow to inf."""
    x = np.array([[[0, MAX / 4, -MAX], [0, 1.5, MAX / 4]]], np.float32)
    z = np.array([1.0, -1.25, -1.25], np.float32)
    fn = lambda a, b: tf.reduce_sum(a * b)  # noqa: E731
    want = tf.function(fn, jit_compile=True)(x, z).numpy()
    assert np.isfinite(want)
    assert txc.function(fn, jit_compile=True)(x, z).numpy() == want
