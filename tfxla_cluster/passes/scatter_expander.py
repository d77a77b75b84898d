"""ScatterExpander (xla/service/scatter_expander.cc) as XLA:CPU runs it: ``kEliminateSimpleScatters``.

TF 2.21's XLA:CPU compiles with its fusion emitters, which emit scatters themselves: cpu_compiler.cc expands
only the scatters whose loop would run once (``ScatterTripCount`` = the product of the index dimensions
other than ``index_vector_dim`` is 1: one index vector), between the ``simplification`` fixed point and a
second one, ``post_scatter_expansion_simplification`` (``pipeline.py``). Other scatters stay.

XLA builds a one-trip while loop over the scatter indices that ``WhileLoopSimplifier`` inlines in the next
fixed point; this pass emits that inlined body at once (the induction variable is 0), with the same
instructions on its values:

    start_d   = index[k] where operand dimension d = scatter_dims_to_operand_dims[k], else 0
    window    = reshape(updates) to the update window with the inserted (size-1) window dimensions
    slice     = dynamic-slice(operand, start, window sizes)
    combined  = map(slice, window), to_apply = the scatter's combiner
    valid     = AND over d of (0 <= start_d <= operand_d - window_d)   (XLA's CheckIndexValidity)
    result    = dynamic-update-slice(operand, select(broadcast(valid), combined, slice), start)

so an out-of-range index leaves the operand as it is, as the scatter does. The simplifiers then fold
what is known: with constant indices the check folds, a map of an add becomes an add
(``algsimp``'s map rule) and ``add(0, x)`` into zeros becomes ``x`` — a one-id ``unsorted_segment_sum``
returns its input's bits (a denormal kept), where the scatter kernel adds it to 0 under DAZ.

A scatter with empty updates becomes its operand. Not expanded here (left to the scatter emitter): scatters
of several operands, with batching dimensions, or into a rank-0 operand.
"""
from __future__ import annotations

from math import prod

from tfxla_cluster.hlo import attrs as A
from tfxla_cluster.hlo.attrs import ComparisonDirection
from tfxla_cluster.hlo.ir import HloComputation, HloInstruction, HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType, Shape
from tfxla_cluster.passes.pass_ import HloPass
from tfxla_cluster.passes.util import UseGraph, constant_instruction, new_instruction, non_fusion_computations


def scatter_trip_count(scatter: HloInstruction) -> int:
    """ScatterTripCount: the number of index vectors the scatter applies."""
    indices = scatter.operands[1].shape
    ivd = scatter.scatter_dimension_numbers.index_vector_dim
    return prod(d for k, d in enumerate(indices.dimensions) if k != ivd)


def _expandable(scatter: HloInstruction) -> bool:
    dnums = scatter.scatter_dimension_numbers
    return (len(scatter.operands) == 3 and not dnums.input_batching_dims and not dnums.scatter_indices_batching_dims
            and scatter.shape.rank > 0 and scatter_trip_count(scatter) == 1)


class ScatterExpander(HloPass):
    name = "scatter_expander"

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in non_fusion_computations(module):
            scatters = [i for i in comp.instructions if i.opcode is O.SCATTER and _expandable(i)]
            if not scatters:
                continue
            g = UseGraph(comp)
            for s in scatters:
                g.replace(s, _expand(g, s))
            g.finish()
            changed = True
        return changed


def _f32_combiner(module: HloModule, comp: HloComputation) -> HloComputation:
    """FloatNormalization's f32 clone of a bf16 scalar computation: f32 parameters, every bf16 instruction
    computed in f32, the result rounded to bf16 and widened back (``convert(convert(root))``)."""
    clone = HloComputation(comp.name + ".clone")
    mapping: dict[int, HloInstruction] = {}
    for instr in comp.post_order():
        new = clone.add_instruction(instr.clone([mapping[id(o)] for o in instr.operands]))
        if new.shape.is_array and new.shape.element_type is PrimitiveType.BF16:
            wide = Shape.array(PrimitiveType.F32, new.shape.dimensions)
            if new.opcode is O.CONSTANT:   # (its literal stays bf16: widened by a convert)
                new = clone.add_instruction(new_instruction(O.CONVERT, [new], wide))
            else:
                new.shape = wide
        mapping[id(instr)] = new
    root = mapping[id(comp.root)]
    narrow = clone.add_instruction(new_instruction(O.CONVERT, [root], Shape.array(PrimitiveType.BF16, ())))
    clone.set_root(clone.add_instruction(new_instruction(O.CONVERT, [narrow], root.shape)))
    module.add_computation(clone)
    return clone


