"""Pooling (tf2xla's pooling_ops.cc and xla/client/lib/pooling.cc).

Stage: lowering. Windows span every dimension (``ksize``/``strides`` have one entry per dim, TF's
layout); SAME/VALID padding is computed as for convolutions.

* MaxPool: ``reduce-window`` with ``maximum`` from -inf.
* AvgPool: a ``reduce-window`` sum in the accumulation type divided by the window size (VALID) or by
  the per-position count of real elements (SAME: a reduce-window over ones of the spatial shape, in the
  form XLA's simplifier leaves tf2xla's pad(ones): see ``_counts``).
* MaxPoolGrad: ``select-and-scatter`` (select ``GE``, scatter ``add``) of the gradient onto the
  original input.
* AvgPoolGrad: the gradient divided by the counts, dilated by the strides and padded
  (``k-1-pad_before`` low), then a stride-1 ``reduce-window`` sum of the kernel size.
"""
from __future__ import annotations

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo.attrs import Window
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import Shape
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.registry import lowers


def _pool_params(ctx, node, rank: int, first_const: int | None = None):
    if first_const is not None:  # MaxPoolV2: ksize and strides are inputs
        ksize, strides = ctx.const_ints(first_const), ctx.const_ints(first_const + 1)
    else:
        ksize, strides = list(ctx.attr("ksize")), list(ctx.attr("strides"))
    if len(ksize) != rank or len(strides) != rank:
        raise InvalidArgumentError(f"Sliding window ksize and strides fields must specify {rank} dimensions")
    fmt = ctx.attr("data_format", "NHWC")
    feature = 1 if fmt.startswith("NC") else rank - 1
    if ksize[0] != 1 or ksize[feature] != 1 or strides[0] != 1 or strides[feature] != 1:
        raise InvalidArgumentError("Pooling is not yet supported on the batch or depth dimensions.")
    padding = ctx.attr("padding")
    if padding not in ("SAME", "VALID"):
        raise InvalidArgumentError(f"Unsupported padding {padding}")
    spatial = [d for d in range(rank) if d not in (0, feature)]
    return ksize, strides, padding, spatial


