"""Colour-space and patch image ops (tf2xla's image_ops.cc, extract_image_patches_op.cc,
image_resize_ops.cc's ResizeBilinearGrad).

Stage: lowering.

* RGBToHSV/HSVToRGB and AdjustHue/AdjustSaturation use tf2xla's formulas and operation order (hue from
  the max channel's difference times ``(1/6)/range``, HSV→RGB through clamped ``|6h - k|`` ramps);
  AdjustHue/AdjustSaturation compute in f32 and convert back, AdjustContrastv2 takes the mean in the
  sum-accumulation type: ``x·factor + mean·(1 - factor)``.
* ExtractImagePatches is a pure data movement: the zero-padded image sliced once per kernel offset
  (strided by ``strides``, offset by ``rates``), concatenated on the depth axis in (row, col, depth)
  order — what TF's XLA computes with an identity-kernel convolution, exactly.
* ResizeBilinearGrad spreads each output gradient on its four source pixels with the bilinear weights:
  the weights depend only on the static sizes, so they are host matrices ``Wy [oh, h]``, ``Wx [ow, w]``
  and the gradient is two f32 dots (``Wyᵀ·g·Wx``), converted to the image type.
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.image import bilinear_weights
from tfxla_cluster.tf2hlo.registry import lowers


def _channels(ctx, x, min_rank: int = 1):
    if x.shape.rank < min_rank:
        raise InvalidArgumentError(f"input must be at least {min_rank}-D, got shape {list(x.shape.dimensions)}")
    c = x.shape.dimensions[-1]
    if c != 3:
        raise InvalidArgumentError(f"input must have 3 channels but input has {c} channels.")
    b = ctx.b
    r = x.shape.rank
    start = [0] * r
    limit = list(x.shape.dimensions)
    out = []
    for k in range(3):
        start[-1], limit[-1] = k, k + 1
        out.append(b.slice(x, list(start), list(limit)))
    return out


def rgb_to_hsv(b, red, green, blue):
    value = b.maximum(b.maximum(red, green), blue)
    minimum = b.minimum(b.minimum(red, green), blue)
    rng = b.subtract(value, minimum)
    zeros = xl.zeros_like(b, red)
    saturation = b.select(xl.gt(b, value, 0.0), b.divide(rng, value), zeros)
    norm = xl.div(b, 1.0 / 6.0, rng)
    hue = b.select(b.compare(green, value, "EQ"),
                   xl.add(b, b.multiply(norm, b.subtract(blue, red)), 2.0 / 6.0),
                   xl.add(b, b.multiply(norm, b.subtract(red, green)), 4.0 / 6.0))
    hue = b.select(b.compare(red, value, "EQ"), b.multiply(norm, b.subtract(green, blue)), hue)
    hue = b.select(xl.gt(b, rng, 0.0), hue, zeros)
    hue = b.select(xl.lt(b, hue, 0.0), xl.add(b, hue, 1.0), hue)
    return hue, saturation, value


def hsv_to_rgb(b, hue, saturation, value):
    et, dims = hue.shape.element_type, hue.shape.dimensions
    zero, one = xl.full(b, 0.0, et, dims), xl.full(b, 1.0, et, dims)
    dh = xl.mul(b, hue, 6.0)

    def ramp(x):
        return b.clamp(zero, x, one)
    dr = ramp(xl.sub(b, b.abs(xl.sub(b, dh, 3.0)), 1.0))
    dg = ramp(xl.sub(b, 2.0, b.abs(xl.sub(b, dh, 2.0))))
    db = ramp(xl.sub(b, 2.0, b.abs(xl.sub(b, dh, 4.0))))
    one_minus_s = b.subtract(one, saturation)
    return tuple(b.multiply(b.add(one_minus_s, b.multiply(saturation, d)), value) for d in (dr, dg, db))


def _float_check(ctx, x):
    if not x.shape.element_type.is_float:
        raise InvalidArgumentError(f"{ctx.op}: input must be floating point")


@lowers("RGBToHSV")
def _rgb_to_hsv(ctx, node):
    x = ctx.input(0)
    _float_check(ctx, x)
    hsv = rgb_to_hsv(ctx.b, *_channels(ctx, x))
    return [ctx.b.concatenate(list(hsv), x.shape.rank - 1)]


@lowers("HSVToRGB")
def _hsv_to_rgb(ctx, node):
    x = ctx.input(0)
    _float_check(ctx, x)
    rgb = hsv_to_rgb(ctx.b, *_channels(ctx, x))
    return [ctx.b.concatenate(list(rgb), x.shape.rank - 1)]


def _scalar_input(ctx, index: int, what: str):
    v = ctx.input(index)
    if v.shape.rank:
        raise InvalidArgumentError(f"{what} must be scalar: [{','.join(map(str, v.shape.dimensions))}]")
    return v


@lowers("AdjustSaturation", "AdjustHue")
def _adjust_hsv(ctx, node):
    b = ctx.b
    x = ctx.input(0)
    if x.shape.rank < 3:
        raise InvalidArgumentError(f"input must be at least 3-D, got shape {list(x.shape.dimensions)}")
    amount = xl.convert(b, _scalar_input(ctx, 1, "scale" if ctx.op == "AdjustSaturation" else "delta"), P.F32)
    et = x.shape.element_type
    h, s, v = rgb_to_hsv(b, *_channels(ctx, xl.convert(b, x, P.F32), 3))
    if ctx.op == "AdjustSaturation":
        s = b.clamp(xl.scalar(b, 0.0, P.F32), xl.mul(b, s, amount), xl.scalar(b, 1.0, P.F32))
    else:
        h = xl.rem(b, xl.add(b, h, amount), 1.0)
        h = b.select(xl.lt(b, h, 0.0), xl.rem(b, xl.add(b, h, 1.0), 1.0), h)
    rgb = hsv_to_rgb(b, h, s, v)
    return [xl.convert(b, b.concatenate(list(rgb), x.shape.rank - 1), et)]


@lowers("AdjustContrastv2")
def _adjust_contrast(ctx, node):
    b = ctx.b
    x = ctx.input(0)
    r = x.shape.rank
    if r < 3:
        raise InvalidArgumentError(f"input must be at least 3-D, got shape {list(x.shape.dimensions)}")
    et = x.shape.element_type
    factor = xl.convert(b, _scalar_input(ctx, 1, "contrast_factor"), et)
    acc = xl.sum_accumulation_type(et)
    h, w = x.shape.dimensions[r - 3], x.shape.dimensions[r - 2]
    total = xl.reduce(b, xl.convert(b, x, acc), 0, [r - 3, r - 2], O.ADD, f"{node.name}-add")
    mean = xl.convert(b, xl.div(b, total, float(h * w)), et)
    keep = [d for d in range(r) if d not in (r - 3, r - 2)]
    mean_b = b.broadcast(b.multiply(mean, b.broadcast(xl.sub(b, 1.0, factor), mean.shape.dimensions, ())),
                         x.shape.dimensions, keep)
    return [b.add(xl.mul(b, x, factor), mean_b)]


def _patch_padding(size: int, k: int, stride: int, rate: int, padding: str) -> tuple[int, int, int]:
    """(output size, pad low, pad high) of TF's GetWindowedOutputSize for the dilated kernel."""
    eff = (k - 1) * rate + 1
    if padding == "VALID":
        out = (size - eff + stride) // stride
        return max(out, 0), 0, 0
    out = (size + stride - 1) // stride
    total = max((out - 1) * stride + eff - size, 0)
    return out, total // 2, total - total // 2


