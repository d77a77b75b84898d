"""Kernels for thunks, chosen by opcode from ``THUNKS`` (default: the elemental loop kernel).

- ``emit_loop_thunk``: a fusion (kLoop/kInput/kOutput) or any elemental instruction becomes ONE loop
  nest over its output — a flat loop over the linear index when the fused computation is purely
  elementwise on same-sized row-major arrays, otherwise rows of the physical outer dims around the
  innermost dim (chunked when there are too few rows for the threads). Multi-output roots store every
  leaf in the same nest. Before the nest:
    * big dots inside a fusion run as GEMM kernels (into the output buffer itself when only
      elementwise ops follow them — the bias+relu epilogue then runs in place, as XLA's dot output
      fusion does);
    * reductions of a big input to one element run as a parallel kernel of partial cascades.
  A reduce whose reduced dims are all physically outside its kept dims (a column reduction) instead
  accumulates whole rows into a block of the result, so its inner loop is contiguous.
- fusions around a non-elemental root (XLA's ``wrapped_scatter``...) materialise fused operands and
  run the root's own kernel.
- dot / convolution: GEMM (``gemm.py``) when big enough; convolutions first try ``conv.py`` (channel-wise
  depthwise kernel, blocked im2col GEMM); else the elemental loop.
- sort and custom-call TopK: a stable bottom-up merge sort of an index permutation per row, with the
  comparator inlined.
- scatter: copy, then updates applied in scatter-index order (whole window skipped when it does not
  fit, as XLA specifies); select-and-scatter: window selection then scatter-combine, in source order.
- rng-bit-generator: ``rng.py``.
"""
from __future__ import annotations

from math import prod

from llvmlite import ir

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.buffers import BufferRef, leaves
from tfxla_cluster.codegen.gemm import Source, conv_gemm_eligible, emit_conv_gemm, emit_dot_gemm, gemm_eligible
from tfxla_cluster.codegen.elemental import FusedEmitter
from tfxla_cluster.codegen.loops import (Index, emit_loop_nest, for_range, if_else_value, if_then, inner_chunks_for,
                                         major_to_minor, scalar_index, work_items)
from tfxla_cluster.codegen.program import KernelBuilder, RowAccess
from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.hlo import opcode as ops
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape

THUNKS: dict = {}

_FLAT_OK = (ops.ELEMENTWISE | {O.PARAMETER, O.CONSTANT, O.BROADCAST, O.BITCAST, O.RESHAPE, O.TUPLE,
                               O.OPTIMIZATION_BARRIER}) - {O.MAP}


def thunk(*opcodes):
    def register(fn):
        for op in opcodes:
            THUNKS[op] = fn
        return fn
    return register


def _array_operands(instr, operands) -> list[BufferRef]:
    for ref in operands:
        if not isinstance(ref, BufferRef):
            raise UnimplementedError(f"%{instr.name}: tuple-shaped operands are not supported by native code")
    return list(operands)


def _is_flat(instrs, root_shape: Shape) -> bool:
    """True when every value is a scalar or a row-major array with the root's element count, and every
    op is elementwise/scalar-broadcast/reshape — then one linear index serves every buffer."""
    if root_shape.is_tuple:
        shapes = root_shape.leaves()
        if len({s.dimensions for s in shapes}) != 1:
            return False
        root_shape = shapes[0]
    n = root_shape.num_elements
    if not root_shape.is_default_layout:
        return False
    for i in instrs:
        if i.opcode not in _FLAT_OK:
            return False
        for s in (i.shape.leaves() if i.shape.is_tuple else [i.shape]):
            if s.rank == 0:
                continue
            if s.num_elements != n or not s.is_default_layout:
                return False
        if i.opcode is O.BROADCAST and i.operands[0].shape.rank != 0:
            return False
    return True


_WEIGHT_EXPENSIVE = 12


