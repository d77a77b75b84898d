"""Which products of XLA's naive dot loop LLVM leaves unfused, found by compiling XLA's loop.

Stage: codegen helper of ``elemental.py``'s dot and ``conv_exact.py``'s 1×1 convolutions as dots. Guarantee:
:func:`rounded_products` is, per output [m, n] and k, whether TF's XLA on this host adds that product
rounded instead of fused into the output's FMA chain, for a tiny standalone F32/F64 dot that XLA:CPU emits as
its naive loop (dot_op_emitter.cc ``kNaiveLlvmIr``: :func:`naive_loop`), [M, K] · [K, N] row-major — as
this process's LLVM decides for XLA's own kernel IR (``xla_llvm.compile_like_xla``), not as a rule about
shapes.

Why: XLA emits ``for m, for n, acc = 0, for k: acc += lhs[m, k] · rhs[k, n]`` (``fmul``, ``fadd``); LLVM's
loop vectoriser runs it over rows in 8 (F64 4) lanes, and where the x86 backend then merges two 256-bit
add chains into one 512-bit chain for the interleaved store but not their multiplies, the products are
``vmulps``, the sums ``vaddps``: rounded (a [18, 2] · [2, 4] f32 dot on AVX-512: rows 0-15 rounded, 16-17
FMAs; fuzz seed 312001589). Which rows and columns depends on M, N, K and the element type with no simple
pattern. Probe: the lhs all ``max``, the rhs ``max`` in row k and ``-inf`` elsewhere, so an output holds NaN
exactly where product k was rounded to +inf and met an earlier ``-inf`` (fused it stays ``-inf``); k = 0 is
never reported (from +0 a rounded and a fused product agree).

Measured: 2,496 shapes bit for bit against TF's XLA on a Zen 4 (AVX-512; M 2-40, K 2-3, N 1-16, f32 and
f64), and the dots of 1×1 convolutions of session 49's sweeps.
"""
from __future__ import annotations

import functools
import threading

import numpy as np

from tfxla_cluster.codegen.xla_llvm import aligned, compile_like_xla
from tfxla_cluster.hlo.shape import PrimitiveType as T

_LTYPE = {T.F32: ("float", 4, np.float32), T.F64: ("double", 8, np.float64)}
_lock = threading.Lock()   # clusters compile on several threads; one probe at a time


def naive_loop(M: int, K: int, N: int) -> bool:
    """Whether XLA:CPU emits a [M, K] · [K, N] dot (one batch) as its naive loop: a tiny dot (an operand
    with a dimension ≤ 3 on both sides) that is no matrix-vector product (M, N ≥ 2: those are its tiled gemv)."""
    return M >= 2 and N >= 2 and K >= 1 and (M <= 3 or K <= 3) and (K <= 3 or N <= 3)


