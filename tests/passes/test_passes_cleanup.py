"""DCE, CSE, constant folding, expanders, control-flow simplifiers and layout assignment: goldens,
XLA's rules as positive and negative cases, values preserved, second runs change nothing."""
import numpy as np
import pytest

from tests.passes.passes_helpers import assert_same_values, filecheck, module_text, random_args
from tfxla_cluster.hlo.evaluator import evaluate
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.hlo.verifier import verify_module
from tfxla_cluster.passes import (CallInliner, ConditionalSimplifier, CpuLayoutAssignment, DotDecomposer,
                                  HloConstantFolding, HloCSE, HloDCE, LogisticExpander, SortSimplifier,
                                  RngBitGeneratorExpander, TopkRewriter, TransposeFolding, TupleSimplifier)
from tfxla_cluster.passes.constant_folding import should_fold

ADD = """%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}
"""


def run(pass_, text, checks=None, seed=0):
    """Run ``pass_`` on ``text``: verify, compare values, FileCheck, and check a second run is a no-op."""
    module = parse_module(text)
    verify_module(module)
    args = random_args(module, seed)
    want = evaluate(module, *args)
    changed = pass_.run(module)
    verify_module(module)
    assert_same_values(evaluate(module, *args), want, rtol=1e-6, atol=1e-6, context=pass_.name)
    if checks:
        filecheck(module_text(module), checks)
    assert not type(pass_)().run(module), f"second {pass_.name} run changed the module"
    return module, changed


# ---------------------------------------------------------------- DCE
def test_dce_removes_dead_code_but_keeps_side_effects_and_parameters():
    module, changed = run(HloDCE(), """HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  q = f32[4] parameter(1)
  dead = f32[4] exponential(p)
  dead2 = f32[4] add(dead, q)
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  r = f32[4] rng(lo, hi), distribution=rng_uniform
  ROOT n = f32[4] negate(p)
}""", "CHECK: %q = f32[4]{0} parameter(1)\nCHECK-NOT: exponential\nCHECK: rng(\nCHECK: ROOT %n")
    assert changed


def test_dce_removes_unused_computations():
    module, changed = run(HloDCE(), """HloModule m
""" + ADD + """
%unused (a: f32[]) -> f32[] {
  ROOT %a = f32[] parameter(0)
}

ENTRY e {
  p = f32[4] parameter(0)
  ROOT n = f32[4] negate(p)
}""")
    assert changed and [c.name for c in module.computations] == ["e"]


def test_dce_shrinks_multi_output_fusion():
    module, changed = run(HloDCE(), """HloModule m
%f (a: f32[4], b: f32[4]) -> (f32[4], f32[4], f32[4]) {
  %a = f32[4]{0} parameter(0)
  %b = f32[4]{0} parameter(1)
  %x = f32[4]{0} add(%a, %a)
  %y = f32[4]{0} multiply(%b, %b)
  %z = f32[4]{0} negate(%a)
  ROOT %t = (f32[4]{0}, f32[4]{0}, f32[4]{0}) tuple(%x, %y, %z)
}

ENTRY e {
  p = f32[4] parameter(0)
  q = f32[4] parameter(1)
  f = (f32[4], f32[4], f32[4]) fusion(p, q), kind=kLoop, calls=%f
  g0 = f32[4] get-tuple-element(f), index=0
  g2 = f32[4] get-tuple-element(f), index=2
  ROOT r = f32[4] add(g0, g2)
}""", "CHECK: ROOT %t = (f32[4]{0}, f32[4]{0}) tuple(%x, %z)\nCHECK: fusion(%p), kind=kLoop\nCHECK: index=1")
    assert changed


