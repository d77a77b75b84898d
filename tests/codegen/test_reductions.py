"""Reductions compiled == evaluator: reduce over every dim subset (simple and variadic reducers, f32 /
bf16 / ints / pred, empty dims), reduce-window (strides, padding, dilations), select-and-scatter; and the
accuracy of long f32 sums (blocked pairwise) against an exact sum and TF's ``reduce_sum``."""
import itertools

import numpy as np
import pytest

from tests.codegen.cg_helpers import BF16, CHECKED, assert_same, check, module_of, parsed, random_array
from tfxla_cluster.codegen import CodegenOptions, compile_module
from tfxla_cluster.hlo.attrs import Window
from tfxla_cluster.hlo.builder import make_comparator, make_scalar_computation
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import primitive_type_from_dtype

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("dtype,op", [(np.float32, O.ADD), (np.float32, O.MAXIMUM), (np.float32, O.MINIMUM),
                                      (np.float32, O.MULTIPLY), (BF16, O.ADD), (np.float64, O.ADD),
                                      (np.int32, O.ADD), (np.int8, O.MULTIPLY), (np.uint32, O.MAXIMUM),
                                      (np.int64, O.XOR), (np.bool_, O.AND), (np.bool_, O.OR)],
                         ids=lambda v: getattr(v, "text", None) or np.dtype(v).name)
def test_reduce_every_dim_subset(dtype, op):
    x = random_array((3, 4, 37), dtype, RNG, specials=False)
    et = primitive_type_from_dtype(x.dtype)
    comp = make_scalar_computation(op, et)
    init = {O.ADD: 0, O.MULTIPLY: 1, O.MAXIMUM: -5, O.MINIMUM: 5, O.XOR: 0, O.AND: True, O.OR: False}[op]
    subsets = [s for r in range(4) for s in itertools.combinations(range(3), r)]

    def build(b, p):
        c = b.constant(init, et)
        return b.tuple([b.reduce(p, c, dims, comp) for dims in subsets])
    float_like = x.dtype.kind == "f" or x.dtype == BF16
    tol = {np.dtype(np.float32): 2e-6, BF16: 1e-2, np.dtype(np.float64): 1e-14}.get(x.dtype, 0.0)
    if op is O.MULTIPLY and float_like:
        x = (1 + 0.01 * random_array(x.shape, np.float64, RNG, specials=False)).astype(dtype)
    check(module_of(build, x), x, rtol=tol, atol=tol, signed_zero=False)


def test_reduce_with_nans_and_empty_dims():
    x = random_array((2, 0, 3), np.float32, RNG)
    y = np.array([[1.0, np.nan, 3.0], [-np.inf, 2.0, np.inf]], np.float32)
    add = make_scalar_computation(O.ADD, T.F32)
    mx = make_scalar_computation(O.MAXIMUM, T.F32)

    def build(b, p, q):
        z = b.constant(0.0, T.F32)
        return b.tuple([b.reduce(p, z, (1,), add), b.reduce(p, z, (0, 2), add), b.reduce(q, z, (1,), mx),
                        b.reduce(q, z, (0,), add)])
    check(module_of(build, x, y), x, y)


ARGMAX = """HloModule argmax
%argmax (a: f32[], ai: s32[], b: f32[], bi: s32[]) -> (f32[], s32[]) {
  %a = f32[] parameter(0)
  %ai = s32[] parameter(1)
  %b = f32[] parameter(2)
  %bi = s32[] parameter(3)
  %gt = pred[] compare(%a, %b), direction=GT
  %eq = pred[] compare(%a, %b), direction=EQ
  %lt = pred[] compare(%ai, %bi), direction=LT
  %tie = pred[] and(%eq, %lt)
  %keep = pred[] or(%gt, %tie)
  %v = f32[] select(%keep, %a, %b)
  %i = s32[] select(%keep, %ai, %bi)
  ROOT %t = (f32[], s32[]) tuple(%v, %i)
}
ENTRY %main (x: f32[5,33]) -> (f32[5], s32[5]) {
  %x = f32[5,33]{1,0} parameter(0)
  %io = s32[5,33]{1,0} iota(), iota_dimension=1
  %ninf = f32[] constant(-inf)
  %zero = s32[] constant(0)
  ROOT %r = (f32[5]{0}, s32[5]{0}) reduce(%x, %io, %ninf, %zero), dimensions={1}, to_apply=%argmax
}
"""


