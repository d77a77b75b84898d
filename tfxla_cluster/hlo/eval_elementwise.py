"""Elementwise semantics of the reference evaluator, one numpy function per opcode.

Each choice follows XLA's HloEvaluator (xla/hlo/evaluator/hlo_evaluator_typed_visitor.h, "TV" below)
and Literal::Convert (xla/literal.cc):

- f16/bf16 compute in f32 and round back (TV's ElementwiseT is float for them); ints wrap (two's
  complement, TV's ToArithmeticSafeType);
- integer divide truncates; x/0 is -1 for signed and all-ones for unsigned; INT_MIN/-1 = INT_MIN.
  remainder has the dividend's sign; x%0 = x; INT_MIN%-1 = 0. Float remainder is fmod (TV HandleDivide,
  HandleRemainder);
- shift amounts are read as unsigned; an amount >= the bit width gives 0 for shift-left and
  shift-right-logical, and the sign fill (0 or -1) for shift-right-arithmetic (TV IsShiftOutOfBounds);
- maximum/minimum propagate NaN; clamp returns a NaN bound or operand (TV HandleMaximum, HandleClamp);
- power: x^0 = 1 and 1^x = 1 even for NaN; integer power with a negative exponent is 1 if x == 1 else 0;
  integer power wraps (TV HandlePower);
- sign keeps NaN and the sign of zero: sign(-0.0) = -0.0 (TV HandleSign, copysign);
- complex abs is std::abs, C's hypot: |(-inf, NaN)| = inf (TV HandleAbs; XLA:CPU's compiled form differs);
- round-nearest-afz rounds halves away from zero (std::round); round-nearest-even is rint;
- compare: FLOAT is IEEE (NaN is unordered, so only NE is true), TOTALORDER orders
  -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN, UNSIGNED compares signed ints as unsigned;
- convert float->int saturates and maps NaN to 0; float->pred is x != 0 (NaN -> true); anything
  -> bf16/f16 goes through f32 then rounds to nearest even, as Eigen's half/bfloat16 constructors do
  (Literal::Convert, ConvertBetweenNativeTypes); complex -> real is rejected by shape inference;
- reduce-precision uses the bit recipe of TV HandleReducePrecision (round-to-nearest-even mantissa,
  exponent overflow to inf and underflow — denormals included — to signed zero, NaN kept unless no
  mantissa bits are left, then inf).
"""
from __future__ import annotations

import math

import numpy as np

from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.hlo.attrs import ComparisonDirection, ComparisonType, default_comparison_type
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T

_HALF = (T.F16, T.BF16)
_UNSIGNED = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
_SIGNED = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}


def _et(x: np.ndarray) -> T:
    from tfxla_cluster.hlo.shape import primitive_type_from_dtype
    return primitive_type_from_dtype(x.dtype)


def _up(x: np.ndarray) -> np.ndarray:
    """The array in its compute type: f32 for f16/bf16, itself otherwise."""
    return x.astype(np.float32) if _et(x) in _HALF else x


def _float_op(fn):
    """Apply a float function in the compute type and round back to the operand's type."""
    def apply(*xs):
        dtype = xs[0].dtype
        return np.asarray(fn(*(_up(x) for x in xs))).astype(dtype)
    return apply


def _unsigned_view(x: np.ndarray) -> np.ndarray:
    return x.view(_UNSIGNED[x.dtype.itemsize * 8])


