"""Stage: codegen — value-level semantics of HLO ops on complex numbers (c64, c128), after XLA's
ElementalIrEmitter (EmitComplexUnaryOp / EmitComplexBinaryOp).

A complex register value is an LLVM ``{float, float}`` / ``{double, double}`` struct (real part first),
the same layout as numpy's complex64/complex128 in memory, so buffers load and store whole elements.
The component arithmetic goes through :class:`~tfxla_cluster.codegen.scalar_ops.ScalarOps` on f32/f64,
so exp/log/sin/cos/atan2/pow are the same code as for real types. The formulas and corner cases are
XLA's: textbook add/sub/mul; Smith's division with the zero-denominator, infinite-numerator and
infinite-denominator fix-ups; abs as max·sqrt(1 + (min/max)²) (NaN → min); sign = z/(|z|, 0) by that
division (0 at 0); exp = eᵃ(cos b, sin b) (e^(a/2) twice where eᵃ overflows) with +0 imaginary part for a real
argument, expm1 with Cephes' cosm1, both as MLIR's complex-to-standard lowering; log = (log|z|, atan2(b, a)); sqrt through the polar form with XLA's inf/NaN
cases, rsqrt likewise; sin/cos through sinh/cosh, tanh/tan from expm1s with XLA's limits, expm1 and
log1p in their accurate forms; power in polar form with Kahan's special cases; compare EQ (ordered on
both parts), NE (unordered on either) and LT/LE/GT/GE lexicographic on (re, im) (ordered). Other
opcodes on complex values (atan2, remainder, ...) are an UnimplementedError naming the opcode.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.hlo.attrs import ComparisonDirection as D
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T


def component(et: T) -> T:
    """The real type of a complex type's parts."""
    return T.F32 if et is T.C64 else T.F64


def parts(b: ir.IRBuilder, v) -> tuple:
    """The (real, imaginary) parts of ``v``; of a value :func:`compose` made, the parts it was made of (as
    LLVM folds extractvalue of insertvalue), so a constant part is still seen as a constant."""
    if isinstance(v, ir.InsertValue) and v.indices == [1] and isinstance(v.aggregate, ir.InsertValue) \
            and v.aggregate.indices == [0]:
        return v.aggregate.value, v.value
    return b.extract_value(v, 0), b.extract_value(v, 1)


def compose(b: ir.IRBuilder, re, im):
    ty = ir.LiteralStructType([re.type, re.type])
    return b.insert_value(b.insert_value(ir.Constant(ty, ir.Undefined), re, 0), im, 1)


class _Parts:
    """Component arithmetic on one builder (f32 or f64 values), with ScalarOps's flags and functions."""

    def __init__(self, s, et: T) -> None:
        self.s, self.b, self.et = s, s.b, component(et)

    def c(self, v: float):
        return t.float_constant(t.value_type(self.et), v)

    def add(self, x, y):
        return self.s.fadd(x, y)

    def sub(self, x, y):
        return self.s.fsub(x, y)

    def mul(self, x, y):
        return self.s.fmul(x, y)

    def div(self, x, y):
        return self.s.fdiv(x, y)

    def fma(self, x, y, z):
        """x·y + z rounded once, as LLVM contracts a product with its one use (XLA allows FP-op fusion):
        spelled out where LLVM's SLP vectoriser would otherwise share the product between an add and a sub
        and keep it rounded."""
        return self.s.call_intrinsic("fma", x, y, z) if self.s.has_fma else self.s.fadd(self.s.fmul(x, y), z)

    def neg(self, x):
        return self.b.fneg(x)

    def fabs(self, x):
        return self.s.fabs(x)

    def copysign(self, x, y):
        return self.s.call_intrinsic("copysign", x, y)

    def unary(self, op: O, x):
        return self.s.unary(op, self.et, x)

    def atan2(self, y, x):
        return self.s.binary(O.ATAN2, self.et, y, x)

    def pow(self, x, y):
        return self.s.binary(O.POWER, self.et, x, y)

    def oeq(self, x, y):
        return self.b.fcmp_ordered("==", x, y)

    def one(self, x, y):
        return self.b.fcmp_ordered("!=", x, y)

    def olt(self, x, y):
        return self.b.fcmp_ordered("<", x, y)

    def uno(self, x, y):
        return self.b.fcmp_unordered("uno", x, y)

    def sel(self, p, x, y):
        return self.b.select(p, x, y)

    def max_min(self, x, y, x_constant: bool, y_constant: bool) -> tuple:
        """(max, min) of ``x`` and ``y`` (XLA's lhs-first fast forms). TF's XLA emits its fused loops
        through MLIR, whose canonicalizer moves a constant operand of the commutative maximumf/minimumf
        to the rhs — which decides the NaN the fast forms keep (|complex(2, NaN)| is NaN there, and
        |complex(x, NaN)| is |x| for an argument x)."""
        if x_constant and not y_constant:
            x, y = y, x
        return self.s.binary(O.MAXIMUM, self.et, x, y), self.s.binary(O.MINIMUM, self.et, x, y)


