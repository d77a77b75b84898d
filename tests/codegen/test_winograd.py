"""Winograd F(2x2, 3x3) convolutions (codegen/winograd.py): chosen for 3x3 stride-1 f32 convolutions with
enough tiles per filter element, against the evaluator (odd sizes: partial tiles, vector tails, padding
on one side, the input backprop's reversed [kh, kw, out, in] filter) and against real TF (forward with a
fused bias + Relu epilogue, and the input backprop)."""

import numpy as np
import pytest
import tensorflow as tf

from tests.codegen.cg_helpers import check, conv_kernels, module_of, random_array
import tfxla_cluster as txc
from tfxla_cluster.codegen import CodegenOptions
from tfxla_cluster.codegen.native_runtime import blas_available
from tfxla_cluster.hlo.attrs import Window

RNG = np.random.default_rng(1616)
WINOGRAD = ["conv-winograd-filter", "conv-winograd"]


def _reversed(window):
    return Window(tuple(d.replace(window_reversal=True) for d in window.dimensions))


HLO = [  # dim labels, lhs, rhs, window, expected kernels
    # 9x7 output: a partial tile row and column; 20 input / 17 output features: vector tails
    ("b01f_01io->b01f", (2, 9, 7, 20), (3, 3, 20, 17), Window.make([3, 3], [1, 1], [(1, 1), (1, 1)]), WINOGRAD),
    # padding on one side only, and more than a tile's overlap on the other
    ("b01f_01io->b01f", (1, 12, 11, 16), (3, 3, 16, 16), Window.make([3, 3], [1, 1], [(2, 0), (0, 1)]), WINOGRAD),
    # the input backprop's filter: [kh, kw, out, in], reversed; U is built [16, O, C] and read transposed
    ("b01f_01oi->b01f", (1, 12, 10, 16), (3, 3, 24, 16), _reversed(Window.make([3, 3], [1, 1], [(1, 1), (1, 1)])),
     WINOGRAD),
    # too few tiles for the filter (5x6 output, 120 features): im2col GEMMs
    ("b01f_01io->b01f", (1, 5, 6, 64), (3, 3, 64, 120), Window.make([3, 3], [1, 1], [(1, 1), (1, 1)]),
     ["conv-gemm"]),
    # stride 2: not Winograd
    ("b01f_01io->b01f", (1, 16, 16, 16), (3, 3, 16, 16), Window.make([3, 3], [2, 2], [(1, 1), (1, 1)]),
     ["conv-gemm"]),
]


@pytest.mark.skipif(not blas_available(), reason="Winograd's GEMMs call OpenBLAS")
@pytest.mark.parametrize("conv", HLO, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}")
def test_winograd_is_chosen_and_matches_evaluator(conv):
    labels, xs, ks, window, kinds = conv
    x, k = random_array(xs, np.float32, RNG, specials=False), random_array(ks, np.float32, RNG, specials=False)
    m = module_of(lambda b, p, q: b.convolution(p, q, window, labels), x, k)
    for opts in (CodegenOptions(bounds_checks=True, threads=1), CodegenOptions(bounds_checks=True, threads=3,
                                                                              parallel_min_cost=1)):
        exe, _ = check(m, x, k, rtol=2e-5, atol=2e-5, options=opts, scale_atol=True)
        assert [kk.kind for kk in conv_kernels(exe)] == kinds


def test_winograd_off_switch_keeps_im2col():
    x, k = random_array((2, 9, 7, 20), np.float32, RNG, specials=False), \
        random_array((3, 3, 20, 17), np.float32, RNG, specials=False)
    m = module_of(lambda b, p, q: b.convolution(p, q, HLO[0][3], HLO[0][0]), x, k)
    exe, _ = check(m, x, k, rtol=2e-5, atol=2e-5, options=CodegenOptions(winograd=False), scale_atol=True)
    assert "conv-winograd" not in [kk.kind for kk in conv_kernels(exe)]


def _close(got, want):
    want = np.asarray(want)
    scale = max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5 * scale)


def test_winograd_forward_with_epilogue_and_input_backprop_against_tf():
    x = RNG.standard_normal((2, 10, 9, 24)).astype(np.float32)
    w = RNG.standard_normal((3, 3, 24, 20)).astype(np.float32)
    bias = RNG.standard_normal((20,)).astype(np.float32)
    dy = RNG.standard_normal((2, 10, 9, 20)).astype(np.float32)

    def fwd(x, w, bias):
        return tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME") + bias)

    def grad_x(w, g):
        return tf.raw_ops.Conv2DBackpropInput(input_sizes=list(x.shape), filter=w, out_backprop=g,
                                              strides=[1, 1, 1, 1], padding="SAME")
    for fn, args in ((fwd, (x, w, bias)), (grad_x, (w, dy))):
        ts = [tf.constant(a) for a in args]
        _close(txc.function(fn, jit_compile=True)(*ts), fn(*ts))