def _atan2(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Real: arctan2. Complex (HLO allows it; no TF op emits it): XLA's -i·log((x + iy) / sqrt(x² + y²))."""
    if y.dtype.kind == "c":
        with np.errstate(all="ignore"):
            return (-1j * np.log((x + 1j * y) / np.sqrt(x * x + y * y))).astype(y.dtype)
    return _float_op(np.arctan2)(y, x)


# ---------------------------------------------------------------- unary
def _round_afz(x):
    t = np.trunc(x)
    frac = x - t  # exact in binary floating point
    r = t + np.where(np.abs(frac) >= 0.5, np.sign(x), 0).astype(x.dtype)
    return np.copysign(r, x)


_LIBM: list = []


def _libm_log(dtype: np.dtype):
    """glibc's logf/log, called with a value's exact bits (no Python float conversion, which FTZ would flush)."""
    import ctypes
    import ctypes.util

    if not _LIBM:
        _LIBM.append(ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6"))
    lib = _LIBM[0]
    if dtype == np.float32:
        fn, cty = lib.logf, ctypes.c_float
    else:
        fn, cty = lib.log, ctypes.c_double
    fn.restype, fn.argtypes = cty, [cty]
    return lambda v: np.frombuffer(cty(fn(cty.from_buffer_copy(v.tobytes()))), dtype)[0]


def _log(x):
    """std::log as XLA's evaluator binds it in TF's binary, run under DAZ (TF's compile thread).

    f32 is ``logf@GLIBC_2.27`` (glibc's current logf, no wrapper): a negative denormal is NaN, decided on the
    bits, and a positive denormal is glibc's k*ln2 + log(z) of the zeroed bits (about -103.97), where numpy's
    log sees 0 and gives -inf; such denormals go to libm itself. f64 is ``log@GLIBC_2.2.5``, the SVID compat
    wrapper (``__log_compat``): it tests ``x <= 0`` and ``x == 0`` as float compares first, which DAZ makes
    true for a denormal of either sign, so every f64 denormal is -inf (as numpy's log of ±0)."""
    with np.errstate(all="ignore"):
        r = np.log(x)
    if np.iscomplexobj(x):   # complex log: (log|z|, arg z)
        return r
    width = x.dtype.itemsize * 8
    x = np.array(x, copy=True)  # contiguous, 0-d kept (ascontiguousarray would make it 1-d)
    bits = x.view(_UNSIGNED[width])
    magnitude = bits & ~np.array(1 << (width - 1), bits.dtype)
    if x.dtype == np.float64:
        tiny = np.array(np.finfo(x.dtype).tiny, x.dtype).view(_UNSIGNED[width])
        return np.where(magnitude < tiny, np.array(-np.inf, x.dtype), r)
    r = np.where(np.signbit(x) & (magnitude != 0), np.array(np.nan, x.dtype), r)
    tiny_bits = np.array(np.finfo(x.dtype).tiny, x.dtype).view(_UNSIGNED[width])
    denormal = (magnitude != 0) & (magnitude < tiny_bits) & ~np.signbit(x)
    if denormal.any() and x.dtype in (np.float32, np.float64):
        log = _libm_log(x.dtype)
        r = np.array(r, copy=True)
        flat_r, flat_x = r.reshape(-1), x.reshape(-1)
        for k in np.flatnonzero(denormal.reshape(-1)):
            flat_r[k] = log(flat_x[k:k + 1])
    return r


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64)).astype(x.dtype)


def _sign(x: np.ndarray) -> np.ndarray:
    et = _et(x)
    if et.is_complex:
        mag = np.abs(x)
        return np.where(mag == 0, 0, x / np.where(mag == 0, 1, mag)).astype(x.dtype)
    if et.is_float:
        y = _up(x)
        return np.where(np.isnan(y), y, np.copysign((y != 0).astype(y.dtype), y)).astype(x.dtype)
    return np.sign(x).astype(x.dtype)


def _popcnt(x: np.ndarray) -> np.ndarray:
    return np.bitwise_count(_unsigned_view(x)).astype(x.dtype)


def _clz(x: np.ndarray) -> np.ndarray:
    width = x.dtype.itemsize * 8
    y = _unsigned_view(x).astype(np.uint64)
    length = np.zeros(x.shape, dtype=np.int64)
    for s in (32, 16, 8, 4, 2, 1):
        t = y >> np.uint64(s)
        nz = t != 0
        length += nz * s
        y = np.where(nz, t, y)
    length += (y != 0)
    return (width - length).astype(x.dtype)


def _not(x):
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


def _abs(x):
    et = _et(x)
    if et.is_complex:
        # TV HandleAbs: std::abs, i.e. C's cabs = hypot(re, im) (an infinite part wins over NaN:
        # |(-inf, NaN)| = inf). XLA:CPU's compiled abs is another form (max·sqrt(1 + (min/max)²), NaN
        # winning: codegen/complex_ops.py); each side follows its XLA counterpart.
        with np.errstate(all="ignore"):
            return np.hypot(np.real(x), np.imag(x)).astype(et.component_type.dtype)
    if et.is_unsigned_int:
        return x.copy()
    return np.abs(x)  # wraps for INT_MIN like std::abs in two's complement


