"""Dots on special values (huge, inf, NaN): TF's XLA's library arithmetic (F64 Eigen GEMM; F32/BF16 oneDNN or
YNNPACK on an AVX2 host), chosen per call.

Stage: codegen (``kernels/loop.py`` has ``gemm.py``'s ``emit_dot_gemm`` hand its GEMM kernel to
:func:`emit_guarded_dot`; ``elemental.py``'s loop form of a dot asks :func:`eigen_dot` whether to fuse
its multiply-adds).
Guarantee: an F64 dot that TF's XLA runs on Eigen (:func:`eigen_dot`) sums each output as Eigen does in
TF's binary, separately rounded products added from +0, whenever an operand holds a NaN, an infinity or
an element of magnitude ≥ ``conv_exact.HUGE`` (2⁴⁸⁰): two overflowing products of opposite signs give NaN
as in XLA (FMA contraction gives the first one's infinity). Below that bound no product or partial sum
of < 2³¹ terms can overflow, so FMAs and summation order only round, and the fast GEMM runs unchanged.
The loop form (small dots) sums these dots in the same order (:func:`emit_eigen_sum`): no check.

How XLA:CPU (TF 2.21; AMD EPYC Zen 4, AVX-512, unless said) computes a dot, measured with
``tf.function(jit_compile=True)`` by putting ``max·(-5.4)`` at k = p and ``(-4.2)·(-max)`` at k = q of
one output (FMA in one accumulator gives the first infinity, separate rounding or two accumulators NaN),
in the canonical [B, M, K] × [B, K, N] form after XLA's simplifier drops unit batch dimensions:

* Matrix-vector (B = 1 and M = 1 or N = 1; B > 1 and M = 1) and tiny dots (an operand matrix with a
  dimension ≤ 3 on both sides: (M ≤ 3 or K ≤ 3) and (K ≤ 3 or N ≤ 3)) are LLVM IR loops
  (dot_op_emitter.cc kTiledLlvmIrGemv / kNaiveLlvmIr): one FMA chain from +0 in k order, any dtype,
  as the fast kernels here (as measured with K < 8; on the AVX2 host a row-major gemv of K ≥ 9 sums in
  lanes k mod 8, and a column-major one's last columns otherwise: see below, not emulated). On the Zen 4
  (2026-11-29, M 1-40, K 2-3, N 1-16): one chain for N ≤ 2, N ≥ 9 and f64 N = 4; for N 3-8 LLVM vectorises
  the naive loop over some rows, each product rounded (vmulps, vaddps), by no simple pattern of M, K and N:
  ``dot_naive`` finds those products by compiling XLA's loop (fuzz seed 312001589; 4,390 shapes bit for bit),
  and the loop form adds them rounded (``elemental._naive_rounded``; never a GEMM, ``gemm.gemm_eligible``).
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
* F32 and BF16 library dots on an AVX2+FMA host without AVX-512 (this machine: AMD EPYC Zen 3; TF's
  oneDNN ``sgemm`` runs small M (perf: ``dnnl::...gemm_info_t<float>``), YNNPACK the rest (perf:
  ``ynn::dot_fp32_8x8x1_1x8x1_fma3`` for 64×5×3)), measured with tf.function(jit_compile=True) by
  ``max·2`` at k = p and ``max·(-2)`` at k = q of every output (+inf: q fused into an accumulator holding
  p's infinity; -inf: the reverse; NaN: apart or rounded), for all p ≠ q, B = 0 (a matmul), 2, 3, 7, BF16
  alike (:func:`avx2_sum_form`; a grid of (0, 1), (0, 2), (1, 2) probes over M = 2..24, 31-33, 40, 48,
  63, 64, K = 4..9, 12, 16, N = 2..9, 12, 16, and M = 2..130, 160-2000 at a few (K, N); full probes on
  a shape of each class): N ≥ 9 one FMA chain in k order, as ours. For N = 2..8 the form is the call's:
  - ``"pairs"``: two FMA accumulators, k even and k odd over the first even part of k, then ``C0 + C1``,
    then the odd last k fused into it: M = 3..7 with K ≤ 7 and N ≤ 7 (at M = 7 the last row
    ``"rounded"``); ``"pairs_apart"``: the same with the odd last k's product rounded and added: M ≥ 81 (to K = 1001;
    not emulated: one FMA chain here, as emulating it cost 2.4× at 100×9×8 (the loop form, 63-108 µs →
    152-160 µs) and 1.5× at 20000×512×8 (the GEMM's check, 8.5-13.6 ms → 19-20 ms), medians, load 2-3.5).
  - ``"rounded"`` (every product apart; emulated as rounded products added in k order, so the NaN of two
    opposite overflows and the infinity of one are XLA's; a finite sum's rounding may differ): M = 2,
    M = 3..6 with K ≥ 8 or N = 8, M = 9..12, 17, 18, 41, 42.
  - one FMA chain: M = 7 with K ≥ 8 or N = 8, M = 8, 13..16, 19..40, 43..80.
  Transposed operands (``tf.matmul``'s ``transpose_a``/``transpose_b``; grid as above for M = 2..20, 41,
  42, 64, 81, 100, K = 4, 5, 7, 8, 9, N = 2, 3, 5, 6, 8, 9, then N to 33, K to 257, M to 201): the lhs
  transposed (either rhs) sums ``"pairs"`` for N ≤ 8 and one chain for N = 9..16, but for the last
  M mod 6 rows when 1 or 2 (``"rounded"``; the convolutions' ``pair_apart_rows``) or 3 (``"pairs"``, from
  9 columns); measured to K = 64, N = 16 and M = 51 (deeper its blocks, wider its columns, and from 81
  rows oneDNN's split of the rows between threads differ: not emulated). The rhs transposed alone: pairs
  for N ≤ 8 from 4 rows, ``"pairs_apart"`` when K is odd and M ≥ 8, K ≥ 8 or N = 8 (to K = 257), the last
  row ``"rounded"`` at M = 7 with K, N ≤ 7; 2 and 3 rows irregular (not emulated); N = 4 and 7 inferred.
  The loop form's small dots (probes over B 0-3, M, N 1-3, K 2-9, 11, 16, 17, f32/f64, this AVX2 host): a dot
  inside a fusion (a vector · vector dot, a batch of one) is one FMA chain in k order, as is a standalone one of
  K ≤ 2 or a matrix · column shorter than a vector register (K < 8 f32, < 4 f64) (explicit FMAs: elemental
  ``_dot_fma_chain``); a longer standalone matrix · column sums k mod 8 (f64: 4) in lanes, each an FMA chain,
  then the tail's own chain; a batched vector dot and a row's first of two columns add their first 8 products
  apart, then one chain (elemental ``_loop_dot_form``, to K = 32).
  Not emulated (one FMA chain there): the gemv-shaped dots, XLA's own loops, which differ from our fast
  kernels: N = 1 (XLA's row-major tiled gemv: lanes k mod 8, the tail one chain; ``conv_exact``'s
  ``row_gemv_sum`` has that order for 1×1 convolutions) and M = 1 (one FMA chain per output but for the columns past the last
  multiple of the gemv's tile, 8 at N = 9, 32 at N = 33, in another order); the fast GEMM's finite sums
  (the forms run on special values only, and always in the loop form of small dots; a GEMM's operands are
  checked for them up to ``FORM_CHECK_MAX_ELEMENTS``, beyond which the check would double a skinny dot's
  time). F16 dots compute in
  F32 (no probe overflows): they matched TF's XLA bit for bit on random operands (5×5×3 to 64×7×5).
  AVX-512 hosts: YNNPACK's order above (not emulated).
* The final ``C = acc + C`` of Eigen and YNNPACK starts from a zeroed C: a dot whose products are all
  -0 gives +0 everywhere, as here.
"""
from __future__ import annotations

