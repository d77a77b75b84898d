"""Stateful random ops on a resource state variable, and RngSkip/RngReadAndSkip (tf2xla's
stateful_random_ops.cc).

Stage: lowering. The state is an s64 variable: Philox keeps the u64[2] counter in words 0-1 and the
key in word 2; ThreeFry the counter in word 0 and the key in word 1 (AUTO_SELECT is Philox). A draw is
``rng-bit-generator`` on ``[key, counter…]`` through the same distributions as the stateless v2 ops
(random.py); the counter the generator advanced to is written back as ``[counter…, key]`` (a state
longer than that shrinks to it, as in TF's XLA). ``RngSkip``/``RngReadAndSkip`` advance the counter by
``256·delta`` (TF's CPU kernels' unit; Philox carries into the high word); ``RngReadAndSkip`` returns
the state before the skip, right-padded with zeros to 3 words.

Given the same state, values are TF's XLA's bit for bit (integers, uniforms) or up to XLA:CPU's
log/sqrt/sin/erfinv approximations (normals).
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo.attrs import RandomAlgorithm, RandomDistribution
from tfxla_cluster.hlo.ir import HloInstruction
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tfxla_cluster.tf2hlo import random as rnd
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.registry import lowers

_COUNTER_SIZE = {rnd.RNG_ALG_PHILOX: 2, rnd.RNG_ALG_THREEFRY: 1}
_MAX_COUNTER_SIZE = 2


def _resolve_alg(alg: int) -> int:
    if alg == rnd.RNG_ALG_AUTO_SELECT:
        return rnd.RNG_ALG_PHILOX  # tf2xla manages an AUTO_SELECT counter as Philox's
    if alg not in _COUNTER_SIZE:
        raise InvalidArgumentError(f"Unsupported algorithm id: {alg}")
    return alg


def _state(ctx, alg: int):
    """(resource, s64 state value, u64[n] counter, u64[1] key)."""
    res = ctx.resource(0)
    var = res.read(ctx.name)
    if var.shape.element_type is not P.S64:
        raise InvalidArgumentError(f"RNG state must be int64, got {var.shape.element_type.value}")
    if var.shape.rank != 1:
        raise InvalidArgumentError(f"RNG state must have one and only one dimension, not {var.shape.rank}")
    n = _COUNTER_SIZE[alg]
    if var.shape.dimensions[0] < n + 1:
        raise InvalidArgumentError(f"The size of the state must be at least {n + 1}; got {var.shape.dimensions[0]}")
    b = ctx.b
    u = b.bitcast_convert(var, P.U64)
    return res, var, b.slice(u, [0], [n]), b.slice(u, [n], [n + 1])


def _write_state(ctx, res, counter: HloInstruction, key: HloInstruction) -> None:
    b = ctx.b
    res.assign(b.bitcast_convert(b.concatenate([counter, key], 0), P.S64))


def _draw(ctx, sample):
    """Run ``sample(stream)`` on the state variable (input 0, algorithm input 1) and write it back."""
    alg = _resolve_alg(ctx.const_int(1))
    res, _, counter, key = _state(ctx, alg)
    stream = rnd.Stream(key, counter, alg)
    value = sample(stream)
    _write_state(ctx, res, stream.next_counter, key)
    return [value]


def _float_type(ctx, node, allow_16bit: bool) -> P:
    et = ctx.attr_type("dtype")
    if not et.is_float:
        raise UnimplementedError(f"{node.op} of {et.value}")
    if et is P.F16 and not allow_16bit:
        # tf2xla's StatefulRngUniform handles F32/F64 only (bf16 is drawn in f32).
        raise UnimplementedError(f"Types other than F32, U32, S32, U64 and S64 are not implemented by "
                                 f"StatefulRngUniform; got f16 ({node.op})")
    return et


@lowers("StatefulUniform")
def _stateful_uniform(ctx, node):
    et = _float_type(ctx, node, allow_16bit=False)
    dims = rnd._shape_at(ctx, 2)
    return _draw(ctx, lambda s: rnd._maybe_bf16(ctx.b, rnd._uniform(ctx, rnd._rng_type(et), dims, 0.0, 1.0, s), et))


@lowers("StatefulStandardNormalV2")
def _stateful_normal(ctx, node):
    et = _float_type(ctx, node, allow_16bit=True)
    dims = rnd._shape_at(ctx, 2)
    return _draw(ctx, lambda s: rnd._maybe_bf16(ctx.b, rnd._box_muller_normal(ctx, rnd._rng_type(et), dims, s), et))


@lowers("StatefulTruncatedNormal")
def _stateful_truncated_normal(ctx, node):
    et = _float_type(ctx, node, allow_16bit=False)
    dims = rnd._shape_at(ctx, 2)
    return _draw(ctx, lambda s: rnd._truncated_normal(ctx, et, dims, s))


@lowers("StatefulUniformInt")
def _stateful_uniform_int(ctx, node):
    et = ctx.attr_type("dtype")
    dims = rnd._shape_at(ctx, 2)
    lo, hi = ctx.input(3), ctx.input(4)
    return _draw(ctx, lambda s: rnd._uniform_int(ctx, et, dims, lo, hi, s))


@lowers("StatefulUniformFullInt")
def _stateful_uniform_full_int(ctx, node):
    et = ctx.attr_type("dtype")
    dims = rnd._shape_at(ctx, 2)

    def sample(s):
        bits = rnd._bits_as(ctx, et, dims, s)
        return bits if et.is_unsigned_int else ctx.b.bitcast_convert(bits, et)
    return _draw(ctx, sample)


def _skip(ctx, read_old: bool):
    b = ctx.b
    alg = _resolve_alg(ctx.const_int(1))
    res, var, counter, key = _state(ctx, alg)
    old = var
    if read_old and _COUNTER_SIZE[alg] < _MAX_COUNTER_SIZE:
        old = b.pad(var, xl.scalar(b, 0, P.S64), [(0, _MAX_COUNTER_SIZE - _COUNTER_SIZE[alg], 0)])
    delta = ctx.input(2)
    if delta.shape.rank:
        raise InvalidArgumentError("delta must be a scalar")
    delta = b.bitcast_convert(delta, P.U64) if delta.shape.element_type is not P.U64 else delta
    delta = xl.mul(b, delta, np.uint64(256))  # the CPU/GPU kernels' unit
    if alg == rnd.RNG_ALG_PHILOX:
        lo = b.reshape(b.slice(counter, [0], [1]), [])
        hi = b.reshape(b.slice(counter, [1], [2]), [])
        new_lo = b.add(lo, delta)
        new_hi = b.select(xl.lt(b, new_lo, lo), xl.add(b, hi, np.uint64(1)), hi)
        counter = b.concatenate([b.reshape(new_lo, [1]), b.reshape(new_hi, [1])], 0)
    else:
        counter = b.add(counter, b.reshape(delta, [1]))
    _write_state(ctx, res, counter, key)
    return [old] if read_old else []


@lowers("RngSkip")
def _rng_skip(ctx, node):
    return _skip(ctx, read_old=False)


@lowers("RngReadAndSkip")
def _rng_read_and_skip(ctx, node):
    return _skip(ctx, read_old=True)


# ---------------------------------------------------------------- seedless ops (XLA's ``rng``)
# TF's XLA ignores their seed attrs and draws with ``rng``, so values differ between runs and from TF's
# CPU kernels; they are compared by distribution and invariants.
def _rng_uniform(b, et: P, dims, lo, hi) -> HloInstruction:
    return b.rng(xl.scalar(b, lo, et), xl.scalar(b, hi, et), Shape.array(et, dims), RandomDistribution.UNIFORM)


def _tiny(et: P) -> float:
    return float(np.finfo(et.dtype).tiny)


@lowers("TruncatedNormal")
def _truncated_normal(ctx, node):
    et = ctx.attr_type("dtype")
    if not et.is_float:
        raise UnimplementedError(f"TruncatedNormal of {et.value}")
    dims = rnd._shape_at(ctx, 0)
    u = _rng_uniform(ctx.b, et, dims, _tiny(et), 1.0)
    return [rnd.truncated_normal_of_uniform(ctx.b, u, 0.0, 1.0, -2.0, 2.0)]


def _batch_params(ctx, first: int, dims, et: P) -> list[HloInstruction]:
    """ParameterizedTruncatedNormal's means/stdevs/minvals/maxvals: scalars, or vectors of the batch
    size shape[0], broadcast along the leading dim."""
    b = ctx.b
    out = []
    for i in range(first, first + 4):
        v = ctx.input(i)
        if v.shape.rank == 0:
            out.append(b.broadcast(v, dims, ()))
        elif v.shape.rank == 1 and dims and v.shape.dimensions[0] == dims[0]:
            out.append(b.broadcast(v, dims, (0,)))
        else:
            raise InvalidArgumentError(f"{ctx.op}: parameter {i} of shape {list(v.shape.dimensions)} is neither a "
                                       f"scalar nor a vector of the batch size {dims[0] if dims else 0}")
        if v.shape.element_type is not et:
            raise InvalidArgumentError(f"{ctx.op}: parameter {i} is not of dtype {et.value}")
    return out


@lowers("ParameterizedTruncatedNormal")
def _parameterized_truncated_normal(ctx, node):
    et = ctx.attr_type("dtype")
    dims = rnd._shape_at(ctx, 0)
    mu, sigma, lo, hi = _batch_params(ctx, 1, dims, et)
    u = _rng_uniform(ctx.b, et, dims, _tiny(et), 1.0)
    return [rnd.truncated_normal_of_uniform(ctx.b, u, mu, sigma, lo, hi)]


@lowers("StatelessParameterizedTruncatedNormal")
def _stateless_parameterized_truncated_normal(ctx, node):
    """Parameters broadcast against ``shape`` numpy-style; the uniform is the v1 seed stream's."""
    b = ctx.b
    et = ctx.attr_type("dtype")
    dims = rnd._shape_at(ctx, 0)
    params = []
    for i in range(2, 6):
        v = ctx.input(i)
        try:
            if xl.broadcast_shape(v.shape.dimensions, dims) != tuple(dims):
                raise InvalidArgumentError("")
        except InvalidArgumentError:
            raise InvalidArgumentError(f"StatelessParameterizedTruncatedNormal: parameter of shape "
                                       f"{list(v.shape.dimensions)} does not broadcast to {dims}") from None
        params.append(xl.broadcast_to(b, v, dims))
    u = rnd._uniform(ctx, et, dims, _tiny(et), 1.0, rnd.seed_stream(ctx, 1))
    return [rnd.truncated_normal_of_uniform(b, u, *params)]


