"""Fake quantization and quantize-dequantize (tf2xla's fake_quantize_ops.cc and
quantize_and_dequantize_op.cc).

Stage: lowering.

* FakeQuantWithMinMax*: TF's nudging (``scale = (max - min) / (qmax - qmin)``; the zero point
  ``qmin - min/scale`` clamped to [qmin, qmax] and rounded half away from zero; nudged range
  ``(q - zero_point)·scale``), then ``floor((clamp(x) - nudged_min)·(1/scale) + 0.5)·scale + nudged_min``.
  The Args variants nudge on the host in f32 (CpuNudge), the Vars variants in the graph (XlaNudge);
  PerChannel broadcasts per-channel ranges along the last dimension. Gradients pass the incoming
  gradient inside the nudged range; the Vars gradients sum the rest onto min (below) and max (above),
  over everything (Vars) or all but the last dimension (PerChannel), in the accumulation type.
* QuantizeAndDequantizeV2/V3/V4: the range is given or measured (reduce min/max); the quantized range
  ``[-2^(n-1) (+1 if narrow), 2^(n-1) - 1]`` or ``[0, 2^n - 1]``; the scale from the side that keeps 0
  fixed; the input clamped to the adjusted range, scaled, rounded (half to even, or half up) and scaled
  back. Per-axis ranges (``axis`` ≥ 0) reduce over every other dimension.
* Dequantize (qint8/quint8, MIN_COMBINED) as tf2xla; quantized types are their storage integers.
* UniformQuantize/Dequantize/Requantize/QuantizedClipByValue/QuantizedAdd: what TF's XLA legalization
  computes, bit for bit — ``clamp(round_half_even(x/scale + zero_point))`` in f32, ``(q - zp)·scale``,
  requantize = dequantize then quantize, add = both operands requantized to the output parameters and
  added as integers.
* UniformQuantizedDot (per-tensor, as TF's XLA legalises it): the s32 accumulator and the zero points'
  cross terms each multiplied by ``f32(ls·rs/os)`` (folded in f64) and truncated to s32 apart, then
  ``acc' + (out_zp - cross')`` — bit for bit, no clamp to the output range.
* UniformQuantizedConvolution (per-tensor): both operands dequantized, an f32 convolution, then
  ``clamp(x/os + ozp)`` rounded half to even — TF's XLA's float path. Per-axis parameters and the empty
  default ``dimension_numbers`` fail to legalise in TF's XLA and are refused here too.
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.registry import lowers


def _quant_range(ctx) -> tuple[float, float]:
    num_bits = int(ctx.attr("num_bits", 8))
    if not 2 <= num_bits <= 16:
        raise InvalidArgumentError(f"num_bits is out of range, expected between 2 and 16, was: {num_bits}")
    narrow = bool(ctx.attr("narrow_range", False))
    return (1.0 if narrow else 0.0), float((1 << num_bits) - 1)


def cpu_nudge(lo: float, hi: float, qmin: float, qmax: float) -> tuple[np.float32, np.float32, np.float32]:
    """TF's CpuNudge in float32: (nudged_min, nudged_max, scale)."""
    f = np.float32
    scale = (f(hi) - f(lo)) / (f(qmax) - f(qmin))
    zp = f(qmin) - f(lo) / scale
    if zp <= f(qmin):
        nzp = f(qmin)
    elif zp >= f(qmax):
        nzp = f(qmax)
    else:
        nzp = f(np.sign(zp) * np.floor(np.abs(zp) + f(0.5)))   # std::round: half away from zero
    return (f(qmin) - nzp) * scale, (f(qmax) - nzp) * scale, scale


def xla_nudge(b, lo, hi, qmin: float, qmax: float):
    scale = xl.div(b, b.subtract(hi, lo), qmax - qmin)
    zp = xl.sub(b, qmin, b.divide(lo, scale))
    nzp = xl.select(b, xl.le(b, zp, qmin), qmin, xl.select(b, xl.ge(b, zp, qmax), qmax, b.round_nearest_afz(zp)))
    return xl.mul(b, xl.sub(b, qmin, nzp), scale), xl.mul(b, xl.sub(b, qmax, nzp), scale), scale


