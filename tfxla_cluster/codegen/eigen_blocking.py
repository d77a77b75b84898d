"""How Eigen's thread-pool contraction in TF's binary splits a contraction's depth (TensorContractionThreadPool.h
``evalProductImpl``), for the exact kernels that replay TF's XLA's order on special values.

Stage: codegen helper (plain arithmetic; :func:`add_shards` emits the final adds, :func:`emit_eigen_sum` a
whole F64 sum in Eigen's gebp order), used by ``dot_exact.py`` (F64 dots: Eigen's own gebp) and
``conv_exact.py`` (F32 convolutions with one output feature: Eigen's contraction of the filter with
``extract_image_patches``, each block a oneDNN ``sgemm`` through TF's custom contraction kernel; F64 1×1
convolutions that XLA makes Eigen dots). Guarantee: :func:`k_blocks` is Eigen's split of the depth on this machine (its cache
sizes and thread count, ``cpu_topology``) — depth shards (one, or several summed at the end when it shards by
the inner dimension), each a list of [lo, hi) k-blocks summed into it in order — given the operands' element
size, gebp's register block and the per-coefficient cost of Eigen's right operand (:class:`Gebp`). Measured
against TF's XLA: F64 dots at depths 289-2000 (``tests/codegen/test_dot_eigen_order.py``); F32 one-feature
convolutions at depths 128-1000 on 3×3 to 64×64 images (``tests/codegen/test_conv_special_values.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.loops import for_range
from tfxla_cluster.cpu_topology import cache_sizes, eigen_threads
from tfxla_cluster.hlo.shape import PrimitiveType as T

_L1, _L2, _L3 = cache_sizes()
_PEEL = 8


@dataclass(frozen=True)
class Gebp:
    """What Eigen's blocking and cost model see of a contraction."""

    mr: int                 # gebp's register block: rows (packets × packet size) ...
    nr: int                 # ... by columns
    packet: int             # elements per SIMD packet (AVX: TF's binary has no AVX-512)
    size: int               # bytes per element
    onednn_slices: bool     # TF's oneDNN contraction kernel (float) evens kc into equal slices of 8
    rhs_compute: float = 0.0  # compute cycles per coefficient of Eigen's right operand


# Doubles: two packets of 4 by 4 columns, plain tensor operands (an XLA dot).
F64_DOT = Gebp(mr=8, nr=4, packet=4, size=8, onednn_slices=False)
# Floats: two packets of 8 by 4; the right operand is the image patches, whose ``costPerCoeff`` counts 3
# index divisions (24 cycles each for a 64-bit index) and 14 multiplications, per packet.
F32_PATCHES = Gebp(mr=16, nr=4, packet=8, size=4, onednn_slices=True, rhs_compute=(3 * 24 + 14) / 8)


