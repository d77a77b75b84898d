"""Stage: HloModule → ``Executable`` (native code + buffer plan), and running it on numpy arrays.

    exe = compile_module(module)            # emit IR (program.py) → JitEngine → loaded library
    outputs = exe(x, w, b)                  # tuple of numpy arrays, one per top-level result element

A call builds the buffer table: parameter slots point at the caller's arrays (used zero-copy when they
are C-contiguous with the exact dtype and a row-major layout), constant slots at arrays the executable
owns, output slots at fresh 64-byte-aligned arrays (never reused, so the caller may give them to TF
without copying), temp slots into a per-thread arena reused across calls. The native
entry function runs with the GIL released (ctypes), so calls from several threads run concurrently.

Kernels only a rare branch runs (conv_exact.py's exact convolutions, taken when a filter holds NaN or
infinities) are neither emitted nor compiled with the rest: their module (``ColdLayout.ir``, the rare arms
``program.emit_cold`` emits) is made the first time a rare branch runs (:class:`ColdCode`, through
``tfxla_resolve_cold``), whichever thread runs it, the native launch op's included; an executable loaded
from the persistent cache emits it from the module lowered again (its ``ir_source``); an AOT object holds
them all (``aot.py``).

With bounds checks on (``CodegenOptions.bounds_checks`` or ``TFXLA_CODEGEN_BOUNDS_CHECKS=1``), an
out-of-range access is skipped by the generated code and raised here as ``InternalError`` naming the
kernel.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from tfxla_cluster import compile_profile
from tfxla_cluster._gc import gc_paused
from tfxla_cluster.codegen import native_runtime
from tfxla_cluster.codegen.buffers import aligned_empty
from tfxla_cluster.codegen.options import ENTRY_NAME, CodegenOptions
from tfxla_cluster.codegen.engine import CodeLibrary, JitEngine, get_engine
from tfxla_cluster.errors import InternalError, InvalidArgumentError
from tfxla_cluster.hlo.shape import Shape, major_to_minor

if TYPE_CHECKING:
    from tfxla_cluster.codegen.program import ProgramEmitter

log = logging.getLogger("tfxla_cluster.codegen")

_ALIGN = 64


def _physical_dims(shape: Shape) -> tuple[int, ...]:
    return tuple(shape.dimensions[d] for d in major_to_minor(shape))


@dataclass
class ColdLayout:
    """The cold code of an executable: the table slot of the code-pointer array's address, the rare arms
    whose addresses it holds (in order, after element 0), and once made (:meth:`text`) their module's IR
    and the KernelInfo of each kernel they call. ``source`` makes them (``program.emit_cold`` on the
    module): it is not pickled, so a layout from the persistent cache makes them from its executable's."""

    slot: int
    ir: str | None                # None until made
    names: list
    kernels: list                 # KernelInfo per kernel (``codegen/kernel_info.py``)
    source: Callable[[], tuple] | None = field(default=None, repr=False, compare=False)

    def text(self, fallback: Callable[[], tuple] | None = None) -> str:
        """The cold module's IR, made now (by ``source``, else ``fallback``) if it was not yet."""
        if self.ir is None:
            source = self.source or fallback
            if source is None:
                raise InternalError("the cold code of this executable cannot be emitted: no module to emit it from")
            ir_text, names, kernels = source()
            if list(names) != list(self.names):
                raise InternalError(f"the cold module has arms {list(names)}, the executable calls {list(self.names)}")
            self.kernels, self.ir, self.source = list(kernels), ir_text, None
        return self.ir

    def __getstate__(self) -> dict:
        return {**self.__dict__, "source": None}   # a closure over the module: made again where loaded


