"""Convolutions (tf2xla's conv_ops.cc and conv_op_helpers.cc: MakeXlaForwardConvOp,
MakeXlaBackpropInputConvOp, MakeXlaBackpropFilterConvOp).

Stage: lowering. All three are one HLO ``convolution``:

* forward: input ``b01f`` (NHWC) or ``bf01`` (NCHW), kernel ``01io``; strides are the window strides,
  dilations the kernel (rhs) dilation; SAME/VALID/EXPLICIT padding as TF computes it
  (``GetWindowedOutputSize``); ``feature_group_count`` = in_depth / filter_in_depth. Depthwise filters
  ``[h, w, in, multiplier]`` are reshaped to ``[h, w, 1, in·multiplier]`` with one group per channel.
* backprop input: the output gradient dilated by the strides (lhs dilation) convolved with the
  spatially reversed filter whose in/out feature dims swap roles; padding
  ``(k_eff - 1 - pad_before, in + k_eff - 1 - expanded_out - that)``.
* backprop filter: the input convolved with the output gradient as the kernel, batch and feature dims
  swapped (the batch is contracted), window strides = the forward dilations, window dilation = the
  forward strides; the result comes out directly as ``[h, w, in, out]``.
* grouped and depthwise backprops, as tf2xla: backprop input convolves with ``feature_group_count`` =
  groups (a grouped filter ``[h, w, in/G, out]`` is regrouped to ``[h, w, in, out/G]`` first; a
  depthwise filter ``[h, w, in, multiplier]`` already has that form); backprop filter uses
  ``batch_group_count`` = groups (depthwise: one per input channel, the ``[h, w, 1, in·multiplier]``
  result reshaped to the filter's shape).
* ``_FusedConv2D`` on int8 (XLA_CPU_JIT's only registration): the int8 operands convolved in f32, scaled,
  bias and scaled side input added, optional Relu, clamped to int8 and rounded half to even.
"""
from __future__ import annotations

from dataclasses import dataclass

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo.attrs import ConvolutionDimensionNumbers, Window
from tfxla_cluster.tf2hlo.registry import lowers


@dataclass
class ConvAttrs:
    nchw: bool
    strides: list[int]      # spatial only
    dilations: list[int]    # spatial only
    padding: str
    explicit: list[tuple[int, int]]  # spatial only

    @property
    def batch_dim(self) -> int:
        return 0

    def feature_dim(self, rank: int) -> int:
        return 1 if self.nchw else rank - 1

    def spatial_dims(self, rank: int) -> list[int]:
        return list(range(2, rank)) if self.nchw else list(range(1, rank - 1))


def conv_attrs(ctx, rank: int = 4) -> ConvAttrs:
    fmt = ctx.attr("data_format", "NHWC")
    nchw = fmt.startswith("NC")
    n = rank - 2
    sp = list(range(2, rank)) if nchw else list(range(1, rank - 1))
    strides = list(ctx.attr("strides"))
    dilations = list(ctx.attr("dilations", [1] * rank) or [1] * rank)
    if len(strides) != rank or len(dilations) != rank:
        raise InvalidArgumentError(f"Sliding window strides and dilations must have {rank} elements")
    feature = 1 if nchw else rank - 1
    if strides[0] != 1 or strides[feature] != 1:
        raise InvalidArgumentError("Current implementation does not yet support strides in the batch and depth "
                                   "dimensions.")
    if dilations[0] != 1 or dilations[feature] != 1:
        raise InvalidArgumentError("Current implementation does not support dilations in the batch and depth "
                                   "dimensions.")
    padding = ctx.attr("padding")
    explicit: list[tuple[int, int]] = [(0, 0)] * n
    if padding == "EXPLICIT":
        flat = list(ctx.attr("explicit_paddings"))
        pairs = [(flat[2 * i], flat[2 * i + 1]) for i in range(rank)]
        explicit = [pairs[d] for d in sp]
    return ConvAttrs(nchw, [strides[d] for d in sp], [dilations[d] for d in sp], padding, explicit)


