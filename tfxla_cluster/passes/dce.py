"""Dead code elimination (xla/hlo/transforms/simplifiers/hlo_dce.cc).

An instruction is dead if it is not the root of its computation, has no users, is not a parameter and
has no side effect (rng, after-all, side-effecting custom calls, or a call/while/conditional whose
computations contain one). Dead instructions are removed computation by computation in reverse post
order, so removing a user can make its operands dead in the same sweep.

Two more clean-ups, as in XLA:
- multi-output fusions whose tuple outputs are partly unused lose those outputs (the fused root tuple
  shrinks and the get-tuple-element indices are renumbered; one remaining output stops being a tuple),
  and fused parameters left without users are removed together with the matching fusion operands;
- computations no longer reachable from the entry are removed from the module.
"""
from __future__ import annotations

from tfxla_cluster.hlo.ir import HloComputation, HloInstruction, HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import Shape
from tfxla_cluster.passes.pass_ import HloPass
from tfxla_cluster.passes.util import UseGraph, has_side_effect, may_have_dead


def remove_dead_instructions(comp: HloComputation) -> bool:
    """Remove the dead instructions of ``comp`` (see module docstring). Returns whether any went."""
    if not may_have_dead(comp):
        return False
    g = UseGraph(comp)
    changed = False
    for instr in reversed(comp.post_order()):
        if instr.parent is comp and g.is_dead(instr) and instr.opcode is not O.PARAMETER and \
                not has_side_effect(instr):
            changed |= g.remove_if_dead(instr)
    g.finish()
    return changed


def prune_fusion_parameters(g: UseGraph, fusion: HloInstruction) -> bool:
    """Drop fused parameters nobody uses, with their fusion operands; renumber the rest."""
    fused = fusion.fused_computation
    params = fused.parameters
    fused_users = fused.users()
    unused = [p for p in params if not fused_users.get(p) and p is not fused.root]
    if not unused:
        return False
    dead = {id(p) for p in unused}
    fused.instructions = [i for i in fused.instructions if id(i) not in dead]
    for p in unused:
        p.parent = None
    keep = [k for k, p in enumerate(params) if id(p) not in dead]
    for new_number, k in enumerate(keep):
        params[k].parameter_number = new_number
    g.set_operands(fusion, [fusion.operands[k] for k in keep])
    return True


def remove_unused_fusion_outputs(g: UseGraph, fusion: HloInstruction) -> bool:
    """Shrink a multi-output fusion to the tuple outputs that some get-tuple-element still reads."""
    fused = fusion.fused_computation
    root = fused.root
    if root.opcode is not O.TUPLE or not fusion.shape.is_tuple:
        return False
    users = g.users(fusion)
    if any(u.opcode is not O.GET_TUPLE_ELEMENT for u in users) or fusion is g.comp.root:
        return False
    used = sorted({u.tuple_index for u in users})
    if len(used) == len(root.operands) or not used:
        return False
    if len(used) == 1:
        # One output left: the fusion produces it directly and its readers read the fusion.
        fused.root = root.operands[used[0]]
        fusion.shape = fused.root.shape
        for u in users:
            g.replace_all_uses(u, fusion)
            g.remove(u)
    else:
        renumber = {old: new for new, old in enumerate(used)}
        root.operands = [root.operands[k] for k in used]
        root.shape = Shape.tuple_of(o.shape for o in root.operands)
        fusion.shape = root.shape
        for u in users:
            u.tuple_index = renumber[u.tuple_index]
    remove_dead_instructions(fused)
    prune_fusion_parameters(g, fusion)
    return True


class HloDCE(HloPass):
    """XLA's HloDCE; ``remove_computations`` also drops computations nothing calls."""

    name = "dce"

    def __init__(self, remove_computations: bool = True) -> None:
        self.remove_computations = remove_computations

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in reversed(module.computation_post_order()):
            if comp.parent is not module:
                continue
            fusions = [i for i in comp.instructions if i.opcode is O.FUSION]
            if fusions:
                g = UseGraph(comp)
                for f in fusions:
                    changed |= remove_unused_fusion_outputs(g, f)
                g.finish()
            changed |= remove_dead_instructions(comp)
        if self.remove_computations:
            changed |= module.remove_unused_computations()
        return changed
