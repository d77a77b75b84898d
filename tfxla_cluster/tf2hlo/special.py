"""Special functions: Igamma, Igammac, IgammaGradA, RandomGammaGrad, Zeta, Polygamma, Betainc, BesselI0e, BesselI1e
(tf2xla's binary_ops.cc/unary_ops_composition and betainc_op.cc over XLA's math.cc).

Stage: lowering. Computed in f32 for f16/bf16 inputs (XLA's ``DoWithUpcastToF32``). Each is TF 2.21's XLA
HLO op for op, so results are bit-equal to TF's XLA (tests/tf2hlo/test_special_vs_xla.py):

* Igamma/Igammac: the power series of P(a, x), or the continued fraction of Q(a, x) (Cephes' ``igamc``
  recurrences with rescaling) where x > 1 and x > a (Igammac: unless x < 1 or x < a), each an HLO while
  whose elements stop one by one (relative term below the type's epsilon), 2000 iterations at most; the
  prefactor ``exp(a·log x - x - lgamma(a))``. x = 0 gives P = 0; a <= 0 or x < 0 gives NaN for P, and Q is
  1 wherever x <= 0 or a <= 0 (as XLA).
* IgammaGradA/RandomGammaGrad: the same iterations carrying their derivatives in ``a`` (XLA's
  DERIVATIVE/SAMPLE_DERIVATIVE modes: their stopping rules and rescaling by eps, lgamma of the client
  library).
* Zeta(x, q): XLA's Euler-Maclaurin op for op (:func:`zeta`), bit-equal to TF's XLA.
* Polygamma(n, x): digamma for n = 0, else ``(-1)^(n+1)·n!·zeta(n+1, x)``; non-integer n → NaN.
* Betainc(a, b, x): XLA's RegularizedIncompleteBeta op for op (:func:`_betainc`), bit-equal to TF's XLA.
* BesselI0e/I1e: XLA's (Cephes') Chebyshev expansions op for op (:func:`_bessel_ie`), bit-equal to TF's
  XLA; f32 for f16/bf16.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.registry import lowers


# ---------------------------------------------------------------- helpers
def iterate(b, name: str, max_iter: int, state: list, step: Callable) -> list:
    """``while i < max_iter and not all(done): state = step(sb, *state)``; ``state[0]`` is the pred array
    ``done`` (elements that stop updating). Returns the final state."""
    counter = xl.scalar(b, 0, P.S32)
    shape = Shape.tuple_of([counter.shape] + [s.shape for s in state])
    bb = b.sub_builder(f"{name}_body")
    p = bb.parameter(0, shape, "state")
    i = bb.get_tuple_element(p, 0)
    cur = [bb.get_tuple_element(p, k + 1) for k in range(len(state))]
    new = step(bb, *cur)
    body = bb.build(bb.tuple([xl.add(bb, i, 1)] + list(new)))
    cb = b.sub_builder(f"{name}_cond")
    cp = cb.parameter(0, shape, "state")
    done = cb.get_tuple_element(cp, 1)
    all_done = xl.reduce(cb, done, True, range(done.shape.rank), O.AND, "all")
    cb_root = cb.and_(xl.lt(cb, cb.get_tuple_element(cp, 0), max_iter), cb.not_(all_done))
    cond = cb.build(cb_root)
    loop = b.while_loop(cond, body, b.tuple([counter] + list(state)))
    return [b.get_tuple_element(loop, k + 1) for k in range(len(state))]


def _upcast(b, xs):
    et = xs[0].shape.element_type
    wide = P.F32 if et in (P.F16, P.BF16) else et
    return [xl.convert(b, x, wide) for x in xs], et


def _inputs(ctx, n: int):
    b = ctx.b
    xs = [ctx.input(i) for i in range(n)]
    dims = ()
    for x in xs:
        dims = xl.broadcast_shape(dims, x.shape.dimensions)
    xs = [xl.broadcast_to(b, x, dims) for x in xs]
    return _upcast(b, xs)


def _nan(b, like):
    return xl.full(b, np.nan, like.shape.element_type, like.shape.dimensions)


def _full(b, v, like):
    return xl.full(b, v, like.shape.element_type, like.shape.dimensions)


def _keep(sb, done, old, new):
    return sb.select(done, old, new)


# ---------------------------------------------------------------- incomplete gamma
MAX_ITER = 2000


def _igamma_series(b, a, x, done0, derivative: bool):
    """Σ c_n (c_0 = 1, c_n = c_{n-1}·x/(a+n)) and, with ``derivative``, its derivative in a."""
    eps = xl.epsilon(a.shape.element_type)

    def step(sb, done, r, c, ans, dc, dans, x):
        r2 = xl.add(sb, r, 1.0)
        c2 = sb.multiply(c, sb.divide(x, r2))
        ans2 = sb.add(ans, c2)
        if derivative:
            # XLA: dc·(x/r) + ((-1·c)·x)/(r·r) with the previous c; go on while |dc/dans| > eps
            dc2 = sb.add(sb.multiply(dc, sb.divide(x, r2)),
                         sb.divide(sb.multiply(xl.mul(sb, c, -1.0), x), sb.multiply(r2, r2)))
            dans2 = sb.add(dans, dc2)
            new_done = sb.or_(done, sb.not_(xl.gt(sb, sb.abs(sb.divide(dc2, dans2)), eps)))
        else:
            dc2, dans2 = dc, dans
            new_done = sb.or_(done, xl.le(sb, sb.abs(sb.divide(c2, ans2)), eps))
        return [new_done, _keep(sb, done, r, r2), _keep(sb, done, c, c2), _keep(sb, done, ans, ans2),
                _keep(sb, done, dc, dc2), _keep(sb, done, dans, dans2), x]
    one, zero = _full(b, 1.0, a), _full(b, 0.0, a)
    out = iterate(b, "igamma_series", MAX_ITER, [done0, a, one, one, zero, zero, x], step)
    return out[3], out[5]


def _igammac_cf(b, a, x, done0, derivative: bool):
    """Cephes' continued fraction for Q(a, x) and, with ``derivative``, its derivative in a."""
    et = a.shape.element_type
    eps = xl.epsilon(et)
    big, biginv = 4503599627370496.0, 2.22044604925031308085e-16
    y = xl.sub(b, 1.0, a)
    z = b.add(b.add(x, y), _full(b, 1.0, a))
    pkm2, qkm2, pkm1 = _full(b, 1.0, a), x, xl.add(b, x, 1.0)
    qkm1 = b.multiply(z, x)
    zero = _full(b, 0.0, a)
    # derivatives in a: dy = -1, dz = -1
    dpkm2, dqkm2, dpkm1, dqkm1 = zero, zero, zero, b.negate(x)
    ans = b.divide(pkm1, qkm1)
    dans = b.divide(b.subtract(b.multiply(dpkm1, qkm1), b.multiply(pkm1, dqkm1)), b.multiply(qkm1, qkm1))

    def step(sb, done, y, z, c, pkm1, pkm2, qkm1, qkm2, ans, dpkm1, dpkm2, dqkm1, dqkm2, dans):
        c2, y2, z2 = xl.add(sb, c, 1.0), xl.add(sb, y, 1.0), xl.add(sb, z, 2.0)
        yc = sb.multiply(y2, c2)
        pk = sb.subtract(sb.multiply(pkm1, z2), sb.multiply(pkm2, yc))
        qk = sb.subtract(sb.multiply(qkm1, z2), sb.multiply(qkm2, yc))
        # d/da (dy = dz = -1): XLA's ((dpkm1·z - pkm1) - dpkm2·yc) + pkm2·c
        dpk = sb.add(sb.subtract(sb.subtract(sb.multiply(dpkm1, z2), pkm1), sb.multiply(dpkm2, yc)),
                     sb.multiply(pkm2, c2))
        dqk = sb.add(sb.subtract(sb.subtract(sb.multiply(dqkm1, z2), qkm1), sb.multiply(dqkm2, yc)),
                     sb.multiply(qkm2, c2))
        nz = xl.ne(sb, qk, 0.0)
        r = sb.divide(pk, qk) if derivative else sb.divide(pk, xl.select(sb, nz, qk, 1.0))
        t = xl.select(sb, nz, sb.abs(sb.divide(sb.subtract(ans, r), r)), 1.0)
        ans2 = sb.select(nz, r, ans)
        dans2 = sb.select(nz, sb.divide(sb.subtract(dpk, sb.multiply(ans2, dqk)), qk), dans)
        # XLA goes on while |dans_new - dans| > eps (1 where qk = 0)
        dt = xl.select(sb, nz, sb.abs(sb.subtract(dans2, dans)), 1.0)
        rescale = xl.gt(sb, sb.abs(pk), 1.0 / eps if derivative else big)

        def sc(v):
            return sb.select(rescale, xl.mul(sb, v, eps if derivative else biginv), v)
        new = [sc(pk), sc(pkm1), sc(qk), sc(qkm1), sc(dpk), sc(dpkm1), sc(dqk), sc(dqkm1)]
        conv = sb.not_(xl.gt(sb, dt, eps)) if derivative else xl.le(sb, t, eps)
        new_done = sb.or_(done, conv)
        vals = [y2, z2, c2, new[0], new[1], new[2], new[3], ans2, new[4], new[5], new[6], new[7], dans2]
        olds = [y, z, c, pkm1, pkm2, qkm1, qkm2, ans, dpkm1, dpkm2, dqkm1, dqkm2, dans]
        return [new_done] + [_keep(sb, done, o, v) for o, v in zip(olds, vals)]
    out = iterate(b, "igammac_cf", MAX_ITER, [done0, y, z, zero, pkm1, pkm2, qkm1, qkm2, ans,
                                              dpkm1, dpkm2, dqkm1, dqkm2, dans], step)
    return out[8], out[13]


