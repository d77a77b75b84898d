"""Image resizing (tf2xla's image_resize_ops.cc, semantics of TF's CPU kernels).

Stage: lowering. ``ResizeBilinear`` and ``ResizeNearestNeighbor`` on NHWC images with a compile-time
output size. Resizing is separable and the sampling positions depend only on the static sizes, so
they are computed on the host exactly as TF's CPU kernels compute them (float32 scale and source
coordinate, ``align_corners`` / ``half_pixel_centers`` rules) and become constant index vectors:
one HLO ``gather`` per axis and corner. Bilinear then interpolates with TF's formula and operation
order (``top = tl + (tr - tl) * x_lerp``, ``bottom`` likewise, ``top + (bottom - top) * y_lerp``, in
f32), so results equal TF's kernel, not just XLA's (XLA builds a dot/convolution with the weights,
whose rounding differs in the last bits).
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.hlo.shape import PrimitiveType as P
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.gather_scatter import gather
from tfxla_cluster.tf2hlo.registry import lowers


def _scale(in_size: int, out_size: int, align_corners: bool) -> np.float32:
    """TF's CalculateResizeScale, in float32."""
    if align_corners and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def bilinear_weights(in_size: int, out_size: int, align_corners: bool,
                     half_pixel_centers: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower, upper, lerp) per output position: TF's compute_interpolation_weights."""
    scale = _scale(in_size, out_size, align_corners)
    pos = np.arange(out_size, dtype=np.float32)
    if half_pixel_centers:
        src = (pos + np.float32(0.5)) * scale - np.float32(0.5)
    else:
        src = pos * scale
    src = src.astype(np.float32)
    floor = np.floor(src)
    lower = np.maximum(floor, 0).astype(np.int64)
    upper = np.minimum(np.ceil(src).astype(np.int64), in_size - 1)
    lerp = (src - floor).astype(np.float32)
    return lower.astype(np.int32), upper.astype(np.int32), lerp


def nearest_indices(in_size: int, out_size: int, align_corners: bool, half_pixel_centers: bool) -> np.ndarray:
    """Source index per output position: TF's ResizeNearestNeighbor (round with align_corners, floor
    otherwise; half-pixel centers sample at ``(i + 0.5) * scale``)."""
    scale = _scale(in_size, out_size, align_corners)
    pos = np.arange(out_size, dtype=np.float32)
    src = ((pos + np.float32(0.5)) * scale if half_pixel_centers else pos * scale).astype(np.float32)
    # roundf rounds half away from zero (np.round rounds half to even); sources are >= 0.
    idx = np.floor(src + np.float32(0.5)) if align_corners else np.floor(src)
    idx = np.minimum(idx.astype(np.int64), in_size - 1)
    if half_pixel_centers:
        idx = np.maximum(idx, 0)
    return idx.astype(np.int32)


def _size_and_flags(ctx):
    x = ctx.input(0)
    if x.shape.rank != 4:
        raise ctx.error(f"input must be 4-dimensional{list(x.shape.dimensions)}")
    size = ctx.const_ints(1)
    if len(size) != 2:
        raise ctx.error(f"shape_t must be 1-dimensional with 2 elements: {size}")
    if min(size) <= 0:
        raise ctx.error(f"output dimensions must be positive: {size}")
    align, half = bool(ctx.attr("align_corners", False)), bool(ctx.attr("half_pixel_centers", False))
    if align and half:
        raise ctx.error("If half_pixel_centers is True, align_corners must be False.")
    return x, size, align, half


def _take(b, x, idx: np.ndarray, axis: int):
    return gather(b, x, b.constant(idx, P.S32), axis)


@lowers("ResizeBilinear")
def _resize_bilinear(ctx, node):
    x, (oh, ow), align, half = _size_and_flags(ctx)
    b = ctx.b
    n, h, w, c = x.shape.dimensions
    if x.shape.element_type is not P.F32:
        x = b.convert(x, P.F32)
    y0, y1, ylerp = bilinear_weights(h, oh, align, half)
    x0, x1, xlerp = bilinear_weights(w, ow, align, half)
    top_rows, bottom_rows = _take(b, x, y0, 1), _take(b, x, y1, 1)          # [n, oh, w, c]
    out_dims = (n, oh, ow, c)
    xl_b = b.broadcast(b.constant(xlerp, P.F32), out_dims, (2,))
    yl_b = b.broadcast(b.constant(ylerp, P.F32), out_dims, (1,))

    def lerp(a, z, t):  # a + (z - a) * t, TF's order of operations
        return xl.add(b, a, xl.mul(b, xl.sub(b, z, a), t))

    top = lerp(_take(b, top_rows, x0, 2), _take(b, top_rows, x1, 2), xl_b)
    bottom = lerp(_take(b, bottom_rows, x0, 2), _take(b, bottom_rows, x1, 2), xl_b)
    return [lerp(top, bottom, yl_b)]


@lowers("ResizeNearestNeighbor")
def _resize_nearest(ctx, node):
    x, (oh, ow), align, half = _size_and_flags(ctx)
    b = ctx.b
    _, h, w, _ = x.shape.dimensions
    rows = _take(b, x, nearest_indices(h, oh, align, half), 1)
    return [_take(b, rows, nearest_indices(w, ow, align, half), 2)]
