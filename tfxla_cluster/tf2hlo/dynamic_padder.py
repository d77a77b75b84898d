"""Consumers of bounded dynamic values inside a cluster (a small part of XLA's dynamic padder).

Stage: lowering. A :class:`~tfxla_cluster.tf2hlo.bounded_dynamic.BoundedDynamic` value (NonMaxSuppressionV3's
indices, and what is gathered with them) is its padded array plus its run-time size along one dimension. XLA's
dynamic padder lets the rest of the cluster use it; we do the same for the consumers TF's models put after
NMS:

* elementwise ops, ``Cast``, ``Select`` and identities compute on the padded array; the result keeps the
  run-time size (along the dimension shifted by broadcasting). The other operands must not span the dynamic
  dimension (size 1 or lower rank), as a static operand of the bound's length would fail TF's run-time
  shape check;
* reductions (Sum, Mean, Prod, Max, Min, All, Any, ArgMax, ArgMin) first replace the padding by the
  reduction's identity (``select(iota < size, x, init)``, what the padder does); Mean divides by the run-time
  count; a result that still has the dynamic dimension stays bounded dynamic;
* ``Shape``, ``ShapeN`` and ``Size`` are computed from the run-time size (an HLO value, as XLA's
  ``get-dimension-size``); ``Rank`` is static;
* ``Reshape``, ``Squeeze`` and ``ExpandDims`` reshape the padded array when the padding stays at the end
  of one output dimension (hlo/shape_inference.py ``reshape_dynamic_dimension``): the run-time size is
  scaled by the dimensions merged into it;
* ``Transpose``, ``Pack``, ``MatMul`` (the dynamic dimension not contracted), ``GatherV2`` of bounded
  params (static indices) and ``StridedSlice``/``Slice`` that leave the dynamic dimension alone compute on
  the padded array; the dynamic dimension moves where the op moves it. A slice of the dynamic dimension
  itself (begin >= 0, stride 1, end constant or open) keeps ``clamp(min(end, size) - begin, 0)`` entries,
  as TF's XLA returns;
* ``GatherNd`` with bounded indices (``tf.gather_nd(x, tf.where(m))``) and ``ReverseV2`` (along the dynamic
  dimension: entry j from ``size - 1 - j``);
* ``Tile`` along the dynamic dimension gathers the run-time entries of each copy together;
* ``Pad``/``PadV2`` along the dynamic dimension put the high padding right after the run-time entries (a
  clamped gather and a select by position), the size grows by both paddings;
* ``ConcatV2`` along the dynamic dimension places each piece at the run-time end of the ones before (a
  clamped gather from each piece and a select by position: XLA's own padder takes no dynamic update in a
  ``dynamic-update-slice``) and sums the sizes; along another dimension every piece
  must carry the same run-time size.

Any other consumer is refused with an UnimplementedError (lower.py's message). ``bounded_dynamic_problems``
is the same list as a graph check: whether a ``jit_compile=True`` body with data-dependent shapes can be one
cluster (runtime/pipeline.py; otherwise those ops run on TF's kernels between clusters).
"""
from __future__ import annotations

import functools

import numpy as np

from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.hlo.ir import HloInstruction
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.bounded_dynamic import BoundedDynamic, bounded
from tfxla_cluster.tf2hlo.context import LoweringContext

_IDENTITIES = frozenset({"Identity", "StopGradient", "PreventGradient", "Snapshot", "IdentityN", "Cast",
                         "_UnaryOpsComposition",
                         "Select", "SelectV2", "ClipByValue", "ZerosLike", "OnesLike"})
_REDUCTIONS = {
    "Sum": lambda et: 0, "Mean": lambda et: 0, "Prod": lambda et: 1, "Max": xl.min_value, "Min": xl.max_value,
    "All": lambda et: True, "Any": lambda et: False, "ArgMax": xl.min_value, "ArgMin": xl.max_value,
}
_SHAPES = frozenset({"Shape", "ShapeN", "Size", "Rank"})
_RESHAPES = frozenset({"Reshape", "Squeeze", "ExpandDims"})
_CONCATS = frozenset({"ConcatV2"})
# The other consumers (below), with the input positions that may be bounded dynamic.
_MOVERS = {"Transpose": {0}, "MatMul": {0, 1}, "StridedSlice": {0}, "Slice": {0}, "Pad": {0}, "PadV2": {0},
           "Pack": None, "Tile": {0}, "GatherNd": {1}, "ReverseV2": {0}}