def _igamma_parts(b, a, x, mode: str):
    """mode: "p" (Igamma), "q" (Igammac) or "dp" (IgammaGradA, d/da of P)."""
    et = a.shape.element_type
    use_cf = b.and_(xl.gt(b, x, 1.0), b.compare(x, a, "GT"))
    invalid = b.or_(b.or_(xl.le(b, a, 0.0), xl.lt(b, x, 0.0)), b.or_(xl.is_nan(b, a), xl.is_nan(b, x)))
    trivial = b.or_(invalid, b.or_(xl.eq(b, x, 0.0), xl.is_inf(b, x)))
    lg = xl.lgamma(b, a)
    ax = b.subtract(b.subtract(b.multiply(a, b.log(x)), x), lg)
    maxlog = float(np.log(xl.max_finite_value(et)))
    underflow = xl.lt(b, ax, -maxlog)
    derivative = mode == "dp"
    if derivative:
        # XLA's IgammaGradA runs the loops wherever x != 0, the domain is valid and e^ax does not underflow
        lg = _lgamma_lib(b, a)
        ax = b.subtract(b.subtract(b.multiply(a, b.log(x)), x), lg)
        underflow = xl.lt(b, ax, -maxlog)
        trivial = b.or_(b.or_(xl.eq(b, x, 0.0), b.or_(xl.lt(b, x, 0.0), xl.le(b, a, 0.0))),
                        b.or_(xl.is_nan(b, a), xl.is_nan(b, x)))
    if mode == "q":
        # XLA's Igammac: the continued fraction unless x < 1 or x < a (so at x = 1 too); only x <= 0 or
        # a <= 0 stop the loops (NaN runs through them)
        use_cf = b.not_(b.or_(xl.lt(b, x, 1.0), b.compare(x, a, "LT")))
        trivial = b.or_(xl.le(b, x, 0.0), xl.le(b, a, 0.0))
    s_done = b.or_(b.or_(trivial, use_cf), underflow)
    c_done = b.or_(b.or_(trivial, b.not_(use_cf)), underflow)
    series, dseries = _igamma_series(b, a, x, s_done, derivative)
    cf, dcf = _igammac_cf(b, a, x, c_done, derivative)
    pref = b.exp(ax)
    if mode == "dp":
        # XLA's IgammaGradA: ax·(S·(log x - ψ(a+1)) + dS)/a, -(ax·(CF·(log x - ψ(a)) + dCF)); 0 at x = 0
        log_x = b.log(x)
        dp_series = b.divide(b.multiply(pref, b.add(b.multiply(series, b.subtract(
            log_x, xl.digamma(b, xl.add(b, a, 1.0)))), dseries)), a)
        dq_cf = b.multiply(pref, b.add(b.multiply(cf, b.subtract(log_x, xl.digamma(b, a))), dcf))
        out = b.select(use_cf, b.negate(dq_cf), dp_series)
        out = b.select(xl.eq(b, x, 0.0), _full(b, 0.0, a), out)
        domain_error = b.or_(b.or_(xl.lt(b, x, 0.0), xl.le(b, a, 0.0)), b.or_(xl.is_nan(b, a), xl.is_nan(b, x)))
        return b.select(domain_error, _nan(b, a), out)
    p_series = b.divide(b.multiply(series, pref), a)
    q_cf = b.multiply(cf, pref)
    if mode == "p":
        out = b.select(use_cf, xl.sub(b, 1.0, q_cf), p_series)
        out = b.select(underflow, b.select(use_cf, _full(b, 1.0, a), _full(b, 0.0, a)), out)
        out = b.select(xl.eq(b, x, 0.0), _full(b, 0.0, a), out)
        out = b.select(xl.is_inf(b, x), _full(b, 1.0, a), out)
    else:
        out = b.select(use_cf, q_cf, xl.sub(b, 1.0, p_series))
        out = b.select(xl.eq(b, x, np.inf), _full(b, 0.0, a), out)
        # XLA's Igammac: 1 wherever x <= 0 or a <= 0
        return b.select(trivial, _full(b, 1.0, a), out)
    return b.select(invalid, _nan(b, a), out)


