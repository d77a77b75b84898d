"""Buffer plan: which memory every HLO value lives in (a stand-in for XLA's BufferAssignment).

Every array value the program materialises gets a *slot*: an entry in the buffer table the native
entry function receives. Slots are

    param   an entry parameter — the caller's numpy array, used zero-copy
    output  a leaf of the entry result — a fresh numpy array per call, written in place by its producer
    const   a non-scalar (or operand) constant — a numpy array owned by the executable
    temp    everything else — a chunk of one per-call arena

Views (bitcast, layout-preserving reshape, get-tuple-element, tuple) share their operand's slot, so they
cost nothing. Temps record the schedule positions of their definition and last use (uses inside a
while loop are extended to the end of the loop), and ``pack`` places them in the arena by greedy
best-fit over sizes so that temps with overlapping live ranges never overlap in memory (XLA's
HeapSimulator, simplified). A later adapter can fill the same structure from
``tfxla_cluster.passes.buffer_assignment``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tfxla_cluster.hlo.shape import Shape

ALIGN = 64


@dataclass(eq=False)
class Slot:
    index: int
    kind: str                       # "param" | "output" | "const" | "temp"
    shape: Shape
    nbytes: int
    number: int = -1                # parameter number or output number
    value: np.ndarray | None = None  # constants
    first: int = -1                 # temps: schedule positions of definition and last use
    last: int = -1
    offset: int = -1                # temps: byte offset in the arena
    name: str = ""

    def __repr__(self) -> str:
        return f"Slot({self.index}, {self.kind}, {self.shape}, {self.name})"


@dataclass(frozen=True, eq=False)
class BufferRef:
    """An array value: ``shape`` viewed over the bytes of ``slot``."""

    slot: Slot
    shape: Shape


def leaves(tree) -> list[BufferRef]:
    if isinstance(tree, tuple):
        return [leaf for t in tree for leaf in leaves(t)]
    return [tree]


@dataclass
class BufferPlan:
    slots: list[Slot] = field(default_factory=list)
    arena_bytes: int = 0
    # While not None, the index of every slot defined or used is appended (``ProgramEmitter.reuse``
    # records which buffers an emission touched).
    watch: list[int] | None = field(default=None, repr=False)

    def new(self, kind: str, shape: Shape, *, number: int = -1, value=None, name: str = "") -> Slot:
        slot = Slot(len(self.slots), kind, shape, shape.byte_size(), number, value, name=name)
        self.slots.append(slot)
        return slot

    def define(self, slot: Slot, pos: int) -> None:
        if self.watch is not None:
            self.watch.append(slot.index)
        if slot.kind == "temp":
            slot.first = pos if slot.first < 0 else min(slot.first, pos)
            slot.last = max(slot.last, pos)

    def use(self, slot: Slot, pos: int) -> None:
        if self.watch is not None:
            self.watch.append(slot.index)
        if slot.kind == "temp":
            slot.last = max(slot.last, pos)
            if slot.first < 0:
                slot.first = pos

    def extend_loop(self, start: int, end: int) -> None:
        """Values touched inside a loop [start, end] and defined before it live through the loop."""
        for s in self.slots:
            if s.kind == "temp" and s.first < start <= s.last:
                s.last = max(s.last, end)

    def of_kind(self, kind: str) -> list[Slot]:
        return [s for s in self.slots if s.kind == kind]

    def pack(self) -> int:
        """Assign arena offsets to temps; returns the arena size in bytes."""
        temps = sorted(self.of_kind("temp"), key=lambda s: (-s.nbytes, s.index))
        placed: list[Slot] = []
        end = 0
        for s in temps:
            size = _round(max(s.nbytes, 1))
            busy = sorted((p.offset, p.offset + _round(max(p.nbytes, 1))) for p in placed
                          if not (p.last < s.first or s.last < p.first))
            best, best_gap, cursor = None, None, 0
            for lo, hi in busy:
                gap = lo - cursor
                if gap >= size and (best_gap is None or gap < best_gap):
                    best, best_gap = cursor, gap
                cursor = max(cursor, hi)
            s.offset = best if best is not None else cursor
            placed.append(s)
            end = max(end, s.offset + size)
        self.arena_bytes = end
        return end


class FreshArray(np.ndarray):
    """An executable's output buffer: allocated for one call and never written by it again, so the
    runtime may hand it (or a contiguous view of it) to TF without a copy (see ``runtime.launcher
    .to_tensor``). Anything else — a view of a TF tensor, a constant the executable owns, an
    evaluator result that aliases an input — must be copied: TF may later write into a buffer it
    believes it owns alone."""


def aligned_empty(dims: tuple[int, ...], dtype) -> np.ndarray:
    """A fresh C-contiguous :class:`FreshArray` whose data starts on an ``ALIGN``-byte boundary.

    Output buffers are handed to TF without a copy (DLPack), and TF's Eigen kernels map CPU tensors
    as aligned (``EIGEN_MAX_ALIGN_BYTES`` = 64): numpy's allocator only guarantees 16 bytes. The
    returned view keeps its backing allocation alive, so the buffer lives as long as any owner does.
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    raw = FreshArray((nbytes + ALIGN,), dtype=np.uint8)   # owns the memory: every view's ``base``
    start = (-raw.ctypes.data) % ALIGN
    return raw[start:start + nbytes].view(dtype).reshape(dims)


def is_fresh(value: np.ndarray) -> bool:
    """Whether ``value`` is (a view of) memory allocated by :func:`aligned_empty` (numpy points every
    view's ``base`` at the array that owns the memory)."""
    return isinstance(value, FreshArray) or isinstance(getattr(value, "base", None), FreshArray)


def _round(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN
