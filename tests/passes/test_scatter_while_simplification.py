"""ScatterExpander (one-index scatters) and WhileLoopSimplifier (0/1-trip loops): HLO in, FileCheck out.
The scatter modules are TF 2.21's own (``--xla_dump_hlo_pass_re=.*`` of ``unsorted_segment_sum``, the
module XLA:CPU hands to ``scatter_expander``, metadata left out); the checks are TF's module after
``post_scatter_expansion_simplification``. Every case also checks values with the evaluator."""
import numpy as np
import pytest

from tests.passes.passes_helpers import assert_same_values, filecheck, module_text, random_args
from tfxla_cluster.hlo.evaluator import evaluate
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.hlo.verifier import verify_module
from tfxla_cluster.passes.pass_ import IfChanged
from tfxla_cluster.passes.pipeline import simplification
from tfxla_cluster.passes.scatter_expander import ScatterExpander
from tfxla_cluster.passes.while_loop_simplifier import WhileLoopSimplifier, trip_count

COMBINER = """
%scatter-combiner.1 (p0.1: f64[], p1.1: f64[]) -> f64[] {
  %p0.1 = f64[] parameter(0)
  %p1.1 = f64[] parameter(1)
  ROOT %add.1 = f64[] add(%p0.1, %p1.1)
}
"""

SCATTERS = [
    # unsorted_segment_sum(f64[1,1], [0], 1): TF's module ends as its parameter
    ("one_id_1x1", """
ENTRY %e (arg0.1: f64[1,1]) -> f64[1,1] {
  %constant = f64[1,1]{1,0} constant({ {0} })
  %ids = s32[1]{0} constant({0})
  %arg0.1 = f64[1,1]{1,0} parameter(0)
  ROOT %s = f64[1,1]{1,0} scatter(%constant, %ids, %arg0.1), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%scatter-combiner.1
}""", "CHECK: ROOT %arg0.1 = f64[1,1]{1,0} parameter(0)"),
    # unsorted_segment_sum(f64[1,3], [2], 3): TF's module ends as pad(arg, 0), padding=2_0x0_0
    ("one_id_row", """
ENTRY %e (arg0.1: f64[1,3]) -> f64[3,3] {
  %zero = f64[] constant(0)
  %b = f64[3,3]{1,0} broadcast(%zero), dimensions={}
  %ids = s32[1]{0} constant({2})
  %arg0.1 = f64[1,3]{1,0} parameter(0)
  ROOT %s = f64[3,3]{1,0} scatter(%b, %ids, %arg0.1), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%scatter-combiner.1
}""", "CHECK: ROOT {{.*}} f64[3,3]{1,0} pad(%arg0.1, %zero), padding=2_0x0_0"),
    # an index the graph computes: the validity check and the dynamic update stay
    ("computed_id", """
ENTRY %e (arg0.1: f64[1,3], ids: s32[1]) -> f64[3,3] {
  %zero = f64[] constant(0)
  %b = f64[3,3]{1,0} broadcast(%zero), dimensions={}
  %ids = s32[1]{0} parameter(1)
  %arg0.1 = f64[1,3]{1,0} parameter(0)
  ROOT %s = f64[3,3]{1,0} scatter(%b, %ids, %arg0.1), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%scatter-combiner.1
}""", "CHECK: compare(\nCHECK: select(\nCHECK: ROOT {{.*}} dynamic-update-slice("),
]


def _module(body: str):
    module = parse_module("HloModule m\n" + COMBINER + body)
    verify_module(module)
    return module


@pytest.mark.parametrize("name,body,checks", SCATTERS, ids=[c[0] for c in SCATTERS])
def test_one_index_scatter_expands_as_tf(name, body, checks):
    module = _module(body)
    args = random_args(module, seed=3)
    if name == "computed_id":
        args[1] = np.array([1], np.int32)
    want = evaluate(module, *args)
    changed = IfChanged("scatter-expansion", [ScatterExpander(),
                                              simplification("post_scatter_expansion_simplification")]).run(module)
    assert changed
    verify_module(module)
    text = module_text(module)
    assert " scatter(" not in text
    filecheck(text, checks)
    assert_same_values(evaluate(module, *args), want, rtol=0, atol=0, context=name)
    if name == "computed_id":   # an index past the end leaves the operand as it is, as the scatter does
        args[1] = np.array([7], np.int32)
        assert not evaluate(module, *args).any()


def test_scatter_of_two_indices_stays():
    """TF's dump of unsorted_segment_sum(f64[2,2], [0, 2], 3): the scatter is emitted as it is."""
    module = _module("""
ENTRY %e (arg0.1: f64[2,2]) -> f64[3,2] {
  %zero = f64[] constant(0)
  %b = f64[3,2]{1,0} broadcast(%zero), dimensions={}
  %ids = s32[2]{0} constant({0, 2})
  %arg0.1 = f64[2,2]{1,0} parameter(0)
  ROOT %s = f64[3,2]{1,0} scatter(%b, %ids, %arg0.1), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%scatter-combiner.1
}""")
    assert not ScatterExpander().run(module)


