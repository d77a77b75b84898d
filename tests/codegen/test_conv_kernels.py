"""Convolution kernels (codegen/conv.py, codegen/gemm.py) against real TF on odd shapes: depthwise forward
and both backprops (strided, dilated, SAME/VALID, channel counts that leave partial vector blocks),
Conv2D and both backprops, NCHW against TF's NHWC; and the HLO-level kernel choice (the channel-wise
kernel for depthwise convolutions, never a GEMM per channel), checked against the evaluator."""

import numpy as np
import pytest
import tensorflow as tf

from tests.codegen.cg_helpers import check, conv_kernels, module_of, random_array
import tfxla_cluster as txc
from tfxla_cluster.codegen import CodegenOptions
from tfxla_cluster.hlo.attrs import Window

RNG = np.random.default_rng(16)
raw = tf.raw_ops


@pytest.fixture(autouse=True)
def _fast(fast_conv_kernels):
    """This module tests the fast kernels: small convolutions too (not XLA's order, ``conv_exact.exact_order``)."""


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _close(got, want):
    want = np.asarray(want)
    scale = max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5 * scale)


def _ours(fn, *args):
    return txc.function(fn, jit_compile=True)(*[tf.constant(a) for a in args])


DW = [  # input NHWC, kernel size, channels, multiplier, stride, padding, dilation
    ((2, 9, 11, 37), 3, 37, 1, 1, "SAME", 1),
    ((1, 12, 10, 19), 5, 19, 1, 2, "SAME", 1),
    ((2, 8, 7, 40), 3, 40, 1, 2, "VALID", 1),
    ((1, 9, 9, 33), 3, 33, 1, 1, "SAME", 2),
    ((3, 5, 6, 7), 3, 7, 1, 1, "VALID", 1),
    ((1, 6, 6, 5), 3, 5, 2, 1, "SAME", 1),     # depth multiplier 2: the generic path
]


@pytest.mark.parametrize("case", DW, ids=lambda c: f"{c[0]}k{c[1]}s{c[4]}{c[5]}d{c[6]}m{c[3]}")
def test_depthwise_forward_and_backprops_against_tf(case):
    xs, k, c, mult, s, pad, dil = case
    x, w = _rand(*xs), _rand(k, k, c, mult)
    strides, dils = [1, s, s, 1], [1, dil, dil, 1]
    if dil > 1 and s > 1:
        pytest.skip("TF needs stride 1 with dilation")
    fwd = lambda x, w: raw.DepthwiseConv2dNative(  # noqa: E731
        input=x, filter=w, strides=strides, padding=pad, dilations=dils)
    # TF's CPU kernels ignore dilations (depthwise backprops) or reject them (without oneDNN): with dilation,
    # TF's XLA is the reference.
    ref = (lambda f: tf.function(f, jit_compile=True)) if dil > 1 else (lambda f: f)
    y = ref(fwd)(tf.constant(x), tf.constant(w)).numpy()
    _close(_ours(fwd, x, w), y)
    dy = _rand(*y.shape)
    bi = lambda w, g: raw.DepthwiseConv2dNativeBackpropInput(  # noqa: E731
        input_sizes=list(xs), filter=w, out_backprop=g, strides=strides, padding=pad, dilations=dils)
    _close(_ours(bi, w, dy), ref(bi)(tf.constant(w), tf.constant(dy)))
    bf = lambda x, g: raw.DepthwiseConv2dNativeBackpropFilter(  # noqa: E731
        input=x, filter_sizes=[k, k, c, mult], out_backprop=g, strides=strides, padding=pad, dilations=dils)
    _close(_ours(bf, x, dy), ref(bf)(tf.constant(x), tf.constant(dy)))


def test_depthwise_nchw_matches_tf_nhwc():
    x, w = _rand(2, 21, 10, 9), _rand(3, 3, 21, 1)
    got = _ours(lambda x, w: tf.nn.depthwise_conv2d(x, w, [1, 1, 2, 2], "SAME", data_format="NCHW"), x, w)
    want = tf.nn.depthwise_conv2d(np.transpose(x, (0, 2, 3, 1)), w, [1, 2, 2, 1], "SAME")
    _close(got, np.transpose(want.numpy(), (0, 3, 1, 2)))


