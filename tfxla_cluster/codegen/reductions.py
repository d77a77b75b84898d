"""Stage: codegen — reduction strategies of the loop kernel (``kernels/loop.py``) beyond one loop nest.

- Column reductions: a simple single-input reduce whose reduced dims are all physically outside its kept
  dims (a sum over the batch of [N, M]) accumulates whole rows into a block of COLUMN_BLOCK results, so
  its inner loop is contiguous and vectorises.
- Row-vector reductions: a reduce inside a fusion that keeps its input's minor dim as its result's minor
  dim (a global average pool, [N, H, W, C] -> [N, C]) accumulates each result row at once: before the
  row's inner loop, for each reduced position (outer loops, in layout order), for each element of the
  row (inner, contiguous: it vectorises with no unrolling), acc[c] ⊕= x[..., c]; the row's loop then reads
  acc[c]. Each element is combined in the same order as the per-element loop (unreassociated, so the
  result is bit-identical), but LLVM no longer fully unrolls the reduced loops of every element: less IR,
  less optimisation and machine-code time, and as fast or faster (measured, issue 17).
- Split reductions: a reduction of a big input (SPLIT_MIN_ELEMENTS or more) to one element runs first as
  a parallel kernel of partial pairwise cascades; the reduce itself then combines the partials.

Both apply only to reassociable reducers (``scalar_ops.REASSOCIABLE``), where XLA:CPU reorders too.
"""
from __future__ import annotations

from math import prod

from llvmlite import ir

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.gemm import split
from tfxla_cluster.codegen.elemental import CASCADE_BLOCK, Cascade, FusedEmitter, _identity, _simple_combine, \
    in_order_reduce, row_lane_order
from tfxla_cluster.codegen.kernel_builder import KernelBuilder
from tfxla_cluster.codegen.loops import Index, for_range, major_to_minor, scalar_index
from tfxla_cluster.codegen.scalar_ops import REASSOCIABLE
from tfxla_cluster.hlo.eval_compute import simple_reducer
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape


COLUMN_BLOCK = 512  # kept elements per block: the block of accumulators stays in L1


def is_column_reduce(root, out_shape: Shape, options) -> bool:
    """A simple single-input reduce whose reduced dims are all physically outside its kept dims (e.g.
    a sum over the batch of [N, M]): per-element inner loops would stride through memory. (Not one that TF's
    XLA sums in vector lanes on ``options``' target: ``elemental.row_lane_order``.)"""
    if root.opcode is not O.REDUCE or len(root.operands) != 2 or row_lane_order(root, options):
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


ROW_VECTOR_MAX_BYTES = 1 << 16   # a result row's accumulators, on the stack
# Shorter result rows (bytes) keep the per-element loops: a row of 3 channels ([16, 32, 32, 3] summed over
# dim 1) ran 2.5x slower as row-vectors (measured, issue 17).
ROW_VECTOR_MIN_BYTES = 32
# A block of a row accumulated in registers (bits): four AVX2 vectors; rows up to ROW_VECTOR_BLOCKED_BITS
# go in blocks (accumulators in memory ran short rows, [64, 8, 8, 16] summed over 8 x 8, 1.8x slower).
ROW_VECTOR_BLOCK_BITS = 1024
ROW_VECTOR_BLOCKED_BITS = 256 * 32


