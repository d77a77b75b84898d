"""Stage: LLVM IR text → native code in this process (numba's ``CodeLibrary``/``JITCPUCodegen`` role).

One :class:`JitEngine` owns a target description (triple, CPU name and features — the host's unless a
:class:`~tfxla_cluster.codegen.target.CpuTarget` says otherwise — and optimisation level) and a target
machine for it. ``engine.compile(ir_text, exports)`` runs

    parse_assembly → verify → new pass manager (O3 by default; lighter for big modules, see
    ``JitEngine.pipeline``, and for the loops the emitter marked light) → emit object code → load

and returns a :class:`CodeLibrary` holding the object code and a private MCJIT execution engine with the
code loaded. The optimised IR, which only dumps and tests read, is printed when asked for
(``compile(..., print_ir=True)``, or later by ``CodeLibrary.optimized_ir``, which optimises the IR again:
the pipeline is deterministic). Compiling always goes through the object file, so a library
loaded back from the persistent cache (``engine.load_object``) is byte-for-byte the code a fresh
compile produces.

A module (``compile(..., max_parts=N)``) is split into parts (``split.py``) that are parsed, optimised and
turned into object code on a small pool of threads, and loaded into one execution engine: a big module
always, a smaller one when cores are idle (``JitEngine.spare_threads``).
Every module (one part or several) is compiled in its own LLVM context with the compiling thread's own
target machine: llvmlite serialises every call into LLVM behind one process-wide lock, so the heavy calls
(parse, pass pipeline, object emission) go to the same C functions without it (``_unlocked``; printing the
optimised module keeps the lock, as libllvmlite's printer switches the process's C locale). ctypes
releases the GIL around them and LLVM allows concurrent work on separate contexts, so compiles on several
threads (parts, TF's concurrent launch nodes, a kernel compiled on first use) run their LLVM work at the
same time, and Python on other threads runs meanwhile (``TFXLA_COMPILE_SERIAL=1``: one module at a time
per engine). The object code of a split module is the parts' object files in one blob (``pack_objects``).

Guarantees:
- compiling is thread-safe (private contexts and per-thread target machines; one lock per engine
  around loading and its bookkeeping);
- the object code is the same whichever thread compiles it, in a private context or llvmlite's global
  one (``llvm.parse_assembly`` + ``TargetMachine.emit_object``);
- the object code depends on the IR and the part count only, never on how many threads compiled it; the
  part count of a module below ``2 * split.PART_IR_SIZE`` depends on the idle cores, and the code of every
  part count computes the same bits;
- a library's machine code stays mapped while the library or any callable it handed out is alive
  (callables keep a reference to their library; the execution engine is freed with the library);
- ``engine.key`` names everything that changes the generated code (target, CPU, features, opt level,
  LLVM and llvmlite versions) — caches must include it;
- with ``compile(..., share=True)`` a kernel that a live library of this engine compiled already is called
  there (``kernel_share.py``): the library says what it imports and exports (``CodeLibrary.imports``,
  ``provides``) and holds its providers; ``load_object`` of code that imports a kernel no live library
  provides raises :class:`MissingSharedKernels` (the caller compiles instead).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import dataclasses
import functools
import hashlib
import logging
import math
import os
import struct
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Callable

import llvmlite
import llvmlite.binding as llvm
from llvmlite.binding import ffi

from tfxla_cluster import compile_profile
from tfxla_cluster.codegen.target import CpuTarget, default_target, initialize_llvm
from tfxla_cluster.errors import InternalError

log = logging.getLogger("tfxla_cluster.codegen")

# IR text size (characters) from which a module gets the light pipeline (``JitEngine.pipeline``): one
# fused kernel (a 5-op elementwise chain is ~8k) and a cluster of a few kernels stay below it.
# Measured (issue 17): at 16k small_cnn's 31k-character cluster spent 45% less in LLVM's optimisation, but
# the bench's conv_block ran 0.65 ms instead of 0.55 ms (interleaved A/B, two rounds): at 64k it stays O3.
LITE_PIPELINE_IR_SIZE = 64 * 1024
# Names the pass-pipeline policy in ``JitEngine.key``: code cached under another policy is not reused.
PIPELINE_VERSION = "pipe8"

# Shared kernels (``kernel_share.py``): symbol → the library that defines it and registered its address in the
# process's symbol table, while that library lives. One table for the process, as the symbol table is: engines
# of the same key (a test's own, the process's) name a kernel alike, and one must not re-point a symbol that a
# live provider of another engine registered.
_PROVIDERS: dict[str, weakref.ref] = {}
_PROVIDERS_LOCK = threading.RLock()
_PROVIDERS_PRUNE_AT = [64]   # the table's size at which dead entries are next dropped (amortised O(1) per symbol)


def _provider(symbol: str) -> "CodeLibrary | None":
    """The live library that registered ``symbol`` (a shared kernel), if any. With ``_PROVIDERS_LOCK`` held."""
    ref = _PROVIDERS.get(symbol)
    return ref() if ref is not None else None


class MissingSharedKernels(RuntimeError):
    """Object code calls a shared kernel that no live library of this process defines (a persistent cache
    entry whose providers were not loaded first): the caller compiles the module instead."""


def add_symbol(name: str, address: int) -> None:
    """Make ``name`` resolve to ``address`` in every library loaded afterwards (runtime calls)."""
    initialize_llvm()
    llvm.add_symbol(name, address)


@dataclass
class CompileStats:
    """Seconds spent in each LLVM stage of one compile (what the compile log reports)."""

    parse: float = 0.0
    optimize: float = 0.0
    codegen: float = 0.0
    load: float = 0.0
    parts: int = 1        # modules the IR was split into (compiled on up to ``threads`` threads)
    threads: int = 1
    spans: tuple = ()     # (start, end) perf_counter times of each part's optimisation + machine code

    @property
    def total(self) -> float:
        return self.parse + self.optimize + self.codegen + self.load


@dataclass(eq=False)
class CodeLibrary:
    """Compiled code of one LLVM module, loaded into its own MCJIT execution engine.

    ``get_function`` returns ctypes callables that keep this library (and so the code) alive.
    """

    name: str
    object_code: bytes
    _optimized_ir: str | None     # None: not printed yet, ``_print_ir`` prints it
    exports: tuple[str, ...]
    stats: CompileStats
    _ee: object = field(repr=False, default=None)
    _addresses: dict[str, int] = field(repr=False, default_factory=dict)
    _print_ir: Callable[[], str] | None = field(repr=False, default=None)
    # Kernels shared across modules (``kernel_share.py``): the symbols this code calls in other libraries and
    # those it exports for them; ``_providers`` keeps the libraries defining the imported ones alive.
    imports: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    _providers: tuple = field(repr=False, default=())

    @property
    def optimized_ir(self) -> str:
        """The IR after LLVM's optimisation, as ``--xla_dump_to``'s ``ir-with-opt.ll`` shows it (a split
        module's parts one after the other); empty for code loaded from object code. Printed on first use
        unless the compile printed it: optimising the IR again gives the same module."""
        if self._optimized_ir is None:
            self._optimized_ir = self._print_ir() if self._print_ir is not None else ""
            self._print_ir = None
        return self._optimized_ir

    def address_of(self, symbol: str) -> int:
        try:
            return self._addresses[symbol]
        except KeyError:
            raise InternalError(f"library {self.name} does not export {symbol!r}") from None

    def get_function(self, symbol: str, restype, *argtypes):
        """A ctypes function for ``symbol``; it holds a reference to this library."""
        fn = ctypes.CFUNCTYPE(restype, *argtypes)(self.address_of(symbol))
        fn._library = self  # keeps the machine code mapped while the callable lives
        return fn


class JitEngine:
    """Target machine + LLVM pipeline; hands out :class:`CodeLibrary` objects. Thread-safe."""

    def __init__(self, opt_level: int = 3, cpu: str | None = None, features: str | None = None,
                 target: CpuTarget | None = None) -> None:
        """``target`` (or ``cpu`` + ``features``) picks the CPU; default: the target the process's flags ask
        for, else the host (``default_target``). A ``cpu`` without ``features`` means that CPU's own
        features, never the host's."""
        initialize_llvm()
        if not 0 <= opt_level <= 3:
            raise InternalError(f"LLVM optimisation level must be 0..3, got {opt_level}")
        if target is None:
            target = default_target() if cpu is None and features is None else \
                CpuTarget(cpu if cpu is not None else llvm.get_host_cpu_name(), features or "", named=True)
        if target.named:
            target.info   # LLVM aborts the process on some unknown CPU names: a FlagError from the probe instead
        self.opt_level = opt_level
        self.target = target
        self.triple = llvm.get_default_triple()
        self.cpu = target.cpu
        self.features = target.features
        self._target = llvm.Target.from_triple(self.triple)
        self._lock = threading.RLock()
        self._tls = threading.local()   # a target machine per thread compiling split parts
        self.target_machine = self._new_target_machine()
        self.data_layout = str(self.target_machine.target_data)
        self.compiles = 0
        self.reused = 0   # compiles answered by an identical earlier IR (see ``compile``)
        # IR digest and exports → the library compiled from it, while some user keeps it alive.
        self._by_ir: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self._compiling: dict[tuple, threading.Event] = {}   # keys of ``_by_ir`` compiling on some thread
        self.share_kernels = _share_kernels()
        self.shared_imports = 0   # kernels declared instead of compiled, over every compile

    # ---- identity
    @property
    def key(self) -> str:
        """Everything about the engine that changes generated code, as one string."""
        return "|".join([self.triple, self.cpu, self.features, f"O{self.opt_level}", PIPELINE_VERSION,
                         "llvm" + ".".join(map(str, llvm.llvm_version_info)), "llvmlite" + llvmlite.__version__])

    @property
    def key_digest(self) -> str:
        return hashlib.sha256(self.key.encode()).hexdigest()[:16]

    def _new_target_machine(self):
        # 'jitdefault' is the large code model on x86-64: object code can be loaded anywhere by MCJIT.
        return self._target.create_target_machine(cpu=self.cpu, features=self.features, opt=self.opt_level,
                                                  reloc="default", codemodel="jitdefault", jit=True)

    # ---- pipeline stages
    def parse(self, ir_text: str):
        mod = llvm.parse_assembly(ir_text)
        mod.triple = self.triple
        mod.data_layout = self.data_layout
        mod.verify()
        return mod

    def pipeline(self, ir_size: int) -> tuple[int, bool, bool]:
        """(LLVM speed level, vectorisers, unrolling + interleaving) for a module of ``ir_size`` characters.

        At ``opt_level`` 2 and 3, a module of several kernels (up to a whole cluster's hundreds of loops) gets
        O2's passes with the vectorisers but without loop unrolling and interleaving: measured on
        BERT-tiny's training step and MobileNetV2, that halves LLVM's optimisation + machine-code time
        and shrinks the code, with no loss in steady-state speed (the loops are memory-bound; unrolled
        copies only add instructions to select). A module of one fused kernel (cheap to compile anyway)
        keeps the full pipeline at ``opt_level``.

        Within a module the choice is per kernel too: the emitter marks the loops of every kernel that is
        not a hot loop (``kernel_builder.HOT_LOOP_KINDS``: GEMM, convolutions, Winograd, of at least
        ``HOT_LOOP_MIN_COST``) not to be unrolled or interleaved (``loops.light_loops``), so in a small
        module only the bigger GEMM and convolution loops pay for O3's unrolling.

        Measured and kept out (issue 17, zoo modules): O1 with the vectorisers saves 10-15% of LLVM time
        but changes LSTM/GRU results (reduction order); codegen level 1 saves ~5% of machine code only;
        fast instruction selection would not contract FMAs as XLA does; a 35-line kernel costs ~2 ms of
        optimisation + ~3 ms of machine code at any level (per-function pass overhead). XLA's own IrCompiler
        setting (O3 with the vectorisers, unrolling off, interleaving on), measured in thread CPU time on the
        zoo's small modules (Zen 3, medians of 5): small_cnn's 47k-character module 122 → 116 ms, GRU's and
        LSTM's jit modules (41k, 49k) 114 → 100 and 137 → 121 ms, transformer_block's (88k, already light)
        239 → 256 ms; not taken: what it saves is the hot GEMM loops' unrolling, which the light pipeline's
        measurement above showed the steady state needs. InstCombine (~25%) leads optimisation and
        instruction selection (~35%) machine code at every setting."""
        if self.opt_level <= 1:
            return self.opt_level, False, False
        if ir_size >= LITE_PIPELINE_IR_SIZE:
            return 2, True, False
        return self.opt_level, True, True

    def optimize(self, mod, ir_size: int = 0, target_machine=None, run=None) -> None:
        """The new pass manager's default per-module pipeline that :meth:`pipeline` picks (for
        ``target_machine``, default the engine's; ``run(mpm, mod, pb)`` runs it, default llvmlite's
        locked call)."""
        if self.opt_level == 0:
            return
        level, vectorise, unroll = self.pipeline(ir_size)
        pto = llvm.create_pipeline_tuning_options(speed_level=level)
        pto.loop_vectorization = vectorise
        pto.slp_vectorization = vectorise
        pto.loop_unrolling = unroll
        pto.loop_interleaving = unroll
        pb = llvm.create_pass_builder(target_machine or self.target_machine, pto)
        mpm = pb.getModulePassManager()
        if run is None:
            mpm.run(mod, pb)
        else:
            run(mpm, mod, pb)

    def compile(self, ir_text: str, exports, name: str = "module", max_parts: int = 1,
                print_ir: bool = False, share: bool = False) -> CodeLibrary:
        """IR text → loaded library exporting ``exports`` (function names).

        With ``max_parts`` > 1 a module is split into up to that many parts (``split.part_count``: by its
        size and the threads ``spare_threads`` finds free) compiled on up to ``compile_threads()`` threads
        (idle cores); the code depends on the part count, not on the threads. ``print_ir``: print the
        optimised IR now (a dump wants it) rather than on first use of ``optimized_ir``.

        IR identical to a library this engine compiled earlier (and that is still alive) is not compiled
        again: the ``ModuleID`` line aside, the same text gives the same machine code, and clusters that
        repeat a block (ResNet's, DenseNet's, a transformer's layers) lower to the same IR. The
        result then shares that library's loaded code, under ``name`` and with zero compile times;
        ``reused`` counts these; IR another thread is compiling waits for that compile (clusters compiled
        concurrently, runtime/ahead.py) and reuses it.

        ``share``: the module's kernels are shared with other modules of this engine (``kernel_share.py``):
        one a live library already compiled is called there, not compiled again; one compiled here is
        exported for later modules. A compile that prints its optimised IR (a dump) shares nothing, so the
        dump shows every kernel."""
        exports = tuple(exports)
        t_key = time.perf_counter()
        # Not keyed by the part count: the code of every part count computes the same bits.
        from tfxla_cluster.codegen import split   # (a compile's: loading stored code needs neither it nor kernel_share)

        key = (hashlib.sha256(without_module_id(ir_text).encode()).digest(), exports)
        while True:
            with self._lock:
                known = self._by_ir.get(key)
                if known is not None:
                    self.reused += 1
                    lib = dataclasses.replace(known, name=name, stats=CompileStats())
                    self._by_ir[key] = lib   # the entry lives while any library with this code does
                    compile_profile.record("code-reuse", time.perf_counter() - t_key)
                    compile_profile.note("code-reuse")
                    return lib
                compiling = self._compiling.get(key)
                if compiling is None:
                    parts = split.part_count(len(ir_text), max_parts, self.spare_threads()) if max_parts > 1 else 1
                    compiling = self._compiling[key] = threading.Event()
                    break
            compiling.wait()   # then reuse its library (or compile here if that compile failed)
        try:
            return self._compile_new(ir_text, exports, name, parts, key, print_ir,
                                     share and self.share_kernels and not print_ir)
        finally:
            with self._lock:
                del self._compiling[key]
            compiling.set()

    def spare_threads(self) -> int:
        """Threads free to compile the parts of one more module: the idle cores (``compile_threads``) less
        the modules this engine is compiling on other threads (clusters compiled ahead, TF's concurrent
        launches already keep those cores busy). Call with the engine's lock held."""
        return max(1, compile_threads() - len(self._compiling))

    def _compile_new(self, ir_text: str, exports: tuple[str, ...], name: str, parts: int, key: tuple,
                     print_ir: bool, share: bool = False) -> CodeLibrary:
        from tfxla_cluster.codegen import kernel_share, split

        shared = kernel_share.Shared(ir_text)
        providers: tuple = ()
        if share:
            t0 = time.perf_counter()
            # (the pipeline goes into the key too: a unit runs the code its own module would have compiled)
            units = kernel_share.units_of(ir_text, f"{self.key}|{self.pipeline(len(ir_text))}")
            with _PROVIDERS_LOCK:   # (the providers are held from here on: their symbols stay theirs)
                found = {u.symbol: lib for u in units if (lib := _provider(u.symbol)) is not None}
                providers = tuple({id(lib): lib for lib in found.values()}.values())
                shared = kernel_share.rewrite(ir_text, units, set(found))
                self.shared_imports += len(shared.imports)
            compile_profile.record("kernel-share", time.perf_counter() - t0)
        text = shared.text
        texts = split.split_module(text, parts) if parts > 1 else [text]
        # A module's LLVM work runs without the engine's lock (private context, this thread's target
        # machine): compiles on other threads (TF's concurrent launch nodes, lazily compiled kernels) run
        # their LLVM at the same time. TFXLA_COMPILE_SERIAL=1 compiles one module at a time.
        with self._lock if compile_serially() else contextlib.nullcontext():
            lib = self._compile_parts(texts, len(text), exports, name, print_ir, shared.imports, shared.provides,
                                      providers)
        if not print_ir:   # the IR text is kept by its executable anyway (the original: every kernel in it)
            lib._print_ir = functools.partial(self._optimized_text, ir_text, parts)
        with self._lock:
            self.compiles += 1
            self._by_ir[key] = lib
        stats = lib.stats
        for stage_name, seconds in (("llvm-parse", stats.parse), ("llvm-opt", stats.optimize),
                                    ("machine-code", stats.codegen), ("load", stats.load)):
            compile_profile.record(stage_name, seconds)
        log.debug("compiled %s (%d part(s) on %d thread(s)): parse %.1f ms, optimize %.1f ms, codegen %.1f ms, "
                  "load %.1f ms", name, stats.parts, stats.threads, stats.parse * 1e3, stats.optimize * 1e3,
                  stats.codegen * 1e3, stats.load * 1e3)
        return lib

    def _compile_parts(self, texts: list[str], ir_size: int, exports: tuple[str, ...], name: str,
                       print_ir: bool = False, imports: tuple[str, ...] = (), provides: tuple[str, ...] = (),
                       providers: tuple = ()) -> CodeLibrary:
        """The parts of one module (one, unless it was split), compiled concurrently and loaded into one
        execution engine.

        The stage times are the threads' own, scaled so that they add up to the wall time the parts
        took (the compile profile sums to the first call's wall time)."""
        threads = min(len(texts), compile_threads()) if len(texts) > 1 else 1
        t0 = time.perf_counter()
        if threads > 1:
            # ``threads`` tasks taking the next part until none is left (never more threads than asked
            # for; a thread that drew small parts takes more of them).
            results: list = [None] * len(texts)
            todo = iter(range(len(texts)))
            todo_lock = threading.Lock()

            def task(_: int) -> None:
                while True:
                    with todo_lock:
                        k = next(todo, None)
                    if k is None:
                        return
                    results[k] = self._compile_part(texts[k], ir_size, name, print_ir)
            list(_pool().map(task, range(threads)))
        else:
            results = [self._compile_part(text, ir_size, name, print_ir) for text in texts]
        wall = time.perf_counter() - t0
        parse, optimize, codegen = (sum(r[2][i] for r in results) for i in range(3))
        scale = wall / max(parse + optimize + codegen, 1e-12)
        stats = CompileStats(parse * scale, optimize * scale, codegen * scale, parts=len(texts), threads=threads,
                             spans=tuple(r[3] for r in results))
        with self._lock:
            return self._load(pack_objects([r[0] for r in results]), exports, name,
                              _joined_parts([r[1] for r in results]) if print_ir else None, stats,
                              imports, provides, providers)

    def _optimized_text(self, ir_text: str, parts: int) -> str:
        """The optimised IR of ``ir_text`` compiled in ``parts`` parts, optimised again."""
        from tfxla_cluster.codegen import split

        texts = split.split_module(ir_text, parts) if parts > 1 else [ir_text]
        return _joined_parts([self._compile_part(text, len(ir_text), "module", True, emit=False)[1]
                              for text in texts])

    def _compile_part(self, text: str, ir_size: int, name: str, print_ir: bool = False,
                      emit: bool = True) -> tuple[bytes, str | None, tuple, tuple]:
        """(object code, optimised IR if ``print_ir``, (parse, optimise, codegen) seconds, (start, end) of
        optimise + codegen) of one part, in a private LLVM context with this thread's target machine; the
        heavy calls without llvmlite's lock. ``emit=False``: no object code (b"")."""
        tm = getattr(self._tls, "tm", None)
        if tm is None:
            tm = self._tls.tm = self._new_target_machine()
        ctx = llvm.create_context()
        mod = None
        try:
            t0 = time.perf_counter()
            try:
                mod = _parse_unlocked(text, ctx)
                mod.triple = self.triple
                mod.data_layout = self.data_layout
                _verify_unlocked(mod)
            except RuntimeError as e:
                raise InternalError(f"LLVM rejected the IR of {name}: {e}") from e
            t1 = time.perf_counter()
            self.optimize(mod, ir_size, target_machine=tm, run=_unlocked("LLVMPY_RunNewModulePassManager"))
            t2 = time.perf_counter()
            optimized = _print_locked(mod) if print_ir else None
            obj = _emit_object_unlocked(tm, mod) if emit else b""
            t3 = time.perf_counter()
            return obj, optimized, (t1 - t0, t2 - t1, t3 - t2), (t1, t3)
        finally:
            if mod is not None:
                mod.close()
            ctx.close()

    def load_object(self, obj: bytes, exports, name: str = "module", imports=(), provides=()) -> CodeLibrary:
        """Load object code produced by ``compile`` with an engine of the same ``key``; ``imports`` and
        ``provides``: its library's shared kernels (``CodeLibrary.imports``/``provides``). Raises
        :class:`MissingSharedKernels` when a kernel it imports has no live provider in this process."""
        with self._lock, _PROVIDERS_LOCK:
            providers = []
            for sym in imports:
                lib = _provider(sym)
                if lib is None:
                    raise MissingSharedKernels(f"{name} calls the shared kernel {sym}, which no loaded code defines")
                if lib not in providers:
                    providers.append(lib)
            lib = self._load(obj, tuple(exports), name, "", CompileStats(), tuple(imports), tuple(provides),
                             tuple(providers))
        compile_profile.record("load", lib.stats.load)
        return lib

    def _load(self, obj: bytes, exports: tuple[str, ...], name: str, optimized: str | None,
              stats: CompileStats, imports: tuple[str, ...] = (), provides: tuple[str, ...] = (),
              providers: tuple = ()) -> CodeLibrary:
        """Load ``obj`` into a new execution engine (with the lock held: the process's symbol table is read
        by the load and written after it)."""
        t0 = time.perf_counter()
        # A private execution engine per library: dropping the library frees its code. A split module's
        # parts resolve their calls to each other inside it, and their calls of shared kernels to the
        # providers' addresses in the process's symbol table.
        ee = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self._new_target_machine())
        for part in unpack_objects(obj):
            ee.add_object_file(llvm.ObjectFileRef.from_data(part))
        ee.finalize_object()
        addresses = {}
        for sym in (*exports, *provides):
            addr = ee.get_function_address(sym)
            if not addr:
                raise InternalError(f"symbol {sym!r} not found after loading {name}")
            addresses[sym] = addr
        stats.load = time.perf_counter() - t0
        lib = CodeLibrary(name, obj, optimized, exports, stats, ee, addresses, imports=imports, provides=provides,
                          _providers=providers)
        with _PROVIDERS_LOCK:
            if len(_PROVIDERS) >= _PROVIDERS_PRUNE_AT[0]:
                # Freed providers leave dead references: drop them, then let the table double before looking again.
                for sym in [s for s, r in _PROVIDERS.items() if r() is None]:
                    del _PROVIDERS[sym]
                _PROVIDERS_PRUNE_AT[0] = max(64, 2 * len(_PROVIDERS))
            for sym in provides:
                # A symbol whose provider is alive keeps it: its importers hold that library, not this one.
                if _provider(sym) is None:
                    add_symbol(sym, addresses[sym])
                    _PROVIDERS[sym] = weakref.ref(lib)
        return lib

    def assembly(self, ir_text: str) -> str:
        """Optimised native assembly for ``ir_text`` (for inspection and tests)."""
        with self._lock:
            mod = self.parse(ir_text)
            self.optimize(mod, len(ir_text))
            return self.target_machine.emit_assembly(mod)


