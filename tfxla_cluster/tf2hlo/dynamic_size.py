"""Ops whose output sizes depend on input values: ListDiff, Unique, UniqueV2, DynamicPartition (tf2xla's
listdiff_op.cc, unique_op.cc, dynamic_partition_op.cc).

Stage: lowering. TF's XLA gives these outputs a dynamic dimension (a static bound plus a run-time size).

* With compile-time-constant inputs (folded like any ``ConstantInput``) the sizes are known: ListDiff and
  Unique/UniqueV2 are computed on the host (values in first-occurrence order, as TF) and become constants;
  DynamicPartition needs only ``partitions`` constant (each output gathers its rows of ``data`` at
  host-known positions).
* Unique/UniqueV2 of a run-time vector and Where of a run-time tensor (shape_ops.py hands it here) give a
  :class:`~tfxla_cluster.tf2hlo.bounded_dynamic.BoundedDynamic` value, bounded by the input's size, as
  TF's XLA: Unique's ``y`` is ``x`` in first-occurrence order of its distinct values (three stable sorts
  and a log-step running maximum), ``idx`` is static; Where's coordinates are the true positions in
  row-major order (one sort), padding rows zero. The consumers of dynamic_padder.py use them inside the
  cluster; as a result the cluster returns the padded array and its run-time size, which the launch
  slices (what TF's XLA returns at its boundary).

Any other run-time size is an ``UnimplementedError`` naming the op and the input.
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.attrs import ComparisonType
from tfxla_cluster.hlo.builder import make_comparator
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tfxla_cluster.tf2hlo import types
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.bounded_dynamic import BoundedDynamic
from tfxla_cluster.tf2hlo.gather_scatter import gather
from tfxla_cluster.tf2hlo.registry import lowers


def _constant(ctx, index: int, what: str) -> np.ndarray:
    v = ctx.try_const_input(index)
    if v is None:
        raise UnimplementedError(f"{ctx.op} ({ctx.name}): the output size depends on the run-time value of "
                                 f"{what}; TF's XLA gives it a dynamic dimension, which needs dynamic shapes "
                                 "(not supported here) — make it a compile-time constant")
    return np.asarray(v)


@lowers("ListDiff")
def _list_diff(ctx, node):
    x, y = _constant(ctx, 0, "x"), _constant(ctx, 1, "y")
    if x.ndim != 1 or y.ndim != 1:
        raise InvalidArgumentError("x and y must be vectors")
    keep = ~np.isin(x, y)
    idx_t = types.np_dtype(node.outputs[1].dtype)
    return [x[keep], np.nonzero(keep)[0].astype(idx_t)]


def _unique_along(x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(unique slices along ``axis`` in first-occurrence order, index of each slice's unique)."""
    moved = np.moveaxis(x, axis, 0)
    keys = [moved[i].tobytes() for i in range(moved.shape[0])]
    first: dict[bytes, int] = {}
    idx = np.empty(len(keys), np.int64)
    order: list[int] = []
    for i, k in enumerate(keys):
        if k not in first:
            first[k] = len(order)
            order.append(i)
        idx[i] = first[k]
    return np.moveaxis(moved[order], 0, axis), idx


def _sorted(b, keys, *others):
    """``keys`` (s32 or any type) sorted ascending, stably, carrying ``others``: the tuple's elements."""
    ops = [keys, *others]
    et = keys.shape.element_type
    # Floats in total order, as TF's XLA sorts Unique's values (-0 before +0, NaNs last).
    cmp = make_comparator("LT", [o.shape.element_type for o in ops],
                          ComparisonType.TOTALORDER if et.is_float else None)
    out = b.sort(ops, 0, cmp, is_stable=True)
    if len(ops) == 1:   # a one-operand sort gives the array itself
        return [out]
    return [b.get_tuple_element(out, i) for i in range(len(ops))]


def _running_max(b, x):
    """Inclusive running maximum of the s32 vector ``x`` (log-step: each step folds in a shifted copy)."""
    n = x.shape.dimensions[0]
    low = xl.scalar(b, np.iinfo(np.int32).min, P.S32)
    shift = 1
    while shift < n:
        shifted = b.pad(b.slice(x, [0], [n - shift]), low, [(shift, 0)])
        x = b.binary(O.MAXIMUM, x, shifted)
        shift *= 2
    return x


def _inverse_permutation(b, perm, values):
    """``out[perm[k]] = values[k]`` for a permutation ``perm`` (a sort by it)."""
    return _sorted(b, perm, values)[1]


def unique_bounded(ctx, node, x) -> list:
    """Unique of the run-time vector ``x``: [BoundedDynamic y, idx] (see the module docstring)."""
    b = ctx.b
    n = x.shape.dimensions[0]
    idx_et = ctx.output_type(1)
    if n == 0:
        return [np.zeros((0,), x.shape.element_type.dtype), np.zeros((0,), idx_et.dtype)]
    iota = b.iota(Shape.array(P.S32, [n]), 0)
    sv, perm = _sorted(b, x, iota)
    # new[k]: sorted position k starts a group of equal values.
    differs = b.convert(b.compare(b.slice(sv, [1], [n]), b.slice(sv, [0], [n - 1]), "NE"), P.S32)
    new = b.pad(differs, xl.scalar(b, 1, P.S32), [(1, 0)])
    is_new = b.compare(new, xl.full(b, 0, P.S32, [n]), "NE")
    count = xl.reduce(b, new, 0, [0], O.ADD, f"{node.name}-count")
    # Group starts ordered by their first occurrence in x (a stable sort keeps the first occurrence of
    # each value at its group's start); the other positions sort after them.
    key = b.select(is_new, perm, xl.full(b, n, P.S32, [n]))
    _, order = _sorted(b, key, iota)
    y = _gather_1d(b, sv, order)
    # idx: the output position of each element's group.
    rank_of_start = _inverse_permutation(b, order, iota)
    start = _running_max(b, b.select(is_new, iota, xl.full(b, 0, P.S32, [n])))
    rank = _gather_1d(b, rank_of_start, start)
    idx = _inverse_permutation(b, perm, rank)
    return [BoundedDynamic(y, 0, count), xl.convert(b, idx, idx_et) if idx_et is not P.S32 else idx]


