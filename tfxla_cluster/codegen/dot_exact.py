"""F64 dots on special values (huge, inf, NaN): TF's XLA's Eigen GEMM arithmetic, chosen per call.

Stage: codegen (``kernels/loop.py`` has ``gemm.py``'s ``emit_dot_gemm`` hand its GEMM kernel to
:func:`emit_guarded_dot`; ``elemental.py``'s loop form of a dot asks :func:`eigen_dot` whether to fuse
its multiply-adds).
Guarantee: an F64 dot that TF's XLA runs on Eigen (:func:`eigen_dot`) sums each output as Eigen does in
TF's binary, separately rounded products added from +0, whenever an operand holds a NaN, an infinity or
an element of magnitude ≥ ``conv_exact.HUGE`` (2⁴⁸⁰): two overflowing products of opposite signs give NaN
as in XLA (FMA contraction gives the first one's infinity). Below that bound no product or partial sum
of < 2³¹ terms can overflow, so FMAs and summation order only round, and the fast GEMM runs unchanged.
The loop form (small dots) sums these dots in the same order (:func:`emit_eigen_sum`): no check.

How XLA:CPU (TF 2.21, this machine: AMD EPYC Zen 4) computes a dot, measured with
``tf.function(jit_compile=True)`` by putting ``max·(-5.4)`` at k = p and ``(-4.2)·(-max)`` at k = q of
one output (FMA in one accumulator gives the first infinity, separate rounding or two accumulators NaN),
in the canonical [B, M, K] × [B, K, N] form after XLA's simplifier drops unit batch dimensions:

* Matrix-vector (B = 1 and M = 1 or N = 1; B > 1 and M = 1) and tiny dots (an operand matrix with a
  dimension ≤ 3 on both sides: (M ≤ 3 or K ≤ 3) and (K ≤ 3 or N ≤ 3)) are LLVM IR loops
  (dot_op_emitter.cc kTiledLlvmIrGemv / kNaiveLlvmIr): one FMA chain from +0 in k order, any dtype,
  as the fast kernels here.
* Every other dot is a library call (B > 1: per batch; N = 1 with B > 1 too).
  - F64: Eigen's contraction (perf: ``gebp_kernel<double, double, long, ..., 8, 4>``). TF's binary is
    built without FMA (it prints "rebuild TensorFlow with ... FMA"), so gebp multiplies and adds
    separately: NaN for every (p, q) and every shape tried, (1,4,4,4) to (1,200,300,100) and (3,40,40,40).
    Emulated here in Eigen's own order (:func:`emit_eigen_sum`; bit for bit against TF's XLA on random
    operands of wide exponents, depths 50-5000, every row/column class; ``tests/codegen/test_dot_eigen_order.py``):
    XLA hands Eigen the transposed product, so Eigen's rows are the dot's N side and its columns the M side.
    Eigen cuts the depth into k-blocks (``eigen_blocking.k_blocks``: the sequential contraction's kc from
    ``computeProductBlockingSizes`` with a 32 KiB L1, ≤ 336 and evened out; 320 when the cost model runs
    it on the thread pool; two depth shards summed at the end when it shards by the inner dimension);
    each block's sum starts from +0 and is added to the output. Within a block, by the output's gebp micro
    kernel: rows of the 8-row panels, and columns past the last multiple of 4, add in k order; a row of
    the 4- or 2-row remainder panels in a 4-column block adds even and odd k into two accumulators over the
    block's first multiple of 8 (then ``C + D``, then the rest in order); a last single row in a 4-column
    block adds k mod 4 into four over the first multiple of 4 (``(C0 + C1) + (C2 + C3)``, then the rest).
  - F32: YNNPACK (perf: ``ynn::dot_fp32_5x64x1_1x16x1_avx512f`` for 64³, ``ynn::dot_fp32_5x16x4_1x4x4_avx512f``
    for 100³), whose cost model (XNNPACK ynnpack/kernels/dot/dot.cc, cost_model/zen4.h) picks the kernel
    per shape: a K-tile-1 kernel is one FMA chain in k order; a K-tile-4 kernel keeps four FMA chains by
    k mod 4 (K padded to a multiple of 4) and adds them at the end, so opposite-sign overflows at k ≢ k'
    (mod 4) give NaN. Measured: one chain for 4×4×4, 32³ to 64³, 128³, M < 64 with N ≥ 17, N a
    multiple of 64, and K = 5, 6, 7, 9 at 64×K×100; four chains for N ≤ 16, M ≥ 64 with N not a
    multiple of 64 and K a multiple of 4 (8³, 16³, 100³, 200×300×100). Not emulated (the choice would
    need YNNPACK's cost model): F32 dots keep the fast kernels' single FMA chain or OpenBLAS's order.
    F16/BF16 dots were not measured.
* The final ``C = acc + C`` of Eigen and YNNPACK starts from a zeroed C: a dot whose products are all
  -0 gives +0 everywhere, as here.
"""
from __future__ import annotations

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.buffers import BufferRef
from tfxla_cluster.codegen.conv_exact import guard_special
from tfxla_cluster.codegen.eigen_blocking import emit_eigen_sum
from tfxla_cluster.codegen.gemm import dot_dims, split
from tfxla_cluster.codegen.loops import for_range
from tfxla_cluster.hlo.shape import PrimitiveType as T


