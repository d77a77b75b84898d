"""TF_XLA_FLAGS / XLA_FLAGS: the flag table, TF's parser, and the effective configuration.

Stage: configuration. Before any pass runs, TensorFlow reads ``TF_XLA_FLAGS`` once
(``compiler/jit/flags.cc``) and XLA reads ``XLA_FLAGS`` (``xla/debug_options_flags.cc``), both through
``xla/parse_flags_from_env.cc`` and ``tsl/util/command_line_flags.cc``. This module does the same job and
produces one immutable :class:`Flags` object that the other stages read.

What it guarantees (all checked against TF 2.21's own binary, see tests/test_flags.py):

* ``FLAG_TABLE`` lists every flag TF 2.21 accepts in ``TF_XLA_FLAGS`` (48 flags), with TF's types and
  defaults, plus the ``XLA_FLAGS`` flags this project uses. Every other flag XLA 2.21 accepts is known by
  name and type (``XLA_UNMODELLED_FLAGS``): it is validated like XLA does and passed through, never
  rejected as unknown.
* Tokenising is TF's: whitespace-separated ``--name=value`` words, ``--name="quoted value"`` /
  ``'quoted'``; a value that does not start with ``-`` names a file to read the flags from.
* Values are read as TF reads them: ``absl::SimpleAtoi`` for int32/int64 (surrounding whitespace ok, no
  overflow, no hex), ``absl::SimpleAtof`` for float, bool as ``--name`` or ``--name=true|false|1|0``
  (true/false in any case), ``tf_xla_auto_jit`` through TF's setter (an integer, ``fusible`` or
  ``single-gpu(N)``). Later occurrences win, and the settings apply in order.
* Every failure is a :class:`~tfxla_cluster.errors.FlagError` (TF aborts the process instead). The first
  line of the message starts with the text TF logs for the same input (``Unknown flag in TF_XLA_FLAGS:
  ...``, ``Couldn't interpret value ... for flag ....``, ``Could not open file ...``, ``Flag parsing
  failed.``). Lines after it are our hints. ``err.tf_message`` holds TF's exact text, and ``err.env_var``
  the variable.

We differ from TF in one place, on purpose. TF stops reading at the first word that does not start with
``-`` and silently ignores it and everything after it (``--tf_xla_auto_jit=2 tf_xla_min_cluster_size=2``
runs with a min cluster size of 4). We raise an error there.

Project-specific flags (unknown to TF) live in their own variable, ``TFXLA_CLUSTER_FLAGS``. If they were
in ``XLA_FLAGS`` or ``TF_XLA_FLAGS``, real TensorFlow in the same process would abort on them.
"""
from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import os
import re
import struct
import textwrap
import types
from collections.abc import Mapping
from typing import Any, Callable

# The module, not its classes: they derive from TF's and are made on first use, and flags.py is imported
# by modules the CLI parser needs (hostinfo), which must not import TensorFlow.
from tfxla_cluster import errors

__all__ = [
    "TF_XLA_FLAGS", "XLA_FLAGS", "TFXLA_CLUSTER_FLAGS", "ENV_VARS", "FlagSpec", "FLAG_TABLE", "FLAGS_BY_NAME",
    "XLA_UNMODELLED_FLAGS", "XLA_SETTER_CHECKED_FLAGS", "GlobalJitLevel", "Flags", "lookup", "flags_for",
    "tokenize", "global_jit_level_for_graph", "describe", "get_flags",
]

TF_XLA_FLAGS = "TF_XLA_FLAGS"
XLA_FLAGS = "XLA_FLAGS"
TFXLA_CLUSTER_FLAGS = "TFXLA_CLUSTER_FLAGS"
ENV_VARS = (TF_XLA_FLAGS, XLA_FLAGS, TFXLA_CLUSTER_FLAGS)  # also the order in which they are parsed

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_INT_RANGE = {"int32": (INT32_MIN, INT32_MAX), "int64": (INT64_MIN, INT64_MAX)}
_CTYPES = {"bool": bool, "int32": int, "int64": int, "float": float, "string": str}


class GlobalJitLevel(enum.IntEnum):
    """``OptimizerOptions.GlobalJitLevel`` (core/protobuf/config.proto).

    The proto enum is open: ``--tf_xla_auto_jit=5`` is accepted by TF, and any level other than OFF turns
    auto-clustering on. Such values become unnamed members (``GlobalJitLevel(5).name == "LEVEL_5"``).
    """

    DEFAULT = 0
    OFF = -1
    ON_1 = 1
    ON_2 = 2

    @classmethod
    def _missing_(cls, value: object) -> GlobalJitLevel | None:
        if not isinstance(value, int) or isinstance(value, bool) or not INT32_MIN <= value <= INT32_MAX:
            return None
        member = int.__new__(cls, value)
        member._name_ = f"LEVEL_{value}" if value >= 0 else f"LEVEL_MINUS_{-value}"
        member._value_ = value
        return cls._value2member_map_.setdefault(value, member)


# ----------------------------------------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class FlagSpec:
    """One flag: its name, value type, TF's default, help text, and the variable it belongs to.

    ``ctype`` is TF's own type name (``bool``, ``int32``, ``int64``, ``float``, ``string``). It sets the
    integer range, and the usage listing shows it.
    """

    name: str
    type: type
    default: bool | int | float | str
    help: str
    env: str
    ctype: str = ""

    def __post_init__(self) -> None:
        ctype = self.ctype or {bool: "bool", int: "int32", float: "float", str: "string"}[self.type]
        object.__setattr__(self, "ctype", ctype)
        if _CTYPES[ctype] is not self.type or type(self.default) is not self.type:
            raise TypeError(f"flag table entry {self.name}: type/ctype/default disagree")
        if self.env not in ENV_VARS:
            raise ValueError(f"flag table entry {self.name}: unknown env var {self.env}")

    @property
    def project_specific(self) -> bool:
        """True for tfxla_cluster's own flags, which TensorFlow does not know."""
        return self.env == TFXLA_CLUSTER_FLAGS

    @property
    def range(self) -> tuple[int, int] | None:
        return _INT_RANGE.get(self.ctype)

    def display(self, value: Any = None) -> str:
        """``value`` (default: the flag's default) written as TF's usage text writes it."""
        return _display(self.ctype, self.default if value is None else value)


def _tf(name: str, typ: type, default: Any, help: str, ctype: str = "") -> FlagSpec:
    return FlagSpec(name, typ, default, help, TF_XLA_FLAGS, ctype)


def _xla(name: str, typ: type, default: Any, help: str, ctype: str = "") -> FlagSpec:
    return FlagSpec(name, typ, default, help, XLA_FLAGS, ctype)


def _own(name: str, typ: type, default: Any, help: str, ctype: str = "") -> FlagSpec:
    return FlagSpec(name, typ, default, "[tfxla_cluster only] " + help, TFXLA_CLUSTER_FLAGS, ctype)