class ColdCode:
    """One executable's cold code, compiled on first need: :meth:`load` compiles ``layout.ir`` (or takes it
    from ``code_store``, storing what it compiled there) through the same engine entry point as the main
    code, fills :attr:`pointers` (the kernels' addresses, then element 0) and keeps the library alive.
    Thread-safe; tries at most once."""

    def __init__(self, layout: ColdLayout, engine: JitEngine, name: str, code_store=None,
                 fallback: Callable[[], tuple] | None = None) -> None:
        """``fallback``: what makes the cold module when ``layout`` has no source of its own."""
        self.layout = layout
        self.fallback = fallback
        self.engine = engine
        self.name = f"{name}.cold"
        self.code_store = code_store
        self.pointers = np.zeros(1 + len(layout.names), dtype=np.uint64)
        self.library: CodeLibrary | None = None
        self.compiles = 0      # 0 or 1: compiled (or loaded from the store) on a rare branch's first run
        self.failed = False
        self._lock = threading.Lock()
        self.address = self.pointers.ctypes.data
        native_runtime.register_cold(self.address, self.load)

    def load(self) -> bool:
        """Compile (or load) the cold code unless done; False once that failed (it is not tried again: the
        failure was logged, and the rare branches run their usual kernels)."""
        with self._lock:
            if self.library is None and not self.failed:
                try:
                    self._load()
                except BaseException:
                    self.failed = True
                    raise
            return self.library is not None

    def _load(self) -> None:
        t0 = time.perf_counter()
        names = tuple(self.layout.names)
        with gc_paused():
            text = self.layout.text(self.fallback)
        store = self.code_store
        lib = store.load(text, self.engine, self.name, names) if store is not None else None
        if lib is None:
            lib = self.engine.compile(text, names, name=self.name)
            if store is not None:
                store.store(text, lib)
        self.pointers[1:] = [lib.address_of(n) for n in names]
        self.library = lib
        self.compiles += 1
        self.pointers[0] = 1   # last: the generated code reads the addresses once this is set
        compile_profile.note("cold code compiled")
        log.info("compiled the cold code of %s (%d kernels) in %.1f ms", self.name, len(names),
                 (time.perf_counter() - t0) * 1e3)


@dataclass
class ExecutableLayout:
    """Everything an :class:`Executable` needs besides its native code: the buffer plan (slots, constants,
    arena size), the kernels, the result structure. Plain data (picklable): the persistent cache stores it
    with the object code, so a hit rebuilds the executable without lowering or emitting anything."""

    name: str
    kernels: list
    row_groups: list
    arena_bytes: int
    n_slots: int
    params: list                  # (slot index, Shape, name) per parameter, in parameter order
    outputs: list                 # (slot index, leaf Shape) per output leaf
    structure: object             # result tuple structure (nested tuples of leaf numbers)
    root_is_tuple: bool
    temps: list                   # (slot index, arena offset) per temp slot
    consts: list                  # (slot index, array) per constant slot
    cold: ColdLayout | None = None   # kernels compiled on first need

    @staticmethod
    def of(module, prog: ProgramEmitter) -> "ExecutableLayout":
        plan = prog.plan
        root = module.entry.root.shape
        return ExecutableLayout(
            module.name, prog.kernels, prog.row_groups, plan.arena_bytes, len(plan.slots),
            [(s.index, s.shape, s.name) for s in sorted(prog.param_slots, key=lambda s: s.number)],
            # Output arrays take the root's leaf shapes (a producer may hold the bytes under another view).
            [(s.index, leaf) for s, leaf in zip(prog.output_slots, root.leaves())],
            prog.result_structure, root.is_tuple,
            [(s.index, s.offset) for s in plan.of_kind("temp")],
            [(s.index, s.value) for s in plan.of_kind("const")],
            None if prog.cold_slot is None else
            ColdLayout(prog.cold_slot.index, None, list(prog.cold_names), [], source=_cold_source(module, prog.options)))


