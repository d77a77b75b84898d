"""Stage: codegen — the pieces every kernel family builds on (below ``program.py`` and ``kernels/``).

- :class:`KernelBuilder`: one kernel function ``void name(ptr noalias table, i64 lo, i64 hi)`` under
  construction; it loads buffer addresses from the table once, in the entry block.
- ``THUNKS``: the one table of kernels by opcode. Each family in ``kernels/`` registers its opcodes with
  ``@thunk(...)``; the program emitter imports ``kernels`` (which imports every family) and falls back to
  the elemental loop kernel for opcodes not in the table.
- ``HOT_LOOP_KINDS``: the kernels whose loops keep LLVM's whole loop pipeline (``KernelBuilder.settle_loops``).
- :class:`RowAccess` (how a row-partitioned kernel touches memory, for row-blocked scheduling). (What the
  runtime and compile log know about a kernel, ``KernelInfo``, is in ``kernel_info.py``: the persistent
  cache's layouts hold it, and loading them must not import IR emission.)

``prog`` arguments are the :class:`~tfxla_cluster.codegen.program.ProgramEmitter` (duck-typed here, so
this module stays below it). Guarantee: nothing here emits code on import.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from llvmlite import ir

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.buffers import BufferRef, Slot
from tfxla_cluster.codegen.context import KernelContext, entry_builder, new_function_body
from tfxla_cluster.codegen.loops import IrArray, light_loops
from tfxla_cluster.errors import UnimplementedError

# Kernel kinds (``KernelInfo.kind``) whose inner loops are a model's hot loops — GEMM, im2col and
# direct convolutions, depthwise convolutions — keep LLVM's unrolling and interleaving; every other
# kernel's plain loops are light (``loops.light_loops``). Measured (issue 17): the bench's conv_block
# ran 18% and lstm_train 8% slower with no unrolling anywhere. Winograd's kernels are light: their
# transforms are vectors already and their multiply-adds are OpenBLAS's, so unrolling bought nothing
# (same process, interleaved: conv_block and 3×3 56×56×64, 35×35×64 layers as fast) and cost a third of
# conv_block's LLVM time (its Winograd kernel 104 → ~55 ms CPU).
HOT_LOOP_KINDS = frozenset({"gemm", "conv-gemm", "conv-channelwise"})
# A hot-loop kernel whose estimated cost (``call_kernel``'s, bytes-equivalent) is below this is light too:
# unrolling saves it microseconds per call and costs milliseconds of LLVM time once (issue 17: small_cnn's
# three convolutions, 18-55 kflop each).
HOT_LOOP_MIN_COST = 1 << 16

# opcode -> emitter(prog, instr, operands, out); filled by the families in kernels/ via @thunk.
THUNKS: dict = {}


def thunk(*opcodes):
    """Register the decorated function as the kernel of ``opcodes`` in ``THUNKS``."""
    def register(fn):
        for op in opcodes:
            THUNKS[op] = fn
        return fn
    return register


def array_operands(instr, operands) -> list[BufferRef]:
    """``operands`` as buffers; a tuple-shaped operand is an UnimplementedError naming ``instr``."""
    for ref in operands:
        if not isinstance(ref, BufferRef):
            raise UnimplementedError(f"%{instr.name}: tuple-shaped operands are not supported by native code")
    return list(operands)


def flatten(values) -> list:
    """The leaves of a nested tuple of values, in order."""
    if isinstance(values, tuple):
        return [x for v in values for x in flatten(v)]
    return [values]


@dataclass(eq=False)
class RowAccess:
    """How a row-partitioned kernel touches memory (see ``ProgramEmitter.call_kernel``): its work item
    i writes row i of every ``written`` slot and reads only row i of every ``local`` slot; ``remote``
    slots may be read anywhere. ``row_bytes`` is what one item touches, for the block size."""

    items: int
    local: frozenset[int]
    remote: frozenset[int]
    written: frozenset[int]
    slots: list = field(default_factory=list)
    row_bytes: int = 0


class KernelBuilder:
    """One kernel function ``void name(ptr noalias table, i64 lo, i64 hi)`` under construction.

    With ``prog.local_tables`` the kernel's ``table`` is its own: entry i is the address of the i-th buffer
    the kernel asked for (``slot_order``), which the caller gathers from the program's table. The kernel's
    IR then depends only on its computation and shapes, not on where the plan put its buffers, so the
    program emits identical kernels once (``ProgramEmitter.call_kernel``). Such a kernel may also take some of
    its loop counts from its table (``count``): kernels that differ only in those then have one IR too."""

    def __init__(self, prog, hint: str) -> None:
        self.prog = prog
        mctx = prog.mctx
        self.name = mctx.unique_name("k_" + hint)
        fnty = ir.FunctionType(t.VOID, [t.PTR, t.I64, t.I64])
        fn = ir.Function(mctx.module, fnty, self.name)
        fn.args[0].add_attribute("noalias")
        fn.args[0].name, fn.args[1].name, fn.args[2].name = "table", "lo", "hi"
        fn.attributes.add("nounwind")
        # Kernels stay out of line: inlining them into the entry would optimise each one twice.
        fn.attributes.add("noinline")
        fn.linkage = "internal"
        self.builder = new_function_body(fn)
        self.kctx = KernelContext(mctx, fn, self.builder, len(prog.kernels), table=fn.args[0])
        self.function = fn
        self.lo, self.hi = fn.args[1], fn.args[2]
        self._ptrs: dict[int, ir.Value] = {}
        self.slots: dict[int, Slot] = {}       # program slot index -> slot, in the order first asked for
        self._local = bool(getattr(prog, "local_tables", False))
        self._table_index: dict[int, int] = {}  # program slot index -> index in the kernel's table
        self._table: list[Slot | int] = []      # a local table's entries: buffers and counts (``count``)
        # The loads of the counts (``count``), by table index: ``ProgramEmitter._fix_counts`` replaces them.
        self.count_loads: dict[int, ir.LoadInstr] = {}

    @property
    def slot_order(self) -> list[Slot | int]:
        """What the caller puts in a kernel's local table, in table order: buffers (their slots) and the
        values of the kernel's counts (ints)."""
        return list(self._table)

    def count(self, value: int):
        """``value`` (a loop count of the kernel's shapes) as an i64 the kernel reads from its local table at run
        time, so that kernels differing only in such counts print the same IR and share one function
        (``ProgramEmitter._unique``); the caller stores the value (``ProgramEmitter._gather``). A constant when
        the kernel reads the program's table."""
        if not self._local:
            return t.i64(value)
        index = len(self._table)
        self._table.append(value)
        b = entry_builder(self.function)
        gep = b.gep(self.function.args[0], [t.i64(index)], inbounds=True, source_etype=t.PTR)
        load = self.count_loads[index] = b.load(gep, typ=t.I64, name=f"count{index}")
        return load

    def _index(self, slot: Slot) -> int:
        """Where the kernel's table holds ``slot`` (also its alias scope)."""
        self.ptr(slot)
        return self._table_index[slot.index]

    def ptr(self, slot: Slot):
        p = self._ptrs.get(slot.index)
        if p is None:
            index = len(self._table) if self._local else slot.index
            self.slots[slot.index] = slot
            self._table.append(slot)
            self._table_index[slot.index] = index
            b = entry_builder(self.function)
            gep = b.gep(self.function.args[0], [t.i64(index)], inbounds=True, source_etype=t.PTR)
            p = self._ptrs[slot.index] = b.load(gep, typ=t.PTR, name=f"buf{index}")
        return p

    def array(self, ref: BufferRef) -> IrArray:
        p = self.ptr(ref.slot)
        return IrArray(self.kctx, p, ref.shape, slot=self._index(ref.slot))

    def read(self, ref: BufferRef):
        """A generator reading ``ref`` (scalar constants become immediates)."""
        slot = ref.slot
        if slot.kind == "const" and ref.shape.num_elements == 1 and slot.value is not None:
            value = t.constant(ref.shape.element_type, np.asarray(slot.value).reshape(-1)[0])
            return lambda index: value
        arr = self.array(ref)
        return lambda index: arr.load(index)

    def settle_loops(self, kind: str, cost: int = 0) -> int:
        """Mark the kernel's loops light unless ``kind`` is in ``HOT_LOOP_KINDS`` and ``cost`` is at least
        ``HOT_LOOP_MIN_COST``; returns how many were marked. Called once the kernel is known to be new (after
        the program's dedup compared its text: the loop IDs are unique nodes)."""
        return 0 if kind in HOT_LOOP_KINDS and cost >= HOT_LOOP_MIN_COST else light_loops(self.function)

    def finish(self) -> ir.Function:
        self.builder.ret_void()
        self.prog.attach_alias_metadata(self.kctx.accesses, set(map(self._index, self.slots.values())))
        return self.function