# TF_XLA_FLAGS, in the order flags.cc registers them (BuildXlaOpsPassFlags, XlaDeviceFlags, XlaOpsCommonFlags,
# XlaCallModuleFlags, MlirCommonFlags, MarkForCompilationPassFlags, XlaSparseCoreFlags). Defaults are the
# ones TF 2.21 prints in its own usage text. The help texts are ours.
FLAG_TABLE: tuple[FlagSpec, ...] = (
    # BuildXlaOpsPassFlags
    _tf("tf_xla_enable_lazy_compilation", bool, True,
        "Allow _XlaCompile to delay compiling a cluster and run it with ordinary TF kernels until it has "
        "executed a few times. false compiles every cluster the first time it runs."),
    _tf("tf_xla_print_cluster_outputs", bool, False,
        "Insert Print ops that log every value an XLA cluster produces."),
    _tf("tf_xla_check_cluster_input_numerics", bool, False,
        "Insert CheckNumerics ops on every cluster input; a NaN or Inf fails the step."),
    _tf("tf_xla_check_cluster_output_numerics", bool, False,
        "Insert CheckNumerics ops on every cluster output; a NaN or Inf fails the step."),
    _tf("tf_xla_disable_constant_folding", bool, False,
        "Skip TF's constant folding of a cluster's graph before it is handed to XLA."),
    _tf("tf_xla_disable_full_embedding_pipelining", bool, False,
        "TPU SparseCore: run SparseCore and TensorCore work strictly in sequence instead of fully "
        "pipelining embeddings."),
    _tf("tf_xla_disable_full_embedding_pipelining_with_summaries", bool, True,
        "TPU SparseCore: turn full embedding pipelining off when the model contains summary ops."),
    _tf("tf_xla_embedding_parallel_iterations", int, 0,
        "TPU SparseCore: parallel iterations for embedding pipelining or sequencing; 0 keeps the value of "
        "the model's original While op."),
    # XlaDeviceFlags
    _tf("tf_xla_compile_on_demand", bool, False,
        "Put XLA devices in on-demand mode: ops are compiled and run one at a time instead of being "
        "auto-clustered."),
    _tf("tf_xla_enable_xla_devices", bool, False,
        "Create the deprecated XLA_CPU / XLA_GPU devices; an op placed on one is always compiled by XLA."),
    # XlaOpsCommonFlags
    _tf("tf_xla_always_defer_compilation", bool, False,
        "Testing aid: _XlaCompile never compiles and always takes the TF fallback path."),
    _tf("tf_xla_async_compilation", bool, False,
        "With lazy compilation, compile clusters on a background thread and run the TF fallback until "
        "the executable is ready."),
    _tf("tf_xla_use_device_api_for_xla_launch", bool, True,
        "Compile and run jit_compile=True functions on one device through the PjRt device API."),
    _tf("tf_xla_use_device_api_for_compile_on_demand", bool, True,
        "Use the PjRt device API for on-demand (op-by-op) compilation."),
    _tf("tf_xla_use_device_api_for_auto_jit", bool, True,
        "Compile and run auto-clustered clusters through the PjRt device API."),
    _tf("tf_xla_use_device_api", bool, False,
        "Use the PjRt device API everywhere: on-demand ops, jit_compile functions and auto-clustering."),
    _tf("tf_xla_enable_device_api_for_gpu", bool, True,
        "Allow the PjRt device API on GPU devices (a switch for tests)."),
    # XlaCallModuleFlags
    _tf("tf_xla_call_module_disabled_checks", str, "",
        "Comma-separated XlaCallModule safety checks to skip (the names are in the XlaCallModule op docs)."),
    # MlirCommonFlags (and bridge options parsed with them)
    _tf("tf_mlir_enable_mlir_bridge", bool, False,
        "Compile with the MLIR-based TF-to-XLA bridge (true) or the old bridge (false). If the flag is "
        "not given, TF chooses per graph."),
    _tf("tf_mlir_enable_merge_control_flow_pass", bool, True,
        "MLIR bridge: run the MergeControlFlow pass."),
    _tf("tf_mlir_enable_convert_control_to_data_outputs_pass", bool, False,
        "MLIR bridge: run the tf-executor-convert-control-to-data-outputs pass."),
    _tf("tf_mlir_composite_tpuexecute_side_effects", bool, False,
        "MLIR bridge: let TPUExecute ops that only touch composite-device resources run in parallel."),
    _tf("tf_mlir_enable_strict_clusters", bool, False,
        "MLIR bridge: refuse clusters that have cyclic control dependencies."),
    _tf("tf_mlir_enable_multiple_local_cpu_devices", bool, False,
        "MLIR bridge: replicate a TPU cluster's outside-compiled CPU ops across several local CPU devices."),
    _tf("tf_mlir_enable_debug_info_serialization", bool, True,
        "Keep debug info (source locations) when MLIR is serialized."),
    _tf("tf_dump_graphs_in_tfg", bool, False,
        "Write graph dumps in the MLIR TFG dialect instead of as GraphDef text."),
    _tf("tf_mlir_enable_tpu_variable_runtime_reformatting_pass", bool, True,
        "MLIR bridge: run TPUVariableRuntimeReformatting (weight-update sharding)."),
    _tf("tf_serialize_mlir_to_compressed_bytecode", bool, False,
        "Serialize MLIR modules as compressed bytecode."),
    # MarkForCompilationPassFlags: the auto-clustering pass this project re-implements
    _tf("tf_xla_auto_jit", str, "0",
        "Auto-clustering level. 0 = follow ConfigProto's global_jit_level (its DEFAULT means off); "
        "-1 = off; 1 = on for ops likely to gain; 2 = on for everything. 'fusible' = level 1, limited to ops "
        "XLA can fuse (sets tf_xla_ops_to_cluster=FUSIBLE). 'single-gpu(N)' = level N, but only for graphs "
        "that use exactly one GPU."),
    _tf("tf_xla_min_cluster_size", int, 4,
        "Smallest cluster worth compiling, counted in non-trivial ops. Must-compile clusters and clusters "
        "on XLA devices are exempt."),
    _tf("tf_xla_max_cluster_size", int, INT32_MAX,
        "Largest number of nodes one auto-cluster may hold."),
    _tf("tf_xla_ops_to_cluster", str, "",
        "Experimental: comma-separated TF op names or groups that auto-clustering may use. The groups are "
        "PW, RED, MISC, PWRED, REDUCEWINDOW, REDUCEWINDOWPW, BN, and FUSIBLE (all of them). Empty means no "
        "restriction."),
    _tf("tf_xla_cluster_exclude_ops", str, "",
        "Experimental: comma-separated ops that auto-clustering must leave out. TF 2.21 accepts only Where."),
    _tf("tf_xla_clustering_debug", bool, False,
        "Dump the graph before and after each auto-clustering pass to TF_DUMP_GRAPH_PREFIX."),
    _tf("tf_xla_cpu_global_jit", bool, False,
        "Let session-level auto-jit (global_jit_level or tf_xla_auto_jit) cluster ops placed on the CPU. "
        "Without it, CPU ops are compiled only on explicit request."),
    _tf("tf_xla_clustering_fuel", int, INT64_MAX,
        "Debug aid: stop marking nodes as clusterable after this many, to bisect a bad cluster.", "int64"),
    _tf("tf_xla_disable_deadness_safety_checks_for_debugging", bool, False,
        "Unsound: ignore deadness (Switch/Merge liveness) when deciding which nodes may share a cluster."),
    _tf("tf_xla_disable_resource_variable_safety_checks_for_debugging", bool, False,
        "Unsound: ignore the ordering of resource-variable reads and writes when clustering."),
    _tf("tf_xla_deterministic_cluster_names", bool, False,
        "Name clusters cluster_<fingerprint>_<n> so that the names are the same on every run."),
    _tf("tf_xla_persistent_cache_directory", str, "",
        "Directory where compiled cluster executables are saved and loaded again. Empty turns the "
        "persistent cache off."),
    _tf("tf_xla_persistent_cache_device_types", str, "",
        "Comma-separated device types (e.g. CPU,GPU) that use the persistent cache. Empty means all."),
    _tf("tf_xla_persistent_cache_read_only", bool, False,
        "Load executables from the persistent cache but never write to it."),
    _tf("tf_xla_disable_strict_signature_checks", bool, False,
        "Accept persistent-cache entries without strictly checking their signatures."),
    _tf("tf_xla_persistent_cache_prefix", str, "xla_compile_cache",
        "File-name prefix of persistent-cache entries."),
    # XlaSparseCoreFlags
    _tf("tf_xla_sparse_core_disable_table_stacking", bool, False,
        "TPU SparseCore: do not stack embedding tables in the mid-level API."),
    _tf("tf_xla_sparse_core_minibatch_max_division_level", int, 6,
        "TPU SparseCore: deepest level of splitting input data into minibatches."),
    _tf("tf_xla_sparse_core_stacking_mem_limit_bytes", int, 2097152,
        "TPU SparseCore: if nonzero, the largest activation size (bytes) of a stacked table.", "int64"),
    _tf("tf_xla_sparse_core_stacking_table_shard_limit_bytes", int, 2147483648,
        "TPU SparseCore: if nonzero, the largest size (bytes) of one table shard.", "int64"),

    # XLA_FLAGS that this project reads. Defaults are XLA 2.21's (DefaultDebugOptionsIgnoringFlags).
    _xla("xla_dump_to", str, "",
         "Directory for XLA debug dumps; '-' means stdout. The other xla_dump_* flags write to stdout when "
         "this is empty."),
    _xla("xla_dump_hlo_as_text", bool, False, "Dump HLO modules as text before and after optimization."),
    _xla("xla_dump_hlo_as_long_text", bool, True,
         "Use the long HLO text form in text dumps (only with xla_dump_hlo_as_text)."),
    _xla("xla_dump_large_constants", bool, False,
         "Print large constants in full in text dumps instead of eliding them."),
    _xla("xla_dump_hlo_as_proto", bool, False, "Dump HLO modules as binary HloProto files."),
    _xla("xla_dump_hlo_as_dot", bool, False, "Dump HLO modules as Graphviz .dot files."),
    _xla("xla_dump_hlo_as_html", bool, False, "Dump HLO modules as HTML graph files."),
    _xla("xla_dump_hlo_module_re", str, "", "Only dump modules whose name matches this regular expression."),
    _xla("xla_dump_hlo_pass_re", str, "",
         "Also dump the HLO before and after every pass whose name matches this regular expression "
         "('.*' = all passes)."),
    _xla("xla_dump_include_timestamp", bool, False, "Put a timestamp into dump file names."),
    _xla("xla_dump_max_hlo_modules", int, -1,
         "Stop dumping after this many modules in one directory. A negative value means no limit."),
    _xla("xla_disable_hlo_passes", str, "",
         "Comma-separated HLO pass names to skip (exact names, no spaces around the commas)."),
    _xla("xla_enable_hlo_passes_only", str, "",
         "Comma-separated HLO pass names. If given, only these passes run."),
    _xla("xla_disable_all_hlo_passes", bool, False,
         "Skip every HLO pass. This can break programs, because some passes are needed for correctness."),
    _xla("xla_backend_optimization_level", int, 3, "Backend (LLVM) optimization level, 0 to 3."),
    _xla("xla_embed_ir_in_executable", bool, False, "Keep the generated LLVM IR text inside the executable."),
    _xla("xla_eliminate_hlo_implicit_broadcast", bool, True,
         "Turn implicit broadcasts into explicit broadcast instructions when building HLO."),
    _xla("xla_hlo_profile", bool, False, "Instrument executables to count the cycles of every HLO instruction."),
    _xla("xla_cpu_multi_thread_eigen", bool, True,
         "CPU: run the ops that are lowered to Eigen calls (dot, convolution) multi-threaded."),
    _xla("xla_cpu_enable_fast_math", bool, False,
         "CPU: allow unsafe floating-point rewrites (fast-math). Faster, but less accurate."),
    _xla("xla_cpu_fast_math_honor_nans", bool, True, "With fast math: still keep NaN semantics."),
    _xla("xla_cpu_fast_math_honor_infs", bool, True, "With fast math: still keep infinity semantics."),
    _xla("xla_cpu_fast_math_honor_division", bool, True, "With fast math: never rewrite x/y as x*(1/y)."),
    _xla("xla_cpu_fast_math_honor_functions", bool, True,
         "With fast math: never approximate transcendental functions."),
    _xla("xla_cpu_enable_fast_min_max", bool, True,
         "CPU: lower min/max to instructions that may not propagate NaN (faster)."),
    _xla("xla_llvm_disable_expensive_passes", bool, False, "Skip a set of expensive LLVM optimization passes."),
    _xla("xla_cpu_prefer_vector_width", int, 256, "CPU: preferred SIMD vector width in bits."),
    _xla("xla_cpu_max_isa", str, "",
         "CPU: newest instruction set that code generation may use (SSE4_2, AVX, AVX2, AVX512, AVX512_VNNI, "
         "AVX512_BF16, AMX, AMX_FP16). Empty means whatever the host supports."),
    _xla("xla_force_host_platform_device_count", int, 1,
         "Number of host (CPU) XLA devices to pretend exist. They all share one thread pool."),
    _xla("xla_cpu_parallel_codegen_split_count", int, 32,
         "CPU: split the LLVM module into at most this many parts, which are compiled in parallel."),

    # TFXLA_CLUSTER_FLAGS: this project's own knobs
    _own("tfxla_cpu_threads", int, 0,
         "Threads the CPU runtime may use to run one executable. 0 means one per core (os.cpu_count())."),
    _own("tfxla_cpu_target", str, "",
         "LLVM CPU name to generate code for instead of the host (haswell, skylake-avx512, x86-64, ...), with "
         "that CPU's own features. Empty or 'host' means the host. Overrides --xla_cpu_max_isa. The host must "
         "be able to run the code."),
    _own("tfxla_cpu_target_features", str, "",
         "LLVM feature changes applied after the target CPU's features (the host's if no "
         "--tfxla_cpu_target), comma-separated: +avx2,+fma,-avx512f."),
    _own("tfxla_hlo_verifier", str, "pipeline",
         "When the HLO verifier checks the module the HLO passes optimize: pipeline (once, after the "
         "last pass), pass (after every pass that changed it, naming the pass that broke it: debugging; "
         "a pipeline run without flags does this), or off."),
)