def row_vector_reduces(candidates, out_shape: Shape, options) -> list:
    """The reduces among ``candidates`` (instructions a loop kernel over ``out_shape`` evaluates at its own
    index, in rows: ``loops.emit_loop_nest``) that run as row-vector reductions: single-input, integer (any
    order gives the same bits) or in-order float add/mul (``elemental.in_order_reduce``: the per-element
    order is kept) that TF's XLA does not sum in vector lanes on ``options``' target
    (``elemental.row_lane_order``), with the loop's dimensions and layout, whose input's minor dim is kept as
    the result row's minor dim, and whose rows are at least ROW_VECTOR_MIN_BYTES long."""
    order = major_to_minor(out_shape)
    if out_shape.rank == 0:
        return []
    n = out_shape.dimensions[order[-1]]
    found = []
    for r in candidates:
        if r.opcode is not O.REDUCE or len(r.operands) != 2 or r.shape.is_tuple:
            continue
        if (r.shape.dimensions, r.shape.minor_to_major) != (out_shape.dimensions, out_shape.minor_to_major):
            continue
        et = r.shape.element_type
        if n * et.bit_width < 8 * ROW_VECTOR_MIN_BYTES or n * max(et.bit_width, 32) > 8 * ROW_VECTOR_MAX_BYTES:
            continue   # (f16 and bf16 accumulate in f32)
        integer = not et.is_float and et is not T.PRED and simple_reducer(r.to_apply) in REASSOCIABLE
        if not (integer or in_order_reduce(r) and not row_lane_order(r, options)):
            continue
        in_shape = r.operands[0].shape
        keep = [d for d in range(in_shape.rank) if d not in r.dimensions]
        if r.dimensions and keep[order[-1]] == major_to_minor(in_shape)[-1]:
            found.append(r)
    return found