def test_variadic_reduce_argmax():
    x = random_array((5, 33), np.float32, RNG, specials=False)
    x[2, 7] = x[2, 20] = 100.0  # ties pick the lower index
    _, got = check(parsed(ARGMAX), x)
    assert got[1][2] == 7


@pytest.mark.parametrize("window", [
    Window.make([2, 2], [2, 2]),
    Window.make([3, 3], [1, 1], [(1, 1), (1, 1)]),
    Window.make([2, 3], [1, 2], [(0, 1), (2, 0)], lhs_dilation=[1, 2]),
    Window.make([2, 2], [1, 1], rhs_dilation=[2, 1]),
    Window.make([1, 1]),
], ids=lambda w: w.to_text())
def test_reduce_window(window):
    x = random_array((7, 9), np.float32, RNG, specials=False)
    add = make_scalar_computation(O.ADD, T.F32)
    mx = make_scalar_computation(O.MAXIMUM, T.F32)

    def build(b, p):
        return b.tuple([b.reduce_window(p, b.constant(0.0, T.F32), window, add),
                        b.reduce_window(p, b.constant(-np.inf, T.F32), window, mx)])
    check(module_of(build, x), x, rtol=1e-6, atol=1e-6)


def test_select_and_scatter_max_pool_gradient():
    x = random_array((6, 8), np.float32, RNG, specials=False)
    window = Window.make([2, 3], [2, 2], [(0, 0), (1, 0)])
    src = random_array((3, 4), np.float32, RNG, specials=False)
    ge = make_comparator("GE", [T.F32])
    add = make_scalar_computation(O.ADD, T.F32)
    check(module_of(lambda b, p, s: b.select_and_scatter(p, ge, window, s, b.constant(0.0, T.F32), add),
                    x, src), x, src, rtol=1e-6, atol=1e-6)


SUM = """HloModule s
%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %a = f32[] add(%x, %y)
}
ENTRY %main (a: f32[NUM]) -> f32[] {
  %a = f32[NUM]{0} parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[] reduce(%a, %z), dimensions={0}, to_apply=%add
}
"""
N16M = 1 << 24


def _sum_error(x):
    exe = compile_module(parsed(SUM.replace("NUM", str(x.size))), CodegenOptions(threads=1))
    got = float(exe(x)[0])
    exact = float(np.sum(x, dtype=np.float64))
    return abs(got - exact), exact


def test_16m_element_f32_sum_is_accurate():
    """Naive sequential f32 summation of 16M uniform values is off by ~1e-3 relative; blocked
    pairwise summation keeps the error at the level of TF's tree reduction (a few 1e-7)."""
    x = np.random.default_rng(0).random(N16M, dtype=np.float32)
    err, exact = _sum_error(x)
    assert err <= 2e-7 * exact, (err, exact)
    # A naive loop would be far worse: the cascade matters.
    naive = float(np.cumsum(x[:1 << 22], dtype=np.float32)[-1])
    assert abs(naive - np.sum(x[:1 << 22], dtype=np.float64)) > 10 * err / 4


@pytest.mark.tfsweep
def test_16m_sum_no_worse_than_tensorflow():
    tf = pytest.importorskip("tensorflow")
    x = np.random.default_rng(1).random(N16M, dtype=np.float32) * 2 - 0.5
    err, exact = _sum_error(x)
    tf_err = abs(float(tf.reduce_sum(tf.constant(x)).numpy()) - exact)
    assert err <= max(tf_err, 1e-7 * np.abs(x).sum()), (err, tf_err)
