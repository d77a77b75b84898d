"""Stage: codegen — scatter kernels: ``scatter`` and ``select-and-scatter``.

- scatter: the operands are copied to the outputs, then the updates are applied in scatter-index order;
  a whole update window is skipped when it does not fit in the operand, as XLA specifies.
- select-and-scatter: per source element, the window's selected position (first by the ``select``
  computation), then the ``scatter`` computation combines into it, in source order.
Both run single-threaded: updates may collide, and XLA applies them in order. The max-pool gradient
over channels-last arrays (a float compare select, an add scatter) goes to ``pooling.py`` instead:
parallel over channel blocks, which never collide, and vectorised along them.
"""
from __future__ import annotations

from math import prod

from llvmlite import ir

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.buffers import leaves
from tfxla_cluster.codegen.elemental import FusedEmitter
from tfxla_cluster.codegen.kernel_builder import KernelBuilder, array_operands, flatten, thunk
from tfxla_cluster.codegen.kernels import pooling
from tfxla_cluster.codegen.loops import Index, emit_loop_nest, if_else_value, if_then, scalar_index, work_items
from tfxla_cluster.hlo.eval_compute import simple_reducer
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape


@thunk(O.SCATTER)
def _scatter(prog, instr, operands, out) -> None:
    operands = array_operands(instr, operands)
    k = (len(operands) - 1) // 2
    kb = KernelBuilder(prog, instr.name)
    b, kctx = kb.builder, kb.kctx
    bases = [kb.array(r) for r in operands[:k]]
    idx_arr = kb.array(operands[k])
    upds = [kb.array(r) for r in operands[k + 1:]]
    outs = [kb.array(r) for r in leaves(out)]
    dn = instr.scatter_dimension_numbers
    oshape, ishape, ushape = operands[0].shape, operands[k].shape, operands[k + 1].shape
    for base, dst in zip(bases, outs):
        emit_loop_nest(kctx, dst.shape, lambda idx, s=base, d=dst: d.store(idx, s.load(idx)), 0,
                       work_items(dst.shape, False), False, "init")
    window_dims = list(dn.update_window_dims)
    scatter_dims = [d for d in range(ushape.rank) if d not in window_dims]
    idx_batch = [d for d in range(ishape.rank) if d != dn.index_vector_dim]
    win_operand = [d for d in range(oshape.rank)
                   if d not in dn.inserted_window_dims and d not in dn.input_batching_dims]
    extent = [1] * oshape.rank
    for j, d in enumerate(win_operand):
        extent[d] = ushape.dimensions[window_dims[j]]
    order = scatter_dims + window_dims  # windows applied in scatter-index order
    loop_shape = Shape(T.S32, tuple(ushape.dimensions[d] for d in order))
    em = FusedEmitter(kctx, None, [])
    iet = ishape.element_type
    update_first = _inlined_constant_minmax(instr, scatter_dims, ushape)
    window = [ushape.dimensions[d] for d in window_dims]
    et = instr.shape.element_type if not instr.shape.is_tuple else None
    kept = _denormals_kept(instr, et, prod(window), update_first)

    def body(lidx):
        ld = lidx.get_dims(b)
        ud = [None] * ushape.rank
        for pos, d in enumerate(order):
            ud[d] = ld[pos]
        svals = [ud[d] for d in scatter_dims]
        start = [t.i64(0)] * oshape.rank
        for kk, od in enumerate(dn.scatter_dims_to_operand_dims):
            ii = [None] * ishape.rank
            for j, d in enumerate(idx_batch):
                ii[d] = svals[j]
            if dn.index_vector_dim < ishape.rank:
                ii[dn.index_vector_dim] = t.i64(kk)
            v = idx_arr.load(Index(ii, ishape))
            start[od] = em.ops.convert(iet, T.S64, v) if iet is not T.U64 else v
        for od, sd in zip(dn.input_batching_dims, dn.scatter_indices_batching_dims):
            start[od] = svals[idx_batch.index(sd)]
        ok = ir.Constant(t.I1, 1)
        for d in range(oshape.rank):
            ok = b.and_(ok, b.icmp_signed(">=", start[d], t.i64(0)))
            ok = b.and_(ok, b.icmp_signed("<=", b.add(start[d], t.i64(extent[d])), t.i64(oshape.dimensions[d])))
        with if_then(kctx, ok):
            oi = list(start)
            for j, d in enumerate(win_operand):
                oi[d] = b.add(start[d], ud[window_dims[j]])
            cur = [o.load(Index(oi, o.shape)) for o in outs]
            upd = [u.load(Index(ud, u.shape)) for u in upds]
            args = upd + cur if update_first else cur + upd
            if kept == 0:
                new = em.ops.flush_denormal(et, em.call(instr.to_apply, args))
            elif kept is not None:
                new = _minmax_blended(em, instr, et, args, [ud[d] for d in window_dims], window, kept)
            else:
                new = em.call(instr.to_apply, args)
            for o, v in zip(outs, flatten(new)):
                o.store(Index(oi, o.shape), v)

    if loop_shape.num_elements:
        emit_loop_nest(kctx, loop_shape, body, 0, work_items(loop_shape, False), False, "u")
    prog.call_kernel(kb, instr.name, "scatter", 1)


