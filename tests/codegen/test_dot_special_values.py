"""Dots on special values against TF's XLA (codegen/dot_exact.py): opposite-sign overflowing products (F64
dots on Eigen add rounded products: NaN; matrix-vector and tiny dots are FMA loops: the first infinity),
infinities and NaNs against zeros (0·inf), partial sums that overflow, signed zeros, a fused epilogue and
auto-clustering; NaN positions, infinities and signed zeros compared (tests/data/fuzz_regressions has
the fuzz case, seed 72000468). F32 dots are left out: their oneDNN kernel's accumulator split is not
emulated (see the module docstring)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tests.codegen.test_conv_special_values import _check, _same
from tfxla_cluster.codegen.row_lanes import AVX2, host_target

BIG = np.finfo(np.float64).max
RNG = np.random.default_rng(7219)
# (B, M, K, N): Eigen GEMMs of every size class, then XLA's FMA loops (matrix-vector, tiny).
SHAPES = [(5, 7, 5, 3), (1, 7, 5, 3), (1, 4, 4, 4), (1, 8, 8, 8), (1, 64, 64, 64), (1, 200, 300, 100),
          (3, 40, 40, 40), (3, 7, 5, 1), (1, 2, 5, 7), (1, 7, 5, 1), (1, 1, 5, 7), (1, 2, 2, 2), (3, 5, 2, 5)]


def _matmul(x, y):
    return tf.linalg.matmul(x, y)


def _operands(B, M, K, N, pattern):
    a = RNG.standard_normal((B, M, K))
    b = RNG.standard_normal((B, K, N))
    if pattern == "opposite_overflows":   # max·(-5.4) then (-4.2)·(-max) in one output (fuzz seed 72000468)
        a[:, :, :] = 0.0
        b[:, :, :] = 0.0
        a[0, M - 1, 0], a[0, M - 1, K - 1] = BIG, -4.2
        b[0, 0, N - 1], b[0, K - 1, N - 1] = -5.4, -BIG
        a[-1, 0, 0], b[-1, 0, 0] = BIG, 3.0          # one overflowing product alone
    elif pattern == "inf_nan_against_zeros":   # 0·inf = NaN, NaN rows and columns, -0 products
        a[0, 0, :] = 0.0
        a[0, M - 1, :] = -0.0   # all -0 products in column 1: +0, as Eigen's zeroed C gives
        b[0, :, min(1, N - 1)] = np.abs(b[0, :, min(1, N - 1)])
        b[0, K - 1, 0] = np.inf
        b[-1, 0, N - 1] = np.nan
        a[-1, M - 1, K - 1] = -np.inf
        b[0, :, N - 1] = 0.0
    else:   # partial sums that overflow: max/2 + max/2 - max/2 (in k order: +inf)
        a[0, 0, :] = 0.0
        a[0, 0, : min(K, 3)] = [BIG / 2, BIG / 2, -BIG / 2][: min(K, 3)]
        b[0, :, 0] = 1.0
    return a, b


@pytest.mark.parametrize("pattern", ["opposite_overflows", "inf_nan_against_zeros", "partial_overflow"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_f64_matmul_special_values(shape, pattern):
    _check(_matmul, *_operands(*shape, pattern))


def test_f64_einsum_two_contracting_dims_and_epilogue():
    a = RNG.standard_normal((6, 4, 5))
    b = RNG.standard_normal((4, 5, 7))
    a[2, 0, 0], a[2, 3, 4] = BIG, -2.5
    b[0, 0, 3], b[3, 4, 3] = -3.0, -BIG
    _check(lambda x, y: tf.nn.relu(tf.einsum("mij,ijn->mn", x, y) + 1.0), a, b)
    _check(lambda x, y: tf.einsum("mij,ijn->mn", x, y) * 2.0, a, b)


def test_f64_dot_auto_clustering():
    a, b = _operands(1, 8, 8, 8, "opposite_overflows")
    c, d = _operands(3, 40, 40, 40, "inf_nan_against_zeros")

    def fn(a, b, c, d):
        return tf.linalg.matmul(a, b) + 1.0, tf.linalg.matmul(c, d) - 1.0
    args = [tf.constant(v) for v in (a, b, c, d)]
    want = tf.function(fn, jit_compile=True)(*args)
    got = txc.function(fn)(*args)
    for w, g in zip(want, got):
        _same(w.numpy(), g.numpy(), 1e-5)


def test_f64_matmul_finite_values_unchanged():
    """Finite values below the check's bound take the fast kernels, equal to XLA within rounding."""
    a, b = RNG.standard_normal((2, 64, 48)) * 1e100, RNG.standard_normal((2, 48, 33)) * 1e-90
    _check(_matmul, a, b, rtol=1e-12)


def _probe_operands(B, M, K, N, p, q, dtype):
    """max·2 at k = p and max·(-2) at k = q of every output: one FMA chain in k order gives the first one's
    infinity, products rounded apart or summed in separate lanes give NaN."""
    a, b = np.zeros((B, M, K), dtype), np.zeros((B, K, N), dtype)
    a[..., p] = a[..., q] = np.finfo(dtype).max
    b[..., p, :], b[..., q, :] = 2, -2
    return a, b


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("K", [2, 3, 5, 9])
def test_vector_dot_product_is_one_fma_chain(dtype, K):
    """[1, K] × [K, 1]: XLA's loop dot, one FMA chain in k order; ours was LLVM's SLP pairing of the products
    (rounded apart: NaN where TF's XLA gives the first infinity; fuzz seed 226001188, f32 K = 5)."""
    for p, q in ((0, K - 1), (K - 1, 0), (K // 2, K - 1)):
        if p != q:
            _check(_matmul, *_probe_operands(1, 1, K, 1, p, q, dtype))


@pytest.mark.skipif(host_target() != AVX2, reason="TF's small dot forms measured on an AVX2 host only")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", [(1, 3, 3, 1), (2, 2, 3, 1), (3, 3, 2, 2), (2, 1, 2, 1), (1, 2, 7, 1), (1, 2, 11, 1),
                                   (2, 3, 17, 1), (2, 1, 5, 1), (3, 1, 9, 1), (1, 1, 9, 2), (2, 1, 4, 2), (1, 1, 5, 3)],
                         ids=str)
def test_small_dot_sum_forms_on_avx2(dtype, shape):
    """AVX2, standalone small dots (B, M, K, N; B = 1 without a batch dimension): one FMA chain for K ≤ 2 and
    a matrix · column shorter than a vector register; longer ones in lanes of 8 (f64: 4) and the tail's own
    chain; a batched vector dot and a row's first of two columns add their first 8 products apart (elemental
    ``_dot_fma_chain``, ``_loop_dot_form``). Probe pairs in one lane, across lanes, head and tail."""
    B, M, K, N = shape
    pairs = {(0, 1), (1, 0), (0, K - 1), (K - 1, 0), (K - 2, K - 1), (0, min(8, K - 1)), (min(4, K - 1), 0)}
    for p, q in sorted(pq for pq in pairs if pq[0] != pq[1]):
        a, b = _probe_operands(B, M, K, N, p, q, dtype)
        _check(_matmul, *((a[0], b[0]) if B == 1 else (a, b)))
