"""Reference evaluator: per-opcode semantics against hand-derived values and numpy."""
import math

import ml_dtypes
import numpy as np
import pytest

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo import attrs as A
from tfxla_cluster.hlo.builder import HloBuilder, make_comparator, make_scalar_computation
from tfxla_cluster.hlo.evaluator import evaluate
from tfxla_cluster.hlo.ir import HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape, primitive_type_from_dtype

NAN, INF = float("nan"), float("inf")


def module_of(build, *arg_arrays):
    """Build a module whose parameters match ``arg_arrays``; ``build(b, *params)`` returns the root."""
    b = HloBuilder("main")
    params = [b.parameter(i, Shape.array(primitive_type_from_dtype(a.dtype), a.shape), f"p{i}")
              for i, a in enumerate(arg_arrays)]
    root = build(b, *params)
    m = HloModule("m")
    m.add_entry_computation(b.build(root))
    return m


def run(build, *args):
    args = [np.asarray(a) for a in args]
    m = module_of(build, *args)
    # Everything the evaluator runs must also survive print → parse.
    again = parse_module(m.to_string())
    out = evaluate(m, *args)
    out2 = evaluate(again, *args)
    for x, y in zip(out if isinstance(out, tuple) else [out], out2 if isinstance(out2, tuple) else [out2]):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    return out


def same(got, want):
    """Bit-level equality for floats (NaN == NaN, -0 != +0), value equality otherwise."""
    got, want = np.asarray(got), np.asarray(want, dtype=got.dtype)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if got.dtype.kind == "c":
        same(got.real, want.real)
        same(got.imag, want.imag)
    elif got.dtype.kind == "f" or got.dtype == ml_dtypes.bfloat16:
        g, w = got.astype(np.float64), want.astype(np.float64)
        assert np.array_equal(np.isnan(g), np.isnan(w)), (got, want)
        g, w = np.where(np.isnan(g), 0, g), np.where(np.isnan(w), 0, w)
        assert np.array_equal(g, w) and np.array_equal(np.signbit(g), np.signbit(w)), (got, want)
    else:
        assert np.array_equal(got, want), (got, want)


def unary(op, values, dtype):
    return run(lambda b, x: b.unary(op, x), np.array(values, dtype=dtype))


def binary(op, a, b_, dtype):
    return run(lambda b, x, y: b.binary(op, x, y), np.array(a, dtype=dtype), np.array(b_, dtype=dtype))


# ---------------------------------------------------------------- integer arithmetic edge cases
I32_MIN, I32_MAX = -2 ** 31, 2 ** 31 - 1


def test_signed_divide_truncates_and_handles_zero_and_overflow():
    got = binary(O.DIVIDE, [7, -7, 7, -7, 5, I32_MIN, I32_MIN, 0], [2, 2, -2, -2, 0, -1, 1, 0], np.int32)
    same(got, [3, -3, -3, 3, -1, I32_MIN, I32_MIN, -1])


def test_unsigned_divide_by_zero_is_all_ones():
    same(binary(O.DIVIDE, [7, 0, 255], [0, 0, 2], np.uint8), [255, 255, 127])
    same(binary(O.DIVIDE, [2 ** 64 - 1], [0], np.uint64), [2 ** 64 - 1])


def test_remainder_takes_dividend_sign_and_x_mod_zero_is_x():
    same(binary(O.REMAINDER, [7, -7, 7, -7, 5, I32_MIN], [3, 3, -3, -3, 0, -1], np.int32), [1, -1, 1, -1, 5, 0])
    same(binary(O.REMAINDER, [7, 9], [0, 4], np.uint32), [7, 1])
    same(binary(O.REMAINDER, [5.5, -5.5, 1.0, INF], [2.0, 2.0, 0.0, 2.0], np.float32), [1.5, -1.5, NAN, NAN])


def test_shifts_saturate_out_of_range_amounts():
    a = [1, -8, 5, -1, 3, -3]
    s = [3, 1, 32, 33, -1, 40]
    same(binary(O.SHIFT_LEFT, a, s, np.int32), [8, -16, 0, 0, 0, 0])
    same(binary(O.SHIFT_RIGHT_ARITHMETIC, a, s, np.int32), [0, -4, 0, -1, 0, -1])
    same(binary(O.SHIFT_RIGHT_LOGICAL, a, s, np.int32), [0, 0x7FFFFFFC, 0, 0, 0, 0])
    same(binary(O.SHIFT_RIGHT_ARITHMETIC, [0x80, 0x40], [7, 9], np.uint8), [0xFF, 0])
    same(binary(O.SHIFT_LEFT, [1], [63], np.int64), [-2 ** 63])


def test_integer_wraparound():
    same(binary(O.ADD, [I32_MAX], [1], np.int32), [I32_MIN])
    same(binary(O.MULTIPLY, [2 ** 16], [2 ** 16], np.int32), [0])
    same(unary(O.NEGATE, [I32_MIN, 5], np.int32), [I32_MIN, -5])
    same(unary(O.ABS, [I32_MIN, -5], np.int32), [I32_MIN, 5])
    same(unary(O.NEGATE, [1], np.uint8), [255])


def test_integer_power():
    same(binary(O.POWER, [2, 3, -2, 1, 2, -1, 0, 7], [10, 0, 3, -5, -1, -1, 0, 40], np.int32),
         [1024, 1, -8, 1, 0, 0, 1, int(np.int32(np.uint32(7 ** 40 % 2 ** 32).astype(np.int32)))])


def test_bit_counting():
    same(unary(O.POPCNT, [0, 1, -1, 0x0F0F, I32_MIN], np.int32), [0, 1, 32, 8, 1])
    same(unary(O.CLZ, [0, 1, -1, 0x0F0F, 255], np.int32), [32, 31, 0, 20, 24])
    same(unary(O.CLZ, [0, 1, 0x80], np.uint8), [8, 7, 0])
    same(unary(O.NOT, [0, -1, 5], np.int32), [-1, 0, -6])
    same(unary(O.NOT, [True, False], np.bool_), [False, True])


def test_sign():
    same(unary(O.SIGN, [-3, 0, 9, I32_MIN], np.int32), [-1, 0, 1, -1])
    same(unary(O.SIGN, [-2.5, -0.0, 0.0, 3.0, NAN, -INF], np.float32), [-1, -0.0, 0.0, 1, NAN, -1])


# ---------------------------------------------------------------- floats
def test_maximum_minimum_propagate_nan():
    same(binary(O.MAXIMUM, [1, NAN, 2, -0.0], [NAN, 1, 3, 0.0], np.float32), [NAN, NAN, 3, -0.0])
    same(binary(O.MINIMUM, [1, NAN, 2, 0.0, -0.0], [NAN, 1, 3, -0.0, 0.0], np.float32), [NAN, NAN, 2, 0.0, -0.0])
    same(binary(O.MAXIMUM, [0.0], [-0.0], np.float32), [0.0])
    same(binary(O.MAXIMUM, [-5, 7], [3, -9], np.int8), [3, 7])


def test_float_special_values():
    same(binary(O.DIVIDE, [1, -1, 0, INF], [0, 0, 0, INF], np.float32), [INF, -INF, NAN, NAN])
    same(binary(O.POWER, [NAN, 1.0, 2.0, -8.0, 0.0], [0.0, NAN, -1.0, 1 / 3, -1.0], np.float32),
         [1, 1, 0.5, NAN, INF])
    same(unary(O.LOG, [0.0, -1.0, INF, 1.0], np.float32), [-INF, NAN, INF, 0.0])
    same(unary(O.SQRT, [-0.0, 4.0, -1.0], np.float32), [-0.0, 2.0, NAN])
    same(unary(O.RSQRT, [4.0, 0.0], np.float32), [0.5, INF])
    same(unary(O.IS_FINITE, [1.0, INF, -INF, NAN], np.float32), [True, False, False, False])
    same(unary(O.LOGISTIC, [0.0, -INF, INF], np.float32), [0.5, 0.0, 1.0])


def test_rounding():
    vals = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.3, 2.7, INF, NAN, -0.0]
    same(unary(O.ROUND_NEAREST_AFZ, vals, np.float32), [1, 2, 3, -1, -2, -3, 0, -0.0, 3, INF, NAN, -0.0])
    same(unary(O.ROUND_NEAREST_EVEN, vals, np.float32), [0, 2, 2, -0.0, -2, -2, 0, -0.0, 3, INF, NAN, -0.0])
    same(unary(O.FLOOR, [-0.5, 0.5, -0.0], np.float32), [-1, 0, -0.0])
    same(unary(O.CEIL, [-0.5, 0.5], np.float32), [-0.0, 1])
    same(unary(O.ROUND_NEAREST_AFZ, [0.49999999999999994, 2.5], np.float64), [0, 3])


def test_transcendental_against_math():
    vals = np.array([-3.0, -0.5, 0.0, 0.25, 2.0], np.float64)
    for op, fn in [(O.EXP, math.exp), (O.EXPM1, math.expm1), (O.TANH, math.tanh), (O.SIN, math.sin),
                   (O.COS, math.cos), (O.TAN, math.tan), (O.ERF, math.erf), (O.CBRT, np.cbrt),
                   (O.ATAN2, None)]:
        if fn is None:
            continue
        np.testing.assert_allclose(unary(op, vals, np.float64), [fn(v) for v in vals], rtol=1e-15)
    np.testing.assert_allclose(binary(O.ATAN2, [1.0, -1.0], [-1.0, -1.0], np.float64),
                               [math.atan2(1, -1), math.atan2(-1, -1)])


def test_half_types_compute_in_f32_and_round_to_nearest_even():
    bf = np.array([1.0, 256.0, 3.0], ml_dtypes.bfloat16)
    one = np.array([2 ** -8, 1.0, 2 ** -7], ml_dtypes.bfloat16)
    # 1 + 2^-8 is a tie in bf16 (8 significant bits): rounds to even (1.0); 3 + 2^-7 rounds down.
    same(binary(O.ADD, bf, one, ml_dtypes.bfloat16), np.array([1.0, 257.0 - 1, 3.0], ml_dtypes.bfloat16))
    h = np.array([65504.0, 1.0], np.float16)
    same(binary(O.ADD, h, h, np.float16), np.array([INF, 2.0], np.float16))


def test_compare_directions_and_types():
    a = np.array([1.0, NAN, -0.0, 2.0, -NAN], np.float32)
    b = np.array([1.0, NAN, 0.0, 1.0, 1.0], np.float32)
    def cmp(direction, ctype=None, x=a, y=b):
        return run(lambda bb, p, q: bb.compare(p, q, direction, ctype), x, y)
    same(cmp("EQ"), [True, False, True, False, False])
    same(cmp("NE"), [False, True, False, True, True])
    same(cmp("LT"), [False, False, False, False, False])
    same(cmp("GE"), [True, False, True, True, False])
    # Total order: -NaN < ... < -0 < +0 < ... < +NaN
    same(cmp("LT", A.ComparisonType.TOTALORDER), [False, False, True, False, True])
    same(cmp("EQ", A.ComparisonType.TOTALORDER), [True, True, False, False, False])
    i = np.array([-1, 1], np.int32)
    j = np.array([1, -1], np.int32)
    same(cmp("LT", None, i, j), [True, False])
    u = np.array([2 ** 32 - 1, 1], np.uint32)
    same(cmp("LT", None, u, u[::-1].copy()), [False, True])


def test_pred_arithmetic_and_bitwise():
    t = np.array([True, True, False, False])
    f = np.array([True, False, True, False])
    same(binary(O.AND, t, f, np.bool_), [True, False, False, False])
    same(binary(O.XOR, t, f, np.bool_), [False, True, True, False])
    same(binary(O.ADD, t, f, np.bool_), [True, True, True, False])
    same(binary(O.MAXIMUM, t, f, np.bool_), [True, True, True, False])


def test_select_and_clamp():
    same(run(lambda b, p, x, y: b.select(p, x, y), np.array([True, False]), np.array([1.0, 2.0], np.float32),
             np.array([3.0, 4.0], np.float32)), [1.0, 4.0])
    lo, hi = np.array(0.0, np.float32), np.array(1.0, np.float32)
    same(run(lambda b, l, x, h: b.clamp(l, x, h), lo, np.array([-1, 0.5, 2, NAN], np.float32), hi),
         [0.0, 0.5, 1.0, NAN])
    same(run(lambda b, l, x, h: b.clamp(l, x, h), np.array(NAN, np.float32), np.array([0.5], np.float32), hi), [NAN])
    same(run(lambda b, l, x, h: b.clamp(l, x, h), np.array([0, 5], np.int32), np.array([-3, 9], np.int32),
             np.array([2, 7], np.int32)), [0, 7])


# ---------------------------------------------------------------- conversions
def convert(values, src, dst):
    return run(lambda b, x: b.convert(x, primitive_type_from_dtype(np.dtype(dst))), np.array(values, dtype=src))


def test_float_to_int_saturates_and_nan_is_zero():
    same(convert([1.9, -1.9, NAN, INF, -INF, 3e9, -3e9, 2147483520.0], np.float32, np.int32),
         [1, -1, 0, I32_MAX, I32_MIN, I32_MAX, I32_MIN, 2147483520])
    same(convert([-1.5, 300.0, 255.9, NAN], np.float32, np.uint8), [0, 255, 255, 0])
    same(convert([1e30, -1e30], np.float64, np.int64), [2 ** 63 - 1, -2 ** 63])
    same(convert([2.0 ** 63], np.float32, np.int64), [2 ** 63 - 1])


def test_other_conversions():
    same(convert([0.0, -0.0, NAN, 0.1], np.float32, np.bool_), [False, False, True, True])
    same(convert([True, False], np.bool_, np.float32), [1.0, 0.0])
    same(convert([300, -1], np.int32, np.uint8), [44, 255])
    same(convert([16777217], np.int32, np.float32), [16777216.0])
    # f32 -> bf16 rounds to nearest even; ints reach bf16 through f32.
    same(convert([1.00390625, 1.01171875], np.float32, ml_dtypes.bfloat16),
         np.array([1.0, 1.015625], ml_dtypes.bfloat16))
    same(convert([257], np.int32, ml_dtypes.bfloat16), np.array([256], ml_dtypes.bfloat16))
    same(convert([1.0, 2.5], np.float32, np.complex64), [1 + 0j, 2.5 + 0j])


def test_bitcast_convert_widths():
    x = np.array([1.0, -2.0], np.float32)
    same(run(lambda b, p: b.bitcast_convert(p, T.S32), x), x.view(np.int32))
    out = run(lambda b, p: b.bitcast_convert(p, T.U8), x)
    assert out.shape == (2, 4) and out.tobytes() == x.tobytes()
    back = run(lambda b, p: b.bitcast_convert(p, T.F32), out)
    same(back, x)


