"""Stage: codegen — the elemental loop kernel, the default for every thunk not in ``THUNKS``.

``emit_loop_thunk``: a fusion (kLoop/kInput/kOutput) or any elemental instruction becomes ONE loop nest
over its output — a flat loop over the linear index when the fused computation is purely elementwise on
same-sized row-major arrays, otherwise rows of the physical outer dims around the innermost dim (chunked
when there are too few rows for the threads). Multi-output roots store every leaf in the same nest.
Before the nest:
  * big dots inside a fusion run as GEMM kernels (into the output buffer itself when only elementwise
    ops follow them — the bias+relu epilogue then runs on each GEMM block right after its call, in
    cache, as XLA's dot output fusion does; no loop nest of its own);
  * reductions of a big input to one element, and column reductions, use ``reductions.py``.
Also here: fusions around a non-elemental root (XLA's ``wrapped_scatter``...) materialise fused operands
and run the root's own kernel; dot / convolution run as GEMM (``gemm.py``; convolutions first try ``conv.py``: the channel-wise
depthwise kernel, blocked im2col GEMMs) when big enough, else as the
elemental loop; the copy kernel (a layout change).
Output fusion of unfused contractions: a dot or convolution whose only user is the next kernel, an
elementwise fusion (or lone elementwise instruction) on it, is deferred to that user, which runs it into
its own output with the user's computation as an ``Epilogue`` on each block (``_epilogue_fusion``).
A ``reverse`` of a convolution filter's spatial dimensions whose only user is that convolution (TF's
input-backprop lowering flips the forward filter so) is not run: the convolution reads the unreversed
filter with those window dimensions' reversal flipped (``_fold_reverse``), saving a pass over the filter.
Likewise the ``reverse`` of algsimp's operand swap (``convolution(reverse(filter), input)``, a kernel larger than
its input): the convolution runs as the original unswapped one on the filter as it is (``_unswapped``: the fast
kernels, exact up to rounding on finite values), and its special-value branch runs XLA's swapped element loop
reading the filter backwards (conv_exact.py ``lhs_reversed``).
"""
from __future__ import annotations

import copy

from tfxla_cluster.codegen.buffers import BufferRef, leaves
from tfxla_cluster.codegen.conv import BlockedPlan, ChannelwisePlan, blocked_plan, channelwise_plan, \
    emit_blocked_conv, emit_channelwise, epilogue_fits, mixes_inputs
from tfxla_cluster.codegen.conv_exact import emit_guarded
from tfxla_cluster.codegen.dot_exact import emit_guarded_dot
from tfxla_cluster.codegen.gemm import Source, conv_gemm_eligible, emit_conv_gemm, emit_dot_gemm, gemm_eligible
from tfxla_cluster.codegen.elemental import FusedEmitter
from tfxla_cluster.codegen.elemental import _start_index as start_index
from tfxla_cluster.codegen.kernel_builder import THUNKS, KernelBuilder, RowAccess, array_operands, flatten, thunk
from tfxla_cluster.codegen.loops import Index, emit_loop_nest, emit_streaming_flat_loop, for_range, \
    inner_chunks_for, streams, work_items
from tfxla_cluster.codegen.reductions import RowVectorReduce, bf16_minmax_reduces, emit_column_reduce, \
    is_column_reduce, row_vector_reduces, split_reductions
from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.hlo import attrs as A
from tfxla_cluster.hlo import opcode as ops
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import Shape
from tfxla_cluster.passes.algsimp import swap_conv_operands, swapped_dimension_numbers
from tfxla_cluster.passes.buffer_assignment import dynamic_update_slice_buffer

_FLAT_OK = (ops.ELEMENTWISE | {O.PARAMETER, O.CONSTANT, O.BROADCAST, O.BITCAST, O.RESHAPE, O.TUPLE,
                               O.OPTIMIZATION_BARRIER}) - {O.MAP}


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


