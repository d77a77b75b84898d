"""HLO IR: instructions, computations and modules (xla/hlo/ir).

- ``HloInstruction`` is a small slotted dataclass: name, opcode, shape, operands, and typed attribute
  fields (only the ones meaningful for its opcode are set). ``called_computations`` holds callees in
  XLA's order for the opcode: ``[to_apply]``, ``[condition, body]``, ``[select, scatter]``, the branch
  computations of a conditional, or the fused computation of a fusion.
- ``HloComputation`` owns an ordered instruction list and a root. The list is kept in definition order
  by the parser and builder; passes may append freely and call ``post_order()`` (a stable DFS that
  equals the list order whenever the list is already topological), which is what the printer and the
  evaluator use.
- ``HloModule`` owns computations (callees before callers) and the entry, plus one module-wide
  ``NameUniquer`` (xla/service/name_uniquer.cc) so instruction names are unique in the whole module, as
  in XLA: ``add``, ``add.1``, ``add.2``…; computations added from elsewhere are renamed through it.
"""
from __future__ import annotations

import copy
import operator
import re
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import Iterator

from tfxla_cluster.errors import InternalError, InvalidArgumentError
from tfxla_cluster.hlo import attrs as A
from tfxla_cluster.hlo.opcode import ELEMENTWISE, HloOpcode
from tfxla_cluster.hlo.shape import PrimitiveType, Shape

_PRIMITIVE_TYPE_NAMES = {t.value for t in PrimitiveType}
_INVALID_NAME_CHAR = re.compile(r"[^A-Za-z0-9_.\-]")


class NameUniquer:
    """XLA's NameUniquer: strips a numeric ``.N`` suffix, then hands out ``root``, ``root.1``, ...

    A requested suffix is kept when it is still free (so names read back from text are unchanged).
    """

    def __init__(self, separator: str = ".") -> None:
        self._sep = separator
        self._used: dict[str, set[int]] = {}
        self._next: dict[str, int] = {}

    @staticmethod
    def sanitize(name: str) -> str:
        if _INVALID_NAME_CHAR.search(name) is not None:   # (rare: most names are valid already)
            name = _INVALID_NAME_CHAR.sub("_", name)
        name = name or "name"
        if name[0].isdigit():
            name = "_" + name
        if name in _PRIMITIVE_TYPE_NAMES:  # XLA's parser rejects names like "f32"
            name += "_"
        return name

    def get_unique_name(self, prefix: str) -> str:
        root = self.sanitize(prefix or "name")
        suffix, has_suffix = 0, False
        idx = root.rfind(self._sep)
        if 0 < idx < len(root) - 1 and root[idx + 1:].isdigit():
            suffix, has_suffix = int(root[idx + 1:]), True
            root = root[:idx]
        used = self._used.setdefault(root, set())
        if suffix in used:
            n = self._next.get(root, 0)
            while n in used:
                n += 1
            self._next[root] = n + 1
            suffix = n
        used.add(suffix)
        if suffix == 0:
            return f"{root}{self._sep}0" if has_suffix else root
        return f"{root}{self._sep}{suffix}"


