"""XLA's dynamic padder (xla/service/dynamic_padder.cc), the part a CPU module with bounded shapes needs.

Stage: HLO passes (the first of the CPU pipeline, as XLA runs ``DynamicPadder`` before the simplifiers).
A bounded dynamic array is its padded buffer plus a run-time size per dynamic dimension. This pass

1. infers each dynamic dimension's size (XLA's ``DynamicDimensionInference``) from the ``set-dimension-size``
   that made it, through elementwise ops, converts, selects, broadcasts, transposes, reshapes (the padding
   staying at the end of one output dimension), reductions and gathers;
2. masks the padding of every reduction over a dynamic dimension with the reduction's init value
   (``select(iota < size, x, init)``), and replaces ``get-dimension-size`` of a dynamic dimension by its size;
3. replaces every ``set-dimension-size`` (and XLA's ``SliceToDynamic`` custom call of an optimized text) by
   its padded operand and drops every shape's dynamic flags (the bound becomes the static size).

Afterwards no instruction has a dynamic shape, which is what the other passes, the evaluator and the code
generator expect. Our own lowering already masks what it reduces (tf2hlo/dynamic_padder.py) and returns
each bounded cluster result's size beside it, so on our modules step 2 repeats work XLA's padder would do;
it makes TF's own ``hlo`` texts (which leave all of it to this pass) compute TF's values. A dynamic entry
result is returned padded to its bound (the launch cuts only the results our lowering sized).
"""
from __future__ import annotations

from tfxla_cluster.hlo.ir import HloComputation, HloInstruction, HloModule
from tfxla_cluster.hlo.opcode import ELEMENTWISE, HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tfxla_cluster.passes.pass_ import HloPass

Sizes = dict[int, HloInstruction]   # dynamic dimension -> its s32[] size


class DynamicPadder(HloPass):
    name = "dynamic-padder"

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in module.computations:
            if any(i.opcode is O.SET_DIMENSION_SIZE or (i.shape is not None and i.shape.is_dynamic)
                   for i in comp.instructions):
                changed |= _pad_computation(comp)
        return changed


def _pad_computation(comp: HloComputation) -> bool:
    sizes: dict[int, Sizes] = {}
    for instr in comp.post_order():
        s = _infer(comp, instr, sizes)
        if s:
            sizes[id(instr)] = s
        if instr.opcode is O.REDUCE:
            _mask_reduce(comp, instr, sizes)
        elif instr.opcode is O.GET_DIMENSION_SIZE:
            size = sizes.get(id(instr.operands[0]), {}).get(instr.dimensions[0])
            if size is not None:
                comp.replace_all_uses(instr, size)
    for instr in list(comp.instructions):
        if instr.opcode is O.SET_DIMENSION_SIZE or (instr.opcode is O.CUSTOM_CALL and
                                                    instr.custom_call_target == "SliceToDynamic"):
            # XLA's padded result of a dynamic output (TF's optimized texts end in SliceToDynamic).
            comp.replace_all_uses(instr, instr.operands[0])
    comp.remove_dead_instructions()
    for instr in comp.instructions:
        if instr.shape is not None and instr.shape.is_dynamic:
            instr.shape = instr.shape.to_static()
    return True


def _new(comp: HloComputation, name: str, opcode: O, shape: Shape, operands, **fields) -> HloInstruction:
    return comp.add_instruction(HloInstruction(name, opcode, shape, list(operands), **fields))