class RowVectorReduce:
    """One row-vector reduction in a loop kernel: ``row_start`` accumulates a result row's [j0, j1) into a
    stack array; ``gen`` is the reduce's generator (reads it)."""

    def __init__(self, kb, em, r) -> None:
        self.em, self.r = em, r
        self.op = simple_reducer(r.to_apply)
        self.et = r.shape.element_type
        self.in_order = in_order_reduce(r)
        self.cty = t.compute_float_type(self.et) if self.et.is_float else t.value_type(self.et)
        order = major_to_minor(r.shape)
        self.inner = order[-1]
        self.acc = kb.kctx.alloca(ir.ArrayType(self.cty, r.shape.dimensions[self.inner]), r.name + ".rows")
        self.x = em.gen(r.operands[0])
        self.init = em.gen(r.operands[1])

    def _slot(self, c):
        return self.em.b.gep(self.acc, [t.i64(0), c], inbounds=True)

    def row_start(self, dims, j0, j1) -> None:
        """Accumulate the row at output ``dims`` (inner dim left out), elements [j0, j1): blocks of
        ROW_VECTOR_BLOCK elements in registers (the block's loop is fully unrolled, its accumulators promoted
        and SLP-vectorised), then the rest in the row's stack array."""
        em, r, et = self.em, self.r, self.et
        b, kctx = em.b, em.kctx
        with kctx.scope():
            init = self.init(scalar_index(r.operands[1].shape))
            if et.is_float:
                init = em.ops.to_compute(et, init)
                if self.op is O.ADD:   # as elemental._reduce's in-order sum: XLA's first init + x0 stays
                    init = em.ops.call_intrinsic("arithmetic.fence", init)
        width = max(et.bit_width, 32)
        block = ROW_VECTOR_BLOCK_BITS // width
        while block > 1 and block * width > 256 and block > r.shape.dimensions[self.inner]:
            block //= 2   # a shorter row: blocks of fewer vectors (at least one)
        n = r.shape.dimensions[self.inner]
        if n * width > ROW_VECTOR_BLOCKED_BITS:
            # A long row is swept whole for each reduced position (its input rows stream through the
            # cache); blocks of it would stride across the input rows (measured: [32, 7, 7, 1280]
            # summed over 7 x 7 took 1.8x as long in blocks).
            self._accumulate_rest(dims, init, j0, j1)
            return
        nblk = b.udiv(b.sub(j1, j0), t.i64(block))
        full = ((("llvm.loop.unroll.full",),))
        with for_range(b, 0, nblk, "rvb") as blk:
            c0 = b.add(j0, b.mul(blk, t.i64(block)))
            regs = kctx.alloca(ir.ArrayType(self.cty, block), r.name + ".block")

            def reg(k):
                return b.gep(regs, [t.i64(0), k], inbounds=True)
            with for_range(b, 0, block, "rvk", hints=full) as k:
                b.store(init, reg(k))
            self._accumulate(dims, lambda k: b.add(c0, k), reg, 0, block, full)
            with for_range(b, 0, block, "rvs", hints=full) as k:
                b.store(b.load(reg(k)), self._slot(b.add(c0, k)))
        self._accumulate_rest(dims, init, b.add(j0, b.mul(nblk, t.i64(block))), j1)

    def _accumulate_rest(self, dims, init, c0, c1) -> None:
        """Row elements [c0, c1) accumulated in the row's stack array."""
        with for_range(self.em.b, c0, c1, "rvi") as c:
            self.em.b.store(init, self._slot(c))
        self._accumulate(dims, lambda c: c, self._slot, c0, c1, ())

    def _accumulate(self, dims, element, slot_of, c0, c1, hints) -> None:
        """For each reduced position (outer loops, layout order), for c in [c0, c1) (inner):
        ``slot_of(c)`` ⊕= x at row element ``element(c)``."""
        em, r, et = self.em, self.r, self.et
        b, kctx = em.b, em.kctx
        in_shape = r.operands[0].shape
        keep = [d for d in range(in_shape.rank) if d not in r.dimensions]
        rdims = [d for d in major_to_minor(in_shape) if d in r.dimensions]
        rvals: dict = {}

        def nest(k: int) -> None:
            if k == len(rdims):
                with for_range(b, c0, c1, "rvc", hints=hints) as c:
                    with kctx.scope():
                        idx = [None] * in_shape.rank
                        for j, d in enumerate(keep):
                            idx[d] = element(c) if j == self.inner else dims[j]
                        for d, v in rvals.items():
                            idx[d] = v
                        v = self.x(Index(idx, in_shape))
                        v = em.ops.to_compute(et, v) if et.is_float else v
                        slot = slot_of(c)
                        acc = b.load(slot)
                        new = _simple_combine(em, self.op, et, acc, v, not self.in_order)
                        if et.is_float and not (isinstance(v, ir.Instruction) and v.opname == "fmul"):
                            # x86 returns the first operand's NaN, and the backend may swap two loaded
                            # operands: a NaN accumulator is kept explicitly, as the per-element loop's
                            # register accumulator (the first operand) keeps it. (A product is contracted
                            # into an FMA whose product operand comes first, as in the per-element loop.)
                            new = b.select(b.fcmp_unordered("uno", acc, acc), acc, new)
                        b.store(new, slot)
                return
            d = rdims[k]
            # Not a reduction loop for LLVM: every iteration updates each accumulator once, in order.
            with for_range(b, 0, in_shape.dimensions[d], f"rv{d}") as i:
                rvals[d] = i
                nest(k + 1)
        nest(0)

    def gen(self, index: Index):
        b = self.em.b
        v = b.load(self._slot(index.get_dims(b)[self.inner]))
        return self.em.ops.from_compute(self.et, v) if self.et.is_float else v


# A bf16 max/min reduce over one dimension of at most this many elements is fully unrolled in TF's XLA, so
# its output loop is the innermost loop and LLVM vectorises it (measured: 22 rows yes, 23 no).
BF16_MINMAX_UNROLLED_ROWS = 22


def bf16_minmax_vector_lanes(n: int, nested: bool) -> int:
    """How many leading elements of an output row of ``n`` TF's XLA computes in vector lanes, for a bf16 max/min
    reduce (``bf16_minmax_reduces``); ``nested``: the row's loop is inside other output loops. LLVM's loop
    vectoriser on the innermost output loop (unrolling disabled): a trip count under 16 is vectorised only with
    no remainder (4, 8, and 2 unless nested); from 16 on, with 8 lanes, or with 4 where 8 would leave 4-7
    elements to the scalar remainder and the row is shorter than 32 (TF 2.21; measured for n = 1..100, and
    n = 2..37 inside loops of 2, 3 and 5)."""
    if n < 16:
        return n if n in (4, 8) or n == 2 and not nested else 0
    if n < 32 and n % 8 >= 4:
        return n - n % 4
    return n - n % 8


