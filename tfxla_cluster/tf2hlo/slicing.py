"""Slices (tf2xla's slice_op.cc and strided_slice_op.cc, with TF's core/util/strided_slice_op.cc).

Stage: lowering. ``StridedSlice`` follows ``ValidateStridedSliceOp``: the sparse spec (begin/end/strides
with begin, end, ellipsis, new-axis and shrink-axis masks; an implicit trailing ellipsis) is expanded to
one dense entry per input dimension, each canonicalised (negative indices wrap, masked ends take the
full range, values clamp); the result is ``reverse`` of the negative-stride dims, one ``slice`` and a
``reshape`` to the final shape (new axes added, shrunk axes removed). ``StridedSliceGrad`` pads the
incoming gradient back into a zero tensor of the original shape (interior padding = stride - 1).
Strides are compile-time constants; begin/end may be run-time values (``x[i]``, ``x[i:i+2]`` with a loop
counter ``i``) when every slice length is still a compile-time constant — a shrunk axis, or an end that is
the begin plus a constant (found by peeling reshapes, converts and constant additions, a small form of
XLA's value inference) — and the strides are 1: then, as tf2xla does, the slice is a ``dynamic-slice`` at
the run-time begins (negative ones wrap; out of range clamps where TF's kernel raises).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.registry import lowers

_NEW_AXIS, _SHRINK_AXIS = -1, -2


@dataclass
class StridedSliceSpec:
    """The dense, canonical form of a strided slice over an input shape."""

    begin: list[int]
    end: list[int]
    strides: list[int]
    processing_shape: list[int]   # one size per input dim (shrunk dims are 1)
    final_shape: list[int]
    dense_dims: list[int | None]  # the input dim of each sparse entry (None: ellipsis or new axis)
    final_dims: list[int]         # the input dim of each final dim (-1: a new axis)


def _trunc_div_ceil(length: int, stride: int) -> int:
    """C++'s ``length / stride + (length % stride != 0)`` for same-sign operands."""
    q, r = abs(length) // abs(stride), abs(length) % abs(stride)
    return q + (1 if r else 0)


