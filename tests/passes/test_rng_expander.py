"""RngExpander: the stateful ``rng`` becomes rng-get-and-update-state + a Philox rng-bit-generator + a
distribution, and runs in native code.

Seedless ``rng`` values cannot equal TF's (XLA keys them with process state), so the native results are
checked for what they must be: the range, the mean and variance over a sample, fresh values on every
call and between two ``rng`` of one module — and the expanded module is checked against the evaluator
(bit-exact for uniform and integer draws: both start the counter at XLA:CPU's initial value) and against
XLA's own parser.
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.codegen.cg_helpers import CHECKED, assert_same
from tfxla_cluster.codegen import compile_module
from tfxla_cluster.hlo.evaluator import evaluate
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.passes.pipeline import cpu_pipeline, optimize
from tfxla_cluster.passes.rng_expander import RngExpander, words32

RNG = """HloModule rngs
ENTRY %main (a: f32[], b: f32[]) -> (f32[4096], f32[64,64], s32[2000], f64[1001], f16[300], s64[7]) {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %u = f32[4096]{0} rng(%a, %b), distribution=rng_uniform
  %zero = f32[] constant(0)
  %one = f32[] constant(1)
  %n = f32[64,64]{1,0} rng(%zero, %one), distribution=rng_normal
  %lo = s32[] constant(-5)
  %hi = s32[] constant(9)
  %i = s32[2000]{0} rng(%lo, %hi), distribution=rng_uniform
  %m = f64[] constant(3)
  %s = f64[] constant(2)
  %d = f64[1001]{0} rng(%m, %s), distribution=rng_normal
  %h0 = f16[] constant(-1)
  %h1 = f16[] constant(1)
  %h = f16[300]{0} rng(%h0, %h1), distribution=rng_uniform
  %l0 = s64[] constant(0)
  %l1 = s64[] constant(-1)
  %l = s64[7]{0} rng(%l0, %l1), distribution=rng_uniform
  ROOT %t = (f32[4096]{0}, f32[64,64]{1,0}, s32[2000]{0}, f64[1001]{0}, f16[300]{0}, s64[7]{0}) tuple(%u, %n, %i, %d, %h, %l)
}
"""
ARGS = (np.float32(2.0), np.float32(3.0))


def _opcodes(module) -> list[O]:
    return [i.opcode for c in module.computations for i in c.instructions]


@pytest.fixture(scope="module")
def expanded():
    module = parse_module(RNG)
    assert RngExpander().run(module)
    return module


@pytest.fixture(scope="module")
def native(expanded):
    """(optimized module, its executable, the result of its first call) for the expanded module."""
    module, _ = optimize(parse_module(expanded.to_string()))
    exe = compile_module(module, CHECKED)
    return module, exe, exe(*ARGS)


def test_expansion_replaces_every_rng_with_state_and_philox(expanded):
    ops = _opcodes(expanded)
    assert O.RNG not in ops
    assert ops.count(O.RNG_GET_AND_UPDATE_STATE) == 6 and ops.count(O.RNG_BIT_GENERATOR) == 6
    states = [i for c in expanded.computations for i in c.instructions if i.opcode is O.RNG_GET_AND_UPDATE_STATE]
    # XLA's delta: the 32-bit words each draw consumes
    assert sorted(s.delta for s in states) == sorted([4096, 4096, 2000, 2002, 300, 14])
    assert words32(parse_module(RNG).entry.root.operands[3].shape) == 2002
    # each rng-bit-generator is keyed by its own constant (word 0 of its state)
    rbgs = [i for c in expanded.computations for i in c.instructions if i.opcode is O.RNG_BIT_GENERATOR]
    keys = {r.operands[0].operands[0].operands[0].literal.item() for r in rbgs}
    assert len(keys) == 6


def test_cpu_pipeline_leaves_no_rng_and_xla_parses_it(expanded, native):
    assert "rng-expander" in cpu_pipeline().pass_names()
    optimized = native[0]
    assert O.RNG not in _opcodes(optimized) and O.RNG_BIT_GENERATOR not in _opcodes(optimized)
    # side-effecting: CSE keeps the two states of equal delta apart, nothing folds or fuses them
    assert _opcodes(optimized).count(O.RNG_GET_AND_UPDATE_STATE) == 6
    pytest.importorskip("jax")
    from tests.hlo.xla_oracle import xla_parse
    xla_parse(expanded.to_string())
    xla_parse(optimized.to_string())


def test_first_native_call_equals_the_evaluator_of_the_expanded_module(expanded, native):
    # Fresh code and a fresh evaluator state both start at XLA:CPU's initial counter.
    got = native[2]
    want = evaluate(parse_module(expanded.to_string()), *ARGS)
    for k in (0, 2, 4, 5):   # uniform floats and integers: bit-exact
        assert_same(got[k], want[k])
    assert_same(got[1], want[1], rtol=1e-5, atol=1e-5)   # normals go through log/sin/cos
    assert_same(got[3], want[3], rtol=1e-12, atol=1e-12)


def test_distributions(native):
    u, n, i, d, h, l = native[2]
    assert u.dtype == np.float32 and 2.0 <= u.min() and u.max() < 3.0
    assert abs(u.mean() - 2.5) < 0.02 and abs(u.var() - 1 / 12) < 0.01
    assert abs(n.mean()) < 0.08 and abs(n.var() - 1.0) < 0.1 and np.isfinite(n).all()
    assert set(np.unique(i)) == set(range(-5, 9))   # [lo, hi), every value drawn
    assert abs(d.mean() - 3.0) < 0.3 and abs(d.std() - 2.0) < 0.2
    assert h.dtype == np.float16 and -1.0 <= h.min() and h.max() < 1.0 and abs(float(h.mean())) < 0.15
    assert len(set(l.tolist())) == 7   # rng(0, -1): the full unsigned range
    # the two 4096-element f32 draws do not share a stream
    assert not np.array_equal(np.sort(u.ravel() - 2.0), np.sort(n.ravel()))


def test_successive_calls_draw_fresh_values(native):
    first, second = native[2], native[1](*ARGS)
    for a, b in zip(first, second):
        assert not np.array_equal(a, b)
    assert np.mean(first[0] == second[0]) < 0.01


def test_seedless_tf_random_ops_run_natively_under_jit_compile():
    """tf.random.uniform/normal/uniform-int without seeds (TF's ``rng``) compile and run as native code
    with jit_compile=True — no fallback — with TF's XLA's shapes, dtypes and ranges."""
    import tensorflow as tf

    import tfxla_cluster as txc

    def fn(x):
        return (x + tf.random.uniform([500]), tf.random.normal([4, 6], dtype=tf.float64),
                tf.random.uniform([300], -4, 7, dtype=tf.int32))

    ours = txc.function(fn, jit_compile=True)
    x = tf.constant(1.0)
    first, second = ([t.numpy() for t in ours(x)] for _ in range(2))
    want = [t.numpy() for t in tf.function(fn, jit_compile=True)(x)]
    compiled = ours.get_compiled(x)
    assert compiled.launchers and all(not l.stats.fallback_reason for l in compiled.launchers.values())
    for got, ref in zip(first, want):
        assert got.shape == ref.shape and got.dtype == ref.dtype
    u, n, i = first
    assert 1.0 <= u.min() and u.max() < 2.0 and np.isfinite(n).all()
    assert -4 <= i.min() and i.max() < 7 and len(np.unique(i)) == 11
    assert all(not np.array_equal(a, b) for a, b in zip(first, second))