# Loops of at least this many iterations may take their counts from the call (``_count_free``). Shorter
# loops keep constant counts: LLVM runs a loop of a known count below 16 (its tiny-trip-count threshold) as
# masked vectors, which ``elemental._masked_loop`` models; from 16 on, a vector body and a scalar remainder
# either way, the same instructions per element, so the bits do not change.
COUNT_FREE_MIN = 16
# Ops whose elements are computed without loops of their own or any accumulation (a reduction's order can
# depend on how LLVM vectorises the loop around it): a loop nest of only these is free of its counts.
_COUNT_FREE_OPS = _FLAT_OK | {O.TRANSPOSE, O.SLICE, O.CONCATENATE, O.PAD, O.REVERSE, O.IOTA}


def _count_free(instrs, outs: list[BufferRef], elementwise: bool, plain: bool, work: int) -> bool:
    """Whether a loop kernel's counts come from its call, not from constants: its flat loop's element count
    (``elementwise``: at least ``COUNT_FREE_MIN``), or its rows' count and length (``plain``: one loop nest with
    no chunks, row prologue or special kernels, of ``_COUNT_FREE_OPS`` only, rows of ``COUNT_FREE_MIN`` or more).
    Kernels that differ only in those counts then print the same IR and share one function, optimised and
    compiled once (issue 17: GRU training's optimizer updates and zero fills, 17 of its 66 kernels; DenseNet's
    batch-norm + ReLU fusions, one per channel count)."""
    if elementwise:
        return work >= COUNT_FREE_MIN
    shape = outs[0].shape
    return plain and shape.rank >= 2 and shape.dimensions[shape.minor_to_major[0]] >= COUNT_FREE_MIN and \
        all(i.opcode in _COUNT_FREE_OPS for i in instrs)

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
    operands = array_operands(instr, operands)
    deferred = _deferred(prog).pop(id(instr), None)
    if deferred is None and _emit_dynamic_update_slice(prog, instr, operands, out):
        return
    if instr.opcode is not O.FUSION:   # a lone instruction's code may depend on its operands' producers
        return _emit_loop(prog, instr, operands, out, deferred)
    # A fusion's kernels depend only on its fused computation, its buffers and the contraction deferred to
    # it: a repeated block's fusions reuse the first one's kernels (``ProgramEmitter.reuse``).
    key, refs = ["fusion", instr], [*operands, *leaves(out)]
    if deferred is not None:
        conv, conv_operands, conv_out, plan = deferred
        key += [instr.operands.index(conv), _emitted_key(prog, conv), repr(plan)]
        refs += [*conv_operands, *leaves(conv_out)]
    prog.reuse(tuple(key), refs, lambda: _emit_loop(prog, instr, operands, out, deferred))


def _emit_dynamic_update_slice(prog, instr, operands: list[BufferRef], out) -> bool:
    """A dynamic-update-slice (or a loop fusion with one at its root) in place, as XLA emits it
    (``EmitDynamicUpdateSliceInPlace``): the updated operand's buffer becomes the result (shared by the
    program's in-place rule, ``buffer_assignment.dynamic_update_slice_buffer``, or else copied into it first)
    and one kernel writes only the update's region, its start indices clamped into [0, dim - update dim].
    Not run through ``ProgramEmitter.reuse`` (the copy is entry code). False if it does not apply."""
    k = dynamic_update_slice_buffer(instr)
    if k is None or not isinstance(out, BufferRef) or operands[k].shape != out.shape:
        return False
    fused = instr.opcode is O.FUSION
    root = instr.fused_computation.root if fused else instr
    update = root.operands[1]
    if operands[k].slot is not out.slot:
        prog.copy(operands[k], out)
    if update.shape.num_elements == 0:
        return True
    kb = KernelBuilder(prog, instr.name)
    params = [kb.read(r) if j != k else None for j, r in enumerate(operands)]
    if fused:
        em = FusedEmitter(kb.kctx, instr.fused_computation, params)
    else:
        em = FusedEmitter(kb.kctx, None, [], {id(o): params[j] for j, o in enumerate(instr.operands)})
    dims = out.shape.dimensions
    starts = [start_index(em, em.gen(o), o, dims[d] - update.shape.dimensions[d])
              for d, o in enumerate(root.operands[2:])]
    ugen, result = em.gen(update), kb.array(out)

    def body(index: Index) -> None:
        at = [kb.builder.add(s, i) for s, i in zip(starts, index.get_dims(kb.builder))]
        result.store(Index(at, out.shape), ugen(index))
    n = update.shape.num_elements
    emit_loop_nest(kb.kctx, update.shape, body, kb.lo, kb.hi, flat=True, name="u")
    prog.call_kernel(kb, instr.name, "dynamic-update-slice", n, prog.tasks_for(n, n))
    return True


