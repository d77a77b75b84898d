"""While loops, conditionals, calls, tuples, sort and scatter compiled == evaluator."""
import numpy as np
import pytest

from tests.codegen.cg_helpers import check, fill_elided, inputs_for, module_of, parsed, random_array
from tfxla_cluster.hlo.attrs import ComparisonType, ScatterDimensionNumbers
from tfxla_cluster.hlo.builder import HloBuilder, make_comparator, make_scalar_computation
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape

RNG = np.random.default_rng(31)

WHILE = """HloModule w
%cond (t: (s32[], f32[4], f32[4])) -> pred[] {
  %t = (s32[], f32[4]{0}, f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant(5)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}
%body (t.1: (s32[], f32[4], f32[4])) -> (s32[], f32[4], f32[4]) {
  %t.1 = (s32[], f32[4]{0}, f32[4]{0}) parameter(0)
  %i.1 = s32[] get-tuple-element(%t.1), index=0
  %one = s32[] constant(1)
  %i2 = s32[] add(%i.1, %one)
  %a = f32[4]{0} get-tuple-element(%t.1), index=1
  %b = f32[4]{0} get-tuple-element(%t.1), index=2
  %c = f32[4]{0} add(%a, %b)
  ROOT %r = (s32[], f32[4]{0}, f32[4]{0}) tuple(%i2, %b, %c)
}
ENTRY %main (x: f32[4], y: f32[4]) -> (s32[], f32[4], f32[4]) {
  %x = f32[4]{0} parameter(0)
  %y = f32[4]{0} parameter(1)
  %zero = s32[] constant(0)
  %init = (s32[], f32[4]{0}, f32[4]{0}) tuple(%zero, %x, %y)
  ROOT %w = (s32[], f32[4]{0}, f32[4]{0}) while(%init), condition=%cond, body=%body
}
"""


def test_while_fibonacci_with_state_swap():
    x, y = np.ones(4, np.float32), np.arange(4, dtype=np.float32)
    _, got = check(parsed(WHILE), x, y)
    assert got[0] == 5


CONDITIONAL = """HloModule c
%neg (p: f32[3]) -> f32[3] {
  %p = f32[3]{0} parameter(0)
  ROOT %n = f32[3]{0} negate(%p)
}
%dbl (q: f32[3]) -> f32[3] {
  %q = f32[3]{0} parameter(0)
  ROOT %d = f32[3]{0} add(%q, %q)
}
%id (r: f32[3]) -> f32[3] {
  ROOT %r = f32[3]{0} parameter(0)
}
ENTRY %main (s: s32[], b: pred[], x: f32[3]) -> (f32[3], f32[3], f32[3]) {
  %s = s32[] parameter(0)
  %b = pred[] parameter(1)
  %x = f32[3]{0} parameter(2)
  %c1 = f32[3]{0} conditional(%s, %x, %x, %x), branch_computations={%neg, %dbl, %id}
  %c2 = f32[3]{0} conditional(%b, %x, %x), true_computation=%neg, false_computation=%dbl
  %call = f32[3]{0} call(%x), to_apply=%dbl
  ROOT %t = (f32[3]{0}, f32[3]{0}, f32[3]{0}) tuple(%c1, %c2, %call)
}
"""


@pytest.mark.parametrize("index,flag", [(0, True), (1, False), (2, True), (7, False), (-1, True)])
def test_conditional_and_call(index, flag):
    x = np.array([1.0, -2.0, 3.5], np.float32)
    check(parsed(CONDITIONAL), np.int32(index), np.bool_(flag), x)


def test_outputs_that_are_parameters_constants_or_repeated():
    text = """HloModule o
ENTRY %main (x: f32[3], y: s32[2,2]) -> (f32[3], f32[3], s32[2,2], f32[2], f32[3], f32[3]) {
  %x = f32[3]{0} parameter(0)
  %y = s32[2,2]{1,0} parameter(1)
  %c = f32[2]{0} constant({1.5, -2})
  %n = f32[3]{0} negate(%x)
  ROOT %t = (f32[3]{0}, f32[3]{0}, s32[2,2]{1,0}, f32[2]{0}, f32[3]{0}, f32[3]{0}) tuple(%x, %n, %y, %c, %n, %x)
}
"""
    x = np.array([1, 2, 3], np.float32)
    y = np.arange(4, dtype=np.int32).reshape(2, 2)
    _, got = check(parsed(text), x, y)
    assert got[0] is not x and got[1] is not got[4]


@pytest.mark.parametrize("shape,dim", [((37,), 0), ((5, 33), 1), ((9, 4), 0), ((1,), 0), ((3, 0), 1)])
def test_sort_multi_operand_stable(shape, dim):
    keys = random_array(shape, np.float32, RNG)
    if keys.size > 4:
        keys.reshape(-1)[:4] = [2.0, 2.0, -0.0, 0.0]  # ties keep their order
    vals = random_array(shape, np.int32, RNG)
    comp = make_comparator("LT", [T.F32, T.S32], ComparisonType.TOTALORDER)

    def build(b, k, v):
        return b.sort([k, v], dim, comp, is_stable=True)
    check(module_of(build, keys, vals), keys, vals)


