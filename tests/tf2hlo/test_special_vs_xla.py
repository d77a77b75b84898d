"""lgamma, digamma, BesselI0e, BesselI1e, softplus and log_sigmoid bit for bit against TF's XLA (jit_compile=True):
XLA's Lanczos formulas (op order, reflection, poles), Cephes' Chebyshev series and softplus's thresholds rounded
in the type (bf16: ±2.859375), f32/f64 over values that reach every branch, f16/bf16 over every bit pattern."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc

_BF16 = tf.bfloat16.as_numpy_dtype


def _values(dtype) -> np.ndarray:
    if dtype in (np.float16, _BF16):
        return np.arange(65536, dtype=np.uint16).view(dtype)
    rng = np.random.default_rng(19)
    big = 300 if dtype == np.float64 else 37
    x = np.concatenate([
        rng.uniform(-12, 12, 300),                                  # both reflection sides, |x| <= 8 and beyond
        rng.uniform(-0.5, 0.5, 60) + rng.integers(-30, 30, 60),     # near the poles, fractional parts on both halves
        10.0 ** rng.uniform(-big, big, 120) * rng.choice([-1, 1], 120),
        np.arange(-6, 7, 0.5), [2.859375, -2.859375, 15.942385, -15.942385, 34.538776, 0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 8.0, -8.0, 8.000001, 0.4999999]])
    return x.astype(dtype)


@tf.autograph.experimental.do_not_convert
def _ops(a):
    return (tf.math.lgamma(a), tf.math.digamma(a), tf.math.bessel_i0e(a), tf.math.bessel_i1e(a), tf.nn.softplus(a),
            tf.math.log_sigmoid(a))


def _same_bits(want: np.ndarray, got: np.ndarray) -> np.ndarray:
    want, got = want.astype(np.float64), got.astype(np.float64)
    return (want == got) & (np.signbit(want) == np.signbit(got)) | (np.isnan(want) & np.isnan(got))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, _BF16], ids=["f32", "f64", "f16", "bf16"])
def test_special_functions_bitwise(dtype):
    x = _values(dtype)
    want = [w.numpy() for w in tf.function(_ops, jit_compile=True)(x)]
    got = [np.asarray(g) for g in txc.function(_ops, jit_compile=True)(x)]
    for name, w, g in zip(("lgamma", "digamma", "i0e", "i1e", "softplus", "log_sigmoid"), want, got):
        bad = ~_same_bits(w, g)
        assert not bad.any(), (name, x[bad][:4], g[bad][:4], w[bad][:4])


_GRID = (0.0, -0.0, 0.5, 1.0, 2.0, 3.0, -1.0, -2.0, -2.5, 4.5, 12.0, 1e-3, 1e3, 1e30, np.inf, -np.inf, np.nan)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_zeta_polygamma_bitwise(dtype):
    """XLA's Euler-Maclaurin zeta (and polygamma through it) on random arguments and every pair of edge values
    (x = 1, x < 1, q a non-positive integer, even/odd integer x, q < 0 with non-integer x, inf, NaN)."""
    rng = np.random.default_rng(5)
    x, q = (np.array(v, dtype) for v in zip(*[(a, c) for a in _GRID for c in _GRID]))
    x = np.concatenate([x, rng.uniform(1, 12, 200).astype(dtype)])
    q = np.concatenate([q, (10.0 ** rng.uniform(-3, 3, 200)).astype(dtype)])
    n = np.floor(np.abs(x)) % 4

    @tf.autograph.experimental.do_not_convert
    def f(x, q, n):
        return tf.math.zeta(x, q), tf.math.polygamma(n, q)
    want = [w.numpy() for w in tf.function(f, jit_compile=True)(x, q, n)]
    got = [np.asarray(g) for g in txc.function(f, jit_compile=True)(x, q, n)]
    for name, w, g in zip(("zeta", "polygamma"), want, got):
        bad = ~_same_bits(w, g)
        assert not bad.any(), (name, x[bad][:4], q[bad][:4], g[bad][:4], w[bad][:4])


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_betainc_bitwise(dtype):
    """XLA's Lentz-Thompson-Barnett betainc (one iteration count for the whole array, both sides of the
    (a+1)/(a+b+2) swap) on random arguments and edge values (a, b <= 0, x outside [0, 1], 0, 1, inf, NaN)."""
    rng = np.random.default_rng(7)
    edge = (0.0, -1.0, 0.5, 1.0, 3.0, 1e3, np.inf, np.nan)
    a, bb, x = (np.array(v, dtype) for v in zip(*[(p, q, r) for p in edge for q in edge
                                                   for r in (0.0, 0.3, 1.0, -0.5, 1.5, np.nan)]))
    a = np.concatenate([a, (10.0 ** rng.uniform(-2, 2, 150)).astype(dtype)])
    bb = np.concatenate([bb, (10.0 ** rng.uniform(-2, 2, 150)).astype(dtype)])
    x = np.concatenate([x, rng.uniform(0, 1, 150).astype(dtype)])
    f = tf.autograph.experimental.do_not_convert(lambda p, q, r: tf.math.betainc(p, q, r))
    want = tf.function(f, jit_compile=True)(a, bb, x).numpy()
    got = np.asarray(txc.function(f, jit_compile=True)(a, bb, x))
    bad = ~_same_bits(want, got)
    assert not bad.any(), (a[bad][:4], bb[bad][:4], x[bad][:4], got[bad][:4], want[bad][:4])


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_igamma_family_bitwise(dtype):
    """Igamma, Igammac, IgammaGradA and RandomGammaGrad (XLA's series / continued fraction and their
    derivatives in a, per-element stopping) on random arguments and every pair of edge values."""
    rng = np.random.default_rng(9)
    edge = (0.0, -1.0, 0.5, 1.0, 3.0, 30.0, 1e4, np.inf, np.nan)
    a, x = (np.array(v, dtype) for v in zip(*[(p, q) for p in edge for q in edge]))
    a = np.concatenate([a, (10.0 ** rng.uniform(-2, 2.5, 200)).astype(dtype)])
    x = np.concatenate([x, (10.0 ** rng.uniform(-2, 2.5, 200)).astype(dtype)])

    @tf.autograph.experimental.do_not_convert
    def f(p, q):
        return (tf.math.igamma(p, q), tf.math.igammac(p, q), tf.raw_ops.IgammaGradA(a=p, x=q),
                tf.raw_ops.RandomGammaGrad(alpha=p, sample=q))
    want = [w.numpy() for w in tf.function(f, jit_compile=True)(a, x)]
    got = [np.asarray(g) for g in txc.function(f, jit_compile=True)(a, x)]
    for name, w, g in zip(("igamma", "igammac", "igamma_grad_a", "random_gamma_grad"), want, got):
        bad = ~_same_bits(w, g)
        assert not bad.any(), (name, a[bad][:4], x[bad][:4], g[bad][:4], w[bad][:4])
