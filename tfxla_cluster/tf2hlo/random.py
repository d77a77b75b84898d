"""Stateless random numbers, v2 (tf2xla's stateless_random_ops_v2.cc with xla/client/lib/prng.cc).

Stage: lowering.

* ``StatelessRandomGetKeyCounter(seed)``: TF's seed scrambling — Philox4x32-10 of the seed under a
  fixed key gives the u64 key and the u64[2] counter. A compile-time-constant seed gives host values;
  a run-time seed (TF's XLA kernel takes it as an ordinary input) is scrambled in HLO: the same ten
  rounds with u32 words, each 32×32→64 multiply done in u64 (``mulhilo``).
  ``StatelessRandomGetAlg`` is Philox (1), as on CPU.
* ``StatelessRandomUniformV2`` / ``StatelessRandomNormalV2``: ``rng-bit-generator`` (Philox with state
  ``[key, counter…]``, or ThreeFry with ``[key, counter[0]]``; AUTO_SELECT is Philox on CPU) yields raw
  bits; uniform floats keep the top mantissa bits (``bits >> (width - mantissa)``; for f16 TF's XLA
  keeps the low ones), scaled by 2^-mantissa; normals are Box-Muller over pairs of uniforms (``SplitShapeIntoHalves``: the first even
  dim is split into pairs). bf16 is generated in f32 and truncated to bf16 (tf2xla's
  ``MaybeConvertF32ToBF16``).

Where values differ: TF's non-XLA CPU kernels draw different numbers for the same seed (their Philox
stream feeds a different bits→float conversion and Box-Muller normals), exactly as real XLA does; the
lowering reproduces TF's XLA values (``jit_compile=True``): uniforms bit for bit, normals up to XLA:CPU's
own log/sqrt/sin/cos approximations.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo.attrs import RandomAlgorithm
from tfxla_cluster.hlo.eval_random import philox4x32
from tfxla_cluster.hlo.ir import HloInstruction
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.registry import lowers

RNG_ALG_PHILOX, RNG_ALG_THREEFRY, RNG_ALG_AUTO_SELECT = 1, 2, 3
_UNSIGNED = {8: P.U8, 16: P.U16, 32: P.U32, 64: P.U64}


def key_counter_from_seed(seed0: int, seed1: int) -> tuple[np.ndarray, np.ndarray]:
    """TF's ``GenerateKey``: (u64[1] key, u64[2] counter) for a two-word seed."""
    s0, s1 = seed0 & 0xFFFFFFFFFFFFFFFF, seed1 & 0xFFFFFFFFFFFFFFFF  # int → uint64 as C++ casts
    counter = [s0 & 0xFFFFFFFF, s0 >> 32, s1 & 0xFFFFFFFF, s1 >> 32]
    mix = [int(np.asarray(w).reshape(-1)[0]) for w in philox4x32(counter, (0x3EC8F720, 0x02461E29))]
    key = np.array([mix[0] | (mix[1] << 32)], np.uint64)
    return key, np.array([0, mix[2] | (mix[3] << 32)], np.uint64)


_PHILOX_M = (0xD2511F53, 0xCD9E8D57)
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)
_SEED_KEY = (0x3EC8F720, 0x02461E29)


