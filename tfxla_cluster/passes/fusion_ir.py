"""Building and editing fusion instructions (HloInstruction::CreateFusion / FuseInstruction /
FuseInstructionIntoMultiOutput / MergeFusionInstructionIntoMultiOutput).

A fusion instruction's operands are unique; fused parameter k stands for operand k. Fusing a producer
clones it into the fused computation: the producer's own operands become fusion operands (reusing the
parameter when the operand is already one, appending otherwise), the parameter that stood for the
producer is replaced by the clone and removed, and the parameters after it are renumbered. A producer
with users outside the fusion stays where it is (it is duplicated); the caller removes it when dead.

Multi-output fusion makes the fused root a ``tuple`` and the fusion's users read it through
``get-tuple-element``. Fused computations are added to the module at once, so every fused instruction
gets a module-unique name.
"""
from __future__ import annotations

from tfxla_cluster.hlo import attrs as A
from tfxla_cluster.hlo.ir import HloComputation, HloInstruction
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import Shape
from tfxla_cluster.passes.util import UseGraph


def _param(fused: HloComputation, number: int, shape: Shape) -> HloInstruction:
    p = HloInstruction(f"param_{number}", O.PARAMETER, shape, parameter_number=number)
    return fused.add_instruction(p)


def params_by_number(fused: HloComputation) -> list[HloInstruction]:
    return fused.parameters


def create_fusion(g: UseGraph, consumer: HloInstruction, kind: A.FusionKind) -> HloInstruction:
    """Replace ``consumer`` by a fusion instruction whose fused computation computes it."""
    module = g.comp.parent
    fused = HloComputation("fused_computation")
    fused.is_fusion_computation = True
    module.add_computation(fused)
    operands: list[HloInstruction] = []
    mapping: dict[int, HloInstruction] = {}
    for op in consumer.operands:
        if id(op) not in mapping:
            mapping[id(op)] = _param(fused, len(operands), op.shape)
            operands.append(op)
    clone = fused.add_instruction(consumer.clone([mapping[id(o)] for o in consumer.operands]))
    fused.set_root(clone)
    fusion = HloInstruction("fusion", O.FUSION, consumer.shape, operands, called_computations=[fused],
                            fusion_kind=kind, metadata=consumer.metadata)
    g.add(fusion)
    g.replace_all_uses(consumer, fusion)
    g.remove(consumer)
    return fusion


def _operand_param(fusion: HloInstruction, g: UseGraph, op: HloInstruction,
                   params: list[HloInstruction] | None = None) -> HloInstruction:
    """The fused parameter for outer ``op``, adding a new fusion operand if needed. ``params``: the fused
    parameters by number, if the caller has them (kept up to date here)."""
    fused = fusion.fused_computation
    if op in fusion.operands:   # (instructions compare by identity)
        k = fusion.operands.index(op)
        return params[k] if params is not None else fused.parameter(k)
    p = _param(fused, len(fusion.operands), op.shape)
    if params is not None:
        params.append(p)
    g.append_operand(fusion, op)
    return p


class FusedIndex:
    """The parameters of one fused computation by number, and the fused instructions that read each
    one: what ``fuse_instruction`` looks up, kept current by it so that fusing into a large fusion does
    not walk its whole computation. Valid while only ``fuse_instruction`` (given this index) edits it."""

    def __init__(self, fused: HloComputation) -> None:
        self.params = fused.parameters
        self.readers: dict[HloInstruction, list[HloInstruction]] = {p: [] for p in self.params}
        for instr in fused.instructions:
            for op in dict.fromkeys(instr.operands):
                if op.opcode is O.PARAMETER:
                    self.readers.setdefault(op, []).append(instr)


def _remove_param(g: UseGraph, fusion: HloInstruction, number: int, params: list[HloInstruction]) -> None:
    """Remove fused parameter ``number`` (``params``: the parameters by number, updated) and its fusion
    operand."""
    fused = fusion.fused_computation
    param = params[number]
    k = fused.instructions.index(param)
    del fused.instructions[k]   # (in place: the list of a large fusion is long)
    param.parent = None
    for p in params[number + 1:]:
        p.parameter_number -= 1
    del params[number]
    g.remove_operand_at(fusion, number)


def _replace_in(comp: HloComputation, old: HloInstruction, new: HloInstruction,
                readers: list[HloInstruction] | None = None) -> None:
    """Every instruction of ``comp`` (``readers``: those that read ``old``, if known) reads ``new``."""
    for instr in comp.instructions if readers is None else readers:
        if instr is not new and old in instr.operands:   # (a C-level identity test: fusions grow large)
            instr.operands = [new if o is old else o for o in instr.operands]
    if comp.root is old:
        comp.root = new