def _cost(instrs, operands, out) -> int:
    """Bytes moved plus a weighted count of per-element operations (bytes-equivalent units)."""
    moved = sum(r.shape.byte_size() for o in operands for r in leaves(o)) + \
        sum(r.shape.byte_size() for r in leaves(out))
    n_out = sum(r.shape.num_elements for r in leaves(out))
    work = 0
    for i in instrs:
        if i.opcode in (O.PARAMETER, O.CONSTANT, O.TUPLE, O.GET_TUPLE_ELEMENT):
            continue
        w = _WEIGHT_EXPENSIVE if ops.is_expensive(i) and i.opcode not in (O.REDUCE,) else 1
        if i.opcode in (O.REDUCE, O.REDUCE_WINDOW, O.DOT, O.CONVOLUTION):
            work += 4 * sum(o.shape.num_elements for o in i.operands)
        else:
            work += 4 * w * (i.shape.num_elements if i.shape.is_array else n_out)
    return moved + work


# Roots a fusion may have (XLA's FusionWrapper wraps lone instructions) that are not elemental.
_NON_ELEMENTAL_ROOTS = {O.SCATTER, O.SORT, O.SELECT_AND_SCATTER, O.RNG_BIT_GENERATOR, O.CUSTOM_CALL}


def emit_loop_thunk(prog, instr, operands, out) -> None:
    operands = _array_operands(instr, operands)
    fused = instr.opcode is O.FUSION
    comp = instr.fused_computation if fused else None
    if fused and comp.root.opcode in _NON_ELEMENTAL_ROOTS:
        return _emit_wrapped(prog, instr, operands, out)
    materialized: dict = {}
    if fused:
        materialized = _materialize_contractions(prog, instr, operands, out)
        if materialized.get(id(comp.root)) is out:
            return  # the GEMM already wrote the result
    overrides = {k: (lambda kb, em, ref=ref: kb.read(ref)) for k, ref in materialized.items()}
    overrides.update(_split_reductions(prog, instr, operands, materialized))
    kb = KernelBuilder(prog, instr.name)
    params = [kb.read(r) for r in operands]
    if fused:
        em = FusedEmitter(kb.kctx, comp, params)
        root, instrs = comp.root, comp.instructions
    else:
        em = FusedEmitter(kb.kctx, None, [], {id(o): params[k] for k, o in enumerate(instr.operands)})
        root, instrs = instr, [instr]
    for k, make in overrides.items():
        em.overrides[k] = make(kb, em)
    outs = leaves(out)
    if all(r.shape.num_elements == 0 for r in outs):
        prog.call_kernel(kb, instr.name, "empty", 0)
        return
    arrays = [kb.array(r) for r in outs]
    kind = "loop" if not fused else f"fusion:{instr.fusion_kind.value}"
    if len(outs) == 1 and _is_column_reduce(root, outs[0].shape):
        return _emit_column_reduce(prog, kb, em, instr.name, kind, root, arrays[0], _cost(instrs, operands, out))
    gen = em.gen(root)
    kctx = kb.kctx
    same_dims = len({r.shape.dimensions for r in outs}) == 1
    # Rank-1 results (e.g. row reductions) split element-wise: rows of rank 1 would be one item.
    flat = _is_flat(instrs, root.shape) or (same_dims and outs[0].shape.rank <= 1)
    cost = _cost(instrs, operands, out)
    chunks = inner_chunks_for(outs[0].shape, flat, prog.options.thread_count) \
        if same_dims and cost >= prog.options.parallel_min_cost else 1
    work = work_items(outs[0].shape, flat, chunks) if same_dims else 1
    tasks = 1 if not same_dims else prog.tasks_for(work, cost)
    if tasks == 1:
        chunks = 1
        work = work_items(outs[0].shape, flat) if same_dims else 1
    rows = _row_access(instr, comp, root, operands, outs, work) \
        if not overrides and same_dims and chunks == 1 and prog.options.row_groups else None
    # A kernel that is not split (nor run in row blocks) gets constant bounds: LLVM then sees exact
    # trip counts.
    lo, hi = (kb.lo, kb.hi) if tasks > 1 or rows is not None else (0, work)
    if len(outs) == 1 and not root.shape.is_tuple:
        emit_loop_nest(kctx, outs[0].shape, lambda idx: arrays[0].store(idx, gen(idx)), lo, hi, flat,
                       inner_chunks=chunks)
    elif same_dims:
        shape = outs[0].shape

        def body(idx):
            for arr, v in zip(arrays, _flatten(gen(idx))):
                arr.store(idx if arr.shape == shape else Index(idx.get_dims(kctx.builder), arr.shape), v)
        emit_loop_nest(kctx, shape, body, lo, hi, flat, inner_chunks=chunks)
    else:
        if root.opcode is not O.TUPLE:
            raise UnimplementedError(f"%{instr.name}: multi-output value with differing shapes")
        for arr, o in zip(arrays, root.operands):
            g = em.gen(o)
            emit_loop_nest(kctx, arr.shape, lambda idx, arr=arr, g=g: arr.store(idx, g(idx)), 0,
                           work_items(arr.shape, False), False)
        rows = None
    prog.call_kernel(kb, instr.name, kind, work, tasks, 0, rows=rows)