# ---------------------------------------------------------------- unary
def _abs_parts(p: _Parts, re, im, root: bool):
    """(min, max, sqrt(1 + (min/max)^2) or 1 + (min/max)^2) of |re|, |im| (XLA's EmitComplexAbsHelper)."""
    ar, ai = p.fabs(re), p.fabs(im)
    mx, mn = p.max_min(ar, ai, isinstance(re, ir.Constant), isinstance(im, ir.Constant))
    q = p.div(mn, mx)
    one_plus = p.add(p.c(1.0), p.mul(q, q))
    return mn, mx, (p.unary(O.SQRT, one_plus) if root else one_plus)


def _abs(p: _Parts, re, im):
    mn, mx, root = _abs_parts(p, re, im, True)
    r = p.mul(mx, root)
    return p.sel(p.uno(r, r), mn, r)   # (0, 0), (inf, inf) and NaN parts give min


def _sqrt_abs(p: _Parts, re, im):
    """sqrt(|z|) as sqrt(max) · (1 + (min/max)^2)^0.25, so it cannot overflow where |z| would."""
    mn, mx, one_plus = _abs_parts(p, re, im, False)
    r = p.mul(p.unary(O.SQRT, mx), p.pow(one_plus, p.c(0.25)))
    return p.sel(p.uno(r, r), mn, r)


def _sqrt(p: _Parts, re, im):
    b = p.b
    r = _sqrt_abs(p, re, im)
    angle = p.mul(p.atan2(im, re), p.c(0.5))
    cos, sin = p.unary(O.COS, angle), p.unary(O.SIN, angle)
    inf, zero = p.c(float("inf")), p.c(0.0)
    abs_im = p.fabs(im)
    im_inf = p.oeq(abs_im, inf)
    real = p.sel(b.or_(im_inf, p.oeq(re, inf)), inf,
                 p.sel(b.and_(p.oeq(re, p.c(float("-inf"))), p.one(abs_im, inf)), zero, p.mul(r, cos)))
    imag = p.sel(b.or_(im_inf, p.oeq(re, p.c(float("-inf")))), p.copysign(inf, im),
                 p.sel(p.uno(r, r), p.c(float("nan")), p.sel(p.oeq(sin, zero), zero, p.mul(r, sin))))
    at_zero = p.oeq(r, zero)
    return p.sel(at_zero, zero, real), p.sel(at_zero, zero, imag)


def _log(p: _Parts, re, im):
    return p.unary(O.LOG, _abs(p, re, im)), p.atan2(im, re)


def _exp(p: _Parts, re, im):
    """eᵃ(cos b, sin b) as MLIR's complex-to-standard lowering (XLA:CPU's fusion emitter): where eᵃ
    overflows, (e^(a/2)·cos b)·e^(a/2) instead; the imaginary part of a real argument stays +0. The selects
    also keep a following fadd from contracting with these fmuls (as in TF's XLA)."""
    e = p.unary(O.EXP, re)
    e_half = p.unary(O.EXP, p.mul(re, p.c(0.5)))
    cos, sin = p.unary(O.COS, im), p.unary(O.SIN, im)
    zero = p.c(0.0)
    overflow = p.oeq(e, p.c(float("inf")))
    real = p.sel(overflow, p.mul(p.mul(e_half, cos), e_half), p.mul(e, cos))
    imag = p.sel(overflow, p.mul(p.mul(e_half, sin), e_half), p.mul(e, sin))
    return real, p.sel(p.oeq(im, zero), zero, imag)


def _sign(p: _Parts, re, im):
    """z / |z| as a complex division by (|z|, 0) (so sign(inf + 0i) is NaN + NaN·i, as TF's XLA); 0 at 0."""
    a = _abs(p, re, im)
    zero = p.c(0.0)
    at_zero = p.oeq(a, zero)
    qr, qi = _divide(p, re, im, a, zero)
    return p.sel(at_zero, zero, qr), p.sel(at_zero, zero, qi)