class Executable:
    """A compiled HLO module. Thread-safe: concurrent calls use separate tables and arenas."""

    def __init__(self, layout: ExecutableLayout, options: CodegenOptions, library: CodeLibrary,
                 ir_text: "str | Callable[[], str]", emit_seconds: float = 0.0,
                 code_store: "CodeStore | None" = None, engine: JitEngine | None = None) -> None:
        """``ir_text`` is the LLVM IR the code came from, or a function emitting it again on first use (an
        executable rebuilt from the persistent cache without lowering); ``engine`` (default: the options')
        compiles the cold code when first needed, ``code_store`` is where it is looked for and kept."""
        self.layout = layout
        self.name = layout.name
        self.options = options
        self.library = library
        self._ir = ir_text if isinstance(ir_text, str) else None
        self._ir_source = None if isinstance(ir_text, str) else ir_text
        self.kernels = layout.kernels
        self.row_groups = layout.row_groups
        self.emit_seconds = emit_seconds
        self.arena_bytes = layout.arena_bytes
        self._n_slots = layout.n_slots
        self._params = list(layout.params)
        self._outputs = list(layout.outputs)
        self._structure = layout.structure
        self._root_is_tuple = layout.root_is_tuple
        self._temp_slots = np.array([i for i, _ in layout.temps], dtype=np.int64)
        self._temp_offsets = np.array([o for _, o in layout.temps], dtype=np.uint64)
        self._consts = [v for _, v in layout.consts]
        self._template = np.zeros(self._n_slots, dtype=np.uint64)
        for index, value in layout.consts:
            self._template[index] = value.ctypes.data
        self.cold = None
        if layout.cold is not None:
            engine = engine or get_engine(options.opt_level, options.cpu_target)
            # (weakly: the runtime's registry keeps the cold code, which must not keep the executable)
            me = weakref.WeakMethod(self._cold_from_ir_source)
            self.cold = ColdCode(layout.cold, engine, layout.name, code_store, lambda: me()())
            self._template[layout.cold.slot] = self.cold.address
            weakref.finalize(self, native_runtime.unregister_cold, self.cold.address)
        self._entry = library.get_function(ENTRY_NAME, None, ctypes.c_void_p)
        self._fast = [(shape.dtype, shape.dimensions, shape.rank <= 1 or shape.is_default_layout)
                      for _, shape, _ in self._params]
        self._out_alloc = [(shape.dtype, _physical_dims(shape)) for _, shape in self._outputs]
        self._all_default_layout = all(s.rank <= 1 or s.is_default_layout for _, s in self._outputs)
        self._has_temps = bool(len(self._temp_slots))
        self._local = threading.local()
        self.calls = 0
        self.origin = "compiled"   # or "persistent cache" (set by runtime.compile_cache.CompilationCache)

    def cold_from(self, module_again: Callable[[], Any]) -> None:
        """Emit the cold code, when a rare branch first runs, from ``module_again()`` (the optimised module
        made anew) rather than from the module the compile kept: that one holds ~10k Python objects the
        cyclic GC walks for as long as the executable lives."""
        cold = self.layout.cold
        if cold is not None and cold.ir is None:
            cold.source = _cold_source(module_again, self.options)

    @property
    def ir(self) -> str:
        """The LLVM IR (before LLVM's optimisation) the native code was compiled from."""
        if self._ir is None:
            self._ir = str(self._ir_source())   # (a plain str: not the module an ``EmittedIR`` keeps)
        return self._ir

    def _cold_from_ir_source(self) -> tuple:
        """The cold module, from the module ``ir_source`` emits again (a layout loaded from the persistent
        cache has no module of its own)."""
        text = self._ir_source() if self._ir_source is not None else self._ir
        source = getattr(text, "cold_source", None)
        if source is None:
            raise InternalError(f"{self.name}: its IR source gives no module to emit the cold code from")
        return source()

    @property
    def ir_digest(self) -> str:
        return hashlib.sha256(self.ir.encode()).hexdigest()

    # ---- inspection
    @property
    def cold_compiles(self) -> int:
        """How many times the cold code (rare branches' kernels) was compiled or loaded: 0 until a call
        took a rare branch, then 1."""
        return 0 if self.cold is None else self.cold.compiles

    @property
    def compile_seconds(self) -> float:
        return self.emit_seconds + self.library.stats.total

    @property
    def optimized_ir(self) -> str:
        return self.library.optimized_ir

    def describe(self) -> str:
        lines = [f"executable {self.name}: {len(self.kernels)} kernels, arena {self.arena_bytes} bytes, "
                 f"compile {self.compile_seconds * 1e3:.1f} ms"]
        for k in self.kernels:
            lines.append(f"  {k.name:<40} {k.kind:<16} %{k.instruction} items={k.work_items} tasks={k.tasks}")
        for group in self.row_groups:
            lines.append(f"  row group: {', '.join(group)}")
        for k in self.layout.cold.kernels if self.cold is not None else ():
            lines.append(f"  {k.name:<40} {k.kind:<16} %{k.instruction} items={k.work_items} tasks={k.tasks} "
                         f"(cold: compiled on first need)")
        return "\n".join(lines)

    # ---- running
    def _arena(self) -> int:
        arena = getattr(self._local, "arena", None)
        if arena is None or arena.size < self.arena_bytes + _ALIGN:
            arena = self._local.arena = np.empty(self.arena_bytes + _ALIGN, dtype=np.uint8)
        base = arena.ctypes.data
        return base + (-base) % _ALIGN

    def _coerce(self, value, shape: Shape, name: str, k: int) -> np.ndarray:
        typed = isinstance(value, (np.ndarray, np.generic))
        arr = np.asarray(value)
        if typed and arr.dtype != shape.dtype:
            raise InvalidArgumentError(f"argument {k} (%{name}) of {self.name}: expected "
                                       f"{shape.element_type.value}, got numpy {arr.dtype}")
        if arr.shape != shape.dimensions:
            raise InvalidArgumentError(f"argument {k} (%{name}) of {self.name}: expected dimensions "
                                       f"{list(shape.dimensions)}, got {list(arr.shape)}")
        if arr.dtype != shape.dtype:
            arr = arr.astype(shape.dtype)
        if shape.rank > 1 and not shape.is_default_layout:
            return np.ascontiguousarray(np.transpose(arr, major_to_minor(shape)))
        return np.ascontiguousarray(arr)

    def __call__(self, *args) -> tuple:
        if len(args) != len(self._params):
            raise InvalidArgumentError(f"{self.name} takes {len(self._params)} arguments, got {len(args)}")
        table = self._template.copy()
        keep = []
        for k, ((slot, shape, name), fast, a) in enumerate(zip(self._params, self._fast, args)):
            # Fast path: an ndarray of the exact dtype, shape and (row-major) contiguity is used as is.
            if not (type(a) is np.ndarray and a.dtype == fast[0] and a.shape == fast[1] and fast[2]
                    and a.flags.c_contiguous):
                a = self._coerce(a, shape, name, k)
            table[slot] = a.__array_interface__["data"][0]
            keep.append(a)
        outs = []
        for (slot, shape), (dtype, dims) in zip(self._outputs, self._out_alloc):
            # Fresh and 64-byte aligned every call: callers may hand it to TF without a copy.
            arr = aligned_empty(dims, dtype)
            table[slot] = arr.__array_interface__["data"][0]
            outs.append(arr)
        if self._has_temps:
            table[self._temp_slots] = np.uint64(self._arena()) + self._temp_offsets
        address = table.__array_interface__["data"][0]
        self._entry(address)
        self.calls += 1
        failed = native_runtime.take_callback_error(address)
        if failed is not None:
            raise InternalError(f"{self.name}: the Python thread pool failed to run a kernel: "
                                f"{type(failed).__name__}: {failed}") from failed
        if self.options.bounds_checks:
            errors = native_runtime.take_bounds_errors(address)
            if errors:
                kernel, index, size = errors[0]
                name = self.kernels[kernel].name if 0 <= kernel < len(self.kernels) else f"#{kernel}"
                raise InternalError(f"{self.name}: kernel {name} accessed element {index} of a buffer "
                                    f"of {size} elements ({len(errors)} out-of-bounds accesses)")
        del keep
        if self._all_default_layout:
            logical = outs
        else:
            logical = [self._logical(arr, shape) for arr, (_, shape) in zip(outs, self._outputs)]
        if not self._root_is_tuple:
            return (logical[0],)
        return self._nest(self._structure, logical)

    @staticmethod
    def _logical(arr: np.ndarray, shape: Shape) -> np.ndarray:
        if shape.rank > 1 and not shape.is_default_layout:
            return np.transpose(arr, np.argsort(major_to_minor(shape)))
        return arr

    def _nest(self, structure, values):
        if isinstance(structure, tuple):
            return tuple(self._nest(s, values) for s in structure)
        return values[structure]


