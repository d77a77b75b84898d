"""Structural kernel reuse (``ProgramEmitter.reuse``): a fusion or contraction whose structural key equals an
earlier one's (``hlo.structural``) calls the earlier kernels instead of emitting IR again. The key is exact:
fusions that differ only in a constant's value (even -0.0 against 0.0), a shape, a dtype, a layout or an
attribute get different keys and their own kernels; fusions identical up to names share. A model with
repeated blocks gives the same LLVM IR with reuse as when every kernel is emitted afresh (so the same
results), and those results equal TF's."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.codegen import CodegenOptions, compile_module
from tfxla_cluster.codegen.executable import emit_module
from tfxla_cluster.codegen.program import ProgramEmitter, emit_cold
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.hlo.structural import instruction_key, literal_key

@pytest.fixture
def replaying(monkeypatch):
    """Replays instead of the fresh, checked emissions the codegen tests make (conftest.py)."""
    monkeypatch.setattr(ProgramEmitter, "verify_reuse", False)


BASE = dict(t="f32", dims="8,16", layout="1,0", const="2", direction="GT")


def _fusion(n: int, t: str, dims: str, layout: str, const: str, direction: str) -> tuple[str, str]:
    """A fused computation ``x > c ? x * c : x`` and the entry lines calling it on parameter ``n``."""
    s = f"{t}[{dims}]{{{layout}}}"
    comp = f"""fused_{n} {{
  p.{n} = {s} parameter(0)
  c.{n} = {t}[] constant({const})
  b.{n} = {s} broadcast(c.{n}), dimensions={{}}
  m.{n} = {s} multiply(p.{n}, b.{n})
  k.{n} = pred[{dims}]{{{layout}}} compare(p.{n}, b.{n}), direction={direction}
  ROOT s.{n} = {s} select(k.{n}, m.{n}, p.{n})
}}
"""
    entry = f"  x{n} = {s} parameter({n})\n  f{n} = {s} fusion(x{n}), kind=kLoop, calls=fused_{n}\n"
    return comp, entry


def _module(first: dict, second: dict):
    """Two fusions of ``BASE`` updated with ``first`` and ``second``, on parameters 0 and 1."""
    specs = [{**BASE, **first}, {**BASE, **second}]
    parts = [_fusion(n, **spec) for n, spec in enumerate(specs)]
    shapes = ", ".join(f"{v['t']}[{v['dims']}]{{{v['layout']}}}" for v in specs)
    text = "HloModule m\n\n" + "".join(c for c, _ in parts) + "\nENTRY main {\n" + "".join(e for _, e in parts) + \
        f"  ROOT r = ({shapes}) tuple(f0, f1)\n}}\n"
    return parse_module(text)


def _fusions(module):
    return [i for i in module.entry.instructions if i.opcode.text == "fusion"]


# (first fusion's changes, second fusion's changes)
VARIANTS = {
    "constant": ({}, dict(const="3")),
    "negative zero": (dict(const="0"), dict(const="-0")),
    "shape": ({}, dict(dims="8,17")),
    "dtype": ({}, dict(t="f64")),
    "layout": ({}, dict(layout="0,1")),
    "attribute": ({}, dict(direction="LT")),
}


@pytest.mark.parametrize("change", list(VARIANTS))
def test_fusions_differing_in_one_property_get_their_own_kernels(change, replaying):
    module = _module(*VARIANTS[change])
    a, b = _fusions(module)
    assert instruction_key(a) != instruction_key(b)
    prog, _ = emit_module(module, CodegenOptions())
    assert prog.reused_emissions == 0
    # (a shape that changes only the flat loop's element count prints the same kernel, which is then shared
    # by its IR: test_count_free_kernels.py)
    assert len({k.name for k in prog.kernels}) == (1 if change == "shape" else 2)


def test_fusions_identical_up_to_names_share_their_kernels(replaying):
    module = _module({}, {})
    a, b = _fusions(module)
    assert a.name != b.name and instruction_key(a) == instruction_key(b)
    prog, text = emit_module(module, CodegenOptions())
    assert prog.reused_emissions == 1
    assert [k.name for k in prog.kernels][0] == [k.name for k in prog.kernels][1]
    assert [k.instruction for k in prog.kernels] == ["f0", "f1"]     # each call is named after its own fusion
    x0 = np.array([[-1.0, 0.0, 3.0, np.nan] * 4] * 8, np.float32)
    x1 = x0[::-1] * -2
    exe = compile_module(parse_module(module.to_string()))
    for x, got in zip((x0, x1), exe(x0, x1)):
        np.testing.assert_array_equal(got, tf.where(x > 2, x * 2, x).numpy())


def test_literal_keys_are_bit_exact():
    assert literal_key(np.float32(0.0)) != literal_key(np.float32(-0.0))
    assert literal_key(np.float32(1.0)) != literal_key(np.float64(1.0))
    assert literal_key(np.arange(6, dtype=np.int32).reshape(2, 3)) != literal_key(np.arange(6, dtype=np.int32))
    big = np.arange(1000, dtype=np.float32)
    assert literal_key(big) == literal_key(big.copy())
    changed = big.copy()
    changed[-1] = -changed[-1]
    assert literal_key(big) != literal_key(changed)


# ---------------------------------------------------------------- a model of repeated blocks, against TF
RNG = np.random.RandomState(3)
X = RNG.randn(2, 12, 12, 8).astype(np.float32)
FILTERS = [RNG.randn(3, 3, 8, 8).astype(np.float32) * 0.2 for _ in range(3)]
DEPTHWISE = [RNG.randn(3, 3, 8, 1).astype(np.float32) * 0.3 for _ in range(3)]


def _blocks(x, *weights):
    # Three blocks of the same shapes: convolution + bias + relu6, depthwise convolution + residual.
    for w, d in zip(weights[:3], weights[3:]):
        y = tf.nn.relu6(tf.nn.conv2d(x, w, 1, "SAME") + 0.1)
        x = x + tf.nn.depthwise_conv2d(y, d, [1, 1, 1, 1], "SAME") * 0.5
    return tf.reduce_mean(x, axis=[1, 2])


def _replayed_and_fresh(hlo: str):
    """(program with reuse, its IR, program emitted afresh); the fresh emission (checked against the
    replay it replaces) must give the same IR."""
    replayed, ir_replayed = emit_module(parse_module(hlo), CodegenOptions())
    ProgramEmitter.verify_reuse = True
    try:
        fresh, ir_fresh = emit_module(parse_module(hlo), CodegenOptions())
    finally:
        ProgramEmitter.verify_reuse = False
    assert ir_replayed == ir_fresh and replayed.cold_ir == fresh.cold_ir
    return replayed, ir_replayed, fresh


def test_repeated_blocks_reuse_kernels_with_the_ir_of_fresh_emission_and_tfs_results(replaying):
    fn = txc.function(_blocks, jit_compile=True)
    args = [X, *FILTERS, *DEPTHWISE]
    got = fn(*args).numpy()
    np.testing.assert_allclose(got, tf.function(_blocks)(*args).numpy(), rtol=1e-4, atol=1e-5)
    hlo = fn.experimental_get_compiler_ir(*args)(stage="optimized_hlo")
    reused, ir_reused, fresh = _replayed_and_fresh(hlo)
    assert reused.reused_emissions >= 2, reused.reused_emissions
    assert [(k.name, k.instruction) for k in reused.kernels] == [(k.name, k.instruction) for k in fresh.kernels]


def _two_convs(x, w1, w2):
    return tf.stack([tf.nn.conv2d(x, w1, 1, "SAME"), tf.nn.conv2d(x, w2, 1, "SAME")])


def test_guarded_convolutions_replay_with_their_own_branch(replaying):
    # conv_exact's guard is a branch in the entry function (checked filter -> exact or fast kernels): a
    # replay of the first convolution rebuilds it on the second's buffers, so each keeps its own check.
    x, w1 = X, FILTERS[0]   # big enough for a blocked plan: planned convolutions are reused
    w2 = w1.copy()
    w2[0, 0, 0, 0] = np.inf   # over the padding: 0 * inf = NaN at the borders in TF's XLA
    fn = txc.function(_two_convs, jit_compile=True)
    hlo = fn.experimental_get_compiler_ir(x, w1, w2)(stage="optimized_hlo")
    convs = [i for i in parse_module(hlo).entry.instructions if i.opcode.text == "convolution"]
    replayed, ir_replayed, _ = _replayed_and_fresh(hlo)
    assert replayed.reused_emissions >= 1 and len(convs) == 2
    # One rare arm per convolution, emitted (in the cold module) and compiled on need only.
    assert ir_replayed.count("guard.") >= 2 * 3 and replayed.cold_names == ["cold_arm.0", "cold_arm.1"]
    assert "_exact" not in ir_replayed and not replayed.cold_kernels
    cold_ir, arms, cold_kernels = emit_cold(parse_module(hlo), CodegenOptions())
    assert arms == replayed.cold_names and [k.kind for k in cold_kernels] == ["conv-exact"] * 2
    assert cold_ir.count('define void @"cold_arm.') == 2
    # The arms read the program's table: cold mode makes the buffer slots the entry's emission made.
    hot = ProgramEmitter(parse_module(hlo), CodegenOptions(), lazy_cold=True)
    cold = ProgramEmitter(parse_module(hlo), CodegenOptions(), lazy_cold=True, cold_mode=True)
    assert hot.emit() and not cold.emit()
    assert [(s.kind, s.name, s.shape) for s in hot.plan.slots] == [(s.kind, s.name, s.shape) for s in cold.plan.slots]
    got = fn(x, w1, w2).numpy()
    want = tf.function(_two_convs, jit_compile=True)(x, w1, w2).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-5, atol=1e-5)


def _two_sizes(x, w1, w2):
    # Different shapes: no replay; both guarded (filters and inputs checked: small convolutions).
    return tf.reduce_sum(tf.nn.conv2d(x, w1, 1, "SAME")) + tf.reduce_sum(tf.nn.conv2d(x[:, :7], w2, 1, "VALID"))


def test_guard_check_kernel_is_built_once_per_element_type(replaying, monkeypatch):
    # Every guard's special-value check calls one kernel (its IR depends on the element type and limit only,
    # ``ProgramEmitter.call_shared_kernel``): built once, with the IR of emitting it per buffer and TF's results.
    from tfxla_cluster.codegen import conv_exact
    from tfxla_cluster.codegen.conv_exact import SPECIAL_CHECK_KIND
    built = []
    build = conv_exact._build_check
    monkeypatch.setattr(conv_exact, "_build_check", lambda *a: (built.append(a[2].shape), build(*a))[1])
    x, w1 = X, FILTERS[0]
    w2 = FILTERS[1][:2].copy()
    w2[1, 1, 3, 2] = np.nan
    fn = txc.function(_two_sizes, jit_compile=True)
    hlo = fn.experimental_get_compiler_ir(x, w1, w2)(stage="optimized_hlo")
    built.clear()
    replayed, ir_replayed, fresh = _replayed_and_fresh(hlo)
    checks = [k for k in replayed.kernels if k.kind == SPECIAL_CHECK_KIND]
    assert len(built) == 1 + len(checks)   # once in the replaying emission, per check in the fresh one
    assert len(checks) >= 4 and len({k.name for k in checks}) == 1
    assert ir_replayed.count(f'define internal void @"{checks[0].name}"') == 1
    assert [(k.name, k.instruction) for k in replayed.kernels] == [(k.name, k.instruction) for k in fresh.kernels]
    got = fn(x, w1, w2).numpy()
    want = tf.function(_two_sizes, jit_compile=True)(x, w1, w2).numpy()
    np.testing.assert_array_equal(got, want)


def _negabs_maxima(x, y):
    # Two structurally equal fusions of a bf16 max over a short row: their reduction loops carry loop IDs
    # (loops.loop_hints), numbered in the module, which a fresh emission of the second numbers anew.
    return tf.reduce_max(-tf.abs(x), axis=1), tf.reduce_max(-tf.abs(y), axis=1), tf.reduce_min(-x, axis=0)


@pytest.mark.parametrize("dtype, shape", [(tf.bfloat16, (4, 6)), (tf.bfloat16, (7, 33)), (tf.float16, (128, 3)),
                                          (tf.float32, (6, 7))])
def test_equal_reduction_fusions_emitted_afresh_are_the_replayed_kernel(dtype, shape):
    # A fresh emission (conftest: verify_reuse) of the second fusion must find the first's kernel (``_unique``'s
    # text key writes loop IDs as their hints), as a replay calls it; and the results are TF's bits.
    x = tf.constant(RNG.randn(*shape).astype(np.float32) * 1e-38, dtype)   # bf16/f16: denormals or zeros
    y = tf.constant(RNG.randn(*shape).astype(np.float32), dtype)
    fn = txc.function(_negabs_maxima, jit_compile=True)
    got = fn(x, y)
    want = tf.function(_negabs_maxima, jit_compile=True)(x, y)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy().view(np.uint8), w.numpy().view(np.uint8))
    hlo = fn.experimental_get_compiler_ir(x, y)(stage="optimized_hlo")
    fresh, _ = emit_module(parse_module(hlo), CodegenOptions())
    ProgramEmitter.verify_reuse = False   # (conftest restores it)
    replayed, _ = emit_module(parse_module(hlo), CodegenOptions())
    assert replayed.reused_emissions >= 1 and fresh.reused_emissions == 0
    # (The module texts differ only in the metadata numbers of the fresh emission's dropped kernel.)
    kernels = [(k.name, k.instruction) for k in replayed.kernels]
    assert kernels == [(k.name, k.instruction) for k in fresh.kernels] and kernels[0][0] == kernels[1][0]
