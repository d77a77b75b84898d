"""Algebraic simplifier (xla/hlo/transforms/simplifiers/algebraic_simplifier.cc), layout-insensitive mode.

Stage: the simplification fixed point, before layout assignment; also after fusion on the entry-level
computations. It visits every non-fusion computation in post order and, for each instruction, tries
the rules registered for its opcode in table order; the first rule that returns a replacement wins
(XLA's ``Handle<Op>`` methods, one small named rule per rewrite). The replaced instruction and any
operands left dead are removed at once (``ReplaceInstruction``), so later rules see true user counts.

Guarantees: every rewrite keeps the value of the computation (checked against the evaluator by the
tests), with XLA's own preconditions — e.g. ``A/C -> A*(1/C)`` only for floating-point C,
``A*0 -> 0`` only for integers (NaN), ``A-C -> A+(-C)`` only for constant C. Two XLA assumptions are
kept on purpose: ``A+0 -> A`` ignores the sign of zero, and a reduce over size-1 dimensions becomes a
reshape that ignores the init value (XLA assumes the init value is the reducer's identity).
Instructions with control predecessors are left alone. New instructions take the metadata of the
instruction they replace. ``stats`` counts the rules that fired.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tfxla_cluster.mxcsr import flushed_denormals
from tfxla_cluster.hlo import attrs as A
from tfxla_cluster.hlo.eval_compute import simple_reducer
from tfxla_cluster.hlo.builder import make_scalar_computation
from tfxla_cluster.hlo.eval_elementwise import complex_divide
from tfxla_cluster.hlo.ir import HloInstruction, HloModule
from tfxla_cluster.hlo.opcode import ELEMENTWISE, HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tfxla_cluster.hlo.shape_inference import infer_shape
from tfxla_cluster.passes.pass_ import HloPass
from tfxla_cluster.passes.util import (UseGraph, constant_instruction, dims_unmodified_by_reshape, is_all,
                                       is_broadcast_of_constant, is_constant, is_scalar_constant, known_literal, make_scalar_like,
                                       non_fusion_computations, reshape_inserts_or_deletes_degenerate_dims,
                                       same_shape)

RuleFn = Callable[[UseGraph, HloInstruction], "HloInstruction | None"]


@dataclass(frozen=True)
class Rule:
    """One rewrite: ``apply(g, instr)`` returns the replacement (already added) or None."""

    name: str
    opcodes: tuple[O, ...]
    apply: RuleFn
    layout_sensitive_only: bool = False
    layout_insensitive_only: bool = False

    @property
    def doc(self) -> str:
        return (self.apply.__doc__ or "").strip()


RULES: list[Rule] = []


def rule(name: str, *opcodes: O, layout_sensitive_only: bool = False,
         layout_insensitive_only: bool = False) -> Callable[[RuleFn], RuleFn]:
    def register(fn: RuleFn) -> RuleFn:
        RULES.append(Rule(name, opcodes, fn, layout_sensitive_only, layout_insensitive_only))
        return fn
    return register


# ---------------------------------------------------------------- small helpers
def _binary(g: UseGraph, op: O, a: HloInstruction, b: HloInstruction, like: HloInstruction,
            shape: Shape | None = None) -> HloInstruction:
    return g.make(op, [a, b], shape, like=like)


def _unary(g: UseGraph, op: O, a: HloInstruction, like: HloInstruction) -> HloInstruction:
    return g.make(op, [a], like=like)


def _keep(instr: HloInstruction, candidate: HloInstruction) -> HloInstruction | None:
    """``candidate`` if it may replace ``instr`` (ReplaceInstructionIfCompatible), else None."""
    return candidate if same_shape(instr, candidate) else None


def _first(*options: HloInstruction | None) -> HloInstruction | None:
    return next((o for o in options if o is not None), None)


def _is_float(instr: HloInstruction) -> bool:
    return instr.shape.element_type.is_float or instr.shape.element_type.is_complex


def _is_int(instr: HloInstruction) -> bool:
    return instr.shape.element_type.is_integral


def _scalar_constant_under_broadcast(instr: HloInstruction) -> HloInstruction | None:
    """c for ``broadcast(c)`` with c a scalar constant (m::Broadcast(m::ConstantScalar))."""
    if instr.opcode is O.BROADCAST and instr.operands[0].opcode is O.CONSTANT and \
            instr.operands[0].shape.rank == 0:
        return instr.operands[0]
    return None


# ---------------------------------------------------------------- constants
@rule("constant_uniform_to_broadcast", O.CONSTANT)
def _constant_uniform(g, c):
    """A constant with more than one element, all equal -> broadcast(scalar constant)."""
    lit = known_literal(c)
    if lit is None or lit.size <= 1:
        return None
    flat = lit.reshape(-1)
    first = flat[0]
    # Floats (complex parts too) by bits: values would make a denormal equal 0 under DAZ, and -0 equal 0.
    same = (flat.view(np.uint8).reshape(flat.size, -1) == flat[:1].view(np.uint8)).all() \
        if lit.dtype.kind in "fcV" else bool(np.all(flat == first))   # bits: -0 (or a -0 part) is not 0
    if not same:
        return None
    scalar = g.add(constant_instruction(first, c.shape.element_type, (), like=c))
    return g.make(O.BROADCAST, [scalar], c.shape, like=c, dimensions=())


@rule("constant_iota", O.CONSTANT)
def _constant_iota(g, c):
    """A rank-1 constant 0, 1, ..., n-1 (n > 1) -> iota."""
    lit = known_literal(c)
    if lit is None or lit.ndim != 1 or lit.size <= 1 or c.shape.element_type is P.PRED:
        return None
    if not np.array_equal(lit, np.arange(lit.size).astype(lit.dtype)) or lit[-1] != lit.size - 1:
        return None
    return g.make(O.IOTA, [], c.shape, like=c, iota_dimension=0)


@rule("constant_strided_iota", O.CONSTANT)
def _constant_strided_iota(g, c):
    """An integral rank-1 constant 0, s, 2s, ... (s > 1) -> iota * broadcast(s)."""
    lit = known_literal(c)
    if lit is None or lit.ndim != 1 or lit.size <= 1 or not c.shape.element_type.is_integral:
        return None
    stride = int(lit[1])
    # In the literal's own type: iota * s wraps there too (u64 Philox keys exceed a C long).
    if stride <= 1 or not np.array_equal(lit, np.arange(lit.size, dtype=lit.dtype) * lit[1]):
        return None
    iota = g.make(O.IOTA, [], c.shape, like=c, iota_dimension=0)
    return _binary(g, O.MULTIPLY, iota, make_scalar_like(g, c.shape, stride, like=c), c)


# ---------------------------------------------------------------- add / subtract
@rule("add_zero", O.ADD)
def _add_zero(g, add):
    """A + 0 -> A and 0 + A -> A."""
    a, b = add.operands
    return _first(_keep(add, a) if is_all(b, 0) else None, _keep(add, b) if is_all(a, 0) else None)


@rule("add_constant_to_rhs", O.ADD)
def _add_canonical(g, add):
    """Const + A -> A + Const (constants on the right make reassociation simpler)."""
    a, b = add.operands
    if is_constant(a) and not is_constant(b):
        return _binary(g, O.ADD, b, a, add, add.shape)
    return None


def _reassociate(g, instr, op: O):
    """(A op C1) op C2 -> A op (C1 op C2), constants or broadcast scalar constants."""
    inner, c2 = instr.operands
    if inner.opcode is not op:
        return None
    a, c1 = inner.operands
    if not is_constant(a) and is_constant(c1) and is_constant(c2):
        return _binary(g, op, a, _binary(g, op, c1, c2, instr), instr, instr.shape)
    s1, s2 = _scalar_constant_under_broadcast(c1), _scalar_constant_under_broadcast(c2)
    if s1 is not None and s2 is not None and (op is O.ADD and not is_constant(a) or op is O.MULTIPLY):
        folded = _binary(g, op, s1, s2, instr)
        return _binary(g, op, a, make_broadcast(g, folded, instr.shape, instr), instr, instr.shape)
    return None


def make_broadcast(g: UseGraph, scalar: HloInstruction, shape: Shape, like: HloInstruction) -> HloInstruction:
    if not shape.dimensions:
        return scalar
    return g.make(O.BROADCAST, [scalar], Shape.array(scalar.shape.element_type, shape.dimensions), like=like,
                  dimensions=())


@rule("add_reassociate_constants", O.ADD)
def _add_reassociate(g, add):
    """(A + C1) + C2 -> A + (C1 + C2); constant folding then folds C1 + C2."""
    return _reassociate(g, add, O.ADD)


@rule("add_of_const_minus", O.ADD)
def _add_const_minus(g, add):
    """(C1 - A) + C2 -> (C1 + C2) - A."""
    sub, c2 = add.operands
    if sub.opcode is not O.SUBTRACT:
        return None
    c1, a = sub.operands
    if is_constant(a):
        return None
    if is_constant(c1) and is_constant(c2):
        return _binary(g, O.SUBTRACT, _binary(g, O.ADD, c1, c2, add), a, add, add.shape)
    s1, s2 = _scalar_constant_under_broadcast(c1), _scalar_constant_under_broadcast(c2)
    if s1 is not None and s2 is not None:
        total = make_broadcast(g, _binary(g, O.ADD, s1, s2, add), add.shape, add)
        return _binary(g, O.SUBTRACT, total, a, add, add.shape)
    return None


def _is_fp_power_of_two(instr: HloInstruction) -> bool:
    c = instr if is_constant(instr) else (_scalar_constant_under_broadcast(instr) if instr.opcode is O.BROADCAST
                                         else None)
    lit = known_literal(c) if c is not None else None
    if lit is None or lit.size != 1 or lit.dtype.kind != "f":
        return False
    mantissa, _ = np.frexp(float(lit.reshape(-1)[0]))
    return abs(float(mantissa)) == 0.5


@rule("add_factor_common_multiplicand", O.ADD)
def _add_factor(g, add):
    """A*C + B*C -> (A+B)*C for integers, or when C is a float constant +-2^k (exact up to rounding)."""
    lhs, rhs = add.operands
    if lhs.opcode is not O.MULTIPLY or rhs.opcode is not O.MULTIPLY or lhs is rhs:
        return None
    if g.user_count(lhs) != 1 or g.user_count(rhs) != 1:
        return None
    for a, c in (lhs.operands, lhs.operands[::-1]):
        for b, c2 in (rhs.operands, rhs.operands[::-1]):
            if c is c2 and (_is_int(add) or _is_fp_power_of_two(c)):
                return _binary(g, O.MULTIPLY, _binary(g, O.ADD, a, b, add), c, add, add.shape)
    return None


@rule("sub_self_integral", O.SUBTRACT)
def _sub_self(g, sub):
    """A - A -> 0 for integers."""
    a, b = sub.operands
    return make_scalar_like(g, sub.shape, 0, like=sub) if a is b and _is_int(sub) else None


@rule("sub_zero", O.SUBTRACT)
def _sub_zero(g, sub):
    """A - 0 -> A."""
    a, b = sub.operands
    return _keep(sub, a) if is_all(b, 0) else None


@rule("sub_constant_to_add", O.SUBTRACT)
def _sub_const(g, sub):
    """A - C -> A + (-C) for a constant (or broadcast constant) C and non-constant A."""
    a, b = sub.operands
    if is_constant(a):
        return None
    if is_constant(b):
        return _binary(g, O.ADD, a, _unary(g, O.NEGATE, b, sub), sub, sub.shape)
    if is_broadcast_of_constant(b):
        neg = _unary(g, O.NEGATE, b.operands[0], sub)
        bcast = g.make(O.BROADCAST, [neg], b.shape, like=b, dimensions=b.dimensions)
        return _binary(g, O.ADD, a, bcast, sub, sub.shape)
    return None


# ---------------------------------------------------------------- multiply / divide / power
@rule("mul_one", O.MULTIPLY)
def _mul_one(g, mul):
    """A * 1 -> A and 1 * A -> A."""
    a, b = mul.operands
    return _first(_keep(mul, a) if is_all(b, 1) else None, _keep(mul, b) if is_all(a, 1) else None)


@rule("mul_zero_integral", O.MULTIPLY)
def _mul_zero(g, mul):
    """A * 0 -> 0 and 0 * A -> 0, integers only (0 * NaN is NaN)."""
    if not _is_int(mul):
        return None
    a, b = mul.operands
    return _first(_keep(mul, a) if is_all(a, 0) else None, _keep(mul, b) if is_all(b, 0) else None)


@rule("minmax_self", O.MAXIMUM, O.MINIMUM)
def _minmax_self(g, instr):
    """max(A, A) -> A, min(A, A) -> A, any element type (TF's XLA returns a parameter's copy for
    ``tf.maximum(x, x)``: a denormal in x survives, where computing the max under DAZ flushes it). Only
    one instruction on both sides: two equal converts CSE merges later keep their maximum."""
    a, b = instr.operands
    return _keep(instr, a) if a is b else None


def _broadcast_scalar_constant(instr: HloInstruction) -> bool:
    return instr.opcode is O.BROADCAST and is_scalar_constant(instr.operands[0])


@rule("minmax_constant_to_rhs", O.MAXIMUM, O.MINIMUM)
def _minmax_canonical(g, instr):
    """max/min(Broadcast(C), A) -> max/min(A, Broadcast(C)). With a broadcast constant XLA:CPU's code
    returns A on ties and for any NaN (max(0, -0) is -0, max(1.5, NaN) and max(NaN, 1.5) are 1.5/NaN as
    A is), which ours, lhs-first, does with the constant on the right. A rank-0 constant stays (TF's
    XLA: max(NaN, x) of scalars is NaN). Only a broadcast *scalar* (a uniform constant becomes one: LLVM sees
    the value and folds the select): a broadcast array of different values is a load, and TF's XLA keeps
    XLA's lhs rule there (min(broadcast([0, 3.19]), NaN) is 0, 3.19)."""
    a, b = instr.operands
    if _broadcast_scalar_constant(a) and not (is_constant(b) or is_broadcast_of_constant(b)):
        return _binary(g, instr.opcode, b, a, instr, instr.shape)
    return None


