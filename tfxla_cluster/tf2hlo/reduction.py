"""Reductions (tf2xla's reduction_ops.cc / reduction_ops_common.cc, index_ops.cc, scan_ops.cc,
l2loss_op.cc).

Stage: lowering. ``XlaReductionOp``: the axes are a compile-time constant (scalar or vector), normalised
mod rank with duplicates rejected; the input is converted to the reduction type (``SumAccumulationType``
for Sum/Mean/Prod — f16/bf16 accumulate in f32 — the input type otherwise), reduced with a scalar
computation named ``<node>-reduction``, converted back, and reshaped when ``keep_dims``. Mean divides by
the product of the reduced dimension sizes in the accumulation type. ArgMax/ArgMin are a variadic
reduce over (value, iota) pairs that keeps the first index among equal values; Cumsum/Cumprod are a
``reduce-window`` whose window spans the whole axis (exclusive/reverse by padding), as scan_ops.cc does.
XLA_CPU_JIT's custom-call ArgMax for f32 1-D/2-D inputs is not modelled (same values).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo.attrs import Window
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.registry import lowers


def reduction_axes(ctx, index: int, rank: int) -> list[int]:
    """The constant axes input, normalised, with TF's errors."""
    raw = np.asarray(ctx.const_input(index))
    if raw.ndim > 1:
        raise InvalidArgumentError(f"Expected scalar or vector as index argument, got shape {list(raw.shape)}")
    axes, seen = [], set()
    for a in raw.reshape(-1).tolist():
        if a < -rank or a >= rank:
            raise InvalidArgumentError(f"Invalid reduction dimension ({a} for input with {rank} dimension(s)")
        a = (a + rank) % rank
        if a in seen:
            raise InvalidArgumentError(f"Invalid reduction arguments: Axes contains duplicate dimension: {a}")
        seen.add(a)
        axes.append(a)
    return axes


def _reduction(opcode: O, init: Callable[[P], object], accumulate: Callable[[P], P], mean: bool = False):
    def lower(ctx, node):
        from tfxla_cluster.tf2hlo.complex_ops import ComplexValue, complex_hlo, is_complex_input

        # A complex Prod is XLA's reduce of complex multiplies (Sum/Mean go part by part).
        x = complex_hlo(ctx, 0)
        b = ctx.b
        dims = x.shape.dimensions
        if np.asarray(ctx.const_input(1)).size == 0:
            return [ctx.input_value(0)]  # no axes: the input passes through
        axes = reduction_axes(ctx, 1, len(dims))
        keep = bool(ctx.attr("keep_dims", False))
        et = x.shape.element_type
        acc = accumulate(et)
        data = xl.convert(b, x, acc)
        r = xl.reduce(b, data, xl.convert(b, xl.scalar(b, init(acc), acc), acc), axes, opcode, f"{node.name}-reduction")
        if mean and axes:
            divisor = xl.scalar(b, int(np.prod([dims[a] for a in axes], dtype=np.int64)), P.S32)
            r = xl.div(b, r, xl.convert(b, divisor, acc))
        r = xl.convert(b, r, et)
        if keep:
            r = b.reshape(r, [1 if i in axes else d for i, d in enumerate(dims)])
        if is_complex_input(ctx, 0):
            return [ComplexValue(b.unary(O.REAL, r), b.unary(O.IMAG, r))]
        return [r]
    return lower


_same = lambda et: et  # noqa: E731

lowers("Sum")(_reduction(O.ADD, lambda et: 0, xl.sum_accumulation_type))
lowers("Mean")(_reduction(O.ADD, lambda et: 0, xl.sum_accumulation_type, mean=True))
lowers("Prod")(_reduction(O.MULTIPLY, lambda et: 1, xl.sum_accumulation_type))
lowers("Max")(_reduction(O.MAXIMUM, xl.min_value, _same))
lowers("Min")(_reduction(O.MINIMUM, xl.max_value, _same))
lowers("All")(_reduction(O.AND, lambda et: True, _same))
lowers("Any")(_reduction(O.OR, lambda et: False, _same))