def _fake_quant(b, x, nmin, nmax, scale):
    inv = xl.div(b, 1.0, scale)
    nmin, nmax = xl.broadcast_to(b, nmin, x.shape.dimensions), xl.broadcast_to(b, nmax, x.shape.dimensions)
    shifted = b.subtract(b.clamp(nmin, x, nmax), nmin)
    rounded = b.floor(xl.add(b, xl.mul(b, shifted, inv), 0.5))
    return xl.add(b, xl.mul(b, rounded, scale), nmin)


def _const(b, v, like):
    return xl.scalar(b, v, like.shape.element_type)


@lowers("FakeQuantWithMinMaxArgs")
def _fq_args(ctx, node):
    b = ctx.b
    x = ctx.input(0)
    nmin, nmax, scale = cpu_nudge(float(ctx.attr("min", -6.0)), float(ctx.attr("max", 6.0)), *_quant_range(ctx))
    return [_fake_quant(b, x, _const(b, nmin, x), _const(b, nmax, x), _const(b, scale, x))]


@lowers("FakeQuantWithMinMaxArgsGradient")
def _fq_args_grad(ctx, node):
    b = ctx.b
    g, x = ctx.input(0), ctx.input(1)
    nmin, nmax, _ = cpu_nudge(float(ctx.attr("min", -6.0)), float(ctx.attr("max", 6.0)), *_quant_range(ctx))
    inside = b.and_(xl.le(b, _const(b, nmin, x), x), xl.le(b, x, _const(b, nmax, x)))
    return [b.select(inside, g, xl.zeros_like(b, g))]


def _check_channels(ctx, x, lo, hi, per_channel: bool):
    if per_channel:
        d = x.shape.dimensions[-1] if x.shape.rank else None
        if lo.shape.dimensions != (d,) or hi.shape.dimensions != (d,):
            raise InvalidArgumentError(f"min and max must be vectors of length {d} (the last dimension)")
    elif lo.shape.rank or hi.shape.rank:
        raise InvalidArgumentError("min and max must be scalars")


@lowers("FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxVarsPerChannel")
def _fq_vars(ctx, node):
    b = ctx.b
    x, lo, hi = ctx.input(0), ctx.input(1), ctx.input(2)
    _check_channels(ctx, x, lo, hi, node.op.endswith("PerChannel"))
    nmin, nmax, scale = xla_nudge(b, lo, hi, *_quant_range(ctx))
    if node.op.endswith("PerChannel"):
        scale = xl.broadcast_to(b, scale, x.shape.dimensions)
    return [_fake_quant(b, x, nmin, nmax, scale)]


@lowers("FakeQuantWithMinMaxVarsGradient", "FakeQuantWithMinMaxVarsPerChannelGradient")
def _fq_vars_grad(ctx, node):
    b = ctx.b
    g, x, lo, hi = ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3)
    per_channel = node.op.endswith("PerChannelGradient")
    _check_channels(ctx, x, lo, hi, per_channel)
    nmin, nmax, _ = xla_nudge(b, lo, hi, *_quant_range(ctx))
    dims = x.shape.dimensions
    nmin_b, nmax_b = xl.broadcast_to(b, nmin, dims), xl.broadcast_to(b, nmax, dims)
    zeros = xl.zeros_like(b, g)
    inside = b.and_(b.compare(nmin_b, x, "LE"), b.compare(x, nmax_b, "LE"))
    et = g.shape.element_type
    acc = xl.sum_accumulation_type(et)
    axes = list(range(x.shape.rank - 1)) if per_channel else list(range(x.shape.rank))

    def total(mask, name):
        s = xl.reduce(b, xl.convert(b, b.select(mask, g, zeros), acc), 0, axes, O.ADD, name)
        return xl.convert(b, s, et)
    return [b.select(inside, g, zeros), total(b.compare(x, nmin_b, "LT"), f"{node.name}-min"),
            total(b.compare(x, nmax_b, "GT"), f"{node.name}-max")]