def _key_counter_hlo(b, seed, zero_extend: bool = False):
    """:func:`key_counter_from_seed` in HLO for a run-time ``seed`` (s32/s64 [2]); ``zero_extend``: the
    v1 stateless ops' s32 seed words enter as u32 (TF's XLA converts s32 → u32 → u64)."""
    u32, u64 = P.U32, P.U64
    if zero_extend:
        s = b.convert(b.bitcast_convert(seed, u32), u64)
    else:  # int → uint64 as C++ casts (sign-extend, then reinterpret)
        s = b.bitcast_convert(b.convert(seed, P.S64), u64) if seed.shape.element_type is not P.U64 else seed
    words = []
    for i in range(2):
        v = b.reshape(b.slice(s, [i], [i + 1]), [])
        words.append(b.convert(xl.and_(b, v, np.uint64(0xFFFFFFFF)), u32))
        words.append(b.convert(b.shift_right_logical(v, xl.scalar(b, 32, u64)), u32))

    def mulhilo(m: int, x):
        prod = xl.mul(b, b.convert(x, u64), np.uint64(m))
        hi = b.convert(b.shift_right_logical(prod, xl.scalar(b, 32, u64)), u32)
        lo = b.convert(xl.and_(b, prod, np.uint64(0xFFFFFFFF)), u32)
        return hi, lo

    c0, c1, c2, c3 = words
    k0, k1 = _SEED_KEY
    for _ in range(10):
        hi0, lo0 = mulhilo(_PHILOX_M[0], c0)
        hi1, lo1 = mulhilo(_PHILOX_M[1], c2)
        c0, c1, c2, c3 = (xl.xor(b, xl.xor(b, hi1, c1), np.uint32(k0)), lo1,
                          xl.xor(b, xl.xor(b, hi0, c3), np.uint32(k1)), lo0)
        k0, k1 = (k0 + _PHILOX_W[0]) & 0xFFFFFFFF, (k1 + _PHILOX_W[1]) & 0xFFFFFFFF

    def join(lo, hi):
        return xl.or_(b, b.convert(lo, u64), b.shift_left(b.convert(hi, u64), xl.scalar(b, 32, u64)))
    key = b.reshape(join(c0, c1), [1])
    counter = b.concatenate([xl.full(b, 0, u64, [1]), b.reshape(join(c2, c3), [1])], 0)
    return key, counter


@lowers("StatelessRandomGetKeyCounter")
def _get_key_counter(ctx, node):
    dims = ctx.input_dims(0)
    if tuple(dims) != (2,):
        raise InvalidArgumentError(f"seed must have shape [2], not {list(dims)}")
    value = ctx.try_const_input(0)
    if value is None:   # a run-time seed: scramble it in the module, as TF's XLA kernel does
        return list(_key_counter_hlo(ctx.b, ctx.input(0)))
    seed = [int(v) for v in np.asarray(value).reshape(-1)]
    return list(key_counter_from_seed(*seed))


@lowers("StatelessRandomGetKeyCounterAlg")
def _get_key_counter_alg(ctx, node):
    return _get_key_counter(ctx, node) + [np.asarray(RNG_ALG_PHILOX, np.int32)]


@lowers("StatelessRandomGetAlg")
def _get_alg(ctx, node):
    return [np.asarray(RNG_ALG_PHILOX, np.int32)]


def _algorithm(ctx, index: int) -> int:
    alg = ctx.const_int(index)
    if alg == RNG_ALG_AUTO_SELECT:
        return RNG_ALG_PHILOX  # DefaultRngAlgForDeviceType(CPU)
    if alg not in (RNG_ALG_PHILOX, RNG_ALG_THREEFRY):
        raise InvalidArgumentError(f"Unsupported random algorithm: {alg}")
    return alg


@dataclass
class Stream:
    """Where random bits come from: u64[1] key, u64[n] counter, algorithm (RNG_ALG_*). After a draw,
    ``next_counter`` is the counter the generator advanced to (what stateful ops write back)."""

    key: HloInstruction
    counter: HloInstruction
    alg: int
    next_counter: HloInstruction | None = None


def _input_stream(ctx) -> Stream:
    """The v2 ops' (key, counter, alg) inputs 1-3."""
    return Stream(ctx.input(1), ctx.input(2), _algorithm(ctx, 3))