def _joined_parts(texts: list[str]) -> str:
    """The optimised IR of a module's parts as one text (a one-part module's as LLVM prints it)."""
    if len(texts) == 1:
        return texts[0]
    return "\n".join(f"; ---- part {k + 1} of {len(texts)}\n{text}" for k, text in enumerate(texts))


# ---- object code of split modules
_OBJECTS_MAGIC = b"TFXLA-OBJECTS\0"


def pack_objects(objects: list[bytes]) -> bytes:
    """One blob for the object files of a split module (a single object file stays as it is)."""
    if len(objects) == 1:
        return objects[0]
    return _OBJECTS_MAGIC + struct.pack(f"<I{len(objects)}Q", len(objects), *map(len, objects)) + b"".join(objects)


def unpack_objects(blob: bytes) -> list[bytes]:
    """The object files in ``blob`` (see :func:`pack_objects`); ValueError when it is truncated."""
    if not blob.startswith(_OBJECTS_MAGIC):
        return [blob]
    at = len(_OBJECTS_MAGIC)
    if len(blob) < at + 4:
        raise ValueError("truncated object blob")
    (n,) = struct.unpack_from("<I", blob, at)
    at += 4
    if len(blob) < at + 8 * n:
        raise ValueError("truncated object blob")
    sizes = struct.unpack_from(f"<{n}Q", blob, at)
    at += 8 * n
    if at + sum(sizes) != len(blob):
        raise ValueError(f"object blob of {len(blob)} bytes does not hold {n} objects of {sum(sizes)} bytes")
    out = []
    for size in sizes:
        out.append(blob[at:at + size])
        at += size
    return out


