"""ReshapeMover (XLA's ``reshape-mover``, run in XLA:CPU's simplification fixed point).

Sinks reshapes and transposes ("rearranges") below elementwise instructions: ``add(reshape(a),
reshape(b))`` becomes ``reshape(add(a, b))`` when every operand is either an equivalent rearrange or
something that trivially takes the inverse shape (a constant, a single-use rng, a broadcast of a scalar,
or — for a transpose — a broadcast whose dimensions keep their order). Moving them down lets algsimp cancel
them against each other and keeps a rank change out of the middle of a loop fusion (XLA's fusion emitters
index a fusion through its root's shape; TF's XLA gives ``compare(f32[1]) -> bitcast pred[]`` where a
scalar compare of a bitcast would otherwise sit inside the fusion).

Guarantee, as XLA: an instruction is moved only if every user of each of its rearrange operands is moved
too, so no rearrange is duplicated; one run sinks as far as XLA's repeated runs would (not one level per run); only non-fusion computations are visited; with
``reshape_of_1d_broadcast_is_cheap`` false (XLA:CPU's setting) a reshape of a broadcast is trivial only when
the broadcast's operand is a scalar.
"""
from __future__ import annotations

from tfxla_cluster.hlo.ir import HloComputation, HloInstruction, HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import Shape
from tfxla_cluster.passes.pass_ import HloPass
from tfxla_cluster.passes.util import UseGraph, new_instruction, non_fusion_computations

_REARRANGES = frozenset({O.RESHAPE, O.TRANSPOSE})


def _is_rearrange(instr: HloInstruction) -> bool:
    return instr.opcode in _REARRANGES


def _inverse(perm) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def _equivalent(a: HloInstruction, b: HloInstruction) -> bool:
    """Same kind of rearrange between the same dimensions (element types may differ)."""
    if a.opcode is not b.opcode or a.shape.dimensions != b.shape.dimensions:
        return False
    if a.opcode is O.TRANSPOSE:
        return tuple(a.dimensions) == tuple(b.dimensions)
    return a.operands[0].shape.dimensions == b.operands[0].shape.dimensions


