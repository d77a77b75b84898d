"""RngBitGeneratorExpander for Philox (xla/service/rng_bit_generator_expander.cc + xla/hlo/builder/lib/prng.cc).

Stage: with the other expanders, before simplification. XLA:CPU has no rng-bit-generator kernel: it
rewrites ``rng-bit-generator`` (``rng_philox`` and ``rng_default``) into plain HLO arithmetic, which then
fuses with its consumers like any elementwise code. The u64 state holds the key in word 0 and the
128-bit counter in words 1 and 2 (a two-word state uses the key as the counter's high word). For n
output words of 32 bits, ceil(n/4) counters ``counter + iota`` (carrying into the high word) go
through Philox4x32-10; the four output streams are interleaved, cut to n, narrowed (8/16-bit outputs
keep the low bits) or paired (64-bit outputs join two words), and the new state is the counter
advanced by ceil(n/4). Bit-exact with the evaluator's ``rng-bit-generator``. ThreeFry stays as is.

RngExpander (xla/service/rng_expander.cc) runs just before it and removes the stateful ``rng``
(``tf.random.uniform``/``normal``/``uniform`` of ints without a seed): each ``rng`` becomes
``rng-get-and-update-state`` (a u128 counter owned by the compiled code, starting at XLA:CPU's
0x7012395 and advanced by the number of 32-bit words drawn, so successive calls never reuse a
counter), a Philox ``rng-bit-generator`` keyed by a per-expansion u64 constant (XLA: the module's and
a process-global random value; here a SplitMix64 sequence of the process, so two ``rng`` never share
a stream), and prng.cc's distributions on the bits: uniform floats from the top mantissa bits (the low
ones for 16-bit types) scaled to [a, b), Box-Muller normals ``a + b * z``, and integers
``a + (bits mod (b - a))`` with the range taken unsigned. Values cannot equal TF's (XLA's key comes
from its process's generators, which we do not replay); their distribution is what XLA's is.
"""
from __future__ import annotations

import itertools
import math
import threading

from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.hlo import attrs as A
from tfxla_cluster.hlo.ir import HloInstruction, HloModule
from tfxla_cluster.hlo.literal import make_literal
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tfxla_cluster.passes.pass_ import HloPass
from tfxla_cluster.passes.util import UseGraph, non_fusion_computations

_PHILOX_M0, _PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
_PHILOX_W0, _PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
_UNSIGNED = {8: P.U8, 16: P.U16, 32: P.U32, 64: P.U64}


class _Emitter:
    """Tiny builder over a UseGraph: every instruction takes ``like``'s metadata."""

    def __init__(self, g: UseGraph, like: HloInstruction) -> None:
        self.g, self.like = g, like

    def op(self, opcode: O, operands, shape: Shape | None = None, **fields) -> HloInstruction:
        return self.g.make(opcode, operands, shape, like=self.like, **fields)

    def const(self, value: int, et: P) -> HloInstruction:
        shape = Shape.scalar(et)
        return self.op(O.CONSTANT, [], shape, literal=make_literal(value, shape))

    def full(self, value: int, et: P, dims) -> HloInstruction:
        return self.bcast(self.const(value, et), dims)

    def bcast(self, scalar: HloInstruction, dims) -> HloInstruction:
        if not dims:
            return scalar
        return self.op(O.BROADCAST, [scalar], Shape.array(scalar.shape.element_type, dims), dimensions=())

    def convert(self, x: HloInstruction, et: P) -> HloInstruction:
        return x if x.shape.element_type is et else self.op(O.CONVERT, [x], x.shape.with_element_type(et))

    def reshape(self, x: HloInstruction, dims) -> HloInstruction:
        if tuple(dims) == x.shape.dimensions:
            return x
        return self.op(O.RESHAPE, [x], Shape.array(x.shape.element_type, dims))

    def binary(self, opcode: O, a, b) -> HloInstruction:
        return self.op(opcode, [a, b])

    def split64(self, x: HloInstruction) -> tuple[HloInstruction, HloInstruction]:
        """(low, high) 32-bit halves of a u64 value."""
        dims = x.shape.dimensions
        hi = self.binary(O.SHIFT_RIGHT_LOGICAL, x, self.full(32, P.U64, dims))
        return self.convert(x, P.U32), self.convert(hi, P.U32)

    def join32(self, lo: HloInstruction, hi: HloInstruction) -> HloInstruction:
        dims = lo.shape.dimensions
        shifted = self.binary(O.SHIFT_LEFT, self.convert(hi, P.U64), self.full(32, P.U64, dims))
        return self.binary(O.OR, self.convert(lo, P.U64), shifted)

    def word(self, state: HloInstruction, k: int) -> HloInstruction:
        s = self.op(O.SLICE, [state], slices=(A.SliceRange(k, k + 1, 1),))
        return self.reshape(s, ())

    def interleave(self, streams: list[HloInstruction], n: int) -> HloInstruction:
        """[s0[0], s1[0], ..., s0[1], ...] cut to n elements."""
        rows = streams[0].shape.dimensions[0]
        cols = [self.reshape(s, (rows, 1)) for s in streams]
        both = self.op(O.CONCATENATE, cols, dimensions=(1,))
        flat = self.reshape(both, (rows * len(streams),))
        return flat if flat.shape.dimensions[0] == n else self.op(O.SLICE, [flat], slices=(A.SliceRange(0, n, 1),))


