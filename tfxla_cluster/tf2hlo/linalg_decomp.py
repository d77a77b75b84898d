"""Matrix decompositions: Qr, SelfAdjointEigV2/XlaSelfAdjointEig, Svd/XlaSvd (tf2xla's qr_op.cc,
self_adjoint_eig_op.cc, svd_op.cc and the xla_* kernels; XLA's qr.cc, self_adjoint_eig.cc, svd.cc).

Stage: lowering. Batched over leading dims; every step is an HLO ``while`` over one column or one
rotation, built from batched ``dot``s, ``dynamic-slice`` and iota masks.

* Qr: unblocked Householder, XLA's (and LAPACK's) convention: ``beta = -sign(alpha)·‖x‖`` (sign(0) = +),
  no reflection when the column below the diagonal is already zero; Q accumulates ``Q·(I - τvvᵀ)``;
  R is the upper triangle. ``full_matrices`` keeps Q [m, m] and R [m, n], else the first min(m, n).
  Complex matrices: XLA's complex House (real beta against re(alpha), tau = (beta - alpha) / beta, no
  reflection only when the tail is zero and alpha real), R ← R - τ̄·v(vᴴR), Q ← Q - τ·(Qv)vᴴ.
* SelfAdjointEig: cyclic two-sided Jacobi on the symmetrised triangle (``lower`` picks it), a fixed
  number of sweeps over all (p, q) pairs (the ``tan`` of each rotation from ``(a_qq - a_pp) / 2a_pq``),
  then eigenvalues ascending with their vectors.
* Svd: one-sided (Hestenes) Jacobi on the columns of A (of Aᵀ when m < n) with the same rotations;
  singular values are the column norms, sorted descending, U the normalised columns, V the accumulated
  rotations. ``full_matrices`` with a non-square matrix (which needs a completed basis) is
  unimplemented.

Eigen- and singular vectors are unique only up to sign (and within repeated values): these agree with
TF's XLA and TF's kernels in values, and in vectors up to a per-vector sign.
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.linalg import _bdot, _iota, _transpose_last2, _zeros_start, fori_loop
from tfxla_cluster.tf2hlo.registry import lowers


def _float_matrix(ctx, x, what: str):
    if x.shape.rank < 2:
        raise InvalidArgumentError(f"{what} must have rank >= 2, got {x.shape.rank}")
    if not x.shape.element_type.is_float:
        raise UnimplementedError(f"{what} of type {x.shape.element_type.name.lower()} (real floats only)")
    return tuple(x.shape.dimensions[:-2]), x.shape.dimensions[-2], x.shape.dimensions[-1]


def _eye(b, batch, n: int, et: P):
    r = len(batch)
    return b.convert(xl.eq(b, _iota(b, (*batch, n, n), r), _iota(b, (*batch, n, n), r + 1)), et)


def _sum_rows(b, x, r: int, name: str):
    """Sum over axis ``r`` (the rows) of [..., m, c] keeping it: [..., 1, c]."""
    s = xl.reduce(b, x, 0.0, [r], O.ADD, name)
    return b.reshape(s, s.shape.dimensions[:r] + (1,) + s.shape.dimensions[r:])


# ---------------------------------------------------------------- QR
def householder_qr(b, a, batch, m: int, n: int):
    r = len(batch)
    et = a.shape.element_type
    k_max = min(m, n)

    def step(sb, k, rm, q):
        z, z0 = _zeros_start(sb, r), xl.scalar(sb, 0, P.S32)
        rows = _iota(sb, (*batch, m, 1), r)
        col = sb.dynamic_slice(rm, z + [z0, k], (*batch, m, 1))
        x = xl.select(sb, xl.ge(sb, rows, k), col, 0.0)
        alpha = sb.dynamic_slice(col, z + [k, z0], (*batch, 1, 1))
        tail = _sum_rows(sb, xl.select(sb, xl.gt(sb, rows, k), sb.multiply(x, x), 0.0), r, "sum")
        norm = sb.sqrt(xl.add(sb, tail, sb.multiply(alpha, alpha)))
        no_reflect = xl.eq(sb, tail, 0.0)
        beta = xl.select(sb, no_reflect, alpha, xl.select(sb, xl.ge(sb, alpha, 0.0), sb.negate(norm), norm))
        denom = xl.select(sb, no_reflect, 1.0, sb.subtract(alpha, beta))
        tau = xl.select(sb, no_reflect, 0.0, sb.divide(sb.subtract(beta, alpha), xl.select(sb, no_reflect, 1.0, beta)))
        v = xl.select(sb, xl.gt(sb, rows, k), xl.div(sb, x, xl.broadcast_to(sb, denom, (*batch, m, 1))),
                      sb.convert(xl.eq(sb, rows, k), et))                               # [.., m, 1]
        tau_b = xl.broadcast_to(sb, tau, (*batch, 1, 1))
        vt_r = _bdot(sb, v, rm, r, r, r)                                                 # [.., 1, n]
        rm = sb.subtract(rm, xl.mul(sb, xl.mul(sb, v, vt_r), tau_b))
        qv = _bdot(sb, q, v, r + 1, r, r)                                                # [.., m, 1]
        q = sb.subtract(q, xl.mul(sb, _bdot(sb, qv, v, r + 1, r + 1, r), tau_b))
        return [rm, q]

    rm, q = fori_loop(b, "householder_qr", k_max, [a, _eye(b, batch, m, et)], step)
    upper = xl.le(b, _iota(b, (*batch, m, n), r), _iota(b, (*batch, m, n), r + 1))
    return q, xl.select(b, upper, rm, 0.0)


def householder_qr_complex(b, a, batch, m: int, n: int):
    """XLA's complex Householder (its House): beta = ∓‖x‖ real, signed against re(alpha); no reflection
    when the tail is zero and alpha is real; tau = (beta - alpha) / beta;
    R ← R - τ̄·v(vᴴR), Q ← Q - τ·(Qv)vᴴ."""
    from tfxla_cluster.tf2hlo.linalg import _conj

    r = len(batch)
    et = a.shape.element_type
    part = P.F32 if et is P.C64 else P.F64

    def cplx(sb, re):
        return sb.binary(O.COMPLEX, re, xl.zeros_like(sb, re))

    def step(sb, k, rm, q):
        z, z0 = _zeros_start(sb, r), xl.scalar(sb, 0, P.S32)
        rows = _iota(sb, (*batch, m, 1), r)
        col = sb.dynamic_slice(rm, z + [z0, k], (*batch, m, 1))
        x = sb.select(xl.ge(sb, rows, k), col, xl.zeros_like(sb, col))
        alpha = sb.dynamic_slice(col, z + [k, z0], (*batch, 1, 1))
        a_re, a_im = sb.unary(O.REAL, alpha), sb.unary(O.IMAG, alpha)
        x_re, x_im = sb.unary(O.REAL, x), sb.unary(O.IMAG, x)
        abs2 = sb.add(sb.multiply(x_re, x_re), sb.multiply(x_im, x_im))
        tail = _sum_rows(sb, sb.select(xl.gt(sb, rows, k), abs2, xl.zeros_like(sb, abs2)), r, "sum")
        norm = sb.sqrt(sb.add(tail, sb.add(sb.multiply(a_re, a_re), sb.multiply(a_im, a_im))))
        no_reflect = xl.and_(sb, xl.eq(sb, tail, 0.0), xl.eq(sb, a_im, 0.0))
        beta_re = xl.select(sb, no_reflect, a_re, xl.select(sb, xl.ge(sb, a_re, 0.0), sb.negate(norm), norm))
        beta = cplx(sb, beta_re)
        one = cplx(sb, xl.full(sb, 1.0, part, (*batch, 1, 1)))
        denom = sb.select(no_reflect, one, sb.subtract(alpha, beta))
        tau = sb.select(no_reflect, xl.zeros_like(sb, alpha),
                        sb.divide(sb.subtract(beta, alpha), sb.select(no_reflect, one, beta)))
        e_k = cplx(sb, sb.convert(xl.eq(sb, rows, k), part))
        v = sb.select(xl.gt(sb, rows, k), sb.divide(x, xl.broadcast_to(sb, denom, (*batch, m, 1))), e_k)
        vh_r = _bdot(sb, _conj(sb, v), rm, r, r, r)                                      # vᴴR: [.., 1, n]
        rm = sb.subtract(rm, sb.multiply(xl.mul(sb, v, vh_r), xl.broadcast_to(sb, _conj(sb, tau), (*batch, m, n))))
        qv = _bdot(sb, q, v, r + 1, r, r)                                                # [.., m, 1]
        q = sb.subtract(q, sb.multiply(_bdot(sb, qv, _conj(sb, v), r + 1, r + 1, r),
                                       xl.broadcast_to(sb, tau, (*batch, m, m))))
        return [rm, q]

    eye = cplx(b, _eye(b, batch, m, part))
    rm, q = fori_loop(b, "householder_qr", min(m, n), [a, eye], step)
    upper = xl.le(b, _iota(b, (*batch, m, n), r), _iota(b, (*batch, m, n), r + 1))
    return q, b.select(upper, rm, xl.zeros_like(b, rm))


@lowers("Qr")
def _qr(ctx, node):
    from tfxla_cluster.tf2hlo.complex_ops import complex_hlo, is_complex_input
    from tfxla_cluster.tf2hlo.linalg import _split

    b = ctx.b
    if is_complex_input(ctx, 0):
        a = complex_hlo(ctx, 0)
        if a.shape.rank < 2:
            raise InvalidArgumentError(f"Qr input must have rank >= 2, got {a.shape.rank}")
        batch, (m, n) = tuple(a.shape.dimensions[:-2]), a.shape.dimensions[-2:]
        q, rm = householder_qr_complex(b, a, batch, m, n)
        if not bool(ctx.attr("full_matrices", False)):
            k, z = min(m, n), [0] * len(batch)
            q, rm = b.slice(q, z + [0, 0], (*batch, m, k)), b.slice(rm, z + [0, 0], (*batch, k, n))
        return [_split(b, q), _split(b, rm)]
    a = ctx.input(0)
    batch, m, n = _float_matrix(ctx, a, "Qr input")
    q, rm = householder_qr(b, a, batch, m, n)
    if bool(ctx.attr("full_matrices", False)):
        return [q, rm]
    k = min(m, n)
    z = [0] * len(batch)
    return [b.slice(q, z + [0, 0], (*batch, m, k)), b.slice(rm, z + [0, 0], (*batch, k, n))]


# ---------------------------------------------------------------- Jacobi rotations
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    ps, qs = zip(*[(p, q) for p in range(n) for q in range(p + 1, n)]) if n > 1 else ((0,), (0,))
    return np.asarray(ps, np.int32), np.asarray(qs, np.int32)


def _rotation(sb, batch, n: int, p, q, c, s):
    """J = I except J[p,p] = J[q,q] = c, J[p,q] = s, J[q,p] = -s (c, s: [.., 1, 1])."""
    r = len(batch)
    et = c.shape.element_type
    ii, jj = _iota(sb, (*batch, n, n), r), _iota(sb, (*batch, n, n), r + 1)
    cb, sbb = xl.broadcast_to(sb, c, (*batch, n, n)), xl.broadcast_to(sb, s, (*batch, n, n))
    diag_pq = xl.and_(sb, xl.eq(sb, ii, jj), xl.or_(sb, xl.eq(sb, ii, p), xl.eq(sb, ii, q)))
    j = sb.convert(xl.eq(sb, ii, jj), et)
    j = sb.select(diag_pq, cb, j)
    j = sb.select(xl.and_(sb, xl.eq(sb, ii, p), xl.eq(sb, jj, q)), sbb, j)
    return sb.select(xl.and_(sb, xl.eq(sb, ii, q), xl.eq(sb, jj, p)), sb.negate(sbb), j)


def _jacobi_cs(sb, num, den):
    """(c, s) of the rotation zeroing the pair: t = sign(τ)/(|τ| + sqrt(1 + τ²)), τ = num / (2·den)."""
    skip = xl.eq(sb, den, 0.0)
    tau = xl.div(sb, num, xl.mul(sb, xl.select(sb, skip, 1.0, den), 2.0))
    et, dims = tau.shape.element_type, tau.shape.dimensions
    sign = xl.select(sb, xl.ge(sb, tau, 0.0), xl.full(sb, 1.0, et, dims), -1.0)
    t = sb.divide(sign, xl.add(sb, sb.abs(tau), sb.sqrt(xl.add(sb, sb.multiply(tau, tau), 1.0))))
    t = xl.select(sb, skip, 0.0, t)
    c = sb.rsqrt(xl.add(sb, sb.multiply(t, t), 1.0))
    return c, sb.multiply(c, t)


def _sweeps(et: P) -> int:
    return 16 if et is P.F64 else 10


def _pair_at(sb, i, npairs: int, ps: np.ndarray, qs: np.ndarray):
    k = xl.rem(sb, i, npairs)
    p = sb.reshape(sb.dynamic_slice(sb.constant(ps, P.S32), [k], (1,)), ())
    q = sb.reshape(sb.dynamic_slice(sb.constant(qs, P.S32), [k], (1,)), ())
    return p, q


def _entry(sb, x, batch, i, j):
    return sb.dynamic_slice(x, _zeros_start(sb, len(batch)) + [i, j], (*batch, 1, 1))


def _complex_rotation(sb, batch, n: int, p, q, c, s, w):
    """G = D·J for a Hermitian pair: D = I but D[q,q] = w̄ (w = a_pq/|a_pq|) makes a_pq real, J the real
    rotation (c, s) then zeroes it: G[p,p] = c, G[p,q] = s, G[q,p] = -s·w̄, G[q,q] = c·w̄."""
    r = len(batch)
    et = w.shape.element_type
    ii, jj = _iota(sb, (*batch, n, n), r), _iota(sb, (*batch, n, n), r + 1)

    def cplx(x):
        return sb.binary(O.COMPLEX, x, xl.zeros_like(sb, x))
    wc = sb.binary(O.COMPLEX, sb.unary(O.REAL, w), sb.negate(sb.unary(O.IMAG, w)))
    full = lambda x: xl.broadcast_to(sb, x, (*batch, n, n))  # noqa: E731
    cb, sbb = full(cplx(c)), full(cplx(s))
    g = sb.convert(xl.eq(sb, ii, jj), et)
    g = sb.select(xl.and_(sb, xl.eq(sb, ii, p), xl.eq(sb, jj, p)), cb, g)
    g = sb.select(xl.and_(sb, xl.eq(sb, ii, q), xl.eq(sb, jj, q)), sb.multiply(cb, full(wc)), g)
    g = sb.select(xl.and_(sb, xl.eq(sb, ii, p), xl.eq(sb, jj, q)), sbb, g)
    return sb.select(xl.and_(sb, xl.eq(sb, ii, q), xl.eq(sb, jj, p)), sb.negate(sb.multiply(sbb, full(wc))), g)


def jacobi_eigh(b, a, batch, n: int):
    """(ascending eigenvalues [.., n], eigenvectors [.., n, n] as columns) of symmetric (Hermitian) ``a``;
    complex: the eigenvalues come back real-valued in the complex type, vectors up to a phase each."""
    from tfxla_cluster.tf2hlo.linalg import _conj

    r = len(batch)
    et = a.shape.element_type
    is_complex = et.is_complex
    part = (P.F32 if et is P.C64 else P.F64) if is_complex else et
    ps, qs = _pairs(n)
    npairs = len(ps)

    def step(sb, i, am, v):
        p, q = _pair_at(sb, i, npairs, ps, qs)
        app, aqq, apq = _entry(sb, am, batch, p, p), _entry(sb, am, batch, q, q), _entry(sb, am, batch, p, q)
        if not is_complex:
            c, s = _jacobi_cs(sb, sb.subtract(aqq, app), apq)
            j = _rotation(sb, batch, n, p, q, c, s)
            am = _bdot(sb, _bdot(sb, j, am, r, r, r), j, r + 1, r, r)       # Jᵀ A J
            return [am, _bdot(sb, v, j, r + 1, r, r)]
        mag = sb.abs(apq)
        zero = xl.eq(sb, mag, 0.0)
        w = sb.divide(apq, sb.binary(O.COMPLEX, xl.select(sb, zero, 1.0, mag), xl.zeros_like(sb, mag)))
        one = sb.binary(O.COMPLEX, xl.full(sb, 1.0, part, mag.shape.dimensions), xl.zeros_like(sb, mag))
        w = sb.select(zero, one, w)
        c, s = _jacobi_cs(sb, sb.subtract(sb.unary(O.REAL, aqq), sb.unary(O.REAL, app)), mag)
        g = _complex_rotation(sb, batch, n, p, q, c, s, w)
        am = _bdot(sb, _bdot(sb, _conj(sb, g), am, r, r, r), g, r + 1, r, r)   # Gᴴ A G
        return [am, _bdot(sb, v, g, r + 1, r, r)]

    eye = _eye(b, batch, n, part)
    if is_complex:
        eye = b.binary(O.COMPLEX, eye, xl.zeros_like(b, eye))
    am, v = fori_loop(b, "jacobi_eigh", _sweeps(part) * npairs if n > 1 else 0, [a, eye], step)
    d = b.unary(O.REAL, am) if is_complex else am
    diag = xl.reduce(b, xl.select(b, xl.eq(b, _iota(b, (*batch, n, n), r), _iota(b, (*batch, n, n), r + 1)), d, 0.0),
                     0.0, [r + 1], O.ADD, "diag")
    w, v = _sort_columns(b, diag, v, batch, n, descending=False)
    if is_complex:
        w = b.binary(O.COMPLEX, w, xl.zeros_like(b, w))
    return [w, v]


def _sort_columns(b, keys, vecs, batch, n: int, descending: bool, more=()):
    """Sort ``keys`` [.., n] and the columns of each matrix in ``(vecs, *more)`` ([.., rows, n]) by them."""
    r = len(batch)
    et = keys.shape.element_type
    idx = _iota(b, (*batch, n), r)
    cmp = b.sub_builder("sort_compare")
    ka, kb = cmp.parameter(0, Shape.scalar(et), "a"), cmp.parameter(1, Shape.scalar(et), "b")
    cmp.parameter(2, Shape.scalar(P.S32), "i")
    cmp.parameter(3, Shape.scalar(P.S32), "j")
    cmp.compare(ka, kb, "GT" if descending else "LT")
    s = b.sort([keys, idx], r, cmp.build(), is_stable=True)
    sorted_keys, perm = b.get_tuple_element(s, 0), b.get_tuple_element(s, 1)
    # column permutation as a one-hot matrix P[j_old, j_new]
    onehot = xl.eq(b, _iota(b, (*batch, n, n), r), b.broadcast(perm, (*batch, n, n), tuple(range(r)) + (r + 1,)))
    return [sorted_keys] + [_bdot(b, m, b.convert(onehot, m.shape.element_type), r + 1, r, r) for m in (vecs, *more)]


def _symmetrize(b, a, batch, n: int, lower: bool):
    from tfxla_cluster.tf2hlo.linalg import _conj

    r = len(batch)
    ii, jj = _iota(b, (*batch, n, n), r), _iota(b, (*batch, n, n), r + 1)
    zeros = xl.zeros_like(b, a)
    tri = b.select((xl.ge if lower else xl.le)(b, ii, jj), a, zeros)
    strict = b.select(xl.eq(b, ii, jj), zeros, tri)
    return b.add(tri, _conj(b, _transpose_last2(b, strict)))


def _eig(ctx, a, lower: bool, what: str):
    if a.shape.element_type.is_complex:
        batch, m, n = tuple(a.shape.dimensions[:-2]), *a.shape.dimensions[-2:]
    else:
        batch, m, n = _float_matrix(ctx, a, what)
    if m != n:
        raise InvalidArgumentError(f"{what} must be square, got {list(a.shape.dimensions)}")
    return jacobi_eigh(ctx.b, _symmetrize(ctx.b, a, batch, n, lower), batch, n)


@lowers("SelfAdjointEigV2")
def _self_adjoint_eig(ctx, node):
    from tfxla_cluster.tf2hlo.complex_ops import complex_hlo
    from tfxla_cluster.tf2hlo.linalg import _split

    w, v = _eig(ctx, complex_hlo(ctx, 0), True, "SelfAdjointEigV2 input")
    if not bool(ctx.attr("compute_v", True)):
        v = ctx.b.constant(np.zeros((0,), v.shape.element_type.dtype), v.shape.element_type)
    return [_split(ctx.b, w), _split(ctx.b, v)]


@lowers("XlaSelfAdjointEig")
def _xla_self_adjoint_eig(ctx, node):
    from tfxla_cluster.tf2hlo.complex_ops import complex_hlo
    from tfxla_cluster.tf2hlo.linalg import _split

    w, v = _eig(ctx, complex_hlo(ctx, 0), bool(ctx.attr("lower", True)), "XlaSelfAdjointEig input")
    return [_split(ctx.b, w), _split(ctx.b, v)]


# ---------------------------------------------------------------- SVD
def jacobi_svd(b, a, batch, m: int, n: int):
    """(s descending [.., k], u [.., m, k], v [.., n, k]), k = min(m, n)."""
    r = len(batch)
    et = a.shape.element_type
    if m < n:
        s, u, v = jacobi_svd(b, _transpose_last2(b, a), batch, n, m)
        return s, v, u
    ps, qs = _pairs(n)
    npairs = len(ps)

    def step(sb, i, am, v):
        p, q = _pair_at(sb, i, npairs, ps, qs)
        z, z0 = _zeros_start(sb, r), xl.scalar(sb, 0, P.S32)
        ap = sb.dynamic_slice(am, z + [z0, p], (*batch, m, 1))
        aq = sb.dynamic_slice(am, z + [z0, q], (*batch, m, 1))
        alpha = _sum_rows(sb, sb.multiply(ap, ap), r, "sum")
        beta = _sum_rows(sb, sb.multiply(aq, aq), r, "sum")
        gamma = _sum_rows(sb, sb.multiply(ap, aq), r, "sum")
        c, s = _jacobi_cs(sb, sb.subtract(beta, alpha), gamma)
        j = _rotation(sb, batch, n, p, q, c, s)
        return [_bdot(sb, am, j, r + 1, r, r), _bdot(sb, v, j, r + 1, r, r)]

    am, v = fori_loop(b, "jacobi_svd", _sweeps(et) * npairs if n > 1 else 0, [a, _eye(b, batch, n, et)], step)
    norms = b.sqrt(xl.reduce(b, b.multiply(am, am), 0.0, [r], O.ADD, "sum"))          # [.., n]
    safe = xl.select(b, xl.eq(b, norms, 0.0), 1.0, norms)
    u = b.divide(am, b.broadcast(safe, (*batch, m, n), tuple(range(r)) + (r + 1,)))
    s, u, v = _sort_columns(b, norms, u, batch, n, descending=True, more=(v,))
    return s, u, v


def _svd(ctx, a, full: bool, what: str):
    batch, m, n = _float_matrix(ctx, a, what)
    if full and m != n:
        raise UnimplementedError(f"{what}: full_matrices=True for a non-square matrix {list(a.shape.dimensions)} "
                                 "(needs a completed orthonormal basis)")
    return jacobi_svd(ctx.b, a, batch, m, n)


@lowers("Svd")
def _svd_op(ctx, node):
    s, u, v = _svd(ctx, ctx.input(0), bool(ctx.attr("full_matrices", False)), "Svd input")
    if not bool(ctx.attr("compute_uv", True)):
        empty = ctx.b.constant(np.zeros((0,), s.shape.element_type.dtype), s.shape.element_type)
        return [s, empty, empty]
    return [s, u, v]


@lowers("XlaSvd")
def _xla_svd(ctx, node):
    s, u, v = _svd(ctx, ctx.input(0), True, "XlaSvd input")
    return [s, u, v]