def _emit_loop(prog, instr, operands: list[BufferRef], out, deferred) -> None:
    if deferred is not None:
        conv, conv_operands, conv_out, plan = deferred
        k = instr.operands.index(conv)
        if isinstance(out, BufferRef) and all(r.slot is not out.slot for j, r in enumerate(operands) if j != k):
            return _emit_conv_with_epilogue(prog, instr, operands, out, conv, conv_operands, plan)
        # The fusion writes in place over another operand: the convolution must not clobber it first.
        for r in conv_operands:
            prog.plan.use(r.slot, prog.pos)
        _emit_contraction(prog, conv, conv_operands, conv_out, plan)
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
    overrides.update(split_reductions(prog, instr, operands, materialized))
    overrides.update(bf16_minmax_reduces(instr))
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
    if len(outs) == 1 and is_column_reduce(root, outs[0].shape, prog.options):
        return emit_column_reduce(prog, kb, em, instr.name, kind, root, arrays[0], _cost(instrs, operands, out))
    same_dims = len({r.shape.dimensions for r in outs}) == 1
    # Rank-1 results (e.g. row reductions) split element-wise: rows of rank 1 would be one item.
    elementwise = _is_flat(instrs, root.shape)
    flat = elementwise or (same_dims and outs[0].shape.rank <= 1)
    row_start = None
    if not flat and len(outs) == 1 and not root.shape.is_tuple:
        # reduces evaluated at the loop's own index
        if fused:
            users = comp.users()   # (once for all: a large fusion's walk per instruction was quadratic)
            at_index = [r for r in comp.instructions if _elementwise_to_root(comp, r, any_type=True, users=users)]
        else:
            at_index = [root]
        rvs = [RowVectorReduce(kb, em, r) for r in row_vector_reduces(at_index, outs[0].shape, prog.options)
               if id(r) not in em.overrides]
        for rv in rvs:
            em.overrides[id(rv.r)] = rv.gen
        if rvs:
            def row_start(dims, j0, j1):
                for rv in rvs:
                    rv.row_start(dims, j0, j1)
    gen = em.gen(root)
    kctx = kb.kctx
    cost = _cost(instrs, operands, out)
    chunks = inner_chunks_for(outs[0].shape, flat, prog.options.thread_count) \
        if same_dims and cost >= prog.options.parallel_min_cost else 1
    work = work_items(outs[0].shape, flat, chunks) if same_dims else 1
    tasks = 1 if not same_dims else prog.tasks_for(work, cost)
    if tasks == 1:
        chunks = 1
        work = work_items(outs[0].shape, flat) if same_dims else 1
    # A result far bigger than the caches is streamed past them, so it is not kept for a row group.
    stream = flat and len(outs) == 1 and not root.shape.is_tuple and streams(arrays[0])
    rows = _row_access(instr, comp, root, operands, outs, work) \
        if not overrides and same_dims and chunks == 1 and prog.options.row_groups and not stream else None
    # A kernel that is not split (nor run in row blocks) gets constant bounds (LLVM then sees exact trip
    # counts), unless its loops are free of their counts (``_count_free``): then they come from its table.
    count_free = _count_free(instrs, outs, elementwise, same_dims and chunks == 1 and row_start is None
                             and not overrides and not stream, work)
    if tasks > 1 or rows is not None:
        lo, hi = kb.lo, kb.hi
    else:   # (a count-free kernel's count is a constant again when no kernel of other sizes shares it)
        lo, hi = 0, kb.count(work) if count_free else work
    count = kb.count if count_free and not flat else None
    if stream:
        emit_streaming_flat_loop(kctx, arrays[0], gen, lo, hi)
    elif len(outs) == 1 and not root.shape.is_tuple:
        emit_loop_nest(kctx, outs[0].shape, lambda idx: arrays[0].store(idx, gen(idx)), lo, hi, flat,
                       inner_chunks=chunks, row_start=row_start, count=count)
    elif same_dims:
        shape = outs[0].shape

        def body(idx):
            for arr, v in zip(arrays, flatten(gen(idx))):
                arr.store(idx if arr.shape == shape else Index(idx.get_dims(kctx.builder), arr.shape), v)
        emit_loop_nest(kctx, shape, body, lo, hi, flat, inner_chunks=chunks, count=count)
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