def test_sort_descending_ints_single_operand():
    x = random_array((6, 10), np.int32, RNG)
    comp = make_comparator("GT", [T.S32])
    check(module_of(lambda b, p: b.sort(p, 1, comp), x), x)


def test_scatter_add_and_replace_with_out_of_bounds_windows():
    text = """HloModule s
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
%replace (c: f32[], d: f32[]) -> f32[] {
  %c = f32[] parameter(0)
  ROOT %d = f32[] parameter(1)
}
ENTRY %main (x: f32[5,3], idx: s32[4,1], u: f32[4,3], i2: s32[3,2], u2: f32[3]) -> (f32[5,3], f32[5,3]) {
  %x = f32[5,3]{1,0} parameter(0)
  %idx = s32[4,1]{1,0} parameter(1)
  %u = f32[4,3]{1,0} parameter(2)
  %i2 = s32[3,2]{1,0} parameter(3)
  %u2 = f32[3]{0} parameter(4)
  %s1 = f32[5,3]{1,0} scatter(%x, %idx, %u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
  %s2 = f32[5,3]{1,0} scatter(%x, %i2, %u2), update_window_dims={}, inserted_window_dims={0,1}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=%replace
  ROOT %t = (f32[5,3]{1,0}, f32[5,3]{1,0}) tuple(%s1, %s2)
}
"""
    x = random_array((5, 3), np.float32, RNG, specials=False)
    idx = np.array([[1], [4], [1], [9]], np.int32)
    u = random_array((4, 3), np.float32, RNG, specials=False)
    i2 = np.array([[0, 2], [4, 1], [0, 2]], np.int32)
    u2 = np.array([5.0, 6.0, 7.0], np.float32)
    _, got = check(parsed(text), x, idx, u, i2, u2, rtol=1e-6, atol=1e-6)
    assert got[1][0, 2] == 7.0  # duplicate indices: the later update wins, as in the evaluator


def test_nested_while_in_conditional_in_while_graph():
    """The recorded TF while-loop graph compiled after XLA's optimisations."""
    from pathlib import Path
    path = Path(__file__).parents[2] / "graphs" / "tf" / "while_loop" / "optimized_hlo.txt"
    m = fill_elided(parsed(path.read_text(encoding="utf-8")))
    check(m, *inputs_for(m), rtol=1e-5, atol=1e-5)


def test_wrapped_scatter_and_sort_fusions_and_tuple_constants():
    """XLA's FusionWrapper puts lone scatters/sorts in fusions; an operand may be a fused expression."""
    text = """HloModule wrapped
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
%lt (c: f32[], d: f32[]) -> pred[] {
  %c = f32[] parameter(0)
  %d = f32[] parameter(1)
  ROOT %l = pred[] compare(%c, %d), direction=LT
}
%wrapped_scatter_computation (p0: f32[5,3], p1: s32[2,1], p2: f32[2,3]) -> f32[5,3] {
  %p0 = f32[5,3]{1,0} parameter(0)
  %two = f32[] constant(2)
  %b2 = f32[5,3]{1,0} broadcast(%two), dimensions={}
  %m = f32[5,3]{1,0} multiply(%p0, %b2)
  %p1 = s32[2,1]{1,0} parameter(1)
  %p2 = f32[2,3]{1,0} parameter(2)
  ROOT %sc = f32[5,3]{1,0} scatter(%m, %p1, %p2), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
}
%wrapped_sort_computation (q0: f32[7]) -> f32[7] {
  %q0 = f32[7]{0} parameter(0)
  ROOT %so = f32[7]{0} sort(%q0), dimensions={0}, to_apply=%lt
}
ENTRY %main (x: f32[5,3], i: s32[2,1], u: f32[2,3], v: f32[7]) -> (f32[5,3], f32[7], f32[2], s32[]) {
  %x = f32[5,3]{1,0} parameter(0)
  %i = s32[2,1]{1,0} parameter(1)
  %u = f32[2,3]{1,0} parameter(2)
  %v = f32[7]{0} parameter(3)
  %ws = f32[5,3]{1,0} fusion(%x, %i, %u), kind=kLoop, calls=%wrapped_scatter_computation
  %wo = f32[7]{0} fusion(%v), kind=kLoop, calls=%wrapped_sort_computation
  %tc = (f32[2]{0}, s32[]) constant(({1.5, -2}, 7))
  %t0 = f32[2]{0} get-tuple-element(%tc), index=0
  %t1 = s32[] get-tuple-element(%tc), index=1
  ROOT %t = (f32[5,3]{1,0}, f32[7]{0}, f32[2]{0}, s32[]) tuple(%ws, %wo, %t0, %t1)
}
"""
    x = random_array((5, 3), np.float32, RNG, specials=False)
    i = np.array([[4], [1]], np.int32)
    u = random_array((2, 3), np.float32, RNG, specials=False)
    v = random_array((7,), np.float32, RNG, specials=False)
    check(parsed(text), x, i, u, v, rtol=1e-6, atol=1e-6)
