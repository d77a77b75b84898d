"""The depthwise and grouped filter backprop under jit against TF's XLA (passes/expanders.py
``BatchGroupHoles``): XLA expands a batch-grouped convolution with a depthwise multiplier > 1 (or groups
of several features) into a base-dilated convolution whose holes Eigen multiplies (F32, F16, BF16), so a
NaN or infinite ``out_backprop`` element gives NaN in the other groups' outputs; with multiplier 1, and in
F64, nothing spreads. NaN positions, infinities and signed zeros equal; other values within rounding."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.codegen.test_conv_special_values import _check

RNG = np.random.default_rng(1919)
DTYPES = {"f32": (tf.float32, 1e-4), "f64": (tf.float64, 1e-9), "f16": (tf.float16, 2e-2), "bf16": (tf.bfloat16, 5e-2)}


def _depthwise_filter_grad(fshape, strides, padding):
    def fn(x, dy):
        return tf.raw_ops.DepthwiseConv2dNativeBackpropFilter(
            input=x, filter_sizes=fshape, out_backprop=dy, strides=[1, strides, strides, 1], padding=padding)
    return fn


def _operands(xshape, fshape, strides, padding, where, dtype):
    x = RNG.standard_normal(xshape)
    dshape = tf.nn.depthwise_conv2d(np.zeros(xshape), np.zeros(fshape), [1, strides, strides, 1], padding).shape
    dy = RNG.standard_normal(dshape)
    if where == "dy_inf_corner":
        dy[0, 0, 0, 0] = np.inf
    elif where == "dy_nan":
        dy[-1, -1, -1, -1] = np.nan
    elif where == "dy_-inf_middle":
        dy[0, dshape[1] // 2, dshape[2] // 2, dshape[3] // 2] = -np.inf
    elif where == "x_nan":
        x[-1, 1, 2, -1] = np.nan
    elif where == "zeros":   # all products -0: sums from +0
        x[...] = -0.0
        dy = np.abs(dy)
    return tf.cast(x, dtype), tf.cast(dy, dtype)


CASES = [((2, 6, 6, 3), (3, 3, 3, 2), 1, "SAME"), ((2, 6, 6, 3), (3, 3, 3, 1), 1, "SAME"),
         ((1, 7, 7, 2), (3, 3, 2, 3), 2, "VALID"), ((2, 5, 5, 4), (2, 2, 4, 2), 2, "SAME")]


@pytest.mark.parametrize("where", ["none", "dy_inf_corner", "dy_nan", "dy_-inf_middle", "x_nan", "zeros"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"x{c[0]}f{c[1]}s{c[2]}{c[3]}")
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_depthwise_filter_backprop_like_xla(dtype, case, where):
    tfdtype, rtol = DTYPES[dtype]
    xshape, fshape, strides, padding = case
    _check(_depthwise_filter_grad(fshape, strides, padding),
           *_operands(xshape, fshape, strides, padding, where, tfdtype), rtol=rtol)


@pytest.mark.parametrize("where", ["dy_inf", "dy_nan"])
def test_grouped_conv2d_filter_backprop_like_xla(where):
    """Groups of two input features (batch groups of a batch that is not the group count)."""
    x = RNG.standard_normal((2, 5, 5, 4)).astype(np.float32)
    dy = RNG.standard_normal((2, 5, 5, 6)).astype(np.float32)
    dy[1, 2, 3, 1] = np.inf if where == "dy_inf" else np.nan

    def fn(x, dy):
        return tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=[3, 3, 2, 6], out_backprop=dy,
                                               strides=[1, 1, 1, 1], padding="SAME")
    _check(fn, x, dy)