def test_reduce_precision():
    x = np.array([1.0 + 2 ** -10, 1.0 + 2 ** -9 + 2 ** -10, 1e30, 1e-30, NAN, -INF, 65504.0, 65520.0],
                 np.float32)
    got = run(lambda b, p: b.reduce_precision(p, 5, 10), x)  # f16 range and precision
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).astype(np.float32)
    want[3] = 0.0  # below f16's smallest normal: flushed to zero, unlike a real f16 convert
    same(got, want)
    same(run(lambda b, p: b.reduce_precision(p, 8, 7), x), x.astype(ml_dtypes.bfloat16).astype(np.float32))


# ---------------------------------------------------------------- data movement
def test_shape_ops():
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    same(run(lambda b, p: b.transpose(p, [2, 0, 1]), x), x.transpose(2, 0, 1))
    same(run(lambda b, p: b.reshape(p, [4, 6]), x), x.reshape(4, 6))
    same(run(lambda b, p: b.reverse(p, [0, 2]), x), x[::-1, :, ::-1])
    same(run(lambda b, p: b.slice(p, [0, 1, 0], [2, 3, 4], [1, 1, 3]), x), x[:, 1:3, ::3])
    same(run(lambda b, p: b.concatenate([p, p], 1), x), np.concatenate([x, x], 1))
    v = np.array([1.0, 2.0, 3.0], np.float32)
    same(run(lambda b, p: b.broadcast(p, [2, 3, 4], [1]), v), np.broadcast_to(v.reshape(1, 3, 1), (2, 3, 4)))
    m = np.arange(6, dtype=np.float32).reshape(2, 3)
    same(run(lambda b, p: b.broadcast(p, [3, 5, 2], [2, 0]), m),
         np.broadcast_to(m.T.reshape(3, 1, 2), (3, 5, 2)))
    same(run(lambda b, p: b.iota(Shape.array(T.F32, [2, 3]), 1), m), np.tile(np.arange(3, dtype=np.float32), (2, 1)))


def test_pad_with_negative_and_interior():
    x = np.arange(1, 5, dtype=np.int32)
    got = run(lambda b, p: b.pad(p, b.constant(np.int32(0)), [(2, -1, 1)]), x)
    same(got, [0, 0, 1, 0, 2, 0, 3, 0])
    got = run(lambda b, p: b.pad(p, b.constant(np.int32(9)), [(-1, 1, 0)]), x)
    same(got, [2, 3, 4, 9])


def test_dynamic_slice_clamps_start_indices():
    x = np.arange(10, dtype=np.float32)
    for start, want in [(3, [3, 4, 5]), (-5, [0, 1, 2]), (9, [7, 8, 9])]:
        got = run(lambda b, p, s: b.dynamic_slice(p, [s], [3]), x, np.array(start, np.int32))
        same(got, np.array(want, np.float32))
    upd = np.array([-1.0, -2.0], np.float32)
    got = run(lambda b, p, u, s: b.dynamic_update_slice(p, u, [s]), x, upd, np.array(20, np.int32))
    same(got, np.concatenate([x[:8], upd]))


def test_gather_like_tf_gather_and_clamping():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[2], [0], [7]], np.int32)
    dn = A.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,),
                                  index_vector_dim=1)
    got = run(lambda b, p, i: b.gather(p, i, dn, [1, 4]), x, idx)
    same(got, x[[2, 0, 2]])  # 7 is clamped to the last valid start
    # TF-style gather along axis 1 with indices as a vector (index_vector_dim == rank).
    dn = A.GatherDimensionNumbers(offset_dims=(0,), collapsed_slice_dims=(1,), start_index_map=(1,),
                                  index_vector_dim=1)
    got = run(lambda b, p, i: b.gather(p, i, dn, [3, 1]), x, np.array([3, 1], np.int32))
    same(got, x[:, [3, 1]])


def test_scatter_accumulates_in_order_and_skips_out_of_bounds():
    x = np.zeros((4, 2), np.float32)
    idx = np.array([[1], [3], [1], [4]], np.int32)
    upd = np.array([[1, 2], [3, 4], [5, 6], [7, 8]], np.float32)
    dn = A.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                   scatter_dims_to_operand_dims=(0,), index_vector_dim=1)
    add = make_scalar_computation(O.ADD, T.F32)
    got = run(lambda b, p, i, u: b.scatter(p, i, u, add, dn), x, idx, upd)
    same(got, [[0, 0], [6, 8], [0, 0], [3, 4]])
    # A combiner that keeps the update: the last write wins.
    keep = HloBuilder("keep")
    keep.parameter(0, Shape.scalar(T.F32), "old")
    keep.parameter(1, Shape.scalar(T.F32), "new")
    keep_comp = keep.build()
    got = run(lambda b, p, i, u: b.scatter(p, i, u, keep_comp, dn), x, idx, upd)
    same(got, [[0, 0], [5, 6], [0, 0], [3, 4]])