def _elementwise_to_root(comp, instr, any_type: bool = False, users: dict | None = None) -> bool:
    """True if every path from ``instr`` to the root goes through same-shape elementwise ops (``any_type``:
    same dimensions and layout, any element type: converts too). ``users``: ``comp.users()``, if the caller
    has it."""
    if users is None:
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
            if not u.is_elementwise() or u.opcode is O.MAP or (
                    (u.shape.dimensions, u.shape.minor_to_major) != (instr.shape.dimensions, instr.shape.minor_to_major)
                    if any_type else u.shape != instr.shape):
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
        # The dot is the fusion's only big work and the rest is elementwise after it: the rest runs on
        # each GEMM block (and the fusion is done).
        epi = Epilogue(instr, operands, out, dot) if direct and len(dots) == 1 and prog.options.output_fusion \
            and _only_elementwise_after(comp, dot) else None
        _emit_dot(prog, dot, srcs[0], srcs[1], target, epilogue=epi)
        result[id(dot)] = target
        if epi is not None:
            result[id(comp.root)] = out
    return result


def _emit_dot(prog, dot, lhs: Source, rhs: Source, out: BufferRef, epilogue=None) -> None:
    """``emit_dot_gemm`` guarded by dot_exact.py: on special values the call runs XLA's arithmetic."""
    emit_dot_gemm(prog, dot, lhs, rhs, out, epilogue, guard=emit_guarded_dot)


def _only_elementwise_after(comp, dot) -> bool:
    """True if every instruction the root reaches without passing through ``dot`` is elementwise, a
    parameter, constant, broadcast or reshape (nothing the epilogue could not evaluate per element)."""
    stack, seen = [comp.root], set()
    while stack:
        x = stack.pop()
        if x is dot or id(x) in seen:
            continue
        seen.add(id(x))
        if x.opcode not in _EPILOGUE_OPS:
            return False
        stack.extend(x.operands)
    return True


@thunk(O.DOT)
def _dot_thunk(prog, instr, operands, out) -> None:
    if not gemm_eligible(instr, prog.options):
        return emit_loop_thunk(prog, instr, operands, out)
    operands = array_operands(instr, operands)
    fusion = _epilogue_fusion(prog, instr, True)
    if fusion is not None:
        _deferred(prog)[id(fusion)] = (instr, operands, out, True)
        return
    srcs = [Source(r.shape, lambda kb, r=r: kb.read(r), r) for r in operands]
    prog.reuse(("dot", instr), [*operands, out], lambda: _emit_dot(prog, instr, srcs[0], srcs[1], out))


# ---------------------------------------------------------------- convolution output fusion
# XLA:CPU never fuses a convolution: its bias / batch-norm / residual / activation is the next kLoop
# fusion, a second pass over the output. The HLO keeps that (so fusion decisions match XLA's dumps); here
# the convolution's thunk is deferred to that fusion, which runs the convolution into its own output and
# the fused computation on each block of it while the block is in cache (XLA's output fusion).
_EPILOGUE_OPS = (ops.ELEMENTWISE | {O.PARAMETER, O.CONSTANT, O.BROADCAST, O.BITCAST, O.RESHAPE}) - {O.MAP}
# Instructions that emit no kernel: between a convolution and its epilogue fusion they cannot touch
# the convolution's operands, so its deferred kernel reads them unchanged.
_NO_KERNEL = {O.PARAMETER, O.CONSTANT, O.GET_TUPLE_ELEMENT, O.BITCAST, O.TUPLE}