FLAGS_BY_NAME: Mapping[str, FlagSpec] = types.MappingProxyType({s.name: s for s in FLAG_TABLE})
_SPECS_BY_ENV: dict[str, tuple[FlagSpec, ...]] = {e: tuple(s for s in FLAG_TABLE if s.env == e) for e in ENV_VARS}

# Every other flag XLA 2.21 accepts in XLA_FLAGS, by TF's type name. We found them by probing the TF 2.21
# binary (DebugOptions fields and flag-name strings, each checked with XLA_FLAGS=--name=@@ for name and type).
# They are parsed and type-checked like XLA does, kept in Flags.xla_passthrough, and otherwise ignored.
_XLA_UNMODELLED_BY_TYPE = {
    "bool": """
    xla_allow_excess_precision xla_allow_h2h_copy_when_automatic_host_compute_offload_disabled
    xla_cpu_copy_insertion_use_region_analysis xla_cpu_enable_concurrency_optimized_scheduler
    xla_cpu_enable_platform_dependent_math xla_cpu_enable_xprof_traceme
    xla_cpu_experimental_onednn_custom_call xla_cpu_strict_dot_conv_math xla_cpu_use_acl
    xla_cpu_use_fusion_emitters xla_cpu_use_onednn xla_cpu_use_thunk_runtime xla_cpu_use_xnnpack
    xla_disable_automatic_host_compute_offload xla_dump_compress_protos xla_dump_disable_metadata
    xla_dump_enable_mlir_pretty_form xla_dump_full_hlo_config xla_dump_fusion_visualization
    xla_dump_hlo_as_url xla_dump_hlo_snapshots xla_dump_hlo_unoptimized_snapshots
    xla_dump_latency_hiding_schedule xla_dump_module_metadata xla_early_exit_with_layouts
    xla_enable_command_buffers_during_profiling xla_enable_enzyme_comms_opt xla_enable_fast_math
    xla_enable_scoped_logging_timers xla_flags_reset xla_gpu_async_dot xla_gpu_collect_cost_model_stats
    xla_gpu_command_buffer_unroll_loops xla_gpu_copy_insertion_use_region_analysis
    xla_gpu_crash_on_verification_failures xla_gpu_cublas_fallback
    xla_gpu_default_to_alg_dot_bf16_bf16_f32 xla_gpu_deterministic_ops
    xla_gpu_disable_gpuasm_optimizations xla_gpu_dump_autotuned_gemm_fusions xla_gpu_dump_llvmir
    xla_gpu_enable_all_gather_combine_by_dim xla_gpu_enable_analytical_latency_estimator
    xla_gpu_enable_analytical_sol_latency_estimator xla_gpu_enable_approx_costly_collectives
    xla_gpu_enable_cub_radix_sort xla_gpu_enable_cublaslt xla_gpu_enable_cudnn_fmha
    xla_gpu_enable_cudnn_int8x32_convolution_reordering xla_gpu_enable_cudnn_layer_norm
    xla_gpu_enable_dynamic_slice_fusion xla_gpu_enable_fast_min_max
    xla_gpu_enable_highest_priority_async_stream xla_gpu_enable_host_memory_offloading
    xla_gpu_enable_latency_hiding_scheduler xla_gpu_enable_libnvjitlink xla_gpu_enable_libnvptxcompiler
    xla_gpu_enable_llvm_module_compilation_parallelism xla_gpu_enable_nccl_clique_optimization
    xla_gpu_enable_nccl_comm_splitting xla_gpu_enable_nccl_user_buffers
    xla_gpu_enable_pipelined_all_gather xla_gpu_enable_pipelined_all_reduce
    xla_gpu_enable_pipelined_host_offloading xla_gpu_enable_pipelined_p2p
    xla_gpu_enable_pipelined_reduce_scatter xla_gpu_enable_reassociation_for_converted_ar
    xla_gpu_enable_reduce_scatter_combine_by_dim xla_gpu_enable_reduction_epilogue_fusion
    xla_gpu_enable_scatter_determinism_expander xla_gpu_enable_shared_constants
    xla_gpu_enable_split_k_autotuning xla_gpu_enable_triton_gemm xla_gpu_enable_triton_gemm_int4
    xla_gpu_enable_while_loop_double_buffering xla_gpu_enable_while_loop_reduce_scatter_code_motion
    xla_gpu_exclude_nondeterministic_ops xla_gpu_executable_embed_debug_info
    xla_gpu_exhaustive_tiling_search xla_gpu_experimental_all_fusions_with_triton
    xla_gpu_experimental_allow_unroll_factor_eight xla_gpu_experimental_aot_compiled_thunks
    xla_gpu_experimental_disable_binary_libraries xla_gpu_experimental_dump_fdo_profiles
    xla_gpu_experimental_dump_gpu_executable xla_gpu_experimental_enable_alltoall_windowed_einsum
    xla_gpu_experimental_enable_buffer_saver_on_thunks
    xla_gpu_experimental_enable_checksum_tracing_on_thunks xla_gpu_experimental_enable_fusion_autotuner
    xla_gpu_experimental_enable_fusion_block_level_rewriter
    xla_gpu_experimental_enable_heuristic_collective_combining
    xla_gpu_experimental_enable_nccl_symmetric_buffers xla_gpu_experimental_enable_nvshmem
    xla_gpu_experimental_enable_split_k_rewrite
    xla_gpu_experimental_enable_subchannel_dequantisation_fusion
    xla_gpu_experimental_enable_triton_heroless_priority_fusion
    xla_gpu_experimental_enable_triton_warp_specialization
    xla_gpu_experimental_pack_dot_operands_along_k_dimension xla_gpu_experimental_scaled_dot_with_triton
    xla_gpu_experimental_stream_annotation xla_gpu_experimental_use_autotuner_pass
    xla_gpu_experimental_use_raft_select_k xla_gpu_fail_ptx_compilation_on_register_spilling
    xla_gpu_filter_kernels_spilling_registers_on_autotuning xla_gpu_force_conv_nchw
    xla_gpu_force_conv_nhwc xla_gpu_ftz xla_gpu_fused_attention_use_cudnn_rng
    xla_gpu_generate_debug_info xla_gpu_generate_line_info xla_gpu_graph_enable_concurrent_region
    xla_gpu_mock_custom_calls xla_gpu_multi_streamed_windowed_einsum xla_gpu_nccl_async_execution
    xla_gpu_nccl_blocking_communicators xla_gpu_nccl_terminate_on_error
    xla_gpu_require_complete_aot_autotune_results xla_gpu_require_exclusive_lock
    xla_gpu_shard_autotuning xla_gpu_strict_conv_algorithm_picker xla_gpu_temp_buffer_use_separate_color
    xla_gpu_triton_gemm_any xla_gpu_unsafe_fallback_to_driver_on_ptxas_not_found
    xla_gpu_unsupported_disable_nested_gemm_fusions xla_gpu_unsupported_enable_all_reduce_decomposer
    xla_gpu_unsupported_enable_ragged_all_to_all_decomposer
    xla_gpu_unsupported_enable_ragged_all_to_all_multi_host_decomposer
    xla_gpu_unsupported_enable_triton_multi_output_fusion
    xla_gpu_unsupported_use_all_reduce_one_shot_kernel
    xla_gpu_unsupported_use_ragged_all_to_all_one_shot_kernel xla_gpu_use_embeded_device_lib
    xla_gpu_use_inprocess_lld xla_gpu_use_memcpy_local_p2p xla_gpu_use_runtime_fusion
    xla_gpu_verify_triton_fusion_numerics xla_hlo_graph_addresses xla_hlo_graph_sharding_color
    xla_hlo_pass_fix_detect_cycles xla_ignore_channel_id xla_keep_shardings_after_spmd
    xla_llvm_enable_alias_scope_metadata xla_llvm_enable_invariant_load_metadata
    xla_llvm_enable_noalias_metadata xla_llvm_force_inline_before_split
    xla_pjrt_allow_auto_layout_in_hlo xla_syntax_sugar_async_ops xla_test_add_command_buffer_mode
    xla_test_all_input_layouts xla_test_all_output_layouts xla_tpu_detect_inf xla_tpu_detect_nan
    xla_unsupported_crash_on_hlo_pass_fix_max_iterations xla_unsupported_crash_on_hlo_pass_noop_change
    xla_unsupported_crash_on_hlo_pass_silent_hlo_change
    """,
    "int32": """
    xla_cpu_collective_call_terminate_timeout_seconds xla_cpu_collective_call_warn_stuck_timeout_seconds
    xla_cpu_collective_timeout_seconds xla_cpu_emitter_verification_level
    xla_gpu_all_reduce_blueconnect_num_devices_per_host xla_gpu_auto_spmd_partitioning_memory_budget_gb
    xla_gpu_autotune_level xla_gpu_collective_inflation_factor xla_gpu_cudnn_gemm_fusion_level
    xla_gpu_cudnn_gemm_max_plans xla_gpu_dot_merger_threshold_mb xla_gpu_executable_terminate_timeout
    xla_gpu_executable_warn_stuck_timeout xla_gpu_experimental_parallel_collective_overlap_limit
    xla_gpu_first_collective_call_terminate_timeout_seconds
    xla_gpu_first_collective_call_warn_stuck_timeout_seconds xla_gpu_force_compilation_parallelism
    xla_gpu_graph_min_graph_size xla_gpu_llvm_verification_level xla_gpu_memory_limit_slop_factor
    xla_multiheap_size_constraint_per_heap
    """,
    "int64": """
    xla_cmd_buffer_trace_cache_size xla_debug_buffer_assignment_show_max
    xla_gpu_all_gather_combine_threshold_bytes xla_gpu_all_reduce_combine_threshold_bytes
    xla_gpu_autotune_max_solutions xla_gpu_collective_permute_combine_threshold_bytes
    xla_gpu_collective_permute_decomposer_threshold
    xla_gpu_experimental_collective_cse_distance_threshold xla_gpu_gemm_rewrite_size_threshold
    xla_gpu_nccl_collective_max_nchannels xla_gpu_nccl_init_max_rank_per_root_ratio
    xla_gpu_nccl_p2p_max_nchannels xla_gpu_nccl_termination_timeout_seconds
    xla_gpu_operand_bytes_threshold_for_windowed_einsum xla_gpu_reduce_scatter_combine_threshold_bytes
    xla_gpu_redzone_padding_bytes xla_gpu_threshold_for_windowed_einsum_mib
    xla_gpu_unsupported_override_fast_interconnect_slice_size xla_reduce_window_rewrite_base_length
    """,
    "float": """
    xla_gpu_auto_spmd_partitioning_memory_budget_ratio xla_gpu_autotune_gemm_rtol
    """,
    "string": """
    xla_backend_extra_options xla_cpu_experimental_onednn_fusion_type
    xla_cpu_experimental_xnn_fusion_type xla_cpu_experimental_xnn_graph_fusion_mode
    xla_cpu_experimental_ynn_fusion_type xla_detect_unstable_reductions
    xla_detect_unstable_reductions_post_optimizations xla_dump_emitter_re xla_dump_hlo_pipeline_re
    xla_fuel xla_gpu_algorithm_denylist_path xla_gpu_analytical_latency_estimator_options
    xla_gpu_command_buffer_scheduling_mode xla_gpu_cuda_data_dir xla_gpu_detect_inf xla_gpu_detect_nan
    xla_gpu_disable_async_collectives xla_gpu_dump_autotune_logs_to xla_gpu_dump_autotune_results_to
    xla_gpu_enable_command_buffer xla_gpu_enable_while_loop_unrolling
    xla_gpu_experimental_autotune_backends xla_gpu_experimental_autotune_cache_mode
    xla_gpu_experimental_autotuner_cache_dir xla_gpu_experimental_collective_perf_table_path
    xla_gpu_experimental_matmul_perf_table_path xla_gpu_experimental_pipeline_parallelism_opt_level
    xla_gpu_experimental_thunk_buffer_debug_filter_by_profile_annotation_re
    xla_gpu_experimental_thunk_buffer_debug_filter_by_thunk_id_ranges
    xla_gpu_gemm_autotuner_override_file xla_gpu_kernel_cache_file xla_gpu_llvm_ir_file
    xla_gpu_load_autotune_results_from xla_gpu_override_gemm_autotuner
    xla_gpu_per_fusion_autotune_cache_dir xla_gpu_pgle_accuracy_checker
    xla_gpu_pgle_profile_file_or_directory_path xla_gpu_ptx_file xla_gpu_shape_checks
    xla_gpu_target_config_filename xla_partitioning_algorithm xla_step_marker_location
    """,
}
XLA_UNMODELLED_FLAGS: Mapping[str, str] = types.MappingProxyType(
    {n: ctype for ctype, names in _XLA_UNMODELLED_BY_TYPE.items() for n in names.split()})