# ---- llvmlite's C functions without its process-wide lock (for split parts on worker threads)
def _unlocked(name: str):
    """libllvmlite's ``name`` as the ctypes function llvmlite wraps (same argument types), so the call
    releases the GIL and takes no llvmlite lock; llvmlite's locked wrapper if its layout changed."""
    wrapped = getattr(ffi.lib, name)
    return getattr(wrapped, "_cfn", wrapped)


def _parse_unlocked(text: str, context):
    buf = ctypes.c_char_p(text.encode())
    with ffi.OutputString() as err:
        mod = llvm.ModuleRef(_unlocked("LLVMPY_ParseAssembly")(context, buf, err), context)
        if err:
            mod.close()
            raise RuntimeError(f"LLVM IR parsing error\n{err}")
    return mod


def _verify_unlocked(mod) -> None:
    with ffi.OutputString() as err:
        if _unlocked("LLVMPY_VerifyModule")(mod, err):
            raise RuntimeError(str(err))


def _print_locked(mod) -> str:
    """The module's text, under llvmlite's lock: libllvmlite's printer switches the process's C locale to
    "C" and back around the print (``setlocale`` is process-wide), so two prints at once on two threads
    could leave it at "C" for good, and Python's text I/O would then decode ASCII (found by a test that read
    a subprocess's UTF-8 output). Printing is a small part of a compile."""
    with ffi.OutputString() as out:
        ffi.lib.LLVMPY_PrintModuleToString(mod, out)
        return str(out)


