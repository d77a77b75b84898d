"""Channel-wise convolutions (depthwise forward, its input backprop and its filter backprop), vectorised
along channels.

Stage: codegen (a thunk kernel for one HLO ``convolution``). Guarantee: the result equals the HLO
convolution's (the evaluator's ``convolution``); each output element sums its products in a fixed order
(reduction features, then window positions, row-major), so results do not depend on the thread count.

A depthwise convolution is a convolution with ``feature_group_count`` equal to the input features and
one output feature per group; TF's ``DepthwiseConv2dNativeBackpropFilter`` is one with
``batch_group_count`` equal to the (conv-)batch and one output feature per group. In both, every operand
is indexed by the same channel ``c``:

    out[ob, c, o…] = Σ_f Σ_w lhs[batch(ob, c), feature(f, c), o·stride + w·dilation − pad] · rhs[f, c, w]

(form ``features``: batch(ob, c) = ob, feature(f, c) = c, one f; form ``batches``: batch(ob, c) = c,
feature(f, c) = f, one ob). Making them a dense GEMM per group (one GEMM of a single column per channel)
runs at a fraction of a GFLOP/s; here a work item is one output position and a block of channels, the
accumulators for the block stay in vector registers while the window (and f) runs, and every load is a
contiguous run of channels. That needs the channel dimension to be the minor-most one of the output, the
input and the filter (NHWC / HWIO-like layouts, what TF's ops give); other layouts keep the generic path.
Window bounds are computed per item (no test per tap) unless the input is dilated (``lhs_dilate``, the
strided input backprop), where each tap is tested.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from llvmlite import ir

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.buffers import BufferRef
from tfxla_cluster.codegen.loops import for_range, major_to_minor
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape

_TYPES = (T.F32, T.F64)
ACCUMULATORS = 4   # vector accumulators per work item: a block of 4 vectors of channels


def strides(shape: Shape) -> list[int]:
    """Element strides of each logical dimension of a (dense) buffer layout."""
    out = [0] * shape.rank
    step = 1
    for d in reversed(major_to_minor(shape)):
        out[d] = step
        step *= shape.dimensions[d]
    return out


@dataclass
class ChannelwisePlan:
    """What the kernel indexes: sizes and element strides, per role."""

    C: int                  # channels
    F: int                  # reduction features (1 for the ``features`` form)
    OB: int                 # output batch (1 for the ``batches`` form)
    lhs_ob: int             # lhs stride of the output batch
    lhs_f: int              # lhs stride of the reduction feature
    rhs_f: int              # rhs stride of the reduction feature
    out_ob: int             # output stride of the batch
    out_sp: list[int]       # output spatial sizes
    in_sp: list[int]        # input spatial sizes
    lhs_sp: list[int]       # strides of the input's spatial dimensions
    rhs_sp: list[int]       # strides of the filter's spatial dimensions
    out_sp_stride: list[int]


def channelwise_plan(instr) -> ChannelwisePlan | None:
    """The plan when ``instr`` is a channel-wise convolution this kernel runs, else None."""
    if instr.opcode is not O.CONVOLUTION or instr.shape.element_type not in _TYPES:
        return None
    lhs, rhs = instr.operands
    if any(o.shape.element_type is not instr.shape.element_type for o in (lhs, rhs)):
        return None
    dn = instr.convolution_dimension_numbers
    ld, rd, od = lhs.shape.dimensions, rhs.shape.dimensions, instr.shape.dimensions
    G, BG = instr.feature_group_count, instr.batch_group_count
    C = od[dn.output_feature_dimension]
    ls, rs, os_ = strides(lhs.shape), strides(rhs.shape), strides(instr.shape)
    if C < 2 or rs[dn.kernel_output_feature_dimension] != 1 or os_[dn.output_feature_dimension] != 1:
        return None
    if G > 1 and BG == 1 and G == ld[dn.input_feature_dimension] == C and rd[dn.kernel_input_feature_dimension] == 1:
        if ls[dn.input_feature_dimension] != 1:
            return None
        F, OB = 1, od[dn.output_batch_dimension]
        lhs_ob, lhs_f, rhs_f = ls[dn.input_batch_dimension], 0, 0
    elif BG > 1 and G == 1 and BG == ld[dn.input_batch_dimension] == C and od[dn.output_batch_dimension] == 1:
        if ls[dn.input_batch_dimension] != 1:
            return None
        F, OB = ld[dn.input_feature_dimension], 1
        lhs_ob, lhs_f, rhs_f = 0, ls[dn.input_feature_dimension], rs[dn.kernel_input_feature_dimension]
    else:
        return None
    return ChannelwisePlan(
        C, F, OB, lhs_ob, lhs_f, rhs_f, os_[dn.output_batch_dimension],
        [od[d] for d in dn.output_spatial_dimensions], [ld[d] for d in dn.input_spatial_dimensions],
        [ls[d] for d in dn.input_spatial_dimensions], [rs[d] for d in dn.kernel_spatial_dimensions],
        [os_[d] for d in dn.output_spatial_dimensions])


def emit_channelwise(prog, instr, plan: ChannelwisePlan, lhs: BufferRef, rhs: BufferRef, out: BufferRef) -> None:
    """One parallel kernel: work items are (output position, channel block) pairs."""
    et = instr.shape.element_type
    sty = t.storage_type(et)
    lanes = max(1, prog.options.prefer_vector_width // (32 if et is T.F32 else 64))
    block = lanes * ACCUMULATORS
    nblk = -(-plan.C // block)
    positions = plan.OB * prod(plan.out_sp)
    items = positions * nblk
    kb = prog.kernel(instr.name)
    if items == 0:
        prog.call_kernel(kb, instr.name, "conv-channelwise", 0)
        return
    b = kb.builder
    flags = prog.options.reduction_flags
    lp, rp, op = kb.ptr(lhs.slot), kb.ptr(rhs.slot), kb.ptr(out.slot)
    window = instr.window.dimensions
    dilated = any(w.base_dilation != 1 for w in window)
    win_sizes = [w.size for w in window]
    flops = 2 * positions * plan.C * plan.F * prod(win_sizes)
    tasks = prog.tasks_for(items, flops // 2)
    lo, hi = (kb.lo, kb.hi) if tasks > 1 else (t.i64(0), t.i64(items))

    def vty(n):
        return sty if n == 1 else ir.VectorType(sty, n)

    def zero(n):
        z = t.float_constant(sty, 0.0)
        return z if n == 1 else ir.Constant(vty(n), [z] * n)

    def load(ptr, off, n):
        return b.load(b.gep(ptr, [off], source_etype=sty), typ=vty(n), align=8 if et is T.F64 else 4)

    with for_range(b, lo, hi, "cw") as item:
        pos, blk = b.udiv(item, t.i64(nblk)), b.urem(item, t.i64(nblk))
        c0 = b.mul(blk, t.i64(block))
        # Output position → (ob, spatial…), row-major.
        rem, osp = pos, [None] * len(plan.out_sp)
        for i in range(len(plan.out_sp) - 1, -1, -1):
            osp[i] = b.urem(rem, t.i64(plan.out_sp[i]))
            rem = b.udiv(rem, t.i64(plan.out_sp[i]))
        ob = rem
        out_base = b.mul(ob, t.i64(plan.out_ob))
        for i, x in enumerate(osp):
            out_base = b.add(out_base, b.mul(x, t.i64(plan.out_sp_stride[i])))
        lhs_base0 = b.mul(ob, t.i64(plan.lhs_ob))
        # Window range per spatial dim: taps whose input position is inside (undilated input).
        ranges = []
        for i, wd in enumerate(window):
            start = b.sub(b.mul(osp[i], t.i64(wd.stride)), t.i64(wd.padding_low))   # position of tap 0
            if dilated:
                ranges.append((start, t.i64(0), t.i64(wd.size)))
                continue
            d = t.i64(wd.window_dilation)
            neg = b.sub(t.i64(0), start)    # first tap with start + w·d ≥ 0
            wlo = b.select(b.icmp_signed("<=", neg, t.i64(0)), t.i64(0),
                           b.sdiv(b.add(neg, t.i64(wd.window_dilation - 1)), d))
            last = b.sub(t.i64(plan.in_sp[i] - 1), start)   # last tap with start + w·d < in
            whi = b.select(b.icmp_signed("<", last, t.i64(0)), t.i64(0), b.add(b.sdiv(last, d), t.i64(1)))
            whi = b.select(b.icmp_signed(">", whi, t.i64(wd.size)), t.i64(wd.size), whi)
            wlo = b.select(b.icmp_signed(">", wlo, whi), whi, wlo)
            ranges.append((start, wlo, whi))

        def reduce_chunks(chunks):
            """acc[k] (lanes n_k, channels from offset c_k) := Σ_f Σ_w lhs·rhs; store into out."""
            accs = [kb.kctx.alloca(vty(n), "cwacc") for _, n in chunks]
            for acc, (_, n) in zip(accs, chunks):
                b.store(zero(n), acc)
            with for_range(b, 0, plan.F, "cwf") as f:
                lbase = b.add(lhs_base0, b.mul(f, t.i64(plan.lhs_f)))
                rbase = b.mul(f, t.i64(plan.rhs_f))
                taps(0, lbase, rbase, accs, chunks)
            for acc, (c, n) in zip(accs, chunks):
                b.store(b.load(acc, typ=vty(n)), b.gep(op, [b.add(out_base, c)], source_etype=sty),
                        align=8 if et is T.F64 else 4)

        def taps(i, lbase, rbase, accs, chunks):
            if i == len(window):
                for acc, (c, n) in zip(accs, chunks):
                    x = load(lp, b.add(lbase, c), n)
                    w = load(rp, b.add(rbase, c), n)
                    b.store(b.fadd(b.load(acc, typ=vty(n)), b.fmul(x, w, flags=flags), flags=flags), acc)
                return
            wd = window[i]
            start, wlo, whi = ranges[i]
            with for_range(b, wlo, whi, f"cww{i}") as w:
                p = b.add(start, b.mul(w, t.i64(wd.window_dilation)))
                wk = b.sub(t.i64(wd.size - 1), w) if wd.window_reversal else w
                rnext = b.add(rbase, b.mul(wk, t.i64(plan.rhs_sp[i])))
                if dilated and wd.base_dilation != 1:
                    bd = t.i64(wd.base_dilation)
                    ok = b.and_(b.icmp_signed(">=", p, t.i64(0)), b.icmp_signed("==", b.srem(p, bd), t.i64(0)))
                    p = b.sdiv(p, bd)
                    ok = b.and_(ok, b.icmp_signed("<", p, t.i64(plan.in_sp[i])))
                elif dilated:
                    ok = b.icmp_unsigned("<", p, t.i64(plan.in_sp[i]))
                else:
                    ok = None
                lnext = b.add(lbase, b.mul(p, t.i64(plan.lhs_sp[i])))
                if ok is None:
                    taps(i + 1, lnext, rnext, accs, chunks)
                else:
                    fn = b.block.function
                    then, done = fn.append_basic_block("cw.tap"), fn.append_basic_block("cw.next")
                    b.cbranch(ok, then, done)
                    b.position_at_end(then)
                    taps(i + 1, lnext, rnext, accs, chunks)
                    b.branch(done)
                    b.position_at_end(done)

        full = b.icmp_signed("<=", b.add(c0, t.i64(block)), t.i64(plan.C))
        fn = b.block.function
        fast, slow, done = (fn.append_basic_block(n) for n in ("cw.full", "cw.part", "cw.done"))
        b.cbranch(full, fast, slow)
        b.position_at_end(fast)
        reduce_chunks([(b.add(c0, t.i64(k * lanes)), lanes) for k in range(ACCUMULATORS)])
        b.branch(done)
        b.position_at_end(slow)
        # The last, partial block: whole vectors, then single channels.
        cend = t.i64(plan.C)
        nvec = b.udiv(b.sub(cend, c0), t.i64(lanes))
        with for_range(b, 0, nvec, "cwv") as v:
            reduce_chunks([(b.add(c0, b.mul(v, t.i64(lanes))), lanes)])
        with for_range(b, b.add(c0, b.mul(nvec, t.i64(lanes))), cend, "cws") as c:
            reduce_chunks([(c, 1)])
        b.branch(done)
        b.position_at_end(done)
    prog.call_kernel(kb, instr.name, "conv-channelwise", items, tasks, flops // 2)
