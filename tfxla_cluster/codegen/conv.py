"""Convolution kernels: channel-wise ones (depthwise forward, its input and filter backprops) vectorised
along channels, and dense ones as GEMMs over cache-sized blocks of im2col patches.

Stage: codegen (a thunk kernel for one HLO ``convolution``; ``kernels.py`` asks :func:`channelwise_plan`,
then :func:`blocked_plan`, then falls back to ``gemm.py``'s whole-im2col GEMM or the elemental loop).
Guarantee: the result equals the HLO convolution's (the evaluator's ``convolution``) up to the summation
order; the channel-wise kernel sums each output element in a fixed order (reduction features, then window
positions, row-major) and the blocked one in GEMM-block order, neither depending on the thread count.

Channel-wise:

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
from tfxla_cluster.codegen.loops import for_range, loop_hints, major_to_minor, strides
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape

_TYPES = (T.F32, T.F64)
ACCUMULATORS = 4         # vector accumulators per work item: a block of 4 vectors of channels
WIDE_ACCUMULATORS = 12   # ... when each item streams a large window (filter backprop): fewer passes
WIDE_MAX_POSITIONS = 64  # output positions (the filter's taps) up to which the backprop form is assumed


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


def _ceil_div(a: int, d: int) -> int:
    return -(-a // d)


def _carry_range(b: ir.IRBuilder, start, stop, name: str, vals: list, body) -> list:
    """``for (i = start; i < stop; ++i) vals = body(i, vals)`` with ``vals`` (the accumulators) in phis,
    not stack slots: no alloca/load/store for SROA to clean up. Static bounds (ints) that make one trip
    or none emit no loop. Returns the values after the loop."""
    if isinstance(start, int) and isinstance(stop, int):
        if stop <= start:
            return vals
        if stop - start == 1:
            return body(t.i64(start), vals)
    start = t.i64(start) if isinstance(start, int) else start
    stop = t.i64(stop) if isinstance(stop, int) else stop
    pre = b.block
    fn = pre.function
    header, body_bb, done = (fn.append_basic_block(f"{name}.{s}") for s in ("header", "body", "done"))
    b.branch(header)
    b.position_at_end(header)
    i = b.phi(t.I64, name=name)
    i.add_incoming(start, pre)
    phis = []
    for v in vals:
        p = b.phi(v.type)
        p.add_incoming(v, pre)
        phis.append(p)
    b.cbranch(b.icmp_signed("<", i, stop), body_bb, done)
    b.position_at_end(body_bb)
    new = body(i, phis)
    end = b.block
    i.add_incoming(b.add(i, t.i64(1), flags=["nsw"]), end)
    for p, v in zip(phis, new):
        p.add_incoming(v, end)
    latch = b.branch(header)
    if isinstance(start, ir.Constant) and isinstance(stop, ir.Constant):
        # A static trip count invites O3 (small modules) to unroll the accumulators' bodies fully: more
        # LLVM time for loops of a few taps that run as fast rolled (measured on EfficientNetB0).
        latch.set_metadata("llvm.loop", loop_hints(b.module, ("llvm.loop.unroll.disable",)))
    b.position_at_end(done)
    return phis


def _carry_if(b: ir.IRBuilder, cond, name: str, vals: list, body) -> list:
    """``if (cond) vals = body(vals)``, the values merged in phis."""
    pre = b.block
    fn = pre.function
    then, done = fn.append_basic_block(f"{name}.tap"), fn.append_basic_block(f"{name}.next")
    b.cbranch(cond, then, done)
    b.position_at_end(then)
    new = body(vals)
    end = b.block
    b.branch(done)
    b.position_at_end(done)
    merged = []
    for v, n in zip(vals, new):
        p = b.phi(v.type)
        p.add_incoming(v, pre)
        p.add_incoming(n, end)
        merged.append(p)
    return merged


def _int(x) -> int | None:
    """The value of an i64 constant, else None."""
    return x.constant if isinstance(x, ir.Constant) and isinstance(x.constant, int) else None


def _add(b: ir.IRBuilder, x, c: int):
    """``x + c`` for a Python int ``c`` (x an i64 value); folded here for a constant ``x`` or ``c`` = 0."""
    if c == 0:
        return x
    k = _int(x)
    return t.i64(k + c) if k is not None else b.add(x, t.i64(c))


def _mul(b: ir.IRBuilder, x, c: int):
    """``x · c`` for a Python int ``c`` (x an i64 value); folded here for a constant ``x`` or ``c`` = 1."""
    k = _int(x)
    if k is not None:
        return t.i64(k * c)
    return x if c == 1 else b.mul(x, t.i64(c))


def _addv(b: ir.IRBuilder, x, y):
    """``x + y`` for i64 values, folded here when either is a constant."""
    k = _int(y)
    if k is not None:
        return _add(b, x, k)
    k = _int(x)
    return _add(b, y, k) if k is not None else b.add(x, y)


def _opaque(b: ir.IRBuilder, x):
    """``freeze x``: the same value, but opaque to scalar evolution. A tap loop's row offsets frozen
    leave loop strength reduction (half of LLVM's time on a tap-group kernel, measured) nothing to
    rewrite: each load's address stays base + constant, what x86 addressing takes anyway. Constants
    pass through."""
    if isinstance(x, ir.Constant):
        return x
    instr = ir.Instruction(b.block, x.type, "freeze", [x])
    b._insert(instr)   # llvmlite's builder has no freeze
    return instr


def _window_range(b: ir.IRBuilder, o, wd, n_in: int, n_out: int, dilated: bool):
    """``(start, wlo, whi)`` of one window dimension at output position ``o`` (an i64 value in
    ``[0, n_out)``): ``start`` the input position of tap 0 (an i64 value), ``[wlo, whi)`` the taps whose
    input position ``start + w·dilation`` is inside the input (a dilated input: every tap). Bounds that
    are the same for every output position are Python ints, and clamps that never bite are not emitted
    (decided here over all ``n_out`` positions): LLVM would fold them, at a price. An empty range may
    come out with ``whi < wlo`` (a loop over it runs no trip)."""
    s, p, d, k = wd.stride, wd.padding_low, wd.window_dilation, wd.size
    start = _add(b, _mul(b, o, s), -p)
    if dilated:
        return start, 0, k
    los = [_ceil_div(p - x * s, d) for x in range(n_out)]            # first tap inside, unclamped
    his = [_ceil_div(n_in + p - x * s, d) for x in range(n_out)]     # one past the last tap inside
    if all(v <= 0 for v in los) or len(set(los)) == 1:
        wlo = max(0, los[0]) if all(v == los[0] for v in los) else 0
    else:
        # ceil((p − o·s) / d); sdiv truncates, so a negative numerator gives ≤ 0, clamped to 0 below
        wlo = b.sdiv(b.sub(t.i64(p + d - 1), _mul(b, o, s)), t.i64(d)) if d != 1 else b.sub(t.i64(p), _mul(b, o, s))
        if not all(v >= 0 for v in los):
            wlo = b.select(b.icmp_signed("<", wlo, t.i64(0)), t.i64(0), wlo)
    if all(v >= k for v in his) or len(set(his)) == 1:
        whi = k if all(v >= k for v in his) else his[0]   # ≤ 0: no tap (whi ≤ wlo)
    else:
        # a numerator ≤ 0 gives ≤ 0: no tap (whi ≤ wlo), as wanted
        whi = b.sdiv(b.sub(t.i64(n_in + p + d - 1), _mul(b, o, s)), t.i64(d)) if d != 1 else \
            b.sub(t.i64(n_in + p), _mul(b, o, s))
        if not all(v <= k for v in his):
            whi = b.select(b.icmp_signed(">", whi, t.i64(k)), t.i64(k), whi)
    return start, wlo, whi


def emit_channelwise(prog, instr, plan: ChannelwisePlan, lhs: BufferRef, rhs: BufferRef, out: BufferRef,
                     epilogue=None) -> None:
    """One parallel kernel: work items are (output position, channel block) pairs. ``epilogue`` (an
    :class:`~tfxla_cluster.codegen.kernels.loop.Epilogue`, ``features`` form only) then rewrites each
    item's channels in place while they are in cache (the fused bias / scale / activation)."""
    assert epilogue is None or plan.F == 1
    window = instr.window.dimensions
    if epilogue is None and plan.OB * prod(plan.out_sp) <= WIDE_MAX_POSITIONS and \
            1 < plan.out_sp[-1] <= TAP_GROUP_MAX and all(w.base_dilation == 1 for w in window):
        return _emit_tap_groups(prog, instr, plan, lhs, rhs, out)
    et = instr.shape.element_type
    sty = t.storage_type(et)
    align = 8 if et is T.F64 else 4
    lanes = max(1, prog.options.prefer_vector_width // (32 if et is T.F32 else 64))
    # The filter-backprop form streams the whole window per item: wide blocks make fewer passes over it.
    accumulators = WIDE_ACCUMULATORS if plan.OB * prod(plan.out_sp) <= WIDE_MAX_POSITIONS else ACCUMULATORS
    accumulators = max(1, min(accumulators, -(-plan.C // lanes)))
    block = lanes * accumulators
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
    dn = instr.convolution_dimension_numbers
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
        return b.load(b.gep(ptr, [off], source_etype=sty), typ=vty(n), align=align)

    with for_range(b, lo, hi, "cw") as item:
        pos, blk = (item, t.i64(0)) if nblk == 1 else (b.udiv(item, t.i64(nblk)), b.urem(item, t.i64(nblk)))
        c0 = _mul(b, blk, block)
        # Output position → (ob, spatial…), row-major; a size-1 dimension is position 0.
        rem, osp = pos, [None] * len(plan.out_sp)
        for i in range(len(plan.out_sp) - 1, -1, -1):
            if plan.out_sp[i] == 1:
                osp[i] = t.i64(0)
                continue
            osp[i] = b.urem(rem, t.i64(plan.out_sp[i]))
            rem = b.udiv(rem, t.i64(plan.out_sp[i]))
        ob = rem if plan.OB > 1 else t.i64(0)
        # Channel offsets below are Python ints from c0, which every base includes.
        out_base = c0
        if plan.OB > 1:
            out_base = _addv(b, out_base, _mul(b, ob, plan.out_ob))
        for i, x in enumerate(osp):
            if plan.out_sp[i] > 1:
                out_base = _addv(b, out_base, _mul(b, x, plan.out_sp_stride[i]))
        lhs_base0 = c0 if plan.OB == 1 or plan.lhs_ob == 0 else _addv(b, c0, _mul(b, ob, plan.lhs_ob))
        # Window range per spatial dim: taps whose input position is inside (undilated input).
        ranges = [_window_range(b, osp[i], wd, plan.in_sp[i], plan.out_sp[i], dilated)
                  for i, wd in enumerate(window)]

        def reduce_chunks(chunks):
            """acc[k] (lanes n_k, channels from offset c_k) := Σ_f Σ_w lhs·rhs; store into out."""
            def feature(f, accs):
                if plan.F == 1:
                    return taps(0, lhs_base0, c0, accs, chunks)
                return taps(0, _addv(b, lhs_base0, _mul(b, f, plan.lhs_f)), _addv(b, c0, _mul(b, f, plan.rhs_f)),
                            accs, chunks)
            accs = _carry_range(b, 0, plan.F, "cwf", [zero(n) for _, n in chunks], feature)
            for acc, (c, n) in zip(accs, chunks):
                b.store(acc, b.gep(op, [_add(b, out_base, c)], source_etype=sty), align=align)
            if epilogue is not None:
                count = sum(n for _, n in chunks)
                with for_range(b, 0, count, "cwe") as j:
                    ch = b.add(c0, j)
                    dims = [None] * instr.shape.rank
                    dims[dn.output_batch_dimension] = ob
                    dims[dn.output_feature_dimension] = ch
                    for d, x in zip(dn.output_spatial_dimensions, osp):
                        dims[d] = x
                    epilogue.store(kb, dims, b.add(out_base, j))

        def taps(i, lbase, rbase, accs, chunks):
            if i == len(window):
                new = []
                for acc, (c, n) in zip(accs, chunks):
                    x = load(lp, _add(b, lbase, c), n)
                    w = load(rp, _add(b, rbase, c), n)
                    new.append(b.fadd(acc, b.fmul(x, w, flags=flags), flags=flags))
                return new
            wd = window[i]
            start, wlo, whi = ranges[i]

            def tap(w, accs):
                wk = _add(b, _mul(b, w, -1), wd.size - 1) if wd.window_reversal else w
                rnext = _addv(b, rbase, _mul(b, wk, plan.rhs_sp[i]))
                p = _addv(b, start, _mul(b, w, wd.window_dilation))
                if dilated and wd.base_dilation != 1:
                    bd = t.i64(wd.base_dilation)
                    ok = b.and_(b.icmp_signed(">=", p, t.i64(0)), b.icmp_signed("==", b.srem(p, bd), t.i64(0)))
                    p = b.sdiv(p, bd)
                    ok = b.and_(ok, b.icmp_signed("<", p, t.i64(plan.in_sp[i])))
                elif dilated:
                    ok = b.icmp_unsigned("<", p, t.i64(plan.in_sp[i]))
                else:
                    ok = None
                lnext = _addv(b, lbase, _mul(b, p, plan.lhs_sp[i]))
                lnext, rnext = _opaque(b, lnext), _opaque(b, rnext)
                if ok is None:
                    return taps(i + 1, lnext, rnext, accs, chunks)
                return _carry_if(b, ok, "cw", accs, lambda accs: taps(i + 1, lnext, rnext, accs, chunks))
            return _carry_range(b, wlo, whi, f"cww{i}", accs, tap)

        # The last block's make-up is known: its whole vectors and single channels in the same one pass.
        last = plan.C - (nblk - 1) * block
        last_chunks = [(k * lanes, lanes) for k in range(last // lanes)] + \
            [(last // lanes * lanes + j, 1) for j in range(last % lanes)]
        if last == block:
            reduce_chunks([(k * lanes, lanes) for k in range(accumulators)])
        else:
            fn = b.block.function
            fast, slow, done = (fn.append_basic_block(n) for n in ("cw.full", "cw.last", "cw.done"))
            b.cbranch(b.icmp_unsigned("<", blk, t.i64(nblk - 1)), fast, slow)
            b.position_at_end(fast)
            reduce_chunks([(k * lanes, lanes) for k in range(accumulators)])
            b.branch(done)
            b.position_at_end(slow)
            reduce_chunks(last_chunks)
            b.branch(done)
            b.position_at_end(done)
    prog.call_kernel(kb, instr.name, "conv-channelwise", items, tasks, flops // 2)


TAP_GROUP_MAX = 8          # output positions (filter taps) along the last dimension grouped in one item
TAP_GROUP_REGISTERS = 24   # vector accumulators of a tap group (taps x vectors of channels)


def _emit_tap_groups(prog, instr, plan: ChannelwisePlan, lhs: BufferRef, rhs: BufferRef, out: BufferRef) -> None:
    """The filter-backprop form (few output positions: the filter's taps, a big window: the image) with
    the taps along the last dimension grouped: a work item is (outer output position, channel block) and
    keeps ``taps × vectors`` accumulators, so each ``rhs`` vector (the output gradient) is loaded once
    per group instead of once per tap and the input row once per group, not per tap. The last
    dimension's window positions split (at emission time: its bounds are static) into runs where the
    same taps of the group are inside the input; each run reads those taps only, with no test. Each
    output element sums in the order of :func:`emit_channelwise` (features, then window positions
    row-major): the same bits for whole vectors of channels (a tail of single channels is as LLVM's
    reassociating vectoriser arranges its sums)."""
    et = instr.shape.element_type
    sty = t.storage_type(et)
    align = 8 if et is T.F64 else 4
    lanes = max(1, prog.options.prefer_vector_width // (32 if et is T.F32 else 64))
    G = plan.out_sp[-1]
    nvec = max(1, min(TAP_GROUP_REGISTERS // G, -(-plan.C // lanes)))
    block = lanes * nvec
    nblk = -(-plan.C // block)
    outer = plan.OB * prod(plan.out_sp[:-1])
    items = outer * nblk
    kb = prog.kernel(instr.name)
    b = kb.builder
    flags = prog.options.reduction_flags
    lp, rp, op = kb.ptr(lhs.slot), kb.ptr(rhs.slot), kb.ptr(out.slot)
    window = instr.window.dimensions
    flops = 2 * plan.OB * prod(plan.out_sp) * plan.C * plan.F * prod(w.size for w in window)
    tasks = prog.tasks_for(items, flops // 2)
    lo, hi = (kb.lo, kb.hi) if tasks > 1 else (t.i64(0), t.i64(items))
    nd = len(window)
    last = window[-1]
    # Tap j of the group reads input position starts[j] + w·dilation at window position w, inside for
    # w in [lims[j][0], lims[j][1]); between consecutive bounds the set of taps inside is fixed: a run.
    starts = [j * last.stride - last.padding_low for j in range(G)]
    lims = [(max(0, _ceil_div(-s, last.window_dilation)),
             min(last.size, _ceil_div(plan.in_sp[-1] - s, last.window_dilation))) for s in starts]
    cuts = sorted({v for lim in lims for v in lim if lim[0] < lim[1]})
    runs = [(a, z, [j for j, (l, h) in enumerate(lims) if l <= a and z <= h]) for a, z in zip(cuts, cuts[1:])]
    runs = [r for r in runs if r[2]]

    def vty(n):
        return sty if n == 1 else ir.VectorType(sty, n)

    def load(ptr, off, n):
        return b.load(b.gep(ptr, [off], source_etype=sty), typ=vty(n), align=align)

    with for_range(b, lo, hi, "tg") as item:
        pos, blk = (item, t.i64(0)) if nblk == 1 else (b.udiv(item, t.i64(nblk)), b.urem(item, t.i64(nblk)))
        c0 = _mul(b, blk, block)
        rem, osp = pos, [None] * nd
        for i in range(nd - 2, -1, -1):
            if plan.out_sp[i] == 1:
                osp[i] = t.i64(0)
                continue
            osp[i] = b.urem(rem, t.i64(plan.out_sp[i]))
            rem = b.udiv(rem, t.i64(plan.out_sp[i]))
        ob = rem if plan.OB > 1 else t.i64(0)
        # Channel offsets below are Python ints from c0, which every base includes.
        out_base = c0 if plan.OB == 1 else _addv(b, c0, _mul(b, ob, plan.out_ob))
        for i in range(nd - 1):
            if plan.out_sp[i] > 1:
                out_base = _addv(b, out_base, _mul(b, osp[i], plan.out_sp_stride[i]))
        lhs_base0 = c0 if plan.OB == 1 or plan.lhs_ob == 0 else _addv(b, c0, _mul(b, ob, plan.lhs_ob))
        ranges = [_window_range(b, osp[i], window[i], plan.in_sp[i], plan.out_sp[i], False) for i in range(nd - 1)]

        def reduce_chunks(chunks):
            z = t.float_constant(sty, 0.0)
            zeros = [z if n == 1 else ir.Constant(vty(n), [z] * n) for _, n in chunks]
            nc = len(chunks)

            def run(taps, lbase, rbase):
                """One window position of the last dimension for the taps in ``taps``: accs → accs."""
                def step(w, accs):
                    wk = _add(b, _mul(b, w, -1), last.size - 1) if last.window_reversal else w
                    rnext = _addv(b, rbase, _mul(b, wk, plan.rhs_sp[-1]))
                    lw = _addv(b, lbase, _mul(b, w, last.window_dilation * plan.lhs_sp[-1]))
                    rnext, lw = _opaque(b, rnext), _opaque(b, lw)
                    rv = [load(rp, _add(b, rnext, c), n) for c, n in chunks]
                    new = list(accs)
                    for j in taps:
                        for k, ((c, n), r) in enumerate(zip(chunks, rv)):
                            x = load(lp, _add(b, lw, starts[j] * plan.lhs_sp[-1] + c), n)
                            new[j * nc + k] = b.fadd(accs[j * nc + k], b.fmul(x, r, flags=flags), flags=flags)
                    return new
                return step

            def dims(i, lbase, rbase, accs):
                if i == nd - 1:
                    for a, z_, taps in runs:
                        accs = _carry_range(b, a, z_, f"tgw{i}", accs, run(taps, lbase, rbase))
                    return accs
                wd = window[i]
                start, wlo, whi = ranges[i]

                def step(w, accs):
                    wk = _add(b, _mul(b, w, -1), wd.size - 1) if wd.window_reversal else w
                    p = _addv(b, start, _mul(b, w, wd.window_dilation))
                    return dims(i + 1, _opaque(b, _addv(b, lbase, _mul(b, p, plan.lhs_sp[i]))),
                                _opaque(b, _addv(b, rbase, _mul(b, wk, plan.rhs_sp[i]))), accs)
                return _carry_range(b, wlo, whi, f"tgw{i}", accs, step)

            def feature(f, accs):
                if plan.F == 1:
                    return dims(0, lhs_base0, c0, accs)
                return dims(0, _addv(b, lhs_base0, _mul(b, f, plan.lhs_f)), _addv(b, c0, _mul(b, f, plan.rhs_f)), accs)
            accs = _carry_range(b, 0, plan.F, "tgf", zeros * G, feature)
            for j in range(G):
                for k, (c, n) in enumerate(chunks):
                    off = _add(b, out_base, j * plan.out_sp_stride[-1] + c)
                    b.store(accs[j * nc + k], b.gep(op, [off], source_etype=sty), align=align)

        tail = plan.C - (nblk - 1) * block
        full = [(k * lanes, lanes) for k in range(nvec)]
        if tail == block:
            reduce_chunks(full)
        else:
            fn = b.block.function
            fast, slow, done = (fn.append_basic_block(n) for n in ("tg.full", "tg.last", "tg.done"))
            b.cbranch(b.icmp_unsigned("<", blk, t.i64(nblk - 1)), fast, slow)
            b.position_at_end(fast)
            reduce_chunks(full)
            b.branch(done)
            b.position_at_end(slow)
            reduce_chunks([(k * lanes, lanes) for k in range(tail // lanes)] +
                          [(tail // lanes * lanes + j, 1) for j in range(tail % lanes)])
            b.branch(done)
            b.position_at_end(done)
    prog.call_kernel(kb, instr.name, "conv-channelwise", items, tasks, flops // 2)


# ---------------------------------------------------------------- dense convolutions: blocked im2col GEMM
# A whole im2col matrix is Kh·Kw times the input (7 MB for ResNet's 56×56×64 3×3 layer): written to memory
# and read back it costs a third of the GEMM. Here each thread fills a block of it on its stack (rows of
# contiguous feature runs, or whole window rows), multiplies it with OpenBLAS while it is in L2 and moves
# on; the filter and, for 1×1 convolutions, the input are read in place. Parallel over (group, row block,
# column block) items; one OpenBLAS thread per item (``tfxla_blas_threads_local``).
BLOCK_ELEMENTS = 1 << 16   # a thread's patch block (256 KiB of f32, on its stack): stays in L2 from fill to GEMM
ROW_TARGET = 128           # GEMM rows per call
COL_BLOCK = 64             # smallest column block of a GEMM call of its own (when rows are too few)
TAPS_MIN_FEATURES = 64     # per-tap GEMMs (K = features) for reversed filters: only when K is long enough
TAPS_MIN_ELEMENTS = 1 << 16    # ... and the filter big enough that copying it every call would show


@dataclass
class BlockedPlan:
    """A dense convolution as GEMMs over cache-sized blocks of im2col patches.

    ``mode`` "rows": the input's feature dimension is its minor-most one (NHWC forward and input backprop):
    a block is ``mb`` GEMM rows (batch, output position) × ``kb`` contraction columns (window position,
    feature), each a contiguous run of features. ``mode`` "cols": the input's batch dimension is minor-most
    (the filter backprop, whose conv-batch is the input's channels): a block is ``kb`` contraction rows
    (feature, window position) × whole output positions of ``B`` contiguous batch entries, and the GEMM
    takes it transposed. The filter matrix is read in place when its memory order is the contraction order
    (HWIO forward, the filter backprop's out_backprop), else copied once per call."""

    mode: str
    G: int
    B: int                  # conv batch
    Cg: int                 # features per group (contracted)
    Og: int
    O: int
    out_sp: list[int]
    in_sp: list[int]
    win: list[int]
    lhs_b: int
    lhs_f: int
    lhs_sp: list[int]
    kmat_direct: bool       # the filter is already the [K, O] matrix in contraction order
    kmat_ld: int
    out_direct: bool        # the GEMM's row-major result is the output's memory
    M: int
    K: int
    lhs_direct: bool = False    # 1×1 window, unit strides, [batch, spatial…, feature] input: A is the input
    fast_last: bool = False     # rows mode: taps along the last window dim read one contiguous run
    kmat_taps: bool = False     # filter [spatial…, out, in] (the input backprop's): one GEMM per tap, B^T
    rhs_sp: list[int] | None = None
    phase: bool = False         # 1×1 window over a dilated input (strided 1×1 input backprop): by output phase
    single: "SingleTap | None" = None   # one output position, one useful tap: a plain GEMM (see useful_taps)


@dataclass
class SingleTap:
    """A convolution with one output position whose window meets the input at one tap only (a 3×3 SAME
    convolution or its input backprop over a 1×1 image: ResNet's, DenseNet's, InceptionV3's last stages at
    small sizes): ``out[b, :] = lhs[b, at input position] · filter[tap]``, one GEMM whose A rows are the
    input's batch entries (stride ``lda``) and whose B is the tap's [in, out] block read in place."""

    a_off: int      # element offset of the input position within a batch entry
    lda: int
    b_off: int      # element offset of the tap's block in the filter
    ldb: int
    b_trans: bool   # the block is stored [out, in]
    ldc: int


def _meets(wd, o: int, w: int, n_in: int) -> bool:
    """Whether window position ``w`` at output position ``o`` reads a real input element (not padding,
    not between dilated elements)."""
    p = o * wd.stride + w * wd.window_dilation - wd.padding_low
    return p >= 0 and p % wd.base_dilation == 0 and p // wd.base_dilation < n_in


def _row_major(sizes: list[int]):
    """Every multi-index over ``sizes``, row-major."""
    idx = [0] * len(sizes)
    for _ in range(prod(sizes)):
        yield tuple(idx)
        for i in range(len(sizes) - 1, -1, -1):
            idx[i] += 1
            if idx[i] < sizes[i]:
                break
            idx[i] = 0


def useful_taps(window, in_sp: list[int], out_sp: list[int]) -> list[list[int]]:
    """Per window dimension, the taps that meet a real (not padding, not between dilated) input element
    at some output position: the others contribute nothing to any output."""
    out = []
    for wd, n_in, n_out in zip(window, in_sp, out_sp):
        taps = []
        for w in range(wd.size):
            if any(_meets(wd, o, w, n_in) for o in range(n_out)):
                taps.append(w)
        out.append(taps)
    return out


def _single_tap(instr, window, in_sp, out_sp, ls, rs, os_) -> SingleTap | None:
    """The :class:`SingleTap` form of ``instr`` (one group, channels minor in input and output), or None."""
    dn = instr.convolution_dimension_numbers
    if instr.feature_group_count != 1 or any(o != 1 for o in out_sp) or prod(w.size for w in window) == 1:
        return None
    if ls[dn.input_feature_dimension] != 1 or os_[dn.output_feature_dimension] != 1:
        return None
    taps = useful_taps(window, in_sp, out_sp)
    if any(len(ts) != 1 for ts in taps):
        return None
    a_off = b_off = 0
    for i, (wd, (w,)) in enumerate(zip(window, taps)):
        a_off += (w * wd.window_dilation - wd.padding_low) // wd.base_dilation * ls[dn.input_spatial_dimensions[i]]
        b_off += (wd.size - 1 - w if wd.window_reversal else w) * rs[dn.kernel_spatial_dimensions[i]]
    kin, kout = rs[dn.kernel_input_feature_dimension], rs[dn.kernel_output_feature_dimension]
    if kout == 1:
        ldb, trans = kin, False
    elif kin == 1:
        ldb, trans = kout, True
    else:
        return None
    K, O_ = instr.operands[0].shape.dimensions[dn.input_feature_dimension], instr.shape.dimensions[dn.output_feature_dimension]
    if ldb < (K if trans else O_):
        return None
    return SingleTap(a_off, ls[dn.input_batch_dimension], b_off, ldb, trans, os_[dn.output_batch_dimension])


def blocked_plan(instr, options) -> BlockedPlan | None:
    from tfxla_cluster.codegen.native_runtime import blas_available
    if instr.opcode is not O.CONVOLUTION or instr.shape.element_type not in _TYPES or instr.batch_group_count != 1:
        return None
    if not (options.use_blas and blas_available()):
        return None
    lhs, rhs = instr.operands
    if any(o.shape.element_type is not instr.shape.element_type for o in (lhs, rhs)):
        return None
    dn, window = instr.convolution_dimension_numbers, instr.window.dimensions
    ld, od = lhs.shape.dimensions, instr.shape.dimensions
    ls, rs = strides(lhs.shape), strides(rhs.shape)
    G = instr.feature_group_count
    B, C, O_ = ld[dn.input_batch_dimension], ld[dn.input_feature_dimension], od[dn.output_feature_dimension]
    Cg, Og = C // G, O_ // G
    out_sp = [od[d] for d in dn.output_spatial_dimensions]
    win = [w.size for w in window]
    M, K = B * prod(out_sp), prod(win) * Cg
    if M * K * Og < options.gemm_min_flops or instr.shape.num_elements == 0 or K == 0:
        return None
    ksp = list(dn.kernel_spatial_dimensions)
    kin, kout = dn.kernel_input_feature_dimension, dn.kernel_output_feature_dimension
    reversed_ = any(w.window_reversal for w in window)
    rows_ok = ls[dn.input_feature_dimension] == 1
    cols_ok = ls[dn.input_batch_dimension] == 1 and G == 1
    in_sp = [ld[d] for d in dn.input_spatial_dimensions]
    single = _single_tap(instr, window, in_sp, out_sp, ls, rs, strides(instr.shape))
    if single is not None:
        return BlockedPlan("rows", G, B, Cg, Og, O_, out_sp, in_sp, win, ls[dn.input_batch_dimension],
                           ls[dn.input_feature_dimension], [ls[d] for d in dn.input_spatial_dimensions], False, Og,
                           True, M, K, single=single)
    if rows_ok or (Cg == 1 and not cols_ok):
        mode = "rows"
        # K = (window…, feature): the filter's memory order must be spatial…, in, out (HWIO).
        kmat_direct = not reversed_ and major_to_minor(rhs.shape) == ksp + [kin, kout]
        out_order = [dn.output_batch_dimension] + list(dn.output_spatial_dimensions) + [dn.output_feature_dimension]
    elif cols_ok:
        mode = "cols"
        # K = (feature, window…): the filter's memory order must be in, spatial…, out.
        kmat_direct = not reversed_ and major_to_minor(rhs.shape) == [kin] + ksp + [kout]
        out_order = list(dn.output_spatial_dimensions) + [dn.output_batch_dimension, dn.output_feature_dimension]
    else:
        return None
    nz = [d for d in out_order if od[d] != 1]
    out_direct = [d for d in major_to_minor(instr.shape) if od[d] != 1] == nz
    if G > 1 and not out_direct:
        return None
    lhs_sp = [ls[d] for d in dn.input_spatial_dimensions]
    lhs_order = [dn.input_batch_dimension] + list(dn.input_spatial_dimensions) + [dn.input_feature_dimension]
    row_major_lhs = [d for d in major_to_minor(lhs.shape) if ld[d] != 1] == [d for d in lhs_order if ld[d] != 1]
    lhs_direct = mode == "rows" and K == Cg and row_major_lhs and all(
        w.size == 1 and w.stride == 1 and w.padding_low == 0 and w.padding_high == 0 and w.base_dilation == 1
        for w in window)
    fast_last = mode == "rows" and G == 1 and bool(window) and window[-1].window_dilation == 1 and \
        window[-1].base_dilation == 1 and ls[dn.input_feature_dimension] == 1 and lhs_sp[-1] == Cg
    # The input backprop's filter is the forward one, [spatial…, out, in] and reversed: rather than copy it
    # into contraction order every call, each tap's [out, in] block is the GEMM's B transposed.
    # With one tap (a 1×1 window) that GEMM is the whole contraction: always better than a copy.
    kmat_taps = mode == "rows" and not kmat_direct and G == 1 and \
        (prod(win) == 1 or Cg >= TAPS_MIN_FEATURES and K * Og >= TAPS_MIN_ELEMENTS) and \
        major_to_minor(rhs.shape) == ksp + [kout, kin]
    fast_last = fast_last and not kmat_taps
    # A 1×1 window over a dilated input (the strided 1×1 convolution's input backprop): most patch rows
    # are zeros. Output positions of one phase read consecutive input positions: GEMM those straight from
    # the input into strided output rows, zero the rest.
    phase = mode == "rows" and G == 1 and out_direct and bool(window) and ls[dn.input_feature_dimension] == 1 \
        and all(w.size == 1 and w.stride == 1 and w.window_dilation == 1 for w in window) \
        and any(w.base_dilation != 1 for w in window)
    return BlockedPlan(mode, G, B, Cg, Og, O_, out_sp, [ld[d] for d in dn.input_spatial_dimensions], win,
                       ls[dn.input_batch_dimension], ls[dn.input_feature_dimension],
                       [ls[d] for d in dn.input_spatial_dimensions], kmat_direct, O_ if kmat_direct else Og,
                       out_direct, M, K, lhs_direct, fast_last and not phase, kmat_taps,
                       [rs[d] for d in ksp], phase)


def mixes_inputs(prog, instr, plan) -> bool:
    """Whether ``plan``'s kernel combines input elements before multiplying (Winograd's input transform:
    one infinity there spreads NaN over a tile), so the input must be free of special values too."""
    from tfxla_cluster.codegen.winograd import winograd_plan
    return isinstance(plan, BlockedPlan) and plan.single is None and \
        winograd_plan(instr, plan, prog.options) is not None


def epilogue_fits(plan: BlockedPlan) -> bool:
    """Whether :func:`emit_blocked_conv` can run an epilogue: on each block in place (rows mode with the
    GEMM writing the output itself) or in the copy-out pass (the output is not the GEMM's result)."""
    return not plan.out_direct or plan.mode == "rows"

def i32(v: int) -> ir.Constant:
    return ir.Constant(t.I32, v)


@dataclass
class _BlasKernel:
    """A kernel whose items call the BLAS GEMM: its builder and item range, the operands' pointers, the
    runtime functions it calls, and the caller's BLAS thread count, which :meth:`finish` restores before the
    program calls the kernel over its items."""
    prog: object
    name: str
    items: int
    tasks: int
    flops: int
    kb: object
    b: ir.IRBuilder
    lo: ir.Value
    hi: ir.Value
    ptrs: tuple
    memset: ir.Function
    gemm: ir.Function
    set_threads: ir.Function
    prev: ir.Value

    def finish(self) -> None:
        self.b.call(self.set_threads, [self.prev])
        self.prog.call_kernel(self.kb, self.name, "conv-gemm", self.items, self.tasks, self.flops // 8)


def _blas_kernel(prog, instr, items: int, flops: int, slots: tuple, et, sty, ranged: bool = False) -> _BlasKernel:
    """Open ``instr``'s kernel over ``items`` work items (split across tasks when ``flops`` pay for it), with
    the pointers of ``slots`` and one BLAS thread inside each task (our tasks are the parallelism). The items'
    range is the call's when the kernel is split or ``ranged``, else constant."""
    kb_ = prog.kernel(instr.name)
    b = kb_.builder
    tasks = prog.tasks_for(items, flops // 8)
    lo, hi = (kb_.lo, kb_.hi) if tasks > 1 or ranged else (t.i64(0), t.i64(items))
    mctx = kb_.kctx.mctx
    memset = mctx.function("llvm.memset.p0.i64", t.VOID, [t.PTR, t.I8, t.I64, t.I1])
    set_threads = mctx.function("tfxla_blas_threads_local", t.I32, [t.I32])
    gemm = mctx.function("tfxla_cblas_sgemm" if et is T.F32 else "tfxla_cblas_dgemm", t.VOID,
                         [t.I32, t.I32, t.I32, t.I64, t.I64, t.I64, sty, t.PTR, t.I64, t.PTR, t.I64, sty, t.PTR, t.I64])
    ptrs = tuple(kb_.ptr(slot) for slot in slots)
    prev = b.call(set_threads, [i32(1)])
    return _BlasKernel(prog, instr.name, items, tasks, flops, kb_, b, lo, hi, ptrs, memset, gemm, set_threads, prev)



def emit_blocked_conv(prog, instr, plan: BlockedPlan, lhs: BufferRef, rhs: BufferRef, out: BufferRef,
                      epilogue=None) -> None:
    """Materialise the filter matrix if needed, then one parallel kernel over (group, row block) items:
    fill a patch block on the stack, GEMM it into the output (or a scratch copied out afterwards).
    ``epilogue`` (see :func:`epilogue_fits`): rewrites each item's block of the output right after its
    last GEMM call, while it is in cache, or runs in the copy-out pass."""
    assert epilogue is None or epilogue_fits(plan)
    from tfxla_cluster.codegen.gemm import CBLAS_NO_TRANS, CBLAS_ROW_MAJOR, CBLAS_TRANS, materialize_kernel
    et = instr.shape.element_type
    sty = t.storage_type(et)
    esize = 4 if et is T.F32 else 8
    dn, window = instr.convolution_dimension_numbers, instr.window.dimensions
    rshape = instr.operands[1].shape
    G, Cg, Og, M, K = plan.G, plan.Cg, plan.Og, plan.M, plan.K
    Wn = prod(plan.win)
    P = prod(plan.out_sp)
    if plan.single is not None:
        return _emit_single_tap(prog, instr, plan, lhs, rhs, out, epilogue)
    from tfxla_cluster.codegen.winograd import emit_winograd, winograd_plan
    wp = winograd_plan(instr, plan, prog.options)
    if wp is not None:
        return emit_winograd(prog, instr, wp, lhs, rhs, out, epilogue)
    if plan.kmat_direct or plan.kmat_taps:
        kref = rhs
    else:
        kref = prog.scratch(Shape(et, (G, K, Og)), "conv.kernel")

        def kernel_make(kb):
            b = kb.builder
            arr = kb.array(rhs)

            def gen(idx):
                from tfxla_cluster.codegen.gemm import split
                from tfxla_cluster.codegen.loops import Index
                g, k, o = idx.get_dims(b)
                if plan.mode == "rows":
                    w, c = b.udiv(k, t.i64(Cg)), b.urem(k, t.i64(Cg))
                else:
                    c, w = b.udiv(k, t.i64(Wn)), b.urem(k, t.i64(Wn))
                wk = split(b, w, plan.win)
                dims = [None] * rshape.rank
                dims[dn.kernel_output_feature_dimension] = b.add(b.mul(g, t.i64(Og)), o)
                dims[dn.kernel_input_feature_dimension] = c
                for i, wd in enumerate(window):
                    dims[dn.kernel_spatial_dimensions[i]] = b.sub(t.i64(wd.size - 1), wk[i]) if wd.window_reversal \
                        else wk[i]
                return arr.load(Index(dims, rshape))
            return gen
        materialize_kernel(prog, instr.name + "_kernel", [(kref, kernel_make)])
    if plan.phase:
        return _emit_phase_conv(prog, instr, plan, lhs, kref, out, epilogue)
    res = out if plan.out_direct else prog.scratch(Shape(et, (G, M, Og)), "conv.result")
    threads = prog.options.thread_count
    # Block sizes: rows (or output positions) per item, contraction per GEMM call.
    # OpenBLAS packs the filter block for every call: ≥ ROW_TARGET rows per call keep that small against the
    # multiply-adds; contraction blocks keep the patch block within BLOCK_ELEMENTS.
    unit = 1 if plan.mode == "rows" else plan.B                      # whole output positions in cols mode
    kunit = (plan.win[-1] * Cg if plan.fast_last else Cg) if plan.mode == "rows" else 1
    mb = min(M, max(unit, ROW_TARGET // unit * unit))
    # A 1×1 convolution over few positions with many more output features (ResNet's 7×7 stage, MobileNet's
    # and InceptionV3's last projections) is bound by reading the filter: threads split its columns (each
    # packs half the filter) rather than its rows (each would pack all of it). Measured (interleaved, A/B):
    # 7×7 512→2048 1.25x, 7×7 960→320 1.24x, 8×8 2048→320 1.2x faster.
    by_cols = plan.lhs_direct and G == 1 and M <= ROW_TARGET * threads and Og >= max(2 * M, threads * COL_BLOCK)
    if G * (-(-M // mb)) < threads and M >= 2 * 16 * unit and not by_cols:
        mb = max(unit, -(-(-(-M // threads)) // unit) * unit)
    kb = K if plan.lhs_direct else max(kunit, min(K, BLOCK_ELEMENTS // mb) // kunit * kunit)
    if plan.kmat_taps:
        kb = Cg
    if not plan.lhs_direct:
        mb = max(unit, min(mb, BLOCK_ELEMENTS // kb // unit * unit))
    nmb, nkb = -(-M // mb), -(-K // kb)
    # Too few row blocks for every thread (weight-bound layers at small batch): split the columns too.
    ncb = max(1, min(threads // (G * nmb), Og // COL_BLOCK)) if G * nmb < threads else 1
    cb = -(-Og // ncb)
    items = G * nmb * ncb
    flops = 2 * M * K * Og * G
    # A 1×1 convolution reading its input in place, with no epilogue, takes its sizes from its table
    # (``KernelBuilder.count``): those of other sizes share its function (DenseNet's 1×1 convolutions of 96 to
    # 1,024 input features, 58 kernels, are one). Its items are BLAS calls: run-time sizes cost nothing there.
    sized = plan.lhs_direct and epilogue is None and plan.mode == "rows"
    bk = _blas_kernel(prog, instr, items, flops, (lhs.slot, kref.slot, res.slot), et, sty, ranged=sized)
    size = bk.kb.count if sized else t.i64
    kb_, b, lo, hi, (lp, kp, cp), memset, gemm = bk.kb, bk.b, bk.lo, bk.hi, bk.ptrs, bk.memset, bk.gemm
    buf = None if plan.lhs_direct else kb_.kctx.alloca(sty, "patches", count=mb * kb)
    mctx = kb_.kctx.mctx
    memcpy = mctx.function("llvm.memcpy.p0.p0.i64", t.VOID, [t.PTR, t.PTR, t.I64, t.I1])
    false = ir.Constant(t.I1, 0)

    def run_copy(dst, src_off, valid, run):
        """dst[0:run] := lhs[src_off : src_off + run] if valid else zeros."""
        nbytes = t.i64(run * esize)
        fn = b.block.function
        yes, no, done = (fn.append_basic_block(n) for n in ("im.copy", "im.zero", "im.done"))
        b.cbranch(valid, yes, no)
        b.position_at_end(yes)
        b.call(memcpy, [dst, b.gep(lp, [src_off], source_etype=sty), nbytes, false])
        b.branch(done)
        b.position_at_end(no)
        b.call(memset, [dst, ir.Constant(t.I8, 0), nbytes, false])
        b.branch(done)
        b.position_at_end(done)

    def position(osp, wpos, dims=None):
        """Input offset (spatial part) and validity of output position ``osp`` under window tap ``wpos``
        (over the first ``dims`` spatial dimensions; all by default)."""
        off, valid = t.i64(0), ir.Constant(t.I1, 1)
        for i, wd in enumerate(window[:len(window) if dims is None else dims]):
            p = b.sub(b.add(b.mul(osp[i], t.i64(wd.stride)), b.mul(wpos[i], t.i64(wd.window_dilation))),
                      t.i64(wd.padding_low))
            if wd.base_dilation != 1:
                bd = t.i64(wd.base_dilation)
                valid = b.and_(valid, b.icmp_signed(">=", p, t.i64(0)))
                valid = b.and_(valid, b.icmp_signed("==", b.srem(p, bd), t.i64(0)))
                p = b.sdiv(p, bd)
            valid = b.and_(valid, b.icmp_unsigned("<", p, t.i64(plan.in_sp[i])))
            p = b.select(valid, p, t.i64(0))
            off = b.add(off, b.mul(p, t.i64(plan.lhs_sp[i])))
        return off, valid

    def fast_run(dst, rbase, osp, wo):
        """One outer tap ``wo`` (window position over all but the last dim) of a row: the last dim's
        taps as one contiguous copy when all are inside the input, else tap by tap."""
        last = window[-1]
        outer = split(b, wo, plan.win[:-1]) if len(plan.win) > 1 else []
        start = b.sub(b.mul(osp[-1], t.i64(last.stride)), t.i64(last.padding_low))
        off0, valid0 = position(osp[:-1], outer, dims=len(outer))
        inside = b.and_(valid0, b.and_(b.icmp_signed(">=", start, t.i64(0)),
                                       b.icmp_signed("<=", b.add(start, t.i64(last.size - 1)),
                                                     t.i64(plan.in_sp[-1] - 1))))
        fn = b.block.function
        whole, taps, done = (fn.append_basic_block(n) for n in ("im.run", "im.taps", "im.rdone"))
        b.cbranch(inside, whole, taps)
        b.position_at_end(whole)
        src = b.add(b.add(rbase, off0), b.mul(start, t.i64(plan.lhs_sp[-1])))
        b.call(memcpy, [dst, b.gep(lp, [src], source_etype=sty), t.i64(last.size * Cg * esize), false])
        b.branch(done)
        b.position_at_end(taps)
        with for_range(b, 0, last.size, "cl") as wl:
            off, valid = position(osp, outer + [wl])
            run_copy(b.gep(dst, [b.mul(wl, t.i64(Cg))], source_etype=sty), b.add(rbase, off), valid, Cg)
        b.branch(done)
        b.position_at_end(done)

    from tfxla_cluster.codegen.gemm import split
    # The filter backprop over a small image (3×3 taps of a 1×1 one: ResNet's, DenseNet's last stages at
    # 32×32): output positions (taps) whose window never meets the input are zeros. Row blocks made of
    # those only are zeroed, without patches or GEMM calls (a table of the useful blocks).
    useful_blocks = None
    if plan.mode == "cols" and plan.out_direct and G == 1:
        per_dim = [[any(_meets(wd, o, w, n_in) for w in range(wd.size)) for o in range(n_out)]
                   for wd, n_in, n_out in zip(window, plan.in_sp, plan.out_sp)]
        useful_pos = [all(per_dim[i][o] for i, o in enumerate(idx)) for idx in _row_major(plan.out_sp)]
        blocks = [any(useful_pos[m // plan.B] for m in range(m0, min(M, m0 + mb), plan.B)) for m0 in range(0, M, mb)]
        if not all(blocks):
            useful_blocks = ir.GlobalVariable(mctx.module, ir.ArrayType(t.I8, nmb), mctx.unique_name("useful_" + instr.name))
            useful_blocks.linkage = "internal"
            useful_blocks.global_constant = True
            useful_blocks.initializer = ir.Constant(ir.ArrayType(t.I8, nmb), [int(x) for x in blocks])
    ncb_, cb_, nmb_, mb_, kb_n, og_, k_ = map(size, (ncb, cb, nmb, mb, kb, Og, K))
    with for_range(b, lo, hi, "cb") as item:
        cblk, item = b.urem(item, ncb_), b.udiv(item, ncb_)
        c0 = b.mul(cblk, cb_)
        cols = b.sub(og_, c0)
        cols = b.select(b.icmp_signed(">", cols, cb_), cb_, cols)
        g, mblk = b.udiv(item, nmb_), b.urem(item, nmb_)
        m0 = b.mul(mblk, mb_)
        rows = b.sub(size(M), m0)
        rows = b.select(b.icmp_signed(">", rows, mb_), mb_, rows)
        if useful_blocks is not None:
            flag = b.load(b.gep(useful_blocks, [t.i64(0), mblk], inbounds=True, source_etype=useful_blocks.value_type),
                          typ=t.I8)
            fn = b.block.function
            zero_bb, work_bb, after_bb = (fn.append_basic_block(n) for n in ("cb.zero", "cb.work", "cb.after"))
            b.cbranch(b.icmp_unsigned("==", flag, ir.Constant(t.I8, 0)), zero_bb, work_bb)
            b.position_at_end(zero_bb)
            with for_range(b, 0, rows, "cz") as r:
                row = b.add(b.add(b.mul(b.add(m0, r), t.i64(plan.O)), b.mul(g, t.i64(Og))), c0)
                b.call(memset, [b.gep(cp, [row], source_etype=sty), ir.Constant(t.I8, 0),
                                b.mul(cols, t.i64(esize)), ir.Constant(t.I1, 0)])
            b.branch(after_bb)
            b.position_at_end(work_bb)
        with for_range(b, 0, size(nkb), "ck") as kblk:
            k0 = b.mul(kblk, kb_n)
            kn = b.sub(k_, k0)
            kn = b.select(b.icmp_signed(">", kn, kb_n), kb_n, kn)
            if plan.lhs_direct:
                # A 1×1 convolution over [batch, spatial…, feature]: the input is the GEMM's A as it is.
                lda = size(G * Cg)
                a_ptr = b.gep(lp, [b.add(b.mul(m0, lda), b.mul(g, size(Cg)))], source_etype=sty)
                ta = CBLAS_NO_TRANS
            elif plan.mode == "rows":
                # buf[r, j]: row r = m0 + r (batch, position), column j = k0 + j (window tap, feature)
                w0 = b.udiv(k0, t.i64(kunit))
                nw = b.udiv(kn, t.i64(kunit))
                gbase = b.mul(b.mul(g, t.i64(Cg)), t.i64(plan.lhs_f))
                with for_range(b, 0, rows, "cr") as r:
                    m = b.add(m0, r)
                    n, pp = b.udiv(m, t.i64(P)), b.urem(m, t.i64(P))
                    osp = split(b, pp, plan.out_sp)
                    rbase = b.add(gbase, b.mul(n, t.i64(plan.lhs_b)))
                    with for_range(b, 0, nw, "cw") as wi:
                        dst = b.gep(buf, [b.add(b.mul(r, kn), b.mul(wi, t.i64(kunit)))], source_etype=sty)
                        if plan.fast_last:
                            fast_run(dst, rbase, osp, b.add(w0, wi))
                        else:
                            wpos = split(b, b.add(w0, wi), plan.win)
                            off, valid = position(osp, wpos)
                            run_copy(dst, b.add(rbase, off), valid, Cg)
                a_ptr, ta, lda = buf, CBLAS_NO_TRANS, kn
            else:
                # buf[j, r]: row j = k0 + j (feature, window tap), columns = output positions × batch run
                p0 = b.udiv(m0, t.i64(plan.B))
                npos = b.udiv(rows, t.i64(plan.B))
                with for_range(b, 0, kn, "cj") as j:
                    k = b.add(k0, j)
                    f, w = b.udiv(k, t.i64(Wn)), b.urem(k, t.i64(Wn))
                    wpos = split(b, w, plan.win)
                    fbase = b.mul(f, t.i64(plan.lhs_f))
                    with for_range(b, 0, npos, "cp") as pi:
                        osp = split(b, b.add(p0, pi), plan.out_sp)
                        off, valid = position(osp, wpos)
                        dst = b.gep(buf, [b.add(b.mul(j, rows), b.mul(pi, t.i64(plan.B)))], source_etype=sty)
                        run_copy(dst, b.add(fbase, off), valid, plan.B)
                a_ptr, ta, lda = buf, CBLAS_TRANS, rows
            kbase = b.add(b.mul(g, size(0 if plan.kmat_direct else K * Og)),
                          b.mul(g, og_) if plan.kmat_direct else t.i64(0))
            tb, ldb = CBLAS_NO_TRANS, size(plan.kmat_ld)
            if plan.kmat_taps:
                # K block kblk is tap kblk; its filter block is the reversed tap's [out, in] matrix
                toff = t.i64(0)
                for i, (wk, wd) in enumerate(zip(split(b, kblk, plan.win), window)):
                    wk = b.sub(t.i64(wd.size - 1), wk) if wd.window_reversal else wk
                    toff = b.add(toff, b.mul(wk, t.i64(plan.rhs_sp[i])))
                bptr = b.gep(kp, [b.add(toff, b.mul(c0, t.i64(Cg)))], source_etype=sty)
                tb, ldb = CBLAS_TRANS, t.i64(Cg)
            else:
                bptr = b.gep(kp, [b.add(b.add(kbase, b.mul(k0, ldb)), c0)], source_etype=sty)
            if plan.out_direct:
                ldc = size(plan.O)
                coff = b.add(b.mul(m0, ldc), b.mul(g, og_))
            else:
                ldc = og_
                coff = b.add(b.mul(g, size(M * Og)), b.mul(m0, ldc))
            coff = b.add(coff, c0)
            beta = b.select(b.icmp_signed("==", kblk, t.i64(0)), t.float_constant(sty, 0.0),
                            t.float_constant(sty, 1.0))
            b.call(gemm, [i32(CBLAS_ROW_MAJOR), i32(ta), i32(tb), rows, cols, kn,
                          t.float_constant(sty, 1.0), a_ptr, lda, bptr, ldb, beta,
                          b.gep(cp, [coff], source_etype=sty), ldc])
        if epilogue is not None and plan.out_direct:
            # The item's rows × cols block of the [M, O] output is in L2 now: bias / scale / residual /
            # activation on it here saves a pass over the output through memory.
            fbase = b.add(b.mul(g, t.i64(Og)), c0)
            with for_range(b, 0, rows, "er") as r:
                m = b.add(m0, r)
                n, pp = b.udiv(m, t.i64(P)), b.urem(m, t.i64(P))
                osp = split(b, pp, plan.out_sp)
                rbase = b.add(b.mul(m, t.i64(plan.O)), fbase)
                with for_range(b, 0, cols, "ec") as c:
                    dims = [None] * instr.shape.rank
                    dims[dn.output_batch_dimension] = n
                    dims[dn.output_feature_dimension] = b.add(fbase, c)
                    for d, x in zip(dn.output_spatial_dimensions, osp):
                        dims[d] = x
                    epilogue.store(kb_, dims, b.add(rbase, c))
        if useful_blocks is not None:
            b.branch(after_bb)
            b.position_at_end(after_bb)
    bk.finish()
    if plan.out_direct:
        return

    def out_make(kb):
        from tfxla_cluster.codegen.loops import Index
        bb = kb.builder
        r = kb.array(res)

        def gen(idx):
            od = idx.get_dims(bb)
            n, o = od[dn.output_batch_dimension], od[dn.output_feature_dimension]
            p = t.i64(0)
            for d, size in zip(dn.output_spatial_dimensions, plan.out_sp):
                p = bb.add(bb.mul(p, t.i64(size)), od[d])
            m = bb.add(bb.mul(n, t.i64(P)), p) if plan.mode == "rows" else bb.add(bb.mul(p, t.i64(plan.B)), n)
            g, oo = bb.udiv(o, t.i64(Og)), bb.urem(o, t.i64(Og))
            return r.load(Index([g, m, oo], res.shape))
        return gen if epilogue is None else epilogue.generator(kb, gen)
    materialize_kernel(prog, instr.name + "_result", [(out, out_make)])


def _emit_phase_conv(prog, instr, plan: BlockedPlan, lhs: BufferRef, kref: BufferRef, out: BufferRef,
                     epilogue) -> None:
    """The ``phase`` plan: work items are output rows (batch, outer spatial position). A row whose outer
    position falls between dilated input positions is zeros; otherwise its positions ``pl + d·j`` along the
    last dimension are one GEMM of the input row (read in place) with the filter matrix, written with
    row stride ``d·O``, and the others zeros. Sums: K = input features per element, as the blocked GEMM."""
    from tfxla_cluster.codegen.gemm import CBLAS_NO_TRANS, CBLAS_ROW_MAJOR, CBLAS_TRANS, split
    et = instr.shape.element_type
    sty = t.storage_type(et)
    esize = 4 if et is T.F32 else 8
    dn, window = instr.convolution_dimension_numbers, instr.window.dimensions
    O_, K = plan.O, plan.K
    if all(n == 1 for n in plan.in_sp) and all(0 <= w.padding_low < n for w, n in zip(window, plan.out_sp)):
        return _emit_phase_one_position(prog, instr, plan, lhs, kref, out, epilogue)
    wout = plan.out_sp[-1]
    last = window[-1]
    d, pl = last.base_dilation, last.padding_low
    # Input positions j along the last dimension whose output position pl + d·j is inside the output.
    j_lo = max(0, -(pl // d))
    j_hi = min(plan.in_sp[-1], (wout - 1 - pl) // d + 1) if wout - 1 - pl >= 0 else 0
    j_hi = max(j_hi, j_lo)
    outer = plan.out_sp[:-1]
    items = plan.B * prod(outer)
    flops = 2 * plan.M * K * O_
    bk = _blas_kernel(prog, instr, items, flops, (lhs.slot, kref.slot, out.slot), et, sty)
    kb_, b, lo, hi, (lp, kp, cp), memset, gemm = bk.kb, bk.b, bk.lo, bk.hi, bk.ptrs, bk.memset, bk.gemm
    row = wout * O_
    with for_range(b, lo, hi, "ph") as item:
        n, rest = b.udiv(item, t.i64(max(prod(outer), 1))), b.urem(item, t.i64(max(prod(outer), 1)))
        osp = split(b, rest, outer) if outer else []
        base = b.mul(item, t.i64(row))
        # Zeros first (positions between the dilated inputs, rows outside them); the GEMM overwrites its own.
        b.call(memset, [b.gep(cp, [base], source_etype=sty), ir.Constant(t.I8, 0), t.i64(row * esize),
                        ir.Constant(t.I1, 0)])
        off, valid = b.mul(n, t.i64(plan.lhs_b)), ir.Constant(t.I1, 1)
        for i, wd in enumerate(window[:-1]):
            p = b.sub(osp[i], t.i64(wd.padding_low))
            bd = t.i64(wd.base_dilation)
            valid = b.and_(valid, b.icmp_signed(">=", p, t.i64(0)))
            valid = b.and_(valid, b.icmp_signed("==", b.srem(p, bd), t.i64(0)))
            p = b.sdiv(p, bd)
            valid = b.and_(valid, b.icmp_signed("<", p, t.i64(plan.in_sp[i])))
            off = b.add(off, b.mul(b.select(valid, p, t.i64(0)), t.i64(plan.lhs_sp[i])))
        if j_hi > j_lo:
            fn = b.block.function
            yes, done = fn.append_basic_block("ph.gemm"), fn.append_basic_block("ph.done")
            b.cbranch(valid, yes, done)
            b.position_at_end(yes)
            a_ptr = b.gep(lp, [b.add(off, t.i64(j_lo * plan.lhs_sp[-1]))], source_etype=sty)
            c_ptr = b.gep(cp, [b.add(base, t.i64((pl + d * j_lo) * O_))], source_etype=sty)
            tb = CBLAS_NO_TRANS
            if plan.kmat_direct:
                bptr, ldb = kp, plan.kmat_ld
            elif plan.kmat_taps:    # the forward filter [out, in] as it is: B transposed
                bptr, ldb, tb = kp, K, CBLAS_TRANS
            else:   # the materialised [1, K, O] filter matrix
                bptr, ldb = kp, O_
            b.call(gemm, [i32(CBLAS_ROW_MAJOR), i32(CBLAS_NO_TRANS), i32(tb), t.i64(j_hi - j_lo),
                          t.i64(O_), t.i64(K), t.float_constant(sty, 1.0), a_ptr, t.i64(plan.lhs_sp[-1]), bptr,
                          t.i64(ldb), t.float_constant(sty, 0.0), c_ptr, t.i64(d * O_)])
            b.branch(done)
            b.position_at_end(done)
        if epilogue is not None:
            with for_range(b, 0, wout, "er") as r:
                with for_range(b, 0, O_, "ec") as c:
                    dims = [None] * instr.shape.rank
                    dims[dn.output_batch_dimension] = n
                    dims[dn.output_feature_dimension] = c
                    for dd, x in zip(dn.output_spatial_dimensions, osp + [r]):
                        dims[dd] = x
                    epilogue.store(kb_, dims, b.add(base, b.add(b.mul(r, t.i64(O_)), c)))
    bk.finish()


def _emit_single_tap(prog, instr, plan: BlockedPlan, lhs: BufferRef, rhs: BufferRef, out: BufferRef,
                     epilogue) -> None:
    """The ``single`` plan: ``out [B, O] = A [B, Cg] · B_tap [Cg, O]``, operands read in place. Bound by
    reading the filter block (B is the batch): work items are column blocks, one per thread. Sums: K =
    input features per element, in OpenBLAS's order."""
    from tfxla_cluster.codegen.gemm import CBLAS_NO_TRANS, CBLAS_ROW_MAJOR, CBLAS_TRANS
    st = plan.single
    et = instr.shape.element_type
    sty = t.storage_type(et)
    dn = instr.convolution_dimension_numbers
    B, K, O_ = plan.B, plan.Cg, plan.O
    flops = 2 * B * K * O_
    threads = prog.options.thread_count
    ncb = max(1, min(threads, O_ // COL_BLOCK))
    cb = -(-O_ // ncb)
    bk = _blas_kernel(prog, instr, ncb, flops, (lhs.slot, rhs.slot, out.slot), et, sty)
    kb_, b, lo, hi, (lp, kp, cp), gemm = bk.kb, bk.b, bk.lo, bk.hi, bk.ptrs, bk.gemm
    osp = [t.i64(0)] * len(dn.output_spatial_dimensions)
    with for_range(b, lo, hi, "st") as item:
        c0 = b.mul(item, t.i64(cb))
        cols = b.sub(t.i64(O_), c0)
        cols = b.select(b.icmp_signed(">", cols, t.i64(cb)), t.i64(cb), cols)
        bptr = b.gep(kp, [b.add(t.i64(st.b_off), b.mul(c0, t.i64(st.ldb)) if st.b_trans else c0)],
                     source_etype=sty)
        b.call(gemm, [i32(CBLAS_ROW_MAJOR), i32(CBLAS_NO_TRANS), i32(CBLAS_TRANS if st.b_trans else CBLAS_NO_TRANS),
                      t.i64(B), cols, t.i64(K), t.float_constant(sty, 1.0),
                      b.gep(lp, [t.i64(st.a_off)], source_etype=sty), t.i64(max(st.lda, K)), bptr, t.i64(st.ldb),
                      t.float_constant(sty, 0.0), b.gep(cp, [c0], source_etype=sty), t.i64(max(st.ldc, O_))])
        if epilogue is not None:
            with for_range(b, 0, B, "er") as r:
                with for_range(b, 0, cols, "ec") as c:
                    dims = [None] * instr.shape.rank
                    dims[dn.output_batch_dimension] = r
                    dims[dn.output_feature_dimension] = b.add(c0, c)
                    for d, x in zip(dn.output_spatial_dimensions, osp):
                        dims[d] = x
                    epilogue.store(kb_, dims, b.add(b.mul(r, t.i64(st.ldc)), b.add(c0, c)))
    bk.finish()


def _emit_phase_one_position(prog, instr, plan: BlockedPlan, lhs: BufferRef, kref: BufferRef, out: BufferRef,
                             epilogue) -> None:
    """The ``phase`` plan when the input has one spatial position (ResNet's last strided 1×1 input backprop at
    32×32: 1×1 → 2×2): its output position is one row per batch entry, at a constant stride, so the batch is
    one GEMM of ``B`` rows; the other positions are zeros. Bound by reading the filter: work items are
    column blocks, one per thread, each reading its part of the filter once."""
    from tfxla_cluster.codegen.gemm import CBLAS_NO_TRANS, CBLAS_ROW_MAJOR, CBLAS_TRANS
    et = instr.shape.element_type
    sty = t.storage_type(et)
    esize = 4 if et is T.F32 else 8
    dn, window = instr.convolution_dimension_numbers, instr.window.dimensions
    B, O_, K = plan.B, plan.O, plan.K
    P = prod(plan.out_sp)
    qv = 0
    for w, n in zip(window, plan.out_sp):
        qv = qv * n + w.padding_low     # the output position the input lands on
    flops = 2 * B * K * O_
    ncb = max(1, min(prog.options.thread_count, O_ // COL_BLOCK))
    cb = -(-O_ // ncb)
    bk = _blas_kernel(prog, instr, ncb, flops, (lhs.slot, kref.slot, out.slot), et, sty)
    kb_, b, lo, hi, (lp, kp, cp), memset, gemm = bk.kb, bk.b, bk.lo, bk.hi, bk.ptrs, bk.memset, bk.gemm
    with for_range(b, lo, hi, "p1") as item:
        c0 = b.mul(item, t.i64(cb))
        cols = b.sub(t.i64(O_), c0)
        cols = b.select(b.icmp_signed(">", cols, t.i64(cb)), t.i64(cb), cols)
        # Zeros at every other output position of this column block.
        with for_range(b, 0, B * P, "p1z") as r:
            fn = b.block.function
            yes, done = fn.append_basic_block("p1.zero"), fn.append_basic_block("p1.next")
            b.cbranch(b.icmp_unsigned("!=", b.urem(r, t.i64(P)), t.i64(qv)), yes, done)
            b.position_at_end(yes)
            b.call(memset, [b.gep(cp, [b.add(b.mul(r, t.i64(O_)), c0)], source_etype=sty), ir.Constant(t.I8, 0),
                            b.mul(cols, t.i64(esize)), ir.Constant(t.I1, 0)])
            b.branch(done)
            b.position_at_end(done)
        tb = CBLAS_NO_TRANS
        if plan.kmat_direct:
            bptr, ldb = b.gep(kp, [c0], source_etype=sty), plan.kmat_ld
        elif plan.kmat_taps:    # the forward filter [out, in] as it is: B transposed
            bptr, ldb, tb = b.gep(kp, [b.mul(c0, t.i64(K))], source_etype=sty), K, CBLAS_TRANS
        else:   # the materialised [1, K, O] filter matrix
            bptr, ldb = b.gep(kp, [c0], source_etype=sty), O_
        b.call(gemm, [i32(CBLAS_ROW_MAJOR), i32(CBLAS_NO_TRANS), i32(tb), t.i64(B), cols, t.i64(K),
                      t.float_constant(sty, 1.0), lp, t.i64(max(plan.lhs_b, K)), bptr, t.i64(ldb),
                      t.float_constant(sty, 0.0), b.gep(cp, [b.add(t.i64(qv * O_), c0)], source_etype=sty),
                      t.i64(P * O_)])
        if epilogue is not None:
            with for_range(b, 0, B * P, "er") as r:
                n, q = b.udiv(r, t.i64(P)), b.urem(r, t.i64(P))
                rem, osp = q, [None] * len(plan.out_sp)
                for i in range(len(plan.out_sp) - 1, -1, -1):
                    osp[i] = b.urem(rem, t.i64(plan.out_sp[i]))
                    rem = b.udiv(rem, t.i64(plan.out_sp[i]))
                with for_range(b, 0, cols, "ec") as c:
                    dims = [None] * instr.shape.rank
                    dims[dn.output_batch_dimension] = n
                    dims[dn.output_feature_dimension] = b.add(c0, c)
                    for dd, x in zip(dn.output_spatial_dimensions, osp):
                        dims[dd] = x
                    epilogue.store(kb_, dims, b.add(b.mul(r, t.i64(O_)), b.add(c0, c)))
    bk.finish()