def strided_slice_spec(dims: list[int], begin: list[int], end: list[int], strides: list[int], begin_mask: int,
                       end_mask: int, ellipsis_mask: int, new_axis_mask: int, shrink_mask: int) -> StridedSliceSpec:
    """TF's ``ValidateStridedSliceOp`` for a fully known input shape."""
    n = len(begin)
    if not (len(end) == n and len(strides) == n):
        raise InvalidArgumentError(f"Expected begin, end, and strides to be 1D equal size tensors, but got shapes "
                                   f"[{len(begin)}], [{len(end)}], and [{len(strides)}] instead.")
    if ellipsis_mask & (ellipsis_mask - 1):
        raise InvalidArgumentError("Multiple ellipses in slice spec not allowed")
    # Sparse → dense (BuildDenseSpec).
    after_ellipsis, seen = 0, False
    for i in range(n):
        if seen and new_axis_mask & (1 << i):
            after_ellipsis += 1
        if ellipsis_mask & (1 << i):
            seen = True
    sparse_dims = n
    if not seen:  # an implicit ellipsis at the end
        ellipsis_mask |= 1 << n
        sparse_dims += 1
    rank = len(dims)
    d_begin, d_end, d_strides = [0] * rank, [0] * rank, [1] * rank
    d_bmask = d_emask = d_shrink = 0
    gather: list[int] = []
    dense_dims: list[int | None] = []
    full = 0
    for i in range(sparse_dims):
        bit = 1 << i
        dense_dims.append(None)
        if ellipsis_mask & bit:
            nxt = min(rank - (sparse_dims - i) + 1 + after_ellipsis, rank)
            while full < nxt:
                d_bmask |= 1 << full
                d_emask |= 1 << full
                gather.append(full)
                full += 1
        elif new_axis_mask & bit:
            gather.append(_NEW_AXIS)
        else:
            if full == rank:
                raise InvalidArgumentError(f"Index out of range using input dim {full}; input has only {rank} dims")
            d_begin[full], d_end[full], d_strides[full] = begin[i], end[i], strides[i]
            dense_dims[i] = full
            if begin_mask & bit:
                d_bmask |= 1 << full
            if end_mask & bit:
                d_emask |= 1 << full
            if shrink_mask & bit:
                gather.append(_SHRINK_AXIS)
                d_shrink |= 1 << full
            else:
                gather.append(full)
            full += 1
    # Canonicalise each dense dim.
    processing: list[int] = []
    for i, dim in enumerate(dims):
        s = d_strides[i]
        if s == 0:
            raise InvalidArgumentError(f"strides[{i}] must be non-zero")
        shrink = bool(d_shrink & (1 << i))
        if shrink and s <= 0:
            raise InvalidArgumentError("only stride 1 allowed on non-range indexing.")
        lo, hi = (0, dim) if s > 0 else (-1, dim - 1)
        masks = (bool(d_bmask & (1 << i)), bool(d_emask & (1 << i)))

        def canonical(x: int, c: int) -> int:
            if masks[c]:
                return (lo, hi)[c] if s > 0 else (lo, hi)[(c + 1) & 1]
            fwd = dim + x if x < 0 else x
            return max(lo, min(hi, fwd))

        if shrink:
            fwd = dim + d_begin[i] if d_begin[i] < 0 else d_begin[i]
            if fwd < 0 or fwd >= dim:
                raise InvalidArgumentError(f"slice index {d_begin[i]} of dimension {i} out of bounds.")
            d_begin[i], d_end[i] = fwd, fwd + 1
        else:
            d_begin[i], d_end[i] = canonical(d_begin[i], 0), canonical(d_end[i], 1)
        length = d_end[i] - d_begin[i]
        size = 0 if length == 0 or ((length < 0) != (s < 0)) else _trunc_div_ceil(length, s)
        processing.append(size)
    final = [processing[g] if g >= 0 else 1 for g in gather if g != _SHRINK_AXIS]
    return StridedSliceSpec(d_begin, d_end, d_strides, processing, final, dense_dims[:n],
                            [g for g in gather if g != _SHRINK_AXIS])


def slice_spec(ctx, dims, begin_index: int) -> StridedSliceSpec:
    """The spec of a node's (begin, end, strides) inputs starting at ``begin_index`` and its mask attrs."""
    return strided_slice_spec(
        list(dims), ctx.const_ints(begin_index), ctx.const_ints(begin_index + 1), ctx.const_ints(begin_index + 2),
        int(ctx.attr("begin_mask", 0)), int(ctx.attr("end_mask", 0)), int(ctx.attr("ellipsis_mask", 0)),
        int(ctx.attr("new_axis_mask", 0)), int(ctx.attr("shrink_axis_mask", 0)))


@lowers("StridedSlice")
def _strided_slice(ctx, node):
    x = ctx.input(0)
    b = ctx.b
    dims = x.shape.dimensions
    if ctx.try_const_input(1) is None or ctx.try_const_input(2) is None:
        dynamic = _dynamic_slice_of(ctx, x)
        if dynamic is not None:
            return [dynamic]
    spec = slice_spec(ctx, dims, 1)
    starts, limits, strides, rev = [], [], [], []
    for i, dim in enumerate(dims):
        s = spec.strides[i]
        if s > 0:
            starts.append(spec.begin[i])
            limits.append(max(spec.end[i], spec.begin[i]))
            strides.append(s)
        else:  # negative stride: slice the reversed dim
            starts.append(dim - spec.begin[i] - 1)
            limits.append(max(dim - spec.end[i] - 1, dim - spec.begin[i] - 1))
            strides.append(-s)
            rev.append(i)
    if rev:
        x = b.reverse(x, rev)
    if starts != [0] * len(dims) or limits != list(dims) or any(s != 1 for s in strides):
        x = b.slice(x, starts, limits, strides)
    if list(x.shape.dimensions) != spec.final_shape:
        x = b.reshape(x, spec.final_shape)
    return [x]


