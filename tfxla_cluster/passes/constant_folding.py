"""Constant folding (xla/hlo/transforms/simplifiers/hlo_constant_folding.cc).

An instruction of a non-fusion computation is replaced by a ``constant`` holding its value when
- at least one operand is a constant, and every operand is a constant, a broadcast of a constant or an
  iota (so ``add(c, broadcast(c2))`` folds but a lone ``broadcast(c)`` stays small);
- it is not a parameter, constant, tuple, broadcast or iota (broadcasts and iotas would only grow the
  module), nor an rng, fft, while, or anything with a side effect or containing one, nor a pad of a
  broadcast by a constant (XLA's compile-time guard);
- neither its result nor its operands together exceed 45 million elements (XLA's cap);
- every constant it reads has a known value, and the reference evaluator can compute it.
The value comes from our evaluator, the same oracle the tests use, run with denormals flushed (FTZ/DAZ)
as TF's compile thread runs XLA's evaluator (:mod:`tfxla_cluster.mxcsr`). Instructions that fail to
evaluate are left alone, as XLA does.
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.mxcsr import flushed_denormals
from tfxla_cluster.errors import TfXlaError
from tfxla_cluster.hlo.eval_compute import simple_reducer, tree_window_sums
from tfxla_cluster.hlo.evaluator import HANDLERS, Evaluator
from tfxla_cluster.hlo.ir import HloInstruction, HloModule
from tfxla_cluster.hlo.literal import make_literal
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.structural import known_literal
from tfxla_cluster.passes.pass_ import HloPass
from tfxla_cluster.passes.util import UseGraph, has_side_effect, new_instruction, \
    non_fusion_computations

MAX_CONSTANT_ELEMENTS = 45 * 1000 * 1000
NEVER_FOLDED = frozenset({O.PARAMETER, O.CONSTANT, O.TUPLE, O.BROADCAST, O.IOTA, O.RNG, O.WHILE,
                          O.RNG_BIT_GENERATOR, O.AFTER_ALL})


def _foldable_operand(op: HloInstruction) -> bool:
    if op.opcode is O.CONSTANT:
        return known_literal(op) is not None or op.shape.is_tuple and not op.literal_elided
    if op.opcode is O.BROADCAST:
        return op.operands[0].opcode is O.CONSTANT and known_literal(op.operands[0]) is not None
    return op.opcode is O.IOTA


def _contains_illegal(instr: HloInstruction) -> bool:
    """Side effects, or an rng/while anywhere in the called computations."""
    if has_side_effect(instr):
        return True
    stack = list(instr.called_computations)
    seen: set[int] = set()
    while stack:
        comp = stack.pop()
        if id(comp) in seen:
            continue
        seen.add(id(comp))
        for i in comp.instructions:
            if i.opcode in (O.RNG, O.WHILE, O.CUSTOM_CALL):
                return True
            stack.extend(i.called_computations)
    return False


def should_fold(instr: HloInstruction) -> bool:
    if instr.opcode in NEVER_FOLDED or not instr.operands:
        return False
    if not any(o.opcode is O.CONSTANT for o in instr.operands):
        return False
    if not all(_foldable_operand(o) for o in instr.operands):
        return False
    if _contains_illegal(instr):
        return False
    # XLA skips a pad of a broadcast (by a constant) to bound compile time; the pad stays a kernel
    if instr.opcode is O.PAD and instr.operands[0].opcode is O.BROADCAST and instr.operands[1].opcode is O.CONSTANT:
        return False
    if instr.shape.is_array:
        operand_elements = sum(o.shape.num_elements for o in instr.operands if o.shape.is_array)
        if max(instr.shape.num_elements, operand_elements) > MAX_CONSTANT_ELEMENTS:
            return False
    return True


def evaluate_instruction(instr: HloInstruction, ev: Evaluator):
    """The value of ``instr`` given constant-valued operands (evaluating broadcasts/iotas first)."""
    def value(op: HloInstruction):
        if op.opcode is O.CONSTANT:
            lit = op.literal
            return tuple(np.array(v) for v in lit) if isinstance(lit, tuple) else np.array(lit)
        return HANDLERS[op.opcode](ev, op, [value(o) for o in op.operands])

    with np.errstate(all="ignore"):
        args = [value(o) for o in instr.operands]
        et = instr.shape.element_type
        if instr.opcode is O.REDUCE and len(args) == 2 and simple_reducer(instr.to_apply) is O.ADD and \
                et.is_float and not et.is_complex:
            # XLA:CPU's TreeReductionRewriter runs (once) before constant folding in the same simplification
            # round: what is folded is its reduce-window (windows of 32 rounded to the element type), then
            # the reduce of those sums (the evaluator's fast add).
            windows = tree_window_sums(args[0], args[1], instr.dimensions)
            if windows is not None:
                args[0] = windows
        return HANDLERS[instr.opcode](ev, instr, args)


class HloConstantFolding(HloPass):
    """XLA's HloConstantFolding; ``folded`` lists the names of the instructions it replaced."""

    name = "constant_folding"

    def __init__(self) -> None:
        self.folded: list[str] = []

    def run_on_module(self, module: HloModule) -> bool:
        with flushed_denormals():
            return self._fold(module)

    def _fold(self, module: HloModule) -> bool:
        changed = False
        ev = Evaluator()
        for comp in non_fusion_computations(module):
            g = UseGraph(comp)
            for instr in comp.post_order():
                # (the use graph last: it is built on first use, and most computations fold nothing)
                if instr.parent is not comp or instr.opcode not in HANDLERS or not should_fold(instr) or \
                        g.is_dead(instr):
                    continue
                try:
                    result = evaluate_instruction(instr, ev)
                    literal = make_literal(result, instr.shape)
                except (TfXlaError, ValueError, TypeError, ArithmeticError):
                    continue
                const = g.add(new_instruction(O.CONSTANT, (), instr.shape, name=instr.name, like=instr,
                                              literal=literal))
                g.replace(instr, const)
                self.folded.append(instr.name)
                changed = True
            g.finish()
        return changed