def _igamma_op(mode: str):
    def lower(ctx, node):
        (a, x), et = _inputs(ctx, 2)
        return [xl.convert(ctx.b, _igamma_parts(ctx.b, a, x, mode), et)]
    return lower


lowers("Igamma")(_igamma_op("p"))
lowers("Igammac")(_igamma_op("q"))
lowers("IgammaGradA")(_igamma_op("dp"))


@lowers("RandomGammaGrad")
def _random_gamma_grad(ctx, node):
    """d sample / d alpha of a Gamma(alpha, 1) sample x at a fixed CDF value: ``-(∂P/∂a) / (∂P/∂x)``
    (tf2xla's RandomGammaGradOp, XLA's ``RandomGammaGrad``). With ∂P/∂x = e^ax/x the prefactor cancels:
    series ``-(dS + S·(log x - ψ(a+1)))·x/a``, continued fraction ``(dCF + CF·(log x - ψ(a)))·x``. x = 0
    gives 0; x < 0, a <= 0 or NaN give NaN; where e^ax underflows the iterations do not run (as XLA)."""
    b = ctx.b
    (a, x), et = _inputs(ctx, 2)
    is_nan = b.or_(xl.is_nan(b, a), xl.is_nan(b, x))
    x_zero = xl.eq(b, x, 0.0)
    domain_error = b.or_(xl.lt(b, x, 0.0), xl.le(b, a, 0.0))
    use_cf = b.and_(xl.gt(b, x, 1.0), b.compare(x, a, "GT"))
    log_x = b.log(x)
    ax = b.subtract(b.subtract(b.multiply(a, log_x), x), _lgamma_lib(b, a))
    underflow = xl.lt(b, ax, -float(np.log(xl.max_finite_value(a.shape.element_type))))
    disabled = b.or_(b.or_(x_zero, domain_error), b.or_(underflow, is_nan))
    series, dseries = _igamma_series(b, a, x, b.or_(disabled, use_cf), True)
    cf, dcf = _igammac_cf(b, a, x, b.or_(disabled, b.not_(use_cf)), True)
    from_series = b.negate(b.divide(b.multiply(
        b.add(dseries, b.multiply(series, b.subtract(log_x, xl.digamma(b, xl.add(b, a, 1.0))))), x), a))
    from_cf = b.multiply(b.add(dcf, b.multiply(cf, b.subtract(log_x, xl.digamma(b, a)))), x)
    out = b.select(use_cf, from_cf, from_series)
    out = b.select(x_zero, _full(b, 0.0, a), out)
    out = b.select(b.or_(domain_error, is_nan), _nan(b, a), out)
    return [xl.convert(b, out, et)]