@dataclass(eq=False, slots=True, repr=False)
class HloInstruction:
    """One HLO instruction. Identity semantics: two instructions are equal only if they are the same."""

    name: str
    opcode: HloOpcode
    shape: Shape
    operands: list["HloInstruction"] = field(default_factory=list)
    called_computations: list["HloComputation"] = field(default_factory=list)
    # --- typed attributes (set only for the opcodes that have them)
    dimensions: tuple[int, ...] | None = None      # broadcast transpose reduce reverse concatenate map sort ...
    slices: tuple[A.SliceRange, ...] | None = None
    dynamic_slice_sizes: tuple[int, ...] | None = None
    padding_config: A.PaddingConfig | None = None
    window: A.Window | None = None
    dot_dimension_numbers: A.DotDimensionNumbers | None = None
    convolution_dimension_numbers: A.ConvolutionDimensionNumbers | None = None
    feature_group_count: int = 1
    batch_group_count: int = 1
    operand_precision: tuple[A.Precision, ...] | None = None
    gather_dimension_numbers: A.GatherDimensionNumbers | None = None
    gather_slice_sizes: tuple[int, ...] | None = None
    scatter_dimension_numbers: A.ScatterDimensionNumbers | None = None
    indices_are_sorted: bool = False
    unique_indices: bool = False
    comparison_direction: A.ComparisonDirection | None = None
    comparison_type: A.ComparisonType | None = None   # None = default for the operand type
    fusion_kind: A.FusionKind | None = None
    literal: object = None                           # numpy array or tuple (constants)
    literal_elided: bool = False                     # parsed from XLA's "{...}"; contents unknown
    parameter_number: int | None = None
    tuple_index: int | None = None
    iota_dimension: int | None = None
    exponent_bits: int | None = None
    mantissa_bits: int | None = None
    is_stable: bool = False
    k: int | None = None                             # topk
    largest: bool = True                             # topk
    distribution: A.RandomDistribution | None = None
    rng_algorithm: A.RandomAlgorithm | None = None
    delta: int | None = None                         # rng-get-and-update-state
    custom_call_target: str | None = None
    metadata: A.OpMetadata | None = None
    # Attributes we do not model (backend_config, sharding, frontend_attributes, ...), kept verbatim
    # in source order so they print back unchanged.
    raw_attributes: dict[str, str] = field(default_factory=dict)
    control_predecessors: list["HloInstruction"] = field(default_factory=list)
    parent: "HloComputation | None" = None

    # ---- accessors
    def operand(self, i: int) -> "HloInstruction":
        return self.operands[i]

    @property
    def to_apply(self) -> "HloComputation":
        if len(self.called_computations) != 1:
            raise InternalError(f"{self.name} ({self.opcode.text}) has no single called computation")
        return self.called_computations[0]

    @property
    def fused_computation(self) -> "HloComputation":
        return self.to_apply

    @property
    def while_condition(self) -> "HloComputation":
        return self.called_computations[0]

    @property
    def while_body(self) -> "HloComputation":
        return self.called_computations[1]

    @property
    def branch_computations(self) -> list["HloComputation"]:
        return self.called_computations

    def is_root(self) -> bool:
        return self.parent is not None and self.parent.root is self

    def is_elementwise(self) -> bool:
        if self.opcode is HloOpcode.BITCAST_CONVERT:
            return self.shape.element_type.bit_width == self.operands[0].shape.element_type.bit_width
        return self.opcode in ELEMENTWISE

    def clone(self, operands: list["HloInstruction"] | None = None, name: str | None = None) -> "HloInstruction":
        """A detached copy with the same attributes (``HloInstruction::CloneWithNewOperands``).

        The copy has no parent; ``operands`` replaces the operand list, control predecessors are dropped,
        and the default name is the original's (the computation it is added to uniquifies it).
        """
        # Positional arguments in field order (see ``_CLONED_FIELDS``): a third of the time of keywords.
        return HloInstruction(name or self.name, self.opcode, self.shape,
                              list(self.operands if operands is None else operands), list(self.called_computations),
                              *_cloned_values(self), dict(self.raw_attributes))

    def __repr__(self) -> str:
        return f"<HloInstruction %{self.name} = {self.shape} {self.opcode.text}>"

    def to_string(self, **options) -> str:
        from tfxla_cluster.hlo.printer import instruction_to_string
        return instruction_to_string(self, **options)

    def __str__(self) -> str:
        return self.to_string()


# The typed attributes ``clone`` copies as they are, read in one call: the fields between
# ``called_computations`` and ``raw_attributes``, which ``clone`` passes by position (the fields it copies or
# resets itself lead and end the field order, checked here).
_FIELD_ORDER = tuple(HloInstruction.__dataclass_fields__)
_CLONED_FIELDS = _FIELD_ORDER[5:-3]
if _FIELD_ORDER[:5] != ("name", "opcode", "shape", "operands", "called_computations") or \
        _FIELD_ORDER[-3:] != ("raw_attributes", "control_predecessors", "parent"):
    raise InternalError(f"HloInstruction's field order changed: update clone ({_FIELD_ORDER})")
_cloned_values = operator.attrgetter(*_CLONED_FIELDS)
_called_computations = operator.attrgetter("called_computations")


