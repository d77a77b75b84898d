"""Stage: codegen — the max-pool gradient (``select-and-scatter``) vectorised along channels.

TF's ``MaxPoolGrad`` lowers to a select-and-scatter whose select is a float compare of its two parameters
and whose scatter is an add; its window covers only the spatial dimensions. Every other dimension (batch,
channels) is then "parallel": a source element's window and its selected position share its
coordinates there, so elements that differ in them never collide. When the channel dimension is the
minor-most one of the operand, the source and the output (NHWC), a work item here is (the other parallel
dimensions, a block of channels): it writes its slice of the output with the init value, then, for each
source position in row-major order, selects the window position per channel in vector registers (a
vector of tap numbers) and adds the source vector at each tap with a per-lane mask.

Guarantee: the result equals the generic kernel of ``scatter.py`` (the evaluator's select-and-scatter)
bit for bit: per channel the window is scanned in the same order with the same select (``take`` =
not ``select(current, candidate)``, NaNs included), and collisions are added in source order.
Anything else (other layouts, other select / scatter computations, dilated bases, integer types)
returns ``None`` from :func:`plan` and keeps the generic kernel.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from llvmlite import ir

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.conv import strides
from tfxla_cluster.codegen.loops import for_range, major_to_minor, scalar_index
from tfxla_cluster.hlo.attrs import ComparisonDirection as D
from tfxla_cluster.hlo.attrs import ComparisonType
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T

_TYPES = (T.F32, T.F64)
VECTORS = 4     # vectors of channels per work item (4 x 8 f32 = two cache lines per row of each array)
# take candidate over current = not compare(current, candidate): the unordered inverse predicate
_TAKE = {D.GE: "<", D.GT: "<=", D.LE: ">", D.LT: ">="}


@dataclass
class PoolGradPlan:
    take: str             # fcmp_unordered predicate of (current, candidate) that selects the candidate
    channel: int          # the minor-most dimension (parallel)
    outer: list[int]      # the other parallel dimensions
    spatial: list[int]    # the window's dimensions


def _binary_root(comp, opcode):
    root = comp.root
    if root.opcode is not opcode or comp.num_parameters != 2 or len(root.operands) != 2:
        return None
    a, c = root.operands
    if a.opcode is not O.PARAMETER or c.opcode is not O.PARAMETER or a is c:
        return None
    return root, a.parameter_number, c.parameter_number


def plan(instr, operands) -> PoolGradPlan | None:
    """The plan when ``instr`` is a select-and-scatter this kernel runs, else None."""
    x, source, _ = (r.shape for r in operands)
    et = x.element_type
    if x.rank == 0 or et not in _TYPES or source.element_type is not et or instr.shape.element_type is not et:
        return None
    select, scatter = instr.called_computations
    sel = _binary_root(select, O.COMPARE)
    add = _binary_root(scatter, O.ADD)
    if sel is None or add is None or sel[1:] != (0, 1):
        return None
    root = sel[0]
    if root.comparison_direction not in _TAKE or root.comparison_type not in (None, ComparisonType.FLOAT):
        return None
    if root.operands[0].shape.element_type is not et or scatter.root.shape.element_type is not et:
        return None
    window = instr.window.dimensions
    if any(w.base_dilation != 1 or w.window_reversal for w in window):
        return None
    trivial = [w.size == 1 and w.stride == 1 and w.padding_low == 0 and w.padding_high == 0 for w in window]
    minor = [major_to_minor(s)[-1] for s in (x, source, instr.shape)]
    channel = minor[0]
    if len(set(minor)) != 1 or not trivial[channel] or x.dimensions[channel] < 2:
        return None
    spatial = [d for d in range(x.rank) if not trivial[d]]
    outer = [d for d in range(x.rank) if trivial[d] and d != channel]
    return PoolGradPlan(_TAKE[root.comparison_direction], channel, outer, spatial)


def emit(prog, instr, p: PoolGradPlan, operands, out) -> None:
    """One parallel kernel over (outer parallel position, channel block) items."""
    from tfxla_cluster.codegen.kernel_builder import KernelBuilder
    xref, sref, iref = operands
    xs, ss = xref.shape, sref.shape
    et = xs.element_type
    sty = t.storage_type(et)
    align = 8 if et is T.F64 else 4
    window = instr.window.dimensions
    C = xs.dimensions[p.channel]
    lanes = max(1, prog.options.prefer_vector_width // (32 if et is T.F32 else 64))
    nvec = max(1, min(VECTORS, C // lanes))
    block = lanes * nvec
    nblk = -(-C // block)
    n_outer = prod(xs.dimensions[d] for d in p.outer)
    items = n_outer * nblk
    kb = KernelBuilder(prog, instr.name)
    if items == 0:
        prog.call_kernel(kb, instr.name, "select-and-scatter", 0)
        return
    b = kb.builder
    xst, sst, ost = strides(xs), strides(ss), strides(instr.shape)
    xp, sp, op = kb.ptr(xref.slot), kb.ptr(sref.slot), kb.ptr(out.slot)
    init = kb.read(iref)(scalar_index(iref.shape))
    src_sp = [ss.dimensions[d] for d in p.spatial]
    x_sp = [xs.dimensions[d] for d in p.spatial]
    wins = [window[d] for d in p.spatial]
    taps = prod(w.size for w in wins)
    cost = ss.num_elements * max(taps, 1) * 4
    tasks = prog.tasks_for(items, cost)
    lo, hi = (kb.lo, kb.hi) if tasks > 1 else (t.i64(0), t.i64(items))
    i32 = lambda v: ir.Constant(t.I32, v)  # noqa: E731

    def vty(n):
        return sty if n == 1 else ir.VectorType(sty, n)

    def splat(v, n):
        if n == 1:
            return v
        ty = ir.VectorType(v.type, n)
        one = b.insert_element(ir.Constant(ty, ir.Undefined), v, i32(0))
        return b.shuffle_vector(one, ir.Constant(ty, ir.Undefined), ir.Constant(ir.VectorType(t.I32, n), [0] * n))

    def load(ptr, off, n):
        return b.load(b.gep(ptr, [off], source_etype=sty), typ=vty(n), align=align)

    def store(v, ptr, off):
        b.store(v, b.gep(ptr, [off], source_etype=sty), align=align)

    def nest(sizes, name, fn, dims=()):
        """Row-major loops over ``sizes``; ``fn(indices)`` in the innermost body."""
        if len(dims) == len(sizes):
            fn(list(dims))
            return
        with for_range(b, 0, sizes[len(dims)], f"{name}{len(dims)}") as i:
            nest(sizes, name, fn, (*dims, i))

    def run(obase_x, obase_s, obase_o, chunks):
        """The item's channels ``chunks`` [(offset value, lanes)]: init its output slice, then select
        and scatter every source position."""
        init_v = {n: splat(init, n) for _, n in chunks}

        def init_at(pos):
            off = obase_o
            for d, i in zip(p.spatial, pos):
                off = b.add(off, b.mul(i, t.i64(ost[d])))
            for c, n in chunks:
                store(init_v[n], op, b.add(off, c))
        nest(x_sp, "pi", init_at)
        best = [kb.kctx.alloca(vty(n), "best") for _, n in chunks]
        tap_ty = {n: ir.VectorType(t.I32, n) if n > 1 else t.I32 for _, n in chunks}
        which = [kb.kctx.alloca(tap_ty[n], "tap") for _, n in chunks]
        seen = kb.kctx.alloca(t.I1, "seen")

        def taps_of(spos, fn):
            """fn(tap number, x offset, out offset) for each window position inside the operand."""
            def body(wpos):
                valid, xoff, ooff, tap = ir.Constant(t.I1, 1), obase_x, obase_o, t.i64(0)
                for k, (d, w) in enumerate(zip(p.spatial, wins)):
                    q = b.sub(b.add(b.mul(spos[k], t.i64(w.stride)), b.mul(wpos[k], t.i64(w.window_dilation))),
                              t.i64(w.padding_low))
                    valid = b.and_(valid, b.icmp_unsigned("<", q, t.i64(x_sp[k])))
                    xoff = b.add(xoff, b.mul(q, t.i64(xst[d])))
                    ooff = b.add(ooff, b.mul(q, t.i64(ost[d])))
                    tap = b.add(b.mul(tap, t.i64(w.size)), wpos[k])
                fnc = b.block.function
                yes, done = fnc.append_basic_block("pg.tap"), fnc.append_basic_block("pg.next")
                b.cbranch(valid, yes, done)
                b.position_at_end(yes)
                fn(b.trunc(tap, t.I32), xoff, ooff)
                b.branch(done)
                b.position_at_end(done)
            nest([w.size for w in wins], "pw", body)

        def source_at(spos):
            b.store(ir.Constant(t.I1, 0), seen)

            def select(tap, xoff, _):
                first = b.not_(b.load(seen))
                for (c, n), bp, wp in zip(chunks, best, which):
                    v = load(xp, b.add(xoff, c), n)
                    cur = b.load(bp, typ=vty(n))
                    take = b.or_(splat(first, n), b.fcmp_unordered(p.take, cur, v))
                    b.store(b.select(take, v, cur), bp)
                    b.store(b.select(take, splat(tap, n), b.load(wp, typ=tap_ty[n])), wp)
                b.store(ir.Constant(t.I1, 1), seen)
            taps_of(spos, select)
            soff = obase_s
            for d, i in zip(p.spatial, spos):
                soff = b.add(soff, b.mul(i, t.i64(sst[d])))
            srcs = [load(sp, b.add(soff, c), n) for c, n in chunks]

            def scatter(tap, _, ooff):
                for (c, n), wp, s in zip(chunks, which, srcs):
                    hit = b.icmp_unsigned("==", b.load(wp, typ=tap_ty[n]), splat(tap, n))
                    dst = b.add(ooff, c)
                    cur = load(op, dst, n)
                    store(b.select(hit, b.fadd(cur, s), cur), op, dst)
            # No window position inside the operand: nothing selected, nothing scattered.
            fnc = b.block.function
            yes, done = fnc.append_basic_block("pg.scatter"), fnc.append_basic_block("pg.done")
            b.cbranch(b.load(seen), yes, done)
            b.position_at_end(yes)
            taps_of(spos, scatter)
            b.branch(done)
            b.position_at_end(done)
        nest(src_sp, "ps", source_at)

    with for_range(b, lo, hi, "pg") as item:
        o, blk = b.udiv(item, t.i64(nblk)), b.urem(item, t.i64(nblk))
        c0 = b.mul(blk, t.i64(block))
        bases = [c0, c0, c0]
        rem = o
        for d in reversed(p.outer):
            size = xs.dimensions[d]
            i = b.urem(rem, t.i64(size)) if size > 1 else t.i64(0)
            rem = b.udiv(rem, t.i64(size)) if size > 1 else rem
            bases = [b.add(base, b.mul(i, t.i64(st[d]))) for base, st in zip(bases, (xst, sst, ost))]
        last = C - (nblk - 1) * block
        full = [(t.i64(k * lanes), lanes) for k in range(nvec)]
        tail = [(k * lanes, lanes) for k in range(last // lanes)] + \
            [(last // lanes * lanes + j, 1) for j in range(last % lanes)]
        # Channel offsets are relative to the item's first channel, which the bases include.
        if last == block:
            run(*bases, full)
        else:
            fnc = b.block.function
            fast, slow, done = (fnc.append_basic_block(n) for n in ("pg.full", "pg.last", "pg.end"))
            b.cbranch(b.icmp_unsigned("<", blk, t.i64(nblk - 1)), fast, slow)
            b.position_at_end(fast)
            run(*bases, full)
            b.branch(done)
            b.position_at_end(slow)
            run(*bases, [(t.i64(c), n) for c, n in tail])
            b.branch(done)
            b.position_at_end(done)
    prog.call_kernel(kb, instr.name, "select-and-scatter", items, tasks, cost)