# String flags whose XLA setter checks the value itself (enum names, "+x,-y" lists, X=INTEGER pairs). We
# pass their values through unchecked, so XLA may still reject a value that we accepted.
XLA_SETTER_CHECKED_FLAGS = frozenset("""
    xla_cpu_experimental_onednn_fusion_type xla_cpu_experimental_xnn_fusion_type
    xla_cpu_experimental_xnn_graph_fusion_mode xla_cpu_experimental_ynn_fusion_type
    xla_detect_unstable_reductions xla_detect_unstable_reductions_post_optimizations xla_fuel
    xla_gpu_command_buffer_scheduling_mode xla_gpu_detect_inf xla_gpu_detect_nan
    xla_gpu_disable_async_collectives xla_gpu_enable_command_buffer xla_gpu_enable_while_loop_unrolling
    xla_gpu_experimental_autotune_backends xla_gpu_experimental_autotune_cache_mode
    xla_gpu_experimental_pipeline_parallelism_opt_level
    xla_gpu_experimental_thunk_buffer_debug_filter_by_thunk_id_ranges xla_gpu_pgle_accuracy_checker
    xla_gpu_shape_checks xla_partitioning_algorithm xla_step_marker_location
    """.split())

_ALL_NAMES: dict[str, str] = {**{s.name: s.env for s in FLAG_TABLE}, **{n: XLA_FLAGS for n in XLA_UNMODELLED_FLAGS}}


def lookup(name: str) -> FlagSpec:
    """The table entry for ``name`` (with or without leading ``--``). Raises FlagError with a suggestion."""
    bare = name.lstrip("-")
    spec = FLAGS_BY_NAME.get(bare)
    if spec is None:
        hint = _suggest(bare)
        raise _error(f"Unknown flag: {name}" + (f"\n  Did you mean --{hint}?" if hint else ""), env=None)
    return spec


def flags_for(env: str) -> tuple[FlagSpec, ...]:
    """The table entries that belong in ``env`` (one of ENV_VARS), in TF's registration order."""
    if env not in _SPECS_BY_ENV:
        raise _error(f"Unknown flag variable {env!r}; expected one of {', '.join(ENV_VARS)}", env=None)
    return _SPECS_BY_ENV[env]


# ----------------------------------------------------------------------------------------------------------
# Tokenising (xla/parse_flags_from_env.cc) and value parsing (tsl/util/command_line_flags.cc)
# ----------------------------------------------------------------------------------------------------------

_WS = " \t\r\n"                     # kWS in parse_flags_from_env.cc; the tokenizer splits only on these
_ASCII_SPACE = " \t\n\v\f\r"        # absl::ascii_isspace, which SimpleAtoi/SimpleAtof strip


def _skip(text: str, pos: int, chars: str, inside: bool) -> int:
    while pos < len(text) and (text[pos] in chars) == inside:
        pos += 1
    return pos