@lowers("ExtractImagePatches")
def _extract_image_patches(ctx, node):
    b = ctx.b
    x = ctx.input(0)
    if x.shape.rank != 4:
        raise InvalidArgumentError(f"input must be 4-dimensional: {list(x.shape.dimensions)}")
    ks, st, rt = (list(ctx.attr(a)) for a in ("ksizes", "strides", "rates"))
    for name, v in (("ksizes", ks), ("strides", st), ("rates", rt)):
        if len(v) != 4 or v[0] != 1 or v[3] != 1:
            raise InvalidArgumentError(f"Only support {name} across space.")
    padding = str(ctx.attr("padding"))
    n, h, w, d = x.shape.dimensions
    oh, ph_lo, ph_hi = _patch_padding(h, ks[1], st[1], rt[1], padding)
    ow, pw_lo, pw_hi = _patch_padding(w, ks[2], st[2], rt[2], padding)
    if any((ph_lo, ph_hi, pw_lo, pw_hi)):
        x = b.pad(x, xl.scalar(b, 0, x.shape.element_type), [(0, 0), (ph_lo, ph_hi), (pw_lo, pw_hi), (0, 0)])
    pieces = []
    for i in range(ks[1]):
        for j in range(ks[2]):
            r0, c0 = i * rt[1], j * rt[2]
            pieces.append(b.slice(x, [0, r0, c0, 0], [n, r0 + (oh - 1) * st[1] + 1 if oh else r0,
                                                      c0 + (ow - 1) * st[2] + 1 if ow else c0, d],
                                  [1, st[1], st[2], 1]))
    return [pieces[0] if len(pieces) == 1 else b.concatenate(pieces, 3)]


