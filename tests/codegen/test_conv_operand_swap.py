"""XLA's convolution operand swap (passes/algsimp.py ``conv_operand_swap``) against TF's XLA: a kernel larger than
the input becomes ``convolution(reverse(kernel), input)`` with a reversed window, in TF's dump and ours (the
convolution's window and dim_labels compared); XLA:CPU runs it as its elemental loop (original taps summed
backwards, padding taps skipped), so special values in either operand give TF's NaN positions and
infinities (fuzz seeds 61000382 and 72000775)."""
from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.codegen.conv_exact import SPECIAL_CHECK_KIND
from tests.codegen.test_conv_special_values import _same

RNG = np.random.default_rng(6119)

CASES = [  # input, filter, strides, padding (NHWC / HWIO, or NWC / WIO)
    ((2, 1, 2, 2), (3, 2, 2, 2), 1, "SAME"),                           # seed 61000382: negative padding
    ((1, 3, 2, 2), (3, 3, 2, 2), 1, "SAME"),                           # seed 72000775
    ((2, 2, 2, 3), (3, 3, 3, 5), 1, [[0, 0], [1, 1], [1, 0], [0, 0]]),
    ((2, 4, 4, 3), (5, 5, 3, 2), 2, "SAME"),
    ((3, 1, 1, 2), (3, 3, 2, 4), 1, "SAME"),
    ((2, 2, 3), (4, 3, 2), 1, "SAME"),                                 # conv1d: one dimension is a contraction
    ((2, 6, 6, 3), (3, 3, 3, 2), 1, "SAME"),                           # not swapped
]


def _fn(case):
    xs, _, s, pad = case
    if len(xs) == 3:
        return lambda x, w: tf.nn.conv1d(x, w, s, pad)
    return lambda x, w: tf.nn.conv2d(x, w, s, pad)


def _convolutions(text: str) -> list[tuple[str, str, str]]:
    """(window, dim_labels, swapped or plain) of every convolution in an HLO text."""
    out = []
    for line in text.splitlines():
        if " convolution(" in line:
            out.append((re.search(r"window=\{[^}]*\}", line)[0], re.search(r"dim_labels=[^,]+", line)[0],
                        "swapped" if "rhs_reversal" in line else "plain"))
    return out


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}w{c[1]}")
def test_swapped_convolution_is_xlas(case):
    x = RNG.standard_normal(case[0]).astype(np.float32)
    w = RNG.standard_normal(case[1]).astype(np.float32)
    theirs, ours = tf.function(_fn(case), jit_compile=True), txc.function(_fn(case), jit_compile=True)
    want = _convolutions(theirs.experimental_get_compiler_ir(x, w)(stage="optimized_hlo"))
    assert want and want == _convolutions(ours.experimental_get_compiler_ir(x, w)(stage="optimized_hlo"))
    _same(theirs(x, w).numpy(), ours(x, w).numpy(), 1e-5)


SPECIALS = [np.inf, -np.inf, np.nan, 3e38, -3e38, 0.0]


@pytest.mark.parametrize("operand", ["input", "filter"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, tf.bfloat16], ids=str)
@pytest.mark.parametrize("case", CASES[:5], ids=lambda c: f"{c[0]}w{c[1]}")
def test_special_values_in_either_operand(case, dtype, operand):
    theirs, ours = tf.function(_fn(case), jit_compile=True), txc.function(_fn(case), jit_compile=True)
    base = np.float64 if dtype is np.float64 else np.float32
    # (a generator per case: the data must not depend on which tests ran before in this worker)
    rng = np.random.default_rng([6119, CASES.index(case), int(base is np.float64), int(dtype is tf.bfloat16),
                                 int(operand == "input")])
    for _ in range(2):
        x = rng.standard_normal(case[0]).astype(base)
        w = rng.standard_normal(case[1]).astype(base)
        a = x if operand == "input" else w
        for _ in range(rng.integers(1, 4)):
            a[tuple(rng.integers(0, n) for n in a.shape)] = rng.choice(SPECIALS)
        tx, tw = tf.constant(x), tf.constant(w)
        if dtype is tf.bfloat16:
            tx, tw = tf.cast(tx, dtype), tf.cast(tw, dtype)
        want, got = theirs(tx, tw), ours(tx, tw)
        _same(tf.cast(want, tf.float64).numpy(), tf.cast(got, tf.float64).numpy(),
              2e-2 if dtype is tf.bfloat16 else 1e-5)


_SWAP_HLO = """HloModule m
ENTRY e {{
  x = f32[{xs}] parameter(0)
  k = f32[{ks}] parameter(1)
  b = f32[{c}] parameter(2)
  conv = f32[{xs0},{ys}] convolution(x, k), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f
  bb = f32[{xs0},{ys}] broadcast(b), dimensions={{3}}
  add = f32[{xs0},{ys}] add(conv, bb)
  zero = f32[] constant(0)
  zz = f32[{xs0},{ys}] broadcast(zero), dimensions={{}}
  ROOT relu = f32[{xs0},{ys}] maximum(add, zz)
}}"""