def seed_stream(ctx, index: int) -> Stream:
    """The v1 stateless ops' s32[2] seed input, scrambled as TF 2.21's XLA does (Philox of the seed
    words under TF's ``GenerateKey`` key, each s32 word zero-extended to u64), then Philox with counter
    ``[0, mixed]``. For non-negative seeds that is TF's CPU kernel's stream too; for negative ones TF's
    CPU kernel sign-extends. Note: with a *constant* seed TF's grappler folds the op with TF's CPU
    kernel before XLA sees it (the other bits→float conversion); we lower it like a fed seed."""
    dims = ctx.input_dims(index)
    if tuple(dims) != (2,):
        raise InvalidArgumentError(f"seed must have shape [2], not {list(dims)}")
    value = ctx.try_const_input(index)
    b = ctx.b
    if value is None:
        key, counter = _key_counter_hlo(b, ctx.input(index), zero_extend=True)
    else:
        s0, s1 = (int(v) & 0xFFFFFFFF for v in np.asarray(value).reshape(-1))
        k, c = key_counter_from_seed(s0, s1)
        key, counter = b.constant(k, P.U64), b.constant(c, P.U64)
    return Stream(key, counter, RNG_ALG_PHILOX)


def _random_bits(ctx, et: P, dims, stream: Stream | None = None) -> tuple:
    """Raw bits of ``et``'s width from the stream (default: the key/counter inputs; tf2xla's BitGen)."""
    b = ctx.b
    stream = stream or _input_stream(ctx)
    key, counter, alg = stream.key, stream.counter, stream.alg
    if key.shape.dimensions != (1,) or counter.shape.rank != 1:
        raise InvalidArgumentError("key must have shape [1] and counter be a vector")
    bits_type = _UNSIGNED[et.bit_width]
    if alg == RNG_ALG_PHILOX:
        state = b.concatenate([b.reshape(key, [1]), counter], 0)
        algorithm = RandomAlgorithm.PHILOX
    else:
        state = b.concatenate([b.reshape(key, [1]), b.slice(counter, [0], [1])], 0)
        algorithm = RandomAlgorithm.THREE_FRY
    out = b.rng_bit_generator(state, Shape.array(bits_type, dims), algorithm)
    new_state = b.get_tuple_element(out, 0)
    stream.next_counter = b.slice(new_state, [1], [new_state.shape.dimensions[0]])
    return b.get_tuple_element(out, 1)


def _uniform(ctx, et: P, dims, minval, maxval, stream: Stream | None = None):
    """XLA's ``UniformFloatingPointDistribution``: top mantissa bits → [0, 1) → [minval, maxval)
    (bounds: Python floats or scalar HLO of ``et``)."""
    b = ctx.b
    bits = _random_bits(ctx, et, dims, stream)
    mantissa = et.mantissa_bits
    if et.bit_width < 32:
        # TF 2.21's XLA keeps the *low* mantissa bits of 16-bit draws (checked against jit_compile=True).
        kept = xl.and_(b, bits, np.asarray((1 << mantissa) - 1, bits.shape.dtype))
    else:
        kept = b.shift_right_logical(*xl.broadcast_pair(b, bits, et.bit_width - mantissa))
    values = b.convert(kept, et)
    values = xl.mul(b, values, math.ldexp(1.0, -mantissa))
    lo = minval if isinstance(minval, HloInstruction) else xl.scalar(b, minval, et)
    hi = maxval if isinstance(maxval, HloInstruction) else xl.scalar(b, maxval, et)
    return xl.add(b, xl.mul(b, values, b.subtract(hi, lo)), lo)


def _shape(ctx) -> list[int]:
    return _shape_at(ctx, 0)


def _shape_at(ctx, index: int) -> list[int]:
    """A constant ``shape`` input."""
    dims = ctx.const_ints(index)
    if any(d < 0 for d in dims):
        raise InvalidArgumentError(f"shape must be non-negative, got {dims}")
    return dims


def _rng_type(et: P) -> P:
    return P.F32 if et is P.BF16 else et  # tf2xla generates bf16 randoms in f32


@lowers("StatelessRandomUniformV2")
def _uniform_v2(ctx, node):
    et = ctx.attr_type("dtype")
    if not et.is_float:
        raise UnimplementedError(f"StatelessRandomUniformV2 of {et.value}")
    u = _uniform(ctx, _rng_type(et), _shape(ctx), 0.0, 1.0)
    return [_maybe_bf16(ctx.b, u, et)]


