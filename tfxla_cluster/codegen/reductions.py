"""Stage: codegen — reduction strategies of the loop kernel (``kernels/loop.py``) beyond one loop nest.

- Column reductions: a simple single-input reduce whose reduced dims are all physically outside its kept
  dims (a sum over the batch of [N, M]) accumulates whole rows into a block of COLUMN_BLOCK results, so
  its inner loop is contiguous and vectorises.
- Split reductions: a reduction of a big input (SPLIT_MIN_ELEMENTS or more) to one element runs first as
  a parallel kernel of partial pairwise cascades; the reduce itself then combines the partials.

Both apply only to reassociable reducers (``scalar_ops.REASSOCIABLE``), where XLA:CPU reorders too.
"""
from __future__ import annotations

from math import prod

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.gemm import split
from tfxla_cluster.codegen.elemental import CASCADE_BLOCK, Cascade, FusedEmitter, _identity, _simple_combine
from tfxla_cluster.codegen.kernel_builder import KernelBuilder
from tfxla_cluster.codegen.loops import Index, for_range, major_to_minor, scalar_index
from tfxla_cluster.codegen.scalar_ops import REASSOCIABLE
from tfxla_cluster.hlo.eval_compute import simple_reducer
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape


COLUMN_BLOCK = 512  # kept elements per block: the block of accumulators stays in L1


def is_column_reduce(root, out_shape: Shape) -> bool:
    """A simple single-input reduce whose reduced dims are all physically outside its kept dims (e.g.
    a sum over the batch of [N, M]): per-element inner loops would stride through memory."""
    if root.opcode is not O.REDUCE or len(root.operands) != 2:
        return False
    op = simple_reducer(root.to_apply)
    et = root.shape.element_type
    if op not in REASSOCIABLE or et in (T.F16, T.BF16) or et.is_complex:
        return False
    in_shape = root.operands[0].shape
    rdims = set(root.dimensions)
    phys = [d for d in major_to_minor(in_shape) if in_shape.dimensions[d] != 1]
    red = [d for d in phys if d in rdims]
    kept = [d for d in phys if d not in rdims]
    if not red or not kept or phys != red + kept or prod(in_shape.dimensions[d] for d in kept) < 8:
        return False
    # The result must be laid out like the kept dims of the input.
    keep_all = [d for d in range(in_shape.rank) if d not in rdims]
    out_phys = [keep_all[d] for d in major_to_minor(out_shape) if out_shape.dimensions[d] != 1]
    return out_phys == kept


def emit_column_reduce(prog, kb, em, name, kind, root, out_arr, cost) -> None:
    """out[k] = init; for each reduced position r (outer), out[k] ⊕= x[r, k] over a block of k (inner,
    contiguous, vectorised). Work items are kept elements, in blocks of COLUMN_BLOCK."""
    b = kb.builder
    x = em.gen(root.operands[0])
    init = em.gen(root.operands[1])
    op = simple_reducer(root.to_apply)
    et = root.shape.element_type
    in_shape = root.operands[0].shape
    rdims = set(root.dimensions)
    red = [d for d in major_to_minor(in_shape) if d in rdims]
    kept = [d for d in major_to_minor(in_shape) if d not in rdims]
    R = prod(in_shape.dimensions[d] for d in red)
    Kn = prod(in_shape.dimensions[d] for d in kept)
    nblk = (Kn + COLUMN_BLOCK - 1) // COLUMN_BLOCK
    tasks = prog.tasks_for(nblk, cost)
    lo, hi = (kb.lo, kb.hi) if tasks > 1 else (0, nblk)
    with for_range(b, lo, hi, "cb") as blk:
        k0 = b.mul(blk, t.i64(COLUMN_BLOCK))
        k1 = b.add(k0, t.i64(COLUMN_BLOCK))
        k1 = b.select(b.icmp_signed(">", k1, t.i64(Kn)), t.i64(Kn), k1)
        with kb.kctx.scope():
            init_v = init(scalar_index(root.operands[1].shape))
        with for_range(b, k0, k1, "ci") as k:
            out_arr.store(Index(None, out_arr.shape, k), init_v)
        with for_range(b, 0, R, "cr") as r:
            rd = split(b, r, [in_shape.dimensions[d] for d in red])
            row = b.mul(r, t.i64(Kn))
            with for_range(b, k0, k1, "ck") as k:
                with kb.kctx.scope():
                    kd = split(b, k, [in_shape.dimensions[d] for d in kept])
                    dims = [None] * in_shape.rank
                    for d, v in zip(red + kept, rd + kd):
                        dims[d] = v
                    # Non-size-1 dims are physically red + kept, so r*Kn + k is the physical offset.
                    idx = Index(dims, in_shape, b.add(row, k))
                    o = Index(None, out_arr.shape, k)
                    out_arr.store(o, _simple_combine(em, op, et, out_arr.load(o), x(idx), True))
    prog.call_kernel(kb, name, kind + ":column", nblk, tasks, cost)


