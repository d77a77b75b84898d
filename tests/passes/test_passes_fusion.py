"""CPU instruction fusion and sibling multi-output fusion: XLA's structure on the reference examples,
each rule's reason on a minimal module, values preserved, and second runs that change nothing."""
from tests.passes.passes_helpers import (assert_same_values, filecheck, kernel_count, load_tf_golden, module_text,
                                         random_args)
from tfxla_cluster.hlo.attrs import FusionKind
from tfxla_cluster.hlo.evaluator import evaluate
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.hlo.verifier import verify_module
from tfxla_cluster.passes import CpuInstructionFusion, CpuMultiOutputFusion, HloDCE, cpu_pipeline
from tfxla_cluster.passes.fusion import FusionDecision

# relu(x.w + b) as XLA:CPU sees it after layout assignment (reference section 6).
RELU_DENSE = """HloModule relu_dense
ENTRY %main.2 (x.1: f32[128,64], w.1: f32[64,32], b.1: f32[32]) -> f32[128,32] {
  %x.1 = f32[128,64]{1,0} parameter(0)
  %w.1 = f32[64,32]{1,0} parameter(1)
  %dot_general.1 = f32[128,32]{1,0} dot(%x.1, %w.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %b.1 = f32[32]{0} parameter(2)
  %add.6 = f32[128,32]{1,0} broadcast(%b.1), dimensions={1}
  %add.7 = f32[128,32]{1,0} add(%dot_general.1, %add.6)
  %constant.0 = f32[] constant(0)
  %max.0 = f32[128,32]{1,0} broadcast(%constant.0), dimensions={}
  ROOT %max.1 = f32[128,32]{1,0} maximum(%add.7, %max.0)
}
"""


def fuse(text_or_module, **kw):
    module = parse_module(text_or_module) if isinstance(text_or_module, str) else text_or_module
    verify_module(module)
    args = random_args(module, seed=3)
    want = evaluate(module, *args)
    fusion = CpuInstructionFusion(**kw)
    changed = fusion.run(module)
    HloDCE().run(module)
    verify_module(module)
    assert_same_values(evaluate(module, *args), want, rtol=1e-5, atol=1e-5, context="fusion")
    assert not CpuInstructionFusion(**kw).run(module), "a second fusion run changed the module"
    return module, fusion, changed


def decision(fusion: CpuInstructionFusion, producer: str, consumer_prefix: str = "") -> FusionDecision:
    hits = [d.decision for d in fusion.decisions if d.producer == producer and d.consumer.startswith(consumer_prefix)]
    assert hits, f"no decision about %{producer}: {[str(d) for d in fusion.decisions]}"
    return hits[-1]


def test_relu_dense_matches_xla():
    module, fusion, changed = fuse(RELU_DENSE)
    assert changed
    filecheck(module_text(module), """
CHECK: %fused_computation
CHECK-DAG: parameter(0)
CHECK: broadcast(%{{param.*}}), dimensions={1}
CHECK: add(
CHECK: f32[] constant(0)
CHECK: broadcast(%{{constant.*}}), dimensions={}
CHECK: ROOT {{.*}} maximum(
CHECK: ENTRY %main.2
CHECK: %dot_general.1 = f32[128,32]{1,0} dot(%x.1, %w.1)
CHECK: ROOT {{.*}} fusion(%dot_general.1, %b.1), kind=kLoop, calls=%fused_computation""".replace("CHECK-DAG", "CHECK"))
    assert kernel_count(module) == 2
    # a dot reads more than it writes and cannot fuse into every user: it is never duplicated
    assert decision(fusion, "dot_general.1").reason == "operand can not be duplicated"


def test_softmax_matches_xla():
    """XLA:CPU makes four kernels of softmax: max-reduce, sub+exp, sum-reduce, broadcast-divide (TF 2.21's
    algsimp keeps the divide by a broadcast: its dump divides each element, rounding as one divide)."""
    module, args = load_tf_golden("softmax")
    want = evaluate(module, *args)
    ctx_pipeline = cpu_pipeline()
    ctx_pipeline.run(module)
    assert_same_values(evaluate(module, *args), want, context="softmax")
    assert kernel_count(module) == 4
    fusion = next(p for p in ctx_pipeline.passes if isinstance(p, CpuInstructionFusion))
    reasons = {(d.producer.split(".")[0], d.decision.reason) for d in fusion.decisions}
    # exp has two users (the sum and the divide): duplicating an expensive op is refused
    assert ("Softmax", "expensive producer would be duplicated") in reasons
    # a reduce read through a broadcast would be recomputed per element
    assert ("Softmax", "Fusion is not profitable.") in reasons
    roots = sorted(i.fused_computation.root.opcode.text for i in module.entry.instructions if i.opcode is O.FUSION)
    assert roots == ["divide", "exponential"]


