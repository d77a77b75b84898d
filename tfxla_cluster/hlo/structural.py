"""Structural keys of HLO instructions and computations: equal keys ⇔ the same computation up to names.

Stage: helper of codegen's kernel reuse (``codegen/program.py``): a kernel built for one fusion is reused
for every fusion with the same key, so the key must be exact — two instructions get equal keys only if
every property that can change generated code is equal:

- opcode, shape (element types, dimensions, layout, dynamic dimensions, tuple structure);
- every typed attribute (dimensions, window, dimension numbers, comparison direction and type, fusion
  kind, parameter number, tuple index, ...) and the unmodelled raw attributes, verbatim;
- constants' values, bit for bit (dtype, dimensions and bytes: ``-0.0`` and ``0.0``, NaN payloads differ);
- the operand graph: inside a computation each operand is the position of its instruction in the
  computation's list, and the root's position is part of the computation's key; called computations
  (fused computations, reducers, comparators, branches) by their own keys, recursively.

Names (instructions, computations), metadata and control predecessors are left out: they never change
code. Keys are nested tuples of ints, strings, enums, frozen attribute dataclasses and ``Shape`` s, compared
with ``==`` (no digests, so no collisions); big constants contribute a SHA-256 of their bytes.

An instruction's key (``instruction_key``) describes its operands by their shapes only: code that looks at
an unfused instruction's operands' producers (their opcodes, their values) must key those itself.
"""
from __future__ import annotations

import hashlib
import operator

import numpy as np

from tfxla_cluster.hlo import opcode as ops
from tfxla_cluster.hlo.ir import HloComputation, HloInstruction
from tfxla_cluster.hlo.opcode import HloOpcode as O

# Attributes that do not change what an instruction computes: names, source metadata, placement in its
# computation (operands, callees and the literal are keyed on their own).
_NOT_KEYED = {"name", "operands", "called_computations", "literal", "metadata", "raw_attributes",
              "control_predecessors", "parent"}
_KEYED_FIELDS = tuple(f for f in HloInstruction.__dataclass_fields__ if f not in _NOT_KEYED)
_keyed_values = operator.attrgetter(*_KEYED_FIELDS)

# Constants up to this many bytes are keyed by their bytes, bigger ones by a SHA-256 of them.
_INLINE_LITERAL_BYTES = 256


def literal_key(literal) -> tuple | None:
    """A constant's value, bit for bit (tuples of literals element by element)."""
    if literal is None:
        return None
    if isinstance(literal, tuple):
        return ("tuple",) + tuple(literal_key(x) for x in literal)
    arr = np.ascontiguousarray(literal)
    data = arr.tobytes()
    digest = len(data) > _INLINE_LITERAL_BYTES
    return (arr.dtype.name, arr.dtype.str, arr.shape, digest, hashlib.sha256(data).digest() if digest else data)


def _own_key(instr: HloInstruction, memo: dict) -> tuple:
    """``instr`` without its operands: opcode, shape, attributes, literal, callees."""
    return (_keyed_values(instr), literal_key(instr.literal) if instr.literal is not None else None,
            tuple(instr.raw_attributes.items()) if instr.raw_attributes else (),
            tuple(computation_key(c, memo) for c in instr.called_computations))


def computation_key(comp: HloComputation, memo: dict | None = None) -> tuple:
    """The structural key of ``comp`` (``memo``: id(computation) → key, shared by callers that key many)."""
    if memo is not None:
        known = memo.get(id(comp))
        if known is not None:
            return known[1]
    else:
        memo = {}
    position = {id(i): n for n, i in enumerate(comp.instructions)}
    key = (tuple((_own_key(i, memo), tuple(position[id(o)] for o in i.operands)) for i in comp.instructions),
           position[id(comp.root)] if comp.root is not None else -1)
    memo[id(comp)] = (comp, key)   # the computation is kept so its id is not reused while memo lives
    return key


def instruction_key(instr: HloInstruction, memo: dict | None = None) -> tuple:
    """The structural key of ``instr`` with its operands by shape (see the module docstring)."""
    memo = {} if memo is None else memo
    return (_own_key(instr, memo), tuple(o.shape for o in instr.operands))


def instruction_names(instr: HloInstruction) -> list[str]:
    """``instr``'s name, then its callees' instruction names, in key order: instructions with equal keys
    list corresponding instructions at the same positions."""
    names = [instr.name]
    seen: set[int] = set()
    stack = list(reversed(instr.called_computations))
    while stack:   # depth first, callees in order (no recursive closure: it would be a reference cycle)
        comp = stack.pop()
        if id(comp) in seen:
            continue
        seen.add(id(comp))
        for i in comp.instructions:
            names.append(i.name)
        for i in reversed(comp.instructions):
            stack.extend(reversed(i.called_computations))
    return names


def same_value(u: HloInstruction, v: HloInstruction, depth: int = 8) -> bool:
    """Whether ``u`` and ``v`` are one value once XLA's HloCSE has run: the same instruction, or equal
    instructions (opcode, shape, attributes, literal) of operands that are one value — two ``y[:1]`` slices of
    one ``y`` (their reshapes and broadcasts too). Parameters match only themselves; instructions with
    side effects or called computations never match another; ``depth`` bounds the walk."""
    if u is v:
        return True
    if depth <= 0 or len(u.operands) != len(v.operands) or u.opcode in (O.PARAMETER, O.CUSTOM_CALL) \
            or u.opcode in ops.SIDE_EFFECTING or u.called_computations or v.called_computations:
        return False
    return instruction_key(u) == instruction_key(v) and \
        all(same_value(a, b, depth - 1) for a, b in zip(u.operands, v.operands))


def known_literal(instr: HloInstruction) -> np.ndarray | None:
    """The constant's value, or None if it is not an array constant with a known value."""
    if instr.opcode is not O.CONSTANT or instr.literal_elided or instr.shape.is_tuple:
        return None
    return np.asarray(instr.literal)


def splat_value(instr: HloInstruction) -> np.ndarray | None:
    """The one value of a scalar constant or of a broadcast of one (what LLVM sees as an immediate), as a
    0-d array; else None. (``passes.util.is_all`` asks the wider question: any constant, all elements equal.)"""
    if instr.opcode is O.BROADCAST:
        instr = instr.operands[0]
    lit = known_literal(instr) if instr.shape.rank == 0 else None
    return None if lit is None else lit.reshape(())
