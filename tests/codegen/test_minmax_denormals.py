"""Max/min of ±denormals bit for bit against TF's XLA where its x86 code keeps or flushes them by how it
vectorises: scatter combiners (``unsorted_segment_max``/``min``) by window size, bf16 max/min with a broadcast
operand by row length (DAZ: ``vmaxss``/``vmaxps`` return ±0, a compare and blend keeps the bits), and f32/f64
max/min with a constant in loop nests whose rows are shorter than 16 (TF's flush; ours would run them as
masked vectors, which blend)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.codegen.row_lanes import AVX2, host_target

# Shapes whose kept ±denormals were measured on an AVX2 host only (their AVX-512 rows are not known).
avx2_measured = pytest.mark.skipif(host_target() != AVX2, reason="measured on an AVX2 host only")

DEN = np.float32(2.938735877055719e-39)


def _denormals(shape, dtype, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    tiny = np.finfo(np.float64 if dtype == np.float64 else np.float32).tiny
    x = rng.choice([tiny / 4, -tiny / 4, tiny / 2, 0.0, -0.0], size=shape)
    return x.astype(dtype)


def _assert_bits(fn, *args) -> None:
    want = tf.function(fn, jit_compile=True)(*args).numpy()
    got = txc.function(fn, jit_compile=True)(*args).numpy()
    assert want.tobytes() == got.tobytes(), f"TF's XLA {want.astype(np.float64).tolist()} ours {got.astype(np.float64).tolist()}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16], ids=["f32", "f64", "bf16"])
@pytest.mark.parametrize("window", [2, 3, 4, 12, 17])
def test_segment_max_min_window(dtype, window):
    x = _denormals((5, window), dtype, window)
    ids = tf.constant([0, 1, 0, 2, 1])
    _assert_bits(lambda v: tf.math.unsorted_segment_max(v, ids, 3), x)
    _assert_bits(lambda v: tf.math.unsorted_segment_min(v, ids, 3), x)


@pytest.mark.parametrize("shape,yshape", [((5, 3), (1, 3)), ((7, 5), (1, 5)), ((3, 24), (1, 24)), ((2, 33), (1, 33)),
                                          ((32,), ()), ((6, 4), (6, 1))])
def test_bf16_max_min_broadcast_operand(shape, yshape):
    x = _denormals(shape, ml_dtypes.bfloat16, 1)
    y = np.zeros(yshape, ml_dtypes.bfloat16)
    _assert_bits(tf.maximum, x, y)
    _assert_bits(tf.minimum, x, y)


def test_sub_denormal_constant_is_not_zero():
    """XLA's IsAll compares without DAZ: ``x - 2.9e-39`` is an add that flushes, not ``x``."""
    x = np.array([DEN, -2 * DEN, 1.0], np.float32)
    _assert_bits(lambda v: v - tf.constant(DEN), x)
    _assert_bits(lambda v: v + tf.constant(-0.0), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16], ids=["f32", "f64", "bf16"])
@pytest.mark.parametrize("n", [3, 15, 64])
def test_max_min_of_one_value_is_that_value(dtype, n):
    """XLA's simplifier turns max(x, x) and min(x, x) into x: the denormals survive at every length (a short
    loop's max under DAZ would flush them; fuzz seed 102000857)."""
    x = _denormals((n,), dtype, n)
    _assert_bits(lambda v: tf.maximum(v, v), x)
    _assert_bits(lambda v: tf.minimum(v * 1.0, v), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", [(5, 3, 3), (7, 5), (40, 3), (9, 7), (6, 13), (2, 2, 6),
                                   (3, 17)])
def test_max_min_constant_in_short_rows(dtype, shape):
    """A reverse or transpose makes the loop a nest of rows (seed 91910275730041: relu of a reversed f64[5,3,3]
    kept a -denormal TF's XLA returns as -0). Expectations from TF's XLA on this host (AVX-512 or AVX2)."""
    x = _denormals(shape, dtype, sum(shape))
    _assert_bits(lambda v: tf.nn.relu(tf.reverse(v, [0])), x)
    _assert_bits(lambda v: tf.minimum(tf.transpose(v), 0.0), x)
    _assert_bits(lambda v: tf.clip_by_value(tf.reverse(v, [v.shape.rank - 1]), -1.0, 0.0), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", [(40, 3), (17, 5), (47, 2), (52, 4), (44, 3), (16, 8), (12, 6), (8, 2), (19, 7),
                                   (60, 7), (36, 6), (40, 16), (40, 1)])
