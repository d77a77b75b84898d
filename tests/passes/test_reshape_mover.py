"""ReshapeMover: XLA's reshape-mover rules as positive and negative cases (HLO text in, FileCheck out),
values preserved (reference evaluator), a second run changes nothing."""
from tests.passes.passes_helpers import assert_same_values, filecheck, module_text, random_args
from tfxla_cluster.hlo.evaluator import evaluate
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.hlo.verifier import verify_module
from tfxla_cluster.passes import AlgebraicSimplifier, FixedPoint, HloDCE, ReshapeMover, cpu_pipeline


def run(text: str, checks: str | None = None) -> bool:
    module = parse_module(text)
    verify_module(module)
    args = random_args(module, 0)
    want = evaluate(module, *args)
    changed = ReshapeMover().run(module)
    verify_module(module)
    assert_same_values(evaluate(module, *args), want, rtol=0, atol=0, context="reshape-mover")
    if checks:
        filecheck(module_text(module), checks)
    assert not ReshapeMover().run(module), "a second reshape-mover run changed the module"
    return changed


def test_equivalent_reshapes_sink_below_the_elementwise_op():
    assert run("""HloModule m
ENTRY e {
  a = f32[1,8,1,7] parameter(0)
  b = f32[1,8,1,7] parameter(1)
  ra = f32[8,7] reshape(a)
  rb = f32[8,7] reshape(b)
  ROOT s = f32[8,7] add(ra, rb)
}""", """
CHECK: %s{{[.0-9]*}} = f32[1,8,1,7]{3,2,1,0} add(%a, %b)
CHECK: ROOT %{{.*}} = f32[8,7]{1,0} reshape(%s
""")


def test_a_scalar_compare_of_a_reshaped_slice_compares_first_then_reshapes():
    """TF's tf.cond predicate ``x[0] > 0``: the compare moves above the rank change, as in TF's XLA."""
    assert run("""HloModule m
ENTRY e {
  x = f32[2] parameter(0)
  s = f32[1] slice(x), slice={[0:1]}
  r = f32[] reshape(s)
  zero = f32[] constant(0)
  ROOT gt = pred[] compare(r, zero), direction=GT
}""", """
CHECK: %gt{{[.0-9]*}} = pred[1]{0} compare(%s, %{{.*}}), direction=GT
CHECK: ROOT %{{.*}} = pred[] reshape(%gt
""")


def test_transposes_sink_through_a_chain_with_algsimp_and_a_scalar_broadcast_follows():
    """Inverse transposes are inserted as they are in XLA (algsimp cancels them); in the simplification
    fixed point the transpose ends below the whole chain."""
    module = parse_module("""HloModule m
ENTRY e {
  a = f32[3,5] parameter(0)
  b = f32[3,5] parameter(1)
  ta = f32[5,3] transpose(a), dimensions={1,0}
  tb = f32[5,3] transpose(b), dimensions={1,0}
  c = f32[] constant(2)
  bc = f32[5,3] broadcast(c), dimensions={}
  m = f32[5,3] multiply(ta, tb)
  ROOT s = f32[5,3] add(m, bc)
}""")
    args = random_args(module, 0)
    want = evaluate(module, *args)
    assert FixedPoint("simplification", [AlgebraicSimplifier(), HloDCE(), ReshapeMover()]).run(module)
    verify_module(module)
    assert_same_values(evaluate(module, *args), want, rtol=0, atol=0, context="reshape-mover")
    filecheck(module_text(module), """
CHECK: multiply(%a, %b)
CHECK: f32[3,5]{1,0} add(
CHECK: ROOT %{{.*}} = f32[5,3]{1,0} transpose(
""")


def test_a_transpose_of_a_transpose_feeding_an_op_ends_in_one_run():
    """negate(transpose(transpose(x))): each round takes the moved rearrange's own operand instead of
    inserting transpose(inverse-transpose) pairs (which, with no algsimp between rounds, never ended)."""
    assert run("""HloModule m
ENTRY e {
  x = f32[4,6] parameter(0)
  t0 = f32[6,4] transpose(x), dimensions={1,0}
  t1 = f32[4,6] transpose(t0), dimensions={1,0}
  ROOT n = f32[4,6] negate(t1)
}""", """
CHECK: %n{{[.0-9]*}} = f32[4,6]{1,0} negate(%x)
CHECK: transpose(%n
CHECK: ROOT %{{.*}} = f32[4,6]{1,0} transpose(
""")


def test_reshapes_of_different_input_shapes_stay():
    assert not run("""HloModule m
ENTRY e {
  a = f32[8,7] parameter(0)
  b = f32[8,1,7] parameter(1)
  ra = f32[1,8,1,7] reshape(a)
  rb = f32[1,8,1,7] reshape(b)
  ROOT s = f32[1,8,1,7] add(ra, rb)
}""")


def test_a_reshape_with_a_user_that_cannot_move_keeps_all_its_users_in_place():
    """Moving would duplicate the reshape: XLA drops every user of such a rearrange from the candidates."""
    assert not run("""HloModule m
ENTRY e {
  a = f32[1,8] parameter(0)
  b = f32[1,8] parameter(1)
  ra = f32[8] reshape(a)
  rb = f32[8] reshape(b)
  s = f32[8] add(ra, rb)
  ROOT t = (f32[8], f32[8]) tuple(s, ra)
}""")


def test_a_reshape_next_to_a_broadcast_of_a_vector_stays():
    """With reshape_of_1d_broadcast_is_cheap off (XLA:CPU), only scalar broadcasts are trivial."""
    assert not run("""HloModule m
ENTRY e {
  a = f32[2,4] parameter(0)
  v = f32[8] parameter(1)
  ra = f32[8] reshape(a)
  ROOT s = f32[8] add(ra, v)
}""")
    assert not run("""HloModule m
ENTRY e {
  a = f32[1,8,7] parameter(0)
  v = f32[8] parameter(1)
  ra = f32[8,7] reshape(a)
  bv = f32[8,7] broadcast(v), dimensions={0}
  ROOT s = f32[8,7] add(ra, bv)
}""")


def test_the_cpu_pipeline_runs_it_in_the_simplification_fixed_point():
    simplification = next(p for p in cpu_pipeline().passes if p.name == "simplification")
    names = [p.name for p in simplification.passes]
    assert names.index("reshape-mover") == names.index("constant_folding") - 1