def _gather_1d(b, values, indices):
    return gather(b, values, indices, 0, 0)


def where_bounded(ctx, node) -> list:
    """Where of a run-time tensor: [BoundedDynamic s64[<=n, rank]] (see the module docstring)."""
    b = ctx.b
    x = ctx.input(0)
    dims = x.shape.dimensions
    n = int(np.prod(dims, dtype=np.int64))
    rank = len(dims)
    out_et = ctx.output_type(0)
    if n == 0:
        return [np.zeros((0, rank), out_et.dtype)]
    flat = b.reshape(x, [n])
    et = flat.shape.element_type
    zero = xl.full(b, False if et.is_pred else 0, et, [n])
    mask = b.compare(flat, zero, "NE")
    count = xl.reduce(b, b.convert(mask, P.S32), 0, [0], O.ADD, f"{node.name}-count")
    iota = b.iota(Shape.array(P.S32, [n]), 0)
    (pos,) = _sorted(b, b.select(mask, iota, xl.full(b, n, P.S32, [n])))
    valid = b.compare(pos, xl.full(b, n, P.S32, [n]), "LT")
    if rank == 0:
        return [BoundedDynamic(xl.full(b, 0, out_et, [1, 0]), 0, count)]
    cols = []
    stride = n
    for d in dims:
        stride //= d
        c = b.binary(O.REMAINDER, b.binary(O.DIVIDE, pos, xl.full(b, stride, P.S32, [n])), xl.full(b, d, P.S32, [n]))
        c = b.select(valid, c, xl.full(b, 0, P.S32, [n]))
        cols.append(b.reshape(c, [n, 1]))
    coords = b.concatenate(cols, 1) if len(cols) > 1 else cols[0]
    return [BoundedDynamic(b.convert(coords, out_et), 0, count)]


@lowers("Unique")
def _unique(ctx, node):
    x = ctx.try_const_input(0)
    if x is None and len(ctx.input_dims(0)) == 1:
        return unique_bounded(ctx, node, ctx.input(0))
    x = _constant(ctx, 0, "x")
    if x.ndim != 1:
        raise InvalidArgumentError(f"unique expects a 1D vector, got shape {list(x.shape)}")
    y, idx = _unique_along(x, 0)
    return [y, idx.astype(types.np_dtype(node.outputs[1].dtype))]


@lowers("UniqueV2")
def _unique_v2(ctx, node):
    if ctx.try_const_input(0) is None:
        axis = [int(a) for a in np.asarray(ctx.const_input(1)).reshape(-1)]
        dims = ctx.input_dims(0)
        if len(dims) == 1 and axis in ([], [0], [-1]):
            return unique_bounded(ctx, node, ctx.input(0))
        if not axis:
            return unique_bounded(ctx, node, ctx.b.reshape(ctx.input(0), [int(np.prod(dims, dtype=np.int64))]))
    x = _constant(ctx, 0, "x")
    axis = [int(a) for a in np.asarray(ctx.const_input(1)).reshape(-1)]
    if len(axis) > 1:
        raise InvalidArgumentError(f"Axis argument should have at most one element, got {axis}")
    a = axis[0] if axis else 0
    if not -max(x.ndim, 1) <= a < max(x.ndim, 1):
        raise InvalidArgumentError(f"axis {a} is out of range for an input of rank {x.ndim}")
    y, idx = _unique_along(x.reshape(-1) if not axis else x, a % max(x.ndim, 1))
    return [y, idx.astype(types.np_dtype(node.outputs[1].dtype))]


@lowers("DynamicPartition")
def _dynamic_partition(ctx, node):
    b = ctx.b
    parts = _constant(ctx, 1, "partitions").astype(np.int64)
    n = int(ctx.attr("num_partitions"))
    dims = ctx.input_dims(0)
    k = parts.ndim
    if tuple(dims[:k]) != parts.shape:
        raise InvalidArgumentError(f"data.shape must start with partitions.shape, got data.shape = {list(dims)}, "
                                   f"partitions.shape = {list(parts.shape)}")
    flat = parts.reshape(-1)
    bad = flat[(flat < 0) | (flat >= n)]
    if bad.size:
        raise InvalidArgumentError(f"partitions has values outside [0, {n}): {int(bad[0])}")
    rest = tuple(dims[k:])
    value = ctx.input_value(0)
    outs = []
    if isinstance(value, np.ndarray):   # all-constant: partition on the host
        data = value.reshape((-1,) + rest)
        return [data[flat == i] for i in range(n)]
    data = ctx.input(0)
    rows = b.reshape(data, (int(np.prod(dims[:k], dtype=np.int64)),) + rest)
    for i in range(n):
        pos = np.nonzero(flat == i)[0].astype(np.int32)
        if pos.size == 0:
            outs.append(np.zeros((0,) + rest, data.shape.element_type.dtype))
        else:
            outs.append(gather(b, rows, b.constant(pos, P.S32), 0))
    return outs
