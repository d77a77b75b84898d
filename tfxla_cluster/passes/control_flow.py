"""Control-flow and tuple simplifiers of the CPU simplification fixed point.

- ``ConditionalSimplifier`` (xla/service/conditional_simplifier.cc, ``TryRemoveConditional``): a
  conditional with one branch, or with a constant selector, becomes its (inlined) branch; a two-branch
  ``pred`` conditional whose branches hold only cheap instructions (elementwise ops, constants, broadcast,
  concatenate, dynamic-slice, get-tuple-element, reduce, reshape, pad, parameter, slice, tuple) and
  neither branch is empty becomes both branches inlined plus a ``select`` per array leaf (the
  predicate broadcast to the leaf shape). Conditionals with side effects stay.
- ``SortSimplifier``: a sort drops operands that nobody reads and its comparator ignores.
- ``TupleSimplifier`` (xla/hlo/transforms/simplifiers/tuple_simplifier.cc):
  ``tuple(gte(t, 0), ..., gte(t, n-1))`` of the whole of ``t`` becomes ``t``; ``gte(tuple(...))`` is
  left to the algebraic simplifier.
"""
from __future__ import annotations

from tfxla_cluster.hlo.ir import HloComputation, HloInstruction, HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.structural import known_literal
from tfxla_cluster.hlo.shape import PrimitiveType, Shape
from tfxla_cluster.passes.expanders import inline_call
from tfxla_cluster.passes.pass_ import HloPass
from tfxla_cluster.passes.util import UseGraph, has_opcode, has_side_effect

_CHEAP_IN_BRANCH = frozenset({O.CONSTANT, O.BROADCAST, O.CONCATENATE, O.DYNAMIC_SLICE, O.GET_TUPLE_ELEMENT, O.REDUCE,
                              O.RESHAPE, O.PAD, O.PARAMETER, O.SLICE, O.TUPLE})


def _is_expensive_in_branch(instr: HloInstruction) -> bool:
    return instr.opcode not in _CHEAP_IN_BRANCH and not instr.is_elementwise()


def _is_empty_with_array_root(comp: HloComputation) -> bool:
    """Only parameters, tuples and get-tuple-elements, and the result holds an array."""
    trivial = all(i.opcode in (O.TUPLE, O.GET_TUPLE_ELEMENT, O.PARAMETER) for i in comp.instructions)
    return trivial and any(s.is_array for s in comp.root.shape.leaves())


def _call(g: UseGraph, cond: HloInstruction, branch: int) -> HloInstruction:
    return g.make(O.CALL, [cond.operands[1 + branch]], cond.shape, like=cond,
                  called_computations=[cond.branch_computations[branch]], name="call")


class ConditionalSimplifier(HloPass):
    name = "simplify-conditional"

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in module.computation_post_order():
            if not has_opcode(comp, O.CONDITIONAL):
                continue
            conds = [i for i in comp.post_order() if i.opcode is O.CONDITIONAL]
            if not conds:
                continue
            g = UseGraph(comp)
            for cond in conds:
                changed |= self._try_remove(g, cond)
            g.finish()
        if changed:
            module.remove_unused_computations()
        return changed

    def _try_remove(self, g: UseGraph, cond: HloInstruction) -> bool:
        if has_side_effect(cond) or cond.control_predecessors:
            return False
        branches = cond.branch_computations
        selector = cond.operands[0]
        if len(branches) == 1:
            return self._inline(g, cond, _call(g, cond, 0))
        lit = known_literal(selector)
        if lit is not None:
            if selector.shape.element_type is PrimitiveType.PRED:
                index = 0 if bool(lit) else 1
            else:
                index = int(lit)
                index = index if 0 <= index < len(branches) else len(branches) - 1
            return self._inline(g, cond, _call(g, cond, index))
        if len(branches) != 2 or selector.shape.element_type is not PrimitiveType.PRED:
            return False
        if any(_is_expensive_in_branch(i) for b in branches for i in b.instructions):
            return False
        if any(_is_empty_with_array_root(b) for b in branches):
            return False  # an empty branch is cheaper than a select
        on_true, on_false = _call(g, cond, 0), _call(g, cond, 1)
        result = self._select(g, cond, selector, on_true, on_false)
        g.replace(cond, result)
        inline_call(g, on_false)
        inline_call(g, on_true)
        return True

    @staticmethod
    def _inline(g: UseGraph, cond: HloInstruction, call: HloInstruction) -> bool:
        g.replace(cond, call)
        inline_call(g, call)
        return True

    def _select(self, g: UseGraph, cond, pred, t: HloInstruction, f: HloInstruction) -> HloInstruction:
        shape = f.shape
        if shape.is_token:
            return g.make(O.AFTER_ALL, [t, f], shape, like=cond)
        if shape.is_array:
            p = pred if shape.rank == 0 else g.make(
                O.BROADCAST, [pred], Shape.array(PrimitiveType.PRED, shape.dimensions), like=cond, dimensions=())
            return g.make(O.SELECT, [p, t, f], shape, like=cond)
        parts = []
        for k, leaf in enumerate(shape.tuple_shapes):
            tk = g.make(O.GET_TUPLE_ELEMENT, [t], leaf, like=cond, tuple_index=k, name="get-tuple-element")
            fk = g.make(O.GET_TUPLE_ELEMENT, [f], leaf, like=cond, tuple_index=k, name="get-tuple-element")
            parts.append(self._select(g, cond, pred, tk, fk))
        return g.make(O.TUPLE, parts, shape, like=cond)


