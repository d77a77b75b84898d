"""Data-movement semantics of the reference evaluator (operation_semantics.md, HloEvaluator).

Handlers take ``(evaluator, instr, operand_values)`` and return a numpy array.

- dynamic-slice / dynamic-update-slice clamp each start index into ``[0, dim - size]``;
- gather clamps each slice start the same way; scatter skips an update window that would fall partly
  outside the operand and applies windows in row-major order of the scatter indices, combining with
  ``to_apply``;
- pad takes negative low/high as cropping, interior padding between elements;
- bitcast reinterprets the buffer: elements are read in the operand's physical (layout) order and
  written in the result's physical order, so it is a reshape when both layouts are row-major.
"""
from __future__ import annotations

from math import prod

import numpy as np

from tfxla_cluster.hlo.eval_elementwise import minmax_at
from tfxla_cluster.hlo.opcode import HloOpcode as O


def _physical(x: np.ndarray, minor_to_major) -> np.ndarray:
    """Elements in memory order for a layout (major-to-minor traversal)."""
    return np.transpose(x, tuple(reversed(minor_to_major))).reshape(-1) if x.ndim else x.reshape(-1)


def bitcast(ev, instr, args):
    (x,) = args
    src, dst = instr.operands[0].shape, instr.shape
    flat = _physical(x, src.minor_to_major)
    if dst.element_type is not src.element_type:
        flat = np.ascontiguousarray(flat).view(dst.dtype)
    if dst.rank == 0:
        return flat.reshape(())
    major_to_minor = tuple(reversed(dst.minor_to_major))
    phys = flat.reshape([dst.dimensions[d] for d in major_to_minor])
    return np.transpose(phys, np.argsort(major_to_minor)).copy()


def iota(ev, instr, args):
    s = instr.shape
    d = instr.iota_dimension
    ramp = np.arange(s.dimensions[d], dtype=np.int64).reshape([-1 if i == d else 1 for i in range(s.rank)])
    ramp = ramp.astype(np.float32) if s.element_type.is_float and s.element_type.bit_width == 16 else ramp
    return np.broadcast_to(ramp, s.dimensions).astype(s.dtype)


def broadcast(ev, instr, args):
    (x,) = args
    out = instr.shape.dimensions
    dims = list(instr.dimensions)
    order = np.argsort(dims)
    x = np.transpose(x, order) if x.ndim else x
    sorted_dims = [dims[i] for i in order]
    shape = [1] * len(out)
    for k, d in enumerate(sorted_dims):
        shape[d] = x.shape[k]
    return np.broadcast_to(x.reshape(shape), out).copy()


def dynamic_slice(ev, instr, args):
    x, starts = args[0], args[1:]
    sizes = instr.dynamic_slice_sizes
    index = []
    for d, (s, size) in enumerate(zip(starts, sizes)):
        start = min(max(int(s), 0), x.shape[d] - size)
        index.append(slice(start, start + size))
    return x[tuple(index)].copy()


def dynamic_update_slice(ev, instr, args):
    x, update, starts = args[0], args[1], args[2:]
    out = x.copy()
    index = []
    for d, s in enumerate(starts):
        start = min(max(int(s), 0), x.shape[d] - update.shape[d])
        index.append(slice(start, start + update.shape[d]))
    out[tuple(index)] = update
    return out


def pad(ev, instr, args):
    x, value = args
    for d, p in enumerate(instr.padding_config.dimensions):
        n = x.shape[d]
        if p.interior and n > 1:
            shape = list(x.shape)
            shape[d] = (n - 1) * (p.interior + 1) + 1
            dilated = np.full(shape, value, dtype=x.dtype)
            index = [slice(None)] * x.ndim
            index[d] = slice(None, None, p.interior + 1)
            dilated[tuple(index)] = x
            x = dilated
        for amount, at_end in ((p.low, False), (p.high, True)):
            if amount > 0:
                shape = list(x.shape)
                shape[d] = amount
                block = np.full(shape, value, dtype=x.dtype)
                x = np.concatenate([x, block] if at_end else [block, x], axis=d)
            elif amount < 0:
                index = [slice(None)] * x.ndim
                index[d] = slice(0, x.shape[d] + amount) if at_end else slice(-amount, None)
                x = x[tuple(index)]
    return np.ascontiguousarray(x)


# ---------------------------------------------------------------- gather / scatter
def _index_vectors(indices: np.ndarray, index_vector_dim: int):
    """Indices as (batch..., K) plus the indices-dimension numbers of the batch axes."""
    idx = indices.astype(np.int64)
    if index_vector_dim == idx.ndim:
        idx = idx[..., None]
    batch_dims = [d for d in range(idx.ndim) if d != index_vector_dim]
    return np.moveaxis(idx, index_vector_dim, -1), batch_dims


def gather(ev, instr, args):
    operand, indices = args
    dn, sizes = instr.gather_dimension_numbers, instr.gather_slice_sizes
    idx, batch_dims = _index_vectors(indices, dn.index_vector_dim)
    batch_shape, nb, rank = idx.shape[:-1], idx.ndim - 1, operand.ndim
    starts = np.zeros(batch_shape + (rank,), dtype=np.int64)
    for k, d in enumerate(dn.start_index_map):
        starts[..., d] = idx[..., k]
    for od, idim in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
        axis = batch_dims.index(idim)
        starts[..., od] = np.arange(batch_shape[axis]).reshape([-1 if a == axis else 1 for a in range(nb)])
    starts = np.clip(starts, 0, np.array(operand.shape, dtype=np.int64) - np.array(sizes, dtype=np.int64))
    index_arrays = []
    for d in range(rank):
        s = starts[..., d].reshape(batch_shape + (1,) * rank)
        w = np.arange(sizes[d]).reshape((1,) * nb + tuple(sizes[d] if i == d else 1 for i in range(rank)))
        index_arrays.append(s + w)
    g = operand[tuple(index_arrays)]
    removed = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    kept = [sizes[d] for d in range(rank) if d not in removed]
    g = g.reshape(batch_shape + tuple(kept))
    src, bi, oi = [], 0, 0
    for j in range(nb + len(kept)):
        if j in dn.offset_dims:
            src.append(nb + oi)
            oi += 1
        else:
            src.append(bi)
            bi += 1
    return np.ascontiguousarray(np.transpose(g, src))


