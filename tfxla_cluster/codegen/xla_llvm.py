"""XLA's own kernel IR compiled by this process's LLVM the way XLA:CPU's backend compiles it, to learn which
products LLVM leaves unfused (rounded) in XLA's loops.

Stage: codegen helper of ``conv_hoist.py`` (XLA's elemental convolution loop) and ``dot_naive.py`` (its naive
dot loop). Guarantee: :func:`compile_like_xla` returns the kernel as XLA's backend would build it from
``ir_text`` on this host: LLVM's O3 pipeline (llvmlite's LLVM 22 reproduces TF 2.21's ``ir-with-opt``
dumps, its hoists and vectorisation), then code generation with fp-contract=fast, emulated. It also holds
what the generators and the exact kernels share: :class:`KernelIR` (XLA's kernel frame, loops and metadata),
:data:`LLVM_TYPES`, :func:`flag_table` (the rounded products' table in our module).

Why emulated: XLA sets ``AllowFPOpFusion = Fast`` in its target options, so the DAG combiner fuses every
``fmul`` into the ``fadd`` it feeds within a block, whatever the instructions' flags, even after the x86
backend merged two 256-bit chains into one 512-bit chain (``combineConcatVectorOps``, for an interleaved
store). llvmlite cannot set that option. Marking the instructions ``contract`` gives the same code but
where such a merge happened: the merged nodes lose the flags and stay ``vmul``/``vadd`` (an f64 [2,2,5,1] *
[2,2,1,3] convolution's features 0 and 1 on AVX-512; TF's are FMAs). Making every pair an ``llvm.fma``
(:func:`contract_fma`) is right there, but wrong where the backend merged the adds and not the multiplies
(a [18,2]·[2,4] f32 dot: TF's rows 0-15 are ``vmulps`` then ``vaddps``, rounded). So the kernel is first
built with ``contract`` flags; when its assembly holds a multiply feeding an add of the same width in the
same block (:func:`lost_pairs`: a merge that XLA's backend would have fused), it is rebuilt with
:func:`contract_fma`. Checked against TF's XLA: 2,496 tiny dots (M 2-40, K 2-3, N 1-16, f32 and f64) and
the convolution sweeps of session 49, all bit for bit.
"""
from __future__ import annotations

import ctypes
import re

import numpy as np

from tfxla_cluster.hlo.shape import PrimitiveType as T

_FMUL = re.compile(r"^  (%[-\w.]+) = fmul (?:[a-z]+ )*(double|float|<\d+ x (?:double|float)>) (%[-\w.]+), (%[-\w.]+)$")
_FADD = re.compile(r"^  (%[-\w.]+) = fadd ((?:[a-z]+ )*)(double|float|<\d+ x (?:double|float)>) ([^ ,]+), ([^ ,]+)$")
_LABEL = re.compile(r"^([-\w.]+):")
_NAME = re.compile(r"%[-\w.]+")
_ASM = re.compile(r"^\s+(v[a-z0-9]+)\s+(.*)$")
_VREG = re.compile(r"%([xyz])mm(\d+)")


def contract_fma(ir_text: str) -> str:
    """``ir_text`` with each ``fadd`` of an ``fmul`` of the same block used nowhere else made one ``llvm.fma``
    call (the DAG combiner's contraction under fp-contract=fast, done before the backend can merge)."""
    lines = ir_text.split("\n")
    uses: dict[str, int] = {}
    for ln in lines:
        names = _NAME.findall(ln)
        if " = " in ln and names and ln.lstrip().startswith(names[0]):
            names = names[1:]   # the defined value is not a use
        for nm in names:
            uses[nm] = uses.get(nm, 0) + 1
    fmuls: dict[str, tuple[int, str, str, str]] = {}   # name -> (line, block, x, y)
    block, fused, intrinsics = "entry", set(), set()
    out = list(lines)
    for i, ln in enumerate(lines):
        m = _LABEL.match(ln)
        if m:
            block = m.group(1)
            continue
        m = _FMUL.match(ln)
        if m:
            fmuls[m.group(1)] = (i, block, m.group(3), m.group(4))
            continue
        m = _FADD.match(ln)
        if not m:
            continue
        name, flags, ty, a, c = m.groups()
        for mul, addend in ((c, a), (a, c)):
            hit = fmuls.get(mul)
            if hit and hit[1] == block and uses.get(mul) == 1 and hit[0] not in fused:
                scalar = "f64" if "double" in ty else "f32"
                fn = "llvm.fma." + (scalar if ty in ("double", "float") else f"v{ty[1:].split(' x ')[0]}{scalar}")
                intrinsics.add((fn, ty))
                out[i] = f"  {name} = call {flags}{ty} @{fn}({ty} {hit[2]}, {ty} {hit[3]}, {ty} {addend})"
                out[hit[0]] = ""
                fused.add(hit[0])
                break
    out += [f"declare {ty} @{fn}({ty}, {ty}, {ty})" for fn, ty in sorted(intrinsics)]
    return "\n".join(out) + "\n"


