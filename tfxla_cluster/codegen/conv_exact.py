"""Convolutions on special values (inf, NaN, huge): TF's XLA's own algorithm, chosen per call.

Stage: codegen (wraps the emission of one HLO ``convolution`` by ``conv.py``, ``winograd.py`` or
``gemm.py``: ``kernels/loop.py`` hands its fast emission to :func:`emit_guarded`).
Guarantee: when the filter or the input holds a NaN, an infinity or a value of magnitude ≥ :data:`HUGE`,
the call runs :func:`emit_exact_conv` instead of the fast kernels, and its NaN positions, infinities and
signed zeros are those of TF's XLA on this machine; otherwise the fast kernels run unchanged, but for
small convolutions (:func:`exact_order`), which run the exact kernel on every input (TF's XLA bit for bit where
its order is modelled). The check
reads the filter once per call, and the input where reading it too costs under ~1% of the convolution
(:func:`_check_pays`; always for the Winograd kernel and a reversed window, which need it): a huge input
element overflows its products in XLA's order (a rounded product) where the fast kernels' FMA may keep
it exact (``max·w - inf`` stays -inf, XLA's is NaN). The exact
kernels are cold code (``ProgramEmitter.branch_on_flag``): a JIT executable emits and compiles them the first
time a check fires, not with the rest (``program.emit_cold``, ``executable.ColdCode``); one check kernel per
element type serves every
guarded convolution, so a guard adds no kernel of its own to a first call's compile.

How XLA:CPU (TF 2.21) computes a convolution (thunk_emitter.cc, ``PotentiallyImplementedAsEigenConvolution``):
an F32 (or F16; BF16 and F16 convolutions are F32 ones after XLA's float normalisation) convolution in
NHWC/HWIO order is a ``ConvolutionThunk``: Eigen's ``extract_image_patches`` with padding value 0, then a
GEMM (convolution_thunk_internal.h ``EigenGenericConv2D``). So a window tap in the padding, or between the
elements of a dilated input, multiplies 0 by the filter: ``0·inf = NaN`` reaches every output whose window
overlaps the padding at an infinite tap. Only the transposed form (lhs dilation, unit strides, no filter
dilation, one group: ``EigenTransposedConv2D``) adds products of real input elements alone. Eigen's
contraction (whose float GEMM is oneDNN's ``sgemm``: tsl's eigen_contraction_kernel.h) sums each output in contraction order (window taps row-major, then input features) with
fused multiply-adds from +0 (measured: ``1 + 2⁻²⁴`` survives only as an FMA would keep it; an
overflowing product followed by one of the other sign gives the first one's infinity, not NaN). An output of
one patch is Eigen's own gemv instead, built without FMA in TF's wheel: rounded products added in the same
order, per column block of 16 k from a depth of 128 (:func:`gemv_block`; ``-inf·x`` then ``+inf`` is NaN; fuzz
seeds 148000851, 172001338). That order differs from the fast kernels' FMAs by rounding on any input, so a
one-patch convolution always runs it (:func:`emit_guarded`), vectorised over the output features. F64
convolutions, and those with a reversed window (never Eigen's; algsimp's ``conv_operand_swap`` makes them
from a kernel larger than its input: the original taps then sum backwards), are XLA's elemental loop
(elemental_ir_emitter.cc ``EmitConvolution``), which skips taps outside the input; for the reversed
window both operands are checked (its filter is the original input). Its multiply-adds are fused (LLVM's
FMA contraction) but for the taps whose multiply LLVM hoists out of the output loop, whose products are
rounded: which ones, ``conv_hoist.rounded_taps`` finds by compiling XLA's own loop IR (F32/F64 convolutions
in row-major buffers; elsewhere every product is fused). The fast kernels skip those taps too (static tap
ranges), and Winograd's transforms mix
neighbouring inputs (one infinity spreads NaN to a whole tile); their sums differ from Eigen's only by
rounding while every value is finite and far from overflow, which the check makes sure of.

Two kinds of F32 (F16, BF16) convolution never reach Eigen (measured in TF's dumps: Conv2D with 1×1 and 1×2
filters, 1-20 channels): one with an input, filter or output of at most 8 bytes (two F32 elements; Eigen
wants 16-byte aligned buffers, :func:`eigen_aligned`) is the elemental loop above, in F32 with its multiply-
adds fused; a 1×1 one without stride, padding or input dilation is a dot (algsimp's ``SimplifyConvToDot``,
:func:`xla_dot_dims`): [patches, K] × [K, N], summed as XLA's dot emitter does (:func:`xla_dot_form`) — for
one output feature its row-major tiled gemv (lanes k mod 8 of FMAs over the first multiple of 8, the lanes
added pairwise, the rest one FMA chain from +0, added last; 4 lanes in F64), for one patch or a tiny dot one
FMA chain, in F64 otherwise Eigen's GEMM (rounded products, ``eigen_blocking.emit_eigen_sum``). So an
infinity then an overflowing product of the other sign keeps the infinity in those chains (fuzz seeds
107000534, 107000536), where gemv_t's rounded products meet as NaN.

With one output feature per group (and more than one patch: one patch is Eigen's own gemv), Eigen's
contraction calls oneDNN's ``sgemm`` with M = 1, which is its ``gemv_t`` JIT kernel (gemv_driver.cpp,
jit_avx_gemv_t_f32_kern.cpp): 16 products at a time FMA'd into 8 lanes (lane k mod 8), the lanes summed
``((l0+l1)+(l4+l5)) + ((l2+l3)+(l6+l7))`` and added to the output, then the rest of the depth in blocks of
8, 4, 2, 1 (its bits), each block's rounded products in fresh lanes summed the same way and added. So
``+max·1.4 + (-max)·6.3`` is NaN there, where one FMA chain keeps inf. Eigen hands it the depth in pieces
(``eigen_blocking.k_blocks`` with the image patches' cost: over a large image it shards the depth by the
inner dimension — 40×40 at depth 180: 96 + 84, summed at the end — and blocks it at ≤ 320 on the thread
pool, ≤ 400 alone, in equal slices of 8 for oneDNN), one gemv_t call per block, but for a last patch that
Eigen's column blocks (rounded to 24 for oneDNN) leave alone — 49 patches are 48 + 1 — whose N = 1 call
fuses each product into the output in k order (measured against TF's XLA: 3×3 to 64×64 images, depths
90-4500).

Not emulated: the F32 dots of 1×1 convolutions with more than one output feature that XLA runs on YNNPACK
(per shape one FMA chain, or four by k mod 4 with the tail in single rounded products: its cost model
decides) or as a naive loop LLVM vectorises over rows (rounded products where it does, at 4 output features
but not 2): those keep one FMA chain; a huge finite input element (an infinity alone sums alike in any order) where checking the
input would cost over ~1% (a 1×1, depthwise or few-feature convolution over a large image: the filter
alone is checked there); with one output feature, the sequential contraction's blocks in one case measured
otherwise (4×4 patches at depth 1000 split at 328, not the model's 336), and three-dimensional
one-feature convolutions deeper than :data:`GEMV_MAX_DEPTH` (Eigen's volume patches cost otherwise). The batch-grouped convolutions XLA expands into masked
dense ones (the depthwise filter backprop, where a NaN input element gives NaN in every output feature) keep
our grouped kernel, with those NaNs placed by ``passes/expanders.py``'s ``BatchGroupHoles``; f64 depthwise
convolutions are expanded by its ``ConvolutionGroupConverter`` as XLA does.
"""
from __future__ import annotations

