"""Gathers, scatters and one-hot (tf2xla's gather_op.cc, scatter_nd_op.cc, tensor scatter ops,
one_hot_op.cc).

Stage: lowering. ``GatherV2`` (any axis, ``batch_dims``) and ``GatherNd`` become one HLO ``gather``;
``ScatterNd`` / ``TensorScatter{Update,Add,Sub,Max,Min}`` one ``scatter`` with the matching combiner.
Out-of-range indices follow XLA (gather clamps the start, scatter skips the update) where TF's CPU
kernels would report an error. ``OneHot`` compares the indices with an ``iota`` along the new axis.
"""
from __future__ import annotations

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo.attrs import GatherDimensionNumbers, ScatterDimensionNumbers
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import Shape
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.registry import lowers


def gather(b, params, indices, axis: int, batch_dims: int = 0):
    """``tf.gather(params, indices, axis, batch_dims)`` as one HLO gather.

    Batch dims become operand/start-index batching dims; the output is
    ``params[:axis] + indices[batch_dims:] + params[axis+1:]``.
    """
    pd, idims = params.shape.dimensions, indices.shape.dimensions
    ir = len(idims)
    slice_sizes = list(pd)
    slice_sizes[axis] = 1
    for d in range(batch_dims):
        slice_sizes[d] = 1
    # Output: params[:axis] (batch dims first) + indices[batch_dims:] + params[axis+1:].
    n_idx = ir - batch_dims
    offset_dims = [d for d in range(batch_dims, axis)] + [axis + n_idx + k for k in range(len(pd) - axis - 1)]
    dn = GatherDimensionNumbers(
        offset_dims=tuple(offset_dims), collapsed_slice_dims=(axis,), start_index_map=(axis,), index_vector_dim=ir,
        operand_batching_dims=tuple(range(batch_dims)), start_indices_batching_dims=tuple(range(batch_dims)))
    return b.gather(params, indices, dn, slice_sizes)


def _gather_bounded_params(ctx, params, axis: int) -> list:
    """GatherV2 of bounded dynamic ``params`` with static indices: gathered from the padded array; along
    another axis the dynamic dimension moves past the indices' dimensions."""
    from tfxla_cluster.tf2hlo.bounded_dynamic import bounded

    b = ctx.b
    indices = ctx.input(1)
    out = gather(b, params.value, indices, axis, 0)
    if axis == params.dimension:   # static positions into the run-time entries: a static result
        return [out]
    dim = params.dimension if params.dimension < axis else params.dimension + indices.shape.rank - 1
    return [bounded(b, out, dim, params.size)]


@lowers("GatherV2", "Gather")
def _gather_v2(ctx, node):
    from tfxla_cluster.tf2hlo.bounded_dynamic import BoundedDynamic

    dynamic = ctx.input_value(1)
    if isinstance(dynamic, BoundedDynamic):
        return [_gather_bounded_dynamic(ctx, node, dynamic)]
    params = ctx.input_value(0)
    if isinstance(params, BoundedDynamic) and node.op == "GatherV2" and int(ctx.attr("batch_dims", 0)) == 0:
        return _gather_bounded_params(ctx, params, ctx.normalize_axis(ctx.const_int(2), params.value.shape.rank))
    params, indices = ctx.input(0), ctx.input(1)
    rank = params.shape.rank
    axis = ctx.const_int(2) if node.op == "GatherV2" else 0
    batch_dims = int(ctx.attr("batch_dims", 0))
    ir = indices.shape.rank
    if batch_dims < 0:
        batch_dims += ir
    if not -rank <= axis < rank:
        raise InvalidArgumentError(f"Expected axis in the range [{-rank}, {rank}), but got {axis}")
    axis %= rank
    if batch_dims > axis or batch_dims > ir:
        raise InvalidArgumentError(f"batch_dims ({batch_dims}) must be less than or equal to axis ({axis}) and "
                                   f"rank(indices) ({ir})")
    for d in range(batch_dims):
        if params.shape.dimensions[d] != indices.shape.dimensions[d]:
            raise InvalidArgumentError(f"params.shape[{d}]: {params.shape.dimensions[d]} should be equal to "
                                       f"indices.shape[{d}]: {indices.shape.dimensions[d]}")
    pd, idims = params.shape.dimensions, indices.shape.dimensions
    out = list(pd[:axis]) + list(idims[batch_dims:]) + list(pd[axis + 1:])
    empty = _empty_gather(ctx.b, params, idims[batch_dims:], out, [axis])
    return [empty if empty is not None else gather(ctx.b, params, indices, axis, batch_dims)]