def philox4x32(e: _Emitter, x: list[HloInstruction], k0: HloInstruction, k1: HloInstruction) -> list[HloInstruction]:
    dims = x[0].shape.dimensions
    x0, x1, x2, x3 = x
    for _ in range(10):
        p0 = e.binary(O.MULTIPLY, e.convert(x0, P.U64), e.full(_PHILOX_M0, P.U64, dims))
        p1 = e.binary(O.MULTIPLY, e.convert(x2, P.U64), e.full(_PHILOX_M1, P.U64, dims))
        lo0, hi0 = e.split64(p0)
        lo1, hi1 = e.split64(p1)
        x0, x1, x2, x3 = (e.binary(O.XOR, e.binary(O.XOR, hi1, x1), e.bcast(k0, dims)), lo1,
                          e.binary(O.XOR, e.binary(O.XOR, hi0, x3), e.bcast(k1, dims)), lo0)
        k0 = e.binary(O.ADD, k0, e.const(_PHILOX_W0, P.U32))
        k1 = e.binary(O.ADD, k1, e.const(_PHILOX_W1, P.U32))
    return [x0, x1, x2, x3]


def expand_philox(g: UseGraph, rbg: HloInstruction) -> HloInstruction:
    e = _Emitter(g, rbg)
    state = rbg.operands[0]
    state_type = state.shape.element_type
    state = e.convert(state, P.U64)
    words = state.shape.dimensions[0]
    out = rbg.shape.tuple_shapes[1]
    bits = out.element_type.bit_width
    n = out.num_elements
    n4 = -(-(n if bits <= 32 else 2 * n) // 4)
    key, lo = e.word(state, 0), e.word(state, 1)
    hi = e.word(state, 2) if words >= 3 else key
    # counters: (lo + i, hi + carry)
    b_lo = e.bcast(lo, (n4,))
    new_lo = e.binary(O.ADD, b_lo, e.op(O.IOTA, [], Shape.array(P.U64, (n4,)), iota_dimension=0))
    carry = e.op(O.COMPARE, [new_lo, b_lo], comparison_direction=A.ComparisonDirection.LT)
    b_hi = e.bcast(hi, (n4,))
    new_hi = e.op(O.SELECT, [carry, e.binary(O.ADD, b_hi, e.full(1, P.U64, (n4,))), b_hi])
    k0, k1 = e.split64(key)
    streams = philox4x32(e, [*e.split64(new_lo), *e.split64(new_hi)], k0, k1)
    if bits <= 32:
        values = e.convert(e.interleave(streams, n), _UNSIGNED[bits])
    else:
        values = e.interleave([e.join32(streams[0], streams[1]), e.join32(streams[2], streams[3])], n)
    values = e.reshape(values, out.dimensions)
    if values.shape.element_type is not out.element_type:
        values = e.op(O.BITCAST_CONVERT, [values], out)
    # the state after: counter advanced by n4
    end_lo = e.binary(O.ADD, lo, e.const(n4, P.U64))
    end_hi = e.op(O.SELECT, [e.op(O.COMPARE, [end_lo, lo], comparison_direction=A.ComparisonDirection.LT),
                             e.binary(O.ADD, hi, e.const(1, P.U64)), hi])
    parts = [key, end_lo] + ([end_hi] if words >= 3 else [])
    pieces = [e.reshape(p, (1,)) for p in parts]
    if words > len(parts):
        pieces.append(e.op(O.SLICE, [state], slices=(A.SliceRange(len(parts), words, 1),)))
    new_state = e.convert(e.op(O.CONCATENATE, pieces, dimensions=(0,)), state_type)
    return e.op(O.TUPLE, [new_state, values], rbg.shape)


class RngBitGeneratorExpander(HloPass):
    name = "rng-bit-generator-expander"

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in non_fusion_computations(module):
            g = UseGraph(comp)
            for instr in comp.post_order():
                if instr.opcode is O.RNG_BIT_GENERATOR and instr.parent is comp and (
                        instr.rng_algorithm in (None, A.RandomAlgorithm.DEFAULT, A.RandomAlgorithm.PHILOX)) \
                        and instr.operands[0].shape.rank == 1 and instr.operands[0].shape.dimensions[0] >= 2:
                    g.replace(instr, expand_philox(g, instr))
                    changed = True
            g.finish()
        return changed


# ---------------------------------------------------------------- RngExpander (stateful rng)
_KEY_LOCK = threading.Lock()
_KEY_COUNTER = itertools.count(1)
_MASK64 = (1 << 64) - 1


def next_rng_key() -> int:
    """The next key of this process's SplitMix64 sequence (XLA's GlobalRandomValue plays this role)."""
    with _KEY_LOCK:
        z = (next(_KEY_COUNTER) * 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def words32(shape: Shape) -> int:
    """XLA's GetNumberOf32bitUnits: the 32-bit words a draw of ``shape`` consumes (the state's delta)."""
    return shape.num_elements * -(-shape.element_type.bit_width // 32)


def _draw_bits(e: _Emitter, key: int, state: HloInstruction, et: P, dims) -> HloInstruction:
    """Philox bits of ``et``'s width: rng-bit-generator over [key, counter_lo, counter_hi]."""
    bits_type = _UNSIGNED[et.bit_width]
    seed = e.op(O.CONCATENATE, [e.reshape(e.const(key, P.U64), (1,)), state], dimensions=(0,))
    out_shape = Shape.tuple_of([seed.shape, Shape.array(bits_type, tuple(dims))])
    rbg = e.op(O.RNG_BIT_GENERATOR, [seed], out_shape, rng_algorithm=A.RandomAlgorithm.PHILOX)
    return e.op(O.GET_TUPLE_ELEMENT, [rbg], tuple_index=1)


def _fconst(e: _Emitter, value: float, et: P, dims) -> HloInstruction:
    shape = Shape.scalar(et)
    c = e.op(O.CONSTANT, [], shape, literal=make_literal(value, shape))
    return e.bcast(c, tuple(dims))


def _uniform01(e: _Emitter, key: int, state, et: P, dims) -> HloInstruction:
    """prng.cc's ConvertRandomBitsToUniformFloatingPoint on [0, 1): mantissa-many random bits (the top
    ones; TF 2.21's XLA keeps the low ones for 16-bit types) times 2^-mantissa."""
    bits = _draw_bits(e, key, state, et, dims)
    ut = bits.shape.element_type
    m = et.mantissa_bits
    if et.bit_width < 32:
        kept = e.binary(O.AND, bits, e.full((1 << m) - 1, ut, tuple(dims)))
    else:
        kept = e.binary(O.SHIFT_RIGHT_LOGICAL, bits, e.full(et.bit_width - m, ut, tuple(dims)))
    values = e.op(O.CONVERT, [kept], Shape.array(et, tuple(dims)))
    return e.binary(O.MULTIPLY, values, _fconst(e, math.ldexp(1.0, -m), et, dims))


def _split_into_halves(dims) -> tuple[list[int], int]:
    """XLA's SplitShapeIntoHalves: the first even dim (else the largest) d becomes [ceil(d/2), 2]."""
    dims = list(dims)
    if not dims:
        return [1, 2], 1
    split = next((i for i, d in enumerate(dims) if d % 2 == 0), None)
    if split is None:
        split = max(range(len(dims)), key=lambda i: (dims[i], -i))
    return dims[:split] + [-(-dims[split] // 2), 2] + dims[split + 1:], split + 1


def _normal(e: _Emitter, key: int, state, et: P, dims) -> HloInstruction:
    """Box-Muller over pairs of uniforms along the split dim (prng.cc's NormalFloatingPointDistribution)."""
    concat, pair_dim = _split_into_halves(dims)
    u = _uniform01(e, key, state, et, concat)
    half = list(concat)
    half[pair_dim] = 1
    x0 = e.op(O.SLICE, [u], slices=tuple(A.SliceRange(0, d, 1) for d in half))
    x1 = e.op(O.SLICE, [u], slices=tuple(A.SliceRange(1 if i == pair_dim else 0, d, 1)
                                          for i, d in enumerate(concat)))
    u1 = e.binary(O.MAXIMUM, x0, _fconst(e, 1.0e-7, et, half))   # never log(0)
    v1 = e.binary(O.MULTIPLY, x1, _fconst(e, 2.0 * math.pi, et, half))
    r = e.op(O.SQRT, [e.binary(O.MULTIPLY, e.op(O.LOG, [u1]), _fconst(e, -2.0, et, half))])
    pair = e.op(O.CONCATENATE, [e.binary(O.MULTIPLY, e.op(O.SIN, [v1]), r),
                                e.binary(O.MULTIPLY, e.op(O.COS, [v1]), r)], dimensions=(pair_dim,))
    flat = [d for i, d in enumerate(concat) if i != pair_dim]
    flat[pair_dim - 1] *= 2
    z = e.reshape(pair, tuple(flat))
    if flat != list(dims):   # an odd dim was rounded up, or a scalar drawn as a pair
        z = e.op(O.SLICE, [z], slices=tuple(A.SliceRange(0, d, 1) for d in (list(dims) or [1])))
        z = e.reshape(z, tuple(dims))
    return z


def _uniform_int(e: _Emitter, key: int, state, et: P, dims, lo, hi) -> HloInstruction:
    """prng.cc's UniformIntDistribution: lo + (bits mod (hi - lo)) added in two halves, the range
    taken in the unsigned type (so rng(0, -1) spans 2^n - 1 values and the sum wraps)."""
    ut = _UNSIGNED[et.bit_width]
    dims = tuple(dims)
    bits = _draw_bits(e, key, state, et, dims)
    span = e.binary(O.SUBTRACT, e.op(O.BITCAST_CONVERT, [hi], Shape.scalar(ut)),
                    e.op(O.BITCAST_CONVERT, [lo], Shape.scalar(ut)))
    dist = e.binary(O.REMAINDER, bits, e.bcast(span, dims))
    dist_half = e.binary(O.SHIFT_RIGHT_LOGICAL, dist, e.full(1, ut, dims))
    out_shape = Shape.array(et, dims)
    out = e.binary(O.ADD, e.bcast(lo, dims), e.op(O.BITCAST_CONVERT, [dist_half], out_shape))
    rest = e.op(O.BITCAST_CONVERT, [e.binary(O.SUBTRACT, dist, dist_half)], out_shape)
    return e.binary(O.ADD, out, rest)


def expand_rng(g: UseGraph, rng: HloInstruction, key: int) -> HloInstruction:
    """The HLO replacing ``rng`` (its state instruction included)."""
    e = _Emitter(g, rng)
    out = rng.shape
    et, dims = out.element_type, out.dimensions
    a, b = rng.operands
    state = e.op(O.RNG_GET_AND_UPDATE_STATE, [], Shape.array(P.U64, (2,)), delta=words32(out))
    state.control_predecessors = list(rng.control_predecessors)
    if rng.distribution is A.RandomDistribution.NORMAL:
        if not et.is_float:
            raise UnimplementedError(f"%{rng.name}: a normal rng of {et.value} (XLA only draws normal floats)")
        z = _normal(e, key, state, et, dims)
        return e.binary(O.ADD, e.bcast(a, dims), e.binary(O.MULTIPLY, e.bcast(b, dims), z))
    if et.is_float:
        u = _uniform01(e, key, state, et, dims)
        return e.binary(O.ADD, e.binary(O.MULTIPLY, u, e.bcast(e.binary(O.SUBTRACT, b, a), dims)), e.bcast(a, dims))
    if et.is_integral:
        return _uniform_int(e, key, state, et, dims, a, b)
    raise UnimplementedError(f"%{rng.name}: rng of {et.value} is not supported")


class RngExpander(HloPass):
    """``rng`` → rng-get-and-update-state + Philox rng-bit-generator + a distribution (module docstring)."""

    name = "rng-expander"

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in non_fusion_computations(module):
            rngs = [i for i in comp.instructions if i.opcode is O.RNG]
            if not rngs:
                continue
            g = UseGraph(comp)
            for instr in rngs:
                new = expand_rng(g, instr, next_rng_key())
                g.replace_all_uses(instr, new)
                g.remove(instr)   # side-effecting: DCE would keep it
                changed = True
            g.finish()
        return changed