def _categorical(ctx, node, log_uniforms) -> list:
    """tf2xla's CategoricalOp: Gumbel-max — argmax over classes of ``logits - log(-log(u))`` (lowest
    index on ties); one sample draws [batch, classes] and reshapes."""
    b = ctx.b
    logits = ctx.input(0)
    if logits.shape.rank != 2:
        raise InvalidArgumentError(f"logits should be a matrix, got shape {list(logits.shape.dimensions)}")
    n = ctx.const_int(1)
    if n < 0:
        raise InvalidArgumentError(f"num_samples should be nonnegative, got {n}")
    batch, classes = logits.shape.dimensions
    et = logits.shape.element_type
    dims = [batch, n, classes] if n != 1 else [batch, classes]
    cls = len(dims) - 1
    g = log_uniforms(dims, et)
    entries = b.subtract(b.broadcast(logits, dims, (0, cls)), g)
    out_type = ctx.attr_type("output_dtype")
    from tfxla_cluster.tf2hlo.reduction import _argminmax_computation
    iota = b.iota(Shape.array(P.S32, dims), cls)
    comp = _argminmax_computation(b, et, P.S32, False, f"{node.name}-argmax")
    r = b.reduce([entries, iota], [xl.scalar(b, xl.min_value(et), et), xl.scalar(b, 0, P.S32)], [cls], comp)
    arg = xl.convert(b, b.get_tuple_element(r, 1), out_type)
    return [b.reshape(arg, [batch, 1]) if n == 1 else arg]