def bf16_minmax_reduces(instr) -> dict:
    """Overrides for a bf16 max/min reduce that TF's XLA emits with some output lanes vectorised: the root of
    the kernel (or under a reshape/bitcast), one reduced dimension of 2..BF16_MINMAX_UNROLLED_ROWS elements (its
    operand may be computed in the kernel: measured with negate/abs/multiply producers). XLA clones the reducer
    in f32 with its result rounded through bf16; in the vector lanes LLVM folds each step after the first
    (``acc < x ? x : acc``) through the rounding's bitcasts into a select of the bits, which keeps a ±denormal
    where an x86 max/min (the first step, and every step of the scalar lanes) returns it as ±0 under DAZ.
    Returns {id(reduce): override maker}."""
    fused = instr.opcode is O.FUSION
    root = instr.fused_computation.root if fused else instr
    while root.opcode in (O.RESHAPE, O.BITCAST) and fused:
        root = root.operands[0]
    r = root
    if r.opcode is not O.REDUCE or len(r.operands) != 2 or r.shape.is_tuple or r.shape.element_type is not T.BF16:
        return {}
    op = simple_reducer(r.to_apply)
    in_shape = r.operands[0].shape
    if op not in (O.MAXIMUM, O.MINIMUM) or len(r.dimensions) != 1:
        return {}
    rows = in_shape.dimensions[r.dimensions[0]]
    row = [d for d in major_to_minor(r.shape) if r.shape.dimensions[d] != 1]
    if not 2 <= rows <= BF16_MINMAX_UNROLLED_ROWS or not row:
        return {}
    inner = row[-1]
    n = r.shape.dimensions[inner]
    # "nested" as LLVM's costs see it: output loops around the row, and the reduced dim strides over more than
    # the row (a kept dim between them: bf16[2, 3, 2] over dim 0 stays scalar; over the last-but-one dim of
    # [A, R, 2], or of [A, B, R, 2] — a max_pool whose window covers W — it is vectorised: fuzz seed
    # 296001142, measured on Zen 3 and Zen 4)
    order = major_to_minor(in_shape)
    rdim = r.dimensions[0]
    kept_inside = [d for d in order[order.index(rdim) + 1:] if in_shape.dimensions[d] != 1]
    lanes = bf16_minmax_vector_lanes(n, len(row) > 1 and len(kept_inside) > 1)
    if not lanes:
        return {}

    def make(kb, em, r=r):
        x, init = em.gen(r.operands[0]), em.gen(r.operands[1])
        rdim = r.dimensions[0]
        keep = [d for d in range(in_shape.rank) if d != rdim]
        b = em.b

        def gen(index):
            od = index.get_dims(b)
            vector = None if lanes == n else b.icmp_signed("<", od[inner], t.i64(lanes))
            acc = em.ops.to_compute(T.BF16, init(scalar_index(r.operands[1].shape)))
            for k in range(rows):
                idx = [None] * in_shape.rank
                for j, d in enumerate(keep):
                    idx[d] = od[j]
                idx[rdim] = t.i64(k)
                v = em.ops.to_compute(T.BF16, x(Index(idx, in_shape)))
                plain = _simple_combine(em, op, T.BF16, acc, v, True)
                if k == 0:
                    acc = plain
                    continue
                kept = em.ops.minmax_keeping_bits(op, T.F32, acc, v)
                acc = kept if vector is None else b.select(vector, kept, plain)
            return em.ops.from_compute(T.BF16, acc)
        return gen
    return {id(r): make}