def _rsqrt(p: _Parts, re, im):
    """rsqrt(|z|)·(cos(-t/2), sin(-t/2)), t = atan2(im, re), with XLA's zero/inf/NaN cases; rsqrt(|z|) as
    XLA's sqrt(rsqrt(1 + (min/max)²))·rsqrt(max)."""
    b = p.b
    mn, mx, one_plus = _abs_parts(p, re, im, False)
    rs = lambda v: p.unary(O.RSQRT, v)  # noqa: E731
    r = p.mul(p.unary(O.SQRT, rs(one_plus)), rs(mx))
    r = p.sel(p.uno(r, r), rs(mn), r)
    angle = p.mul(p.atan2(im, re), p.c(-0.5))
    cos, sin = p.unary(O.COS, angle), p.unary(O.SIN, angle)
    zero, inf = p.c(0.0), p.c(float("inf"))
    at_zero = b.and_(p.oeq(im, zero), p.oeq(re, zero))
    edge = b.or_(b.and_(p.oeq(p.fabs(im), inf), p.uno(re, re)), p.oeq(p.fabs(re), inf))
    real = p.sel(at_zero, inf, p.sel(edge, p.copysign(zero, re), p.mul(r, cos)))
    imag = p.sel(at_zero, p.c(float("nan")), p.sel(edge, p.mul(p.copysign(zero, im), p.c(-1.0)), p.mul(r, sin)))
    return real, imag


def _sin_cos(p: _Parts, re, im, sin: bool):
    """sin(x+iy) = (sin x cosh y, cos x sinh y), cos(x+iy) = (cos x cosh y, sin x·(-sinh y)), with XLA's
    e^-y/2 - e^y/2 for -sinh y (so cos of a real z has a +0 imaginary part, not -0)."""
    e = p.unary(O.EXP, im)
    h, hn = p.mul(p.c(0.5), e), p.div(p.c(0.5), e)
    sx, cx = p.unary(O.SIN, re), p.unary(O.COS, re)
    if sin:
        return p.mul(sx, p.add(h, hn)), p.mul(cx, p.sub(h, hn))
    return p.mul(cx, p.add(hn, h)), p.mul(sx, p.sub(hn, h))


def _tanh(p: _Parts, re, im, tan: bool = False):
    """tanh(a+bi) = (e^2a - e^-2a, 2 sin 2b) / (e^2a + e^-2a + 2 cos 2b) from expm1s, with the limits and
    corner cases of XLA's emitter; tan(x+yi) = -i·tanh(-y + xi)."""
    b = p.b
    a, bb = (p.neg(im), re) if tan else (re, im)
    two_a = p.add(a, a)
    em_pos, em_neg = p.unary(O.EXPM1, two_a), p.unary(O.EXPM1, p.neg(two_a))
    real_num = p.sub(em_pos, em_neg)
    cb, sb = p.unary(O.COS, bb), p.unary(O.SIN, bb)
    four = p.c(4.0)
    imag_num = p.mul(four, p.mul(cb, sb))
    sum_m2 = p.add(em_pos, em_neg)
    denom = p.add(sum_m2, p.mul(p.mul(cb, cb), four))
    inf, zero = p.c(float("inf")), p.c(0.0)
    real = p.sel(p.oeq(sum_m2, inf), p.copysign(p.c(1.0), a), p.div(real_num, denom))
    imag = p.div(imag_num, denom)
    a_inf = p.oeq(p.fabs(a), inf)
    sin2b_nan = p.uno(imag_num, imag_num)
    real = p.sel(b.and_(sin2b_nan, b.not_(a_inf)), p.c(float("nan")), real)
    imag = p.sel(b.or_(p.oeq(bb, zero), b.and_(a_inf, sin2b_nan)), zero, imag)
    return (imag, p.neg(real)) if tan else (real, imag)


# Cephes' cosm1 polynomial in x² (descending), as MLIR's complex-to-standard expm1 evaluates it.
_COSM1 = (4.7377507964246204691685e-14, -1.1470284843425359765671e-11, 2.0876754287081521758361e-9,
          -2.7557319214999787979814e-7, 2.4801587301570552304991e-5, -1.3888888888888872993737e-3,
          4.1666666666666666609054e-2)