@rule("mul_reassociate_constants", O.MULTIPLY)
def _mul_reassociate(g, mul):
    """(A * C1) * C2 -> A * (C1 * C2)."""
    return _reassociate(g, mul, O.MULTIPLY)


@rule("mul_exp", O.MULTIPLY)
def _mul_exp(g, mul):
    """exp(A) * exp(B) -> exp(A + B)."""
    a, b = mul.operands
    if a.opcode is O.EXP and b.opcode is O.EXP:
        return _unary(g, O.EXP, _binary(g, O.ADD, a.operands[0], b.operands[0], mul), mul)
    return None


@rule("div_one", O.DIVIDE)
def _div_one(g, div):
    """A / 1 -> A."""
    a, b = div.operands
    return _keep(div, a) if is_all(b, 1) else None


@rule("div_integral_by_power_of_two", O.DIVIDE)
def _div_shift(g, div):
    """Integer A / 2^k -> A >> k (signed: on |A|, with the sign restored)."""
    if not _is_int(div):
        return None
    a, b = div.operands
    c = b if is_constant(b) else (b.operands[0] if b.opcode is O.BROADCAST else None)
    lit = known_literal(c) if c is not None else None
    if lit is None or lit.size != 1:
        return None
    value = int(lit.reshape(-1)[0])
    if value <= 0 or value & (value - 1):
        return None
    shift = value.bit_length() - 1
    shift_c = make_scalar_like(g, a.shape, shift, like=div)
    if not div.shape.element_type.is_signed_int:
        return _binary(g, O.SHIFT_RIGHT_LOGICAL, a, shift_c, div, div.shape)
    zero = make_scalar_like(g, a.shape, 0, like=div)
    negative = g.make(O.COMPARE, [a, zero], like=div, comparison_direction=A.ComparisonDirection.LT)
    magnitude = g.make(O.SELECT, [negative, _unary(g, O.NEGATE, a, div), a], like=div)
    quotient = _binary(g, O.SHIFT_RIGHT_LOGICAL, magnitude, shift_c, div)
    return g.make(O.SELECT, [negative, _unary(g, O.NEGATE, quotient, div), quotient], like=div)


@rule("div_exp_exp", O.DIVIDE)
def _div_exp_exp(g, div):
    """exp(A) / exp(B) -> exp(A - B)."""
    a, b = div.operands
    if a.opcode is O.EXP and b.opcode is O.EXP:
        return _unary(g, O.EXP, _binary(g, O.SUBTRACT, a.operands[0], b.operands[0], div), div)
    return None


@rule("div_by_exp", O.DIVIDE)
def _div_exp(g, div):
    """A / exp(B) -> A * exp(-B)."""
    a, b = div.operands
    if b.opcode is O.EXP:
        return _binary(g, O.MULTIPLY, a, _unary(g, O.EXP, _unary(g, O.NEGATE, b.operands[0], div), div), div)
    return None


@rule("div_by_pow", O.DIVIDE)
def _div_pow(g, div):
    """A / pow(B, C) -> A * pow(B, -C)."""
    a, b = div.operands
    if b.opcode is O.POWER:
        base, exponent = b.operands
        return _binary(g, O.MULTIPLY, a, _binary(g, O.POWER, base, _unary(g, O.NEGATE, exponent, div), div), div)
    return None