def scatter(ev, instr, args):
    k = (len(args) - 1) // 2
    outs = [a.copy() for a in args[:k]]
    indices, updates = args[k], args[k + 1:]
    dn = instr.scatter_dimension_numbers
    idx, batch_dims = _index_vectors(indices, dn.index_vector_dim)
    batch_shape, rank = idx.shape[:-1], outs[0].ndim
    u_rank = updates[0].ndim
    scatter_dims = [d for d in range(u_rank) if d not in dn.update_window_dims]
    perm = scatter_dims + list(dn.update_window_dims)
    window_shape = tuple(updates[0].shape[d] for d in dn.update_window_dims)
    n = prod(batch_shape)
    flat_updates = [np.transpose(u, perm).reshape((n,) + window_shape) for u in updates]
    flat_idx = idx.reshape(n, -1)
    window_operand_dims = [d for d in range(rank)
                           if d not in dn.inserted_window_dims and d not in dn.input_batching_dims]
    extent = np.ones(rank, dtype=np.int64)
    for j, d in enumerate(window_operand_dims):
        extent[d] = window_shape[j]
    limits = np.array(outs[0].shape, dtype=np.int64)
    comp = instr.to_apply
    if k == 1 and not dn.input_batching_dims and _scatter_ufunc(comp, outs[0]) is not None:
        _scatter_with_ufunc(_scatter_ufunc(comp, outs[0]), outs[0], flat_idx, dn, extent, limits,
                            flat_updates[0])
        return outs[0]
    for i in range(n):
        start = np.zeros(rank, dtype=np.int64)
        for kk, d in enumerate(dn.scatter_dims_to_operand_dims):
            start[d] = flat_idx[i, kk]
        if dn.input_batching_dims:
            multi = np.unravel_index(i, batch_shape)
            for od, idim in zip(dn.input_batching_dims, dn.scatter_indices_batching_dims):
                start[od] = multi[batch_dims.index(idim)]
        if np.any(start < 0) or np.any(start + extent > limits):
            continue  # the whole window is skipped when it does not fit
        region = tuple(slice(int(s), int(s + e)) for s, e in zip(start, extent))
        current = [o[region] for o in outs]
        new = ev.map_computation(comp, current + [u[i].reshape(tuple(extent)) for u in flat_updates])
        new = new if isinstance(new, tuple) else (new,)
        for o, v in zip(outs, new):
            o[region] = v
    return outs[0] if k == 1 else tuple(outs)


def _scatter_ufunc(comp, out):
    from tfxla_cluster.hlo.eval_compute import _UFUNCS, simple_reducer
    op = simple_reducer(comp)
    # In-place ufunc.at is exact for integers; for floats it keeps XLA's sequential update order.
    return None if op is None or out.dtype == np.bool_ else _UFUNCS[op]


def _scatter_with_ufunc(ufunc, out, flat_idx, dn, extent, limits, updates) -> None:
    """All windows at once: ``ufunc.at`` applies updates in index order, like the sequential loop."""
    n, rank = flat_idx.shape[0], out.ndim
    start = np.zeros((n, rank), dtype=np.int64)
    for kk, d in enumerate(dn.scatter_dims_to_operand_dims):
        start[:, d] = flat_idx[:, kk]
    ok = np.all((start >= 0) & (start + extent <= limits), axis=1)
    grids = np.meshgrid(*[np.arange(e) for e in extent], indexing="ij")
    index = tuple(start[ok][:, d].reshape((-1,) + (1,) * rank) + grids[d][None] for d in range(rank))
    values = updates[ok].reshape((-1,) + tuple(int(e) for e in extent))
    if ufunc in (np.maximum, np.minimum) and np.issubdtype(out.dtype, np.floating):
        minmax_at(ufunc is np.maximum, out, index, values)
    else:
        ufunc.at(out, index, values)


HANDLERS = {
    O.BITCAST: bitcast,
    O.IOTA: iota,
    O.BROADCAST: broadcast,
    O.RESHAPE: lambda ev, i, a: a[0].reshape(i.shape.dimensions).copy(),
    O.TRANSPOSE: lambda ev, i, a: np.transpose(a[0], i.dimensions).copy(),  # copy keeps 0-d arrays 0-d
    O.REVERSE: lambda ev, i, a: np.flip(a[0], axis=tuple(i.dimensions)).copy() if i.dimensions else a[0].copy(),
    O.SLICE: lambda ev, i, a: a[0][tuple(slice(r.start, r.limit, r.stride) for r in i.slices)].copy(),
    O.DYNAMIC_SLICE: dynamic_slice,
    O.DYNAMIC_UPDATE_SLICE: dynamic_update_slice,
    O.CONCATENATE: lambda ev, i, a: np.concatenate(a, axis=i.dimensions[0]),
    O.PAD: pad,
    O.GATHER: gather,
    O.SCATTER: scatter,
}
