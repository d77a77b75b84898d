"""Fusion naming: give fusion instructions the descriptive names XLA:CPU's dumps show.

A fusion is named ``<producer>_<root>_fusion`` after its fused root's opcode and the opcode of the
root's last operand that is neither a parameter nor a constant (``subtract_exponential_fusion``,
``broadcast_maximum_fusion``, ``add_reduce_fusion``); ``<root>_fusion`` when the root reads only
parameters and constants. A multi-output fusion is named after its first output. Names go through the
module's name uniquer, so they stay unique (``..._fusion.1``) and deterministic. Only names change.
"""
from __future__ import annotations

from tfxla_cluster.hlo.ir import HloInstruction, HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.passes.pass_ import HloPass


def fusion_name(fusion: HloInstruction) -> str:
    root = fusion.fused_computation.root
    if root.opcode is O.TUPLE and root.operands:
        root = root.operands[0]
    parts = [root.opcode.text]
    producers = [o for o in root.operands if o.opcode not in (O.PARAMETER, O.CONSTANT)]
    if producers:
        parts.insert(0, producers[-1].opcode.text)
    return "_".join(p.replace("-", "_") for p in parts) + "_fusion"


class FusionNamer(HloPass):
    name = "fusion-namer"

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in module.computation_post_order():
            for instr in comp.instructions:
                if instr.opcode is O.FUSION and (instr.name == "fusion" or instr.name.startswith("fusion.")):
                    instr.name = module.name_uniquer.get_unique_name(fusion_name(instr))
                    changed = True
        return changed