# ---------------------------------------------------------------- zeta / polygamma
# Cephes' zeta.c A[k] = (2k+2)!/B_{2k+2}: Euler-Maclaurin's correction terms divide by them.
_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
           -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
           1.8152105401943546773e17, -7.1661652561756670113e18)
_ZETA_DIRECT = 10


def zeta(b, x, q):
    """Hurwitz zeta as TF 2.21's XLA, op for op: ten direct terms (q, q+1, … by repeated +1), then at
    a = q + 10 the integral ``a^-x·a/(x-1)``, the half term and the Euler-Maclaurin corrections in Horner
    form ``(x+2k)(x+2k-1)/a²·(… + 1/A[k])``; the sum alone once the next term is below eps·|sum|. x = 1 → inf,
    x < 1 → NaN; q <= 0: NaN for non-integer x, and at integer q inf for even integer x, NaN otherwise."""
    et = x.shape.element_type
    neg_x = b.negate(x)
    a, s = q, None
    for _ in range(_ZETA_DIRECT):
        t = b.power(a, neg_x)
        s = t if s is None else b.add(s, t)
        a = xl.add(b, a, 1.0)
    factor = b.power(a, neg_x)
    converged = b.compare(b.abs(factor), xl.mul(b, b.abs(s), xl.epsilon(et)), "LT")
    total = b.add(s, b.divide(b.multiply(factor, a), xl.sub(b, x, 1.0)))
    a_inv_sq = xl.div(b, 1.0, b.multiply(a, a))
    horner = xl.add(b, xl.scalar(b, 0.0, et), 1.0 / _ZETA_A[-1])
    for k in range(len(_ZETA_A) - 1, 0, -1):
        term = b.multiply(b.multiply(xl.add(b, x, 2.0 * k), xl.add(b, x, 2.0 * k - 1)), a_inv_sq)
        horner = b.multiply(term, xl.broadcast_to(b, horner, term.shape.dimensions))
        horner = xl.add(b, horner, 1.0 / _ZETA_A[k - 1])
    tail = xl.add(b, b.multiply(b.divide(x, a), horner), 0.5)
    out = b.select(converged, s, b.add(total, b.multiply(factor, tail)))
    out = b.select(xl.eq(b, x, 1.0), _full(b, np.inf, x), out)
    out = b.select(xl.lt(b, x, 1.0), _nan(b, x), out)
    q_nonpos = xl.le(b, q, 0.0)
    out = b.select(b.and_(q_nonpos, b.compare(x, b.floor(x), "NE")), _nan(b, x), out)
    x_even_int = b.and_(xl.eq(b, xl.rem(b, x, 2.0), 0.0), b.compare(x, b.floor(x), "EQ"))
    at_pole = b.and_(q_nonpos, b.compare(q, b.floor(q), "EQ"))
    return b.select(at_pole, b.select(x_even_int, _full(b, np.inf, x), _nan(b, x)), out)


