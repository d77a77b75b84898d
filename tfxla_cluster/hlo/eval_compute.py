"""Reductions, windows, contractions and sort for the reference evaluator.

- reduce / reduce-window: windows skip padding and base-dilation holes (only real elements are
  combined, starting from the init value, in row-major window order), as HloEvaluator does. A float add
  reduce is HloEvaluator's fast add: the init and the elements summed in double, in row-major order of the
  reduced dimensions, chunks of 512 summed on their own and added to the running total, rounded once to
  the element type. A float max/min reduce is the in-order fold of the evaluator's max/min (a tie keeps
  the accumulator, the first NaN wins), computed as an order-keeping tree since that fold is associative.
  Other reducers that are a single commutative op of the two parameters (integer add, multiply, max, min,
  and, or, xor; float multiply) use numpy's reduction. Other reducers (variadic, argmax-style) run the
  reducer computation vectorized over all outputs, one window element at a time.
- select-and-scatter: the first valid element of a window is selected, and a later element replaces it
  when ``select(selected, candidate)`` is false; ``scatter(source, current)`` accumulates source values in
  row-major order of the windows (the source is the left operand: a float max/min tie keeps the source).
- dot / convolution convert operands to the result type (HandleDotSlowPath), accumulate f16/bf16 in
  f32 and integers in 64 bits; convolution windows skip padding and base-dilation holes as HloEvaluator's
  loop does (a NaN or infinite filter tap over padding adds nothing); integer convolution results saturate to the result type (the
  evaluator's clamp in HandleConvolutionWithLiterals), integer dot results wrap.
- sort is always stable (a valid implementation of an unstable sort, and deterministic).
"""
from __future__ import annotations

import functools
from math import prod

import numpy as np

from tfxla_cluster.hlo.attrs import ComparisonDirection as D
from tfxla_cluster.hlo.attrs import ComparisonType, default_comparison_type
from tfxla_cluster.hlo.eval_elementwise import BINARY, convert, minmax_at, total_order_key
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T

_UFUNCS = {O.ADD: np.add, O.MULTIPLY: np.multiply, O.MAXIMUM: np.maximum, O.MINIMUM: np.minimum,
           O.AND: np.bitwise_and, O.OR: np.bitwise_or, O.XOR: np.bitwise_xor}


def simple_reducer(comp) -> O | None:
    """The opcode if ``comp`` is ``op(p0, p1)`` of its two scalar parameters with a numpy ufunc."""
    root = comp.root
    if len(comp.instructions) != 3 or root.opcode not in _UFUNCS or not root.shape.is_scalar:
        return None
    if {o.opcode for o in root.operands} != {O.PARAMETER} or len({id(o) for o in root.operands}) != 2:
        return None
    return root.opcode


def _compute_dtype(et: T):
    if et in (T.F16, T.BF16):
        return np.float32
    if et.is_signed_int:
        return np.int64
    if et.is_unsigned_int or et.is_pred:
        return np.uint64
    return et.dtype


# ---------------------------------------------------------------- reduce
def reduce(ev, instr, args):
    k = len(args) // 2
    inputs, inits = args[:k], args[k:]
    dims = sorted(instr.dimensions)
    keep = [d for d in range(inputs[0].ndim) if d not in dims]
    out_shape = tuple(inputs[0].shape[d] for d in keep)
    comp = instr.to_apply
    op = simple_reducer(comp)
    if k == 1 and op is not None:
        x, init = inputs[0], inits[0]
        ct = _compute_dtype(ev.element_type(x))
        if ev.element_type(x).is_pred:
            ct = np.bool_
        if any(x.shape[d] == 0 for d in dims):
            # Nothing to reduce: the result is the init value (numpy's max/min have no identity).
            return np.broadcast_to(init, out_shape).astype(x.dtype).copy()
        et = ev.element_type(x)
        if et.is_float and not et.is_complex and op in (O.ADD, O.MAXIMUM, O.MINIMUM):
            flat = np.transpose(x, keep + dims).reshape(out_shape + (prod(x.shape[d] for d in dims),))
            if op is O.ADD:
                return _sum_as_double(flat, init)
            seq = np.concatenate([np.broadcast_to(init, out_shape + (1,)).astype(x.dtype), flat], axis=-1)
            return fold_in_order(BINARY[op], seq)
        # dtype=ct: numpy's add/multiply reductions would widen int32 to int64 (no wrap-around)
        r = _UFUNCS[op].reduce(x.astype(ct), axis=tuple(dims), dtype=ct)
        return np.asarray(_UFUNCS[op](init.astype(ct), r)).astype(x.dtype).reshape(out_shape)
    moved = [np.transpose(x, keep + dims).reshape(out_shape + (-1,)) for x in inputs]
    acc = [np.broadcast_to(init, out_shape).copy() for init in inits]
    for j in range(moved[0].shape[-1]):
        acc = ev.map_computation(comp, acc + [m[..., j] for m in moved])
        acc = list(acc) if isinstance(acc, tuple) else [acc]
    return acc[0] if k == 1 else tuple(acc)


