"""More linear algebra (tf2xla's matrix_solve_op.cc, tridiagonal_ops.cc, sparse_matmul_op.cc).

Stage: lowering.

* MatrixSolve: Gauss-Jordan with partial pivoting on ``[A | rhs]`` (``linalg.gauss_jordan``); ``adjoint``
  solves with Aᵀ. TF's XLA factors LU and back-substitutes: results agree to float rounding.
* TridiagonalSolve: the Thomas algorithm (XLA's TridiagonalSolver, compact form ``[..., 3, m]`` =
  super-, main- and sub-diagonal rows) — a forward sweep and a back substitution, each an HLO while
  over the rows. Like TF's XLA, ``partial_pivoting=True`` is unimplemented.
* TridiagonalMatMul: ``main·rhs + super·(rhs shifted up) + sub·(rhs shifted down)``.
* SparseMatMul: the sparsity hints change nothing; bf16 operands are widened to f32 and multiplied.
"""
from __future__ import annotations

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo.shape import PrimitiveType as P
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.linalg import _check_square, _transpose_last2, fori_loop, gauss_jordan
from tfxla_cluster.tf2hlo.registry import lowers


@lowers("MatrixSolve")
def _matrix_solve(ctx, node):
    b = ctx.b
    a, rhs = ctx.input(0), ctx.input(1)
    batch, n = _check_square(ctx, a, "MatrixSolve matrix")
    if rhs.shape.dimensions[:-1] != (*batch, n):
        raise InvalidArgumentError(f"Input matrix and right-hand side must have the same number of rows: "
                                   f"{list(a.shape.dimensions)} vs. {list(rhs.shape.dimensions)}")
    if bool(ctx.attr("adjoint", False)):
        a = _transpose_last2(b, a)
    return [gauss_jordan(b, a, rhs, "matrix_solve")]


def _row(b, x, i, axis: int):
    """``x[..., i:i+1, ...]`` along ``axis`` (a dynamic slice at the loop index)."""
    z = xl.scalar(b, 0, P.S32)
    starts = [z] * x.shape.rank
    starts[axis] = i
    sizes = list(x.shape.dimensions)
    sizes[axis] = 1
    return b.dynamic_slice(x, starts, sizes)


def _put(b, x, v, i, axis: int):
    z = xl.scalar(b, 0, P.S32)
    starts = [z] * x.shape.rank
    starts[axis] = i
    return b.dynamic_update_slice(x, v, starts)