SPLIT_MIN_ELEMENTS = 1 << 18  # below this a full reduction stays in one kernel


def split_reductions(prog, instr, operands, materialized) -> dict:
    """Reductions to a single element of a big input (reduce_sum(x) over 16M elements) would run on one
    core: they become a parallel kernel of P partial results (each a pairwise cascade over its chunk),
    and the reduce itself then just combines the partials. Returns {id(reduce): override maker}."""
    threads = prog.options.thread_count
    if threads <= 1:
        return {}
    fused = instr.opcode is O.FUSION
    comp = instr.fused_computation if fused else None
    candidates = comp.post_order() if fused else [instr]
    result = {}
    for r in candidates:
        if r.opcode is not O.REDUCE or len(r.operands) != 2 or r.shape.num_elements != 1:
            continue
        op = simple_reducer(r.to_apply)
        in_shape = r.operands[0].shape
        if op not in REASSOCIABLE or in_shape.num_elements < SPLIT_MIN_ELEMENTS or r.shape.element_type.is_complex:
            continue
        et = r.shape.element_type
        pt = (T.F64 if et is T.F64 else T.F32) if et.is_float else et
        P = 4 * threads
        R = in_shape.num_elements
        chunk = -(-R // P)
        chunk = -(-chunk // CASCADE_BLOCK) * CASCADE_BLOCK
        partial = prog.scratch(Shape(pt, (P,)), r.name + ".partial")
        kb = KernelBuilder(prog, r.name + "_partial")
        params = [kb.read(ref) for ref in operands]
        if fused:
            em = FusedEmitter(kb.kctx, comp, params, {k: kb.read(ref) for k, ref in materialized.items()})
        else:
            em = FusedEmitter(kb.kctx, None, [], {id(o): params[k] for k, o in enumerate(instr.operands)})
        x = em.gen(r.operands[0])
        cty = t.compute_float_type(et) if et.is_float else t.value_type(et)
        arr = kb.array(partial)
        b = kb.builder
        cost = in_shape.byte_size() * 2
        tasks = max(2, prog.tasks_for(P, cost))
        cascade = Cascade(em, op, et, cty)
        with for_range(b, kb.lo, kb.hi, "part") as p:
            cascade.reset()
            start = b.mul(p, t.i64(chunk))
            stop = b.add(start, t.i64(chunk))
            stop = b.select(b.icmp_signed(">", stop, t.i64(R)), t.i64(R), stop)
            start = b.select(b.icmp_signed(">", start, t.i64(R)), t.i64(R), start)

            def element(j):
                v = x(Index(None, in_shape, j))
                return em.ops.to_compute(et, v) if et.is_float else v
            cascade.block(start, stop, element)
            arr.store_offset(p, cascade.total())
        prog.call_kernel(kb, r.name, "reduce-partial", P, tasks, cost)

        def make(kb2, em2, r=r, partial=partial, op=op, et=et, cty=cty, P=P):
            parts = kb2.array(partial)
            init = em2.gen(r.operands[1])

            def gen(index):
                b2 = kb2.builder
                acc = _identity(op, et, cty) or parts.load_offset(t.i64(0))
                for k in range(0 if _identity(op, et, cty) is not None else 1, P):
                    acc = _simple_combine(em2, op, et, acc, parts.load_offset(t.i64(k)), False)
                iv = init(scalar_index(r.operands[1].shape))
                iv = em2.ops.to_compute(et, iv) if et.is_float else iv
                res = _simple_combine(em2, op, et, iv, acc, False)
                del b2
                return em2.ops.from_compute(et, res) if et.is_float else res
            return gen
        result[id(r)] = make
    return result