def _emit_object_unlocked(target_machine, mod) -> bytes:
    with ffi.OutputString() as err:
        buf = _unlocked("LLVMPY_TargetMachineEmitToMemory")(target_machine, mod, 1, err)
        if not buf:
            raise RuntimeError(str(err))
    try:
        return ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(buf), ffi.lib.LLVMPY_GetBufferSize(buf))
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buf)


_pool_lock = threading.Lock()
_compile_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _share_kernels() -> bool:
    from tfxla_cluster.flags import env_switch
    return env_switch("TFXLA_SHARE_KERNELS").strip().lower() not in ("0", "false", "no", "off")


def compile_threads() -> int:
    """Threads compiling the parts of a split module: ``TFXLA_COMPILE_THREADS``, else the cores this
    process may run on that other processes leave idle, at least one: the one-minute load average less
    this process's own share of it (``_own_load``; its TF threads that ran a training step before are idle
    while it compiles), rounded down: a core other work uses in part still gives a thread most of its
    time. On a loaded machine, threads contending for the same cores made a split compile slower than one
    thread (measured on 2 cores at load 4; at load 5-7, 0.9-1.05x)."""
    from tfxla_cluster.flags import env_switch

    wanted = (env_switch("TFXLA_COMPILE_THREADS") or "").strip()
    if wanted.isdigit() and int(wanted) > 0:
        return int(wanted)
    try:
        cores = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cores = max(1, os.cpu_count() or 1)
    try:
        others = max(0.0, os.getloadavg()[0] - _own_load())
    except OSError:
        others = 0.0
    return max(1, min(cores, cores - int(others)))