def _cosm1(p: _Parts, x):
    """cos(x) - 1: ``x⁴·P(x²) - x²/2`` (Horner steps as explicit FMAs) while x² < 0.61685 ≈ (π/4)², else
    ``cos(x) + (-1)``."""
    x2 = p.mul(x, x)
    x4 = p.mul(x2, x2)
    poly = p.c(_COSM1[0])
    for c in _COSM1[1:]:
        poly = p.s.call_intrinsic("fma", poly, x2, p.c(c))
    small = p.s.mul_add(x4, poly, p.mul(p.c(-0.5), x2))
    large = p.add(p.unary(O.COS, x), p.c(-1.0))
    return p.sel(p.b.fcmp_ordered(">=", x2, p.c(0.61685)), large, small)


def _expm1(p: _Parts, re, im):
    """(expm1(a)·cos b + cosm1(b), e^a sin b) with Cephes' cosm1 (MLIR's complex-to-standard lowering, which
    XLA:CPU's fusion emitter uses; the fmul feeding the fadd contracted to an FMA as XLA's backend does)."""
    zero, one = p.c(0.0), p.c(1.0)
    em = p.unary(O.EXPM1, re)
    cosm1 = _cosm1(p, im)
    real = p.s.mul_add(em, p.add(cosm1, one), cosm1)
    imag = p.sel(p.oeq(im, zero), zero, p.mul(p.add(em, one), p.unary(O.SIN, im)))
    return real, imag


def _log1p(p: _Parts, re, im):
    """(log1p of max(|a+1|, |b|) - 1 [a when a+1 > |b|] + ½ log1p((min/max)²), atan2(b, a+1))."""
    one = p.c(1.0)
    a1 = p.add(re, one)
    abs_a1, abs_b = p.fabs(a1), p.fabs(im)
    mx, mn = p.max_min(abs_a1, abs_b, isinstance(re, ir.Constant), isinstance(im, ir.Constant))
    mx_m1 = p.sel(p.b.fcmp_ordered(">", a1, abs_b), re, p.sub(mx, one))
    q = p.div(mn, mx)
    r = p.add(p.mul(p.c(0.5), p.unary(O.LOG1P, p.mul(q, q))), p.unary(O.LOG1P, mx_m1))
    return p.sel(p.uno(r, r), mn, r), p.atan2(im, a1)


_UNARY = {
    O.RSQRT: _rsqrt,
    O.SIN: lambda p, re, im: _sin_cos(p, re, im, True),
    O.COS: lambda p, re, im: _sin_cos(p, re, im, False),
    O.TANH: _tanh,
    O.TAN: lambda p, re, im: _tanh(p, re, im, tan=True),
    O.EXPM1: _expm1,
    O.LOG1P: _log1p,
    O.SQRT: _sqrt,
    O.LOG: _log,
    O.EXP: _exp,
    O.SIGN: _sign,
    O.NEGATE: lambda p, re, im: (p.neg(re), p.neg(im)),
}


def unary(s, op: O, et: T, x):
    """``op`` on complex register value ``x`` of type ``et``; abs/real/imag return the real type."""
    p = _Parts(s, et)
    re, im = parts(s.b, x)
    if op is O.ABS:
        return _abs(p, re, im)
    if op is O.REAL:
        return re
    if op is O.IMAG:
        return im
    if op is O.COPY:
        return x
    fn = _UNARY.get(op)
    if fn is None:
        raise UnimplementedError(f"native code for {op.text} of {et.value} is not implemented")
    return compose(s.b, *fn(p, re, im))


# ---------------------------------------------------------------- binary
def _multiply(p: _Parts, ar, ai, br, bi):
    # XLA's operand order (ai·br + ar·bi): with FMA contraction the first product is the fused one.
    return p.sub(p.mul(ar, br), p.mul(ai, bi)), p.add(p.mul(ai, br), p.mul(ar, bi))


def _negated(v) -> bool:
    return isinstance(v, ir.Instruction) and v.opname == "fneg"


def _exact(u, v) -> bool:
    """u·v is ±u or ±v: LLVM folds a product by a constant ±1, which leaves nothing to contract."""
    return any((c := t.float_constant_value(x)) is not None and abs(c) == 1 for x in (u, v))


def _constant_parts(b, v) -> tuple | None:
    """The (real, imaginary) values of ``v`` if both its parts are float constants (a splat constant)."""
    if isinstance(v, ir.Constant) and isinstance(v.constant, (list, tuple)):
        c = [t.float_constant_value(p) for p in v.constant]
    elif isinstance(v, ir.InsertValue):
        c = [t.float_constant_value(p) for p in parts(b, v)]   # (a composed value's parts: nothing emitted)
    else:
        return None
    return None if any(x is None for x in c) else tuple(c)


