"""Stage: codegen — which small full float sums and products TF's XLA computes in vector lanes, and how many.

TF 2.21's XLA:CPU emits the reduce of x[R, C] to one element as ``for r < R (llvm.loop.unroll.disable):
for c < C: acc = acc ⊕ x[r, c]`` with ``reassoc`` on the combiner. LLVM fully unrolls the column loop, and
its loop vectoriser takes the row loop as a reduction of L = VF·IC lanes: lane 0 starts from the init value,
the others from the identity (1, or -0 for sums); lane j combines rows j, j+L, j+2L, ... each in column
order; then the lanes meet in a shuffle tree, halves first (lane i ⊕ lane i+L/2, ...), and the rows past the
last multiple of L follow one by one. Where values round, overflow, or underflow and flush (FTZ/DAZ), that
order decides the bits: an f64[2, 7] product whose row 1 underflows to 0 while row 0 holds an inf is NaN in
TF's XLA and -inf in order (fuzz seed 104000315).

``row_lanes`` is that choice of LLVM's cost model, measured (not derived) against TF 2.21 on an AVX-512
host (``prefer-vector-width=256``: ``MEASURED_TARGET``): all-axes reduce_sum/reduce_prod of f32 and f64
[R, C] for R in 1..32 and C in 1..12, with random inputs whose every reassociation rounds differently (the
lane order itself read from XLA's ``ir-with-opt`` dumps of f64 [2, 7], [12, 2] and [32, 3]). Where it says
0 the reduction stays in order (``elemental.in_order_reduce``); rank-3 inputs with a size-1 dim and
keepdims were measured the same, and a mean (the sum times 1/n) too.
It is applied only where it was measured: the reduce's input is a parameter of its kernel (a fused
producer changes LLVM's costs), its two non-degenerate reduced dimensions are [R, C] in layout order, and
its result is one element.
"""
from __future__ import annotations

from tfxla_cluster.hlo.shape import PrimitiveType as T

# The target (vector ISA, xla_cpu_prefer_vector_width) the table was measured on. LLVM's costs are the target's:
# with --xla_cpu_max_isa=AVX2 TF's lanes differ (e.g. f64 with 7-9 columns takes 4 lanes), so elsewhere the
# reductions stay in order rather than guess. The other tables of LLVM's vectorisation choices (elemental.py's
# kept ±denormal rows of max/min, reductions.py's row-vector and bf16 max/min lanes) were measured on it too:
# on an AVX2 host (Zen 3, 2026-11-28) TF's XLA keeps or flushes a max/min's denormals per element within a
# row for f32 rows of 3 and 5, and sums an f32 [N, 8, 8, 16] pool in 8 lanes over W (not modelled).
MEASURED_TARGET = ("AVX-512", 256)


def on_measured_target(options=None) -> bool:
    """Whether ``options``' target (default: the flags' host target) is ``MEASURED_TARGET``."""
    from tfxla_cluster.codegen.context import CodegenOptions
    options = options or CodegenOptions.from_flags()
    return (options.cpu_target.info.isa, options.prefer_vector_width) == MEASURED_TARGET
# A trip count under SHORT_TRIPS is vectorised only when the lanes divide it (no scalar remainder loop);
# from there on the rows past the last multiple of the lanes run scalar after the vector loop.
SHORT_TRIPS = 16
MAX_COLS = 8   # from 9 columns on, the unrolled row's stride-C loads cost too much: in order


def row_lanes(et: T, rows: int, cols: int) -> int:
    """Lanes (VF·IC) TF's XLA sums or multiplies the rows of an [rows, cols] float reduction to one element
    in, or 0 (in order). Measured, both ops alike:

    - f64: 2 rows -> 2; 4 -> 4; 8 and 12 -> 4 (2 with 7-8 columns); other rows under 16 -> 0; from 16 on
      4 (2 with 7-8 columns).
    - f32: 2 -> 2; 4 -> 4; 8 -> 8; other rows under 16 -> 0; from 16 on 8, or 4 where 8 would leave 4-7 rows
      to the scalar remainder (from 28 rows on with 2 columns, 8 anyway); with 7-8 columns 4.
    - one column, or more than MAX_COLS: 0."""
    if et not in (T.F32, T.F64) or rows < 2 or not 2 <= cols <= MAX_COLS:
        return 0
    if rows < SHORT_TRIPS:
        if rows in (2, 4):
            return rows
        if et is T.F64:
            return (4 if cols <= 6 else 2) if rows in (8, 12) else 0
        return 8 if rows == 8 else 0
    if et is T.F64:
        return 4 if cols <= 6 else 2
    if cols >= 7:
        return 4
    return 8 if rows % 8 < 4 or (cols == 2 and rows >= 28) else 4
