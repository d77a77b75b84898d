"""Elementwise TF ops (tf2xla's unary_ops.cc, binary_ops.cc, cwise_ops.cc, relu_op.cc, elu_op.cc,
cast_op.cc, select_op.cc, clip_by_value_op.cc, bias_ops.cc, aggregate_ops.cc).

Stage: lowering. Two tables hold the math: ``UNARY`` (op → ``fn(b, x)``) and ``BINARY`` (op →
``fn(b, x, y)`` on operands already broadcast to one shape). Binary ops follow ``XlaBinaryOp``: TF's
numpy-style broadcasting is validated (``Incompatible shapes: [2,3] vs. [4]``) and made explicit with
``reshape``/``broadcast`` before the HLO op. TF's integer semantics are kept where they differ from
HLO's: FloorDiv/FloorMod round toward -inf, TruncateDiv toward zero, Round/Rint are banker's rounding,
Sign(NaN) = 0. ``_UnaryOpsComposition`` (grappler's fused unary chain) reuses ``UNARY``.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo.ir import HloInstruction
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.complex_ops import (clip_complex, complex_hlo, is_complex_input, lower_complex_cast,
                                              lower_complex_elementwise)
from tfxla_cluster.tf2hlo.registry import lowers

Unary = Callable[..., HloInstruction]
Binary = Callable[..., HloInstruction]

# Selu's constants (TF's selu kernel).
_SELU_SCALE = 1.0507009873554804934193349852946
# tf2xla's literal for scale·alpha (the product of the two rounded doubles is an ulp below it)
_SELU_SCALE_ALPHA = 1.7580993408473768599402175208123


def _relu6(b, x):
    et = x.shape.element_type
    return b.clamp(xl.full(b, 0, et, x.shape.dimensions), x, xl.full(b, 6, et, x.shape.dimensions))


def _elu(b, x):
    return b.select(xl.gt(b, x, 0), x, b.expm1(x))


def _selu(b, x):
    pos = xl.mul(b, x, _SELU_SCALE)
    neg = xl.mul(b, b.expm1(x), _SELU_SCALE_ALPHA)
    return b.select(xl.gt(b, x, 0), pos, neg)


UNARY: dict[str, Unary] = {
    "Abs": lambda b, x: b.abs(x),
    "Neg": lambda b, x: b.negate(x),
    "Exp": lambda b, x: b.exp(x),
    "Expm1": lambda b, x: b.expm1(x),
    "Log": lambda b, x: b.log(x),
    "Log1p": lambda b, x: b.log1p(x),
    "Sqrt": lambda b, x: b.sqrt(x),
    "Rsqrt": lambda b, x: b.rsqrt(x),
    "Square": lambda b, x: b.multiply(x, x),
    "Reciprocal": lambda b, x: xl.div(b, 1, x),
    "Inv": lambda b, x: xl.div(b, 1, x),
    "Sin": lambda b, x: b.sin(x),
    "Cos": lambda b, x: b.cos(x),
    "Tan": lambda b, x: b.tan(x),
    "Tanh": lambda b, x: b.tanh(x),
    "Sigmoid": lambda b, x: b.logistic(x),
    "Sinh": xl.sinh,
    "Cosh": xl.cosh,
    "Asinh": xl.asinh,
    "Acosh": xl.acosh,
    "Atanh": xl.atanh,
    "Asin": xl.asin,
    "Acos": xl.acos,
    "Atan": xl.atan,
    "Erf": lambda b, x: b.erf(x),
    "Erfc": xl.erfc,
    "Floor": lambda b, x: b.floor(x),
    "Ceil": lambda b, x: b.ceil(x),
    "Round": xl.round_to_even,
    "Rint": xl.round_to_even,
    "Sign": lambda b, x: b.sign(x),  # TF 2.21: Sign(NaN) = NaN, as HLO sign
    "IsNan": xl.is_nan,
    "IsInf": xl.is_inf,
    "IsFinite": lambda b, x: b.is_finite(x),
    "LogicalNot": lambda b, x: b.not_(x),
    "Invert": lambda b, x: b.not_(x),
    "Relu": lambda b, x: xl.maximum(b, x, 0),  # TF 2.21's HLO: maximum(x, broadcast(0))
    "Relu6": _relu6,
    "Elu": _elu,
    "Selu": _selu,
    "Softplus": xl.softplus,
    "Softsign": lambda b, x: b.divide(x, xl.add(b, b.abs(x), 1)),
    "Lgamma": xl.lgamma,
    "Digamma": xl.digamma,
    "Erfinv": xl.erfinv,
    "Ndtri": lambda b, x: xl.mul(b, xl.erfinv(b, xl.sub(b, xl.mul(b, x, 2.0), 1.0)), 2.0 ** 0.5),
    "PopulationCount": lambda b, x: b.convert(b.popcnt(x), P.U8),  # TF returns uint8 counts
}


def _floor_div(b, x, y):
    et = x.shape.element_type
    if et is P.BF16:  # a bf16 divide can round up to the next integer; divide in f32 as tf2xla does
        q = b.divide(b.convert(x, P.F32), b.convert(y, P.F32))
        return b.convert(b.floor(q), P.BF16)
    if et.is_float:
        return b.floor(b.divide(x, y))
    if et.is_unsigned_int:
        return b.divide(x, y)
    # tf2xla's FloorDivImpl: q = x / y, minus one when inexact and the signs differ (so x / 0 is -2
    # for x < 0 under XLA's x / 0 = -1).
    q = b.divide(x, y)
    inexact = b.compare(b.multiply(q, y), x, "NE")
    different_sign = b.compare(xl.lt(b, x, 0), xl.lt(b, y, 0), "NE")
    return b.select(b.and_(inexact, different_sign), xl.sub(b, q, 1), q)


def _floor_mod(b, x, y):
    trunc_mod = b.remainder(x, y)
    if x.shape.element_type.is_unsigned_int:
        return trunc_mod
    do_plus = b.and_(b.compare(xl.lt(b, trunc_mod, 0), xl.lt(b, y, 0), "NE"), xl.ne(b, trunc_mod, 0))
    return b.select(do_plus, b.add(trunc_mod, y), trunc_mod)


def _truncate_div(b, x, y):
    if not x.shape.element_type.is_float:
        return b.divide(x, y)  # HLO integer division already truncates
    q = b.divide(x, y)
    return b.select(xl.lt(b, q, 0), b.ceil(q), b.floor(q))


def _no_nan(opcode: O) -> Binary:
    def fn(b, x, y):
        return b.select(xl.eq(b, y, 0), xl.zeros_like(b, x), b.binary(opcode, x, y))
    return fn


def _x_op_y(inner: Callable) -> Binary:
    """Xlogy/Xdivy/Xlog1py: 0 where x == 0, else inner(x, y)."""
    def fn(b, x, y):
        return b.select(xl.eq(b, x, 0), xl.zeros_like(b, x), inner(b, x, y))
    return fn


def _next_after(b, x, y):
    """The next representable value after x toward y (XLA's NextAfter, on the bit patterns)."""
    et = x.shape.element_type
    it = {16: P.U16, 32: P.U32, 64: P.U64}[et.bit_width]
    sign = 1 << (et.bit_width - 1)
    xi, yi = b.bitcast_convert(x, it), b.bitcast_convert(y, it)
    x_abs, y_abs = xl.and_(b, xi, np.asarray(sign - 1, it.dtype)), xl.and_(b, yi, np.asarray(sign - 1, it.dtype))
    x_sign, y_sign = xl.and_(b, xi, np.asarray(sign, it.dtype)), xl.and_(b, yi, np.asarray(sign, it.dtype))
    smaller = b.or_(b.compare(x_abs, y_abs, "GT"), b.compare(x_sign, y_sign, "NE"))
    stepped = b.select(smaller, xl.sub(b, xi, np.asarray(1, it.dtype)), xl.add(b, xi, np.asarray(1, it.dtype)))
    from_zero = xl.or_(b, y_sign, np.asarray(1, it.dtype))  # the smallest subnormal, signed like y
    result = b.select(xl.eq(b, x_abs, np.asarray(0, it.dtype)),
                      b.select(xl.eq(b, y_abs, np.asarray(0, it.dtype)), yi, from_zero), stepped)
    result = b.select(b.compare(xi, yi, "EQ"), yi, result)
    out = b.bitcast_convert(result, et)
    return b.select(b.or_(xl.is_nan(b, x), xl.is_nan(b, y)), xl.full(b, np.nan, et, x.shape.dimensions), out)


def _right_shift(b, x, y):
    if x.shape.element_type.is_unsigned_int:
        return b.shift_right_logical(x, y)
    return b.shift_right_arithmetic(x, y)


def _compare(direction: str) -> Binary:
    return lambda b, x, y: b.compare(x, y, direction)


BINARY: dict[str, Binary] = {
    "Add": lambda b, x, y: b.add(x, y),
    "AddV2": lambda b, x, y: b.add(x, y),
    "Sub": lambda b, x, y: b.subtract(x, y),
    "Mul": lambda b, x, y: b.multiply(x, y),
    "Div": lambda b, x, y: b.divide(x, y),
    "RealDiv": lambda b, x, y: b.divide(x, y),
    "DivNoNan": _no_nan(O.DIVIDE),
    "MulNoNan": _no_nan(O.MULTIPLY),
    "FloorDiv": _floor_div,
    "FloorMod": _floor_mod,
    "TruncateDiv": _truncate_div,
    "TruncateMod": lambda b, x, y: b.remainder(x, y),
    "Mod": lambda b, x, y: b.remainder(x, y),
    "Pow": lambda b, x, y: b.power(x, y),
    "Maximum": lambda b, x, y: b.maximum(x, y),
    "Minimum": lambda b, x, y: b.minimum(x, y),
    "SquaredDifference": lambda b, x, y: xl.square(b, b.subtract(x, y)),
    "Atan2": lambda b, x, y: b.atan2(x, y),
    "NextAfter": _next_after,
    "Xlogy": _x_op_y(lambda b, x, y: b.multiply(x, b.log(y))),
    "Xdivy": _x_op_y(lambda b, x, y: b.divide(x, y)),
    "Xlog1py": _x_op_y(lambda b, x, y: b.multiply(x, b.log1p(y))),
    "Equal": _compare("EQ"),
    "NotEqual": _compare("NE"),
    "Less": _compare("LT"),
    "LessEqual": _compare("LE"),
    "Greater": _compare("GT"),
    "GreaterEqual": _compare("GE"),
    "LogicalAnd": lambda b, x, y: b.and_(x, y),
    "LogicalOr": lambda b, x, y: b.or_(x, y),
    "BitwiseAnd": lambda b, x, y: b.and_(x, y),
    "BitwiseOr": lambda b, x, y: b.or_(x, y),
    "BitwiseXor": lambda b, x, y: b.xor(x, y),
    "LeftShift": lambda b, x, y: b.shift_left(x, y),
    "RightShift": _right_shift,
    # Gradients: (y or gradients, dy or features) as in TF's kernels.
    "ReluGrad": lambda b, g, f: b.select(xl.gt(b, f, 0), g, xl.zeros_like(b, g)),
    "Relu6Grad": lambda b, g, f: b.select(b.and_(xl.gt(b, f, 0), xl.lt(b, f, 6)), g, xl.zeros_like(b, g)),
    "EluGrad": lambda b, g, y: b.select(xl.gt(b, y, 0), g, b.multiply(g, xl.add(b, y, 1))),
    "SeluGrad": lambda b, g, y: b.select(xl.gt(b, y, 0), xl.mul(b, g, _SELU_SCALE),
                                         b.multiply(g, xl.add(b, y, _SELU_SCALE_ALPHA))),
    "SigmoidGrad": lambda b, y, dy: b.multiply(b.multiply(dy, y), xl.sub(b, 1, y)),
    "TanhGrad": lambda b, y, dy: b.multiply(dy, xl.sub(b, 1, b.multiply(y, y))),
    "RsqrtGrad": lambda b, y, dy: b.multiply(b.multiply(b.multiply(y, y), y), xl.div(b, dy, -2)),
    "SqrtGrad": lambda b, y, dy: b.divide(xl.mul(b, dy, 0.5), y),
    "ReciprocalGrad": lambda b, y, dy: b.negate(b.multiply(dy, b.multiply(y, y))),
    "SoftplusGrad": lambda b, g, f: b.multiply(g, b.logistic(f)),
    "SoftsignGrad": lambda b, g, f: b.divide(g, xl.square(b, xl.add(b, b.abs(f), 1))),
}


def _lower_unary(ctx, node):
    if is_complex_input(ctx, 0):
        return lower_complex_elementwise(ctx, node, UNARY[node.op])
    return [UNARY[node.op](ctx.b, ctx.input(0))]


def _lower_binary(ctx, node):
    if is_complex_input(ctx, 0) or is_complex_input(ctx, 1):
        return lower_complex_elementwise(ctx, node, BINARY[node.op])
    x, y = ctx.broadcast_inputs()
    return [BINARY[node.op](ctx.b, x, y)]


lowers(*UNARY)(_lower_unary)
lowers(*BINARY)(_lower_binary)


@lowers("_UnaryOpsComposition")
def _unary_composition(ctx, node):
    x = ctx.input(0)
    for op in ctx.attr("op_names"):
        fn = UNARY.get(op)
        if fn is None:
            raise InvalidArgumentError(f"_UnaryOpsComposition: unsupported op {op}")
        x = fn(ctx.b, x)
    return [x]


@lowers("LeakyRelu")
def _leaky_relu(ctx, node):
    x = ctx.input(0)
    alpha = float(ctx.attr("alpha"))
    return [ctx.b.select(xl.gt(ctx.b, x, 0), x, xl.mul(ctx.b, x, alpha))]


@lowers("LeakyReluGrad")
def _leaky_relu_grad(ctx, node):
    g, f = ctx.broadcast_inputs()
    alpha = float(ctx.attr("alpha"))
    return [ctx.b.select(xl.gt(ctx.b, f, 0), g, xl.mul(ctx.b, g, alpha))]


@lowers("ApproximateEqual")
def _approximate_equal(ctx, node):
    if is_complex_input(ctx, 0):   # |x - y| of the complex difference (XLA's complex abs)
        x, y = xl.broadcast_pair(ctx.b, complex_hlo(ctx, 0), complex_hlo(ctx, 1))
    else:
        x, y = ctx.broadcast_inputs()
    diff = ctx.b.abs(ctx.b.subtract(x, y))
    return [xl.lt(ctx.b, diff, float(ctx.attr("tolerance")))]


@lowers("AddN")
def _add_n(ctx, node):
    xs = ctx.inputs()
    acc = xs[0]
    for x in xs[1:]:
        acc = ctx.b.add(acc, x)
    return [acc]


@lowers("Cast")
def _cast(ctx, node):
    if is_complex_input(ctx, 0) or ctx.attr_type("DstT").is_complex:
        return [lower_complex_cast(ctx)]
    x = ctx.input(0)
    src, dst = x.shape.element_type, ctx.attr_type("DstT")
    b = ctx.b
    if src is dst:
        return [x]
    if dst is P.PRED:  # TF casts to bool as x != 0
        return [xl.ne(b, x, 0)]
    if src.is_complex and not dst.is_complex:
        x = b.real(x)
    if ctx.attr("Truncate", False) and src.is_float and dst.is_float and dst.mantissa_bits < src.mantissa_bits:
        # tf2xla's truncation: the mantissa bits the narrower type lacks are zeroed (round toward zero)
        # before the conversion, on the bits (a NaN whose payload is only there becomes an inf, as in TF).
        ut = {16: P.U16, 32: P.U32, 64: P.U64}[src.bit_width]
        drop = src.mantissa_bits - dst.mantissa_bits
        mask = np.asarray(~((1 << drop) - 1) & ((1 << src.bit_width) - 1), ut.dtype)
        x = b.bitcast_convert(xl.and_(b, b.bitcast_convert(x, ut), mask), src)
    return [b.convert(x, dst)]


@lowers("ClipByValue")
def _clip_by_value(ctx, node):
    if is_complex_input(ctx, 0):
        return [clip_complex(ctx)]
    x = ctx.input(0)
    dims = x.shape.dimensions
    lo, hi = ctx.input(1), ctx.input(2)
    for name, v in (("min", lo), ("max", hi)):
        if v.shape.dimensions not in ((), dims):
            raise InvalidArgumentError(f"clip_value_{name} must be a scalar or have the shape of t "
                                       f"{list(dims)}, got {list(v.shape.dimensions)}")
    lo, hi = xl.broadcast_to(ctx.b, lo, dims), xl.broadcast_to(ctx.b, hi, dims)
    return [ctx.b.clamp(lo, x, hi)]


@lowers("Select")
def _select(ctx, node):
    cond, t, e = ctx.input(0), ctx.input(1), ctx.input(2)
    b = ctx.b
    if t.shape.dimensions != e.shape.dimensions:
        raise InvalidArgumentError(f"'then' and 'else' must have the same size.  but received: "
                                   f"{list(t.shape.dimensions)} vs. {list(e.shape.dimensions)}")
    cd, td = cond.shape.dimensions, t.shape.dimensions
    if not cd:
        cond = b.broadcast(cond, td, ()) if td else cond
    elif cd != td:
        # TF's Select also takes a vector condition that picks rows of t/e.
        if len(cd) != 1 or not td or cd[0] != td[0]:
            raise InvalidArgumentError(f"'cond' must be a scalar, a vector matching the first dimension of "
                                       f"'then', or have its shape: {list(cd)} vs. {list(td)}")
        cond = b.broadcast(cond, td, (0,))
    return [b.select(cond, t, e)]


@lowers("SelectV2")
def _select_v2(ctx, node):
    cond, t, e = ctx.input(0), ctx.input(1), ctx.input(2)
    return [xl.select(ctx.b, cond, t, e)]


def _feature_dim(ctx, rank: int) -> int:
    fmt = ctx.attr("data_format", "NHWC")
    if rank < 2:
        raise InvalidArgumentError(f"Input tensor must be at least 2D: [{rank}]")
    return 1 if fmt.startswith("NC") else rank - 1


@lowers("BiasAdd", "BiasAddV1")
def _bias_add(ctx, node):
    x, bias = ctx.input(0), ctx.input(1)
    dims = x.shape.dimensions
    fd = _feature_dim(ctx, len(dims))
    if bias.shape.rank != 1:
        raise InvalidArgumentError(f"Biases must be 1D: {list(bias.shape.dimensions)}")
    if bias.shape.dimensions[0] != dims[fd]:
        raise InvalidArgumentError(f"Must provide as many biases as the feature dimension of the input tensor: "
                                   f"{list(bias.shape.dimensions)} vs. {list(dims)}")
    return [ctx.b.add(x, ctx.b.broadcast(bias, dims, (fd,)))]


@lowers("BiasAddGrad")
def _bias_add_grad(ctx, node):
    x = ctx.input(0)
    rank = x.shape.rank
    fd = _feature_dim(ctx, rank)
    et = x.shape.element_type
    acc = xl.sum_accumulation_type(et)
    reduce_dims = [d for d in range(rank) if d != fd]
    r = xl.reduce(ctx.b, xl.convert(ctx.b, x, acc), 0, reduce_dims, O.ADD, f"add_{acc.value.upper()}")
    return [xl.convert(ctx.b, r, et)]

