"""Standalone tiny dots on AVX-512 (XLA's naive dot loop, K ≤ 3) are one FMA chain per output for N ≤ 2, N ≥ 9
and f64 N = 4 (``elemental._dot_fma_chain``, issue 19): ``big·2 + (-big)·2`` keeps the first infinity, where
separately rounded products meet as NaN. Checked against TF's XLA on the host (measured on a Zen 4,
2026-11-29; the AVX2 forms: ``dot_exact``'s probes). Not emulated:
N 3-8, where TF's loop rounds the products of some rows (fuzz seed 312001589, tests/data/fuzz_open)."""
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