@rule("div_by_sqrt", O.DIVIDE)
def _div_sqrt(g, div):
    """A / sqrt(B) -> A * rsqrt(B) and A / rsqrt(B) -> A * sqrt(B), when the root has one use."""
    a, b = div.operands
    swap = {O.SQRT: O.RSQRT, O.RSQRT: O.SQRT}
    if b.opcode in swap and g.user_count(b) == 1:
        return _binary(g, O.MULTIPLY, a, _unary(g, swap[b.opcode], b.operands[0], div), div)
    return None


@rule("div_by_constant_to_mul", O.DIVIDE)
def _div_const(g, div):
    """Float A / C -> A * (1/C) for a constant (or broadcast constant) C and non-constant A."""
    a, b = div.operands
    if not _is_float(div) or is_constant(a):
        return None
    c = b if is_constant(b) else (b.operands[0] if is_broadcast_of_constant(b) else None)
    lit = known_literal(c) if c is not None else None
    if lit is None:
        return None
    # XLA's InvertConstant computes 1/C on TF's compile thread, with FTZ/DAZ set: a denormal C inverts to
    # ±inf and a C past 1/tiny to ±0 (so inf / -max is inf * -0 = NaN, as TF's XLA gives).
    with np.errstate(all="ignore"), flushed_denormals():
        inverse = (np.ones_like(lit) / lit).astype(lit.dtype)
        if np.iscomplexobj(lit):
            # C++'s complex division (C99 Annex G) recovers what numpy leaves NaN: 1/(-inf, NaN) is (-0, -0),
            # so 0 / (-inf, NaN) stays 0 as TF's XLA gives (XLA's complex divide has the same fix-ups).
            inverse = np.where(np.isnan(inverse), complex_divide(np.ones_like(lit), lit), inverse)
    inv = g.add(constant_instruction(inverse, c.shape.element_type, c.shape.dimensions, like=c))
    if b is not c:
        inv = g.make(O.BROADCAST, [inv], b.shape, like=b, dimensions=b.dimensions)
    return _binary(g, O.MULTIPLY, a, inv, div, div.shape)


@rule("div_of_divs", O.DIVIDE)
def _div_div(g, div):
    """Float (A/B)/(C/D) -> (A*D)/(B*C); (A/B)/C -> A/(B*C); A/(B/C) -> (A*C)/B."""
    if not _is_float(div):
        return None
    x, y = div.operands
    if x.opcode is O.DIVIDE and y.opcode is O.DIVIDE:
        (a, b), (c, d) = x.operands, y.operands
        return _binary(g, O.DIVIDE, _binary(g, O.MULTIPLY, a, d, div), _binary(g, O.MULTIPLY, b, c, div), div)
    if x.opcode is O.DIVIDE:
        a, b = x.operands
        return _binary(g, O.DIVIDE, a, _binary(g, O.MULTIPLY, b, y, div), div)
    if y.opcode is O.DIVIDE:
        b, c = y.operands
        return _binary(g, O.DIVIDE, _binary(g, O.MULTIPLY, x, c, div), b, div)
    return None


@rule("pow_special_exponent", O.POWER)
def _pow(g, pw):
    """pow(A, 0) -> 1, pow(A, 1) -> A, pow(1, A) -> 1, pow(exp(A), B) -> exp(A*B), pow(A, 2) -> A*A,
    pow(A, 3) -> A*(A*A), pow(A, -1) -> 1/A (integers too: XLA has no float guard, so int pow(0, -1) is
    1/0 = -1), and a float pow(A, 0.5) -> sqrt(A) for a non-negative A (is_non_negative). A*(A*A) rounds twice
    where pow rounds once: TF's XLA does (gelu_tanh's x³ differs by an ulp, and 1 + tanh magnifies it); and
    exp(A*B) is finite where exp(A) overflows (pow(exp(100), 0.01) is e in TF's XLA)."""
    a, b = pw.operands
    if is_all(b, 0):
        return make_scalar_like(g, pw.shape, 1, like=pw)
    if is_all(b, 1):
        return _keep(pw, a)
    if is_all(a, 1):
        return make_scalar_like(g, pw.shape, 1, like=pw)
    if a.opcode is O.EXP:
        return _unary(g, O.EXP, _binary(g, O.MULTIPLY, a.operands[0], b, pw), pw)
    if is_all(b, 2):
        return _binary(g, O.MULTIPLY, a, a, pw)
    if is_all(b, 3):
        return _binary(g, O.MULTIPLY, a, _binary(g, O.MULTIPLY, a, a, pw), pw)
    if is_all(b, -1):
        return _binary(g, O.DIVIDE, make_scalar_like(g, pw.shape, 1, like=pw), a, pw)
    if pw.shape.element_type.is_float and is_all(b, 0.5) and is_non_negative(a):  # IsAllFloat: floats only
        return _unary(g, O.SQRT, a, pw)
    return None


# ---------------------------------------------------------------- unary
@rule("log_exp", O.LOG)
def _log_exp(g, log):
    """log(exp(A)) -> A."""
    x = log.operands[0]
    return _keep(log, x.operands[0]) if x.opcode is O.EXP else None


@rule("log_of_pow", O.LOG)
def _log_pow(g, log):
    """Real log(pow(A, B)) -> B == 0 ? 0 : log(abs(A)) * B. The abs makes the log of a NaN pow of a negative
    base finite (TF's XLA: log(pow(-128, 88.4)) is 429, xlogy(y, pow(-128, y)) finite), and TF's XLA keeps
    log(pow(A, 0)) = 0 for every A (inf, NaN and 0 included), where log(abs(A)) * 0 alone would be NaN
    (both observed against TF 2.21's XLA; complex A is left alone)."""
    x = log.operands[0]
    if x.opcode is not O.POWER or not log.shape.element_type.is_float:
        return None
    a, b = x.operands
    product = _binary(g, O.MULTIPLY, _unary(g, O.LOG, _unary(g, O.ABS, a, log), log), b, log)
    zero = make_scalar_like(g, log.shape, 0, like=log)
    is_zero = g.make(O.COMPARE, [b, zero], like=log, comparison_direction=A.ComparisonDirection.EQ)
    return g.make(O.SELECT, [is_zero, zero, product], like=log)


@rule("log_of_root", O.LOG)
def _log_root(g, log):
    """log(sqrt(A)) -> log(A) * 0.5 and log(rsqrt(A)) -> log(A) * -0.5."""
    x = log.operands[0]
    factor = {O.SQRT: 0.5, O.RSQRT: -0.5}.get(x.opcode)
    if factor is None:
        return None
    return _binary(g, O.MULTIPLY, _unary(g, O.LOG, x.operands[0], log),
                   make_scalar_like(g, log.shape, factor, like=log), log)


@rule("sqrt_of_square", O.SQRT)
def _sqrt_of_square(g, sq):
    """sqrt(A*A) -> abs(A) (XLA's HandleSqrt; a complex A's abs converted back to the complex type). So the
    square cannot overflow or underflow: TF's XLA gives 3e20 for sqrt(x*x) of f32 3e20."""
    x = sq.operands[0]
    if x.opcode is not O.MULTIPLY or x.operands[0] is not x.operands[1]:
        return None
    ab = _unary(g, O.ABS, x.operands[0], sq)
    return g.make(O.CONVERT, [ab], sq.shape, like=sq) if sq.shape.element_type.is_complex else ab


@rule("abs_non_negative", O.ABS)
def _abs_non_negative(g, ab):
    """abs(A) -> A for a non-negative A (is_non_negative; XLA's HandleAbs). So asinh(exp(x)) keeps
    log(abs(exp(x))) -> x in its large-|x| branch, as TF's XLA (x + log 2 where exp(x) overflows)."""
    x = ab.operands[0]
    return _keep(ab, x) if is_non_negative(x) else None


@rule("negate_negate", O.NEGATE)
def _neg_neg(g, neg):
    """negate(negate(A)) -> A."""
    x = neg.operands[0]
    return _keep(neg, x.operands[0]) if x.opcode is O.NEGATE else None


@rule("not_not", O.NOT)
def _not_not(g, n):
    """not(not(A)) -> A."""
    x = n.operands[0]
    return _keep(n, x.operands[0]) if x.opcode is O.NOT else None


@rule("and_constant", O.AND)
def _and(g, i):
    """pred: A && true -> A, true && A -> A; any type: A && 0 -> 0, 0 && A -> 0."""
    a, b = i.operands
    if i.shape.element_type is P.PRED:
        if is_all(b, 1) and _keep(i, a):
            return a
        if is_all(a, 1) and _keep(i, b):
            return b
    return _first(_keep(i, b) if is_all(b, 0) else None, _keep(i, a) if is_all(a, 0) else None)