import functools
from math import prod

import numpy as np
from llvmlite import ir

from tfxla_cluster.codegen import conv_hoist, dot_naive
from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.buffers import BufferRef
from tfxla_cluster.codegen.eigen_blocking import F32_PATCHES, add_shards, emit_eigen_sum, split
from tfxla_cluster.codegen.gemm import group_origin, input_position
from tfxla_cluster.codegen.loops import Index, emit_loop_nest, for_range, if_then, strides, work_items
from tfxla_cluster.codegen.scalar_ops import ScalarOps
from tfxla_cluster.codegen.row_lanes import AVX512, host_target
from tfxla_cluster.codegen.target import host_features
from tfxla_cluster.codegen.xla_llvm import flag_table
from tfxla_cluster.cpu_topology import eigen_threads
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape

# A filter (or Winograd input) element at least this large takes the exact path: below it, every product
# and partial sum of a convolution of < 2³¹ terms stays finite, whatever the other operand's magnitude up
# to the same bound (2⁴⁸·2⁴⁸·2³¹ < 2¹²⁸), so summation order only rounds.
HUGE = {T.F32: 2.0 ** 48, T.F16: 2.0 ** 48, T.BF16: 2.0 ** 48, T.F64: 2.0 ** 480}
# Convolutions this small are always checked (and the exact kernel is cheap next to their call).
SMALL_FLOPS = 1 << 20
# oneDNN's gemv_t sums a dot product in 8 lanes; a three-dimensional convolution's depth is taken as one
# Eigen block up to this (its split is modelled for image patches only).
GEMV_LANES = 8
GEMV_MAX_DEPTH = 288
# The kind of the check kernel (one per element type) that every guard shares, convolutions' and dots'
# (``dot_exact.py``): profiles, tests and kernel listings name it by this.
SPECIAL_CHECK_KIND = "special-check"
# F16 and BF16 convolutions are F32 ones in XLA (inputs converted, the result rounded back).
_COMPUTE = {T.F32: T.F32, T.F16: T.F32, T.BF16: T.F32, T.F64: T.F64}