# ---------------------------------------------------------------- QuantizeAndDequantize
@lowers("QuantizeAndDequantizeV2", "QuantizeAndDequantizeV3", "QuantizeAndDequantizeV4")
def _quantize_dequantize(ctx, node):
    b = ctx.b
    x = ctx.input(0)
    et = x.shape.element_type
    signed, narrow = bool(ctx.attr("signed_input", True)), bool(ctx.attr("narrow_range", False))
    range_given = bool(ctx.attr("range_given", node.op == "QuantizeAndDequantizeV3"))
    round_mode = str(ctx.attr("round_mode", "HALF_TO_EVEN"))
    if round_mode not in ("HALF_TO_EVEN", "HALF_UP"):
        raise InvalidArgumentError(f"Invalid round_mode: {round_mode}")
    axis = int(ctx.attr("axis", -1))
    r = x.shape.rank
    if axis < -1 or axis >= max(r, 1):
        raise InvalidArgumentError(f"Axis requested is larger than input dimensions. Axis: {axis} Input "
                                   f"Dimensions: {r}")
    dims = x.shape.dimensions
    per_axis = axis >= 0
    if range_given:
        lo, hi = ctx.input(1), ctx.input(2)
        want = (dims[axis],) if per_axis else ()
        if lo.shape.dimensions != want or hi.shape.dimensions != want:
            raise InvalidArgumentError(f"input_min and input_max must have shape {list(want)}")
    else:
        others = [d for d in range(r) if d != axis] if per_axis else list(range(r))
        lo = xl.reduce(b, x, xl.max_value(et), others, O.MINIMUM, f"{node.name}-min")
        hi = xl.reduce(b, x, xl.min_value(et), others, O.MAXIMUM, f"{node.name}-max")
    if node.op == "QuantizeAndDequantizeV3":
        bits = xl.convert(b, ctx.input(3), et)
    else:
        n = int(ctx.attr("num_bits", 8))
        if not 0 < n < (62 if signed else 63):
            raise InvalidArgumentError(f"num_bits is out of range: {n} with signed_input_ {signed}")
        bits = xl.scalar(b, n, et)
    two = xl.scalar(b, 2.0, et)
    if signed:
        p = b.power(two, xl.sub(b, bits, 1.0))
        qmin = b.negate(p) if not narrow else xl.add(b, b.negate(p), 1.0)
        qmax = xl.sub(b, p, 1.0)
    else:
        qmin = xl.scalar(b, 0.0, et)
        qmax = xl.sub(b, b.power(two, bits), 1.0)
    big = xl.max_finite_value(et)
    from_min = xl.select(b, xl.gt(b, xl.mul(b, lo, qmin), 0.0), xl.div(b, qmin, lo), big)
    from_max = xl.select(b, xl.gt(b, xl.mul(b, hi, qmax), 0.0), xl.div(b, qmax, hi), big)
    cond = xl.lt(b, from_min, from_max)
    scale = xl.select(b, cond, from_min, from_max)
    inverse = xl.select(b, cond, xl.div(b, lo, qmin), xl.div(b, hi, qmax))
    lo = xl.select(b, cond, lo, xl.mul(b, qmin, inverse))
    hi = xl.select(b, cond, xl.mul(b, qmax, inverse), hi)

    def widen(v):
        return b.broadcast(v, dims, (axis,)) if per_axis else xl.broadcast_to(b, v, dims)
    lo_b, hi_b, scale_b, inv_b = widen(lo), widen(hi), widen(scale), widen(inverse)
    clamped = b.clamp(lo_b, x, hi_b)
    scaled = b.multiply(clamped, scale_b)
    if round_mode == "HALF_TO_EVEN":
        rounded = b.round_nearest_even(scaled)
    else:
        rounded = b.floor(xl.add(b, scaled, 0.5))
    return [b.multiply(rounded, inv_b)]