@rule("or_constant", O.OR)
def _or(g, i):
    """pred: A || true -> true, true || A -> true; any type: A || 0 -> A, 0 || A -> A."""
    a, b = i.operands
    if i.shape.element_type is P.PRED:
        if is_all(b, 1) and _keep(i, b):
            return b
        if is_all(a, 1) and _keep(i, a):
            return a
    return _first(_keep(i, a) if is_all(b, 0) else None, _keep(i, b) if is_all(a, 0) else None)


@rule("compare_self_integral", O.COMPARE)
def _compare_self(g, cmp):
    """Integer A cmp A -> true for EQ/GE/LE, false for NE/GT/LT."""
    a, b = cmp.operands
    if a is not b or not a.shape.element_type.is_integral:
        return None
    value = cmp.comparison_direction.value in ("EQ", "GE", "LE")
    return make_scalar_like(g, cmp.shape, value, like=cmp)


def is_non_negative(x: HloInstruction) -> bool:
    """XLA's IsNonNegative (real types), as TF 2.21's XLA: abs, exp, iota, A*A, power of a non-negative
    base, broadcast/select/minimum of non-negatives, maximum with a non-negative side, and a scalar
    constant that is neither negative, -0 nor NaN. A NaN under abs, exp, pow or A*A counts as non-negative
    (TF's XLA folds exp(NaN) >= 0 to true). XLA's fallback, IsPositive, holds only for a cuDNN custom call."""
    if any(o.shape.element_type.is_complex for o in x.operands) or x.shape.element_type.is_complex:
        return False
    if x.opcode in (O.ABS, O.EXP, O.IOTA):
        return True
    if x.opcode is O.MULTIPLY:
        return x.operands[0] is x.operands[1]
    if x.opcode in (O.BROADCAST, O.POWER):
        return is_non_negative(x.operands[0])
    if x.opcode is O.CONSTANT:  # GetConstantValue: a float or integer effective scalar
        lit = known_literal(x)
        t = x.shape.element_type
        if lit is None or lit.size != 1 or not (t.is_float or t.is_integral):
            return False
        v = float(lit.reshape(-1)[0])
        return not np.signbit(v) and not np.isnan(v)
    if x.opcode is O.MINIMUM:
        return is_non_negative(x.operands[0]) and is_non_negative(x.operands[1])
    if x.opcode is O.MAXIMUM:
        return is_non_negative(x.operands[0]) or is_non_negative(x.operands[1])
    if x.opcode is O.SELECT:
        return is_non_negative(x.operands[1]) and is_non_negative(x.operands[2])
    return False


@rule("compare_non_negative", O.COMPARE)
def _compare_non_negative(g, cmp):
    """N < 0 and 0 > N -> false, N >= 0 and 0 <= N -> true for a non-negative N (is_non_negative), as
    XLA (so tf2xla's FloorDiv sign test on abs(INT_MIN) is false, and abs(NaN) >= 0 is true)."""
    a, b = cmp.operands
    d = cmp.comparison_direction.value
    if d in ("LT", "GE") and is_all(b, 0) and is_non_negative(a):
        return make_scalar_like(g, cmp.shape, d == "GE", like=cmp)
    if d in ("GT", "LE") and is_all(a, 0) and is_non_negative(b):
        return make_scalar_like(g, cmp.shape, d == "LE", like=cmp)
    return None


# ---------------------------------------------------------------- conversions and copies
@rule("convert_noop", O.CONVERT)
def _convert_noop(g, cv):
    """convert(A) to A's own element type -> A."""
    x = cv.operands[0]
    return _keep(cv, x) if x.shape.element_type is cv.shape.element_type else None


def cast_preserves_values(src: P, dst: P) -> bool:
    """primitive_util::CastPreservesValues: every src value survives the round trip through dst."""
    if src is dst or src is P.PRED:
        return True
    if dst is P.PRED:
        return False
    if src.is_float and dst.is_float:
        return dst.exponent_bits >= src.exponent_bits and dst.mantissa_bits >= src.mantissa_bits
    if src.is_integral and dst.is_float:
        bits = src.bit_width - (1 if src.is_signed_int else 0)
        return dst.mantissa_bits + 1 >= bits
    if src.is_integral and dst.is_integral:
        if src.is_signed_int == dst.is_signed_int:
            return dst.bit_width >= src.bit_width
        return src.is_unsigned_int and dst.bit_width > src.bit_width
    if src.is_complex or dst.is_complex:
        return src.is_complex and dst.is_complex and dst.bit_width >= src.bit_width
    return False


@rule("convert_pair_noop", O.CONVERT)
def _convert_pair(g, cv):
    """convert(convert(A, T1), T2) -> A when A is T2 and T1 holds every value of A's type."""
    inner = cv.operands[0]
    if inner.opcode is not O.CONVERT:
        return None
    a = inner.operands[0]
    if a.shape.element_type is cv.shape.element_type and \
            cast_preserves_values(a.shape.element_type, inner.shape.element_type):
        return _keep(cv, a)
    return None


@rule("copy_noop", O.COPY)
def _copy(g, cp):
    """copy(A) with A's shape and layout -> A."""
    x = cp.operands[0]
    return x if x.shape == cp.shape else None


@rule("bitcast_noop", O.BITCAST)
def _bitcast(g, bc):
    """bitcast(A) with A's shape -> A; bitcast(bitcast(A)) -> bitcast(A)."""
    x = bc.operands[0]
    if x.shape == bc.shape:
        return x
    if x.opcode is O.BITCAST:
        return g.make(O.BITCAST, [x.operands[0]], bc.shape, like=bc)
    return None


# ---------------------------------------------------------------- data movement
_PERMUTE_OR_SUBSET = (O.RESHAPE, O.TRANSPOSE, O.REVERSE, O.SLICE, O.DYNAMIC_SLICE)


@rule("permute_of_scalar_broadcast", *_PERMUTE_OR_SUBSET)
def _of_scalar_broadcast(g, i):
    """reshape/transpose/reverse/slice/dynamic-slice of broadcast(scalar) -> broadcast(scalar)."""
    b = i.operands[0]
    if b.opcode is O.BROADCAST and b.operands[0].shape.rank == 0:
        return g.make(O.BROADCAST, [b.operands[0]], i.shape, like=i, dimensions=())
    return None


@rule("reshape_noop", O.RESHAPE)
def _reshape_noop(g, r):
    """reshape(A) to A's shape -> A."""
    return _keep(r, r.operands[0])


@rule("reshape_reshape", O.RESHAPE)
def _reshape_reshape(g, r):
    """reshape(reshape(A)) -> reshape(A)."""
    x = r.operands[0]
    if x.opcode is O.RESHAPE:
        return g.make(O.RESHAPE, [x.operands[0]], r.shape, like=r)
    return None


@rule("reshape_broadcast", O.RESHAPE)
def _reshape_broadcast(g, r):
    """reshape(broadcast(X)) -> broadcast(X) when the reshape leaves X's dimensions unmodified."""
    b = r.operands[0]
    if b.opcode is not O.BROADCAST:
        return None
    mapping = dict(dims_unmodified_by_reshape(b.shape, r.shape))
    if not all(d in mapping for d in b.dimensions):
        return None
    return g.make(O.BROADCAST, [b.operands[0]], r.shape, like=r, dimensions=tuple(mapping[d] for d in b.dimensions))


@rule("transpose_noop", O.TRANSPOSE)
def _transpose_noop(g, t):
    """transpose(A) with the identity permutation -> A."""
    return _keep(t, t.operands[0]) if tuple(t.dimensions) == tuple(range(len(t.dimensions))) else None


@rule("transpose_transpose", O.TRANSPOSE)
def _transpose_transpose(g, t):
    """transpose(transpose(A, p1), p2) -> transpose(A, p1 o p2)."""
    x = t.operands[0]
    if x.opcode is not O.TRANSPOSE:
        return None
    perm = tuple(x.dimensions[k] for k in t.dimensions)
    return g.make(O.TRANSPOSE, [x.operands[0]], t.shape, like=t, dimensions=perm)


@rule("transpose_is_reshape", O.TRANSPOSE)
def _transpose_reshape(g, t):
    """A transpose that only moves size-1 dimensions -> reshape."""
    dims = t.operands[0].shape.dimensions
    moved = [p for p in t.dimensions if dims[p] != 1]
    if moved != sorted(moved):
        return None
    return g.make(O.RESHAPE, [t.operands[0]], t.shape, like=t)