class Epilogue:
    """The fused computation of ``fusion`` applied to its output in place, where the contraction's value
    (``target``: the fused parameter it is passed as, or the dot inside the fusion) is the output's own
    element at the same index."""

    def __init__(self, fusion, operands: list[BufferRef], out: BufferRef, target) -> None:
        # ``fusion`` may also be a lone elementwise instruction (its operands are then the values).
        self.instr = fusion
        self.comp = fusion.fused_computation if fusion.opcode is O.FUSION else None
        self.operands, self.out, self.target = operands, out, target

    def generator(self, kb: KernelBuilder, value):
        """A generator of the fusion's result where the contraction's element is ``value(index)``."""
        params = [kb.read(r) for r in self.operands]
        if self.comp is None:
            values = {id(o): p for o, p in zip(self.instr.operands, params)}
            values[id(self.target)] = value
            return FusedEmitter(kb.kctx, None, [], values).gen(self.instr)
        return FusedEmitter(kb.kctx, self.comp, params, {id(self.target): value}).gen(self.comp.root)

    def store(self, kb: KernelBuilder, dims, linear) -> None:
        """out[dims] := fusion(conv = out[dims]); ``linear``: the element's offset in out's layout."""
        with kb.kctx.scope():
            arr = kb.array(self.out)
            idx = Index(dims, self.out.shape, linear)
            arr.store(idx, self.generator(kb, lambda i: arr.load(i))(idx))


def _deferred(prog) -> dict:
    """{id(fusion): (convolution, its operands, plan)} for convolutions deferred to their epilogue."""
    return prog.__dict__.setdefault("_deferred_convs", {})


class Im2colPlan:
    """The whole-im2col GEMM of ``gemm.py`` (no BLAS, or layouts the blocked kernel does not read in place):
    its epilogue runs on each GEMM block when the GEMM writes the output, else in the copy-out pass."""


IM2COL = Im2colPlan()


def _conv_plan(prog, instr):
    plan = channelwise_plan(instr)
    if plan is not None:
        return plan
    plan = blocked_plan(instr, prog.options)
    if plan is None and conv_gemm_eligible(instr, prog.options):
        return IM2COL
    return plan


def _epilogue_fusion(prog, instr, plan):
    """The fusion that can run as ``instr``'s epilogue, or None: the convolution's only user, elementwise
    on it (same shape and layout as its result) and made of elementwise ops, broadcasts and reshapes,
    the next kernel after it; the convolution's kernel can apply it (channel-wise ``features`` form, or a
    blocked plan with :func:`epilogue_fits`)."""
    if plan is None or not prog.options.output_fusion:
        return None
    if isinstance(plan, BlockedPlan) and not epilogue_fits(plan):
        return None
    if isinstance(plan, ChannelwisePlan) and plan.F != 1:
        return None
    comp = instr.parent
    if comp is None or instr is comp.root:
        return None
    _, users, pos, order = _users(prog, comp)
    us = users.get(instr, [])
    if len(us) != 1:
        return None
    fusion = us[0]
    if fusion.operands.count(instr) != 1 or fusion.shape != instr.shape:
        return None
    if fusion.opcode is O.FUSION:
        fc = fusion.fused_computation
        if fc.root.shape.is_tuple or any(i.opcode not in _EPILOGUE_OPS for i in fc.instructions):
            return None
        if not _elementwise_to_root(fc, fc.parameters[fusion.operands.index(instr)]):
            return None
    elif not fusion.is_elementwise() or fusion.opcode is O.MAP or \
            fusion.opcode in THUNKS or fusion.opcode not in _EPILOGUE_OPS:
        return None   # a lone elementwise instruction (XLA leaves e.g. dot + add unfused)
    if id(fusion) not in pos or id(instr) not in pos or pos[id(fusion)] < pos[id(instr)]:
        return None
    if any(x.opcode not in _NO_KERNEL for x in order[pos[id(instr)] + 1:pos[id(fusion)]]):
        return None
    return fusion


def _folded(prog) -> dict:
    """{id(convolution): (the folded reverse's operand buffer, the convolution as emitted)}."""
    return prog.__dict__.setdefault("_folded_reverses", {})


def _as_emitted(prog, instr):
    """``instr``, or for a convolution with a folded ``reverse`` its copy with the flipped window reversal."""
    return _folded(prog).get(id(instr), (None, instr))[1]


def _emitted_key(prog, instr):
    """What determines ``instr``'s emission (a kernel-reuse key item): the emitted view, or for an unswapped
    convolution the swapped one it stands for (its exact branch runs that)."""
    view = _as_emitted(prog, instr)
    return _swaps(prog).get(id(view), view)