def _combine(g: UseGraph, scatter: HloInstruction, current: HloInstruction, window: HloInstruction) -> HloInstruction:
    """map(current, window) by the combiner; a bf16 scatter maps in f32 by the f32 clone of its combiner,
    as TF's FloatNormalization leaves it (its root is no parameter's op: algsimp keeps the map)."""
    dims = tuple(range(window.shape.rank))
    if window.shape.element_type is not PrimitiveType.BF16:
        return g.make(O.MAP, [current, window], window.shape, like=scatter, dimensions=dims,
                      called_computations=[scatter.to_apply])
    wide = Shape.array(PrimitiveType.F32, window.shape.dimensions)
    args = [g.make(O.CONVERT, [x], wide, like=scatter) for x in (current, window)]
    combiner = _f32_combiner(g.comp.parent, scatter.to_apply)
    mapped = g.make(O.MAP, args, wide, like=scatter, dimensions=dims, called_computations=[combiner])
    return g.make(O.CONVERT, [mapped], window.shape, like=scatter)


def _expand(g: UseGraph, scatter: HloInstruction) -> HloInstruction:
    operand, indices, updates = scatter.operands
    if updates.shape.num_elements == 0:
        return operand
    dnums = scatter.scatter_dimension_numbers
    rank = operand.shape.rank
    index_type = indices.shape.element_type
    # the one index vector, and the start of the window in every operand dimension
    vector_size = 1 if dnums.index_vector_dim == indices.shape.rank else indices.shape.dimensions[dnums.index_vector_dim]
    vector = g.make(O.RESHAPE, [indices], Shape.array(index_type, (vector_size,)), like=scatter)
    scalar = Shape.array(index_type, ())
    zero = g.add(constant_instruction(0, index_type, (), like=scatter))
    starts = []
    for d in range(rank):
        if d in dnums.scatter_dims_to_operand_dims:
            k = dnums.scatter_dims_to_operand_dims.index(d)
            piece = g.make(O.SLICE, [vector], Shape.array(index_type, (1,)), like=scatter,
                           slices=(A.SliceRange(k, k + 1),))
            starts.append(g.make(O.RESHAPE, [piece], scalar, like=scatter))
        else:
            starts.append(zero)
    # the update window: the updates' window dimensions in order, the inserted ones of size 1
    window_dims = iter(updates.shape.dimensions[k] for k in dnums.update_window_dims)
    sizes = tuple(1 if d in dnums.inserted_window_dims else next(window_dims) for d in range(rank))
    elem = operand.shape.element_type
    window_shape = Shape.array(elem, sizes)
    window = g.make(O.RESHAPE, [updates], window_shape, like=scatter)
    current = g.make(O.DYNAMIC_SLICE, [operand, *starts], window_shape, like=scatter, dynamic_slice_sizes=sizes)
    combined = _combine(g, scatter, current, window)
    valid = None
    pred = Shape.array(PrimitiveType.PRED, ())
    for d, start in enumerate(starts):
        low = g.make(O.COMPARE, [zero, start], pred, like=scatter, comparison_direction=ComparisonDirection.LE)
        limit = g.add(constant_instruction(operand.shape.dimensions[d] - sizes[d], index_type, (), like=scatter))
        high = g.make(O.COMPARE, [limit, start], pred, like=scatter, comparison_direction=ComparisonDirection.GE)
        ok = g.make(O.AND, [low, high], pred, like=scatter)
        valid = ok if valid is None else g.make(O.AND, [valid, ok], pred, like=scatter)
    mask = g.make(O.BROADCAST, [valid], Shape.array(PrimitiveType.PRED, sizes), like=scatter, dimensions=())
    chosen = g.make(O.SELECT, [mask, combined, current], window_shape, like=scatter)
    return g.make(O.DYNAMIC_UPDATE_SLICE, [operand, chosen, *starts], scatter.shape, like=scatter)