def _denormals_kept(instr, et, window: int, update_first: bool) -> int | None:
    """How many leading positions of each update window keep a ±denormal max/min result's bits, as TF's
    XLA computes them (None: not an f32/f64/bf16 max/min combiner).

    Under DAZ an x86 max/min instruction returns a ±denormal operand as ±0, a compare and blend keeps its
    bits. XLA:CPU's scatter loop over a window of ``window`` elements (row-major, flattened) vectorises to
    compare-and-blend when ``window`` is a multiple of 4; windows ≡ 2 (mod 4) stay scalar ``vmaxss``, odd
    ones below 17 become one ``vmaxps``, and odd ones from 17 on run a vector loop over all but the last
    ``window mod 4`` elements, which are scalar (objdump of TF 2.21's scatter fusions, f32 and f64, windows
    1-65). A bf16 combiner runs widened to f32 and always flushes (``vmaxss``/``vmaxps``), and so does the
    inlined one-index scatter (an elementwise max/min loop: see ``_inlined_constant_minmax``)."""
    if et not in (T.F32, T.F64, T.BF16) or simple_reducer(instr.to_apply) not in (O.MAXIMUM, O.MINIMUM):
        return None
    if et is T.BF16 or update_first:
        return 0
    if window % 4 == 0:
        return window
    return window - window % 4 if window % 2 and window >= 17 else 0


def _minmax_blended(em, instr, et, args, wpos, window, kept: int):
    """The max/min combiner's result at window position ``wpos``: its chosen operand's bits (TF's compare
    and blend) before flat window position ``kept``, a ±denormal flushed to ±0 from there on (see
    ``_denormals_kept``)."""
    root = instr.to_apply.root
    x, y = (args[o.parameter_number] for o in root.operands)
    blended = em.ops.minmax_keeping_bits(root.opcode, et, x, y)
    if kept >= prod(window):
        return blended
    b = em.b
    flat = t.i64(0)
    for v, n in zip(wpos, window):
        flat = b.add(b.mul(flat, t.i64(n)), v)
    flushed = em.ops.flush_denormal(et, blended)
    return b.select(b.icmp_signed("<", flat, t.i64(kept)), blended, flushed)


