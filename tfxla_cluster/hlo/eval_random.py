"""Random-number opcodes for the reference evaluator.

- ``rng-bit-generator`` is bit-exact with XLA's RngBitGeneratorExpander (xla/service/
  rng_bit_generator_expander.cc) and its generators in xla/hlo/builder/lib/prng.cc: Philox4x32-10
  (``rng_philox``, and ``rng_default``, which XLA:CPU expands as Philox) and ThreeFry2x32-20
  (``rng_three_fry``). The u64 state holds the key in word 0 and the counter after it; narrow outputs
  are the low bits of 32-bit draws, 64-bit outputs pair two 32-bit words.
- ``rng`` (stateful, ``rng_uniform`` / ``rng_normal``) draws from the evaluator's seeded numpy
  generator: deterministic per evaluator, not XLA's sequence (XLA's is not reproducible either).
"""
from __future__ import annotations

import threading
from math import prod

import numpy as np

from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.hlo.attrs import RandomAlgorithm, RandomDistribution
from tfxla_cluster.hlo.opcode import HloOpcode as O

U32, U64 = np.uint32, np.uint64
_MASK32 = U64(0xFFFFFFFF)


def _split64(x):
    x = np.asarray(x, dtype=U64)
    return (x & _MASK32).astype(U32), (x >> U64(32)).astype(U32)


def _join32(lo, hi):
    return lo.astype(U64) | (hi.astype(U64) << U64(32))


# ---------------------------------------------------------------- Philox4x32-10
def philox4x32(x, key):
    x0, x1, x2, x3 = (np.asarray(v, dtype=U32) for v in x)
    k0, k1 = U32(key[0]), U32(key[1])
    for _ in range(10):
        p0 = x0.astype(U64) * U64(0xD2511F53)
        p1 = x2.astype(U64) * U64(0xCD9E8D57)
        hi0, lo0 = (p0 >> U64(32)).astype(U32), (p0 & _MASK32).astype(U32)
        hi1, lo1 = (p1 >> U64(32)).astype(U32), (p1 & _MASK32).astype(U32)
        x0, x1, x2, x3 = hi1 ^ x1 ^ k0, lo1, hi0 ^ x3 ^ k1, lo0
        k0, k1 = U32((int(k0) + 0x9E3779B9) & 0xFFFFFFFF), U32((int(k1) + 0xBB67AE85) & 0xFFFFFFFF)
    return x0, x1, x2, x3