def _row_access(instr, comp, root, operands, outs, work: int) -> RowAccess | None:
    """How a loop kernel whose work items are the rows (dim 0) of its rank-1/2 row-major results touches
    memory, for row-blocked scheduling (``ProgramEmitter.call_kernel``); None if its items are not rows."""
    shape = outs[0].shape
    if work < 2 or shape.rank not in (1, 2) or not shape.is_default_layout or work != shape.dimensions[0]:
        return None
    if shape.rank == 2 and work_items(shape, False) != work:
        return None
    if comp is not None:
        users = comp.users()
        params = comp.parameters
        local = [_row_local(p, root, users, work) for p in params]
    else:  # a lone instruction: its operands are used once, by the root itself
        local = [_use_row_local(instr, k, work) for k in range(len(instr.operands))]
    row_bytes = sum(r.shape.byte_size() // max(r.shape.dimensions[0], 1) if r.shape.rank else 0
                    for r in [*operands, *outs])
    return RowAccess(work, frozenset(r.slot.index for r, ok in zip(operands, local) if ok),
                     frozenset(r.slot.index for r, ok in zip(operands, local) if not ok),
                     frozenset(r.slot.index for r in outs), [r.slot for r in [*operands, *outs]], row_bytes)


def _use_row_local(user, k: int, rows: int) -> bool:
    """Whether ``user`` reads row i of its operand ``k`` only for row i of its own result."""
    op, operand = user.opcode, user.operands[k]
    if not user.shape.is_array:
        return op is O.TUPLE
    if user.shape.rank == 0 or user.shape.dimensions[0] != rows:
        return False
    if op in ops.ELEMENTWISE and op is not O.MAP:
        return operand.shape.dimensions == user.shape.dimensions
    if op is O.BROADCAST:
        return operand.shape.rank >= 1 and user.dimensions[0] == 0
    if op is O.REDUCE:
        return k < len(user.operands) // 2 and 0 not in user.dimensions
    if op in (O.BITCAST, O.RESHAPE):
        return operand.shape.rank >= 1 and operand.shape.dimensions[0] == rows and \
            operand.shape.is_default_layout and user.shape.is_default_layout
    return False


def _row_local(param, root, users, rows: int) -> bool:
    """Whether every path from fused parameter ``param`` to ``root`` keeps row i at row i."""
    if param.shape.rank == 0 or param.shape.dimensions[0] != rows or not param.shape.is_default_layout:
        return False
    stack, seen = [param], set()
    while stack:
        value = stack.pop()
        if id(value) in seen or value is root:
            continue
        seen.add(id(value))
        for user in users.get(value, []):
            if not all(_use_row_local(user, k, rows) for k, o in enumerate(user.operands) if o is value):
                return False
            stack.append(user)
    return True