def _flip(v: np.floating) -> np.floating:
    """-v by its sign bit (no float arithmetic: a denormal is kept under DAZ)."""
    u = f"u{v.itemsize}"
    return (np.array(v).view(u) ^ np.array(1 << (8 * v.itemsize - 1), u)).view(v.dtype)[()]


def _quieted(v: np.floating) -> np.floating:
    u = f"u{v.itemsize}"
    return (np.array(v).view(u) | np.array(1 << (np.finfo(v.dtype).nmant - 1), u)).view(v.dtype)[()]


def _times_constant(s, et: T, z, c: tuple, zr_first: bool, constant_rhs: bool):
    """``z·c`` for a constant ``c`` (a splat constant's parts; ``z``: the other operand's parts) as TF's XLA's
    LLVM leaves it: it sees c's parts, and rewrites the textbook (zr·cr - zi·ci, zi·cr + zr·ci) before its
    backend contracts products into FMAs. In pipeline order (each step measured on TF 2.21's dumps):
    InstSimplify: a NaN part of c makes both parts that NaN, quieted; ·1 is dropped. InstCombine: ·-1 is an
    fneg, (-a)·k is a·(-k), X - (-Y) is X + Y, (-X) + Y is Y - X. Reassociate: an fadd's operands by rank
    (lower first; a product ranks one above its part, zr below zi when ``zr_first``: loaded first), then a
    one-use product by a negative constant (-0 too) made positive, flipping its fadd/fsub (an fadd's rhs,
    else its lhs; an fsub's rhs only). InstCombine again. Products equal by part and constant are then one
    value (|cr| = |ci|) with two uses. The backend fuses the first operand of each fadd/fsub that is a
    one-use product, else the second; none where both are shared or not products (so (1e20, 1e20) times a
    huge z rounds both products: NaN where one FMA gave ±inf)."""
    b = s.b
    cet = component(et)
    base = [v.operands[0] if _negated(v) else v for v in z]
    negs = [_negated(v) for v in z]
    cr, ci = c
    if np.isnan(cr) or np.isnan(ci):   # fmul x, NaN folds to the NaN, and so does the fadd/fsub of it
        real = cr if np.isnan(cr) else ci
        imag = real if constant_rhs or not np.isnan(ci) else ci
        return compose(b, t.constant(cet, _quieted(real)), t.constant(cet, _quieted(imag)))

    def product(k: int, cv) -> list:
        # ["m", part, constant, its fmul before InstCombine (EarlyCSE's key)] or ["z", part, negated]
        if cv == 1 or cv == -1:
            return ["z", k, negs[k] != bool(np.signbit(cv))]
        return ["m", k, _flip(cv) if negs[k] else cv, (k, negs[k], cv.tobytes())]

    real = ["sub", product(0, cr), product(1, ci)]
    imag = ["add", product(1, cr), product(0, ci)] if constant_rhs else ["add", product(0, ci), product(1, cr)]
    exprs = (real, imag)
    rank = (0, 1) if zr_first else (1, 0)

    def is_neg(term) -> bool:
        return term[0] == "z" and term[2]

    def instcombine(e: list) -> None:
        if e[0] == "sub" and is_neg(e[2]):   # X - (-Y) -> X + Y
            e[0], e[2] = "add", ["z", e[2][1], False]
        if e[0] == "add" and (is_neg(e[1]) or is_neg(e[2])):   # (-X) + Y -> Y - X, the lhs's negation first
            neg, other = (e[1], e[2]) if is_neg(e[1]) else (e[2], e[1])
            e[:] = ["sub", other, ["z", neg[1], False]]

    def negative_once(term) -> bool:
        return term[0] == "m" and bool(np.signbit(term[2])) and \
            sum(u[0] == "m" and u[3] == term[3] for e in exprs for u in e[1:]) == 1

    for e in exprs:
        instcombine(e)
    for e in exprs:   # Reassociate
        if e[0] == "add" and rank[e[2][1]] + (e[2][0] == "m") < rank[e[1][1]] + (e[1][0] == "m"):
            e[1], e[2] = e[2], e[1]
        if e[0] == "add" and negative_once(e[2]):
            e[0], e[2][2] = "sub", _flip(e[2][2])
        elif e[0] == "add" and negative_once(e[1]):
            e[:] = ["sub", e[2], ["m", e[1][1], _flip(e[1][2]), e[1][3]]]
        elif e[0] == "sub" and negative_once(e[2]):
            e[0], e[2][2] = "add", _flip(e[2][2])
        instcombine(e)
    uses: dict = {}
    for u in (u for e in exprs for u in e[1:] if u[0] == "m"):
        uses[u[1], u[2].tobytes()] = uses.get((u[1], u[2].tobytes()), 0) + 1
    products: dict = {}

    def value(term):
        if term[0] == "z":
            return b.fneg(base[term[1]]) if term[2] else base[term[1]]
        key = (term[1], term[2].tobytes())
        if key not in products:
            products[key] = b.fmul(base[term[1]], t.constant(cet, term[2]))
        return products[key]

    def fused(term) -> bool:
        return term[0] == "m" and uses[term[1], term[2].tobytes()] == 1

    def emit(op: str, lhs, rhs):
        lhs_fused, rhs_fused = fused(lhs), fused(rhs)
        if op == "add" and lhs_fused and lhs[2] == -2:
            # The backend negates a one-use x·-2 for free (x·2 is x + x): (x·-2) + y is y - x·2, y fused first.
            op, lhs, rhs, lhs_fused, rhs_fused = "sub", rhs, ["m", lhs[1], _flip(lhs[2])], rhs_fused, True
        if lhs_fused:   # lhs·k ± rhs
            rest = value(rhs)
            return s.mul_add(base[lhs[1]], t.constant(cet, lhs[2]), rest if op == "add" else b.fneg(rest))
        if rhs_fused:   # lhs ± rhs·k, as part·(±k) + lhs: x86's vfnmadd keeps a NaN part's sign, which an
            # fneg of the part (vectorised as an xor) would flip
            k = rhs[2] if op == "add" else _flip(rhs[2])
            return s.mul_add(base[rhs[1]], t.constant(cet, k), value(lhs))
        return (b.fadd if op == "add" else b.fsub)(value(lhs), value(rhs))
    return compose(b, emit(*real), emit(*imag))