def _bilinear_matrix(in_size: int, out_size: int, align: bool, half: bool) -> np.ndarray:
    lo, hi, lerp = bilinear_weights(in_size, out_size, align, half)
    m = np.zeros((out_size, in_size), np.float32)
    for o in range(out_size):
        m[o, lo[o]] += np.float32(1) - lerp[o]
        m[o, hi[o]] += lerp[o]
    return m


@lowers("ResizeBilinearGrad")
def _resize_bilinear_grad(ctx, node):
    b = ctx.b
    grads = ctx.input(0)
    n, oh, ow, c = grads.shape.dimensions
    image_dims = ctx.input_dims(1)
    if len(image_dims) != 4:
        raise InvalidArgumentError("original_image must be 4-dimensional")
    h, w = image_dims[1], image_dims[2]
    align, half = bool(ctx.attr("align_corners", False)), bool(ctx.attr("half_pixel_centers", False))
    if align and half:
        raise InvalidArgumentError("If half_pixel_centers is True, align_corners must be False.")
    wy = b.constant(_bilinear_matrix(h, oh, align, half), P.F32)   # [oh, h]
    wx = b.constant(_bilinear_matrix(w, ow, align, half), P.F32)   # [ow, w]
    g = xl.convert(b, grads, P.F32)
    # [n, oh, ow, c] x [ow, w] over ow -> [n, oh, c, w]; then x [oh, h] over oh -> [n, c, w, h]
    t = b.dot(g, wx, (2,), (0,))
    t = b.dot(t, wy, (1,), (0,))
    out = b.transpose(t, (0, 3, 2, 1))
    return [xl.convert(b, out, ctx.output_type(0))]


# ---------------------------------------------------------------- non-max suppression
def _sort_desc_with_index(b, keys, name: str, stable: bool):
    """(keys sorted descending, their original positions); equal keys keep index order when ``stable``."""
    n = keys.shape.dimensions[0]
    et = keys.shape.element_type
    idx = b.iota(Shape.array(P.S32, (n,)), 0)
    c = b.sub_builder(name)
    ka, kb = c.parameter(0, Shape.scalar(et), "a"), c.parameter(1, Shape.scalar(et), "b")
    ia, ib = c.parameter(2, Shape.scalar(P.S32), "i"), c.parameter(3, Shape.scalar(P.S32), "j")
    gt = c.compare(ka, kb, "GT")
    if stable:   # TopK's order: larger first, then the smaller index
        c.or_(gt, c.and_(c.compare(ka, kb, "EQ"), c.compare(ia, ib, "LT")))
    s = b.sort([keys, idx], 0, c.build(), is_stable=stable)
    return b.get_tuple_element(s, 0), b.get_tuple_element(s, 1)


@lowers("NonMaxSuppressionV4")
def _non_max_suppression_v4(ctx, node):
    if not bool(ctx.attr("pad_to_max_output_size", False)):
        raise InvalidArgumentError("XLA compilation requires pad_to_max_output_size == True")
    selected, valid = _non_max_suppression(ctx, node)
    return [selected, valid]


@lowers("NonMaxSuppressionV3")
def _non_max_suppression_v3(ctx, node):
    """TF's XLA: V4's padded indices with a bounded dynamic size, ``s32[<=max_output_size]``
    (set-dimension-size to the valid count); at the cluster boundary the launch returns the valid ones."""
    from tfxla_cluster.tf2hlo.bounded_dynamic import BoundedDynamic

    selected, valid = _non_max_suppression(ctx, node)
    return [BoundedDynamic(selected, 0, valid)]


