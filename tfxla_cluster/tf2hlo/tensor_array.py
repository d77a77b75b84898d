"""TF1 TensorArrays (``TensorArrayV3`` and its Read/Write/Gather/Scatter/Concat/Split/Size/Close/Grad
ops) and stacks (``StackV2``/Push/Pop/Close): tf2xla's tensor_array_ops.cc and stack_ops.cc.

Stage: lowering. Both are compile-time resources (XlaResource of kind TensorArray / Stack) that live
only inside the cluster: the handle output is a Python object whose current HLO value the ops read
and replace, in graph order.

* A TensorArray of ``size`` elements of shape S is one ``[size, *S]`` buffer, zeros once S is known
  (from ``element_shape``, else the first Write/Scatter/Split). Write overwrites a row
  (``dynamic-update-slice``); a gradient TensorArray (``TensorArrayGradV3``, one per ``source``,
  zeros of the forward array's shape) *adds* writes, as its gradients aggregate. Scatter with the
  constant indices 0..n-1 adds the whole value; otherwise it adds row by row. Split of equal
  ``lengths`` adds the value reshaped to the buffer. Gather of the constant 0..k-1 is a slice, else a
  gather on axis 0; Concat is the buffer reshaped to ``[size·d0, …]`` with lengths ``d0`` each; Size is
  the constant size; the flow outputs are constants. Bool arrays combine with ``or`` instead of add.
* A stack of ``max_size`` is ``(buffer [max_size, *S], s32 index)``, initialised by the first push
  (element shape S); Push writes row ``index`` and returns the element, Pop decrements the index and
  reads that row.

Out-of-range indices clamp (HLO dynamic slices) where TF's kernels raise. These resources cannot cross
a function call or loop boundary here (tf2xla passes them as resource arguments; TF2 code uses
TensorLists instead).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo.ir import HloInstruction
from tfxla_cluster.hlo.shape import PrimitiveType as P
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.registry import lowers


@dataclass(eq=False)
class TensorArrayResource:
    """XlaResource of kind TensorArray."""

    element_type: P
    size: int
    value: HloInstruction | None = None
    aggregate: bool = False                 # gradient arrays add their writes
    grads: dict[str, "TensorArrayResource"] = field(default_factory=dict)

    def initialize(self, b, element_dims, what: str) -> HloInstruction:
        """The buffer, created as zeros for ``element_dims`` on first use; a later use must agree."""
        dims = (self.size, *element_dims)
        if self.value is None:
            self.value = xl.full(b, False if self.element_type is P.PRED else 0, self.element_type, dims)
        elif tuple(self.value.shape.dimensions) != dims:
            raise InvalidArgumentError(f"Mismatched TensorArray sizes: [{','.join(map(str, dims))}] vs "
                                       f"[{','.join(map(str, self.value.shape.dimensions))}] ({what})")
        return self.value

    def buffer(self, what: str) -> HloInstruction:
        if self.value is None:
            raise InvalidArgumentError(f"Uninitialized TensorArray passed to {what}")
        return self.value


@dataclass(eq=False)
class StackResource:
    """XlaResource of kind Stack: (buffer, index) once the first push gives the element shape."""

    element_type: P
    max_size: int
    buffer: HloInstruction | None = None
    index: HloInstruction | None = None


def _ta(ctx, index: int = 0) -> TensorArrayResource:
    v = ctx.input_value(index)
    if not isinstance(v, TensorArrayResource):
        raise InvalidArgumentError(f"Unexpected non-TensorArray resource passed to {ctx.name} ({ctx.op})")
    return v


def _checked(ctx, ta: TensorArrayResource, attr: str = "dtype") -> TensorArrayResource:
    et = ctx.attr_type(attr)
    if et is not ta.element_type:
        raise InvalidArgumentError(f"TensorArray dtype is {ta.element_type.value} but op has dtype {et.value}.")
    return ta


def _combine(b, et: P, x, y):
    return b.or_(x, y) if et is P.PRED else b.add(x, y)


def _add_row(b, buf, row_value, index) -> HloInstruction:
    """tf2xla's DynamicAddSlice of one row."""
    dims = list(buf.shape.dimensions)
    zero = xl.scalar(b, 0, P.S32)
    starts = [index] + [zero] * (len(dims) - 1)
    current = b.dynamic_slice(buf, starts, [1, *dims[1:]])
    return b.dynamic_update_slice(buf, _combine(b, buf.shape.element_type, current, row_value), starts)


