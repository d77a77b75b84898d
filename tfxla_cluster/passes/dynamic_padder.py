"""The HLO side of XLA's dynamic padder: a module with bounded dynamic shapes becomes a static one.

Stage: HLO passes (the first of the CPU pipeline, as XLA's ``DynamicPadder`` runs before the
simplifiers). The lowering already did the padder's real work on bounded dynamic values
(tf2hlo/dynamic_padder.py masks reductions with ``select(iota < size, x, identity)``, and a cluster
result carries its run-time size as a further tuple element that the launch cuts by), so what is left
here is the bookkeeping: every ``set-dimension-size`` is replaced by its operand (the padded array), and
every shape loses its dynamic-dimension flags (the bound becomes the static size). Afterwards no
instruction has a dynamic shape, which is what the passes, the evaluator and the code generator expect.
"""
from __future__ import annotations

from tfxla_cluster.hlo.ir import HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.passes.pass_ import HloPass


class DynamicPadder(HloPass):
    name = "dynamic-padder"

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in module.computations:
            for instr in list(comp.instructions):
                if instr.opcode is O.SET_DIMENSION_SIZE:
                    comp.replace_all_uses(instr, instr.operands[0])
                    comp.remove_instruction(instr)
                    changed = True
            for instr in comp.instructions:
                if instr.shape is not None and instr.shape.is_dynamic:
                    instr.shape = instr.shape.to_static()
                    changed = True
        return changed


def has_dynamic_shapes(module: HloModule) -> bool:
    """Whether any instruction of ``module`` has a bounded dynamic shape (or is a set-dimension-size)."""
    return any(i.opcode is O.SET_DIMENSION_SIZE or (i.shape is not None and i.shape.is_dynamic)
               for c in module.computations for i in c.instructions)