def _gather_bounded_dynamic(ctx, node, indices):
    """Gathering with bounded dynamic indices (NonMaxSuppressionV3's, ``tf.gather(boxes, selected)``): the
    padded indices are gathered (XLA clamps them as any index) and the result keeps their run-time size
    along the gathered dimension, as XLA's dynamic padder gives it."""
    from tfxla_cluster.tf2hlo.bounded_dynamic import BoundedDynamic

    params = ctx.input(0)
    rank = params.shape.rank
    axis = ctx.const_int(2) if node.op == "GatherV2" else 0
    if int(ctx.attr("batch_dims", 0)) != 0 or not -rank <= axis < rank:
        raise UnimplementedError(f"{node.op} ({node.name}): bounded dynamic indices with batch_dims or axis "
                                 f"{axis} out of range")
    axis %= rank
    return BoundedDynamic(gather(ctx.b, params, indices.value, axis, 0), axis + indices.dimension, indices.size)


def _empty_gather(b, params, index_dims, out_dims, axes):
    """tf2xla's XlaGather degenerate cases: no indices gives zeros of the output shape; indices into
    an axis of size zero give zeros of the params shape without the (first) gathered axis — what TF's
    XLA returns for GatherV2 and GatherNd alike (whatever the indices' shape)."""
    n = 1
    for d in index_dims:
        n *= d
    if n == 0:
        return xl.full(b, 0, params.shape.element_type, out_dims)
    pd = params.shape.dimensions
    axes = list(axes)
    if any(pd[a] == 0 for a in axes):
        return xl.full(b, 0, params.shape.element_type, [d for i, d in enumerate(pd) if i != axes[0]])
    return None


@lowers("GatherNd")
def _gather_nd(ctx, node):
    params, indices = ctx.input(0), ctx.input(1)
    b = ctx.b
    pd, idims = params.shape.dimensions, indices.shape.dimensions
    if not idims:
        raise InvalidArgumentError("indices must be at least a vector")
    k = idims[-1]
    if k > len(pd):
        raise InvalidArgumentError(f"index innermost dimension length must be <= params rank; saw: {k} vs. "
                                   f"{len(pd)}")
    batch = len(idims) - 1
    empty = _empty_gather(b, params, idims[:-1], list(idims[:-1]) + list(pd[k:]), range(k))
    if empty is not None:
        return [empty]
    dn = GatherDimensionNumbers(
        offset_dims=tuple(range(batch, batch + len(pd) - k)), collapsed_slice_dims=tuple(range(k)),
        start_index_map=tuple(range(k)), index_vector_dim=batch)
    return [b.gather(params, indices, dn, [1] * k + list(pd[k:]))]


def combiner(b, opcode: O | None, et, name: str):
    """``(old, new) -> new`` for updates, or ``opcode(old, new)``."""
    r = b.sub_builder(name)
    x = r.parameter(0, Shape.scalar(et), "p0")
    y = r.parameter(1, Shape.scalar(et), "p1")
    return r.build(y if opcode is None else r.binary(opcode, x, y))


def scatter_nd(b, operand, indices, updates, opcode: O | None, name: str):
    """Scatter ``updates`` into ``operand`` at ``indices[..., K]`` (TF's ScatterNd layout)."""
    od, idims, ud = operand.shape.dimensions, indices.shape.dimensions, updates.shape.dimensions
    if not idims:
        raise InvalidArgumentError("Indices shape must have rank at least one.")
    k = idims[-1]
    batch = len(idims) - 1
    if k > len(od):
        raise InvalidArgumentError(f"Outer dimensions of indices and update must match. Index depth {k} exceeds "
                                   f"the rank {len(od)} of the output.")
    expected = list(idims[:-1]) + list(od[k:])
    if list(ud) != expected:
        raise InvalidArgumentError(f"updates has shape [{','.join(map(str, ud))}], expected "
                                   f"[{','.join(map(str, expected))}]")
    dn = ScatterDimensionNumbers(
        update_window_dims=tuple(range(batch, len(ud))), inserted_window_dims=tuple(range(k)),
        scatter_dims_to_operand_dims=tuple(range(k)), index_vector_dim=batch)
    comb = combiner(b, opcode, operand.shape.element_type, name)
    return b.scatter(operand, indices, updates, comb, dn)