def eigen_dot(instr) -> bool:
    """Whether TF's XLA runs the F64 dot ``instr`` on Eigen (separately rounded products, see the
    module docstring) rather than as an LLVM IR FMA loop."""
    if instr.shape.element_type is not T.F64 or any(o.shape.element_type is not T.F64 for o in instr.operands):
        return False
    d = dot_dims(instr)
    if d.M == 1 or (d.B == 1 and d.N == 1):
        return False   # kTiledLlvmIrGemv (a batched N = 1 dot is Eigen's, measured)
    return not ((d.M <= 3 or d.K <= 3) and (d.K <= 3 or d.N <= 3))   # kNaiveLlvmIr


def _always(instr, refs) -> bool:
    """F64 dots are always checked: reading both operands is O(MK + KN) next to the GEMM's O(MKN)."""
    return True


def emit_guarded_dot(prog, instr, B: int, M: int, N: int, K: int, a_ref: BufferRef, ta: str,
                     b_ref: BufferRef, tb: str, c_ref: BufferRef, epilogue, fast) -> None:
    """``fast()`` (the GEMM kernel's emission), or, for an :func:`eigen_dot` whose operands hold a
    special value, :func:`emit_exact_dot` over the same operand matrices (``gemm_kernel``'s arguments)."""
    if not eigen_dot(instr) or B * M * N * K == 0:
        return fast()
    guard_special(prog, instr, [a_ref, b_ref],
                  lambda: emit_exact_dot(prog, instr.name, B, M, N, K, a_ref, ta, b_ref, tb, c_ref, epilogue),
                  fast, pays=_always)


def emit_exact_dot(prog, name: str, B: int, M: int, N: int, K: int, a_ref: BufferRef, ta: str,
                   b_ref: BufferRef, tb: str, c_ref: BufferRef, epilogue=None) -> None:
    """C[b] = A[b]·B[b] as Eigen's F64 GEMM in TF's binary (:func:`emit_eigen_sum`). Operands and
    ``epilogue`` as ``gemm.gemm_kernel``'s. A scalar loop: it runs only on special values."""
    kb = prog.kernel(name + "_exact")
    b = kb.builder
    sty = t.storage_type(T.F64)
    work = B * M * N
    cost = 2 * work * K
    tasks = prog.tasks_for(work, cost)
    lo, hi = (kb.lo, kb.hi) if tasks > 1 else (t.i64(0), t.i64(work))
    pa, pb, pc = kb.ptr(a_ref.slot), kb.ptr(b_ref.slot), kb.ptr(c_ref.slot)
    with for_range(b, lo, hi, "xo") as i:
        bi, m, n = split(b, i, [B, M, N])
        a_row = b.add(b.mul(bi, t.i64(M * K)), b.mul(m, t.i64(K)) if ta == "N" else m)
        b_col = b.add(b.mul(bi, t.i64(K * N)), n if tb == "N" else b.mul(n, t.i64(K)))
        a_step, b_step = t.i64(1 if ta == "N" else M), t.i64(N if tb == "N" else 1)

        def product(k):
            x = b.load(b.gep(pa, [b.add(a_row, b.mul(k, a_step))], source_etype=sty), typ=sty)
            y = b.load(b.gep(pb, [b.add(b_col, b.mul(k, b_step))], source_etype=sty), typ=sty)
            return b.fmul(x, y)
        b.store(emit_eigen_sum(kb.kctx, M, N, K, m, n, product), b.gep(pc, [i], source_etype=sty))
        if epilogue is not None:
            epilogue(kb, bi, m, n, i)
    prog.call_kernel(kb, name, "dot-exact", work, tasks, cost)
