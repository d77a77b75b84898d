"""Float semantics that depend on how XLA:CPU emits code, bit for bit against TF's XLA on this machine: f64 tanh
is ``xla.tanh.f64`` (a rational approximation, not libm's tanh), and gelu_tanh's x³ is pow(x, 3) rewritten to
x·(x·x) by XLA's algsimp (an ulp of either is magnified by 1 + tanh(z) near z = -1); a scalar constant operand
of max/min is the rhs once fused (MLIR's constant canonicalization), the lhs in a lone op."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc


def _values(dtype) -> np.ndarray:
    rng = np.random.default_rng(19)
    x = np.concatenate([rng.normal(0, 3, 400), rng.uniform(-25, 25, 200),
                        10.0 ** rng.uniform(-300, 1.3, 100) * rng.choice([-1, 1], 100),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 17.714196154005176, 20.0, -20.0, 19.999999, -4.1978936690030455]])
    return x.astype(dtype)


def _same_bits(want: np.ndarray, got: np.ndarray) -> np.ndarray:
    return (want == got) & (np.signbit(want) == np.signbit(got)) | (np.isnan(want) & np.isnan(got))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tanh_gelu_cube_bitwise(dtype):
    @tf.autograph.experimental.do_not_convert
    def f(a):
        return tf.tanh(a), tf.nn.gelu(a, approximate=True), tf.pow(a, 3), a / tf.nn.gelu(a, approximate=True)
    x = _values(dtype)
    want = [w.numpy() for w in tf.function(f, jit_compile=True)(x)]
    got = [np.asarray(g) for g in txc.function(f, jit_compile=True)(x)]
    for name, w, g in zip(("tanh", "gelu_tanh", "pow3", "x/gelu_tanh"), want, got):
        bad = ~_same_bits(w, g)
        assert not bad.any(), (name, x[bad][:4], g[bad][:4], w[bad][:4])


_SPECIAL = (np.nan, -0.0, 0.0, 1.5)


@pytest.mark.parametrize("form", ["lone", "fused", "clip"])
def test_scalar_min_max_with_a_constant_operand(form):
    """Scalar max/min(C, x): a lone op keeps the constant as XLA's lhs (XLA wraps it with the constant as a
    parameter); fused with other ops the constant is an arith.constant, canonicalized to the rhs (NaN and
    ±0 of x decide). Every pair of special values, f32 and bf16 (computed in f32 after normalization)."""
    dtypes = (np.float32, tf.bfloat16.as_numpy_dtype)

    @tf.autograph.experimental.do_not_convert
    def f(*xs):
        outs = []
        for x in xs:
            for cv in _SPECIAL:
                c = tf.constant(np.array(cv, x.dtype.as_numpy_dtype))
                for op in (tf.maximum, tf.minimum):
                    if form == "lone":
                        outs.append(op(c, x))
                    elif form == "fused":
                        outs.append(op(c, x) * tf.constant(np.array(2, x.dtype.as_numpy_dtype)))
                    else:
                        outs.append(tf.clip_by_value(c, x, x))
        return outs
    xs = [np.array(v, dt) for dt in dtypes for v in _SPECIAL]
    want = [np.asarray(w.numpy(), np.float64) for w in tf.function(f, jit_compile=True)(*xs)]
    got = [np.asarray(g.numpy(), np.float64) for g in txc.function(f, jit_compile=True)(*xs)]
    bad = [k for k, (w, g) in enumerate(zip(want, got)) if not _same_bits(w, g)]
    assert not bad, [(k, got[k], want[k]) for k in bad]


def test_f32_exp_and_expm1_bitwise():
    """f32 exp caps its 2^n at 2^127 as XLA's (x above ~88.38: a few ulps, as TF's XLA), and expm1 is XLA's
    tanh(x/2)·(exp(x)+1) for |x| <= 1/2, exp(x) - 1 above (libm's expm1 is up to 5 ulps away from it)."""
    @tf.autograph.experimental.do_not_convert
    def f(a):
        return tf.exp(a), tf.math.expm1(a)
    x = np.concatenate([_values(np.float32), np.linspace(88.0, 88.75, 300, dtype=np.float32),
                        np.linspace(-0.6, 0.6, 300, dtype=np.float32),
                        np.linspace(-104, -86, 100, dtype=np.float32)])
    want = [w.numpy() for w in tf.function(f, jit_compile=True)(x)]
    got = [np.asarray(g) for g in txc.function(f, jit_compile=True)(x)]
    for name, w, g in zip(("exp", "expm1"), want, got):
        bad = ~_same_bits(w, g)
        assert not bad.any(), (name, x[bad][:4], g[bad][:4], w[bad][:4])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_log1p_is_xla_rational_approximation(dtype):
    """log1p is XLA's x + (-x²/2 + x³·P/Q) for |x| < sqrt(2) - 1 (Cephes, -x²/2 fused into an FMA as XLA's
    backend does), log(x + 1) above: TF's XLA's f64 log1p is ~100 ulps from libm's near |x| = 0.41."""
    x = np.concatenate([np.linspace(-0.45, 0.45, 600), _values(np.float64)]).astype(dtype)
    want = tf.function(tf.math.log1p, jit_compile=True)(x).numpy()
    got = np.asarray(txc.function(tf.math.log1p, jit_compile=True)(x))
    bad = ~_same_bits(want, got)
    assert not bad.any(), (x[bad][:4], got[bad][:4], want[bad][:4])


_FMA_AVX512 = __import__("tfxla_cluster.codegen.target", fromlist=["x"]).default_target().info


@pytest.mark.skipif(_FMA_AVX512.isa != "AVX-512" or not _FMA_AVX512.fma,
                    reason="XLA's polynomials fuse into FMAs: measured against TF's XLA on an AVX-512 CPU")
def test_xla_polynomials_bitwise():
    """XLA:CPU's own approximations, bit for bit: f32 log (Eigen's plog, its polynomial split in three parts of
    x³), f32 erf (Eigen's rational x·P(x²)/Q(x²), also for bf16 through f32), f64 exp (xla.exp.f64: Padé
    form, four-step ldexp) and so f64 expm1/sigmoid/softplus, selu (tf2xla's scale·alpha literal), and
    erfc/exact gelu as TF 2.21's tf2xla lowers them (f32: MLIR's chlo polynomial; f64: ErfImpl64 below 1)."""
    bf16 = tf.bfloat16.as_numpy_dtype

    @tf.autograph.experimental.do_not_convert
    def f(a, d, h):
        return (tf.math.log(tf.abs(a)), tf.math.erf(a), tf.math.erf(h), tf.math.erfc(a), tf.nn.gelu(a),
                tf.exp(d), tf.math.expm1(d), tf.sigmoid(d), tf.nn.softplus(d), tf.nn.selu(d))

    # f64 erfc in a fusion of its own, on a multiple of 64 elements: TF's XLA's own scalar and partial-vector
    # code rounds its polynomials differently (an ulp, e.g. at -0.6944577339819589 among 3 elements).
    @tf.autograph.experimental.do_not_convert
    def g(d):
        return tf.math.erfc(d), tf.nn.gelu(d)
    rng = np.random.default_rng(7)
    x32 = np.concatenate([_values(np.float32), rng.uniform(-5, 5, 1500), np.exp(rng.uniform(-80, 80, 500)),
                          [3.8325, -3.8326, 1.0, -1.0, 1e-40, -1e-40]]).astype(np.float32)
    x64 = np.concatenate([_values(np.float64), rng.uniform(-30, 30, 1500), [709.78, 709.79, -708.39, -708.4,
                                                                             -745.2, 1.0, -1.0]])
    h = x32.astype(bf16)
    y64 = np.resize(x64, len(x64) // 64 * 64)
    names = ("log f32", "erf f32", "erf bf16", "erfc f32", "gelu f32", "exp f64", "expm1 f64", "sigmoid f64",
             "softplus f64", "selu f64", "erfc f64", "gelu f64")
    want = [np.asarray(w.numpy(), np.float64) for w in (*tf.function(f, jit_compile=True)(x32, x64, h),
                                                         *tf.function(g, jit_compile=True)(y64))]
    got = [np.asarray(r.numpy() if hasattr(r, "numpy") else r).astype(np.float64)
           for r in (*txc.function(f, jit_compile=True)(x32, x64, h), *txc.function(g, jit_compile=True)(y64))]
    for name, w, r in zip(names, want, got):
        bad = ~_same_bits(w, r)
        assert not bad.any(), (name, np.flatnonzero(bad)[:4], r[bad][:4], w[bad][:4])


@pytest.mark.skipif(not _FMA_AVX512.fp16, reason="f16 FMAs: measured against TF's XLA on an AVX512-FP16 CPU")
def test_f16_formulas_in_half_arithmetic():
    """XLA:CPU does not normalize f16 to f32: log1p (with half FMAs), expm1 and rsqrt (1/sqrt) round every
    step to f16 (their exp/log/tanh in f32), unlike bf16. Every finite f16 value."""
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    x = x[np.isfinite(x)]

    @tf.autograph.experimental.do_not_convert
    def f(a):
        return tf.math.log1p(a), tf.math.expm1(a), tf.math.rsqrt(a)
    want = [w.numpy() for w in tf.function(f, jit_compile=True)(x)]
    got = [np.asarray(g) for g in txc.function(f, jit_compile=True)(x)]
    for name, w, g in zip(("log1p", "expm1", "rsqrt"), want, got):
        bad = ~_same_bits(w.astype(np.float64), g.astype(np.float64))
        assert not bad.any(), (name, x[bad][:4], g[bad][:4], w[bad][:4])


def test_f32_rsqrt_is_xla_estimate_with_newton_steps():
    """f32 (and bf16, computed in f32) rsqrt and l2_normalize bit for bit: on AVX targets XLA refines the rsqrt
    estimate with Newton steps (one on AMD targets, whose estimate is more accurate: XLA tells them by SSE4a;
    two elsewhere); off AVX both sides are 1/sqrt(x). l2_normalize over rows of 8: the in-order sum of
    squares (its first add kept, as XLA's LLVM keeps it), then the estimate."""
    bf16 = tf.bfloat16.as_numpy_dtype

    @tf.autograph.experimental.do_not_convert
    def f(a, c, m):
        return tf.math.rsqrt(a), tf.math.rsqrt(a[:1]) * 2, tf.math.rsqrt(c), tf.nn.l2_normalize(m, axis=1)
    x = np.abs(_values(np.float32))
    x = np.concatenate([x, [1e-40, -1e-40, 1.17e-38, 3.4e38, -1.0]]).astype(np.float32)
    c = x.astype(bf16)
    m = np.random.default_rng(8).normal(0, 3, (400, 8)).astype(np.float32)
    want = [w.numpy().astype(np.float64) for w in tf.function(f, jit_compile=True)(x, c, m)]
    got = [np.asarray(g.numpy() if hasattr(g, "numpy") else g).astype(np.float64)
           for g in txc.function(f, jit_compile=True)(x, c, m)]
    for name, w, g in zip(("rsqrt", "rsqrt scalar", "rsqrt bf16", "l2_normalize"), want, got):
        bad = ~_same_bits(w, g)
        assert not bad.any(), (name, np.flatnonzero(bad)[:4], g[bad][:4], w[bad][:4])


@pytest.mark.skipif(not __import__("tfxla_cluster.codegen.target", fromlist=["x"]).host_features().get("avx512f"),
                    reason="TF's XLA f64 rsqrt off AVX-512 not measured")
def test_f64_rsqrt_is_xla_rsqrt14_with_two_newton_steps():
    @tf.autograph.experimental.do_not_convert
    def f(a):
        return tf.math.rsqrt(a), tf.math.rsqrt(a[:1])
    x = np.concatenate([np.abs(_values(np.float64)), [1e-310, -1.0, 2.2250738585072014e-308]])
    want = [w.numpy() for w in tf.function(f, jit_compile=True)(x)]
    got = [np.asarray(g) for g in txc.function(f, jit_compile=True)(x)]
    for w, g in zip(want, got):
        bad = ~_same_bits(w, g)
        assert not bad.any(), (x[bad][:4], g[bad][:4], w[bad][:4])


def test_inverse_trig_and_hyperbolic_as_tf2xla_lowers_them():
    """asin, acos, asinh and acosh as TF 2.21's tf2xla lowers them: (1 - x)(1 + x) under the square root,
    acos = atan2(sqrt(..), x), acosh = log1p(sqrt(x-1)·(sqrt(x+1) + sqrt(x-1))) with log(x) + log 2 from half
    the type's max, and f16/bf16 computed in their own type (each op rounded, not upcast to f32); atanh's
    0.5·(log1p(x) - log1p(-x)) with the two expansions' shared -x²/2 product rounded, not fused."""
    bf16 = tf.bfloat16.as_numpy_dtype
    rng = np.random.default_rng(3)
    base = np.concatenate([rng.uniform(-1, 1, 600), rng.uniform(1, 40, 200), 10.0 ** rng.uniform(-8, 30, 200),
                           [0.0, -0.0, 1.0, -1.0, 1e-3, 300.0, 7e4, np.inf, -np.inf, np.nan]])

    dtypes = (np.float16, bf16, np.float32, np.float64)
    with np.errstate(over="ignore"):
        xs = [base.astype(dtype) for dtype in dtypes]

    @tf.autograph.experimental.do_not_convert
    def f(*args):
        return [op(a) for a in args for op in (tf.asin, tf.acos, tf.asinh, tf.acosh, tf.atanh)]
    want = [np.asarray(w.numpy(), np.float64) for w in tf.function(f, jit_compile=True)(*xs)]
    got = [np.asarray(r.numpy() if hasattr(r, "numpy") else r).astype(np.float64)
           for r in txc.function(f, jit_compile=True)(*xs)]
    for k, (w, r) in enumerate(zip(want, got)):
        bad = ~_same_bits(w, r)
        x = xs[k // 5]
        assert not bad.any(), (("asin", "acos", "asinh", "acosh", "atanh")[k % 5], x.dtype.name, x[bad][:4],
                               r[bad][:4], w[bad][:4])