COLUMN_BLOCK = 512  # kept elements per block: the block of accumulators stays in L1


def _is_column_reduce(root, out_shape: Shape) -> bool:
    """A simple single-input reduce whose reduced dims are all physically outside its kept dims (e.g.
    a sum over the batch of [N, M]): per-element inner loops would stride through memory."""
    if root.opcode is not O.REDUCE or len(root.operands) != 2:
        return False
    from tfxla_cluster.codegen.scalar_ops import REASSOCIABLE
    from tfxla_cluster.hlo.eval_compute import simple_reducer
    op = simple_reducer(root.to_apply)
    et = root.shape.element_type
    if op not in REASSOCIABLE or et in (T.F16, T.BF16):
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


def _emit_column_reduce(prog, kb, em, name, kind, root, out_arr, cost) -> None:
    """out[k] = init; for each reduced position r (outer), out[k] ⊕= x[r, k] over a block of k (inner,
    contiguous, vectorised). Work items are kept elements, in blocks of COLUMN_BLOCK."""
    from tfxla_cluster.codegen.elemental import _simple_combine
    from tfxla_cluster.hlo.eval_compute import simple_reducer
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
            from tfxla_cluster.codegen.gemm import split
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


def _emit_wrapped(prog, instr, operands, out) -> None:
    """A fusion around a non-elemental root (``wrapped_scatter``, ``wrapped_sort``, ...): operands that
    are fused expressions are materialised first, then the root's own kernel runs on buffers."""
    comp = instr.fused_computation
    root = comp.root
    refs = []
    for o in root.operands:
        if o.opcode is O.PARAMETER:
            refs.append(operands[o.parameter_number])
            continue
        if not o.shape.is_array:
            raise UnimplementedError(f"%{instr.name}: tuple-shaped operand of a fused {root.opcode.text}")
        ref = prog.scratch(o.shape, o.name)
        kb = KernelBuilder(prog, o.name)
        em = FusedEmitter(kb.kctx, comp, [kb.read(r) for r in operands])
        gen, arr = em.gen(o), kb.array(ref)
        work = work_items(o.shape, False)
        tasks = prog.tasks_for(work, 2 * o.shape.byte_size())
        lo, hi = (kb.lo, kb.hi) if tasks > 1 else (0, work)
        emit_loop_nest(kb.kctx, o.shape, lambda idx, arr=arr, gen=gen: arr.store(idx, gen(idx)), lo, hi, False)
        prog.call_kernel(kb, o.name, "materialize", work, tasks, 2 * o.shape.byte_size())
        refs.append(ref)
    THUNKS[root.opcode](prog, root, refs, out)


def _flatten(values):
    if isinstance(values, tuple):
        return [x for v in values for x in _flatten(v)]
    return [values]


def _elementwise_to_root(comp, instr) -> bool:
    """True if every path from ``instr`` to the root goes through same-shape elementwise ops."""
    users = comp.users()
    stack, seen = [instr], set()
    while stack:
        x = stack.pop()
        if x is comp.root:
            continue
        if id(x) in seen:
            continue
        seen.add(id(x))
        us = users.get(x, [])
        if not us:
            return False
        for u in us:
            if not u.is_elementwise() or u.shape != instr.shape or u.opcode is O.MAP:
                return False
            stack.append(u)
    return True


def _materialize_contractions(prog, instr, operands, out) -> dict:
    """Run the big dots of a fusion as GEMM kernels first; returns {id(dot): BufferRef of its value}."""
    comp = instr.fused_computation
    dots = [i for i in comp.post_order() if gemm_eligible(i, prog.options)]
    result: dict[int, BufferRef] = {}

    def maker(target):
        def make(kb):
            em = FusedEmitter(kb.kctx, comp, [kb.read(r) for r in operands],
                              {k: kb.read(ref) for k, ref in result.items()})
            return em.gen(target)
        return make
    for dot in dots:
        direct = (not comp.root.shape.is_tuple and isinstance(out, BufferRef) and dot.shape == comp.root.shape
                  and out.shape == dot.shape and _elementwise_to_root(comp, dot))
        target = out if direct else prog.scratch(dot.shape, dot.name)
        srcs = [Source(o.shape, maker(o), operands[o.parameter_number] if o.opcode is O.PARAMETER else None)
                for o in dot.operands]
        emit_dot_gemm(prog, dot, srcs[0], srcs[1], target)
        result[id(dot)] = target
    return result