CONV = [  # input NHWC, kernel HWIO, stride, padding, dilation
    ((2, 13, 11, 5), (3, 3, 5, 7), 1, "SAME", 1),
    ((1, 15, 16, 6), (5, 3, 6, 9), 2, "SAME", 1),
    ((2, 9, 10, 3), (1, 1, 3, 17), 2, "VALID", 1),
    ((1, 11, 11, 4), (3, 3, 4, 5), 1, "SAME", 2),
    ((3, 4, 4, 33), (3, 3, 33, 31), 1, "VALID", 1),
    ((2, 1, 1, 24), (3, 3, 24, 40), 1, "SAME", 1),     # one position, one useful tap: a plain GEMM (+ backprops)
    ((2, 4, 4, 20), (1, 1, 20, 36), 2, "VALID", 1),    # strided 1×1: input backprop by phase, filter read in place
]


@pytest.mark.parametrize("case", CONV, ids=lambda c: f"{c[0]}{c[1]}s{c[2]}{c[3]}d{c[4]}")
def test_conv2d_forward_and_backprops_against_tf(case):
    xs, ws, s, pad, dil = case
    x, w = _rand(*xs), _rand(*ws)
    strides, dils = [1, s, s, 1], [1, dil, dil, 1]
    fwd = lambda x, w: tf.nn.conv2d(x, w, strides, pad, dilations=dils)  # noqa: E731
    # Without oneDNN, TF's CPU backprops reject dilations: with dilation, TF's XLA is the reference.
    ref = (lambda f: tf.function(f, jit_compile=True)) if dil > 1 else (lambda f: f)
    y = fwd(tf.constant(x), tf.constant(w)).numpy()
    _close(_ours(fwd, x, w), y)
    dy = _rand(*y.shape)
    bi = lambda w, g: raw.Conv2DBackpropInput(input_sizes=list(xs), filter=w, out_backprop=g,  # noqa: E731
                                              strides=strides, padding=pad, dilations=dils)
    _close(_ours(bi, w, dy), ref(bi)(tf.constant(w), tf.constant(dy)))
    bf = lambda x, g: raw.Conv2DBackpropFilter(input=x, filter_sizes=list(ws), out_backprop=g,  # noqa: E731
                                               strides=strides, padding=pad, dilations=dils)
    _close(_ours(bf, x, dy), ref(bf)(tf.constant(x), tf.constant(dy)))


def test_conv2d_nchw_matches_tf_nhwc():
    x, w = _rand(2, 6, 9, 8), _rand(3, 3, 6, 10)
    got = _ours(lambda x, w: tf.nn.conv2d(x, w, [1, 1, 2, 1], "SAME", data_format="NCHW"), x, w)
    want = tf.nn.conv2d(np.transpose(x, (0, 2, 3, 1)), w, [1, 2, 1, 1], "SAME")
    _close(got, np.transpose(want.numpy(), (0, 3, 1, 2)))


HLO_CHANNELWISE = [  # dim labels, lhs, rhs, window, feature groups, batch groups
    ("b01f_01io->b01f", (2, 7, 6, 19), (3, 3, 1, 19), Window.make([3, 3], [1, 2], [(1, 1), (1, 1)]), 19, 1),
    ("b01f_01io->b01f", (1, 5, 5, 9), (3, 3, 1, 9),
     Window.make([3, 3], [1, 1], [(1, 2), (1, 2)], lhs_dilation=[2, 2]), 9, 1),
    ("f01b_i01o->01bf", (2, 8, 8, 11), (2, 6, 6, 11), Window.make([6, 6], [1, 1], [(1, 1), (1, 1)]), 1, 11),
    ("b0f_0io->b0f", (3, 17, 10), (4, 1, 10), Window.make([4], [1], [(3, 0)], rhs_dilation=[2]), 10, 1),
]


@pytest.mark.parametrize("conv", HLO_CHANNELWISE, ids=lambda c: f"{c[0]}-{c[1]}")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_channelwise_kernel_is_chosen_and_matches_evaluator(conv, dtype):
    labels, xs, ks, window, groups, bgroups = conv
    x, k = random_array(xs, dtype, RNG, specials=False), random_array(ks, dtype, RNG, specials=False)
    m = module_of(lambda b, p, q: b.convolution(p, q, window, labels, feature_group_count=groups,
                                                batch_group_count=bgroups), x, k)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    for opts in (CodegenOptions(bounds_checks=True, threads=1), CodegenOptions(bounds_checks=True, threads=3,
                                                                              parallel_min_cost=1)):
        exe, _ = check(m, x, k, rtol=tol, atol=tol, options=opts, scale_atol=True)
        assert [kk.kind for kk in conv_kernels(exe)] == ["conv-channelwise"]


HLO_TAP_GROUPS = [  # filter-backprop form: dim labels, lhs, rhs, window, batch groups, work items (tap groups)
    # 3x3 taps from a padded 8x8 image, 2 features (batch), 19 channels: a vector block and a scalar tail
    ("f01b_i01o->01bf", (2, 8, 8, 19), (2, 8, 8, 19), Window.make([8, 8], [1, 1], [(1, 1), (1, 1)]), 19, 3 * 1),
    # strided original (window dilation 2), uneven padding: 6x4 taps, 40 channels (one block)
    ("f01b_i01o->01bf", (1, 11, 12, 40), (1, 5, 6, 40), Window.make([5, 6], [1, 1], [(2, 1), (0, 2)],
                                                                     rhs_dilation=[2, 2]), 40, 6),
    # dilated original (conv stride 2 over the input), 1-D
    ("f0b_i0o->0bf", (3, 17, 10), (3, 13, 10), Window.make([13], [2], [(1, 1)]), 10, 1),
]


@pytest.mark.parametrize("conv", HLO_TAP_GROUPS, ids=lambda c: f"{c[0]}-{c[1]}")
def test_filter_backprop_taps_are_grouped_and_match_evaluator(conv):
    labels, xs, ks, window, bgroups, items = conv
    x, k = random_array(xs, np.float32, RNG, specials=False), random_array(ks, np.float32, RNG, specials=False)
    m = module_of(lambda b, p, q: b.convolution(p, q, window, labels, batch_group_count=bgroups), x, k)
    for opts in (CodegenOptions(bounds_checks=True, threads=1), CodegenOptions(bounds_checks=True, threads=3,
                                                                              parallel_min_cost=1)):
        exe, _ = check(m, x, k, rtol=2e-5, atol=2e-5, options=opts, scale_atol=True)
        # one work item per (outer tap position, channel block): the last dimension's taps share an item
        assert [(kk.kind, kk.work_items) for kk in conv_kernels(exe)] == [("conv-channelwise", items)]


def _reversed(window):
    return Window(tuple(d.replace(window_reversal=True) for d in window.dimensions))


HLO_BLOCKED = [  # dim labels, lhs, rhs, window, feature groups, expected kernels
    ("b01f_01io->b01f", (2, 9, 8, 5), (3, 3, 5, 7), Window.make([3, 3], [1, 1], [(1, 1), (1, 1)]), 1, ["conv-gemm"]),
    # grouped: each group's GEMM reads its columns of the HWIO filter and writes its columns of the output
    ("b01f_01io->b01f", (1, 13, 11, 6), (3, 3, 3, 8), Window.make([3, 3], [2, 1], [(1, 1), (0, 0)]), 2, ["conv-gemm"]),
    # contraction 3·3·600 > one block: GEMMs accumulate over contraction blocks
    ("b01f_01io->b01f", (1, 3, 4, 600), (3, 3, 600, 9), Window.make([3, 3], [1, 1], [(1, 1), (1, 1)]), 1,
     ["conv-gemm"]),
    # filter backprop: transposed patch blocks, result written in place as [kh, kw, in, out]
    ("f01b_i01o->01bf", (2, 9, 9, 6), (2, 9, 9, 4), Window.make([9, 9], [1, 1], [(1, 1), (1, 1)]), 1, ["conv-gemm"]),
    # reversed filter with input dilation (strided input backprop): the filter matrix is copied first
    ("b01f_01oi->b01f", (1, 4, 5, 6), (3, 3, 3, 6), _reversed(Window.make([3, 3], [1, 1], [(2, 2), (2, 2)],
                                                                          lhs_dilation=[2, 2])), 1,
     ["materialize", "conv-gemm"]),
    # a big reversed filter [kh, kw, out, in] (the input backprop's): one GEMM per tap reads it in place
    ("b01f_01oi->b01f", (1, 5, 6, 64), (3, 3, 120, 64), _reversed(Window.make([3, 3], [1, 1], [(1, 1), (1, 1)])),
     1, ["conv-gemm"]),
    ("b01f_01oi->b01f", (2, 4, 3, 64), (3, 3, 120, 64), _reversed(Window.make([3, 3], [1, 1], [(1, 2), (2, 1)],
                                                                              lhs_dilation=[2, 2])), 1, ["conv-gemm"]),
    # 1×1 convolutions: the input is the GEMM's A in place (one group, and two)
    ("b01f_01io->b01f", (2, 5, 7, 12), (1, 1, 12, 10), Window.make([1, 1]), 1, ["conv-gemm"]),
    ("b01f_01io->b01f", (2, 5, 7, 12), (1, 1, 6, 20), Window.make([1, 1]), 2, ["conv-gemm"]),
    # 7×7 stride 2 over 3 channels (ResNet's first layer): runs of a whole window row, and tap by tap at edges
    ("b01f_01io->b01f", (1, 19, 17, 3), (7, 7, 3, 8), Window.make([7, 7], [2, 2], [(3, 3), (2, 3)]), 1,
     ["conv-gemm"]),
    # two output positions (the zoo's ResNet50 at 32x32): the filter's columns are split across threads
    ("b01f_01io->b01f", (2, 1, 1, 40), (3, 3, 40, 200), Window.make([3, 3], [1, 1], [(1, 1), (1, 1)]), 1,
     ["conv-gemm"]),
    # one output position meeting one tap (3×3 SAME over 1×1, ResNet's/DenseNet's last stages at 32×32): one
    # GEMM with the tap's block of the filter read in place — HWIO, and the input backprop's reversed [out, in]
    ("b01f_01io->b01f", (2, 1, 1, 24), (3, 3, 24, 40), Window.make([3, 3], [1, 1], [(1, 1), (1, 1)]), 1,
     ["conv-gemm"]),
    ("b01f_01oi->b01f", (3, 1, 1, 24), (3, 3, 40, 24), _reversed(Window.make([3, 3], [1, 1], [(1, 1), (1, 1)])), 1,
     ["conv-gemm"]),
    ("b01f_01io->b01f", (2, 1, 1, 32), (3, 3, 32, 48), Window.make([3, 3], [1, 1], [(2, 2), (2, 2)],
                                                                 rhs_dilation=[2, 2]), 1, ["conv-gemm"]),
    # filter backprop over a 1×1 image: only the centre tap meets it, the other row blocks are zeroed
    ("f01b_i01o->01bf", (2, 1, 1, 64), (2, 1, 1, 96), Window.make([1, 1], [1, 1], [(1, 1), (1, 1)]), 1,
     ["conv-gemm"]),
    ("f01b_i01o->01bf", (3, 2, 1, 24), (3, 2, 1, 40), Window.make([2, 1], [1, 1], [(1, 1), (2, 0)]), 1,
     ["conv-gemm"]),
    # NCHW output: GEMM result copied into the output layout
    ("b01f_01io->bf01", (2, 6, 5, 4), (3, 3, 4, 5), Window.make([3, 3], [1, 1], [(1, 1), (1, 1)]), 1,
     ["conv-gemm", "materialize"]),
]


@pytest.mark.parametrize("conv", HLO_BLOCKED, ids=lambda c: f"{c[0]}-{c[1]}-g{c[4]}")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blocked_conv_gemm_matches_evaluator(conv, dtype):
    from tfxla_cluster.codegen.native_runtime import blas_available
    labels, xs, ks, window, groups, kinds = conv
    x, k = random_array(xs, dtype, RNG, specials=False), random_array(ks, dtype, RNG, specials=False)
    m = module_of(lambda b, p, q: b.convolution(p, q, window, labels, feature_group_count=groups), x, k)
    # Sums of hundreds of products in GEMM-block order: absolute error relative to the largest output.
    tol = 1e-11 if dtype == np.float64 else 2e-5
    for opts in (CodegenOptions(bounds_checks=True, threads=1), CodegenOptions(bounds_checks=True, threads=3,
                                                                              parallel_min_cost=1)):
        exe, _ = check(m, x, k, rtol=tol, atol=tol, options=opts, scale_atol=True)
        if blas_available():
            assert [kk.kind for kk in conv_kernels(exe)] == kinds


def test_useful_taps():
    from tfxla_cluster.codegen.conv import useful_taps
    w = Window.make([3, 3], [1, 2], [(1, 1), (1, 1)]).dimensions
    assert useful_taps(w, [1, 1], [1, 1]) == [[1], [1]]
    assert useful_taps(w, [2, 5], [2, 3]) == [[0, 1, 2], [0, 1, 2]]
    # input dilation 2: taps landing between input elements never count
    d = Window.make([3], [1], [(0, 0)], lhs_dilation=[2]).dimensions
    assert useful_taps(d, [2], [1]) == [[0, 2]]


def test_weight_bound_1x1_conv_splits_filter_columns_across_threads():
    """49 positions, 300 output features: each thread multiplies all positions by its columns of the
    filter (reading its part once) instead of its rows by the whole filter."""
    from tfxla_cluster.codegen.native_runtime import blas_available
    x = random_array((1, 7, 7, 32), np.float32, RNG, specials=False)
    k = random_array((1, 1, 32, 300), np.float32, RNG, specials=False)
    m = module_of(lambda b, p, q: b.convolution(p, q, Window.make([1, 1]), "b01f_01io->b01f"), x, k)
    for threads in (2, 3):
        exe, _ = check(m, x, k, rtol=2e-5, atol=2e-5, scale_atol=True,
                       options=CodegenOptions(bounds_checks=True, threads=threads, parallel_min_cost=1))
        if blas_available():
            [conv] = conv_kernels(exe)
            assert (conv.kind, conv.work_items) == ("conv-gemm", threads)


_REVERSE_HLO = """HloModule m
ENTRY e {{
  g = f32[2,5,6,24] parameter(0)
  k = f32[3,3,40,24] parameter(1)
  r = f32[3,3,40,24] reverse(k), dimensions={{0,1}}
  ROOT c = f32[2,5,6,40] convolution(g, r), window={{size=3x3 pad=1_1x1_1{rev}}}, dim_labels=b01f_01oi->b01f
}}
"""


@pytest.mark.parametrize("rev", ["", " rhs_reversal=1x0"])
def test_filter_reverse_folds_into_the_convolution(rev):
    """TF's input backprop reverses the forward filter's spatial dimensions for the convolution: the
    convolution reads the filter unreversed with its window reversal flipped, no pass of its own."""
    from tfxla_cluster.hlo.parser import parse_module
    from tfxla_cluster.passes.pipeline import optimize
    module, _ = optimize(parse_module(_REVERSE_HLO.format(rev=rev)))
    assert any(i.opcode.name == "REVERSE" for i in module.entry.instructions)
    g, k = (random_array(s, np.float32, RNG, specials=False) for s in ((2, 5, 6, 24), (3, 3, 40, 24)))
    for opts in (CodegenOptions(bounds_checks=True, threads=1), CodegenOptions(bounds_checks=True, threads=3,
                                                                              parallel_min_cost=1)):
        exe, _ = check(module, g, k, rtol=2e-5, atol=2e-5, options=opts, scale_atol=True)
        assert "r" not in [kk.instruction for kk in conv_kernels(exe)]


def test_reverse_with_other_users_still_runs():
    from tfxla_cluster.hlo.parser import parse_module
    from tfxla_cluster.passes.pipeline import optimize
    text = _REVERSE_HLO.format(rev="").replace(
        "  ROOT c = f32[2,5,6,40]", "  c = f32[2,5,6,40]").replace("dim_labels=b01f_01oi->b01f\n}",
                                                                  "dim_labels=b01f_01oi->b01f\n  ROOT t = (f32[2,5,6,40], f32[3,3,40,24]) tuple(c, r)\n}")
    module, _ = optimize(parse_module(text))
    g, k = (random_array(s, np.float32, RNG, specials=False) for s in ((2, 5, 6, 24), (3, 3, 40, 24)))
    exe, _ = check(module, g, k, rtol=2e-5, atol=2e-5, options=CodegenOptions(bounds_checks=True, threads=2),
                   scale_atol=True)
    assert "r" in [kk.instruction for kk in conv_kernels(exe)]


@pytest.mark.parametrize("fast", [False, True])
def test_folded_reverse_into_a_small_convolution_runs_in_the_elemental_loop(fast, monkeypatch):
    """XLA's order (the exact kernel) at this size, or the elemental loop where the fast kernels run; the
    folded ``reverse`` runs no kernel of its own either way."""
    from tfxla_cluster.codegen import conv_exact
    monkeypatch.setattr(conv_exact, "EXACT_ORDER_WORK", 0 if fast else 1 << 14)
    from tfxla_cluster.hlo.parser import parse_module
    from tfxla_cluster.passes.pipeline import optimize
    text = """HloModule m
ENTRY e {
  g = f32[1,3,2,2] parameter(0)
  k = f32[3,2,3,2] parameter(1)
  r = f32[3,2,3,2] reverse(k), dimensions={0,1}
  ROOT c = f32[1,3,2,3] convolution(g, r), window={size=3x2 pad=1_1x0_1}, dim_labels=b01f_01oi->b01f
}
"""
    module, _ = optimize(parse_module(text))
    args = [random_array(s, np.float32, RNG, specials=False) for s in ((1, 3, 2, 2), (3, 2, 3, 2))]
    exe, _ = check(module, *args, rtol=1e-5, atol=1e-5, options=CodegenOptions(bounds_checks=True, threads=1),
                   scale_atol=True)
    assert [(kk.instruction, kk.kind) for kk in conv_kernels(exe)] == [("c", "loop" if fast else "conv-exact")]