# ---------------------------------------------------------------- Dequantize (qint8 / quint8)
@lowers("Dequantize")
def _dequantize(ctx, node):
    """tf2xla's Dequantize: MIN_COMBINED only, no narrow range, no axis; qint8/quint8 (their storage
    integers); ``(float(x) + half_range)·scale + min`` in f32 with the scale computed on the host in f32,
    converted to bf16 when asked."""
    b = ctx.b
    from tensorflow.core.framework import types_pb2

    if str(ctx.attr("mode", "MIN_COMBINED")) != "MIN_COMBINED":
        raise InvalidArgumentError(f"Mode string must be 'MIN_COMBINED' is {ctx.attr('mode')}'")
    if bool(ctx.attr("narrow_range", False)):
        raise InvalidArgumentError("narrow_range must be false")
    if int(ctx.attr("axis", -1)) != -1:
        raise InvalidArgumentError(f"axis must be -1' is {ctx.attr('axis')}")
    f = np.float32
    lo, hi = f(ctx.const_input(1).reshape(())), f(ctx.const_input(2).reshape(()))
    tf_type = ctx.input_tf_dtype(0) % 100   # ref types carry +100
    if tf_type == types_pb2.DT_QINT8:
        full_range = f(127) - f(-128)
        half = (full_range + f(1)) / f(2)
    elif tf_type == types_pb2.DT_QUINT8:
        full_range, half = f(255), f(0)
    else:
        raise InvalidArgumentError(f"Only support DT_QINT8 or DT_QUINT8, got {tf_type}")
    scale = (hi - lo) / full_range
    x = b.convert(ctx.input(0), P.F32)
    out = xl.add(b, xl.mul(b, xl.add(b, x, half), scale), lo)
    return [xl.convert(b, out, ctx.output_type(0))]


# ---------------------------------------------------------------- uniform quantization (qint8 / qint32)
def _per_axis(ctx, b, v, x, axis_attr: str):
    """A scale / zero-point input as an array broadcast over ``x``: a scalar (per tensor) or a vector along
    ``quantization_axis``."""
    axis = int(ctx.attr(axis_attr, -1))
    dims = x.shape.dimensions
    if axis == -1:
        if v.shape.rank:
            raise InvalidArgumentError(f"{ctx.op}: per-tensor quantization needs scalar scales and zero points")
        return b.broadcast(v, dims, ()) if dims else v
    if not 0 <= axis < len(dims) or v.shape.dimensions != (dims[axis],):
        raise InvalidArgumentError(f"{ctx.op}: scales and zero points must be vectors of length "
                                   f"{dims[axis] if 0 <= axis < len(dims) else '?'} for quantization_axis {axis}")
    return b.broadcast(v, dims, (axis,))


@lowers("UniformQuantize")
def _uniform_quantize(ctx, node):
    """``clamp(round_half_even(x / scale + zero_point), qmin, qmax)`` in f32, stored as the quantized type's
    integers (what TF's XLA lowering computes; TF's CPU kernel rounds before adding the zero point)."""
    b = ctx.b
    x = xl.convert(b, ctx.input(0), P.F32)
    scale = _per_axis(ctx, b, xl.convert(b, ctx.input(1), P.F32), x, "quantization_axis")
    zp = _per_axis(ctx, b, xl.convert(b, ctx.input(2), P.F32), x, "quantization_axis")
    lo, hi = float(ctx.attr("quantization_min_val")), float(ctx.attr("quantization_max_val"))
    v = b.round_nearest_even(b.add(b.divide(x, scale), zp))
    v = b.clamp(xl.full(b, lo, P.F32, x.shape.dimensions), v, xl.full(b, hi, P.F32, x.shape.dimensions))
    return [b.convert(v, ctx.output_type(0))]


@lowers("UniformDequantize")
def _uniform_dequantize(ctx, node):
    """``(q - zero_point)·scale`` in f32."""
    b = ctx.b
    q = ctx.input(0)
    scale = _per_axis(ctx, b, xl.convert(b, ctx.input(1), P.F32), q, "quantization_axis")
    zp = _per_axis(ctx, b, ctx.input(2), q, "quantization_axis")
    diff = b.convert(b.subtract(xl.convert(b, q, P.S32), xl.convert(b, zp, P.S32)), P.F32)
    return [xl.convert(b, b.multiply(diff, scale), ctx.output_type(0))]


@lowers("UniformQuantizedClipByValue")
def _uniform_clip(ctx, node):
    """Clamping quantized integers that share scale and zero point is an integer clamp."""
    b = ctx.b
    x = ctx.input(0)
    lo = _per_axis(ctx, b, ctx.input(1), x, "quantization_axis")
    hi = _per_axis(ctx, b, ctx.input(2), x, "quantization_axis")
    return [b.clamp(lo, x, hi)]