def test_non_scalar_constants_are_not_fused():
    module, fusion, _ = fuse("""HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  c = f32[4] constant({1, 2, 3, 4})
  a = f32[4] add(p, c)
  ROOT n = f32[4] negate(a)
}""")
    assert decision(fusion, "c").reason == "Don't fuse non-scalar constants."
    assert kernel_count(module) == 1


def test_scalar_constant_alone_with_one_op_is_not_a_fusion():
    module, fusion, changed = fuse("""HloModule m
ENTRY e {
  c = f32[] constant(1)
  ROOT b = f32[4] broadcast(c), dimensions={}
}""")
    assert not changed
    assert decision(fusion, "c").reason == "Not fusing: insufficient non-constant nodes."


def test_expensive_producer_is_not_duplicated_but_cheap_one_is():
    module, fusion, _ = fuse("""HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  e = f32[4] exponential(p)
  a = f32[4] add(p, p)
  n1 = f32[4] negate(e)
  n2 = f32[4] abs(e)
  m1 = f32[4] multiply(a, n1)
  m2 = f32[4] multiply(a, n2)
  ROOT t = (f32[4], f32[4]) tuple(m1, m2)
}""")
    assert decision(fusion, "e").reason == "expensive producer would be duplicated"
    # the add is cheap: it is cloned into both consumers and disappears
    assert not any(i.name == "a" for i in module.entry.instructions)
    assert kernel_count(module) == 3  # exp, and two fusions


def test_expensive_producer_into_reusing_consumer_is_not_profitable():
    module, fusion, _ = fuse("""HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  e = f32[4] exponential(p)
  ROOT b = f32[3,4] broadcast(e), dimensions={1}
}""")
    assert decision(fusion, "e").reason == "Fusion is not profitable."


def test_reduce_is_input_fused_and_capped_at_five_per_fusion():
    reducer = """%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}
"""
    body = ["p = f32[8,4] parameter(0)", "z = f32[] constant(0)"]
    for k in range(7):
        body.append(f"r{k} = f32[8] reduce(p, z), dimensions={{1}}, to_apply=%add")
    acc = "r0"
    for k in range(1, 7):
        body.append(f"s{k} = f32[8] add({acc}, r{k})")
        acc = f"s{k}"
    body.append(f"ROOT out = f32[8] negate({acc})")
    text = "HloModule m\n" + reducer + "\nENTRY e {\n  " + "\n  ".join(body) + "\n}\n"
    module, fusion, _ = fuse(text)
    assert any(d.decision.reason == "Too many reductions inside single fusion." for d in fusion.decisions)
    for f in (i for i in module.entry.instructions if i.opcode is O.FUSION):
        assert sum(x.opcode is O.REDUCE for x in f.fused_computation.instructions) <= 6


def test_concatenate_with_many_operands_is_not_fused():
    args = ", ".join(f"p{k}" for k in range(9))
    params = "\n  ".join(f"p{k} = f32[2] parameter({k})" for k in range(9))
    module, fusion, _ = fuse(f"""HloModule m
ENTRY e {{
  {params}
  c = f32[18] concatenate({args}), dimensions={{0}}
  ROOT n = f32[18] negate(c)
}}""")
    assert decision(fusion, "c").reason == "Concatenate fusion is inefficient."


def test_matrix_vector_dot_plus_add_is_an_output_fusion():
    module, fusion, _ = fuse("""HloModule m
ENTRY e {
  m = f32[16,8] parameter(0)
  v = f32[8] parameter(1)
  b = f32[16] parameter(2)
  d = f32[16] dot(m, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT a = f32[16] add(d, b)
}""")
    fusions = [i for i in module.entry.instructions if i.opcode is O.FUSION]
    assert len(fusions) == 1 and fusions[0].fusion_kind is FusionKind.OUTPUT
    assert decision(fusion, "d").reason == "Can create output fusion."


def test_matrix_matrix_dot_is_a_barrier():
    module, fusion, _ = fuse("""HloModule m
ENTRY e {
  a = f32[4,8] parameter(0)
  n = f32[4,8] negate(a)
  w = f32[8,3] parameter(1)
  ROOT d = f32[4,3] dot(n, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""")
    assert decision(fusion, "n").reason == "Not fusing: not found a fusible case"


def test_root_is_never_a_producer():
    module = parse_module("""HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  ROOT n = f32[4] negate(p)
  x = f32[4] exponential(n)
}""")
    fusion = CpuInstructionFusion()
    fusion.run(module)
    assert decision(fusion, "n", "x").reason == "not fusing into the output of the root instruction"