from llvmlite import ir

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.buffers import BufferRef
from tfxla_cluster.codegen.conv_exact import PAIR_APART_ROWS, PAIR_ROW_BLOCK, avx2_host, guard_special
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


# Row counts whose AVX2 library dots (N ≤ 8) keep every product apart, and the row count from which they sum
# in two accumulators by k mod 2, the odd last k apart (measured, not emulated; avx2_sum_form).
AVX2_ROUNDED_ROWS = frozenset({2, 9, 10, 11, 12, 17, 18, 41, 42})
AVX2_PAIR_ROWS_FROM = 81
# The deepest and widest lhs-transposed dots whose forms were measured.
AVX2_TRANSPOSED_MAX_K, AVX2_TRANSPOSED_MAX_N = 64, 16


Forms = tuple[str, str, int]


def avx2_sum_form(M: int, K: int, N: int, ta: bool = False, tb: bool = False) -> Forms | None:
    """How TF's XLA sums an output of an F32/BF16 library dot of M × K × N (per batch) on an AVX2 host,
    ``ta``/``tb``: the lhs/rhs transposed (contracted along its first matrix dimension): (the form of the
    first rows, the form of the last ``rows``, ``rows``), a form being ``"pairs"``, ``"pairs_apart"``,
    ``"rounded"`` or ``"chain"`` (the module docstring's measurements); None: one FMA chain in k order
    everywhere (measured, or not measured)."""
    if K < 4 or N < 2 or (M <= 3 and N <= 3):
        return None   # a tiny dot or a gemv: XLA's own loops
    if ta:
        # the last rows of oneDNN's 6-row blocks apart when 1 or 2, as the convolutions' (pair_apart_rows);
        # from 9 columns the blocks are one chain and a last block of 3 rows pairs. Measured to K = 64, N = 16
        # and M = 51 (deeper: other blocks; wider: columns of either form; from 81 rows oneDNN splits the
        # rows between threads, each part with its own last block: M = 85 is 43 + 42)
        if K > AVX2_TRANSPOSED_MAX_K or N > AVX2_TRANSPOSED_MAX_N or M >= AVX2_PAIR_ROWS_FROM:
            return None
        rest = M % PAIR_ROW_BLOCK
        main = "pairs" if N <= 8 else "chain"
        if 0 < rest <= PAIR_APART_ROWS:
            return (main, "rounded", rest)
        if N > 8:
            return ("chain", "pairs", rest) if rest == PAIR_APART_ROWS + 1 else None
        return ("pairs", "pairs", 0)
    if N > 8:
        return None   # one chain
    if tb:
        if M <= 3 or M >= AVX2_PAIR_ROWS_FROM:
            return None   # irregular (apart or pairs by K and N); many rows: as the plain dots' (not emulated)
        odd = "pairs_apart" if K % 2 and (M >= 8 or K >= 8 or N == 8) else "pairs"
        return (odd, "rounded", 1) if M == 7 and K <= 7 and N <= 7 else (odd, odd, 0)
    if M <= 7 and M != 2:
        if M == 7:
            return ("pairs", "rounded", 1) if K <= 7 and N <= 7 else None
        form = "pairs" if K <= 7 and N <= 7 else "rounded"
        return (form, form, 0)
    if M in AVX2_ROUNDED_ROWS:
        return ("rounded", "rounded", 0)
    # M ≥ AVX2_PAIR_ROWS_FROM: "pairs_apart" in TF, not emulated (the loop form and the GEMM's check cost
    # 1.5-2.4× on these skinny dots, measured: module docstring)
    return None