# ---------------------------------------------------------------- CSE
def test_cse_merges_constants_iotas_and_commuted_ops():
    module, _ = run(HloCSE(), """HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  c1 = f32[4] constant({1, 2, 3, 4})
  c2 = f32[4] constant({1, 2, 3, 4})
  i1 = s32[4] iota(), iota_dimension=0
  i2 = s32[4] iota(), iota_dimension=0
  a1 = f32[4] add(p, c1)
  a2 = f32[4] add(c2, p)
  s1 = f32[4] subtract(p, c1)
  s2 = f32[4] subtract(c1, p)
  m = f32[4] multiply(a1, a2)
  ci1 = f32[4] convert(i1)
  ci2 = f32[4] convert(i2)
  t = f32[4] add(ci1, ci2)
  ROOT r = (f32[4], f32[4], f32[4], f32[4]) tuple(m, s1, s2, t)
}""", "CHECK: %c1 = \nCHECK-NOT: %c2\nCHECK: %i1\nCHECK-NOT: %i2 =\nCHECK: %a1 = f32[4]{0} add(%p, %c1)"
      "\nCHECK-NOT: %a2 =\nCHECK: subtract(%p, %c1)\nCHECK: subtract(%c1, %p)\nCHECK: multiply(%a1, %a1)"
      "\nCHECK: add(%ci1, %ci1)")


def test_cse_matches_identical_reducers_and_keeps_different_ones():
    text = """HloModule m
%add.1 (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

%add.2 (x.1: f32[], y.1: f32[]) -> f32[] {
  %x.1 = f32[] parameter(0)
  %y.1 = f32[] parameter(1)
  ROOT %s.1 = f32[] add(%x.1, %y.1)
}

%max (x.2: f32[], y.2: f32[]) -> f32[] {
  %x.2 = f32[] parameter(0)
  %y.2 = f32[] parameter(1)
  ROOT %s.2 = f32[] maximum(%x.2, %y.2)
}

ENTRY e {
  p = f32[4,3] parameter(0)
  z = f32[] constant(0)
  r1 = f32[4] reduce(p, z), dimensions={1}, to_apply=%add.1
  r2 = f32[4] reduce(p, z), dimensions={1}, to_apply=%add.2
  r3 = f32[4] reduce(p, z), dimensions={1}, to_apply=%max
  ROOT t = (f32[4], f32[4], f32[4]) tuple(r1, r2, r3)
}"""
    module, changed = run(HloCSE(), text, "CHECK: tuple(%r1, %r1, %r3)")
    assert changed


def test_cse_leaves_side_effects_and_elided_constants():
    module = parse_module("""HloModule m
ENTRY e {
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  r1 = f32[4] rng(lo, hi), distribution=rng_uniform
  r2 = f32[4] rng(lo, hi), distribution=rng_uniform
  c1 = f32[4] constant({...})
  c2 = f32[4] constant({...})
  ROOT t = (f32[4], f32[4], f32[4], f32[4]) tuple(r1, r2, c1, c2)
}""")
    assert not HloCSE().run(module)


# ---------------------------------------------------------------- constant folding
def test_constant_folding_folds_constant_expressions():
    module, changed = run(HloConstantFolding(), """HloModule m
""" + ADD + """
ENTRY e {
  p = f32[4] parameter(0)
  c = f32[4] constant({1, 2, 3, 4})
  s = f32[] constant(2)
  b = f32[4] broadcast(s), dimensions={}
  m = f32[4] multiply(c, b)
  i = s32[4] iota(), iota_dimension=0
  ci = f32[4] convert(i)
  z = f32[] constant(0)
  r = f32[] reduce(m, z), dimensions={0}, to_apply=%add
  rb = f32[4] broadcast(r), dimensions={}
  a = f32[4] add(m, rb)
  ROOT out = f32[4] add(p, a)
}""", "CHECK: constant({22, 24, 26, 28})\nCHECK: ROOT %out = f32[4]{0} add(%p, %")
    assert changed


@pytest.mark.parametrize("body,folds", [
    ("ROOT b = f32[4] broadcast(c), dimensions={}", False),              # broadcast: never
    ("ROOT i = s32[4] iota(), iota_dimension=0", False),                  # iota: never
    ("i = s32[] constant(2)\n  ROOT x = f32[4] rng(c, c), distribution=rng_uniform", False),  # rng: never
    ("ROOT n = f32[] negate(c)", True),
    ("b = f32[4] broadcast(c), dimensions={}\n  ROOT n = f32[4] add(b, b)", False),  # no constant operand
])
def test_constant_folding_rules(body, folds):
    module = parse_module(f"HloModule m\nENTRY e {{\n  c = f32[] constant(3)\n  {body}\n}}")
    assert HloConstantFolding().run(module) is folds


