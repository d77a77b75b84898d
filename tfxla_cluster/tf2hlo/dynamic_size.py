"""Ops whose output sizes depend on input values: ListDiff, Unique, UniqueV2, DynamicPartition (tf2xla's
listdiff_op.cc, unique_op.cc, dynamic_partition_op.cc).

Stage: lowering. TF's XLA gives these outputs a dynamic dimension (a static bound plus a run-time size).
Our shapes are static, so the sizes must be known when lowering: the values that decide them must be
compile-time constants (folded like any ``ConstantInput``), and then

* ListDiff and Unique/UniqueV2 are computed on the host (values in first-occurrence order, as TF) and
  become constants;
* DynamicPartition needs only ``partitions`` constant: each output gathers its rows of ``data`` (which
  may be a run-time value) at host-known positions.

A size that is only known at run time is an ``UnimplementedError`` naming the op and the input — except
for a :class:`~tfxla_cluster.tf2hlo.bounded_dynamic.BoundedDynamic` value (NonMaxSuppressionV3's indices):
the few consumers of dynamic_padder.py use it inside the cluster, and as a result the cluster returns the
padded array and its run-time size, which the launch slices (what TF's XLA returns at its boundary).
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo.shape import PrimitiveType as P
from tfxla_cluster.tf2hlo import types
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


@lowers("Unique")
def _unique(ctx, node):
    x = _constant(ctx, 0, "x")
    if x.ndim != 1:
        raise InvalidArgumentError(f"unique expects a 1D vector, got shape {list(x.shape)}")
    y, idx = _unique_along(x, 0)
    return [y, idx.astype(types.np_dtype(node.outputs[1].dtype))]


@lowers("UniqueV2")
def _unique_v2(ctx, node):
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