def xla_dot_dims(instr) -> tuple[int, int, int] | None:
    """(M, K, N) of the dot XLA's algsimp makes of ``instr`` (``SimplifyConvToDot``, layout-sensitive
    phase; measured: TF's XLA dumps a ``dot`` for every such Conv2D): a window of size 1 everywhere with no
    stride, padding or input dilation, one feature and batch group, the features minor-most in the
    input and the output (same layouts) and the filter's input features right above its output features.
    M = patches (batch × output positions), K = input features, N = output features."""
    if instr.feature_group_count != 1 or instr.batch_group_count != 1 or any(
            w.size != 1 or w.stride != 1 or w.padding_low or w.padding_high or w.base_dilation != 1
            for w in instr.window.dimensions):
        return None
    dn = instr.convolution_dimension_numbers
    lhs, rhs = (o.shape for o in instr.operands)
    ls, rs, os_ = strides(lhs), strides(rhs), strides(instr.shape)
    K = lhs.dimensions[dn.input_feature_dimension]
    N = instr.shape.dimensions[dn.output_feature_dimension]
    if K == 0 or N == 0 or ls[dn.input_feature_dimension] != 1 or os_[dn.output_feature_dimension] != 1 or \
            rs[dn.kernel_output_feature_dimension] != 1 or rs[dn.kernel_input_feature_dimension] != N:
        return None
    pairs = [(dn.input_batch_dimension, dn.output_batch_dimension),
             *zip(dn.input_spatial_dimensions, dn.output_spatial_dimensions)]
    if any(ls[i] != K * (os_[o] // N) for i, o in pairs):
        return None   # the patches are not the input's rows in the output's order
    return instr.shape.num_elements // N, K, N


def xla_dot_form(instr) -> str | None:
    """How TF's XLA computes the dot of :func:`xla_dot_dims` (dot_op_emitter.cc, measured in its dumps):
    ``"row_gemv"`` when N = 1 (``kTiledLlvmIrGemv``, row-major: :func:`emit_exact_conv`), ``"chain"`` when
    M = 1 (the column-major gemv: one FMA chain in k order per output), for a tiny dot (an operand matrix
    with a dimension ≤ 3 on both sides: ``kNaiveLlvmIr``, the same chain) and for an F32 library dot
    (YNNPACK, whose per-shape choice of one or four chains is not emulated: ``dot_exact.py``), ``"eigen"``
    for an F64 library dot (Eigen's gebp order, ``eigen_blocking.emit_eigen_sum``). None: not a dot in XLA."""
    dims = xla_dot_dims(instr)
    if dims is None:
        return None
    M, K, N = dims
    if N == 1:
        return "row_gemv"
    if M == 1 or ((M <= 3 or K <= 3) and (K <= 3 or N <= 3)) or _COMPUTE[instr.shape.element_type] is T.F32:
        return "chain"
    return "eigen"


def eigen_aligned(instr) -> bool:
    """``PotentiallyImplementedAsEigenConvolution``'s alignment test: the input, the filter and the output
    each span more than 8 bytes in F32 (XLA's type for F16/BF16 ones). A smaller buffer may be under-aligned
    (``minimum_alignment_for_allocation``: min(PowerOf2Ceil(bytes), 16) < 16), and the convolution is
    XLA's elemental loop instead (measured: a 1×2 filter of one feature, fuzz seed 107000534)."""
    return all(4 * s.num_elements > 8 for s in (instr.shape, *(o.shape for o in instr.operands)))


def xla_multiplies_padding(instr) -> bool:
    """Whether TF's XLA multiplies the filter by zeros at taps outside the input (Eigen's patches): F32
    convolutions other than Eigen's transposed form. F64 ones, those with a reversed window (never
    Eigen's: PotentiallyImplementedAsEigenConvolution; algsimp's operand swap makes them) and those with a
    buffer of ≤ 8 bytes (:func:`eigen_aligned`) are XLA's elemental loop, which skips them; 1×1 ones
    without stride or padding are dots (:func:`xla_dot_dims`)."""
    if _COMPUTE.get(instr.shape.element_type) is not T.F32 or any(
            w.window_reversal for w in instr.window.dimensions) or not eigen_aligned(instr) or \
            xla_dot_dims(instr) is not None:
        return False
    window = instr.window.dimensions
    transposed = any(w.base_dilation > 1 for w in window) and all(
        w.stride == 1 and w.window_dilation == 1 for w in window) and instr.feature_group_count == 1
    return not transposed


# Convolutions of at most this many output-tap pairs always run XLA's order (exact_order).
EXACT_ORDER_WORK = 1 << 14


def exact_order(instr) -> bool:
    """Whether :func:`emit_guarded` runs :func:`emit_exact_conv` on every input, not only on special values:
    a :func:`guarded` convolution of at most :data:`EXACT_ORDER_WORK` output-tap pairs. The fast kernels'
    order differed from TF's XLA in the last bit on 239 of 462 small convolutions (session 49's sweep on a
    Zen 4: f32 and f64, 1×1 to 5×4 images, 1×1 to 3×3 filters, 1-3 features, strides 1-2, SAME and VALID),
    which an ``exp`` or ``sinh`` after it magnifies past any tolerance (fuzz seed 320001952: a swapped
    convolution); with the exact kernel 0 of them differ, nor 308 depthwise ones, nor the f16 and bf16
    ones. At this size the scalar loop costs a few µs, hidden under a call's launch."""
    return guarded(instr) and _multiply_adds(instr) <= EXACT_ORDER_WORK


def _multiply_adds(instr) -> int:
    """The convolution's multiply-adds: (output elements)·(taps)·(input features per group)."""
    dn = instr.convolution_dimension_numbers
    kin = instr.operands[1].shape.dimensions[dn.kernel_input_feature_dimension]
    return instr.shape.num_elements * prod(w.size for w in instr.window.dimensions) * kin


def guarded(instr) -> bool:
    """Whether :func:`emit_guarded` checks ``instr``'s operands (floating point but complex)."""
    return instr.shape.element_type in HUGE and all(o.shape.element_type in HUGE for o in instr.operands)


def _known_special(ref: BufferRef, limit: float) -> bool | None:
    """Whether a constant ``ref`` holds a special value (None: not a constant, known only at run time)."""
    if ref.slot.kind != "const" or ref.slot.value is None:
        return None
    v = np.abs(np.asarray(ref.slot.value, dtype=np.float64))
    return bool(np.any(np.isnan(v) | (v >= limit)))


def _special_flag(prog, instr, refs: list[BufferRef], limit: float):
    """An s32 scratch flag, set when any of ``refs`` holds a NaN or an element of magnitude ≥ ``limit``
    (infinities included): the entry zeroes it, then a check kernel per buffer (a vectorised or-reduction
    of compares over a range of elements per task) writes 1 into it. The kernel is built once per element
    type and limit in a module and called on every buffer of that type (``call_shared_kernel``)."""
    flag = prog.scratch(Shape(T.S32, ()), "special")
    prog.zero_flag(flag)
    for ref in refs:
        n = ref.shape.num_elements
        prog.call_shared_kernel((SPECIAL_CHECK_KIND, ref.shape.element_type, limit), [ref, flag],
                                instr.name + "_special", lambda kb, ref=ref: _build_check(prog, kb, ref, flag, limit),
                                instr.name, SPECIAL_CHECK_KIND, n, prog.tasks_for(n, n), n)
    return flag


def _build_check(prog, kb, ref: BufferRef, flag: BufferRef, limit: float) -> None:
    """The check kernel's body: ``*flag = 1`` when an element of ``ref`` in [lo, hi) is special. The range
    always comes from the call, never from a constant: the IR depends on the element type and ``limit`` only."""
    et = ref.shape.element_type
    sty, cet = t.storage_type(et), _COMPUTE[et]
    cty = t.storage_type(cet)
    kbld = kb.builder
    ops = ScalarOps(kbld, prog.mctx)
    p, fp = kb.ptr(ref.slot), kb.ptr(flag.slot)
    acc = kb.kctx.alloca(t.I8, "special")
    kbld.store(ir.Constant(t.I8, 0), acc)
    fabs = prog.mctx.function("llvm.fabs.f32" if cet is T.F32 else "llvm.fabs.f64", cty, [cty])
    lim = t.float_constant(cty, limit)
    # Not a ``reduction`` loop: an or of flags is exact in any order, so the loop is light like a plain
    # one (vectorised, not unrolled nor interleaved: ~5 ms less of LLVM's time, measured on conv_block).
    with for_range(kbld, kb.lo, kb.hi, "special") as i:
        x = t.from_storage(kbld, et, kbld.load(kbld.gep(p, [i], source_etype=sty), typ=sty))
        x = ops.convert(et, cet, x) if et is not cet else x
        bad = kbld.fcmp_unordered(">=", kbld.call(fabs, [x]), lim)
        kbld.store(kbld.or_(kbld.load(acc, typ=t.I8), kbld.zext(bad, t.I8)), acc)
    with if_then(kb.kctx, kbld.icmp_unsigned("!=", kbld.load(acc, typ=t.I8), ir.Constant(t.I8, 0))):
        kbld.store(ir.Constant(t.I32, 1), fp)   # tasks race to store the same 1


def _check_pays(instr, refs: list[BufferRef]) -> bool:
    """Whether reading ``refs`` costs at most about 1% of the convolution: a filter read from memory
    costs ~5 of the GEMM's multiply-adds per element (measured), and the convolution does
    2·(output elements)·(taps)·(input features) of them. Above, the call keeps its fast kernels only
    (a filter read once per call is the whole memory traffic of a late, small-image layer)."""
    flops = 2 * _multiply_adds(instr)
    return 5 * 100 * sum(r.shape.num_elements for r in refs) <= flops or flops <= SMALL_FLOPS


def guard_special(prog, instr, refs: list[BufferRef], exact, fast, pays=_check_pays,
                  optional: tuple[BufferRef, ...] = ()) -> None:
    """``fast()``, or ``exact()`` when one of ``refs`` (or of ``optional``) holds a NaN, an infinity or an
    element of magnitude ≥ :data:`HUGE`: a branch in the entry function, per call (decided at compile time
    for constants; none where ``pays(instr, refs)`` says the check would cost too much). Each of
    ``optional`` is checked too where ``pays`` still holds with it added."""
    limit = HUGE[instr.shape.element_type]
    known = [_known_special(r, limit) for r in (*refs, *optional)]
    if any(k is not None for k in known):
        prog.not_replayable()   # the choice read a constant's values, which kernel-reuse keys leave out
    if any(k is True for k in known):
        return exact()
    refs = [r for r, k in zip(refs, known) if k is None]
    if refs and not pays(instr, refs):
        return fast()
    for r, k in zip(optional, known[len(known) - len(optional):]):
        if k is None and pays(instr, [*refs, r]):
            refs.append(r)
    if not refs:
        return fast()
    flag = _special_flag(prog, instr, refs, limit)
    prog.branch_on_flag(flag, instr.name, exact, fast)


def emit_guarded(prog, instr, lhs: BufferRef, rhs: BufferRef, out: BufferRef, epilogue, fast,
                 check_input: bool = False, lhs_reversed: tuple[int, ...] = ()) -> None:
    """``fast()`` (the fast kernels' emission), or :func:`emit_exact_conv` when the filter or the input holds
    a special value: a branch in the entry function, per call (decided at compile time for constants; no
    check where it would not pay, see :func:`_check_pays`; with ``check_input`` or a reversed window the
    input is checked with the filter or neither is, otherwise where it still pays after the filter).
    ``lhs_reversed``: ``lhs`` holds the input with those dimensions unreversed (a folded ``reverse``)."""
    if not guarded(instr):
        return fast()
    if gemv_block(instr) is not None or exact_order(instr):
        # one patch: Eigen's gemv order on every input, not only special values (rounded products differ
        # from the fast kernels' FMAs by an ulp; fuzz seed 172001338); vectorised over the output features.
        # A small one: XLA's order on every input (exact_order).
        return emit_exact_conv(prog, instr, lhs, rhs, out, epilogue, lhs_reversed)
    # A reversed window is algsimp's operand swap: its input is the original filter, whose huge values
    # overflow in XLA's elemental order as the original input's do (both operands are checked).
    check_input = check_input or any(w.window_reversal for w in instr.window.dimensions)
    # Otherwise the input is checked where that still pays: a huge input element overflows its products in
    # XLA's order but maybe not in the fast kernels' (an FMA keeps max·163 - inf at -inf; fuzz seed 72000800).
    guard_special(prog, instr, [rhs, lhs] if check_input else [rhs],
                  lambda: emit_exact_conv(prog, instr, lhs, rhs, out, epilogue, lhs_reversed), fast,
                  optional=() if check_input else (lhs,))


def gemv_lanes(instr) -> list[tuple[list[tuple[int, int]], int]] | None:
    """Where TF's XLA sums ``instr``'s outputs in oneDNN's ``gemv_t`` lanes (:func:`emit_exact_conv`): an
    Eigen-patches F32 convolution (:func:`xla_multiplies_padding`) with one output feature per group and
    more than one patch (one patch is Eigen's own gemv): Eigen's depth shards of [lo, hi) k-blocks, one
    gemv_t call each, with the patches per column block (``eigen_blocking.split``: the filter is Eigen's
    m = 1 side, the image patches its n). None elsewhere. Two spatial dimensions (Eigen's image patches) at any depth; others (volume patches,
    whose cost Eigen counts otherwise) up to :data:`GEMV_MAX_DEPTH`, one block."""
    dn = instr.convolution_dimension_numbers
    rshape = instr.operands[1].shape
    kin = rshape.dimensions[dn.kernel_input_feature_dimension]
    kout = rshape.dimensions[dn.kernel_output_feature_dimension]
    patches = instr.shape.num_elements // instr.shape.dimensions[dn.output_feature_dimension]
    depth = kin * prod(w.size for w in instr.window.dimensions)
    if not (xla_multiplies_padding(instr) and instr.batch_group_count == 1
            and kout == instr.feature_group_count and patches > 1 and depth > 0):
        return None
    if len(instr.window.dimensions) == 2:
        return split(1, patches, depth, eigen_threads(), F32_PATCHES)
    return [([(0, depth)], patches)] if depth <= GEMV_MAX_DEPTH else None


@functools.lru_cache(maxsize=1)
def avx2_host() -> bool:
    """An AVX2+FMA host without AVX-512, where TF's Eigen/oneDNN contraction runs its AVX2 kernels."""
    f = host_features()
    return bool(f.get("avx2") and f.get("fma") and not f.get("avx512f"))


def pair_sums(instr) -> bool:
    """Whether TF's XLA sums each output of ``instr`` in two FMA accumulators, k even and k odd, over the
    first even part of the depth, then ``C0 + C1``, then the odd last k fused into that: an Eigen-patches
    F32 convolution (:func:`xla_multiplies_padding`) with 2-8 output features per group and more than one
    patch, on an AVX2 host without AVX-512 (TF's contraction kernels dispatch on the host CPU, not on our
    codegen target). Measured on Zen 3 against TF 2.21 (``1·1`` at k and ``-(1+2⁻¹²)²`` at k' keep the
    FMA's 2⁻²⁴ only for k ≡ k' mod 2 or k' the odd last one; ``inf`` then an overflowing product of the
    other sign one k later gives NaN): 3×3 filters, depths 27-576, images 3×5 to 16×16; 9 or more output
    features are one FMA chain, one feature oneDNN's gemv_t (:func:`gemv_lanes`). A last block of 1 or 2
    patches sums its products apart (:func:`pair_apart_rows`). Grouped ones (depthwise) sum each group's
    depth alike when it has 2-8 output features (measured: multipliers 2 and 4 over 2 and 4 patches,
    depths 3 and 4, and their last patches apart; fuzz seeds 164000909, 165000547, 167001146; groups of
    several input features not measured). Fuzz seeds 160000501, 165001020,
    163000544, 164000532 (AVX-512 hosts sum one chain here)."""
    dn = instr.convolution_dimension_numbers
    kout = instr.operands[1].shape.dimensions[dn.kernel_output_feature_dimension]
    patches = instr.shape.num_elements // max(instr.shape.dimensions[dn.output_feature_dimension], 1)
    return (2 <= kout // instr.feature_group_count <= 8 and patches > 1 and instr.batch_group_count == 1
            and xla_multiplies_padding(instr) and avx2_host())


# oneDNN's AVX2 sgemm (under Eigen's contraction) takes the patches in blocks of this many rows; a last
# block of at most PAIR_APART_ROWS rows keeps every product apart (pair_apart_rows).
PAIR_ROW_BLOCK = 6
PAIR_APART_ROWS = 2


def pair_apart_rows(instr) -> int:
    """How many last patches of a :func:`pair_sums` convolution TF's XLA sums with every product apart
    rather than in the two accumulators: the patches after the last multiple of :data:`PAIR_ROW_BLOCK`
    when they are 1 or 2 (measured on Zen 3 like :func:`pair_sums`, ``max·2`` at tap p and ``max·(-2)`` at
    q of every output: 2 features over 2-9, 14 and 17 patches at depth 4, 3 over 2 and 7 patches at
    depth 5, 4 over 35, 42 and 49 patches at depth 27, a depthwise multiplier 2 over 4 and 8 patches and
    4 over 2: patches 6 of 7, 6-7 of 8, 12-13 of 14, 48 of 49 and both of 2 give NaN for every p ≠ q; the
    same trailing row as the AVX2 dots of ``dot_exact.avx2_sum_form``; fuzz seeds 165001020,
    167001146). They keep the two accumulators by k mod 2 (``-max, -max, +inf`` at k 1-3 is inf: fuzz seed
    280001053; measured over 7 orders of a depth-4 patch)."""
    if not pair_sums(instr):
        return 0
    dn = instr.convolution_dimension_numbers
    patches = instr.shape.num_elements // instr.shape.dimensions[dn.output_feature_dimension]
    rest = patches % PAIR_ROW_BLOCK
    return rest if rest <= PAIR_APART_ROWS else 0


# Eigen's column-major gemv (GeneralMatrixVector.h) sums a depth of at least this many in column blocks
# of GEMV_BLOCK (GEMV_BLOCK_WIDE when the filter's rows span ≥ GEMV_WIDE_BYTES); below it, one block.
GEMV_BLOCKED_DEPTH = 128
GEMV_BLOCK, GEMV_BLOCK_WIDE, GEMV_WIDE_BYTES = 16, 4, 32000
# The one-patch kernel's vector width (F32 output features per AVX register) and its vectors per work item.
GEMV_VECTOR, GEMV_UNROLL = 8, 4


def gemv_block(instr) -> int | None:
    """The column block of Eigen's gemv when TF's XLA runs the Eigen-patches convolution ``instr``
    (:func:`xla_multiplies_padding`) with a single patch (Eigen's contraction with n = 1 is its own
    ``general_matrix_vector_product``, built without FMA in TF's wheel): each output feature sums, per block
    of that many k in order, the rounded products from +0 and adds the block's sum to the output (from +0).
    The depth of the output's group when it is under :data:`GEMV_BLOCKED_DEPTH`, else :data:`GEMV_BLOCK`,
    or :data:`GEMV_BLOCK_WIDE` when the group's output features span ≥ 32000 bytes in F32 (the gemv's
    ``lhsStride``). Measured on Zen 3 against TF 2.21 (random operands of wide exponents, bit for bit):
    depths 4-1568 with 3-100 features, 128 and 256 with 7999-9000 features, F16/BF16, depthwise
    multipliers 2-4 (depths 4-144). None: not a one-patch Eigen convolution."""
    if not xla_multiplies_padding(instr) or instr.batch_group_count != 1:
        return None
    dn = instr.convolution_dimension_numbers
    F = instr.shape.dimensions[dn.output_feature_dimension]
    if instr.shape.num_elements != F or F == 0:
        return None
    kin = instr.operands[1].shape.dimensions[dn.kernel_input_feature_dimension]
    depth = kin * prod(w.size for w in instr.window.dimensions)
    if depth < GEMV_BLOCKED_DEPTH:
        return max(depth, 1)
    return GEMV_BLOCK if 4 * (F // instr.feature_group_count) < GEMV_WIDE_BYTES else GEMV_BLOCK_WIDE


def _gemv_vectors(instr) -> bool:
    """Whether :func:`emit_exact_conv` sums a one-patch convolution (:func:`gemv_block`) over
    :data:`GEMV_VECTOR` output features at a time: F32 throughout, one group, and a filter whose rows (one k,
    every output feature) lie one after another in k order (HWIO's row-major layout), so a row's features
    are one vector load."""
    if instr.feature_group_count != 1 or any(x.shape.element_type is not T.F32 for x in (instr, *instr.operands)):
        return False
    dn = instr.convolution_dimension_numbers
    rshape = instr.operands[1].shape
    rs = strides(rshape)
    F = rshape.dimensions[dn.kernel_output_feature_dimension]
    step = F * rshape.dimensions[dn.kernel_input_feature_dimension]
    if F < GEMV_VECTOR or rs[dn.kernel_output_feature_dimension] != 1 or rs[dn.kernel_input_feature_dimension] != F:
        return False
    for d, w in reversed(list(zip(dn.kernel_spatial_dimensions, instr.window.dimensions))):
        if w.size > 1 and rs[d] != step:
            return False
        step *= w.size
    return True


def _naive_dot_rounded(instr, cet: T) -> np.ndarray | None:
    """[outputs (row-major), K]: the products XLA's naive dot loop adds rounded (``dot_naive``) for the dot
    of a 1×1 convolution (:func:`xla_dot_dims`) whose output is row-major with the features last, so that
    output m·N + n is the dot's [m, n]; None when there are none or it is not such a dot."""
    dims = xla_dot_dims(instr)
    dn = instr.convolution_dimension_numbers
    if dims is None or dn.output_feature_dimension != instr.shape.rank - 1 or not instr.shape.is_default_layout:
        return None
    M, K, N = dims
    if not dot_naive.naive_loop(M, K, N):
        return None
    r = dot_naive.rounded_products(M, K, N, cet)
    return None if r is None else r.reshape(M * N, K)


def emit_exact_conv(prog, instr, lhs: BufferRef, rhs: BufferRef, out: BufferRef, epilogue=None,
                    lhs_reversed: tuple[int, ...] = ()) -> None:
    """``out`` := the convolution as XLA:CPU computes it (see the module docstring): per output element,
    the products over the window taps (row-major) and the group's input features, with taps outside the
    input multiplying 0 when :func:`xla_multiplies_padding`, skipped otherwise, summed as fused
    multiply-adds from +0 in that order, or in oneDNN's ``gemv_t`` lanes when :func:`gemv_lanes`; then
    ``epilogue`` on the element; ``lhs`` read backwards along its dimensions ``lhs_reversed`` (the operand
    of a ``reverse`` codegen did not run). Slow (a scalar loop): it runs only on special values."""
    et = instr.shape.element_type
    cet = _COMPUTE[et]
    sty = t.storage_type(cet)
    dn, window = instr.convolution_dimension_numbers, instr.window.dimensions
    lshape, rshape, oshape = lhs.shape, rhs.shape, out.shape
    kin = rshape.dimensions[dn.kernel_input_feature_dimension]
    in_sp = [lshape.dimensions[d] for d in dn.input_spatial_dimensions]
    pads = xla_multiplies_padding(instr)
    lanes = gemv_lanes(instr)
    pairs = pair_sums(instr)
    form = xla_dot_form(instr)
    row_gemv = form == "row_gemv"
    eigen_dot = xla_dot_dims(instr) if form == "eigen" else None
    kb = prog.kernel(instr.name + "_exact")
    b = kb.builder
    la, ra, oa = kb.array(lhs), kb.array(rhs), kb.array(out)
    ops = ScalarOps(b, prog.mctx)
    fma = prog.mctx.function("llvm.fma.f32" if cet is T.F32 else "llvm.fma.f64", sty, [sty, sty, sty])

    def load(arr, idx, shape):
        v = arr.load(Index(idx, shape))
        return v if shape.element_type is cet else ops.convert(shape.element_type, cet, v)
    zero = t.float_constant(sty, 0.0)
    taps = prod(w.size for w in window)
    depth = taps * kin
    work = work_items(oshape, False)
    cost = 2 * oshape.num_elements * depth
    tasks = prog.tasks_for(work, cost)
    lo, hi = (kb.lo, kb.hi) if tasks > 1 else (t.i64(0), t.i64(work))
    acc = kb.kctx.alloca(sty, "xacc")
    block = gemv_block(instr)
    acc2 = kb.kctx.alloca(sty, "xacc2") if pairs or block else None
    lane = kb.kctx.alloca(sty, "xlane", count=GEMV_LANES) if lanes or row_gemv else None

    elemental = not pads and not lanes and form is None
    # One patch: Eigen's contraction is its own gemv (n = 1), built without FMA in TF's wheel: rounded
    # products added in k order from +0 per column block (gemv_block; fuzz seeds 148000851, 172001338).
    eigen_gemv = block is not None
    # XLA's elemental loop as LLVM optimises it: the (output, tap) products it adds rounded.
    rounded = conv_hoist.rounded_taps(instr) if elemental and conv_hoist.supported(instr) else None
    if form == "chain" and host_target(prog.options) == AVX512:
        # A tiny dot is XLA's naive loop, which adds some products rounded (dot_naive; fuzz seed 312001589)
        rounded = _naive_dot_rounded(instr, cet)
    table = None
    if rounded is not None:
        table = flag_table(prog.mctx, rounded, "rounded_" + instr.name)
    row = []   # the current output's first table entry (its row-major index times the depth)

    def tap(origin, k, a):
        """fma(input, filter, ``a``) at contraction index ``k`` (tap row-major, feature innermost: Eigen's
        order); a tap outside the input multiplies 0 (``pads``) or leaves ``a``; a tap the elemental loop
        adds rounded (``rounded``, :mod:`conv_hoist`) adds its rounded product."""
        x, wv, valid = tap_operands(origin, k)
        if pads and eigen_gemv:
            return b.fadd(a, b.fmul(b.select(valid, x, zero), wv))
        if pads:
            return b.call(fma, [b.select(valid, x, zero), wv, a])
        fused = b.call(fma, [x, wv, a])
        if table is not None:
            flag = b.load(b.gep(table, [t.i64(0), b.add(row[-1], k)], inbounds=True), typ=t.I8)
            fused = b.select(b.icmp_unsigned("!=", flag, ir.Constant(t.I8, 0)), b.fadd(a, b.fmul(x, wv)), fused)
        return b.select(valid, fused, a)

    def tap_operands(origin, k):
        """(input, filter, whether the tap is inside the input) at contraction index ``k``."""
        o, sp, n_in, c_base = origin
        c = b.urem(k, t.i64(kin))
        rest = b.udiv(k, t.i64(kin))
        wi = [None] * len(window)
        for i in range(len(window) - 1, -1, -1):
            wi[i] = b.urem(rest, t.i64(window[i].size))
            rest = b.udiv(rest, t.i64(window[i].size))
        valid = ir.Constant(t.I1, 1)
        li, ri = [None] * lshape.rank, [None] * rshape.rank
        li[dn.input_batch_dimension] = n_in
        li[dn.input_feature_dimension] = b.add(c_base, c)
        ri[dn.kernel_input_feature_dimension] = c
        ri[dn.kernel_output_feature_dimension] = o
        for i, w in enumerate(window):
            p, valid = input_position(b, w, sp[i], wi[i], in_sp[i], valid)
            d = dn.input_spatial_dimensions[i]
            li[d] = b.select(valid, b.sub(t.i64(in_sp[i] - 1), p) if d in lhs_reversed else p, t.i64(0))
            ri[dn.kernel_spatial_dimensions[i]] = b.sub(t.i64(w.size - 1), wi[i]) if w.window_reversal else wi[i]
        # Out-of-range taps read element 0 (any index is then in bounds) and use 0 or nothing.
        li = [b.select(valid, x, t.i64(0)) for x in li]
        return load(la, li, lshape), load(ra, ri, rshape), valid

    def gemv_blocks(add, v_zero):
        """The one-patch sum (:func:`gemv_block`): per block of k, ``add(k, c)`` from ``v_zero`` in k order,
        each block's sum added to the result (from ``v_zero``), which is returned."""
        res = kb.kctx.alloca(v_zero.type, "xgres")
        part = kb.kctx.alloca(v_zero.type, "xgpart")
        b.store(v_zero, res)

        def one(k0, n):
            b.store(v_zero, part)
            with for_range(b, k0, b.add(k0, t.i64(n)), "xgk", reduction=True) as k:
                b.store(add(k, b.load(part, typ=v_zero.type)), part)
            b.store(b.fadd(b.load(res, typ=v_zero.type), b.load(part, typ=v_zero.type)), res)
        if depth // block:
            with for_range(b, t.i64(0), t.i64(depth // block), "xgb") as j:
                one(b.mul(j, t.i64(block)), block)
        if depth % block:
            one(t.i64(depth - depth % block), depth % block)
        return b.load(res, typ=v_zero.type)

    def lane_ptr(i):
        return b.gep(lane, [i if isinstance(i, ir.Value) else t.i64(i)], source_etype=sty)

    def add_lane_sum():
        """acc += ((l0+l1)+(l4+l5)) + ((l2+l3)+(l6+l7)): gemv_t's vhaddps, vperm2f128+vaddps, vhaddps."""
        v = [b.load(lane_ptr(i), typ=sty) for i in range(GEMV_LANES)]
        s = b.fadd(b.fadd(b.fadd(v[0], v[1]), b.fadd(v[4], v[5])), b.fadd(b.fadd(v[2], v[3]), b.fadd(v[6], v[7])))
        b.store(b.fadd(b.load(acc, typ=sty), s), acc)

    def clear_lanes():
        for i in range(GEMV_LANES):
            b.store(zero, lane_ptr(i))

    def gemv_t(origin, lo: int, hi: int):
        """acc += the products over [lo, hi) as oneDNN's gemv_t (jit_avx_gemv_t_f32_kern, FMA): 16 at a time
        into 8 lanes (k mod 8, in order), one lane sum added; then blocks of 8, 4, 2, 1 (the depth's bits),
        each rounded products in fresh lanes, summed the same way and added."""
        main = lo + (hi - lo) // (2 * GEMV_LANES) * (2 * GEMV_LANES)
        if main > lo:
            clear_lanes()
            with for_range(b, t.i64(lo), t.i64(main), "xtap", reduction=True) as k:
                p = lane_ptr(b.urem(b.sub(k, t.i64(lo)), t.i64(GEMV_LANES)))
                b.store(tap(origin, k, b.load(p, typ=sty)), p)
            add_lane_sum()
        start = main
        for width in (8, 4, 2, 1):
            if (hi - main) & width:
                clear_lanes()
                for i in range(width):
                    b.store(tap(origin, t.i64(start + i), zero), lane_ptr(i))
                add_lane_sum()
                start += width

    def fma_chain(origin, lo: int, hi: int):
        """acc := acc + the products over [lo, hi), each fused into it."""
        with for_range(b, t.i64(lo), t.i64(hi), "xchain", reduction=True) as k:
            b.store(tap(origin, k, b.load(acc, typ=sty)), acc)

    def row_gemv_sum(origin, patch):
        """acc := XLA's row-major tiled gemv of row ``patch`` (RowMajorMatrixVectorProductEmitter, 256-bit
        vectors: 8 F32 or 4 F64 lanes): lane k mod L FMAs the products over the first multiple of L; the
        lanes summed as vector_support_library's ComputeAvxOptimizedHorizontalSums (adjacent pairs,
        ``((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))``) where a tile holds as many rows as lanes (its 8-row
        tiles in F32, a last tile of 4 rows in F64), else AddReduce (halves: ``((l0+l4)+(l2+l6))+((l1+l5)+
        (l3+l7))``); plus the rest of k as one FMA chain from +0."""
        L = GEMV_LANES if cet is T.F32 else GEMV_LANES // 2
        main = depth - depth % L
        b.store(zero, acc)
        fma_chain(origin, main, depth)
        if not main:
            b.store(b.fadd(zero, b.load(acc, typ=sty)), acc)
            return
        for i in range(L):
            b.store(zero, lane_ptr(i))
        with for_range(b, t.i64(0), t.i64(main), "xtap", reduction=True) as k:
            p = lane_ptr(b.urem(k, t.i64(L)))
            b.store(tap(origin, k, b.load(p, typ=sty)), p)
        v = [b.load(lane_ptr(i), typ=sty) for i in range(L)]

        def tree(vals, adjacent):
            while len(vals) > 1:
                h = len(vals) // 2
                vals = [b.fadd(vals[2 * j], vals[2 * j + 1]) if adjacent else b.fadd(vals[j], vals[j + h])
                        for j in range(h)]
            return vals[0]
        M = patches
        full = M - M % 8   # the gemv's tiles of 8 rows (its tiling factor), then the remainder rows
        tile_rows = b.select(b.icmp_unsigned("<", patch, t.i64(full)), t.i64(8), t.i64(M % 8))
        avx = b.icmp_unsigned("==", tile_rows, t.i64(L))
        hsum = b.select(avx, tree(v, True), tree(v, False))
        b.store(b.fadd(hsum, b.load(acc, typ=sty)), acc)

    out_sp = [oshape.dimensions[d] for d in dn.output_spatial_dimensions]
    patches = oshape.num_elements // oshape.dimensions[dn.output_feature_dimension]

    def patch_index(od):
        """Eigen's column of output ``od``: (batch, spatial positions) row-major."""
        p = od[dn.output_batch_dimension]
        for d, size in zip(dn.output_spatial_dimensions, out_sp):
            p = b.add(b.mul(p, t.i64(size)), od[d])
        return p

    def body(index):
        od = index.get_dims(b)
        origin = group_origin(b, instr, lshape, od)
        if table is not None:
            linear = t.i64(0)
            for d, size in enumerate(oshape.dimensions):
                linear = b.add(b.mul(linear, t.i64(size)), od[d])
            row.append(b.mul(linear, t.i64(depth)))
        b.store(zero, acc)
        if row_gemv:
            row_gemv_sum(origin, patch_index(od))
        elif eigen_dot is not None:
            # Eigen's F64 GEMM: separately rounded products in its blocks and micro-kernel accumulators.
            M, K, N = eigen_dot
            b.store(emit_eigen_sum(kb.kctx, M, N, K, patch_index(od), origin[0],
                                   lambda k: b.fmul(*tap_operands(origin, k)[:2])), acc)
        elif pairs:
            # two FMA accumulators by k mod 2 (acc, acc2), summed, then the odd last k fused (pair_sums);
            # the last patches apart (pair_apart_rows): the same accumulators of rounded products
            def rounded(k, a):
                x, wv, valid = tap_operands(origin, k)
                return b.fadd(a, b.fmul(b.select(valid, x, zero), wv))

            def pair_sum(step):
                b.store(zero, acc2)
                with for_range(b, t.i64(0), t.i64(depth // 2), "xpair", reduction=True) as j:
                    k0 = b.mul(j, t.i64(2))
                    b.store(step(k0, b.load(acc, typ=sty)), acc)
                    b.store(step(b.add(k0, t.i64(1)), b.load(acc2, typ=sty)), acc2)
                b.store(b.fadd(b.load(acc, typ=sty), b.load(acc2, typ=sty)), acc)
                if depth % 2:
                    b.store(step(t.i64(depth - 1), b.load(acc, typ=sty)), acc)
            fused = lambda k, a: tap(origin, k, a)   # noqa: E731
            apart = pair_apart_rows(instr)
            if not apart:
                pair_sum(fused)
            else:
                with b.if_else(b.icmp_unsigned(">=", patch_index(od), t.i64(patches - apart))) as (then, otherwise):
                    with then:
                        pair_sum(rounded)
                    with otherwise:
                        pair_sum(fused)
        elif eigen_gemv:
            b.store(gemv_blocks(lambda k, c: tap(origin, k, c), zero), acc)
        elif not lanes:
            with for_range(b, t.i64(0), t.i64(depth), "xtap", reduction=True) as k:
                b.store(tap(origin, k, b.load(acc, typ=sty)), acc)
        else:
            # Eigen's depth shards and k-blocks, each block one oneDNN gemv_t call added to its shard's sum.
            # A last patch alone in its column block (N = 1) is no gemv_t: one FMA chain per k-block.
            patch = patch_index(od)
            sums = []
            for shard, cols in lanes:
                b.store(zero, acc)
                alone = b.icmp_unsigned("==", patch, t.i64(patches - 1)) if patches % cols == 1 else None
                for lo, hi in shard:
                    if alone is None:
                        gemv_t(origin, lo, hi)
                        continue
                    with b.if_else(alone) as (then, otherwise):
                        with then:
                            fma_chain(origin, lo, hi)
                        with otherwise:
                            gemv_t(origin, lo, hi)
                sums.append(b.load(acc, typ=sty))
            b.store(add_shards(b, sums), acc)
        y = b.load(acc, typ=sty)
        oa.store(index, y if et is cet else ops.convert(cet, et, y))
        if epilogue is not None:
            epilogue.store(kb, od, None)

    if not (eigen_gemv and _gemv_vectors(instr)):
        emit_loop_nest(kb.kctx, oshape, body, lo, hi, False, name="xo")
        return prog.call_kernel(kb, instr.name, "conv-exact", work, tasks, cost)
    # One patch, F32, HWIO filter: GEMV_VECTOR·GEMV_UNROLL output features per work item (a vector of that
    # width: whole cache lines of each filter row, independent chains), the last item's rest in vectors
    # of GEMV_VECTOR, then one at a time; the order per output feature is the scalar one's.
    F = oshape.dimensions[dn.output_feature_dimension]
    W = GEMV_VECTOR * GEMV_UNROLL
    items = -(-F // W)
    tasks = prog.tasks_for(items, cost)
    lo, hi = (kb.lo, kb.hi) if tasks > 1 else (t.i64(0), t.i64(items))
    pw = kb.ptr(rhs.slot)

    def out_dims(f):
        od = [t.i64(0)] * oshape.rank
        od[dn.output_feature_dimension] = f
        return od

    def features(f0, width: int) -> None:
        """Outputs [f0, f0 + width) as one <width x float> sum."""
        vty = ir.VectorType(sty, width)
        origin = group_origin(b, instr, lshape, out_dims(f0))

        def add(k, c):
            with kb.kctx.scope():
                x, _, valid = tap_operands(origin, k)
                xv = b.insert_element(ir.Constant(vty, ir.Undefined), b.select(valid, x, zero), ir.Constant(t.I32, 0))
                xv = b.shuffle_vector(xv, ir.Constant(vty, ir.Undefined), ir.Constant(ir.VectorType(t.I32, width),
                                                                                     [0] * width))
                wp = b.gep(pw, [b.add(b.mul(k, t.i64(F)), f0)], source_etype=sty)
                return b.fadd(c, b.fmul(xv, b.load(wp, typ=vty, align=4)))
        y = gemv_blocks(add, ir.Constant(vty, [0.0] * width))
        for i in range(width):
            od = out_dims(b.add(f0, t.i64(i)))
            oa.store(Index(od, oshape), b.extract_element(y, ir.Constant(t.I32, i)))
            if epilogue is not None:
                epilogue.store(kb, od, None)
    with for_range(b, lo, hi, "xgv") as item:
        with b.if_else(b.icmp_unsigned("<", item, t.i64(F // W))) as (then, otherwise):
            with then:
                features(b.mul(item, t.i64(W)), W)
            with otherwise:
                rest = F - F % W
                for j in range(F % W // GEMV_VECTOR):
                    features(t.i64(rest + j * GEMV_VECTOR), GEMV_VECTOR)
                with for_range(b, t.i64(F - F % GEMV_VECTOR), t.i64(F), "xgf") as f:
                    body(Index(out_dims(f), oshape))
    prog.call_kernel(kb, instr.name, "conv-exact", items, tasks, cost)
