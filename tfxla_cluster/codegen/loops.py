"""Loop and branch scaffolding, array indices and buffer access (XLA's llvm_ir::ForLoop, IrArray).

- ``for_range`` emits a canonical counted loop (preheader → header with one i64 phi → body → latch)
  that LLVM's loop passes and vectorisers recognise.
- ``Index`` is a logical multi-dimensional index into a shape, optionally with the *linear* index
  (the physical element offset in that shape's layout). Elementwise consumers pass the same index to
  operands of the same shape, so buffer reads reuse the linear offset instead of recomputing it.
- ``light_loops`` marks a kernel's plain (non-reduction) ``for_range`` loops not to be unrolled or
  interleaved: how kernels that are not hot loops (``kernel_builder.HOT_LOOP_KINDS``) keep O3's
  compile cost down while the hot ones keep the whole pipeline.
- ``IrArray`` is a typed view of a buffer. Its loads and stores are the only memory accesses emitted
  for arrays; with ``bounds_checks`` on, each one is checked and an out-of-range access is reported to
  the runtime (``tfxla_bounds_fail``) and skipped instead of touching memory.
"""
from __future__ import annotations

import glob
import os
from contextlib import contextmanager
from math import prod

from llvmlite import ir

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.context import KernelContext, entry_builder
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape, major_to_minor  # noqa: F401 - also imported from here
from tfxla_cluster.mxcsr import x86_host


# A reduction loop with a static trip count below this is never vectorised (see ``for_range``).
SMALL_REDUCTION_TRIPS = 16


def loop_hints(module: ir.Module, *hints: tuple) -> ir.MDValue:
    """A loop ID (self-referencing metadata node) carrying ``hints``, e.g. ("llvm.loop.unroll.disable",),
    ("llvm.loop.vectorize.enable", False) or ("llvm.loop.interleave.count", 1) (a bool is an i1, an int an
    i32); set it as the latch branch's ``llvm.loop`` metadata."""
    ops = []
    for name, *args in hints:
        ops.append(module.add_metadata([ir.MetaDataString(module, name)] +
                                       [ir.Constant(ir.IntType(1 if isinstance(a, bool) else 32), int(a))
                                        for a in args]))
    loop_id = ir.MDValue(module, [], name=str(len(module.metadata)))
    loop_id.operands = (loop_id, *ops)
    return loop_id


# A light loop's hints: LLVM neither unrolls it (partially, at run time or fully) nor interleaves its vector
# iterations; it still vectorises it. Measured (issue 17): unrolling and interleaving are over half of O3's
# optimisation + machine-code time on a model's elementwise kernels (EfficientNetB0's 33 auto-clustered
# modules: 2.9 s → 1.4 s CPU in LLVM), and the bench's workloads, EfficientNetB0 and the LSTM steps run as
# fast without them (same process, interleaved A/B: 0.88-1.02x); GEMM and convolution loops keep them.
LIGHT_LOOP_HINTS = (("llvm.loop.unroll.disable",), ("llvm.loop.interleave.count", 1))

# A plain ``for_range`` loop's latch (not a reduction, no hints of its own) carries this attribute until
# ``light_loops`` marks it: the mark lives on the instruction, so a function nobody settles holds nothing.
_PLAIN_LATCH = "tfxla_plain_loop"


def light_loops(fn: ir.Function) -> int:
    """Mark ``fn``'s plain ``for_range`` loops with ``LIGHT_LOOP_HINTS``; returns how many (once per loop).

    Reduction loops are left alone: their accumulators may be reassociated, and how far LLVM interleaves
    (or fully unrolls and SLP-vectorises) them decides the order of the sum, so leaving them alone keeps
    results bit-identical to the full pipeline's. Plain loops carry no reassociable chain across
    iterations, so their results do not depend on unrolling."""
    marked = 0
    for block in fn.blocks:
        latch = block.terminator
        if getattr(latch, _PLAIN_LATCH, False):
            latch.set_metadata("llvm.loop", loop_hints(fn.module, *LIGHT_LOOP_HINTS))
            latch._clear_string_cache()   # llvmlite caches an instruction's text
            delattr(latch, _PLAIN_LATCH)
            marked += 1
    return marked


