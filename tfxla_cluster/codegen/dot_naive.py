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

from tfxla_cluster.codegen.xla_llvm import LLVM_TYPES, KernelIR, aligned, compile_like_xla
from tfxla_cluster.hlo.shape import PrimitiveType as T

_lock = threading.Lock()   # clusters compile on several threads; one probe at a time


def naive_loop(M: int, K: int, N: int) -> bool:
    """Whether XLA:CPU emits a [M, K] · [K, N] dot (one batch) as its naive loop: a tiny dot (an operand
    with a dimension ≤ 3 on both sides) that is no matrix-vector product (M, N ≥ 2: those are its tiled gemv)."""
    return M >= 2 and N >= 2 and K >= 1 and (M <= 3 or K <= 3) and (K <= 3 or N <= 3)


def xla_naive_dot_ir(M: int, K: int, N: int, et: T) -> str:
    """XLA:CPU's unoptimised kernel IR for the naive [M, K] · [K, N] dot (TF 2.21's dump: loops ``lhs.0``,
    ``rhs.1``, ``reduction``, no loop metadata, an ``fmul`` and a flagless ``fadd`` per k)."""
    lty, nb, _ = LLVM_TYPES[et]
    ir = KernelIR("dot_kernel", [f"%acc = alloca {lty}, align {nb}", *(f"%{v}.a = alloca i64, align 8" for v in "mnk")],
                  [M * K * nb, K * N * nb, M * N * nb])
    scope = ir.result_scope

    def k_body() -> None:
        ir.emit(f"  %ga = getelementptr inbounds [{M} x [{K} x {lty}]], ptr %arg0, i64 0, i64 %m, i64 %k")
        ir.emit(f"  %va = load {lty}, ptr %ga, align {nb}, !invariant.load !0, !noalias {scope}")
        ir.emit(f"  %gb = getelementptr inbounds [{K} x [{N} x {lty}]], ptr %arg1, i64 0, i64 %k, i64 %n")
        ir.emit(f"  %vb = load {lty}, ptr %gb, align {nb}, !invariant.load !0, !noalias {scope}")
        ir.emit(f"  %s0 = load {lty}, ptr %acc, align {nb}")
        ir.emit(f"  %p = fmul {lty} %va, %vb")
        ir.emit(f"  %s1 = fadd {lty} %s0, %p")
        ir.emit(f"  store {lty} %s1, ptr %acc, align {nb}")

    def n_body() -> None:
        ir.emit(f"  store {lty} 0.0, ptr %acc, align {nb}")
        ir.loop("k", "k", K, k_body)
        ir.emit(f"  %r = load {lty}, ptr %acc, align {nb}")
        ir.emit(f"  %go = getelementptr inbounds [{M} x [{N} x {lty}]], ptr %arg2, i64 0, i64 %m, i64 %n")
        ir.emit(f"  store {lty} %r, ptr %go, align {nb}, !alias.scope {scope}")

    ir.loop("m", "m", M, lambda: ir.loop("n", "n", N, n_body))
    return ir.text()


@functools.lru_cache(maxsize=64)
def _probe(M: int, K: int, N: int, et: T) -> bytes:
    kernel = compile_like_xla(xla_naive_dot_ir(M, K, N, et), "dot_kernel")
    np_t = LLVM_TYPES[et][2]
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
    if et not in LLVM_TYPES or M * N * K == 0:
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
    if instr.opcode is not O.DOT or et not in LLVM_TYPES or len(instr.operands) != 2:
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