def multiply(s, et: T, x, y, rhs_first: bool = False, seen: tuple[bool, bool] = (True, True),
             q_first: bool = False):
    """Elementwise complex ``x·y`` = (ar·br - ai·bi, ai·br + ar·bi) with the FMA contractions TF's XLA gets
    from LLVM's backend made explicit (so no vectoriser can pick others): the fsub's first product, and the
    fadd's that Reassociate ranks first: ai·br, or ar·bi where it ranks strictly lower (``q_first``, from
    the parts' ranks: elemental._part_ranks). InstCombine's sign moves come
    first: one negated product (an operand's fneg, as conj makes) turns the fadd into an fsub of the other
    (fused), two negated fsub products swap; a product by a constant ±1 is folded away, so the other one is
    fused. Without FMA the products round separately (ScalarOps.mul_add). A splat constant operand (its parts
    immediates, its values ``seen`` by TF's LLVM) is :func:`_times_constant`'s."""
    b = s.b
    cx, cy = (_constant_parts(b, v) if known else None for v, known in zip((x, y), seen))
    if cy is not None and cy[0] == 1 and cy[1] == 0:
        return x   # MLIR's complex.mul fold: x · (1, ±0) is x (a constant lhs is not folded)
    if (cx is None) != (cy is None):
        # (rhs_first: which operand XLA loads first; for a hoisted constant, the other's parts by rank order)
        return _times_constant(s, et, parts(b, x if cy is not None else y), cy or cx,
                               rhs_first == (cy is not None), cy is not None)
    (ar, ai), (br, bi) = parts(b, x), parts(b, y)

    def neg(u, v) -> bool:
        return _negated(u) != _negated(v)

    def fused(u, v, rest, minus: bool = False):   # u·v ± rest, rounded once
        return s.mul_add(b.fneg(u) if minus else u, v, rest)

    # real: ar·br - ai·bi
    r1_exact, r2_exact = _exact(ar, br), _exact(ai, bi)
    if r1_exact and r2_exact:
        real = b.fsub(b.fmul(ar, br), b.fmul(ai, bi))
    elif r1_exact or (not r2_exact and neg(ar, br) and neg(ai, bi)):
        real = fused(ai, bi, b.fmul(ar, br), minus=True)
    else:
        real = fused(ar, br, b.fneg(b.fmul(ai, bi)))
    # imag: ai·br + ar·bi
    p_exact, q_exact = _exact(ai, br), _exact(ar, bi)
    if p_exact and q_exact:
        imag = b.fadd(b.fmul(ai, br), b.fmul(ar, bi))
    else:
        sp, sq = neg(ai, br), neg(ar, bi)
        fuse_q = p_exact or (not q_exact and (sp and not sq or (sp == sq and q_first)))
        imag = fused(ar, bi, b.fmul(ai, br)) if fuse_q else fused(ai, br, b.fmul(ar, bi))
    return compose(b, real, imag)


