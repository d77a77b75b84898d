"""Stage: optimised HloModule → a relocatable ELF object with a C entry point (tfcompile's back half).

    obj = compile_object(module, "mlp")      # AotObject: object bytes, arg/result shapes, arena size
    obj.object_code                          # link with: cc main.c mlp.o -lm -lpthread

The object defines three symbols, everything else in it is internal:

    int NAME_run(const void* const* args, void* const* results);   /* 0 on success, 1: out of memory */
    const int64_t NAME_arg_bytes[NUM_ARGS];
    const int64_t NAME_result_bytes[NUM_RESULTS];

``NAME_run`` builds the buffer table the JIT's Python side builds in ``executable.py``: parameter slots
point at ``args[k]``, output slots at ``results[k]``, constants at read-only globals in the object, temps
into one arena from ``aligned_alloc`` (freed before returning, so calls from several threads are safe);
then it calls the same ``tfxla_entry`` the JIT runs. The code is generated with BLAS off (GEMMs as
register-tiled IR, ``gemm.py``) and bounds checks off, so its only external references are libc/libm (``memcpy``, ``expf``,
``aligned_alloc`` ...) — plus, for f16 on CPUs without F16C, the compiler runtime's ``__extendhfsf2`` /
``__truncsfhf2``, which every C compiler driver links (libgcc, compiler-rt). With ``threads > 1`` kernels split as in the JIT and the native fork-join pool
(``native_pool.py``, pthreads + futex) is linked into the object; with ``threads == 1`` (the default,
like a tfcompile function without an Eigen thread pool) nothing is threaded and nothing of libpthread is
referenced.

Buffers are dense row-major: entry parameters and results must have the default layout (XLA's entry
computation layout); ``args`` and ``results`` must not overlap.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.options import CodegenOptions
from tfxla_cluster.codegen.engine import JitEngine
from tfxla_cluster.codegen.program import ENTRY_NAME, ProgramEmitter
from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo.shape import Shape

_ALIGN = 64
_POOL_ENTRY = "tfxla_native_parallel_for"


@dataclass
class AotObject:
    """What ``compile_object`` produced: the object file and the ABI it implements."""

    name: str
    object_code: bytes
    arg_shapes: list[Shape]
    result_shapes: list[Shape]
    arena_bytes: int
    threads: int
    cpu: str
    features: str
    triple: str

    @property
    def arg_bytes(self) -> list[int]:
        return [s.byte_size() for s in self.arg_shapes]

    @property
    def result_bytes(self) -> list[int]:
        return [s.byte_size() for s in self.result_shapes]


def check_c_identifier(name: str) -> None:
    """``name`` prefixes C symbols and macros: it must be a C identifier."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise InvalidArgumentError(f"--name '{name}' is not a C identifier ([A-Za-z_][A-Za-z0-9_]*)")


_PROBE = """
import sys
import llvmlite.binding as llvm
llvm.initialize_native_target(); llvm.initialize_native_asmprinter()
tm = llvm.Target.from_triple(sys.argv[1]).create_target_machine(cpu=sys.argv[2], features=sys.argv[3])
tm.emit_object(llvm.parse_assembly(""))
"""


def check_target(triple: str, cpu: str, features: str) -> None:
    """LLVM only warns about an unknown CPU or feature on stderr (and may then abort the process), so the
    names are tried in a child process first."""
    import subprocess
    import sys

    bad = [f for f in features.split(",") if f and not re.fullmatch(r"[+-][A-Za-z0-9._-]+", f)] if features else []
    if bad:  # LLVM asserts on a feature without its sign (the child aborts with a path-laden message)
        raise InvalidArgumentError(f"--target-features '{features}': '{bad[0]}' is not +name or -name "
                                   "(a comma-separated list, e.g. +avx2,+fma)")
    proc = subprocess.run([sys.executable, "-c", _PROBE, triple, cpu, features], capture_output=True, text=True)
    complaints = sorted({line.strip() for line in proc.stderr.splitlines()
                         if "is not a recognized" in line or "LLVM ERROR" in line})
    if proc.returncode != 0 or complaints:
        last = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        why = complaints[0] if complaints else \
            ("LLVM aborted (an assertion failed)" if "Assertion" in last or proc.returncode < 0 else last)
        raise InvalidArgumentError(f"--target-cpu '{cpu}' / --target-features '{features}' rejected by LLVM: {why}")