@lowers("Multinomial")
def _multinomial(ctx, node):
    b = ctx.b

    def log_uniforms(dims, et):
        u = _rng_uniform(b, et, dims, _tiny(et), 1.0)
        return b.log(b.negate(b.log(u)))
    return _categorical(ctx, node, log_uniforms)


@lowers("StatelessMultinomial")
def _stateless_multinomial(ctx, node):
    b = ctx.b

    def log_uniforms(dims, et):
        rt = rnd._rng_type(et)
        u = rnd._uniform(ctx, rt, dims, _tiny(rt), 1.0, rnd.seed_stream(ctx, 2))
        return xl.convert(b, b.log(b.negate(b.log(u))), et)
    return _categorical(ctx, node, log_uniforms)


@lowers("RandomShuffle")
def _random_shuffle(ctx, node):
    """tf2xla's RandomShuffle: a vector is sorted by random s32 keys ``rng(0, -1)`` (the full u32 range;
    ceil(3·log n / log(2³²-1)) rounds); a higher-rank tensor's rows are gathered in a Fisher-Yates
    permutation of ``rng(0, n)`` swaps run in a while loop."""
    import math

    b = ctx.b
    x = ctx.input(0)
    dims = list(x.shape.dimensions)
    n = dims[0] if dims else 0
    total = int(np.prod(dims)) if dims else 1
    if total <= 1 or n <= 1:
        return [x]
    if len(dims) == 1:
        rounds = math.ceil(3 * math.log(total) / math.log(0xFFFFFFFF))
        c = b.sub_builder(f"{node.name}-lt")
        k0 = c.parameter(0, Shape.array(P.S32, []), "lhs_key")
        k1 = c.parameter(1, Shape.array(P.S32, []), "rhs_key")
        c.parameter(2, Shape.array(x.shape.element_type, []), "lhs_value")
        c.parameter(3, Shape.array(x.shape.element_type, []), "rhs_value")
        less = c.build(c.compare(k0, k1, "LT"))
        cur = x
        for _ in range(rounds):
            keys = b.rng(xl.scalar(b, 0, P.S32), xl.scalar(b, -1, P.S32), Shape.array(P.S32, [total]),
                         RandomDistribution.UNIFORM)
            cur = b.get_tuple_element(b.sort([keys, cur], 0, less), 1)
        return [cur]
    # Fisher-Yates: for i in range(n): swap indices[i] and indices[swaps[i]].
    s32 = Shape.array(P.S32, [])
    vec = Shape.array(P.S32, [n])
    state_shape = Shape.tuple_of([s32, vec, vec])
    body = b.sub_builder(f"{node.name}-swap")
    st = body.parameter(0, state_shape, "state")
    i, idx, swaps = (body.get_tuple_element(st, k) for k in range(3))
    j = body.reshape(body.dynamic_slice(swaps, [i], [1]), [])
    at_i = body.dynamic_slice(idx, [i], [1])
    at_j = body.dynamic_slice(idx, [j], [1])
    idx = body.dynamic_update_slice(body.dynamic_update_slice(idx, at_j, [i]), at_i, [j])
    body_c = body.build(body.tuple([xl.add(body, i, np.int32(1)), idx, swaps]))
    cond = b.sub_builder(f"{node.name}-cond")
    cst = cond.parameter(0, state_shape, "state")
    cond_c = cond.build(xl.lt(cond, cond.get_tuple_element(cst, 0), np.int32(n)))
    swaps = b.rng(xl.scalar(b, 0, P.S32), xl.scalar(b, n, P.S32), vec, RandomDistribution.UNIFORM)
    init = b.tuple([xl.scalar(b, 0, P.S32), b.iota(vec, 0), swaps])
    perm = b.get_tuple_element(b.while_loop(cond_c, body_c, init), 1)
    from tfxla_cluster.tf2hlo.gather_scatter import gather
    return [gather(b, x, perm, 0)]


# ---------------------------------------------------------------- XlaRngBitGenerator
_XLA_RNG_ALGORITHMS = {1: "PHILOX", 2: "THREE_FRY", 3: "DEFAULT"}  # tf.random.Algorithm ids


@lowers("XlaRngBitGenerator")
def _xla_rng_bit_generator(ctx, node):
    """``rng-bit-generator`` on the u64 state: (new state, bits of ``dtype``)."""
    b = ctx.b
    alg = ctx.const_int(0)
    if alg not in _XLA_RNG_ALGORITHMS:
        raise InvalidArgumentError(f"Unsupported RNG algorithm {alg}")
    state = ctx.input(1)
    if state.shape.element_type is not P.U64 or state.shape.rank != 1:
        raise InvalidArgumentError("initial_state must be a u64 vector")
    dims = rnd._shape_at(ctx, 2)
    et = ctx.attr_type("dtype")
    out = b.rng_bit_generator(state, Shape.array(et, dims), getattr(RandomAlgorithm, _XLA_RNG_ALGORITHMS[alg]))
    return [b.get_tuple_element(out, 0), b.get_tuple_element(out, 1)]