def check_engine(engine: JitEngine, options: CodegenOptions) -> None:
    """The IR is emitted for ``options.cpu_target`` (e.g. exp's 2^n step), so the engine must compile for it."""
    if engine.target != options.cpu_target:
        raise InternalError(f"the JIT engine compiles for {engine.cpu} but the code generation options are for "
                            f"{options.cpu_target.cpu}; build both from the same CpuTarget")


class EmittedIR(str):
    """The IR text ``emit_module`` returns: with rare arms, ``cold_source()`` emits their module from the
    same HloModule (``program.emit_cold``; an executable loaded from the persistent cache asks the IR it
    emits again for it)."""

    cold_source: Callable[[], tuple] | None = None


def _emit_cold(module, options: CodegenOptions) -> tuple:
    """The cold module of ``module`` (an HloModule, or a function making the optimised module again)."""
    from tfxla_cluster.codegen.program import emit_cold

    t0 = time.perf_counter()
    with gc_paused():
        module = module() if callable(module) else module
        made = emit_cold(module, options)
    log.info("emitted the cold code of %s (%d arms) in %.1f ms", module.name, len(made[1]),
             (time.perf_counter() - t0) * 1e3)
    return made


def _cold_source(module, options: CodegenOptions) -> Callable[[], tuple]:
    return functools.partial(_emit_cold, module, options)