def _real(x):
    et = _et(x)
    return np.real(x).astype(et.component_type.dtype).copy()


def _imag(x):
    et = _et(x)
    return np.imag(x).astype(et.component_type.dtype) if et.is_complex else np.zeros_like(x)


UNARY = {
    O.ABS: _abs,
    O.NEGATE: lambda x: np.negative(x) if x.dtype != np.bool_ else x.copy(),
    O.SIGN: _sign,
    O.NOT: _not,
    O.POPCNT: _popcnt,
    O.CLZ: _clz,
    O.COPY: lambda x: x.copy(),
    O.IS_FINITE: lambda x: np.isfinite(_up(x)),
    O.REAL: _real,
    O.IMAG: _imag,
    O.EXP: _float_op(np.exp),
    O.EXPM1: _float_op(np.expm1),
    O.LOG: _float_op(_log),
    O.LOG1P: _float_op(np.log1p),
    O.SQRT: _float_op(np.sqrt),
    O.RSQRT: _float_op(lambda x: 1 / np.sqrt(x)),
    O.CBRT: _float_op(np.cbrt),
    O.SIN: _float_op(np.sin),
    O.COS: _float_op(np.cos),
    O.TAN: _float_op(np.tan),
    O.TANH: _float_op(np.tanh),
    O.LOGISTIC: _float_op(lambda x: 1 / (1 + np.exp(-x))),
    O.FLOOR: _float_op(np.floor),
    O.CEIL: _float_op(np.ceil),
    O.ROUND_NEAREST_EVEN: _float_op(np.rint),
    O.ROUND_NEAREST_AFZ: _float_op(_round_afz),
    O.ERF: _float_op(_erf),
}


# ---------------------------------------------------------------- binary
def _int_divide(a, b):
    signed = np.issubdtype(a.dtype, np.signedinteger)
    zero = b == 0
    special = zero.copy()
    if signed:
        special |= (a == np.iinfo(a.dtype).min) & (b == -1)
    safe_b = np.where(special, 1, b).astype(a.dtype)
    q = a // safe_b
    if signed:  # floor -> truncation toward zero
        q = q + ((a % safe_b != 0) & ((a < 0) != (safe_b < 0))).astype(a.dtype)
    on_zero = np.array(-1, dtype=np.int64).astype(a.dtype) if signed else np.iinfo(a.dtype).max
    return np.where(zero, on_zero, q).astype(a.dtype)


def _int_remainder(a, b):
    signed = np.issubdtype(a.dtype, np.signedinteger)
    zero = b == 0
    special = zero.copy()
    if signed:
        special |= (a == np.iinfo(a.dtype).min) & (b == -1)
    safe_b = np.where(special, 1, b).astype(a.dtype)
    r = np.fmod(a, safe_b)
    return np.where(zero, a, r).astype(a.dtype)


def _arith(float_fn, int_fn=None, pred_fn=None):
    def apply(a, b):
        et = _et(a)
        if et.is_pred:
            return (pred_fn or float_fn)(a, b).astype(np.bool_)
        if et.is_integral:
            return (int_fn or float_fn)(a, b).astype(a.dtype)
        return _float_op(float_fn)(a, b)
    return apply


def _ipow(a, b):
    """Integer power by squaring with wrap-around; negative exponents give (a == 1)."""
    ua = a.astype(np.uint64)
    e = np.where(b < 0, 0, b).astype(np.uint64)
    result = np.ones(np.broadcast(a, b).shape, dtype=np.uint64)
    base = np.broadcast_to(ua, result.shape).copy()
    while np.any(e):
        odd = (e & np.uint64(1)) != 0
        result = np.where(odd, result * base, result)
        base = base * base
        e = e >> np.uint64(1)
    out = result.astype(a.dtype)
    if np.issubdtype(a.dtype, np.signedinteger):
        out = np.where(b < 0, (a == 1).astype(a.dtype), out)
    return np.where((a == 1) | (b == 0), np.ones_like(out), out).astype(a.dtype)


