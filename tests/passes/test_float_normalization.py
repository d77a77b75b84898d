"""float-normalization-bf16 (XLA's FloatNormalization with CpuFloatSupport): bf16 ops compute in f32 between
converts, a convert-to-f32 user reads the unrounded value (excess precision), converts/tuples/parameters and
reductions stay as they are. Goldens follow TF 2.21's optimized HLO for the same ops (f32 compare, select,
broadcast between converts), values are checked with the evaluator."""
import ml_dtypes
import numpy as np

from tests.passes.passes_helpers import filecheck, module_text
from tfxla_cluster.hlo.evaluator import evaluate
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.hlo.verifier import verify_module
from tfxla_cluster.passes.float_normalization import FloatNormalization
from tfxla_cluster.passes.pass_ import restore_definition_order

BF16 = ml_dtypes.bfloat16


def _run(text: str, **kw):
    module = parse_module(text)
    verify_module(module)
    changed = FloatNormalization(**kw).run(module)
    restore_definition_order(module)
    verify_module(module)
    return module, changed


def test_elementwise_op_computes_in_f32_between_converts():
    module, changed = _run("""HloModule m
ENTRY e {
  a = bf16[3] parameter(0)
  b = bf16[3] parameter(1)
  m = bf16[3] multiply(a, b)
  ROOT n = bf16[3] negate(m)
}""")
    assert changed
    filecheck(module_text(module), """
CHECK: f32[3]{0} convert(%a)
CHECK: f32[3]{0} convert(%b)
CHECK: %m = f32[3]{0} multiply(
CHECK: bf16[3]{0} convert(%m)
CHECK: %n = f32[3]{0} negate(
CHECK: ROOT {{.*}} bf16[3]{0} convert(%n)""")


def test_a_convert_to_f32_user_reads_the_unrounded_value():
    text = """HloModule m
ENTRY e {
  a = bf16[2] parameter(0)
  b = bf16[2] parameter(1)
  m = bf16[2] multiply(a, b)
  ROOT c = f32[2] convert(m)
}"""
    args = [np.array([1.0078125, 3.0], BF16), np.array([1.0078125, 1.0078125], BF16)]
    module, _ = _run(text)
    filecheck(module_text(module), "CHECK: ROOT %m = f32[2]{0} multiply(")
    # (1 + 2^-7)^2 = 1 + 2^-6 + 2^-14: bf16 rounds it to 1.015625, f32 keeps it
    np.testing.assert_array_equal(evaluate(module, *args), np.array([1.01568603515625, 3.0234375], np.float32))
    strict, _ = _run(text, allow_excess_precision=False)
    np.testing.assert_array_equal(evaluate(strict, *args), np.array([1.015625, 3.03125], np.float32))



def test_a_complex_part_convert_reads_the_rounded_value():
    """tf2hlo's convert of a bf16 value to a complex part stands for XLA's convert(bf16 -> c64), which reads
    the bf16 value: no excess precision (TF's XLA: tf.cast(a * b, tf.complex64) is 1.015625, not 1.0156860)."""
    text = """HloModule m
ENTRY e {
  a = bf16[2] parameter(0)
  b = bf16[2] parameter(1)
  m = bf16[2] multiply(a, b)
  ROOT c = f32[2] convert(m), frontend_attributes={_tfxla_complex_part="true"}
}"""
    args = [np.array([1.0078125, 3.0], BF16), np.array([1.0078125, 1.0078125], BF16)]
    module, _ = _run(text)
    np.testing.assert_array_equal(evaluate(module, *args), np.array([1.015625, 3.03125], np.float32))


def test_bf16_cast_to_complex_like_tf_xla():
    """Against TF's XLA: the bf16 rounding before a cast to complex64 stays, and with it the fusion of an
    xdivy whose result is also cast (one fusion reads the converted operand twice, as TF's, and its compare
    with 0 sees a denormal as 0 under DAZ: seed 72000751)."""
    import tensorflow as tf

    import tfxla_cluster as txc

    a = np.array([1.0078125, 3.0, 1.5, -5.877471754111438e-39, 0.0], BF16)
    b = np.array([1.0078125, 1.0078125, 1.1, 2.0, 1.0], BF16)

    def f(x, y):
        z = tf.math.xdivy(x, x)
        return tf.cast(x * y, tf.complex64), z, tf.cast(z, tf.complex64)
    want = tf.function(f, jit_compile=True)(a, b)
    got = txc.function(f, jit_compile=True)(a, b)
    for w, g in zip(want, got):
        assert w.numpy().tobytes() == g.numpy().tobytes(), (w.numpy(), g.numpy())

def test_compare_select_and_data_movement_are_normalized_converts_kept():
    module, _ = _run("""HloModule m
ENTRY e {
  a = bf16[2] parameter(0)
  z = bf16[] constant(0)
  zb = bf16[2] broadcast(z), dimensions={}
  p = pred[2] compare(a, zb), direction=GT
  s = bf16[2] select(p, a, zb)
  c = s32[2] convert(s)
  ROOT t = (bf16[2], s32[2]) tuple(s, c)
}""")
    text = module_text(module)
    filecheck(text, """
CHECK: %zb = f32[2]{0} broadcast(
CHECK: %p = pred[2]{0} compare(
CHECK: %s = f32[2]{0} select(%p,
CHECK: ROOT %t = (bf16[2]{0}, s32[2]{0}) tuple(""")
    assert "s32[2]{0} convert(%convert" in text  # the int convert reads the rounded bf16 value


def test_reductions_and_only_supported_ops_are_left_alone():
    text = """HloModule m
add {
  x = bf16[] parameter(0)
  y = bf16[] parameter(1)
  ROOT s = bf16[] add(x, y)
}
ENTRY e {
  a = bf16[4] parameter(0)
  z = bf16[] constant(0)
  r = bf16[] reduce(a, z), dimensions={0}, to_apply=add
  ROOT c = f32[] convert(r)
}"""
    module, changed = _run(text)
    assert not changed
    assert module_text(module) == module_text(parse_module(text))