def _inlined_constant_minmax(instr, scatter_dims, ushape) -> bool:
    """Whether XLA:CPU ends up computing this scatter's ``max``/``min`` combiner with the update first.

    XLA:CPU expands every scatter into a while loop (ScatterExpander) of ``combiner(operand slice,
    update)``. A loop of one trip (one scatter index) is inlined by WhileLoopSimplifier, so when the
    operand is a broadcast scalar constant (the init of ``unsorted_segment_max``/``min``), the combiner
    becomes ``max(broadcast constant, update)`` in a fused loop, where MLIR canonicalizes the constant to
    the rhs: under fast min/max (``lhs >=u rhs ? lhs : rhs``) a NaN update then wins over the init (TF:
    ``unsorted_segment_max([[0, nan]], [0], 1)`` is ``[[0, nan]]``). With more indices, or an operand
    that is not a broadcast constant, the operand slice stays first."""
    if len(instr.operands) != 3 or simple_reducer(instr.to_apply) not in (O.MAXIMUM, O.MINIMUM):
        return False
    base = instr.operands[0]
    if not (base.opcode is O.CONSTANT and base.shape.rank == 0
            or base.opcode is O.BROADCAST and base.operands[0].opcode is O.CONSTANT):
        return False
    root = instr.to_apply.root
    if [o.parameter_number for o in root.operands] != [0, 1]:
        return False
    return prod(ushape.dimensions[d] for d in scatter_dims) == 1


@thunk(O.SELECT_AND_SCATTER)
def _select_and_scatter(prog, instr, operands, out) -> None:
    operands = array_operands(instr, operands)
    native = pooling.plan(instr, operands)
    if native is not None:   # the max-pool gradient over NHWC: parallel, vectorised along channels
        pooling.emit(prog, instr, native, operands, out)
        return
    kb = KernelBuilder(prog, instr.name)
    b, kctx = kb.builder, kb.kctx
    x, source, init = (kb.array(r) for r in operands)
    dst = kb.array(out)
    select, scatter = instr.called_computations
    window = instr.window.dimensions
    xshape, sshape = operands[0].shape, operands[1].shape
    et = xshape.element_type
    init_v = kb.read(operands[2])(scalar_index(operands[2].shape))
    emit_loop_nest(kctx, dst.shape, lambda idx: dst.store(idx, init_v), 0, work_items(dst.shape, False), False, "i")
    em = FusedEmitter(kctx, None, [])
    wshape = Shape(T.S32, tuple(w.size for w in window))

    def body(sidx):
        sd = sidx.get_dims(b)
        has = kctx.alloca(t.I1, "has")
        sel_v = kctx.alloca(t.value_type(et), "selv")
        sel_i = [kctx.alloca(t.I64, f"seli{d}") for d in range(xshape.rank)]
        b.store(ir.Constant(t.I1, 0), has)

        def wbody(widx):
            wd = widx.get_dims(b)
            valid = ir.Constant(t.I1, 1)
            pos = []
            for d, w in enumerate(window):
                p = b.sub(b.add(b.mul(sd[d], t.i64(w.stride)), b.mul(wd[d], t.i64(w.window_dilation))),
                          t.i64(w.padding_low))
                if w.base_dilation != 1:
                    valid = b.and_(valid, b.icmp_signed(">=", p, t.i64(0)))
                    valid = b.and_(valid, b.icmp_signed("==", b.srem(p, t.i64(w.base_dilation)), t.i64(0)))
                    p = b.sdiv(p, t.i64(w.base_dilation))
                valid = b.and_(valid, b.icmp_unsigned("<", p, t.i64(xshape.dimensions[d])))
                pos.append(p)
            with if_then(kctx, valid):
                v = x.load(Index(pos, xshape))
                take = if_else_value(kctx, b.load(has),
                                     lambda: b.not_(em.call(select, [b.load(sel_v), v])),
                                     lambda: ir.Constant(t.I1, 1), t.I1)
                with if_then(kctx, take):
                    b.store(v, sel_v)
                    for s, p in zip(sel_i, pos):
                        b.store(p, s)
                    b.store(ir.Constant(t.I1, 1), has)

        if wshape.num_elements:
            emit_loop_nest(kctx, wshape, wbody, 0, work_items(wshape, False), False, "w")
        with if_then(kctx, b.load(has)):
            oi = Index([b.load(s) for s in sel_i], dst.shape)
            new = em.call(scatter, [dst.load(oi), source.load(Index(sd, sshape))])
            dst.store(oi, new)

    if sshape.num_elements:
        emit_loop_nest(kctx, sshape, body, 0, work_items(sshape, False), False, "s")
    prog.call_kernel(kb, instr.name, "select-and-scatter", 1)