def compile_object(module, name: str, *, cpu: str | None = None, features: str | None = None,
                   threads: int = 1, opt_level: int = 3, fast_math: bool = False) -> AotObject:
    """Compile the entry computation of an *optimised* ``module`` into an object exporting ``name``'s
    symbols (see the module docstring). ``cpu``/``features`` default to this machine's; a named ``cpu``
    without ``features`` brings only its own features (like tfcompile's ``--target_cpu``)."""
    check_c_identifier(name)
    if threads < 1:
        raise InvalidArgumentError(f"threads must be at least 1, got {threads}")
    entry = module.entry
    for p in entry.parameters:
        _check_dense(p.shape, f"parameter {p.parameter_number} (%{p.name})")
    results = entry.root.shape.leaves()
    for k, s in enumerate(results):
        _check_dense(s, f"result {k}")
    options = CodegenOptions(opt_level=opt_level, fast_math=fast_math, threads=threads, use_blas=False,
                             bounds_checks=False)
    prog = ProgramEmitter(module, options)
    program_ir = prog.emit()
    if cpu is not None and features is None:
        features = ""
    if cpu is not None or features is not None:
        host = JitEngine(opt_level)
        check_target(host.triple, cpu if cpu is not None else host.cpu,
                     features if features is not None else host.features)
    engine = JitEngine(opt_level, cpu=cpu, features=features)
    wrapper_ir = _wrapper_ir(prog, name, engine.triple)
    llmod = engine.parse(program_ir)
    llmod.link_in(engine.parse(wrapper_ir))
    if _references(llmod, "tfxla_parallel_for"):  # only when some kernel is split (threads > 1)
        from tfxla_cluster.codegen.native_pool import build_module

        llmod.link_in(engine.parse(build_module(engine.triple)))
        llmod.link_in(engine.parse(_parallel_for_shim(engine.triple)))
    exports = {f"{name}_run", f"{name}_arg_bytes", f"{name}_result_bytes"}
    _internalize(llmod, exports)
    llmod.verify()
    engine.optimize(llmod)
    _check_externals(llmod)
    target = llvm.Target.from_triple(engine.triple)
    # PIC + small code model: links into PIE executables and shared libraries alike.
    tm = target.create_target_machine(cpu=engine.cpu, features=engine.features, opt=opt_level, reloc="pic",
                                      codemodel="default")
    obj = tm.emit_object(llmod)
    param_shapes = [p.shape for p in sorted(entry.parameters, key=lambda p: p.parameter_number)]
    return AotObject(name, obj, param_shapes, list(results), prog.plan.arena_bytes, threads, engine.cpu,
                     engine.features, engine.triple)


def _check_dense(shape: Shape, what: str) -> None:
    if not shape.is_array:
        raise UnimplementedError(f"{what} has non-array shape {shape}; AOT needs arrays")
    t.storage_type(shape.element_type)  # raises for element types without native code
    if shape.rank > 1 and not shape.is_default_layout:
        raise UnimplementedError(f"{what} has layout {shape}; AOT buffers are row-major")