@rule("transpose_broadcast", O.TRANSPOSE)
def _transpose_broadcast(g, t):
    """transpose(broadcast(X)) -> broadcast(X) when X's dimensions stay in order."""
    b = t.operands[0]
    if b.opcode is not O.BROADCAST:
        return None
    inverse = {p: k for k, p in enumerate(t.dimensions)}
    new_dims = tuple(inverse[d] for d in b.dimensions)
    if list(new_dims) != sorted(new_dims):
        return None
    return g.make(O.BROADCAST, [b.operands[0]], t.shape, like=t, dimensions=new_dims)


@rule("broadcast_noop", O.BROADCAST)
def _broadcast_noop(g, b):
    """broadcast(A) to A's own shape -> A."""
    x = b.operands[0]
    return _keep(b, x) if tuple(b.dimensions) == tuple(range(x.shape.rank)) else None


@rule("broadcast_to_reshape", O.BROADCAST)
def _broadcast_reshape(g, b):
    """broadcast(X) adding no elements, with sorted dimensions -> reshape(X)."""
    x = b.operands[0]
    if list(b.dimensions) == sorted(b.dimensions) and b.shape.num_elements == x.shape.num_elements:
        return g.make(O.RESHAPE, [x], b.shape, like=b)
    return None


@rule("broadcast_to_transpose", O.BROADCAST)
def _broadcast_transpose(g, b):
    """broadcast(X) of the same rank and element count -> transpose(X)."""
    x = b.operands[0]
    if b.shape.rank == x.shape.rank and b.shape.num_elements == x.shape.num_elements:
        perm = [0] * len(b.dimensions)
        for k, d in enumerate(b.dimensions):
            perm[d] = k
        return g.make(O.TRANSPOSE, [x], b.shape, like=b, dimensions=tuple(perm))
    return None


@rule("broadcast_of_degenerate_reshape", O.BROADCAST)
def _broadcast_reshape_ins(g, b):
    """broadcast(reshape(X)) where the reshape only inserts size-1 dimensions -> broadcast(X)."""
    r = b.operands[0]
    if r.opcode is not O.RESHAPE:
        return None
    ok, deleted, inserted = reshape_inserts_or_deletes_degenerate_dims(r.operands[0].shape, r.shape)
    if not ok or deleted or not inserted:
        return None
    dims = tuple(d for k, d in enumerate(b.dimensions) if k not in inserted)
    return g.make(O.BROADCAST, [r.operands[0]], b.shape, like=b, dimensions=dims)


@rule("broadcast_iota", O.BROADCAST)
def _broadcast_iota(g, b):
    """broadcast(iota) -> iota."""
    x = b.operands[0]
    if x.opcode is O.IOTA and x.shape.rank > 0:
        return g.make(O.IOTA, [], b.shape, like=b, iota_dimension=b.dimensions[x.iota_dimension])
    return None


@rule("broadcast_broadcast", O.BROADCAST)
def _broadcast_broadcast(g, b):
    """broadcast(broadcast(X)) -> broadcast(X)."""
    x = b.operands[0]
    if x.opcode is not O.BROADCAST:
        return None
    return g.make(O.BROADCAST, [x.operands[0]], b.shape, like=b,
                  dimensions=tuple(b.dimensions[d] for d in x.dimensions))


@rule("broadcast_drop_degenerate_dims", O.BROADCAST)
def _broadcast_degenerate(g, b):
    """broadcast(X) with size-1 dimensions in X -> broadcast(reshape(X) without them)."""
    x = b.operands[0]
    if 1 not in x.shape.dimensions:
        return None
    keep = [k for k, d in enumerate(x.shape.dimensions) if d != 1]
    squeezed = g.make(O.RESHAPE, [x], Shape.array(x.shape.element_type, [x.shape.dimensions[k] for k in keep]),
                      like=b)
    return g.make(O.BROADCAST, [squeezed], b.shape, like=b, dimensions=tuple(b.dimensions[k] for k in keep))


@rule("slice_full", O.SLICE)
def _slice_full(g, s):
    """A slice that keeps every element -> its operand."""
    dims = s.operands[0].shape.dimensions
    if all(r.start == 0 and r.limit == d and r.stride == 1 for r, d in zip(s.slices, dims)):
        return _keep(s, s.operands[0])
    return None


@rule("dynamic_slice_full", O.DYNAMIC_SLICE)
def _dynamic_slice_full(g, s):
    """A dynamic-slice of its operand's whole shape -> the operand (every start clamps to 0)."""
    return _keep(s, s.operands[0])


@rule("dynamic_update_slice_full", O.DYNAMIC_UPDATE_SLICE)
def _dynamic_update_slice_full(g, s):
    """dynamic-update-slice(A, U, ...) with U of A's whole shape -> U."""
    return _keep(s, s.operands[1])


@rule("dynamic_update_slice_of_broadcast_to_pad", O.DYNAMIC_UPDATE_SLICE)
def _dynamic_update_slice_pad(g, s):
    """dynamic-update-slice(broadcast(scalar), U, constant starts) -> pad(U, scalar), the starts clamped
    into the operand as the slice clamps them (TF's dump of a one-id segment sum ends in this pad)."""
    b, update, starts = s.operands[0], s.operands[1], s.operands[2:]
    if b.opcode is not O.BROADCAST or b.operands[0].shape.rank != 0:
        return None
    lits = [known_literal(i) if i.opcode is O.CONSTANT else None for i in starts]
    if any(lit is None for lit in lits):
        return None
    pads = []
    for lit, n, u in zip(lits, s.shape.dimensions, update.shape.dimensions):
        low = min(max(int(lit.reshape(-1)[0]), 0), n - u)
        pads.append((low, n - u - low))
    return g.make(O.PAD, [update, b.operands[0]], s.shape, like=s, padding_config=A.PaddingConfig.of(pads))


@rule("map_inline", O.MAP)
def _map_inline(g, m):
    """HandleMap: a map whose computation returns a parameter -> that operand; whose root is one
    elementwise instruction of parameters -> that instruction on the map's operands."""
    root = m.to_apply.root
    if root.opcode is O.PARAMETER:
        return _keep(m, m.operands[root.parameter_number])
    if not root.is_elementwise() or root.opcode is O.MAP or any(o.opcode is not O.PARAMETER for o in root.operands):
        return None
    new = root.clone([m.operands[o.parameter_number] for o in root.operands])
    new.shape, new.metadata = m.shape, m.metadata
    return g.add(new)


@rule("slice_slice", O.SLICE)
def _slice_slice(g, s):
    """slice(slice(A)) -> slice(A)."""
    x = s.operands[0]
    if x.opcode is not O.SLICE:
        return None
    ranges = []
    for outer, inner, n in zip(s.slices, x.slices, s.shape.dimensions):
        if not n:   # an empty dimension: the composed start may lie past A's end (slice [1:1] of a [0:2:2])
            ranges.append(A.SliceRange(0, 0, 1))
            continue
        start = inner.start + outer.start * inner.stride
        stride = inner.stride * outer.stride
        ranges.append(A.SliceRange(start, start + (n - 1) * stride + 1, stride))
    return g.make(O.SLICE, [x.operands[0]], s.shape, like=s, slices=tuple(ranges))


@rule("slice_of_concat", O.SLICE)
def _slice_concat(g, s):
    """slice(concatenate(..., X, ...)) that reads only from X -> slice(X)."""
    c = s.operands[0]
    if c.opcode is not O.CONCATENATE:
        return None
    dim = c.dimensions[0]
    r = s.slices[dim]
    n = s.shape.dimensions[dim]
    last = r.start + (n - 1) * r.stride if n else r.start
    offset = 0
    for x in c.operands:
        size = x.shape.dimensions[dim]
        if offset <= r.start and last < offset + size:
            ranges = list(s.slices)
            # an empty slice stays empty: limit == start
            ranges[dim] = A.SliceRange(r.start - offset, last - offset + 1 if n else r.start - offset, r.stride)
            return g.make(O.SLICE, [x], s.shape, like=s, slices=tuple(ranges))
        offset += size
    return None


@rule("concat_single_operand", O.CONCATENATE)
def _concat_single(g, c):
    """concatenate(A) -> A."""
    return _keep(c, c.operands[0]) if len(c.operands) == 1 else None


@rule("concat_drop_empty", O.CONCATENATE)
def _concat_empty(g, c):
    """Operands with no elements along the concat dimension are dropped."""
    dim = c.dimensions[0]
    keep = [x for x in c.operands if x.shape.dimensions[dim] != 0]
    if len(keep) == len(c.operands) or not keep:
        return None
    return g.make(O.CONCATENATE, keep, c.shape, like=c, dimensions=c.dimensions)