@pytest.mark.parametrize("xs, ks", [((4, 1, 1, 64), (3, 3, 64, 32)), ((3, 2, 2, 8), (3, 3, 8, 16))])
def test_swapped_convolution_reads_the_unreversed_filter(xs, ks, fast_conv_kernels):
    """The swap's ``reverse(filter)`` runs no kernel (kernels/loop.py ``_unswapped``): on finite operands the
    original convolution runs on the filter as it is (one conv kernel with the bias+relu epilogue); with a
    special value, XLA's swapped element loop reads the filter backwards. Both against TF's XLA."""
    from tfxla_cluster.codegen import CodegenOptions, compile_module
    from tfxla_cluster.hlo.parser import parse_module
    from tfxla_cluster.passes.pipeline import optimize
    text = _SWAP_HLO.format(xs=",".join(map(str, xs)), ks=",".join(map(str, ks)), c=ks[3], xs0=xs[0],
                            ys=f"{xs[1]},{xs[2]},{ks[3]}")
    module, _ = optimize(parse_module(text))
    assert " reverse(" in module.to_string() and "rhs_reversal=1x1" in module.to_string()   # XLA's HLO
    theirs = tf.function(lambda x, k, b: tf.nn.relu(tf.nn.conv2d(x, k, 1, "SAME") + b), jit_compile=True)
    x, k = RNG.standard_normal(xs).astype(np.float32), RNG.standard_normal(ks).astype(np.float32)
    b = RNG.standard_normal(ks[3]).astype(np.float32)
    for threads in (1, 2):
        exe = compile_module(module, CodegenOptions(bounds_checks=True, threads=threads))
        kinds = [kk.kind for kk in exe.kernels]
        assert "loop" not in kinds and "materialize" not in kinds, kinds
        assert [kd for kd in kinds if kd != SPECIAL_CHECK_KIND] in (["conv-gemm"], ["conv-blocked"]), kinds
        _same(theirs(x, k, b).numpy(), np.asarray(exe(x, k, b)[0]), 1e-5)
        for special in (np.inf, np.nan, -3e38):
            ks_, xs_ = k.copy(), x.copy()
            ks_[0, 2, 1, 3] = special
            xs_[1, 0, 0, 2] = -special
            for a, w in ((xs_, k), (x, ks_), (xs_, ks_)):
                _same(theirs(a, w, b).numpy(), np.asarray(exe(a, w, b)[0]), 1e-5)


_MAX = float(np.finfo(np.float32).max)


def _with_constant_input(x, pad):
    return lambda wt: tf.nn.conv2d(tf.constant(x), wt, 1, pad)


@pytest.mark.parametrize("batch, width, chans, kw, pad", [
    (1, 5, 1, 2, "SAME"), (1, 5, 1, 3, "SAME"), (1, 7, 1, 4, "SAME"), (1, 3, 1, 2, "SAME"),
    (1, 5, 1, 2, [[0, 0], [1, 1], [1, 1], [0, 0]]), (2, 5, 1, 2, "SAME"),
    (1, 5, 2, 2, "SAME")])   # two input features: LLVM keeps the FMA
@pytest.mark.parametrize("constant", [True, False], ids=["const-input", "arg-input"])
def test_swapped_loop_rounds_a_tap_inside_only_at_the_first_output(batch, width, chans, kw, pad, constant):
    """A 3-row filter over a 1-row image is swapped; in XLA's elemental loop a tap inside the input only at
    output position 0 is a rounded product added alone (LLVM hoists it; codegen/conv_hoist.py), the
    others FMAs: -max·5.8 then -max·-3.2 is NaN at output 0 (fuzz seed 127001247), +inf elsewhere. Bits
    against TF's XLA."""
    rng = np.random.default_rng(127001247 + width * 10 + kw)
    for trial in range(6):
        x = np.zeros((batch, 1, width, chans), np.float32)
        at = trial % (width - 1)
        x[:, 0, at:at + 2, 0] = -_MAX if trial < 3 else _MAX
        if trial == 5:
            x[:, 0, :, :] = rng.choice([-_MAX, _MAX, 0.0, 1.5], (batch, width, chans))
        w = np.zeros((3, kw, chans, 4), np.float32)
        w[1, :, :, 2] = rng.uniform(1, 7, (kw, chans)) * rng.choice([-1, 1], (kw, chans))
        if trial == 0:
            w[1, 0, 0, 2], w[1, 1, 0, 2] = 5.842411518096924, -3.2214505672454834
        w[:, :, :, 1] = rng.standard_normal((3, kw, chans))
        if constant:
            f = _with_constant_input(x, pad)   # a constant in the graph, as in the fuzz program
            args = (w,)
        else:
            def f(xt, wt):
                return tf.nn.conv2d(xt, wt, 1, pad)
            args = (x, w)
        want = tf.function(f, jit_compile=True)(*args).numpy()
        got = txc.function(f, jit_compile=True)(*args).numpy()
        assert want.tobytes() == got.tobytes(), (trial, x.ravel(), want[..., 2].ravel(), got[..., 2].ravel())
