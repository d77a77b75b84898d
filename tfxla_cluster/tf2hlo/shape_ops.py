"""Constants, identities and shape manipulation (tf2xla's const_op.cc, identity_op.cc, shape_op.cc,
reshape_op.cc, transpose_op.cc, concat_op.cc, pack_op.cc, unpack_op.cc, split_op.cc, tile_ops.cc,
broadcast_to_op.cc, bcast_ops.cc, fill_op.cc, sequence_ops.cc, pad_op.cc, mirror_pad_op.cc,
reverse_op.cc, where_op.cc).

Stage: lowering. Ops whose result is known at compile time produce *host* values (``np.ndarray``):
``Const``, ``Shape``/``ShapeN``/``Size``/``Rank`` (shapes are static), ``Range``,
``BroadcastArgs``/``BroadcastGradientArgs``, and ``Where`` on a constant. Identity-like ops forward
whatever they are given (host value, HLO or resource), as tf2xla forwards the expression. Shape
arguments (reshape sizes, permutations, paddings, axes, ...) are compile-time-constant inputs.
"""
from __future__ import annotations

import numpy as np
from tensorflow.core.framework import types_pb2

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.registry import lowers


def _dims(dims) -> str:
    return "[" + ",".join(str(int(d)) for d in dims) + "]"


def _host(ctx, value, index: int = 0) -> np.ndarray:
    """A host value in the dtype of output ``index``."""
    return np.asarray(value).astype(ctx.output_type(index).dtype)


# ---------------------------------------------------------------- constants and identities
@lowers("Const", "_EagerConst")
def _const(ctx, node):
    if node.op == "_EagerConst":
        return [ctx.input_value(0)]
    if node.outputs[0].dtype == types_pb2.DT_STRING:
        # Stays a host value, as tf2xla keeps constants: only an op that needs it as an HLO tensor
        # fails (the messages of an Assert, which XLA drops, never reach HLO).
        return [np.asarray(ctx.attr("value"))]
    return [_host(ctx, ctx.attr("value"))]


@lowers("Identity", "StopGradient", "PreventGradient", "Snapshot", "EnsureShape", "PlaceholderWithDefault",
        "CheckNumerics")
def _identity(ctx, node):
    # CheckNumerics is elided on XLA devices (elide_assert_and_checknumerics); its value passes through.
    return [ctx.input_value(0)]


@lowers("IdentityN")
def _identity_n(ctx, node):
    return [ctx.input_value(i) for i in range(ctx.num_inputs)]


@lowers("NoOp", "ControlTrigger", "Assert")
def _no_op(ctx, node):
    return []


# ---------------------------------------------------------------- shape metadata (host values)
@lowers("Shape")
def _shape(ctx, node):
    return [_host(ctx, ctx.input_dims(0))]


@lowers("ShapeN")
def _shape_n(ctx, node):
    return [_host(ctx, ctx.input_dims(i), i) for i in range(ctx.num_inputs)]


@lowers("Size")
def _size(ctx, node):
    return [_host(ctx, int(np.prod(ctx.input_dims(0), dtype=np.int64)))]


@lowers("Rank")
def _rank(ctx, node):
    return [_host(ctx, len(ctx.input_dims(0)))]


@lowers("BroadcastArgs")
def _broadcast_args(ctx, node):
    s0, s1 = ctx.const_ints(0), ctx.const_ints(1)
    return [_host(ctx, xl.broadcast_shape(s0, s1))]


@lowers("BroadcastGradientArgs")
def _broadcast_gradient_args(ctx, node):
    """TF's ``BCast::GradReduceIdx``: the dims each input was broadcast along (to be summed away)."""
    s0, s1 = ctx.const_ints(0), ctx.const_ints(1)
    r0, r1 = _grad_reduce_idx(s0, s1)
    return [_host(ctx, r0, 0), _host(ctx, r1, 1)]


def _grad_reduce_idx(s0: list[int], s1: list[int]) -> tuple[list[int], list[int]]:
    """``BCast(x, y, fewer_dims_optimization=false)`` then ``grad_x_reduce_idx`` / ``grad_y_reduce_idx``."""
    n = max(len(s0), len(s1))
    x = [1] * (n - len(s0)) + list(s0)
    y = [1] * (n - len(s1)) + list(s1)
    rx, ry = [], []
    for i in range(n):
        if x[i] == y[i]:
            if x[i] == 1:  # both 1: TF reduces along it for both
                rx.append(i)
                ry.append(i)
        elif x[i] == 1:
            rx.append(i)
        elif y[i] == 1:
            ry.append(i)
        else:
            raise InvalidArgumentError(f"Incompatible shapes: {_dims(s0)} vs. {_dims(s1)}")
    return rx, ry