def _scalar_term(ctx, h) -> tuple[object, int]:
    """A scalar integer HLO as ``(root, offset)``: ``root + offset`` with ``root`` an opaque value's key (None
    for a constant), peeling reshapes, converts and additions of constants (XLA's value inference for
    ``end - begin`` of a slice)."""
    folded = ctx.lowerer.folder.fold(h)
    if folded is not None:
        return None, int(np.asarray(folded).reshape(-1)[0])
    if h.opcode in (O.RESHAPE, O.BITCAST, O.COPY, O.CONVERT, O.BROADCAST) and h.operands[0].shape.rank == 0:
        return _scalar_term(ctx, h.operands[0])
    if h.opcode in (O.ADD, O.SUBTRACT):
        (ra, a), (rb, c) = (_scalar_term(ctx, o) for o in h.operands)
        if h.opcode is O.ADD and (ra is None or rb is None):
            return (ra if rb is None else rb), a + c
        if h.opcode is O.SUBTRACT and rb is None:
            return ra, a - c
    return id(h), 0


def _entry_term(ctx, h, k: int) -> tuple[object, int]:
    """Element ``k`` of a rank-1 integer HLO as :func:`_scalar_term` (through concatenates of pieces)."""
    folded = ctx.lowerer.folder.fold(h)
    if folded is not None:
        return None, int(np.asarray(folded).reshape(-1)[k])
    if h.opcode is O.CONCATENATE:
        for piece in h.operands:
            n = piece.shape.dimensions[0]
            if k < n:
                return _entry_term(ctx, piece, k)
            k -= n
    if h.opcode in (O.RESHAPE, O.BITCAST, O.COPY, O.CONVERT, O.BROADCAST) and h.operands[0].shape.rank == 0:
        return _scalar_term(ctx, h.operands[0])
    if h.opcode in (O.ADD, O.SUBTRACT) and all(o.shape.rank == 1 for o in h.operands):
        (ra, a), (rb, c) = (_entry_term(ctx, o, k) for o in h.operands)
        if h.opcode is O.ADD and (ra is None or rb is None):
            return (ra if rb is None else rb), a + c
        if h.opcode is O.SUBTRACT and rb is None:
            return ra, a - c
    return (id(h), k), 0


def _dynamic_slice_of(ctx, x):
    """A strided slice with run-time begin/end (see the module docstring) as a ``dynamic-slice``, or None when
    its sizes are not compile-time constants."""
    b = ctx.b
    dims = x.shape.dimensions
    strides = ctx.try_const_input(3)
    begin, end = ctx.input(1), ctx.input(2)
    if strides is None or begin.shape.rank != 1 or any(int(v) != 1 for v in strides.reshape(-1)):
        return None
    n = begin.shape.dimensions[0]
    bmask, emask, shrink = (int(ctx.attr(a, 0)) for a in ("begin_mask", "end_mask", "shrink_axis_mask"))
    ellipsis, new_axis = int(ctx.attr("ellipsis_mask", 0)), int(ctx.attr("new_axis_mask", 0))
    # Static begin/end per entry where known; run-time begins with a constant length otherwise.
    static_b, static_e, run_time = [0] * n, [1] * n, {}
    for i in range(n):
        bit = 1 << i
        if ellipsis & bit or new_axis & bit or (bmask & bit and emask & bit):
            continue
        rb, vb = _entry_term(ctx, begin, i)
        if shrink & bit:
            if rb is None:
                static_b[i], static_e[i] = vb, vb + 1
            else:
                run_time[i] = 1
            continue
        re_, ve = _entry_term(ctx, end, i)
        if bmask & bit or emask & bit or (rb is not None and re_ != rb):
            if rb is not None or re_ is not None:
                return None
        if rb is None and re_ is None:
            static_b[i], static_e[i] = vb, ve
        else:
            run_time[i] = ve - vb
            if run_time[i] < 0:
                return None
    if not run_time:
        return None
    spec = strided_slice_spec(list(dims), static_b, static_e, [1] * n, bmask, emask, ellipsis, new_axis, shrink)
    starts = [xl.scalar(b, v, P.S32) for v in spec.begin]
    sizes = list(spec.processing_shape)
    for i, length in run_time.items():
        d = spec.dense_dims[i]
        k = xl.convert(b, b.reshape(b.slice(begin, [i], [i + 1], [1]), []), P.S32)
        starts[d] = xl.select(b, xl.lt(b, k, 0), xl.add(b, k, dims[d]), k)
        sizes[d] = min(length, dims[d])
    x = b.dynamic_slice(x, starts, sizes)
    return b.reshape(x, [sizes[g] if g >= 0 else 1 for g in spec.final_dims])


