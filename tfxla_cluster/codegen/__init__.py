"""Native code generation for optimised HLO modules with llvmlite (XLA:CPU's legacy backend, in Python).

    engine.py      JitEngine: host target machine, LLVM new pass manager, object code, loaded libraries
    split.py       one module's IR → parts compiled on several threads;  kernel_share.py  kernels compiled
                   once per process and called from later modules
    options.py     CodegenOptions (part of every cache key);  context.py  the module/kernel emission contexts
    irtypes.py     element types ↔ LLVM types;  scalar_ops.py  value-level HLO semantics
    loops.py       loops, indices, buffer access (bounds-checked in debug mode)
    elemental.py   index → value generators per opcode; fusions become one loop nest
    gemm.py        GEMM (OpenBLAS via the symbol table) for dot and im2col convolution
    conv.py        convolutions: depthwise (vectorised along channels), blocked im2col GEMMs
    kernel_builder.py  KernelBuilder (one kernel function) and THUNKS, the one opcode -> kernel table
    kernel_info.py KernelInfo, what the runtime and the compile log know about a kernel (held by layouts)
    reductions.py  column reductions and split (parallel partial) reductions of the loop kernel
    kernels/       thunk kernels by family, each registering in THUNKS: loop.py (elemental loop nests,
                   dot/convolution, copy), sort.py (sort, TopK), scatter.py (scatter, select-and-scatter),
                   rng.py (rng-bit-generator: Philox, ThreeFry, bit-exact with the evaluator)
    buffers.py     the buffer plan (slots, arena packing);  program.py  the entry function (control flow,
                   row groups, the thunk of every instruction)
    native_runtime.py symbols the code calls: BLAS, parallel_for, bounds-failure reports
    native_pool.py the fork-join thread pool behind parallel_for, itself built as LLVM IR
    executable.py  compile_module(module) -> Executable;  Executable(*arrays) -> tuple of arrays
"""

from tfxla_cluster._lazy import lazy_attributes

# Names resolve on first use (PEP 562): importing one submodule (the persistent cache's hit path loads
# the engine and the executable's layout) does not import the whole package.
_LAZY = {
    "CodegenOptions": "tfxla_cluster.codegen.options",
    "CodeLibrary": "tfxla_cluster.codegen.engine",
    "JitEngine": "tfxla_cluster.codegen.engine",
    "get_engine": "tfxla_cluster.codegen.engine",
    "Executable": "tfxla_cluster.codegen.executable",
    "compile_module": "tfxla_cluster.codegen.executable",
}

__all__ = [
    "CodeLibrary", "CodegenOptions", "Executable", "JitEngine", "compile_module", "get_engine"
]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