# Ops whose own lowering makes or takes bounded dynamic values (with the input positions they take them at;
# GatherV2 of bounded params is gather_scatter.py's _gather_bounded_params).
_OWN = {"GatherV2": {0, 1}, "Gather": {1}, "_Retval": {0}, "_DeviceRetval": {0}}


@functools.cache
def _elementwise_ops() -> frozenset[str]:
    from tfxla_cluster.tf2hlo.elementwise import BINARY, UNARY

    return frozenset(UNARY) | frozenset(BINARY) | _IDENTITIES


class _PaddedContext(LoweringContext):
    """The node's context with some inputs replaced by HLO values (the padded arrays)."""

    def __init__(self, lowerer, node, replaced: dict[int, HloInstruction]) -> None:
        super().__init__(lowerer, node)
        self._replaced = replaced

    def input_value(self, index: int):
        return self._replaced[index] if index in self._replaced else super().input_value(index)

    def input(self, index: int) -> HloInstruction:
        return self._replaced[index] if index in self._replaced else super().input(index)


def dynamic_inputs(lowerer, node, inputs: list[tuple[str, int]] | None = None) -> dict[int, BoundedDynamic]:
    """The node's inputs that are bounded dynamic values, by input number. ``inputs``: the node's data
    inputs as (source name, output), if the caller has them (``LoweringContext`` does)."""
    if inputs is None:
        inputs = [(e.src.name, e.src_output) for e in node.data_inputs()]
    out = {}
    for i, key in enumerate(inputs):
        v = lowerer.value(key)
        if isinstance(v, BoundedDynamic):
            out[i] = v
    return out


def lower_with_dynamic(lowerer, node, fn, dynamic: dict[int, BoundedDynamic]) -> list | None:
    """The node's outputs when it consumes ``dynamic`` inputs as described in the module docstring, or None
    when this op is not one we pad for (the caller lowers it normally, which refuses the value)."""
    if node.op in _RESHAPES and set(dynamic) == {0}:
        return _reshape(lowerer, node, fn, dynamic[0])
    if node.op in _CONCATS:
        return _concat(lowerer, node, fn, dynamic)
    if node.op in _MOVERS:
        allowed = _MOVERS[node.op]
        if allowed is not None and not set(dynamic) <= allowed:
            return None
        return _MOVER_RULES[node.op](lowerer, node, fn, dynamic)
    if node.op not in _SHAPES and node.op not in _REDUCTIONS and node.op not in _elementwise_ops():
        return None
    if len({id(d.size) for d in dynamic.values()}) > 1:
        raise UnimplementedError(f"{node.op} ({node.name}) combines bounded dynamic values of different "
                                 f"run-time sizes")
    if node.op in _SHAPES:
        return _shapes(lowerer, node, dynamic)
    if node.op in _REDUCTIONS and set(dynamic) == {0}:
        return _reduction(lowerer, node, fn, dynamic[0])
    if node.op in _elementwise_ops():
        return _elementwise(lowerer, node, fn, dynamic)
    return None


def _elementwise(lowerer, node, fn, dynamic):
    ctx = _PaddedContext(lowerer, node, {i: d.value for i, d in dynamic.items()})
    outs = fn(ctx, node)
    first = next(iter(dynamic.values()))
    result = []
    for out in outs:
        if not isinstance(out, HloInstruction):
            result.append(out)
            continue
        dim = first.dimension + out.shape.rank - first.value.shape.rank
        for i in range(ctx.num_inputs):   # a static operand spanning the dynamic dimension
            if i in dynamic:
                continue
            v = ctx.input_value(i)
            dims = tuple(np.shape(v)) if isinstance(v, np.ndarray) else getattr(v.shape, "dimensions", ())
            k = dim - (out.shape.rank - len(dims))
            if 0 <= k < len(dims) and dims[k] != 1:
                raise UnimplementedError(f"{node.op} ({node.name}): a static operand of length {dims[k]} meets a "
                                         f"bounded dynamic dimension")
        result.append(BoundedDynamic(out, dim, first.size))
    return result


