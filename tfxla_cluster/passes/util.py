"""IR mutation helpers shared by the passes (what XLA keeps on HloInstruction/HloComputation).

``UseGraph`` keeps the users of every instruction of one computation up to date while a pass edits it:
adding instructions, replacing uses (``ReplaceAllUsesWith``), and removing instructions that became
dead together with their dead operands (``RemoveInstructionAndUnusedOperands``). Removal is lazy —
the removed instruction loses its parent at once and ``finish()`` drops it from the list — so a pass
can walk a snapshot of the post order and skip what is gone (``instr.parent is None``).

Also here: literal predicates (``is_all``: XLA's ``IsAll`` that looks through broadcasts),
``has_side_effect``, ``make_scalar_like`` and small shape utilities.
"""
from __future__ import annotations

import operator
from itertools import chain
from typing import Iterable

import numpy as np

from tfxla_cluster.errors import InternalError
from tfxla_cluster.hlo import opcode as ops
from tfxla_cluster.hlo.ir import HloComputation, HloInstruction, HloModule
from tfxla_cluster.hlo.literal import make_literal
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.structural import known_literal
from tfxla_cluster.hlo.shape import PrimitiveType, Shape
from tfxla_cluster.hlo.shape_inference import infer_shape


# ---------------------------------------------------------------- predicates
def has_side_effect(instr: HloInstruction, _seen: set[int] | None = None) -> bool:
    """HloInstruction::HasSideEffect: the opcode is side-effecting, a custom call is marked so, or a
    called computation (other than a fusion's, which cannot hold one) contains such an instruction."""
    if instr.opcode in ops.SIDE_EFFECTING:
        return True
    if instr.opcode is O.CUSTOM_CALL and instr.raw_attributes.get("custom_call_has_side_effect") == "true":
        return True
    if not instr.called_computations:
        return False
    seen = set() if _seen is None else _seen
    for comp in instr.called_computations:
        if id(comp) in seen:
            continue
        seen.add(id(comp))
        if any(has_side_effect(i, seen) for i in comp.instructions):
            return True
    return False


def is_effective_scalar(shape: Shape) -> bool:
    return shape.is_array and not shape.is_token and shape.num_elements == 1


# (value, its type, dtype, float?) -> what ``is_all`` compares with: passes ask about 0 and 1 thousands of times.
_IS_ALL_TARGETS: dict[tuple, tuple] = {}


def _is_all_target(value, dtype: np.dtype, is_float: bool) -> tuple:
    """``value`` as ``dtype``; for floats also the unsigned dtype of the same size, the bits ``is_all`` wants,
    and (0 only) the mask that clears the sign bit: ``(v, uint or None, want, mask or None)``."""
    key = (value, type(value), dtype, is_float)
    try:
        got = _IS_ALL_TARGETS.get(key)
    except TypeError:   # (an unhashable value: made each time)
        key, got = None, None
    if got is None:
        with np.errstate(all="ignore"):
            v = np.asarray(value).astype(dtype)
        got = (v, None, None, None)
        if is_float:
            uint = np.dtype(f"u{dtype.itemsize}")
            got = (v, uint, v.view(uint), None)
            if v == 0:
                got = (v, uint, 0, ~(uint.type(1) << uint.type(8 * uint.itemsize - 1)))
        if key is not None:
            _IS_ALL_TARGETS[key] = got
    return got


def is_all(instr: HloInstruction, value) -> bool:
    """XLA's ``IsAll``: a constant (possibly under broadcasts) whose every element equals ``value``."""
    while instr.opcode is O.BROADCAST:
        instr = instr.operands[0]
    lit = known_literal(instr)
    if lit is None or lit.size == 0:
        return False
    v, uint, want, sign_free = _is_all_target(value, lit.dtype, instr.shape.element_type.is_float)
    if uint is not None:
        # XLA's literal compare is IEEE ``==`` in a compile that runs without DAZ: a denormal is not 0
        # (here the compiling thread may have DAZ set, under which numpy's ``==`` would say it is), ±0 are
        # equal. ``value`` is a small integer, so compare bits, the sign bit ignored for 0.
        bits = lit.view(uint)
        if sign_free is not None:
            bits = bits & sign_free
        if not bits.flat[0] == want:
            return False
        return bool((bits == want).all())
    if instr.shape.element_type.is_complex:
        # XLA's literal compare of complex elements is a memcmp: (1, -0) is not 1, as its IEEE == would say.
        uint = np.dtype(f"u{lit.dtype.itemsize // 2}")
        bits, want = lit.reshape(-1).view(uint).reshape(-1, 2), v.reshape(1).view(uint)
        return bool((bits == want).all())
    if not lit.flat[0] == v:   # most constants differ at their first element: no whole-array compare
        return False
    return bool((lit == v).all())