def window_padding(attrs: ConvAttrs, in_sizes, filter_sizes) -> list[tuple[int, int]]:
    """TF's ``GetWindowedOutputSizeVerbose`` padding per spatial dim."""
    pads = []
    for i, (n, k) in enumerate(zip(in_sizes, filter_sizes)):
        eff = (k - 1) * attrs.dilations[i] + 1
        s = attrs.strides[i]
        if attrs.padding == "VALID":
            pads.append((0, 0))
        elif attrs.padding == "SAME":
            out = (n + s - 1) // s
            need = max((out - 1) * s + eff - n, 0)
            pads.append((need // 2, need - need // 2))
        elif attrs.padding == "EXPLICIT":
            pads.append(attrs.explicit[i])
        else:
            raise InvalidArgumentError(f"Unknown padding type {attrs.padding}")
    return pads


def _dnums(attrs: ConvAttrs, rank: int) -> ConvolutionDimensionNumbers:
    sp = tuple(attrs.spatial_dims(rank))
    f = attrs.feature_dim(rank)
    n = rank - 2
    return ConvolutionDimensionNumbers(0, f, sp, n, n + 1, tuple(range(n)), 0, f, sp)


def _groups(op: str, in_depth: int, filter_in_depth: int, depthwise: bool) -> int:
    """Feature groups of a convolution: one per input channel when depthwise, else in / filter-in depth."""
    if depthwise:
        if filter_in_depth != in_depth:
            raise InvalidArgumentError(f"{op}: input and filter must have the same depth: {in_depth} vs "
                                       f"{filter_in_depth}")
        return in_depth
    if filter_in_depth == 0 or in_depth % filter_in_depth:
        raise InvalidArgumentError(f"{op}: input depth must be evenly divisible by filter depth: {in_depth} vs "
                                   f"{filter_in_depth}")
    return in_depth // filter_in_depth


def _forward(ctx, node, x, w, depthwise: bool):
    b = ctx.b
    rank = x.shape.rank
    attrs = conv_attrs(ctx, rank)
    xd, wd = x.shape.dimensions, list(w.shape.dimensions)
    if len(wd) != rank:
        raise InvalidArgumentError(f"input and filter must have the same rank: {rank} vs {len(wd)}")
    sp = attrs.spatial_dims(rank)
    in_depth = xd[attrs.feature_dim(rank)]
    n = rank - 2
    groups = _groups(node.op, in_depth, wd[n], depthwise)
    if depthwise:
        w = b.reshape(w, wd[:n] + [1, wd[n] * wd[n + 1]])
    pads = window_padding(attrs, [xd[d] for d in sp], wd[:n])
    window = Window.make(wd[:n], attrs.strides, pads, rhs_dilation=attrs.dilations)
    return b.convolution(x, w, window, _dnums(attrs, rank), feature_group_count=groups)


@lowers("Conv2D", "Conv3D")
def _conv(ctx, node):
    return [_forward(ctx, node, ctx.input(0), ctx.input(1), depthwise=False)]


@lowers("DepthwiseConv2dNative")
def _depthwise_conv(ctx, node):
    return [_forward(ctx, node, ctx.input(0), ctx.input(1), depthwise=True)]


@lowers("Conv2DBackpropInput", "Conv3DBackpropInputV2", "DepthwiseConv2dNativeBackpropInput")
def _conv_backprop_input(ctx, node):
    b = ctx.b
    input_sizes = ctx.const_ints(0)
    w, dy = ctx.input(1), ctx.input(2)
    rank = dy.shape.rank
    attrs = conv_attrs(ctx, rank)
    n = rank - 2
    sp = attrs.spatial_dims(rank)
    f = attrs.feature_dim(rank)
    wd = list(w.shape.dimensions)
    depthwise = node.op == "DepthwiseConv2dNativeBackpropInput"
    if len(input_sizes) != rank or len(wd) != rank:
        raise InvalidArgumentError(f"{node.op}: input_sizes and filter must have rank {rank}")
    groups = _groups(node.op, input_sizes[f], wd[n], depthwise)
    if not depthwise and groups != 1:
        # [h, w, in/G, out] -> [h, w, G·in/G, out/G]: each group's block of out channels becomes its in
        out_g = wd[n + 1] // groups
        w = b.reshape(w, wd[:n] + [wd[n], groups, out_g])
        w = b.transpose(w, list(range(n)) + [n + 1, n, n + 2])
        w = b.reshape(w, wd[:n] + [groups * wd[n], out_g])
    pads = window_padding(attrs, [input_sizes[d] for d in sp], wd[:n])
    bwd_pads = []
    for i, d in enumerate(sp):
        eff = (wd[i] - 1) * attrs.dilations[i] + 1
        expanded = (dy.shape.dimensions[d] - 1) * attrs.strides[i] + 1
        before = eff - 1 - pads[i][0]
        bwd_pads.append((before, input_sizes[d] + eff - 1 - expanded - before))
    w = b.reverse(w, list(range(n)))
    window = Window.make(wd[:n], None, bwd_pads, lhs_dilation=attrs.strides, rhs_dilation=attrs.dilations)
    # The filter's out dim is contracted with dy's features; its in dim gives the result's features.
    dn = ConvolutionDimensionNumbers(0, f, tuple(sp), n + 1, n, tuple(range(n)), 0, f, tuple(sp))
    out = b.convolution(dy, w, window, dn, feature_group_count=groups)
    if list(out.shape.dimensions) != list(input_sizes):
        raise InvalidArgumentError(f"{node.op}: computed input shape {list(out.shape.dimensions)} "
                                   f"does not match input_sizes {input_sizes}")
    return [out]


@lowers("Conv2DBackpropFilter", "Conv3DBackpropFilterV2", "DepthwiseConv2dNativeBackpropFilter")
def _conv_backprop_filter(ctx, node):
    b = ctx.b
    x = ctx.input(0)
    filter_sizes = ctx.const_ints(1)
    dy = ctx.input(2)
    rank = x.shape.rank
    attrs = conv_attrs(ctx, rank)
    n = rank - 2
    sp = attrs.spatial_dims(rank)
    f = attrs.feature_dim(rank)
    xd, dyd = x.shape.dimensions, dy.shape.dimensions
    depthwise = node.op == "DepthwiseConv2dNativeBackpropFilter"
    if len(filter_sizes) != rank:
        raise InvalidArgumentError(f"{node.op}: filter_sizes must have {rank} elements")
    groups = _groups(node.op, xd[f], filter_sizes[n], depthwise)
    pads = []
    for i, d in enumerate(sp):
        k = filter_sizes[i]
        expanded = (dyd[d] - 1) * attrs.strides[i] + 1
        padded_in = expanded + (k - 1) * attrs.dilations[i]
        total = padded_in - xd[d]
        if attrs.padding == "EXPLICIT":
            before = attrs.explicit[i][0]
        elif attrs.padding == "SAME":
            before = max(total // 2, 0)
        else:
            before = 0
        pads.append((before, total - before))
    window = Window.make([dyd[d] for d in sp], attrs.dilations, pads, rhs_dilation=attrs.strides)
    # lhs: batch ↔ feature swapped (the batch is contracted); kernel = dy with its batch as input feature.
    dn = ConvolutionDimensionNumbers(f, 0, tuple(sp), 0, f, tuple(sp), n, n + 1, tuple(range(n)))
    out = b.convolution(x, dy, window, dn, batch_group_count=groups)
    if depthwise:
        out = b.reshape(out, list(filter_sizes))
    return [out]


@lowers("_FusedConv2D")
def _fused_conv2d_int8(ctx, node):
    """tf2xla's int8 fused convolution (XLA_CPU_JIT registers ``_FusedConv2D`` for int8/qint8 only):
    ``args`` = (bias f32, side_input int8), ``host_args`` = (conv_input_scale, side_input_scale), constant;
    in f32: ``conv(x, w)·conv_input_scale + bias + side_input·side_input_scale``, then ``Relu`` when
    ``fused_ops`` asks, clamped to [-128, 127], rounded half to even, int8."""
    from tfxla_cluster.errors import UnimplementedError
    from tfxla_cluster.hlo.shape import PrimitiveType as P
    from tfxla_cluster.tf2hlo import xla_lib as xl

    from tensorflow.core.framework import types_pb2

    b = ctx.b
    if node.node_def.attr["T"].type not in (types_pb2.DT_INT8, types_pb2.DT_QINT8):
        # grappler's float fusion (oneDNN remapper) has no XLA kernel: TF's XLA never compiles it either
        raise UnimplementedError(f"{ctx.op} ({ctx.name}): XLA_CPU_JIT registers _FusedConv2D for int8/qint8 only, "
                                 f"not {types_pb2.DataType.Name(node.node_def.attr['T'].type)}")
    fused = [s.decode() if isinstance(s, bytes) else s for s in ctx.attr("fused_ops", [])]
    if not fused or fused[0] != "BiasAdd" or len(fused) > 2:
        raise InvalidArgumentError(f"{ctx.op} ({ctx.name}): the int8 fused convolution takes fused_ops "
                                   f"[BiasAdd] or [BiasAdd, activation], got {fused}")
    activation = fused[1] if len(fused) == 2 else "None"
    if activation not in ("None", "Relu"):
        raise InvalidArgumentError(f"Unknown activation_mode, must be 'None' or 'Relu': {activation}")
    fmt, filter_fmt = ctx.attr("data_format", "NHWC"), ctx.attr("filter_format", "HWIO")
    if fmt not in ("NHWC", "NCHW") or filter_fmt != "HWIO":
        raise UnimplementedError(f"{ctx.op} ({ctx.name}): data_format {fmt} with filter_format {filter_fmt}; "
                                 "only NHWC/NCHW with HWIO filters are lowered")
    if int(ctx.attr("num_args")) != 2 or int(ctx.attr("num_host_args", 0)) != 2:
        raise InvalidArgumentError(f"{ctx.op} ({ctx.name}): the int8 fused convolution needs 2 args (bias, "
                                   "side_input) and 2 host_args (conv_input_scale, side_input_scale)")
    x, w = xl.convert(b, ctx.input(0), P.F32), xl.convert(b, ctx.input(1), P.F32)
    conv = _forward(ctx, node, x, w, depthwise=False)
    dims = conv.shape.dimensions
    feature = 1 if fmt == "NCHW" else len(dims) - 1
    conv_scale, side_scale = (float(ctx.const_input(i)) for i in (4, 5))
    v = xl.mul(b, conv, conv_scale)
    v = b.add(v, b.broadcast(xl.convert(b, ctx.input(2), P.F32), dims, (feature,)))
    v = b.add(v, xl.mul(b, xl.convert(b, ctx.input(3), P.F32), side_scale))
    if activation == "Relu":
        v = b.maximum(v, xl.full(b, 0.0, P.F32, dims))
    v = b.clamp(xl.full(b, -128.0, P.F32, dims), v, xl.full(b, 127.0, P.F32, dims))
    return [b.convert(b.round_nearest_even(v), ctx.output_type(0))]
