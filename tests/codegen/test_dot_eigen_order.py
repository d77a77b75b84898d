"""F64 dots in Eigen's summation order (codegen/dot_exact.py ``emit_eigen_sum``), bit for bit against TF's
XLA: random operands of wide exponents and random signs (any change of order shows in the rounding), one
element ≥ 2⁴⁸⁰ so the GEMM's check runs the exact kernel. Depths 289-2000 cover Eigen's k-blocks (the
sequential contraction's evened-out kc ≤ 336, the thread pool's 320, two depth shards when it shards by
the inner dimension); the shapes cover every micro-kernel class (8-row panels, 4/2-row remainders with
two accumulators, a last row with four, remainder columns). Small dots are the loop form, exact always."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.codegen.eigen_blocking import k_blocks
from tfxla_cluster.cpu_topology import eigen_threads

RNG = np.random.default_rng(1989)


def _wide(shape):
    return RNG.choice([-1.0, 1.0], size=shape) * np.exp2(RNG.uniform(-20, 20, size=shape))


def _bits_equal(want, got):
    want, got = np.asarray(want), np.asarray(got)
    assert want.shape == got.shape
    same = (want.view(np.int64) == got.view(np.int64)) | (np.isnan(want) & np.isnan(got))
    assert same.all(), f"{int((~same).sum())} of {same.size} differ, first at {np.argwhere(~same)[:5].tolist()}"


def _check(fn, *args):
    args = [tf.constant(a) for a in args]
    _bits_equal(tf.function(fn, jit_compile=True)(*args).numpy(), txc.function(fn, jit_compile=True)(*args).numpy())


# (M, K, N): XLA's [M, K] x [K, N]; Eigen's rows are N.
DEEP = [(16, 400, 16), (16, 1000, 16), (64, 700, 64), (7, 2000, 13), (5, 1500, 9), (4, 900, 4),
        (64, 400, 5), (33, 289, 47), (38, 1706, 36), (20, 945, 54), (35, 1989, 5), (109, 674, 10)]


@pytest.mark.parametrize("mkn", DEEP, ids=str)
def test_deep_f64_matmul_bit_exact(mkn):
    M, K, N = mkn
    a, b = _wide((M, K)), _wide((K, N))
    a[M - 1, K - 1] = 2.0 ** 500   # takes the exact kernel; the products stay finite
    _check(tf.linalg.matmul, a, b)


def test_deep_blocks_cover_every_path():
    """The shapes above meet each of Eigen's depth splits on this machine (two threads)."""
    if eigen_threads() != 2:
        pytest.skip("the split depends on TF's intra-op threads")
    plans = [k_blocks(n, m, k, 2) for m, k, n in DEEP]
    kcs = {p[0][0][1] - p[0][0][0] for p in plans}
    assert {208, 336, 320} <= kcs and any(len(p) == 2 for p in plans)


def test_deep_batched_transposed_and_overflowing():
    a, b = _wide((2, 600, 12)), _wide((2, 9, 600))
    a[1, 0, 0] = np.inf
    _check(lambda x, y: tf.linalg.matmul(x, y, transpose_a=True, transpose_b=True), a, b)
    # partial sums that overflow in one k-block but not in k order (max, max | -max, -max: NaN vs inf)
    a, b = np.zeros((8, 700)), np.zeros((700, 8))
    big = np.finfo(np.float64).max
    a[0, [10, 11, 400, 401]] = [big, big, -big, -big]
    b[:, 0] = 1.0
    _check(tf.linalg.matmul, a, b)


@pytest.mark.parametrize("mkn", [(4, 50, 5), (5, 40, 7), (6, 33, 9), (9, 30, 11), (4, 250, 4)], ids=str)
def test_small_f64_matmul_loop_form_bit_exact(mkn):
    M, K, N = mkn
    _check(tf.linalg.matmul, _wide((M, K)), _wide((K, N)))