def _pads(dims, ksize, strides, padding: str) -> list[tuple[int, int]]:
    pads = []
    for n, k, s in zip(dims, ksize, strides):
        if padding == "VALID":
            pads.append((0, 0))
        else:
            out = (n + s - 1) // s
            need = max((out - 1) * s + k - n, 0)
            pads.append((need // 2, need - need // 2))
    return pads


@lowers("MaxPool", "MaxPoolV2", "MaxPool3D")
def _max_pool(ctx, node):
    x = ctx.input(0)
    b = ctx.b
    dims = x.shape.dimensions
    ksize, strides, padding, _ = _pool_params(ctx, node, len(dims), 1 if node.op == "MaxPoolV2" else None)
    window = Window.make(ksize, strides, _pads(dims, ksize, strides, padding))
    et = x.shape.element_type
    return [b.reduce_window(x, xl.scalar(b, xl.min_value(et), et), window,
                            xl.reducer(b, O.MAXIMUM, et, f"{node.name}-max"))]


def _counts(b, acc, dims, spatial, ksize, strides, padding, out_dims, name):
    """The number of real (unpadded) elements under each window, broadcast to ``out_dims``."""
    if padding == "VALID":
        size = 1
        for d in spatial:
            size *= ksize[d]
        return xl.full(b, size, acc, out_dims)
    sp_dims = [dims[d] for d in spatial]
    sk, ss = [ksize[d] for d in spatial], [strides[d] for d in spatial]
    pads = _pads(sp_dims, sk, ss, padding)
    zero = xl.scalar(b, 0, acc)
    padded = [i for i, p in enumerate(pads) if p != (0, 0)]
    if padded and len(padded) < len(pads):
        # tf2xla counts over pad(ones) with a VALID window. XLA's simplifier sinks a pad of a broadcast that
        # leaves some dims unpadded into broadcast(pad(ones over the padded dims)), which constant folding
        # leaves alone (it folds no pad of a broadcast), so the counts are computed at run time and the sums
        # divided by them; otherwise the pad folds into the window, the counts into a constant and the
        # divide into a multiply by 1/count (measured against TF's XLA: a 1x3 SAME avg_pool divides).
        inner = b.pad(xl.full(b, 1, acc, [sp_dims[i] for i in padded]), zero, [pads[i] for i in padded])
        ones = b.broadcast(inner, [n + lo + hi for n, (lo, hi) in zip(sp_dims, pads)], padded)
        window = Window.make(sk, ss, [(0, 0)] * len(pads))
    else:
        ones = xl.full(b, 1, acc, sp_dims)
        window = Window.make(sk, ss, pads)
    counts = b.reduce_window(ones, zero, window, xl.reducer(b, O.ADD, acc, f"{name}-count"))
    return b.broadcast(counts, out_dims, spatial)


@lowers("AvgPool", "AvgPool3D")
def _avg_pool(ctx, node):
    x = ctx.input(0)
    b = ctx.b
    dims = x.shape.dimensions
    ksize, strides, padding, spatial = _pool_params(ctx, node, len(dims))
    et = x.shape.element_type
    acc = xl.sum_accumulation_type(et)
    window = Window.make(ksize, strides, _pads(dims, ksize, strides, padding))
    summed = b.reduce_window(xl.convert(b, x, acc), xl.scalar(b, 0, acc), window,
                             xl.reducer(b, O.ADD, acc, f"{node.name}-sum"))
    counts = _counts(b, acc, dims, spatial, ksize, strides, padding, summed.shape.dimensions, node.name)
    return [xl.convert(b, b.divide(summed, counts), et)]


@lowers("MaxPoolGrad", "MaxPoolGradV2", "MaxPool3DGrad")
def _max_pool_grad(ctx, node):
    x, grad = ctx.input(0), ctx.input(2)
    b = ctx.b
    dims = x.shape.dimensions
    ksize, strides, padding, _ = _pool_params(ctx, node, len(dims), 3 if node.op == "MaxPoolGradV2" else None)
    window = Window.make(ksize, strides, _pads(dims, ksize, strides, padding))
    et = x.shape.element_type
    sel = b.sub_builder(f"{node.name}-select")
    p0 = sel.parameter(0, Shape.scalar(et), "lhs")
    p1 = sel.parameter(1, Shape.scalar(et), "rhs")
    select = sel.build(sel.compare(p0, p1, "GE"))
    scatter = xl.reducer(b, O.ADD, grad.shape.element_type, f"{node.name}-scatter")
    return [b.select_and_scatter(x, select, window, grad, xl.scalar(b, 0, grad.shape.element_type), scatter)]


@lowers("AvgPoolGrad", "AvgPool3DGrad")
def _avg_pool_grad(ctx, node):
    in_dims = ctx.const_ints(0)
    grad = ctx.input(1)
    b = ctx.b
    ksize, strides, padding, spatial = _pool_params(ctx, node, len(in_dims))
    et = grad.shape.element_type
    acc = xl.sum_accumulation_type(et)
    gd = grad.shape.dimensions
    pads = _pads(in_dims, ksize, strides, padding)
    g = xl.convert(b, grad, acc)
    g = b.divide(g, _counts(b, acc, in_dims, spatial, ksize, strides, padding, gd, node.name))
    cfg = []
    for d, (n, k, s) in enumerate(zip(in_dims, ksize, strides)):
        if gd[d] == 0:
            return [xl.full(b, 0, et, in_dims)]
        low = k - 1 - pads[d][0]
        expanded = (gd[d] - 1) * s + 1
        cfg.append((low, n + k - 1 - expanded - low, s - 1))
    padded = b.pad(g, xl.scalar(b, 0, acc), cfg)
    window = Window.make(ksize)
    out = b.reduce_window(padded, xl.scalar(b, 0, acc), window, xl.reducer(b, O.ADD, acc, f"{node.name}-sum"))
    return [xl.convert(b, out, et)]