@contextmanager
def for_range(b: ir.IRBuilder, start, stop, name: str = "i", reduction: bool = False, hints: tuple = ()):
    """``for (i = start; i < stop; ++i)`` with i64 bounds; yields ``i``; leaves the builder after it.

    ``hints``: the loop's own ``loop_hints`` (e.g. (("llvm.loop.unroll.full",),)); such a loop is left alone
    by ``light_loops``.

    ``reduction``: the body accumulates across iterations. Such a loop with a static trip count below
    ``SMALL_REDUCTION_TRIPS`` is marked not to be vectorised: LLVM's loop vectoriser (llvmlite's LLVM, O2
    without unrolling, as big modules are optimised) aborts on f64 maxnum reductions of 6-7 iterations
    ("VPlan cost model and legacy cost model disagreed") and gives wrong f32 maxima there; vector lanes
    buy nothing on so few iterations (tests/data/fuzz_open/llvm_vplan_assert_f64_maxnum_row7.ll).
    Other loops are left for ``light_loops`` to mark."""
    small = reduction and isinstance(start, int) and isinstance(stop, int) and stop - start < SMALL_REDUCTION_TRIPS
    start = t.i64(start) if isinstance(start, int) else start
    stop = t.i64(stop) if isinstance(stop, int) else stop
    pre = b.block
    fn = pre.function
    header = fn.append_basic_block(f"{name}.header")
    body = fn.append_basic_block(f"{name}.body")
    done = fn.append_basic_block(f"{name}.done")
    b.branch(header)
    b.position_at_end(header)
    i = b.phi(t.I64, name=name)
    i.add_incoming(start, pre)
    b.cbranch(b.icmp_signed("<", i, stop), body, done)
    b.position_at_end(body)
    yield i
    nxt = b.add(i, t.i64(1), name=f"{name}.next", flags=["nsw"])
    i.add_incoming(nxt, b.block)
    latch = b.branch(header)
    if hints:
        latch.set_metadata("llvm.loop", loop_hints(b.module, *hints))
    elif small:
        latch.set_metadata("llvm.loop", loop_hints(b.module, ("llvm.loop.vectorize.enable", False)))
    elif reduction:
        width = _min_max_reduction_width(fn, body, done)
        if width:
            latch.set_metadata("llvm.loop", loop_hints(b.module, ("llvm.loop.vectorize.width", width)))
    else:
        setattr(latch, _PLAIN_LATCH, True)
    b.position_at_end(done)


# Vector width (bits) of a pinned maxnum/minnum reduction loop: XLA's default prefer-vector-width.
MIN_MAX_REDUCTION_BITS = 256


def _min_max_reduction_width(fn: ir.Function, body: ir.Block, done: ir.Block) -> int:
    """The vector width to pin on an innermost reduction loop (blocks from ``body`` on, ``done`` still empty)
    that combines with ``llvm.maxnum``/``llvm.minnum``; 0 for other loops.

    LLVM's loop vectoriser, left to pick the width of such a loop, aborts the process (llvmlite's LLVM has
    assertions on: "VPlan cost model and legacy cost model disagreed") when it is not fully unrolled first:
    f32 rows of 20-23, 28-31, 36-39 and 44-47 elements under the light pipeline (a big module's: a
    softmax over 37 classes, tests/codegen/test_small_reduction_loops.py) and under O2. With the width
    given it keeps that width and asks neither cost model. The result does not depend on the width
    (maxnum/minnum are order-independent; a NaN never wins)."""
    blocks = fn.blocks[fn.blocks.index(body):]
    width = 0
    for block in blocks:
        if block is done:
            continue
        if block.name.endswith(".header"):
            return 0   # an outer loop: LLVM vectorises innermost loops only
        for instr in block.instructions:
            if isinstance(instr, ir.CallInstr) and instr.callee.name.startswith(("llvm.maxnum.", "llvm.minnum.")):
                bits = {"float": 32, "double": 64}.get(str(instr.type))
                if bits:
                    width = MIN_MAX_REDUCTION_BITS // bits
    return width


@contextmanager
def if_then(kctx: KernelContext, cond):
    """``if (cond) { ... }``; values generated inside are not reused after it."""
    b = kctx.builder
    fn = b.block.function
    then = fn.append_basic_block("if.then")
    done = fn.append_basic_block("if.done")
    b.cbranch(cond, then, done)
    b.position_at_end(then)
    with kctx.scope():
        yield
    b.branch(done)
    b.position_at_end(done)


def if_else_value(kctx: KernelContext, cond, then_fn, else_fn, ty: ir.Type):
    """``cond ? then_fn() : else_fn()`` evaluating only the taken side; returns the merged value."""
    b = kctx.builder
    fn = b.block.function
    then = fn.append_basic_block("sel.then")
    other = fn.append_basic_block("sel.else")
    done = fn.append_basic_block("sel.done")
    b.cbranch(cond, then, other)
    b.position_at_end(then)
    with kctx.scope():
        v1 = then_fn()
    then_end = b.block
    b.branch(done)
    b.position_at_end(other)
    with kctx.scope():
        v2 = else_fn()
    other_end = b.block
    b.branch(done)
    b.position_at_end(done)
    phi = b.phi(ty)
    phi.add_incoming(v1, then_end)
    phi.add_incoming(v2, other_end)
    return phi


def strides(shape: Shape) -> list[int]:
    """Element strides of each logical dimension of a (dense) buffer layout."""
    out = [0] * shape.rank
    step = 1
    for d in reversed(major_to_minor(shape)):
        out[d] = step
        step *= shape.dimensions[d]
    return out


class Index:
    """A logical index into ``shape`` (dims: one i64 per dimension; linear: physical offset or None)."""

    __slots__ = ("dims", "linear", "shape")

    def __init__(self, dims, shape: Shape, linear=None) -> None:
        self.dims = None if dims is None else list(dims)
        self.linear = linear
        self.shape = shape

    def key(self):
        return (None if self.dims is None else tuple(id(d) for d in self.dims),
                None if self.linear is None else id(self.linear))

    def get_dims(self, b: ir.IRBuilder) -> list:
        """The per-dimension indices; delinearised from the linear index when only that is known."""
        if self.dims is not None:
            return self.dims
        return delinearize(b, self.linear, self.shape)

    def linear_for(self, shape: Shape):
        """The linear index if it is valid for ``shape`` (same dimensions and layout), else None."""
        if self.linear is not None and self.shape.dimensions == shape.dimensions and \
                self.shape.minor_to_major == shape.minor_to_major:
            return self.linear
        return None


def scalar_index(shape: Shape) -> Index:
    return Index([], shape, t.i64(0))


def delinearize(b: ir.IRBuilder, linear, shape: Shape) -> list:
    dims = [None] * shape.rank
    order = major_to_minor(shape)
    rem = linear
    for pos in range(len(order) - 1, -1, -1):
        d = order[pos]
        n = shape.dimensions[d]
        if pos == 0:
            dims[d] = rem
        elif n == 1:
            dims[d] = t.i64(0)
        else:
            dims[d] = b.urem(rem, t.i64(n))
            rem = b.udiv(rem, t.i64(n))
    return dims


def linearize(b: ir.IRBuilder, dims, shape: Shape):
    """The physical offset of a logical index in ``shape``'s layout."""
    off = None
    for d in major_to_minor(shape):
        n = shape.dimensions[d]
        if off is None:
            off = dims[d]
        elif n == 1:
            continue
        else:
            off = b.add(b.mul(off, t.i64(n), flags=["nsw", "nuw"]), dims[d], flags=["nsw", "nuw"])
    return off if off is not None else t.i64(0)


class IrArray:
    """A buffer of ``shape`` at ``ptr`` (physical layout from the shape)."""

    def __init__(self, kctx: KernelContext, ptr, shape: Shape, name: str = "", slot: int | None = None) -> None:
        self.kctx = kctx
        self.slot = slot  # buffer-table slot: accesses get that slot's alias scope
        self.ptr = ptr
        self.shape = shape
        self.et = shape.element_type
        self.sty = t.storage_type(self.et)
        self.name = name
        self.size = shape.num_elements

    def offset(self, index: Index):
        lin = index.linear_for(self.shape)
        if lin is not None:
            return lin
        return linearize(self.kctx.builder, index.get_dims(self.kctx.builder), self.shape)

    def _checked(self, off, access):
        """Run ``access(off)`` only if ``off`` is in range (bounds-check mode); returns its value."""
        kctx = self.kctx
        if not kctx.options.bounds_checks:
            return access(off)
        b = kctx.builder
        ok = b.icmp_unsigned("<", off, t.i64(self.size))
        fn = b.block.function
        good = fn.append_basic_block("bc.ok")
        bad = fn.append_basic_block("bc.bad")
        done = fn.append_basic_block("bc.done")
        b.cbranch(ok, good, bad)
        b.position_at_end(bad)
        fail = kctx.mctx.function("tfxla_bounds_fail", t.VOID, [t.PTR, t.I64, t.I64, t.I64])
        table = kctx.table if kctx.table is not None else ir.Constant(t.PTR, None)
        b.call(fail, [table, t.i64(kctx.kernel_id), off, t.i64(self.size)])
        b.branch(done)
        b.position_at_end(good)
        v = access(off)
        good_end = b.block
        b.branch(done)
        b.position_at_end(done)
        if v is None:
            return None
        phi = b.phi(v.type)
        phi.add_incoming(v, good_end)
        phi.add_incoming(ir.Constant(v.type, None), bad)
        return phi

    def gep(self, off):
        return self.kctx.builder.gep(self.ptr, [off], inbounds=True, source_etype=self.sty)

    def _note(self, instr):
        if self.slot is not None:
            self.kctx.accesses.append((instr, self.slot))
        return instr

    def load_offset(self, off):
        b = self.kctx.builder
        align = t.element_bytes(self.et)
        raw = self._checked(off, lambda o: self._note(b.load(self.gep(o), typ=self.sty, align=align)))
        return t.from_storage(b, self.et, raw)

    def store_offset(self, off, value) -> None:
        b = self.kctx.builder
        raw = t.to_storage(b, self.et, value)
        align = t.element_bytes(self.et)
        self._checked(off, lambda o: (self._note(b.store(raw, self.gep(o), align=align)), None)[1])

    def load(self, index: Index):
        return self.load_offset(self.offset(index))

    def store(self, index: Index, value) -> None:
        self.store_offset(self.offset(index), value)