def test_constant_folding_size_cap():
    module = parse_module("""HloModule m
ENTRY e {
  c = f32[] constant(1)
  b = f32[46000000] broadcast(c), dimensions={}
  c2 = f32[] constant(2)
  ROOT m = f32[46000000] multiply(b, b)
}""")
    assert not should_fold(module.entry.root)


# ---------------------------------------------------------------- expanders
def test_logistic_expander():
    run(LogisticExpander(), """HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  ROOT l = f32[4] logistic(p)
}""", "CHECK: negate(%p)\nCHECK: exponential(%negate\nCHECK: add(%broadcast{{.*}}, %exponential\nCHECK: ROOT {{.*}} divide(")


@pytest.mark.parametrize("dot,shapes,canonical", [
    ("lhs_contracting_dims={1}, rhs_contracting_dims={0}", ("f32[2,3]", "f32[3,4]"), True),
    ("lhs_contracting_dims={0}, rhs_contracting_dims={0}", ("f32[3,2]", "f32[3,4]"), True),
    ("lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}",
     ("f32[5,2,3]", "f32[5,3,4]"), True),
    ("lhs_batch_dims={1}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}",
     ("f32[2,5,3]", "f32[5,3,4]"), False),
    ("lhs_contracting_dims={1,2}, rhs_contracting_dims={0,1}", ("f32[2,3,6]", "f32[3,6,4]"), False),
    ("lhs_contracting_dims={2}, rhs_contracting_dims={0}", ("f32[2,7,3]", "f32[3,4]"), False),
    ("lhs_contracting_dims={}, rhs_contracting_dims={}", ("f32[2]", "f32[4]"), False),
])
def test_dot_decomposer(dot, shapes, canonical):
    from tfxla_cluster.passes.expanders import is_canonical_dot
    text = _dot_module(shapes, dot)
    assert is_canonical_dot(parse_module(text).entry.root) is canonical
    module, changed = run(DotDecomposer(), text)
    assert changed is (not canonical)
    dots = [i for i in module.entry.instructions if i.opcode is O.DOT]
    assert len(dots) == 1 and is_canonical_dot(dots[0])


def _dot_module(shapes, dot: str) -> str:
    """A module ``dot(a, b)`` with the result shape inferred by the HLO builder."""
    import re
    from tfxla_cluster.hlo.builder import HloBuilder
    from tfxla_cluster.hlo.parser import parse_shape

    def ints(name):
        m = re.search(name + r"=\{([0-9,]*)\}", dot)
        return tuple(int(x) for x in m[1].split(",") if x) if m else ()

    b = HloBuilder("probe")
    lhs, rhs = b.parameter(0, parse_shape(shapes[0])), b.parameter(1, parse_shape(shapes[1]))
    d = b.dot(lhs, rhs, ints("lhs_contracting_dims"), ints("rhs_contracting_dims"), ints("lhs_batch_dims"),
              ints("rhs_batch_dims"))
    return f"""HloModule m
ENTRY e {{
  a = {shapes[0]} parameter(0)
  b = {shapes[1]} parameter(1)
  ROOT d = {d.shape.to_string(layout=False)} dot(a, b), {dot}
}}"""


def test_transpose_folding():
    run(TransposeFolding(), """HloModule m
ENTRY e {
  a = f32[3,2] parameter(0)
  b = f32[4,3] parameter(1)
  ta = f32[2,3] transpose(a), dimensions={1,0}
  tb = f32[3,4] transpose(b), dimensions={1,0}
  ROOT d = f32[2,4] dot(ta, tb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""", "CHECK: ROOT {{.*}} dot(%a, %b), lhs_contracting_dims={0}, rhs_contracting_dims={1}")


