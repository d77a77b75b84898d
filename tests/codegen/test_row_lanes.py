"""Small full float sums and products in TF's XLA's vector-lane order (``codegen/row_lanes.py``).

TF 2.21's XLA marks a reduce's combiner ``reassoc`` and LLVM vectorises the row loop of an all-axes sum or
product of [R, C]: lane j takes rows j, j+L, ..., the lanes meet halves first, the remaining rows follow in
order; elsewhere (odd short row counts, one column, more than 8) the fold stays in order. With infinities,
overflowing, underflowing (flushed: FTZ/DAZ) and NaN values the order decides the bits (fuzz seed 104000315:
f64[2, 7], ours was -inf, TF's XLA NaN). Expectations come from TF's XLA, computed here."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.codegen.row_lanes import AVX2, AVX512, MEASURED_TARGETS, host_target, row_lanes
from tfxla_cluster.hlo.shape import PrimitiveType as T

# One shape per branch of the rule on either measured target (lanes 2, 4 and 8, a scalar remainder, 7-8
# columns, AVX2's 9-32 columns) and some that stay in order (odd short row counts, one column).
SHAPES = {
    np.float64: [(2, 7), (4, 3), (8, 6), (8, 7), (12, 5), (12, 8), (17, 3), (18, 8), (31, 6), (32, 2), (6, 4),
                 (9, 4), (2, 9), (5, 1), (8, 12), (20, 17), (4, 32)],
    np.float32: [(2, 5), (4, 8), (8, 3), (16, 6), (20, 3), (20, 7), (28, 2), (29, 5), (19, 4), (32, 8), (12, 4),
                 (5, 5), (8, 9), (20, 8), (30, 8), (23, 11), (16, 24), (2, 32)],
}


def _values(rng, dtype, shape, prod: bool, special: float) -> np.ndarray:
    """Ordinary values (every reassociation rounds differently) among infinities, huge values that overflow,
    tiny ones whose products underflow and flush, denormals (DAZ), zeros of both signs and NaN (a fraction
    ``special`` of them)."""
    fi = np.finfo(dtype)
    n = int(np.prod(shape))
    ordinary = rng.uniform(0.5, 2, n) if prod else rng.normal(size=n) * 10.0 ** rng.integers(-1, 2, n)
    specials = np.array([np.inf, -np.inf, fi.max / 2, fi.max ** 0.75, fi.tiny, fi.tiny * 3, fi.tiny ** 0.75,
                         fi.tiny / 4, 0.0, -0.0, np.nan])
    pick = rng.random(n) < special
    v = np.where(pick, rng.choice(specials, n), ordinary) * rng.choice([-1.0, 1.0], n)
    return v.astype(dtype).reshape(shape)


def _same_bits(want: np.ndarray, got: np.ndarray) -> np.ndarray:
    return (want == got) & (np.signbit(want) == np.signbit(got)) | (np.isnan(want) & np.isnan(got))


measured = pytest.mark.skipif(host_target() not in MEASURED_TARGETS,
                              reason=f"TF's lanes measured on {MEASURED_TARGETS} only, this target is {host_target()}")


@measured
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_full_sums_and_products_equal_tf_xla_bitwise(dtype):
    """All axes of [R, C] (sum, product, mean, product with keepdims) and axes [0, 1] of [R, C, 1]."""
    shapes = SHAPES[dtype] + [(r, c, 1) for r, c in SHAPES[dtype][:4]]
    ops = (("sum", tf.reduce_sum), ("prod", tf.reduce_prod), ("mean", tf.reduce_mean),
           ("prod keepdims", lambda x, axis=None: tf.reduce_prod(x, axis, keepdims=True)))

    @tf.autograph.experimental.do_not_convert
    def f(*xs):
        return [op(x, [0, 1] if x.shape.rank == 3 else None) for x in xs for _, op in ops]
    rng = np.random.default_rng(104000315)
    want_f, got_f = tf.function(f, jit_compile=True), txc.function(f, jit_compile=True)
    for trial, special in enumerate((0, 0, 0.05, 0.05, 0.2, 0.2)):
        # sums and products share the inputs: alternate which op they are made for
        xs = [_values(rng, dtype, s, trial % 2 == 0, special) for s in shapes]
        want = [w.numpy().ravel() for w in want_f(*xs)]
        got = [np.asarray(g).ravel() for g in got_f(*xs)]
        for k, (w, g) in enumerate(zip(want, got)):
            shape, what = shapes[k // len(ops)], ops[k % len(ops)][0]
            assert _same_bits(w, g).all(), (trial, shape, what, g, w, xs[k // len(ops)])


@measured
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_product_feeding_an_add_contracts_as_tf_xla(dtype):
    """sum(x) + prod(x): with no rows left after the lanes, the lanes' last product is contracted into the add
    (an FMA) as in TF's XLA; with rows left, TF's scalar loop for them keeps its last product apart."""
    shapes = [(2, 7), (4, 3), (8, 3), (16, 5), (17, 5), (18, 3), (20, 7)]

    @tf.autograph.experimental.do_not_convert
    def f(*xs):
        return [tf.reduce_sum(x) + tf.reduce_prod(x) for x in xs]
    rng = np.random.default_rng(7)
    want_f, got_f = tf.function(f, jit_compile=True), txc.function(f, jit_compile=True)
    for trial in range(4):
        xs = [_values(rng, dtype, s, True, 0) for s in shapes]
        for shape, w, g in zip(shapes, want_f(*xs), got_f(*xs)):
            w, g = w.numpy(), np.asarray(g)
            assert _same_bits(w, g), (trial, shape, g, w)


@measured
def test_the_seed_104000315_product_is_nan():
    x = np.array([[-0.6033184244942766, 72.6124353480109, np.inf, -0.6408090809993686, -5.141306493321731,
                   -0.39697918750679007, -1.8117982926942262],
                  [-0.25209703255577326, 1.928818825880874, 2.2250738585072014e-308, -0.27833023896447384,
                   9.719510567211534, -58.67878765083281, -0.7373365977639862]])
    got = txc.function(lambda a: tf.reduce_prod(a, axis=[0, 1], keepdims=True), jit_compile=True)(x)
    assert np.isnan(np.asarray(got)).all()   # row 1 underflows to 0 (FTZ) and meets row 0's inf


def test_lane_rule_table():
    """The measured AVX-512 table's corners (TF 2.21's LLVM cost model; see row_lanes's docstring)."""
    f64 = [row_lanes(T.F64, r, 3) for r in range(1, 20)]
    assert f64 == [0, 2, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 4, 4, 4]
    assert [row_lanes(T.F64, r, 7) for r in (2, 4, 6, 8, 12, 16, 17)] == [2, 4, 0, 2, 2, 2, 2]
    assert [row_lanes(T.F32, r, 4) for r in (2, 4, 8, 12, 16, 19, 20, 23, 24, 28, 32)] == [2, 4, 8, 0, 8, 8, 4, 4,
                                                                                          8, 4, 8]
    assert [row_lanes(T.F32, r, 2) for r in (20, 27, 28, 31)] == [4, 8, 8, 8]
    assert [row_lanes(T.F32, r, 8) for r in (8, 16, 32)] == [8, 4, 4]
    assert row_lanes(T.F32, 8, 1) == row_lanes(T.F64, 8, 9) == row_lanes(T.F16, 8, 4) == 0
    # a fused product of one load has no 7-8 column exceptions; of two loads, they reach 4 f64 and 8 f32 rows
    assert [row_lanes(T.F64, r, 8, loads=1) for r in (4, 8, 12, 16)] == [4, 4, 4, 4]
    assert [row_lanes(T.F32, r, 7, loads=1) for r in (8, 16, 20, 28)] == [8, 8, 4, 4]
    assert [row_lanes(T.F64, r, 7, loads=2) for r in (2, 4, 8, 16)] == [2, 2, 2, 2]
    assert [row_lanes(T.F32, r, 8, loads=2) for r in (4, 8, 16, 24)] == [4, 4, 4, 4]
    assert row_lanes(T.F64, 4, 6, loads=2) == 4 and row_lanes(T.F64, 8, 9, loads=1) == 0