@rule("concat_to_pad", O.CONCATENATE)
def _concat_pad(g, c):
    """concatenate(broadcast(s), A) or concatenate(A, broadcast(s)) with scalar s -> pad(A, s)."""
    if len(c.operands) != 2:
        return None
    x0, x1 = c.operands
    low = x0.opcode is O.BROADCAST and x0.operands[0].shape.rank == 0
    high = x1.opcode is O.BROADCAST and x1.operands[0].shape.rank == 0
    if not (low or high):
        return None
    dim = c.dimensions[0]
    operand, value = (x1, x0) if low else (x0, x1)
    pads = [(0, 0)] * c.shape.rank
    pads[dim] = (x0.shape.dimensions[dim], 0) if low else (0, x1.shape.dimensions[dim])
    return g.make(O.PAD, [operand, value.operands[0]], c.shape, like=c, padding_config=A.PaddingConfig.of(pads))


@rule("pad_noop", O.PAD)
def _pad_noop(g, p):
    """pad without any padding -> its operand."""
    if all(d.low == 0 and d.high == 0 and d.interior == 0 for d in p.padding_config.dimensions):
        return _keep(p, p.operands[0])
    return None


@rule("reverse_noop", O.REVERSE)
def _reverse_noop(g, r):
    """reverse over size-1 dimensions only -> its operand."""
    dims = r.operands[0].shape.dimensions
    return _keep(r, r.operands[0]) if all(dims[d] == 1 for d in r.dimensions) else None


@rule("sort_trivial", O.SORT)
def _sort_trivial(g, sort):
    """A sort along a dimension of at most one element (or of an empty array) -> its operand; a key/value
    sort's -> the tuple of its operands (XLA's HandleSort)."""
    x = sort.operands[0]
    if x.shape.num_elements and x.shape.dimensions[sort.dimensions[0]] > 1:
        return None
    if len(sort.operands) == 1:
        return _keep(sort, x)
    return g.make(O.TUPLE, list(sort.operands), sort.shape, like=sort)


@rule("reduce_to_reshape", O.REDUCE)
def _reduce_reshape(g, r):
    """A single-operand reduce that keeps the element count (size-1 dims) -> reshape; an empty
    operand -> broadcast(init)."""
    if len(r.operands) != 2 or r.shape.is_tuple:
        return None
    x, init = r.operands
    if x.shape.num_elements == 0:
        return g.make(O.BROADCAST, [init], r.shape, like=r, dimensions=())
    if x.shape.num_elements == r.shape.num_elements:
        return g.make(O.RESHAPE, [x], r.shape, like=r)
    return None


_ELEMENTWISE_WINDOW_REDUCERS = frozenset({O.ADD, O.MINIMUM, O.MAXIMUM})


@rule("reduce_window_trivial", O.REDUCE_WINDOW)
def _reduce_window_trivial(g, rw):
    """A single-operand reduce-window over an empty operand or result -> broadcast(init); of a scalar -> the
    scalar (XLA ignores the init there); with a 1x..x1 window, stride 1, no dilation or reversal and an
    add/min/max reducer -> ``op(x, broadcast(init))``, then pad(init) if the window pads. The last is what
    makes a 1x1 max_pool of a denormal the denormal in TF's XLA: LLVM folds ``x >=u -inf ? x : -inf`` to x.
    Not bf16: XLA:CPU's FloatNormalization, before the simplifier, has already cloned a bf16 reducer into f32
    with its result rounded through bf16 (``convert(convert(max))``), which no longer matches (a bf16 1x1
    max_pool stays a window loop: max(-inf, NaN) is -inf there)."""
    if len(rw.operands) != 2 or rw.shape.is_tuple:
        return None
    x, init = rw.operands
    if x.shape.num_elements == 0 or rw.shape.num_elements == 0:
        return g.make(O.BROADCAST, [init], rw.shape, like=rw, dimensions=())
    if x.shape.rank == 0:
        return _keep(rw, x)
    op = simple_reducer(rw.to_apply) if rw.shape.element_type is not P.BF16 else None
    if op not in _ELEMENTWISE_WINDOW_REDUCERS or not all(
            d.size == 1 and d.stride == 1 and d.window_dilation == 1 and d.base_dilation == 1
            and not d.window_reversal for d in rw.window.dimensions):
        return None
    r = _binary(g, op, x, make_broadcast(g, init, x.shape, rw), rw, x.shape)
    pads = [(d.padding_low, d.padding_high) for d in rw.window.dimensions]
    if any(lo > 0 or hi > 0 for lo, hi in pads):
        r = g.make(O.PAD, [r, init], rw.shape, like=rw, padding_config=A.PaddingConfig.of(pads))
    return _keep(rw, r)


@rule("reduce_window_to_reduce", O.REDUCE_WINDOW, layout_insensitive_only=True)
def _reduce_window_to_reduce(g, rw):
    """A single-output reduce-window with no stride, dilation or padding whose window is 1 or the whole
    dimension (result size 1) in every dimension -> reshape(reduce(x) over the whole-dimension ones)
    (HandleReduceWindow's enable_window_reduce_to_reduce_replacement, after reduce_window_trivial). The
    reducer is kept as it is (a bf16 one too), so a VALID max_pool whose window covers the image is a reduce
    in TF's XLA, emitted (and vectorised) as one. Not after layout assignment: the first fixed point has
    already rewritten every reduce-window that qualifies."""
    if len(rw.operands) != 2 or rw.shape.is_tuple:
        return None
    window = rw.window.dimensions
    if any(d.stride != 1 or d.window_dilation != 1 or d.base_dilation != 1 or d.padding_low or d.padding_high
           for d in window):
        return None
    dims = []
    for k, d in enumerate(window):
        if d.size == 1:
            continue
        if rw.shape.dimensions[k] != 1:
            return None
        dims.append(k)
    if not dims:
        return None
    x, init = rw.operands
    shape = Shape.array(rw.shape.element_type, [n for k, n in enumerate(rw.shape.dimensions) if k not in dims])
    reduce = g.make(O.REDUCE, [x, init], shape, like=rw, dimensions=tuple(dims),
                    called_computations=[rw.to_apply])
    return g.make(O.RESHAPE, [reduce], rw.shape, like=rw)


# ---------------------------------------------------------------- dots
def _make_dot(g: UseGraph, lhs, rhs, dn: A.DotDimensionNumbers, like: HloInstruction) -> HloInstruction:
    """A dot with ``like``'s result element type and precision."""
    probe = HloInstruction("dot", O.DOT, Shape.scalar(like.shape.element_type), [lhs, rhs], dot_dimension_numbers=dn)
    shape = infer_shape(probe)
    new = g.make(O.DOT, [lhs, rhs], shape, like=like, dot_dimension_numbers=dn,
                 operand_precision=like.operand_precision)
    new.raw_attributes = dict(like.raw_attributes)
    return new


@rule("dot_remove_degenerate_dims", O.DOT)
def _dot_degenerate(g, dot):
    """Size-1 dimensions of dot operands are reshaped away (RemoveDegenerateDimensionFromDot)."""
    lhs, rhs = dot.operands
    if 1 not in lhs.shape.dimensions and 1 not in rhs.shape.dimensions:
        return None

    def squeeze(x):
        keep = [k for k, d in enumerate(x.shape.dimensions) if d != 1]
        new_index = {old: new for new, old in enumerate(keep)}
        if len(keep) == x.shape.rank:
            return x, new_index
        shape = Shape.array(x.shape.element_type, [x.shape.dimensions[k] for k in keep])
        return g.make(O.RESHAPE, [x], shape, like=dot), new_index

    dn = dot.dot_dimension_numbers
    new_lhs, lmap = squeeze(lhs)
    new_rhs, rmap = squeeze(rhs)
    new_dn = A.DotDimensionNumbers(
        tuple(lmap[d] for d in dn.lhs_contracting_dimensions if d in lmap),
        tuple(rmap[d] for d in dn.rhs_contracting_dimensions if d in rmap),
        tuple(lmap[d] for d in dn.lhs_batch_dimensions if d in lmap),
        tuple(rmap[d] for d in dn.rhs_batch_dimensions if d in rmap))
    new = _make_dot(g, new_lhs, new_rhs, new_dn, dot)
    return new if new.shape.compatible(dot.shape) else g.make(O.RESHAPE, [new], dot.shape, like=dot)


