"""TensorList ops — the TF2 ``tf.TensorArray`` and while-loop gradient accumulators (tf2xla's
tensor_list_ops.cc and tensor_list_utils.cc; static-size lists).

Stage: lowering. A list of ``n`` elements of shape ``S`` is one HLO array ``[n, *S]`` (XLA's buffer
form): ``TensorListReserve`` is zeros, ``TensorListFromTensor`` the tensor itself, ``SetItem`` a
``dynamic-update-slice`` of row ``index``, ``GetItem`` a ``dynamic-slice`` of it, ``Stack`` the buffer,
``Length`` the static ``n``. Such a bare buffer has the push index ``n`` (tf2xla sets it to the size).

A list made by ``EmptyTensorList(max_num_elements=n)`` — what while_v2 builds to accumulate a loop's
intermediates for its gradient — is the HLO tuple ``(buffer [n, *S], s32[] push index)``, as in
tf2xla: ``PushBack`` writes row ``index`` and increments it, ``PopBack`` decrements it and reads that
row (the buffer keeps it). Every other op reads or writes the tuple's buffer and keeps its index, so
``Stack``/``Length``/``Gather`` see all ``n`` rows whatever was pushed, exactly as TF's XLA.

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
    push: bool = False                       # an EmptyTensorList: (buffer, push index 0) once written

    def buffer_for(self, b, element_dims: tuple[int, ...]) -> HloInstruction:
        """The zero-initialised list for elements of ``element_dims`` (a tuple for push lists)."""
        if self.partial_shape is not None and (len(self.partial_shape) != len(element_dims) or any(
                d not in (-1, e) for d, e in zip(self.partial_shape, element_dims))):
            raise InvalidArgumentError(f"TensorList element shape {list(element_dims)} does not match the "
                                       f"reserved element shape {list(self.partial_shape)}")
        buf = xl.full(b, 0, self.element_type, (self.num_elements, *element_dims))
        return b.tuple([buf, xl.scalar(b, 0, P.S32)]) if self.push else buf

    @staticmethod
    def element_dims_of(list_value: HloInstruction) -> tuple[int, ...]:
        """The element shape of an initialised list (a bare buffer or a ``(buffer, index)`` tuple)."""
        shape = list_value.shape.tuple_shapes[0] if list_value.shape.is_tuple else list_value.shape
        return tuple(shape.dimensions[1:])


def _shape_input(ctx, index: int) -> tuple[int, ...] | None:
    """An ``element_shape`` input: -1 scalar is unknown rank; -1 entries are unknown dims."""
    value = np.asarray(ctx.const_input(index)).astype(np.int64)
    if value.ndim == 0:
        return None if int(value) == -1 else (int(value),)
    return tuple(int(d) for d in value.reshape(-1))


def _list(ctx, index: int, item_dims: tuple[int, ...] | None = None) -> HloInstruction:
    """Input ``index`` as an initialised list (bare buffer or (buffer, index) tuple)."""
    v = ctx.input_value(index)
    if isinstance(v, PendingList):
        if item_dims is None:
            raise InvalidArgumentError("TensorList is not initialized: it is read before any element was "
                                       "written, so its element shape is not known at compile time")
        return v.buffer_for(ctx.b, item_dims)
    if isinstance(v, np.ndarray):
        raise InvalidArgumentError(f"input {index} of {ctx.name} ({ctx.op}) is not a TensorList")
    if not isinstance(v, HloInstruction):
        raise UnimplementedError(f"TensorList value of kind {type(v).__name__} is not supported")
    return v


def _parts(b, lst: HloInstruction) -> tuple[HloInstruction, HloInstruction | None]:
    """(buffer, push index or None for a bare buffer)."""
    if lst.shape.is_tuple:
        if len(lst.shape.tuple_shapes) != 2:
            raise UnimplementedError("nested TensorLists are not supported")
        return b.get_tuple_element(lst, 0), b.get_tuple_element(lst, 1)
    return lst, None


def _with_buffer(b, buf: HloInstruction, push_index: HloInstruction | None) -> HloInstruction:
    return buf if push_index is None else b.tuple([buf, push_index])


def _buffer(ctx, index: int, item_dims: tuple[int, ...] | None = None) -> HloInstruction:
    return _parts(ctx.b, _list(ctx, index, item_dims))[0]


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
    buf, push_index = _parts(b, _list(ctx, 0, tuple(item.shape.dimensions)))
    return [_with_buffer(b, _write_row(ctx, buf, _index(ctx, 1), item), push_index)]


def _write_row(ctx, buf: HloInstruction, row: HloInstruction, item: HloInstruction) -> HloInstruction:
    b = ctx.b
    if tuple(buf.shape.dimensions[1:]) != tuple(item.shape.dimensions):
        raise InvalidArgumentError(f"{ctx.op}: element shape {list(item.shape.dimensions)} does not "
                                   f"match the list's {list(buf.shape.dimensions[1:])}")
    if item.shape.element_type is not buf.shape.element_type:
        raise InvalidArgumentError(f"{ctx.op}: element of type {item.shape.element_type.value} for a list of "
                                   f"{buf.shape.element_type.value}")
    zero = xl.scalar(b, 0, P.S32)
    update = b.reshape(item, (1, *item.shape.dimensions))
    return b.dynamic_update_slice(buf, update, [row] + [zero] * item.shape.rank)


def _read_row(b, buf: HloInstruction, row: HloInstruction) -> HloInstruction:
    dims = tuple(buf.shape.dimensions[1:])
    zero = xl.scalar(b, 0, P.S32)
    return b.reshape(b.dynamic_slice(buf, [row] + [zero] * len(dims), (1, *dims)), dims)


@lowers("TensorListGetItem")
def _get_item(ctx, node):
    return [_read_row(ctx.b, _buffer(ctx, 0), _index(ctx, 1))]


@lowers("TensorListStack")
def _stack(ctx, node):
    v = ctx.input_value(0)
    if isinstance(v, PendingList):
        shape = _shape_input(ctx, 1)
        if shape is None or any(d < 0 for d in shape):
            raise UnimplementedError("TensorListStack of a list never written, with an unknown element shape")
        return [_parts(ctx.b, v.buffer_for(ctx.b, shape))[0]]
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


@lowers("EmptyTensorList")
def _empty(ctx, node):
    """A push list of ``max_num_elements`` rows (TF's XLA needs that bound: while_v2 sets it to the
    loop's maximum_iterations), push index 0; uninitialised until the first push if the element shape
    is not fully known."""
    et = ctx.attr_type("element_dtype")
    n = ctx.const_int(1)
    if n < 0:
        raise InvalidArgumentError("XLA compilation requires a fixed tensor list size. Set the max number of "
                                   "elements (a while loop's maximum_iterations).")
    shape = _shape_input(ctx, 0)
    pending = PendingList(n, et, shape, push=True)
    if shape is not None and all(d >= 0 for d in shape):
        return [pending.buffer_for(ctx.b, shape)]
    return [pending]


@lowers("TensorListPushBack")
def _push_back(ctx, node):
    b = ctx.b
    item = ctx.input(1)
    buf, push_index = _parts(b, _list(ctx, 0, tuple(item.shape.dimensions)))
    if push_index is None:   # a reserved/from-tensor list: tf2xla's push index is its size
        push_index = xl.scalar(b, buf.shape.dimensions[0], P.S32)
    buf = _write_row(ctx, buf, push_index, item)
    return [b.tuple([buf, xl.add(b, push_index, np.int32(1))])]


@lowers("TensorListPopBack")
def _pop_back(ctx, node):
    b = ctx.b
    buf, push_index = _parts(b, _list(ctx, 0))
    if push_index is None:
        push_index = xl.scalar(b, buf.shape.dimensions[0], P.S32)
    top = xl.sub(b, push_index, np.int32(1))
    return [b.tuple([buf, top]), _read_row(b, buf, top)]


@lowers("TensorListGather")
def _gather(ctx, node):
    """Rows ``indices`` of the buffer (tf2xla's XlaGather on axis 0; out-of-range rows clamp)."""
    b = ctx.b
    buf = _buffer(ctx, 0)
    indices = ctx.input(1)
    if indices.shape.rank != 1:
        raise InvalidArgumentError("indices must be rank 1")
    from tfxla_cluster.tf2hlo.gather_scatter import gather
    return [gather(b, buf, indices, 0)]


@lowers("TensorListConcatV2")
def _concat(ctx, node):
    """The buffer ``[n, m, *R]`` as ``[n*m, *R]`` and the lengths ``[m]*n`` (tf2xla: all elements of
    one static shape)."""
    b = ctx.b
    buf = _buffer(ctx, 0)
    dims = list(buf.shape.dimensions)
    if len(dims) < 2:
        raise UnimplementedError("TensorListConcat of a list of scalars is not supported")
    return [b.reshape(buf, [dims[0] * dims[1], *dims[2:]]), np.full([dims[0]], dims[1], np.int64)]


@lowers("TensorListSplit")
def _split(ctx, node):
    """A tensor ``[k*m, *R]`` cut into ``k`` elements of ``m`` rows (tf2xla: equal constant lengths)."""
    b = ctx.b
    t = ctx.input(0)
    dims = list(t.shape.dimensions)
    if not dims:
        raise UnimplementedError("TensorListSplit: element dimensions have to be non-empty")
    lengths = ctx.const_ints(2)
    if not lengths:
        raise UnimplementedError("TensorListSplit: lengths has to be non-empty")
    if any(n != lengths[0] for n in lengths):
        raise UnimplementedError("TensorListSplit: all lengths have to be the same under XLA")
    m = lengths[0]
    if m <= 0 or dims[0] % m:
        raise UnimplementedError(f"TensorListSplit: buffer size {dims[0]} has to be a multiple of length {m}")
    return [b.tuple([b.reshape(t, [dims[0] // m, m, *dims[1:]]), xl.scalar(b, dims[0] // m, P.S32)])]


def zeros_like_list(ctx, index: int):
    """``ZerosLike`` of a TensorList (tf2xla's variant case): an initialised list becomes a zeros buffer
    of its shape that keeps the push index; an uninitialised one is returned as is."""
    v = ctx.input_value(index)
    if isinstance(v, PendingList):
        return v
    b = ctx.b
    buf, push_index = _parts(b, _list(ctx, index))
    return _with_buffer(b, xl.zeros_like(b, buf), push_index)


@lowers("_ListToArray", "_ArrayToList")
def _list_array_identity(ctx, node):
    """Internal list ⇄ array-of-one-type conversions of function signatures: the inputs, unchanged
    (``_ListToArray`` requires every input to be of type ``T``)."""
    if node.op == "_ListToArray":
        et = ctx.attr_type("T")
        for i in range(ctx.num_inputs):
            if ctx.input_type(i) is not et:
                raise InvalidArgumentError(f"_ListToArray: input {i} is {ctx.input_type(i).value}, not {et.value}")
    return [ctx.input_value(i) for i in range(ctx.num_inputs)]