def _reshape(lowerer, node, fn, d: BoundedDynamic):
    from tfxla_cluster.hlo.shape_inference import reshape_dynamic_dimension

    ctx = _PaddedContext(lowerer, node, {0: d.value})
    (out,) = fn(ctx, node)
    mapped = reshape_dynamic_dimension(d.value.shape.dimensions, d.dimension, out.shape.dimensions)
    if mapped is None:
        raise UnimplementedError(f"{node.op} ({node.name}) splits or merges the bounded dynamic dimension "
                                 f"{d.dimension} of {d.value.shape}: the padding would not stay at the end")
    k, factor = mapped
    b = lowerer.builder
    size = d.size if factor == 1 else xl.mul(b, d.size, xl.scalar(b, factor, P.S32))
    return [bounded(b, out, k, size)]


def _concat(lowerer, node, fn, dynamic: dict[int, BoundedDynamic]):
    from tfxla_cluster.tf2hlo.gather_scatter import gather

    b = lowerer.builder
    ctx = LoweringContext(lowerer, node)
    n = int(ctx.attr("N"))
    first = next(iter(dynamic.values()))
    rank = first.value.shape.rank
    axis = ctx.const_int(n)
    if not -rank <= axis < rank:
        raise UnimplementedError(f"{node.op} ({node.name}): axis {axis} out of range for rank {rank}")
    axis %= rank
    if any(d.dimension != first.dimension for d in dynamic.values()):
        raise UnimplementedError(f"{node.op} ({node.name}) joins values dynamic in different dimensions")
    if axis != first.dimension:   # every piece must have the same run-time length there
        if len(dynamic) != n or len({id(d.size) for d in dynamic.values()}) > 1:
            raise UnimplementedError(f"{node.op} ({node.name}): a static operand meets a bounded dynamic "
                                     f"dimension")
        pctx = _PaddedContext(lowerer, node, {i: d.value for i, d in dynamic.items()})
        (out,) = fn(pctx, node)
        return [bounded(b, out, first.dimension, first.size)]
    pieces = [dynamic[i].value if i in dynamic else ctx.input(i) for i in range(n)]
    et = pieces[0].shape.element_type
    total = sum(p.shape.dimensions[axis] for p in pieces)
    dims = list(pieces[0].shape.dimensions)
    dims[axis] = total
    # Output position j along the axis takes piece i's element j - offset_i where offset_i <= j <
    # offset_i + size_i (each piece gathered at clamped positions, then selected).
    j = b.iota(Shape.array(P.S32, [total]), 0)
    out = xl.full(b, 0, et, dims)
    offset = xl.scalar(b, 0, P.S32)
    for i, piece in enumerate(pieces):
        length = dynamic[i].size if i in dynamic else xl.scalar(b, piece.shape.dimensions[axis], P.S32)
        at = xl.sub(b, j, b.broadcast(offset, [total], ()))
        inside = b.binary(O.AND, b.compare(at, xl.full(b, 0, P.S32, [total]), "GE"),
                          b.compare(at, b.broadcast(length, [total], ()), "LT"))
        last = xl.full(b, piece.shape.dimensions[axis] - 1, P.S32, [total])
        taken = gather(b, piece, b.clamp(xl.full(b, 0, P.S32, [total]), at, last), axis, 0)
        mask = b.broadcast(inside, dims, (axis,))
        out = b.select(mask, taken, out)
        offset = xl.add(b, offset, length)
    return [bounded(b, out, axis, offset)]


# Ops whose lowering gives a bounded dynamic output (the output slots): dynamic_size.py, image_color.py.
_SOURCES = {"Unique": (0,), "UniqueV2": (0,), "Where": (0,), "NonMaxSuppressionV3": (0,)}
_NOT_BOUNDED = frozenset({"UniqueWithCounts", "UniqueWithCountsV2"})   # data-dependent, not lowered so


def _on_padded(lowerer, node, fn, dynamic) -> list:
    (out,) = fn(_PaddedContext(lowerer, node, {i: d.value for i, d in dynamic.items()}), node)
    return out


def _transpose(lowerer, node, fn, dynamic):
    (d,) = dynamic.values()
    perm = [p % d.value.shape.rank for p in LoweringContext(lowerer, node).const_ints(1)]
    return [bounded(lowerer.builder, _on_padded(lowerer, node, fn, dynamic), perm.index(d.dimension), d.size)]


def _matmul(lowerer, node, fn, dynamic):
    ctx = LoweringContext(lowerer, node)
    free = {0: 1 if ctx.attr("transpose_a", False) else 0, 1: 0 if ctx.attr("transpose_b", False) else 1}
    if len(dynamic) != 1 or any(d.dimension != free[i] for i, d in dynamic.items()):
        raise UnimplementedError(f"{node.op} ({node.name}) contracts a bounded dynamic dimension")
    (i, d), = dynamic.items()
    return [bounded(lowerer.builder, _on_padded(lowerer, node, fn, dynamic), i, d.size)]