def tokenize(text: str) -> tuple[list[str], str]:
    """Split a flags string the way ``ParseArgvFromString`` does. Returns ``(argv, ignored_rest)``.

    A word starts at a ``-``. Its name runs over ASCII letters, digits, ``-`` and ``_``. If ``=`` and a
    quote follow, the value runs to the matching quote (in double quotes a backslash escapes the next
    character), and the quotes are dropped. Otherwise the word runs to the next whitespace. TF stops at
    the first word that does not start with ``-``; that part is returned as ``ignored_rest``.
    """
    argv: list[str] = []
    n = len(text)
    b = _skip(text, 0, _WS, True)
    while b < n and text[b] == "-":
        e = b
        while e < n and text[e].isascii() and (text[e].isalnum() or text[e] in "-_"):
            e += 1
        if e < n and text[e] == "=" and e + 1 < n and text[e + 1] in "'\"":
            e += 1
            eflag = e
            quote = text[e]
            e += 1
            value: list[str] = []
            while e < n and text[e] != quote:
                c = text[e]
                if quote == '"' and c == "\\" and e + 1 < n:
                    e += 1
                    c = text[e]
                value.append(c)
                e += 1
            if e < n:       # the closing quote
                e += 1
            argv.append(text[b:eflag] + "".join(value))
        else:
            e = _skip(text, e, _WS, False)
            argv.append(text[b:e])
        b = _skip(text, e, _WS, True)
    return argv, text[b:]


_INT_RE = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE = re.compile(
    r"-?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf(?:inity)?|nan(?:\([0-9A-Za-z_]*\))?)", re.IGNORECASE)
_HEX_FLOAT_RE = re.compile(r"-?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?")


def _simple_atoi(text: str, ctype: str) -> int | None:
    """absl::SimpleAtoi: base 10, optional sign, surrounding whitespace allowed, None on junk or overflow."""
    body = text.strip(_ASCII_SPACE)
    if not _INT_RE.fullmatch(body):
        return None
    digits = body.lstrip("+-").lstrip("0")
    if len(digits) > 20:  # beyond any 64-bit range (and Python's int() digit limit)
        return None
    value = int(digits or "0") * (-1 if body.startswith("-") else 1)
    lo, hi = _INT_RANGE[ctype]
    return value if lo <= value <= hi else None


def _simple_atof(text: str) -> float | None:
    """absl::SimpleAtof: decimal, 0x hex, inf, infinity or nan (any case), rounded to float32; overflow gives +-inf."""
    body = text.strip(_ASCII_SPACE)
    if body.startswith("+"):            # one leading '+' is allowed, but "+-1" is not
        body = body[1:]
        if body.startswith("-"):
            return None
    if _HEX_FLOAT_RE.fullmatch(body):          # absl's from_chars also reads C99 hex floats (0x1.8p1)
        value = float.fromhex(body)
    elif _FLOAT_RE.fullmatch(body):
        low = body.lower()
        if "nan" in low:
            return float("-nan") if low.startswith("-") else float("nan")
        value = float(body)
    else:
        return None
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")


def _parse_bool(text: str) -> bool | None:
    """The part after ``--name=`` of a bool flag: true/false in any ASCII case, or 1/0."""
    if text.isascii() and text.lower() == "true" or text == "1":
        return True
    if text.isascii() and text.lower() == "false" or text == "0":
        return False
    return None


def _parse_value(ctype: str, text: str) -> Any:
    """Parse ``text`` as TF would for a flag of ``ctype``; None if TF would reject it."""
    if ctype == "bool":
        return _parse_bool(text)
    if ctype in _INT_RANGE:
        return _simple_atoi(text, ctype)
    if ctype == "float":
        return _simple_atof(text)
    return text


_EXPECTED = {
    "bool": "write --{name}, --{name}=true or --{name}=false (1/0 and any case of true/false work too)",
    "int32": "expected a base-10 integer from -2147483648 to 2147483647, e.g. --{name}={example}",
    "int64": "expected a base-10 integer from -9223372036854775808 to 9223372036854775807, "
             "e.g. --{name}={example}",
    "float": "expected a number such as 1.5, 2e-3 or 0x1p-4, or inf or nan",
    "string": "any text",
}
_AUTO_JIT_EXPECTED = ("expected an integer (-1 off, 0 follow ConfigProto, 1, 2), 'fusible' or 'single-gpu(N)', "
                      "e.g. --tf_xla_auto_jit=2")


def _a(ctype: str) -> str:
    return ("an " if ctype[0] in "aeiou" else "a ") + ctype


def _display(ctype: str, value: Any) -> str:
    if ctype == "bool":
        return "true" if value else "false"
    if ctype == "string":
        return f'"{value}"'
    if ctype == "float":
        return f"{value:f}"
    return str(value)


# ----------------------------------------------------------------------------------------------------------
# Parse state and the tf_xla_auto_jit setter (flags.cc SetterForXlaAutoJitFlag)
# ----------------------------------------------------------------------------------------------------------

class _Builder:
    """Mutable state while flags are applied in order; ``freeze()`` turns it into a Flags."""

    def __init__(self, base: Flags | None = None) -> None:
        if base is None:
            self.values: dict[str, Any] = {s.name: s.default for s in FLAG_TABLE}
            self.general, self.single_gpu = 0, 0
            self.passthrough: dict[str, Any] = {}
            self.explicit: list[str] = []
        else:
            self.values = dict(base._values)
            self.general, self.single_gpu = int(base.auto_jit_level), int(base.auto_jit_single_gpu_level)
            self.passthrough = dict(base._passthrough)
            self.explicit = list(base._explicit)

    def set_auto_jit(self, text: str) -> bool:
        """TF's setter: an integer sets both levels; 'fusible' is level 1 plus ops_to_cluster=FUSIBLE;
        'single-gpu(N)' sets only the single-GPU level. Returns False, and changes nothing, on any other text."""
        level = _simple_atoi(text, "int32")
        if level is not None:
            self.general = self.single_gpu = level
        elif text == "fusible":
            self.general = self.single_gpu = 1
            self.values["tf_xla_ops_to_cluster"] = "FUSIBLE"
        elif text.startswith("single-gpu(") and text.endswith(")") and len(text) >= 12 and \
                (level := _simple_atoi(text[11:-1], "int32")) is not None:
            self.single_gpu = level
        else:
            return False
        self.values["tf_xla_auto_jit"] = text
        return True

    def set(self, name: str, value: Any) -> None:
        if name in FLAGS_BY_NAME:
            self.values[name] = value
        else:
            self.passthrough[name] = value
        if name in self.explicit:
            self.explicit.remove(name)
        self.explicit.append(name)

    def freeze(self) -> Flags:
        return Flags._make(self.values, self.general, self.single_gpu, self.passthrough, tuple(self.explicit))


# ----------------------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------------------

def _error(message: str, *, env: str | None, tf_message: str | None = None) -> "errors.FlagError":
    """A FlagError carrying ``env_var`` (the variable at fault, if any) and ``tf_message`` (TF's own text for
    the same input, or None where TF has none)."""
    err = errors.FlagError(message)
    err.env_var = env              # type: ignore[attr-defined]
    err.tf_message = tf_message    # type: ignore[attr-defined]  # what TF itself logs before aborting
    return err


def _normalize(name: str) -> str:
    return name.lstrip("-").split("=", 1)[0].lower().replace("-", "_")


def _suggest(name: str) -> str | None:
    """The closest known flag name (any variable), or None."""
    key = _normalize(name)
    if key in _ALL_NAMES:
        return key
    match = difflib.get_close_matches(key, list(_ALL_NAMES), n=1, cutoff=0.8)
    return match[0] if match else None


def _unknown_hint(env: str, token: str) -> str:
    """One hint line for an unknown word in ``env``."""
    if token == "--":
        return "  '--' ends the flag list: TF reports it and every word after it as unknown. Remove it."
    if token == "--help":
        return "  --help is not a flag. To list the flags, run `tfxla-cluster flags`."
    value = token.split("=", 1)[1] if "=" in token else None
    raw_name = token.lstrip("-").split("=", 1)[0]
    suggestion = _suggest(token)
    if suggestion is None:
        return f"  {token}: TF 2.21 has no such flag. To list the flags, run `tfxla-cluster flags`."
    home = _ALL_NAMES[suggestion]
    fixed = f"--{suggestion}" + (f"={value}" if value is not None else "")
    if home != env:
        if suggestion == raw_name:
            return f"  (--{suggestion} belongs in {home}, not {env})"
        return f"  {token}: did you mean {fixed}? (it belongs in {home}, not {env})"
    spec = FLAGS_BY_NAME.get(suggestion)
    ctype = spec.ctype if spec else XLA_UNMODELLED_FLAGS[suggestion]
    if token == f"--{suggestion}" and ctype != "bool":
        return f"  --{suggestion} needs a value, e.g. --{suggestion}={_example(suggestion)}"
    if token.startswith("-") and not token.startswith("--") and suggestion == raw_name:
        return f"  {token}: flags need two dashes: {fixed}"
    return f"  {token}: did you mean {fixed}?"


def _example(name: str) -> str:
    """A sample value for ``name`` to show in hints: its default, or a placeholder."""
    spec = FLAGS_BY_NAME.get(name)
    if spec is None or spec.default == "":
        return "<value>"
    return spec.display().strip('"')


def _missing_dashes_hint(env: str, value: str) -> str:
    """Hint for a variable whose value TF took as a file name."""
    words = value.split()
    looks_like_flags = words and all("=" in w or _suggest(w) for w in words)
    lines = [f"  {env} must hold --name=value flags, or the name of a file that holds them."]
    if looks_like_flags:
        fixed = " ".join(w if w.startswith("-") else f"--{w}" for w in words)
        lines.append(f"  Each flag needs a leading '--': {env}=\"{fixed}\"")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------
