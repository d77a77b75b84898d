"""RngBitGeneratorExpander for Philox (xla/service/rng_bit_generator_expander.cc + xla/hlo/builder/lib/prng.cc).

Stage: with the other expanders, before simplification. XLA:CPU has no rng-bit-generator kernel: it
rewrites ``rng-bit-generator`` (``rng_philox`` and ``rng_default``) into plain HLO arithmetic, which then
fuses with its consumers like any elementwise code. The u64 state holds the key in word 0 and the
128-bit counter in words 1 and 2 (a two-word state uses the key as the counter's high word). For n
output words of 32 bits, ceil(n/4) counters ``counter + iota`` (carrying into the high word) go
through Philox4x32-10; the four output streams are interleaved, cut to n, narrowed (8/16-bit outputs
keep the low bits) or paired (64-bit outputs join two words), and the new state is the counter
advanced by ceil(n/4). Bit-exact with the evaluator's ``rng-bit-generator``. ThreeFry stays as is.
"""
from __future__ import annotations

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