@lowers("Zeta")
def _zeta(ctx, node):
    (x, q), et = _inputs(ctx, 2)
    return [xl.convert(ctx.b, zeta(ctx.b, x, q), et)]


@lowers("Polygamma")
def _polygamma(ctx, node):
    b = ctx.b
    (n, x), et = _inputs(ctx, 2)
    n1 = xl.add(b, n, 1.0)
    sign = xl.select(b, xl.eq(b, xl.rem(b, n, 2.0), 0.0), _full(b, -1.0, n), 1.0)
    general = b.multiply(b.multiply(sign, b.exp(xl.lgamma(b, n1))), zeta(b, n1, x))
    out = b.select(xl.eq(b, n, 0.0), xl.digamma(b, x), general)
    bad = b.or_(b.compare(n, b.floor(n), "NE"), xl.lt(b, n, 0.0))
    return [xl.convert(b, b.select(bad, _nan(b, n), out), et)]


# ---------------------------------------------------------------- incomplete beta
# (threshold and tiny clamp, iteration cap) of XLA's Lentz-Thompson-Barnett continued fraction per type
# (the threshold is half the machine epsilon).
_BETAINC_LIMITS = {P.F32: (2.0 ** -24, 200), P.F64: (2.0 ** -53, 600)}


def _lgamma_lib(b, x):
    """xla::Lgamma from XLA's client library as betainc's lbeta uses it: TF 2.21's standalone Lgamma op
    (:func:`xl.lgamma`) except that each ``z + i + 1`` is ``(z + i) + 1``."""
    need_reflect = xl.lt(b, x, 0.5)
    z = b.select(need_reflect, b.negate(x), xl.sub(b, x, 1.0))
    acc = xl.add(b, xl.div(b, xl._LANCZOS[0], xl.add(b, z, 1.0)), xl._LANCZOS_BASE)
    for i, c in enumerate(xl._LANCZOS[1:], start=1):
        acc = b.add(acc, xl.div(b, c, xl.add(b, xl.add(b, z, float(i)), 1.0)))
    t = xl.add(b, z, xl._LANCZOS_G + 0.5)
    log_t = xl._lanczos_log_t(b, z)
    head = b.multiply(b.subtract(xl.add(b, z, 0.5), b.divide(t, log_t)), log_t)
    log_y = b.add(xl.add(b, head, (math.log(2.0) + math.log(math.pi)) / 2), b.log(acc))
    ax = b.abs(x)
    frac = b.subtract(ax, b.floor(ax))
    frac = b.select(xl.gt(b, frac, 0.5), xl.sub(b, 1.0, frac), frac)
    denom = b.log(b.sin(xl.mul(b, frac, math.pi)))
    reflection = b.select(b.is_finite(denom), b.subtract(xl.sub(b, math.log(math.pi), denom), log_y),
                          b.negate(denom))
    result = b.select(need_reflect, reflection, log_y)
    return b.select(xl.is_inf(b, x), _full(b, np.inf, x), result)