def _eigen_kc(g: Gebp, k: int, threads: int) -> int:
    """Eigen's kc for depth ``k`` (``evaluateProductBlockingSizesHeuristic``): with threads, the L1 bound
    capped at 320; alone, the L1 bound (a multiple of 8) lowered so the last block is as large as
    possible with the same number of blocks."""
    bound = (_L1 - g.mr * g.nr * g.size) // ((g.mr + g.nr) * g.size)
    if threads > 1:
        cache = max(8, min(bound, 320))
        return cache - cache % 8 if cache < k else k
    max_kc = max(bound & ~(_PEEL - 1), 1)
    if k <= max_kc or k % max_kc == 0:
        return min(k, max_kc)
    return max_kc - _PEEL * ((max_kc - 1 - k % max_kc) // (_PEEL * (k // max_kc + 1)))


def kc(g: Gebp, k: int, threads: int) -> int:
    """The depth of one k-block: Eigen's, then (float) TF's ``TensorContractionBlocking`` for oneDNN, which
    cuts the depth into as many roughly equal slices, each rounded up to a multiple of 8."""
    e = _eigen_kc(g, k, threads)
    if not g.onednn_slices:
        return e
    slices = max(1, -(-k // e))
    return min(k, -(-(k // slices) // 8) * 8)


def nc(g: Gebp, k: int, m: int, n: int, threads: int) -> int:
    """The columns of one block (``TensorContractionBlocking(k, m, n, threads).nc()``, sharded by columns):
    Eigen's heuristic — with threads, an L2 share per thread; alone, L1 or L2 blocking evened out — then,
    for oneDNN (float), rounded up to a multiple of 24."""
    size = n
    if threads > 1:
        bound = (_L1 - g.mr * g.nr * g.size) // ((g.mr + g.nr) * g.size)
        cache = max(8, min(bound, 320))
        kk = cache - cache % 8 if cache < k else k
        n_cache = (_L2 - _L1) // (g.nr * g.size * kk)
        npt = -(-n // threads)
        size = n_cache - n_cache % g.nr if n_cache <= npt else min(n, npt + g.nr - 1 - (npt + g.nr - 1) % g.nr)
    elif max(k, m, n) >= 48:
        kk = _eigen_kc(g, k, 1)
        max_kc = max(((_L1 - g.mr * g.nr * g.size) // ((g.mr + g.nr) * g.size)) & ~(_PEEL - 1), 1)
        actual_l2 = 1572864
        remaining_l1 = _L1 - g.mr * g.nr * g.size - m * kk * g.size
        if remaining_l1 >= g.nr * g.size * kk:
            max_nc = remaining_l1 // (kk * g.size)
        else:
            max_nc = 3 * actual_l2 // (2 * 2 * max_kc * g.size)
        cols = min(actual_l2 // (2 * kk * g.size), max_nc) & ~(g.nr - 1)
        if 0 < cols < n:
            size = cols if n % cols == 0 else cols - g.nr * ((cols - n % cols) // (g.nr * (n // cols + 1)))
    if g.onednn_slices:
        size = min(n, -(-size // 24) * 24)
    return max(size, 1)


def _bandwidth(g: Gebp, by_col: bool, bm: int, bn: int, bk: int) -> float:
    """``computeBandwidth`` without FMA (a MUL/ADD pair: 1.0 where FMA would be 0.5)."""
    if bk == 1:
        return 4.0
    return 2.0 if (bn if by_col else bm) < g.nr or (bm if by_col else bn) < g.mr else 1.0


def _cycles(n: float, loads: float, stores: float, compute: float) -> float:
    """``TensorCostModel::totalCost``: 11/64 cycles per byte loaded or stored."""
    return n * (11 / 64 * loads + 11 / 64 * stores + compute)


def _shard_by_col(g: Gebp, m: int, n: int, threads: int) -> bool:
    if m // threads >= g.nr and (n // threads < g.nr or (
            n // threads < 4 * g.nr and n % (threads * g.nr) != 0
            and (m % (threads * g.nr) == 0 or m // n >= 6))):
        return False
    return not (n // threads < 16 * g.nr and m > n * 32)


def _thread_blocks(g: Gebp, k: int, m: int, n: int, by_col: bool) -> tuple[int, int]:
    """(bm, bn) of ``TensorContractionBlocking`` for two threads (they only decide a bandwidth)."""
    def heuristic(mm, nn):
        n_cache = (_L2 - _L1) // (g.nr * g.size * k)
        npt = -(-nn // 2)
        nn = n_cache - n_cache % g.nr if n_cache <= npt else min(nn, npt + g.nr - 1 - (npt + g.nr - 1) % g.nr)
        m_cache = (_L3 - _L2) // (g.size * k * 2)
        mpt = -(-mm // 2)
        mm = m_cache - m_cache % g.mr if g.mr <= m_cache < mpt else min(mm, mpt + g.mr - 1 - (mpt + g.mr - 1) % g.mr)
        return mm, nn
    if by_col:
        return heuristic(m, n)
    nn, mm = heuristic(n, m)
    return mm, nn


def k_blocks(m: int, n: int, k: int, threads: int, g: Gebp = F64_DOT) -> list[list[tuple[int, int]]]:
    """:func:`split`'s depth shards and their k-blocks."""
    return [blocks for blocks, _ in split(m, n, k, threads, g)]


def split(m: int, n: int, k: int, threads: int, g: Gebp = F64_DOT) -> list[tuple[list[tuple[int, int]], int]]:
    """How Eigen's thread-pool contraction splits an m × k × n product (Eigen's m: an XLA dot's N, a
    convolution's output features; n: the dot's M, the convolution's patches): depth shards (one, or
    several summed at the end when it shards by the inner dimension), each a list of [lo, hi) k-blocks
    summed into it in order and the columns per block (:func:`nc`)."""
    by_col = _shard_by_col(g, m, n, 2)
    bk = kc(g, k, 2)
    bm, bn = _thread_blocks(g, bk, m, n, by_col)
    loads = bk / m * g.size if by_col else bk / n * g.size   # the packed side's loads count, the other's do not
    compute = bk * _bandwidth(g, False, bm, bn, bk) / g.packet + g.rhs_compute * bk / m
    cost = _cycles(float(n) * m, loads, g.size, compute)
    nthreads = min(threads, max(1, int((cost - 100000) / 100000 + 0.9)))
    # numThreadsInnerDim and shardByInnerDim
    whole = _cycles(k, g.size * n, g.size, _bandwidth(g, True, m, n, k) * m * n / g.packet + g.rhs_compute * n)
    reduce = _cycles(m * n, 2, 1, 1 / g.packet)
    by_k, best = 1, whole
    for nt in range(2, threads + 1, 2):
        c = whole / nt + 100000 + nt * (reduce + 3000)
        if c < best:
            by_k, best = nt, c
    if not (n == 1 or by_k < 2 or by_k < nthreads or m * n * g.size > _L3 // by_k or k // by_k < 2 * g.nr) and (
            max(m, n) // nthreads < g.nr or (k // by_k > 8 * g.nr and (min(m, n) < 2 * g.nr or by_k > nthreads))):
        size = min(k, max(12 * g.packet, -(-(-(-k // by_k)) // 8) * 8))
        shards = [(lo, min(lo + size, k)) for lo in range(0, k, size)]
        t = len(shards)
        return [([(lo, min(lo + kc(g, hi - a, t), hi)) for lo in range(a, hi, kc(g, hi - a, t))], nc(g, hi - a, m, n, t))
                for a, hi in shards]
    t = 1 if n == 1 else nthreads
    c = kc(g, k, t)
    return [([(lo, min(lo + c, k)) for lo in range(0, k, c)], nc(g, k, m, n, t))]


def add_shards(b, values):
    """The depth shards' sums added as ``EvalShardedByInnerDimContext`` does: each range of four as
    ``(s0 + s1) + (s2 + s3)`` (a shorter last range in order), then the ranges into the first, three at a
    time the same way, the rest in order."""
    ranges = []
    for r in range(0, len(values), 4):
        part = values[r:r + 4]
        if len(part) == 4:
            ranges.append(b.fadd(b.fadd(part[0], part[1]), b.fadd(part[2], part[3])))
        else:
            acc = part[0]
            for v in part[1:]:
                acc = b.fadd(acc, v)
            ranges.append(acc)
    out, i = ranges[0], 1
    while i + 2 < len(ranges):
        out = b.fadd(b.fadd(out, ranges[i]), b.fadd(ranges[i + 1], ranges[i + 2]))
        i += 3
    for v in ranges[i:]:
        out = b.fadd(out, v)
    return out


def emit_eigen_sum(kctx, M: int, N: int, K: int, m, n, product) -> ir.Value:
    """The F64 sum over k of ``product(k)`` (an i64 k to its rounded product) for output (m, n) of an
    M × K × N dot, in Eigen's order (``dot_exact.py``'s docstring): k-blocks of ``eigen_blocking.k_blocks``, each
    summed by the accumulators of (m, n)'s micro kernel. Strict IEEE adds (no ``contract``, no
    ``reassoc``)."""
    b = kctx.builder
    sty = t.storage_type(T.F64)
    zero = t.float_constant(sty, 0.0)
    if K == 0:
        return zero

    def rounded(k):
        with kctx.scope():   # generated values stay in their loop
            return product(k)
    rows2 = N // 8 * 8                      # Eigen's rows are N: 8-row panels, then 4, 2, 1
    rows_pair = rows2 + (N - rows2) // 4 * 4
    rows_pair += (N - rows_pair) // 2 * 2
    cols4 = M // 4 * 4
    in_cols4 = b.icmp_unsigned("<", m, t.i64(cols4))
    two = b.and_(in_cols4, b.and_(b.icmp_unsigned(">=", n, t.i64(rows2)), b.icmp_unsigned("<", n, t.i64(rows_pair))))
    four = b.and_(in_cols4, b.icmp_unsigned(">=", n, t.i64(rows_pair)))
    accs = [kctx.alloca(sty, f"eacc{j}") for j in range(4)]
    buf = kctx.alloca(sty, "ebuf")
    sums = []
    for shard in k_blocks(N, M, K, eigen_threads()):
        b.store(zero, buf)
        first, kc, last = shard[0][0], shard[0][1] - shard[0][0], shard[-1][1]
        with for_range(b, t.i64(0), t.i64(len(shard)), "kb") as j:
            lo = b.add(t.i64(first), b.mul(j, t.i64(kc)))
            hi = b.select(b.icmp_signed("<", b.add(lo, t.i64(kc)), t.i64(last)), b.add(lo, t.i64(kc)), t.i64(last))
            depth = b.sub(hi, lo)
            split_ = b.select(two, b.and_(depth, t.i64(-8)), b.select(four, b.and_(depth, t.i64(-4)), t.i64(0)))
            for a in accs:
                b.store(zero, a)
            # Two or four accumulators over the first ``split_`` k, four at a time: k+2 and k+3 go to
            # accumulators 2 and 3 with four of them, to 0 and 1 with two.
            with for_range(b, t.i64(0), b.udiv(split_, t.i64(4)), "kq") as q:
                k0 = b.add(lo, b.mul(q, t.i64(4)))
                for step in range(4):
                    p = rounded(b.add(k0, t.i64(step)))
                    own, other = accs[step], accs[step - 2] if step >= 2 else None
                    if other is None:
                        b.store(b.fadd(b.load(own, typ=sty), p), own)
                        continue
                    x = b.select(four, b.load(own, typ=sty), b.load(other, typ=sty))
                    s = b.fadd(x, p)
                    b.store(b.select(four, s, b.load(own, typ=sty)), own)
                    b.store(b.select(four, b.load(other, typ=sty), s), other)
            v = [b.load(a, typ=sty) for a in accs]
            b.store(b.fadd(b.fadd(v[0], v[1]), b.fadd(v[2], v[3])), accs[0])
            with for_range(b, b.add(lo, split_), hi, "kr") as k:
                b.store(b.fadd(b.load(accs[0], typ=sty), rounded(k)), accs[0])
            b.store(b.fadd(b.load(buf, typ=sty), b.load(accs[0], typ=sty)), buf)
        sums.append(b.load(buf, typ=sty))
    return add_shards(b, sums)