@pytest.mark.parametrize("op", [O.MAXIMUM, O.MINIMUM])
def test_scatter_max_min_keeps_the_current_value_on_ties(op):
    """XLA's evaluator combines with std::max(current, update) after its NaN checks: a tie (0 and -0, or 0 and a
    -denormal under DAZ: fuzz seed 104000799) keeps the current value, a NaN on either side wins; updates to one
    element apply in index order, as the sequential scatter does."""
    x = np.array([0.0, -0.0, 1.0, 0.0], np.float32)
    idx = np.array([[0], [1], [2], [2], [0], [3], [3]], np.int32)
    upd = np.array([-0.0, 0.0, NAN, 5.0, -0.0, 2.0, -2.0], np.float32)
    dn = A.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                   scatter_dims_to_operand_dims=(0,), index_vector_dim=1)
    comp = make_scalar_computation(op, T.F32)
    got = run(lambda b, p, i, u: b.scatter(p, i, u, comp, dn), x, idx, upd)
    want = [0.0, -0.0, NAN, 2.0 if op is O.MAXIMUM else -2.0]
    assert np.array_equal(np.signbit(got), np.signbit(want)) and np.allclose(got, want, equal_nan=True), got


# ---------------------------------------------------------------- reductions and windows
def test_reduce_simple_and_variadic_argmax():
    x = np.array([[3.0, 7.0, 7.0, -1.0], [NAN, 1.0, 2.0, 0.0]], np.float32)
    mx = make_scalar_computation(O.MAXIMUM, T.F32)
    same(run(lambda b, p: b.reduce(p, b.constant(np.float32(-INF)), [1], mx), x), [7.0, NAN])
    add = make_scalar_computation(O.ADD, T.F32)
    same(run(lambda b, p: b.reduce(p, b.constant(np.float32(10)), [0, 1], add), np.ones((3, 4), np.float32)), 22.0)
    # argmax reducer (value, index) with lowest index on ties, as TF lowers ArgMax
    text = """HloModule argmax

%argmax (lv: f32[], li: s32[], rv: f32[], ri: s32[]) -> (f32[], s32[]) {
  %lv = f32[] parameter(0)
  %li = s32[] parameter(1)
  %rv = f32[] parameter(2)
  %ri = s32[] parameter(3)
  %ge = pred[] compare(%lv, %rv), direction=GE
  %v = f32[] select(%ge, %lv, %rv)
  %eq = pred[] compare(%lv, %rv), direction=EQ
  %mn = s32[] minimum(%li, %ri)
  %i0 = s32[] select(%ge, %li, %ri)
  %i = s32[] select(%eq, %mn, %i0)
  ROOT %t = (f32[], s32[]) tuple(%v, %i)
}

ENTRY %main (x: f32[2,4]) -> s32[2] {
  %x = f32[2,4]{1,0} parameter(0)
  %iota = s32[2,4]{1,0} iota(), iota_dimension=1
  %ninf = f32[] constant(-inf)
  %zero = s32[] constant(0)
  %r = (f32[2]{0}, s32[2]{0}) reduce(%x, %iota, %ninf, %zero), dimensions={1}, to_apply=%argmax
  ROOT %idx = s32[2]{0} get-tuple-element(%r), index=1
}
"""
    same(evaluate(parse_module(text), np.array([[3, 7, 7, -1], [0, 1, 2, 0]], np.float32)), [1, 2])


@pytest.mark.parametrize("op", [O.MAXIMUM, O.MINIMUM])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
def test_float_max_min_reduce_is_the_in_order_fold(op, dtype):
    """The vectorised max/min reduce equals the evaluator's reducer applied in order from the init (a
    reducer with a copy in it takes that general path): ties (±0) keep the accumulator, the first NaN wins."""
    rs = np.random.RandomState(3)
    pool = np.array([0.0, -0.0, 1.0, -1.0, 2.0, NAN, -NAN, INF, -INF], np.float32)
    x = rs.choice(pool, size=(4, 7, 5)).astype(dtype)
    et = primitive_type_from_dtype(np.dtype(dtype))
    fast = make_scalar_computation(op, et)
    b = HloBuilder("slow")
    p0, p1 = b.parameter(0, Shape.scalar(et), "x"), b.parameter(1, Shape.scalar(et), "y")
    slow = b.build(b.copy(b.binary(op, p0, p1)))
    for dims in ([1], [0, 2], [0, 1, 2]):
        for init in (0.0, -0.0, NAN):
            def build(comp):
                return lambda bb, p: bb.reduce(p, bb.constant(np.asarray(init, dtype)), dims, comp)
            got, want = evaluate(module_of(build(fast), x), x), evaluate(module_of(build(slow), x), x)
            assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), (dims, init, got, want)


