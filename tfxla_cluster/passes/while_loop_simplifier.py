"""WhileLoopSimplifier (xla/service/while_loop_simplifier.cc) in the CPU simplification fixed points:
the part that changes values, ``TryRemoveWhileLoop``.

- A loop whose static trip count is 0 becomes its init value; one whose trip count is 1 becomes a call of
  its body on the init value, inlined at once (``CallInliner::Inline``). What the body computed then meets
  the rest of the simplification fixed point: a body over constants is constant-folded (HloEvaluator's
  values, not the loop kernel's under DAZ), ``add(0, x)`` of an expanded one-index scatter folds to ``x``.
- Not touched: a loop whose body or condition is called from elsewhere, a loop with control
  predecessors or successors, a loop whose condition has a side effect; a one-trip loop whose body has one.
- The trip count is ``ComputeWhileLoopTripCount(while, max_brute_force_iters=1)``
  (xla/hlo/analysis/while_loop_analysis.cc): the induction variable is the one tuple element the
  condition's root reads (its other operands constants; ``GetGTEOperandIndices``' pattern, a copy looked
  through) which the body's root updates from itself alone; the init of that element must be a known
  constant. ``MatchTrivialLoopTripCount`` then reads ``i = init; i < N`` (or ``i <= N``) with ``i += k``
  (k > 0 a constant) with XLA's arithmetic, and otherwise the condition and update are evaluated for one
  step (trip counts 0 and 1 only).
- Before that, ``TryPropagateConstant``: a scalar tuple element the body passes through unchanged whose init
  is a constant is read as that constant in the condition and the body. It changes no value, but a bound
  that became a constant only after the loop was built (``i < n``, n folded from constants) makes the trip
  count known (seed 266000983: a 0-trip loop over a constant, then its reduce constant-folded).

XLA's other rewrites of this pass (dead, repeated and constant tuple elements, nested tuples, merged
induction variables, constant propagation into the body) change a loop's tuple, not its values, and are
not modelled.
"""
from __future__ import annotations

import math

import numpy as np

from tfxla_cluster.hlo.evaluator import HANDLERS, Evaluator
from tfxla_cluster.hlo.ir import HloComputation, HloInstruction, HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.attrs import ComparisonDirection
from tfxla_cluster.hlo.structural import known_literal
from tfxla_cluster.passes.expanders import inline_call
from tfxla_cluster.passes.pass_ import HloPass
from tfxla_cluster.passes.util import UseGraph, callers, has_side_effect, is_effective_scalar, \
    non_fusion_computations


class WhileLoopSimplifier(HloPass):
    name = "simplify-while-loops"

    def run_on_module(self, module: HloModule) -> bool:
        comps = [c for c in non_fusion_computations(module) if any(i.opcode is O.WHILE for i in c.instructions)]
        if not comps:
            return False
        calls = callers(module)
        changed = False
        for comp in comps:
            g = UseGraph(comp)
            for w in [i for i in comp.instructions if i.opcode is O.WHILE]:
                if w.parent is not comp or any(len(calls.get(id(c), ())) > 1 for c in w.called_computations):
                    continue
                changed |= _try_propagate_constant(w)
                changed |= _try_remove_while_loop(g, w)
            g.finish()
        if changed:
            module.remove_unused_computations()
        return changed


def _computation_has_side_effect(comp: HloComputation) -> bool:
    return any(has_side_effect(i) for i in comp.instructions)


def _try_propagate_constant(w: HloInstruction) -> bool:
    """TryPropagateConstant: loop-invariant scalar elements with a constant init become that constant."""
    init, body = w.operands[0], w.while_body
    root, param = body.root, body.parameter(0)
    if init.opcode is not O.TUPLE or root.opcode is not O.TUPLE:
        return False
    constants = {i: init.operands[i] for i, op in enumerate(root.operands)
                 if op.opcode is O.GET_TUPLE_ELEMENT and op.operands[0] is param and op.tuple_index == i
                 and op.shape.is_scalar and init.operands[i].opcode is O.CONSTANT}
    if not constants:
        return False
    changed = False
    for comp in (w.while_condition, body):
        p = comp.parameter(0)
        for gte in [i for i in comp.instructions if i.opcode is O.GET_TUPLE_ELEMENT and i.operands[0] is p
                    and i.tuple_index in constants]:
            comp.replace_all_uses(gte, comp.add_instruction(constants[gte.tuple_index].clone(operands=[])))
            changed = True
    return changed


def _try_remove_while_loop(g: UseGraph, w: HloInstruction) -> bool:
    if w.control_predecessors or any(w in i.control_predecessors for i in g.comp.instructions):
        return False   # not IsSafelyRemovable
    if _computation_has_side_effect(w.while_condition):
        return False
    trips = trip_count(w)
    if trips == 0:
        g.replace(w, w.operands[0])
        return True
    if trips == 1 and not _computation_has_side_effect(w.while_body):
        call = g.make(O.CALL, [w.operands[0]], w.shape, like=w, called_computations=[w.while_body], name="call")
        g.replace(w, call)
        inline_call(g, call)
        return True
    return False


# ---------------------------------------------------------------- while_loop_analysis.cc
def _trace(instr: HloInstruction) -> HloInstruction:
    """TraceThroughCopyAndGteTupleChain."""
    while True:
        if instr.opcode is O.GET_TUPLE_ELEMENT and instr.operands[0].opcode is O.TUPLE:
            instr = instr.operands[0].operands[instr.tuple_index]
        elif instr.opcode is O.COPY:
            instr = instr.operands[0]
        else:
            return instr


def _non_constant_operand(instr: HloInstruction) -> HloInstruction | None:
    """The one distinct non-constant operand of ``instr`` (NonConstantOperand), else None."""
    found = None
    for op in instr.operands:
        if op.opcode is not O.CONSTANT:
            if found is not None and found is not op:
                return None
            found = op
    return found