def test_call_inliner():
    module, changed = run(CallInliner(), """HloModule m
%f (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  %n = f32[4]{0} negate(%a)
  ROOT %e = f32[4]{0} exponential(%n)
}

ENTRY e {
  p = f32[4] parameter(0)
  c = f32[4] call(p), to_apply=%f
  ROOT r = f32[4] add(c, p)
}""", "CHECK: negate(%p)\nCHECK: exponential(%n\nCHECK: ROOT %r = f32[4]{0} add(%e")
    assert changed and len(module.computations) == 1


# ---------------------------------------------------------------- control flow and tuples
BRANCHES = """%t (a: (f32[4])) -> (f32[4]) {
  %a = (f32[4]{0}) parameter(0)
  %g = f32[4]{0} get-tuple-element(%a), index=0
  %c = f32[] constant(2)
  %b = f32[4]{0} broadcast(%c), dimensions={}
  %m = f32[4]{0} multiply(%g, %b)
  ROOT %r = (f32[4]{0}) tuple(%m)
}

%f (a.1: (f32[4])) -> (f32[4]) {
  %a.1 = (f32[4]{0}) parameter(0)
  %g.1 = f32[4]{0} get-tuple-element(%a.1), index=0
  %n = f32[4]{0} negate(%g.1)
  ROOT %r.1 = (f32[4]{0}) tuple(%n)
}
"""


def test_conditional_with_cheap_branches_becomes_select():
    module, changed = run(ConditionalSimplifier(), "HloModule m\n" + BRANCHES + """
ENTRY e {
  p = pred[] parameter(0)
  x = f32[4] parameter(1)
  t = (f32[4]) tuple(x)
  c = (f32[4]) conditional(p, t, t), true_computation=%t, false_computation=%f
  ROOT g = f32[4] get-tuple-element(c), index=0
}""", "CHECK: broadcast(%p), dimensions={}\nCHECK: select(\nCHECK-NOT: conditional")
    assert changed and len(module.computations) == 1


def test_conditional_with_constant_predicate_is_inlined():
    run(ConditionalSimplifier(), "HloModule m\n" + BRANCHES + """
ENTRY e {
  p = pred[] constant(false)
  x = f32[4] parameter(0)
  t = (f32[4]) tuple(x)
  c = (f32[4]) conditional(p, t, t), true_computation=%t, false_computation=%f
  ROOT g = f32[4] get-tuple-element(c), index=0
}""", "CHECK: negate(\nCHECK-NOT: multiply\nCHECK-NOT: conditional")


def test_conditional_with_expensive_branch_stays():
    text = """HloModule m
%lt (x: f32[], y: f32[]) -> pred[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %l = pred[] compare(%x, %y), direction=LT
}
""" + BRANCHES.replace("%n = f32[4]{0} negate(%g.1)", "%n = f32[4]{0} sort(%g.1), dimensions={0}, to_apply=%lt") + """
ENTRY e {
  p = pred[] parameter(0)
  x = f32[4] parameter(1)
  t = (f32[4]) tuple(x)
  c = (f32[4]) conditional(p, t, t), true_computation=%t, false_computation=%f
  ROOT g = f32[4] get-tuple-element(c), index=0
}"""
    assert not ConditionalSimplifier().run(parse_module(text))


def test_tuple_simplifier():
    run(TupleSimplifier(), """HloModule m
ENTRY e {
  p = (f32[4], s32[]) parameter(0)
  a = f32[4] get-tuple-element(p), index=0
  b = s32[] get-tuple-element(p), index=1
  ROOT t = (f32[4], s32[]) tuple(a, b)
}""", "CHECK: ROOT %p")


# ---------------------------------------------------------------- layout assignment
def test_layout_assignment_makes_everything_row_major_and_keeps_bitcast_meaning():
    module, changed = run(CpuLayoutAssignment(), """HloModule m
ENTRY e {
  p = f32[2,3]{0,1} parameter(0)
  t = f32[3,2]{0,1} transpose(p), dimensions={1,0}
  b = f32[6]{0} bitcast(t)
  ROOT n = f32[6] negate(b)
}""", "CHECK: f32[2,3]{1,0} parameter(0)\nCHECK-NOT: {0,1}\nCHECK-NOT: bitcast")
    assert changed