SPLIT_MIN_ELEMENTS = 1 << 18  # below this a full reduction stays in one kernel


def _split_reductions(prog, instr, operands, materialized) -> dict:
    """Reductions to a single element of a big input (reduce_sum(x) over 16M elements) would run on one
    core: they become a parallel kernel of P partial results (each a pairwise cascade over its chunk),
    and the reduce itself then just combines the partials. Returns {id(reduce): override maker}."""
    from tfxla_cluster.codegen.elemental import CASCADE_BLOCK, Cascade, _identity, _simple_combine
    from tfxla_cluster.codegen.scalar_ops import REASSOCIABLE
    from tfxla_cluster.hlo.eval_compute import simple_reducer
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
        if op not in REASSOCIABLE or in_shape.num_elements < SPLIT_MIN_ELEMENTS:
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


@thunk(O.DOT)
def _dot_thunk(prog, instr, operands, out) -> None:
    if not gemm_eligible(instr, prog.options):
        return emit_loop_thunk(prog, instr, operands, out)
    operands = _array_operands(instr, operands)
    srcs = [Source(r.shape, lambda kb, r=r: kb.read(r), r) for r in operands]
    emit_dot_gemm(prog, instr, srcs[0], srcs[1], out)


@thunk(O.CONVOLUTION)
def _conv_thunk(prog, instr, operands, out) -> None:
    from tfxla_cluster.codegen.conv import channelwise_plan, emit_channelwise
    plan = channelwise_plan(instr)
    if plan is not None:
        return emit_channelwise(prog, instr, plan, *_array_operands(instr, operands), out)
    from tfxla_cluster.codegen.conv import blocked_plan, emit_blocked_conv
    blocked = blocked_plan(instr, prog.options)
    if blocked is not None:
        return emit_blocked_conv(prog, instr, blocked, *_array_operands(instr, operands), out)
    if not conv_gemm_eligible(instr, prog.options):
        return emit_loop_thunk(prog, instr, operands, out)
    operands = _array_operands(instr, operands)
    srcs = [Source(r.shape, lambda kb, r=r: kb.read(r), r) for r in operands]
    emit_conv_gemm(prog, instr, srcs[0], srcs[1], out)


def emit_copy_kernel(prog, src: BufferRef, dst: BufferRef) -> None:
    """dst := src elementwise (same dims, other layout), or byte-wise in physical order."""
    kb = KernelBuilder(prog, f"copy_{dst.slot.name}")
    s, d = kb.array(src), kb.array(dst)
    same = src.shape.dimensions == dst.shape.dimensions
    work = work_items(dst.shape, False) if same else dst.shape.num_elements
    tasks = prog.tasks_for(work, 2 * dst.shape.byte_size())
    lo, hi = (kb.lo, kb.hi) if tasks > 1 else (0, work)
    if same:
        emit_loop_nest(kb.kctx, dst.shape, lambda idx: d.store(idx, s.load(Index(idx.get_dims(kb.builder),
                                                                                 src.shape))), lo, hi, False)
    else:
        with for_range(kb.builder, lo, hi, "cp") as i:
            d.store_offset(i, s.load_offset(i))
    prog.call_kernel(kb, "copy", "copy", work, tasks, 2 * dst.shape.byte_size())