def _loop(init: int, bound: int, direction: str = "LT", step: int = 1, side_effect: bool = False) -> str:
    effect = ('\n  %lo = f32[] constant(0)\n  %hi = f32[] constant(1)\n'
              '  %noise = f32[3]{0} rng(%lo, %hi), distribution=rng_uniform') if side_effect else ""
    return f"""HloModule m

%cond (p: (s32[], f32[3])) -> pred[] {{
  %p = (s32[], f32[3]{{0}}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant({bound})
  ROOT %lt = pred[] compare(%i, %n), direction={direction}
}}

%body (q: (s32[], f32[3])) -> (s32[], f32[3]) {{
  %q = (s32[], f32[3]{{0}}) parameter(0)
  %i.1 = s32[] get-tuple-element(%q), index=0
  %k = s32[] constant({step})
  %next = s32[] add(%i.1, %k)
  %x = f32[3]{{0}} get-tuple-element(%q), index=1
  %y = f32[3]{{0}} maximum(%x, %x){effect}
  ROOT %t = (s32[], f32[3]{{0}}) tuple(%next, %y)
}}

ENTRY %e (a: f32[3]) -> f32[3] {{
  %a = f32[3]{{0}} parameter(0)
  %zero = s32[] constant({init})
  %init = (s32[], f32[3]{{0}}) tuple(%zero, %a)
  %w = (s32[], f32[3]{{0}}) while(%init), condition=%cond, body=%body
  ROOT %r = f32[3]{{0}} get-tuple-element(%w), index=1
}}
"""


@pytest.mark.parametrize("init,bound,direction,step,trips", [
    (0, 1, "LT", 1, 1), (0, 0, "LT", 1, 0), (5, 3, "LT", 1, 0), (0, 0, "LE", 1, 1), (0, 2, "LT", 1, 2),
    (0, 3, "LT", 2, 2), (0, 10, "LE", 4, 3), (2, 1, "GT", 1, 1)])
def test_trip_count(init, bound, direction, step, trips):
    """MatchTrivialLoopTripCount's arithmetic; ``i > N`` (not matched) by one brute-force step."""
    module = parse_module(_loop(init, bound, direction, step))
    w = next(i for i in module.entry.instructions if i.opcode.text == "while")
    want = trips if direction != "GT" else None   # 2 > 1 holds forever: brute force gives up after one step
    assert trip_count(w) == want


@pytest.mark.parametrize("bound,kept", [(0, False), (1, False), (2, True)])
def test_zero_and_one_trip_loops_are_removed(bound, kept):
    module = parse_module(_loop(0, bound))
    args = [np.array([1.0, -2.0, 3.5], np.float32)]
    want = evaluate(module, *args)
    changed = WhileLoopSimplifier().run(module)
    verify_module(module)
    assert changed is not kept
    assert ("while(" in module_text(module)) is kept
    assert_same_values(evaluate(module, *args), want, rtol=0, atol=0)


def test_one_trip_loop_with_a_side_effect_stays():
    module = parse_module(_loop(0, 1, side_effect=True))
    assert not WhileLoopSimplifier().run(module)


def _loop_with_bound_element(bound: int, bound_shape: str = "s32[]") -> str:
    """``i < n`` with n a tuple element the body passes through (tf.while_loop's captured bound)."""
    n = "%n.1 = s32[] reshape(%nb)" if bound_shape != "s32[]" else ""
    m = "%n.1" if n else "%nb"
    return f"""HloModule m

%cond (p: (s32[], f32[3], {bound_shape})) -> pred[] {{
  %p = (s32[], f32[3]{{0}}, {bound_shape}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %nb = {bound_shape} get-tuple-element(%p), index=2
  {n}
  ROOT %lt = pred[] compare(%i, {m}), direction=LT
}}

%body (q: (s32[], f32[3], {bound_shape})) -> (s32[], f32[3], {bound_shape}) {{
  %q = (s32[], f32[3]{{0}}, {bound_shape}) parameter(0)
  %i.1 = s32[] get-tuple-element(%q), index=0
  %k = s32[] constant(1)
  %next = s32[] add(%i.1, %k)
  %x = f32[3]{{0}} get-tuple-element(%q), index=1
  %y = f32[3]{{0}} multiply(%x, %x)
  %n = {bound_shape} get-tuple-element(%q), index=2
  ROOT %t = (s32[], f32[3]{{0}}, {bound_shape}) tuple(%next, %y, %n)
}}

ENTRY %e (a: f32[3]) -> f32[3] {{
  %a = f32[3]{{0}} parameter(0)
  %zero = s32[] constant(0)
  %bound = {bound_shape} constant({bound if bound_shape == "s32[]" else "{%d}" % bound})
  %init = (s32[], f32[3]{{0}}, {bound_shape}) tuple(%zero, %a, %bound)
  %w = (s32[], f32[3]{{0}}, {bound_shape}) while(%init), condition=%cond, body=%body
  ROOT %r = f32[3]{{0}} get-tuple-element(%w), index=1
}}
"""


@pytest.mark.parametrize("bound,kept", [(0, False), (1, False), (3, True)])
def test_constant_bound_element_is_propagated(bound, kept):
    """TryPropagateConstant: a scalar element the body passes through with a constant init is read as the
    constant in the condition and body, so the trip count is known (seed 266000983's 0-trip loop)."""
    module = parse_module(_loop_with_bound_element(bound))
    args = [np.array([1.0, -2.0, 3.5], np.float32)]
    want = evaluate(module, *args)
    assert WhileLoopSimplifier().run(module)
    verify_module(module)
    assert ("while(" in module_text(module)) is kept
    assert_same_values(evaluate(module, *args), want, rtol=0, atol=0)
    if kept:   # the body's pass-through element is now the constant itself
        w = next(i for i in module.entry.instructions if i.opcode.text == "while")
        assert w.while_body.root.operands[2].opcode.text == "constant"
        assert trip_count(w) == 3   # known now (MatchTrivialLoopTripCount), more than one: the loop stays


def test_array_bound_element_is_not_propagated():
    """Only scalars are propagated (XLA: array constants would be copied into the loop)."""
    module = parse_module(_loop_with_bound_element(0, "s32[1]"))
    assert not WhileLoopSimplifier().run(module)
    assert "while(" in module_text(module)
