"""F32/BF16 dots on an AVX2 host against TF's XLA (codegen/dot_exact.py ``sum_form``): for every pair of
contraction indices p ≠ q, ``max·2`` at p and ``max·(-2)`` at q in every output; TF's accumulators show
as +inf / -inf (q fused after p / p after q) or NaN (apart, or rounded products). Shapes of each measured
form (two accumulators by k mod 2 with the odd last k fused after or rounded apart, the last rows rounded,
rounded products, one chain), with and without transposed operands, batched and not, through our loop form and our GEMM's guarded exact kernel; fuzz seeds
161001153 and 163000509 in tests/data/fuzz_regressions. On AVX-512 hosts TF's order is another one
(YNNPACK's, not emulated): skipped there."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.codegen.conv_exact import avx2_host

pytestmark = pytest.mark.skipif(not avx2_host(), reason="TF's F32 dot order measured on an AVX2 host only")

# (B, M, K, N): B = 0 is a plain matmul. pairs (3-7 rows, K ≤ 7, N ≤ 7; row 6 rounded at M = 7), rounded
# (M 4-6 with K ≥ 8, M = 17), one chain (M = 7 with K ≥ 8, M = 64); the last two reach our GEMM.
SHAPES = [(3, 5, 5, 3), (0, 4, 4, 2), (2, 7, 7, 5), (0, 5, 8, 3), (3, 17, 5, 2), (0, 7, 9, 3),
          (7, 17, 17, 5), (2, 64, 7, 5),
          # 2 and 3 rows (rounded, pairs), 9-12 and 41 rows (rounded), 6 and 7 columns (pairs), 8 columns
          # (rounded at 4-6 rows, one chain at 7), 9 columns (one chain)
          (0, 2, 6, 5), (2, 3, 5, 4), (0, 9, 5, 3), (0, 41, 4, 2), (0, 4, 5, 6), (2, 6, 7, 7), (0, 4, 5, 8),
          (0, 7, 5, 8), (0, 12, 5, 9)]


def _probes(B, M, K, N, dtype):
    """One (a, b) pair per (p, q), p < q: a = max everywhere, b = 2 at k = p and -2 at k = q."""
    big = float(tf.as_dtype(dtype).max)
    for p in range(K):
        for q in range(p + 1, K):
            a = np.full((max(B, 1), M, K), big)
            w = np.zeros(K)
            w[p], w[q] = 2.0, -2.0
            b = np.broadcast_to(w[None, :, None], (max(B, 1), K, N)).copy()
            yield (a[0], b[0]) if B == 0 else (a, b)


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_dot_accumulators_as_tf(shape, dtype):
    matmul = lambda x, y: tf.linalg.matmul(x, y)  # noqa: E731
    want_fn, got_fn = tf.function(matmul, jit_compile=True), txc.function(matmul, jit_compile=True)
    for a, b in _probes(*shape, dtype):
        a, b = tf.constant(a, dtype), tf.constant(b, dtype)
        want = tf.cast(want_fn(a, b), tf.float64).numpy()
        got = tf.cast(got_fn(a, b), tf.float64).numpy()
        np.testing.assert_array_equal(got, want)


# (B, M, K, N, transpose_a, transpose_b): the lhs transposed sums pairs with the last 1 or 2 rows of the
# 6-row blocks apart (M = 7, 8), one chain from 9 columns with a last block of 3 rows in pairs (M = 9) or
# of 1 apart (M = 13); the rhs transposed pairs with an odd last k rounded apart from 8 rows or depth 8
# (M = 9, K = 9), the last row apart at M = 7
TRANSPOSED = [(0, 7, 5, 4, True, False), (2, 8, 4, 5, True, True), (0, 9, 5, 9, True, False),
              (0, 13, 6, 12, True, False), (0, 9, 5, 4, False, True), (2, 7, 5, 4, False, True),
              (0, 4, 9, 4, False, True)]


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16], ids=str)
@pytest.mark.parametrize("shape", TRANSPOSED, ids=str)
def test_transposed_dot_accumulators_as_tf(shape, dtype):
    B, M, K, N, ta, tb = shape
    matmul = lambda x, y: tf.linalg.matmul(x, y, transpose_a=ta, transpose_b=tb)  # noqa: E731
    want_fn, got_fn = tf.function(matmul, jit_compile=True), txc.function(matmul, jit_compile=True)
    flip = lambda x, yes: np.swapaxes(x, -1, -2).copy() if yes else x  # noqa: E731
    for a, b in _probes(B, M, K, N, dtype):
        a, b = tf.constant(flip(a, ta), dtype), tf.constant(flip(b, tb), dtype)
        want = tf.cast(want_fn(a, b), tf.float64).numpy()
        got = tf.cast(got_fn(a, b), tf.float64).numpy()
        np.testing.assert_array_equal(got, want)