def _wrapper_ir(prog: ProgramEmitter, name: str, triple: str) -> str:
    """``NAME_run``, the byte-size tables and the constants, as an LLVM module of its own."""
    m = ir.Module(f"{name}_wrapper")
    m.triple = triple
    plan = prog.plan

    def table_global(sym: str, values: list[int]) -> None:
        ty = ir.ArrayType(t.I64, len(values))
        g = ir.GlobalVariable(m, ty, sym)
        g.initializer = ir.Constant(ty, [t.i64(v) for v in values])
        g.global_constant = True
        g.align = 8

    table_global(f"{name}_arg_bytes", [s.nbytes for s in sorted(prog.param_slots, key=lambda s: s.number)])
    table_global(f"{name}_result_bytes", [s.nbytes for s in prog.output_slots])

    consts = {}
    for s in plan.of_kind("const"):
        raw = np.ascontiguousarray(s.value).tobytes()
        ty = ir.ArrayType(t.I8, max(len(raw), 1))
        g = ir.GlobalVariable(m, ty, f"const.{s.index}")
        g.initializer = ir.Constant(ty, bytearray(raw or b"\0"))
        g.global_constant = True
        g.linkage = "internal"
        g.align = _ALIGN
        consts[s.index] = g

    entry = ir.Function(m, ir.FunctionType(t.VOID, [t.PTR]), ENTRY_NAME)
    run = ir.Function(m, ir.FunctionType(t.I32, [t.PTR, t.PTR]), f"{name}_run")
    args, results = run.args
    args.name, results.name = "args", "results"
    b = ir.IRBuilder(run.append_basic_block("entry"))
    n_slots = max(len(plan.slots), 1)
    table = b.alloca(t.PTR, size=t.i64(n_slots), name="table")

    def slot_ptr(index: int):
        return b.gep(table, [t.i64(index)], inbounds=True, source_etype=t.PTR)

    arena = None
    if plan.arena_bytes:
        aligned_alloc = ir.Function(m, ir.FunctionType(t.PTR, [t.I64, t.I64]), "aligned_alloc")
        size = (plan.arena_bytes + _ALIGN - 1) // _ALIGN * _ALIGN
        arena = b.call(aligned_alloc, [t.i64(_ALIGN), t.i64(size)], name="arena")
        fail = run.append_basic_block("out_of_memory")
        ok = run.append_basic_block("run")
        b.cbranch(b.icmp_unsigned("==", arena, ir.Constant(t.PTR, None)), fail, ok)
        b.position_at_end(fail)
        b.ret(ir.Constant(t.I32, 1))
        b.position_at_end(ok)
    for s in plan.slots:
        if s.kind == "param":
            src = b.load(b.gep(args, [t.i64(s.number)], inbounds=True, source_etype=t.PTR), typ=t.PTR)
        elif s.kind == "output":
            src = b.load(b.gep(results, [t.i64(s.number)], inbounds=True, source_etype=t.PTR), typ=t.PTR)
        elif s.kind == "const":
            src = consts[s.index]
        else:
            src = b.gep(arena, [t.i64(s.offset)], inbounds=True, source_etype=t.I8)
        b.store(src, slot_ptr(s.index))
    b.call(entry, [table])
    if arena is not None:
        free = ir.Function(m, ir.FunctionType(t.VOID, [t.PTR]), "free")
        b.call(free, [arena])
    b.ret(ir.Constant(t.I32, 0))
    return str(m)


def _parallel_for_shim(triple: str) -> str:
    """``tfxla_parallel_for`` (what kernels call) forwarding to the linked-in native pool."""
    m = ir.Module("tfxla_parallel_for_shim")
    m.triple = triple
    sig = ir.FunctionType(t.VOID, [t.PTR, t.PTR, t.I64, t.I64])
    pool = ir.Function(m, sig, _POOL_ENTRY)
    shim = ir.Function(m, sig, "tfxla_parallel_for")
    b = ir.IRBuilder(shim.append_basic_block("entry"))
    b.call(pool, list(shim.args))
    b.ret_void()
    return str(m)


def _references(llmod, symbol: str) -> bool:
    return any(f.name == symbol for f in llmod.functions)


def _internalize(llmod, exports: set[str]) -> None:
    """Only ``exports`` stay visible: two AOT objects (or one and its program) never clash on a name."""
    for f in llmod.functions:
        if not f.is_declaration and f.name not in exports:
            f.linkage = "internal"
    for g in llmod.global_variables:
        if not g.is_declaration and g.name not in exports:
            g.linkage = "internal"


def _system_library(name: str):
    import ctypes
    import ctypes.util

    path = ctypes.util.find_library(name)
    try:
        return ctypes.CDLL(path) if path else None
    except OSError:
        return None


def _check_externals(llmod) -> None:
    """Every external function the optimised module declares must be in libc, libm or libpthread (LLVM
    intrinsics aside: they become inline code or libm calls)."""
    libs = [lib for lib in map(_system_library, ("c", "m", "pthread")) if lib is not None]
    if not libs:
        return  # no way to tell here; the link step will

    def found(sym: str) -> bool:
        return any(hasattr(lib, sym) for lib in libs)

    bad = sorted(f.name for f in llmod.functions
                 if f.is_declaration and not f.name.startswith("llvm.") and not found(f.name))
    if bad:
        raise UnimplementedError(f"the generated code calls {', '.join(bad)}, which is not in libc, libm or "
                                 "libpthread; AOT objects link against nothing else")