def _betainc(b, a, bb, x):
    """XLA's RegularizedIncompleteBeta op for op: with (a, b, x) swapped to (b, a, 1-x) unless
    ``x < (a+1)/(a+b+2)``, the continued fraction by Lentz-Thompson-Barnett — one u32 iteration count for
    the whole array (every element keeps iterating until all have ``|delta - 1| < eps/2``, at most 200 in
    f32, 600 in f64; tiny c/d clamped to eps/2) — times ``exp(a log x + b log1p(-x) - lbeta) / a``;
    NaN for a <= 0, b <= 0 or x outside [0, 1]."""
    et, dims = a.shape.element_type, a.shape.dimensions
    small, max_iter = _BETAINC_LIMITS[et]
    converges = xl.lt(b, x, b.divide(xl.add(b, a, 1.0), xl.add(b, b.add(a, bb), 2.0)))
    a2, b2 = b.select(converges, a, bb), b.select(converges, bb, a)
    x2 = b.select(converges, x, xl.sub(b, 1.0, x))

    def clamp(sb, v):
        return xl.select(sb, xl.lt(sb, sb.abs(v), small), small, v)

    def partial_denominator(sb, n):
        return xl.select(sb, xl.eq(sb, sb.broadcast(n, dims, ()), 0), 0.0, xl.full(sb, 1.0, et, dims))
    h0 = clamp(b, partial_denominator(b, xl.scalar(b, 0, P.U32)))
    state = [xl.scalar(b, 1, P.U32), xl.scalar(b, True, P.PRED), h0, xl.full(b, 0.0, et, dims), h0, a2, b2, x2]
    shape = Shape.tuple_of([v.shape for v in state])

    sb = b.sub_builder("betainc_body")
    prm = sb.parameter(0, shape, "state")
    n, _, c, d, h, aa, bv, xv = (sb.get_tuple_element(prm, k) for k in range(8))
    nb = sb.broadcast(n, dims, ())
    m = sb.convert(xl.div(sb, xl.sub(sb, nb, 1), 2), et)
    two_m = xl.mul(sb, 2.0, m)
    even = sb.divide(sb.multiply(sb.multiply(sb.negate(sb.add(aa, m)), sb.add(sb.add(aa, bv), m)), xv),
                     sb.multiply(sb.add(aa, two_m), xl.add(sb, sb.add(aa, two_m), 1.0)))
    odd = sb.divide(sb.multiply(sb.multiply(m, sb.subtract(bv, m)), xv),
                    sb.multiply(xl.sub(sb, sb.add(aa, two_m), 1.0), sb.add(aa, two_m)))
    num = sb.select(xl.eq(sb, xl.rem(sb, nb, 2), 0), even, odd)
    num = xl.select(sb, xl.eq(sb, nb, 1), 1.0, num)
    den = partial_denominator(sb, n)
    c = clamp(sb, sb.add(den, sb.divide(num, c)))
    d = xl.div(sb, 1.0, clamp(sb, sb.add(den, sb.multiply(num, d))))
    delta = sb.multiply(c, d)
    unconverged = xl.reduce(sb, xl.ge(sb, sb.abs(xl.sub(sb, delta, 1.0)), small), False, range(len(dims)),
                            O.OR, "any")
    body = sb.build(sb.tuple([xl.add(sb, n, 1), unconverged, c, d, sb.multiply(h, delta), aa, bv, xv]))
    cb = b.sub_builder("betainc_cond")
    cp = cb.parameter(0, shape, "state")
    cond = cb.build(cb.and_(xl.lt(cb, cb.get_tuple_element(cp, 0), max_iter), cb.get_tuple_element(cp, 1)))
    fraction = b.get_tuple_element(b.while_loop(cond, body, b.tuple(state)), 4)

    log_front = b.add(b.multiply(b.log(x2), a2), b.multiply(b.log1p(b.negate(x2)), b2))
    lbeta = b.subtract(b.add(_lgamma_lib(b, a2), _lgamma_lib(b, b2)), _lgamma_lib(b, b.add(a2, b2)))
    val = b.divide(b.multiply(fraction, b.exp(b.subtract(log_front, lbeta))), a2)
    invalid = b.or_(b.or_(b.or_(xl.le(b, a, 0.0), xl.le(b, bb, 0.0)), xl.lt(b, x, 0.0)), xl.gt(b, x, 1.0))
    val = b.select(invalid, _nan(b, a), val)
    return b.select(converges, val, xl.sub(b, 1.0, val))