def test_reduce_window_skips_padding_and_dilation_holes():
    x = np.arange(1, 6, dtype=np.float32)
    add = make_scalar_computation(O.ADD, T.F32)
    cumsum = A.Window.make([5], padding=[(4, 0)])
    same(run(lambda b, p: b.reduce_window(p, b.constant(np.float32(0)), cumsum, add), x), np.cumsum(x))
    # init 100 is counted once per window, never for padding
    w = A.Window.make([2], strides=[2], padding=[(1, 0)])
    same(run(lambda b, p: b.reduce_window(p, b.constant(np.float32(100)), w, add), x), [101, 105, 109])
    # base dilation 2 -> [1, _, 2, _, 3, _, 4, _, 5]; window 3 stride 2
    w = A.Window.make([3], strides=[2], lhs_dilation=[2])
    same(run(lambda b, p: b.reduce_window(p, b.constant(np.float32(0)), w, add), x), [3, 5, 7, 9])
    # window dilation 2: elements i and i+2
    w = A.Window.make([2], rhs_dilation=[2])
    same(run(lambda b, p: b.reduce_window(p, b.constant(np.float32(0)), w, add), x), [4, 6, 8])


def test_max_pool_2d():
    x = np.random.RandomState(0).rand(1, 4, 4, 1).astype(np.float32)
    mx = make_scalar_computation(O.MAXIMUM, T.F32)
    w = A.Window.make([1, 2, 2, 1], strides=[1, 2, 2, 1])
    got = run(lambda b, p: b.reduce_window(p, b.constant(np.float32(-INF)), w, mx), x)
    same(got, x.reshape(1, 2, 2, 2, 2, 1).max(axis=(2, 4)))


def test_select_and_scatter_routes_to_first_max():
    x = np.array([[1, 5, 5, 2], [7, 0, 3, 3]], np.float32)
    src = np.array([[10, 20], [30, 40]], np.float32)
    ge = make_comparator("GE", [T.F32])
    add = make_scalar_computation(O.ADD, T.F32)
    w = A.Window.make([1, 2], strides=[1, 2])
    got = run(lambda b, p, s: b.select_and_scatter(p, ge, w, s, b.constant(np.float32(0)), add), x, src)
    same(got, [[0, 10, 20, 0], [30, 0, 40, 0]])


def test_dot_general_and_integer_dot():
    rs = np.random.RandomState(0)
    a, c = rs.randn(3, 4, 5).astype(np.float32), rs.randn(3, 5, 2).astype(np.float32)
    got = run(lambda b, x, y: b.dot(x, y, [2], [1], [0], [0]), a, c)
    np.testing.assert_allclose(got, np.einsum("bij,bjk->bik", a, c), rtol=1e-5)
    m, v = rs.randn(4, 5).astype(np.float32), rs.randn(5).astype(np.float32)
    np.testing.assert_allclose(run(lambda b, x, y: b.dot(x, y, [1], [0]), m, v), m @ v, rtol=1e-5)
    i = np.array([[2 ** 30, 2 ** 30]], np.int32)
    same(run(lambda b, x, y: b.dot(x, y, [1], [0]), i, np.array([[2], [2]], np.int32)), [[0]])  # wraps
    bf = rs.randn(2, 3).astype(ml_dtypes.bfloat16)
    got = run(lambda b, x, y: b.dot(x, y, [1], [1], result_type=T.F32), bf, bf)
    np.testing.assert_allclose(got, bf.astype(np.float32) @ bf.astype(np.float32).T, rtol=1e-6)


def _conv_ref(x, k, stride, pad, lhs_dil=1, rhs_dil=1, groups=1):
    """Direct NHWC/HWIO convolution loop for checking."""
    n, h, w_, c = x.shape
    kh, kw, ci, co = k.shape
    xd = np.zeros((n, (h - 1) * lhs_dil + 1, (w_ - 1) * lhs_dil + 1, c), x.dtype)
    xd[:, ::lhs_dil, ::lhs_dil] = x
    xp = np.pad(xd, ((0, 0), pad[0], pad[1], (0, 0)))
    ekh, ekw = (kh - 1) * rhs_dil + 1, (kw - 1) * rhs_dil + 1
    oh, ow = (xp.shape[1] - ekh) // stride + 1, (xp.shape[2] - ekw) // stride + 1
    out = np.zeros((n, oh, ow, co), np.float64)
    cg, og = c // groups, co // groups
    for g in range(groups):
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, i * stride:i * stride + ekh:rhs_dil, j * stride:j * stride + ekw:rhs_dil,
                           g * cg:(g + 1) * cg]
                out[:, i, j, g * og:(g + 1) * og] = np.einsum("nhwc,hwco->no", patch, k[:, :, :, g * og:(g + 1) * og])
    return out