@lowers("ScatterNd")
def _scatter_nd(ctx, node):
    indices, updates = ctx.input(0), ctx.input(1)
    shape = ctx.const_ints(2)
    b = ctx.b
    zeros = xl.full(b, 0, updates.shape.element_type, shape)
    return [scatter_nd(b, zeros, indices, updates, O.ADD, f"{node.name}-combiner")]


_TENSOR_SCATTER = {"TensorScatterUpdate": None, "TensorScatterAdd": O.ADD, "TensorScatterSub": O.ADD,
                   "TensorScatterMax": O.MAXIMUM, "TensorScatterMin": O.MINIMUM}


@lowers(*_TENSOR_SCATTER)
def _tensor_scatter(ctx, node):
    tensor, indices, updates = ctx.input(0), ctx.input(1), ctx.input(2)
    b = ctx.b
    if node.op == "TensorScatterSub":
        updates = b.negate(updates)
    return [scatter_nd(b, tensor, indices, updates, _TENSOR_SCATTER[node.op], f"{node.name}-combiner")]


@lowers("OneHot")
def _one_hot(ctx, node):
    indices = ctx.input(0)
    b = ctx.b
    depth = ctx.const_int(1)
    on, off = ctx.input(2), ctx.input(3)
    if depth < 0:
        raise InvalidArgumentError(f"depth must be non-negative, got: {depth}")
    if on.shape.rank or off.shape.rank:
        raise InvalidArgumentError("on_value and off_value must be scalars")
    idims = list(indices.shape.dimensions)
    axis = int(ctx.attr("axis", -1))
    if axis == -1:
        axis = len(idims)
    if not 0 <= axis <= len(idims):
        raise InvalidArgumentError(f"Expected axis to be -1 or between [0, {len(idims) + 1}).  But received: {axis}")
    out = idims[:axis] + [depth] + idims[axis:]
    it = indices.shape.element_type
    iota = b.iota(Shape.array(it, out), axis)
    idx = b.broadcast(indices, out, [d for d in range(len(out)) if d != axis])
    hot = b.compare(idx, iota, "EQ")
    return [b.select(hot, b.broadcast(on, out, ()), b.broadcast(off, out, ()))]


@lowers("DynamicStitch", "ParallelDynamicStitch")
def _dynamic_stitch(ctx, node):
    """Constant indices: every data row goes to its index (the last writer wins, as in TF), which is
    one concatenate of the flattened data and one gather of the winning rows."""
    import numpy as np

    b = ctx.b
    n = int(ctx.attr("N"))
    indices = [np.asarray(ctx.const_input(i)).astype(np.int64) for i in range(n)]
    data = [ctx.input(n + i) for i in range(n)]
    rest = list(data[0].shape.dimensions[indices[0].ndim:])
    rows = []
    for idx, d in zip(indices, data):
        if list(d.shape.dimensions) != list(idx.shape) + rest:
            raise InvalidArgumentError(f"data shape {list(d.shape.dimensions)} must be indices shape "
                                       f"{list(idx.shape)} followed by {rest}")
        rows.append(b.reshape(d, [idx.size] + rest))
    flat_idx = np.concatenate([i.reshape(-1) for i in indices]) if indices else np.zeros(0, np.int64)
    size = int(flat_idx.max()) + 1 if flat_idx.size else 0
    winner = np.full(size, -1, np.int64)
    winner[flat_idx] = np.arange(flat_idx.size)  # later positions overwrite earlier ones
    if (winner < 0).any():
        raise InvalidArgumentError(f"Missing indices: {np.flatnonzero(winner < 0).tolist()}")
    allrows = rows[0] if len(rows) == 1 else b.concatenate(rows, 0)
    picks = b.constant(winner.astype(np.int32))
    return [gather(b, allrows, picks, 0)]


@lowers("SparseToDense")
def _sparse_to_dense(ctx, node):
    idx, values, default = ctx.input(0), ctx.input(2), ctx.input(3)
    b = ctx.b
    shape = ctx.const_ints(1)
    if idx.shape.rank < 2:
        idx = b.reshape(idx, [idx.shape.num_elements if idx.shape.rank else 1, 1 if len(shape) == 1 else len(shape)])
    n = idx.shape.dimensions[0]
    if values.shape.rank == 0:
        values = b.broadcast(values, [n], ())
    base = b.broadcast(default, shape, ())
    return [scatter_nd(b, base, idx, values, None, f"{node.name}-combiner")]