def _power(a, b):
    et = _et(a)
    if et.is_pred:
        return a | ~b
    if et.is_integral:
        return _ipow(a, b)
    r = _float_op(np.power)(a, b)
    return np.where((a == 1) | (b == 0), np.ones_like(r), r).astype(a.dtype)


def _shift(kind: str):
    def apply(a, b):
        width = a.dtype.itemsize * 8
        ua, amount = _unsigned_view(a), _unsigned_view(b).astype(np.uint64)
        out_of_range = amount >= width
        safe = np.where(out_of_range, 0, amount).astype(ua.dtype)
        if kind == "left":
            r = np.where(out_of_range, 0, ua << safe).astype(ua.dtype)
        elif kind == "logical":
            r = np.where(out_of_range, 0, ua >> safe).astype(ua.dtype)
        else:
            sa = ua.view(_SIGNED[width])
            fill = np.where(sa < 0, -1, 0).astype(sa.dtype)
            r = np.where(out_of_range, fill, sa >> safe.astype(sa.dtype)).astype(sa.dtype)
        return r.view(a.dtype)
    return apply


def _maxmin(is_max: bool):
    """std::max / std::min after the NaN checks of TV HandleMaximum: max(-0, +0) is the lhs (-0)."""
    def apply(a, b):
        et = _et(a)
        if et.is_complex:
            raise UnimplementedError("maximum/minimum are not defined for complex numbers")
        x, y = _up(a), _up(b)
        take_b = (x < y) if is_max else (y < x)
        r = np.where(take_b, y, x)
        if et.is_float:
            r = np.where(np.isnan(y), y, r)
            r = np.where(np.isnan(x), x, r)
        return np.asarray(r).astype(a.dtype)
    return apply


def complex_divide(a, b):
    """XLA's complex division (codegen/complex_ops.py's, after ElementalIrEmitter): Smith's algorithm on the
    parts, then the zero-denominator, infinite-numerator and infinite-denominator fix-ups where both parts
    came out NaN. numpy's own complex division rounds differently, which FloorDiv's exactness test sees."""
    ar, ai, br, bi = np.real(a), np.imag(a), np.real(b), np.imag(b)
    ar, ai, br, bi = np.broadcast_arrays(ar, ai, br, bi)
    one, zero, inf = (np.asarray(v, ar.dtype) for v in (1.0, 0.0, np.inf))
    with np.errstate(all="ignore"):
        r_over_i = br / bi
        r_den = bi + r_over_i * br
        i_over_r = bi / br
        i_den = br + i_over_r * bi
        use_r = np.abs(br) < np.abs(bi)
        cr = np.where(use_r, (r_over_i * ar + ai) / r_den, (i_over_r * ai + ar) / i_den)
        ci = np.where(use_r, (r_over_i * ai - ar) / r_den, (ai - i_over_r * ar) / i_den)
        zero_den = (np.abs(br) == 0) & (np.abs(bi) == 0) & ~(np.isnan(ar) & np.isnan(ai))
        sinf = np.copysign(inf, br)
        z1 = (sinf * ar, sinf * ai)
        ar_inf, ai_inf = np.abs(ar) == inf, np.abs(ai) == inf
        inf_num = (ar_inf | ai_inf) & np.isfinite(br) & np.isfinite(bi)
        sar, sai = np.copysign(np.where(ar_inf, one, zero), ar), np.copysign(np.where(ai_inf, one, zero), ai)
        z2 = (inf * (sar * br + sai * bi), inf * (sai * br - sar * bi))
        br_inf, bi_inf = np.abs(br) == inf, np.abs(bi) == inf
        inf_den = (br_inf | bi_inf) & np.isfinite(ar) & np.isfinite(ai)
        sbr, sbi = np.copysign(np.where(br_inf, one, zero), br), np.copysign(np.where(bi_inf, one, zero), bi)
        z3 = (zero * (ar * sbr + ai * sbi), zero * (ai * sbr - ar * sbi))
        both_nan = np.isnan(cr) & np.isnan(ci)
        fixed = [np.where(zero_den, z1[k], np.where(inf_num, z2[k], np.where(inf_den, z3[k], c)))
                 for k, c in enumerate((cr, ci))]
        re, im = np.where(both_nan, fixed[0], cr), np.where(both_nan, fixed[1], ci)
    return complex_from_parts(np.asarray(re, ar.dtype), np.asarray(im, ar.dtype))