def _divide(p: _Parts, ar, ai, br, bi):
    """Smith's algorithm, then XLA's fix-ups where both parts came out NaN."""
    b = p.b
    zero, one, inf = p.c(0.0), p.c(1.0), p.c(float("inf"))
    # Each product has one use, which TF's LLVM contracts into an FMA (x/x's imaginary part is the exact
    # residual of bi - (bi/br)·br, ~1e-18, not 0: fuzz seed 171001347).
    r_over_i = p.div(br, bi)
    r_den = p.fma(r_over_i, br, bi)
    i_over_r = p.div(bi, br)
    i_den = p.fma(i_over_r, bi, br)
    abs_br, abs_bi = p.fabs(br), p.fabs(bi)
    use_r = p.olt(abs_br, abs_bi)
    cr = p.sel(use_r, p.div(p.fma(r_over_i, ar, ai), r_den), p.div(p.fma(i_over_r, ai, ar), i_den))
    ci = p.sel(use_r, p.div(p.fma(r_over_i, ai, p.neg(ar)), r_den), p.div(p.fma(p.neg(i_over_r), ar, ai), i_den))
    # 1. zero denominator (numerator not all NaN): inf with b_r's sign times the numerator
    zero_den = b.and_(b.and_(p.oeq(abs_br, zero), p.oeq(abs_bi, zero)),
                      b.or_(b.not_(p.uno(ar, zero)), b.not_(p.uno(ai, zero))))
    sinf = p.copysign(inf, br)
    z1 = (p.mul(sinf, ar), p.mul(sinf, ai))
    # 2. infinite numerator, finite denominator
    abs_ar, abs_ai = p.fabs(ar), p.fabs(ai)
    ar_inf, ai_inf = p.oeq(abs_ar, inf), p.oeq(abs_ai, inf)
    inf_num = b.and_(b.or_(ar_inf, ai_inf), b.and_(p.one(abs_br, inf), p.one(abs_bi, inf)))
    sar = p.copysign(p.sel(ar_inf, one, zero), ar)
    sai = p.copysign(p.sel(ai_inf, one, zero), ai)
    z2 = (p.mul(inf, p.add(p.mul(sar, br), p.mul(sai, bi))), p.mul(inf, p.sub(p.mul(sai, br), p.mul(sar, bi))))
    # 3. finite numerator, infinite denominator
    br_inf, bi_inf = p.oeq(abs_br, inf), p.oeq(abs_bi, inf)
    inf_den = b.and_(b.or_(br_inf, bi_inf), b.and_(p.one(abs_ar, inf), p.one(abs_ai, inf)))
    sbr = p.copysign(p.sel(br_inf, one, zero), br)
    sbi = p.copysign(p.sel(bi_inf, one, zero), bi)
    z3 = (p.mul(zero, p.add(p.mul(ar, sbr), p.mul(ai, sbi))), p.mul(zero, p.sub(p.mul(ai, sbr), p.mul(ar, sbi))))
    both_nan = b.and_(p.uno(cr, zero), p.uno(ci, zero))
    out = []
    for k, c in enumerate((cr, ci)):
        fixed = p.sel(zero_den, z1[k], p.sel(inf_num, z2[k], p.sel(inf_den, z3[k], c)))
        out.append(p.sel(both_nan, fixed, c))
    return tuple(out)


