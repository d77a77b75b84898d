"""Complex numbers inside a cluster, as pairs of real HLO arrays.

Stage: lowering. Our HLO pipeline and codegen compile real element types only, so a complex64/128 TF
tensor is carried through the lowering as a :class:`ComplexValue` (real part, imaginary part, both
f32/f64) and never becomes a complex HLO value: ``Complex`` builds one, ``Real``/``Imag`` take a part,
``ComplexAbs`` is ``sqrt(re² + im²)``, ``Conj`` negates the imaginary part, and the elementwise
arithmetic ops (Add/AddV2/Sub/Mul/RealDiv/Div/Neg/Square) use the textbook formulas when an operand
is complex (a complex host constant splits into two constants). At the cluster boundary a complex
argument is a c64/c128 parameter bound as ``(real(p), imag(p))`` and a complex result leaves as
``complex(re, im)`` (lower.py), as TF's XLA takes and returns them; inside called functions and loop
state complex values are not supported.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.hlo.ir import HloInstruction
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.registry import lowers

_PART = {np.dtype(np.complex64): P.F32, np.dtype(np.complex128): P.F64}


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


@lowers("Complex")
def _complex(ctx, node):
    b = ctx.b
    re, im = ctx.input(0), ctx.input(1)
    re, im = xl.broadcast_pair(b, re, im)
    return [ComplexValue(re, im)]


@lowers("Real")
def _real(ctx, node):
    return [parts(ctx, 0)[0]]


@lowers("Imag")
def _imag(ctx, node):
    return [parts(ctx, 0)[1]]


@lowers("ComplexAbs")
def _complex_abs(ctx, node):
    b = ctx.b
    re, im = parts(ctx, 0)
    return [b.unary(O.SQRT, xl.add(b, xl.mul(b, re, re), xl.mul(b, im, im)))]


@lowers("Conj")
def _conj(ctx, node):
    if not is_complex_input(ctx, 0):
        return [ctx.input_value(0)]
    re, im = parts(ctx, 0)
    return [ComplexValue(re, xl.neg(ctx.b, im))]


def _mul(b, a, c):
    (ar, ai), (cr, ci) = a, c
    return xl.sub(b, xl.mul(b, ar, cr), xl.mul(b, ai, ci)), xl.add(b, xl.mul(b, ar, ci), xl.mul(b, ai, cr))


def _div(b, a, c):
    (ar, ai), (cr, ci) = a, c
    den = xl.add(b, xl.mul(b, cr, cr), xl.mul(b, ci, ci))
    return (xl.div(b, xl.add(b, xl.mul(b, ar, cr), xl.mul(b, ai, ci)), den),
            xl.div(b, xl.sub(b, xl.mul(b, ai, cr), xl.mul(b, ar, ci)), den))


COMPLEX_BINARY = {
    "Add": lambda b, a, c: (xl.add(b, a[0], c[0]), xl.add(b, a[1], c[1])),
    "AddV2": lambda b, a, c: (xl.add(b, a[0], c[0]), xl.add(b, a[1], c[1])),
    "Sub": lambda b, a, c: (xl.sub(b, a[0], c[0]), xl.sub(b, a[1], c[1])),
    "Mul": _mul,
    "RealDiv": _div,
    "Div": _div,
}
COMPLEX_UNARY = {
    "Neg": lambda b, a: (xl.neg(b, a[0]), xl.neg(b, a[1])),
    "Square": lambda b, a: _mul(b, a, a),
}


def lower_complex_elementwise(ctx, node) -> list:
    """The complex form of an elementwise op (called by the elementwise family when an input is complex)."""
    b = ctx.b
    if ctx.num_inputs == 1 and node.op in COMPLEX_UNARY:
        return [ComplexValue(*COMPLEX_UNARY[node.op](b, parts(ctx, 0)))]
    if ctx.num_inputs == 2 and node.op in COMPLEX_BINARY:
        re, im = COMPLEX_BINARY[node.op](b, parts(ctx, 0), parts(ctx, 1))
        return [ComplexValue(re, im)]
    raise UnimplementedError(f"complex operands of {node.op} are not supported")