# ---------------------------------------------------------------------- sort
@thunk(O.SORT)
def _sort(prog, instr, operands, out) -> None:
    operands = _array_operands(instr, operands)
    kb = KernelBuilder(prog, instr.name)
    ins = [kb.array(r) for r in operands]
    outs = [(kb.array(r), k) for k, r in enumerate(leaves(out))]
    emit_sort(prog, kb, instr.name, ins, outs, instr.to_apply, instr.dimensions[0], "sort")


def _topk(prog, instr, operands, out) -> None:
    """XLA:CPU's ``custom-call "TopK"``: the first k of a stable sort along the last dim by the attached
    comparator, as (values, s32 indices)."""
    operands = _array_operands(instr, operands)
    if not (instr.shape.is_tuple and len(instr.shape.tuple_shapes) == 2 and len(operands) == 1):
        raise UnimplementedError(f"custom-call TopK %{instr.name} must map one operand to (values, indices)")
    kb = KernelBuilder(prog, instr.name)
    values, indices = leaves(out)
    comparator = instr.called_computations[0]
    dim = operands[0].shape.rank - 1
    ins = [kb.array(operands[0])]
    if comparator.num_parameters == 4:  # XLA's form: (values lhs, rhs, indices lhs, rhs)
        ins.append(_Positions(kb.builder, Shape(T.S32, operands[0].shape.dimensions), dim))
    emit_sort(prog, kb, instr.name, ins, [(kb.array(values), 0), (kb.array(indices), "index")], comparator, dim,
              "topk")


class _Positions:
    """An s32 "array" whose element is its own position along ``dim`` (the iota TopK's indices come from),
    read like an ``IrArray`` by ``emit_sort``'s comparator calls."""

    def __init__(self, b, shape: Shape, dim: int) -> None:
        self.b, self.shape, self.dim, self.et = b, shape, dim, T.S32

    def load(self, index):
        return self.b.trunc(index.get_dims(self.b)[self.dim], t.I32)