def lost_pairs(asm: str) -> int:
    """How many vector or scalar multiplies in ``asm`` (AT&T syntax) feed only an add of the same register
    width in the same block: pairs fp-contract=fast would have made one FMA."""
    n = 0
    defs: dict[str, tuple[str, str, list[str]]] = {}   # register number -> (opcode, width, its readers)
    for ln in asm.split("\n"):
        s = ln.strip()
        if s.endswith(":") and not s.startswith("#"):
            defs = {}
            continue
        m = _ASM.match(ln)
        if not m:
            continue
        op, args = m.group(1), m.group(2).split("#")[0]
        regs = _VREG.findall(args)
        if not regs:
            continue
        srcs, dst = regs[:-1], regs[-1]
        if "(" in args.split(",")[-1]:
            srcs, dst = regs, None   # a store: every register is read
        for _, r in srcs:
            if r in defs:
                defs[r][2].append(op)
        if op[:4] == "vadd" and op[4:] in ("ps", "pd", "ss", "sd"):
            for w, r in srcs:
                d = defs.get(r)
                if d and d[0][:4] == "vmul" and d[1] == w and d[2] == [op]:
                    n += 1
        if dst:
            defs[dst[1]] = (op, dst[0], [])
    return n


# Element types of the modelled kernels: LLVM type, bytes, numpy type.
LLVM_TYPES = {T.F32: ("float", 4, np.float32), T.F64: ("double", 8, np.float64)}


class KernelIR:
    """XLA:CPU's unoptimised kernel IR as TF 2.21's dumps show it (``*.ir-no-opt.ll``): ``ptr @name(ptr
    %call_frame)`` reading its buffers from the frame's argument array (``!dereferenceable``, ``!align 64``,
    ``!invariant.load``; the result in its own alias scope), loops over ``alloca``'d induction variables.
    The generators (``conv_hoist``, ``dot_naive``) :meth:`emit` the body; :meth:`text` is the module."""

    def __init__(self, name: str, allocas: list[str], arg_bytes: list[int]) -> None:
        self.arg_bytes = arg_bytes
        self.loop_metadata: list[int] = []
        self.lines = [f"define ptr @{name}(ptr %0) #0 {{", "entry:", *(f"  {a}" for a in allocas),
                      "  %args.gep = getelementptr inbounds nuw { ptr, ptr, i64, ptr }, ptr %0, i32 0, i32 3",
                      "  %args = load ptr, ptr %args.gep, align 8"]
        for a in range(len(arg_bytes)):
            self.lines += [f"  %arg{a}.gep = getelementptr {{ ptr, i64 }}, ptr %args, i32 {a}, i32 0",
                           f"  %arg{a} = load ptr, ptr %arg{a}.gep, align 8, !invariant.load !0, "
                           f"!dereferenceable !{a + 1}, !align !{len(arg_bytes) + 1}"]

    def emit(self, line: str) -> None:
        self.lines.append(line)

    def loop(self, name: str, var: str, size: int, body, unroll_disabled: bool = False) -> None:
        """``for (%var = 0; %var < size; ++%var) body()`` over ``%var.a``, as XLA's ForLoop emits it;
        ``unroll_disabled``: XLA's ``llvm.loop.unroll.disable`` on the loop."""
        meta = ""
        if unroll_disabled:
            self.loop_metadata.append(100 + len(self.loop_metadata))
            meta = f", !llvm.loop !{self.loop_metadata[-1]}"
        self.lines += [f"  store i64 0, ptr %{var}.a, align 4", f"  br label %{name}.h", f"{name}.h:",
                       f"  %{var} = load i64, ptr %{var}.a, align 4", f"  %{name}.c = icmp uge i64 %{var}, {size}",
                       f"  br i1 %{name}.c, label %{name}.x, label %{name}.b", f"{name}.b:"]
        body()
        self.lines += [f"  %{var}.n = add nuw nsw i64 %{var}, 1", f"  store i64 %{var}.n, ptr %{var}.a, align 4",
                       f"  br label %{name}.h{meta}", f"{name}.x:"]

    def text(self) -> str:
        """The module: the function (closed with ``ret ptr null``), its attributes and metadata."""
        n = len(self.arg_bytes)
        head = ['target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"',
                'target triple = "x86_64-unknown-linux-gnu"']
        tail = ["  ret ptr null", "}", 'attributes #0 = { uwtable "frame-pointer"="all" "prefer-vector-width"="256" }',
                "!0 = !{}", *(f"!{a + 1} = !{{i64 {b}}}" for a, b in enumerate(self.arg_bytes)),
                f"!{n + 1} = !{{i64 64}}", f"!{n + 2} = !{{!{n + 3}}}", f'!{n + 3} = !{{!"result", !{n + 4}}}',
                f'!{n + 4} = !{{!"XLA host kernel AA domain"}}', '!99 = !{!"llvm.loop.unroll.disable"}',
                *(f"!{m} = distinct !{{!{m}, !99}}" for m in self.loop_metadata)]
        return "\n".join(head + self.lines + tail) + "\n"

    @property
    def result_scope(self) -> str:
        """The metadata id of the result's alias scope (``!noalias`` on loads, ``!alias.scope`` on stores)."""
        return f"!{len(self.arg_bytes) + 2}"