# ---------------------------------------------------------------- reshapes
def _reshape_sizes(ctx, dims: tuple[int, ...], sizes: list[int]) -> list[int]:
    """TF's Reshape size check, with one inferred -1."""
    n = int(np.prod(dims, dtype=np.int64))
    unknown = [i for i, s in enumerate(sizes) if s == -1]
    if len(unknown) > 1:
        raise InvalidArgumentError(f"Only one input size may be -1, not both {unknown[0]} and {unknown[1]}")
    if any(s < -1 for s in sizes):
        bad = next(i for i, s in enumerate(sizes) if s < -1)
        raise InvalidArgumentError(f"Size {bad} must be non-negative, not {sizes[bad]}")
    known = int(np.prod([s for s in sizes if s != -1], dtype=np.int64))
    if unknown:
        if known == 0:
            raise InvalidArgumentError("Reshape cannot infer the missing input size for an empty tensor unless all "
                                       "specified input sizes are non-zero")
        if n % known:
            raise InvalidArgumentError(f"Input to reshape is a tensor with {n} values, but the requested shape "
                                       f"requires a multiple of {known}")
        sizes = list(sizes)
        sizes[unknown[0]] = n // known
    elif known != n:
        raise InvalidArgumentError(f"Input to reshape is a tensor with {n} values, but the requested shape has "
                                   f"{known}")
    return sizes


@lowers("Reshape")
def _reshape(ctx, node):
    x = ctx.input(0)
    shape = np.asarray(ctx.const_input(1))
    if shape.ndim > 1:
        raise InvalidArgumentError(f"sizes input must be 1-D, not {_dims(shape.shape)}")
    sizes = _reshape_sizes(ctx, x.shape.dimensions, [int(s) for s in shape.reshape(-1)])
    return [ctx.b.reshape(x, sizes)]


@lowers("ExpandDims")
def _expand_dims(ctx, node):
    x = ctx.input(0)
    dim = ctx.const_ints(1)
    if len(dim) != 1:
        raise InvalidArgumentError(f"'dim' must be a tensor with a single value, got {len(dim)} values")
    dims = list(x.shape.dimensions)
    axis = dim[0]
    if not -len(dims) - 1 <= axis <= len(dims):
        raise InvalidArgumentError(f"Tried to expand dim index {axis} for tensor with {len(dims)} dimensions.")
    if axis < 0:
        axis += len(dims) + 1
    dims.insert(axis, 1)
    return [ctx.b.reshape(x, dims)]


@lowers("Squeeze")
def _squeeze(ctx, node):
    x = ctx.input(0)
    dims = x.shape.dimensions
    rank = len(dims)
    requested = ctx.attr("squeeze_dims", []) or []
    drop = set()
    for d in requested:
        if not -rank <= d < rank:
            raise InvalidArgumentError(f"Tried to squeeze dim index {d} for tensor with {rank} dimensions.")
        d %= rank
        if dims[d] != 1:
            raise InvalidArgumentError(f"Can not squeeze dim[{d}], expected a dimension of 1, got {dims[d]}")
        drop.add(d)
    if not requested:
        drop = {i for i, d in enumerate(dims) if d == 1}
    return [ctx.b.reshape(x, [d for i, d in enumerate(dims) if i not in drop])]


@lowers("Transpose", "ConjugateTranspose")
def _transpose(ctx, node):
    from tfxla_cluster.tf2hlo.complex_ops import ComplexValue, is_complex_input, parts

    perm = ctx.const_ints(1)
    if is_complex_input(ctx, 0):  # both parts move; ConjugateTranspose negates the imaginary one
        re, im = (_permute(ctx, part, perm) for part in parts(ctx, 0))
        return [ComplexValue(re, xl.neg(ctx.b, im) if node.op == "ConjugateTranspose" else im)]
    return [_permute(ctx, ctx.input(0), perm)]


def _permute(ctx, x, perm: list[int]):
    rank = x.shape.rank
    if sorted(perm) != list(range(rank)):
        raise InvalidArgumentError(f"{perm} is not a valid permutation of {rank} dimensions")
    if perm == list(range(rank)):
        return x  # identity permutation: no transpose
    return ctx.b.transpose(x, perm)


