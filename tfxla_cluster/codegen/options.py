"""Code generation options: ``CodegenOptions``, everything that changes the generated code (so it is part of
every cache key), and ``CodegenOptions.from_flags``, which reads it from ``Flags`` (XLA_FLAGS and
TFXLA_CLUSTER_FLAGS, including the CPU target: see ``codegen/target.py``) and the ``TFXLA_CODEGEN_*``
environment switches.

Kept apart from ``codegen/context.py`` (the IR emission contexts) so that a process whose clusters all come
from the persistent compile cache keys and loads them without importing ``llvmlite.ir`` or IR emission.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from functools import cache

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
