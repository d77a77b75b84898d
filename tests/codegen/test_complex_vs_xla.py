"""Complex exp, expm1 and sigmoid (1/(1 + exp(-z)) after XLA's LogisticExpander) bit for bit against TF's XLA:
MLIR's complex-to-standard formulas (exp's e^(a/2) fallback where eᵃ overflows, expm1's Cephes cosm1) and
where TF's XLA does or does not contract an fmul into a following fadd; ``1 + exp(-z)`` is a complex add (its
constant's +0 imaginary part makes an underflowed -0 part +0, where a real 0 + x would be folded to x)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc


def _values(dtype) -> np.ndarray:
    rng = np.random.default_rng(19)
    big = 800.0 if dtype == np.complex128 else 100.0
    specials = (0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, 3.0)
    z = np.concatenate([
        rng.normal(0, 3, 300) + 1j * rng.normal(0, 3, 300),
        10.0 ** rng.uniform(-8, 0, 100) * rng.choice([-1, 1], 100)
        + 1j * 10.0 ** rng.uniform(-8, 0, 100) * rng.choice([-1, 1], 100),   # cosm1's polynomial range
        rng.uniform(-big, big, 100) + 1j * rng.normal(0, 3, 100),            # eᵃ overflowing
        [complex(a, b) for a in specials for b in specials]])
    return z.astype(dtype)


@tf.autograph.experimental.do_not_convert
def _ops(a):
    return tf.exp(a), tf.math.expm1(a), tf.sigmoid(a), 1 + tf.exp(-a)


def _same_bits(want: np.ndarray, got: np.ndarray) -> np.ndarray:
    return (want == got) & (np.signbit(want) == np.signbit(got)) | (np.isnan(want) & np.isnan(got))


def _assert_bitwise_as_xla(fn, names, *args) -> None:
    """``fn``'s results under ours equal TF's XLA's bit for bit (any NaN equals any NaN)."""
    want = [w.numpy() for w in tf.function(fn, jit_compile=True)(*args)]
    got = [np.asarray(g) for g in txc.function(fn, jit_compile=True)(*args)]
    for name, w, g in zip(names, want, got):
        bad = ~(_same_bits(w.real, g.real) & _same_bits(np.imag(w), np.imag(g)))
        assert not bad.any(), (name, np.flatnonzero(bad)[:4], g[bad][:4], w[bad][:4])


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
def test_complex_exp_expm1_sigmoid_bitwise(dtype):
    z = _values(dtype)
    _assert_bitwise_as_xla(_ops, ("exp", "expm1", "sigmoid", "1 + exp(-z)"), z)


@tf.autograph.experimental.do_not_convert
def _elemental_ops(a):
    return tf.sin(a), tf.cos(a), tf.sqrt(a), tf.math.rsqrt(a), tf.sinh(a), tf.cosh(a), tf.atanh(a), tf.atan(a)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
def test_complex_sin_cos_sqrt_rsqrt_bitwise(dtype):
    """XLA's elemental emitter forms: cos's imaginary part sin x·(e^-y/2 - e^y/2) (+0 for a real z), sqrt's +0
    where sin(t/2) is ±0, rsqrt's sqrt(rsqrt(1 + (min/max)²))·rsqrt(max) (with the target's rsqrt); sinh and
    cosh as tf2xla's e^(z + log ½) ∓ e^(log ½ - z) with a complex log ½; atanh and atan (= -i·atanh(iz)) as
    chlo's algorithm (1e20 and 1e300 reach its branch for huge parts)."""
    with np.errstate(over="ignore"):   # 1e300 is inf in c64
        z = np.concatenate([_values(dtype), np.array([1e20 + 1j, 1 + 1e20j, -1e300 + 3j, 2 - 1e300j], dtype)])
    _assert_bitwise_as_xla(_elemental_ops, ("sin", "cos", "sqrt", "rsqrt", "sinh", "cosh", "atanh", "atan"), z)


@tf.autograph.experimental.do_not_convert
def _inverse_ops(a):
    return tf.asin(a), tf.acos(a), tf.asinh(a), tf.acosh(a)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
def test_complex_asin_acos_asinh_acosh_bitwise(dtype):
    """TF 2.21 lowers all four by chlo's asin_acos_kernel (Hull et al.): its hypot, its branches at |re| ≤ 1,
    at safe_max = √max/8 (×10¹², ×10⁻⁶, ×10² for the imaginary part's log form) and at safe_min = 4·√tiny
    (parts spread over 10^±30 reach every branch), asinh as the kernel of (|im z|, |re z|)."""
    rng = np.random.default_rng(7)
    n = 600
    spread = (rng.normal(0, 1, n) * 10.0 ** rng.uniform(-30, 30, n)
              + 1j * rng.normal(0, 1, n) * 10.0 ** rng.uniform(-30, 30, n))
    with np.errstate(over="ignore"):   # 1e300 is inf in c64
        z = np.concatenate([_values(dtype), spread.astype(dtype), np.array(
            [1e20 + 1j, 1 + 1e20j, -1e300 + 3j, 2 - 1e300j, 1e-20 + 1e-20j, 1 + 1e-30j, 0.99 + 1e-25j,
             -1.01 - 1e-25j, 1e18 + 1e18j, 3e38 + 3e38j, 1e-40 + 1e-42j, 1e-310 + 1e-310j], dtype)])
    _assert_bitwise_as_xla(_inverse_ops, ("asin", "acos", "asinh", "acosh"), z)


@tf.autograph.experimental.do_not_convert
def _fma_order_ops(z, w, a, b, c, d):
    return (z * tf.reverse(z, [0]), z * w + z, a * tf.reverse(a, [0]) + b * c, (a * b + c * d) + a,
            tf.reverse(a, [0]) * b + c * d)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
def test_fma_contraction_follows_xla_emission_order(dtype):
    """Which product of ``p·q ± r·s`` LLVM contracts into an FMA follows the order of the loads (Reassociate
    ranks the fadd's operands by them): XLA's loop emitter emits a fusion breadth first from its root, so in
    ``z * reverse(z)`` the reversed element is loaded first and the imaginary part fuses re(z)·im(rev z);
    fusions its tiled emitter takes (``(a*b + c*d) + a``) keep post order. Products that overflow (parts
    near 1e20 in c64) show the choice as ±inf/NaN, others as a last-bit difference."""
    rng = np.random.default_rng(11)
    n = 600
    part = np.float32 if dtype == np.complex64 else np.float64
    scale = rng.choice([1.0, 1e19, 1e20, 3e38] if dtype == np.complex64 else [1.0, 1e150, 1e160], (4, n))
    with np.errstate(over="ignore"):
        z = (rng.normal(0, 1, n) * scale[0] + 1j * rng.normal(0, 1, n) * scale[1]).astype(dtype)
        w = (rng.normal(0, 1, n) * scale[2] + 1j * rng.normal(0, 1, n) * scale[3]).astype(dtype)
    a, b, c, d = (rng.normal(0, 1, n).astype(part) for _ in range(4))
    names = ("z*rev(z)", "z*w + z", "a*rev(a) + b*c", "(a*b + c*d) + a", "rev(a)*b + c*d")
    _assert_bitwise_as_xla(_fma_order_ops, names, z, w, a, b, c, d)