def xla_naive_dot_ir(M: int, K: int, N: int, et: T) -> str:
    """XLA:CPU's unoptimised kernel IR for the naive [M, K] · [K, N] dot (TF 2.21's dump: loops ``lhs.0``,
    ``rhs.1``, ``reduction``, no loop metadata, an ``fmul`` and a flagless ``fadd`` per k)."""
    lty, nb, _ = _LTYPE[et]
    lines: list[str] = []
    emit = lines.append
    sizes = (M * K, K * N, M * N)
    emit('target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"')
    emit('target triple = "x86_64-unknown-linux-gnu"')
    emit("define ptr @dot_kernel(ptr %0) #0 {")
    emit("entry:")
    emit(f"  %acc = alloca {lty}, align {nb}")
    for v in ("m", "n", "k"):
        emit(f"  %{v}.a = alloca i64, align 8")
    emit("  %args.gep = getelementptr inbounds nuw { ptr, ptr, i64, ptr }, ptr %0, i32 0, i32 3")
    emit("  %args = load ptr, ptr %args.gep, align 8")
    for a in range(3):
        emit(f"  %arg{a}.gep = getelementptr {{ ptr, i64 }}, ptr %args, i32 {a}, i32 0")
        emit(f"  %arg{a} = load ptr, ptr %arg{a}.gep, align 8, !invariant.load !0, !dereferenceable !{a + 1}, "
             "!align !4")

    def loop(v: str, size: int, body) -> None:
        emit(f"  store i64 0, ptr %{v}.a, align 4")
        emit(f"  br label %{v}.h")
        emit(f"{v}.h:")
        emit(f"  %{v} = load i64, ptr %{v}.a, align 4")
        emit(f"  %{v}.c = icmp uge i64 %{v}, {size}")
        emit(f"  br i1 %{v}.c, label %{v}.x, label %{v}.b")
        emit(f"{v}.b:")
        body()
        emit(f"  %{v}.n = add nuw nsw i64 %{v}, 1")
        emit(f"  store i64 %{v}.n, ptr %{v}.a, align 4")
        emit(f"  br label %{v}.h")
        emit(f"{v}.x:")

    def k_body() -> None:
        emit(f"  %ga = getelementptr inbounds [{M} x [{K} x {lty}]], ptr %arg0, i64 0, i64 %m, i64 %k")
        emit(f"  %va = load {lty}, ptr %ga, align {nb}, !invariant.load !0, !noalias !5")
        emit(f"  %gb = getelementptr inbounds [{K} x [{N} x {lty}]], ptr %arg1, i64 0, i64 %k, i64 %n")
        emit(f"  %vb = load {lty}, ptr %gb, align {nb}, !invariant.load !0, !noalias !5")
        emit(f"  %s0 = load {lty}, ptr %acc, align {nb}")
        emit(f"  %p = fmul {lty} %va, %vb")
        emit(f"  %s1 = fadd {lty} %s0, %p")
        emit(f"  store {lty} %s1, ptr %acc, align {nb}")

    def n_body() -> None:
        emit(f"  store {lty} 0.0, ptr %acc, align {nb}")
        loop("k", K, k_body)
        emit(f"  %r = load {lty}, ptr %acc, align {nb}")
        emit(f"  %go = getelementptr inbounds [{M} x [{N} x {lty}]], ptr %arg2, i64 0, i64 %m, i64 %n")
        emit(f"  store {lty} %r, ptr %go, align {nb}, !alias.scope !5")

    loop("m", M, lambda: loop("n", N, n_body))
    emit("  ret ptr null")
    emit("}")
    emit('attributes #0 = { uwtable "frame-pointer"="all" "prefer-vector-width"="256" }')
    emit("!0 = !{}")
    lines += [f"!{a + 1} = !{{i64 {n * nb}}}" for a, n in enumerate(sizes)]
    lines += ["!4 = !{i64 64}", "!5 = !{!6}", '!6 = !{!"result", !7}', '!7 = !{!"XLA host kernel AA domain"}']
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=64)
def _probe(M: int, K: int, N: int, et: T) -> bytes:
    kernel = compile_like_xla(xla_naive_dot_ir(M, K, N, et), "dot_kernel")
    np_t = _LTYPE[et][2]
    big = np.finfo(np_t).max
    lhs, rhs, out = aligned(M * K, np_t), aligned(K * N, np_t), aligned(M * N, np_t)
    lhs[:] = big
    nan = np.zeros((M, N, K), bool)
    for k in range(1, K):
        probe = np.full((K, N), -np.inf, np_t)
        probe[k] = big
        rhs[:] = probe.ravel()
        kernel(lhs, rhs, out)
        nan[:, :, k] = np.isnan(out.reshape(M, N))
    return np.packbits(nan).tobytes()


def rounded_products(M: int, K: int, N: int, et: T) -> np.ndarray | None:
    """[M, N, K] bool: the products TF's XLA adds rounded in its naive loop for a [M, K] · [K, N] dot of
    element type ``et`` (F32/F64) on this host, or None when there are none."""
    if et not in _LTYPE or M * N * K == 0:
        return None
    with _lock:
        bits = _probe(M, K, N, et)
    rounded = np.unpackbits(np.frombuffer(bits, np.uint8))[:M * N * K].reshape(M, N, K).astype(bool)
    return rounded if rounded.any() else None


def canonical(instr) -> tuple[int, int, int] | None:
    """(M, K, N) when ``instr`` is a dot this module models: F32/F64 throughout, no batch dimensions, [M, K]
    · [K, N] with every buffer row-major, and XLA's naive loop (:func:`naive_loop`); else None."""
    from tfxla_cluster.hlo.opcode import HloOpcode as O
    et = instr.shape.element_type
    if instr.opcode is not O.DOT or et not in _LTYPE or len(instr.operands) != 2:
        return None
    lhs, rhs = (o.shape for o in instr.operands)
    dn = instr.dot_dimension_numbers
    if lhs.element_type is not et or rhs.element_type is not et or lhs.rank != 2 or rhs.rank != 2 or \
            list(dn.lhs_batch_dimensions) or list(dn.rhs_batch_dimensions) or \
            list(dn.lhs_contracting_dimensions) != [1] or list(dn.rhs_contracting_dimensions) != [0]:
        return None
    if not (lhs.is_default_layout and rhs.is_default_layout and instr.shape.is_default_layout):
        return None
    M, K = lhs.dimensions
    N = rhs.dimensions[1]
    return (M, K, N) if naive_loop(M, K, N) else None


def table(mctx, rounded: np.ndarray, name: str):
    """``rounded`` (bool, any shape) as an internal constant i8 array of the module, row-major."""
    from llvmlite import ir
    flat = rounded.astype(np.uint8).ravel()
    ty = ir.ArrayType(ir.IntType(8), flat.size)
    g = ir.GlobalVariable(mctx.module, ty, mctx.unique_name(name))
    g.linkage = "internal"
    g.global_constant = True
    g.initializer = ir.Constant(ty, bytearray(flat.tobytes()))
    return g
