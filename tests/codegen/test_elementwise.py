"""Every elementwise opcode compiled == evaluator, per element type, with special values (NaN, ±inf, ±0,
INT_MIN, -1, 0 divisors, out-of-range shift amounts), on shapes with odd sizes (vector tails), size-0
dims and scalars. All ops of one element type share one module, so each case is one compile."""
import zlib

import numpy as np
import pytest

from tests.codegen.cg_helpers import BF16, assert_same, check, module_of, random_array, tolerance
from tfxla_cluster.codegen import compile_module
from tfxla_cluster.hlo.attrs import ComparisonDirection as D
from tfxla_cluster.hlo.attrs import ComparisonType
from tfxla_cluster.hlo.evaluator import evaluate
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import primitive_type_from_dtype

from tests.codegen.cg_helpers import CHECKED

FLOAT_UNARY = [O.ABS, O.NEGATE, O.SIGN, O.COPY, O.SQRT, O.RSQRT, O.FLOOR, O.CEIL, O.ROUND_NEAREST_AFZ,
               O.ROUND_NEAREST_EVEN, O.IS_FINITE, O.EXP, O.EXPM1, O.LOG, O.LOG1P, O.CBRT, O.SIN, O.COS, O.TAN,
               O.TANH, O.LOGISTIC, O.ERF]
INT_UNARY = [O.ABS, O.NEGATE, O.SIGN, O.COPY, O.NOT, O.POPCNT, O.CLZ]
PRED_UNARY = [O.NOT, O.COPY]
ARITH = [O.ADD, O.SUBTRACT, O.MULTIPLY, O.DIVIDE, O.REMAINDER, O.MAXIMUM, O.MINIMUM, O.POWER]
FLOAT_BINARY = ARITH + [O.ATAN2]
INT_BINARY = ARITH + [O.AND, O.OR, O.XOR, O.SHIFT_LEFT, O.SHIFT_RIGHT_LOGICAL, O.SHIFT_RIGHT_ARITHMETIC]
PRED_BINARY = [O.AND, O.OR, O.XOR, O.ADD, O.MULTIPLY, O.MAXIMUM, O.MINIMUM]
APPROX = {O.EXP, O.EXPM1, O.LOG, O.LOG1P, O.CBRT, O.SIN, O.COS, O.TAN, O.TANH, O.LOGISTIC, O.ERF, O.POWER,
          O.ATAN2, O.RSQRT}  # RSQRT: XLA:CPU refines the hardware estimate (1 ulp), as we do
DIRECTIONS = [D.EQ, D.NE, D.LT, D.LE, D.GT, D.GE]

FLOATS = [np.float32, np.float64, np.float16, BF16]
INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
SHAPES = [(3, 17), (0, 5), ()]


def _ops_for(dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return PRED_UNARY, PRED_BINARY
    if dtype.kind == "f" or dtype == BF16:
        return FLOAT_UNARY, FLOAT_BINARY
    return INT_UNARY, INT_BINARY


def _build_all(dtype, shape):
    unary, binary = _ops_for(dtype)
    names = []

    def build(b, x, y):
        outs = []
        for op in unary:
            outs.append(b.unary(op, x))
            names.append(op)
        for op in binary:
            outs.append(b.binary(op, x, y))
            names.append(op)
        et = x.shape.element_type
        for d in DIRECTIONS:
            outs.append(b.compare(x, y, d))
            names.append(("compare", d))
        if et.is_float:
            for d in (D.LT, D.EQ, D.GE):
                outs.append(b.compare(x, y, d, ComparisonType.TOTALORDER))
                names.append(("total", d))
        p = b.compare(x, y, D.LT)
        outs.append(b.select(p, x, y))
        names.append(O.SELECT)
        if not et.is_pred:
            outs.append(b.clamp(y, x, b.add(y, y) if et.is_float else y))
            names.append(O.CLAMP)
        return b.tuple(outs)
    return build, names


def _xla_cpu_int_pow(x, y):
    """XLA:CPU's EmitIntegerPow (unlike its evaluator): six unrolled squarings, so only the exponent's
    low 6 bits count; a negative exponent gives 1 for x == 1, (-1)^y for x == -1, else 0."""
    r = np.ones_like(x)
    base = x.copy()
    e = (y & 63).astype(np.uint64)
    for _ in range(6):
        r = np.where(e & np.uint64(1), r * base, r).astype(x.dtype)
        base = (base * base).astype(x.dtype)
        e = e >> np.uint64(1)
    if x.dtype.kind == "i":
        neg = np.where(x == 1, 1, np.where(x == -1, np.where(y % 2 != 0, -1, 1), 0)).astype(x.dtype)
        r = np.where(y < 0, neg, r).astype(x.dtype)
    return r


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS + INTS + [np.bool_], ids=lambda d: np.dtype(d).name)
def test_all_elementwise_ops(dtype, shape):
    rng = np.random.default_rng(zlib.crc32(f"{np.dtype(dtype).name}{shape}".encode()))
    x = random_array(shape, dtype, rng)
    y = random_array(shape, dtype, rng)
    if np.dtype(dtype).kind in "iu":  # make shift amounts and divisors hit the interesting cases
        flat = y.reshape(-1)
        if flat.size > 6:
            flat[:6] = np.array([0, 1, np.dtype(dtype).itemsize * 8, np.dtype(dtype).itemsize * 8 - 1, 3, 0]
                                ).astype(dtype)
    build, names = _build_all(dtype, shape)
    m = module_of(build, x, y)
    exe = compile_module(m, CHECKED)
    got = exe(x, y)
    want = evaluate(m, x, y)
    for name, g, w in zip(names, got, want):
        if name is O.POWER and np.dtype(dtype).kind in "iu":
            w = _xla_cpu_int_pow(x, y)
        approx = name in APPROX
        rtol, atol = tolerance(g.dtype, approx)
        if name in (O.TAN, O.POWER, O.ERF, O.EXPM1) and g.dtype != np.float64:
            rtol, atol = rtol * 4, atol * 4
        try:
            assert_same(g, w, rtol, atol)
        except AssertionError as e:
            raise AssertionError(f"{name} on {np.dtype(dtype).name}{list(shape)}: {e}") from None