class ReshapeMover(HloPass):
    """``reshape-mover``: sink equivalent reshapes/transposes below elementwise users."""

    name = "reshape-mover"

    def __init__(self, reshape_of_1d_broadcast_is_cheap: bool = False) -> None:
        self.reshape_of_1d_broadcast_is_cheap = reshape_of_1d_broadcast_is_cheap

    # ---------------------------------------------------------------- policy
    def _trivially_rearranges(self, g: UseGraph, instr: HloInstruction, rearrange: HloInstruction) -> bool:
        """Can ``instr`` take the inverse of ``rearrange`` for free?"""
        src = rearrange.operands[0]
        if rearrange.opcode is O.RESHAPE and rearrange.shape == src.shape:
            return True                                      # a no-op reshape
        if rearrange.opcode is O.TRANSPOSE and list(rearrange.dimensions) == sorted(rearrange.dimensions):
            return True                                      # an identity transpose
        if instr.opcode is O.CONSTANT:
            return True
        if instr.opcode is O.RNG and g.user_count(instr) == 1:
            return True
        if instr.opcode is O.BROADCAST:
            dims = list(instr.dimensions or ())
            if dims != sorted(dims):
                return False                                 # really a transpose: XLA refuses it too
            if rearrange.opcode is O.RESHAPE:
                operand = instr.operands[0].shape
                if operand.rank == 0:
                    return True
                if self.reshape_of_1d_broadcast_is_cheap and sum(d != 1 for d in operand.dimensions) <= 1:
                    return True
                return False
            # transpose(broadcast(x)) is a broadcast when the broadcast dims keep their relative order.
            moved = [rearrange.dimensions[d] for d in dims]
            return moved == sorted(moved)
        return False

    def _first_nontrivial(self, g: UseGraph, operands) -> HloInstruction | None:
        for op in operands:
            if _is_rearrange(op) and not self._trivially_rearranges(g, op.operands[0], op):
                return op
        return None

    def _is_candidate(self, g: UseGraph, instr: HloInstruction) -> bool:
        if not instr.is_elementwise() or not instr.operands:
            return False
        rearrange = self._first_nontrivial(g, instr.operands)
        if rearrange is None:
            return False
        return all(_equivalent(op, rearrange) if _is_rearrange(op)
                   else self._trivially_rearranges(g, op, rearrange) for op in instr.operands)

    # ---------------------------------------------------------------- mechanism
    def _inverse_of(self, g: UseGraph, rearrange: HloInstruction, operand: HloInstruction) -> HloInstruction:
        if _is_rearrange(operand) and _equivalent(operand, rearrange):
            # The rearrange itself (or its twin): take its operand, never rearrange(inverse(rearrange(x))).
            # Without this, repeated rounds stack transpose pairs that only algsimp would cancel, forever.
            return operand.operands[0]
        if rearrange.opcode is O.RESHAPE:
            src = rearrange.operands[0].shape
            shape = Shape.array(operand.shape.element_type, src.dimensions, src.minor_to_major)
            if operand.shape == shape:
                return operand
            if operand.opcode is O.RESHAPE and operand.operands[0].shape == shape:
                return operand.operands[0]
            return g.make(O.RESHAPE, [operand], shape)
        if list(rearrange.dimensions) == sorted(rearrange.dimensions):
            return operand
        return g.make(O.TRANSPOSE, [operand], None, dimensions=tuple(_inverse(rearrange.dimensions)))

    def _sink(self, g: UseGraph, instr: HloInstruction) -> None:
        rearrange = self._first_nontrivial(g, instr.operands)
        assert rearrange is not None
        operands = [self._inverse_of(g, rearrange, op) for op in instr.operands]
        src = rearrange.operands[0].shape
        shape = Shape.array(instr.shape.element_type, src.dimensions, src.minor_to_major)
        moved = instr.clone(operands)
        moved.shape = shape
        g.add(moved)
        # The moved instruction keeps its name (uniquified); the new rearrange gets a fresh one and the
        # replaced instruction's metadata (XLA's ReplaceWithNewInstruction).
        if rearrange.opcode is O.RESHAPE:
            back = new_instruction(O.RESHAPE, [moved], instr.shape, like=instr)
        else:
            back = new_instruction(O.TRANSPOSE, [moved], instr.shape, like=instr,
                                   dimensions=tuple(rearrange.dimensions))
        g.add(back)
        g.replace(instr, back)

    def _run_on_computation(self, comp: HloComputation, g: UseGraph) -> bool:
        """One round: sink every candidate of ``comp`` one level (``g``: its use graph, kept across rounds)."""
        # Most computations have no elementwise user of a reshape/transpose: nothing more is looked at.
        readers = {i for i in comp.instructions if i.is_elementwise() and any(map(_is_rearrange, i.operands))}
        if not readers:
            return False
        candidates = {i: None for i in comp.post_order() if i in readers and self._is_candidate(g, i)}
        removed = True
        # A rearrange with a user outside the set would stay behind: drop all its users (XLA's loop).
        while candidates and removed:
            rearranges = {op: None for i in candidates for op in i.operands if _is_rearrange(op)}
            removed = False
            for op in rearranges:
                users = g.users(op)
                if any(u not in candidates for u in users):
                    for u in users:
                        if u in candidates:
                            del candidates[u]
                            removed = True
        if not candidates:
            return False
        for instr in candidates:
            self._sink(g, instr)
        g.finish()
        return True

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in non_fusion_computations(module):
            # XLA moves each rearrange one instruction down per run and leaves the rest to the simplification
            # fixed point; a rearrange feeding a long elementwise chain (the scalar Philox key arithmetic of
            # stateless RNG) then took every one of its 25 iterations. Sinking until nothing moves gives the
            # fixed point XLA's loop converges to, in one run. Each round moves rearranges toward the roots of a
            # DAG, so it ends within as many rounds as the computation has instructions (the guard). The rounds
            # share one use graph (built on its first use): what a round asks of it (user counts, the users of
            # a rearrange) does not depend on the order of an instruction's users, which edits change.
            g = UseGraph(comp)
            for _ in range(len(comp.instructions) + 1):
                if not self._run_on_computation(comp, g):
                    break
                changed = True
        return changed