class HloComputation:
    """A named list of instructions with parameters and a root (``HloComputation``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.instructions: list[HloInstruction] = []
        self.root: HloInstruction | None = None
        self.parent: HloModule | None = None
        self.is_fusion_computation = False
        self._uniquer = NameUniquer()

    # ---- construction
    def add_instruction(self, instr: HloInstruction, *, unique_name: bool = True) -> HloInstruction:
        """Append ``instr``; its name is made unique in the module (or this computation if detached)."""
        if instr.parent is not None:
            raise InternalError(f"instruction {instr.name} already belongs to {instr.parent.name}")
        if unique_name:
            instr.name = self._name_uniquer().get_unique_name(instr.name)
        instr.parent = self
        self.instructions.append(instr)
        return instr

    def _name_uniquer(self) -> NameUniquer:
        return self.parent.name_uniquer if self.parent is not None else self._uniquer

    def set_root(self, instr: HloInstruction) -> None:
        if instr.parent is not self:
            raise InternalError(f"root {instr.name} is not in computation {self.name}")
        self.root = instr

    # ---- queries
    @property
    def parameters(self) -> list[HloInstruction]:
        params = [i for i in self.instructions if i.opcode is HloOpcode.PARAMETER]
        return sorted(params, key=lambda p: p.parameter_number)

    def parameter(self, number: int) -> HloInstruction:
        for p in self.instructions:
            if p.opcode is HloOpcode.PARAMETER and p.parameter_number == number:
                return p
        raise InvalidArgumentError(f"computation {self.name} has no parameter {number}")

    @property
    def num_parameters(self) -> int:
        return sum(1 for i in self.instructions if i.opcode is HloOpcode.PARAMETER)

    def get_instruction(self, name: str) -> HloInstruction:
        for i in self.instructions:
            if i.name == name:
                return i
        raise InvalidArgumentError(f"no instruction named {name} in computation {self.name}")

    def program_shape(self) -> tuple[list[Shape], Shape]:
        return [p.shape for p in self.parameters], self.root.shape

    def post_order(self) -> list[HloInstruction]:
        """Operands (and control predecessors) before users; stable with respect to list order.

        Instructions are visited in list order and each one's unvisited operands are emitted first, so
        a topologically ordered list comes back unchanged.
        """
        # Passes keep the list in definition order, so most of it usually is a post order already: the
        # prefix up to the first instruction read before its operands is kept as it is, and after it every
        # instruction whose operands are all emitted is emitted at once; only the others take the DFS.
        # (Instructions hash by identity: set lookups of the objects themselves, the operand check in C.)
        instructions = self.instructions
        seen: set[HloInstruction] = set()
        defined, add = seen.issuperset, seen.add
        k = 0
        # (one walk that touches each instruction once: a large entry's objects are not all in cache)
        for instr in instructions:
            if instr.control_predecessors or not defined(instr.operands):
                break
            add(instr)
            k += 1
        if len(seen) != k:   # an instruction listed twice: the walk below lists it once
            seen.clear()
            k = 0
        elif k == len(instructions):
            return list(instructions)
        order = instructions[:k]
        append = order.append
        visiting: set[int] = set()
        for start in islice(instructions, k, None):
            if start in seen:
                continue
            if defined(start.operands) and (not start.control_predecessors or
                                            defined(start.control_predecessors)):
                add(start)
                append(start)
                continue
            stack = [(start, False)]
            while stack:
                node, expanded = stack.pop()
                if expanded:
                    if node not in seen:
                        add(node)
                        append(node)
                    continue
                if node in seen:
                    continue
                if id(node) in visiting:
                    raise InternalError(f"cycle through instruction {node.name} in {self.name}")
                visiting.add(id(node))
                stack.append((node, True))
                for pred in reversed(node.operands + node.control_predecessors):
                    if pred not in seen:
                        if id(pred) in visiting:
                            raise InternalError(f"cycle through instruction {pred.name} in {self.name}")
                        stack.append((pred, False))
        return order

    def sort_topologically(self) -> None:
        """Reorder the instruction list to ``post_order()``."""
        self.instructions = self.post_order()

    def users(self) -> dict[HloInstruction, list[HloInstruction]]:
        """Map each instruction to its users in this computation (each user listed once, in order)."""
        result: dict[HloInstruction, list[HloInstruction]] = {i: [] for i in self.instructions}
        for instr in self.instructions:
            seen = set()
            for op in instr.operands:
                if id(op) not in seen:
                    seen.add(id(op))
                    result.setdefault(op, []).append(instr)
        return result

    def replace_all_uses(self, old: HloInstruction, new: HloInstruction) -> None:
        """Make every user of ``old`` (and the root, if it is ``old``) use ``new`` instead."""
        if not old.shape.compatible(new.shape):
            raise InternalError(f"replacing {old.name} ({old.shape}) with {new.name} ({new.shape}): "
                                "shapes differ")
        for instr in self.instructions:
            if instr is new:
                continue
            instr.operands = [new if o is old else o for o in instr.operands]
            instr.control_predecessors = [new if o is old else o for o in instr.control_predecessors]
        if self.root is old:
            self.root = new

    def remove_instruction(self, instr: HloInstruction) -> None:
        if instr is self.root:
            raise InternalError(f"cannot remove root {instr.name} of {self.name}")
        self.instructions = [i for i in self.instructions if i is not instr]
        instr.parent = None

    def remove_dead_instructions(self) -> bool:
        """Remove instructions not reachable from the root (parameters stay). Returns whether any went."""
        live: set[int] = set()
        stack = [self.root]
        while stack:
            node = stack.pop()
            if id(node) in live:
                continue
            live.add(id(node))
            stack.extend(node.operands)
            stack.extend(node.control_predecessors)
        keep = [i for i in self.instructions if id(i) in live or i.opcode is HloOpcode.PARAMETER]
        changed = len(keep) != len(self.instructions)
        for i in self.instructions:
            if id(i) not in live and i.opcode is not HloOpcode.PARAMETER:
                i.parent = None
        self.instructions = keep
        return changed

    def called_computations(self) -> list["HloComputation"]:
        # A dict keeps first-call order with O(1) membership (an entry calls hundreds of fusions); the walk
        # runs in C (every pass asks for the module's computation order, so each computation's callees).
        return list(dict.fromkeys(chain.from_iterable(map(_called_computations, self.instructions))))

    def __iter__(self) -> Iterator[HloInstruction]:
        return iter(self.instructions)

    def __repr__(self) -> str:
        return f"<HloComputation %{self.name}: {len(self.instructions)} instructions>"

    def to_string(self, **options) -> str:
        from tfxla_cluster.hlo.printer import computation_to_string
        return computation_to_string(self, **options)

    def __str__(self) -> str:
        return self.to_string()


class HloModule:
    """Computations (callees before callers) and an entry computation."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.computations: list[HloComputation] = []
        self.entry: HloComputation | None = None
        self.name_uniquer = NameUniquer()
        self._computation_uniquer = NameUniquer()
        self.is_scheduled = False
        # Header attributes we keep verbatim (e.g. alias_passthrough_params=true).
        self.raw_attributes: dict[str, str] = {}
        # XLA's stack frame index sections (FileNames ... StackFrames), verbatim; "" when absent.
        self.stack_frames = ""

    def add_computation(self, comp: HloComputation, *, entry: bool = False,
                        uniquify: bool = True) -> HloComputation:
        """Add ``comp`` (and, first, any computations it calls that are not in the module yet).

        With ``uniquify`` its name and its instructions' names go through the module's uniquers, as
        XLA's ``HloModule::AddComputationInternal`` does.
        """
        if comp.parent is self:
            if entry:
                self.entry = comp
            return comp
        for callee in comp.called_computations():
            if callee.parent is not self:
                self.add_computation(callee, uniquify=uniquify)
        comp.parent = self
        if uniquify:
            comp.name = self._computation_uniquer.get_unique_name(comp.name)
            for instr in comp.instructions:
                instr.name = self.name_uniquer.get_unique_name(instr.name)
        self.computations.append(comp)
        if entry:
            self.entry = comp
        return comp

    def add_entry_computation(self, comp: HloComputation) -> HloComputation:
        return self.add_computation(comp, entry=True)

    def get_computation(self, name: str) -> HloComputation:
        for c in self.computations:
            if c.name == name:
                return c
        raise InvalidArgumentError(f"no computation named {name} in module {self.name}")

    def computation_post_order(self) -> list[HloComputation]:
        """Callees before callers, otherwise in list order (MakeComputationPostOrder)."""
        order: list[HloComputation] = []
        done: set[int] = set()

        def visit(c: HloComputation) -> None:
            if id(c) in done:
                return
            done.add(id(c))
            for callee in c.called_computations():
                visit(callee)
            order.append(c)

        for c in self.computations:
            visit(c)
        if self.entry is not None and self.entry in order:
            # The entry prints last, as in XLA dumps.
            order.remove(self.entry)
            order.append(self.entry)
        return order

    def remove_unused_computations(self) -> bool:
        """Drop computations not reachable from the entry. Returns whether any were removed."""
        reachable: set[int] = set()
        stack = [self.entry]
        while stack:
            c = stack.pop()
            if id(c) in reachable:
                continue
            reachable.add(id(c))
            stack.extend(c.called_computations())
        keep = [c for c in self.computations if id(c) in reachable]
        changed = len(keep) != len(self.computations)
        self.computations = keep
        return changed

    def clone(self) -> "HloModule":
        """A deep copy (instructions, computations, literals), e.g. to compare a pass's before/after."""
        return copy.deepcopy(self)

    def instruction_count(self) -> int:
        return sum(len(c.instructions) for c in self.computations)

    def __repr__(self) -> str:
        return f"<HloModule {self.name}: {len(self.computations)} computations>"

    def to_string(self, **options) -> str:
        from tfxla_cluster.hlo.printer import module_to_string
        return module_to_string(self, **options)

    def __str__(self) -> str:
        return self.to_string()