@lowers("StridedSliceGrad")
def _strided_slice_grad(ctx, node):
    b = ctx.b
    shape = ctx.const_ints(0)
    dy = ctx.input(4)
    spec = slice_spec(ctx, shape, 1)
    if list(dy.shape.dimensions) != spec.final_shape:
        raise InvalidArgumentError(f"shape of dy was [{','.join(map(str, dy.shape.dimensions))}] instead of "
                                   f"[{','.join(map(str, spec.final_shape))}]")
    return [_place(b, dy, shape, spec, None)]


def _place(b, value, shape, spec: StridedSliceSpec, base):
    """``value`` (final shape) written at the slice's positions of a ``shape`` tensor: into zeros when
    ``base`` is None (the gradient), else into ``base``."""
    et = value.shape.element_type
    if any(p == 0 for p in spec.processing_shape):
        return xl.full(b, 0, et, shape) if base is None else base
    g = b.reshape(value, spec.processing_shape) if list(value.shape.dimensions) != spec.processing_shape else value
    rev, pads = [], []
    for i, dim in enumerate(shape):
        s, count, first = spec.strides[i], spec.processing_shape[i], spec.begin[i]
        if s < 0:  # positions first, first-|s|, ...: reverse and pad from the lowest one
            rev.append(i)
            low = first - (count - 1) * (-s)
            pads.append((low, dim - first - 1, -s - 1))
        else:
            last = first + (count - 1) * s
            pads.append((first, dim - last - 1, s - 1))
    if rev:
        g = b.reverse(g, rev)
    placed = b.pad(g, xl.scalar(b, 0, et), pads)
    if base is None:
        return placed
    ones = xl.full(b, True, P.PRED, spec.processing_shape)
    mask = b.pad(ones, xl.scalar(b, False, P.PRED), pads)
    return b.select(mask, placed, base)


def strided_slice_update(b, x, value, spec: StridedSliceSpec):
    """``x`` with ``x[spec] = value`` (value broadcast to the slice's final shape)."""
    value = xl.broadcast_to(b, value, spec.final_shape)
    return _place(b, value, list(x.shape.dimensions), spec, x)


@lowers("Slice")
def _slice(ctx, node):
    x = ctx.input(0)
    dims = x.shape.dimensions
    begin, size = ctx.const_ints(1), ctx.const_ints(2)
    if len(begin) != len(dims) or len(size) != len(dims):
        raise InvalidArgumentError(f"Expected begin and size arguments to be 1-D tensors of size {len(dims)}, but "
                                   f"got shapes [{len(begin)}] and [{len(size)}] instead.")
    limits = []
    for i, (d, b0, s) in enumerate(zip(dims, begin, size)):
        if s == -1:
            s = d - b0
        if not (0 <= b0 <= d and 0 <= s and b0 + s <= d):
            raise InvalidArgumentError(f"Expected size[{i}] in [0, {d - b0}], but got {s}")
        limits.append(b0 + s)
    if begin == [0] * len(dims) and limits == list(dims):
        return [x]
    return [ctx.b.slice(x, begin, limits)]