def _pack(lowerer, node, fn, dynamic):
    ctx = LoweringContext(lowerer, node)
    first = next(iter(dynamic.values()))
    if len(dynamic) != ctx.num_inputs or any(d.dimension != first.dimension for d in dynamic.values()):
        raise UnimplementedError(f"{node.op} ({node.name}) stacks a static value with a bounded dynamic one")
    axis = ctx.normalize_axis(int(ctx.attr("axis", 0)), first.value.shape.rank + 1)
    dim = first.dimension + (1 if axis <= first.dimension else 0)
    # Stacked values must agree at run time (TF checks it); XLA keeps the first one's size.
    return [bounded(lowerer.builder, _on_padded(lowerer, node, fn, dynamic), dim, first.size)]


def _tile(lowerer, node, fn, dynamic):
    """Tile: other dimensions by concatenation; along the dynamic dimension entry j of the result is entry
    j % size of the value (a gather), so the copies' run-time entries lie together."""
    from tfxla_cluster.tf2hlo.gather_scatter import gather

    (d,) = dynamic.values()
    b = lowerer.builder
    k = d.dimension
    times = LoweringContext(lowerer, node).const_ints(1)
    x = d.value
    for dim, m in enumerate(times):
        if dim != k and m != 1:
            x = b.concatenate([x] * m, dim) if m else b.slice(x, [0] * x.shape.rank, [
                0 if i == dim else n for i, n in enumerate(x.shape.dimensions)])
    if times[k] == 1:
        return [bounded(b, x, k, d.size)]
    length = d.value.shape.dimensions[k] * times[k]
    j = b.iota(Shape.array(P.S32, [length]), 0)
    size = b.broadcast(b.binary(O.MAXIMUM, d.size, xl.scalar(b, 1, P.S32)), [length], ())
    out = gather(b, x, b.binary(O.REMAINDER, j, size), k, 0)
    return [bounded(b, out, k, xl.mul(b, d.size, xl.scalar(b, times[k], P.S32)))]


def _slice_bounds(ctx, node, d: BoundedDynamic) -> tuple[int, int | None, list[int]]:
    """(begin, end or None for open, shrunk dimensions) of a slice along the dynamic dimension."""
    rank = d.value.shape.rank
    begin = ctx.const_ints(1)
    if node.op == "Slice":
        size = ctx.const_ints(2)
        if size[d.dimension] != -1 or begin[d.dimension] < 0:
            raise UnimplementedError(f"Slice ({node.name}): a fixed size or negative begin along a bounded "
                                     f"dynamic dimension")
        return begin[d.dimension], None, []
    end, strides = ctx.const_ints(2), ctx.const_ints(3)
    masks = {k: int(ctx.attr(k, 0)) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                               "shrink_axis_mask")}
    if masks["ellipsis_mask"] or masks["new_axis_mask"] or len(begin) != rank:
        raise UnimplementedError(f"StridedSlice ({node.name}): an ellipsis or new axis next to a bounded "
                                 f"dynamic dimension")
    k = d.dimension
    shrunk = [i for i in range(rank) if masks["shrink_axis_mask"] >> i & 1]
    b = 0 if masks["begin_mask"] >> k & 1 else begin[k]
    e = None if masks["end_mask"] >> k & 1 else end[k]
    if k in shrunk or strides[k] != 1 or b < 0 or (e is not None and e < 0):
        raise UnimplementedError(f"StridedSlice ({node.name}): a stride, a negative bound or an index along a "
                                 f"bounded dynamic dimension")
    return b, e, shrunk


def _slice(lowerer, node, fn, dynamic):
    (d,) = dynamic.values()
    ctx = LoweringContext(lowerer, node)
    begin, end, shrunk = _slice_bounds(ctx, node, d)
    out = _on_padded(lowerer, node, fn, dynamic)
    b = lowerer.builder
    limit = d.size if end is None else b.binary(O.MINIMUM, d.size, xl.scalar(b, end, P.S32))
    size = b.binary(O.MAXIMUM, xl.sub(b, limit, xl.scalar(b, begin, P.S32)), xl.scalar(b, 0, P.S32))
    return [bounded(b, out, d.dimension - sum(1 for i in shrunk if i < d.dimension), size)]