class TupleSimplifier(HloPass):
    name = "tuple-simplifier"

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in module.computation_post_order():
            if not has_opcode(comp, O.TUPLE):
                continue
            g = UseGraph(comp)
            for t in comp.post_order():
                if t.opcode is not O.TUPLE or t.parent is not comp or not t.operands:
                    continue
                source = t.operands[0].operands[0] if t.operands[0].opcode is O.GET_TUPLE_ELEMENT else None
                if source is None or not source.shape.compatible(t.shape):
                    continue
                if all(o.opcode is O.GET_TUPLE_ELEMENT and o.operands[0] is source and o.tuple_index == k
                       for k, o in enumerate(t.operands)):
                    g.replace(t, source)
                    changed = True
            g.finish()
        return changed


class SortSimplifier(HloPass):
    """xla/hlo/transforms/simplifiers/sort_simplifier.cc: a multi-operand sort drops the operands whose
    sorted output nobody reads and whose comparator parameters are unused (e.g. an index iota that
    only rode along); the comparator is rebuilt without those parameters."""

    name = "simplify-sorts"

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in [c for c in module.computation_post_order() if not c.is_fusion_computation]:
            if not has_opcode(comp, O.SORT):
                continue
            g = UseGraph(comp)
            for sort in comp.post_order():
                if sort.opcode is O.SORT and sort.parent is comp and sort.shape.is_tuple:
                    changed |= self._simplify(g, module, sort)
            g.finish()
        if changed:
            module.remove_unused_computations()
        return changed

    @staticmethod
    def _simplify(g: UseGraph, module: HloModule, sort: HloInstruction) -> bool:
        users = g.users(sort)
        if sort is g.comp.root or any(u.opcode is not O.GET_TUPLE_ELEMENT for u in users):
            return False
        comparator = sort.to_apply
        cmp_users = comparator.users()
        read = {u.tuple_index for u in users}
        keep = [k for k in range(len(sort.operands))
                if k in read or any(cmp_users.get(comparator.parameter(2 * k + j)) for j in (0, 1))
                or comparator.root in (comparator.parameter(2 * k), comparator.parameter(2 * k + 1))]
        if len(keep) == len(sort.operands) or not keep:
            return False
        # the comparator without the dropped parameters
        new_cmp = HloComputation(comparator.name)
        mapping: dict[int, HloInstruction] = {}
        for instr in comparator.post_order():
            if instr.opcode is O.PARAMETER:
                k, side = divmod(instr.parameter_number, 2)
                if k not in keep:
                    continue
                clone = instr.clone([])
                clone.parameter_number = 2 * keep.index(k) + side
            else:
                clone = instr.clone([mapping[id(o)] for o in instr.operands])
            mapping[id(instr)] = new_cmp.add_instruction(clone)
        new_cmp.set_root(mapping[id(comparator.root)])
        module.add_computation(new_cmp)
        operands = [sort.operands[k] for k in keep]
        shape = Shape.tuple_of([o.shape for o in operands]) if len(keep) > 1 else operands[0].shape
        new_sort = g.make(O.SORT, operands, shape, like=sort, dimensions=sort.dimensions, is_stable=sort.is_stable,
                          called_computations=[new_cmp])
        for u in users:
            if len(keep) > 1:
                u.tuple_index = keep.index(u.tuple_index)
                g.replace_operand(u, sort, new_sort)
            else:
                g.replace(u, new_sort)
        g.remove_if_dead(sort)
        return True
