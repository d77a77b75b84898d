"""Stage: codegen — value-level semantics of HLO ops on complex numbers (c64, c128), after XLA's
ElementalIrEmitter (EmitComplexUnaryOp / EmitComplexBinaryOp).

A complex register value is an LLVM ``{float, float}`` / ``{double, double}`` struct (real part first),
the same layout as numpy's complex64/complex128 in memory, so buffers load and store whole elements.
The component arithmetic goes through :class:`~tfxla_cluster.codegen.scalar_ops.ScalarOps` on f32/f64,
so exp/log/sin/cos/atan2/pow are the same code as for real types. The formulas and corner cases are
XLA's: textbook add/sub/mul; Smith's division with the zero-denominator, infinite-numerator and
infinite-denominator fix-ups; abs as max·sqrt(1 + (min/max)²) (NaN → min); sign = z/(|z|, 0) by that
division (0 at 0); exp = eᵃ(cos b, sin b) with +0 imaginary part for a real argument; log = (log|z|, atan2(b, a)); sqrt through the polar form with XLA's inf/NaN
cases; compare EQ (ordered on both parts) and NE (unordered on either). Other opcodes on complex values
are an UnimplementedError naming the opcode.
"""
from __future__ import annotations

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

    def max(self, x, y):
        return self.s.binary(O.MAXIMUM, self.et, x, y)

    def min(self, x, y):
        return self.s.binary(O.MINIMUM, self.et, x, y)


# ---------------------------------------------------------------- unary
def _abs_parts(p: _Parts, re, im, root: bool):
    """(min, max, sqrt(1 + (min/max)^2) or 1 + (min/max)^2) of |re|, |im| (XLA's EmitComplexAbsHelper)."""
    ar, ai = p.fabs(re), p.fabs(im)
    mx, mn = p.max(ar, ai), p.min(ar, ai)
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
                 p.sel(p.uno(r, r), p.c(float("nan")), p.sel(p.oeq(sin, zero), sin, p.mul(r, sin))))
    at_zero = p.oeq(r, zero)
    return p.sel(at_zero, zero, real), p.sel(at_zero, zero, imag)


def _log(p: _Parts, re, im):
    return p.unary(O.LOG, _abs(p, re, im)), p.atan2(im, re)


def _exp(p: _Parts, re, im):
    e = p.unary(O.EXP, re)
    zero = p.c(0.0)
    # a real argument stays real: exp(inf + 0i) is inf + 0i, not inf + NaN·i (TF's XLA)
    return p.mul(e, p.unary(O.COS, im)), p.sel(p.oeq(im, zero), zero, p.mul(e, p.unary(O.SIN, im)))


def _sign(p: _Parts, re, im):
    """z / |z| as a complex division by (|z|, 0) (so sign(inf + 0i) is NaN + NaN·i, as TF's XLA); 0 at 0."""
    a = _abs(p, re, im)
    zero = p.c(0.0)
    at_zero = p.oeq(a, zero)
    qr, qi = _divide(p, re, im, a, zero)
    return p.sel(at_zero, zero, qr), p.sel(at_zero, zero, qi)


_UNARY = {
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
    return p.sub(p.mul(ar, br), p.mul(ai, bi)), p.add(p.mul(ar, bi), p.mul(ai, br))


def _divide(p: _Parts, ar, ai, br, bi):
    """Smith's algorithm, then XLA's fix-ups where both parts came out NaN."""
    b = p.b
    zero, one, inf = p.c(0.0), p.c(1.0), p.c(float("inf"))
    r_over_i = p.div(br, bi)
    r_den = p.add(bi, p.mul(r_over_i, br))
    i_over_r = p.div(bi, br)
    i_den = p.add(br, p.mul(i_over_r, bi))
    abs_br, abs_bi = p.fabs(br), p.fabs(bi)
    use_r = p.olt(abs_br, abs_bi)
    cr = p.sel(use_r, p.div(p.add(p.mul(r_over_i, ar), ai), r_den), p.div(p.add(p.mul(i_over_r, ai), ar), i_den))
    ci = p.sel(use_r, p.div(p.sub(p.mul(r_over_i, ai), ar), r_den), p.div(p.sub(ai, p.mul(i_over_r, ar)), i_den))
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


_BINARY = {
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
    raise UnimplementedError(f"complex comparison {direction.value} is not defined")


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
    """v · (1 + 0i) as a complex multiply: XLA:CPU runs complex dots on Eigen's GEMM, which scales the
    sum by alpha = 1 this way, so a sum with an infinite part comes out NaN + NaN·i (as TF's XLA)."""
    return binary(s, O.MULTIPLY, et, v, ir.Constant(v.type, [t.float_constant(v.type.elements[0], 1.0),
                                                              t.float_constant(v.type.elements[0], 0.0)]))


def zero(et: T):
    ty = t.value_type(component(et))
    return ir.Constant(ir.LiteralStructType([ty, ty]), [t.float_constant(ty, 0.0), t.float_constant(ty, 0.0)])
