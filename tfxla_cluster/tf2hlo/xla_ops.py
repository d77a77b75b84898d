"""Function calls and TF's direct XLA ops (tf2xla's function_ops.cc and the xla_*_op.cc kernels behind
``tf.raw_ops.Xla*``).

Stage: lowering.

* PartitionedCall/StatefulPartitionedCall lower the callee's body in place (XLA's CallInliner would
  inline a ``call`` anyway); arguments, host constants and resources flow straight through.
* The Xla* ops map one to one onto HLO: XlaDot/XlaDotV2 (``dot`` with the serialized
  ``xla.DotDimensionNumbers``), XlaPad, XlaDynamicSlice, XlaDynamicUpdateSlice, XlaReducePrecision,
  XlaSort/XlaKeyValueSort (ascending, total order for floats), XlaOptimizationBarrier and XlaSharding
  (values pass through).
"""
from __future__ import annotations

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo.attrs import ComparisonType
from tfxla_cluster.hlo.shape import Shape
from tfxla_cluster.tf2hlo.registry import lowers


@lowers("PartitionedCall", "StatefulPartitionedCall")
def _call(ctx, node):
    args = [ctx.input_value(i) for i in range(ctx.num_inputs)]
    _, rets = ctx.lowerer.lower_function_body(ctx.attr("f"), args, ctx.b, constant_args=True)
    if len(rets) != len(node.outputs):
        raise InvalidArgumentError(f"function {ctx.attr('f')} returns {len(rets)} values for {len(node.outputs)} "
                                   "outputs")
    return rets


@lowers("XlaOptimizationBarrier", "XlaSharding")
def _pass_through(ctx, node):
    return [ctx.input_value(i) for i in range(ctx.num_inputs)]


def _dot_numbers(serialized: str):
    from tensorflow.compiler.xla import xla_data_pb2

    dn = xla_data_pb2.DotDimensionNumbers()
    dn.ParseFromString(serialized.encode("latin-1") if isinstance(serialized, str) else serialized)
    return dn


@lowers("XlaDot", "XlaDotV2")
def _xla_dot(ctx, node):
    raw = ctx.node.attr("dimension_numbers").s
    dn = _dot_numbers(raw)
    lhs, rhs = ctx.input(0), ctx.input(1)
    out = ctx.output_type(0)
    return [ctx.b.dot(lhs, rhs, list(dn.lhs_contracting_dimensions), list(dn.rhs_contracting_dimensions),
                      list(dn.lhs_batch_dimensions), list(dn.rhs_batch_dimensions),
                      result_type=out if out is not lhs.shape.element_type else None)]


@lowers("XlaPad")
def _xla_pad(ctx, node):
    x, value = ctx.input(0), ctx.input(1)
    lo, hi, interior = ctx.const_ints(2), ctx.const_ints(3), ctx.const_ints(4)
    if not len(lo) == len(hi) == len(interior) == x.shape.rank:
        raise InvalidArgumentError("padding_low, padding_high and padding_interior must have the input's rank")
    return [ctx.b.pad(x, value, list(zip(lo, hi, interior)))]


def _start_indices(ctx, index: int, rank: int):
    starts = ctx.input(index)
    if starts.shape.dimensions != (rank,):
        raise InvalidArgumentError(f"start_indices must be a vector of length {rank}")
    b = ctx.b
    return [b.reshape(b.slice(starts, [i], [i + 1]), []) for i in range(rank)]


@lowers("XlaDynamicSlice")
def _xla_dynamic_slice(ctx, node):
    x = ctx.input(0)
    sizes = ctx.const_ints(2)
    return [ctx.b.dynamic_slice(x, _start_indices(ctx, 1, x.shape.rank), sizes)]


@lowers("XlaDynamicUpdateSlice")
def _xla_dynamic_update_slice(ctx, node):
    x, update = ctx.input(0), ctx.input(1)
    return [ctx.b.dynamic_update_slice(x, update, _start_indices(ctx, 2, x.shape.rank))]


@lowers("XlaReducePrecision")
def _xla_reduce_precision(ctx, node):
    return [ctx.b.reduce_precision(ctx.input(0), int(ctx.attr("exponent_bits")), int(ctx.attr("mantissa_bits")))]


def _sort(ctx, node, operands):
    b = ctx.b
    et = operands[0].shape.element_type
    r = b.sub_builder(f"{node.name}-compare")
    params = []
    for i, op in enumerate(operands):
        params.append(r.parameter(2 * i, Shape.scalar(op.shape.element_type), f"p.{i}.lhs"))
        params.append(r.parameter(2 * i + 1, Shape.scalar(op.shape.element_type), f"p.{i}.rhs"))
    order = ComparisonType.TOTALORDER if et.is_float else None
    comp = r.build(r.compare(params[0], params[1], "LT", order))
    dim = operands[0].shape.rank - 1
    s = b.sort(operands, dim, comp)
    return [s] if len(operands) == 1 else [b.get_tuple_element(s, i) for i in range(len(operands))]


@lowers("XlaSort")
def _xla_sort(ctx, node):
    return _sort(ctx, node, [ctx.input(0)])


@lowers("XlaKeyValueSort")
def _xla_key_value_sort(ctx, node):
    keys, vals = ctx.input(0), ctx.input(1)
    if keys.shape.dimensions != vals.shape.dimensions:
        raise InvalidArgumentError("keys and values must have the same shape")
    return _sort(ctx, node, [keys, vals])