def test_max_min_scalar_argument_over_short_rows(dtype, shape):
    """``max(x, s)`` with a scalar argument over [N, 2..8]: TF's XLA vectorises across rows and keeps a
    ±denormal's bits in the rows its vector loops cover (multiples of 4 or 8 by N and the row length; f64 all
    of N = 8) and, on AVX2, in the leading columns of those rows, flushing the rest; swapped operands flush
    every row, a reverse (AVX-512) too. Expectations from TF's XLA on this host (AVX-512 or AVX2)."""
    x = _denormals(shape, dtype, sum(shape))
    s = np.asarray(0.0, dtype)
    _assert_bits(lambda v, a: tf.maximum(v, a), x, s)
    _assert_bits(lambda v, a: tf.minimum(v, a), x, s)
    _assert_bits(lambda v, a: tf.maximum(a, v), x, s)
    _assert_bits(lambda v, a: tf.minimum(tf.reverse(v, [0]), a), x, s)


@avx2_measured
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", [(4, 3), (4, 4), (2, 6), (20, 3), (24, 3), (28, 6), (68, 6), (20, 8), (36, 5),
                                   (12, 7), (44, 4), (52, 6)])
def test_max_min_scalar_argument_columns_on_avx2(dtype, shape):
    """AVX2: f32 rows by 4 lanes keep fewer leading columns than by 8 (W = 3: 2 of 3, W = 6: 4 of 6), rows of 5
    and 7 flush their last column, f32 N = 4 keeps unless W is 2 or 4, a reversed [2, W] keeps (elemental
    ``_avx2_scalar_arg_kept``)."""
    x = _denormals(shape, dtype, sum(shape) + 1)
    s = np.asarray(0.0, dtype)
    _assert_bits(lambda v, a: tf.maximum(v, a), x, s)
    _assert_bits(lambda v, a: tf.minimum(v, a), x, s)
    _assert_bits(lambda v, a: tf.minimum(tf.reverse(v, [0]), a), x, s)
    _assert_bits(lambda v, a: tf.maximum(tf.reverse(v, [0]), a), x[:2], s)


@avx2_measured
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", [(4, 3), (4, 4), (8, 3), (8, 5), (20, 3), (20, 4), (24, 6), (36, 7), (44, 2)])
def test_relu_and_min_with_a_constant_on_avx2(dtype, shape):
    """AVX2: ``max(x, 0)`` / ``min(x, 0)`` over [N, 2..8] keep rows like a scalar argument's, except N = 4 and
    f32 N = 8 (kept) and f32's 4-lane loops (flushed unless W = 4)."""
    x = _denormals(shape, dtype, sum(shape) + 2)
    _assert_bits(tf.nn.relu, x)
    _assert_bits(lambda v: tf.minimum(v, 0.0), x)


@avx2_measured
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", [(2, 6), (2, 5), (4, 5), (4, 4), (6, 7), (8, 5), (8, 7), (8, 8), (12, 7),
                                   (16, 5), (19, 7), (21, 5), (23, 7), (27, 5), (37, 8), (40, 4), (9, 13)])
def test_relu_of_reversed_rows_on_avx2(dtype, shape):
    """AVX2: ``relu(reverse(x, [0]))`` keeps only rows of 5 and 7 (all but the last column) and f64's rows of 8,
    in rows by VF lanes (f32 8, f64 4; under 16 rows only all of N a multiple of VF; f32 N of 20-23 none, its
    4-lane loop) and f32's [2, 6] its last two columns; everything else flushes."""
    x = np.abs(_denormals(shape, dtype, sum(shape) + 3))
    _assert_bits(lambda v: tf.nn.relu(tf.reverse(v, [0])), x)
    _assert_bits(lambda v: tf.nn.relu(tf.reverse(v, [0])), -x)


