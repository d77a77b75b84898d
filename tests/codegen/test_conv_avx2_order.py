"""F32/BF16 Eigen-patches convolutions with 2-8 features on an AVX2 host against TF's XLA
(codegen/conv_exact.py ``pair_sums``, ``pair_apart_rows``): for every pair of taps p ≠ q, ``max·2`` at p
and ``max·(-2)`` at q of every output (the input is ``max`` everywhere, the filter 0 elsewhere); TF's
accumulators show as +inf / -inf (q fused after p / p after q) or NaN (apart). Patch counts whose last
block of 6 rows holds 1 or 2 patches (those sum every product apart), and others (two accumulators by
k mod 2), depthwise ones; fuzz seeds 165001020, 164000909, 165000547, 167001146, 171000637 in
tests/data/fuzz_regressions. Skipped on AVX-512 hosts (one FMA chain there, tested elsewhere)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.codegen.conv_exact import avx2_host

pytestmark = pytest.mark.skipif(not avx2_host(), reason="TF's convolution order measured on an AVX2 host only")

# input NHWC, filter HWIO, stride, padding: 2 patches (stride 2, SAME, the fuzz case), 7 and 8 patches at
# depth 4 and 5, 9 patches (pairs throughout), 49 patches at depth 27 (the 49th apart)
CASES = [((1, 2, 3, 1), (2, 2, 1, 2), 2, "SAME"), ((1, 2, 8, 1), (2, 2, 1, 2), 1, "VALID"),
         ((1, 1, 12, 1), (1, 5, 1, 3), 1, "VALID"), ((1, 2, 10, 1), (2, 2, 1, 2), 1, "VALID"),
         ((1, 9, 9, 3), (3, 3, 3, 4), 1, "VALID")]
# depthwise (input NHWC, filter HW C multiplier): 2 patches of 3 taps with multiplier 4 (fuzz seed
# 164000909), 4 patches of 4 taps with multiplier 2, 8 patches of 3 taps (fuzz seed 167001146)
DEPTHWISE = [((1, 1, 2, 2), (1, 3, 2, 4), 1, "SAME"), ((1, 4, 4, 2), (1, 4, 2, 2), 1, "VALID"),
             ((2, 2, 2, 2), (3, 1, 2, 2), 1, "SAME"),
             # multiplier 1: depth 2 one FMA chain (fuzz seed 171000637), depth 3 gemv_t's (apart)
             ((2, 3, 2, 3), (1, 2, 3, 1), 1, "VALID"), ((1, 2, 6, 2), (2, 1, 2, 1), 1, "VALID"),
             ((1, 2, 6, 2), (1, 3, 2, 1), 1, "VALID")]


def _probe_all(conv, xs, ws, dtype):
    """TF's XLA and ours on every (p, q) probe over the filter's (taps, input features)."""
    want_fn, got_fn = tf.function(conv, jit_compile=True), txc.function(conv, jit_compile=True)
    x = tf.constant(np.full(xs, float(dtype.max)), dtype)
    K = int(np.prod(ws[:3]))
    for p in range(K):
        for q in range(p + 1, K):
            w = np.zeros(K)
            w[p], w[q] = 2.0, -2.0
            w = tf.constant(np.broadcast_to(w.reshape(ws[:3] + (1,)), ws).copy(), dtype)
            want = tf.cast(want_fn(x, w), tf.float64).numpy()
            got = tf.cast(got_fn(x, w), tf.float64).numpy()
            np.testing.assert_array_equal(got, want, err_msg=f"taps {p}, {q}")


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_conv_accumulators_as_tf(case, dtype):
    xs, ws, stride, pad = case
    _probe_all(lambda x, w: tf.nn.conv2d(x, w, stride, pad), xs, ws, dtype)


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16], ids=str)
@pytest.mark.parametrize("case", DEPTHWISE, ids=str)
def test_depthwise_accumulators_as_tf(case, dtype):
    xs, ws, stride, pad = case
    _probe_all(lambda x, w: tf.nn.depthwise_conv2d(x, w, [1, stride, stride, 1], pad), xs, ws, dtype)


BIG, INF = 3e38, np.inf
# (the last patch's four products at k = 0..3): two overflowing negatives and an infinity in every order
# k-order sums could not tell from the accumulators by k mod 2 (fuzz seed 280001053: TF's inf, not NaN)
APART_DEPTH4 = [(0, -BIG, -BIG, INF), (-BIG, -BIG, INF, 0), (INF, -BIG, -BIG, 0), (-BIG, INF, -BIG, 0),
                (-BIG, 0, -BIG, INF), (INF, 0, -BIG, -BIG), (-BIG, -BIG, 0, INF)]


@pytest.mark.parametrize("vals", APART_DEPTH4, ids=str)
def test_apart_rows_keep_the_two_accumulators(vals):
    """The last patches summed apart (``pair_apart_rows``: 8 patches, the last 2) round each product but
    keep the accumulators by k mod 2: TF's XLA against ours on the last patch."""
    x = np.zeros((1, 1, 9, 2), np.float32)
    x[0, 0, 7, :], x[0, 0, 8, :] = vals[:2], vals[2:]
    k = tf.constant(np.ones((1, 2, 2, 2), np.float32))

    def conv(v):
        return tf.nn.conv2d(v, k, 1, "VALID")
    want = tf.function(conv, jit_compile=True)(x).numpy()
    got = txc.function(conv, jit_compile=True)(x).numpy()
    np.testing.assert_array_equal(got, want)