def test_globally_unfusible_producer_is_not_duplicated():
    """A producer reading more than it writes, which cannot fuse into every consumer (here a sort),
    stays materialized (ComputeGloballyUnfusible) instead of being duplicated into the negate."""
    module, fusion, _ = fuse("""HloModule m
%lt (x: f32[], y: f32[]) -> pred[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %l = pred[] compare(%x, %y), direction=LT
}

ENTRY e {
  p = f32[8] parameter(0)
  q = f32[8] parameter(1)
  sp = f32[4] slice(p), slice={[0:4]}
  sq = f32[4] slice(q), slice={[4:8]}
  a = f32[4] add(sp, sq)
  s = f32[4] sort(a), dimensions={0}, to_apply=%lt
  n = f32[4] negate(a)
  ROOT t = (f32[4], f32[4]) tuple(s, n)
}""")
    assert decision(fusion, "a", "n").reason == "operand can not be duplicated"
    assert any(i.name == "a" or (i.opcode is O.FUSION and i.fused_computation.root.opcode is O.ADD)
               for i in module.entry.instructions)


def test_decisions_print_with_reasons():
    _, fusion, _ = fuse(RELU_DENSE)
    text = fusion.decision_log()
    assert "%max.0 -> %max.1 in %main.2: fused into %fusion (Fusing: consumer is elementwise or fusible.)" in text
    assert "%add.7 -> %fusion in %main.2: fused into %fusion (Fusing: consumer is a fusion node.)" in text
    assert "%dot_general.1 -> %fusion in %main.2: not fused (operand can not be duplicated)" in text


def test_multi_output_fusion_merges_siblings():
    text = """HloModule m
ENTRY e {
  p = f32[8,16] parameter(0)
  c = f32[] constant(2)
  b = f32[8,16] broadcast(c), dimensions={}
  m = f32[8,16] multiply(p, b)
  n = f32[8,16] negate(m)
  e = f32[8,16] exponential(p)
  a = f32[8,16] add(e, b)
  ROOT t = (f32[8,16], f32[8,16]) tuple(n, a)
}"""
    module = parse_module(text)
    args = random_args(module)
    want = evaluate(module, *args)
    CpuInstructionFusion(may_duplicate=False).run(module)
    before = kernel_count(module)
    mof = CpuMultiOutputFusion()
    assert mof.run(module)
    HloDCE().run(module)
    verify_module(module)
    assert kernel_count(module) == before - 1
    fusion = next(i for i in module.entry.instructions if i.opcode is O.FUSION)
    assert fusion.shape.is_tuple and fusion.fused_computation.root.opcode is O.TUPLE
    assert mof.decisions and "merged into" in mof.decisions[0]
    assert_same_values(evaluate(module, *args), want, context="multi-output fusion")
    assert not CpuMultiOutputFusion().run(module)


def test_multi_output_fusion_respects_dependencies():
    """A consumer of a fusion cannot be merged with it as a sibling (that would make a cycle)."""
    module = parse_module("""HloModule m
ENTRY e {
  p = f32[8] parameter(0)
  n = f32[8] negate(p)
  e = f32[8] exponential(n)
  a = f32[8] add(e, p)
  ROOT t = (f32[8], f32[8]) tuple(e, a)
}""")
    CpuInstructionFusion(may_duplicate=False).run(module)
    CpuMultiOutputFusion().run(module)
    HloDCE().run(module)
    verify_module(module)


# A fusion dequeued again re-decides its queued operands, refusals included, as XLA's walk does (the pass
# remembers the refusals that cannot change; the log must not).
REDEQUEUED = """HloModule redequeued
ENTRY %main (a: f32[8,8], b: f32[8,8], c: f32[8,8]) -> f32[8,8] {
  %a = f32[8,8]{1,0} parameter(0)
  %b = f32[8,8]{1,0} parameter(1)
  %c = f32[8,8]{1,0} parameter(2)
  %n1 = f32[8,8]{1,0} negate(%c)
  %n2 = f32[8,8]{1,0} exponential(%n1)
  %dot = f32[8,8]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %r = f32[8,8]{1,0} add(%n2, %dot)
}
"""


def test_fusion_dequeued_again_decides_again():
    module, fusion, changed = fuse(REDEQUEUED)
    assert changed
    log = [(d.producer, d.consumer_instr.opcode, d.fusion is not None, d.decision.reason) for d in fusion.decisions]
    refused = "operand can not be duplicated"   # (a dot: globally unfusible)
    assert log == [("dot", O.ADD, False, refused),
                   ("n2", O.ADD, True, "Fusing: consumer is elementwise or fusible."),
                   ("dot", O.FUSION, False, refused),
                   ("n1", O.FUSION, True, "Fusing: consumer is a fusion node."),
                   ("dot", O.FUSION, False, refused)]
    fused = module.entry.root.fused_computation
    assert [p.parameter_number for p in fused.parameters] == [0, 1]
    assert [o.name for o in module.entry.root.operands] == ["dot", "c"]