# Reading one variable
# ----------------------------------------------------------------------------------------------------------

def _read_argv(env: str, raw: str) -> tuple[list[str], str]:
    """The words of ``raw`` (the variable's value), reading the file it names when it does not start with '-'."""
    if raw == "":
        return [], ""
    if raw.lstrip(_WS).startswith("-"):
        return tokenize(raw)
    try:    # TF fopen()s the value as given, surrounding whitespace included
        with open(raw, encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
    except IsADirectoryError:
        text = ""          # fopen() of a directory succeeds on Linux and fread() reads nothing
    except OSError:
        tf_text = (f'Could not open file "{raw}" to read flags for environment variable "{env}". '
                   f'(We assumed "{raw}" was a file name because it did not start with a "--".)')
        raise _error(tf_text + "\n" + _missing_dashes_hint(env, raw), env=env, tf_message=tf_text) from None
    return tokenize(text)


def _known_specs(env: str) -> dict[str, str]:
    """name -> ctype of every flag TF accepts in ``env``."""
    known = {s.name: s.ctype for s in _SPECS_BY_ENV[env]}
    if env == XLA_FLAGS:
        known.update(XLA_UNMODELLED_FLAGS)
    return known


def _apply_env(env: str, raw: str, builder: _Builder) -> None:
    """Apply one variable's flags to ``builder`` in order, then raise what TF would die of, TF's check first."""
    argv, ignored = _read_argv(env, raw)
    known = _known_specs(env)
    bad: list[tuple[str | None, str, str]] = []   # (line TF logs, or None if TF is silent; headline; hint)
    unknown: list[str] = []
    for i, word in enumerate(argv):
        if word == "--":                        # Flags::Parse passes "--" and all after it through
            unknown.extend(argv[i:])
            break
        name, eq, text = word[2:].partition("=") if word.startswith("--") else ("", "", "")
        ctype = known.get(name)
        if ctype is None or (not eq and ctype != "bool"):
            unknown.append(word)
            continue
        if name == "tf_xla_auto_jit":
            if builder.set_auto_jit(text):
                builder.set(name, text)
            else:
                bad.append((None, f"Invalid value {text} for flag tf_xla_auto_jit.", f"  {_AUTO_JIT_EXPECTED}"))
            continue
        value = _parse_value(ctype, text) if eq else True
        if value is None:
            line = f"Couldn't interpret value {text} for flag {name}."
            bad.append((line, line, f"  {name} is {_a(ctype)} flag: "
                        + _EXPECTED[ctype].format(name=name, example=_example(name))))
        else:
            builder.set(name, value)
    if bad:
        logged = [t for t, _, _ in bad if t is not None]
        tf_message = "\n".join(logged + ["Flag parsing failed."])
        if logged:      # TF's first line is the first value it could not read; its setters fail silently
            lines = [part for t, _, hint in bad if t for part in (t, hint)]
            lines += [part for t, head, hint in bad if not t
                      for part in (f"  {head} (TF logs no message for this one)", hint)]
        else:           # only a setter refused: all TF says is "Flag parsing failed."
            lines = [f"Flag parsing failed. {bad[0][1]}", bad[0][2]]
            lines += [part for _, head, hint in bad[1:] for part in (f"  {head}", hint)]
        raise _error("\n".join(lines), env=env, tf_message=tf_message)
    if unknown and unknown[0] == "--help":      # Flags::Parse fails when the first leftover word is --help
        raise _error(f"Flag parsing failed. ({env} contains --help: TF prints its flag list and aborts.)\n"
                     + _unknown_hint(env, "--help"), env=env, tf_message="Flag parsing failed.")
    if unknown:
        tf_text = f"Unknown flag{'s' if len(unknown) > 1 else ''} in {env}: {' '.join(unknown)}"
        after = unknown.index("--") if "--" in unknown else len(unknown)
        hints = [_unknown_hint(env, w) if i <= after or not _reads_as_flag(known, w)
                 else f"  {w}: TF does not read it because it comes after '--'" for i, w in enumerate(unknown)]
        if ignored.strip(_WS):
            hints.append(_ignored_hint(env, ignored))
        raise _error("\n".join([tf_text, *hints]), env=env, tf_message=tf_text)
    if ignored.strip(_WS):
        first = ignored.split()[0]
        raise _error(f"{env}: '{first}' does not start with '-'. TF stops reading flags there and silently "
                     f"ignores it and everything after it.\n" + _ignored_hint(env, ignored), env=env)


def _reads_as_flag(known: Mapping[str, str], word: str) -> bool:
    name, eq, _ = word[2:].partition("=") if word.startswith("--") else ("", "", "")
    return name in known and (bool(eq) or known[name] == "bool")


def _ignored_hint(env: str, ignored: str) -> str:
    words = ignored.split()
    fixed = " ".join(w if w.startswith("-") or not ("=" in w or _suggest(w)) else f"--{w}" for w in words)
    return f"  TF ignores this part of {env}: {ignored.strip(_WS)!r}. Give each flag a leading '--': {fixed}"


# ----------------------------------------------------------------------------------------------------------
# The parsed configuration
# ----------------------------------------------------------------------------------------------------------


def _no_session() -> int:
    return 0   # GlobalJitLevel.DEFAULT: no TF session has set a level


# Reads the session's global JIT level (``tf.config.optimizer.set_jit``) as TF's function runtime sees it.
# tf_compat registers the reader when it is imported: this module sits below TF.
_session_jit_level: Callable[[], int] = _no_session


def register_session_jit_level(reader: Callable[[], int]) -> None:
    """Make :meth:`Flags.resolve` of no flags read the session's JIT level through ``reader``."""
    global _session_jit_level
    _session_jit_level = reader


class Flags:
    """The effective flag values. Immutable; read a flag as an attribute (``flags.tf_xla_min_cluster_size``).

    ``auto_jit_level`` and ``auto_jit_single_gpu_level`` are TF's two parsed ``tf_xla_auto_jit`` levels
    (``optimization_level_general`` / ``optimization_level_single_gpu``). ``xla_passthrough`` holds the
    XLA_FLAGS flags that XLA accepts but this project does not use. ``explicit`` names the flags that were
    given, in the order they were last set.
    """

    __slots__ = ("_values", "_general", "_single_gpu", "_passthrough", "_explicit")
    _values: Mapping[str, Any]
    _general: GlobalJitLevel
    _single_gpu: GlobalJitLevel
    _passthrough: Mapping[str, Any]
    _explicit: tuple[str, ...]

    def __init__(self) -> None:
        raise TypeError("use Flags.default(), Flags.parse(...) or Flags.from_env()")

    @classmethod
    def _make(cls, values: Mapping[str, Any], general: int, single_gpu: int, passthrough: Mapping[str, Any],
              explicit: tuple[str, ...]) -> Flags:
        self = object.__new__(cls)
        object.__setattr__(self, "_values", types.MappingProxyType(dict(values)))
        object.__setattr__(self, "_general", GlobalJitLevel(general))
        object.__setattr__(self, "_single_gpu", GlobalJitLevel(single_gpu))
        object.__setattr__(self, "_passthrough", types.MappingProxyType(dict(passthrough)))
        object.__setattr__(self, "_explicit", tuple(explicit))
        return self

    # -- construction -----------------------------------------------------------------------------------
    @classmethod
    def default(cls) -> Flags:
        """Every flag at TF's default (what an empty environment gives)."""
        return _Builder().freeze()

    @classmethod
    def parse(cls, tf_xla_flags: str = "", xla_flags: str = "", tfxla_cluster_flags: str = "") -> Flags:
        """Parse values as they would appear in TF_XLA_FLAGS, XLA_FLAGS and TFXLA_CLUSTER_FLAGS.

        Each value follows the environment rules: empty means nothing; a value that does not start with
        '-' (after leading whitespace) is a file name to read the flags from.
        """
        builder = _Builder()
        for env, raw in zip(ENV_VARS, (tf_xla_flags, xla_flags, tfxla_cluster_flags)):
            if not isinstance(raw, str):
                raise _error(f"{env} must be a string, got {type(raw).__name__}", env=env)
            _apply_env(env, raw, builder)
        return builder.freeze()

    @classmethod
    def resolve(cls, flags: "Flags | str | None" = None, environ: Mapping[str, str] | None = None) -> Flags:
        """The flags an API call or command runs with: ``None`` → the environment (:meth:`from_env`; with
        ``environ`` not given, under the process's session JIT level as TF combines them,
        :meth:`with_session_jit_level`);
        a string → that ``TF_XLA_FLAGS`` value, with ``XLA_FLAGS`` and ``TFXLA_CLUSTER_FLAGS`` still
        from the environment (a clustering flag string must not silently drop e.g. ``--xla_dump_to``);
        a :class:`Flags` → itself."""
        if isinstance(flags, Flags):
            return flags
        if flags is None and environ is None:
            # the live process: TF's passes see its TF_XLA_FLAGS under the session's global JIT level
            # (tf.config.optimizer.set_jit), so a call that names no flags does too
            return cls.from_env().with_session_jit_level(_session_jit_level())
        env = os.environ if environ is None else environ
        if flags is None:
            return cls.from_env(env)
        return cls.parse(flags, env.get(XLA_FLAGS, ""), env.get(TFXLA_CLUSTER_FLAGS, ""))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Flags:
        """Parse TF_XLA_FLAGS, XLA_FLAGS and TFXLA_CLUSTER_FLAGS from ``environ`` (default ``os.environ``)."""
        env = os.environ if environ is None else environ
        return cls.parse(*(env.get(name, "") for name in ENV_VARS))

    def replace(self, **overrides: Any) -> Flags:
        """A copy with some flags changed, applied in the order given (like later words in TF_XLA_FLAGS).

        Values may be Python values of the flag's type, or strings in TF's syntax ('true', '4', ...).
        tf_xla_auto_jit goes through TF's setter ('fusible' also sets tf_xla_ops_to_cluster). Any XLA flag
        that XLA accepts but this project does not use can also be set; it goes into ``xla_passthrough``.
        """
        builder = _Builder(self)
        for name, value in overrides.items():
            if name in XLA_UNMODELLED_FLAGS:
                ctype = XLA_UNMODELLED_FLAGS[name]
            else:
                ctype = lookup(name).ctype
            if name == "tf_xla_auto_jit":
                text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
                if not isinstance(text, str) or not builder.set_auto_jit(text):
                    raise _error(f"Invalid value {value!r} for flag tf_xla_auto_jit.\n  {_AUTO_JIT_EXPECTED}",
                                 env=TF_XLA_FLAGS)
                builder.set(name, text)
                continue
            builder.set(name, _coerce(name, ctype, value))
        return builder.freeze()

    def with_session_jit_level(self, config_level: int | GlobalJitLevel) -> Flags:
        """These flags as TF's passes apply them in a session whose ConfigProto has ``global_jit_level`` =
        ``config_level`` (``tf.config.optimizer.set_jit(True)`` sets ON_1, ``set_jit(False)`` OFF).

        xla_cluster_util.cc ``GetXlaGlobalJitLevel``: the session's level is the base of both levels
        (DEFAULT means OFF), and each ``tf_xla_auto_jit`` level that is not DEFAULT overrides it. The result
        carries those two effective levels as its own ``tf_xla_auto_jit`` (set through TF's setter, so
        ``env_strings`` gives a TF_XLA_FLAGS with the same behaviour under no session level), and every
        consumer (MarkForCompilation, CloneConstants, grappler's ``IsXlaGlobalJitOn``, cache keys) reads it
        unchanged. DEFAULT and OFF change nothing: both leave a DEFAULT level off."""
        config = GlobalJitLevel(int(config_level))
        if config in (GlobalJitLevel.DEFAULT, GlobalJitLevel.OFF):
            return self
        general = self._general if self._general != GlobalJitLevel.DEFAULT else config
        single = self._single_gpu if self._single_gpu != GlobalJitLevel.DEFAULT else config
        if (general, single) == (self._general, self._single_gpu):
            return self
        overrides: list[str] = [str(int(general))]
        if single != general:
            overrides.append(f"single-gpu({int(single)})")
        builder = _Builder(self)
        for text in overrides:
            builder.set_auto_jit(text)
            builder.set("tf_xla_auto_jit", text)
        return builder.freeze()

    # -- reading ----------------------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            hint = _suggest(name)
            raise AttributeError(f"Flags has no flag {name!r}" + (f"; did you mean {hint!r}?" if hint else "")) \
                from None

    def __getitem__(self, name: str) -> Any:
        """``flags["xla_gpu_autotune_level"]`` reads any flag, including the passthrough XLA ones."""
        if name in self._values:
            return self._values[name]
        if name in XLA_UNMODELLED_FLAGS:
            return self._passthrough.get(name)
        raise KeyError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Flags is immutable; use flags.replace(name=value)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Flags is immutable")

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._values))

    @property
    def auto_jit_level(self) -> GlobalJitLevel:
        """tf_xla_auto_jit's level for general graphs (TF's optimization_level_general)."""
        return self._general

    @property
    def auto_jit_single_gpu_level(self) -> GlobalJitLevel:
        """tf_xla_auto_jit's level for graphs that use exactly one GPU (optimization_level_single_gpu)."""
        return self._single_gpu

    @property
    def xla_passthrough(self) -> Mapping[str, Any]:
        """XLA_FLAGS flags that XLA accepts but tfxla_cluster does not use (name -> parsed value)."""
        return self._passthrough

    @property
    def explicit(self) -> tuple[str, ...]:
        """Names of the flags that were set explicitly, in the order they were last set."""
        return self._explicit

    @property
    def mlir_bridge_rollout(self) -> str:
        """ConfigProto.Experimental.MlirBridgeRollout as flags.cc derives it: it is UNSPECIFIED unless
        --tf_mlir_enable_mlir_bridge was given."""
        if _MLIR_BRIDGE not in self._explicit:
            return "MLIR_BRIDGE_ROLLOUT_UNSPECIFIED"
        return "MLIR_BRIDGE_ROLLOUT_" + ("ENABLED" if self._values[_MLIR_BRIDGE] else "DISABLED")

    def as_dict(self) -> dict[str, Any]:
        """Every flag in FLAG_TABLE -> its value, in table order."""
        return dict(self._values)

    def non_default(self) -> dict[str, Any]:
        """The flags of FLAG_TABLE whose value differs from TF's default, in table order."""
        return {s.name: self._values[s.name] for s in FLAG_TABLE if _differs(self._values[s.name], s.default)}

    def env_strings(self) -> dict[str, str]:
        """TF_XLA_FLAGS / XLA_FLAGS / TFXLA_CLUSTER_FLAGS values that reproduce these flags.

        A variable with nothing to set is left out. ``Flags.parse(**...)`` of the result gives an equal
        Flags. Pass the TF_XLA_FLAGS and XLA_FLAGS entries to a real TensorFlow process to run it with
        the same configuration.
        """
        words: dict[str, list[str]] = {e: [] for e in ENV_VARS}
        changed = self.non_default()
        for spec in FLAG_TABLE:
            if spec.name == "tf_xla_auto_jit":
                words[TF_XLA_FLAGS] += self._auto_jit_words()
            elif spec.name in changed or (spec.name == _MLIR_BRIDGE and spec.name in self._explicit):
                words[spec.env].append(_word(spec.name, spec.ctype, self._values[spec.name]))
        for name, value in self._passthrough.items():
            words[XLA_FLAGS].append(_word(name, XLA_UNMODELLED_FLAGS[name], value))
        return {e: " ".join(w) for e, w in words.items() if w}

    def _auto_jit_words(self) -> list[str]:
        # The raw text is whatever the setter saw last. An integer or 'fusible' sets both levels, so it is
        # enough on its own; single-gpu(N) needs the general level set before it.
        raw = self._values["tf_xla_auto_jit"]
        if raw == "0" and self._general == 0 and self._single_gpu == 0:
            return []
        if raw.startswith("single-gpu(") and self._general != 0:
            return [f"--tf_xla_auto_jit={int(self._general)}", _word("tf_xla_auto_jit", "string", raw)]
        return [_word("tf_xla_auto_jit", "string", raw)]

    # -- value semantics --------------------------------------------------------------------------------
    def _key(self) -> tuple:
        # Giving --tf_mlir_enable_mlir_bridge at all changes TF's behaviour (see mlir_bridge_rollout).
        return (tuple(self._values.items()), int(self._general), int(self._single_gpu),
                tuple(sorted(self._passthrough.items())), _MLIR_BRIDGE in self._explicit)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Flags) and _nan_safe(self._key()) == _nan_safe(other._key())

    def __hash__(self) -> int:
        return hash(_nan_safe(self._key()))

    def __reduce__(self) -> tuple:
        return (Flags._make, (dict(self._values), int(self._general), int(self._single_gpu),
                              dict(self._passthrough), self._explicit))

    def __repr__(self) -> str:
        items = [f"{k}={v!r}" for k, v in self.non_default().items()]
        items += [f"{k}={v!r}" for k, v in self._passthrough.items()]
        return f"Flags({', '.join(items)})"


