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
    for _ in range(2):
        x = RNG.standard_normal(case[0]).astype(base)
        w = RNG.standard_normal(case[1]).astype(base)
        a = x if operand == "input" else w
        for _ in range(RNG.integers(1, 4)):
            a[tuple(RNG.integers(0, n) for n in a.shape)] = RNG.choice(SPECIALS)
        tx, tw = tf.constant(x), tf.constant(w)
        if dtype is tf.bfloat16:
            tx, tw = tf.cast(tx, dtype), tf.cast(tw, dtype)
        want, got = theirs(tx, tw), ours(tx, tw)
        _same(tf.cast(want, tf.float64).numpy(), tf.cast(got, tf.float64).numpy(),
              2e-2 if dtype is tf.bfloat16 else 1e-5)
