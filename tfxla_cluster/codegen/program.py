"""Stage: optimised HloModule → one LLVM module (XLA:CPU's legacy "one function per module" model).

The LLVM module has one exported function, ``tfxla_entry(ptr table)``, which runs the whole entry
computation on a buffer table (see ``buffers.py``), and one kernel per *thunk*:

    void kernel(ptr noalias table, i64 lo, i64 hi)

A thunk is a fusion or an unfused instruction that produces new values (everything except
parameters, constants, tuples, get-tuple-element and bitcast-like views). Each kernel loads its
buffers' addresses from a table of its own — entry i is the i-th buffer it uses, gathered from the
program's table at the call — and processes the work items [lo, hi) (rows of its output, see
``loops.emit_loop_nest``); every buffer access carries its table entry's alias scope, so LLVM knows
distinct buffers never alias (XLA's alias metadata). A kernel's IR thus depends only on its computation
and shapes: kernels identical up to their buffers (a model's repeated blocks) are emitted once and
called at each site, so LLVM optimises and compiles them once. (In bounds-check mode kernels read the
program's table, which the failure handler needs, and are not shared.) The entry function calls each
kernel on its whole range, or hands it to ``tfxla_parallel_for`` when its estimated cost makes
splitting across threads pay. An entry of ``PLAIN_ENTRY_INSTRUCTIONS`` or more (a model's hundred-odd
kernel calls) is marked ``optnone``: LLVM's time on it bought nothing at run time.

While loops, conditionals and calls are control flow in the entry function: their computations are
emitted inline (condition, body, branches), loop state lives in temps and is copied (memcpy) between
iterations. Kernels by kind are chosen from the ``THUNKS`` table (``kernel_builder.py``), which the kernel
families in ``kernels/`` fill.

Kernels only a rare branch runs (``branch_on_flag``: conv_exact.py's exact convolutions) are *cold*. With
``lazy_cold`` (the JIT) they are not even emitted with the rest: the rare arm of each branch calls the arm's
code through a code-pointer array whose address is in the table's ``cold_slot`` (element 1 + n: arm n of
``cold_names``) and, on a rare branch's first run, the entry calls the runtime's ``tfxla_resolve_cold`` to
make that code (the usual arm runs should that fail). Making it emits the module again in *cold mode*
(:func:`emit_cold`): every rare arm becomes a function ``cold_arm.N(table, lo, hi)`` of a module of its own,
which runs the arm's kernels one after the other on the program's buffer table (they read the program's
table, so the entry gathers nothing for them), and the rest is thrown away. The two emissions agree on the
buffer slots (a rare arm makes none: checked) and on the arms' order (the sites in program order; a
replayed emission rebuilds its branches). The compile happens inside the call, at the branch, and the call
goes on: nothing runs twice, so outputs that alias inputs (variables updated in place, donated buffers) are
safe. Without ``lazy_cold`` (AOT) the rare arms are emitted in the entry and call their kernels directly.

Guarantee: the emitted IR is a deterministic function of the module and the codegen options.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import islice
from typing import Callable

import numpy as np
from llvmlite import ir

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen import kernels  # noqa: F401  (its families fill THUNKS)
from tfxla_cluster.codegen.buffers import BufferPlan, BufferRef, Slot, leaves
from tfxla_cluster.codegen.context import ModuleContext, entry_builder, new_function_body
from tfxla_cluster.codegen.options import ENTRY_NAME, CodegenOptions
from tfxla_cluster.codegen.kernel_builder import THUNKS, KernelBuilder, RowAccess
from tfxla_cluster.codegen.kernel_info import KernelInfo
from tfxla_cluster.codegen.kernels.loop import emit_copy_kernel, emit_loop_thunk
from tfxla_cluster.codegen.loops import for_range
from tfxla_cluster.codegen.small_call import legacy_call
from tfxla_cluster.errors import InternalError, TfXlaError, UnimplementedError
from tfxla_cluster.mxcsr import x86_host
from tfxla_cluster.hlo.ir import HloInstruction
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape
from tfxla_cluster.hlo.structural import instruction_key, instruction_names, literal_key


@dataclass(eq=False)
class _RowGroup:
    """Consecutive row kernels over the same rows, run block of rows by block of rows."""

    items: int
    members: list = field(default_factory=list)      # (function, tasks, position, RowAccess)
    written: set = field(default_factory=set)
    remote: set = field(default_factory=set)

    def accepts(self, rows: RowAccess) -> bool:
        # Blocked order runs a later kernel on block b before an earlier one on block b+1: fine when
        # every slot written in the group is only ever read at the reader's own row. A slot may be
        # written again (an in-place update): each row still sees its writes in program order.
        return rows.items == self.items and not (rows.remote & self.written) and \
            not (rows.written & self.remote)


@dataclass(eq=False)
class _Recording:
    """What one ``ProgramEmitter.reuse`` emission did, in terms of positions in ``slots`` (its buffers'
    slots, then the scratch it asked for), so that it can be replayed on other buffers."""

    slots: list                                   # Slot per position
    position: dict[int, int]                      # slot index -> its first position
    subjects: list                                # the key's instructions (the names in KernelInfo)
    # ("scratch", shape, name) | ("use", pos) | ("call", ...) | ("zero" | "branch", pos, name) | ("else" | "end", ...)
    events: list = field(default_factory=list)
    valid: bool = True
    _names: list[str] | None = None

    @property
    def names(self) -> list[str]:
        """The names of the key's instructions and their callees' (replays map them to their own)."""
        if self._names is None:
            self._names = [n for x in self.subjects for n in instruction_names(x)]
        return self._names

    def at(self, index: int) -> int:
        """The position of slot ``index``; marks the recording invalid for a buffer it was not given."""
        p = self.position.get(index)
        if p is None:
            self.valid = False
            return -1
        return p


# Bytes a row block of a group touches, summed over its kernels (a row read by three kernels counts three
# times). 128 KB keeps the distinct rows of a block (about a third of that on softmax) in L1 between its
# kernels; 256 KB spilled them to L2 and made softmax 4096x1024 1.70 ms instead of 1.35 ms here.
ROW_BLOCK_BYTES = 128 * 1024


# Entry functions of at least this many instructions are not optimised by LLVM (``optnone``): the entry
# only gathers each kernel's buffer table and calls it, so optimising it buys a few nanoseconds per call,
# but MobileNetV2's entry (160 kernel calls, 2,800 instructions) took 0.08 s of LLVM's CPU time (of 0.7 s,
# measured). Its kernels' optimised IR is unchanged: LLVM still propagates the constant ranges of its
# calls into them. A small program (a handful of kernels) keeps an optimised entry.
PLAIN_ENTRY_INSTRUCTIONS = 256

# The entry's helper that fills a kernel's table from a call spec (``ProgramEmitter._fill_table_fn``).
FILL_TABLE = "tfxla_fill_table"

MXCSR_FTZ_DAZ = 0x8040   # MXCSR flush-to-zero (bit 15) | denormals-are-zero (bit 6)


def _flush_denormals(mctx, fn: ir.Function) -> None:
    """Run ``fn`` with denormals flushed (FTZ+DAZ), restoring the caller's MXCSR on return.

    TF runs its kernels and XLA's code on threads with FTZ/DAZ set (``port::ScopedFlushDenormal``
    in every thread-pool worker), so results never hold denormals and denormal inputs read as ±0.
    The entry and every kernel handed to a pool thread set it themselves, so it holds whichever
    thread (Python's, a pool worker, a tfcompile caller) runs them. x86 only (MXCSR)."""
    if not x86_host():
        return
    st = mctx.function("llvm.x86.sse.stmxcsr", t.VOID, [t.PTR])
    ld = mctx.function("llvm.x86.sse.ldmxcsr", t.VOID, [t.PTR])
    b = ir.IRBuilder(fn.entry_basic_block)
    b.position_at_start(fn.entry_basic_block)
    saved = b.alloca(t.I32, name="mxcsr_saved")
    flushed = b.alloca(t.I32, name="mxcsr_ftz")
    b.call(st, [saved])
    old = b.load(saved, typ=t.I32)
    b.store(b.or_(old, ir.Constant(t.I32, MXCSR_FTZ_DAZ)), flushed)
    b.call(ld, [flushed])
    for block in fn.blocks:
        term = block.terminator
        if isinstance(term, ir.Ret):  # "ret" and "ret void" alike
            b.position_before(term)
            b.call(ld, [saved])


class ProgramEmitter:
    """Builds the LLVM module and the buffer plan for one HloModule."""

    def __init__(self, module, options: CodegenOptions, lazy_cold: bool = False, cold_mode: bool = False) -> None:
        """``lazy_cold``: the rare arms of ``branch_on_flag`` are left out (each calls its arm's code through
        the code-pointer array, made on the branch's first run, see :meth:`_open_branch`); else they are
        emitted in the entry, like every other kernel call (an AOT object holds all its code).
        ``cold_mode`` (with ``lazy_cold``; :func:`emit_cold`): emit the rare arms as the functions of
        :attr:`cold_ir` instead (the rest of the emission only keeps the buffer slots those of the first)."""
        self.hlo = module
        self.options = options
        self.mctx = ModuleContext(module.name, options)
        self.plan = BufferPlan()
        self.kernels: list[KernelInfo] = []
        self.pos = 0
        self._const_slots: dict[int, Slot] = {}
        self._claims: dict[tuple[int, tuple], int] = {}
        self._sharing: dict[int, int] = {}   # id(user) -> operand number whose buffer it may reuse
        self._claim_moved: set[int] = set()  # id(user) whose output buffer its operand was computed into
        fn = ir.Function(self.mctx.module, ir.FunctionType(t.VOID, [t.PTR]), ENTRY_NAME)
        fn.args[0].add_attribute("noalias")
        self.entry = fn
        self.b = new_function_body(fn)
        self.output_slots: list[Slot] = []
        self.param_slots: list[Slot] = []
        self.result_structure = None
        self._scopes: dict[int, object] = {}
        self._domain = None
        self._rows: _RowGroup | None = None
        self.row_groups: list[list[str]] = []   # names of the kernels run row block by row block
        self._pool_fns: dict[str, ir.Function] = {}   # kernels run on pool threads
        # Kernels read their buffers from a table of their own, gathered at the call, so that identical
        # kernels (a model's repeated blocks) are emitted, optimised and compiled once. Bounds-check mode
        # keeps the program's table: its failure handler reads the table and the kernel's number.
        self.local_tables = not options.bounds_checks
        self._kernel_by_text: dict[str, ir.Function] = {}
        self._printed: dict[str, tuple[ir.Function, str]] = {}   # kernels' text, printed by ``_unique``
        self.reused_kernels = 0
        # Emissions by structural key (``reuse``): a repeated block's kernels are called again, not emitted.
        self._recorded: dict[tuple, _Recording | None] = {}
        self._recording: _Recording | None = None
        self._key_memo: dict = {}
        self.reused_emissions = 0
        # The counts (``KernelBuilder.count``: (table index, value) pairs) each kernel is called with, by name,
        # and the loads that read them in each kernel that has counts (``KernelBuilder.count_loads``).
        self._counts: dict[str, set[tuple]] = {}
        self._count_loads: dict[str, dict[int, ir.LoadInstr]] = {}
        # The entry's kernel tables as call specs (``_table_spec``): one constant slot for the module.
        self._specs: list[int] = []
        self._spec_offsets: dict[tuple[int, ...], int] = {}
        self._spec_slot: Slot | None = None
        self._entry_ktable: ir.AllocaInstr | None = None   # the kernels' table in the entry, and its size
        self._entry_ktable_size = 0
        # Kernels by caller's key (``call_shared_kernel``): (function, positions of its buffers in the refs).
        self._shared: dict[tuple, tuple[ir.Function, tuple[int, ...]]] = {}
        # Kernels called only on a rare branch (``branch_on_flag``): listed apart from those every call runs.
        self.cold_kernels: list[KernelInfo] = []
        self._branches: list[tuple[ir.Block, ir.Block, bool]] = []   # open ``branch_on_flag``s
        # Lazy cold code: the rare arms' names in the order of the code-pointer array, the slot holding that
        # array's address, and (cold mode) their module's text (set by ``emit``) and the arm being emitted.
        self.lazy_cold = lazy_cold and self.local_tables
        self.cold_mode = cold_mode and self.lazy_cold
        self.cold_ir = ""
        self.cold_names: list[str] = []
        self.cold_slot: Slot | None = None
        self._arm: ir.Function | None = None
        self._arm_functions: list[str] = []   # cold mode: the arms and the kernels they call

    # ------------------------------------------------------------------ top level
    def emit(self) -> str:
        """Emit everything; returns the LLVM IR text."""
        entry = self.hlo.entry
        params = []
        for p in entry.parameters:
            if not p.shape.is_array:
                raise UnimplementedError(f"entry parameter %{p.name} has non-array shape {p.shape}")
            slot = self.plan.new("param", p.shape, number=p.parameter_number, name=p.name)
            self.param_slots.append(slot)
            params.append(BufferRef(slot, p.shape))
        root_leaves = _leaf_paths(entry.root.shape)
        for k, path in enumerate(root_leaves):
            prod_ = _producer(entry.root, path)
            if prod_ is not None and (id(prod_[0]), prod_[1]) not in self._claims:
                self._claims[(id(prod_[0]), prod_[1])] = k
        self._sharing.update(_in_place_candidates(entry))
        self._move_claims_to_operands()
        root = self.emit_computation(entry, params)
        self._finish_outputs(entry.root.shape, root)
        self.b.ret_void()
        arms = [self.mctx.module.globals[name] for name in self.cold_names] if self.cold_mode else []
        for fn in [self.entry, *self._pool_fns.values(), *arms]:   # (arms: called through the pool)
            _flush_denormals(self.mctx, fn)
            self._printed.pop(fn.name, None)
        if sum(len(block.instructions) for block in self.entry.blocks) >= PLAIN_ENTRY_INSTRUCTIONS:
            self.entry.attributes.add("noinline")
            self.entry.attributes.add("optnone")
        self._finish_specs()
        self.plan.pack()
        self._fix_counts()
        width = (self.options.prefer_vector_width, self.mctx.wide_functions, self.mctx.wide_vector_bits())
        if self.cold_mode:   # only the arms' module is wanted: the rest was emitted for its buffer slots
            if self._arm_functions:
                self.cold_ir = _with_vector_width(
                    _cold_module_text(self.mctx.module, self._printed, self._arm_functions), *width)
            self._release()
            return ""
        text = _with_vector_width(_module_text(self.mctx.module, self._printed), *width)
        self._release()
        return text

    def _release(self) -> None:
        """Drop the printed llvmlite module, breaking its reference cycles (a block and its instructions,
        a function and its blocks and arguments, the module and its globals and metadata point at each
        other): reference counting then frees its ~1e5 objects at once, instead of leaving them to the
        cyclic collector, whose first collection after a compile walked them all (MobileNetV2: 60 ms).
        The emitter keeps its buffer plan and kernel list."""
        module = self.mctx.module
        for value in module.globals.values():
            if isinstance(value, ir.Function):
                _dismantle(value)
        module.globals.clear()
        module.metadata = []
        module.namedmetadata.clear()
        module._metadatacache.clear()
        self.mctx.module = None
        self.mctx._functions.clear()
        self.entry = self.b = None
        self._pool_fns.clear()
        self._kernel_by_text.clear()
        self._printed.clear()
        self._recorded.clear()
        self._shared.clear()
        self._counts.clear()
        self._count_loads.clear()
        self._scopes.clear()
        self._domain = None

    def _move_claims_to_operands(self) -> None:
        """Hand an output's buffer down to the operand its producer updates in place.

        When the thunk producing output k writes in place into an operand's buffer (``_sharing``), that
        operand is computed straight into output k (XLA's buffer assignment colocates them likewise):
        softmax's exp then lands in the result and the divide rewrites it, instead of a temp as large
        as the result passing through memory. Followed down a chain of in-place producers."""
        producers = {id(i): i for i in self.hlo.entry.instructions}
        for (holder_id, path), k in list(self._claims.items()):
            holder = producers.get(holder_id)
            while path == () and holder is not None and id(holder) in self._sharing:
                x = holder.operands[self._sharing[id(holder)]]
                if x.opcode in PROGRAM_HANDLERS or x.opcode in _NOT_THUNKS or x.shape != holder.shape or \
                        x.shape.byte_size() != holder.shape.byte_size() or (id(x), ()) in self._claims:
                    break
                del self._claims[(id(holder), ())]
                self._claims[(id(x), ())] = k
                self._claim_moved.add(id(holder))
                holder = x

    def _finish_outputs(self, shape: Shape, root) -> None:
        refs = leaves(root) if shape.is_tuple else [root]
        shapes = shape.leaves()
        outs: list[Slot | None] = [None] * len(refs)
        for k, ref in enumerate(refs):
            if ref.slot.kind == "output" and ref.slot.number == k:
                outs[k] = ref.slot
        for k, (ref, s) in enumerate(zip(refs, shapes)):
            if outs[k] is None:
                slot = self.plan.new("output", s, number=k, name=f"output{k}")
                self.copy(ref, BufferRef(slot, s))
                outs[k] = slot
        self.output_slots = outs
        counter = iter(range(len(outs)))

        def structure(sh: Shape):
            return tuple(structure(x) for x in sh.tuple_shapes) if sh.is_tuple else next(counter)
        self.result_structure = structure(shape)

    # ------------------------------------------------------------------ computations
    def emit_computation(self, comp, param_trees):
        values: dict[int, object] = {}
        if comp is not self.hlo.entry:   # the entry's were found in emit(), before its claims moved
            self._sharing.update(_in_place_candidates(comp))
        for instr in comp.post_order():
            operands = [values[id(o)] for o in instr.operands]
            handler = PROGRAM_HANDLERS.get(instr.opcode)
            try:
                if handler is not None:
                    values[id(instr)] = handler(self, instr, operands, param_trees)
                else:
                    values[id(instr)] = self.thunk(instr, operands)
            except TfXlaError as e:
                if "(while emitting" in e.message:
                    raise
                raise type(e)(f"{e.message} (while emitting %{instr.name} = {instr.opcode.text} "
                              f"in %{comp.name})") from e
        self.flush_rows()  # a computation's kernels have all run when its value is used
        return values[id(comp.root)]

    def new_value(self, instr, shape: Shape | None = None, path=()):
        """Fresh slots for the value of ``instr`` (outputs where the entry root claims them)."""
        shape = shape or instr.shape
        if shape.is_tuple:
            return tuple(self.new_value(instr, s, path + (k,)) for k, s in enumerate(shape.tuple_shapes))
        k = self._claims.pop((id(instr), path), None)
        if k is not None:
            slot = self.plan.new("output", shape, number=k, name=instr.name)
        else:
            slot = self.plan.new("temp", shape, name=instr.name)
        return BufferRef(slot, shape)

    def scratch(self, shape: Shape, name: str = "scratch") -> BufferRef:
        slot = self.plan.new("temp", shape, name=name)
        rec = self._recording
        if rec is not None:
            rec.position[slot.index] = len(rec.slots)
            rec.slots.append(slot)
            rec.events.append(("scratch", shape, name))
        self.plan.define(slot, self.pos)
        return BufferRef(slot, shape)

    def const_slot(self, instr):
        """The buffer(s) of a constant: a const slot per array (a tuple constant gives a tuple)."""
        tree = self._const_slots.get(id(instr))
        if tree is None:
            if instr.literal_elided:
                raise UnimplementedError(f"constant %{instr.name} was printed as {{...}}; its value is unknown")
            tree = self._const_slots[id(instr)] = self._const_tree(instr.name, instr.shape, instr.literal)
        return tree

    def _const_tree(self, name: str, shape: Shape, literal):
        if shape.is_tuple:
            return tuple(self._const_tree(f"{name}.{k}", s, lit)
                         for k, (s, lit) in enumerate(zip(shape.tuple_shapes, literal)))
        if not shape.is_array:
            return ()
        value = np.ascontiguousarray(np.asarray(literal, dtype=shape.dtype))
        # Physical order of the constant's layout.
        if shape.rank and not shape.is_default_layout:
            value = np.ascontiguousarray(np.transpose(value, list(reversed(shape.minor_to_major))))
        return BufferRef(self.plan.new("const", shape, value=value, name=name), shape)

    # ------------------------------------------------------------------ thunks
    def kernel(self, hint: str) -> KernelBuilder:
        return KernelBuilder(self, hint)

    def thunk(self, instr, operands):
        self.pos += 1
        for ref in (r for o in operands for r in leaves(o)):
            self.plan.use(ref.slot, self.pos)
        out = self._reused_operand(instr, operands)
        if out is None:
            out = self.new_value(instr)
        for ref in leaves(out):
            self.plan.define(ref.slot, self.pos)
        emitter = THUNKS.get(instr.opcode, emit_loop_thunk)
        emitter(self, instr, operands, out)
        return out

    def _reused_operand(self, instr, operands) -> BufferRef | None:
        """The operand buffer ``instr`` writes in place (XLA's CanShareOperandBufferWithUser), if any."""
        k = self._sharing.get(id(instr))
        if k is None or (id(instr), ()) in self._claims:
            return None
        ref = operands[k]
        kinds = ("temp", "output") if id(instr) in self._claim_moved else ("temp",)
        if not isinstance(ref, BufferRef) or ref.slot.kind not in kinds or ref.shape != instr.shape or \
                ref.slot.nbytes != instr.shape.byte_size():
            return None
        return BufferRef(ref.slot, instr.shape)

    def tasks_for(self, work_items: int, cost: int) -> int:
        """How many ranges to split a kernel into (XLA's ParallelTaskAssigner, by estimated cost)."""
        threads = self.options.thread_count
        if threads <= 1 or work_items <= 1 or cost < self.options.parallel_min_cost:
            return 1
        return int(min(threads, work_items, max(2, cost // max(self.options.parallel_min_cost, 1))))

    def call_kernel(self, kb: KernelBuilder, instr_name: str, kind: str, work_items: int, tasks: int = 1,
                    cost: int = 0, rows: RowAccess | None = None) -> ir.Function:
        """Finish ``kb`` and call it from the entry function on [0, work_items) in ``tasks`` ranges.

        Consecutive kernels with ``rows`` (items are rows of their results, see :class:`RowAccess`) over
        the same rows, where nothing written in the group is read outside its own row, are run as one
        group: block of rows by block of rows, every member on a block before the next block (softmax's
        max / exp / sum / divide kernels then pass each row through the cache, not through memory four
        times), under one fork-join. Returns the kernel's function (an identical earlier one's, see ``_unique``)."""
        new = kb.finish()
        fn = self._unique(new)
        if fn is new:
            if kb.count_loads:
                self._count_loads[fn.name] = kb.count_loads
            if kb.settle_loops(kind, cost):
                self._printed.pop(fn.name, None)   # marking changed its latches: ``_unique``'s text is stale
        kb.kctx.release()
        self._dispatch(fn, instr_name, kind, work_items, tasks, cost, rows,
                       kb.slot_order if self.local_tables else None)
        return fn

    def call_shared_kernel(self, key: tuple, refs: list[BufferRef], hint: str, build: Callable[[KernelBuilder], None],
                           instr_name: str, kind: str, work_items: int, tasks: int = 1, cost: int = 0) -> None:
        """Call the kernel ``build(kb)`` makes on ``refs``, built once per ``key`` in the module.

        For kernels whose IR is known beforehand to depend on ``key`` alone (e.g. the convolution guards'
        special-value check: element type and limit, its range always from the call) and on which of ``refs``
        share a buffer: ``build`` reads only ``refs``' slots, and a later call with an equal key calls the
        first's function on its own buffers without building it (``_unique`` would find the same text, after
        the work of building and printing it). Recorded by ``reuse`` like ``call_kernel``; in bounds-check
        mode (kernels read the program's table) every call builds its own. With ``verify_reuse`` every call
        builds, and one whose IR differs from its key's first is an InternalError."""
        first: dict[int, int] = {}
        full = (key, tuple(first.setdefault(r.slot.index, k) for k, r in enumerate(refs)), self.mctx.legacy_emitter)
        known = self._shared.get(full) if self.local_tables else None
        if known is not None and not self.verify_reuse:
            fn, positions = known
            self.reused_kernels += 1
            self._dispatch(fn, instr_name, kind, work_items, tasks, cost, None, [refs[p].slot for p in positions])
            return
        kb = self.kernel(hint)
        build(kb)
        fn = self.call_kernel(kb, instr_name, kind, work_items, tasks, cost)
        if not self.local_tables:
            return
        positions = tuple(first.get(s.index, -1) if isinstance(s, Slot) else -1 for s in kb.slot_order)
        if -1 in positions or known not in (None, (fn, positions)):
            raise InternalError(f"shared kernel {fn.name}: its IR is not a function of its key {key!r} and buffers")
        self._shared[full] = (fn, positions)

    def _dispatch(self, fn: ir.Function, instr_name: str, kind: str, work_items: int, tasks: int, cost: int,
                  rows: RowAccess | None, slots) -> None:
        """Schedule the call of the finished kernel ``fn`` on ``slots`` (recorded while ``reuse`` records)."""
        rec = self._recording
        if rec is not None:
            rows_at = None if rows is None else \
                (rows.items, *(frozenset(map(rec.at, ix)) for ix in (rows.local, rows.remote, rows.written)),
                 tuple(rec.at(s.index) for s in rows.slots), rows.row_bytes)
            rec.events.append(("call", fn, instr_name, kind, work_items, tasks, cost, rows_at,
                               tuple(rec.at(s.index) if isinstance(s, Slot) else ("count", s) for s in slots)))
            watch, self.plan.watch = self.plan.watch, None   # scheduling touches earlier kernels' buffers
            try:
                self._schedule(fn, instr_name, kind, work_items, tasks, cost, rows, slots)
            finally:
                self.plan.watch = watch
            return
        self._schedule(fn, instr_name, kind, work_items, tasks, cost, rows, slots)

    def _schedule(self, fn: ir.Function, instr_name: str, kind: str, work_items: int, tasks: int, cost: int,
                  rows: RowAccess | None, slots) -> None:
        """Call the finished kernel ``fn`` on ``slots`` (see ``call_kernel``)."""
        counts = tuple((k, s) for k, s in enumerate(slots or ()) if isinstance(s, int))
        if counts:
            self._counts.setdefault(fn.name, set()).add(counts)
        cold = self._arm is not None or bool(self._branches) and self._branches[-1][2]
        (self.cold_kernels if cold else self.kernels).append(KernelInfo(fn.name, instr_name, kind, work_items,
                                                                         tasks, cost))
        if self._arm is not None:
            # A rare arm's kernels run one after the other on the arm's thread: the arm is itself called
            # through ``tfxla_parallel_for``, which a kernel must not call again (the pool is not re-entrant).
            self.flush_rows()
            self._call(fn, work_items, 1, slots)
            return
        if rows is not None and self.options.row_groups:
            if self._rows is not None and not self._rows.accepts(rows):
                self.flush_rows()
            if self._rows is None:
                self._rows = _RowGroup(rows.items)
            group = self._rows
            group.members.append((fn, tasks, self.pos, rows, slots))
            group.written |= rows.written
            group.remote |= rows.remote
            return
        self.flush_rows()
        self._call(fn, work_items, tasks, slots)

    # ------------------------------------------------------------------ reuse of whole emissions
    # Tests set this: every emission is made afresh, and one that an equal key would have replayed must
    # produce the same kernels (the same functions, through ``_unique``), calls and buffer uses.
    verify_reuse = False

    def reuse(self, key: tuple, refs: list[BufferRef], emit: Callable[[], None]) -> None:
        """Run ``emit``, or replay on ``refs`` what an earlier ``emit`` with an equal key emitted.

        A model's repeated block lowers to fusions and convolutions that differ only in their names and
        buffers; their kernels are then emitted once and called again, without building their IR to find
        out that it is the same (``_unique``'s check). For that the key must determine the emission:
        ``emit`` emits kernels only through ``call_kernel`` and ``scratch``, touches no buffer but ``refs``
        and its scratch, and everything else it reads is in ``key`` — HloInstructions in it stand for their
        structural keys (``hlo.structural.instruction_key``: opcode, shapes and layouts, attributes, constant
        values, operand graph, callees; not names), the other items are hashable values. The key is
        completed with the buffers: each ref's shape, its slot's kind, which refs share a slot, and a
        scalar constant's value (kernels read those as immediates). An emission that touched another
        buffer or made a mutable global (an RNG state) is not recorded. Nested calls run as part of the
        outer one; in bounds-check mode (kernels read the program's table) nothing is reused."""
        if not self.local_tables or self._recording is not None or self.cold_mode:
            emit()   # (cold mode emits every rare arm afresh: an arm reads its buffers from the program's table)
            return
        full = (tuple(instruction_key(x, self._key_memo) if isinstance(x, HloInstruction) else x for x in key),
                _refs_key(refs), self.mctx.legacy_emitter)
        subjects = [x for x in key if isinstance(x, HloInstruction)]
        known = self._recorded.get(full, _MISSING)
        if isinstance(known, _Recording) and not self.verify_reuse:
            self._replay(known, refs, subjects)
            return
        rec = self._record(refs, subjects, emit)
        if known is _MISSING:
            self._recorded[full] = rec if rec.valid else None
        elif known is not None and _events(rec) != _events(known):
            raise InternalError(f"kernel reuse: two emissions with equal keys differ ({', '.join(rec.names[:1])})")

    def not_replayable(self) -> None:
        """The emission running now cannot be replayed from its events: it chose its kernels by a constant
        buffer's values, which ``reuse`` keys leave out. Its ``reuse`` is then not recorded (equal
        emissions are emitted again; ``_unique`` still shares their kernels)."""
        if self._recording is not None:
            self._recording.valid = False

    def zero_flag(self, flag: BufferRef) -> None:
        """``*flag = 0`` (an s32 scalar) in the entry function; recorded for ``reuse``."""
        self._event("zero", flag.slot, "")
        self.b.store(ir.Constant(t.I32, 0), self.entry_ptr(flag.slot))

    def branch_on_flag(self, flag: BufferRef, name: str, rare: Callable[[], None], usual: Callable[[], None]) -> None:
        """``if (*flag) rare(); else usual();`` in the entry function (``flag``: an s32 scalar the kernels
        emitted before set; ``name``: the instruction's, for the blocks). The kernels ``rare`` calls are listed
        in ``cold_kernels``; with ``lazy_cold`` ``rare`` is emitted only in cold mode, as an arm of the cold
        module (see the module docstring), and must make no buffer. Recorded for ``reuse`` as events around
        both branches' own, so a replay rebuilds the branch."""
        if self.cold_mode:
            self._new_cold_slot()   # where the entry emitted without arms made it
            self._emit_arm(rare)
            usual()   # for its buffer slots (and so those after it): the entry is thrown away
            return
        self._event("branch", flag.slot, name)
        self._open_branch(flag.slot, name)
        if not self.lazy_cold:
            rare()
        self._event("else", None, "")
        self._end_arm(closing=False)
        usual()
        self._event("end", None, "")
        self._end_arm(closing=True)

    def _event(self, kind: str, slot: Slot | None, name: str) -> None:
        rec = self._recording
        if rec is not None:
            rec.events.append((kind, None if slot is None else rec.at(slot.index), name))

    def _open_branch(self, slot: Slot, name: str) -> None:
        """Branch on the flag in ``slot`` to a rare arm and a usual one. With ``lazy_cold`` the rare arm
        first makes sure the cold code is made: ``tfxla_resolve_cold(table, code)`` (the native runtime)
        emits and compiles the cold module and fills the code-pointer array (should that fail, the usual arm
        runs); then it runs its arm, ``cold_arm.N(table, 0, 1)``, through ``tfxla_parallel_for`` (an address
        loaded at run time: no indirect call in the IR)."""
        flag = self.b.load(self.entry_ptr(slot), typ=t.I32)   # entry_ptr runs the pending row group first
        rare, usual, done = (self.entry.append_basic_block(f"guard.{name}.{k}") for k in ("rare", "usual", "done"))
        fired = self.b.icmp_unsigned("!=", flag, ir.Constant(t.I32, 0))
        if self.lazy_cold:
            load, resolve = (self.entry.append_basic_block(f"guard.{name}.{k}") for k in ("load", "resolve"))
            self.b.cbranch(fired, load, usual)
            self.b.position_at_end(load)
            code = self._cold_array()
            # Element 0: null until the cold code is loaded (acquire: the arms' addresses are read after it).
            ready = self.b.load_atomic(code, "acquire", 8, typ=t.PTR)
            self.b.cbranch(self.b.icmp_unsigned("!=", ready, ir.Constant(t.PTR, None)), rare, resolve)
            self.b.position_at_end(resolve)
            fn = self.mctx.function("tfxla_resolve_cold", t.I64, [t.PTR, t.PTR])
            ok = self.b.call(fn, [self.entry.args[0], code])
            self.b.cbranch(self.b.icmp_unsigned("!=", ok, t.i64(0)), rare, usual)
            self.b.position_at_end(rare)
            arm = len(self.cold_names)
            self.cold_names.append(_arm_name(arm))
            at = self.b.gep(code, [t.i64(1 + arm)], inbounds=True, source_etype=t.PTR)
            pf = self.mctx.function("tfxla_parallel_for", t.VOID, [t.PTR, t.PTR, t.I64, t.I64])
            self.b.call(pf, [self.b.load(at, typ=t.PTR), self.entry.args[0], t.i64(1), t.i64(1)])
        else:
            self.b.cbranch(fired, rare, usual)
            self.b.position_at_end(rare)
        self._branches.append((usual, done, True))

    def _cold_array(self):
        """The lazy code-pointer array (in the entry): element 0 non-null once the cold code is loaded, then
        one arm's address per name in ``cold_names``. Its address is in the table's ``cold_slot``."""
        return self.entry_ptr(self._new_cold_slot())

    def _new_cold_slot(self) -> Slot:
        """``cold_slot``, made by the first rare branch."""
        if self.cold_slot is None:
            self.cold_slot = self.plan.new("cold", Shape(T.U64, (0,)), name="cold code")
        return self.cold_slot

    def _emit_arm(self, rare: Callable[[], None]) -> None:
        """Cold mode: ``rare()`` as the next arm, a function of its own reading the program's table."""
        if self._arm is not None:
            raise InternalError("a rare branch inside a rare branch has no arm of its own")
        self.flush_rows()
        name = _arm_name(len(self.cold_names))
        self.cold_names.append(name)
        arm = ir.Function(self.mctx.module, ir.FunctionType(t.VOID, [t.PTR, t.I64, t.I64]), name)
        arm.args[0].add_attribute("noalias")
        arm.attributes.add("nounwind")
        globals_ = self.mctx.module.globals
        before, slots = set(globals_), len(self.plan.slots)
        entry, b, self.entry, self.b, self._arm = self.entry, self.b, arm, new_function_body(arm), arm
        self.local_tables = False   # the arm's kernels read the program's table: nothing gathers for them
        try:
            rare()
            self.flush_rows()
            self.b.ret_void()
        finally:
            self.entry, self.b, self._arm, self.local_tables = entry, b, None, True
        if len(self.plan.slots) != slots:
            raise InternalError(f"rare arm {name} made buffers: the entry emitted without it has other slots")
        self._arm_functions += [name] + [n for n, g in globals_.items() if n not in before and
                                         isinstance(g, ir.Function) and not g.is_declaration]

    def _end_arm(self, closing: bool) -> None:
        """End the open branch's current arm: on to its usual arm, or (``closing``) to the code after it."""
        self.flush_rows()
        usual, done, _ = self._branches.pop()
        self.b.branch(done)
        self.b.position_at_end(done if closing else usual)
        if not closing:
            self._branches.append((usual, done, False))

    def _record(self, refs: list[BufferRef], subjects: list, emit: Callable[[], None]) -> _Recording:
        position: dict[int, int] = {}
        for k, r in enumerate(refs):
            position.setdefault(r.slot.index, k)
        rec = _Recording([r.slot for r in refs], position, subjects)
        globals_ = self.mctx.module.globals
        before = len(globals_)
        watched = self.plan.watch = []
        self._recording = rec
        try:
            emit()
        finally:
            self._recording = None
            self.plan.watch = None
        rec.events.extend(("use", rec.at(index)) for index in dict.fromkeys(watched))
        made = islice(reversed(globals_.values()), len(globals_) - before)   # (only those: a module has ~1e3)
        if any(isinstance(g, ir.GlobalVariable) and not g.global_constant for g in made):
            rec.valid = False
        return rec

    def _replay(self, rec: _Recording, refs: list[BufferRef], subjects: list) -> None:
        slots = [r.slot for r in refs]
        names = dict(zip(rec.names, (n for x in subjects for n in instruction_names(x))))
        for event in rec.events:
            if event[0] == "scratch":
                slots.append(self.scratch(event[1], names.get(event[2], event[2])).slot)
            elif event[0] == "use":
                self.plan.use(slots[event[1]], self.pos)
            elif event[0] == "zero":
                self.b.store(ir.Constant(t.I32, 0), self.entry_ptr(slots[event[1]]))
            elif event[0] == "branch":
                self._open_branch(slots[event[1]], names.get(event[2], event[2]))
            elif event[0] in ("else", "end"):
                self._end_arm(closing=event[0] == "end")
            else:
                _, fn, name, kind, work_items, tasks, cost, rows_at, at = event
                rows = None
                if rows_at is not None:
                    local, remote, written = (frozenset(slots[p].index for p in ps) for ps in rows_at[1:4])
                    rows = RowAccess(rows_at[0], local, remote, written, [slots[p] for p in rows_at[4]], rows_at[5])
                self.reused_kernels += 1
                self._schedule(fn, names.get(name, name), kind, work_items, tasks, cost, rows,
                               [slots[p] if isinstance(p, int) else p[1] for p in at])
        self.reused_emissions += 1

    def _unique(self, fn: ir.Function) -> ir.Function:
        """``fn``, or the kernel emitted earlier with the same IR (up to its name), ``fn`` then dropped."""
        if not self.local_tables:
            return fn
        text = str(fn)
        head, sep, body = text.partition("\n")
        # The name is the only part of the define line that differs between identical kernels; in the body,
        # a loop's ID (``loops.loop_hints``: a node of its own, numbered in the module) is its hints.
        key = head.replace(f'@"{fn.name}"', "@k", 1) + sep + _loop_ids_as_hints(fn, body)
        first = self._kernel_by_text.get(key)
        if first is None:
            self._kernel_by_text[key] = fn
            self._printed[fn.name] = (fn, text)
            return fn
        del self.mctx.module.globals[fn.name]
        _dismantle(fn)
        self.mctx.wide_functions.discard(fn.name)
        self.reused_kernels += 1
        return first

    def _fix_counts(self) -> None:
        """Give each kernel that every call runs with the same counts (``KernelBuilder.count``) those counts as
        constants: it shares its function with no kernel of other sizes, and LLVM, seeing exact trip counts,
        leaves out the remainder loops and checks that run-time counts need (more code to optimise and
        compile: BERT-tiny training's LLVM time grew a fifth without this). The calls still store the values,
        which the kernel no longer reads."""
        for name, sets in self._counts.items():
            if len(sets) != 1:
                continue
            (counts,) = sets
            fn = self.mctx.module.globals[name]
            _constant_counts(fn, self._count_loads[name], dict(counts))
            self._printed.pop(name, None)   # its text changed

    def _gather(self, b: ir.IRBuilder, table, slots) -> ir.Value:
        """A kernel's own table for ``slots`` (``KernelBuilder.slot_order``: buffers, and ints for the kernel's
        counts) in the function ``b`` builds (``table``: that function's program table); ``table`` itself when
        the kernels use the program's table. The entry fills it with one call of ``tfxla_fill_table`` from
        the program's table of call specs (``_table_spec``); other functions (row groups, rare arms) store
        each entry."""
        if slots is None:
            return table
        if not slots:
            return ir.Constant(t.PTR, None)
        offset = self._table_spec(slots) if b.function is self.entry and self._arm is None else None
        if offset is not None:
            # One table for every such call: each fills it right before its kernel runs (fork-join).
            if self._entry_ktable is None:
                self._entry_ktable = entry_builder(b.function).alloca(t.PTR, size=t.i64(1), name="ktable")
            self._entry_ktable_size = max(self._entry_ktable_size, len(slots))
            b.call(self._fill_table_fn(), [self._entry_ktable, table, t.i64(offset), t.i64(len(slots))])
            return self._entry_ktable
        local = entry_builder(b.function).alloca(t.PTR, size=t.i64(len(slots)), name="ktable")
        for i, slot in enumerate(slots):
            dst = b.gep(local, [t.i64(i)], inbounds=True, source_etype=t.PTR)
            if isinstance(slot, int):   # a count: the i64 itself in the pointer-sized entry
                b.store(t.i64(slot), dst)
                continue
            src = b.gep(table, [t.i64(slot.index)], inbounds=True, source_etype=t.PTR)
            b.store(b.load(src, typ=t.PTR), dst)
        return local

    def _table_spec(self, slots) -> int | None:
        """Where the call spec of a kernel table for ``slots`` starts in the program's spec array (a constant
        slot, ``_finish_specs``): entry i is ``s >= 0``, the program table's entry s (a buffer), or ``-1 - c``,
        the count c. The same spec twice is stored once. None for a negative count (stored inline)."""
        if any(isinstance(s, int) and s < 0 for s in slots):
            return None
        spec = tuple(-1 - s if isinstance(s, int) else s.index for s in slots)
        offset = self._spec_offsets.get(spec)
        if offset is None:
            if self._spec_slot is None:
                # (its shape and value are set once all calls are known: ``_finish_specs``)
                self._spec_slot = self.plan.new("const", Shape.array(T.S64, (0,)), value=np.zeros(0, np.int64),
                                                name="kernel_table_specs")
            offset = self._spec_offsets[spec] = len(self._specs)
            self._specs.extend(spec)
        return offset

    def _finish_specs(self) -> None:
        """Give the spec array its values (before the plan packs: it is a constant of the buffer table)."""
        slot = self._spec_slot
        if slot is None:
            return
        self._entry_ktable.operands = [t.i64(self._entry_ktable_size)]
        slot.value = np.array(self._specs, dtype=np.int64)
        slot.shape = Shape.array(T.S64, (len(self._specs),))
        slot.nbytes = slot.shape.byte_size()

    def _fill_table_fn(self) -> ir.Function:
        """``tfxla_fill_table(ptr dst, ptr table, i64 offset, i64 n)``: dst[i] := the spec's entry offset+i
        resolved against the program's table (``_table_spec``). One call in the entry instead of a load and
        a store per entry (DenseNet-121's entry: about 3,000 stores, 4/5 of its IR)."""
        fn = self.mctx.module.globals.get(FILL_TABLE)
        if fn is not None:
            return fn
        fn = ir.Function(self.mctx.module, ir.FunctionType(t.VOID, [t.PTR, t.PTR, t.I64, t.I64]), FILL_TABLE)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        # Not inlined: LLVM would fully unroll each call's constant count and SLP-vectorise the copies, which
        # doubled the optimisation time of a small cluster's module (EfficientNet-B0's 17 auto clusters:
        # 1.74 -> 1.04 s of optimisation, 0.95 -> 0.80 s of machine code) to save a call per kernel launch.
        # Not optimised either (optnone: no passes, fast instruction selection; its loop was vectorised into
        # gathers): it moves a few dozen words per kernel launch, and its ~6-12 ms of LLVM time was paid by
        # every module (ResNet-50's 49 auto clusters: 1.05 -> 0.92 s of LLVM CPU).
        fn.attributes.add("noinline")
        fn.attributes.add("optnone")
        dst, table, offset, n = fn.args
        dst.add_attribute("noalias")
        dst.name, table.name, offset.name, n.name = "dst", "table", "offset", "n"
        b = new_function_body(fn)
        spec_gep = b.gep(table, [t.i64(self._spec_slot.index)], inbounds=True, source_etype=t.PTR)
        spec = b.load(spec_gep, typ=t.PTR, name="spec")
        # Every word is moved as a pointer (the tables' type); a spec word or count is its integer value.
        with for_range(b, 0, n, "e") as i:
            word = b.load(b.gep(spec, [b.add(offset, i)], inbounds=True, source_etype=t.PTR), typ=t.PTR)
            e = b.ptrtoint(word, t.I64)
            is_buffer = b.icmp_signed(">=", e, t.i64(0))
            # (the load reads entry 0 for a count: always in the table)
            at = b.select(is_buffer, e, t.i64(0))
            address = b.load(b.gep(table, [at], inbounds=True, source_etype=t.PTR), typ=t.PTR)
            value = b.select(is_buffer, address, b.inttoptr(b.sub(t.i64(-1), e), t.PTR))
            b.store(value, b.gep(dst, [i], inbounds=True, source_etype=t.PTR))
        b.ret_void()
        return fn

    def _call(self, fn, work_items: int, tasks: int, slots=None) -> None:
        """Call kernel ``fn`` from the entry (or from the rare arm being emitted)."""
        if tasks <= 1 and work_items <= 0:
            return
        table = self._gather(self.b, self.entry.args[0], slots)
        if tasks > 1:
            self._pool_fns[fn.name] = fn
            pf = self.mctx.function("tfxla_parallel_for", t.VOID, [t.PTR, t.PTR, t.I64, t.I64])
            self.b.call(pf, [fn, table, t.i64(work_items), t.i64(tasks)])
        else:
            self.b.call(fn, [table, t.i64(0), t.i64(work_items)])

    def flush_rows(self) -> None:
        """Emit the pending row group's call (entry-level code must not run between its kernels)."""
        group, self._rows = self._rows, None
        if group is None:
            return
        if len(group.members) == 1:
            fn, tasks, _, _, slots = group.members[0]
            self._call(fn, group.items, tasks, slots)
            return
        # Every buffer a member touches lives across the whole group: a later member's output must not
        # share arena bytes with something an earlier member still reads on a later block.
        first, last = group.members[0][2], group.members[-1][2]
        for _, _, _, rows, _ in group.members:
            for slot in rows.slots:
                self.plan.define(slot, first)
                self.plan.use(slot, last)
        row_bytes = max(sum(m[3].row_bytes for m in group.members), 1)
        block = max(1, ROW_BLOCK_BYTES // row_bytes)
        fn = ir.Function(self.mctx.module, ir.FunctionType(t.VOID, [t.PTR, t.I64, t.I64]),
                         self.mctx.unique_name("rows_" + group.members[0][0].name))
        fn.args[0].add_attribute("noalias")
        fn.attributes.add("nounwind")
        fn.linkage = "internal"
        b = new_function_body(fn)
        table, lo, hi = fn.args
        tables = [self._gather(b, table, m[4]) for m in group.members]
        n_blocks = b.sdiv(b.add(b.sub(hi, lo), t.i64(block - 1)), t.i64(block))
        with for_range(b, 0, n_blocks, "blk") as k:
            start = b.add(lo, b.mul(k, t.i64(block)))
            end = b.add(start, t.i64(block))
            end = b.select(b.icmp_signed("<", end, hi), end, hi)
            for (member, *_), member_table in zip(group.members, tables):
                b.call(member, [member_table, start, end])
        b.ret_void()
        self.row_groups.append([m[0].name for m in group.members])
        self._call(fn, group.items, max(m[1] for m in group.members))

    # ------------------------------------------------------------------ entry-level helpers
    def entry_ptr(self, slot: Slot):
        self.flush_rows()  # entry-level code: pending row kernels must have run
        gep = self.b.gep(self.entry.args[0], [t.i64(slot.index)], inbounds=True, source_etype=t.PTR)
        return self.b.load(gep, typ=t.PTR)

    def load_scalar(self, ref: BufferRef):
        """The value of a scalar buffer, read in the entry function."""
        if ref.slot.kind == "const" and ref.slot.value is not None:
            return t.constant(ref.shape.element_type, np.asarray(ref.slot.value).reshape(-1)[0])
        et = ref.shape.element_type
        raw = self.b.load(self.entry_ptr(ref.slot), typ=t.storage_type(et))
        return t.from_storage(self.b, et, raw)

    def copy(self, src: BufferRef, dst: BufferRef) -> None:
        """dst := src (memcpy when the bytes are laid out alike, else an elemental copy kernel)."""
        self.pos += 1
        self.plan.use(src.slot, self.pos)
        self.plan.define(dst.slot, self.pos)
        if src.slot is dst.slot:
            return
        if src.shape.element_type is dst.shape.element_type and \
                src.shape.minor_to_major == dst.shape.minor_to_major and \
                src.shape.dimensions == dst.shape.dimensions or \
                (src.shape.is_default_layout and dst.shape.is_default_layout and
                 src.shape.element_type is dst.shape.element_type and
                 src.shape.num_elements == dst.shape.num_elements):
            nbytes = dst.shape.byte_size()
            if nbytes:
                memcpy = self.mctx.function("llvm.memcpy.p0.p0.i64", t.VOID, [t.PTR, t.PTR, t.I64, t.I1])
                self.b.call(memcpy, [self.entry_ptr(dst.slot), self.entry_ptr(src.slot), t.i64(nbytes),
                                     ir.Constant(t.I1, 0)])
            return
        emit_copy_kernel(self, src, dst)

    # ------------------------------------------------------------------ alias metadata
    def _scope(self, slot: int):
        md = self._scopes.get(slot)
        if md is None:
            module = self.mctx.module
            if self._domain is None:
                self._domain = module.add_metadata([ir.MetaDataString(module, "tfxla.buffers")])
            md = self._scopes[slot] = module.add_metadata(
                [ir.MetaDataString(module, f"tfxla.slot{slot}"), self._domain])
        return md

    def attach_alias_metadata(self, accesses, slots: set[int]) -> None:
        """Each access gets its slot's scope and is declared not to alias the kernel's other slots."""
        if len(slots) < 2:
            return
        module = self.mctx.module
        scope_lists, noalias_lists = {}, {}
        for s in sorted(slots):
            scope_lists[s] = module.add_metadata([self._scope(s)])
            noalias_lists[s] = module.add_metadata([self._scope(o) for o in sorted(slots) if o != s])
        for instr, s in accesses:
            instr.set_metadata("alias.scope", scope_lists[s])
            instr.set_metadata("noalias", noalias_lists[s])


_MISSING = object()


def _dismantle(fn: ir.Function) -> None:
    """Break the reference cycles of a function no longer needed: its blocks and their instructions, its
    arguments and return value point back at it, and a loop's phi reaches itself through its operands."""
    for block in fn.blocks:
        for instr in block.instructions:   # phis lead their block (LLVM's rule): the scan stops at the first other
            if not isinstance(instr, ir.PhiInstr):
                break
            instr.incomings.clear()
        block.instructions = []
        block.terminator = None
    fn.blocks = []
    fn.args = ()
    fn.return_value = None


_LOOP_ID_REF = re.compile(r"!llvm\.loop (![0-9]+)")


def _constant_counts(fn: ir.Function, loads: dict[int, ir.LoadInstr], values: dict[int, int]) -> None:
    """Replace ``fn``'s loads of its counts (``loads``: ``KernelBuilder.count_loads``, by table index, in its entry
    block) by ``values`` (table index -> value), as instructions LLVM folds at once (one pass over ``fn``)."""
    block = fn.blocks[0]
    constant = {}
    for index, load in loads.items():
        b = ir.IRBuilder(block)
        b.position_before(load)
        constant[id(load)] = b.add(t.i64(values[index]), t.i64(0))
        block.instructions.remove(load)
    for bb in fn.blocks:
        for x in bb.instructions:
            if isinstance(x, ir.PhiInstr):
                if any(id(v) in constant for v, _ in x.incomings):
                    x.incomings = [(constant.get(id(v), v), blk) for v, blk in x.incomings]
                    x._clear_string_cache()
            elif any(id(v) in constant for v in x.operands):
                x.operands = tuple(constant.get(id(v), v) for v in x.operands)
                if isinstance(x, ir.GEPInstr):   # (prints its own copies of its operands)
                    x.pointer, x.indices = x.operands[0], list(x.operands[1:])
                x._clear_string_cache()


def _loop_ids_as_hints(fn: ir.Function, body: str) -> str:
    """``body`` (``fn``'s printed blocks) with each ``!llvm.loop !N`` written as its loop ID's hint nodes.

    Every loop ID is a self-referencing node of its own, named by its position in the module's metadata,
    so two emissions of one kernel print different numbers for it; its hint nodes (``add_metadata``:
    one per content in the module) name what the loop ID says."""
    ids = {}
    for block in fn.blocks:
        md = block.terminator.metadata.get("llvm.loop") if block.terminator is not None else None
        if md is not None:
            ids[md.get_reference()] = "!{" + ", ".join(op.get_reference() for op in md.operands[1:]) + "}"
    if not ids:
        return body
    return _LOOP_ID_REF.sub(lambda m: "!llvm.loop " + ids.get(m.group(1), m.group(1)), body)


def _refs_key(refs: list[BufferRef]) -> tuple:
    """What a kernel can see of its buffers: shapes, which refs share a slot, constants, and the values of
    scalar constants (``KernelBuilder.read`` makes them immediates). Parameters, outputs and temps are
    all addresses in the kernel's table: a block reading an entry parameter reuses one reading a temp."""
    first: dict[int, int] = {}
    out = []
    for k, r in enumerate(refs):
        slot = r.slot
        const = slot.kind == "const"
        value = literal_key(slot.value) if const and slot.value is not None and r.shape.num_elements == 1 else None
        out.append((r.shape, const, first.setdefault(slot.index, k), value))
    return tuple(out)


def _events(rec: _Recording) -> list:
    """A recording's events in a comparable form: calls by kernel function, instruction names by their
    position among the key's instructions, uses as a set."""
    where = {n: k for k, n in enumerate(rec.names)}
    named = [e[:2] + (where.get(e[2], e[2]),) + e[3:] for e in rec.events if e[0] != "use"]
    return named + sorted({e for e in rec.events if e[0] == "use"})


# ---------------------------------------------------------------------- program-level handlers
def _parameter(prog, instr, operands, params):
    return params[instr.parameter_number]


def _constant(prog, instr, operands, params):
    return prog.const_slot(instr)


def _tuple(prog, instr, operands, params):
    return tuple(operands)


def _gte(prog, instr, operands, params):
    return operands[0][instr.tuple_index]


def _view(prog, instr, operands, params):
    (ref,) = operands
    return BufferRef(ref.slot, instr.shape)


def _reshape(prog, instr, operands, params):
    (ref,) = operands
    if instr.shape.is_default_layout and ref.shape.is_default_layout:
        return BufferRef(ref.slot, instr.shape)
    return prog.thunk(instr, operands)


def _identity(prog, instr, operands, params):
    return operands[0]


def _token(prog, instr, operands, params):
    return ()


def _module_text(module: ir.Module, printed: dict[str, tuple[ir.Function, str]]) -> str:
    """``str(module)`` (llvmlite's ``Module.__repr__``), with the text of the functions in ``printed``
    (printed before and unchanged since) reused instead of printed again."""
    lines = _module_head(module)
    lines += [_global_text(value, printed) for value in module.globals.values()]
    lines += module._get_metadata_lines()
    return "\n".join(lines)


def _module_head(module: ir.Module, suffix: str = "") -> list[str]:
    return [f'; ModuleID = "{module.name}{suffix}"', f'target triple = "{module.triple}"',
            f'target datalayout = "{module.data_layout}"', "",
            *(it.get_declaration() for it in module.get_identified_types().values())]


def _global_text(value, printed: dict[str, tuple[ir.Function, str]]) -> str:
    known = printed.get(value.name)
    return known[1] if known is not None and known[0] is value else str(value)


def _arm_name(n: int) -> str:
    return f"cold_arm.{n}"


def emit_cold(module, options: CodegenOptions) -> tuple[str, list[str], list[KernelInfo]]:
    """The cold module of ``module`` (the rare arms a ``lazy_cold`` emission left out, see the module
    docstring): its IR text, the arms' names (in the order of the code-pointer array) and their kernels."""
    prog = ProgramEmitter(module, options, lazy_cold=True, cold_mode=True)
    prog.emit()
    return prog.cold_ir, prog.cold_names, prog.cold_kernels


def _cold_module_text(module: ir.Module, printed: dict[str, tuple[ir.Function, str]], names: list[str]) -> str:
    """A module of its own for the functions ``names`` (the rare arms and the kernels they call; exported, so
    that the loader finds them) with what they may refer to: the declarations, the constant globals and the
    metadata of ``module``. Only an RNG's kernels have a mutable global (never a rare branch's)."""
    lines = _module_head(module, ".cold")
    for value in module.globals.values():
        if isinstance(value, ir.Function) and value.is_declaration or \
                isinstance(value, ir.GlobalVariable) and value.global_constant:
            lines.append(_global_text(value, printed))
    for name in names:
        text = _global_text(module.globals[name], printed)
        if any(f'@"{g.name}"' in text or f"@{g.name}" in text for g in module.globals.values()
               if isinstance(g, ir.GlobalVariable) and not g.global_constant):
            raise InternalError(f"cold kernel {name} refers to a mutable global: it cannot have a module of its own")
        lines.append(re.sub(r"^define (internal |private )?", "define ", text, count=1))
    lines += module._get_metadata_lines()
    return "\n".join(lines)


def _with_vector_width(text: str, bits: int, wide: set[str] = frozenset(), wide_bits: int = 0) -> str:
    """Give every defined function LLVM's ``"prefer-vector-width"`` attribute (XLA's
    ``xla_cpu_prefer_vector_width``): the vectorisers' register width; functions named in ``wide``
    (inline transcendentals) get ``wide_bits``. llvmlite's attribute sets take only enum attributes, so
    the string attribute goes into the printed IR."""
    def attr(m):
        name = re.search(r'@"?([^"(\s]+)"?\(', m.group(1))
        width = wide_bits if wide and name is not None and name.group(1) in wide else bits
        return f'{m.group(1)} "prefer-vector-width"="{width}"\n{{'
    return re.sub(r'^(define [^\n]*?)\s*\n\{', attr, text, flags=re.M)


def _call(prog, instr, operands, params):
    if not legacy_call(instr):
        return prog.emit_computation(instr.to_apply, operands)
    mctx = prog.mctx
    outer, mctx.legacy_emitter = mctx.legacy_emitter, True   # XLA's one small-call kernel: small_call.py
    try:
        return prog.emit_computation(instr.to_apply, operands)
    finally:
        mctx.legacy_emitter = outer


def _copy_tree(prog, src, dst) -> None:
    if isinstance(dst, tuple):
        for s, d in zip(src, dst):
            _copy_tree(prog, s, d)
    else:
        prog.copy(src, dst)


def _while(prog, instr, operands, params):
    (init,) = operands
    prog.flush_rows()  # control flow: pending row kernels run before the loop's blocks
    b = prog.b
    state = _temps_like(prog, instr.shape, instr.name)
    _copy_tree(prog, init, state)
    fn = prog.entry
    head = fn.append_basic_block(f"while.{instr.name}.cond")
    body = fn.append_basic_block(f"while.{instr.name}.body")
    done = fn.append_basic_block(f"while.{instr.name}.done")
    start = prog.pos + 1
    b.branch(head)
    b.position_at_end(head)
    pred = prog.emit_computation(instr.while_condition, [state])
    prog.pos += 1
    prog.plan.use(pred.slot, prog.pos)
    b.cbranch(prog.load_scalar(pred), body, done)
    b.position_at_end(body)
    result = prog.emit_computation(instr.while_body, [state])
    _assign_state(prog, result, state)
    b.branch(head)
    b.position_at_end(done)
    prog.pos += 1
    prog.plan.extend_loop(start, prog.pos)
    for ref in leaves(state):  # the state lives through the whole loop
        prog.plan.use(ref.slot, prog.pos)
    return state


def _assign_state(prog, result, state) -> None:
    """state := result, leaf by leaf, safe when a result leaf is another state leaf (a swap)."""
    res, dst = leaves(result), leaves(state)
    state_slots = {id(r.slot) for r in dst}
    staged = []
    for r, d in zip(res, dst):
        if r.slot is d.slot:
            continue
        if id(r.slot) in state_slots:
            tmp = BufferRef(prog.plan.new("temp", r.shape, name="while.swap"), r.shape)
            prog.copy(r, tmp)
            staged.append((tmp, d))
        else:
            staged.append((r, d))
    for r, d in staged:
        prog.copy(r, d)


def _temps_like(prog, shape: Shape, name: str):
    if shape.is_tuple:
        return tuple(_temps_like(prog, s, name) for s in shape.tuple_shapes)
    slot = prog.plan.new("temp", shape, name=name)
    return BufferRef(slot, shape)


def _conditional(prog, instr, operands, params):
    selector, args = operands[0], operands[1:]
    prog.flush_rows()
    b = prog.b
    n = len(instr.branch_computations)
    prog.pos += 1
    prog.plan.use(selector.slot, prog.pos)
    sel = prog.load_scalar(selector)
    if selector.shape.element_type is T.PRED:
        index = b.select(sel, t.i64(0), t.i64(1))
    else:
        et = selector.shape.element_type
        from tfxla_cluster.codegen.scalar_ops import ScalarOps
        v = ScalarOps(b, prog.mctx).convert(et, T.S64, sel) if et is not T.U64 else sel
        index = b.select(b.icmp_unsigned("<", v, t.i64(n)), v, t.i64(n - 1))
    out = _temps_like(prog, instr.shape, instr.name)
    fn = prog.entry
    done = fn.append_basic_block(f"cond.{instr.name}.done")
    blocks = [fn.append_basic_block(f"cond.{instr.name}.b{k}") for k in range(n)]
    sw = b.switch(index, blocks[-1])
    for k in range(n - 1):
        sw.add_case(t.i64(k), blocks[k])
    for k, comp in enumerate(instr.branch_computations):
        b.position_at_end(blocks[k])
        res = prog.emit_computation(comp, [args[k]])
        _copy_tree(prog, res, out)
        b.branch(done)
    b.position_at_end(done)
    return out


PROGRAM_HANDLERS = {
    O.PARAMETER: _parameter,
    O.CONSTANT: _constant,
    O.TUPLE: _tuple,
    O.GET_TUPLE_ELEMENT: _gte,
    O.BITCAST: _view,
    O.RESHAPE: _reshape,
    O.OPTIMIZATION_BARRIER: _identity,
    O.SET_DIMENSION_SIZE: _identity,
    O.AFTER_ALL: _token,
    O.CALL: _call,
    O.WHILE: _while,
    O.CONDITIONAL: _conditional,
}


_VIEWS = {O.BITCAST, O.GET_TUPLE_ELEMENT, O.TUPLE, O.OPTIMIZATION_BARRIER, O.SET_DIMENSION_SIZE}
_ESCAPES = {O.WHILE, O.CONDITIONAL, O.CALL}
_CONTRACTIONS = {O.DOT, O.CONVOLUTION}


def _in_place_candidates(comp) -> dict[int, int]:
    """{id(user): operand number} for thunks that may write their result into an operand's buffer: the
    user is elementwise (or a loop fusion whose parameter reaches the root through elementwise ops only,
    with no GEMM inside), the operand is a thunk result of this computation with the same shape, it
    does not escape (root, control flow), and every other reader of it runs before the user."""
    from tfxla_cluster.passes.buffer_assignment import can_share_operand_buffer
    order = comp.post_order()
    pos = {id(i): n for n, i in enumerate(order)}
    users = comp.users()

    def readers(x, seen):
        """Non-view instructions reading x's buffer (through views), or None if it escapes."""
        out = []
        if x is comp.root:
            return None
        for u in users.get(x, ()):
            if id(u) in seen:
                continue
            seen.add(id(u))
            if u.opcode in _ESCAPES:
                return None
            if u.opcode in _VIEWS or (u.opcode is O.RESHAPE and u.shape.is_default_layout
                                      and x.shape.is_default_layout):
                sub = readers(u, seen)
                if sub is None:
                    return None
                out.extend(sub)
            else:
                out.append(u)
        return out

    result: dict[int, int] = {}
    for x in order:
        if x.opcode in PROGRAM_HANDLERS or not x.shape.is_array:
            continue
        rs = readers(x, set())
        if not rs:
            continue
        last = max(rs, key=lambda u: pos[id(u)])
        if id(last) in result or last.opcode in PROGRAM_HANDLERS or \
                sum(1 for r in rs if r is last) != 1:
            continue
        if last.opcode is O.FUSION and any(i.opcode in _CONTRACTIONS for i in last.fused_computation.instructions):
            continue
        for k, o in enumerate(last.operands):
            if o is x and can_share_operand_buffer(last, k):
                result[id(last)] = k
                break
    return result


def _leaf_paths(shape: Shape, prefix=()) -> list[tuple]:
    if shape.is_tuple:
        return [p for k, s in enumerate(shape.tuple_shapes) for p in _leaf_paths(s, prefix + (k,))]
    return [prefix]


_NOT_THUNKS = {O.PARAMETER, O.CONSTANT, O.WHILE, O.CONDITIONAL, O.CALL, O.AFTER_ALL}


def _producer(instr, path):
    """The (thunk instruction, leaf path) whose output buffer holds the root leaf at ``path``."""
    while True:
        op = instr.opcode
        if op is O.TUPLE:
            instr, path = instr.operands[path[0]], path[1:]
        elif op is O.GET_TUPLE_ELEMENT:
            instr, path = instr.operands[0], (instr.tuple_index,) + path
        elif op in (O.BITCAST, O.OPTIMIZATION_BARRIER, O.SET_DIMENSION_SIZE):
            instr = instr.operands[0]
        elif op is O.RESHAPE and instr.shape.is_default_layout and instr.operands[0].shape.is_default_layout:
            instr = instr.operands[0]
        else:
            break
    if instr.opcode in _NOT_THUNKS:
        return None
    return instr, path