def _own_load() -> float:
    """This process's part of the one-minute load average, about: its average CPU use since it started
    (threads busy), weighted as the load average weighs a process that age (an average over the last
    minute, decaying exponentially); 1 (the compiling thread) where /proc does not tell."""
    try:
        with open("/proc/self/stat", "rb") as f:
            started = int(f.read().rsplit(b")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime", "rb") as f:
            age = float(f.read().split()[0]) - started
    except (OSError, ValueError, IndexError):
        return 1.0
    if age <= 0:
        return 1.0
    t = os.times()
    return (t.user + t.system) / age * (1.0 - math.exp(-age / 60.0))


def compile_serially() -> bool:
    """``TFXLA_COMPILE_SERIAL`` on: an engine compiles one module at a time (A/B timing of concurrent
    compiles; the code is the same either way)."""
    from tfxla_cluster.flags import env_switch

    return (env_switch("TFXLA_COMPILE_SERIAL") or "").strip().lower() in ("1", "true", "yes", "on")


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _compile_pool
    with _pool_lock:
        if _compile_pool is None:
            try:
                cores = max(1, len(os.sched_getaffinity(0)))
            except (AttributeError, OSError):
                cores = max(1, os.cpu_count() or 1)
            wanted = compile_threads()   # the pool may be larger: _compile_parts never submits more at once
            _compile_pool = concurrent.futures.ThreadPoolExecutor(max(cores, wanted), "tfxla-llvm")
        return _compile_pool


def without_module_id(ir_text: str) -> str:
    """The IR minus llvmlite's first line, ``; ModuleID = "<name>"`` (a comment naming the module)."""
    if ir_text.startswith("; ModuleID"):
        return ir_text[ir_text.find("\n") + 1:]
    return ir_text


_engines: dict[tuple, JitEngine] = {}
_engines_lock = threading.Lock()


def get_engine(opt_level: int = 3, target: CpuTarget | None = None) -> JitEngine:
    """The process-wide engine for ``target`` at ``opt_level``; default: the target the process's flags
    ask for, else the host (``codegen.target.default_target``)."""
    target = target or default_target()
    key = (opt_level, target.cpu, target.features)
    with _engines_lock:
        eng = _engines.get(key)
        if eng is None:
            eng = _engines[key] = JitEngine(opt_level, target=target)
        return eng