def _users(prog, comp):
    cache = prog.__dict__.setdefault("_epilogue_users", {})
    if id(comp) not in cache:
        cache[id(comp)] = (comp, comp.users(), {id(x): n for n, x in enumerate(comp.post_order())},
                           comp.post_order())
    return cache[id(comp)]


def _fold_reverse(prog, rev, operand: BufferRef) -> bool:
    """Whether ``rev`` (a top-level ``reverse``) folds into its only user, a convolution taking it as the
    filter and nothing else: the dimensions it reverses are the filter's spatial ones, its operand has its
    shape and layout, and nothing can write over that operand before the convolution reads it (an entry
    parameter, or a value only ``rev`` reads). Then records the convolution to emit instead."""
    comp = rev.parent
    if comp is None or rev is comp.root:
        return False
    _, users, _, _ = _users(prog, comp)
    us = users.get(rev, [])
    if len(us) != 1 or us[0].opcode is not O.CONVOLUTION:
        return False
    conv, src = us[0], rev.operands[0]
    if src.shape != rev.shape or src.shape.minor_to_major != rev.shape.minor_to_major or \
            conv.operands[0] is conv.operands[1]:
        return False
    if src.opcode is not O.PARAMETER and users.get(src, []) != [rev]:
        return False
    if conv.operands[0] is rev:
        original = _unswapped(conv, rev)
        if original is None:
            return False
        _swaps(prog)[id(original)] = conv
        _folded(prog)[id(conv)] = (operand, original)
        return True
    ksp = list(conv.convolution_dimension_numbers.kernel_spatial_dimensions)
    if not set(rev.dimensions) <= set(ksp):
        return False
    window = conv.window
    flipped = A.Window(tuple(w.replace(window_reversal=not w.window_reversal) if ksp[i] in rev.dimensions
                             else w for i, w in enumerate(window.dimensions)))
    view = copy.copy(conv)
    view.window = flipped
    view.operands = [conv.operands[0], src]
    _folded(prog)[id(conv)] = (operand, view)
    return True


def _swaps(prog) -> dict:
    """id(original convolution view) -> the operand-swapped convolution it stands for (``_unswapped``)."""
    return prog.__dict__.setdefault("_swapped_convs", {})


def _unswapped(conv, rev):
    """The convolution algsimp's ``conv_operand_swap`` made ``conv`` (= ``convolution(rev, x)``, ``rev`` a
    reverse) from — ``convolution(x, rev's operand)`` with the original window and dimension numbers — or
    None when ``conv`` is not exactly that swap (checked by swapping the candidate again)."""
    if conv.feature_group_count > 1 or conv.batch_group_count > 1:
        return None
    sdn, x = conv.convolution_dimension_numbers, conv.operands[1]
    dn = swapped_dimension_numbers(sdn)
    window = []
    for i, w in enumerate(conv.window.dimensions):
        if not w.window_reversal:   # a group or contraction dimension: kept as it was
            window.append(w)
            continue
        size = rev.shape.dimensions[sdn.input_spatial_dimensions[i]]
        dilated_kernel = 1 + (size - 1) * w.base_dilation
        dilated_input = 1 + (w.size - 1) * w.window_dilation
        window.append(A.WindowDimension(
            size=size, stride=w.stride, padding_low=w.padding_low + dilated_kernel - dilated_input,
            padding_high=w.padding_high + dilated_kernel - dilated_input, window_dilation=w.base_dilation,
            base_dilation=w.window_dilation,
            window_reversal=sdn.input_spatial_dimensions[i] not in rev.dimensions))
    window = A.Window(tuple(window))
    if any(w.padding_low < 0 or w.padding_high < 0 for w in window.dimensions) or \
            swap_conv_operands(x.shape, window, dn) != (conv.window, sdn, tuple(rev.dimensions)):
        return None
    view = copy.copy(conv)
    view.window, view.convolution_dimension_numbers = window, dn
    view.operands = [x, rev.operands[0]]
    if conv.operand_precision:
        view.operand_precision = tuple(reversed(conv.operand_precision))
    return view


