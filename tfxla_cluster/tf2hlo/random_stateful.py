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
from tfxla_cluster.hlo.ir import HloInstruction
from tfxla_cluster.hlo.shape import PrimitiveType as P
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