def _infer(comp: HloComputation, instr: HloInstruction, sizes: dict[int, Sizes]) -> Sizes:
    """The dynamic dimensions of ``instr`` and their sizes, from its operands'."""
    op = instr.opcode
    ops = [sizes.get(id(o), {}) for o in instr.operands]
    if op is O.SET_DIMENSION_SIZE:
        return {**ops[0], instr.dimensions[0]: instr.operands[1]}
    if not any(ops) or instr.shape is None or not instr.shape.is_array:
        return {}
    rank = instr.shape.rank
    if op in ELEMENTWISE or op in (O.CONVERT, O.SELECT, O.CLAMP, O.COPY, O.COMPARE, O.REDUCE_PRECISION):
        out: Sizes = {}
        for o, s in zip(instr.operands, ops):
            if o.shape.rank == rank:
                for d, size in s.items():
                    out.setdefault(d, size)
        return out
    if op is O.BROADCAST:
        return {instr.dimensions[d]: size for d, size in ops[0].items()}
    if op is O.TRANSPOSE:
        return {j: ops[0][p] for j, p in enumerate(instr.dimensions) if p in ops[0]}
    if op in (O.RESHAPE, O.BITCAST):
        from tfxla_cluster.hlo.shape_inference import reshape_dynamic_dimension

        out = {}
        for d, size in ops[0].items():
            mapped = reshape_dynamic_dimension(instr.operands[0].shape.dimensions, d, instr.shape.dimensions)
            if mapped is None:
                continue
            k, factor = mapped
            if factor != 1:
                c = _new(comp, "dynamic-size", O.CONSTANT, Shape.scalar(P.S32), [], literal=_s32(factor))
                size = _new(comp, "dynamic-size", O.MULTIPLY, Shape.scalar(P.S32), [size, c])
            out[k] = size
        return out
    if op is O.REDUCE:
        kept = [d for d in range(instr.operands[0].shape.rank) if d not in instr.dimensions]
        return {j: ops[0][d] for j, d in enumerate(kept) if d in ops[0]}
    if op is O.GATHER and ops[1]:
        dn = instr.gather_dimension_numbers
        index_dims = [d for d in range(instr.operands[1].shape.rank) if d != dn.index_vector_dim]
        batch_out = [d for d in range(rank) if d not in dn.offset_dims]
        return {batch_out[k]: ops[1][d] for k, d in enumerate(index_dims) if d in ops[1]}
    return {}


def _s32(value: int):
    import numpy as np

    return np.asarray(value, np.int32)


def _mask_reduce(comp: HloComputation, reduce: HloInstruction, sizes: dict[int, Sizes]) -> None:
    """Put each input's init value into the padding of the dynamic dimensions the reduce folds."""
    n = len(reduce.operands) // 2
    for k in range(n):
        x, init = reduce.operands[k], reduce.operands[n + k]
        dyn = {d: s for d, s in sizes.get(id(x), {}).items() if d in reduce.dimensions}
        if not dyn:
            continue
        dims = x.shape.dimensions
        mask = None
        for d, size in sorted(dyn.items()):
            iota = _new(comp, "dynamic-mask", O.IOTA, Shape.array(P.S32, dims), [], iota_dimension=d)
            bound = _new(comp, "dynamic-mask", O.BROADCAST, Shape.array(P.S32, dims), [size], dimensions=())
            from tfxla_cluster.hlo.attrs import ComparisonDirection

            lt = _new(comp, "dynamic-mask", O.COMPARE, Shape.array(P.PRED, dims), [iota, bound],
                      comparison_direction=ComparisonDirection.LT)
            mask = lt if mask is None else _new(comp, "dynamic-mask", O.AND, Shape.array(P.PRED, dims), [mask, lt])
        static = x.shape.to_static()
        fill = _new(comp, "dynamic-mask", O.BROADCAST, static, [init], dimensions=())
        masked = _new(comp, "dynamic-mask", O.SELECT, static, [mask, x, fill])
        reduce.operands = [masked if i == k else o for i, o in enumerate(reduce.operands)]


def has_dynamic_shapes(module: HloModule) -> bool:
    """Whether any instruction of ``module`` has a bounded dynamic shape (or is a set-dimension-size)."""
    return any(i.opcode is O.SET_DIMENSION_SIZE or (i.shape is not None and i.shape.is_dynamic)
               for c in module.computations for i in c.instructions)
