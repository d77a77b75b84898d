"""Code generation options and the per-module / per-kernel emission contexts.

``CodegenOptions`` is everything that changes the generated code (so it is part of every cache key);
``CodegenOptions.from_flags`` reads it from ``Flags`` (XLA_FLAGS and TFXLA_CLUSTER_FLAGS, including the CPU
target: see ``codegen/target.py``) and the
``TFXLA_CODEGEN_BOUNDS_CHECKS`` environment switch.

``ModuleContext`` owns the ``llvmlite.ir.Module`` under construction, declares intrinsics and runtime
functions once, and hands out kernel names. ``KernelContext`` is one function being emitted: its
builder, entry-block allocas, and the scoped cache of generated element values (a value generated
inside a loop body or a branch is only reused while that scope is open, so every reuse is dominated
by its definition).
"""
from __future__ import annotations

import os
import re
from contextlib import contextmanager
from functools import cache
from dataclasses import asdict, dataclass, field

from llvmlite import ir

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.target import CpuTarget, default_target, resolve_target

# The function every module exports (program.py emits it, executable.py calls it).
ENTRY_NAME = "tfxla_entry"

BOUNDS_CHECK_ENV = "TFXLA_CODEGEN_BOUNDS_CHECKS"
NO_OUTPUT_FUSION_ENV = "TFXLA_CODEGEN_NO_OUTPUT_FUSION"
NO_WINOGRAD_ENV = "TFXLA_CODEGEN_NO_WINOGRAD"


@cache
def _cpu_count() -> int:
    """The machine's CPU count, asked once (emission asks it for every kernel it may split)."""
    return os.cpu_count() or 1


@dataclass(frozen=True)
class CodegenOptions:
    """Knobs of the native code generator (all of them are part of the compile-cache key)."""

    opt_level: int = 3
    fast_math: bool = False            # xla_cpu_enable_fast_math
    honor_nans: bool = True
    honor_infs: bool = True
    honor_division: bool = True
    fast_min_max: bool = True          # xla_cpu_enable_fast_min_max: max/min need not propagate NaN
    bounds_checks: bool = False        # debug: check every buffer access, report instead of crashing
    threads: int = 0                   # 0 = os.cpu_count()
    use_blas: bool = True              # GEMM through OpenBLAS (numpy's) when it can be found
    gemm_min_flops: int = 4096         # M*N*K below this: an IR loop instead of a library call
    parallel_min_cost: int = 1 << 18   # bytes-equivalent work before a kernel is split across threads
    fast_transcendentals: bool = True  # inline, vectorisable exp/log/tanh approximations for f32
    row_groups: bool = True            # run consecutive row-local kernels block of rows by block of rows
    output_fusion: bool = True         # a convolution's elementwise consumer fusion runs on its blocks
    winograd: bool = True              # 3x3 stride-1 f32 convolutions as Winograd F(2x2, 3x3) GEMMs
    prefer_vector_width: int = 256     # xla_cpu_prefer_vector_width: SIMD width the vectorisers aim for
    split_count: int = 32              # xla_cpu_parallel_codegen_split_count: most parts a module compiles as
    target: CpuTarget | None = None    # CPU the code is for; None = default_target() (env flags, else host)

    @staticmethod
    def from_flags(flags=None, **overrides) -> "CodegenOptions":
        if flags is None:
            from tfxla_cluster.flags import Flags
            flags = Flags.from_env()
        from tfxla_cluster.flags import env_switch

        env = env_switch(BOUNDS_CHECK_ENV).strip().lower()
        values = dict(
            opt_level=int(flags.xla_backend_optimization_level),
            fast_math=bool(flags.xla_cpu_enable_fast_math),
            honor_nans=bool(flags.xla_cpu_fast_math_honor_nans),
            honor_infs=bool(flags.xla_cpu_fast_math_honor_infs),
            honor_division=bool(flags.xla_cpu_fast_math_honor_division),
            fast_min_max=bool(flags.xla_cpu_enable_fast_min_max),
            bounds_checks=env in ("1", "true", "yes", "on"),
            output_fusion=env_switch(NO_OUTPUT_FUSION_ENV).strip().lower() not in ("1", "true", "yes", "on"),
            winograd=env_switch(NO_WINOGRAD_ENV).strip().lower() not in ("1", "true", "yes", "on"),
            threads=int(flags.tfxla_cpu_threads),
            prefer_vector_width=int(flags.xla_cpu_prefer_vector_width),
            split_count=int(flags.xla_cpu_parallel_codegen_split_count),
            target=resolve_target(flags),
        )
        values.update(overrides)
        return CodegenOptions(**values)

    @property
    def cpu_target(self) -> CpuTarget:
        """The CPU the generated code is for: ``target``, or the process's default (flags, else host)."""
        return self.target or default_target()

    @property
    def thread_count(self) -> int:
        return self.threads if self.threads > 0 else _cpu_count()

    @property
    def float_flags(self) -> tuple[str, ...]:
        """Fast-math flags on ordinary float arithmetic: only FMA contraction unless fast math is on
        (XLA sets AllowFPOpFusion=Fast; everything else needs xla_cpu_enable_fast_math)."""
        if not self.fast_math:
            return ("contract",)
        flags = ["contract", "reassoc", "nsz", "afn"]
        if not self.honor_division:
            flags.append("arcp")
        if not self.honor_nans:
            flags.append("nnan")
        if not self.honor_infs:
            flags.append("ninf")
        return tuple(flags)

    @property
    def reduction_flags(self) -> tuple[str, ...]:
        """Reductions may be reassociated (XLA emits reducers with reassociation allowed)."""
        return tuple(sorted(set(self.float_flags) | {"reassoc", "contract"}))

    def key(self) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(asdict(self).items()))