def _argminmax_computation(b, value_type: P, index_type: P, is_min: bool, name: str):
    """``(v0, i0, v1, i1) -> (v, i)``: the smaller/larger value, the lower index on ties (XLA's
    CreateMinMaxComputation)."""
    r = b.sub_builder(name)
    lv = r.parameter(0, Shape.scalar(value_type), "lhs_value")
    li = r.parameter(1, Shape.scalar(index_type), "lhs_index")
    rv = r.parameter(2, Shape.scalar(value_type), "rhs_value")
    ri = r.parameter(3, Shape.scalar(index_type), "rhs_index")
    cmp = r.compare(lv, rv, "LE" if is_min else "GE")
    best = r.select(cmp, lv, rv)
    arg = r.select(cmp, li, ri)
    tie = r.minimum(li, ri)
    arg = r.select(r.compare(lv, rv, "EQ"), tie, arg)
    return r.build(r.tuple([best, arg]))


def _argminmax(is_min: bool):
    def lower(ctx, node):
        from tfxla_cluster.tf2hlo.complex_ops import ComplexValue, complex_hlo, is_complex_input

        # A complex Prod is XLA's reduce of complex multiplies (Sum/Mean go part by part).
        x = complex_hlo(ctx, 0)
        b = ctx.b
        dims = x.shape.dimensions
        axis = ctx.const_int(1)
        if not -len(dims) <= axis < len(dims):
            raise InvalidArgumentError(f"Expected dimension in the range [{-len(dims)}, {len(dims)}), but got {axis}")
        axis %= len(dims)
        if dims[axis] == 0:
            raise InvalidArgumentError(f"Reduction axis {axis} is empty in shape [{','.join(map(str, dims))}]")
        out_type = ctx.attr_type("output_type")
        et = x.shape.element_type
        iota = b.iota(Shape.array(out_type, dims), axis)
        init_v = xl.scalar(b, xl.max_value(et) if is_min else xl.min_value(et), et)
        init_i = xl.scalar(b, 0, out_type)
        comp = _argminmax_computation(b, et, out_type, is_min, f"{node.name}-argminmax")
        r = b.reduce([x, iota], [init_v, init_i], [axis], comp)
        return [b.get_tuple_element(r, 1)]
    return lower


lowers("ArgMax")(_argminmax(False))
lowers("ArgMin")(_argminmax(True))


def _scan(opcode: O | None, init: float, make_reducer=None):
    """Cumulative ``opcode`` (or the scalar computation ``make_reducer(b, type, name)``) along an axis."""
    def lower(ctx, node):
        from tfxla_cluster.tf2hlo.complex_ops import ComplexValue, complex_hlo, is_complex_input

        # A complex Prod is XLA's reduce of complex multiplies (Sum/Mean go part by part).
        x = complex_hlo(ctx, 0)
        b = ctx.b
        dims = x.shape.dimensions
        rank = len(dims)
        axis = ctx.const_int(1)
        if not -rank <= axis < rank:
            raise InvalidArgumentError(f"ScanOp: Expected scan axis in the range [{-rank}, {rank}), but got {axis}")
        axis %= rank
        if x.shape.num_elements == 0:
            return [x]
        exclusive, reverse = bool(ctx.attr("exclusive", False)), bool(ctx.attr("reverse", False))
        et = x.shape.element_type
        acc = xl.sum_accumulation_type(et)
        n = dims[axis]
        sizes = [1] * rank
        sizes[axis] = n
        pads = [(0, 0)] * rank
        lo = n - 1 + (1 if exclusive else 0)
        pads[axis] = (0, lo) if reverse else (lo, 0)
        window = Window.make(sizes, padding=pads)
        data = xl.convert(b, x, acc)
        comp = (make_reducer(b, acc, f"{node.name}-scan") if make_reducer is not None
                else xl.reducer(b, opcode, acc, f"{node.name}-scan"))
        out = b.reduce_window(data, xl.scalar(b, init, acc), window, comp)
        out = xl.convert(b, out, et)
        if exclusive:  # the extra window position holds the total; drop it
            starts, limits = [0] * rank, list(out.shape.dimensions)
            if reverse:
                starts[axis], limits[axis] = 1, n + 1
            else:
                limits[axis] = n
            out = b.slice(out, starts, limits)
        return [out]
    return lower


lowers("Cumsum")(_scan(O.ADD, 0))
lowers("Cumprod")(_scan(O.MULTIPLY, 1))


@lowers("L2Loss")
def _l2_loss(ctx, node):
    """sum(t²) / 2, summed in the accumulation type (l2loss_op.cc)."""
    x = ctx.input(0)
    b = ctx.b
    et = x.shape.element_type
    acc = xl.sum_accumulation_type(et)
    t = xl.convert(b, x, acc)
    r = xl.reduce(b, b.multiply(t, t), 0, range(x.shape.rank), O.ADD, f"{node.name}-reduction")
    return [xl.div(b, xl.convert(b, r, et), 2)]
