"""One-patch F32 (and BF16) convolutions against TF's XLA bit for bit (codegen/conv_exact.py ``gemv_block``):
Eigen's gemv sums each output feature's rounded products in k order per column block (the whole depth
below 128, blocks of 16 above, of 4 when the features span ≥ 32000 bytes), on every input, not only on
special values. Random operands of wide exponents make every order and every fused product visible; the
shapes reach the vectorised kernel (8 or more features, whole vectors of 32 and of 8, a scalar rest),
the blocked depths, a padded row and a stride, depthwise groups, and an infinity in the input (0·inf of
the padding). Fuzz seed 172001338 in tests/data/fuzz_regressions."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc

# input NHWC, filter HWIO, stride, padding: each one output position
CASES = [((1, 2, 3, 1), (2, 2, 1, 4), 2, "VALID"), ((1, 3, 3, 3), (3, 3, 3, 8), 1, "VALID"),
         ((1, 4, 4, 8), (4, 4, 8, 45), 1, "VALID"), ((1, 7, 7, 32), (7, 7, 32, 3), 1, "VALID"),
         ((1, 4, 4, 8), (4, 4, 8, 8003), 1, "VALID"), ((1, 3, 3, 2), (3, 3, 2, 16), 2, [[0, 0], [1, 0], [0, 0], [0, 0]])]
DEPTHWISE = [((1, 3, 3, 2), (3, 3, 2, 4)), ((1, 12, 12, 2), (12, 12, 2, 3))]


def _wide(rng, shape):
    return (rng.standard_normal(shape) * 2.0 ** rng.integers(-12, 12, shape)).astype(np.float32)


def _same_as_tf(fn, xs, ws, dtype, inf=False):
    rng = np.random.default_rng(sum(xs) + sum(ws))
    want_fn, got_fn = tf.function(fn, jit_compile=True), txc.function(fn, jit_compile=True)
    for _ in range(2):
        x, w = _wide(rng, xs), _wide(rng, ws)
        if inf:
            x.reshape(-1)[rng.integers(0, x.size)] = -np.inf
        x, w = tf.constant(x, dtype), tf.constant(w, dtype)
        want = tf.cast(want_fn(x, w), tf.float32).numpy()
        got = tf.cast(got_fn(x, w), tf.float32).numpy()
        np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("case,dtype", [(c, d) for c in CASES for d in (tf.float32, tf.bfloat16)
                                        if d == tf.float32 or c[1][-1] < 100], ids=str)
def test_one_patch_conv_sums_as_eigen_gemv(case, dtype):
    xs, ws, stride, pad = case
    _same_as_tf(lambda x, w: tf.nn.conv2d(x, w, stride, pad), xs, ws, dtype)
    _same_as_tf(lambda x, w: tf.nn.relu(tf.nn.conv2d(x, w, stride, pad)), xs, ws, dtype, inf=True)


@pytest.mark.parametrize("case", DEPTHWISE, ids=str)
def test_one_patch_depthwise_as_eigen_gemv(case):
    xs, ws = case
    _same_as_tf(lambda x, w: tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "VALID"), xs, ws, tf.float32)