def _non_max_suppression(ctx, node):
    """tf2xla's NonMaxSuppression: boxes sorted by score; the IoU > threshold mask between sorted boxes;
    a while over the rows (stopping at ``max_output_size`` kept boxes) where each kept box suppresses the
    later ones it overlaps; then the kept boxes above ``score_threshold`` by score (TopK order: ties by
    position), padded with the first unkept positions, mapped back to input indices; ``valid_outputs``
    is their count capped at ``max_output_size``."""
    b = ctx.b
    boxes, scores = ctx.input(0), ctx.input(1)
    if boxes.shape.rank != 2 or boxes.shape.dimensions[1] != 4:
        raise InvalidArgumentError(f"boxes must be a [num_boxes, 4] matrix, got {list(boxes.shape.dimensions)}")
    n = boxes.shape.dimensions[0]
    if scores.shape.dimensions != (n,):
        raise InvalidArgumentError("scores size must equal number of boxes")
    out_size = ctx.const_int(2)
    if out_size < 0:
        raise InvalidArgumentError(f"Need output_size >= 0, got {out_size}")
    if out_size > n:   # TF's XLA takes the top max_output_size of the n boxes and fails the same way
        raise InvalidArgumentError(f"max_output_size ({out_size}) must not exceed the number of boxes ({n}) "
                                   "under XLA")
    et = scores.shape.element_type
    iou_thresh = xl.convert(b, ctx.input(3), et)
    score_thresh = xl.convert(b, ctx.input(4), et)
    sorted_scores, order = _sort_desc_with_index(b, scores, f"{node.name}-sort", stable=False)
    from tfxla_cluster.tf2hlo.gather_scatter import gather

    sb_ = gather(b, boxes, order, 0)                                   # boxes in score order [n, 4]

    def coord(k):
        return b.reshape(b.slice(sb_, [0, k], [n, k + 1]), (n,))
    cy0, cx0, cy1, cx1 = (coord(k) for k in range(4))
    y1, y2 = b.minimum(cy0, cy1), b.maximum(cy0, cy1)
    x1, x2 = b.minimum(cx0, cx1), b.maximum(cx0, cx1)
    area = b.multiply(b.subtract(y2, y1), b.subtract(x2, x1))

    def row(v):
        return b.broadcast(v, (n, n), (1,))

    def col(v):
        return b.broadcast(v, (n, n), (0,))
    zero = xl.full(b, 0, et, (n, n))
    ih = b.maximum(b.subtract(b.minimum(row(y2), col(y2)), b.maximum(row(y1), col(y1))), zero)
    iw = b.maximum(b.subtract(b.minimum(row(x2), col(x2)), b.maximum(row(x1), col(x1))), zero)
    inter = b.multiply(iw, ih)
    union = b.subtract(b.add(row(area), col(area)), inter)
    over = b.compare(b.divide(inter, union), xl.broadcast_to(b, iou_thresh, (n, n)), "GT")
    keep0 = xl.full(b, True, P.PRED, (n,))
    # while row < n and kept < out_size: a kept row suppresses the rows it overlaps (not itself)
    state = Shape.tuple_of([Shape.scalar(P.S32), Shape.scalar(P.S32), over.shape, keep0.shape])
    cb = b.sub_builder(f"{node.name}-suppress_cond")
    cp = cb.parameter(0, state, "state")
    cb_root = cb.and_(xl.lt(cb, cb.get_tuple_element(cp, 0), n), xl.lt(cb, cb.get_tuple_element(cp, 1), out_size))
    cond = cb.build(cb_root)
    bb = b.sub_builder(f"{node.name}-suppress_body")
    p = bb.parameter(0, state, "state")
    i, kept, mask, keep = (bb.get_tuple_element(p, k) for k in range(4))
    active = bb.reshape(bb.dynamic_slice(keep, [i], (1,)), ())
    kept = bb.select(active, xl.add(bb, kept, 1), kept)
    zero_i = xl.scalar(bb, 0, P.S32)
    r = bb.reshape(bb.dynamic_slice(mask, [i, zero_i], (1, n)), (n,))
    r = bb.and_(r, bb.compare(bb.iota(Shape.array(P.S32, (n,)), 0), bb.broadcast(i, (n,), ()), "NE"))
    keep = bb.select(bb.broadcast(active, (n,), ()), bb.and_(keep, bb.not_(r)), keep)
    body = bb.build(bb.tuple([xl.add(bb, i, 1), kept, mask, keep]))
    loop = b.while_loop(cond, body, b.tuple([xl.scalar(b, 0, P.S32), xl.scalar(b, 0, P.S32), over, keep0]))
    rows_seen, keep = b.get_tuple_element(loop, 0), b.get_tuple_element(loop, 3)
    included = b.and_(b.and_(keep, b.compare(sorted_scores, xl.broadcast_to(b, score_thresh, (n,)), "GT")),
                      b.compare(b.iota(Shape.array(P.S32, (n,)), 0), b.broadcast(rows_seen, (n,), ()), "LT"))
    ranked = b.select(included, sorted_scores, xl.full(b, xl.min_value(et), et, (n,)))
    _, pos = _sort_desc_with_index(b, ranked, f"{node.name}-topk", stable=True)
    pos = b.slice(pos, [0], [out_size])
    selected = gather(b, order, pos, 0)
    count = xl.reduce(b, b.convert(included, P.S32), 0, [0], O.ADD, f"{node.name}-add")
    valid = xl.minimum(b, count, out_size)
    return xl.convert(b, selected, ctx.output_type(0)), valid