_MLIR_BRIDGE = "tf_mlir_enable_mlir_bridge"


def _differs(value: Any, default: Any) -> bool:
    if isinstance(value, float) and value != value:
        return not (isinstance(default, float) and default != default)
    return value != default or type(value) is not type(default)


def _nan_safe(key: tuple) -> tuple:
    # NaN != NaN would make a Flags unequal to itself; compare float values by their repr instead.
    def fix(v: Any) -> Any:
        if isinstance(v, float):
            return ("float", repr(v))
        if isinstance(v, tuple):
            return tuple(fix(x) for x in v)
        return v
    return fix(key)


def _word(name: str, ctype: str, value: Any) -> str:
    """``--name=value`` that the tokenizer and the value parser read back as ``value``."""
    if ctype == "bool":
        return f"--{name}" if value else f"--{name}=false"
    if ctype == "float":
        text = repr(value) if value == value and value not in (float("inf"), float("-inf")) else \
            ("nan" if value != value else ("inf" if value > 0 else "-inf"))
    else:
        text = str(value)
    if text == "" or any(c in _WS for c in text) or text[0] in "'\"":
        text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"--{name}={text}"


def _coerce(name: str, ctype: str, value: Any) -> Any:
    """Check a Python value given to replace(); strings are parsed with TF's syntax."""
    typ = _CTYPES[ctype]
    if isinstance(value, str) and typ is not str:
        parsed = _parse_value(ctype, value)
        if parsed is None:
            raise _error(f"Couldn't interpret value {value} for flag {name}.\n  {name} is {_a(ctype)} flag: "
                         + _EXPECTED[ctype].format(name=name, example=_example(name)), env=_ALL_NAMES.get(name))
        return parsed
    ok = (isinstance(value, bool) if typ is bool else
          isinstance(value, int) and not isinstance(value, bool) if typ is int else
          isinstance(value, (int, float)) and not isinstance(value, bool) if typ is float else
          isinstance(value, str))
    if not ok:
        raise _error(f"Flag {name} is {_a(ctype)} flag; got {type(value).__name__} {value!r}",
                     env=_ALL_NAMES.get(name))
    if typ is int:
        lo, hi = _INT_RANGE[ctype]
        if not lo <= value <= hi:
            raise _error(f"Value {value} for flag {name} is out of range for {ctype} [{lo}, {hi}]",
                         env=_ALL_NAMES.get(name))
    if typ is float:
        return _simple_atof(repr(float(value)))
    return value


