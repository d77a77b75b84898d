"""More NN ops (tf2xla's lrn_ops.cc, reverse_sequence_op.cc, mirror_pad_op.cc's MirrorPadGrad, the generic
``Conv`` of conv_ops.cc, pooling_ops.cc's MaxPoolGradGrad family).

Stage: lowering.

* LRN/LRNGrad: tf2xla's formulas — a ``2r+1`` depth-window sum of squares in the sum-accumulation type,
  ``x · (bias + alpha·sum)^-beta``; the gradient's second term is the same window sum of
  ``-2·alpha·beta·out/norm·grad``.
* ReverseSequence reverses the first ``seq_lengths[b]`` elements of each batch row: a gather whose
  index along ``seq_dim`` is ``t < len ? len - 1 - t : t`` (exact data movement).
* MirrorPadGrad folds the padded gradient back: for each padded dimension the mirrored edge slices are
  reversed and added onto the centre (REFLECT skips the edge element, SYMMETRIC includes it).
* Conv (the N-d op with ``batch_dims``, ``groups`` and CHANNELS_LAST/FIRST): leading batch dims are
  flattened into one, the convolution is TF's forward convolution, and the batch dims come back.
* MaxPoolGradGrad(V2)/MaxPool3DGradGrad follow tf2xla's bit trick exactly (f32 only, as TF registers
  them): the input rounded to bf16 supplies the high 16 bits, each half of the gradient the low 16
  bits; two max reduce-windows select by the high bits and the halves are glued back together. Like
  TF's XLA, inputs equal in their bf16 rounding tie, and the reduce-window keeps its accumulator on ties.
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo.attrs import ConvolutionDimensionNumbers, GatherDimensionNumbers, Window
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.conv import ConvAttrs, window_padding
from tfxla_cluster.tf2hlo.pooling import _pads, _pool_params
from tfxla_cluster.tf2hlo.registry import lowers


# ---------------------------------------------------------------- LRN
def _depth_window_sum(b, x, radius: int, acc, out_t, name: str):
    r = x.shape.rank
    window = Window.make([1] * (r - 1) + [2 * radius + 1], padding=[(0, 0)] * (r - 1) + [(radius, radius)])
    s = b.reduce_window(xl.convert(b, x, acc), xl.scalar(b, 0, acc), window,
                        xl.reducer(b, O.ADD, acc, name))
    return xl.convert(b, s, out_t)


def _lrn_attrs(ctx):
    et = ctx.input_type(0)
    if et is not P.F32:
        # tf2xla builds the bias/alpha/beta constants as f32, so TF's XLA rejects other types at compile
        # time ("Seen floating point types of different precisions ... mixed precision is disallowed").
        raise InvalidArgumentError(f"{ctx.op} on {et.value}: TF's XLA mixes its f32 constants with the "
                                   f"{et.value} input, which XLA rejects (mixed precision is disallowed)")
    return int(ctx.attr("depth_radius", 5)), float(ctx.attr("bias", 1.0)), float(ctx.attr("alpha", 1.0)), \
        float(ctx.attr("beta", 0.5))


@lowers("LRN")
def _lrn(ctx, node):
    b = ctx.b
    x = ctx.input(0)
    if x.shape.rank != 4:
        raise InvalidArgumentError("in must be 4-dimensional")
    radius, bias, alpha, beta = _lrn_attrs(ctx)
    et = x.shape.element_type
    acc = xl.sum_accumulation_type(et)
    sq = _depth_window_sum(b, b.multiply(xl.convert(b, x, acc), xl.convert(b, x, acc)), radius, acc, et,
                           f"{node.name}-add")
    scale = xl.pow_(b, xl.add(b, xl.mul(b, sq, alpha), bias), -beta)
    return [b.multiply(x, scale)]


@lowers("LRNGrad")
def _lrn_grad(ctx, node):
    b = ctx.b
    grads, image, out = ctx.input(0), ctx.input(1), ctx.input(2)
    for v in (grads, image, out):
        if v.shape.rank != 4:
            raise InvalidArgumentError("inputs must be 4-dimensional")
    if not grads.shape.dimensions == image.shape.dimensions == out.shape.dimensions:
        raise InvalidArgumentError("input_grads, input_image, and out_image should have the same shape")
    radius, bias, alpha, beta = _lrn_attrs(ctx)
    et = image.shape.element_type
    acc = xl.sum_accumulation_type(et)
    conv = xl.convert(b, image, acc)
    sq = _depth_window_sum(b, b.multiply(conv, conv), radius, acc, et, f"{node.name}-add")
    norm = xl.add(b, xl.mul(b, sq, alpha), bias)
    dy = b.multiply(xl.mul(b, b.divide(out, norm), -2.0 * np.float32(alpha) * np.float32(beta)), grads)
    dy_sum = _depth_window_sum(b, dy, radius, acc, et, f"{node.name}-add.1")
    return [b.add(b.multiply(image, dy_sum), b.multiply(grads, xl.pow_(b, norm, -beta)))]


# ---------------------------------------------------------------- ReverseSequence
@lowers("ReverseSequence")
def _reverse_sequence(ctx, node):
    b = ctx.b
    x, lengths = ctx.input(0), ctx.input(1)
    r = x.shape.rank
    seq_dim = int(ctx.attr("seq_dim"))
    batch_dim = int(ctx.attr("batch_dim", 0))
    if not (0 <= seq_dim < r and 0 <= batch_dim < r) or seq_dim == batch_dim:
        raise InvalidArgumentError(f"Invalid seq_dim {seq_dim} / batch_dim {batch_dim} for input of rank {r}")
    dims = x.shape.dimensions
    if lengths.shape.dimensions != (dims[batch_dim],):
        raise InvalidArgumentError(f"seq_lengths must be a vector of length {dims[batch_dim]}, got "
                                   f"{list(lengths.shape.dimensions)}")
    it = lengths.shape.element_type
    t = b.iota(Shape.array(it, dims), seq_dim)
    lb = b.broadcast(lengths, dims, (batch_dim,))
    src = b.select(b.compare(t, lb, "LT"), b.subtract(xl.sub(b, lb, 1), t), t)
    # Full index vectors: iota on every axis, the reversed position on seq_dim.
    idx = [xl.convert(b, src if d == seq_dim else b.iota(Shape.array(it, dims), d), P.S32) for d in range(r)]
    idx = b.concatenate([b.reshape(i, dims + (1,)) for i in idx], r)
    gdn = GatherDimensionNumbers((), tuple(range(r)), tuple(range(r)), r)
    return [b.gather(x, idx, gdn, [1] * r)]


# ---------------------------------------------------------------- MirrorPadGrad
@lowers("MirrorPadGrad")
def _mirror_pad_grad(ctx, node):
    b = ctx.b
    g = ctx.input(0)
    pads = np.asarray(ctx.const_input(1)).astype(np.int64)
    r = g.shape.rank
    if pads.shape != (r, 2):
        raise InvalidArgumentError(f"paddings must be a matrix with 2 columns and {r} rows: {list(pads.shape)}")
    mode = str(ctx.attr("mode"))
    if mode not in ("REFLECT", "SYMMETRIC"):
        raise InvalidArgumentError(f"mode must be either REFLECT or SYMMETRIC, got {mode}")
    offset = 1 if mode == "REFLECT" else 0
    zero = xl.scalar(b, 0, g.shape.element_type)
    for d in range(r):
        lo, hi = int(pads[d, 0]), int(pads[d, 1])
        if lo == 0 and hi == 0:
            continue
        dims = list(g.shape.dimensions)
        out = dims[d] - lo - hi
        if lo < 0 or hi < 0 or out < 0 or lo + offset > out or hi + offset > out:
            raise InvalidArgumentError(f"paddings {lo}, {hi} do not fit an output of size {out} in dimension {d}")

        def cut(a, c):
            start, limit = [0] * r, list(dims)
            start[d], limit[d] = a, c
            return b.slice(g, start, limit)

        def place(v, at):   # v (size n along d) zero-padded to `out`, starting at `at`
            n = v.shape.dimensions[d]
            cfg = [(0, 0)] * r
            cfg[d] = (at, out - at - n)
            return b.pad(v, zero, cfg)

        acc = cut(lo, lo + out)
        if lo:
            acc = b.add(acc, place(b.reverse(cut(0, lo), (d,)), offset))
        if hi:
            acc = b.add(acc, place(b.reverse(cut(lo + out, dims[d]), (d,)), out - offset - hi))
        g = acc
    return [g]


# ---------------------------------------------------------------- Conv (N-d)
@lowers("Conv")
def _conv_nd(ctx, node):
    b = ctx.b
    x, w = ctx.input(0), ctx.input(1)
    batch_dims = int(ctx.attr("batch_dims", 1))
    groups_attr = int(ctx.attr("groups", 1))
    n = w.shape.rank - 2
    if x.shape.rank != batch_dims + n + 1 or n < 1:
        raise InvalidArgumentError(f"input must be {batch_dims + n + 1}-dimensional for a {w.shape.rank}-D filter "
                                   f"and batch_dims={batch_dims}")
    first = str(ctx.attr("data_format", "CHANNELS_LAST")) == "CHANNELS_FIRST"
    xd = x.shape.dimensions
    lead = xd[:batch_dims]
    flat = b.reshape(x, (int(np.prod(lead)),) + xd[batch_dims:]) if batch_dims != 1 else x
    rank = n + 2
    # strides, dilations and explicit paddings are per dimension of the batch-flattened input
    strides, dil = list(ctx.attr("strides")), list(ctx.attr("dilations", []) or [1] * rank)
    if len(strides) != rank or len(dil) != rank:
        raise InvalidArgumentError(f"strides and dilations must have {rank} elements")
    sp_flat = list(range(2, rank)) if first else list(range(1, rank - 1))
    padding = str(ctx.attr("padding"))
    explicit = [(0, 0)] * n
    if padding == "EXPLICIT":
        e = list(ctx.attr("explicit_paddings"))
        if len(e) != 2 * rank:
            raise InvalidArgumentError(f"explicit_paddings must have {2 * rank} elements")
        explicit = [(e[2 * d], e[2 * d + 1]) for d in sp_flat]
    attrs = ConvAttrs(first, [strides[d] for d in sp_flat], [dil[d] for d in sp_flat], padding, explicit)
    fd = flat.shape.dimensions
    sp = attrs.spatial_dims(rank)
    in_depth = fd[attrs.feature_dim(rank)]
    wd = w.shape.dimensions
    if wd[n] == 0 or in_depth % wd[n]:
        raise InvalidArgumentError(f"input depth {in_depth} must be evenly divisible by filter depth {wd[n]}")
    groups = in_depth // wd[n]
    if groups_attr != 1 and groups_attr != groups:
        raise InvalidArgumentError(f"groups={groups_attr} does not match input depth {in_depth} / filter depth "
                                   f"{wd[n]}")
    pads = window_padding(attrs, [fd[d] for d in sp], wd[:n])
    window = Window.make(wd[:n], attrs.strides, pads, rhs_dilation=attrs.dilations)
    f = attrs.feature_dim(rank)
    dn = ConvolutionDimensionNumbers(0, f, tuple(sp), n, n + 1, tuple(range(n)), 0, f, tuple(sp))
    y = b.convolution(flat, w, window, dn, feature_group_count=groups)
    if batch_dims != 1:
        y = b.reshape(y, tuple(lead) + y.shape.dimensions[1:])
    return [y]


# ---------------------------------------------------------------- MaxPoolGradGrad
def _first16_ge_reducer(b, name: str):
    r = b.sub_builder(name)
    s = Shape.scalar(P.F32)
    lhs, rhs = r.parameter(0, s, "lhs"), r.parameter(1, s, "rhs")
    sixteen = xl.scalar(r, 16, P.S32)

    def criteria(v):
        return r.bitcast_convert(r.shift_left(r.shift_right_logical(r.bitcast_convert(v, P.S32), sixteen), sixteen),
                                 P.F32)
    r.select(r.compare(criteria(lhs), criteria(rhs), "GE"), lhs, rhs)
    return r.build()


@lowers("MaxPoolGradGrad", "MaxPoolGradGradV2", "MaxPool3DGradGrad")
def _max_pool_grad_grad(ctx, node):
    b = ctx.b
    x, bp = ctx.input(0), ctx.input(2)
    rank = x.shape.rank
    if ctx.input_rank(1) != rank or bp.shape.rank != rank:
        raise InvalidArgumentError(f"tensor_in, tensor_out and out_backprop must be {rank}-dimensional")
    ksize, strides, padding, _ = _pool_params(ctx, node, rank, 3 if node.op == "MaxPoolGradGradV2" else None)
    sixteen = xl.scalar(b, 16, P.U32)
    in_hi = b.bitcast_convert(b.reduce_precision(x, 8, 7), P.U32)
    bp_int = b.bitcast_convert(bp, P.U32)
    bp_hi = b.shift_right_logical(bp_int, b.broadcast(sixteen, bp.shape.dimensions, ()))
    s16 = b.broadcast(sixteen, bp.shape.dimensions, ())
    bp_lo = b.shift_right_logical(b.shift_left(bp_int, s16), s16)
    window = Window.make(ksize, strides, _pads(x.shape.dimensions, ksize, strides, padding))
    reducer = _first16_ge_reducer(b, f"{node.name}-GreaterOrEqOf_ByFirst16Bits")
    init = xl.scalar(b, -np.inf, P.F32)
    pooled = [b.reduce_window(b.bitcast_convert(b.add(in_hi, half), P.F32), init, window, reducer)
              for half in (bp_hi, bp_lo)]
    o16 = b.broadcast(sixteen, pooled[0].shape.dimensions, ())
    hi = b.shift_left(b.bitcast_convert(pooled[0], P.U32), o16)
    lo = b.shift_right_logical(b.shift_left(b.bitcast_convert(pooled[1], P.U32), o16), o16)
    return [b.bitcast_convert(b.add(hi, lo), P.F32)]