@lowers("Betainc")
def _betainc_op(ctx, node):
    dims = [ctx.input_dims(i) for i in range(3)]
    full = [d for d in dims if len(d)]
    if any(d != full[0] for d in full):
        raise InvalidArgumentError(f"Shapes of a, b and x are inconsistent: {[list(d) for d in dims]}")
    (a, bb, x), et = _inputs(ctx, 3)
    return [xl.convert(ctx.b, _betainc(ctx.b, a, bb, x), et)]


# ---------------------------------------------------------------- Bessel I0e / I1e
# Cephes' Chebyshev coefficients of exp(-x)·I0(x) and exp(-x)·I1(x)/x (in 0.5x - 2 for x <= 8) and of
# sqrt(x)·exp(-x)·I_nu(x) (in 32/x - 2 beyond), leading term first; XLA's f32 versions use the tails
# (the last 18/7 and 17/7 terms).
_I0E_A = (
    -4.41534164647933937950e-18, 3.33079451882223809783e-17, -2.43127984654795469359e-16,
    1.71539128555513303061e-15, -1.16853328779934516808e-14, 7.67618549860493561688e-14,
    -4.85644678311192946090e-13, 2.95505266312963983461e-12, -1.72682629144155570723e-11,
    9.67580903537323691224e-11, -5.18979560163526290666e-10, 2.65982372468238665035e-9,
    -1.30002500998624804212e-8, 6.04699502254191894932e-8, -2.67079385394061173391e-7,
    1.11738753912010371815e-6, -4.41673835845875056359e-6, 1.64484480707288970893e-5,
    -5.75419501008210370398e-5, 1.88502885095841655729e-4, -5.76375574538582365885e-4,
    1.63947561694133579842e-3, -4.32430999505057594430e-3, 1.05464603945949983183e-2,
    -2.37374148058994688156e-2, 4.93052842396707084878e-2, -9.49010970480476444210e-2,
    1.71620901522208775349e-1, -3.04682672343198398683e-1, 6.76795274409476084995e-1)
_I0E_B = (
    -7.23318048787475395456e-18, -4.83050448594418207126e-18, 4.46562142029675999901e-17,
    3.46122286769746109310e-17, -2.82762398051658348494e-16, -3.42548561967721913462e-16,
    1.77256013305652638360e-15, 3.81168066935262242075e-15, -9.55484669882830764870e-15,
    -4.15056934728722208663e-14, 1.54008621752140982691e-14, 3.85277838274214270114e-13,
    7.18012445138366623367e-13, -1.79417853150680611778e-12, -1.32158118404477131188e-11,
    -3.14991652796324136454e-11, 1.18891471078464383424e-11, 4.94060238822496958910e-10,
    3.39623202570838634515e-9, 2.26666899049817806459e-8, 2.04891858946906374183e-7,
    2.89137052083475648297e-6, 6.88975834691682398426e-5, 3.36911647825569408990e-3,
    8.04490411014108831608e-1)