class Kernel:
    """A compiled kernel of XLA's calling convention (``ptr fn(ptr call_frame)``), with its engine kept alive."""

    def __init__(self, engine, name: str, fused: bool) -> None:
        self.engine = engine
        self.fused = fused   # rebuilt with contract_fma (lost_pairs found merges)
        self.fn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(engine.get_function_address(name))

    def __call__(self, *buffers: np.ndarray) -> None:
        """Runs the kernel on ``buffers`` (its arguments in order, each 64-byte aligned: :func:`aligned`)."""
        args = (ctypes.c_void_p * (2 * len(buffers)))(*[v for a in buffers for v in (a.ctypes.data, 0)])
        frame = (ctypes.c_void_p * 4)(0, 0, 0, ctypes.addressof(args))
        self.fn(ctypes.addressof(frame))


def compile_like_xla(ir_text: str, name: str) -> Kernel:
    """Function ``name`` of ``ir_text`` optimised at O3 and code-generated for this host as XLA's backend does
    (see the module docstring)."""
    import llvmlite.binding as llvm

    from tfxla_cluster.codegen.target import initialize_llvm
    initialize_llvm()
    target = llvm.Target.from_default_triple()
    tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                      features=llvm.get_host_cpu_features().flatten(), opt=3, jit=True)
    mod = llvm.parse_assembly(ir_text)
    mod.verify()
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    pb.getModulePassManager().run(mod, pb)
    optimised = str(mod)
    flagged = llvm.parse_assembly(re.sub(r"= (fmul|fadd) ", r"= \1 contract ", optimised))
    fused = lost_pairs(tm.emit_assembly(flagged)) > 0
    final = llvm.parse_assembly(contract_fma(optimised)) if fused else flagged
    engine = llvm.create_mcjit_compiler(final, tm)
    engine.finalize_object()
    return Kernel(engine, name, fused)


def flag_table(mctx, flags: np.ndarray, name: str):
    """``flags`` (bool, any shape) as an internal constant i8 array of the module, row-major: the rounded
    products' table the exact kernels select by."""
    from llvmlite import ir
    flat = flags.astype(np.uint8).ravel()
    ty = ir.ArrayType(ir.IntType(8), flat.size)
    g = ir.GlobalVariable(mctx.module, ty, mctx.unique_name(name))
    g.linkage = "internal"
    g.global_constant = True
    g.initializer = ir.Constant(ty, bytearray(flat.tobytes()))
    return g


def aligned(n: int, np_t) -> np.ndarray:
    """A zeroed array of ``n`` elements at a 64-byte boundary (XLA's kernels assume ``!align 64``)."""
    raw = np.zeros(n * np.dtype(np_t).itemsize + 64, np.uint8)
    skip = -raw.ctypes.data % 64
    return raw[skip:skip + n * np.dtype(np_t).itemsize].view(np_t)
