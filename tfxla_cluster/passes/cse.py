"""Common subexpression elimination (xla/service/hlo_cse.cc).

Per computation, two steps:
1. Constants and iotas are de-duplicated first (``CombineConstants``): two constants with the same
   shape (layout included) and the same literal bytes, or two iotas with the same shape and iota
   dimension, become one — the earlier in the instruction list is kept. Constants whose contents are
   unknown (XLA's elided ``{...}``) are never merged.
2. A post-order walk over the other instructions that have operands and no side effect: each one is
   keyed by its opcode, shape, operands (sorted for commutative binary ops, so ``add(a,b)`` and
   ``add(b,a)`` meet), attributes (not metadata, frontend attributes or backend config) and the
   structure of the computations it calls (so two separately built but identical reducers match, like
   XLA's ``eq_computations``). An instruction whose key was seen replaces nothing and is replaced by the
   earlier one; operands it leaves dead are removed.
Guarantee: the module computes the same values; only exact duplicates are merged.
"""
from __future__ import annotations

from tfxla_cluster.hlo import opcode as ops
from tfxla_cluster.hlo.ir import HloComputation, HloInstruction, HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.structural import known_literal
from tfxla_cluster.hlo.printer import attributes_text
from tfxla_cluster.hlo.shape import Shape
from tfxla_cluster.passes.pass_ import HloPass
from tfxla_cluster.passes.util import UseGraph, has_side_effect

_IGNORED_RAW = ("frontend_attributes=", "backend_config=", "parameter_replication=", "sharding=")


def attribute_key(instr: HloInstruction) -> tuple[str, ...]:
    """The instruction's attributes as text, without called-computation names and ignored raw attributes."""
    return tuple(a for a in attributes_text(instr)
                 if "%" not in a and not a.startswith(_IGNORED_RAW))


def literal_key(instr: HloInstruction):
    lit = known_literal(instr)
    if lit is None:
        return ("unknown", id(instr))
    return (str(lit.dtype), lit.shape, lit.tobytes())


class _Fingerprints:
    """Structural keys of computations (equal keys = computations that compute the same thing)."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple] = {}

    def of(self, comp: HloComputation) -> tuple:
        key = self._memo.get(id(comp))
        if key is None:
            order = comp.post_order()
            index = {id(i): k for k, i in enumerate(order)}
            key = tuple((i.opcode, str(i.shape), tuple(index[id(o)] for o in i.operands), attribute_key(i),
                         literal_key(i) if i.opcode is O.CONSTANT else None, i.parameter_number,
                         tuple(self.of(c) for c in i.called_computations), i is comp.root)
                        for i in order)
            self._memo[id(comp)] = key
        return key


def shape_key(shape: Shape, layout_sensitive: bool):
    """Equal for two shapes exactly when their texts are (with the layout, or without it): hashing the
    shape's fields is several times cheaper than printing it."""
    if layout_sensitive:
        return shape   # Shape equality is its text's: element type, dimensions (dynamic too), layout
    if shape.is_tuple:
        return ("tuple", tuple([shape_key(s, False) for s in shape.tuple_shapes]))
    return (shape.element_type, shape.dimensions, shape.dynamic_dimensions)


def instruction_key(instr: HloInstruction, fp: _Fingerprints | None, layout_sensitive: bool) -> tuple:
    """What two instructions that compute the same value share; without ``fp``, the structure of the
    computations they call is left out (``calls_key`` adds it)."""
    operands = [id(o) for o in instr.operands]
    if instr.opcode in ops.COMMUTATIVE and len(operands) == 2:
        operands.sort()
    key = (instr.opcode, shape_key(instr.shape, layout_sensitive), tuple(operands), attribute_key(instr))
    return key if fp is None else key + (calls_key(instr, fp),)


def calls_key(instr: HloInstruction, fp: _Fingerprints) -> tuple:
    return tuple(fp.of(c) for c in instr.called_computations)


def combine_constants(g: UseGraph, layout_sensitive: bool) -> bool:
    seen: dict[tuple, HloInstruction] = {}
    changed = False
    for instr in list(g.comp.instructions):
        if instr.opcode is O.CONSTANT:
            kind = "constant"
        elif instr.opcode is O.IOTA:
            kind = "iota"
        else:
            continue
        if instr.parent is not g.comp:
            continue
        shape = shape_key(instr.shape, layout_sensitive)
        key = (kind, shape, literal_key(instr) if kind == "constant" else instr.iota_dimension)
        rep = seen.setdefault(key, instr)
        if rep is not instr and instr is not g.comp.root:
            g.replace(instr, rep)
            changed = True
    return changed


def _same_calls(earlier: list[HloInstruction], instr: HloInstruction, fp: _Fingerprints) -> HloInstruction:
    """The first of ``earlier`` (instructions with ``instr``'s key but for the callees) whose callees have
    the structure of ``instr``'s, else ``instr`` (added to ``earlier``)."""
    if earlier:
        mine = calls_key(instr, fp)
        for rep in earlier:
            if calls_key(rep, fp) == mine:
                return rep
    earlier.append(instr)
    return instr


class HloCSE(HloPass):
    """XLA's HloCSE. ``layout_sensitive`` compares layouts too (after layout assignment)."""

    name = "cse"

    def __init__(self, layout_sensitive: bool = False, only_fusion_computations: bool = False) -> None:
        self.layout_sensitive = layout_sensitive
        self.only_fusion_computations = only_fusion_computations

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        fp = _Fingerprints()
        for comp in module.computation_post_order():
            if self.only_fusion_computations and not comp.is_fusion_computation:
                continue
            g = UseGraph(comp)
            changed |= combine_constants(g, self.layout_sensitive)
            table: dict[tuple, HloInstruction] = {}
            # Instructions that call computations (fusions, reduces), by their key without the callees:
            # the callees' structure is compared only between instructions that agree on the rest (a
            # training step's thousands of fusions would otherwise each fingerprint their computation).
            calling: dict[tuple, list[HloInstruction]] = {}
            for instr in comp.post_order():
                if instr.parent is not comp or not instr.operands or has_side_effect(instr):
                    continue
                key = instruction_key(instr, None, self.layout_sensitive)
                if instr.called_computations:
                    rep = _same_calls(calling.setdefault(key, []), instr, fp)
                else:
                    rep = table.setdefault(key, instr)
                if rep is not instr:
                    g.replace(instr, rep)
                    changed = True
            g.finish()
        return changed