def _dequant(ctx, b, q, scale_i: int, zp_i: int, axis_attr: str):
    scale = _per_axis(ctx, b, xl.convert(b, ctx.input(scale_i), P.F32), q, axis_attr)
    zp = _per_axis(ctx, b, ctx.input(zp_i), q, axis_attr)
    return b.multiply(b.convert(b.subtract(xl.convert(b, q, P.S32), xl.convert(b, zp, P.S32)), P.F32), scale)


def _quant(ctx, b, v, scale_i: int, zp_i: int, axis_attr: str, prefix: str, out_t):
    scale = _per_axis(ctx, b, xl.convert(b, ctx.input(scale_i), P.F32), v, axis_attr)
    zp = _per_axis(ctx, b, xl.convert(b, ctx.input(zp_i), P.F32), v, axis_attr)
    lo, hi = float(ctx.attr(f"{prefix}quantization_min_val")), float(ctx.attr(f"{prefix}quantization_max_val"))
    r = b.round_nearest_even(b.add(b.divide(v, scale), zp))
    r = b.clamp(xl.full(b, lo, P.F32, v.shape.dimensions), r, xl.full(b, hi, P.F32, v.shape.dimensions))
    return b.convert(r, out_t)


@lowers("UniformRequantize")
def _uniform_requantize(ctx, node):
    """Dequantize with the input parameters, quantize with the output ones (f32, half-to-even)."""
    b = ctx.b
    v = _dequant(ctx, b, ctx.input(0), 1, 2, "input_quantization_axis")
    return [_quant(ctx, b, v, 3, 4, "output_quantization_axis", "output_", ctx.output_type(0))]


@lowers("UniformQuantizedAdd")
def _uniform_add(ctx, node):
    """Each operand requantized to the output parameters (rounded half to even), the integers added and the
    output zero point subtracted once, then clamped — integer-domain addition as TF's XLA lowers it."""
    b = ctx.b
    out_t = ctx.output_type(0)
    ranges = {p: (int(ctx.attr(f"{p}_quantization_min_val")), int(ctx.attr(f"{p}_quantization_max_val")))
              for p in ("lhs", "rhs", "output")}
    if len(set(ranges.values())) != 1:
        # TF's XLA legalization needs compatible quantized storage types on both operands and the result
        raise InvalidArgumentError(f"UniformQuantizedAdd: TF's XLA requires the same quantization_min_val/max_val "
                                   f"for lhs, rhs and output, got {ranges}")

    def requant(i, scale_i, zp_i, axis_attr):
        v = _dequant(ctx, b, ctx.input(i), scale_i, zp_i, axis_attr)
        scale = _per_axis(ctx, b, xl.convert(b, ctx.input(6), P.F32), v, "output_quantization_axis")
        zp = _per_axis(ctx, b, xl.convert(b, ctx.input(7), P.F32), v, "output_quantization_axis")
        return b.round_nearest_even(b.add(b.divide(v, scale), zp))
    lhs, rhs = requant(0, 2, 3, "lhs_quantization_axis"), requant(1, 4, 5, "rhs_quantization_axis")
    lhs, rhs = xl.broadcast_pair(b, lhs, rhs)
    zp = _per_axis(ctx, b, xl.convert(b, ctx.input(7), P.F32), lhs, "output_quantization_axis")
    total = b.subtract(b.add(lhs, rhs), zp)
    lo, hi = float(ctx.attr("output_quantization_min_val")), float(ctx.attr("output_quantization_max_val"))
    dims = total.shape.dimensions
    total = b.clamp(xl.full(b, lo, P.F32, dims), total, xl.full(b, hi, P.F32, dims))
    return [b.convert(total, out_t)]


