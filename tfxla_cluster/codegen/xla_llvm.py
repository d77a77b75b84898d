"""XLA's own kernel IR compiled by this process's LLVM the way XLA:CPU's backend compiles it, to learn which
products LLVM leaves unfused (rounded) in XLA's loops.

Stage: codegen helper of ``conv_hoist.py`` (XLA's elemental convolution loop) and ``dot_naive.py`` (its naive
dot loop). Guarantee: :func:`compile_like_xla` returns the kernel as XLA's backend would build it from
``ir_text`` on this host: LLVM's O3 pipeline (llvmlite's LLVM 22 reproduces TF 2.21's ``ir-with-opt``
dumps, its hoists and vectorisation), then code generation with fp-contract=fast, emulated.

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


def aligned(n: int, np_t) -> np.ndarray:
    """A zeroed array of ``n`` elements at a 64-byte boundary (XLA's kernels assume ``!align 64``)."""
    raw = np.zeros(n * np.dtype(np_t).itemsize + 64, np.uint8)
    skip = -raw.ctypes.data % 64
    return raw[skip:skip + n * np.dtype(np_t).itemsize].view(np_t)
