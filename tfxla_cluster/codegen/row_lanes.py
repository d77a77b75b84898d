"""Stage: codegen — which small full float sums and products TF's XLA computes in vector lanes, and how many.

TF 2.21's XLA:CPU emits the reduce of x[R, C] to one element as ``for r < R (llvm.loop.unroll.disable):
for c < C: acc = acc ⊕ x[r, c]`` with ``reassoc`` on the combiner. LLVM fully unrolls the column loop, and
its loop vectoriser takes the row loop as a reduction of L = VF·IC lanes: lane 0 starts from the init value,
the others from the identity (1, or -0 for sums); lane j combines rows j, j+L, j+2L, ... each in column
order; then the lanes meet in a shuffle tree, halves first (lane i ⊕ lane i+L/2, ...), and the rows past the
last multiple of L follow one by one. Where values round, overflow, or underflow and flush (FTZ/DAZ), that
order decides the bits: an f64[2, 7] product whose row 1 underflows to 0 while row 0 holds an inf is NaN in
TF's XLA and -inf in order (fuzz seed 104000315).

``row_lanes`` is that choice of LLVM's cost model, measured (not derived) against TF 2.21 on the targets of
``MEASURED_TARGETS`` (vector ISA, ``xla_cpu_prefer_vector_width``): all-axes reduce_sum/reduce_prod of f32
and f64 [R, C] with random inputs whose every reassociation rounds differently (the lane order itself read
from XLA's ``ir-with-opt`` dumps of f64 [2, 7], [12, 2] and [32, 3]):

- AVX-512 (a Zen 4 host, prefer-vector-width 256), R in 1..32, C in 1..12;
- AVX2 (a Zen 3 host: AVX2 + FMA, no AVX-512), R and C in 1..32 (all 4,096 shape × dtype × op cases
  agree with the rule; in order, 2,440 of them differed). Its costs differ: 9-32 columns stay vectorised,
  f64 with 7-8 columns takes 4 lanes where AVX-512 takes 2.
  (TF on the AVX-512 host with ``--xla_cpu_max_isa=AVX2`` agreed where it was tried: f64 with 7-9 columns
  in 4 lanes.)

Where it says 0 the reduction stays in order (``elemental.in_order_reduce``); rank-3 inputs with a size-1
dim and keepdims were measured the same, and a mean (the sum times 1/n) too. More than 32 rows or columns
is no such loop in TF's XLA (its TreeReductionRewriter splits the reduce first).
It is applied only where it was measured: the reduce's input is a parameter of its kernel or a fused
product of loads (other fused producers change LLVM's costs; a product of two loads over two rows stays in
order: ``elemental.row_lane_order``), its last two non-degenerate reduced dimensions are [R, C] in layout
order (reduced dims further out run in order around them, as below), and the target is one of
``MEASURED_TARGETS`` (elsewhere in order rather than guess).

A reduce to more than one element (``per_element``: a pool [N, H, W, C] -> [N, C], a batch norm's sums over
[N, H, W]) is the same loop inside XLA's output loops: the innermost reduced dim C (no loop metadata) is
fully unrolled and the next one out, R, vectorised; reduced dims further out (``unroll.disable``) run in
order around it, each pass starting lane 0 from the running value and the others from the identity, and
ending in the halves-first fold. Measured on AVX2 (f32 and f64 sums and products over 2-4 reduced
dims, R in 1..32, C in 1..32, 1-64 kept channels, the reduce's input a parameter or a fused product
(``tf.nn.moments``, FusedBatchNormGradV3): the same lanes as one element, except that f32 with 8 columns
takes no exception (20 rows: 4 lanes); f32 [32, 32] per element is a YNNPACK fusion in TF's XLA) and on
AVX-512 (Zen 4, 2026-11-29: [3, R, C] over (1, 2) and [3, 2, R, C] over (1, 2, 3), R 2-28, C 2-12, sums of
a parameter, x·x, x·3 and x·y: the same lanes as one element, a fused product's terms FMAs into the lanes
over rows of up to 4 columns and rounded products of two loads from 5 on, a product of one load with no 7-8
column exception: ``loads``), where kept dims inside [R, C] (a pool's channels) vectorise only some inputs and
a row of at most 8 elements leaves a scalar epilogue of rows (``elemental._avx512_kept_inside``,
``elemental._avx512_inner_kept_lanes``).
"""
from __future__ import annotations