def _maybe_bf16(b, x, et: P):
    """tf2xla's ``MaybeConvertF32ToBF16``: truncate (mask the low 16 bits) before converting, so a
    value below 1 never rounds up to 1."""
    if et is not P.BF16:
        return x
    bits = b.bitcast_convert(x, P.U32)
    masked = b.bitcast_convert(xl.and_(b, bits, np.uint32(0xFFFF0000)), P.F32)
    return b.convert(masked, P.BF16)


def _split_into_halves(dims: list[int]) -> tuple[list[int], int]:
    """XLA's ``SplitShapeIntoHalves``: the first even dim (else the largest) d becomes
    ``[ceil(d/2), 2]``; returns (the uniform draw's shape, the pair dim)."""
    if not dims:
        return [1, 2], 1
    split = next((i for i, d in enumerate(dims) if d % 2 == 0), None)
    if split is None:
        split = max(range(len(dims)), key=lambda i: (dims[i], -i))
    concat = list(dims[:split]) + [-(-dims[split] // 2), 2] + list(dims[split + 1:])
    return concat, split + 1


def _box_muller_normal(ctx, et: P, dims: list[int], stream: Stream | None = None):
    """Box-Muller over pairs of uniforms along the split dim (XLA's NormalFloatingPointDistribution)."""
    b = ctx.b
    concat, pair_dim = _split_into_halves(dims)
    u = _uniform(ctx, et, concat, 0.0, 1.0, stream)
    starts = [0] * len(concat)
    half = list(concat)
    half[pair_dim] = 1
    x0 = b.slice(u, starts, half)
    x1 = b.slice(u, [1 if i == pair_dim else 0 for i in range(len(concat))], concat)
    u1 = xl.maximum(b, x0, 1.0e-7)  # never log(0)
    v1 = xl.mul(b, x1, 2.0 * math.pi)
    u2 = b.sqrt(xl.mul(b, b.log(u1), -2.0))
    pair = b.concatenate([b.multiply(b.sin(v1), u2), b.multiply(b.cos(v1), u2)], pair_dim)
    flat = [d for i, d in enumerate(concat) if i != pair_dim]
    flat[pair_dim - 1] *= 2
    normal = b.reshape(pair, flat)
    if flat != list(dims):  # an odd dim was rounded up, or a scalar drawn as a pair
        normal = b.slice(normal, [0] * len(flat), list(dims) if dims else [1])
        if not dims:
            normal = b.reshape(normal, [])
    return normal


@lowers("StatelessRandomNormalV2")
def _normal_v2(ctx, node):
    et = ctx.attr_type("dtype")
    if not et.is_float:
        raise UnimplementedError(f"StatelessRandomNormalV2 of {et.value}")
    return [_maybe_bf16(ctx.b, _box_muller_normal(ctx, _rng_type(et), _shape(ctx)), et)]



def _bits_as(ctx, et: P, dims, stream: Stream | None = None):
    """Raw bits drawn for an integer ``et`` (unsigned of the same width)."""
    return _random_bits(ctx, et if et.is_unsigned_int else _UNSIGNED[et.bit_width], dims, stream)


@lowers("StatelessRandomUniformIntV2")
def _uniform_int_v2(ctx, node):
    """XLA's UniformIntDistribution: (bits mod (max - min)) split in two halves added to min, the range
    taken in the unsigned type so it cannot overflow."""
    return [_uniform_int(ctx, ctx.attr_type("dtype"), _shape(ctx), ctx.input(4), ctx.input(5))]


def _uniform_int(ctx, et: P, dims, lo, hi, stream: Stream | None = None):
    b = ctx.b
    if lo.shape.rank or hi.shape.rank:
        raise InvalidArgumentError("minval and maxval must be scalars")
    ut = _UNSIGNED[et.bit_width]
    bits = _bits_as(ctx, et, dims, stream)
    span = b.subtract(b.bitcast_convert(hi, ut), b.bitcast_convert(lo, ut))
    dist = b.remainder(bits, b.broadcast(span, dims, ()))
    half = xl.broadcast_pair(b, dist, 1)
    dist_half = b.shift_right_logical(*half)
    out = b.add(b.broadcast(lo, dims, ()), b.bitcast_convert(dist_half, et))
    return b.add(out, b.bitcast_convert(b.subtract(dist, dist_half), et))


@lowers("StatelessRandomUniformFullIntV2")
def _uniform_full_int_v2(ctx, node):
    et = ctx.attr_type("dtype")
    bits = _bits_as(ctx, et, _shape(ctx))
    return [bits if et.is_unsigned_int else ctx.b.bitcast_convert(bits, et)]


@lowers("StatelessTruncatedNormalV2")
def _truncated_normal_v2(ctx, node):
    """tf2xla's TruncatedNormal on [-2, 2]: a uniform in (min normal, 1) mapped through the normal CDF
    between the bounds, inverted with erfinv, then clamped."""
    return [_truncated_normal(ctx, ctx.attr_type("dtype"), _shape(ctx))]


def _truncated_normal(ctx, et: P, dims, stream: Stream | None = None):
    b = ctx.b
    rt = _rng_type(et)
    tiny = float(np.finfo(rt.dtype).tiny)
    u = _uniform(ctx, rt, dims, tiny, 1.0, stream)
    x = truncated_normal_of_uniform(b, u, 0.0, 1.0, -2.0, 2.0)
    return _maybe_bf16(b, x, et)


def truncated_normal_of_uniform(b, u, mu, sigma, lo, hi):
    """tf2xla's ``ParameterizedTruncatedNormal(uniform, mu, sigma, a, b)``: the uniform in (0, 1) mapped
    through the normal CDF between the bounds, inverted with erfinv, clamped to [a, b]. Parameters are
    Python floats (folded as TF's XLA folds its constants) or HLO of ``u``'s shape."""
    et, dims = u.shape.element_type, list(u.shape.dimensions)
    sqrt2 = math.sqrt(2.0)
    consts = all(not isinstance(v, HloInstruction) for v in (mu, sigma, lo, hi))
    if consts:
        cdf_a = (1.0 + math.erf((lo - mu) / sigma / sqrt2)) / 2.0
        cdf_b = (1.0 + math.erf((hi - mu) / sigma / sqrt2)) / 2.0
        p = xl.add(b, xl.mul(b, u, cdf_b - cdf_a), cdf_a)
    else:
        mu, sigma, lo, hi = (v if isinstance(v, HloInstruction) else xl.full(b, v, et, dims)
                             for v in (mu, sigma, lo, hi))

        def cdf(x):
            return xl.div(b, xl.add(b, b.erf(xl.div(b, b.divide(b.subtract(x, mu), sigma), sqrt2)), 1.0), 2.0)
        cdf_a = cdf(lo)
        p = b.add(cdf_a, b.multiply(b.subtract(cdf(hi), cdf_a), u))
    v = xl.sub(b, xl.mul(b, p, 2.0), 1.0)
    eps = float(np.finfo(np.float32).eps)
    v = b.clamp(xl.full(b, -1.0 + eps, et, dims), v, xl.full(b, 1.0 - eps, et, dims))
    if consts:
        x = xl.mul(b, xl.erfinv(b, v), sqrt2)
        if (mu, sigma) != (0.0, 1.0):
            x = xl.add(b, xl.mul(b, x, sigma), mu)
        return b.clamp(xl.full(b, lo, et, dims), x, xl.full(b, hi, et, dims))
    x = b.add(mu, b.multiply(xl.mul(b, sigma, sqrt2), xl.erfinv(b, v)))
    return b.clamp(lo, x, hi)


# ---------------------------------------------------------------- stateful (seeded by the runtime)
def _rng(ctx, et: P, dims, lo, hi, distribution):
    from tfxla_cluster.hlo.attrs import RandomDistribution

    b = ctx.b
    return b.rng(xl.scalar(b, lo, et) if not hasattr(lo, "shape") else lo,
                 xl.scalar(b, hi, et) if not hasattr(hi, "shape") else hi, Shape.array(et, dims),
                 getattr(RandomDistribution, distribution))


@lowers("RandomUniform")
def _random_uniform(ctx, node):
    """``rng`` uniform in [0, 1): XLA's stateful generator, so values differ from TF's CPU kernel and
    between runs (as on real XLA, where the seed attrs are ignored)."""
    et = ctx.attr_type("dtype")
    rt = _rng_type(et)
    return [xl.convert(ctx.b, _rng(ctx, rt, _shape(ctx), 0.0, 1.0, "UNIFORM"), et)]


@lowers("RandomStandardNormal")
def _random_standard_normal(ctx, node):
    et = ctx.attr_type("dtype")
    rt = _rng_type(et)
    return [xl.convert(ctx.b, _rng(ctx, rt, _shape(ctx), 0.0, 1.0, "NORMAL"), et)]


@lowers("RandomUniformInt")
def _random_uniform_int(ctx, node):
    lo, hi = ctx.input(1), ctx.input(2)
    if lo.shape.rank or hi.shape.rank:
        raise InvalidArgumentError("minval and maxval must be scalars")
    return [_rng(ctx, lo.shape.element_type, _shape(ctx), lo, hi, "UNIFORM")]



# ---------------------------------------------------------------- stateless v1 (s32[2] seed input)
def _float_dtype(ctx, op: str) -> P:
    et = ctx.attr_type("dtype")
    if not et.is_float:
        raise UnimplementedError(f"{op} of {et.value}")
    return et


@lowers("StatelessRandomUniform")
def _uniform_v1(ctx, node):
    et = _float_dtype(ctx, node.op)
    u = _uniform(ctx, _rng_type(et), _shape(ctx), 0.0, 1.0, seed_stream(ctx, 1))
    return [_maybe_bf16(ctx.b, u, et)]


@lowers("StatelessRandomNormal")
def _normal_v1(ctx, node):
    et = _float_dtype(ctx, node.op)
    return [_maybe_bf16(ctx.b, _box_muller_normal(ctx, _rng_type(et), _shape(ctx), seed_stream(ctx, 1)), et)]


@lowers("StatelessTruncatedNormal")
def _truncated_normal_v1(ctx, node):
    return [_truncated_normal(ctx, _float_dtype(ctx, node.op), _shape(ctx), seed_stream(ctx, 1))]


@lowers("StatelessRandomUniformInt")
def _uniform_int_v1(ctx, node):
    return [_uniform_int(ctx, ctx.attr_type("dtype"), _shape(ctx), ctx.input(2), ctx.input(3), seed_stream(ctx, 1))]


@lowers("StatelessRandomUniformFullInt")
def _uniform_full_int_v1(ctx, node):
    et = ctx.attr_type("dtype")
    bits = _bits_as(ctx, et, _shape(ctx), seed_stream(ctx, 1))
    return [bits if et.is_unsigned_int else ctx.b.bitcast_convert(bits, et)]


@lowers("StochasticCastToInt")
def _stochastic_cast_to_int(ctx, node):
    """Stochastic rounding with a uniform ``u`` in [0, 1) from the (key, counter, alg) inputs: integral
    values stay; negatives become ``floor(x + u)``, others ``floor(x + 1 - u)``; then the saturating
    convert to ``Tout`` (tf2xla's kernel, as TF's XLA lowers it)."""
    b = ctx.b
    x = ctx.input(0)
    et = x.shape.element_type
    if not et.is_float:
        raise InvalidArgumentError(f"StochasticCastToInt input must be floating point, got {et.value}")
    dims = list(x.shape.dimensions)
    rt = _rng_type(et)
    u = _uniform(ctx, rt, dims, 0.0, 1.0, _input_stream(ctx))
    xr = xl.convert(b, x, rt)
    down = b.floor(b.add(xr, u))
    up = b.floor(b.subtract(xl.add(b, xr, 1.0), u))
    rounded = b.select(xl.lt(b, xr, 0.0), down, up)
    rounded = b.select(b.compare(xr, b.floor(xr), "EQ"), xr, rounded)
    return [b.convert(rounded, ctx.attr_type("Tout"))]
