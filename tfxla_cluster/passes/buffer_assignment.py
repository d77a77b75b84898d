"""Buffer assignment (xla/service/buffer_assignment.cc + heap_simulator's GlobalDecreasingSizeBestFitHeap).

Stage: last, on the optimized module. Each computation that runs as code (the entry, and the bodies,
conditions and branches it runs through while/conditional/call) is assigned on its own, over its
sequential schedule: the instruction post order.

1. Values. Every instruction result gets a buffer per array leaf (plus an 8-byte-per-element index
   table for a tuple result), except views that alias their operand's buffers: ``bitcast``,
   ``get-tuple-element``, ``tuple`` (leaves alias the operands; only its index table is new) and
   ``opt-barrier``. Fused computations get no buffers (they live in registers inside one kernel).
2. Liveness. A buffer is live from its defining step to its last use by a non-view instruction; the
   buffers the root reaches are live out (to the end of the schedule).
3. In-place reuse (CanShareOperandBufferWithUser). An elementwise instruction, or a loop fusion whose
   parameter reaches the root through elementwise ops only, writes its result into an operand's buffer
   when that operand is a temporary that dies at this instruction and has the same shape — the two
   values then form one buffer group (like XLA's dot + bias/relu fusion sharing allocation 1).
4. Allocations. Entry parameters and constants each get their own allocation; groups that are live out
   get their own ("maybe-live-out", the result); every other group is a temporary, packed into one
   "preallocated-temp" arena: groups sorted by decreasing size, each placed at the best-fitting gap
   (smallest that fits) among the groups whose live ranges overlap it, else after them. Chunks are
   aligned to 64 bytes. Buffers whose live ranges overlap never share bytes.

``BufferAssignment`` answers ``slice_of(instr, index)`` -> (allocation, offset, size) for codegen, reports
``temp_bytes`` (the arena size, i.e. peak temporary memory) and prints XLA's ``buffer-assignment.txt``
style text with ``to_text()``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tfxla_cluster.hlo.attrs import FusionKind
from tfxla_cluster.hlo.ir import HloComputation, HloInstruction, HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import Shape

ALIGNMENT = 64
VIEWS = frozenset({O.BITCAST, O.GET_TUPLE_ELEMENT, O.TUPLE, O.OPTIMIZATION_BARRIER})
Index = tuple[int, ...]


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def buffer_size(shape: Shape) -> int:
    """Bytes of one buffer: elements x element size; a tuple is its table of 8-byte pointers."""
    if shape.is_tuple:
        return 8 * len(shape.tuple_shapes)
    return shape.byte_size()


@dataclass(eq=False)
class LogicalBuffer:
    """One value: ``instruction`` defines it at tuple ``index``."""

    id: int
    instruction: HloInstruction
    index: Index
    shape: Shape
    kind: str                     # "parameter" | "constant" | "value"
    defined_at: int
    last_use: int = -1
    live_out: bool = False
    uses: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return buffer_size(self.shape)

    @property
    def label(self) -> str:
        idx = "{" + ",".join(map(str, self.index)) + "}"
        return f"<{self.id} {self.instruction.name}{'' if not self.index else ' ' + idx} @0>"


@dataclass(eq=False)
class BufferGroup:
    """Buffers sharing one slot (in-place chains); live from the first definition to the last use."""

    buffers: list[LogicalBuffer]
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(b.size for b in self.buffers)

    @property
    def live_out(self) -> bool:
        return any(b.live_out for b in self.buffers)


@dataclass
class Allocation:
    index: int
    kind: str                     # "parameter" | "constant" | "maybe-live-out" | "preallocated-temp"
    computation: str
    size: int = 0
    parameter_number: int | None = None
    assigned: list[tuple[LogicalBuffer, int]] = field(default_factory=list)  # (buffer, offset)


@dataclass(frozen=True)
class BufferSlice:
    allocation: int
    offset: int
    size: int


def sequential_computations(module: HloModule) -> list[HloComputation]:
    from tfxla_cluster.passes.multi_output_fusion import sequential_computations as seq
    return seq(module)


def _elementwise_only_path(fusion: HloInstruction, number: int) -> bool:
    """The fused parameter reaches the root only through elementwise ops (and has the root's shape)."""
    fused = fusion.fused_computation
    param = fused.parameter(number)
    users = fused.users()
    stack, seen = [param], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        for u in users.get(x, ()):
            if not u.is_elementwise() or u.shape.dimensions != param.shape.dimensions:
                return False
            stack.append(u)
    return True


def dynamic_update_slice_buffer(user: HloInstruction) -> int | None:
    """The operand whose buffer ``user`` may update in place, if it is a dynamic-update-slice or a loop
    fusion whose root is one on a fused parameter (XLA's in-place input/output pair of the DUS,
    ``CanEmitFusedDynamicUpdateSliceInPlace``): only the update's region is then written. In a fusion the
    parameter must have the DUS as its only user, so computing the update never reads bytes already written."""
    if user.opcode is O.DYNAMIC_UPDATE_SLICE:
        return 0
    if user.opcode is not O.FUSION or user.fusion_kind is not FusionKind.LOOP:
        return None
    root = user.fused_computation.root
    if root.opcode is not O.DYNAMIC_UPDATE_SLICE or root.operands[0].opcode is not O.PARAMETER:
        return None
    param = root.operands[0]
    users = user.fused_computation.users().get(param, ())
    if len(users) != 1 or root.operands.count(param) != 1:
        return None
    return param.parameter_number


def can_share_operand_buffer(user: HloInstruction, operand_number: int) -> bool:
    """CanShareOperandBufferWithUser for our ops: elementwise users and elementwise-on-operand loop fusions,
    and the updated operand of a dynamic-update-slice (``dynamic_update_slice_buffer``)."""
    operand = user.operands[operand_number]
    if not (user.shape.is_array and operand.shape.is_array) or user.shape != operand.shape:
        return False
    if dynamic_update_slice_buffer(user) == operand_number:
        return True
    if user.opcode is O.FUSION:
        return user.fusion_kind is FusionKind.LOOP and _elementwise_only_path(user, operand_number)
    return user.is_elementwise()


class _ComputationAssigner:
    def __init__(self, comp: HloComputation, first_id: int, is_entry: bool) -> None:
        self.comp = comp
        self.is_entry = is_entry
        self.schedule = comp.post_order()
        self.step = {id(x): k for k, x in enumerate(self.schedule)}
        self.buffers: list[LogicalBuffer] = []
        self.buffers_of: dict[int, dict[Index, LogicalBuffer]] = {}
        self._next_id = first_id
        self.groups: list[BufferGroup] = []
        self.group_of: dict[int, BufferGroup] = {}

    def _new(self, instr: HloInstruction, index: Index, shape: Shape, kind: str) -> LogicalBuffer:
        b = LogicalBuffer(self._next_id, instr, index, shape, kind, self.step[id(instr)])
        self._next_id += 1
        self.buffers.append(b)
        return b

    def _define_all(self, instr: HloInstruction, kind: str) -> dict[Index, LogicalBuffer]:
        out: dict[Index, LogicalBuffer] = {}
        stack: list[tuple[Shape, Index]] = [(instr.shape, ())]
        while stack:   # pre-order, tuple elements in order (a recursive closure would be a reference cycle)
            shape, index = stack.pop()
            out[index] = self._new(instr, index, shape, kind)
            if shape.is_tuple:
                stack.extend((s, index + (k,)) for k, s in reversed(list(enumerate(shape.tuple_shapes))))
        return out

    def define_values(self) -> None:
        for instr in self.schedule:
            op = instr.opcode
            if op is O.PARAMETER:
                bufs = self._define_all(instr, "parameter")
            elif op is O.CONSTANT:
                bufs = self._define_all(instr, "constant")
            elif op in (O.BITCAST, O.OPTIMIZATION_BARRIER):
                bufs = dict(self.buffers_of[id(instr.operands[0])])
            elif op is O.GET_TUPLE_ELEMENT:
                k = instr.tuple_index
                bufs = {idx[1:]: b for idx, b in self.buffers_of[id(instr.operands[0])].items()
                        if idx and idx[0] == k}
            elif op is O.TUPLE:
                bufs = {(): self._new(instr, (), instr.shape, "value")}
                for k, operand in enumerate(instr.operands):
                    for idx, b in self.buffers_of[id(operand)].items():
                        bufs[(k,) + idx] = b
            else:
                bufs = self._define_all(instr, "value")
            self.buffers_of[id(instr)] = bufs

    def liveness(self) -> None:
        for instr in self.schedule:
            if instr.opcode in VIEWS:
                continue
            at = self.step[id(instr)]
            for k, operand in enumerate(instr.operands):
                for b in self.buffers_of[id(operand)].values():
                    b.last_use = max(b.last_use, at)
                    b.uses.append(f"{instr.name}, operand {k}")
        # a tuple's index table is read by whoever reads the tuple
        for instr in self.schedule:
            if instr.opcode is O.TUPLE:
                table = self.buffers_of[id(instr)][()]
                table.last_use = max([table.defined_at] + [
                    b.last_use for idx, b in self.buffers_of[id(instr)].items() if idx])
        for b in self.buffers_of[id(self.comp.root)].values():
            b.live_out = True
            b.last_use = len(self.schedule)
        for b in self.buffers:
            b.last_use = max(b.last_use, b.defined_at)

    def form_groups(self) -> None:
        for b in self.buffers:
            if b.kind != "value":
                continue
            group = None
            instr = b.instruction
            if b.index == () and instr.shape.is_array and instr.opcode not in VIEWS:
                group = self._in_place_group(instr)
            if group is None:
                group = BufferGroup([b], b.defined_at, b.last_use)
                self.groups.append(group)
            else:
                group.buffers.append(b)
                group.end = max(group.end, b.last_use)
            self.group_of[id(b)] = group

    def _in_place_group(self, instr: HloInstruction) -> BufferGroup | None:
        at = self.step[id(instr)]
        for k, operand in enumerate(instr.operands):
            ob = self.buffers_of[id(operand)].get(())
            if ob is None or ob.kind != "value" or ob.last_use != at or ob.live_out:
                continue
            group = self.group_of.get(id(ob))
            if group is None or group.end != at or not can_share_operand_buffer(instr, k):
                continue
            return group
        return None


def _best_fit(groups: list[BufferGroup]) -> tuple[dict[int, int], int]:
    """GlobalDecreasingSizeBestFitHeap: offsets for ``groups`` and the heap size.

    Groups are placed largest first (then longest lived); each goes into the smallest gap, lowest first,
    between the slots of the groups already placed whose live ranges overlap its own, else above them.
    The placed slots are arrays, so finding the overlapping ones and the gaps between them (sorted by
    offset, then size) is a few vector operations, not a Python walk over every placed group."""
    n = len(groups)
    sizes = [_align(g.size) for g in groups]
    order = sorted(range(n), key=lambda g: (-sizes[g], -(groups[g].end - groups[g].start), g))
    starts, ends, offs, szs = (np.zeros(n, np.int64) for _ in range(4))
    offsets: dict[int, int] = {}
    heap = 0
    for k, gi in enumerate(order):
        group, size = groups[gi], sizes[gi]
        live = (starts[:k] <= group.end) & (ends[:k] >= group.start)
        off, sz = offs[:k][live], szs[:k][live]
        offset = 0
        if off.size:
            by_offset = np.lexsort((sz, off))
            off, sz = off[by_offset], sz[by_offset]
            reach = np.maximum.accumulate(off + sz)          # the cursor after each busy slot
            cursor = np.concatenate(([0], reach[:-1]))       # ... and before it
            gaps = off - cursor
            fits = np.flatnonzero(gaps >= size)
            offset = int(cursor[fits[np.argmin(gaps[fits])]]) if fits.size else int(reach[-1])
        starts[k], ends[k], offs[k], szs[k] = group.start, group.end, offset, size
        offsets[gi] = offset
        heap = max(heap, offset + size)
    return offsets, heap


class BufferAssignment:
    """The allocations of a module (see module docstring)."""

    def __init__(self, module: HloModule) -> None:
        self.module = module
        self.allocations: list[Allocation] = []
        self.buffers: list[LogicalBuffer] = []
        self._slices: dict[tuple[int, Index], BufferSlice] = {}
        self._assigners: list[_ComputationAssigner] = []
        self.temp_bytes_by_computation: dict[str, int] = {}
        next_id = 0
        for comp in sequential_computations(module):
            a = _ComputationAssigner(comp, next_id, comp is module.entry)
            a.define_values()
            a.liveness()
            a.form_groups()
            next_id = a._next_id
            self._assigners.append(a)
            self.buffers.extend(a.buffers)
            self._allocate(a)

    def _new_allocation(self, kind: str, comp: HloComputation, **kw) -> Allocation:
        alloc = Allocation(len(self.allocations), kind, comp.name, **kw)
        self.allocations.append(alloc)
        return alloc

    def _assign(self, alloc: Allocation, b: LogicalBuffer, offset: int) -> None:
        alloc.assigned.append((b, offset))
        alloc.size = max(alloc.size, offset + b.size)
        self._slices[(id(b), ())] = BufferSlice(alloc.index, offset, b.size)

    def _allocate(self, a: _ComputationAssigner) -> None:
        # tuple-parameter leaves live inside the caller's buffers: each gets an allocation after the tuple's
        leaves: dict[int, list[LogicalBuffer]] = {}
        for b in a.buffers:
            if b.kind == "parameter" and b.index:
                leaves.setdefault(id(b.instruction), []).append(b)
        for b in a.buffers:
            if b.kind == "parameter" and b.index == ():
                alloc = self._new_allocation("parameter", a.comp, parameter_number=b.instruction.parameter_number)
                self._assign(alloc, b, 0)
                for other in leaves.get(id(b.instruction), ()):
                        self._assign(self._new_allocation("parameter", a.comp,
                                                          parameter_number=b.instruction.parameter_number),
                                     other, 0)
            elif b.kind == "constant":
                self._assign(self._new_allocation("constant", a.comp), b, 0)
        temps = [g for g in a.groups if not g.live_out]
        for g in a.groups:
            if g.live_out:
                alloc = self._new_allocation("maybe-live-out", a.comp)
                for b in g.buffers:
                    self._assign(alloc, b, 0)
        if temps:
            offsets, heap = _best_fit(temps)
            alloc = self._new_allocation("preallocated-temp", a.comp)
            for gi, g in enumerate(temps):
                for b in g.buffers:
                    self._assign(alloc, b, offsets[gi])
            alloc.size = heap
            self.temp_bytes_by_computation[a.comp.name] = heap
        else:
            self.temp_bytes_by_computation[a.comp.name] = 0

    # ---- queries
    def slice_of(self, instr: HloInstruction, index: Index = ()) -> BufferSlice:
        """Where the value ``instr`` produces at ``index`` lives (views resolve to what they alias)."""
        for a in self._assigners:
            bufs = a.buffers_of.get(id(instr))
            if bufs is not None and instr.parent is a.comp:
                return self._slices[(id(bufs[index]), ())]
        raise KeyError(f"no buffer for %{instr.name} at {index}")

    @property
    def temp_bytes(self) -> int:
        """Peak temporary memory of the entry computation (its arena size)."""
        return self.temp_bytes_by_computation.get(self.module.entry.name, 0)

    @property
    def total_temp_bytes(self) -> int:
        return sum(self.temp_bytes_by_computation.values())

    def bytes_by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for alloc in self.allocations:
            out[alloc.kind] = out.get(alloc.kind, 0) + alloc.size
        return out

    def to_text(self) -> str:
        lines = ["BufferAssignment:"]
        for alloc in self.allocations:
            what = alloc.kind if alloc.parameter_number is None else f"parameter {alloc.parameter_number}"
            lines.append(f"allocation {alloc.index}: size {alloc.size}, {what}, computation %{alloc.computation}:")
            for b, offset in sorted(alloc.assigned, key=lambda t: (t[1], t[0].id)):
                lines.append(f" value: {b.label} (size={b.size},offset={offset}): {b.shape}"
                             f" live=[{b.defined_at},{b.last_use}]")
        kinds = self.bytes_by_kind()
        lines.append("")
        lines.append(f"Total bytes used: {sum(kinds.values())}")
        for kind in ("parameter", "constant", "maybe-live-out", "preallocated-temp"):
            if kind in kinds:
                lines.append(f"  {kind}: {kinds[kind]}")
        lines.append(f"Peak temp bytes (entry arena): {self.temp_bytes}")
        lines.append("")
        lines.append("Used values:")
        for b in self.buffers:
            lines.append(b.label)
            lines.append(" positions:")
            lines.append(f"  {b.instruction.name}" + (f" {{{','.join(map(str, b.index))}}}" if b.index else ""))
            if b.uses:
                lines.append(" uses:")
                lines.extend(f"  {u}" for u in b.uses)
        return "\n".join(lines) + "\n"


def assign_buffers(module: HloModule) -> BufferAssignment:
    return BufferAssignment(module)


def unfused_intermediate_bytes(module: HloModule) -> int:
    """Bytes of every value the entry computes besides parameters, constants, views and its result:
    what running one kernel per instruction with no buffer reuse would allocate for temporaries."""
    comp = module.entry
    total = 0
    for instr in comp.instructions:
        if instr.opcode in VIEWS or instr.opcode in (O.PARAMETER, O.CONSTANT) or instr is comp.root:
            continue
        total += sum(buffer_size(s) for s in instr.shape.leaves())
    return total