@rule("dot_without_contraction_to_multiply", O.DOT)
def _dot_multiply(g, dot):
    """A dot with no contracting dimensions is an outer product: broadcast both sides and multiply."""
    dn = dot.dot_dimension_numbers
    if dn.lhs_contracting_dimensions:
        return None
    nb = len(dn.lhs_batch_dimensions)
    et = dot.shape.element_type

    def spread(x, batch, first_free):
        free = [d for d in range(x.shape.rank) if d not in batch]
        order = list(batch) + free
        if order != list(range(x.shape.rank)):
            x = g.make(O.TRANSPOSE, [x], like=dot, dimensions=tuple(order))
        if x.shape.element_type is not et:
            x = g.make(O.CONVERT, [x], x.shape.with_element_type(et), like=dot)
        dims = tuple(range(nb)) + tuple(range(first_free, first_free + len(free)))
        return g.make(O.BROADCAST, [x], Shape.array(et, dot.shape.dimensions), like=dot, dimensions=dims), len(free)

    lhs, n_lhs_free = spread(dot.operands[0], dn.lhs_batch_dimensions, nb)
    rhs, _ = spread(dot.operands[1], dn.rhs_batch_dimensions, nb + n_lhs_free)
    return _binary(g, O.MULTIPLY, lhs, rhs, dot, dot.shape)


@rule("set_dimension_size_static", O.SET_DIMENSION_SIZE)
def _set_dimension_size(g, s):
    """set-dimension-size on a static shape (the only kind the IR has) -> its operand (DynamicPadder)."""
    return _keep(s, s.operands[0])


# ---------------------------------------------------------------- select and tuples
@rule("select_same_branches", O.SELECT)
def _select_same(g, s):
    """select(P, A, A) -> A."""
    _, a, b = s.operands
    return _keep(s, a) if a is b else None


@rule("select_constant_predicate", O.SELECT)
def _select_const(g, s):
    """select(true, A, B) -> A and select(false, A, B) -> B."""
    p, a, b = s.operands
    return _first(_keep(s, a) if is_all(p, True) else None, _keep(s, b) if is_all(p, False) else None)


@rule("select_not_predicate", O.SELECT)
def _select_not(g, s):
    """select(not(P), A, B) -> select(P, B, A)."""
    p, a, b = s.operands
    if p.opcode is O.NOT:
        return g.make(O.SELECT, [p.operands[0], b, a], s.shape, like=s)
    return None


@rule("gte_of_tuple", O.GET_TUPLE_ELEMENT)
def _gte_tuple(g, gte):
    """get-tuple-element(tuple(..., A_i, ...), i) -> A_i."""
    t = gte.operands[0]
    return _keep(gte, t.operands[gte.tuple_index]) if t.opcode is O.TUPLE else None


# ---------------------------------------------------------------- convolutions
def _swapped_window_dim(w: A.WindowDimension, input_size: int) -> A.WindowDimension:
    """One spatial dimension of the swapped convolution: the window runs over the old input (reversed), the
    old kernel's dilation becomes the base dilation and the padding makes the same output positions."""
    dilated_kernel = 1 + (w.size - 1) * w.window_dilation
    dilated_input = 1 + (input_size - 1) * w.base_dilation
    return A.WindowDimension(size=input_size, stride=w.stride,
                             padding_low=dilated_input + w.padding_low - dilated_kernel,
                             padding_high=dilated_input + w.padding_high - dilated_kernel,
                             window_dilation=w.base_dilation, base_dilation=w.window_dilation,
                             window_reversal=True)


def swapped_dimension_numbers(dn: A.ConvolutionDimensionNumbers) -> A.ConvolutionDimensionNumbers:
    """The dimension numbers of ``convolution(kernel, input)`` for those of ``convolution(input, kernel)``:
    batch <-> kernel output feature, feature <-> kernel input feature, output batch <-> output feature. An
    involution (applied twice it gives ``dn`` back)."""
    return A.ConvolutionDimensionNumbers(
        input_batch_dimension=dn.kernel_output_feature_dimension,
        input_feature_dimension=dn.kernel_input_feature_dimension,
        input_spatial_dimensions=dn.kernel_spatial_dimensions,
        kernel_input_feature_dimension=dn.input_feature_dimension,
        kernel_output_feature_dimension=dn.input_batch_dimension,
        kernel_spatial_dimensions=dn.input_spatial_dimensions,
        output_batch_dimension=dn.output_feature_dimension,
        output_feature_dimension=dn.output_batch_dimension,
        output_spatial_dimensions=dn.output_spatial_dimensions)


def swap_conv_operands(x_shape: Shape, window: A.Window, dn: A.ConvolutionDimensionNumbers
                       ) -> tuple[A.Window, A.ConvolutionDimensionNumbers, tuple[int, ...]] | None:
    """XLA's SwapConvOperands on an ungrouped convolution of an input of ``x_shape``: the swapped
    convolution's window and dimension numbers and the kernel dimensions to reverse, or None when the
    kernel's spatial product (over the dimensions that are neither a pure contraction nor a group
    dimension) does not exceed the input's. Pure, so codegen can recognise a swapped convolution
    (kernels/loop.py runs it as the original one on finite values)."""
    new_window, reverse = [], []
    kernel_product = swapped_product = 1
    for i, w in enumerate(window.dimensions):
        n = x_shape.dimensions[dn.input_spatial_dimensions[i]]
        plain = not w.window_reversal and w.padding_low == 0 and w.padding_high == 0 and w.window_dilation == 1
        group_dim = plain and w.base_dilation == w.size and w.stride == w.size - 1
        contraction_dim = plain and w.size == n and w.base_dilation == 1 and w.stride == 1
        if group_dim or contraction_dim:
            new_window.append(w)
            continue
        kernel_product *= w.size
        full = n == 1 and w.stride == 1 and w.window_dilation == 1 and \
            w.padding_low == w.padding_high == w.size - 1
        swapped_product *= w.size if full else n
        if not w.window_reversal:
            reverse.append(dn.kernel_spatial_dimensions[i])
        new_window.append(_swapped_window_dim(w, n))
    if kernel_product <= swapped_product:
        return None
    return A.Window(tuple(new_window)), swapped_dimension_numbers(dn), tuple(reverse)


@rule("conv_operand_swap", O.CONVOLUTION, layout_insensitive_only=True)
def _conv_operand_swap(g, conv):
    """convolution(input, kernel) -> convolution(reverse(kernel), input) with a reversed window over the
    input, when the kernel is larger than the input (:func:`swap_conv_operands`): XLA's SwapConvOperands
    (on in XLA:CPU, before layout assignment; ungrouped convolutions only). TF's dump for a 3x3 SAME filter
    over a 3x2 image: ``convolution(reverse(filter), input), window={size=3x2 pad=1_1x0_0 rhs_reversal=1x1},
    dim_labels=01fb_o01i->f01b``. XLA:CPU then runs it as its elemental loop (a reversed window is never
    Eigen's), so the original taps are summed backwards and the original padding taps are not there."""
    if conv.feature_group_count > 1 or conv.batch_group_count > 1:
        return None
    x, k = conv.operands
    if x.shape.num_elements == 0 or k.shape.num_elements == 0:
        return None   # XLA makes that convolution zeros first
    swap = swap_conv_operands(x.shape, conv.window, conv.convolution_dimension_numbers)
    if swap is None:
        return None
    window, swapped, reverse = swap
    if reverse:
        k = g.make(O.REVERSE, [k], k.shape, like=conv, dimensions=reverse)
    precision = tuple(reversed(conv.operand_precision)) if conv.operand_precision else conv.operand_precision
    return _keep(conv, g.make(O.CONVOLUTION, [k, x], conv.shape, like=conv, name=conv.name,
                              window=window, convolution_dimension_numbers=swapped,
                              operand_precision=precision))