def sum_form(instr) -> Forms | None:
    """:func:`avx2_sum_form` of the dot ``instr`` when TF's XLA on this host runs it as a library call
    whose order that measures: F32 or BF16 (operands and result), an AVX2 host without AVX-512 (TF's
    kernels dispatch on the host CPU), batch dimensions leading and one contracting dimension each
    ([B.., M, K] or [B.., K, M] × [B.., K, N] or [B.., N, K], as ``tf.matmul`` gives it with or without
    its transposes). None: one FMA chain, as the fast kernels."""
    ets = {instr.shape.element_type, *(o.shape.element_type for o in instr.operands)}
    if not ets <= {T.F32, T.BF16} or len(ets) != 1 or not avx2_host():
        return None
    d = dot_dims(instr)
    nb = len(d.lb)
    if d.lb != list(range(nb)) or d.rb != list(range(nb)) or len(d.lc) != 1 or len(d.rc) != 1 \
            or any(o.shape.rank != nb + 2 for o in instr.operands) or d.M == 1:
        return None
    return avx2_sum_form(d.M, d.K, d.N, ta=d.lc == [nb], tb=d.rc == [nb + 1])


def emit_form_sum(kctx, forms: Forms, K: int, M: int, m, operands) -> ir.Value:
    """The F32 sum over k < ``K`` of ``operands(k)`` (an i64 k to the F32 factors (x, y)) for row ``m`` of
    an M-row dot, in the form of :func:`avx2_sum_form` (``forms``: the first rows', the last rows', how
    many last rows)."""
    b = kctx.builder
    sty = t.storage_type(T.F32)
    zero = t.float_constant(sty, 0.0)
    fma = kctx.mctx.function("llvm.fma.f32", sty, [sty, sty, sty])

    def fused(k, acc):
        with kctx.scope():   # generated values stay in their loop
            return b.call(fma, [*operands(k), acc])

    def rounded(k, acc):
        with kctx.scope():
            x, y = operands(k)
            return b.fadd(acc, b.fmul(x, y))

    def emit(form):
        accs = [kctx.alloca(sty, f"yacc{j}") for j in range(2)]
        for a in accs:
            b.store(zero, a)
        if form == "chain":
            with for_range(b, t.i64(0), t.i64(K), "yk", reduction=True) as k:
                b.store(fused(k, b.load(accs[0], typ=sty)), accs[0])
            return b.load(accs[0], typ=sty)
        if form == "rounded":
            with for_range(b, t.i64(0), t.i64(K), "yk", reduction=True) as k:
                b.store(rounded(k, b.load(accs[0], typ=sty)), accs[0])
            return b.load(accs[0], typ=sty)
        with for_range(b, t.i64(0), t.i64(K // 2), "yk", reduction=True) as j:
            k0 = b.mul(j, t.i64(2))
            b.store(fused(k0, b.load(accs[0], typ=sty)), accs[0])
            b.store(fused(b.add(k0, t.i64(1)), b.load(accs[1], typ=sty)), accs[1])
        s = b.fadd(b.load(accs[0], typ=sty), b.load(accs[1], typ=sty))
        if not K % 2:
            return s
        return rounded(t.i64(K - 1), s) if form == "pairs_apart" else fused(t.i64(K - 1), s)
    main = emit(forms[0])
    if forms[1] == forms[0] or not forms[2]:
        return main
    return b.select(b.icmp_unsigned(">=", m, t.i64(M - forms[2])), emit(forms[1]), main)


def _always(instr, refs) -> bool:
    """F64 dots are always checked: reading both operands is O(MK + KN) next to the GEMM's O(MKN)."""
    return True


# The operand elements up to which an F32 form dot (N ≤ 16) is checked: a skinny GEMM is memory bound, and
# reading its operands once more costs about as much as the GEMM once they leave the caches (measured:
# 12×100000×4, 0.52-0.72 ms → 1.30-1.44 ms with the check).
FORM_CHECK_MAX_ELEMENTS = 1 << 16


def _form_check_pays(instr, refs) -> bool:
    """Whether an F32/BF16 dot of :func:`sum_form` is checked: its operands fit in L2 (a larger one keeps
    the fast GEMM's FMA chain on special values too)."""
    return sum(r.shape.num_elements for r in refs) <= FORM_CHECK_MAX_ELEMENTS


def emit_guarded_dot(prog, instr, B: int, M: int, N: int, K: int, a_ref: BufferRef, ta: str,
                     b_ref: BufferRef, tb: str, c_ref: BufferRef, epilogue, fast) -> None:
    """``fast()`` (the GEMM kernel's emission), or, for an :func:`eigen_dot` or a :func:`sum_form` one whose
    operands hold a special value, :func:`emit_exact_dot` over the same operand matrices
    (``gemm_kernel``'s arguments)."""
    forms = sum_form(instr)
    if not (eigen_dot(instr) or forms) or B * M * N * K == 0:
        return fast()
    guard_special(prog, instr, [a_ref, b_ref],
                  lambda: emit_exact_dot(prog, instr.name, B, M, N, K, a_ref, ta, b_ref, tb, c_ref, epilogue,
                                         forms),
                  fast, pays=_form_check_pays if forms else _always)


def emit_exact_dot(prog, name: str, B: int, M: int, N: int, K: int, a_ref: BufferRef, ta: str,
                   b_ref: BufferRef, tb: str, c_ref: BufferRef, epilogue=None,
                   forms: Forms | None = None) -> None:
    """C[b] = A[b]·B[b] as Eigen's F64 GEMM in TF's binary (:func:`emit_eigen_sum`), or with ``forms``
    as TF's F32 library dot on an AVX2 host (:func:`emit_form_sum`). Operands and ``epilogue`` as
    ``gemm.gemm_kernel``'s (F32 buffers with ``forms``). A scalar loop: it runs only on special values."""
    kb = prog.kernel(name + "_exact")
    b = kb.builder
    sty = t.storage_type(T.F32 if forms else T.F64)
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

        def factors(k):
            x = b.load(b.gep(pa, [b.add(a_row, b.mul(k, a_step))], source_etype=sty), typ=sty)
            y = b.load(b.gep(pb, [b.add(b_col, b.mul(k, b_step))], source_etype=sty), typ=sty)
            return x, y
        y = emit_form_sum(kb.kctx, forms, K, M, m, factors) if forms else \
            emit_eigen_sum(kb.kctx, M, N, K, m, n, lambda k: b.fmul(*factors(k)))
        b.store(y, b.gep(pc, [i], source_etype=sty))
        if epilogue is not None:
            epilogue(kb, bi, m, n, i)
    prog.call_kernel(kb, name, "dot-exact", work, tasks, cost)
