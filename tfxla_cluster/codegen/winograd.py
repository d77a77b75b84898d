"""3×3 stride-1 convolutions as Winograd F(2×2, 3×3): 16 GEMMs of 2.25× fewer multiply-adds than im2col.

Stage: codegen (a thunk kernel for one HLO ``convolution``; ``conv.py``'s :func:`emit_blocked_conv` hands
over the convolutions :func:`winograd_plan` accepts).
Guarantee: the result equals the HLO convolution's up to float rounding of the transforms (F(2,3)'s
constants are 0, ±1 and ±½: its error stays within a few ulps of the summed products' magnitude, the
same order as a different summation order of the direct form); it does not depend on the thread count.

The output is cut into 2×2 tiles (t = batch × ⌈H/2⌉ × ⌈W/2⌉ of them); each reads a 4×4 input patch
``d`` (zeros outside the input: the padding). In Lavin & Gray's (2015) notation::

    U[k] = (G g Gᵀ)[k]      filter transform, [16, C, O] (or [16, O, C], read transposed): its own kernel
    V[k] = (Bᵀ d B)[k]      input transform of a block of tiles, [16, tiles, C]   ┐ one kernel over blocks
    M[k] = V[k] · U[k]      16 OpenBLAS GEMMs (one thread each), [16, tiles, O]  │ of tiles, V and M on
    y    = Aᵀ M A            output transform, 2×2 outputs per tile, the epilogue ┘ the stack (in L2)

Every transform runs along the channel dimension in vectors (it is the minor-most one of input, output
and, for one of its two features, the filter). Measured against the im2col GEMMs of ``conv.py`` (interleaved,
same process): ResNet50's 56×56×64 and 28×28×128 layers, InceptionV3's 35×35 64→96 and the 56×56×64 input
backprop run 1.2–1.6× faster; the 14×14×256 and 7×7×512 layers (49 and 16 tiles) are slower and keep im2col.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.buffers import BufferRef
from tfxla_cluster.codegen.loops import for_range, strides
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape

MIN_CHANNELS = 16         # input and output features: below, the transforms outweigh the saved multiplies
MIN_OUTPUT = 4            # output height and width: tiles mostly padding below
# The filter transform writes 16·C·O values and each of the 16 GEMMs packs its C·O block again: that pays
# only when every block serves at least as many tiles as it has rows or columns (measured: ResNet's 28×28
# 128-feature layer (196 tiles) gains 1.6x; the 14×14 256 (49 tiles) and 7×7 512 (16) lose).
TILES_PER_FEATURE = 1.0
BLOCK_FLOATS = 1 << 17    # a work item's V and M blocks on its stack (512 KiB): in L2 from transform to GEMM
MIN_BLOCK_TILES, MAX_BLOCK_TILES = 16, 128   # GEMM rows per call: fewer would repack U[k] for too little work


@dataclass
class WinogradPlan:
    """Sizes and element strides the kernels index (input and output features have stride 1)."""

    B: int
    C: int
    O: int
    in_hw: tuple[int, int]
    out_hw: tuple[int, int]
    pad: tuple[int, int]          # padding_low of each spatial dimension
    lhs_s: tuple[int, int, int]   # input strides: batch, h, w (feature stride 1)
    out_s: tuple[int, int, int]   # output strides: batch, h, w (feature stride 1)
    rhs_s: tuple[int, int, int, int]   # filter strides: h, w, in, out
    reversed_: tuple[bool, bool]
    filter_cols: str              # "O": U is [16, C, O] (vectors along O); "C": U is [16, O, C]

    @property
    def tiles_hw(self) -> tuple[int, int]:
        return -(-self.out_hw[0] // 2), -(-self.out_hw[1] // 2)

    @property
    def tiles(self) -> int:
        th, tw = self.tiles_hw
        return self.B * th * tw


def winograd_plan(instr, plan, options) -> WinogradPlan | None:
    """The plan when ``instr`` (with the blocked ``plan`` of ``conv.py``) is a 2-D 3×3 convolution of
    unit strides and dilations over channel-minor input and output, else None."""
    if not options.winograd:
        return None
    if instr.shape.element_type is not T.F32 or plan.mode != "rows" or plan.G != 1 or not plan.out_direct \
            or plan.lhs_direct or plan.phase:
        return None
    window = instr.window.dimensions
    if len(window) != 2 or any(w.size != 3 or w.stride != 1 or w.window_dilation != 1 or w.base_dilation != 1
                               for w in window):
        return None
    dn = instr.convolution_dimension_numbers
    lhs, rhs = instr.operands
    ls, rs, os_ = strides(lhs.shape), strides(rhs.shape), strides(instr.shape)
    if ls[dn.input_feature_dimension] != 1 or os_[dn.output_feature_dimension] != 1:
        return None
    C, O_ = plan.Cg, plan.Og
    out_hw = tuple(instr.shape.dimensions[d] for d in dn.output_spatial_dimensions)
    if C < MIN_CHANNELS or O_ < MIN_CHANNELS or min(out_hw) < MIN_OUTPUT:
        return None
    kin, kout = dn.kernel_input_feature_dimension, dn.kernel_output_feature_dimension
    filter_cols = "O" if rs[kout] == 1 or rs[kin] != 1 else "C"
    wp = WinogradPlan(plan.B, C, O_, tuple(plan.in_sp), out_hw, tuple(w.padding_low for w in window),
                      (ls[dn.input_batch_dimension], *(ls[d] for d in dn.input_spatial_dimensions)),
                      (os_[dn.output_batch_dimension], *(os_[d] for d in dn.output_spatial_dimensions)),
                      (*(rs[d] for d in dn.kernel_spatial_dimensions), rs[kin], rs[kout]),
                      tuple(w.window_reversal for w in window), filter_cols)
    if wp.tiles < TILES_PER_FEATURE * max(C, O_) or BLOCK_FLOATS // (16 * (C + O_)) < MIN_BLOCK_TILES:
        return None
    return wp


def _lanes(prog) -> int:
    return max(1, prog.options.prefer_vector_width // 32)


def _vector_loop(b, count: int, lanes: int, body, name: str) -> None:
    """body(offset, n) over [0, count): whole vectors of ``lanes``, then single elements."""
    full = count // lanes
    if full and lanes > 1:
        with for_range(b, 0, full, name) as v:
            body(b.mul(v, t.i64(lanes)), lanes)
    if count % lanes or lanes == 1:
        with for_range(b, full * lanes if lanes > 1 else 0, count, name + "s") as c:
            body(c, 1)


def emit_winograd(prog, instr, wp: WinogradPlan, lhs: BufferRef, rhs: BufferRef, out: BufferRef,
                  epilogue=None) -> None:
    """The filter transform kernel, then the blocked kernel (input transform, 16 GEMMs, output transform
    and ``epilogue``, block of tiles by block of tiles)."""
    et = instr.shape.element_type
    sty = t.storage_type(et)
    lanes = _lanes(prog)
    C, O_ = wp.C, wp.O
    u_shape = (16, C, O_) if wp.filter_cols == "O" else (16, O_, C)
    U = prog.scratch(Shape(et, u_shape), "winograd.U")

    def vty(n):
        return sty if n == 1 else ir.VectorType(sty, n)

    def const(n, v):
        c = t.float_constant(sty, v)
        return c if n == 1 else ir.Constant(vty(n), [c] * n)

    # ---- U = G g Gᵀ: items are rows of U's non-vector feature, vectors along the other.
    kb = prog.kernel(instr.name + "_wfilter")
    b = kb.builder
    gp, up = kb.ptr(rhs.slot), kb.ptr(U.slot)
    rows, cols = (C, O_) if wp.filter_cols == "O" else (O_, C)
    s_h, s_w, s_in, s_out = wp.rhs_s
    s_row, s_col = (s_in, s_out) if wp.filter_cols == "O" else (s_out, s_in)
    cost = 16 * C * O_ * 4
    tasks = prog.tasks_for(rows, cost)
    lo, hi = (kb.lo, kb.hi) if tasks > 1 else (t.i64(0), t.i64(rows))
    half = 0.5
    with for_range(b, lo, hi, "wf") as r:
        def filt(c, n, r=r):
            base = b.add(b.mul(r, t.i64(s_row)), b.mul(c, t.i64(s_col)))

            def g(a, w):
                a = 2 - a if wp.reversed_[0] else a
                w = 2 - w if wp.reversed_[1] else w
                off = b.add(base, t.i64(a * s_h + w * s_w))
                p = b.gep(gp, [off], source_etype=sty)
                if n > 1 and s_col != 1:   # strided along the vector: gather lane by lane
                    v = ir.Constant(vty(n), ir.Undefined)
                    for j in range(n):
                        x = b.load(b.gep(p, [t.i64(j * s_col)], source_etype=sty), typ=sty)
                        v = b.insert_element(v, x, ir.Constant(t.I32, j))
                    return v
                return b.load(p, typ=vty(n), align=4)
            gg = [[g(a, w) for w in range(3)] for a in range(3)]

            def tr(x0, x1, x2):   # G · [x0, x1, x2]
                h = const(n, half)
                return [x0, b.fmul(h, b.fadd(b.fadd(x0, x1), x2)), b.fmul(h, b.fadd(b.fsub(x0, x1), x2)), x2]
            cols_ = [tr(gg[0][w], gg[1][w], gg[2][w]) for w in range(3)]       # cols_[w][i]
            for i in range(4):
                row = tr(cols_[0][i], cols_[1][i], cols_[2][i])
                for j in range(4):
                    off = b.add(b.mul(t.i64(i * 4 + j), t.i64(rows * cols)), b.add(b.mul(r, t.i64(cols)), c))
                    b.store(row[j], b.gep(up, [off], source_etype=sty), align=4)
        _vector_loop(b, cols, lanes, filt, "wfc")
    prog.call_kernel(kb, instr.name, "conv-winograd-filter", rows, tasks, cost)

    th_, tw_ = wp.tiles_hw
    H, W = wp.in_hw
    OH, OW = wp.out_hw
    lb, lh, lw = wp.lhs_s
    ob, oh, ow = wp.out_s

    def tile_coords(b, tile):
        n = b.udiv(tile, t.i64(th_ * tw_))
        rest = b.urem(tile, t.i64(th_ * tw_))
        return n, b.udiv(rest, t.i64(tw_)), b.urem(rest, t.i64(tw_))

    dn = instr.convolution_dimension_numbers

    def input_tile(kb, lp, tile, vp, row, kstride):
        """V[k, row, :] (at vp + k·kstride + row·C) := (Bᵀ d B)[k] of ``tile``'s 4×4 input patch."""
        b = kb.builder
        n, ty, tx = tile_coords(b, tile)
        y0 = b.sub(b.mul(ty, t.i64(2)), t.i64(wp.pad[0]))
        x0 = b.sub(b.mul(tx, t.i64(2)), t.i64(wp.pad[1]))
        nbase = b.mul(n, t.i64(lb))
        # The patch's 16 offsets and whether each is inside the input (outside: read offset 0, use 0).
        offs, oks = [], []
        for i in range(4):
            y = b.add(y0, t.i64(i))
            yok = b.icmp_unsigned("<", y, t.i64(H))
            for j in range(4):
                x = b.add(x0, t.i64(j))
                ok = b.and_(yok, b.icmp_unsigned("<", x, t.i64(W)))
                off = b.add(nbase, b.add(b.mul(y, t.i64(lh)), b.mul(x, t.i64(lw))))
                offs.append(b.select(ok, off, t.i64(0)))
                oks.append(ok)
        rbase = b.mul(row, t.i64(C))

        def inp(c, n_):
            z = const(n_, 0.0)
            d = [b.select(ok, b.load(b.gep(lp, [b.add(off, c)], source_etype=sty), typ=vty(n_), align=4), z)
                 for off, ok in zip(offs, oks)]

            def bt(x0_, x1, x2, x3):   # Bᵀ · [x0, x1, x2, x3]
                return [b.fsub(x0_, x2), b.fadd(x1, x2), b.fsub(x2, x1), b.fsub(x1, x3)]
            cols_ = [bt(d[j], d[4 + j], d[8 + j], d[12 + j]) for j in range(4)]   # cols_[j][i]
            for i in range(4):
                row_ = bt(cols_[0][i], cols_[1][i], cols_[2][i], cols_[3][i])
                for j in range(4):
                    off = b.add(t.i64((i * 4 + j) * kstride), b.add(rbase, c))
                    b.store(row_[j], b.gep(vp, [off], source_etype=sty), align=4)
        _vector_loop(b, C, lanes, inp, "wic")

    def output_tile(kb, mp, row, kstride, op, tile):
        """``tile``'s 2×2 outputs := Aᵀ m A of M[k, row, :] (at mp + k·kstride + row·O); then the epilogue."""
        b = kb.builder
        n, ty, tx = tile_coords(b, tile)
        ys = [b.add(b.mul(ty, t.i64(2)), t.i64(a)) for a in range(2)]
        xs = [b.add(b.mul(tx, t.i64(2)), t.i64(a)) for a in range(2)]
        bases = [[b.add(b.mul(n, t.i64(ob)), b.add(b.mul(y, t.i64(oh)), b.mul(x, t.i64(ow)))) for x in xs]
                 for y in ys]
        inside = [[b.and_(b.icmp_unsigned("<", y, t.i64(OH)), b.icmp_unsigned("<", x, t.i64(OW))) for x in xs]
                  for y in ys]
        rbase = b.mul(row, t.i64(O_))

        def outp(c, n_):
            m = [b.load(b.gep(mp, [b.add(t.i64(k * kstride), b.add(rbase, c))], source_etype=sty),
                        typ=vty(n_), align=4) for k in range(16)]

            def at(x0_, x1, x2, x3):   # Aᵀ · [x0, x1, x2, x3]
                return [b.fadd(b.fadd(x0_, x1), x2), b.fsub(b.fsub(x1, x2), x3)]
            cols_ = [at(m[j], m[4 + j], m[8 + j], m[12 + j]) for j in range(4)]   # cols_[j][a]
            for a in range(2):
                row_ = at(cols_[0][a], cols_[1][a], cols_[2][a], cols_[3][a])
                for e in range(2):
                    fn = b.block.function
                    yes, done = fn.append_basic_block("wo.in"), fn.append_basic_block("wo.next")
                    b.cbranch(inside[a][e], yes, done)
                    b.position_at_end(yes)
                    b.store(row_[e], b.gep(op, [b.add(bases[a][e], c)], source_etype=sty), align=4)
                    b.branch(done)
                    b.position_at_end(done)
        _vector_loop(b, O_, lanes, outp, "woc")
        if epilogue is None:
            return
        # The tile's outputs are in L1: the fused bias / scale / residual / activation over each position's
        # contiguous features (a loop LLVM vectorises), not lane by lane in the transform.
        for a in range(2):
            for e in range(2):
                fn = b.block.function
                yes, done = fn.append_basic_block("we.in"), fn.append_basic_block("we.next")
                b.cbranch(inside[a][e], yes, done)
                b.position_at_end(yes)
                with for_range(b, 0, O_, "we") as c:
                    dims = [None] * instr.shape.rank
                    dims[dn.output_batch_dimension] = n
                    dims[dn.output_feature_dimension] = c
                    dims[dn.output_spatial_dimensions[0]] = ys[a]
                    dims[dn.output_spatial_dimensions[1]] = xs[e]
                    epilogue.store(kb, dims, b.add(bases[a][e], c))
                b.branch(done)
                b.position_at_end(done)

    _emit_blocked(prog, instr, wp, lhs, U, out, input_tile, output_tile)




