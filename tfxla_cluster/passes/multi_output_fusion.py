"""Sibling multi-output fusion for XLA:CPU (xla/service/multi_output_fusion.cc + cpu/cpu_multi_output_fusion.cc).

Stage: right after instruction fusion, on the computations that run as code (the entry and the
bodies of while/conditional/call — not reducers or fused computations). Two instructions that read a
common operand become one multi-output fusion, so the operand is read once:
- candidates: a loop fusion (whose root is not a dot or scatter) paired with another user of one of its
  operands that is a loop fusion or an elementwise/loop-fusible op (not a dot, not a constant);
- legal when the two are different and alive, neither reaches the other (no cycle), a multi-output
  fusion is read only through get-tuple-element, both have fewer than 20 operands, and their element
  shapes are equal, layout included (for a fusion: its root, or the first output of a tuple root);
- profit: the bytes of the shared operands that have at least two users (scalar constants do not
  count); pairs are fused highest profit first, and the search is repeated until nothing is legal.
The fused instruction is merged into the fusion (``FuseInstructionIntoMultiOutput`` /
``MergeFusionInstructionIntoMultiOutput``): the fused root becomes a tuple, and users read their value
through ``get-tuple-element``. ``decisions`` lists the merges.
"""
from __future__ import annotations

import heapq

from tfxla_cluster.hlo.attrs import FusionKind
from tfxla_cluster.hlo.ir import HloComputation, HloInstruction, HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.passes.fusion import LOOP_FUSIBLE, Reachability
from tfxla_cluster.passes.fusion_ir import fuse_into_multi_output, merge_fusion_into_multi_output
from tfxla_cluster.passes.pass_ import HloPass
from tfxla_cluster.passes.util import UseGraph, is_effective_scalar

MAX_OPERANDS = 20


def sequential_computations(module: HloModule) -> list[HloComputation]:
    """The entry and every computation it runs through while/conditional/call, callees first."""
    seen: list[HloComputation] = []
    stack = [module.entry]
    while stack:
        comp = stack.pop()
        if comp in seen:
            continue
        seen.append(comp)
        for instr in comp.instructions:
            if instr.opcode in (O.WHILE, O.CONDITIONAL, O.CALL):
                stack.extend(instr.called_computations)
    order = module.computation_post_order()
    return [c for c in order if c in seen]


def _element_shape(instr: HloInstruction):
    if instr.opcode is O.FUSION:
        root = instr.fused_computation.root
        if root.opcode is O.TUPLE and instr.shape.is_tuple:
            return root.operands[0].shape
        return root.shape
    return instr.shape


def is_mof_fusible(instr: HloInstruction) -> bool:
    """CpuMultiOutputFusion::IsFusible."""
    if instr.opcode is O.CONSTANT:
        return False
    if instr.opcode is O.FUSION:
        return (instr.fusion_kind is FusionKind.LOOP
                and instr.fused_computation.root.opcode not in (O.DOT, O.SCATTER))
    return instr.opcode is not O.DOT and (instr.is_elementwise() or instr.opcode in LOOP_FUSIBLE)


class CpuMultiOutputFusion(HloPass):
    name = "cpu-multi-output-fusion"

    def __init__(self) -> None:
        self.decisions: list[str] = []

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in sequential_computations(module):
            g = UseGraph(comp)
            while True:
                pair = self._best_pair(g)
                if pair is None:
                    break
                a, b, profit = pair
                self._fuse(g, a, b, profit)
                changed = True
            g.finish()
        return changed

    @staticmethod
    def _profitable_operand(g: UseGraph, instr: HloInstruction) -> bool:
        if instr.opcode is O.CONSTANT and is_effective_scalar(instr.shape):
            return False
        return g.user_count(instr) >= 2

    def profit(self, g: UseGraph, a: HloInstruction, b: HloInstruction) -> int:
        shared = {o for o in a.operands if self._profitable_operand(g, o)}
        return sum(o.shape.byte_size() for o in dict.fromkeys(b.operands) if o in shared)

    def legal(self, g: UseGraph, reach: Reachability, a: HloInstruction, b: HloInstruction) -> bool:
        if a is b or a.opcode is not O.FUSION or not is_mof_fusible(a) or not is_mof_fusible(b):
            return False
        if len(a.operands) >= MAX_OPERANDS or len(b.operands) >= MAX_OPERANDS:
            return False
        if g.is_dead(a) or g.is_dead(b) or a is g.comp.root or b is g.comp.root:
            return False
        for x in (a, b):
            if x.shape.is_tuple and any(u.opcode is not O.GET_TUPLE_ELEMENT for u in g.users(x)):
                return False
        if reach.reaches(a, b) or reach.reaches(b, a):
            return False
        return _element_shape(a) == _element_shape(b)

    def _best_pair(self, g: UseGraph):
        reach = Reachability(g.comp)
        order = g.comp.post_order()
        position = {x: k for k, x in enumerate(order)}
        heap: list = []
        for instr in order:
            if instr.opcode is not O.FUSION or not is_mof_fusible(instr):
                continue
            for operand in dict.fromkeys(instr.operands):
                if not self._profitable_operand(g, operand):
                    continue
                for user in g.users(operand):
                    if user is instr or (user.opcode is O.FUSION and position[user] > position[instr]):
                        continue  # a later fusion pairs from its own side
                    if not self.legal(g, reach, instr, user):
                        continue
                    profit = self.profit(g, instr, user)
                    if profit > 0:
                        heapq.heappush(heap, (-profit, position[instr], position[user], instr, user))
        if not heap:
            return None
        neg, _, _, a, b = heap[0]
        return a, b, -neg

    def _fuse(self, g: UseGraph, a: HloInstruction, b: HloInstruction, profit: int) -> None:
        remaining, fused = a, b
        if fused.opcode is O.FUSION and fused.shape.is_tuple and not remaining.shape.is_tuple:
            remaining, fused = fused, remaining
        self.decisions.append(f"%{fused.name} merged into %{remaining.name} (shares {profit} bytes of operands)")
        if fused.opcode is O.FUSION:
            merge_fusion_into_multi_output(g, remaining, fused)
        else:
            fuse_into_multi_output(g, remaining, fused)