def _placed(b, x: HloInstruction, axis: int, length: int, start, size, fill: HloInstruction) -> HloInstruction:
    """A ``length``-long array along ``axis`` holding ``x``'s first ``size`` entries from ``start`` on and
    ``fill`` (a scalar) elsewhere: a clamped gather and a select by position."""
    from tfxla_cluster.tf2hlo.gather_scatter import gather

    dims = list(x.shape.to_static().dimensions)
    dims[axis] = length
    j = b.iota(Shape.array(P.S32, [length]), 0)
    at = xl.sub(b, j, b.broadcast(start, [length], ()))
    inside = b.binary(O.AND, b.compare(at, xl.full(b, 0, P.S32, [length]), "GE"),
                      b.compare(at, b.broadcast(size, [length], ()), "LT"))
    last = xl.full(b, x.shape.dimensions[axis] - 1, P.S32, [length])
    taken = gather(b, x, b.clamp(xl.full(b, 0, P.S32, [length]), at, last), axis, 0)
    return b.select(b.broadcast(inside, dims, (axis,)), taken, b.broadcast(fill, dims, ()))


def _pad(lowerer, node, fn, dynamic):
    (d,) = dynamic.values()
    ctx = LoweringContext(lowerer, node)
    b = lowerer.builder
    pads = np.asarray(ctx.const_input(1)).reshape(-1, 2).tolist()
    et = d.value.shape.element_type
    fill = ctx.input(2) if node.op == "PadV2" else xl.scalar(b, 0, et)
    low, high = pads[d.dimension]
    others = [(0, 0) if k == d.dimension else tuple(p) for k, p in enumerate(pads)]
    x = b.pad(d.value, fill, others) if any(p != (0, 0) for p in others) else d.value
    if low < 0 or high < 0:
        raise UnimplementedError(f"{node.op} ({node.name}): negative padding of a bounded dynamic dimension")
    length = d.value.shape.dimensions[d.dimension] + low + high
    out = _placed(b, x, d.dimension, length, xl.scalar(b, low, P.S32), d.size, fill)
    return [bounded(b, out, d.dimension, xl.add(b, d.size, xl.scalar(b, low + high, P.S32)))]


def _gather_nd(lowerer, node, fn, dynamic):
    """GatherNd with bounded indices (``tf.gather_nd(x, tf.where(m))``): the padded rows gather something,
    the result keeps the indices' run-time size along their dimension."""
    (d,) = dynamic.values()
    if d.dimension == d.value.shape.rank - 1:
        raise UnimplementedError(f"{node.op} ({node.name}): a bounded dynamic index depth")
    return [bounded(lowerer.builder, _on_padded(lowerer, node, fn, dynamic), d.dimension, d.size)]


def _reverse(lowerer, node, fn, dynamic):
    """ReverseV2: other axes on the padded array; along the dynamic one entry j comes from size - 1 - j."""
    from tfxla_cluster.tf2hlo.gather_scatter import gather

    (d,) = dynamic.values()
    b = lowerer.builder
    rank = d.value.shape.rank
    axes = {a % rank for a in LoweringContext(lowerer, node).const_ints(1)}
    x = d.value
    others = sorted(axes - {d.dimension})
    if others:
        x = b.reverse(x, others)
    if d.dimension in axes:
        n = d.value.shape.dimensions[d.dimension]
        j = b.iota(Shape.array(P.S32, [n]), 0)
        last = b.broadcast(xl.sub(b, d.size, xl.scalar(b, 1, P.S32)), [n], ())
        src = b.clamp(xl.full(b, 0, P.S32, [n]), xl.sub(b, last, j), xl.full(b, n - 1, P.S32, [n]))
        x = gather(b, x, src, d.dimension, 0)
    return [bounded(b, x, d.dimension, d.size)]


_MOVER_RULES = {"GatherNd": _gather_nd, "ReverseV2": _reverse, "Transpose": _transpose, "MatMul": _matmul, "StridedSlice": _slice, "Slice": _slice,
                "Pad": _pad, "PadV2": _pad, "Pack": _pack, "Tile": _tile}