# ---------------------------------------------------------------- concat, pack, split
def _concat(ctx, values, axis: int):
    b = ctx.b
    rank = values[0].shape.rank
    if rank == 0:
        raise InvalidArgumentError("Can't concatenate scalars (use tf.stack instead)")
    axis = ctx.normalize_axis(axis, rank, "concat_dim")
    ref = values[0].shape.dimensions
    for k, v in enumerate(values[1:], 1):
        d = v.shape.dimensions
        if len(d) != rank or any(d[i] != ref[i] for i in range(rank) if i != axis):
            raise InvalidArgumentError(f"ConcatOp : Dimension {axis} in both shapes must be equal: shape[0] = "
                                       f"{_dims(ref)} vs. shape[{k}] = {_dims(d)}")
    if len(values) == 1:
        return values[0]
    return b.concatenate(values, axis)


@lowers("ConcatV2")
def _concat_v2(ctx, node):
    n = ctx.num_inputs - 1
    return [_concat(ctx, [ctx.input(i) for i in range(n)], ctx.const_int(n))]


@lowers("Concat")
def _concat_v1(ctx, node):
    return [_concat(ctx, [ctx.input(i) for i in range(1, ctx.num_inputs)], ctx.const_int(0))]


@lowers("Pack")
def _pack(ctx, node):
    values = ctx.inputs()
    dims = list(values[0].shape.dimensions)
    axis = int(ctx.attr("axis"))
    if not -len(dims) - 1 <= axis <= len(dims):
        raise InvalidArgumentError(f"axis = {axis} not in [{-len(dims) - 1}, {len(dims) + 1})")
    axis %= len(dims) + 1
    for k, v in enumerate(values[1:], 1):
        if list(v.shape.dimensions) != dims:
            raise InvalidArgumentError(f"Shapes of all inputs must match: values[0].shape = {_dims(dims)} != "
                                       f"values[{k}].shape = {_dims(v.shape.dimensions)}")
    expanded = dims[:axis] + [1] + dims[axis:]
    parts = [ctx.b.reshape(v, expanded) for v in values]
    return [parts[0] if len(parts) == 1 else ctx.b.concatenate(parts, axis)]


@lowers("Unpack")
def _unpack(ctx, node):
    x = ctx.input(0)
    dims = list(x.shape.dimensions)
    axis = ctx.normalize_axis(int(ctx.attr("axis")), len(dims))
    num = int(ctx.attr("num"))
    if dims[axis] != num:
        raise InvalidArgumentError(f"Input shape axis {axis} must equal {num}, got shape {_dims(dims)}")
    out_dims = dims[:axis] + dims[axis + 1:]
    outs = []
    for i in range(num):
        starts = [0] * len(dims)
        limits = list(dims)
        starts[axis], limits[axis] = i, i + 1
        outs.append(ctx.b.reshape(ctx.b.slice(x, starts, limits), out_dims))
    return outs


def _split_at(ctx, x, axis: int, sizes: list[int]):
    dims = list(x.shape.dimensions)
    outs, start = [], 0
    for s in sizes:
        starts, limits = [0] * len(dims), list(dims)
        starts[axis], limits[axis] = start, start + s
        outs.append(ctx.b.slice(x, starts, limits))
        start += s
    return outs


