"""Dot and convolution on the fast path: GEMM calls (XLA:CPU's DotOpEmitter ``kEigen`` strategy).

A dot whose result is f32/f64 and whose B·M·N·K reaches ``gemm_min_flops`` becomes, per batch, one
``cblas_?gemm`` call into numpy's OpenBLAS (or, without BLAS — AOT objects — an IR GEMM that keeps a
tile of C in vector registers while k runs). Operands already laid out as ``[batch…, M, K]`` or ``[batch…, K, M]`` in memory (size-1
dims ignored) are passed as they are, with the transpose flag; anything else — a fused expression, an
awkward layout, another element type — is first materialised into a row-major scratch buffer. The
result goes straight into the output buffer when its layout is ``[batch…, M, N]``.

Work items are (batch, row block, column block) triples, how many and on how many threads decided by one
table, ``plan_gemm`` (serial / batch / rows / cols; each task calls OpenBLAS on one thread, our pool
supplies the parallelism: never more threads than cores).

Convolutions go to ``conv.py`` first (channel-wise and blocked-im2col kernels); the ones it does not
take (no BLAS — AOT objects —, layouts it does not read in place) in f32/f64 with
``batch_group_count == 1`` use whole im2col here: patches ``[G, N·P, Cg·W]`` times the kernel matrix
``[G, Cg·W, Og]`` (one GEMM per feature group), then a copy into the output layout; a fused elementwise
user (bias, scale, activation) runs on each GEMM block or in that copy. Smaller or other
contractions use the elemental loops of ``elemental.py``.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from llvmlite import ir

from tfxla_cluster.codegen import dot_naive, irtypes as t
from tfxla_cluster.codegen.buffers import BufferRef
from tfxla_cluster.codegen.loops import Index, emit_loop_nest, for_range, major_to_minor, work_items
from tfxla_cluster.codegen.native_runtime import blas_available
from tfxla_cluster.codegen.row_lanes import AVX512, host_target
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape

_GEMM_TYPES = (T.F32, T.F64)
_FLOATS = (T.F16, T.BF16, T.F32, T.F64)
CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS = 101, 111, 112


@dataclass
class DotDims:
    lb: list[int]
    lf: list[int]
    lc: list[int]
    rb: list[int]
    rf: list[int]
    rc: list[int]
    B: int
    M: int
    K: int
    N: int


def dot_dims(instr) -> DotDims:
    lhs, rhs = instr.operands
    dn = instr.dot_dimension_numbers
    lb, lc = list(dn.lhs_batch_dimensions), list(dn.lhs_contracting_dimensions)
    rb, rc = list(dn.rhs_batch_dimensions), list(dn.rhs_contracting_dimensions)
    lf = [d for d in range(lhs.shape.rank) if d not in lb + lc]
    rf = [d for d in range(rhs.shape.rank) if d not in rb + rc]
    ld, rd = lhs.shape.dimensions, rhs.shape.dimensions
    return DotDims(lb, lf, lc, rb, rf, rc, prod(ld[d] for d in lb), prod(ld[d] for d in lf),
                   prod(ld[d] for d in lc), prod(rd[d] for d in rf))


def gemm_eligible(instr, options) -> bool:
    if instr.opcode is not O.DOT or instr.shape.element_type not in _GEMM_TYPES:
        return False
    if any(o.shape.element_type not in _FLOATS for o in instr.operands):
        return False
    d = dot_dims(instr)
    if d.B * d.M * d.N * d.K < options.gemm_min_flops:
        return False
    # XLA's own naive loop on AVX-512, some products rounded (dot_naive): the loop form sums as it does
    return not (host_target(options) == AVX512 and not options.fast_math and dot_naive.canonical(instr))


def conv_gemm_eligible(instr, options) -> bool:
    if instr.opcode is not O.CONVOLUTION or instr.shape.element_type not in _GEMM_TYPES:
        return False
    if instr.batch_group_count != 1 or any(o.shape.element_type is not instr.shape.element_type
                                           for o in instr.operands):
        return False
    rhs = instr.operands[1]
    return instr.shape.num_elements * rhs.shape.num_elements // max(
        rhs.shape.dimensions[instr.convolution_dimension_numbers.kernel_output_feature_dimension], 1) \
        >= options.gemm_min_flops


def _arrangement(shape: Shape, batch, first, second) -> str | None:
    """'N' if memory order is batch+first+second (size-1 dims ignored), 'T' if batch+second+first."""
    nz = lambda ds: [d for d in ds if shape.dimensions[d] != 1]  # noqa: E731
    phys = nz(major_to_minor(shape))
    if phys == nz(batch) + nz(first) + nz(second):
        return "N"
    if phys == nz(batch) + nz(second) + nz(first):
        return "T"
    return None


def split(b: ir.IRBuilder, value, sizes) -> list:
    """Row-major multi-index of ``value`` over ``sizes``."""
    out = [None] * len(sizes)
    rem = value
    for k in range(len(sizes) - 1, -1, -1):
        if k == 0:
            out[k] = rem
        elif sizes[k] == 1:
            out[k] = t.i64(0)
        else:
            out[k] = b.urem(rem, t.i64(sizes[k]))
            rem = b.udiv(rem, t.i64(sizes[k]))
    return out


@dataclass
class Source:
    """A GEMM operand: the buffer it is in (when it is one) and a maker of its element generator inside
    a given kernel (``make(kb) -> index → value``), used when it must be materialised first."""

    shape: Shape
    make: object
    ref: BufferRef | None = None


def materialize_kernel(prog, name: str, jobs) -> None:
    """One loop kernel per (target BufferRef, generator maker): target := generator (parallel rows)."""
    for ref, make in jobs:
        kb = prog.kernel(name)
        gen = make(kb)
        arr = kb.array(ref)
        shape = ref.shape
        work = work_items(shape, False)
        tasks = prog.tasks_for(work, 2 * shape.byte_size())
        lo, hi = (kb.lo, kb.hi) if tasks > 1 else (0, work)
        emit_loop_nest(kb.kctx, shape, lambda idx: arr.store(idx, gen(idx)), lo, hi, False, "m")
        prog.call_kernel(kb, name, "materialize", work, tasks, 2 * shape.byte_size())


def emit_dot_gemm(prog, instr, lhs: Source, rhs: Source, out: BufferRef, epilogue=None, guard=None) -> None:
    """``out := dot(lhs, rhs)``: materialise awkward operands, GEMM over row blocks in parallel, then
    copy into ``out`` unless the GEMM could write it directly. ``epilogue`` (an ``Epilogue`` of
    ``kernels/loop.py``, ``out`` then being its fusion's output): ``out := epilogue(dot)``, applied to each
    GEMM block right after its call while it is in cache, or in the copy-out pass. ``guard``
    (``dot_exact.emit_guarded_dot``): emits the GEMM kernel given ``gemm_kernel``'s operands and the
    kernel's emission (``fast``)."""
    from tfxla_cluster.codegen.scalar_ops import ScalarOps
    d = dot_dims(instr)
    et = instr.shape.element_type
    lshape, rshape = instr.operands[0].shape, instr.operands[1].shape
    jobs = []

    def operand(src: Source, shape, batch, first, second, sizes, name):
        if src.ref is not None and src.shape.element_type is et:
            how = _arrangement(src.ref.shape, batch, first, second)
            if how is not None:
                return src.ref, how
        scratch = prog.scratch(Shape(et, (d.B,) + sizes), name)
        from_et = shape.element_type

        def make(kb):
            b = kb.builder
            ops = ScalarOps(b, kb.kctx.mctx)
            g = src.make(kb)

            def gen(idx):
                bi, i, j = idx.get_dims(b)
                dims = [None] * shape.rank
                for ds, v in ((batch, bi), (first, i), (second, j)):
                    for dd, x in zip(ds, split(b, v, [shape.dimensions[k] for k in ds])):
                        dims[dd] = x
                return ops.convert(from_et, et, g(Index(dims, shape)))
            return gen
        jobs.append((scratch, make))
        return scratch, "N"

    a_ref, ta = operand(lhs, lshape, d.lb, d.lf, d.lc, (d.M, d.K), "dot.lhs")
    b_ref, tb = operand(rhs, rshape, d.rb, d.rc, d.rf, (d.K, d.N), "dot.rhs")
    materialize_kernel(prog, instr.name + "_operands", jobs)
    nb, nl = len(d.lb), len(d.lf)
    rank = instr.shape.rank
    direct = _arrangement(out.shape, list(range(nb)), list(range(nb, nb + nl)), list(range(nb + nl, rank))) == "N" \
        and out.shape.element_type is et
    c_ref = out if direct else prog.scratch(Shape(et, (d.B, d.M, d.N)), "dot.out")
    sizes = instr.shape.dimensions

    def on_block(kb, bi, m, n, linear):
        dims = split(kb.builder, bi, sizes[:nb]) + split(kb.builder, m, sizes[nb:nb + nl]) + \
            split(kb.builder, n, sizes[nb + nl:])
        epilogue.store(kb, dims, linear)
    block_epilogue = on_block if epilogue is not None and direct else None
    def fast():
        gemm_kernel(prog, instr.name, et, d.B, d.M, d.N, d.K, a_ref, ta, b_ref, tb, c_ref, block_epilogue)
    if guard is None:
        fast()
    else:
        guard(prog, instr, d.B, d.M, d.N, d.K, a_ref, ta, b_ref, tb, c_ref, block_epilogue, fast)
    if not direct:
        def make(kb):
            b = kb.builder
            c_arr = kb.array(c_ref)

            def gen(idx):
                od = idx.get_dims(b)
                bi = _flat(b, od[:nb], instr.shape.dimensions[:nb])
                mi = _flat(b, od[nb:nb + nl], instr.shape.dimensions[nb:nb + nl])
                ni = _flat(b, od[nb + nl:], instr.shape.dimensions[nb + nl:])
                return c_arr.load(Index([bi, mi, ni], c_ref.shape))
            return gen if epilogue is None else epilogue.generator(kb, gen)
        materialize_kernel(prog, instr.name + "_result", [(out, make)])


def _flat(b, dims, sizes):
    v = t.i64(0)
    for x, n in zip(dims, sizes):
        v = b.add(b.mul(v, t.i64(n)), x)
    return v


ROW_BLOCK = 16  # smallest row block worth a GEMM call of its own
COL_BLOCK = 64  # smallest column block worth a GEMM call of its own (when rows are too few to split)
# Block boundaries of the IR GEMM fall on multiples of this many rows / columns (OpenBLAS: ``split_rule``):
# 16 floats are one cache line (threads writing neighbouring column blocks of a row-major C never share one).
BLOCK_ALIGN = 16


@dataclass(frozen=True)
class SplitRule:
    """Blocks of a GEMM that keep every element's sum as one call over the whole product gives."""

    rows: int                           # row blocks start at multiples of this
    cols: int | None                    # column blocks at multiples of this; None: no column split does
    col_rows: tuple[int, int] = (1, 1 << 62)   # column splits only for calls of this many rows (inclusive)

    def cols_keep_sums(self, rows: list[int]) -> bool:
        """Whether column blocks of calls of these row counts keep the whole call's sums."""
        return bool(self.cols) and all(self.col_rows[0] <= r <= self.col_rows[1] for r in rows)


# Per OpenBLAS kernel family (``blas_core``), measured with numpy's OpenBLAS 0.3.31 (slices of random
# f32/f64 products, every transpose, K up to 1000, against the whole product). SkylakeX's 16×4 sgemm
# tiles (AVX-512; the families that include its kernels): 16 both ways. Haswell's kernels (AVX2 CPUs,
# AMD Zen too): row blocks at multiples of 24 keep every sum (12 does not always); a column block's
# last full 8 columns (OpenBLAS's m side of a row-major call) sum in another order than the same
# columns of a wider call in the 8- and 12-row tiles (every alignment tried, 16-128), and a one-row
# call is a gemv whose sums depend on its width: column splits only for calls of 2-7 rows.
_SPLIT_RULES = {"SkylakeX": SplitRule(16, 16), "Cooperlake": SplitRule(16, 16),
                "SapphireRapids": SplitRule(16, 16),
                "Haswell": SplitRule(24, 16, (2, 7)), "Zen": SplitRule(24, 16, (2, 7))}
_UNMEASURED_RULE = SplitRule(48, None)   # another family: rows at multiples of both, no column splits


def split_rule(use_blas: bool) -> SplitRule:
    """The blocks that keep a whole call's sums: OpenBLAS's by its kernel family (``_SPLIT_RULES``); the IR
    GEMM sums every element in k order whatever the block, so BLOCK_ALIGN both ways."""
    if not use_blas:
        return SplitRule(BLOCK_ALIGN, BLOCK_ALIGN)
    from tfxla_cluster.codegen.native_runtime import blas_core
    return _SPLIT_RULES.get(blas_core(), _UNMEASURED_RULE)


# Ranges per thread of a batched GEMM: the pool hands ranges out one at a time, so when another process
# holds a core the free thread takes the slow one's share (with one range per thread it would wait).
GEMM_OVERSPLIT = 2
# A GEMM is split only when each task gets at least this many × ``parallel_min_cost`` flops (default
# 8.4 MFLOP, ~50 µs of one core's sgemm here): waking a sleeping pool thread costs tens of µs, and on this
# shared host a split 128³ GEMM measured 2× slower than one call (load 6.6, interleaved medians).
GEMM_TASK_MIN_COST = 32
# Operand bytes count as this many flops each (one core: ~160 GFLOP/s of sgemm, ~10 GB/s of reads), so
# a GEMM bound by reading its weights (a dense layer at batch 2) is split like one bound by its flops.
GEMM_FLOPS_PER_BYTE = 16


@dataclass(frozen=True)
class GemmPlan:
    """How one GEMM kernel runs: ``B × nblk × ncb`` work items (batch, block of ``row_block`` rows, block
    of ``col_block`` columns) in ``tasks`` ranges on our pool, each item one BLAS call on ``blas_threads``
    OpenBLAS threads."""

    strategy: str
    nblk: int = 1
    ncb: int = 1
    row_block: int = 0
    col_block: int = 0
    tasks: int = 1
    blas_threads: int = 1


# The A/B harness and the tests force a strategy of STRATEGIES; None: plan_gemm's table decides.
STRATEGIES = ("serial", "batch", "rows", "cols", "blas")
FORCE_STRATEGY: str | None = None


def _blocks(n: int, parts: int, align: int) -> tuple[int, int]:
    """(count, size) of at most ``parts`` blocks covering ``n``, sizes a multiple of ``align``."""
    size = -(-n // max(parts, 1))
    size = min(n, -(-size // align) * align)
    return -(-n // size), size


def plan_gemm(B: int, M: int, N: int, K: int, threads: int, min_cost: int, use_blas: bool,
              strategy: str | None = None, elem_bytes: int = 4) -> GemmPlan:
    """The strategy of a GEMM kernel of ``B`` products [M, K]·[K, N] — the one table, each row measured
    (A/B in one process, interleaved, our executables called directly; numbers in README, issue #16):

    - serial: one BLAS call per batch, one OpenBLAS thread, no pool — below two tasks' worth of flops
      (operand bytes counted as GEMM_FLOPS_PER_BYTE flops each);
    - batch: ``B ≥ threads`` (attention's per-head products): whole products, up to GEMM_OVERSPLIT
      ranges per thread claimed one at a time;
    - cols: one product wider than tall (N > M: BERT's FFN1, qkv at short sequences, the MLP's dense
      layers): each thread packs all of A and its part of B (packing MK + KN/t each, less than the rows
      split's MK/t + KN) — where column blocks keep the whole call's sums (``split_rule``);
    - rows: the other single products; plus column blocks when rows are too few for every thread (a
      dense layer at batch 2 is a matrix-vector product bound by reading the weights), same proviso.

    Never "blas" (one call on OpenBLAS's own threads): measured as fast as ours on an idle machine (MLP
    256×512×512: 300 vs 277 GFLOP/s), but when another process holds a core its threads wait for each
    other at every barrier (3–11 GFLOP/s instead of ours' 140, a core's speed), and after every threaded
    call its worker spins for ~0.1 s of CPU — against our pool's threads in the next kernels, more
    threads than cores. So every task calls BLAS with one thread, and only our pool's threads run."""
    flops = max(2 * B * M * N * K, GEMM_FLOPS_PER_BYTE * elem_bytes * B * (M * K + K * N))
    strategy = strategy or FORCE_STRATEGY
    per_task = GEMM_TASK_MIN_COST * max(min_cost, 1)
    if threads <= 1 or (strategy is None and flops < 2 * per_task) or strategy == "serial":
        return GemmPlan("serial", 1, 1, M, N)
    if strategy == "blas" and use_blas:
        return GemmPlan("blas", 1, 1, M, N, 1, threads)
    if B >= threads or strategy == "batch":
        return GemmPlan("batch", 1, 1, M, N, max(1, min(B, threads * GEMM_OVERSPLIT)))
    rule = split_rule(use_blas)
    if strategy in (None, "cols") and not rule.cols_keep_sums([M]):
        strategy = "rows"   # this BLAS's column blocks of M rows would change sums
    if strategy is None:
        strategy = "cols" if use_blas and N > M and N // COL_BLOCK >= threads else "rows"
    nblk, row_block = (1, M) if strategy == "cols" and use_blas else \
        _blocks(M, min(threads, -(-M // ROW_BLOCK)), rule.rows)
    ncb, col_block = 1, N
    if use_blas and B * nblk < threads and rule.cols_keep_sums([row_block, M - (nblk - 1) * row_block]):
        ncb, col_block = _blocks(N, max(1, min(threads // (B * nblk), N // COL_BLOCK)), rule.cols)
    work = B * nblk * ncb
    tasks = max(1, min(threads, work, flops // per_task)) if strategy is None else min(threads, work)
    return GemmPlan(strategy, nblk, ncb, row_block, col_block, max(tasks, 1))


def gemm_kernel(prog, name: str, et: T, B: int, M: int, N: int, K: int, a_ref: BufferRef, ta: str,
                b_ref: BufferRef, tb: str, c_ref: BufferRef, epilogue=None) -> None:
    """C[b] = A[b]·B[b] (row-major C [B, M, N]; A [M, K] 'N' or [K, M] 'T'; B likewise), as a kernel
    whose work items are (batch, block of ROW_BLOCK rows) pairs, split across threads when big.
    ``epilogue(kb, b, m, n, linear)``: emitted for every element of an item's block of C after its GEMM."""
    kb = prog.kernel(name)
    b = kb.builder
    sty = t.storage_type(et)
    if B == 0 or M == 0 or N == 0:
        prog.call_kernel(kb, name, "gemm", 0)
        return
    c_ptr = kb.ptr(c_ref.slot)
    if K == 0:
        with for_range(b, 0, B * M * N, "z") as i:
            b.store(t.float_constant(sty, 0.0), b.gep(c_ptr, [i], source_etype=sty))
            if epilogue is not None:
                bi, m, n = split(b, i, [B, M, N])
                epilogue(kb, bi, m, n, i)
        prog.call_kernel(kb, name, "gemm", 1)
        return
    a_ptr, b_ptr = kb.ptr(a_ref.slot), kb.ptr(b_ref.slot)
    flops = 2 * B * M * N * K
    use_blas = kb.kctx.options.use_blas and blas_available()
    plan = plan_gemm(B, M, N, K, prog.options.thread_count, prog.options.parallel_min_cost, use_blas,
                     elem_bytes=4 if et is T.F32 else 8)
    nblk, ncb, tasks, blas_threads = plan.nblk, plan.ncb, plan.tasks, plan.blas_threads
    row_block, col_block = plan.row_block, plan.col_block
    work = B * nblk * ncb
    lo, hi = (kb.lo, kb.hi) if tasks > 1 else (t.i64(0), t.i64(work))
    lda = max(1, K if ta == "N" else M)
    ldb = max(1, N if tb == "N" else K)
    set_threads = kb.kctx.mctx.function("tfxla_blas_threads_local", t.I32, [t.I32])
    prev = b.call(set_threads, [ir.Constant(t.I32, blas_threads)]) if use_blas else None
    with for_range(b, lo, hi, "blk") as item:
        cblk = b.urem(item, t.i64(ncb))
        item = b.udiv(item, t.i64(ncb))
        bi = b.udiv(item, t.i64(nblk))
        r0 = b.mul(b.urem(item, t.i64(nblk)), t.i64(row_block))
        rows = b.sub(t.i64(M), r0)
        rows = b.select(b.icmp_signed(">", rows, t.i64(row_block)), t.i64(row_block), rows)
        c0 = b.mul(cblk, t.i64(col_block))
        cols = b.sub(t.i64(N), c0)
        cols = b.select(b.icmp_signed(">", cols, t.i64(col_block)), t.i64(col_block), cols)
        a_off = b.add(b.mul(bi, t.i64(M * K)), b.mul(r0, t.i64(lda)) if ta == "N" else r0)
        pa = b.gep(a_ptr, [a_off], source_etype=sty)
        pb = b.gep(b_ptr, [b.add(b.mul(bi, t.i64(K * N)), c0 if tb == "N" else b.mul(c0, t.i64(ldb)))],
                   source_etype=sty)
        pc = b.gep(c_ptr, [b.add(b.add(b.mul(bi, t.i64(M * N)), b.mul(r0, t.i64(N))), c0)], source_etype=sty)
        if use_blas:
            fname = "tfxla_cblas_sgemm" if et is T.F32 else "tfxla_cblas_dgemm"
            fn = kb.kctx.mctx.function(fname, t.VOID, [t.I32, t.I32, t.I32, t.I64, t.I64, t.I64, sty, t.PTR, t.I64,
                                                       t.PTR, t.I64, sty, t.PTR, t.I64])
            i32 = lambda v: ir.Constant(t.I32, v)  # noqa: E731
            b.call(fn, [i32(CBLAS_ROW_MAJOR), i32(CBLAS_NO_TRANS if ta == "N" else CBLAS_TRANS),
                        i32(CBLAS_NO_TRANS if tb == "N" else CBLAS_TRANS), rows, cols, t.i64(K),
                        t.float_constant(sty, 1.0), pa, t.i64(lda), pb, t.i64(ldb), t.float_constant(sty, 0.0),
                        pc, t.i64(N)])
        else:
            _ir_gemm(kb, sty, rows, N, K, pa, ta, lda, pb, tb, ldb, pc)
        if epilogue is not None:
            # The block was just written: its epilogue reads it from cache, not from memory.
            with for_range(b, 0, rows, "er") as r:
                m = b.add(r0, r)
                base = b.add(b.mul(bi, t.i64(M * N)), b.mul(m, t.i64(N)))
                with for_range(b, 0, cols, "ec") as c:
                    n = b.add(c0, c)
                    epilogue(kb, bi, m, n, b.add(base, n))
    if use_blas:
        b.call(set_threads, [prev])
    prog.call_kernel(kb, name, "gemm", work, tasks, flops // 8)


def _ir_gemm(kb, sty, M, N, K, pa, ta, lda, pb, tb, ldb, pc) -> None:
    """C = A·B in LLVM IR (no BLAS: AOT objects, or no OpenBLAS found). With B row-major and N at least
    two vectors wide, the bulk runs as a register-blocked micro-kernel: a tile of C stays in registers
    while k runs, each step loading a row segment of B and broadcasting _MR elements of A (what a BLAS
    micro-kernel does, minus packing). Leftover rows and columns take the i-k-j loops. Every element of
    C sums its products in k order either way."""
    b = kb.builder
    vw = _VECTOR_BYTES // (4 if isinstance(sty, ir.FloatType) else 8)
    nr = 2 * vw
    if tb != "N" or N < nr:
        _ir_gemm_loops(kb, sty, t.i64(0), M, 0, N, K, pa, ta, lda, pb, tb, ldb, pc, N)
        return
    n_full = N - N % nr
    m_full = b.mul(b.udiv(M, t.i64(_MR)), t.i64(_MR))
    _micro_tiles(kb, sty, vw, m_full, n_full, K, pa, ta, lda, pb, ldb, pc, N)
    _ir_gemm_loops(kb, sty, m_full, M, 0, N, K, pa, ta, lda, pb, tb, ldb, pc, N)
    if n_full < N:
        _ir_gemm_loops(kb, sty, t.i64(0), m_full, n_full, N, K, pa, ta, lda, pb, tb, ldb, pc, N)


_VECTOR_BYTES = 32  # the tile's vectors are 256-bit (8 floats, 4 doubles): legal on every x86-64
_MR = 4             # rows of a C tile (two vectors wide): 8 accumulators + 2 B vectors + a broadcast


def _micro_tiles(kb, sty, vw: int, m_full, n_full: int, K: int, pa, ta, lda, pb, ldb, pc, ldc: int) -> None:
    b = kb.builder
    flags = kb.kctx.options.reduction_flags
    vty = ir.VectorType(sty, vw)
    nr = 2 * vw
    align = 4 if isinstance(sty, ir.FloatType) else 8   # B and C rows start anywhere
    zero = ir.Constant(vty, [t.float_constant(sty, 0.0)] * vw)
    splat_mask = ir.Constant(ir.VectorType(t.I32, vw), [0] * vw)
    accs = [[kb.kctx.alloca(vty, f"acc{r}_{v}") for v in range(2)] for r in range(_MR)]
    with for_range(b, 0, b.udiv(m_full, t.i64(_MR)), "ti") as ti:
        i0 = b.mul(ti, t.i64(_MR))
        with for_range(b, 0, n_full // nr, "tj") as tj:
            j0 = b.mul(tj, t.i64(nr))
            for row in accs:
                for acc in row:
                    b.store(zero, acc)
            with for_range(b, 0, K, "tk") as k:
                b_row = b.add(b.mul(k, t.i64(ldb)), j0)
                bvecs = [b.load(b.gep(pb, [b.add(b_row, t.i64(v * vw))], source_etype=sty), typ=vty, align=align)
                         for v in range(2)]
                for r in range(_MR):
                    i = b.add(i0, t.i64(r))
                    a_off = b.add(b.mul(i, t.i64(lda)), k) if ta == "N" else b.add(b.mul(k, t.i64(lda)), i)
                    a = b.load(b.gep(pa, [a_off], source_etype=sty), typ=sty)
                    splat = b.shuffle_vector(b.insert_element(ir.Constant(vty, ir.Undefined), a, t.i64(0)),
                                             ir.Constant(vty, ir.Undefined), splat_mask)
                    for v, bv in enumerate(bvecs):
                        acc = accs[r][v]
                        b.store(b.fadd(b.load(acc, typ=vty), b.fmul(splat, bv, flags=flags), flags=flags), acc)
            for r in range(_MR):
                c_row = b.add(b.mul(b.add(i0, t.i64(r)), t.i64(ldc)), j0)
                for v in range(2):
                    dst = b.gep(pc, [b.add(c_row, t.i64(v * vw))], source_etype=sty)
                    b.store(b.load(accs[r][v], typ=vty), dst, align=align)


def _ir_gemm_loops(kb, sty, i_lo, i_hi, j_lo: int, j_hi: int, K: int, pa, ta, lda, pb, tb, ldb, pc,
                   ldc: int) -> None:
    """Rows [i_lo, i_hi) x columns [j_lo, j_hi) of C by i-k-j loops (the inner j loop vectorises)."""
    b = kb.builder
    flags = kb.kctx.options.reduction_flags
    zero = t.float_constant(sty, 0.0)
    with for_range(b, i_lo, i_hi, "gi") as i:
        row = b.mul(i, t.i64(ldc))
        with for_range(b, j_lo, j_hi, "gz") as j:
            b.store(zero, b.gep(pc, [b.add(row, j)], source_etype=sty))
        with for_range(b, 0, K, "gk") as k:
            a_off = b.add(b.mul(i, t.i64(lda)), k) if ta == "N" else b.add(b.mul(k, t.i64(lda)), i)
            a = b.load(b.gep(pa, [a_off], source_etype=sty), typ=sty)
            with for_range(b, j_lo, j_hi, "gj") as j:
                b_off = b.add(b.mul(k, t.i64(ldb)), j) if tb == "N" else b.add(b.mul(j, t.i64(ldb)), k)
                bv = b.load(b.gep(pb, [b_off], source_etype=sty), typ=sty)
                cp = b.gep(pc, [b.add(row, j)], source_etype=sty)
                b.store(b.fadd(b.load(cp, typ=sty), b.fmul(a, bv, flags=flags), flags=flags), cp)


def group_origin(b: ir.IRBuilder, instr, lhs_shape, od: list):
    """At output index ``od`` (i64 values) of convolution ``instr``: (output feature, output spatial
    positions, the input batch element and the first input feature that its feature or batch group reads)."""
    dn = instr.convolution_dimension_numbers
    G, BG = instr.feature_group_count, instr.batch_group_count
    N = lhs_shape.dimensions[dn.input_batch_dimension]
    C = lhs_shape.dimensions[dn.input_feature_dimension]
    O_ = instr.shape.dimensions[dn.output_feature_dimension]
    n, o = od[dn.output_batch_dimension], od[dn.output_feature_dimension]
    sp = [od[d] for d in dn.output_spatial_dimensions]
    if BG > 1:
        return o, sp, b.add(b.mul(b.udiv(o, t.i64(O_ // BG)), t.i64(N // BG)), n), t.i64(0)
    return o, sp, n, (b.mul(b.udiv(o, t.i64(O_ // G)), t.i64(C // G)) if G > 1 else t.i64(0))


def input_position(b: ir.IRBuilder, wd, o, w, n_in: int, valid):
    """The input position that window position ``w`` reads at output position ``o`` (i64 values) along
    one dimension, and ``valid`` and-ed with whether it is a real element (not padding, not between the
    elements of a dilated input)."""
    p = b.sub(b.add(b.mul(o, t.i64(wd.stride)), b.mul(w, t.i64(wd.window_dilation))), t.i64(wd.padding_low))
    if wd.base_dilation != 1:
        valid = b.and_(valid, b.icmp_signed(">=", p, t.i64(0)))
        valid = b.and_(valid, b.icmp_signed("==", b.srem(p, t.i64(wd.base_dilation)), t.i64(0)))
        p = b.sdiv(p, t.i64(wd.base_dilation))
    return p, b.and_(valid, b.icmp_unsigned("<", p, t.i64(n_in)))


def emit_conv_gemm(prog, instr, lhs: Source, rhs: Source, out: BufferRef, epilogue=None) -> None:
    """Convolution as im2col + one GEMM per feature group, each step its own (parallel) kernel.
    ``epilogue`` (an ``Epilogue`` of ``kernels/loop.py``, ``out`` then being its fusion's output):
    ``out := epilogue(conv)``, on each GEMM block right after its call when the GEMM writes ``out``,
    else in the copy into the output layout."""
    et = instr.shape.element_type
    dn, window = instr.convolution_dimension_numbers, instr.window.dimensions
    lshape, rshape = lhs.shape, rhs.shape
    G = instr.feature_group_count
    N = lshape.dimensions[dn.input_batch_dimension]
    C = lshape.dimensions[dn.input_feature_dimension]
    O_ = instr.shape.dimensions[dn.output_feature_dimension]
    Cg, Og = C // G, O_ // G
    out_sp = [instr.shape.dimensions[d] for d in dn.output_spatial_dimensions]
    in_sp = [lshape.dimensions[d] for d in dn.input_spatial_dimensions]
    win = [w.size for w in window]
    P, Wn = prod(out_sp), prod(win)
    if instr.shape.num_elements == 0:
        return

    def patches_make(kb):
        b = kb.builder
        x = lhs.make(kb)
        zero = t.float_constant(t.storage_type(et), 0.0)

        def gen(idx):
            # Patches are materialised as [G, N*P, Wn, Cg]: a work item is one window position of one
            # output pixel, and its inner loop copies a contiguous run of channels (channels-last).
            g, npi, w, c = idx.get_dims(b)
            n, p = b.udiv(npi, t.i64(max(P, 1))), b.urem(npi, t.i64(max(P, 1)))
            sp, wk = split(b, p, out_sp), split(b, w, win)
            valid = ir.Constant(t.I1, 1)
            dims = [None] * lshape.rank
            dims[dn.input_batch_dimension] = n
            dims[dn.input_feature_dimension] = b.add(b.mul(g, t.i64(Cg)), c)
            for i, wd in enumerate(window):
                pos, valid = input_position(b, wd, sp[i], wk[i], in_sp[i], valid)
                hi = t.i64(max(in_sp[i] - 1, 0))
                pos = b.select(b.icmp_signed("<", pos, t.i64(0)), t.i64(0), pos)
                pos = b.select(b.icmp_signed(">", pos, hi), hi, pos)
                dims[dn.input_spatial_dimensions[i]] = pos
            return b.select(valid, x(Index(dims, lshape)), zero)
        return gen

    def kernel_make(kb):
        b = kb.builder
        k = rhs.make(kb)

        def gen(idx):
            g, wc, o = idx.get_dims(b)
            w, c = b.udiv(wc, t.i64(max(Cg, 1))), b.urem(wc, t.i64(max(Cg, 1)))
            wk = split(b, w, win)
            dims = [None] * rshape.rank
            dims[dn.kernel_output_feature_dimension] = b.add(b.mul(g, t.i64(Og)), o)
            dims[dn.kernel_input_feature_dimension] = c
            for i, wd in enumerate(window):
                dims[dn.kernel_spatial_dimensions[i]] = b.sub(t.i64(wd.size - 1), wk[i]) if wd.window_reversal \
                    else wk[i]
            return k(Index(dims, rshape))
        return gen

    patches4 = prog.scratch(Shape(et, (G, N * P, Wn, Cg)), "conv.patches")
    patches = BufferRef(patches4.slot, Shape(et, (G, N * P, Wn * Cg)))  # the GEMM's view of it
    kmat = prog.scratch(Shape(et, (G, Wn * Cg, Og)), "conv.kernel")
    # With one group and a [batch, spatial..., feature] output layout the GEMM result IS the output.
    direct = G == 1 and out.shape.element_type is et and _arrangement(
        out.shape, [dn.output_batch_dimension], list(dn.output_spatial_dimensions),
        [dn.output_feature_dimension]) == "N"
    res = out if direct else prog.scratch(Shape(et, (G, N * P, Og)), "conv.result")
    materialize_kernel(prog, instr.name + "_im2col", [(patches4, patches_make), (kmat, kernel_make)])

    def on_block(kb, g, m, o, linear):
        # G == 1 here: row m is (batch, output position), column o the output feature
        b = kb.builder
        dims = [None] * instr.shape.rank
        dims[dn.output_batch_dimension] = b.udiv(m, t.i64(max(P, 1)))
        dims[dn.output_feature_dimension] = o
        for d, x in zip(dn.output_spatial_dimensions, split(b, b.urem(m, t.i64(max(P, 1))), out_sp)):
            dims[d] = x
        epilogue.store(kb, dims, linear)
    gemm_kernel(prog, instr.name, et, G, N * P, Og, Cg * Wn, patches, "N", kmat, "N", res,
                on_block if direct and epilogue is not None else None)
    if direct:
        return

    def out_make(kb):
        b = kb.builder
        r = kb.array(res)

        def gen(idx):
            od = idx.get_dims(b)
            n, o = od[dn.output_batch_dimension], od[dn.output_feature_dimension]
            p = _flat(b, [od[d] for d in dn.output_spatial_dimensions], out_sp)
            g, oo = b.udiv(o, t.i64(Og)), b.urem(o, t.i64(Og))
            return r.load(Index([g, b.add(b.mul(n, t.i64(P)), p), oo], res.shape))
        return gen if epilogue is None else epilogue.generator(kb, gen)
    materialize_kernel(prog, instr.name + "_result", [(out, out_make)])