@rule("conv_to_multiply", O.CONVOLUTION, layout_insensitive_only=True)
def _conv_to_multiply(g, conv):
    """A depthwise convolution of multiplier 1 (one kernel input feature; input and output features both
    the group count; one channel and ungrouped included) without stride, padding or dilation whose window
    is 1 or the whole input in every spatial dimension -> reshape(reduce(x · broadcast(kernel), 0, add))
    over the whole-input dimensions, or the product alone: XLA's SimplifyConvToMultiply (layout-insensitive
    mode, after the operand swap). TF's dump for a [1,2,2,3] input and a [1,2,3,1] filter: a loop fusion
    of ``multiply`` and ``reduce(.., dimensions={2})``, summed from +0 in window order with the multiplies
    fused (``max·2 + max·(-2)`` is inf there; the Eigen convolution's rounded products give NaN)."""
    x, k = conv.operands
    dn = conv.convolution_dimension_numbers
    xs, ks, os_ = x.shape.dimensions, k.shape.dimensions, conv.shape.dimensions
    G = conv.feature_group_count
    if conv.batch_group_count != 1 or x.shape.num_elements == 0 or k.shape.num_elements == 0:
        return None
    if any(ks[kd] != 1 and os_[od] != 1
           for kd, od in zip(dn.kernel_spatial_dimensions, dn.output_spatial_dimensions)):
        return None
    if any(w.stride != 1 or w.padding_low or w.padding_high or w.base_dilation != 1 or w.window_dilation != 1
           or w.window_reversal for w in conv.window.dimensions):
        return None
    if ks[dn.kernel_input_feature_dimension] != 1 or xs[dn.input_feature_dimension] != G \
            or os_[dn.output_feature_dimension] != G:
        return None
    # operand dimension feeding each output dimension (the kernel's input feature takes the batch's place)
    x_perm, k_perm = [0] * conv.shape.rank, [0] * conv.shape.rank
    x_perm[dn.output_batch_dimension], k_perm[dn.output_batch_dimension] = \
        dn.input_batch_dimension, dn.kernel_input_feature_dimension
    x_perm[dn.output_feature_dimension], k_perm[dn.output_feature_dimension] = \
        dn.input_feature_dimension, dn.kernel_output_feature_dimension
    reduced = []
    for xd, kd, od in zip(dn.input_spatial_dimensions, dn.kernel_spatial_dimensions, dn.output_spatial_dimensions):
        x_perm[od], k_perm[od] = xd, kd
        if ks[kd] != 1:
            reduced.append(od)
    et = conv.shape.element_type
    if x_perm != sorted(x_perm):
        x = g.make(O.TRANSPOSE, [x], like=conv, dimensions=tuple(x_perm))
    if x.shape.element_type is not et:
        x = g.make(O.CONVERT, [x], Shape.array(et, x.shape.dimensions), like=conv)
    if k_perm != sorted(k_perm):
        k = g.make(O.TRANSPOSE, [k], like=conv, dimensions=tuple(k_perm))
    if k.shape.element_type is not et:
        k = g.make(O.CONVERT, [k], Shape.array(et, k.shape.dimensions), like=conv)
    # CreateBroadcastSequence: drop the kernel's size-1 dimensions the input has wider, then broadcast
    kept = [d for d, n in enumerate(k.shape.dimensions) if n == x.shape.dimensions[d]]
    if len(kept) != k.shape.rank:
        k = g.make(O.RESHAPE, [k], Shape.array(et, [k.shape.dimensions[d] for d in kept]), like=conv)
    k = g.make(O.BROADCAST, [k], Shape.array(et, x.shape.dimensions), like=conv, dimensions=tuple(kept))
    r = g.make(O.MULTIPLY, [x, k], Shape.array(et, x.shape.dimensions), like=conv)
    if reduced:
        module = g.comp.parent
        add = make_scalar_computation(O.ADD, et, f"{r.name}.reduce_sub_computation")
        module.add_computation(add)
        zero = g.add(constant_instruction(0, et, like=conv))
        shape = Shape.array(et, [n for d, n in enumerate(r.shape.dimensions) if d not in reduced])
        r = g.make(O.REDUCE, [r, zero], shape, like=conv, dimensions=tuple(reduced), called_computations=[add])
        r = g.make(O.RESHAPE, [r], conv.shape, like=conv)
    return _keep(conv, r)


# ---------------------------------------------------------------- layout-sensitive mode (after layout assignment)
def _row_major(shape: Shape) -> bool:
    return shape.is_array and shape.is_default_layout


@rule("reshape_is_bitcast", O.RESHAPE, layout_sensitive_only=True)
def _reshape_bitcast(g, r):
    """A reshape between row-major shapes only renames the buffer -> bitcast (ReshapeIsBitcast)."""
    x = r.operands[0]
    if _row_major(r.shape) and _row_major(x.shape) and x.shape.element_type is r.shape.element_type:
        return g.make(O.BITCAST, [x], r.shape, like=r)
    return None


@rule("transpose_is_bitcast", O.TRANSPOSE, layout_sensitive_only=True)
def _transpose_bitcast(g, t):
    """A transpose that keeps the physical element order -> bitcast (TransposeIsBitcast)."""
    x = t.operands[0]
    moved = [p for p in t.dimensions if x.shape.dimensions[p] != 1]
    if _row_major(t.shape) and _row_major(x.shape) and moved == sorted(moved):
        return g.make(O.BITCAST, [x], t.shape, like=t)
    return None


def _sink_broadcasts(g, u):
    """op(broadcast(X), broadcast(s), ...) -> broadcast(op(X, broadcast(s) to X's shape, ...)): every operand
    a broadcast, the non-scalar ones of equal operand shape and dimensions (XLA's
    TryToSinkBroadcastAfterOpWithUniqueNonScalarOperand, run from HandleBroadcast, so before the user's own
    rules). Only scalar broadcasts -> broadcast(op(s, ...)), which constant folding then folds; it is how
    converts of broadcast constants (float normalization) become broadcasts of f32 constants again."""
    if u.opcode is O.COPY or not u.operands or not u.is_elementwise() or not u.shape.dimensions:
        return None
    if any(o.opcode is not O.BROADCAST for o in u.operands):
        return None
    if not all(_row_major(o.shape) and _row_major(o.operands[0].shape) for o in u.operands + [u]):
        return None  # layout-assigned shapes stay as they are
    wide = [o for o in u.operands if o.operands[0].shape.rank > 0]
    if wide:
        x0 = wide[0].operands[0].shape
        if any(o.operands[0].shape != x0 or tuple(o.dimensions) != tuple(wide[0].dimensions) for o in wide):
            return None
        dims = tuple(wide[0].dimensions)
    else:
        x0, dims = None, ()
    ops = []
    for o in u.operands:
        x = o.operands[0]
        if x.shape.rank > 0 or x0 is None or not x0.dimensions:
            ops.append(x)
        else:
            ops.append(g.make(O.BROADCAST, [x], Shape.array(x.shape.element_type, x0.dimensions), like=o,
                              dimensions=()))
    if u.opcode in (O.MAXIMUM, O.MINIMUM) and _broadcast_scalar_constant(u.operands[0]) \
            and not is_broadcast_of_constant(u.operands[1]):
        ops.reverse()  # minmax_constant_to_rhs first: the sunk op keeps the broadcast form's NaN behaviour
    inner_dims = x0.dimensions if x0 is not None else ()
    inner = u.clone(ops)
    inner.shape = Shape.array(u.shape.element_type, inner_dims)
    inner.metadata = u.metadata
    g.add(inner)
    return g.make(O.BROADCAST, [inner], u.shape, like=u, dimensions=dims)


RULES.insert(0, Rule("sink_broadcast_after_elementwise", tuple(sorted(ELEMENTWISE, key=lambda o: o.value)),
                     _sink_broadcasts))


RULES_BY_OPCODE: dict[O, list[Rule]] = {}
for _r in RULES:
    for _op in _r.opcodes:
        RULES_BY_OPCODE.setdefault(_op, []).append(_r)


class AlgebraicSimplifier(HloPass):
    """XLA's AlgebraicSimplifier. ``layout_sensitive`` (after layout assignment) also turns reshapes and
    transposes that keep the physical order into bitcasts; ``disabled_rules`` names rules to skip;
    ``only_rules``, if given, the only rules to apply."""

    name = "algsimp"

    def __init__(self, layout_sensitive: bool = False, disabled_rules: frozenset[str] = frozenset(),
                 only_rules: frozenset[str] | None = None) -> None:
        self.layout_sensitive = layout_sensitive
        self.disabled_rules = disabled_rules
        self.only_rules = only_rules
        self.stats: Counter[str] = Counter()

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        # The rules this simplifier applies, by opcode (in RULES_BY_OPCODE's order).
        rules = {op: [r for r in rs if r.name not in self.disabled_rules
                      and (self.only_rules is None or r.name in self.only_rules)
                      and (self.layout_sensitive or not r.layout_sensitive_only)
                      and not (self.layout_sensitive and r.layout_insensitive_only)]
                 for op, rs in RULES_BY_OPCODE.items()}
        for comp in non_fusion_computations(module):
            g = UseGraph(comp)
            for instr in comp.post_order():
                if instr.parent is not comp or instr.control_predecessors:
                    continue
                for r in rules.get(instr.opcode, ()):
                    new = r.apply(g, instr)
                    if new is None or new is instr:
                        continue
                    g.replace(instr, new)
                    self.stats[r.name] += 1
                    changed = True
                    break
            g.finish()
        return changed


class ReshapeDecomposer(AlgebraicSimplifier):
    """XLA:CPU's "hlo normalization" between layout assignment and fusion (ReshapeDecomposer): with
    every layout row-major, each reshape is a bitcast. A transpose that keeps the physical order becomes a
    bitcast too, which XLA's layout assignment reaches as bitcast + a physically trivial copy. Nothing else
    is simplified before fusion: TF 2.21 runs its after-layout algsimp only after fusion."""

    name = "reshape-decomposer"

    def __init__(self) -> None:
        super().__init__(layout_sensitive=True, only_rules=frozenset({"reshape_is_bitcast", "transpose_is_bitcast"}))