# ---------------------------------------------------------------- sorts
GT_TOTAL = """%gt (a: f32[], b: f32[], c: s32[], d: s32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %c = s32[] parameter(2)
  %d = s32[] parameter(3)
  ROOT %g = pred[] compare(%a, %b), direction=GT, type=TOTALORDER
}
"""


def test_topk_rewriter():
    module, changed = run(TopkRewriter(), "HloModule m\n" + GT_TOTAL + """
ENTRY e {
  p = f32[4,16] parameter(0)
  i = s32[4,16] iota(), iota_dimension=1
  s = (f32[4,16], s32[4,16]) sort(p, i), dimensions={1}, is_stable=true, to_apply=%gt
  v = f32[4,16] get-tuple-element(s), index=0
  x = s32[4,16] get-tuple-element(s), index=1
  vk = f32[4,3] slice(v), slice={[0:4], [0:3]}
  xk = s32[4,3] slice(x), slice={[0:4], [0:3]}
  ROOT t = (f32[4,3], s32[4,3]) tuple(vk, xk)
}""", 'CHECK: custom-call(%p), custom_call_target="TopK"\nCHECK-NOT: sort(\nCHECK: ROOT')
    assert changed


def test_topk_rewriter_needs_a_prefix_slice():
    module = parse_module("HloModule m\n" + GT_TOTAL + """
ENTRY e {
  p = f32[4,16] parameter(0)
  i = s32[4,16] iota(), iota_dimension=1
  s = (f32[4,16], s32[4,16]) sort(p, i), dimensions={1}, is_stable=true, to_apply=%gt
  v = f32[4,16] get-tuple-element(s), index=0
  ROOT vk = f32[4,3] slice(v), slice={[0:4], [2:5]}
}""")
    assert not TopkRewriter().run(module)


def test_sort_simplifier_drops_unread_operands():
    module, changed = run(SortSimplifier(), "HloModule m\n" + GT_TOTAL + """
ENTRY e {
  p = f32[4,16] parameter(0)
  i = s32[4,16] iota(), iota_dimension=1
  s = (f32[4,16], s32[4,16]) sort(p, i), dimensions={1}, is_stable=true, to_apply=%gt
  ROOT v = f32[4,16] get-tuple-element(s), index=0
}""", "CHECK: (a.1: f32[], b.1: f32[]) -> pred[]\nCHECK-NOT: s32\nCHECK: ROOT {{.*}} f32[4,16]{1,0} sort(%p)")
    assert changed


# ---------------------------------------------------------------- rng-bit-generator
@pytest.mark.parametrize("out,state,words", [
    ("u32[4,4]", "u64[3]", [1, 2, 3]),
    ("u32[4,4]", "u64[3]", [2 ** 64 - 1, 2 ** 64 - 3, 7]),   # the counter's low word wraps
    ("u64[5]", "u64[3]", [11, 12, 13]),
    ("u8[7,3]", "u64[3]", [5, 6, 7]),
    ("u32[3]", "u64[2]", [9, 2 ** 64 - 2]),
])
def test_rng_bit_generator_expander_is_bit_exact(out, state, words):
    text = f"""HloModule m
ENTRY e {{
  s = {state} parameter(0)
  ROOT r = ({state}, {out}) rng-bit-generator(s), algorithm=rng_philox
}}"""
    module = parse_module(text)
    arg = np.array(words, dtype=np.uint64)
    want = evaluate(module, arg)
    assert RngBitGeneratorExpander().run(module)
    verify_module(module)
    assert not any(i.opcode is O.RNG_BIT_GENERATOR for i in module.entry.instructions)
    assert_same_values(evaluate(module, arg), want)


def test_rng_bit_generator_expander_leaves_three_fry():
    module = parse_module("""HloModule m
ENTRY e {
  s = u64[2] parameter(0)
  ROOT r = (u64[2], u32[4]) rng-bit-generator(s), algorithm=rng_three_fry
}""")
    assert not RngBitGeneratorExpander().run(module)