def _s32(b, i):
    return i if i.shape.element_type is P.S32 else b.convert(i, P.S32)


@lowers("TensorArrayV3")
def _tensor_array(ctx, node):
    if ctx.attr("dynamic_size", False):
        raise UnimplementedError("TensorArrays with dynamic size are not supported by XLA.")
    size = ctx.const_int(0)
    if size < 0:
        raise InvalidArgumentError("TensorArray size must be >= 0")
    ta = TensorArrayResource(ctx.attr_type("dtype"), size)
    shape = ctx.attr("element_shape", None)
    if shape is not None and all(d >= 0 for d in shape):
        ta.initialize(ctx.b, tuple(shape), node.op)
    return [ta, np.asarray(0.0, np.float32)]


@lowers("TensorArrayWriteV3")
def _write(ctx, node):
    b = ctx.b
    ta = _checked(ctx, _ta(ctx), "T")
    value = ctx.input(2)
    buf = ta.initialize(b, tuple(value.shape.dimensions), node.op)
    row = b.reshape(value, [1, *value.shape.dimensions])
    index = _s32(b, ctx.input(1))
    if ta.aggregate:
        ta.value = _add_row(b, buf, row, index)
    else:
        zero = xl.scalar(b, 0, P.S32)
        ta.value = b.dynamic_update_slice(buf, row, [index] + [zero] * value.shape.rank)
    return [ctx.input_value(3)]


@lowers("TensorArrayReadV3")
def _read(ctx, node):
    b = ctx.b
    buf = _checked(ctx, _ta(ctx)).buffer(node.op)
    dims = list(buf.shape.dimensions)
    zero = xl.scalar(b, 0, P.S32)
    row = b.dynamic_slice(buf, [_s32(b, ctx.input(1))] + [zero] * (len(dims) - 1), [1, *dims[1:]])
    return [b.reshape(row, dims[1:])]


@lowers("TensorArrayGatherV3")
def _gather(ctx, node):
    b = ctx.b
    buf = _checked(ctx, _ta(ctx)).buffer(node.op)
    dims = list(buf.shape.dimensions)
    if len(ctx.input_dims(1)) != 1:
        raise InvalidArgumentError("indices must be rank 1")
    const = ctx.try_const_input(1)
    if const is not None and list(np.asarray(const).reshape(-1)) == list(range(np.asarray(const).size)):
        return [b.slice(buf, [0] * len(dims), [np.asarray(const).size, *dims[1:]])]
    from tfxla_cluster.tf2hlo.gather_scatter import gather
    return [gather(b, buf, ctx.input(1), 0)]


@lowers("TensorArrayScatterV3")
def _scatter(ctx, node):
    b = ctx.b
    ta = _checked(ctx, _ta(ctx), "T")
    value = ctx.input(2)
    vdims = list(value.shape.dimensions)
    if not vdims:
        raise InvalidArgumentError("value must have rank >= 1")
    idims = ctx.input_dims(1)
    if len(idims) < 1:
        raise InvalidArgumentError("indices must be rank 1")
    buf = ta.initialize(b, tuple(vdims[1:]), node.op)
    n = idims[0]
    const = ctx.try_const_input(1)
    if const is not None and n == vdims[0] and list(np.asarray(const).reshape(-1)) == list(range(n)):
        ta.value = _combine(b, ta.element_type, buf, value)
        return [ctx.input_value(3)]
    indices = ctx.input(1)
    for i in range(n):
        row = b.slice(value, [i] + [0] * (len(vdims) - 1), [i + 1, *vdims[1:]])
        index = _s32(b, b.reshape(b.slice(indices, [i], [i + 1]), []))
        buf = _add_row(b, buf, row, index)
    ta.value = buf
    return [ctx.input_value(3)]


@lowers("TensorArrayConcatV3")
def _concat(ctx, node):
    b = ctx.b
    buf = _checked(ctx, _ta(ctx)).buffer(node.op)
    dims = list(buf.shape.dimensions)
    if len(dims) < 2:
        raise InvalidArgumentError("TensorArrayConcat needs elements of rank >= 1")
    return [b.reshape(buf, [dims[0] * dims[1], *dims[2:]]), np.full([dims[0]], dims[1], np.int64)]