def _gte_operand_indices(instr: HloInstruction, param: HloInstruction) -> set[int] | None:
    """GetGTEOperandIndices: the tuple indices of ``param`` that ``instr``'s non-constant operands read."""
    out = set()
    for op in instr.operands:
        if op.opcode is O.CONSTANT:
            continue
        x = op.operands[0] if op.opcode is O.COPY else op
        if x.opcode is not O.GET_TUPLE_ELEMENT or x.operands[0] is not param:
            return None
        out.add(x.tuple_index)
    return out


def _unique_gte(comp: HloComputation, index: int) -> HloInstruction | None:
    """hlo_query::GetUniqueGteInstruction of the computation's parameter 0."""
    param = comp.parameter(0)
    found = [i for i in comp.instructions if i.opcode is O.GET_TUPLE_ELEMENT and i.operands[0] is param
             and i.tuple_index == index]
    return found[0] if len(found) == 1 else None


def induction_var_index(w: HloInstruction) -> int | None:
    """GetLoopInductionVarTupleIdx (the pattern-matched forms)."""
    cond, body = w.while_condition, w.while_body
    indices = _gte_operand_indices(cond.root, cond.parameter(0))
    if not indices or len(indices) != 1 or w.operands[0].opcode is not O.TUPLE:
        return None
    (idx,) = indices
    root = body.root
    if root.opcode is not O.TUPLE:
        return None
    if _gte_operand_indices(_trace(root.operands[idx]), body.parameter(0)) != {idx}:
        return None
    return idx


def _scalar_int(lit: np.ndarray | None) -> int | None:
    """LiteralUtil::LiteralAsScalarInt64."""
    if lit is None or lit.size != 1 or lit.dtype.kind not in "iu":
        return None
    v = int(lit.reshape(-1)[0])
    return v if -2 ** 63 <= v < 2 ** 63 else None


def _match_trivial_trip_count(w: HloInstruction, idx: int, init: int) -> int | None:
    """MatchTrivialLoopTripCount: ``i = init; i < N`` or ``i <= N``; ``i += k``."""
    body, cond = w.while_body, w.while_condition
    update = _trace(body.root.operands[idx])
    indvar = _non_constant_operand(update)
    if indvar is None or _trace(indvar) is not _unique_gte(body, idx):
        return None
    if update.opcode is not O.ADD or indvar not in update.operands:
        return None
    step_instr = update.operands[1] if update.operands[0] is indvar else update.operands[0]
    if step_instr.opcode is not O.CONSTANT or not is_effective_scalar(step_instr.shape):
        return None
    step = _scalar_int(known_literal(step_instr))
    if step is None or step <= 0:
        return None
    root = cond.root
    cond_indvar = _non_constant_operand(root)
    if cond_indvar is None or cond_indvar is not _unique_gte(cond, idx) or len(root.operands) != 2:
        return None
    bound_instr = root.operands[1] if root.operands[0] is cond_indvar else root.operands[0]
    if bound_instr.opcode is not O.CONSTANT or not is_effective_scalar(bound_instr.shape):
        return None
    bound = _scalar_int(known_literal(bound_instr))
    if bound is None or root.opcode is not O.COMPARE or root.operands[0] is not cond_indvar:
        return None
    trips = bound - init
    if not -2 ** 63 <= trips < 2 ** 63:
        return None
    div = abs(trips) // step * (1 if trips >= 0 else -1)   # C++'s truncating int64 division
    if root.comparison_direction is ComparisonDirection.LT:
        if math.remainder(float(trips), float(step)) == 0:   # std::remainder on doubles
            return max(0, div)
        return max(0, div + 1) if div + 1 < bound else max(0, div)
    if root.comparison_direction is ComparisonDirection.LE:
        return max(0, div + 1)
    return None


def _evaluate(instr: HloInstruction, substitute: HloInstruction, value: np.ndarray) -> np.ndarray | None:
    """``instr`` with ``substitute`` given ``value`` and every other operand a known constant."""
    args = []
    for op in instr.operands:
        lit = value if op is substitute else known_literal(op) if op.opcode is O.CONSTANT else None
        if lit is None:
            return None
        args.append(lit)
    handler = HANDLERS.get(instr.opcode)
    if handler is None or instr.called_computations:
        return None
    try:
        return np.asarray(handler(Evaluator(), instr, args))
    except Exception:  # noqa: BLE001 - XLA gives up on a failed evaluation too
        return None


def trip_count(w: HloInstruction, max_brute_force_iters: int = 1) -> int | None:
    """ComputeWhileLoopTripCount."""
    idx = induction_var_index(w)
    if idx is None:
        return None
    init_lit = known_literal(_trace(w.operands[0].operands[idx]))
    if init_lit is None:
        return None
    init = _scalar_int(init_lit)
    if init is not None:
        trips = _match_trivial_trip_count(w, idx, init)
        if trips is not None:
            return trips
    body, cond = w.while_body, w.while_condition
    update = body.root.operands[idx]
    body_indvar = _non_constant_operand(update)
    if body_indvar is None or body_indvar is not _unique_gte(body, idx):
        return None
    cond_indvar = _non_constant_operand(cond.root)
    if cond_indvar is None or cond_indvar is not _unique_gte(cond, idx):
        return None
    value = init_lit
    for trips in range(max_brute_force_iters + 1):
        go = _evaluate(cond.root, cond_indvar, value)
        if go is None or go.dtype != np.bool_ or go.size != 1:
            return None
        if not bool(go.reshape(-1)[0]):
            return trips
        value = _evaluate(update, body_indvar, value)
        if value is None:
            return None
    return None
