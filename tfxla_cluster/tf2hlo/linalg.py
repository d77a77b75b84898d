"""Dense linear algebra: Cholesky, MatrixTriangularSolve, MatrixInverse (tf2xla's cholesky_op.cc,
matrix_triangular_solve_op.cc, matrix_inverse_op.cc).

Stage: lowering. Like XLA's expanders these become HLO ``while`` loops over one row or column per
iteration, batched over the leading dims (everything is a batched ``dot``, ``dynamic-slice`` /
``dynamic-update-slice`` at the loop index, and iota masks — no per-batch indices):

* ``Cholesky``: left-looking, column ``j`` is ``A[:, j] - L @ L[j, :]ᵀ``, its diagonal square-rooted,
  the rows below divided by it (only the lower triangle of A is read; a non-positive pivot gives NaNs
  where TF's kernel raises, as XLA does);
* ``MatrixTriangularSolve``: forward (lower) or backward (upper) substitution one row at a time, on the
  relevant triangle of the matrix; ``adjoint`` solves with the transpose; batch dims broadcast;
* ``MatrixInverse``: Gauss-Jordan with partial pivoting on ``[A | I]`` (the row swap is a batched
  permutation-matrix product); ``adjoint`` inverts Aᴴ.

Numerics: the operation order differs from TF's Eigen kernels (LLT, PartialPivLU): results agree to
float rounding, not bit for bit. Cholesky and MatrixTriangularSolve also take complex matrices (the same
loops on complex HLO arrays, conjugating where the algorithm transposes); MatrixInverse is real only, as
TF's XLA kernel.
"""
from __future__ import annotations

from typing import Callable, Sequence

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo.ir import HloInstruction
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.registry import lowers


def fori_loop(b, name: str, trip_count: int, init: Sequence[HloInstruction],
              body: Callable[..., list[HloInstruction]]) -> list[HloInstruction]:
    """``for i in range(trip_count): state = body(builder, i, *state)`` as one HLO while."""
    counter = xl.scalar(b, 0, P.S32)
    state_shape = Shape.tuple_of([counter.shape] + [x.shape for x in init])
    bb = b.sub_builder(f"{name}_body")
    p = bb.parameter(0, state_shape, "state")
    i = bb.get_tuple_element(p, 0)
    new = body(bb, i, *[bb.get_tuple_element(p, k + 1) for k in range(len(init))])
    body_c = bb.build(bb.tuple([xl.add(bb, i, xl.scalar(bb, 1, P.S32))] + list(new)))
    cb = b.sub_builder(f"{name}_cond")
    cp = cb.parameter(0, state_shape, "state")
    cond_c = cb.build(xl.lt(cb, cb.get_tuple_element(cp, 0), xl.scalar(cb, trip_count, P.S32)))
    loop = b.while_loop(cond_c, body_c, b.tuple([counter] + list(init)))
    return [b.get_tuple_element(loop, k + 1) for k in range(len(init))]


def _check_square(ctx, x: HloInstruction, what: str) -> tuple[tuple[int, ...], int]:
    dims = x.shape.dimensions
    if len(dims) < 2 or dims[-1] != dims[-2]:
        raise InvalidArgumentError(f"{what} must be a batch of square matrices, got shape {list(dims)}")
    if not (x.shape.element_type.is_float or x.shape.element_type.is_complex):
        raise UnimplementedError(f"{what} of type {x.shape.element_type.name.lower()} (floats only)")
    return tuple(dims[:-2]), dims[-1]


def _zeros_start(b, rank: int) -> list[HloInstruction]:
    return [xl.scalar(b, 0, P.S32) for _ in range(rank)]


def _iota(b, dims: Sequence[int], dim: int) -> HloInstruction:
    return b.iota(Shape.array(P.S32, tuple(dims)), dim)


def _bdot(b, x, y, x_contract: int, y_contract: int, r: int) -> HloInstruction:
    """Batched dot over the ``r`` leading dims, contracting one dim of each."""
    return b.dot(x, y, lhs_contracting=(x_contract,), rhs_contracting=(y_contract,),
                 lhs_batch=tuple(range(r)), rhs_batch=tuple(range(r)))


def _conj(b, x: HloInstruction) -> HloInstruction:
    """x̄ for a complex HLO array, x itself otherwise."""
    if not x.shape.element_type.is_complex:
        return x
    return b.binary(O.COMPLEX, b.unary(O.REAL, x), b.negate(b.unary(O.IMAG, x)))