def _uq_params(ctx) -> tuple[int, int, np.float32]:
    """(lhs zero point, rhs zero point, rescale factor ``f32(lhs_scale·rhs_scale/output_scale)``) of a
    per-tensor UniformQuantizedDot/Convolution; TF's XLA legalization folds them as constants and accepts
    per-tensor parameters only (a quantization axis fails to legalize there)."""
    for side in ("lhs", "rhs", "output"):
        if int(ctx.attr(f"{side}_quantization_axis", -1)) != -1:
            raise UnimplementedError(f"{ctx.op} ({ctx.name}): per-axis {side} quantization; TF's XLA fails to "
                                     "legalize it too (per-tensor parameters only)")
    vals = [np.asarray(ctx.const_input(i)) for i in range(2, 8)]
    if any(v.ndim for v in vals):
        raise InvalidArgumentError(f"{ctx.op}: per-tensor quantization needs scalar scales and zero points")
    ls, lzp, rs, rzp, os_, _ = vals
    # the f32 scales multiplied and divided in f64, rounded once to f32 (as the legalisation folds them)
    scale = np.float32(float(np.float32(ls)) * float(np.float32(rs)) / float(np.float32(os_)))
    return int(lzp), int(rzp), scale


def _uq_rescale(ctx, b, acc, zp_term, scale: np.float32):
    """TF's XLA rescaling: ``s32(f32(acc)·m) + (out_zp - s32(f32(zp_term)·m))`` — each product truncated
    to s32 on its own, then the integers combined (no clamp to the output range)."""
    dims = acc.shape.dimensions
    m = b.broadcast(b.constant(scale, P.F32), dims, ())
    scaled = b.convert(b.multiply(b.convert(acc, P.F32), m), P.S32)
    zp_scaled = b.convert(b.multiply(b.convert(zp_term, P.F32), m), P.S32)
    out_zp = b.broadcast(b.constant(np.int32(ctx.const_input(7)), P.S32), dims, ())
    return b.add(scaled, b.subtract(out_zp, zp_scaled))


@lowers("UniformQuantizedDot")
def _uniform_quantized_dot(ctx, node):
    """``lhs[m,k]·rhs[k,n]`` of qint8 integers accumulated in s32, the zero points' cross terms
    ``rowsum(lhs)·rhs_zp + colsum(rhs)·lhs_zp - k·lhs_zp·rhs_zp`` rescaled apart (tf2xla's MLIR
    legalisation of UniformQuantizedDot, bit for bit)."""
    b = ctx.b
    lzp, rzp, scale = _uq_params(ctx)
    lhs, rhs = ctx.input(0), ctx.input(1)
    if lhs.shape.rank != 2 or rhs.shape.rank != 2 or lhs.shape.dimensions[1] != rhs.shape.dimensions[0]:
        raise InvalidArgumentError(f"UniformQuantizedDot: lhs {lhs.shape.dimensions} and rhs "
                                   f"{rhs.shape.dimensions} must be [m, k] and [k, n]")
    (m, k), n = lhs.shape.dimensions, rhs.shape.dimensions[1]
    acc = b.dot(lhs, rhs, result_type=P.S32)
    row = xl.reduce(b, b.convert(lhs, P.S32), 0, (1,), O.ADD, "add")
    col = xl.reduce(b, b.convert(rhs, P.S32), 0, (0,), O.ADD, "add")
    cross = b.add(b.broadcast(xl.mul(b, row, rzp), (m, n), (0,)), b.broadcast(xl.mul(b, col, lzp), (m, n), (1,)))
    zp_term = xl.sub(b, cross, k * lzp * rzp)
    return [_uq_rescale(ctx, b, acc, zp_term, scale)]


def _uq_conv_dnums(ctx, node):
    """The op's ``dimension_numbers`` (a serialized UniformQuantizedConvolutionDimensionNumbersAttr) as
    HLO's. TF's XLA legalisation refuses the empty default (every dimension 0), and so do we."""
    from tensorflow.core.util.quantization import uniform_quant_ops_attr_pb2

    from tfxla_cluster.hlo.attrs import ConvolutionDimensionNumbers

    attr = uniform_quant_ops_attr_pb2.UniformQuantizedConvolutionDimensionNumbersAttr()
    raw = node.node_def.attr["dimension_numbers"].s if "dimension_numbers" in node.node_def.attr else b""
    attr.ParseFromString(raw)  # the serialized proto itself (not text)
    dn = ConvolutionDimensionNumbers(
        attr.input_batch_dimension, attr.input_feature_dimension, tuple(attr.input_spatial_dimensions),
        attr.kernel_input_feature_dimension, attr.kernel_output_feature_dimension,
        tuple(attr.kernel_spatial_dimensions), attr.output_batch_dimension, attr.output_feature_dimension,
        tuple(attr.output_spatial_dimensions))
    for side, dims in (("input", (dn.input_batch_dimension, dn.input_feature_dimension, *dn.input_spatial_dimensions)),
                       ("kernel", (dn.kernel_output_feature_dimension, dn.kernel_input_feature_dimension,
                                   *dn.kernel_spatial_dimensions)),
                       ("output", (dn.output_batch_dimension, dn.output_feature_dimension,
                                   *dn.output_spatial_dimensions))):
        if len(set(dims)) != len(dims):
            raise InvalidArgumentError(f"{ctx.op} ({ctx.name}): expects {side} dimension-numbers to be unique, "
                                       f"got {{{', '.join(map(str, dims))}}}")
    return dn