def test_lane_rule_table_avx2():
    """The measured AVX2 (Zen 3) table's corners: f64 takes 4 lanes with any 2-32 columns, f32 keeps 8 lanes
    with 8 columns, 9-32 columns are vectorised too."""
    assert [row_lanes(T.F64, r, 3, AVX2) for r in range(1, 20)] == [0, 2, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0,
                                                                     4, 4, 4, 4]
    assert [row_lanes(T.F64, r, 7, AVX2) for r in (2, 4, 6, 8, 12, 16, 17)] == [2, 4, 0, 4, 4, 4, 4]
    assert [row_lanes(T.F32, r, 4, AVX2) for r in (2, 4, 8, 12, 16, 19, 20, 23, 24, 28, 32)] == [2, 4, 8, 0, 8, 8, 4,
                                                                                               4, 8, 4, 8]
    assert [row_lanes(T.F32, r, 2, AVX2) for r in (20, 27, 28, 31)] == [4, 8, 4, 4]
    assert [row_lanes(T.F32, r, 8, AVX2) for r in (8, 16, 20, 28, 32)] == [8, 8, 8, 8, 8]
    assert [row_lanes(T.F32, 20, c, AVX2) for c in (1, 7, 9, 32, 33)] == [0, 4, 4, 4, 0]
    assert row_lanes(T.F64, 8, 32, AVX2) == 4 and row_lanes(T.F64, 8, 33, AVX2) == 0


def test_lane_rule_table_per_element():
    """To each element of a larger result (measured on AVX2, Zen 3: a sweep of [N, R, C, K] summed over
    (1, 2) and (0, 1, 2)): as to one element, except that f32 with 8 columns takes no exception; on AVX-512
    (Zen 4, [3, R, C] over (1, 2)) as to one element (which kept dims allow it: elemental.row_lane_order)."""
    assert [row_lanes(T.F32, r, 8, AVX2, per_element=True) for r in (8, 16, 20, 28, 32)] == [8, 8, 4, 4, 8]
    assert [row_lanes(T.F32, r, 5, AVX2, per_element=True) for r in (2, 3, 4, 12, 16, 17, 20)] == [2, 0, 4, 0, 8, 8, 4]
    assert [row_lanes(T.F64, r, 8, AVX2, per_element=True) for r in (2, 4, 5, 8, 16, 20)] == [2, 4, 0, 4, 4, 4]
    for et, r, c in ((T.F32, 8, 8), (T.F64, 8, 8), (T.F32, 20, 3), (T.F64, 4, 5), (T.F32, 5, 3)):
        assert row_lanes(et, r, c, AVX512, per_element=True) == row_lanes(et, r, c, AVX512)
    assert [row_lanes(T.F32, 8, 8, AVX512, per_element=True), row_lanes(T.F64, 8, 8, AVX512, per_element=True)] == [8, 2]