@lowers("TridiagonalSolve")
def _tridiagonal_solve(ctx, node):
    b = ctx.b
    diags, rhs = ctx.input(0), ctx.input(1)
    if bool(ctx.attr("partial_pivoting", True)):
        raise UnimplementedError("Current implementation does not yet support pivoting.")
    dd, rd = diags.shape.dimensions, rhs.shape.dimensions
    if len(dd) < 2 or dd[-2] != 3 or len(rd) != len(dd) or rd[:-2] != dd[:-2] or rd[-2] != dd[-1]:
        raise InvalidArgumentError(f"Expected diagonals of shape [..., 3, M] and rhs [..., M, K], got "
                                   f"{list(dd)} and {list(rd)}")
    m = dd[-1]
    r = len(dd) - 2
    start = [0] * len(dd)

    def diag(k):   # [..., M, 1]
        s, lim = list(start), list(dd)
        s[-2], lim[-2] = k, k + 1
        return b.reshape(b.slice(diags, s, lim), dd[:-2] + (m, 1))
    sup, main, sub = diag(0), diag(1), diag(2)
    # Forward sweep: c'[i] = c[i] / den, d'[i] = (d[i] - a[i] d'[i-1]) / den, den = b[i] - a[i] c'[i-1].
    c0 = b.divide(_row(b, sup, xl.scalar(b, 0, P.S32), r), _row(b, main, xl.scalar(b, 0, P.S32), r))
    d0 = xl.div(b, _row(b, rhs, xl.scalar(b, 0, P.S32), r), _row(b, main, xl.scalar(b, 0, P.S32), r))
    cp = _put(b, xl.zeros_like(b, sup), c0, xl.scalar(b, 0, P.S32), r)
    dp = _put(b, xl.zeros_like(b, rhs), d0, xl.scalar(b, 0, P.S32), r)

    # The coefficients ride along in the loop state (a loop body sees only its parameter).
    def forward(sb, k, cp, dp, sup, main, sub, rhs):
        i = xl.add(sb, k, 1)
        prev = xl.sub(sb, i, 1)
        ai = _row(sb, sub, i, r)
        den = sb.subtract(_row(sb, main, i, r), sb.multiply(ai, _row(sb, cp, prev, r)))
        ci = sb.divide(_row(sb, sup, i, r), den)
        di = xl.div(sb, xl.sub(sb, _row(sb, rhs, i, r), xl.mul(sb, ai, _row(sb, dp, prev, r))), den)
        return [_put(sb, cp, ci, i, r), _put(sb, dp, di, i, r), sup, main, sub, rhs]
    cp, dp = fori_loop(b, "tridiagonal_forward", m - 1, [cp, dp, sup, main, sub, rhs], forward)[:2]

    def backward(sb, k, x, cp, dp):
        i = xl.sub(sb, m - 2, k)
        xi = xl.sub(sb, _row(sb, dp, i, r), xl.mul(sb, _row(sb, cp, i, r), _row(sb, x, xl.add(sb, i, 1), r)))
        return [_put(sb, x, xi, i, r), cp, dp]
    x = fori_loop(b, "tridiagonal_backward", m - 1, [dp, cp, dp], backward)[0]
    return [x]


@lowers("TridiagonalMatMul")
def _tridiagonal_matmul(ctx, node):
    b = ctx.b
    sup, main, sub, rhs = (ctx.input(i) for i in range(4))
    rd = rhs.shape.dimensions
    m = rd[-2]
    want = rd[:-2] + (1, m)
    for name, v in (("superdiag", sup), ("maindiag", main), ("subdiag", sub)):
        if v.shape.dimensions != want:
            raise InvalidArgumentError(f"{name} must have shape {list(want)}, got {list(v.shape.dimensions)}")
    r = len(rd)

    def col(v):
        return b.reshape(v, rd[:-2] + (m, 1))
    zero = xl.scalar(b, 0, rhs.shape.element_type)
    pad = [(0, 0)] * r
    up, down = list(pad), list(pad)
    up[-2], down[-2] = (0, 1), (1, 0)
    start = [0] * r
    lim = list(rd)
    s1 = list(start)
    s1[-2] = 1
    lim1 = list(rd)
    lim1[-2] = m - 1
    shifted_up = b.pad(b.slice(rhs, s1, list(rd)), zero, up)       # rhs[i + 1], 0 at the end
    shifted_down = b.pad(b.slice(rhs, start, lim1), zero, down)    # rhs[i - 1], 0 at the start
    del lim
    out = xl.mul(b, col(main), rhs)
    out = b.add(out, xl.mul(b, col(sup), shifted_up))
    return [b.add(out, xl.mul(b, col(sub), shifted_down))]


@lowers("SparseMatMul")
def _sparse_matmul(ctx, node):
    b = ctx.b
    x, y = xl.convert(b, ctx.input(0), P.F32), xl.convert(b, ctx.input(1), P.F32)
    ta, tb = bool(ctx.attr("transpose_a", False)), bool(ctx.attr("transpose_b", False))
    if x.shape.rank != 2 or y.shape.rank != 2:
        raise InvalidArgumentError("SparseMatMul: a and b must be matrices")
    ca, cb = (0 if ta else 1), (1 if tb else 0)
    if x.shape.dimensions[ca] != y.shape.dimensions[cb]:
        raise InvalidArgumentError(f"Matrix size-incompatible: In[0]: {list(x.shape.dimensions)}, In[1]: "
                                   f"{list(y.shape.dimensions)}")
    return [b.dot(x, y, (ca,), (cb,))]