from tfxla_cluster.hlo.shape import PrimitiveType as T

AVX512 = ("AVX-512", 256)
AVX2 = ("AVX2", 256)
# The targets (vector ISA, xla_cpu_prefer_vector_width) the rule was measured on.
MEASURED_TARGETS = (AVX512, AVX2)
# The targets its per-element form (a reduce to more than one element) was measured on.
PER_ELEMENT_TARGETS = (AVX2, AVX512)
# The other tables of LLVM's vectorisation choices: elemental.py's kept ±denormal rows of max/min with a scalar
# argument have AVX-512 and AVX2 rows (``_avx2_scalar_arg_kept``: rows and leading columns); reductions.py's
# bf16 max/min lanes were measured on AVX-512 only (on AVX2, 2 of test_bf16_minmax_reduce_lanes' 49 pool
# layout shapes differ, e.g. a row of 36 keeps all 36).


def host_target(options=None) -> tuple[str, int]:
    """``options``' target (default: the flags' host target) as (vector ISA, preferred vector width)."""
    from tfxla_cluster.codegen.options import CodegenOptions
    options = options or CodegenOptions.from_flags()
    return options.cpu_target.info.isa, options.prefer_vector_width
# A trip count under SHORT_TRIPS is vectorised only when the lanes divide it (no scalar remainder loop);
# from there on the rows past the last multiple of the lanes run scalar after the vector loop.
SHORT_TRIPS = 16
# More columns than this: in order (AVX-512: the unrolled row's stride-C loads cost too much; AVX2: vectorised
# up to 32, past that TF's TreeReductionRewriter splits the reduce).
MAX_COLS = {AVX512: 8, AVX2: 32}


def row_lanes(et: T, rows: int, cols: int, target: tuple[str, int] = AVX512, per_element: bool = False,
              loads: int | None = None) -> int:
    """Lanes (VF·IC) TF's XLA sums or multiplies the rows of an [rows, cols] float reduction to one element
    in on ``target`` (one of ``MEASURED_TARGETS``; ``per_element``: to each element of a larger result, one
    of ``PER_ELEMENT_TARGETS``), or 0 (in order). Measured, both ops alike:

    - f64: 2 rows -> 2; 4 -> 4; 8 and 12 -> 4 (AVX-512: 2 with 7-8 columns); other rows under 16 -> 0;
      from 16 on 4 (AVX-512: 2 with 7-8 columns).
    - f32: 2 -> 2; 4 -> 4; 8 -> 8; other rows under 16 -> 0; from 16 on 8, or 4 where 8 would leave 4-7
      rows to the scalar remainder. AVX-512: from 28 rows on with 2 columns 8 anyway, and 4 with 7-8
      columns; AVX2: 8 anyway with 8 columns (to one element only).
    - one column, or more than ``MAX_COLS``: 0.

    ``loads``: the reduce's input is a fused product of that many loaded values (``elemental._product_loads``;
    None: a buffer). On AVX-512 the 7-8 column exceptions are the buffer's and a product of two loads'
    (which also takes 2 lanes for f64 with 4 rows and 4 for f32 with 8); a product of one load (x·x, x·3)
    has none (measured on Zen 4 from TF 2.21's ``ir-with-opt`` lanes: f32/f64 [R, C] and [3, R, C] over
    (1, 2), R 5-32, C 2-12, to one element and per element alike)."""
    if per_element and target not in PER_ELEMENT_TARGETS:
        return 0
    if et not in (T.F32, T.F64) or rows < 2 or not 2 <= cols <= MAX_COLS[target]:
        return 0
    avx512 = target == AVX512
    wide = avx512 and cols >= 7 and loads != 1    # the AVX-512 7-8 column exceptions
    if rows < SHORT_TRIPS:
        if wide and loads == 2 and (rows, et) in ((4, T.F64), (8, T.F32)):
            return rows // 2
        if rows in (2, 4):
            return rows
        if et is T.F64:
            return (2 if wide else 4) if rows in (8, 12) else 0
        return 8 if rows == 8 else 0
    if et is T.F64:
        return 2 if wide else 4
    if wide:
        return 4
    return 8 if rows % 8 < 4 or (avx512 and cols == 2 and rows >= 28) or (not avx512 and cols == 8 and not per_element) else 4