def _divide(a, b):
    return complex_divide(a, b) if np.iscomplexobj(a) else _arith(np.divide, _int_divide)(a, b)


def complex_multiply(a, b):
    """XLA's evaluator multiplies ``std::complex`` values, which the compiler emits as the textbook
    product (numpy's, here) with C's Annex G recovery (``__mulsc3``/``__muldc3``) where both parts came out NaN: an infinite
    operand is boxed to (±1 or ±0) parts, NaN parts of the other become ±0, and the product is recomputed
    times inf — so (inf+inf·i)·(NaN+inf·i) is (-inf, inf) where numpy's product is (NaN, NaN)."""
    a, b = np.broadcast_arrays(a, b)
    with np.errstate(all="ignore"):
        # part by part: numpy's complex multiply may fuse a product into the other's add (its SIMD loops use
        # FMAs: (max+max·i)·(-2.07+1.49i) came out (-inf, -inf), XLA's (-inf, NaN); fuzz seed 318001896)
        pr, pi, qr, qi = np.real(a), np.imag(a), np.real(b), np.imag(b)
        product = complex_from_parts(pr * qr - pi * qi, pr * qi + pi * qr) if np.iscomplexobj(a) \
            else np.multiply(a, b)
        both_nan = np.isnan(product.real) & np.isnan(product.imag)
        if both_nan.any():
            ar, ai, br, bi = (np.array(v) for v in (np.real(a), np.imag(a), np.real(b), np.imag(b)))
            ac, bd, ad, bc = ar * br, ai * bi, ar * bi, ai * br
            one, zero = np.asarray(1, ar.dtype), np.asarray(0, ar.dtype)

            def box(x, y):   # an infinite operand's parts as ±1 (infinite) and ±0 (finite or NaN)
                return (np.copysign(np.where(np.isinf(x), one, zero), x),
                        np.copysign(np.where(np.isinf(y), one, zero), y))

            def zero_nan(x):
                return np.where(np.isnan(x), np.copysign(zero, x), x)
            inf_a, inf_b = np.isinf(ar) | np.isinf(ai), np.isinf(br) | np.isinf(bi)
            xr, xi = np.where(inf_a, box(ar, ai), (ar, ai))
            yr, yi = np.where(inf_a, (zero_nan(br), zero_nan(bi)), (br, bi))
            yr, yi = np.where(inf_b, box(yr, yi), (yr, yi))
            xr, xi = np.where(inf_b, (zero_nan(xr), zero_nan(xi)), (xr, xi))
            overflow = ~inf_a & ~inf_b & (np.isinf(ac) | np.isinf(bd) | np.isinf(ad) | np.isinf(bc))
            xr, xi, yr, yi = (np.where(overflow, zero_nan(v), v) for v in (xr, xi, yr, yi))
            recalc = both_nan & (inf_a | inf_b | overflow)
            inf = np.asarray(np.inf, ar.dtype)
            re = np.where(recalc, inf * (xr * yr - xi * yi), product.real)
            im = np.where(recalc, inf * (xr * yi + xi * yr), product.imag)
            product = complex_from_parts(np.asarray(re, ar.dtype), np.asarray(im, ar.dtype))
    return product


def _multiply(a, b):
    return complex_multiply(a, b) if np.iscomplexobj(a) else _arith(np.multiply, pred_fn=np.logical_and)(a, b)


def complex_from_parts(a, b, dtype=None) -> np.ndarray:
    """The complex array of parts ``a`` and ``b`` (``dtype``: default by ``a``'s precision), stored part by part:
    ``a + 1j * b`` would make (-inf, NaN) NaN + NaN·i and, under DAZ, flush a denormal real part."""
    a, b = np.asarray(a), np.asarray(b)
    if dtype is None:
        dtype = np.complex64 if a.dtype == np.float32 else np.complex128
    out = np.empty(np.broadcast_shapes(a.shape, b.shape), dtype=dtype)
    out.real, out.imag = a, b
    return out


