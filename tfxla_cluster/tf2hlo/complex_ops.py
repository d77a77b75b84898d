"""Complex numbers inside a cluster, as pairs of real HLO arrays.

Stage: lowering. A complex64/128 TF tensor is carried through the lowering as a :class:`ComplexValue`
(real part, imaginary part, both f32/f64); it becomes one complex HLO array only where an XLA complex
opcode decides the result (divide, abs, compare, exp/log/..., Prod, FloorDiv, the complex linear algebra:
:func:`complex_hlo`), and is split again after. ``Complex`` builds one, ``Real``/``Imag`` take a part,
``ComplexAbs`` is HLO's complex ``abs``, ``Conj`` negates the imaginary part, and the elementwise
arithmetic ops (Add/AddV2/Sub/Mul/Neg/Square) use the textbook formulas when an operand is complex (a
complex host constant splits into two constants); division is HLO's complex ``divide`` (XLA's Smith's
algorithm with its inf/NaN fix-ups, which the textbook formula would overflow or round differently from).
Ops that only move elements or are linear in their complex operands (reshape, slices, concat, gather,
pad, select, sum, mean, ...: ``PARTWISE_OPS``) run their own lowering twice, once on the real parts and
once on the imaginary parts (:func:`lower_partwise`). At the cluster boundary a complex argument is a
c64/c128 parameter bound as ``(real(p), imag(p))`` and a complex result leaves as ``complex(re, im)``
(lower.py), as TF's XLA takes and returns them; in loop state and branch results a complex value travels
as its two parts (control_flow.py), and a called function's body sees the pair itself.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tensorflow.core.framework import types_pb2

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo import attrs as A
from tfxla_cluster.hlo.eval_elementwise import complex_from_parts
from tfxla_cluster.hlo.ir import HloInstruction
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P
from tfxla_cluster.hlo.structural import same_value
from tfxla_cluster.tf2hlo import types, xla_lib as xl
from tfxla_cluster.tf2hlo.context import LoweringContext
from tfxla_cluster.tf2hlo.registry import lowers

_PART = {np.dtype(np.complex64): P.F32, np.dtype(np.complex128): P.F64}
_PART_TYPE = {P.C64: P.F32, P.C128: P.F64}


@dataclass(frozen=True)
class ComplexValue:
    """A complex tensor as its real and imaginary parts (same shape, real element type)."""

    re: HloInstruction
    im: HloInstruction


def is_complex_input(ctx, index: int) -> bool:
    v = ctx.input_value(index)
    return isinstance(v, ComplexValue) or (isinstance(v, np.ndarray) and np.iscomplexobj(v))


def parts(ctx, index: int) -> tuple[HloInstruction, HloInstruction]:
    """Input ``index`` as (re, im); a real input has a zero imaginary part."""
    b = ctx.b
    v = ctx.input_value(index)
    if isinstance(v, ComplexValue):
        return v.re, v.im
    if isinstance(v, np.ndarray) and np.iscomplexobj(v):
        et = _PART[v.dtype]
        return b.constant(np.real(v).astype(et.dtype), et), b.constant(np.imag(v).astype(et.dtype), et)
    x = ctx.input(index)
    return x, xl.zeros_like(b, x)


def whole(b, re: HloInstruction, im: HloInstruction) -> HloInstruction:
    """``complex(re, im)`` as one HLO array; the complex array itself where ``re``/``im`` are its real(y)/imag(y)
    (how a parameter or an XLA complex op's result is split), so the HLO holds TF's complex value, not a
    rebuilt copy: XLA's algebraic simplifier must see ``A / (B / C)`` through it (complex64 ``(-inf, NaN) /
    (0 / x)`` is NaN in TF's XLA, which computes ``(A * x) / 0``; fuzz seed 292000881)."""
    if re.opcode is O.REAL and im.opcode is O.IMAG and re.operands[0] is im.operands[0] \
            and re.operands[0].shape.element_type.is_complex:
        return re.operands[0]
    return b.binary(O.COMPLEX, re, im)


def complex_hlo(ctx, index: int) -> HloInstruction:
    """Input ``index`` as one HLO array: a complex one as ``complex(re, im)`` (for the few lowerings that
    apply XLA's complex opcodes to it: abs, compare), any other as itself."""
    if not is_complex_input(ctx, index):
        return ctx.input(index)
    return whole(ctx.b, *parts(ctx, index))


def clip_complex(ctx) -> ComplexValue:
    """TF's XLA ClipByValue on complex values (its clamp, as XLA:CPU runs it): min(max(lo, t), hi) where
    max and min compare the real parts only and keep their first operand on a tie."""
    b = ctx.b
    t, lo, hi = (parts(ctx, i) for i in range(3))
    dims = t[0].shape.dimensions
    lo, hi = ([xl.broadcast_to(b, v, dims) for v in pair] for pair in (lo, hi))
    take_t = b.compare(t[0], lo[0], "GT")
    m = [b.select(take_t, tv, lv) for tv, lv in zip(t, lo)]
    take_hi = b.compare(hi[0], m[0], "LT")
    return ComplexValue(*(b.select(take_hi, hv, mv) for hv, mv in zip(hi, m)))


@lowers("Complex")
def _complex(ctx, node):
    b = ctx.b
    re, im = ctx.input(0), ctx.input(1)
    re, im = xl.broadcast_pair(b, re, im)
    return [ComplexValue(re, im)]


def component_parts(ctx) -> tuple[HloInstruction, HloInstruction]:
    """Input 0's (re, im), checking ``Tout`` is their type: TF has no kernel for c128 → f32 (or c64 → f64),
    its XLA refuses Real/Imag so and hands back ComplexAbs/Angle's f64 buffer read as f32."""
    re, im = parts(ctx, 0)
    if ctx.node.has_attr("Tout") and ctx.attr_type("Tout") is not re.shape.element_type:
        raise InvalidArgumentError(
            f"{ctx.op} ({ctx.name}): Tout={ctx.attr_type('Tout').value} is not the component type "
            f"{re.shape.element_type.value} of its complex input (TF has no kernel for it)")
    return re, im


@lowers("Real")
def _real(ctx, node):
    return [component_parts(ctx)[0]]


@lowers("Imag")
def _imag(ctx, node):
    return [component_parts(ctx)[1]]


@lowers("ComplexAbs")
def _complex_abs(ctx, node):
    b = ctx.b
    re, im = component_parts(ctx)
    # HLO's abs of the complex value (XLA's max·sqrt(1 + (min/max)²)): re² + im² would overflow.
    return [b.abs(b.binary(O.COMPLEX, re, im))]


@lowers("Conj")
def _conj(ctx, node):
    if not is_complex_input(ctx, 0):
        return [ctx.input_value(0)]
    re, im = parts(ctx, 0)
    return [ComplexValue(re, xl.neg(ctx.b, im))]


def _as_complex(b, a, c, op: O):
    """``op`` on the complex HLO values of parts ``a`` and ``c`` (broadcast to one shape), split into parts."""
    y = b.binary(op, *xl.broadcast_pair(b, *(whole(b, *xl.broadcast_pair(b, *z)) for z in (a, c))))
    return b.unary(O.REAL, y), b.unary(O.IMAG, y)


def _mul(b, a, c):
    """HLO's complex ``multiply``, as TF's XLA keeps it: which of each part's two products its backend fuses
    into an FMA (which decides ±inf/NaN where both overflow) is codegen's (complex_ops.multiply), and a
    textbook product on the parts would leave it to LLVM's vectorisers."""
    return _as_complex(b, a, c, O.MULTIPLY)


def _squared_difference(b, a, c):
    """TF's complex SquaredDifference: (a - c)·conj(a - c) = |a - c|² (imaginary part 0)."""
    dr, di = xl.sub(b, a[0], c[0]), xl.sub(b, a[1], c[1])
    return xl.add(b, xl.mul(b, dr, dr), xl.mul(b, di, di)), xl.zeros_like(b, dr)


def _is_zero(x: HloInstruction) -> bool:
    """A constant (possibly broadcast) whose every element is ±0."""
    while x.opcode is O.BROADCAST:
        x = x.operands[0]
    return x.opcode is O.CONSTANT and not x.literal_elided and bool(np.all(np.asarray(x.literal) == 0))


def _same(u: HloInstruction, v: HloInstruction) -> bool:
    """One value in a fused loop: ``u`` is ``v`` or its implicit (numpy) broadcast, where XLA's CSE has
    merged equal instructions (two ``y[:1]`` slices of one ``y``: ``(x - y[:1]) + y[:1]``)."""
    if same_value(u, v):
        return True
    if u.opcode is not O.BROADCAST:
        return False
    inner = u.operands[0]
    return any(_broadcast_of(u, inner, w, v) for w in (inner, inner.operands[0] if inner.opcode is O.RESHAPE else None))


def _broadcast_of(u: HloInstruction, inner: HloInstruction, w: HloInstruction | None, v: HloInstruction) -> bool:
    """Whether ``u`` = broadcast(``inner``), ``inner`` being ``w`` or a reshape of it that only drops or adds
    size-1 dimensions, reads ``v`` as v's implicit broadcast to u's shape does (``w`` one value with ``v``)."""
    if w is None or not same_value(w, v):
        return False
    wd, nd = w.shape.dimensions, inner.shape.dimensions
    if [d for d in wd if d != 1] != [d for d in nd if d != 1]:
        return False   # a reshape that moves elements
    rank = len(u.shape.dimensions)
    # v's implicit broadcast aligns its dimensions with the result's last ones
    return [u.dimensions[j] for j, d in enumerate(nd) if d != 1] == \
        [rank - len(wd) + i for i, d in enumerate(wd) if d != 1]


def _undone(a, c, first: O):
    """The parts ``x`` where ``a`` = (x first y) part by part and ``c`` is y: MLIR's complex folds
    add(sub(x, y), y) → x and sub(add(x, y), y) → x, which TF's XLA applies in its fused loops (so (z - z) + z
    is z where z has an infinite part, not NaN); None otherwise."""
    if all(p.opcode is first and _same(p.operands[1], q) for p, q in zip(a, c)):
        return a[0].operands[0], a[1].operands[0]
    return None


def _sub(b, a, c):
    return _undone(a, c, O.ADD) or (xl.sub(b, a[0], c[0]), xl.sub(b, a[1], c[1]))


def _add(b, a, c):
    """Parts add, except where a part is a zero constant (``1 + z``): TF's XLA adds complex values, where
    0 + (-0) is +0, but a real ``0 + x`` is x to XLA's algsimp; so that add stays a complex HLO add. An add
    that undoes a subtraction is folded (:func:`_undone`, either operand order)."""
    undone = _undone(a, c, O.SUBTRACT) or _undone(c, a, O.SUBTRACT)
    if undone:
        return undone
    if any(_is_zero(x) for x in (*a, *c)):
        return _as_complex(b, a, c, O.ADD)
    return xl.add(b, a[0], c[0]), xl.add(b, a[1], c[1])


COMPLEX_BINARY = {
    "Add": _add,
    "AddV2": _add,
    "Sub": _sub,
    "Mul": _mul,
    "SquaredDifference": _squared_difference,
}


def _atanh_parts(b, x, y):
    """Real and imaginary parts of atanh(x + iy) as TF 2.21's XLA lowers it (chlo's accurate algorithm, op for
    op): ¼·sign(x)·log1p(4t) with t = |x| / ((1 - |x|)² + y²) inside |x|, |y| < 2^(2p) (p the mantissa's
    digits) and 1/|x|, 0 (an infinite part) or 1/(|x|/y + y/|x|)/y outside; ½·atan2(2y, (1 - |x|)(1 + |x|) - y²)
    inside, ±π/2 (the sign of y) outside."""
    et = x.shape.element_type
    digits = np.finfo(et.dtype).nmant + 1
    safe, big = float(2.0 ** (2 * digits)), float(2.0 ** digits + 2)
    ax, ay = b.abs(x), b.abs(y)
    one, minus_one = xl.ones_like(b, x), xl.full(b, -1.0, et, x.shape.dimensions)
    sign_x = xl.select(b, xl.ge(b, x, 0.0), one, minus_one)
    in_safe = xl.and_(b, xl.lt(b, ax, safe), xl.lt(b, ay, safe))
    one_m = xl.sub(b, 1.0, ax)
    y2 = b.multiply(y, y)
    inside = b.divide(ax, b.add(b.multiply(one_m, one_m), y2))
    infinite = xl.or_(b, xl.or_(b, xl.eq(b, x, np.inf), xl.eq(b, x, -np.inf)),
                      xl.or_(b, xl.eq(b, y, np.inf), xl.eq(b, y, -np.inf)))
    far = xl.div(b, xl.div(b, 1.0, b.add(b.divide(ax, y), b.divide(y, ax))), y)
    t = xl.select(b, in_safe, inside, xl.select(b, xl.lt(b, xl.mul(b, ay, big), ax), xl.div(b, 1.0, ax),
                                                xl.select(b, infinite, 0.0, far)))
    re = xl.mul(b, b.multiply(sign_x, b.log1p(xl.mul(b, t, 4.0))), 0.25)
    angle = b.atan2(b.add(y, y), b.subtract(b.multiply(one_m, xl.add(b, ax, 1.0)), y2))
    pi = xl.mul(b, xl.select(b, xl.ge(b, y, 0.0), one, minus_one), float(et.dtype.type(np.pi)))
    im = xl.mul(b, xl.select(b, in_safe, angle, pi), 0.5)
    return re, im


def _atan(b, z):
    """atan(z) = -i·atanh(iz), as TF's XLA: atanh's parts of (-im, re), then (atanh's imaginary, -real)."""
    re, im = _atanh_parts(b, b.negate(b.unary(O.IMAG, z)), b.unary(O.REAL, z))
    return b.binary(O.COMPLEX, im, b.negate(re))


def _log_half(b, z):
    return xl.full(b, complex(np.log(0.5), 0.0), z.shape.element_type, z.shape.dimensions)


def _hypot(b, p, y, c):
    """chlo's hypot(p, y) (p ≥ 0): mx·√2 at mx = mn, mx + mx·r/2 where √(1 + r) rounds to 1 (r = (mn/mx)²
    > 0), mx·√(1 + r) elsewhere; ``c`` holds the kernel's constants."""
    mx, mn = b.maximum(p, y), b.minimum(p, y)
    r = b.multiply(*(b.divide(mn, mx),) * 2)
    sqa = b.sqrt(b.add(r, c["one"]))
    tiny = b.and_(b.compare(sqa, c["one"], "EQ"), b.compare(r, c["zero"], "GT"))
    rest = b.select(tiny, b.add(mx, b.divide(b.multiply(mx, r), c["two"])), b.multiply(mx, sqa))
    return b.select(b.compare(mx, mn, "EQ"), b.multiply(mx, c["sqrt_two"]), rest)


def _asin_acos_kernel(b, x, y):
    """chlo's ``asin_acos_kernel`` (Hull, Fairgrieve and Tang's algorithm) as TF 2.21's XLA lowers it, op for
    op: for x = |re w|, y = |im w| it returns (d, g) with asin(w) = (atan2(re w, d), ±g) and acos(w) =
    (atan2(d, re w), ∓g) (± the sign of im w). Its thresholds are safe_max = √max/8 (and ×10¹², ×10⁻⁶,
    ×10²) and safe_min = 4·√tiny of the part type."""
    et, dims = x.shape.element_type, x.shape.dimensions
    fi = np.finfo(et.dtype)
    safe_max = np.sqrt(fi.max) / et.dtype.type(8)
    c = {name: xl.full(b, v, et, dims) for name, v in (
        ("one", 1), ("zero", 0), ("two", 2), ("half", 0.5), ("sqrt_two", np.sqrt(et.dtype.type(2))),
        ("safe_max", safe_max), ("inf", np.inf), ("one_half", 1.5), ("log_two", np.log(et.dtype.type(2))),
        ("safe_min", np.sqrt(fi.tiny) * et.dtype.type(4)), ("huge", safe_max * et.dtype.type(1e12)),
        ("opt_small", safe_max * et.dtype.type(1e-6)), ("opt_large", safe_max * et.dtype.type(1e2)))}
    one, half = c["one"], c["half"]
    xp1, xm1 = b.add(x, one), b.subtract(x, one)
    r, s = _hypot(b, b.abs(xp1), y, c), _hypot(b, b.abs(xm1), y, c)
    a = b.multiply(b.add(r, s), half)
    half_apx = b.multiply(b.add(a, x), half)
    yy = b.multiply(y, y)
    rpxp1, smxm1, spxm1 = b.add(r, xp1), b.subtract(s, xm1), b.add(s, xm1)
    inner = b.select(b.compare(x, one, "LE"),
                     b.sqrt(b.multiply(half_apx, b.add(b.divide(yy, rpxp1), smxm1))),
                     b.multiply(y, b.sqrt(b.add(b.divide(half_apx, rpxp1), b.divide(half_apx, spxm1)))))
    d = b.select(b.compare(b.maximum(x, y), c["safe_max"], "GE"), y, inner)
    safe_max_opt = b.select(b.compare(x, c["huge"], "LT"), c["opt_small"], c["opt_large"])
    y_big = b.compare(y, safe_max_opt, "GE")
    mx = b.select(y_big, y, x)
    xoy = b.select(b.and_(y_big, b.not_(b.compare(y, c["inf"], "EQ"))), b.divide(x, y), c["zero"])
    far = b.add(b.add(b.log(mx), c["log_two"]), b.multiply(b.log1p(b.multiply(xoy, xoy)), half))
    near_real = b.and_(b.compare(y, c["safe_min"], "LT"), b.compare(x, one, "LT"))
    ap1 = b.add(a, one)
    yy_half = b.multiply(yy, half)
    yy_half_r = b.divide(yy_half, rpxp1)
    am1 = b.select(near_real, b.negate(b.divide(b.multiply(xp1, xm1), ap1)),
                   b.select(b.compare(x, one, "GE"), b.add(yy_half_r, b.multiply(spxm1, half)),
                            b.select(b.compare(a, c["one_half"], "LE"),
                                     b.add(yy_half_r, b.divide(yy_half, smxm1)),
                                     b.subtract(a, one))))
    sq = b.sqrt(b.multiply(am1, ap1))
    near = b.select(near_real, b.divide(y, sq), b.log1p(b.add(am1, sq)))
    g = b.select(b.compare(mx, b.select(y_big, safe_max_opt, c["safe_max"]), "GE"), far, near)
    return d, g


def _signed_as(b, v, part, negative_first: bool = True):
    """``v`` negated where ``part`` < 0 (or, with ``negative_first=False``, where it is not)."""
    neg = b.compare(part, xl.zeros_like(b, part), "LT")
    return b.select(neg, b.negate(v), v) if negative_first else b.select(neg, v, b.negate(v))


def _asin(b, z):
    re, im = b.unary(O.REAL, z), b.unary(O.IMAG, z)
    d, g = _asin_acos_kernel(b, b.abs(re), b.abs(im))
    return b.binary(O.COMPLEX, b.atan2(re, d), _signed_as(b, g, im))


def _acos(b, z):
    re, im = b.unary(O.REAL, z), b.unary(O.IMAG, z)
    d, g = _asin_acos_kernel(b, b.abs(re), b.abs(im))
    return b.binary(O.COMPLEX, b.atan2(d, re), _signed_as(b, g, im, negative_first=False))


def _asinh(b, z):
    """asinh(z) = -i·asin(iz): the kernel of (|im z|, |re z|)."""
    re, im = b.unary(O.REAL, z), b.unary(O.IMAG, z)
    d, g = _asin_acos_kernel(b, b.abs(im), b.abs(re))
    return b.binary(O.COMPLEX, _signed_as(b, g, re), b.atan2(im, d))


def _acosh(b, z):
    """acosh(z) = (g, ±atan2(d, re z)) with the sign of im z."""
    re, im = b.unary(O.REAL, z), b.unary(O.IMAG, z)
    d, g = _asin_acos_kernel(b, b.abs(re), b.abs(im))
    return b.binary(O.COMPLEX, g, _signed_as(b, b.atan2(d, re), im))


# XLA's complex forms (xla/hlo/builder/lib/math.cc) of the ops whose real lowering uses real-only opcodes.
COMPLEX_NATIVE = {
    # e^(z + log ½) ± e^(log ½ - z), log ½ = (ln 0.5, 0) a complex constant (its +0 imaginary part decides
    # the sign of a zero imaginary part).
    "Sinh": lambda b, z: b.subtract(b.exp(b.add(z, _log_half(b, z))), b.exp(b.subtract(_log_half(b, z), z))),
    "Cosh": lambda b, z: b.add(b.exp(b.add(z, _log_half(b, z))), b.exp(b.subtract(_log_half(b, z), z))),
    "Asinh": _asinh,
    "Acosh": _acosh,
    "Atanh": lambda b, z: b.binary(O.COMPLEX, *_atanh_parts(b, b.unary(O.REAL, z), b.unary(O.IMAG, z))),
    # chlo's asin_acos_kernel (TF 2.21 lowers all four by it, not by the log forms).
    "Asin": _asin,
    "Acos": _acos,
    "Atan": _atan,
}
COMPLEX_UNARY = {
    "Neg": lambda b, a: (xl.neg(b, a[0]), xl.neg(b, a[1])),
    "Square": lambda b, a: _mul(b, a, a),
}


# MLIR's complex folds log(exp(z)) → z and exp(log(z)) → z, which TF's XLA applies in its fused loops: z
# itself at every value (TF 2.21: ±0, ±inf, NaN, huge and tiny parts; c64 and c128).
_UNDOES = {"Log": O.EXP, "Exp": O.LOG}


def _inverse_undone(b, a, inner: O):
    """The parts of ``z`` where ``a`` are the parts of ``inner(z)`` (a complex HLO op split back), else None."""
    re, im = a
    if re.opcode is not O.REAL or im.opcode is not O.IMAG or re.operands[0] is not im.operands[0] \
            or re.operands[0].opcode is not inner:
        return None
    z = re.operands[0].operands[0]
    if z.opcode is O.COMPLEX:
        return z.operands[0], z.operands[1]
    return b.unary(O.REAL, z), b.unary(O.IMAG, z)   # z itself (``whole``: a parameter or an XLA op's result)


def lower_complex_elementwise(ctx, node, native=None) -> list:
    """The complex form of an elementwise op (called by the elementwise family when an input is complex):
    the textbook formulas on the parts for the arithmetic above; any other op is its real lowering
    ``native`` on ``complex(re, im)`` HLO values (XLA's complex elementwise semantics: exp, log, sqrt, sin,
    pow, compare EQ/NE, ...), whose complex result is split back into its parts."""
    b = ctx.b
    if ctx.num_inputs == 1 and node.op in COMPLEX_UNARY:
        return [ComplexValue(*COMPLEX_UNARY[node.op](b, parts(ctx, 0)))]
    if ctx.num_inputs == 2 and node.op in COMPLEX_BINARY:
        re, im = COMPLEX_BINARY[node.op](b, parts(ctx, 0), parts(ctx, 1))
        return [ComplexValue(re, im)]
    if ctx.num_inputs == 1 and node.op in _UNDOES:
        undone = _inverse_undone(b, parts(ctx, 0), _UNDOES[node.op])
        if undone is not None:
            return [ComplexValue(*undone)]
    native = COMPLEX_NATIVE.get(node.op, native)
    if native is None:
        raise UnimplementedError(f"complex operands of {node.op} are not supported")
    operands = [whole(b, *xl.broadcast_pair(b, *parts(ctx, i))) for i in range(ctx.num_inputs)]
    if len(operands) == 2:
        operands = list(xl.broadcast_pair(b, *operands))
    y = native(b, *operands)
    if y.shape.element_type.is_complex:
        return [ComplexValue(b.unary(O.REAL, y), b.unary(O.IMAG, y))]
    return [y]


def lower_complex_cast(ctx):
    """``Cast`` from or to a complex type: parts convert; to real keeps the real part, to bool is
    ``re != 0 || im != 0``; a real source gets a zero imaginary part."""
    b = ctx.b
    dst = ctx.attr_type("DstT")
    re, im = parts(ctx, 0)
    if dst is P.PRED:
        return b.binary(O.OR, xl.ne(b, re, 0), xl.ne(b, im, 0))
    if not dst.is_complex:
        return re if re.shape.element_type is dst else b.convert(re, dst)
    part = _PART_TYPE[dst]
    return ComplexValue(*(x if x.shape.element_type is part else _part_convert(b, x, part) for x in (re, im)))


def _part_convert(b, x, part: P):
    """``x`` converted to a complex part type; from bf16 marked so that float normalization keeps its bf16
    rounding (XLA's single convert to complex reads the bf16 value)."""
    cv = b.convert(x, part)
    if x.shape.element_type is P.BF16:
        A.mark_complex_part(cv)
    return cv


def is_complex_value(v) -> bool:
    """A complex tensor's value inside the lowering: a pair of parts or a complex host constant."""
    return isinstance(v, ComplexValue) or (isinstance(v, np.ndarray) and np.iscomplexobj(v))


def pair_of(b, v, dtype) -> tuple[HloInstruction, HloInstruction]:
    """A complex value (pair or host constant) as two real HLO arrays; ``dtype`` is its TF dtype."""
    if isinstance(v, ComplexValue):
        return v.re, v.im
    et = _PART_TYPE[types.element_type(dtype)]
    v = np.asarray(v)
    return b.constant(np.real(v).astype(et.dtype), et), b.constant(np.imag(v).astype(et.dtype), et)


# Ops each of whose output elements is an input element, a zero or a sum of input elements: on complex
# operands they are the same op on the real parts and on the imaginary parts (what XLA's elementwise
# complex arithmetic gives for them too). Their other inputs (shapes, indices, predicates) are shared.
PARTWISE_OPS = frozenset({
    "Identity", "IdentityN", "Snapshot", "StopGradient", "PreventGradient", "EnsureShape",
    "PlaceholderWithDefault", "Reshape", "ExpandDims", "Squeeze", "StridedSlice", "Slice", "ConcatV2",
    "Concat", "Pack", "Unpack", "Split", "SplitV", "Tile", "GatherV2", "Gather", "GatherNd", "Reverse",
    "ReverseV2", "Roll", "Pad", "PadV2", "MirrorPad", "MirrorPadGrad", "Select", "SelectV2", "BroadcastTo",
    "Fill", "OneHot", "Diag", "DiagPart", "MatrixBandPart", "MatrixDiag", "MatrixDiagV2",
    "MatrixDiagV3", "MatrixDiagPart", "MatrixDiagPartV2", "MatrixDiagPartV3", "MatrixSetDiag",
    "MatrixSetDiagV2", "MatrixSetDiagV3", "ReverseSequence", "SpaceToBatch", "SpaceToBatchND",
    "BatchToSpace", "BatchToSpaceND", "SpaceToDepth", "DepthToSpace", "ScatterNd", "TensorScatterUpdate",
    "TensorScatterAdd", "TensorScatterSub", "StridedSliceGrad", "TensorStridedSliceUpdate", "Sum", "Mean",
    "AddN", "BiasAdd", "BiasAddV1", "BiasAddGrad", "UnsortedSegmentSum", "SegmentSumV2", "DynamicStitch",
    "ParallelDynamicStitch", "DynamicPartition", "XlaDynamicSlice", "XlaDynamicUpdateSlice", "XlaPad",
    "XlaSharding", "XlaOptimizationBarrier", "XlaBroadcastHelper", "Shape", "ShapeN", "Size", "Rank",
})


# TensorList ops of complex elements: a complex list is a pair of lists (one per part), each made and used
# by the op's own lowering on that part.
LIST_OPS = frozenset({
    "TensorListReserve", "EmptyTensorList", "TensorListFromTensor", "TensorListSetItem", "TensorListGetItem",
    "TensorListStack", "TensorListPushBack", "TensorListPopBack", "TensorListGather", "TensorListConcatV2",
    "TensorListSplit", "TensorListLength", "TensorListElementShape",
})


class _PartContext(LoweringContext):
    """The node's context with every complex input replaced by one of its parts (real type): ``part`` 0 or 1
    for all of them, or per input index; the imaginary part of the inputs in ``conj`` is negated."""

    def __init__(self, lowerer, node, part, conj: frozenset[int] = frozenset()) -> None:
        super().__init__(lowerer, node)
        self._part = part
        self._conj = conj
        self._hlo: dict[int, HloInstruction] = {}

    def _complex(self, index: int) -> bool:
        return is_complex_value(super().input_value(index))

    def input_value(self, index: int):
        v = super().input_value(index)
        part = self._part if isinstance(self._part, int) else self._part.get(index, 0)
        if isinstance(v, ComplexValue):
            if part and index in self._conj:
                return xl.neg(self.b, v.im)
            return (v.re, v.im)[part]
        if isinstance(v, np.ndarray) and np.iscomplexobj(v):
            x = np.array((np.real, np.imag)[part](v))   # a contiguous copy that keeps 0-d arrays 0-d
            return -x if part and index in self._conj else x
        return v

    def input(self, index: int) -> HloInstruction:
        if not self._complex(index):
            return super().input(index)
        v = self.input_value(index)
        if not isinstance(v, np.ndarray):
            return v
        if index not in self._hlo:
            self._hlo[index] = self.b.constant(v, _PART[np.dtype(super().input_value(index).dtype)])
        return self._hlo[index]



    def input_type(self, index: int):
        et = super().input_type(index)
        return _PART_TYPE.get(et, et)

    def output_type(self, index: int = 0):
        et = super().output_type(index)
        return _PART_TYPE.get(et, et)

    def attr_type(self, name: str):
        et = super().attr_type(name)
        return _PART_TYPE.get(et, et)


# Ops linear in each of their two operands (products): with both operands complex, four real products
# (re·re - im·im, re·im + im·re); BatchMatMul's adj_x/adj_y conjugate as well as transpose.
BILINEAR_OPS = frozenset({"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "XlaDot",
                          "XlaDotV2", "XlaEinsum"})


def _complex_list_op(node) -> bool:
    if node.op not in LIST_OPS or not node.has_attr("element_dtype"):
        return False
    return types.element_type(node.attr("element_dtype").type).is_complex


def lowers_partwise(lowerer, node) -> bool:
    """Whether ``node`` is lowered by :func:`lower_partwise`: a partwise op with a complex input, or a
    TensorList op of complex elements."""
    if node.op in PARTWISE_OPS or node.op in BILINEAR_OPS:
        return any(is_complex_value(lowerer.value((e.src.name, e.src_output))) for e in node.data_inputs())
    return _complex_list_op(node)


def lower_partwise(lowerer, node, fn) -> list:
    """``fn`` (the op's own lowering) on the real parts and on the imaginary parts of the complex inputs;
    complex outputs and lists (variants) of complex elements pair the two results, the others (shapes,
    indices) are the real-part run's."""
    b = lowerer.builder
    pairs_lists = _complex_list_op(node) or any(
        isinstance(lowerer.value((e.src.name, e.src_output)), ComplexValue) for e in node.data_inputs())
    conj = frozenset(i for i, a in enumerate(("adj_x", "adj_y")) if node.has_attr(a) and node.attr(a).b)
    complex_inputs = [i for i, e in enumerate(node.data_inputs())
                      if is_complex_value(lowerer.value((e.src.name, e.src_output)))]
    if node.op in BILINEAR_OPS and len(complex_inputs) == 2:
        run = lambda p0, p1: fn(_PartContext(lowerer, node, {0: p0, 1: p1}, conj), node)[0]  # noqa: E731
        re_outs = [b.subtract(run(0, 0), run(1, 1))]
        im_outs = [b.add(run(0, 1), run(1, 0))]
    else:
        re_outs = fn(_PartContext(lowerer, node, 0, conj), node)
        im_outs = fn(_PartContext(lowerer, node, 1, conj), node)
    outs = []
    for k, (re, im) in enumerate(zip(re_outs, im_outs)):
        dtype = node.outputs[k].dtype
        if types.base_dtype(dtype) == types_pb2.DT_VARIANT and pairs_lists:
            outs.append(ComplexValue(re, im))
        elif not types.element_type(dtype).is_complex:
            outs.append(re)
        elif isinstance(re, np.ndarray) and isinstance(im, np.ndarray):
            outs.append(complex_from_parts(re, im, types.np_dtype(dtype)))
        else:
            et = _PART_TYPE[types.element_type(dtype)]
            re, im = (x if isinstance(x, HloInstruction) else b.constant(np.asarray(x).astype(et.dtype), et)
                      for x in (re, im))
            outs.append(ComplexValue(re, im))
    return outs
