"""The numerics checker: a correct program is within tolerance; an injected wrong kernel (our native
``exponential`` scaled by 1.5, monkeypatched into codegen) is caught, and the bisection names the
first HLO instruction that differs — the ``exponential`` lowered from TF's ``Exp`` — not the
instructions after it that only inherit the error. Also: tolerances, NaN handling, variables, the CLI."""
from __future__ import annotations

import numpy as np
import pytest

from tfxla_cluster.runtime.numerics import NumericsChecker, bisect, check_numerics, compare, tolerance

FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"


def _program(shape):
    import tensorflow as tf

    def f(x, y):
        a = tf.sin(x) * y
        b = tf.exp(a) + 1.0
        return tf.reduce_sum(b * x, axis=1), tf.tanh(b)
    rng = np.random.default_rng(1)
    return f, tf.constant(rng.standard_normal(shape).astype(np.float32)), tf.ones(shape)


@pytest.fixture()
def wrong_exp(monkeypatch):
    """Our native exponential, wrong by a factor 1.5 (the evaluator and TF stay right)."""
    from tfxla_cluster.codegen import scalar_ops
    from tfxla_cluster.hlo.opcode import HloOpcode

    right = scalar_ops.UNARY[HloOpcode.EXP]

    def wrong(s, et, x):
        return s.fmul(right(s, et, x), s.fconst(x.type, 1.5))
    monkeypatch.setitem(scalar_ops.UNARY, HloOpcode.EXP, wrong)


def test_correct_program_is_within_tolerance():
    import tfxla_cluster as txc

    f, x, y = _program([3, 5])
    _, checker = check_numerics(txc.function(f, flags=FLAGS), x, y)
    assert checker.ok and len(checker.results) == 1
    (res,) = checker.results.values()
    assert res.launches == 1 and len(res.outputs) == 2 and res.divergence is None
    for o in res.outputs.values():
        assert o.comparison.ok and o.comparison.max_abs < 1e-4 and (o.comparison.atol, o.comparison.rtol) == (1e-5, 1e-4)
    assert "OK over 1 launch" in checker.report()


def test_injected_wrong_kernel_is_bisected_to_the_exp_instruction(wrong_exp):
    import tfxla_cluster as txc

    f, x, y = _program([3, 7])   # a shape no other test compiles: no cached correct kernel
    _, checker = check_numerics(txc.function(f, flags=FLAGS), x, y)
    assert not checker.ok
    (res,) = checker.results.values()
    assert all(not o.comparison.ok for o in res.outputs.values())
    d = res.divergence
    assert d is not None, res.bisect_error
    assert d.opcode == "exponential" and d.op_type == "Exp" and d.operands_agree
    assert d.comparison.max_rel == pytest.approx(0.5, rel=1e-3)      # exp·1.5 vs exp
    assert d.compiles <= 1 + d.candidates.bit_length() + 2           # a bisection, not a scan
    text = checker.report()
    assert "DIVERGES" in text and "first diverging HLO instruction: %" in text and "from TF op" in text


def test_bisect_on_hlo_text_directly(wrong_exp):
    """The bisection works on any module text: exp in the middle of a chain; everything after it differs
    too, but the answer is the exp."""
    hlo = """HloModule m

ENTRY main {
  p0 = f32[8]{0} parameter(0)
  neg = f32[8]{0} negate(p0)
  ab = f32[8]{0} abs(neg)
  e = f32[8]{0} exponential(ab), metadata={op_type="Exp" op_name="model/exp"}
  m = f32[8]{0} multiply(e, p0)
  t = f32[8]{0} tanh(m)
  ROOT r = (f32[8]{0}, f32[8]{0}) tuple(t, neg)
}
"""
    d = bisect(hlo, [np.linspace(-1, 1, 8, dtype=np.float32)])
    assert d.instruction == "e" and d.op_name == "model/exp" and d.operands_agree
    assert "exponential(" in d.text


def test_tolerances_and_comparison():
    assert tolerance(np.float32) == (1e-5, 1e-4) and tolerance(np.float64) == (1e-9, 1e-7)
    assert tolerance(np.float16) == (1e-2, 1e-2) and tolerance(np.int32) == (0.0, 0.0)
    assert tolerance(np.complex64) == tolerance(np.float32)
    a = np.array([1.0, np.nan, np.inf, -2.0], np.float32)
    assert compare(a, a.copy()).ok                                     # NaN == NaN, inf == inf
    c = compare(a + np.float32(1e-6), a)
    assert c.ok and 0 < c.max_abs < 1e-5
    bad = compare(np.array([1.0, 1.0, np.inf, -2.0], np.float32), a)
    assert not bad.ok and "NaN" in bad.detail
    assert not compare(np.array([1, 2], np.int32), np.array([1, 3], np.int32)).ok
    assert compare(np.array([True]), np.array([True])).ok
    assert not compare(np.zeros([2]), np.zeros([3])).ok


def test_variables_are_compared_and_left_untouched():
    import tensorflow as tf

    import tfxla_cluster as txc

    v = tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3))

    def f(x):
        v.assign_add(tf.exp(x) * 2.0)
        return tf.reduce_sum(v * 3.0) + 1.0

    g = txc.function(f, jit_compile=True)
    with NumericsChecker() as checker:
        g(tf.ones([2, 3]))
    assert checker.ok, checker.report()
    (res,) = checker.results.values()
    kinds = sorted(o.kind for o in res.outputs.values())
    assert "variable" in kinds and "output" in kinds
    # The checker ran TF's kernels on a temporary variable: the real one was updated once.
    np.testing.assert_allclose(v.numpy(), np.arange(6).reshape(2, 3) + 2 * np.e, rtol=1e-5)


def test_cli_run_check_numerics(tmp_path, capsys, monkeypatch):
    from tfxla_cluster.cli import main

    script = tmp_path / "prog.py"
    script.write_text("import tensorflow as tf\n"
                      "@tf.function(jit_compile=True)\n"
                      "def f(x):\n    return tf.tanh(x) * 2.0 + tf.exp(-x)\n"
                      "print(float(tf.reduce_sum(f(tf.ones([4, 5])))))\n")
    assert main(["run", "--check-numerics", str(script)]) == 0
    err = capsys.readouterr().err
    assert "numerics check" in err and "OK over 1 launch" in err