@lowers("TensorArraySplitV3")
def _split(ctx, node):
    b = ctx.b
    ta = _checked(ctx, _ta(ctx), "T")
    lengths = ctx.const_ints(2)
    length = lengths[0] if lengths else 0
    if any(n != length for n in lengths):
        raise InvalidArgumentError(f"lengths must be equal: {length} vs. {next(n for n in lengths if n != length)}")
    value = ctx.input(1)
    vdims = list(value.shape.dimensions)
    if not vdims:
        raise InvalidArgumentError(f"value must have rank >= 1, got {vdims}")
    elem = (length, *vdims[1:])
    buf = ta.initialize(b, elem, node.op)
    if len(lengths) != ta.size:
        raise InvalidArgumentError(f"TensorArray's size is not equal to the size of lengths ({len(lengths)} vs. "
                                   f"{ta.size})")
    if int(np.prod(vdims)) != int(np.prod(buf.shape.dimensions)):
        raise InvalidArgumentError(f"mismatched element count {vdims} vs. {list(buf.shape.dimensions)}")
    ta.value = _combine(b, ta.element_type, buf, b.reshape(value, list(buf.shape.dimensions)))
    return [ctx.input_value(3)]


@lowers("TensorArraySizeV3")
def _size(ctx, node):
    return [np.asarray(_ta(ctx).size, np.int32)]


@lowers("TensorArrayCloseV3")
def _close(ctx, node):
    _ta(ctx)
    return []


@lowers("TensorArrayGradV3")
def _grad(ctx, node):
    """The gradient array for ``source``: zeros of the forward array's shape, adding its writes; the
    same ``source`` gives the same array."""
    ta = _ta(ctx)
    buf = ta.buffer(node.op)
    source = ctx.attr("source")
    source = source.decode() if isinstance(source, bytes) else str(source)
    if source not in ta.grads:
        grad = TensorArrayResource(ta.element_type, ta.size, aggregate=True)
        grad.initialize(ctx.b, tuple(buf.shape.dimensions[1:]), node.op)
        ta.grads[source] = grad
    return [ta.grads[source], np.asarray(0.0, np.float32)]


# ---------------------------------------------------------------- stacks
def _stack(ctx) -> StackResource:
    v = ctx.input_value(0)
    if not isinstance(v, StackResource):
        raise InvalidArgumentError(f"Unexpected non-Stack resource passed to {ctx.name} ({ctx.op})")
    return v


@lowers("StackV2")
def _stack_v2(ctx, node):
    size = ctx.const_int(0)
    if size < 0:
        raise InvalidArgumentError("XLA compilation requires a fixed stack size upper bound. If you are "
                                   "using tf.while_loop, set the maximum_iterations parameter to fix this issue.")
    return [StackResource(ctx.attr_type("elem_type"), size)]


@lowers("StackPushV2")
def _stack_push(ctx, node):
    b = ctx.b
    st = _stack(ctx)
    elem = ctx.input(1)
    if elem.shape.element_type is not st.element_type:
        raise InvalidArgumentError(f"Stack of {st.element_type.value} pushed a {elem.shape.element_type.value}")
    dims = tuple(elem.shape.dimensions)
    if st.buffer is None:
        st.buffer = xl.full(b, 0, st.element_type, (st.max_size, *dims))
        st.index = xl.scalar(b, 0, P.S32)
    elif tuple(st.buffer.shape.dimensions[1:]) != dims:
        raise InvalidArgumentError(f"Mismatched Stack element shapes: {list(dims)} vs "
                                   f"{list(st.buffer.shape.dimensions[1:])}")
    zero = xl.scalar(b, 0, P.S32)
    st.buffer = b.dynamic_update_slice(st.buffer, b.reshape(elem, [1, *dims]), [st.index] + [zero] * len(dims))
    st.index = xl.add(b, st.index, np.int32(1))
    return [elem]


@lowers("StackPopV2")
def _stack_pop(ctx, node):
    b = ctx.b
    st = _stack(ctx)
    if st.buffer is None:
        raise InvalidArgumentError("Stack pop on an uninitialized stack: its element shape is not known")
    st.index = xl.sub(b, st.index, np.int32(1))
    dims = list(st.buffer.shape.dimensions)
    zero = xl.scalar(b, 0, P.S32)
    row = b.dynamic_slice(st.buffer, [st.index] + [zero] * (len(dims) - 1), [1, *dims[1:]])
    return [b.reshape(row, dims[1:])]


@lowers("StackCloseV2")
def _stack_close(ctx, node):
    _stack(ctx)
    return []
