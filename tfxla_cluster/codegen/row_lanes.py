"""Stage: codegen — which small full float sums and products TF's XLA computes in vector lanes, and how many.

TF 2.21's XLA:CPU emits the reduce of x[R, C] to one element as ``for r < R (llvm.loop.unroll.disable):
for c < C: acc = acc ⊕ x[r, c]`` with ``reassoc`` on the combiner. LLVM fully unrolls the column loop, and
its loop vectoriser takes the row loop as a reduction of L = VF·IC lanes: lane 0 starts from the init value,
the others from the identity (1, or -0 for sums); lane j combines rows j, j+L, j+2L, ... each in column
order; then the lanes meet in a shuffle tree, halves first (lane i ⊕ lane i+L/2, ...), and the rows past the
last multiple of L follow one by one. Where values round, overflow, or underflow and flush (FTZ/DAZ), that
order decides the bits: an f64[2, 7] product whose row 1 underflows to 0 while row 0 holds an inf is NaN in
TF's XLA and -inf in order (fuzz seed 104000315).

``row_lanes`` is that choice of LLVM's cost model, measured (not derived) against TF 2.21 on each target it
knows (:data:`MEASURED_TARGETS`: vector ISA and ``xla_cpu_prefer_vector_width``): all-axes reduce_sum/reduce_prod
of f32 and f64 [R, C] for R in 1..32 and C in 1..12, with random inputs whose every reassociation rounds
differently (the lane order itself read from XLA's ``ir-with-opt`` dumps of f64 [2, 7], [12, 2] and [32, 3]).
The costs are the target's: an AVX2 host (Zen 3) takes 4 f64 lanes where AVX-512 takes 2 (7-8 columns) or
none (9+), so a target not measured keeps the reductions in order rather than guess. Where it says 0 the
reduction stays in order (``elemental.in_order_reduce``); rank-3 inputs with a size-1 dim and keepdims were
measured the same, and a mean (the sum times 1/n) too.
It is applied only where it was measured: the reduce's input is a parameter of its kernel (a fused
producer changes LLVM's costs), its two non-degenerate reduced dimensions are [R, C] in layout order, and
its result is one element.
"""
from __future__ import annotations

from tfxla_cluster.hlo.shape import PrimitiveType as T

AVX512 = ("AVX-512", 256)   # (vector ISA, xla_cpu_prefer_vector_width): TF's default on AVX-512 hosts
AVX2 = ("AVX2", 256)
# The target the first tables (row lanes here, elemental's bf16 splats) were measured on.
MEASURED_TARGET = AVX512
# A trip count under SHORT_TRIPS is vectorised only when the lanes divide it (no scalar remainder loop);
# from there on the rows past the last multiple of the lanes run scalar after the vector loop.
SHORT_TRIPS = 16
# Per target, the most columns measured; on AVX-512 from 9 columns on the unrolled row's stride-C loads cost
# too much (in order), on AVX2 12 is as far as it was measured.
MAX_COLS = {AVX512: 8, AVX2: 12}
MEASURED_TARGETS = tuple(MAX_COLS)


def row_lanes(et: T, rows: int, cols: int, target: tuple[str, int]) -> int:
    """Lanes (VF·IC) TF's XLA sums or multiplies the rows of an [rows, cols] float reduction to one element
    in on ``target`` (vector ISA, preferred width), or 0 (in order). Measured, both ops alike:

    - both targets, rows under 16: 2 rows -> 2; 4 -> 4; f32 8 -> 8; f64 8 and 12 -> 4 (AVX-512: 2 with 7-8
      columns); other rows -> 0.
    - AVX-512, from 16 rows on: f64 4 (2 with 7-8 columns); f32 8, or 4 where 8 would leave 4-7 rows to the
      scalar remainder (from 28 rows on with 2 columns, 8 anyway); with 7-8 columns 4.
    - AVX2, from 16 rows on: f64 4; f32 8, or 4 where 8 would leave 4-7 rows (8 anyway with 8 columns).
    - one column, more than the target's MAX_COLS, or a target not measured: 0."""
    if et not in (T.F32, T.F64) or rows < 2 or not 2 <= cols <= MAX_COLS.get(target, 0):
        return 0
    wide = target == AVX512   # its 7-8 column rows halve the lanes
    if rows < SHORT_TRIPS:
        if rows in (2, 4):
            return rows
        if et is T.F64:
            return (2 if wide and cols >= 7 else 4) if rows in (8, 12) else 0
        return 8 if rows == 8 else 0
    if et is T.F64:
        return 2 if wide and cols >= 7 else 4
    if wide:
        if cols >= 7:
            return 4
        return 8 if rows % 8 < 4 or (cols == 2 and rows >= 28) else 4
    return 8 if rows % 8 < 4 or cols == 8 else 4