# ----------------------------------------------------------------------------------------------------------
# Helpers for the passes and the CLI
# ----------------------------------------------------------------------------------------------------------

def global_jit_level_for_graph(flags: Flags, single_gpu: bool,
                               config_level: int | GlobalJitLevel = GlobalJitLevel.DEFAULT) -> GlobalJitLevel:
    """xla_cluster_util.cc ``GetGlobalJitLevelForGraph``.

    ``config_level`` is ConfigProto's ``graph_options.optimizer_options.global_jit_level``. Its DEFAULT
    means OFF. A tf_xla_auto_jit level that is not DEFAULT overrides it. The single-GPU level applies when
    ``single_gpu`` is true (``IsSingleGpuGraph``: the op nodes use exactly one GPU).
    """
    config = GlobalJitLevel(int(config_level))
    base = GlobalJitLevel.OFF if config == GlobalJitLevel.DEFAULT else config
    single = flags.auto_jit_single_gpu_level if flags.auto_jit_single_gpu_level != GlobalJitLevel.DEFAULT else base
    general = flags.auto_jit_level if flags.auto_jit_level != GlobalJitLevel.DEFAULT else base
    return single if single_gpu else general


_ENV_TITLES = {
    TF_XLA_FLAGS: "TF_XLA_FLAGS: TensorFlow auto-clustering and XLA JIT (tensorflow/compiler/jit/flags.cc)",
    XLA_FLAGS: "XLA_FLAGS: XLA compiler options that tfxla_cluster uses (xla/debug_options_flags.cc)",
    TFXLA_CLUSTER_FLAGS: "TFXLA_CLUSTER_FLAGS: tfxla_cluster's own options (TensorFlow does not know these)",
}


def describe(flags: Flags, *, only_non_default: bool = False, width: int = 100) -> str:
    """The effective configuration as text, grouped by variable (what ``tfxla-cluster flags`` prints).

    Each flag gets a ``name = value`` line, marked ``*`` and followed by TF's default when it differs from
    that default, and its help text indented below it.
    """
    out = ["Effective flags ('*' = differs from TF's default). Set each one in the variable named above it."]
    for env in ENV_VARS:
        rows = [(s, flags._values[s.name]) for s in _SPECS_BY_ENV[env]]
        if only_non_default:
            rows = [(s, v) for s, v in rows if _differs(v, s.default)]
        passthrough = list(flags.xla_passthrough.items()) if env == XLA_FLAGS else []
        if only_non_default and not rows and not passthrough:
            continue
        out += ["", _ENV_TITLES[env]]
        for spec, value in rows:
            changed = _differs(value, spec.default)
            line = f"  {'*' if changed else ' '} {spec.name} = {spec.display(value)}"
            if changed:
                line += f"   (default {spec.display()})"
            if spec.name == "tf_xla_auto_jit":
                line += (f"   -> general level {flags.auto_jit_level.name}, "
                         f"single-GPU level {flags.auto_jit_single_gpu_level.name}")
            out.append(line)
            out += textwrap.wrap(spec.help, width, initial_indent=" " * 8, subsequent_indent=" " * 8)
        if passthrough:
            out.append("  Also set (XLA accepts these, but tfxla_cluster does not use them):")
            out += [f"  * {n} = {_display(XLA_UNMODELLED_FLAGS[n], v)}" for n, v in passthrough]
    return "\n".join(out)


@functools.cache
def get_flags() -> Flags:
    """The process-wide flags, parsed from os.environ once (TF also parses them once per process).
    Tests that change the environment call ``get_flags.cache_clear()``."""
    return Flags.from_env()



# ------------------------------------------------------------------------------ environment switches
@dataclasses.dataclass(frozen=True)
class EnvSwitch:
    """An environment variable read on its own (not a ``--flag`` in TF_XLA_FLAGS/XLA_FLAGS/
    TFXLA_CLUSTER_FLAGS): its name, its value when unset, and what it does."""

    name: str
    default: str | None
    help: str


#: Every other environment variable the package reads, once: read with :func:`env_switch`.
ENV_SWITCHES: Mapping[str, EnvSwitch] = types.MappingProxyType({s.name: s for s in (
    # TF's own, read as TF reads them
    EnvSwitch("TF_DUMP_GRAPH_PREFIX", "", "TF: directory of the GraphDef debug dumps (dump_graph.cc)."),
    EnvSwitch("TF_CPP_VMODULE", "", "TF: per-source-file VLOG levels, name=level,... (switches TF's dumps on)."),
    EnvSwitch("TF_CPP_MAX_VLOG_LEVEL", "", "TF: the VLOG level of every source file."),
    EnvSwitch("TF_CPP_MIN_VLOG_LEVEL", "", "TF: legacy name of TF_CPP_MAX_VLOG_LEVEL."),
    EnvSwitch("TF_ENABLE_ONEDNN_OPTS", None, "TF: oneDNN kernels on (1) or off (0); unset: TF's default for the CPU."),
    # this project's
    EnvSwitch("TFXLA_NATIVE_LAUNCH", "1",
              "0/false/no/off: functions traced from now on launch their clusters through Python instead of "
              "the native TfxlaLaunch op."),
    EnvSwitch("TFXLA_NATIVE_CACHE", "", "Directory of the built native launch library (default: "
                                        "$XDG_CACHE_HOME/tfxla_cluster, else ~/.cache/tfxla_cluster)."),
    EnvSwitch("TFXLA_COMPILE_CACHE", "", "Directory of the persistent compile cache when "
                                         "--tf_xla_persistent_cache_directory is unset (default: "
                                         "$XDG_CACHE_HOME/tfxla_cluster/compile, else ~/.cache/tfxla_cluster/compile); "
                                         "0/off/false/no: none."),
    EnvSwitch("XDG_CACHE_HOME", "", "The user's cache directory (the native launch library, the compile cache)."),
    EnvSwitch("CC", "gcc", "The C compiler that builds the native launch op."),
    EnvSwitch("TFXLA_CODEGEN_BOUNDS_CHECKS", "", "1: generated code checks every buffer access (debugging)."),
    EnvSwitch("TFXLA_CODEGEN_NO_OUTPUT_FUSION", "", "1: a convolution's bias/activation fusion runs as its own pass (A/B timing)."),
    EnvSwitch("TFXLA_CODEGEN_NO_WINOGRAD", "", "1: 3x3 stride-1 convolutions run as im2col GEMMs, not Winograd F(2x2, 3x3) (A/B timing)."),
    EnvSwitch("TFXLA_COMPILE_THREADS", "", "Threads compiling the parts of a split LLVM module (default: one per "
              "idle core, by the load average). The code does not depend on it."),
    EnvSwitch("TFXLA_COMPILE_SERIAL", "", "1: an LLVM engine compiles one module at a time (default: modules "
              "compiled from several threads run their LLVM work concurrently). The code does not depend on it."),
    EnvSwitch("TFXLA_COMPILE_AHEAD", "1", "0/false/no/off: a function's clusters compile at their launch, one after "
              "another (default: their compiles start on idle cores when the function first runs, "
              "runtime/ahead.py). The code does not depend on it."),
    EnvSwitch("TFXLA_SHARE_KERNELS", "1", "0/false/no/off: every module compiles all its kernels (default: a kernel "
              "a live module of the process compiled already is called there, codegen/kernel_share.py). Results "
              "do not depend on it."),
    EnvSwitch("TFXLA_IMPORT_ALONGSIDE", "1", "0/false/no/off: a process's first compile imports the compiler's modules "
              "where it first uses them (default: while TF's grappler runs, runtime/pipeline.py). Results do "
              "not depend on it."),
    EnvSwitch("TFXLA_CODEGEN_POOL", "native", "python: parallel loops use Python threads instead of the native pool."),
    EnvSwitch("TFXLA_CLUSTER_PROGRESS", "", "1/0: force progress bars on/off (default: when stderr is a terminal)."),
    EnvSwitch("TFXLA_CLUSTER_DEBUG", "", "Set: the CLI shows tracebacks of internal errors; TF's logs are not quieted."),
)})


def env_switch(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of environment switch ``name`` in ``environ`` (default ``os.environ``, read now), or its
    default when unset. ``name`` must be in :data:`ENV_SWITCHES` (KeyError otherwise)."""
    switch = ENV_SWITCHES[name]
    return (os.environ if environ is None else environ).get(name, switch.default)