def _philox_bits(n_words32: int, counter: tuple[int, int], key: int):
    """Four u32 output streams of ceil(n/4) draws, and the advanced 128-bit counter."""
    n4 = -(-n_words32 // 4)
    lo, hi = np.uint64(counter[0]), np.uint64(counter[1])
    iota = np.arange(n4, dtype=U64)
    new_lo = lo + iota
    new_hi = np.where(new_lo < lo, hi + U64(1), hi).astype(U64)
    words = (*_split64(new_lo), *_split64(new_hi))
    k_lo, k_hi = _split64(U64(key))
    out = philox4x32(words, (k_lo, k_hi))
    end_lo = lo + U64(n4)
    end_hi = hi + U64(1) if end_lo < lo else hi
    return out, (int(end_lo), int(end_hi))


def philox_generate(key: int, counter: tuple[int, int], dims, bits: int):
    n = prod(dims)
    if bits <= 32:
        (o0, o1, o2, o3), new = _philox_bits(n, counter, key)
        values = np.stack([o0, o1, o2, o3], axis=1).reshape(-1)[:n]
        if bits < 32:
            values = values.astype(np.dtype(f"u{bits // 8}"))
    else:
        (o0, o1, o2, o3), new = _philox_bits(2 * n, counter, key)
        values = np.stack([_join32(o0, o1), _join32(o2, o3)], axis=1).reshape(-1)[:n]
    return values.reshape(dims), new


# ---------------------------------------------------------------- ThreeFry2x32-20
def _rotl(v, d):
    return (v << U32(d)) | (v >> U32(32 - d))


def threefry2x32(x, key):
    rot = (13, 15, 26, 6, 17, 29, 16, 24)
    ks = [U32(key[0]), U32(key[1]), U32(0x1BD11BDA ^ int(key[0]) ^ int(key[1]))]
    x0, x1 = np.asarray(x[0], dtype=U32) + ks[0], np.asarray(x[1], dtype=U32) + ks[1]
    for i in range(5):
        for r in rot[(i % 2) * 4:(i % 2) * 4 + 4]:
            x0 = x0 + x1
            x1 = _rotl(x1, r) ^ x0
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + U32(i + 1)
    return x0, x1


def _threefry_inputs(counter: int, dims):
    x = np.full(dims, counter, dtype=U64)
    trailing = 1
    for i in range(len(dims) - 1, -1, -1):
        if dims[i] < 2:
            continue
        ramp = np.arange(dims[i], dtype=U64).reshape([-1 if j == i else 1 for j in range(len(dims))])
        x = x + ramp * U64(trailing)
        trailing *= dims[i]
    return x, counter + prod(dims)


def _split_halves(dims):
    """SplitShapeIntoHalves: (half dims, split dim, new concat dim) — rank 0 becomes [1] / [2]."""
    if not dims:
        return [1], 0, 0
    split = next((i for i, d in enumerate(dims) if d % 2 == 0), None)
    if split is None:
        split = max(range(len(dims)), key=lambda i: (dims[i], -i))
    half = list(dims[:split]) + [-(-dims[split] // 2), 1] + list(dims[split + 1:])
    return half, split, split + 1


def threefry_generate(key: int, counter: int, dims, bits: int):
    dims = list(dims)
    k = _split64(U64(key))
    if bits == 64:
        x, new = _threefry_inputs(counter, dims)
        o0, o1 = threefry2x32(_split64(x), k)
        return _join32(o0, o1).reshape(dims), new
    half, split, concat_dim = _split_halves(dims)
    x, new = _threefry_inputs(counter, half)
    o0, o1 = threefry2x32(_split64(x), k)
    if not dims:
        values = o0.reshape(())
    else:
        both = np.concatenate([o0, o1], axis=concat_dim)
        shape = list(dims)
        shape[split] = -(-dims[split] // 2) * 2
        values = both.reshape(shape)[tuple(slice(0, d) for d in dims)]
    if bits < 32:
        values = values.astype(np.dtype(f"u{bits // 8}"))
    return values, new


def rng_bit_generator(ev, instr, args):
    (state,) = args
    out_shape = instr.shape.tuple_shapes[1]
    bits = out_shape.element_type.bit_width
    words = [int(w) for w in state.astype(U64)]
    key = words[0]
    algorithm = instr.rng_algorithm or RandomAlgorithm.DEFAULT
    if algorithm in (RandomAlgorithm.PHILOX, RandomAlgorithm.DEFAULT):
        counter = (words[1], words[2]) if len(words) >= 3 else (words[1], words[0])
        values, (lo, hi) = philox_generate(key, counter, out_shape.dimensions, bits)
        new_state = [key, lo, hi] if len(words) >= 3 else [key, lo]
    elif algorithm is RandomAlgorithm.THREE_FRY:
        values, new = threefry_generate(key, words[1], out_shape.dimensions, bits)
        new_state = [key, new & 0xFFFFFFFFFFFFFFFF] + words[2:]
    else:
        raise UnimplementedError(f"rng-bit-generator algorithm {algorithm.value}")
    new_state_arr = np.array(new_state, dtype=U64).astype(state.dtype)
    return new_state_arr, np.ascontiguousarray(values).view(out_shape.dtype).reshape(out_shape.dimensions)


def rng(ev, instr, args):
    a, b = (x.item() for x in args)
    s = instr.shape
    gen = ev.random
    if instr.distribution is RandomDistribution.NORMAL:
        if not s.element_type.is_float:
            raise UnimplementedError("Normal distribution is not supported for integral types.")
        return gen.normal(a, b, s.dimensions).astype(s.dtype)
    if s.element_type.is_float:
        v = gen.uniform(a, b, s.dimensions).astype(s.dtype)
        return np.where(v >= b, np.asarray(a, dtype=s.dtype), v).astype(s.dtype)  # keep [a, b)
    if b <= a:
        # XLA takes the range b - a in the unsigned type, so rng(0, -1) spans the full 2^n - 1 values
        # (TF's RandomShuffle keys); the sum wraps.
        bits = s.element_type.bit_width
        span = (b - a) % (1 << bits)
        v = gen.integers(0, span, s.dimensions, dtype=np.uint64) if span else np.zeros(s.dimensions, np.uint64)
        return ((v + np.uint64(a % (1 << bits))) & np.uint64((1 << bits) - 1)).astype(f"u{bits // 8}").view(s.dtype)
    return gen.integers(a, b, s.dimensions, endpoint=False).astype(s.dtype)


# XLA:CPU's RngState: one u128 counter per instruction, starting at a non-zero value.
RNG_STATE_INITIAL_VALUE = 0x7012395
# id(instruction) -> (instruction, counter); the instruction is kept so its id stays unique.
_RNG_STATES: dict[int, tuple] = {}
_RNG_STATE_LOCK = threading.Lock()


def rng_get_and_update_state(ev, instr, args):
    """The instruction's counter as u64[2] (low word first), then advanced by ``delta``."""
    with _RNG_STATE_LOCK:
        old = _RNG_STATES.get(id(instr), (instr, RNG_STATE_INITIAL_VALUE))[1]
        _RNG_STATES[id(instr)] = (instr, (old + int(instr.delta)) & ((1 << 128) - 1))
    return np.array([old & 0xFFFFFFFFFFFFFFFF, old >> 64], dtype=np.uint64)


HANDLERS = {O.RNG_BIT_GENERATOR: rng_bit_generator, O.RNG: rng,
            O.RNG_GET_AND_UPDATE_STATE: rng_get_and_update_state}