def bounded_dynamic_problems(graph, members) -> list[str]:
    """Why one cluster of ``members`` cannot carry its bounded dynamic values (``_SOURCES``' outputs) to its
    results: each consumer (of them or of what is computed from them) that none of the rules above takes,
    as "op (node)"; [] when it can. Over-approximates: a reduction's result counts as dynamic."""
    members = set(members)
    problems = []
    dynamic: set[tuple[str, int]] = set()
    for name in members:
        op = graph.node(name).op
        if op in _NOT_BOUNDED:
            problems.append(f"{op} ({name})")
        dynamic.update((name, k) for k in _SOURCES.get(op, ()))
    todo = list(dynamic)
    ok_ops = _SHAPES | _RESHAPES | _CONCATS | set(_REDUCTIONS) | _elementwise_ops() | set(_MOVERS)
    while todo:
        name, slot = todo.pop()
        for e in graph.node(name).out_edges:
            if e.is_control or e.src_output != slot:
                continue
            dst = e.dst
            if dst.name not in members:
                continue   # leaves the cluster: the launch cuts it
            if dst.op in _OWN:
                if e.dst_input not in _OWN[dst.op]:
                    problems.append(f"{dst.op} ({dst.name})")
                    continue
            elif dst.op not in ok_ops or (dst.op in _REDUCTIONS and e.dst_input != 0) or (
                    dst.op in _RESHAPES and e.dst_input != 0) or (
                    dst.op in _MOVERS and _MOVERS[dst.op] is not None and e.dst_input not in _MOVERS[dst.op]):
                problems.append(f"{dst.op} ({dst.name})")
                continue
            if dst.op in _SHAPES or dst.op.startswith("_"):
                continue
            for k in range(len(dst.outputs)):
                if (dst.name, k) not in dynamic:
                    dynamic.add((dst.name, k))
                    todo.append((dst.name, k))
    return sorted(set(problems))


def _valid_mask(b, d: BoundedDynamic) -> HloInstruction:
    dims = d.value.shape.dimensions
    iota = b.iota(Shape.array(P.S32, dims), d.dimension)
    return b.compare(iota, b.broadcast(d.size, dims, ()), "LT")


def _reduction(lowerer, node, fn, d: BoundedDynamic):
    from tfxla_cluster.tf2hlo.reduction import reduction_axes

    b = lowerer.builder
    x = d.value
    et = x.shape.element_type
    masked = b.select(_valid_mask(b, d), x, xl.full(b, _REDUCTIONS[node.op](et), et, x.shape.dimensions))
    ctx = _PaddedContext(lowerer, node, {0: masked})
    rank = x.shape.rank
    if node.op in ("ArgMax", "ArgMin"):
        axes, keep = [ctx.normalize_axis(ctx.const_int(1), rank)], False
    else:
        axes = reduction_axes(ctx, 1, rank) if np.asarray(ctx.const_input(1)).size else []
        keep = bool(ctx.attr("keep_dims", False))
    if node.op == "Mean" and d.dimension in axes:
        from tfxla_cluster.tf2hlo.registry import lookup

        (r,) = lookup("Sum")(ctx, node)
        static = int(np.prod([x.shape.dimensions[a] for a in axes if a != d.dimension], dtype=np.int64))
        count = xl.mul(b, d.size, xl.scalar(b, static, P.S32))
        out = xl.div(b, r, xl.convert(b, count, r.shape.element_type))
    else:
        (out,) = fn(ctx, node)
    if d.dimension in axes:
        return [out]
    dim = d.dimension if keep else d.dimension - sum(1 for a in axes if a < d.dimension)
    return [BoundedDynamic(out, dim, d.size)]


def _shapes(lowerer, node, dynamic):
    b = lowerer.builder
    ctx = LoweringContext(lowerer, node)
    out_et = ctx.output_type(0)
    results = []
    for i in range(ctx.num_inputs if node.op == "ShapeN" else 1):
        d = dynamic.get(i)
        dims = d.value.shape.dimensions if d is not None else ctx.input_dims(i)
        if node.op == "Rank":
            return [np.asarray(len(dims), np.int32)]
        if d is None:
            results.append(np.asarray(dims if node.op != "Size" else int(np.prod(dims, dtype=np.int64)),
                                      out_et.dtype))
            continue
        size = xl.convert(b, d.size, out_et)
        if node.op == "Size":
            static = int(np.prod([n for k, n in enumerate(dims) if k != d.dimension], dtype=np.int64))
            results.append(xl.mul(b, size, xl.scalar(b, static, out_et)))
            continue
        pieces = [b.reshape(size, [1]) if k == d.dimension else xl.full(b, n, out_et, [1])
                  for k, n in enumerate(dims)]
        results.append(b.concatenate(pieces, 0) if len(pieces) > 1 else pieces[0])
    return results