BINARY = {
    O.ADD: _arith(np.add, pred_fn=np.logical_or),
    O.SUBTRACT: _arith(np.subtract, pred_fn=np.logical_xor),
    O.MULTIPLY: _multiply,
    O.DIVIDE: _divide,
    O.REMAINDER: _arith(np.fmod, _int_remainder),
    O.MAXIMUM: _maxmin(True),
    O.MINIMUM: _maxmin(False),
    O.POWER: _power,
    O.ATAN2: _atan2,
    O.AND: np.bitwise_and,
    O.OR: np.bitwise_or,
    O.XOR: np.bitwise_xor,
    O.SHIFT_LEFT: _shift("left"),
    O.SHIFT_RIGHT_LOGICAL: _shift("logical"),
    O.SHIFT_RIGHT_ARITHMETIC: _shift("arithmetic"),
    O.COMPLEX: complex_from_parts,
}


# ---------------------------------------------------------------- compare
_COMPARE = {
    ComparisonDirection.EQ: np.equal, ComparisonDirection.NE: np.not_equal,
    ComparisonDirection.LT: np.less, ComparisonDirection.LE: np.less_equal,
    ComparisonDirection.GT: np.greater, ComparisonDirection.GE: np.greater_equal,
}


def total_order_key(x: np.ndarray) -> np.ndarray:
    """Signed integers ordered like XLA's total order on floats (sign-magnitude -> two's complement)."""
    width = x.dtype.itemsize * 8
    s = x.view(_SIGNED[width])
    return s ^ ((s >> (width - 1)) & np.array(np.iinfo(_SIGNED[width]).max, dtype=s.dtype))


def compare(a, b, direction: ComparisonDirection, ctype: ComparisonType | None) -> np.ndarray:
    et = _et(a)
    ctype = ctype or default_comparison_type(et)
    if et.is_complex and direction not in (ComparisonDirection.EQ, ComparisonDirection.NE):
        # XLA:CPU's fusion emitters (mhlo's scalar compare) order complex numbers lexicographically:
        # the real parts decide unless they are equal (ordered), then the imaginary parts do.
        cmp = _COMPARE[direction]
        return np.where(np.real(a) == np.real(b), cmp(np.imag(a), np.imag(b)), cmp(np.real(a), np.real(b)))
    if ctype is ComparisonType.TOTALORDER and et.is_float:
        a, b = total_order_key(a), total_order_key(b)
    elif ctype is ComparisonType.UNSIGNED and et.is_signed_int:
        a, b = _unsigned_view(a), _unsigned_view(b)
    elif ctype is ComparisonType.SIGNED and et.is_unsigned_int:
        a, b = a.view(_SIGNED[a.dtype.itemsize * 8]), b.view(_SIGNED[b.dtype.itemsize * 8])
    else:
        a, b = _up(a), _up(b)
    return _COMPARE[direction](a, b)


# ---------------------------------------------------------------- select, clamp, conversions
def select(p, a, b):
    return np.where(p, a, b).astype(a.dtype)


def clamp(lo, x, hi):
    et = _et(x)
    if et.is_complex:
        raise UnimplementedError("clamp is not defined for complex numbers")
    lo, hi = np.broadcast_to(lo, x.shape), np.broadcast_to(hi, x.shape)
    r = np.minimum(hi, np.maximum(x, lo)) if et.is_integral or et.is_pred else None
    if r is None:
        lo_u, x_u, hi_u = _up(lo), _up(x), _up(hi)
        # std::min(high, std::max(value, low)) as compares, not numpy's maximum/minimum (whose SIMD form returns
        # the second operand on ties): value wins ties with low, high wins ties with the max — under DAZ a
        # -denormal value "ties" 0 and stays (TF's XLA: a folded bf16 relu6 of a -denormal constant).
        m = np.where(x_u < lo_u, lo_u, x_u)
        r = np.where(m < hi_u, m, hi_u)
        # NaN priority: low, then operand, then high (TV HandleClamp).
        r = np.where(np.isnan(hi_u), hi_u, r)
        r = np.where(np.isnan(x_u), x_u, r)
        r = np.where(np.isnan(lo_u), lo_u, r)
    return np.asarray(r).astype(x.dtype)