def block_tiles(wp: WinogradPlan) -> int:
    """Tiles per work item of the blocked kernel."""
    return max(MIN_BLOCK_TILES, min(MAX_BLOCK_TILES, BLOCK_FLOATS // (16 * (wp.C + wp.O)), wp.tiles))


def _emit_blocked(prog, instr, wp: WinogradPlan, lhs: BufferRef, U: BufferRef, out: BufferRef,
                  input_tile, output_tile) -> None:
    """One parallel kernel over blocks of tiles: each transforms its tiles' inputs into a stack block,
    runs the 16 GEMMs on it (one OpenBLAS thread) and transforms the results into the output while the
    blocks are in cache."""
    from tfxla_cluster.codegen.gemm import CBLAS_NO_TRANS, CBLAS_ROW_MAJOR, CBLAS_TRANS
    et = instr.shape.element_type
    sty = t.storage_type(et)
    C, O_, T_ = wp.C, wp.O, wp.tiles
    tb = block_tiles(wp)
    nblk = -(-T_ // tb)
    kb = prog.kernel(instr.name)
    b = kb.builder
    flops = 2 * 16 * T_ * C * O_
    tasks = prog.tasks_for(nblk, flops // 8)
    lo, hi = (kb.lo, kb.hi) if tasks > 1 else (t.i64(0), t.i64(nblk))
    lp, up, op = kb.ptr(lhs.slot), kb.ptr(U.slot), kb.ptr(out.slot)
    # Untyped pointers to the stack blocks (llvmlite keeps an alloca's element type on its pointer).
    vbuf = b.inttoptr(b.ptrtoint(kb.kctx.alloca(sty, "wV", count=16 * tb * C), t.I64), t.PTR)
    mbuf = b.inttoptr(b.ptrtoint(kb.kctx.alloca(sty, "wM", count=16 * tb * O_), t.I64), t.PTR)
    mctx = kb.kctx.mctx
    set_threads = mctx.function("tfxla_blas_threads_local", t.I32, [t.I32])
    gemm = mctx.function("tfxla_cblas_sgemm", t.VOID, [t.I32, t.I32, t.I32, t.I64, t.I64, t.I64, sty, t.PTR, t.I64,
                                                      t.PTR, t.I64, sty, t.PTR, t.I64])
    i32 = lambda v: ir.Constant(t.I32, v)  # noqa: E731
    prev = b.call(set_threads, [i32(1)])
    trans_b = wp.filter_cols != "O"
    with for_range(b, lo, hi, "wb") as blk:
        t0 = b.mul(blk, t.i64(tb))
        rows = b.sub(t.i64(T_), t0)
        rows = b.select(b.icmp_signed(">", rows, t.i64(tb)), t.i64(tb), rows)
        with for_range(b, 0, rows, "wbi") as r:
            input_tile(kb, lp, b.add(t0, r), vbuf, r, tb * C)
        with for_range(b, 0, 16, "wbk") as k:
            a_ptr = b.gep(vbuf, [b.mul(k, t.i64(tb * C))], source_etype=sty)
            b_ptr = b.gep(up, [b.mul(k, t.i64(C * O_))], source_etype=sty)
            c_ptr = b.gep(mbuf, [b.mul(k, t.i64(tb * O_))], source_etype=sty)
            b.call(gemm, [i32(CBLAS_ROW_MAJOR), i32(CBLAS_NO_TRANS), i32(CBLAS_TRANS if trans_b else CBLAS_NO_TRANS),
                          rows, t.i64(O_), t.i64(C), t.float_constant(sty, 1.0), a_ptr, t.i64(C), b_ptr,
                          t.i64(C if trans_b else O_), t.float_constant(sty, 0.0), c_ptr, t.i64(O_)])
        with for_range(b, 0, rows, "wbo") as r:
            output_tile(kb, mbuf, r, tb * O_, op, b.add(t0, r))
    b.call(set_threads, [prev])
    prog.call_kernel(kb, instr.name, "conv-winograd", nblk, tasks, flops // 8)