@pytest.mark.parametrize("stride, pad, lhs_dil, rhs_dil, groups", [
    (1, ((1, 1), (1, 1)), 1, 1, 1), (2, ((0, 1), (1, 0)), 1, 1, 1), (1, ((0, 0), (0, 0)), 1, 2, 1),
    (1, ((1, 1), (1, 1)), 2, 1, 1), (1, ((0, 0), (0, 0)), 1, 1, 2),
])
def test_convolution_matches_direct_loop(stride, pad, lhs_dil, rhs_dil, groups):
    rs = np.random.RandomState(1)
    x = rs.randn(2, 5, 6, 4).astype(np.float32)
    k = rs.randn(3, 3, 4 // groups, 6).astype(np.float32)
    window = A.Window.make([3, 3], strides=[stride] * 2, padding=list(pad), lhs_dilation=[lhs_dil] * 2,
                           rhs_dilation=[rhs_dil] * 2)
    got = run(lambda b, p, q: b.convolution(p, q, window, "b01f_01io->b01f", feature_group_count=groups), x, k)
    np.testing.assert_allclose(got, _conv_ref(x, k, stride, pad, lhs_dil, rhs_dil, groups), rtol=1e-4, atol=1e-5)


def test_batch_group_convolution_is_per_group_filter_gradient():
    rs = np.random.RandomState(2)
    x = rs.randn(4, 3, 2).astype(np.float32)  # batch 4 = 2 groups of 2, spatial 3, feature 2
    k = rs.randn(2, 2, 4).astype(np.float32)  # spatial 2, in 2, out 4 = 2 groups of 2
    window = A.Window.make([2])
    got = run(lambda b, p, q: b.convolution(p, q, window, "b0f_0io->b0f", batch_group_count=2), x, k)
    want = np.zeros((2, 2, 4), np.float64)
    for z in range(4):
        bg = z // 2
        for nb in range(2):
            for o in range(2):
                want[nb, o, z] = sum(x[bg * 2 + nb, o + s, c] * k[s, c, z] for s in range(2) for c in range(2))
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_sort_stable_multi_operand_and_descending():
    keys = np.array([[3.0, 1.0, 2.0, 1.0], [NAN, -0.0, 0.0, -INF]], np.float32)
    vals = np.array([[0, 1, 2, 3], [0, 1, 2, 3]], np.int32)
    lt = make_comparator("LT", [T.F32, T.S32], A.ComparisonType.TOTALORDER)
    k, v = run(lambda b, p, q: b.sort([p, q], 1, lt, is_stable=True), keys, vals)
    same(k, [[1, 1, 2, 3], [-INF, -0.0, 0.0, NAN]])
    same(v, [[1, 3, 2, 0], [3, 1, 2, 0]])
    gt = make_comparator("GT", [T.S32])
    same(run(lambda b, p: b.sort(p, 0, gt), np.array([2, 9, -1, 9], np.int32)), [9, 9, 2, -1])


def test_sort_with_general_comparator():
    # Order by absolute value through a comparator the fast path does not recognise.
    b2 = HloBuilder("abs_lt")
    p0 = b2.parameter(0, Shape.scalar(T.S32), "a")
    p1 = b2.parameter(1, Shape.scalar(T.S32), "b")
    b2.compare(b2.abs(p0), b2.abs(p1), "LT")
    comp = b2.build()
    same(run(lambda b, p: b.sort(p, 0, comp, is_stable=True), np.array([-3, 2, -1, 1, 0], np.int32)),
         [0, -1, 1, 2, -3])


# ---------------------------------------------------------------- control flow and calls
def test_while_conditional_call_map_fusion():
    text = """HloModule control

%cond (s: (s32[], f32[2])) -> pred[] {
  %s = (s32[], f32[2]{0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(5)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (s.1: (s32[], f32[2])) -> (s32[], f32[2]) {
  %s.1 = (s32[], f32[2]{0}) parameter(0)
  %i.1 = s32[] get-tuple-element(%s.1), index=0
  %one = s32[] constant(1)
  %next = s32[] add(%i.1, %one)
  %v = f32[2]{0} get-tuple-element(%s.1), index=1
  %dbl = f32[2]{0} add(%v, %v)
  ROOT %t = (s32[], f32[2]{0}) tuple(%next, %dbl)
}

%neg (a: f32[2]) -> f32[2] {
  %a = f32[2]{0} parameter(0)
  ROOT %r = f32[2]{0} negate(%a)
}

%inc (b: f32[2]) -> f32[2] {
  %b = f32[2]{0} parameter(0)
  %c1 = f32[] constant(1)
  %bc = f32[2]{0} broadcast(%c1), dimensions={}
  ROOT %r.1 = f32[2]{0} add(%b, %bc)
}

%sq (x: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  ROOT %m = f32[] multiply(%x, %x)
}

%fused (f0: f32[2], f1: f32[2]) -> f32[2] {
  %f0 = f32[2]{0} parameter(0)
  %f1 = f32[2]{0} parameter(1)
  ROOT %sub = f32[2]{0} subtract(%f0, %f1)
}

ENTRY %main (v: f32[2], k: s32[]) -> (f32[2], f32[2], f32[2], f32[2], f32[2]) {
  %v.1 = f32[2]{0} parameter(0)
  %k = s32[] parameter(1)
  %zero = s32[] constant(0)
  %init = (s32[], f32[2]{0}) tuple(%zero, %v.1)
  %loop = (s32[], f32[2]{0}) while(%init), condition=%cond, body=%body
  %out = f32[2]{0} get-tuple-element(%loop), index=1
  %branch = f32[2]{0} conditional(%k, %v.1, %v.1), branch_computations={%neg, %inc}
  %called = f32[2]{0} call(%v.1), to_apply=%neg
  %mapped = f32[2]{0} map(%v.1), dimensions={0}, to_apply=%sq
  %fusion = f32[2]{0} fusion(%out, %v.1), kind=kLoop, calls=%fused
  ROOT %all = (f32[2]{0}, f32[2]{0}, f32[2]{0}, f32[2]{0}, f32[2]{0}) tuple(%out, %branch, %called, %mapped, %fusion)
}
"""
    module = parse_module(text)
    v = np.array([1.0, -2.0], np.float32)
    out, branch, called, mapped, fusion = evaluate(module, v, np.int32(0))
    same(out, v * 32)
    same(branch, -v)
    same(called, -v)
    same(mapped, v * v)
    same(fusion, v * 31)
    same(evaluate(module, v, np.int32(1))[1], v + 1)
    same(evaluate(module, v, np.int32(7))[1], v + 1)   # out of range -> last branch
    same(evaluate(module, v, np.int32(-1))[1], v + 1)


def test_rng_bit_generator_philox_known_answer():
    """Philox4x32-10 with key 0 and counter 0 (Random123 known-answer vector)."""
    text = """HloModule r

ENTRY %main (s: u64[3]) -> (u64[3], u32[4]) {
  %s = u64[3]{0} parameter(0)
  ROOT %r = (u64[3]{0}, u32[4]{0}) rng-bit-generator(%s), algorithm=rng_philox
}
"""
    state, bits = evaluate(parse_module(text), np.zeros(3, np.uint64))
    same(bits, np.array([0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8], np.uint32))
    same(state, np.array([0, 1, 0], np.uint64))


def test_rng_is_seeded_and_in_range():
    text = """HloModule r

ENTRY %main () -> f32[1000] {
  %a = f32[] constant(2)
  %b = f32[] constant(3)
  ROOT %r = f32[1000]{0} rng(%a, %b), distribution=rng_uniform
}
"""
    m = parse_module(text)
    x = evaluate(m, seed=1)
    assert x.min() >= 2 and x.max() < 3
    same(x, evaluate(m, seed=1))



def test_integer_rng_with_b_not_above_a_spans_the_unsigned_range():
    """XLA takes an integer rng's range b - a in the unsigned type: rng(0, -1) over s32 draws from all
    2^32 - 1 bit patterns (TF's RandomShuffle keys), so both signs appear and the sum wraps."""
    text = """HloModule r

ENTRY %main () -> (s32[4000], u8[200]) {
  %a = s32[] constant(0)
  %b = s32[] constant(-1)
  %keys = s32[4000]{0} rng(%a, %b), distribution=rng_uniform
  %c = u8[] constant(250)
  %d = u8[] constant(4)
  %wrapped = u8[200]{0} rng(%c, %d), distribution=rng_uniform
  ROOT %t = (s32[4000]{0}, u8[200]{0}) tuple(%keys, %wrapped)
}
"""
    keys, wrapped = evaluate(parse_module(text), seed=3)
    assert keys.dtype == np.int32 and (keys < 0).mean() > 0.4 and (keys > 0).mean() > 0.4
    assert len(np.unique(keys)) > 3990   # no pile-up: 4000 draws out of 2^32 - 1 values
    assert wrapped.dtype == np.uint8 and set(np.unique(wrapped)) <= {250, 251, 252, 253, 254, 255, 0, 1, 2, 3}
    assert {250, 255, 0, 3} <= set(np.unique(wrapped))

def test_argument_checking_and_unimplemented_custom_call():
    m = module_of(lambda b, x: b.negate(x), np.zeros(2, np.float32))
    with pytest.raises(InvalidArgumentError, match="expected f32, got numpy int32"):
        evaluate(m, np.zeros(2, np.int32))
    with pytest.raises(InvalidArgumentError, match="expected dimensions \\[2\\]"):
        evaluate(m, np.zeros(3, np.float32))
    same(evaluate(m, [1.0, 2.0]), [-1.0, -2.0])
    cc = module_of(lambda b, x: b.custom_call("my_kernel", [x], x.shape), np.zeros(2, np.float32))
    with pytest.raises(UnimplementedError, match="my_kernel"):
        evaluate(cc, np.zeros(2, np.float32))


def test_bitcast_follows_layouts():
    text = """HloModule b

ENTRY %main (a: f32[2,3]) -> f32[3,2] {
  %a = f32[2,3]{1,0} parameter(0)
  %t = f32[3,2]{0,1} transpose(%a), dimensions={1,0}
  ROOT %r = f32[3,2]{1,0} bitcast(%t)
}
"""
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    # The transpose in a column-major layout has the same bytes as `a`: the bitcast reads them row-major.
    same(evaluate(parse_module(text), a), a.reshape(3, 2))