def _split(b, x: HloInstruction):
    """A complex HLO result as the lowering's (re, im) pair; a real one as itself."""
    from tfxla_cluster.tf2hlo.complex_ops import ComplexValue

    return ComplexValue(b.unary(O.REAL, x), b.unary(O.IMAG, x)) if x.shape.element_type.is_complex else x


@lowers("Cholesky")
def _cholesky(ctx, node):
    from tfxla_cluster.tf2hlo.complex_ops import complex_hlo

    b = ctx.b
    a = complex_hlo(ctx, 0)   # complex: A = L·Lᴴ, the same loop on complex HLO with L[j, :] conjugated
    batch, n = _check_square(ctx, a, "Cholesky input")
    r = len(batch)

    def column(sb, j, a, l):
        z, z0 = _zeros_start(sb, r), xl.scalar(sb, 0, P.S32)
        row = _conj(sb, sb.dynamic_slice(l, z + [j, z0], (*batch, 1, n)))  # conj(L[j, :])
        a_col = sb.dynamic_slice(a, z + [z0, j], (*batch, n, 1))         # A[:, j]
        v = xl.sub(sb, a_col, _bdot(sb, l, row, r + 1, r + 1, r))          # A[:, j] - L @ L[j, :]^T
        d = sb.unary(O.SQRT, sb.dynamic_slice(v, z + [j, z0], (*batch, 1, 1)))
        rows = _iota(sb, (*batch, n, 1), r)
        col = xl.select(sb, xl.gt(sb, rows, j), xl.div(sb, v, d),
                        xl.select(sb, xl.eq(sb, rows, j), xl.broadcast_to(sb, d, (*batch, n, 1)), 0.0))
        return [a, sb.dynamic_update_slice(l, col, z + [z0, j])]

    _, l = fori_loop(b, "cholesky", n, [a, xl.zeros_like(b, a)], column)
    return [_split(b, l)]


def _transpose_last2(b, x):
    rank = x.shape.rank
    return b.transpose(x, tuple(range(rank - 2)) + (rank - 1, rank - 2))


def _broadcast_batch(b, x, batch: tuple[int, ...]):
    return x if tuple(x.shape.dimensions[:-2]) == batch else xl.broadcast_to(b, x, (*batch, *x.shape.dimensions[-2:]))


@lowers("MatrixTriangularSolve")
def _triangular_solve(ctx, node):
    from tfxla_cluster.tf2hlo.complex_ops import complex_hlo

    b = ctx.b
    a, rhs = complex_hlo(ctx, 0), complex_hlo(ctx, 1)   # complex: the same substitution on complex HLO
    _, n = _check_square(ctx, a, "MatrixTriangularSolve matrix")
    if rhs.shape.rank < 2 or rhs.shape.dimensions[-2] != n:
        raise InvalidArgumentError(f"Input matrix and right-hand side must have the same number of rows: "
                                   f"{n} vs. {rhs.shape.dimensions[-2] if rhs.shape.rank >= 2 else '?'}")
    lower, adjoint = bool(ctx.attr("lower", True)), bool(ctx.attr("adjoint", False))
    batch = xl.broadcast_shape(a.shape.dimensions[:-2], rhs.shape.dimensions[:-2])
    a, rhs = _broadcast_batch(b, a, batch), _broadcast_batch(b, rhs, batch)
    r, m = len(batch), rhs.shape.dimensions[-1]
    # Only the referenced triangle counts (the other may hold anything, as for TF's kernel).
    rows, cols = _iota(b, a.shape.dimensions, r), _iota(b, a.shape.dimensions, r + 1)
    a = xl.select(b, (xl.ge if lower else xl.le)(b, rows, cols), a, 0.0)
    if adjoint:
        a, lower = _conj(b, _transpose_last2(b, a)), not lower

    def row(sb, k, a, rhs, x):
        z, z0 = _zeros_start(sb, r), xl.scalar(sb, 0, P.S32)
        i = k if lower else xl.sub(sb, xl.scalar(sb, n - 1, P.S32), k)
        a_row = sb.dynamic_slice(a, z + [i, z0], (*batch, 1, n))
        b_row = sb.dynamic_slice(rhs, z + [i, z0], (*batch, 1, m))
        a_ii = sb.dynamic_slice(a, z + [i, i], (*batch, 1, 1))
        x_row = xl.div(sb, xl.sub(sb, b_row, _bdot(sb, a_row, x, r + 1, r, r)), a_ii)
        return [a, rhs, sb.dynamic_update_slice(x, x_row, z + [i, z0])]

    _, _, x = fori_loop(b, "triangular_solve", n, [a, rhs, xl.zeros_like(b, rhs)], row)
    return [_split(b, x)]


