"""TensorList ops — the TF2 ``tf.TensorArray`` (tf2xla's tensor_list_ops.cc, static-size lists).

Stage: lowering. A list of ``n`` elements of shape ``S`` is one HLO array ``[n, *S]`` (XLA's buffer
form; no push/pop, so no push index): ``TensorListReserve`` is zeros, ``TensorListFromTensor`` the
tensor itself, ``SetItem`` a ``dynamic-update-slice`` of row ``index``, ``GetItem`` a ``dynamic-slice``
of it, ``Stack`` the buffer, ``Length`` the static ``n``.

A list reserved without a full element shape (``tf.TensorArray(size=n)``) is a :class:`PendingList`
until the first ``SetItem`` gives the shape — in a while loop that happens in the body, so the loop
lowering (control_flow.py) lowers the body once, sees the shape the body writes, and starts the loop
with a zeros buffer of that shape (what tf2xla's while_op does for uninitialized lists).

Out-of-range indices clamp (HLO dynamic slices) where TF's kernels raise.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo.ir import HloInstruction
from tfxla_cluster.hlo.shape import PrimitiveType as P
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.registry import lowers


@dataclass(frozen=True)
class PendingList:
    """A reserved list whose element shape is not known yet (no element written)."""

    num_elements: int
    element_type: P
    partial_shape: tuple[int, ...] | None   # -1 for unknown dims; None for unknown rank

    def buffer_for(self, b, element_dims: tuple[int, ...]) -> HloInstruction:
        if self.partial_shape is not None and (len(self.partial_shape) != len(element_dims) or any(
                d not in (-1, e) for d, e in zip(self.partial_shape, element_dims))):
            raise InvalidArgumentError(f"TensorList element shape {list(element_dims)} does not match the "
                                       f"reserved element shape {list(self.partial_shape)}")
        return xl.full(b, 0, self.element_type, (self.num_elements, *element_dims))


def _shape_input(ctx, index: int) -> tuple[int, ...] | None:
    """An ``element_shape`` input: -1 scalar is unknown rank; -1 entries are unknown dims."""
    value = np.asarray(ctx.const_input(index)).astype(np.int64)
    if value.ndim == 0:
        return None if int(value) == -1 else (int(value),)
    return tuple(int(d) for d in value.reshape(-1))


def _buffer(ctx, index: int, item_dims: tuple[int, ...] | None = None) -> HloInstruction:
    v = ctx.input_value(index)
    if isinstance(v, PendingList):
        if item_dims is None:
            raise UnimplementedError("reading a TensorList before any element was written: its element shape "
                                     "is not known at compile time")
        return v.buffer_for(ctx.b, item_dims)
    if not isinstance(v, HloInstruction):
        raise UnimplementedError(f"TensorList value of kind {type(v).__name__} is not supported")
    return v


def _index(ctx, index: int) -> HloInstruction:
    i = ctx.input(index)
    return i if i.shape.element_type is P.S32 else ctx.b.convert(i, P.S32)


@lowers("TensorListReserve")
def _reserve(ctx, node):
    et = ctx.attr_type("element_dtype")
    shape = _shape_input(ctx, 0)
    n = ctx.const_int(1)
    if n < 0:
        raise UnimplementedError("TensorLists of dynamic size (push/pop) are not supported; reserve a fixed size")
    if shape is not None and all(d >= 0 for d in shape):
        return [xl.full(ctx.b, 0, et, (n, *shape))]
    return [PendingList(n, et, shape)]


@lowers("TensorListFromTensor")
def _from_tensor(ctx, node):
    t = ctx.input(0)
    if t.shape.rank == 0:
        raise InvalidArgumentError("TensorListFromTensor needs a tensor of rank >= 1")
    return [t]


@lowers("TensorListSetItem")
def _set_item(ctx, node):
    b = ctx.b
    item = ctx.input(2)
    buf = _buffer(ctx, 0, tuple(item.shape.dimensions))
    if tuple(buf.shape.dimensions[1:]) != tuple(item.shape.dimensions):
        raise InvalidArgumentError(f"TensorListSetItem: element shape {list(item.shape.dimensions)} does not "
                                   f"match the list's {list(buf.shape.dimensions[1:])}")
    zero = xl.scalar(b, 0, P.S32)
    update = b.reshape(item, (1, *item.shape.dimensions))
    return [b.dynamic_update_slice(buf, update, [_index(ctx, 1)] + [zero] * item.shape.rank)]


@lowers("TensorListGetItem")
def _get_item(ctx, node):
    b = ctx.b
    buf = _buffer(ctx, 0)
    dims = tuple(buf.shape.dimensions[1:])
    zero = xl.scalar(b, 0, P.S32)
    row = b.dynamic_slice(buf, [_index(ctx, 1)] + [zero] * len(dims), (1, *dims))
    return [b.reshape(row, dims)]


@lowers("TensorListStack")
def _stack(ctx, node):
    v = ctx.input_value(0)
    if isinstance(v, PendingList):
        shape = _shape_input(ctx, 1)
        if shape is None or any(d < 0 for d in shape):
            raise UnimplementedError("TensorListStack of a list never written, with an unknown element shape")
        return [v.buffer_for(ctx.b, shape)]
    return [_buffer(ctx, 0)]


@lowers("TensorListLength")
def _length(ctx, node):
    v = ctx.input_value(0)
    n = v.num_elements if isinstance(v, PendingList) else _buffer(ctx, 0).shape.dimensions[0]
    return [np.asarray(n, np.int32)]


@lowers("TensorListElementShape")
def _element_shape(ctx, node):
    buf = _buffer(ctx, 0)
    et = ctx.attr_type("shape_type")
    return [np.asarray(buf.shape.dimensions[1:], et.dtype)]