_I1E_A = (
    2.77791411276104639959e-18, -2.11142121435816608115e-17, 1.55363195773620046921e-16,
    -1.10559694773538630805e-15, 7.60068429473540693410e-15, -5.04218550472791168711e-14,
    3.22379336594557470981e-13, -1.98397439776494371520e-12, 1.17361862988909016308e-11,
    -6.66348972350202774223e-11, 3.62559028155211703701e-10, -1.88724975172282928790e-9,
    9.38153738649577178388e-9, -4.44505912879632808065e-8, 2.00329475355213526229e-7,
    -8.56872026469545474066e-7, 3.47025130813767847674e-6, -1.32731636560394358279e-5,
    4.78156510755005422638e-5, -1.61760815825896745588e-4, 5.12285956168575772895e-4,
    -1.51357245063125314899e-3, 4.15642294431288815669e-3, -1.05640848946261981558e-2,
    2.47264490306265168283e-2, -5.29459812080949914269e-2, 1.02643658689847095384e-1,
    -1.76416518357834055153e-1, 2.52587186443633654823e-1)
_I1E_B = (
    7.51729631084210481353e-18, 4.41434832307170791151e-18, -4.65030536848935832153e-17,
    -3.20952592199342395980e-17, 2.96262899764595013876e-16, 3.30820231092092828324e-16,
    -1.88035477551078244854e-15, -3.81440307243700780478e-15, 1.04202769841288027642e-14,
    4.27244001671195135429e-14, -2.10154184277266431302e-14, -4.08355111109219731823e-13,
    -7.19855177624590851209e-13, 2.03562854414708950722e-12, 1.41258074366137813316e-11,
    3.25260358301548823856e-11, -1.89749581235054123450e-11, -5.58974346219658380687e-10,
    -3.83538038596423702205e-9, -2.63146884688951950684e-8, -2.51223623787020892529e-7,
    -3.88256480887769039346e-6, -1.10588938762623716291e-4, -9.76109749136146840777e-3,
    7.78576235018280120474e-1)
# (f64 table, number of its last terms XLA's f32 code keeps) per order and range.
_BESSEL_TABLES = {0: ((_I0E_A, 18), (_I0E_B, 7)), 1: ((_I1E_A, 17), (_I1E_B, 7))}


def _chebyshev(b, y, coefficients):
    """Clenshaw's recurrence as XLA's ``EvaluateChebyshevPolynomial`` emits it (b0 = y·b1 - b2 + c from
    zeros, then ``0.5·(b0 - b2)``)."""
    b0 = b1 = b2 = xl.scalar(b, 0.0, y.shape.element_type)
    for c in coefficients:
        b2, b1 = b1, b0
        b0 = xl.add(b, xl.sub(b, xl.mul(b, y, b1), b2), c)
    return xl.mul(b, 0.5, b.subtract(b0, b2))


def _bessel_ie(b, x, nu: int):
    """XLA's I0e/I1e (Cephes i0e/i1e): Chebyshev series in ``|x|/2 - 2`` up to |x| = 8 (times |x| for
    I1e), in ``32/|x| - 2`` over ``sqrt(|x|)`` beyond; I1e takes the sign of x."""
    wide = x.shape.element_type is P.F64
    (ta, na), (tb, nb) = _BESSEL_TABLES[nu]
    ta, tb = (ta, tb) if wide else (ta[-na:], tb[-nb:])
    ax = b.abs(x)
    near = _chebyshev(b, xl.sub(b, xl.mul(b, 0.5, ax), 2.0), ta)
    if nu == 1:
        near = b.multiply(ax, near)
    far = b.divide(_chebyshev(b, xl.sub(b, xl.div(b, 32.0, ax), 2.0), tb), b.sqrt(ax))
    out = b.select(xl.le(b, ax, 8.0), near, far)
    return b.multiply(b.sign(x), out) if nu == 1 else out


def _bessel_op(nu: int):
    def lower(ctx, node):
        (x,), et = _upcast(ctx.b, [ctx.input(0)])
        return [xl.convert(ctx.b, _bessel_ie(ctx.b, x, nu), et)]
    return lower


lowers("BesselI0e")(_bessel_op(0))
lowers("BesselI1e")(_bessel_op(1))