@avx2_measured
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", [(3, 8), (5, 16), (6, 17), (7, 4), (8, 12), (4, 9), (2, 8), (9, 8)])
def test_min_of_transposed_rows_on_avx2(dtype, shape):
    """AVX2: ``min(transpose(x), 0)`` of x [W, N] keeps, in the transposed rows by VF lanes (N a multiple of VF
    up to 16, or the first 16 of 17), x's leading rows of the f32 4-lane interleave groups (W of 3-8)."""
    x = _denormals(shape, dtype, sum(shape) + 5)
    _assert_bits(lambda v: tf.minimum(tf.transpose(v), 0.0), -np.abs(x))


@avx2_measured
@pytest.mark.parametrize("shape", [(15,), (2,), (1,), (5, 3), (3, 1), (2, 3, 4), (3, 5, 1), (17, 9)])
def test_bf16_max_min_of_two_arguments_on_avx2(shape):
    """AVX2: a bf16 max/min of two unbroadcast operands keeps every ±denormal unless the innermost dimension is
    1 (fuzz seed 192000706: bf16 maximum [5, 3])."""
    x = _denormals(shape, ml_dtypes.bfloat16, 3)
    y = _denormals(shape, ml_dtypes.bfloat16, 4)
    y.ravel()[::3] = -1.0
    _assert_bits(tf.maximum, x, y)
    _assert_bits(tf.minimum, -x, -y)


_SELECT_VALUES = [1 / 8, -1 / 8, 0.0, -0.0, np.nan, 1.5, -1.5]   # ×tiny for the first two: ±denormals


def _cond(pred, then, other):
    return lambda x: tf.cond(pred(x), lambda: then(x), lambda: other(x))


_gt = lambda x: tf.reduce_any(x > 0)                      # noqa: E731
_nonzero = lambda x: tf.reduce_all(tf.cast(x, tf.bool))   # noqa: E731


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,fn", [
    ("x!=0 ? x*x : relu", _cond(_nonzero, tf.square, tf.nn.relu)),          # relu is x there (seed 129001341)
    ("x>0 ? relu : -x", _cond(_gt, tf.nn.relu, tf.negative)),                # vmaxss(x, -x) (seed 156001380)
    ("where(x>0, relu, -x)", lambda x: tf.where(x > 0, tf.nn.relu(x), -x)),
    ("where(x!=0, x*x, relu)", lambda x: tf.where(x != 0, x * x, tf.nn.relu(x))),
    ("x!=0 ? relu : x*x", _cond(_nonzero, tf.nn.relu, tf.square)),          # plain selects
    ("x>0 ? -x : relu", _cond(_gt, tf.negative, tf.nn.relu)),
    ("x<0 ? -x : relu", _cond(lambda x: tf.reduce_any(x < 0), tf.negative, tf.nn.relu)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_select_arm_that_llvm_knows_the_predicate_in(dtype, name, fn):
    """A cond of a scalar (or a tf.where) is one loop fusion's select; TF's LLVM simplifies an arm knowing the
    predicate, which decides a ±denormal's bits under DAZ (elemental ``_select_arms_llvm_knows``)."""
    tiny = np.finfo(dtype).tiny
    for v in _SELECT_VALUES:
        x = dtype(v * tiny if abs(v) < 1 else v)
        _assert_bits(fn, x if "where" not in name else np.full(5, x, dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", [(1,), (5,), (8,), (15,), (16,), (40,), (3, 5), (7, 3)])
def test_max_min_of_a_negation_keeps_denormals(dtype, shape):
    """relu(-x), min(-x, 0), max(0, -x), relu(-|x|): LLVM folds the negation into XLA's compare, so no x86
    max/min is left to flush a ±denormal under DAZ, where relu(x) of the same short loop flushes (fuzz seed
    176000602: relu of an ascending sort, which XLA sorts negated)."""
    x = _denormals(shape, dtype, sum(shape))
    _assert_bits(lambda v: tf.nn.relu(-v), x)
    _assert_bits(lambda v: tf.minimum(-v, 0.0), x)
    _assert_bits(lambda v: tf.maximum(tf.zeros_like(v), -v), x)
    _assert_bits(lambda v: tf.nn.relu(-tf.abs(v)), x)
    _assert_bits(lambda v: tf.nn.relu(tf.sort(v)), x.ravel())