def gauss_jordan(b, a: HloInstruction, rhs: HloInstruction, name: str) -> HloInstruction:
    """``A⁻¹·rhs`` for batches of square ``a`` [..., n, n] and ``rhs`` [..., n, k]: Gauss-Jordan with partial
    pivoting on ``[A | rhs]`` (first maximal pivot row; the swap is a batched permutation-matrix product)."""
    dims = a.shape.dimensions
    batch, n = tuple(dims[:-2]), dims[-1]
    r = len(batch)
    k_cols = rhs.shape.dimensions[-1]
    et = a.shape.element_type
    m0 = b.concatenate([a, rhs], r + 1)                                     # [A | rhs]

    def step(sb, k, m):
        z, z0 = _zeros_start(sb, r), xl.scalar(sb, 0, P.S32)
        rows1 = _iota(sb, (*batch, n, 1), r)
        col = sb.dynamic_slice(m, z + [z0, k], (*batch, n, 1))
        cand = xl.select(sb, xl.ge(sb, rows1, k), sb.unary(O.ABS, col), -1.0)
        best = xl.reduce(sb, cand, xl.min_value(et), [r + 1], O.MAXIMUM, "max")   # [batch, n]
        best = xl.reduce(sb, best, xl.min_value(et), [r], O.MAXIMUM, "max")       # [batch]
        rows = _iota(sb, (*batch, n), r)
        hit = xl.eq(sb, sb.reshape(cand, (*batch, n)), xl.broadcast_to(sb, sb.reshape(best, (*batch, 1)), (*batch, n)))
        p = xl.reduce(sb, xl.select(sb, hit, rows, n), n, [r], O.MINIMUM, "min")   # first pivot row [batch]
        # Swap rows k and p: a batched permutation-matrix product.
        ii, jj = _iota(sb, (*batch, n, n), r), _iota(sb, (*batch, n, n), r + 1)
        pb = xl.broadcast_to(sb, sb.reshape(p, (*batch, 1, 1)), (*batch, n, n))
        perm = xl.or_(sb, xl.and_(sb, xl.eq(sb, ii, jj), xl.and_(sb, xl.ne(sb, ii, k), xl.ne(sb, ii, pb))),
                      xl.or_(sb, xl.and_(sb, xl.eq(sb, ii, k), xl.eq(sb, jj, pb)),
                             xl.and_(sb, xl.eq(sb, ii, pb), xl.eq(sb, jj, k))))
        m = _bdot(sb, sb.convert(perm, et), m, r + 1, r, r)
        row = sb.dynamic_slice(m, z + [k, z0], (*batch, 1, n + k_cols))
        row = xl.div(sb, row, sb.dynamic_slice(row, z + [z0, k], (*batch, 1, 1)))
        col = xl.select(sb, xl.eq(sb, rows1, k), 0.0, sb.dynamic_slice(m, z + [z0, k], (*batch, n, 1)))
        m = xl.sub(sb, m, xl.mul(sb, col, row))
        return [sb.dynamic_update_slice(m, row, z + [k, z0])]

    (m,) = fori_loop(b, name, n, [m0], step)
    start = [0] * r + [0, n]
    return b.slice(m, start, (*batch, n, n + k_cols))


@lowers("MatrixInverse")
def _matrix_inverse(ctx, node):
    b = ctx.b
    a = ctx.input(0)
    batch, n = _check_square(ctx, a, "MatrixInverse input")
    r = len(batch)
    if bool(ctx.attr("adjoint", False)):
        a = _transpose_last2(b, a)
    eye = b.convert(xl.eq(b, _iota(b, (*batch, n, n), r), _iota(b, (*batch, n, n), r + 1)), a.shape.element_type)
    return [gauss_jordan(b, a, eye, "matrix_inverse")]