@lowers("Split")
def _split(ctx, node):
    x = ctx.input(1)
    num = int(ctx.attr("num_split"))
    rank = x.shape.rank
    axis = ctx.normalize_axis(ctx.const_int(0), rank, "split_dim")
    size = x.shape.dimensions[axis]
    if num <= 0 or size % num:
        raise InvalidArgumentError(f"Number of ways to split should evenly divide the split dimension, but got "
                                   f"split_dim {axis} (size = {size}) and num_split {num}")
    return _split_at(ctx, x, axis, [size // num] * num)


@lowers("SplitV")
def _split_v(ctx, node):
    x = ctx.input(0)
    sizes = ctx.const_ints(1)
    rank = x.shape.rank
    axis = ctx.normalize_axis(ctx.const_int(2), rank, "split_dim")
    total = x.shape.dimensions[axis]
    unknown = [i for i, s in enumerate(sizes) if s == -1]
    if len(unknown) > 1:
        raise InvalidArgumentError("Only one dimensions can have a value of -1. Second one found at dimension "
                                   f"{unknown[1]}")
    known = sum(s for s in sizes if s != -1)
    if unknown:
        sizes[unknown[0]] = total - known
    if sum(sizes) != total or any(s < 0 for s in sizes):
        raise InvalidArgumentError(f"Determined shape must either match input shape along split_dim exactly if "
                                   f"fully specified, or be less than the size of the input along split_dim if "
                                   f"not fully specified.  Got: {known}")
    return _split_at(ctx, x, axis, sizes)


# ---------------------------------------------------------------- tiling and broadcasting
@lowers("Tile")
def _tile(ctx, node):
    x = ctx.input(0)
    mult = ctx.const_ints(1)
    dims = x.shape.dimensions
    if len(mult) != len(dims):
        raise InvalidArgumentError(f"Expected multiples argument to be a vector of length {len(dims)} but got "
                                   f"length {len(mult)}")
    if any(m < 0 for m in mult):
        raise InvalidArgumentError(f"Expected multiples to be non-negative, got {mult}")
    if all(m == 1 for m in mult):
        return [x]
    # Broadcast to [m0, d0, m1, d1, ...] (operand dim i → 2i+1), then merge each pair.
    inter = [v for m, d in zip(mult, dims) for v in (m, d)]
    y = ctx.b.broadcast(x, inter, [2 * i + 1 for i in range(len(dims))])
    return [ctx.b.reshape(y, [m * d for m, d in zip(mult, dims)])]


@lowers("BroadcastTo")
def _broadcast_to(ctx, node):
    x = ctx.input(0)
    shape = ctx.const_ints(1)
    out = xl.broadcast_shape(x.shape.dimensions, shape)
    if list(out) != shape:
        raise InvalidArgumentError(f"Unable to broadcast tensor of shape {_dims(x.shape.dimensions)} to tensor of "
                                   f"shape {_dims(shape)}")
    return [xl.broadcast_to(ctx.b, x, shape)]


@lowers("Fill")
def _fill(ctx, node):
    dims = ctx.const_ints(0)
    value = ctx.input(1)
    if value.shape.rank != 0:
        raise InvalidArgumentError(f"value must be a scalar, got shape {_dims(value.shape.dimensions)}")
    if any(d < 0 for d in dims):
        raise InvalidArgumentError(f"dims must be non-negative, got {dims}")
    return [ctx.b.broadcast(value, dims, ()) if dims else value]


@lowers("ZerosLike", "OnesLike")
def _fill_like(ctx, node):
    if node.op == "ZerosLike" and ctx.input_tf_dtype(0) == 21:  # DT_VARIANT: a TensorList
        from tfxla_cluster.tf2hlo.tensor_list import zeros_like_list
        return [zeros_like_list(ctx, 0)]
    from tfxla_cluster.tf2hlo.complex_ops import ComplexValue, is_complex_input, parts

    if is_complex_input(ctx, 0):   # complex: (0, 0) or (1, 0) in parts
        re = parts(ctx, 0)[0]
        zeros = xl.zeros_like(ctx.b, re)
        return [ComplexValue(zeros if node.op == "ZerosLike" else xl.ones_like(ctx.b, re), zeros)]
    dims = ctx.input_dims(0)
    et = ctx.output_type(0)
    return [xl.full(ctx.b, 0 if node.op == "ZerosLike" else 1, et, dims)]


@lowers("FakeParam")
def _fake_param(ctx, node):
    """A stand-in argument that is never read at run time (tf2xla feeds zeros)."""
    return [xl.full(ctx.b, 0, ctx.attr_type("dtype"), list(ctx.attr("shape")))]


@lowers("Empty")
def _empty(ctx, node):
    return [xl.full(ctx.b, 0, ctx.output_type(0), ctx.const_ints(0))]


@lowers("Range")
def _range(ctx, node):
    start, limit, delta = (np.asarray(ctx.const_input(i)).reshape(()) for i in range(3))
    dtype = ctx.output_type(0).dtype
    if delta == 0:
        raise InvalidArgumentError(f"Requires delta != 0: {delta}")
    if (delta > 0 and start > limit) or (delta < 0 and start < limit):
        raise InvalidArgumentError(f"Requires start <= limit when delta > 0: {start}/{limit}" if delta > 0 else
                                   f"Requires start >= limit when delta < 0: {start}/{limit}")
    if np.issubdtype(dtype, np.integer):
        n = (abs(int(limit) - int(start)) + abs(int(delta)) - 1) // abs(int(delta))
    else:
        n = int(np.ceil(abs((float(limit) - float(start)) / float(delta))))
    # TF accumulates value += delta in T (sequence_ops.cc), so floats match TF bit for bit.
    steps = np.full(n, delta, dtype=dtype)
    if n:
        steps[0] = start
    return [np.add.accumulate(steps, dtype=dtype) if n else np.zeros(0, dtype)]


# ---------------------------------------------------------------- padding and reversal
def _paddings(ctx, index: int, rank: int) -> list[tuple[int, int]]:
    pads = np.asarray(ctx.const_input(index)).astype(np.int64)
    if pads.shape != (rank, 2):
        raise InvalidArgumentError(f"The first dimension of paddings must be the rank of inputs{_dims([rank, 2])}"
                                   f", got {_dims(pads.shape)}")
    if (pads < 0).any():
        raise InvalidArgumentError(f"Paddings must be non-negative: {pads.min()}")
    return [(int(lo), int(hi)) for lo, hi in pads]


@lowers("Pad", "PadV2")
def _pad(ctx, node):
    x = ctx.input(0)
    pads = _paddings(ctx, 1, x.shape.rank)
    if node.op == "PadV2":
        value = ctx.input(2)
        if value.shape.rank != 0:
            raise InvalidArgumentError(f"constant_values must be a scalar. Got: {_dims(value.shape.dimensions)}")
    else:
        value = xl.scalar(ctx.b, 0, x.shape.element_type)
    if all(p == (0, 0) for p in pads):
        return [x]  # nothing to pad (also the only form a rank-0 pad can take)
    return [ctx.b.pad(x, value, pads)]


@lowers("MirrorPad")
def _mirror_pad(ctx, node):
    """Per dimension: reversed edge slices (excluding the edge for REFLECT) around the input."""
    x = ctx.input(0)
    b = ctx.b
    rank = x.shape.rank
    pads = _paddings(ctx, 1, rank)
    mode = ctx.attr("mode")
    offset = 1 if mode == "REFLECT" else 0
    for axis, (lo, hi) in enumerate(pads):
        size = x.shape.dimensions[axis]
        if lo + offset > size or hi + offset > size:
            raise InvalidArgumentError(f"paddings must be no greater than the dimension size: {lo}, {hi} greater "
                                       f"than {size - offset}")
        parts = []
        dims = list(x.shape.dimensions)

        def piece(start, stop):
            s, l = [0] * rank, list(dims)
            s[axis], l[axis] = start, stop
            return b.reverse(b.slice(x, s, l), [axis])

        if lo:
            parts.append(piece(offset, offset + lo))
        parts.append(x)
        if hi:
            parts.append(piece(size - hi - offset, size - offset))
        if len(parts) > 1:
            x = b.concatenate(parts, axis)
    return [x]


@lowers("ReverseV2")
def _reverse_v2(ctx, node):
    x = ctx.input(0)
    rank = x.shape.rank
    axes = [ctx.normalize_axis(a, rank) for a in ctx.const_ints(1)]
    if len(set(axes)) != len(axes):
        raise InvalidArgumentError(f"axes {axes} specified more than once")
    return [ctx.b.reverse(x, sorted(axes)) if axes else x]


@lowers("InvertPermutation")
def _invert_permutation(ctx, node):
    value = ctx.try_const_input(0)
    et = ctx.output_type(0)
    if value is not None:
        perm = np.asarray(value).reshape(-1)
        if sorted(perm.tolist()) != list(range(perm.size)):
            raise InvalidArgumentError(f"{perm.tolist()} is not a permutation")
        return [np.argsort(perm).astype(et.dtype)]
    # result[x[i]] = i: scatter an iota into x's positions.
    from tfxla_cluster.hlo.attrs import ScatterDimensionNumbers
    from tfxla_cluster.hlo.shape import Shape

    b = ctx.b
    x = ctx.input(0)
    n = x.shape.dimensions[0]
    iota = b.iota(Shape.array(et, [n]), 0)
    zeros = xl.full(b, 0, et, [n])
    idx = b.reshape(x, [n, 1])
    comb = b.sub_builder("assign")
    comb.parameter(0, Shape.scalar(et), "p0")
    comp = comb.build(comb.parameter(1, Shape.scalar(et), "p1"))  # the update wins
    dn = ScatterDimensionNumbers((), (0,), (0,), 1)
    return [b.scatter(zeros, idx, iota, comp, dn)]


@lowers("Where")
def _where(ctx, node):
    value = ctx.try_const_input(0)
    if value is None:   # a data-dependent size: a bounded dynamic result, as TF's XLA
        from tfxla_cluster.tf2hlo.dynamic_size import where_bounded

        return where_bounded(ctx, node)
    return [np.argwhere(np.asarray(value).astype(bool)).astype(np.int64)]