def is_constant(instr: HloInstruction) -> bool:
    return instr.opcode is O.CONSTANT


def is_broadcast_of_constant(instr: HloInstruction) -> bool:
    return instr.opcode is O.BROADCAST and instr.operands[0].opcode is O.CONSTANT


def is_scalar_constant(instr: HloInstruction) -> bool:
    """A constant with one element (XLA's ConstantEffectiveScalar)."""
    return instr.opcode is O.CONSTANT and is_effective_scalar(instr.shape)


def same_shape(a: HloInstruction, b: HloInstruction) -> bool:
    """Shapes equal ignoring layout (the non-layout-sensitive ``SameShape``)."""
    return a.shape.compatible(b.shape)


def dims_unmodified_by_reshape(src: Shape, dst: Shape) -> list[tuple[int, int]]:
    """(input dim, output dim) pairs a reshape keeps as they are (ShapeUtil::DimensionsUnmodifiedByReshape).

    Degenerate (size-1) dimensions are set aside; the rest of both shapes is cut where the running
    element counts agree, and a dimension is unmodified when it is alone in its piece on both sides.
    """
    if 0 in src.dimensions or 0 in dst.dimensions:
        return []
    a = [(k, d) for k, d in enumerate(src.dimensions) if d != 1]
    b = [(k, d) for k, d in enumerate(dst.dimensions) if d != 1]
    pairs: list[tuple[int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        i0, j0 = i, j
        pa, pb = a[i][1], b[j][1]
        while pa != pb:
            if pa < pb:
                i += 1
                pa *= a[i][1]
            else:
                j += 1
                pb *= b[j][1]
        if i == i0 and j == j0:
            pairs.append((a[i][0], b[j][0]))
        i, j = i + 1, j + 1
    return pairs


def reshape_inserts_or_deletes_degenerate_dims(src: Shape, dst: Shape) -> tuple[bool, list[int], list[int]]:
    """(only 1-sized dims added/removed?, deleted src dims, inserted dst dims)
    (HloInstruction::ReshapeMerelyInsertsOrDeletes1SizedDimensions)."""
    a = [d for d in src.dimensions if d != 1]
    b = [d for d in dst.dimensions if d != 1]
    if a != b:
        return False, [], []
    deleted = [k for k, d in enumerate(src.dimensions) if d == 1]
    inserted = [k for k, d in enumerate(dst.dimensions) if d == 1]
    return True, deleted, inserted


# ---------------------------------------------------------------- building
def new_instruction(opcode: O, operands: Iterable[HloInstruction], shape: Shape | None = None, *,
                    name: str | None = None, like: HloInstruction | None = None, **fields) -> HloInstruction:
    """A detached instruction; the shape is inferred unless given; metadata comes from ``like``."""
    instr = HloInstruction(name or opcode.text, opcode, shape, list(operands), **fields)
    inferred = infer_shape(instr)
    if shape is None:
        instr.shape = inferred
    elif not shape.compatible(inferred):
        raise InternalError(f"{opcode.text}: shape {shape} does not match operands ({inferred})")
    if like is not None and instr.metadata is None:
        instr.metadata = like.metadata
    return instr


def constant_instruction(value, element_type: PrimitiveType, dims=(), name: str | None = None,
                         like: HloInstruction | None = None) -> HloInstruction:
    shape = Shape.array(element_type, dims)
    return new_instruction(O.CONSTANT, (), shape, name=name, like=like, literal=make_literal(value, shape))


_control_predecessors = operator.attrgetter("control_predecessors")
_opcode = operator.attrgetter("opcode")
_operands = operator.attrgetter("operands")


def has_opcode(comp: HloComputation, opcode: O) -> bool:
    """Whether an instruction of ``comp`` has ``opcode`` (a pass's cheap test before its walk)."""
    return opcode in map(_opcode, comp.instructions)


def may_have_dead(comp: HloComputation) -> bool:
    """Whether ``comp`` has an instruction that nothing uses and that is neither its root nor a parameter
    (without one, DCE has nothing to remove)."""
    unused = set(comp.instructions).difference(chain.from_iterable(map(_operands, comp.instructions)))
    unused.discard(comp.root)
    return any(i.opcode is not O.PARAMETER for i in unused)


class UseGraph:
    """Users of every instruction of ``comp``, kept current across edits (see module docstring).

    The users are found on the graph's first use, not when it is made: a pass makes one per computation
    and often finds nothing to ask it (a fixed point's later iterations), and a large entry's users cost
    one dict entry per operand edge. A pass edits the computation through its graph once it has one.
    """

    def __init__(self, comp: HloComputation) -> None:
        self.comp = comp
        self._removed = False

    def __getattr__(self, name: str):
        # Called only while ``_users`` / ``_any_control`` are unset: build both, then normal lookup serves.
        if name not in ("_users", "_any_control"):
            raise AttributeError(name)
        instructions = self.comp.instructions
        users: dict[HloInstruction, dict[HloInstruction, None]] = {i: {} for i in instructions}
        for instr in instructions:
            for op in instr.operands:
                # (an operand outside the list is a malformed module's; it gets an entry as before)
                d = users.get(op)
                if d is None:
                    d = users[op] = {}
                d[instr] = None
        self._users = users
        self._any_control = any(map(_control_predecessors, instructions))
        return self._users if name == "_users" else self._any_control

    # ---- queries
    def users(self, instr: HloInstruction) -> list[HloInstruction]:
        return list(self._users.get(instr, ()))

    def user_count(self, instr: HloInstruction) -> int:
        return len(self._users.get(instr, ()))

    def is_dead(self, instr: HloInstruction) -> bool:
        return not self._users.get(instr) and instr is not self.comp.root

    # ---- edits
    def add(self, instr: HloInstruction) -> HloInstruction:
        users = self._users
        self.comp.add_instruction(instr)
        users.setdefault(instr, {})
        for op in instr.operands:
            users.setdefault(op, {})[instr] = None
        return instr

    def make(self, opcode: O, operands, shape: Shape | None = None, *, like: HloInstruction | None = None,
             name: str | None = None, **fields) -> HloInstruction:
        return self.add(new_instruction(opcode, operands, shape, like=like, name=name, **fields))

    def set_operands(self, instr: HloInstruction, operands: list[HloInstruction]) -> None:
        # ``instr`` moves to the end of every operand's users (passes' visiting orders depend on it).
        users = self._users
        for op in instr.operands:
            d = users.get(op)
            if d is not None:
                d.pop(instr, None)
        instr.operands = list(operands)
        for op in operands:
            d = users.get(op)
            if d is None:
                d = users[op] = {}
            d[instr] = None

    def replace_operand(self, user: HloInstruction, old: HloInstruction, new: HloInstruction) -> None:
        """``user`` reads ``new`` wherever it read ``old`` (XLA's ReplaceOperandWith: only the users of
        ``old`` and ``new`` change, so a wide tuple's other operands are not touched)."""
        users = self._users   # (first: a lazy graph is built from the operands as they were)
        if old is new or old not in user.operands:
            return
        user.operands = [new if o is old else o for o in user.operands]
        d = users.get(old)
        if d is not None:
            d.pop(user, None)
        d = users.get(new)
        if d is None:
            d = users[new] = {}
        d[user] = None

    def append_operand(self, instr: HloInstruction, op: HloInstruction) -> None:
        """``instr`` also reads ``op``, last (XLA's AppendOperand: only ``op``'s users change)."""
        users = self._users
        instr.operands = instr.operands + [op]
        d = users.get(op)
        if d is None:
            d = users[op] = {}
        d[instr] = None

    def remove_operand_at(self, instr: HloInstruction, k: int) -> None:
        """``instr`` no longer reads operand ``k`` (XLA's RemoveOperandAt: only that operand's users change,
        and only if ``instr`` does not read it elsewhere)."""
        users = self._users
        op = instr.operands[k]
        instr.operands = instr.operands[:k] + instr.operands[k + 1:]
        if op not in instr.operands:
            d = users.get(op)
            if d is not None:
                d.pop(instr, None)

    def replace_all_uses(self, old: HloInstruction, new: HloInstruction) -> None:
        """Every user of ``old`` (except ``new`` itself) uses ``new``; the root moves too."""
        if old is new:
            return
        if not old.shape.compatible(new.shape):
            raise InternalError(f"replacing %{old.name} ({old.shape}) with %{new.name} ({new.shape}): "
                                "shapes differ")
        for user in self.users(old):
            if user is not new:
                self.replace_operand(user, old, new)
        if self._any_control:
            for instr in self.comp.instructions:
                if old in instr.control_predecessors:
                    instr.control_predecessors = [new if p is old else p for p in instr.control_predecessors]
        if self.comp.root is old:
            self.comp.root = new

    def remove(self, instr: HloInstruction) -> None:
        if instr is self.comp.root:
            raise InternalError(f"cannot remove root %{instr.name} of %{self.comp.name}")
        users = self._users
        for op in instr.operands:
            d = users.get(op)
            if d is not None:
                d.pop(instr, None)
        users.pop(instr, None)
        instr.parent = None
        self._removed = True

    def remove_if_dead(self, instr: HloInstruction) -> bool:
        """Remove ``instr`` and then its operands, as long as they are dead and removable."""
        if not self._removable(instr):
            return False
        stack = [instr]
        while stack:
            x = stack.pop()
            if x.parent is not self.comp or not self._removable(x):
                continue
            operands = list(dict.fromkeys(x.operands))
            self.remove(x)
            stack.extend(operands)
        return True

    def replace(self, old: HloInstruction, new: HloInstruction) -> None:
        """``ReplaceInstruction``: move the uses to ``new``, then delete ``old`` and its dead operands."""
        self.replace_all_uses(old, new)
        self.remove_if_dead(old)

    def _removable(self, instr: HloInstruction) -> bool:
        if not self.is_dead(instr) or instr.opcode is O.PARAMETER or has_side_effect(instr):
            return False
        return not (self._any_control and any(instr in i.control_predecessors for i in self.comp.instructions))

    def finish(self) -> None:
        """Drop removed instructions from the computation's list."""
        if self._removed:
            self.comp.instructions = [i for i in self.comp.instructions if i.parent is self.comp]
            self._removed = False


def make_scalar_like(g: UseGraph, shape: Shape, value, like: HloInstruction | None = None) -> HloInstruction:
    """XLA's MakeScalarLike: a scalar constant of ``shape``'s element type, broadcast to ``shape``."""
    c = g.add(constant_instruction(value, shape.element_type, (), like=like))
    if not shape.dimensions:
        return c
    return g.make(O.BROADCAST, [c], Shape.array(shape.element_type, shape.dimensions, shape.minor_to_major),
                  like=like, dimensions=())


def non_fusion_computations(module: HloModule) -> list[HloComputation]:
    """Computations that are not fused computations, callees first (MakeNonfusionComputations)."""
    return [c for c in module.computation_post_order() if not c.is_fusion_computation]


def fusion_computations(module: HloModule) -> list[HloComputation]:
    return [c for c in module.computation_post_order() if c.is_fusion_computation]


def callers(module: HloModule) -> dict[int, list[HloInstruction]]:
    """id(computation) -> the instructions that call it."""
    out: dict[int, list[HloInstruction]] = {}
    for comp in module.computations:
        for instr in comp.instructions:
            for callee in instr.called_computations:
                out.setdefault(id(callee), []).append(instr)
    return out
