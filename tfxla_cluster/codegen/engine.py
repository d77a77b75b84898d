"""Stage: LLVM IR text → native code in this process (numba's ``CodeLibrary``/``JITCPUCodegen`` role).

One :class:`JitEngine` owns a target description (triple, CPU name and features — the host's unless a
:class:`~tfxla_cluster.codegen.target.CpuTarget` says otherwise — and optimisation level) and a target
machine for it. ``engine.compile(ir_text, exports)`` runs

    parse_assembly → verify → new pass manager (O3 by default; lighter for big modules, see
    ``JitEngine.pipeline``) → emit object code → load

and returns a :class:`CodeLibrary` holding the optimised IR, the object code and a private MCJIT
execution engine with the code loaded. Compiling always goes through the object file, so a library
loaded back from the persistent cache (``engine.load_object``) is byte-for-byte the code a fresh
compile produces.

Guarantees:
- compiling is thread-safe (one lock per engine; LLVM's global state is not re-entrant);
- a library's machine code stays mapped while the library or any callable it handed out is alive
  (callables keep a reference to their library; the execution engine is freed with the library);
- ``engine.key`` names everything that changes the generated code (target, CPU, features, opt level,
  LLVM and llvmlite versions) — caches must include it.
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import logging
import threading
import time
import weakref
from dataclasses import dataclass, field
import llvmlite
import llvmlite.binding as llvm

from tfxla_cluster import compile_profile
from tfxla_cluster.codegen.target import CpuTarget, default_target, initialize_llvm
from tfxla_cluster.errors import InternalError

log = logging.getLogger("tfxla_cluster.codegen")

# IR text size (characters) from which a module gets the light pipeline (``JitEngine.pipeline``): a few
# kernels stay below it, a cluster of dozens of fused kernels is above it.
LITE_PIPELINE_IR_SIZE = 64 * 1024
# Names the pass-pipeline policy in ``JitEngine.key``: code cached under another policy is not reused.
PIPELINE_VERSION = "pipe2"

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
    optimized_ir: str
    exports: tuple[str, ...]
    stats: CompileStats
    _ee: object = field(repr=False, default=None)
    _addresses: dict[str, int] = field(repr=False, default_factory=dict)

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
        self.target_machine = self._new_target_machine()
        self.data_layout = str(self.target_machine.target_data)
        self.compiles = 0
        self.reused = 0   # compiles answered by an identical earlier IR (see ``compile``)
        # IR digest and exports → the library compiled from it, while some user keeps it alive.
        self._by_ir: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

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

        At ``opt_level`` 2 and 3, a big module (a whole cluster's kernels, hundreds of small loops) gets
        O2's passes with the vectorisers but without loop unrolling and interleaving: measured on
        BERT-tiny's training step and MobileNetV2, that halves LLVM's optimisation + machine-code time
        and shrinks the code, with no loss in steady-state speed (the loops are memory-bound; unrolled
        copies only add instructions to select). A small module (one or a few hot loops, cheap to compile
        anyway) keeps the full pipeline at ``opt_level``."""
        if self.opt_level <= 1:
            return self.opt_level, False, False
        if ir_size >= LITE_PIPELINE_IR_SIZE:
            return 2, True, False
        return self.opt_level, True, True

    def optimize(self, mod, ir_size: int = 0) -> None:
        """The new pass manager's default per-module pipeline that :meth:`pipeline` picks."""
        if self.opt_level == 0:
            return
        level, vectorise, unroll = self.pipeline(ir_size)
        pto = llvm.create_pipeline_tuning_options(speed_level=level)
        pto.loop_vectorization = vectorise
        pto.slp_vectorization = vectorise
        pto.loop_unrolling = unroll
        pto.loop_interleaving = unroll
        pb = llvm.create_pass_builder(self.target_machine, pto)
        mpm = pb.getModulePassManager()
        mpm.run(mod, pb)

    def compile(self, ir_text: str, exports, name: str = "module") -> CodeLibrary:
        """IR text → loaded library exporting ``exports`` (function names).

        IR identical to a library this engine compiled earlier (and that is still alive) is not compiled
        again: the ``ModuleID`` line aside, the same text gives the same machine code, and clusters that
        repeat a block (ResNet's, DenseNet's, a transformer's layers) lower to the same IR. The
        result then shares that library's loaded code, under ``name`` and with zero compile times;
        ``reused`` counts these."""
        exports = tuple(exports)
        t_key = time.perf_counter()
        key = (hashlib.sha256(without_module_id(ir_text).encode()).digest(), exports)
        with self._lock:
            known = self._by_ir.get(key)
            if known is not None:
                self.reused += 1
                lib = dataclasses.replace(known, name=name, stats=CompileStats())
                self._by_ir[key] = lib   # the entry lives while any library with this code does
                compile_profile.record("code-reuse", time.perf_counter() - t_key)
                compile_profile.note("code-reuse")
                return lib
        stats = CompileStats()
        with self._lock:
            t0 = time.perf_counter()
            try:
                mod = self.parse(ir_text)
            except RuntimeError as e:
                raise InternalError(f"LLVM rejected the IR of {name}: {e}") from e
            t1 = time.perf_counter()
            self.optimize(mod, len(ir_text))
            t2 = time.perf_counter()
            optimized = str(mod)
            obj = self.target_machine.emit_object(mod)
            t3 = time.perf_counter()
            stats.parse, stats.optimize, stats.codegen = t1 - t0, t2 - t1, t3 - t2
            lib = self._load(obj, exports, name, optimized, stats)
            self.compiles += 1
            self._by_ir[key] = lib
        for stage_name, seconds in (("llvm-parse", stats.parse), ("llvm-opt", stats.optimize),
                                    ("machine-code", stats.codegen), ("load", stats.load)):
            compile_profile.record(stage_name, seconds)
        log.debug("compiled %s: parse %.1f ms, optimize %.1f ms, codegen %.1f ms, load %.1f ms", name,
                  stats.parse * 1e3, stats.optimize * 1e3, stats.codegen * 1e3, stats.load * 1e3)
        return lib

    def load_object(self, obj: bytes, exports, name: str = "module") -> CodeLibrary:
        """Load object code produced by ``compile`` with an engine of the same ``key``."""
        with self._lock:
            lib = self._load(obj, tuple(exports), name, "", CompileStats())
        compile_profile.record("load", lib.stats.load)
        return lib

    def _load(self, obj: bytes, exports: tuple[str, ...], name: str, optimized: str,
              stats: CompileStats) -> CodeLibrary:
        t0 = time.perf_counter()
        # A private execution engine per library: dropping the library frees its code.
        ee = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self._new_target_machine())
        ee.add_object_file(llvm.ObjectFileRef.from_data(obj))
        ee.finalize_object()
        addresses = {}
        for sym in exports:
            addr = ee.get_function_address(sym)
            if not addr:
                raise InternalError(f"symbol {sym!r} not found after loading {name}")
            addresses[sym] = addr
        stats.load = time.perf_counter() - t0
        return CodeLibrary(name, obj, optimized, exports, stats, ee, addresses)

    def assembly(self, ir_text: str) -> str:
        """Optimised native assembly for ``ir_text`` (for inspection and tests)."""
        with self._lock:
            mod = self.parse(ir_text)
            self.optimize(mod, len(ir_text))
            return self.target_machine.emit_assembly(mod)


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
