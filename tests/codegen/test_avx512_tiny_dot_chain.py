"""Standalone tiny dots on AVX-512 (XLA's naive dot loop) are one FMA chain per output but for the products
LLVM leaves unfused in XLA's loop, which ``dot_naive`` finds by compiling that loop (``elemental._dot_fma_chain``,
``_naive_rounded``; issue 19): ``big·2 + (-big)·2`` keeps the first infinity, where separately rounded
products meet as NaN. Checked against TF's XLA on the host (measured on a Zen 4, 2026-11-29; the AVX2 forms:
``dot_exact``'s probes): N ≤ 2 and N ≥ 9 are one chain; N 3-8 rounds the rows LLVM vectorises (fuzz seed
312001589: [18, 2] · [2, 4], rows 0-15)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tests.codegen.cg_helpers import avx512_measured


@avx512_measured
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("M,K,N", [(2, 2, 1), (17, 2, 1), (18, 3, 1), (5, 3, 2), (24, 2, 2), (16, 3, 9),
                                   (20, 2, 12)])
def test_tiny_dot_fma_chain_equals_tf_xla(M, K, N, dtype):
    big = np.finfo(dtype).max / 1.5
    a = np.zeros((M, K), dtype)
    a[:, 0], a[:, 1] = big, -big
    a[M // 2, :] = [1.5, -2.25] + [0.5] * (K - 2)
    b = np.full((K, N), 2.0, dtype)
    fn = lambda x, y: tf.matmul(x, y)  # noqa: E731
    want = tf.function(fn, jit_compile=True)(a, b).numpy()
    got = np.asarray(txc.function(fn, jit_compile=True)(a, b))
    assert got.tobytes() == want.tobytes(), np.argwhere(got.view(np.uint8) != want.view(np.uint8))[:4]


@avx512_measured
def test_f64_four_columns_is_a_chain():
    a = np.array([[1.5e308, -1.5e308]] * 12)
    b = np.full((2, 4), 2.0)
    fn = lambda x, y: tf.matmul(x, y)  # noqa: E731
    want = tf.function(fn, jit_compile=True)(a, b).numpy()
    assert np.isposinf(want).all()   # TF's: the first infinity, kept by the FMA
    assert np.asarray(txc.function(fn, jit_compile=True)(a, b)).tobytes() == want.tobytes()


@avx512_measured
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("M,K,N", [(18, 2, 4), (16, 3, 5), (33, 3, 6), (9, 2, 8), (2, 40, 3), (500, 3, 5)])
def test_tiny_dot_rounded_rows_equal_tf_xla(M, K, N, dtype):
    """``max`` times ``max`` at k and ``-inf`` at the other k of every output: NaN where XLA rounds product k."""
    big = np.finfo(dtype).max
    fn = lambda x, y: tf.matmul(x, y)  # noqa: E731
    a = np.full((M, K), big, dtype)
    for k in sorted({1, K - 1}):
        b = np.full((K, N), -np.inf, dtype)
        b[k] = big
        want = tf.function(fn, jit_compile=True)(a, b).numpy()
        got = np.asarray(txc.function(fn, jit_compile=True)(a, b))
        assert (np.isnan(got) == np.isnan(want)).all(), (k, np.argwhere(np.isnan(got) != np.isnan(want))[:4])


@avx512_measured
def test_naive_probe_finds_the_vectorised_rows():
    """TF 2.21's optimised [18, 2] · [2, 4] f32 loop (its dump) runs rows 0-15 in vectors, products ``vmulps``
    and sums ``vaddps`` (the backend merged the adds to 512 bits, not the multiplies), rows 16-17 as FMAs."""
    from tfxla_cluster.codegen import dot_naive
    from tfxla_cluster.hlo.shape import PrimitiveType as T
    r = dot_naive.rounded_products(18, 2, 4, T.F32)
    assert r is not None and r[:16, :, 1].all() and not r[16:].any() and not r[:, :, 0].any()