CONVERT_TYPES = [np.bool_, np.int8, np.uint8, np.int16, np.int32, np.uint32, np.int64, np.uint64, np.float16,
                 BF16, np.float32, np.float64]


@pytest.mark.parametrize("src", CONVERT_TYPES, ids=lambda d: np.dtype(d).name)
def test_convert_to_every_type(src):
    rng = np.random.default_rng(7)
    x = random_array((5, 9), src, rng)
    if np.dtype(src).kind == "f" or np.dtype(src) == BF16:
        x.reshape(-1)[:6] = np.array([3e9, -3e9, 2.5e38 if np.dtype(src).itemsize >= 4 else 6e4, -0.7, 255.9,
                                      -129.5]).astype(src)
    targets = [primitive_type_from_dtype(d) for d in CONVERT_TYPES]
    m = module_of(lambda b, p: b.tuple([b.convert(p, et) for et in targets]), x)
    check(m, x)


@pytest.mark.parametrize("src,dst", [(np.float32, T.S32), (np.float32, T.U32), (np.int32, T.F32),
                                     (np.float64, T.S64), (np.float32, T.U8), (np.float16, T.S16),
                                     (np.uint8, T.S8), (np.float64, T.F32), (BF16, T.S16), (np.int16, T.F16)])
def test_bitcast_convert(src, dst):
    rng = np.random.default_rng(3)
    x = random_array((4, 6), src, rng)
    m = module_of(lambda b, p: b.bitcast_convert(p, dst), x)
    check(m, x)


@pytest.mark.parametrize("dtype,bits", [(np.float32, (5, 10)), (np.float32, (8, 7)), (np.float64, (8, 23)),
                                        (np.float16, (4, 3)), (np.float32, (3, 0))])
def test_reduce_precision(dtype, bits):
    rng = np.random.default_rng(4)
    x = random_array((7, 5), dtype, rng)
    m = module_of(lambda b, p: b.reduce_precision(p, *bits), x)
    check(m, x)


@pytest.mark.parametrize("et", [T.S32, T.F32, T.U8, T.F16, T.BF16, T.S64])
def test_iota(et):
    from tfxla_cluster.hlo.shape import Shape
    m = module_of(lambda b: b.tuple([b.iota(Shape.array(et, (3, 37)), 1), b.iota(Shape.array(et, (5, 2)), 0)]))
    check(m)


def test_map():
    from tfxla_cluster.hlo.builder import make_scalar_computation
    rng = np.random.default_rng(1)
    x, y = random_array((9,), np.float32, rng), random_array((9,), np.float32, rng)
    add = make_scalar_computation(O.ADD, T.F32)
    check(module_of(lambda b, p, q: b.map([p, q], add), x, y), x, y)


def test_special_semantics_spot_checks():
    """A few XLA choices spelled out: integer x/0, INT_MIN/-1, x%0, shifts >= width, NaN max."""
    a = np.array([7, -7, np.iinfo(np.int32).min, 5, 1, -8], np.int32)
    c = np.array([0, 0, -1, 0, 40, 1], np.int32)

    def build(b, x, y):
        return b.tuple([b.divide(x, y), b.remainder(x, y), b.shift_left(x, y), b.shift_right_arithmetic(x, y)])
    _, got = check(module_of(build, a, c), a, c)
    assert list(got[0][:3]) == [-1, -1, np.iinfo(np.int32).min]
    assert list(got[1][:4]) == [7, -7, 0, 5]
    f = np.array([np.nan, 1.0, -0.0], np.float32)
    g = np.array([1.0, np.nan, 0.0], np.float32)
    _, got = check(module_of(lambda b, x, y: b.maximum(x, y), f, g), f, g)
    assert np.isnan(got[0][0]) and np.isnan(got[0][1]) and np.signbit(got[0][2])