def emit_loop_nest(kctx: KernelContext, shape: Shape, body, lo, hi, flat: bool, name: str = "o",
                   inner_chunks: int = 1, row_start=None, count=None) -> None:
    """Run ``body(index)`` over ``shape`` in physical order (major dim outermost).

    Work items: with ``flat`` the linear element range [lo, hi); otherwise the rows [lo, hi) of the
    physical outer dims (all but the innermost), each running the whole innermost dim — or, with
    ``inner_chunks`` > 1, (row, chunk) pairs, each running one of that many chunks of the innermost dim
    (so a [1, 4M] result can still be split across threads). ``row_start(dims, j0, j1)`` (not ``flat``)
    runs before each item's inner loop: ``dims`` the row's index (the innermost dim None), [j0, j1) its
    inner range. ``count`` (not ``flat``, no ``inner_chunks``): makes the innermost dim's length a run-time
    value (``KernelBuilder.count``), the rows' stride and their loop's bound.
    """
    b = kctx.builder
    if flat:
        with for_range(b, lo, hi, name) as i:
            with kctx.scope():
                body(Index(None, shape, i))
        return
    order = major_to_minor(shape)
    if not order:
        with for_range(b, lo, hi, name):
            with kctx.scope():
                body(Index([], shape, t.i64(0)))
        return
    inner = order[-1]
    n_inner = shape.dimensions[inner]
    outer_shape = [shape.dimensions[d] for d in order[:-1]]
    chunk = -(-n_inner // inner_chunks) if inner_chunks > 1 else n_inner
    row_length = count(n_inner) if count is not None and inner_chunks == 1 else t.i64(n_inner)
    with for_range(b, lo, hi, name) as item:
        row = b.udiv(item, t.i64(inner_chunks)) if inner_chunks > 1 else item
        dims = [None] * shape.rank
        rem = row
        for pos in range(len(outer_shape) - 1, -1, -1):
            d = order[pos]
            if pos == 0:
                dims[d] = rem
            elif outer_shape[pos] == 1:
                dims[d] = t.i64(0)
            else:
                dims[d] = b.urem(rem, t.i64(outer_shape[pos]))
                rem = b.udiv(rem, t.i64(outer_shape[pos]))
        base = b.mul(row, row_length, flags=["nsw", "nuw"])
        if inner_chunks > 1:
            j0 = b.mul(b.urem(item, t.i64(inner_chunks)), t.i64(chunk))
            j1 = b.add(j0, t.i64(chunk))
            j0 = b.select(b.icmp_signed(">", j0, t.i64(n_inner)), t.i64(n_inner), j0)
            j1 = b.select(b.icmp_signed(">", j1, t.i64(n_inner)), t.i64(n_inner), j1)
        else:
            j0, j1 = t.i64(0), row_length
        if row_start is not None:
            row_start(list(dims), j0, j1)
        with for_range(b, j0, j1, name + "i") as j:
            dims[inner] = j
            lin = b.add(base, j, flags=["nsw", "nuw"])
            with kctx.scope():
                body(Index(list(dims), shape, lin))


def work_items(shape: Shape, flat: bool, inner_chunks: int = 1) -> int:
    """How many work items ``emit_loop_nest`` splits ``shape`` into."""
    if flat:
        return shape.num_elements
    order = major_to_minor(shape)
    if not order:
        return 1
    return prod(shape.dimensions[d] for d in order[:-1]) * inner_chunks


def inner_chunks_for(shape: Shape, flat: bool, threads: int) -> int:
    """Chunks of the innermost dim per row when there are too few rows to keep every thread busy."""
    if flat or threads <= 1 or shape.rank == 0:
        return 1
    rows = work_items(shape, False)
    n_inner = shape.dimensions[major_to_minor(shape)[-1]]
    if rows >= 2 * threads or n_inner < 8192:
        return 1
    return 4 * threads


def _last_level_cache_bytes() -> int:
    """The size of this host's last-level cache (Linux sysfs), 0 when the OS does not say."""
    best_level, best = 0, 0
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    try:
        for d in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
            with open(os.path.join(d, "level")) as f:
                level = int(f.read())
            with open(os.path.join(d, "size")) as f:
                size = f.read().strip()
            n = int(size[:-1]) * units[size[-1]] if size[-1:] in units else int(size)
            if level > best_level or (level == best_level and n > best):
                best_level, best = level, n
    except (OSError, ValueError):
        return 0
    return best


# Results at least this big are written with non-temporal (streaming) stores by flat loops: a normal
# store first reads the line it overwrites (read-for-ownership), a streaming one does not — but it also
# bypasses the caches, so it only pays for results the last-level cache could not keep anyway (measured
# on a host with a 480 MB L3: streaming a 16 MB result was 5-20% slower, interleaved A/B).
STREAM_MIN_BYTES = max(8 << 20, _last_level_cache_bytes())
STREAM_CHUNK_BYTES = 4096       # the L1-resident staging block of one streaming step
_VECTOR_BYTES = 64              # one cache line: the aligned unit of the streaming copy
_STREAM_TYPES = frozenset({T.F32, T.F64, T.S32, T.S64, T.U32, T.U64})   # stored as computed


def streams(arr: IrArray) -> bool:
    """Whether a flat loop writing ``arr`` uses :func:`emit_streaming_flat_loop`."""
    return arr.et in _STREAM_TYPES and arr.size * t.element_bytes(arr.et) >= STREAM_MIN_BYTES \
        and not arr.kctx.options.bounds_checks and x86_host()   # the copy ends with SSE's sfence


def emit_streaming_flat_loop(kctx: KernelContext, arr: IrArray, value_at, lo, hi, name: str = "o") -> None:
    """``arr[i] = value_at(Index(i))`` for i in [lo, hi), the aligned middle with streaming stores.

    Elements before the first cache-line boundary of ``arr`` at or after ``lo``, and after the last whole
    staging block, are stored as usual. The middle runs block by block: the block is computed into an
    aligned stack buffer (it stays in L1, the vectoriser sees a plain loop), then copied to ``arr`` with
    aligned ``!nontemporal`` vector stores (vmovntps). The kernel ends with ``sfence``: streaming stores
    are weakly ordered, and whoever joins the kernel's threads reads the result next."""
    b = kctx.builder
    es = t.element_bytes(arr.et)
    lanes = _VECTOR_BYTES // es
    chunk = STREAM_CHUNK_BYTES // es
    lo = t.i64(lo) if isinstance(lo, int) else lo
    hi = t.i64(hi) if isinstance(hi, int) else hi
    vec = ir.VectorType(arr.sty, lanes)
    staging = entry_builder(b.block.function).alloca(arr.sty, size=t.i64(chunk), name="stage")
    staging.align = _VECTOR_BYTES
    # first element index >= lo whose address is line-aligned (buffers are at least element-aligned)
    first = b.udiv(b.ptrtoint(arr.gep(lo), t.I64), t.i64(es))
    skip = b.and_(b.sub(t.i64(0), first), t.i64(lanes - 1))
    a = b.add(lo, skip)
    a = b.select(b.icmp_signed(">", a, hi), hi, a)
    n_blocks = b.sdiv(b.sub(hi, a), t.i64(chunk))
    z = b.add(a, b.mul(n_blocks, t.i64(chunk)))

    def plain(start, stop, tag):
        with for_range(b, start, stop, name + tag) as i:
            with kctx.scope():
                arr.store(Index(None, arr.shape, i), value_at(Index(None, arr.shape, i)))

    plain(lo, a, ".head")
    nt = kctx.mctx.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
    with for_range(b, 0, n_blocks, name + ".blk") as k:
        base = b.add(a, b.mul(k, t.i64(chunk)))
        with for_range(b, 0, chunk, name + ".stage") as j:
            with kctx.scope():
                v = t.to_storage(b, arr.et, value_at(Index(None, arr.shape, b.add(base, j, flags=["nsw"]))))
                b.store(v, b.gep(staging, [j], inbounds=True),
                        align=es)
        with for_range(b, 0, chunk // lanes, name + ".nt") as j:
            off = b.mul(j, t.i64(lanes))
            src = b.bitcast(b.gep(staging, [off], inbounds=True), vec.as_pointer())
            x = b.load(src, typ=vec, align=_VECTOR_BYTES)
            dst = arr.gep(b.add(base, off, flags=["nsw"]))
            st = b.store(x, dst if dst.type.is_opaque else b.bitcast(dst, vec.as_pointer()), align=_VECTOR_BYTES)
            st.set_metadata("nontemporal", nt)
    plain(z, hi, ".tail")
    b.call(kctx.mctx.function("llvm.x86.sse.sfence", t.VOID, []), [])