FAST_ADD_CHUNK = 512  # HloEvaluator's fast add sums linear indices in chunks of this many
TREE_WINDOW = 32  # XLA:CPU's TreeReductionRewriter window


def tree_window_sums(x: np.ndarray, init: np.ndarray, dims) -> np.ndarray | None:
    """XLA:CPU's TreeReductionRewriter's reduce-window of a reduce of ``x`` over ``dims``, as XLA's evaluator
    folds it: each reduced dim longer than TREE_WINDOW is padded to a multiple of it (half the padding low,
    the rest high: TF 2.21's dumps show pad=12_12 for 40, 15_16 for 33) and cut into windows, each summed
    from ``init`` in the element type, element by element in row-major order, the padding skipped (the
    evaluator visits in-bounds elements only). Returns ``x`` with those dims replaced by the windows' sums
    (the reduce of which is folded next), or None when no reduced dim is that long."""
    split = [d for d in sorted(dims) if x.shape[d] > TREE_WINDOW]
    if not split:
        return None
    pad = [((-n % TREE_WINDOW) // 2, -n % TREE_WINDOW - (-n % TREE_WINDOW) // 2) if d in split else (0, 0)
           for d, n in enumerate(x.shape)]
    valid = np.pad(np.ones(x.shape, bool), pad)
    x = np.pad(x, pad)
    shape, window_axes = [], []
    for d, n in enumerate(x.shape):
        if d in split:
            shape += [n // TREE_WINDOW, TREE_WINDOW]
            window_axes.append(len(shape) - 1)
        else:
            shape.append(n)
    kept = [a for a in range(len(shape)) if a not in window_axes]
    out = [shape[a] for a in kept] + [-1]
    x, valid = (np.transpose(v.reshape(shape), kept + window_axes).reshape(out) for v in (x, valid))
    acc = np.broadcast_to(init, x.shape[:-1]).astype(x.dtype)
    for j in range(x.shape[-1]):
        acc = np.where(valid[..., j], (acc + x[..., j]).astype(x.dtype), acc)
    return acc


def _sum_as_double(flat: np.ndarray, init: np.ndarray) -> np.ndarray:
    """HloEvaluator's fast float add reduce (``use_fast_add``): a double total starting at the init value, to
    which each chunk of 512 elements (``Literal::GetSumAsDouble``: a double sum from 0, in order) is added;
    ``SetFromDouble`` rounds it to the element type (f16/bf16 through float, as Eigen's half casts)."""
    d = flat.astype(np.float64)
    parts = [np.broadcast_to(init.astype(np.float64), flat.shape[:-1])]
    parts += [np.add.accumulate(d[..., s:s + FAST_ADD_CHUNK], axis=-1)[..., -1]
              for s in range(0, d.shape[-1], FAST_ADD_CHUNK)]
    total = np.add.accumulate(np.stack(parts, axis=-1), axis=-1)[..., -1]
    if flat.dtype.itemsize < 4:
        total = total.astype(np.float32)
    return np.asarray(total).astype(flat.dtype)


def fold_in_order(combine, seq: np.ndarray) -> np.ndarray:
    """``combine(...combine(combine(s0, s1), s2)..., s_last)`` over the last axis, for an associative
    ``combine`` (the evaluator's float max/min: the first of the extreme values, the first NaN), in
    log2(n) vectorised steps whose pairs keep their order."""
    while seq.shape[-1] > 1:
        n, h = seq.shape[-1], seq.shape[-1] // 2
        paired = combine(seq[..., 0:2 * h:2], seq[..., 1:2 * h:2])
        seq = np.concatenate([paired, seq[..., 2 * h:]], axis=-1) if n % 2 else paired
    return seq[..., 0]


# ---------------------------------------------------------------- windows
def window_indices(in_dims, window, out_dims):
    """Operand index arrays and a validity mask, each shaped (out..., win...)."""
    r = len(in_dims)
    idx, valid = [], np.ones((1,) * (2 * r), dtype=bool)
    for d, (n, w, o) in enumerate(zip(in_dims, window.dimensions, out_dims)):
        out_i = np.arange(o).reshape(-1, 1)
        win_i = np.arange(w.size).reshape(1, -1)
        p = out_i * w.stride + win_i * w.window_dilation - w.padding_low
        ok = (p % w.base_dilation == 0) & (p >= 0) & (p // w.base_dilation < n)
        q = np.clip(p // w.base_dilation, 0, max(n - 1, 0))
        shape = [1] * (2 * r)
        shape[d], shape[r + d] = o, w.size
        idx.append(q.reshape(shape))
        valid = valid & ok.reshape(shape)
    return idx, valid


def reduce_window(ev, instr, args):
    k = len(args) // 2
    inputs, inits = args[:k], args[k:]
    out_dims = instr.shape.dimensions if k == 1 else instr.shape.tuple_shapes[0].dimensions
    idx, valid = window_indices(inputs[0].shape, instr.window, out_dims)
    full = np.broadcast_shapes(valid.shape, *(i.shape for i in idx))
    r = len(out_dims)
    wsize = prod(full[r:])
    windows = [x[tuple(idx)].reshape(tuple(out_dims) + (wsize,)) if r else x[()].reshape(1) for x in inputs]
    valid = np.broadcast_to(valid, full).reshape(tuple(out_dims) + (wsize,))
    acc = [np.broadcast_to(init, out_dims).copy() for init in inits]
    for j in range(wsize):
        new = ev.map_computation(instr.to_apply, acc + [w[..., j] for w in windows])
        new = list(new) if isinstance(new, tuple) else [new]
        acc = [np.where(valid[..., j], n, a).astype(a.dtype) for n, a in zip(new, acc)]
    return acc[0] if k == 1 else tuple(acc)


def select_and_scatter(ev, instr, args):
    x, source, init = args
    select, scatter = instr.called_computations
    idx, valid = window_indices(x.shape, instr.window, source.shape)
    full = np.broadcast_shapes(valid.shape, *(i.shape for i in idx))
    r = source.ndim
    wsize = prod(full[r:])
    flat_index = np.ravel_multi_index(tuple(np.broadcast_to(i, full) for i in idx), x.shape) if x.ndim else \
        np.zeros(full, dtype=np.int64)
    flat_index = flat_index.reshape(source.shape + (wsize,))
    values = x.reshape(-1)[flat_index]
    valid = np.broadcast_to(valid, full).reshape(source.shape + (wsize,))
    sel_val = values[..., 0].copy()
    sel_idx = flat_index[..., 0].copy()
    has = valid[..., 0].copy()
    for j in range(1, wsize):
        keep = ev.map_computation(select, [sel_val, values[..., j]]).astype(bool)
        take = valid[..., j] & (~has | ~keep)
        sel_val = np.where(take, values[..., j], sel_val).astype(x.dtype)
        sel_idx = np.where(take, flat_index[..., j], sel_idx)
        has |= valid[..., j]
    out = np.full(x.size, init, dtype=x.dtype)
    targets, src = sel_idx[has], source[has]
    op = simple_reducer(scatter)
    et = ev.element_type(x)
    if op in (O.MAXIMUM, O.MINIMUM) and et.is_float and not et.is_complex:
        minmax_at(op is O.MAXIMUM, out, (targets,), src, update_first=True)
    elif op is not None and not et.is_pred:
        _UFUNCS[op].at(out, targets, src)
    else:
        for t, s in zip(targets, src):
            out[t] = ev.map_computation(scatter, [out[t:t + 1], np.asarray([s], dtype=x.dtype)])[0]
    return out.reshape(x.shape)


# ---------------------------------------------------------------- dot and convolution
def dot(ev, instr, args):
    out_et = instr.shape.element_type
    lhs, rhs = (convert(a, out_et) if ev.element_type(a) is not out_et else a for a in args)
    dn = instr.dot_dimension_numbers
    lb, lc, rb, rc = (list(v) for v in (dn.lhs_batch_dimensions, dn.lhs_contracting_dimensions,
                                          dn.rhs_batch_dimensions, dn.rhs_contracting_dimensions))
    lf = [d for d in range(lhs.ndim) if d not in lb + lc]
    rf = [d for d in range(rhs.ndim) if d not in rb + rc]
    shape_of = lambda x, ds: [x.shape[d] for d in ds]
    B, M, K, N = prod(shape_of(lhs, lb)), prod(shape_of(lhs, lf)), prod(shape_of(lhs, lc)), prod(shape_of(rhs, rf))
    ct = _compute_dtype(out_et)
    L = np.transpose(lhs, lb + lf + lc).reshape(B, M, K).astype(ct)
    R = np.transpose(rhs, rb + rc + rf).reshape(B, K, N).astype(ct)
    res = np.matmul(L, R).reshape(shape_of(lhs, lb) + shape_of(lhs, lf) + shape_of(rhs, rf))
    return (res != 0) if out_et.is_pred else res.astype(instr.shape.dtype)


def convolution(ev, instr, args):
    out_et = instr.shape.element_type
    lhs, rhs = (convert(a, out_et) if ev.element_type(a) is not out_et else a for a in args)
    dn, window = instr.convolution_dimension_numbers, instr.window
    G, BG = instr.feature_group_count, instr.batch_group_count
    ct = _compute_dtype(out_et)
    x = np.transpose(lhs, [dn.input_batch_dimension, dn.input_feature_dimension, *dn.input_spatial_dimensions])
    w = np.transpose(rhs, [dn.kernel_output_feature_dimension, dn.kernel_input_feature_dimension,
                           *dn.kernel_spatial_dimensions]).astype(ct)
    for i, wd in enumerate(window.dimensions):
        if wd.window_reversal:
            w = np.flip(w, axis=2 + i)
    out_sp = [instr.shape.dimensions[d] for d in dn.output_spatial_dimensions]
    idx, valid = window_indices(x.shape[2:], window, out_sp)
    r = len(out_sp)
    patches = x[(slice(None), slice(None), *idx)] if r else x
    patches = np.where(valid, patches, 0).astype(ct)  # (N, C, out..., win...)
    n, c = x.shape[:2]
    o = w.shape[0]
    letters = "abcdefghijklmnopqrstuvwxyz"
    sp, wn = letters[:r], letters[r:2 * r]
    if BG > 1:
        xb = patches.reshape((BG, n // BG, c) + patches.shape[2:])
        wb = w.reshape((BG, o // BG, c) + w.shape[2:])
        res = np.einsum(f"GNC{sp}{wn},GOC{wn}->NGO{sp}", xb, wb)
        res = res.reshape((n // BG, o) + tuple(out_sp))
    else:
        xg = patches.reshape((n, G, c // G) + patches.shape[2:])
        wg = w.reshape((G, o // G, c // G) + w.shape[2:])
        if np.all(valid) or np.all(np.isfinite(w)):
            res = np.einsum(f"NGC{sp}{wn},GOC{wn}->NGO{sp}", xg, wg)
        else:  # HloEvaluator skips padding and holes: a non-finite tap there adds nothing (not 0·inf = NaN)
            terms = xg[:, :, None] * wg.reshape(wg.shape[:3] + (1,) * r + wg.shape[3:])[None]
            res = np.where(valid, terms, 0).sum(axis=(3,) + tuple(range(4 + r, 4 + 2 * r)))
        res = res.reshape((n, o) + tuple(out_sp))
    src = [0] * (r + 2)
    src[dn.output_batch_dimension], src[dn.output_feature_dimension] = 0, 1
    for i, d in enumerate(dn.output_spatial_dimensions):
        src[d] = 2 + i
    res = np.transpose(res, src)
    if out_et.is_integral:
        info = np.iinfo(instr.shape.dtype)
        res = np.clip(res, info.min, info.max)
    return (res != 0) if out_et.is_pred else res.astype(instr.shape.dtype)


# ---------------------------------------------------------------- sort
def _sort_key(comp, operands):
    """A key whose stable ascending sort matches the comparator, when it is compare(p0.lhs, p0.rhs)
    with LT or GT; None otherwise."""
    root = comp.root
    if root.opcode is not O.COMPARE or root.comparison_direction not in (D.LT, D.GT):
        return None
    a, b = root.operands
    if a.opcode is not O.PARAMETER or b.opcode is not O.PARAMETER or {a.parameter_number, b.parameter_number} != {0, 1}:
        return None
    descending = (root.comparison_direction is D.GT) == (a.parameter_number == 0)
    x = operands[0]
    et = a.shape.element_type
    ctype = root.comparison_type or default_comparison_type(et)
    if et.is_float and ctype is ComparisonType.TOTALORDER:
        key = total_order_key(x)
        return ~key if descending else key
    if et.is_float:
        key = x.astype(np.float64)
        return -key if descending else key
    if et.is_pred:
        key = x.astype(np.int8)
    elif ctype is ComparisonType.UNSIGNED and et.is_signed_int:
        key = x.view(np.dtype(f"u{x.dtype.itemsize}"))
    else:
        key = x
    return ~key if descending else key


def sort(ev, instr, args):
    out = sort_along(ev, instr.to_apply, args, instr.dimensions[0])
    return out[0] if len(out) == 1 else tuple(out)


def topk(ev, instr, args):
    """kTopK: the k largest (``largest=false``: smallest) along the last dimension in total order, ties
    to the lower index (XLA's TopkDecomposer: a stable sort of (x, iota) by x), and their s32 indices."""
    (x,) = args
    et = instr.operands[0].shape.element_type
    key = total_order_key(x) if et.is_float else (x.astype(np.int8) if et.is_pred else x)
    order = np.argsort(~key if instr.largest else key, axis=-1, kind="stable")[..., :instr.k]
    return np.take_along_axis(x, order, axis=-1), order.astype(np.int32)


def sort_along(ev, comparator, args, dim: int, carry=()) -> list:
    """Stable sort of ``args`` along ``dim`` by ``comparator`` (a strict "less than" over pairs of
    ``args`` elements); ``carry`` arrays are permuted alongside without being compared."""
    moved = [np.moveaxis(a, dim, -1) for a in args]
    fast = _sort_key(comparator, moved)
    if fast is not None:
        order = np.argsort(fast, axis=-1, kind="stable")
    else:
        shape = moved[0].shape
        n = shape[-1]
        flat = [m.reshape(-1, n) for m in moved]
        pair_args = []
        for f in flat:
            pair_args += [f[:, :, None], f[:, None, :]]
        pair_args = [np.broadcast_to(p, (flat[0].shape[0], n, n)) for p in pair_args]
        less = np.asarray(ev.map_computation(comparator, pair_args)).astype(bool)
        rows = []
        for s in range(less.shape[0]):
            lt = less[s]
            cmp = lambda i, j: -1 if lt[i, j] else (1 if lt[j, i] else 0)
            rows.append(sorted(range(n), key=functools.cmp_to_key(cmp)))
        order = np.asarray(rows, dtype=np.int64).reshape(shape)
    moved += [np.moveaxis(c, dim, -1) for c in carry]
    return [np.moveaxis(np.take_along_axis(m, order, axis=-1), -1, dim).copy() for m in moved]


HANDLERS = {
    O.REDUCE: reduce,
    O.REDUCE_WINDOW: reduce_window,
    O.SELECT_AND_SCATTER: select_and_scatter,
    O.DOT: dot,
    O.CONVOLUTION: convolution,
    O.SORT: sort,
    O.TOPK: topk,
}