class ModuleContext:
    """The LLVM module being built for one HLO module."""

    def __init__(self, name: str, options: CodegenOptions) -> None:
        self.module = ir.Module(name=re.sub(r"[^A-Za-z0-9_.]", "_", name))
        self.options = options
        self._functions: dict[str, ir.Function] = {}
        self._names: dict[str, int] = {}
        self._taken: set[str] = {"tfxla_entry"}
        self.kernel_count = 0
        # Functions whose loops evaluate an inline f32 transcendental: compute-bound, so they get the
        # target's full vector width (see ``wide_vector_bits``).
        self.wide_functions: set[str] = set()
        # Emitting a small call's computation, which XLA:CPU emits with its legacy IrEmitter as one kernel
        # (codegen/small_call.py): set by ``program._call``.
        self.legacy_emitter = False

    def mark_wide(self, fn: ir.Function) -> None:
        """``fn`` evaluates an inline transcendental approximation (exp/log/tanh)."""
        self.wide_functions.add(fn.name)

    def wide_vector_bits(self) -> int:
        """Vector width for the ``wide_functions``: 512 on an AVX-512 target, else the preferred width.
        XLA's 256-bit default keeps memory-bound loops off AVX-512's lower clocks; an exp/tanh loop is
        bound by its polynomial: with 512-bit vectors on AVX-512 the bench's ``elementwise_4M`` fusion ran
        1.2-2x faster in ``run-hlo`` (loaded machine). Each lane computes the same ops: results are unchanged."""
        bits = self.options.prefer_vector_width
        if bits >= 256 and self.options.cpu_target.info.isa == "AVX-512":
            return 512
        return bits

    def function(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        """Get or declare an external function (libm, runtime) or intrinsic by exact name."""
        fn = self._functions.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
            self._functions[name] = fn
        return fn

    def intrinsic(self, base: str, ty: ir.Type, nargs: int = 1, ret: ir.Type | None = None) -> ir.Function:
        """``llvm.<base>.<suffix>`` overloaded on ``ty`` (e.g. ``llvm.fabs.f32``, ``llvm.ctpop.i32``)."""
        return self.function(f"llvm.{base}.{_suffix(ty)}", ret or ty, [ty] * nargs)

    def unique_name(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", hint)[:48] or "k"
        n = self._names.get(base, 0)
        name = base if n == 0 else f"{base}_{n}"
        while name in self._taken:  # e.g. "split_1" twice vs. an instruction named "split_1.1"
            n += 1
            name = f"{base}_{n}"
        self._names[base] = n + 1
        self._taken.add(name)
        return name


def _suffix(ty: ir.Type) -> str:
    if isinstance(ty, ir.FloatType):
        return "f32"
    if isinstance(ty, ir.DoubleType):
        return "f64"
    if isinstance(ty, ir.HalfType):
        return "f16"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    raise TypeError(f"no intrinsic suffix for {ty}")


@dataclass(eq=False)
class KernelContext:
    """One LLVM function under construction."""

    mctx: ModuleContext
    function: ir.Function
    builder: ir.IRBuilder
    kernel_id: int = 0
    table: ir.Value | None = None          # the buffer table argument (bounds-check reports use it)
    scopes: list[dict] = field(default_factory=lambda: [{}])
    keepalive: list = field(default_factory=list)
    accesses: list = field(default_factory=list)   # (load/store instruction, slot) for alias metadata

    @property
    def options(self) -> CodegenOptions:
        return self.mctx.options

    @contextmanager
    def scope(self):
        """Values generated inside are forgotten on exit (they may not dominate later code)."""
        self.scopes.append({})
        try:
            yield
        finally:
            self.scopes.pop()

    def cached(self, key):
        for s in reversed(self.scopes):
            if key in s:
                return s[key][0]
        return None

    def remember(self, key, value, pin=None) -> None:
        """Cache ``value`` under ``key`` in the innermost scope. A key made of ``id()``s names ``pin``, the
        objects it was made from: the entry keeps them alive, so no other object can take one of those ids
        while the entry lives (a freed index value's id reused by another value would be a stale hit)."""
        self.scopes[-1][key] = (value, pin)

    def release(self) -> None:
        """Forget what building the finished function kept (generators, cached values): generator closures
        refer to each other and to their emitter, cycles that reference counting alone never frees, so a
        compile would leave its kernels' IR to the cyclic collector."""
        for obj in self.keepalive:
            release = getattr(obj, "release", None)
            if release is not None:
                release()
        self.keepalive.clear()
        self.scopes = [{}]
        self.accesses.clear()

    def alloca(self, ty: ir.Type, name: str = "", count: int | None = None) -> ir.Value:
        """A stack slot in the entry block (so mem2reg/SROA can promote it)."""
        return entry_builder(self.function).alloca(ty, size=None if count is None else t.i64(count), name=name)


def new_function_body(fn: ir.Function) -> ir.IRBuilder:
    """Give ``fn`` a setup block (allocas, buffer addresses) that branches to the body block, and
    return a builder at the body. llvmlite builders keep their position as an index, so code that is
    added to the setup block later must never share a block with the main builder."""
    setup = fn.append_basic_block("setup")
    body = fn.append_basic_block("body")
    ir.IRBuilder(setup).branch(body)
    return ir.IRBuilder(body)


def entry_builder(fn: ir.Function) -> ir.IRBuilder:
    """A builder just before the setup block's terminator."""
    setup = fn.entry_basic_block
    b = ir.IRBuilder(setup)
    b.position_before(setup.instructions[-1])
    return b
