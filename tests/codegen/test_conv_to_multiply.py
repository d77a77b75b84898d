"""XLA's SimplifyConvToMultiply (passes/algsimp.py ``conv_to_multiply``) against TF's XLA: a depthwise
convolution of multiplier 1 (or a one-channel Conv2D) without stride, padding or dilation whose window is 1
or the whole input in each spatial dimension is a multiply and a reduce in TF's optimized HLO and ours (no
convolution left in either); other convolutions stay convolutions in both. The reduce sums the window from
+0 with its multiplies fused, so ``max·2`` then ``max·(-2)`` is inf there where the Eigen convolution's
rounded products give NaN (fuzz seeds 171000637 and 234000912, the second a convolution that keeps Eigen's
order)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tests.codegen.test_conv_special_values import _same

RNG = np.random.default_rng(234912)
MAX = np.float32(3.4028234663852886e+38)

CASES = [  # input NHWC, filter HW(C)(multiplier), op, strides, padding
    ((1, 2, 2, 3), (1, 2, 3, 1), "depthwise", 1, "VALID"),    # output width 1: multiply + reduce
    ((2, 3, 2, 3), (1, 2, 3, 1), "depthwise", 1, "VALID"),    # seed 171000637
    ((2, 2, 4, 5), (2, 4, 5, 1), "depthwise", 1, "SAME"),     # the whole image: SAME pads nothing
    ((2, 3, 4, 4), (1, 1, 4, 1), "depthwise", 1, "VALID"),    # 1x1: the product alone
    ((1, 3, 3, 1), (3, 3, 1, 1), "conv2d", 1, "VALID"),       # one channel, ungrouped
    ((2, 1, 5, 3), (1, 2, 3, 1), "depthwise", 1, "SAME"),     # seed 234000912: stays a convolution
    ((1, 2, 2, 3), (1, 2, 3, 2), "depthwise", 1, "VALID"),    # multiplier 2: stays
    ((1, 2, 4, 3), (1, 2, 3, 1), "depthwise", 2, "VALID"),    # stride: stays
]


def _fn(op, s, pad):
    if op == "conv2d":
        return lambda x, w: tf.nn.conv2d(x, w, s, pad)
    return lambda x, w: tf.nn.depthwise_conv2d(x, w, [1, s, s, 1], pad)


def _opcodes(text: str) -> set[str]:
    return {op for op in ("convolution(", " reduce(", " multiply(") if op in text}


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[2]}{c[0]}w{c[1]}s{c[3]}{c[4]}")
def test_conv_to_multiply_is_xlas(case):
    xs, ws, op, s, pad = case
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal(ws).astype(np.float32)
    theirs, ours = tf.function(_fn(op, s, pad), jit_compile=True), txc.function(_fn(op, s, pad), jit_compile=True)
    want = _opcodes(theirs.experimental_get_compiler_ir(x, w)(stage="optimized_hlo"))
    assert want == _opcodes(ours.experimental_get_compiler_ir(x, w)(stage="optimized_hlo"))
    _same(theirs(x, w).numpy(), ours(x, w).numpy(), 1e-5)
    # overflowing products of both signs in every window: the order of the sum decides inf or NaN
    x = RNG.choice(np.array([MAX, -MAX, MAX / 4, 1.5, 0.0], np.float32), size=xs)
    w = RNG.choice(np.array([2.0, -2.0, 0.5, -1.25], np.float32), size=ws)
    _same(theirs(x, w).numpy(), ours(x, w).numpy(), 1e-5)
