"""More array ops: reversal and rolls, space/depth/batch rearrangements, diagonals and band parts,
segment reductions, searches and small metadata ops (tf2xla's reverse_op.cc, roll_op.cc,
spacetodepth_op.cc, depthtospace_op.cc, spacetobatch_op.cc, batchtospace_op.cc, matrix_band_part_op.cc,
matrix_diag_ops.cc, diag_op.cc, cross_op.cc, segment_reduction_ops.cc, in_topk_op.cc, bucketize_op.cc,
lower_upper_bound_ops.cc, concat_op.cc (ConcatOffset), data_format_ops.cc, sequence_ops.cc (LinSpace),
bcast/cast ops).

Stage: lowering. Rearrangements are ``reshape``/``transpose``/``pad``/``slice`` chains; diagonals and bands
compare ``iota``s; segment reductions are one ``scatter`` (out-of-range ids are dropped, as XLA's
scatter skips them); searches count comparisons with a reduce. Diagonal ops are supported for the
main diagonal (``k = 0``) only.
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.gather_scatter import scatter_nd
from tfxla_cluster.tf2hlo.registry import lowers


def _dims(d) -> str:
    return "[" + ",".join(map(str, d)) + "]"


# ---------------------------------------------------------------- reversal and roll
@lowers("Reverse")
def _reverse(ctx, node):
    x = ctx.input(0)
    flags = np.asarray(ctx.const_input(1)).reshape(-1)
    if flags.size != x.shape.rank:
        raise InvalidArgumentError(f"'dims' must have the same number of values as 'input' has dimensions: "
                                   f"{flags.size} vs. {x.shape.rank}")
    axes = [i for i, f in enumerate(flags) if f]
    return [ctx.b.reverse(x, axes) if axes else x]


@lowers("Roll")
def _roll(ctx, node):
    x = ctx.input(0)
    b = ctx.b
    dims = list(x.shape.dimensions)
    axes = ctx.const_ints(2)
    shifts = ctx.try_const_input(1)
    if shifts is None:
        return [_roll_dynamic(ctx, x, axes)]
    shifts = [int(s) for s in np.asarray(shifts).reshape(-1)]
    if len(shifts) != len(axes):
        raise InvalidArgumentError(f"shift and axis must have the same size: {len(shifts)} vs {len(axes)}")
    total = [0] * len(dims)
    for s, a in zip(shifts, axes):
        total[ctx.normalize_axis(a, len(dims))] += s
    for axis, s in enumerate(total):
        n = dims[axis]
        if n == 0 or s % n == 0:
            continue
        k = s % n  # output[i] = input[(i - k) mod n]: the last k elements come first
        head = b.slice(x, [0] * len(dims), [n - k if a == axis else d for a, d in enumerate(dims)])
        tail = b.slice(x, [n - k if a == axis else 0 for a in range(len(dims))], dims)
        x = b.concatenate([tail, head], axis)
    return [x]


def _roll_dynamic(ctx, x, axes: list[int]):
    """TF's roll_op.cc for a run-time shift: per axis, ``offset = ((-shift) rem n + n) rem n`` and a
    dynamic-slice of ``concat(x, x)`` starting at ``offset`` (output[i] = input[(i - shift) mod n])."""
    b = ctx.b
    shift = ctx.input(1)
    rank = len(x.shape.dimensions)
    t = shift.shape.element_type
    if len(shift.shape.dimensions) > 1 or (shift.shape.dimensions and shift.shape.dimensions[0] != len(axes)):
        raise InvalidArgumentError(f"shift and axis must have the same size: {shift.shape.dimensions} vs {len(axes)}")
    zero = b.constant(np.zeros((), t.dtype), t)
    for k, a in enumerate(axes):
        axis = ctx.normalize_axis(a, rank)
        n = x.shape.dimensions[axis]
        if n == 0:
            continue
        s = b.reshape(b.slice(shift, [k], [k + 1]), ()) if shift.shape.dimensions else shift
        nn = b.constant(np.asarray(n, t.dtype), t)
        offset = b.binary(O.REMAINDER, b.binary(O.ADD, b.binary(O.REMAINDER, b.unary(O.NEGATE, s), nn), nn), nn)
        doubled = b.concatenate([x, x], axis)
        starts = [offset if d == axis else zero for d in range(rank)]
        x = b.dynamic_slice(doubled, starts, list(x.shape.dimensions))
    return x


# ---------------------------------------------------------------- space ↔ depth / batch
def _nhwc_only(ctx):
    if ctx.attr("data_format", "NHWC") != "NHWC":
        raise UnimplementedError(f"{ctx.op} with data_format {ctx.attr('data_format')}")


@lowers("SpaceToDepth")
def _space_to_depth(ctx, node):
    _nhwc_only(ctx)
    x = ctx.input(0)
    bs = int(ctx.attr("block_size"))
    n, h, w, c = x.shape.dimensions
    if h % bs or w % bs:
        raise InvalidArgumentError(f"Image height {h} and width {w} must be multiples of block_size: {bs}")
    b = ctx.b
    y = b.reshape(x, [n, h // bs, bs, w // bs, bs, c])
    y = b.transpose(y, [0, 1, 3, 2, 4, 5])
    return [b.reshape(y, [n, h // bs, w // bs, bs * bs * c])]


@lowers("DepthToSpace")
def _depth_to_space(ctx, node):
    _nhwc_only(ctx)
    x = ctx.input(0)
    bs = int(ctx.attr("block_size"))
    n, h, w, c = x.shape.dimensions
    if c % (bs * bs):
        raise InvalidArgumentError(f"Input depth dimension {c} should be divisible by: {bs * bs}")
    b = ctx.b
    y = b.reshape(x, [n, h, w, bs, bs, c // (bs * bs)])
    y = b.transpose(y, [0, 1, 3, 2, 4, 5])
    return [b.reshape(y, [n, h * bs, w * bs, c // (bs * bs)])]


def space_to_batch(b, x, block: list[int], pads: list[tuple[int, int]]):
    dims = list(x.shape.dimensions)
    m = len(block)
    cfg = [(0, 0)] + pads + [(0, 0)] * (len(dims) - 1 - m)
    if any(p != (0, 0) for p in cfg):
        x = b.pad(x, xl.scalar(b, 0, x.shape.element_type), cfg)
    padded = list(x.shape.dimensions)
    for i, bl in enumerate(block):
        if padded[1 + i] % bl:
            raise InvalidArgumentError(f"padded_shape[{i}]={padded[1 + i]} is not divisible by block_shape[{i}]={bl}")
    batch, rest = padded[0], padded[1 + m:]
    split = [batch] + [v for i, bl in enumerate(block) for v in (padded[1 + i] // bl, bl)] + rest
    y = b.reshape(x, split)
    perm = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] + list(range(1 + 2 * m, len(split)))
    y = b.transpose(y, perm)
    return b.reshape(y, [batch * int(np.prod(block))] + [padded[1 + i] // bl for i, bl in enumerate(block)] + rest)


def batch_to_space(b, x, block: list[int], crops: list[tuple[int, int]]):
    dims = list(x.shape.dimensions)
    m = len(block)
    prod = int(np.prod(block))
    if dims[0] % prod:
        raise InvalidArgumentError(f"Input batch dimension ({dims[0]}) is not divisible by product of block sizes "
                                   f"({prod})")
    batch = dims[0] // prod
    y = b.reshape(x, block + [batch] + dims[1:])
    perm = [m] + [v for i in range(m) for v in (m + 1 + i, i)] + list(range(2 * m + 1, len(dims) + m))
    y = b.transpose(y, perm)
    spatial = [dims[1 + i] * bl for i, bl in enumerate(block)]
    y = b.reshape(y, [batch] + spatial + dims[1 + m:])
    starts = [0] + [c[0] for c in crops] + [0] * (len(dims) - 1 - m)
    limits = [batch] + [s - c[1] for s, c in zip(spatial, crops)] + dims[1 + m:]
    if any(s < 0 or lim < s for s, lim in zip(starts, limits)):
        raise InvalidArgumentError("crops must be non-negative and not larger than the spatial dimensions")
    return b.slice(y, starts, limits) if starts != [0] * len(starts) or limits != list(y.shape.dimensions) else y


def _pairs(ctx, index: int, m: int, what: str) -> list[tuple[int, int]]:
    v = np.asarray(ctx.const_input(index)).astype(np.int64)
    if v.shape != (m, 2) or (v < 0).any():
        raise InvalidArgumentError(f"{what} must be a non-negative [{m}, 2] matrix, got shape {list(v.shape)}")
    return [(int(a), int(c)) for a, c in v]


@lowers("SpaceToBatchND")
def _space_to_batch_nd(ctx, node):
    block = ctx.const_ints(1)
    return [space_to_batch(ctx.b, ctx.input(0), block, _pairs(ctx, 2, len(block), "paddings"))]


@lowers("BatchToSpaceND")
def _batch_to_space_nd(ctx, node):
    block = ctx.const_ints(1)
    return [batch_to_space(ctx.b, ctx.input(0), block, _pairs(ctx, 2, len(block), "crops"))]


@lowers("SpaceToBatch")
def _space_to_batch(ctx, node):
    bs = int(ctx.attr("block_size"))
    return [space_to_batch(ctx.b, ctx.input(0), [bs, bs], _pairs(ctx, 1, 2, "paddings"))]


@lowers("BatchToSpace")
def _batch_to_space(ctx, node):
    bs = int(ctx.attr("block_size"))
    return [batch_to_space(ctx.b, ctx.input(0), [bs, bs], _pairs(ctx, 1, 2, "crops"))]


# ---------------------------------------------------------------- diagonals and bands
def _row_col(b, dims, et=P.S32):
    """iota row and column indices over the last two dims of ``dims``."""
    r = len(dims)
    return b.iota(Shape.array(et, dims), r - 2), b.iota(Shape.array(et, dims), r - 1)


@lowers("MatrixBandPart")
def _matrix_band_part(ctx, node):
    x = ctx.input(0)
    b = ctx.b
    dims = x.shape.dimensions
    if len(dims) < 2:
        raise InvalidArgumentError(f"input must be at least 2-dim, received shape: {_dims(dims)}")
    lower, upper = ctx.input(1), ctx.input(2)
    it = lower.shape.element_type
    row, col = _row_col(b, dims, it)
    diff = b.subtract(row, col)  # row - col
    lower_b, upper_b = b.broadcast(lower, dims, ()), b.broadcast(upper, dims, ())
    keep_lower = b.or_(xl.lt(b, lower_b, 0), b.compare(diff, lower_b, "LE"))
    keep_upper = b.or_(xl.lt(b, upper_b, 0), b.compare(b.negate(diff), upper_b, "LE"))
    return [b.select(b.and_(keep_lower, keep_upper), x, xl.zeros_like(b, x))]


def _k_band(ctx, k_index: int | None) -> tuple[int, int]:
    """The diagonal band ``(lower, upper)`` of a V2/V3 diag op (``k`` a scalar or a pair); (0, 0) for V1."""
    if k_index is None:
        return 0, 0
    k = [int(v) for v in np.asarray(ctx.const_input(k_index)).reshape(-1)]
    if not 1 <= len(k) <= 2:
        raise InvalidArgumentError(f"diag_index must have at most two elements, got {len(k)}")
    lo, hi = k[0], k[-1]
    if lo > hi:
        raise InvalidArgumentError(f"lower_diag_index must not be greater than upper_diag_index, got {lo} > {hi}")
    return lo, hi


def _diag_len(m: int, n: int, d: int) -> int:
    return min(m + min(d, 0), n - max(d, 0))


def _diag_offset(ctx, d: int, max_len: int, length: int) -> int:
    """Where diagonal ``d`` starts in its padded row: V3's ``align`` (RIGHT pads on the left); V2 packs
    LEFT_LEFT."""
    align = ctx.attr("align", "LEFT_LEFT") if ctx.op.endswith("V3") else "LEFT_LEFT"
    right = align.split("_")[0 if d >= 0 else 1] == "RIGHT"
    return max_len - length if right else 0


def _on_diagonal(b, v, m: int, n: int, d: int):
    """``v[..., L]`` on diagonal ``d`` of an ``[..., m, n]`` matrix of zeros (L = that diagonal's length)."""
    length = v.shape.dimensions[-1]
    sq = matrix_diag(b, v, length, length, None)
    r0, c0 = max(0, -d), max(0, d)
    batch = [(0, 0)] * (v.shape.rank - 1)
    return b.pad(sq, xl.scalar(b, 0 if v.shape.element_type is not P.PRED else False, v.shape.element_type),
                 batch + [(r0, m - r0 - length), (c0, n - c0 - length)])


def _band_row(b, diag, lo: int, hi: int, d: int):
    """Diagonal ``d``'s padded row of a band input ``[..., num_diags, max_len]`` (or ``[..., max_len]``)."""
    if lo == hi:
        return diag
    dims = list(diag.shape.dimensions)
    i = hi - d
    row = b.slice(diag, [0] * (len(dims) - 2) + [i, 0], dims[:-2] + [i + 1, dims[-1]])
    return b.reshape(row, dims[:-2] + [dims[-1]])


def _set_band(ctx, b, base, diag, lo: int, hi: int):
    """``base`` with diagonals lo..hi replaced by the rows of ``diag`` (aligned as the op says)."""
    dims = list(base.shape.dimensions)
    m, n = dims[-2:]
    max_len = diag.shape.dimensions[-1]
    row, col = _row_col(b, dims)
    out = base
    for d in range(lo, hi + 1):
        length = _diag_len(m, n, d)
        if length <= 0:
            continue
        off = _diag_offset(ctx, d, max_len, length)
        r = _band_row(b, diag, lo, hi, d)
        v = b.slice(r, [0] * (len(dims) - 2) + [off], dims[:-2] + [off + length])
        on = b.compare(b.subtract(col, row), b.broadcast(xl.scalar(b, d, P.S32), dims, ()), "EQ")
        out = b.select(on, _on_diagonal(b, v, m, n, d), out)
    return out


def matrix_diag(b, diag, rows: int, cols: int, padding):
    dd = list(diag.shape.dimensions)
    out = dd[:-1] + [rows, cols]
    row, col = _row_col(b, out)
    d = diag
    n = dd[-1]
    if n < rows:
        d = b.pad(d, xl.scalar(b, 0, diag.shape.element_type), [(0, 0)] * (len(dd) - 1) + [(0, rows - n)])
    elif n > rows:
        d = b.slice(d, [0] * len(dd), dd[:-1] + [rows])
    bd = b.broadcast(d, out, list(range(len(dd) - 1)) + [len(out) - 2])
    pad = padding if padding is not None else xl.zeros_like(b, bd)
    return b.select(b.compare(row, col, "EQ"), bd, pad)


@lowers("MatrixDiag", "MatrixDiagV2", "MatrixDiagV3")
def _matrix_diag(ctx, node):
    diag = ctx.input(0)
    b = ctx.b
    n = diag.shape.dimensions[-1]
    rows = cols = n
    padding = None
    if node.op != "MatrixDiag":
        lo, hi = _k_band(ctx, 1)
        if (lo, hi) != (0, 0):
            return [_matrix_diag_band(ctx, b, diag, lo, hi)]
        nr, nc = ctx.const_int(2), ctx.const_int(3)
        rows = nr if nr != -1 else (n if nc == -1 else max(n, 0))
        cols = nc if nc != -1 else (n if nr == -1 else max(n, 0))
        pv = ctx.input(4)
        out = list(diag.shape.dimensions[:-1]) + [rows, cols]
        padding = b.broadcast(pv, out, ())
    return [matrix_diag(b, diag, rows, cols, padding)]


def _matrix_diag_band(ctx, b, diag, lo: int, hi: int):
    """MatrixDiagV2/V3 off the main diagonal: the padding value outside the band, tf2xla's sizes."""
    max_len = diag.shape.dimensions[-1]
    batch = list(diag.shape.dimensions[:-1 if lo == hi else -2])
    min_rows, min_cols = max_len - min(hi, 0), max_len + max(lo, 0)
    nr, nc = ctx.const_int(2), ctx.const_int(3)
    if nr == -1 and nc == -1:
        nr = nc = max(min_rows, min_cols)
    elif nr == -1:
        nr = min_rows
    elif nc == -1:
        nc = min_cols
    if nr < min_rows or nc < min_cols:
        raise InvalidArgumentError(f"The number of rows or columns is not consistent with the specified d_lower, "
                                   f"d_upper, and diagonal: {nr}x{nc}")
    base = b.broadcast(xl.convert(b, ctx.input(4), diag.shape.element_type), batch + [nr, nc], ())
    return _set_band(ctx, b, base, diag, lo, hi)


def _matrix_diag_part_band(ctx, b, x, lo: int, hi: int):
    """MatrixDiagPartV2/V3 off the main diagonal: each diagonal's row, padded (``padding_value``) to the
    longest diagonal's length as ``align`` says; ``[..., num_diags, max_len]`` (diagonal ``hi`` first)."""
    dims = list(x.shape.dimensions)
    m, n = dims[-2:]
    lens = {d: _diag_len(m, n, d) for d in range(lo, hi + 1)}
    if min(lens.values()) <= 0:
        raise InvalidArgumentError(f"k=({lo}, {hi}) is out of bounds for a {m}x{n} matrix")
    max_len = max(lens.values())
    row, col = _row_col(b, dims)
    et = x.shape.element_type
    pad_value = xl.convert(b, ctx.input(2), et)
    rows = []
    for d in range(hi, lo - 1, -1):
        on = b.compare(b.subtract(col, row), b.broadcast(xl.scalar(b, d, P.S32), dims, ()), "EQ")
        masked = b.select(on, x, xl.zeros_like(b, x))
        r = xl.reduce(b, masked, False if et is P.PRED else 0, [len(dims) - 1], O.OR if et is P.PRED else O.ADD,
                      f"diag{d}-sum")
        r0, length = max(0, -d), lens[d]
        v = b.slice(r, [0] * (len(dims) - 2) + [r0], dims[:-2] + [r0 + length])
        off = _diag_offset(ctx, d, max_len, length)
        v = b.pad(v, pad_value, [(0, 0)] * (len(dims) - 2) + [(off, max_len - length - off)])
        rows.append(v if lo == hi else b.reshape(v, dims[:-2] + [1, max_len]))
    return rows[0] if lo == hi else b.concatenate(rows, len(dims) - 2)


@lowers("MatrixDiagPart", "MatrixDiagPartV2", "MatrixDiagPartV3")
def _matrix_diag_part(ctx, node):
    x = ctx.input(0)
    b = ctx.b
    if node.op != "MatrixDiagPart":
        lo, hi = _k_band(ctx, 1)
        if (lo, hi) != (0, 0):
            return [_matrix_diag_part_band(ctx, b, x, lo, hi)]
    dims = list(x.shape.dimensions)
    m, n = dims[-2:]
    row, col = _row_col(b, dims)
    masked = b.select(b.compare(row, col, "EQ"), x, xl.zeros_like(b, x))
    et = x.shape.element_type
    op = O.OR if et is P.PRED else O.ADD
    r = xl.reduce(b, masked, False if et is P.PRED else 0, [len(dims) - 1], op, f"{node.name}-sum")
    k = min(m, n)
    return [b.slice(r, [0] * (len(dims) - 1), dims[:-2] + [k]) if k != m else r]


@lowers("MatrixSetDiag", "MatrixSetDiagV2", "MatrixSetDiagV3")
def _matrix_set_diag(ctx, node):
    x, diag = ctx.input(0), ctx.input(1)
    b = ctx.b
    if node.op != "MatrixSetDiag":
        lo, hi = _k_band(ctx, 2)
        if (lo, hi) != (0, 0):
            return [_set_band(ctx, b, x, diag, lo, hi)]
    dims = list(x.shape.dimensions)
    m, n = dims[-2:]
    if list(diag.shape.dimensions) != dims[:-2] + [min(m, n)]:
        raise InvalidArgumentError(f"diagonal must have shape {_dims(dims[:-2] + [min(m, n)])}, got "
                                   f"{_dims(diag.shape.dimensions)}")
    return [matrix_diag(b, diag, m, n, x)]


@lowers("Diag")
def _diag(ctx, node):
    d = ctx.input(0)
    b = ctx.b
    dims = list(d.shape.dimensions)
    if not dims:
        raise InvalidArgumentError("Input must be at least rank 1, got 0")
    n = int(np.prod(dims))
    flat = b.reshape(d, [n])
    return [b.reshape(matrix_diag(b, flat, n, n, None), dims + dims)]


@lowers("DiagPart")
def _diag_part(ctx, node):
    x = ctx.input(0)
    b = ctx.b
    dims = list(x.shape.dimensions)
    half = len(dims) // 2
    if len(dims) % 2 or dims[:half] != dims[half:]:
        raise InvalidArgumentError(f"Invalid shape {_dims(dims)}: dimensions must be even and the two halves equal")
    n = int(np.prod(dims[:half]))
    flat = b.reshape(x, [n * n])
    return [b.reshape(b.slice(flat, [0], [n * n], [n + 1]) if n else b.reshape(flat, [0]), dims[:half])]


@lowers("Cross")
def _cross(ctx, node):
    a, c = ctx.input(0), ctx.input(1)
    b = ctx.b
    dims = list(a.shape.dimensions)
    if dims != list(c.shape.dimensions) or not dims or dims[-1] != 3:
        raise InvalidArgumentError(f"both inputs must have the same shape ending in 3, got {_dims(dims)} and "
                                   f"{_dims(c.shape.dimensions)}")

    def comp(x, i):
        return b.slice(x, [0] * (len(dims) - 1) + [i], dims[:-1] + [i + 1])

    a0, a1, a2 = (comp(a, i) for i in range(3))
    c0, c1, c2 = (comp(c, i) for i in range(3))
    parts = [b.subtract(b.multiply(a1, c2), b.multiply(a2, c1)), b.subtract(b.multiply(a2, c0), b.multiply(a0, c2)),
             b.subtract(b.multiply(a0, c1), b.multiply(a1, c0))]
    return [b.concatenate(parts, len(dims) - 1)]


# ---------------------------------------------------------------- segments, searches, top-k membership
# op → (combiner, value of an empty segment: TF's lowest/highest *finite* value for max/min).
_SEGMENT = {
    "UnsortedSegmentSum": (O.ADD, lambda et: 0), "UnsortedSegmentProd": (O.MULTIPLY, lambda et: 1),
    "UnsortedSegmentMax": (O.MAXIMUM, xl.min_finite_value), "UnsortedSegmentMin": (O.MINIMUM, xl.max_finite_value),
    "SegmentSumV2": (O.ADD, lambda et: 0), "SegmentProdV2": (O.MULTIPLY, lambda et: 1),
    "SegmentMaxV2": (O.MAXIMUM, xl.min_finite_value), "SegmentMinV2": (O.MINIMUM, xl.max_finite_value),
}


@lowers(*_SEGMENT)
def _segment_reduction(ctx, node):
    data, ids = ctx.input(0), ctx.input(1)
    b = ctx.b
    num = ctx.const_int(2)
    dd, idims = list(data.shape.dimensions), list(ids.shape.dimensions)
    if dd[:len(idims)] != idims:
        raise InvalidArgumentError(f"data.shape = {_dims(dd)} does not start with segment_ids.shape = {_dims(idims)}")
    opcode, init = _SEGMENT[node.op]
    et = data.shape.element_type
    out = xl.full(b, init(et), et, [num] + dd[len(idims):])
    indices = b.reshape(ids, idims + [1])
    return [scatter_nd(b, out, indices, data, opcode, f"{node.name}-combiner")]


@lowers("Bucketize")
def _bucketize(ctx, node):
    x = ctx.input(0)
    b = ctx.b
    bounds = [float(v) for v in ctx.attr("boundaries", [])]
    dims = list(x.shape.dimensions)
    if not bounds:
        return [xl.full(b, 0, P.S32, dims)]
    et = x.shape.element_type
    bc = b.constant(np.asarray(bounds).astype(et.dtype), et)
    out = dims + [len(bounds)]
    ge = b.compare(b.broadcast(x, out, list(range(len(dims)))), b.broadcast(bc, out, [len(dims)]), "GE")
    ones = b.convert(ge, P.S32)
    return [xl.reduce(b, ones, 0, [len(dims)], O.ADD, f"{node.name}-count")]


def _search(direction: str):
    def lower(ctx, node):
        sorted_inputs, values = ctx.input(0), ctx.input(1)
        b = ctx.b
        (batch, n), (vb, m) = sorted_inputs.shape.dimensions, values.shape.dimensions
        if batch != vb:
            raise InvalidArgumentError("Leading dim_size of both tensors must match.")
        out_t = ctx.output_type(0)
        shape = [batch, m, n]
        cmp = b.compare(b.broadcast(sorted_inputs, shape, [0, 2]), b.broadcast(values, shape, [0, 1]), direction)
        return [xl.reduce(b, b.convert(cmp, out_t), 0, [2], O.ADD, f"{node.name}-count")]
    return lower


lowers("LowerBound")(_search("LT"))   # count of sorted elements < value
lowers("UpperBound")(_search("LE"))   # count of sorted elements <= value


@lowers("InTopKV2")
def _in_top_k(ctx, node):
    """targets[i] is in the top k iff fewer than k predictions are strictly greater (and it is in range
    and finite)."""
    pred, targets = ctx.input(0), ctx.input(1)
    b = ctx.b
    k = ctx.input(2)
    batch, classes = pred.shape.dimensions
    tt = targets.shape.element_type
    iota = b.iota(Shape.array(tt, [batch, classes]), 1)
    hot = b.compare(iota, b.broadcast(targets, [batch, classes], [0]), "EQ")
    target_value = xl.reduce(b, b.select(hot, pred, xl.zeros_like(b, pred)), 0, [1], O.ADD, f"{node.name}-pick")
    greater = b.compare(pred, b.broadcast(target_value, [batch, classes], [0]), "GT")
    count = xl.reduce(b, b.convert(greater, tt), 0, [1], O.ADD, f"{node.name}-count")
    kk = b.broadcast(xl.convert(b, k, tt), [batch], ())
    in_range = b.and_(xl.ge(b, targets, 0), xl.lt(b, targets, classes))
    ok = b.and_(b.and_(b.compare(count, kk, "LT"), in_range), b.is_finite(target_value))
    return [ok]


# ---------------------------------------------------------------- metadata and casts
@lowers("ConcatOffset")
def _concat_offset(ctx, node):
    axis = ctx.const_int(0)
    shapes = [ctx.const_ints(i) for i in range(1, ctx.num_inputs)]
    rank = len(shapes[0])
    axis = ctx.normalize_axis(axis, rank, "concat_dim")
    out, offset = [], 0
    for i, s in enumerate(shapes):
        v = [0] * rank
        v[axis] = offset
        offset += s[axis]
        out.append(np.asarray(v).astype(ctx.output_type(i).dtype))
    return out


def _format_perm(src: str, dst: str) -> list[int]:
    if sorted(src) != sorted(dst):
        raise InvalidArgumentError(f"Destination and source format must determine a permutation, got {src} and {dst}")
    return [src.index(c) for c in dst]


@lowers("DataFormatVecPermute")
def _data_format_vec_permute(ctx, node):
    x = ctx.input(0)
    b = ctx.b
    src, dst = ctx.attr("src_format", "NHWC"), ctx.attr("dst_format", "NCHW")
    perm = _format_perm(src, dst)
    dims = list(x.shape.dimensions)
    n = dims[0]
    if n == len(perm) - 2:  # spatial dims only
        keep = [c for c in src if c in "HWD"]
        perm = [keep.index(c) for c in dst if c in keep]
    elif n != len(perm):
        raise InvalidArgumentError(f"input must be a vector or 2D tensor of size {len(perm)} or {len(perm) - 2}")
    parts = [b.slice(x, [p] + [0] * (len(dims) - 1), [p + 1] + dims[1:]) for p in perm]
    return [b.concatenate(parts, 0) if len(parts) > 1 else parts[0]]


@lowers("DataFormatDimMap")
def _data_format_dim_map(ctx, node):
    x = ctx.input(0)
    b = ctx.b
    src, dst = ctx.attr("src_format", "NHWC"), ctx.attr("dst_format", "NCHW")
    table = [dst.index(c) for c in src]
    n = len(table)
    et = x.shape.element_type
    dims = list(x.shape.dimensions)
    idx = xl.rem(b, xl.add(b, xl.rem(b, x, n), n), n)  # floor-mod into [0, n)
    out = xl.full(b, 0, et, dims)
    for i, t in enumerate(table):
        out = b.select(xl.eq(b, idx, i), xl.full(b, t, et, dims), out)
    return [out]


@lowers("LinSpace")
def _lin_space(ctx, node):
    start, stop = ctx.try_const_input(0), ctx.try_const_input(1)
    num = ctx.const_int(2)
    if num <= 0:
        raise InvalidArgumentError(f"Requires num > 0: {num}")
    et = ctx.output_type(0)
    if start is not None and stop is not None:
        s0, s1 = np.asarray(start, et.dtype).reshape(()), np.asarray(stop, et.dtype).reshape(())
        if num == 1:
            return [np.asarray([s0], et.dtype)]
        step = (s1 - s0) / et.dtype.type(num - 1)
        out = (s0 + step * np.arange(num, dtype=et.dtype)).astype(et.dtype)
        out[-1] = s1  # TF's kernel writes the end point exactly
        return [out]
    b = ctx.b
    s0, s1 = ctx.input(0), ctx.input(1)
    if num == 1:
        return [b.reshape(s0, [1])]
    step = xl.div(b, b.subtract(s1, s0), float(num - 1))
    iota = b.iota(Shape.array(et, [num]), 0)
    vals = b.add(b.broadcast(s0, [num], ()), b.multiply(iota, b.broadcast(step, [num], ())))
    last = xl.eq(b, b.iota(Shape.array(P.S32, [num]), 0), num - 1)
    return [b.select(last, b.broadcast(s1, [num], ()), vals)]


@lowers("Bitcast")
def _bitcast(ctx, node):
    x = ctx.input(0)
    dst = ctx.attr_type("type")
    if dst is x.shape.element_type:
        return [x]
    src_w, dst_w = x.shape.element_type.bit_width, dst.bit_width
    if src_w < dst_w and (not x.shape.dimensions or x.shape.dimensions[-1] != dst_w // src_w):
        raise InvalidArgumentError(f"Cannot bitcast from {x.shape.element_type.value} to {dst.value}: the last "
                                   f"dimension must be {dst_w // src_w}")
    return [ctx.b.bitcast_convert(x, dst)]


@lowers("ToBool")
def _to_bool(ctx, node):
    from tfxla_cluster.tf2hlo.complex_ops import complex_hlo

    x = complex_hlo(ctx, 0)
    if x.shape.rank:  # non-scalars are true iff non-empty
        return [np.asarray(x.shape.num_elements > 0)]
    return [x if x.shape.element_type is P.PRED else xl.ne(ctx.b, x, 0)]