def emit_sort(prog, kb, name, ins, outs, comp, dim, kind) -> None:
    """Per row along ``dim``: a stable bottom-up merge sort of an index permutation, comparing with
    ``comp`` over all ``ins`` (params: lhs/rhs of input 0, then of input 1, ...); then each output
    (array, source) takes ``ins[source]`` — or, for source "index", the position — for its first
    ``out.dims[dim]`` sorted elements."""
    b, kctx = kb.builder, kb.kctx
    shape = ins[0].shape
    n = shape.dimensions[dim]
    if shape.num_elements == 0:
        prog.call_kernel(kb, name, kind, 0)
        return
    perm_ref = prog.scratch(Shape(T.S64, (2 * n,)), name + ".perm")
    perm = kb.array(perm_ref)
    em = FusedEmitter(kctx, None, [])
    rows = Shape(T.S32, tuple(1 if d == dim else x for d, x in enumerate(shape.dimensions)))

    def at(row_dims, j):
        dims = list(row_dims)
        dims[dim] = j
        return dims

    def less(row_dims, a, c):
        args = []
        for arr in ins:
            args += [arr.load(Index(at(row_dims, a), arr.shape)), arr.load(Index(at(row_dims, c), arr.shape))]
        return em.call(comp, args)

    def row_body(idx):
        rd = idx.get_dims(b)
        with for_range(b, 0, n, "init") as j:
            perm.store_offset(j, j)
        src = kctx.alloca(t.I64, "src")
        b.store(t.i64(0), src)
        width = kctx.alloca(t.I64, "width")
        b.store(t.i64(1), width)
        fn = b.block.function
        head, body, done = (fn.append_basic_block(f"msort.{x}") for x in ("head", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        w = b.load(width)
        b.cbranch(b.icmp_signed("<", w, t.i64(n)), body, done)
        b.position_at_end(body)
        s_off = b.load(src)
        d_off = b.sub(t.i64(n), s_off)
        nblocks = b.udiv(b.add(t.i64(n - 1), b.mul(w, t.i64(2))), b.mul(w, t.i64(2)))
        with for_range(b, 0, nblocks, "blk") as blk:
            start = b.mul(blk, b.mul(w, t.i64(2)))

            def clamp(v):
                return b.select(b.icmp_signed(">", v, t.i64(n)), t.i64(n), v)
            mid, end = clamp(b.add(start, w)), clamp(b.add(start, b.mul(w, t.i64(2))))
            i_p, j_p = kctx.alloca(t.I64, "mi"), kctx.alloca(t.I64, "mj")
            b.store(start, i_p)
            b.store(mid, j_p)
            with for_range(b, start, end, "mk") as k:
                i, j = b.load(i_p), b.load(j_p)
                right_done = b.icmp_signed(">=", j, end)
                left_done = b.icmp_signed(">=", i, mid)

                def compare():
                    pi = perm.load_offset(b.add(s_off, i))
                    pj = perm.load_offset(b.add(s_off, j))
                    return less(rd, pj, pi)  # stable: take the right one only if strictly less
                take_right = if_else_value(
                    kctx, right_done, lambda: ir.Constant(t.I1, 0),
                    lambda: if_else_value(kctx, left_done, lambda: ir.Constant(t.I1, 1), compare, t.I1), t.I1)
                pick = b.select(take_right, j, i)
                perm.store_offset(b.add(d_off, k), perm.load_offset(b.add(s_off, pick)))
                b.store(b.select(take_right, i, b.add(i, t.i64(1))), i_p)
                b.store(b.select(take_right, b.add(j, t.i64(1)), j), j_p)
        b.store(d_off, src)
        b.store(b.mul(w, t.i64(2)), width)
        b.branch(head)
        b.position_at_end(done)
        s_off = b.load(src)
        for dst, source in outs:
            with for_range(b, 0, dst.shape.dimensions[dim], "gather") as j:
                p = perm.load_offset(b.add(s_off, j))
                if source == "index":
                    v = b.trunc(p, t.value_type(dst.et)) if dst.et.bit_width < 64 else p
                else:
                    v = ins[source].load(Index(at(rd, p), ins[source].shape))
                dst.store(Index(at(rd, j), dst.shape), v)

    emit_loop_nest(kctx, rows, row_body, 0, rows.num_elements, rows.rank <= 1)
    prog.call_kernel(kb, name, kind, 1)


# ---------------------------------------------------------------------- scatter
@thunk(O.SCATTER)
def _scatter(prog, instr, operands, out) -> None:
    operands = _array_operands(instr, operands)
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
            new = em.call(instr.to_apply, cur + [u.load(Index(ud, u.shape)) for u in upds])
            for o, v in zip(outs, _flatten(new)):
                o.store(Index(oi, o.shape), v)

    if loop_shape.num_elements:
        emit_loop_nest(kctx, loop_shape, body, 0, work_items(loop_shape, False), False, "u")
    prog.call_kernel(kb, instr.name, "scatter", 1)


# ---------------------------------------------------------------------- select-and-scatter
@thunk(O.SELECT_AND_SCATTER)
def _select_and_scatter(prog, instr, operands, out) -> None:
    operands = _array_operands(instr, operands)
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


# ---------------------------------------------------------------------- unsupported
@thunk(O.RNG_BIT_GENERATOR)
def _rng_bit_generator(prog, instr, operands, out) -> None:
    from tfxla_cluster.codegen.rng import emit_rng_bit_generator
    emit_rng_bit_generator(prog, instr, _array_operands(instr, operands), out)


@thunk(O.CUSTOM_CALL)
def _custom_call(prog, instr, operands, out) -> None:
    if instr.custom_call_target == "TopK":
        return _topk(prog, instr, operands, out)
    raise UnimplementedError(f"native code for custom-call \"{instr.custom_call_target}\" (%{instr.name}) "
                             "is not implemented")


@thunk(O.RNG, O.COMPLEX, O.REAL, O.IMAG)
def _unsupported(prog, instr, operands, out) -> None:
    raise UnimplementedError(f"native code for {instr.opcode.text} (%{instr.name}) is not implemented")