@thunk(O.REVERSE)
def _reverse_thunk(prog, instr, operands, out) -> None:
    if len(operands) == 1 and isinstance(operands[0], BufferRef) and _fold_reverse(prog, instr, operands[0]):
        return
    return emit_loop_thunk(prog, instr, operands, out)


def _emit_conv_with_epilogue(prog, fusion, operands, out, conv, conv_operands, plan) -> None:
    """The deferred convolution into ``out`` with ``fusion`` as its epilogue."""
    for r in conv_operands:   # read now, at the fusion's position: keep them alive until here
        prog.plan.use(r.slot, prog.pos)
    epi = Epilogue(fusion, operands, out, conv if fusion.opcode is not O.FUSION else
                   fusion.fused_computation.parameters[fusion.operands.index(conv)])
    conv = _as_emitted(prog, conv)
    if conv.opcode is O.DOT:
        srcs = [Source(r.shape, lambda kb, r=r: kb.read(r), r) for r in conv_operands]
        return _emit_dot(prog, conv, srcs[0], srcs[1], out, epilogue=epi)
    _emit_conv(prog, conv, conv_operands, out, plan, epi)


def _emit_conv(prog, conv, operands: list[BufferRef], out: BufferRef, plan, epi=None) -> None:
    """A convolution by its plan's kernels (``epi``: the fused epilogue), guarded by conv_exact.py: on
    special values the call runs XLA's own algorithm instead."""
    def fast():
        if isinstance(plan, BlockedPlan):
            return emit_blocked_conv(prog, conv, plan, *operands, out, epilogue=epi)
        if plan is IM2COL:
            srcs = [Source(r.shape, lambda kb, r=r: kb.read(r), r) for r in operands]
            return emit_conv_gemm(prog, conv, srcs[0], srcs[1], out, epilogue=epi)
        if plan is None:
            return emit_loop_thunk(prog, conv, operands, out)
        return emit_channelwise(prog, conv, plan, *operands, out, epilogue=epi)
    swapped = _swaps(prog).get(id(conv))
    if swapped is not None:   # finite operands: the original convolution; else XLA's swapped element loop
        x, kernel = operands
        return emit_guarded(prog, swapped, kernel, x, out, epi, fast, lhs_reversed=swapped.operands[0].dimensions)
    emit_guarded(prog, conv, *operands, out, epi, fast, check_input=mixes_inputs(prog, conv, plan))


def _emit_contraction(prog, instr, operands: list[BufferRef], out: BufferRef, plan) -> None:
    """A dot (GEMM) or a convolution with a channel-wise / blocked plan, without epilogue."""
    instr = _as_emitted(prog, instr)
    if instr.opcode is O.DOT:
        srcs = [Source(r.shape, lambda kb, r=r: kb.read(r), r) for r in operands]
        return _emit_dot(prog, instr, srcs[0], srcs[1], out)
    _emit_conv(prog, instr, operands, out, plan)


@thunk(O.CONVOLUTION)
def _conv_thunk(prog, instr, operands, out) -> None:
    folded = _folded(prog).get(id(instr))
    if folded is not None:   # the filter operand is the folded reverse's (unreversed) operand: read it now
        prog.plan.use(folded[0].slot, prog.pos)
        # An unswapped convolution reads (input, unreversed kernel) = (the swap's filter, the reverse's operand).
        operands = [operands[1], folded[0]] if id(folded[1]) in _swaps(prog) else [operands[0], folded[0]]
    view = _as_emitted(prog, instr)
    plan = _conv_plan(prog, view)
    fusion = _epilogue_fusion(prog, instr, plan)
    if fusion is not None:
        _deferred(prog)[id(fusion)] = (instr, array_operands(instr, operands), out, plan)
        return
    ops_ = array_operands(instr, operands)
    if plan is not None:   # contraction kernels read their operands' shapes, never their producers
        return prog.reuse(("contraction", _emitted_key(prog, instr), repr(plan)), [*ops_, out],
                          lambda: _emit_contraction(prog, instr, ops_, out, plan))
    if len(ops_) == 2 and all(isinstance(r, BufferRef) for r in ops_):
        return _emit_conv(prog, view, ops_, out, None)
    return emit_loop_thunk(prog, view, operands, out)


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