def _power(p: _Parts, ar, ai, br, bi):
    """(a+bi)^(c+di) = |z|^c e^(-d·arg z) (cos q, sin q), q = c·arg z + d·ln|z|, with Kahan's special
    cases as XLA: 0^c (c >= 0, d = 0), x^0 = 1, 1^w = 1, inf^c for real c > 0 / < 0."""
    b = p.b
    zero, one, inf = p.c(0.0), p.c(1.0), p.c(float("inf"))
    a = _abs(p, ar, ai)
    coeff = p.mul(p.pow(a, br), p.unary(O.EXP, p.mul(p.neg(bi), p.atan2(ai, ar))))
    q = p.add(p.mul(br, p.atan2(ai, ar)), p.mul(bi, p.unary(O.LOG, a)))
    re, im = p.mul(coeff, p.unary(O.COS, q)), p.mul(coeff, p.unary(O.SIN, q))
    d_zero = p.oeq(bi, zero)
    c0 = b.and_(b.and_(p.oeq(a, zero), d_zero), b.fcmp_ordered("<=", zero, br))
    re, im = p.sel(c0, p.sel(p.oeq(zero, br), one, zero), re), p.sel(c0, zero, im)
    c1 = b.and_(p.oeq(zero, br), d_zero)
    c2 = b.and_(p.oeq(ar, one), p.oeq(ai, zero))
    re, im = p.sel(b.or_(c1, c2), one, re), p.sel(b.or_(c1, c2), zero, im)
    real_inf = b.and_(p.oeq(ar, inf), b.and_(p.oeq(ai, zero), d_zero))
    c3 = b.and_(real_inf, b.fcmp_ordered(">", br, zero))
    c4 = b.and_(real_inf, p.olt(br, zero))
    re = p.sel(c4, zero, p.sel(c3, inf, re))
    im = p.sel(b.or_(c3, c4), zero, im)
    return re, im


_BINARY = {
    O.POWER: _power,
    O.ADD: lambda p, ar, ai, br, bi: (p.add(ar, br), p.add(ai, bi)),
    O.SUBTRACT: lambda p, ar, ai, br, bi: (p.sub(ar, br), p.sub(ai, bi)),
    O.MULTIPLY: _multiply,
    O.DIVIDE: _divide,
}


def binary(s, op: O, et: T, x, y):
    """``op`` on complex register values ``x``, ``y`` of type ``et``."""
    fn = _BINARY.get(op)
    if fn is None:
        raise UnimplementedError(f"native code for {op.text} of {et.value} is not implemented")
    b = s.b
    return compose(b, *fn(_Parts(s, et), *parts(b, x), *parts(b, y)))


def complex_of(s, re, im):
    """The ``complex`` opcode: parts (already f32/f64 register values) → one complex value."""
    return compose(s.b, re, im)


def compare(s, direction: D, et: T, x, y):
    b = s.b
    (xr, xi), (yr, yi) = parts(b, x), parts(b, y)
    if direction is D.EQ:
        return b.and_(b.fcmp_ordered("==", xr, yr), b.fcmp_ordered("==", xi, yi))
    if direction is D.NE:
        return b.or_(b.fcmp_unordered("!=", xr, yr), b.fcmp_unordered("!=", xi, yi))
    # LT/LE/GT/GE: lexicographic on (re, im), ordered, as XLA:CPU's fusion emitters (mhlo's scalar compare).
    op = {D.LT: "<", D.LE: "<=", D.GT: ">", D.GE: ">="}[direction]
    return b.select(b.fcmp_ordered("==", xr, yr), b.fcmp_ordered(op, xi, yi), b.fcmp_ordered(op, xr, yr))


def convert(s, src: T, dst: T, v):
    """Real → complex (imaginary part +0) and complex → complex (parts widened or narrowed)."""
    b = s.b
    part = component(dst)
    if src.is_complex:
        if not dst.is_complex:
            raise UnimplementedError(f"convert from {src.value} to {dst.value} is not defined (take real/imag)")
        re, im = parts(b, v)
        return compose(b, s.convert(component(src), part, re), s.convert(component(src), part, im))
    re = s.convert(src, part, v)
    return compose(b, re, t.float_constant(re.type, 0.0))


def scale_by_one(s, et: T, v):
    """v · (1 + 0i) as a complex multiply: XLA:CPU runs complex matrix-matrix dots on Eigen's GEMM, which
    scales the sum by alpha = 1 this way, so a sum with an infinite part comes out NaN + NaN·i (as TF's XLA)."""
    return binary(s, O.MULTIPLY, et, v, ir.Constant(v.type, [t.float_constant(v.type.elements[0], 1.0),
                                                              t.float_constant(v.type.elements[0], 0.0)]))


def zero(et: T):
    ty = t.value_type(component(et))
    return ir.Constant(ir.LiteralStructType([ty, ty]), [t.float_constant(ty, 0.0), t.float_constant(ty, 0.0)])