def emit_module(module, options: CodegenOptions) -> tuple[ProgramEmitter, str]:
    """The LLVM IR text of ``module`` (an :class:`EmittedIR`) and the emitter (buffer plan, kernels) that
    produced it. The rare arms are left out (``lazy_cold``): the module is kept to emit them on need."""
    from tfxla_cluster.codegen.program import ProgramEmitter

    native_runtime.ensure_registered()   # program.py is imported here: a cache hit never emits IR
    with gc_paused():   # emission makes ~1e5 llvmlite objects: full collections would walk them and TF's heap
        prog = ProgramEmitter(module, options, lazy_cold=True)
        text = EmittedIR(prog.emit())
    if prog.cold_names:
        text.cold_source = _cold_source(module, options)
    return prog, text


class CodeStore(Protocol):
    """Where compiled code may already be (a persistent cache): keyed by the IR text it came from."""

    def load(self, ir_text: str, engine: JitEngine, name: str, exports: tuple[str, ...] = (ENTRY_NAME,)
             ) -> CodeLibrary | None: ...

    def store(self, ir_text: str, library: CodeLibrary) -> None: ...


def compile_module(module, options: CodegenOptions | None = None, engine: JitEngine | None = None, *,
                   dumper=None, dump_from_env: bool = True, code_store: CodeStore | None = None) -> Executable:
    """Compile the entry computation of an (optimised) HloModule to native code.

    With ``code_store``, code it holds for the same IR is loaded instead of compiled (``origin``
    "persistent cache"), and newly compiled code is handed to it. With ``--xla_dump_to`` in XLA_FLAGS
    (or a ``passes.dump.Dumper`` given as ``dumper``: the one that dumped the module's HLO, so both share
    XLA's module id) the LLVM IR is dumped as XLA:CPU does: ``module_NNNN.<name>.ir-no-opt.ll`` and
    ``.ir-with-opt.ll`` (the latter only when compiled here). ``dump_from_env=False``: only ``dumper``
    decides (a function's own flags said where, or not to, dump)."""
    options = options or CodegenOptions.from_flags()
    engine = engine or get_engine(options.opt_level, options.cpu_target)
    check_engine(engine, options)
    # The process's first compile also compiles the native runtime (its thread pool's module): that
    # records its own LLVM stages, so it runs before the IR-emission clock starts (not counted twice).
    native_runtime.ensure_registered()
    t0 = time.perf_counter()
    prog, text = emit_module(module, options)
    t1 = time.perf_counter()
    compile_profile.record("llvm-ir", t1 - t0)
    if dumper is None and dump_from_env:
        dumper = _dumper_for(module)
    _dump(dumper, "ir-no-opt.ll", text)
    lib = code_store.load(text, engine, module.name) if code_store is not None else None
    origin = "persistent cache"
    if lib is None:
        origin = "compiled"
        lib = engine.compile(text, [ENTRY_NAME], name=module.name, max_parts=options.split_count,
                             print_ir=dumper is not None, share=not options.bounds_checks)
        if dumper is not None:   # (optimized_ir is printed when first read)
            _dump(dumper, "ir-with-opt.ll", lib.optimized_ir)
        if code_store is not None:
            code_store.store(text, lib)
    exe = Executable(ExecutableLayout.of(module, prog), options, lib, str(text), t1 - t0, code_store, engine)
    exe.origin = origin
    return exe


def _dumper_for(module):
    import os
    if "xla_dump_to" not in os.environ.get("XLA_FLAGS", ""):
        return None
    from tfxla_cluster.flags import Flags
    from tfxla_cluster.passes.dump import Dumper
    return Dumper.create(Flags.from_env(), module)


def _dump(dumper, suffix: str, text: str) -> None:
    if dumper is None:
        return
    import os
    import sys
    name = f"{dumper.prefix}.{suffix}"
    if dumper.directory == "-":
        sys.stdout.write(f"*** Begin {name} ***\n{text}\n*** End {name} ***\n")
        return
    try:
        with open(os.path.join(dumper.directory, name), "w") as f:
            f.write(text)
        dumper.files.append(name)
    except OSError:  # like XLA: a failed dump never fails the compile
        pass