@lowers("UniformQuantizedConvolution")
def _uniform_quantized_convolution(ctx, node):
    """As TF's XLA legalises it, in f32: both operands dequantized (``(q - zp)·scale``), an f32
    convolution, ``/ output_scale + output_zp``, clamped to the output range, rounded half to even, s32."""
    from tfxla_cluster.hlo.attrs import Window

    b = ctx.b
    for side in ("lhs", "rhs", "output"):
        if int(ctx.attr(f"{side}_quantization_axis", -1)) != -1:
            raise UnimplementedError(f"{ctx.op} ({ctx.name}): per-axis {side} quantization; TF's XLA fails to "
                                     "legalize it too (per-tensor parameters only)")
    dn = _uq_conv_dnums(ctx, node)
    x = _dequant(ctx, b, ctx.input(0), 2, 3, "lhs_quantization_axis")
    w = _dequant(ctx, b, ctx.input(1), 4, 5, "rhs_quantization_axis")
    n = len(dn.input_spatial_dimensions)
    strides = list(ctx.attr("window_strides", [])) or [1] * n
    lhs_dil = list(ctx.attr("lhs_dilation", [])) or [1] * n
    rhs_dil = list(ctx.attr("rhs_dilation", [])) or [1] * n
    sizes = [w.shape.dimensions[d] for d in dn.kernel_spatial_dimensions]
    ins = [(x.shape.dimensions[d] - 1) * lhs_dil[i] + 1 for i, d in enumerate(dn.input_spatial_dimensions)]
    padding = ctx.attr("padding")
    padding = padding.decode() if isinstance(padding, bytes) else padding
    if padding == "EXPLICIT":
        flat = [int(v) for v in ctx.attr("explicit_padding", [])]
        if len(flat) != 2 * n:
            raise InvalidArgumentError(f"{ctx.op}: explicit_padding needs {2 * n} values, got {len(flat)}")
        pads = [(flat[2 * i], flat[2 * i + 1]) for i in range(n)]
    elif padding == "SAME":
        pads = []
        for i in range(n):
            eff = (sizes[i] - 1) * rhs_dil[i] + 1
            out = -(-ins[i] // strides[i])
            need = max((out - 1) * strides[i] + eff - ins[i], 0)
            pads.append((need // 2, need - need // 2))
    elif padding == "VALID":
        pads = [(0, 0)] * n
    else:
        raise InvalidArgumentError(f"{ctx.op}: unknown padding {padding!r}")
    window = Window.make(sizes, strides, pads, lhs_dil, rhs_dil)
    conv = b.convolution(x, w, window, dn, feature_group_count=int(ctx.attr("feature_group_count", 1)),
                         batch_group_count=int(ctx.attr("batch_group_count", 1)))
    scale = _per_axis(ctx, b, xl.convert(b, ctx.input(6), P.F32), conv, "output_quantization_axis")
    zp = _per_axis(ctx, b, xl.convert(b, ctx.input(7), P.F32), conv, "output_quantization_axis")
    v = b.add(b.divide(conv, scale), zp)
    dims = conv.shape.dimensions
    lo, hi = float(ctx.attr("output_quantization_min_val")), float(ctx.attr("output_quantization_max_val"))
    v = b.clamp(xl.full(b, lo, P.F32, dims), v, xl.full(b, hi, P.F32, dims))
    return [b.convert(b.round_nearest_even(v), ctx.output_type(0))]