def convert(x: np.ndarray, to: T) -> np.ndarray:
    src = _et(x)
    if src is to:
        return x.copy()
    if to.is_pred:
        return x != 0
    if src.is_float and to.is_integral:
        info = np.iinfo(to.dtype)
        y = x.astype(np.float64)
        # The bounds as the source type rounds them (static_cast<NativeSrcT>(max) in literal.cc).
        hi = float(np.asarray(info.max).astype(x.dtype))
        lo = float(np.asarray(info.min).astype(x.dtype))
        inside = (y > lo) & (y < hi)  # False for NaN
        res = np.where(inside, np.trunc(np.where(inside, y, 0)), 0).astype(to.dtype)
        res[y >= hi] = info.max
        res[y <= lo] = info.min
        return res
    if src.is_complex and not to.is_complex:
        raise UnimplementedError(f"converting from {src.value} to {to.value} is not implemented")
    if to in _HALF and not (src in _HALF):
        return x.astype(np.float32).astype(to.dtype)  # Eigen half/bfloat16 construct via float
    return x.astype(to.dtype)


def bitcast_convert(x: np.ndarray, to: T, out_dims) -> np.ndarray:
    return np.ascontiguousarray(x).view(to.dtype).reshape(out_dims).copy()


def reduce_precision(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    et = _et(x)
    width = et.bit_width
    U = _UNSIGNED[width]
    src_m, src_e = et.mantissa_bits, et.exponent_bits
    v = x.view(U).astype(np.uint64)
    mask = np.uint64((1 << width) - 1)
    if mantissa_bits < src_m:
        shift = src_m - mantissa_bits
        last_bit = np.uint64(1 << shift)
        bias = np.uint64((1 << (shift - 1)) - 1)
        x_last = (v & last_bit) >> np.uint64(shift)
        v = ((v + x_last + bias) & mask) & np.uint64(~((1 << shift) - 1) & ((1 << width) - 1))
    if exponent_bits < src_e:
        sign_mask = np.uint64(1 << (width - 1))
        exp_mask = np.uint64(((1 << src_e) - 1) << src_m)
        bias = (1 << (src_e - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        max_exp = np.uint64((bias + reduced_bias) << src_m)
        min_exp = np.uint64((bias - reduced_bias) << src_m)
        x_exp = v & exp_mask
        signed_zero = v & sign_mask
        v = np.where(x_exp > max_exp, signed_zero | exp_mask, v)
        v = np.where(x_exp <= min_exp, signed_zero, v)
    out = v.astype(U).view(x.dtype).reshape(x.shape)
    nan = np.isnan(_up(x))
    if mantissa_bits > 0:
        return np.where(nan, x, out).astype(x.dtype)
    return np.where(nan, np.array(np.inf, dtype=x.dtype), out).astype(x.dtype)


def minmax_at(is_max: bool, out, index, values, update_first: bool = False) -> None:
    """``np.maximum.at``/``np.minimum.at`` with the evaluator's max/min (XLA's ``std::max(lhs, rhs)`` after
    its NaN checks: a NaN lhs wins, then a NaN rhs; a tie keeps the lhs). Scatter's lhs is the current value
    (under DAZ 0 against a -denormal is a tie that keeps it: seed 104000799), select-and-scatter's the update
    (``update_first``). Comparisons, not numpy's max/min ufuncs, so a denormal's bits are kept where x86
    max/min under DAZ return ±0. Updates to one element apply in index order, in rounds of at most one
    update per element."""
    combine = BINARY[O.MAXIMUM if is_max else O.MINIMUM]
    flat = np.ravel_multi_index(tuple(np.broadcast_to(i, values.shape) for i in index), out.shape).reshape(-1)
    vals = values.reshape(-1)
    order = np.argsort(flat, kind="stable")
    sorted_t = flat[order]
    first = np.searchsorted(sorted_t, sorted_t, side="left")
    occurrence = np.empty_like(order)
    occurrence[order] = np.arange(order.size) - first
    view = out.reshape(-1)
    for r in range(int(occurrence.max(initial=-1)) + 1):
        sel = occurrence == r
        t = flat[sel]
        view[t] = combine(vals[sel], view[t]) if update_first else combine(view[t], vals[sel])