def fuse_instruction(g: UseGraph, fusion: HloInstruction, producer: HloInstruction,
                     index: FusedIndex | None = None) -> HloInstruction:
    """Clone ``producer`` (an operand of ``fusion``) into the fusion; returns the clone. ``index``: the
    fusion's ``FusedIndex``, if the caller keeps one (it is updated)."""
    fused = fusion.fused_computation
    number = fusion.operands.index(producer)
    # by number (0..n-1): one walk of the fused computation, not one per lookup
    params = index.params if index is not None else fused.parameters
    param = params[number]
    new_ops = [_operand_param(fusion, g, op, params) for op in producer.operands]
    clone = fused.add_instruction(producer.clone(new_ops))
    if index is None:
        _replace_in(fused, param, clone)
    else:
        readers = index.readers
        _replace_in(fused, param, clone, readers.pop(param, []))
        for op in dict.fromkeys(new_ops):
            readers.setdefault(op, []).append(clone)
    _remove_param(g, fusion, number, params)
    return clone


def get_tuple_element(g: UseGraph, t: HloInstruction, index: int, like: HloInstruction) -> HloInstruction:
    return g.make(O.GET_TUPLE_ELEMENT, [t], t.shape.tuple_shapes[index], like=like, tuple_index=index,
                  name="get-tuple-element")


def _make_multi_output(g: UseGraph, fusion: HloInstruction) -> None:
    """Turn a single-output fusion into one with a tuple root; its users read element 0."""
    fused = fusion.fused_computation
    if fused.root.opcode is O.TUPLE and fusion.shape.is_tuple:
        return
    old_users = g.users(fusion)
    was_root = g.comp.root is fusion
    root = fused.root
    tup = fused.add_instruction(HloInstruction("tuple", O.TUPLE, Shape.tuple_of([root.shape]), [root]))
    fused.set_root(tup)
    fusion.shape = tup.shape
    gte = get_tuple_element(g, fusion, 0, fusion)
    for u in old_users:
        g.replace_operand(u, fusion, gte)
    if was_root:
        g.comp.root = gte


def _append_output(g: UseGraph, fusion: HloInstruction, value: HloInstruction) -> int:
    fused = fusion.fused_computation
    tup = fused.root
    tup.operands = tup.operands + [value]
    tup.shape = Shape.tuple_of([o.shape for o in tup.operands])
    fusion.shape = tup.shape
    return len(tup.operands) - 1


def fuse_into_multi_output(g: UseGraph, fusion: HloInstruction, producer: HloInstruction) -> None:
    """Fuse ``producer`` into ``fusion`` as an extra output; the producer's users read it from there."""
    _make_multi_output(g, fusion)
    outer_users = [u for u in g.users(producer) if u is not fusion]
    was_root = g.comp.root is producer
    if producer in fusion.operands:
        clone = fuse_instruction(g, fusion, producer)
    else:
        fused = fusion.fused_computation
        clone = fused.add_instruction(producer.clone([_operand_param(fusion, g, op) for op in producer.operands]))
    index = _append_output(g, fusion, clone)
    gte = get_tuple_element(g, fusion, index, producer)
    for u in outer_users:
        g.replace_operand(u, producer, gte)
    if was_root:
        g.comp.root = gte
    g.remove(producer)


def merge_fusion_into_multi_output(g: UseGraph, fusion: HloInstruction, other: HloInstruction) -> None:
    """Merge the fusion ``other`` (a sibling) into ``fusion``: its fused instructions are copied over,
    its outputs appended to ``fusion``'s tuple, and its users redirected."""
    _make_multi_output(g, fusion)
    fused, src = fusion.fused_computation, other.fused_computation
    mapping: dict[int, HloInstruction] = {}
    for instr in src.post_order():
        if instr.opcode is O.PARAMETER:
            mapping[id(instr)] = _operand_param(fusion, g, other.operands[instr.parameter_number])
        else:
            mapping[id(instr)] = fused.add_instruction(instr.clone([mapping[id(o)] for o in instr.operands]))
    src_root = src.root
    if src_root.opcode is O.TUPLE and other.shape.is_tuple:
        outputs = [mapping[id(o)] for o in src_root.operands]
        indices = [_append_output(g, fusion, o) for o in outputs]
        for u in g.users(other):
            new_index = indices[u.tuple_index]
            g.replace_operand(u, other, fusion)
            u.tuple_index = new_index
        if g.comp.root is other:
            g.comp.root = g.make(O.TUPLE, [get_tuple_element(g, fusion, k, other) for k in indices], like=other)
    else:
        index = _append_output(g, fusion, mapping[id(src_root)])
        gte = get_tuple_element(g, fusion, index, other)
        for u in g.users(other):
            g.replace_operand(u, other, gte)
        if g.comp.root is other:
            g.comp.root = gte
    g.remove(other)
    # The dropped fusion's computation is unreachable now; DCE removes it from the module.
