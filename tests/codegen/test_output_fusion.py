"""Convolution output fusion (codegen/kernels/loop.py ``Epilogue``, codegen/conv.py): a convolution whose only
user is an elementwise loop fusion runs with that fusion applied to each block of its output (bias,
batch-norm scale/shift, residual add, Relu/Relu6/Elu/GELU). Checked against real TF on odd shapes (partial
vector blocks, grouped/strided/1×1/NCHW), and at the HLO level against the evaluator on one and three
threads, with the kernel list showing no separate pass over the output."""
import numpy as np
import pytest
import tensorflow as tf

from tests.codegen.cg_helpers import check, conv_kernels, random_array
import tfxla_cluster as txc
from tfxla_cluster.codegen import CodegenOptions
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.passes.pipeline import optimize

RNG = np.random.default_rng(61)


@pytest.fixture(autouse=True)
def _fast(fast_conv_kernels):
    """The epilogues of the fast convolution kernels, on small shapes too (``conv_exact.exact_order``)."""


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _close(got, want):
    want = np.asarray(want)
    scale = max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=2e-5 * scale)


def _gelu(x):
    return 0.5 * x * (1.0 + tf.math.erf(x * 0.7071067811865476))


def _conv_bias_relu(x, k, b):
    return tf.nn.relu(tf.nn.conv2d(x, k, 1, "SAME") + b)


def _conv_bn_relu_res(x, k, s, b, r):
    return tf.nn.relu(tf.nn.conv2d(x, k, 1, "SAME") * s + b + r)


TF_CASES = [  # name, function, argument shapes
    ("conv3x3_bias_relu", _conv_bias_relu, [(2, 13, 11, 20), (3, 3, 20, 37), (37,)]),
    ("conv3x3_bn_relu_res", _conv_bn_relu_res, [(2, 9, 10, 16), (3, 3, 16, 33), (33,), (33,), (2, 9, 10, 33)]),
    ("conv1x1_bias_elu", lambda x, k, b: tf.nn.elu(tf.nn.conv2d(x, k, 1, "VALID") + b),
     [(3, 7, 5, 40), (1, 1, 40, 70), (70,)]),
    ("conv1x1s2_bias_gelu", lambda x, k, b: _gelu(tf.nn.conv2d(x, k, 2, "SAME") + b),
     [(2, 11, 9, 24), (1, 1, 24, 19), (19,)]),
    ("conv5x3s2_bias_relu6", lambda x, k, b: tf.nn.relu6(tf.nn.conv2d(x, k, 2, "SAME") + b),
     [(1, 15, 16, 6), (5, 3, 6, 9), (9,)]),
    ("grouped_bias_relu", lambda x, k, b: tf.nn.relu(tf.nn.conv2d(x, k, 1, "SAME") + b),
     [(2, 8, 7, 12), (3, 3, 4, 18), (18,)]),
    ("nchw_bias_relu", lambda x, k, b: tf.nn.relu(tf.nn.bias_add(
        tf.nn.conv2d(x, k, 1, "SAME", data_format="NCHW"), b, data_format="NCHW")),
     [(2, 6, 9, 8), (3, 3, 6, 10), (10,)]),
    ("dw_bias_relu6", lambda x, w, b: tf.nn.relu6(tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME") + b),
     [(2, 9, 10, 37), (3, 3, 37, 1), (37,)]),
    ("dw5x5s2_bn_relu", lambda x, w, s, b: tf.nn.relu(
        tf.nn.depthwise_conv2d(x, w, [1, 2, 2, 1], "SAME") * s + b), [(1, 12, 11, 43), (5, 5, 43, 1), (43,), (43,)]),
]


@pytest.mark.parametrize("case", TF_CASES, ids=lambda c: c[0])
def test_fused_epilogue_matches_tf(case):
    name, fn, shapes = case
    args = [_rand(*s) for s in shapes]
    if name.startswith("nchw"):
        # TF's CPU Conv2D has no NCHW kernel: TF's XLA is the reference there.
        want = tf.function(fn, jit_compile=True)(*args)
    else:
        want = fn(*args)
    got = txc.function(fn, jit_compile=True)(*[tf.constant(a) for a in args])
    _close(got, want)


_HLO = """HloModule m
ENTRY e {{
  x = f32[{xs}] parameter(0)
  k = f32[{ks}] parameter(1)
  b = f32[{c}] parameter(2)
  r = f32[{ys}] parameter(3)
  conv = f32[{ys}] convolution(x, k), window={{{window}}}, dim_labels={labels}{groups}
  bb = f32[{ys}] broadcast(b), dimensions={{{fdim}}}
  add = f32[{ys}] add(conv, bb)
  res = f32[{ys}] add(add, r)
  zero = f32[] constant(0)
  zz = f32[{ys}] broadcast(zero), dimensions={{}}
  ROOT relu = f32[{ys}] maximum(res, zz)
}}
"""

HLO_CASES = [  # xs, ks, ys, window, labels, feature groups, output feature dim, fused kernel kinds
    ((2, 9, 8, 5), (3, 3, 5, 7), (2, 9, 8, 7), "size=3x3 pad=1_1x1_1", "b01f_01io->b01f", 1, 3, ["conv-gemm"]),
    ((2, 5, 7, 12), (1, 1, 12, 10), (2, 5, 7, 10), "size=1x1", "b01f_01io->b01f", 1, 3, ["conv-gemm"]),
    ((1, 13, 11, 6), (3, 3, 3, 8), (1, 7, 9, 8), "size=3x3 stride=2x1 pad=1_1x0_0", "b01f_01io->b01f", 2, 3,
     ["conv-gemm"]),
    # contraction 3·3·600 > one patch block: the epilogue runs after the last contraction block only
    ((1, 3, 4, 600), (3, 3, 600, 9), (1, 3, 4, 9), "size=3x3 pad=1_1x1_1", "b01f_01io->b01f", 1, 3,
     ["conv-gemm"]),
    # one output position: a plain GEMM, the epilogue on its columns (a window as large as the input; a
    # larger one, e.g. 3x3 SAME over 1x1, is XLA's operand swap: algsimp's conv_operand_swap)
    ((2, 1, 3, 24), (1, 3, 24, 40), (2, 1, 1, 40), "size=1x3", "b01f_01io->b01f", 1, 3, ["conv-gemm"]),
    # NCHW output: the epilogue runs in the copy-out pass
    ((2, 6, 5, 4), (3, 3, 4, 5), (2, 5, 6, 5), "size=3x3 pad=1_1x1_1", "b01f_01io->bf01", 1, 1,
     ["conv-gemm", "materialize"]),
    # depthwise: the channel-wise kernel, epilogue per channel block (19 = partial vector block)
    ((2, 7, 6, 19), (3, 3, 1, 19), (2, 7, 3, 19), "size=3x3 stride=1x2 pad=1_1x1_1", "b01f_01io->b01f", 19, 3,
     ["conv-channelwise"]),
]


def _optimized_case(case):
    """(the optimised module of an HLO_CASES row, random arguments: input, filter, bias, residual)."""
    xs, ks, ys, window, labels, groups, fdim, _ = case
    text = _HLO.format(xs=",".join(map(str, xs)), ks=",".join(map(str, ks)), ys=",".join(map(str, ys)),
                       c=ys[fdim], window=window, labels=labels, fdim=fdim,
                       groups=f", feature_group_count={groups}" if groups > 1 else "")
    module, _ = optimize(parse_module(text))
    return module, [random_array(s, np.float32, RNG, specials=False) for s in (xs, ks, (ys[fdim],), ys)]


@pytest.mark.parametrize("case", HLO_CASES, ids=lambda c: f"{c[4]}-{c[0]}-g{c[5]}")
def test_epilogue_runs_in_the_convolution_kernel(case):
    from tfxla_cluster.codegen.native_runtime import blas_available
    kinds = case[-1]
    module, args = _optimized_case(case)
    for opts in (CodegenOptions(bounds_checks=True, threads=1),
                 CodegenOptions(bounds_checks=True, threads=3, parallel_min_cost=1)):
        exe, _ = check(module, *args, rtol=2e-5, atol=2e-5, options=opts, scale_atol=True)
        if blas_available() or kinds == ["conv-channelwise"]:
            assert [kk.kind for kk in conv_kernels(exe)] == kinds
    # Without output fusion the same module has the fusion's own pass over the output.
    exe, _ = check(module, *args, rtol=2e-5, atol=2e-5, scale_atol=True,
                   options=CodegenOptions(bounds_checks=True, threads=2, output_fusion=False))
    assert any(kk.kind.startswith("fusion") for kk in conv_kernels(exe))


@pytest.mark.parametrize("case", [HLO_CASES[0], HLO_CASES[2], HLO_CASES[4]], ids=lambda c: f"{c[4]}-g{c[5]}")
def test_whole_im2col_gemm_runs_the_epilogue(case):
    """Without BLAS (AOT objects) convolutions take gemm.py's whole-im2col GEMM: the fusion runs on each
    GEMM block (output written by the GEMM) or in its copy into the output layout, not as its own pass."""
    module, args = _optimized_case(case)
    for threads in (1, 3):
        opts = CodegenOptions(bounds_checks=True, threads=threads, parallel_min_cost=1, use_blas=False)
        exe, _ = check(module, *args, rtol=2e-5, atol=2e-5, options=opts, scale_atol=True)
        kinds = [kk.kind for kk in conv_kernels(exe)]
        assert "gemm" in kinds and not any(k.startswith("fusion") for k in kinds), kinds


def test_convolution_with_other_users_is_not_deferred():
    """The convolution's value is also an output: it is written as it is, the fusion runs on its own."""
    text = """HloModule m
ENTRY e {
  x = f32[2,6,5,4] parameter(0)
  k = f32[3,3,4,5] parameter(1)
  conv = f32[2,6,5,5] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  zero = f32[] constant(0)
  zz = f32[2,6,5,5] broadcast(zero), dimensions={}
  relu = f32[2,6,5,5] maximum(conv, zz)
  ROOT t = (f32[2,6,5,5], f32[2,6,5,5]) tuple(conv, relu)
}
"""
    module, _ = optimize(parse_module(text))
    args = [random_array(s, np.float32, RNG, specials=False) for s in ((2, 6, 5, 4), (3, 3, 4, 5))]
    exe, _ = check(module, *args, rtol=2e-5, atol=2e-5, scale_atol=True,
                   options=CodegenOptions(bounds_checks=True, threads=2))
    assert any(kk.kind.startswith("fusion") for kk in conv_kernels(exe))


DOT_CASES = [  # name, function, argument shapes
    ("dense_bias_relu", lambda x, w, b: tf.nn.relu(tf.matmul(x, w) + b), [(67, 45), (45, 131), (131,)]),
    ("dense_bias_gelu_res", lambda x, w, b, r: _gelu(tf.matmul(x, w) + b) + r,
     [(130, 70), (70, 33), (33,), (130, 33)]),
    ("dense_t_bias_elu", lambda x, w, b: tf.nn.elu(tf.matmul(x, w, transpose_b=True) + b),
     [(37, 64), (50, 64), (50,)]),
    ("bmm_scale_tanh", lambda x, w: tf.tanh(tf.matmul(x, w) * 0.5), [(3, 40, 24), (3, 24, 29)]),
]


@pytest.mark.parametrize("case", DOT_CASES, ids=lambda c: c[0])
def test_dot_epilogue_matches_tf(case):
    _, fn, shapes = case
    args = [_rand(*s) for s in shapes]
    _close(txc.function(fn, jit_compile=True)(*[tf.constant(a) for a in args]), fn(*args))


_DOT_HLO = """HloModule m
ENTRY e {
  x = f32[70,45] parameter(0)
  w = f32[45,131] parameter(1)
  b = f32[131] parameter(2)
  d = f32[70,131] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[70,131] broadcast(b), dimensions={1}
  add = f32[70,131] add(d, bb)
  ROOT t = f32[70,131] tanh(add)
}
"""


def test_dot_epilogue_runs_in_the_gemm_kernel():
    from tfxla_cluster.codegen.native_runtime import blas_available
    module, _ = optimize(parse_module(_DOT_HLO))
    args = [random_array(s, np.float32, RNG, specials=False) for s in ((70, 45), (45, 131), (131,))]
    for opts in (CodegenOptions(bounds_checks=True, threads=1),
                 CodegenOptions(bounds_checks=True, threads=3, parallel_min_cost=1),
                 CodegenOptions(bounds_checks=True, threads=2, use_blas=False)):
        exe, _ = check(module, *args, rtol=2e-5, atol=2e-5, options=opts, scale_atol=True)
        if blas_available() or not opts.use_blas:
            assert [kk.kind for kk in conv_kernels(exe)] == ["gemm"]
    exe, _ = check(module, *args, rtol=2e-5, atol=2e-5, scale_atol=True,
                   options=CodegenOptions(bounds_checks=True, threads=2, output_fusion=False))
    assert len(conv_kernels(exe)) == 2


def test_lone_elementwise_user_is_the_epilogue():
    """XLA leaves ``dot + residual`` (and a convolution's) as a lone add: it runs on the GEMM blocks too."""
    text = """HloModule m
ENTRY e {
  x = f32[70,45] parameter(0)
  w = f32[45,131] parameter(1)
  r = f32[70,131] parameter(2)
  d = f32[70,131] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT add = f32[70,131] add(d, r)
}
"""
    from tfxla_cluster.codegen.native_runtime import blas_available
    module, _ = optimize(parse_module(text))
    assert module.entry.root.opcode.text == "add"
    args = [random_array(s, np.float32, RNG, specials=False) for s in ((70, 45), (45, 131), (70, 131))]
    for opts in (CodegenOptions(bounds_checks=True, threads=1),
                 CodegenOptions(bounds_checks=True, threads=3, parallel_min_cost=1)):
        exe, _ = check(module, *args, rtol=2e-5, atol=2e-5, options=opts, scale_atol=True)
        if blas_available():
            assert [kk.kind for kk in conv_kernels(exe)] == ["gemm"]


def test_dot_inside_an_output_fusion_runs_its_epilogue_per_block():
    """XLA's kOutput fusion of a matrix-vector dot and its add: the add runs on the GEMM's blocks."""
    text = """HloModule m
ENTRY e {
  a = f32[300,64] parameter(0)
  v = f32[64] parameter(1)
  r = f32[300] parameter(2)
  d = f32[300] dot(a, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT add = f32[300] add(d, r)
}
"""
    from tfxla_cluster.codegen.native_runtime import blas_available
    module, _ = optimize(parse_module(text))
    assert module.entry.root.opcode.text == "fusion"
    args = [random_array(s, np.float32, RNG, specials=False) for s in ((300, 64), (64,), (300,))]
    for opts in (CodegenOptions(bounds_checks=True, threads=1),
                 CodegenOptions(bounds_checks=True, threads=3, parallel_min_cost=1)):
        exe, _ = check(module, *args, rtol=2e-5, atol=2e-5, options=opts, scale_atol=True)
        if blas_available():
            assert [kk.kind for kk in conv_kernels(exe)] == ["gemm"]


PHASE_CASES = [  # input NHWC, filter HWIO (1×1), stride, padding: the strided 1×1 convolution's input backprop
    ((2, 11, 9, 24), (1, 1, 24, 19), 2, "SAME"),
    ((1, 10, 12, 70), (1, 1, 70, 33), 2, "VALID"),
    ((2, 9, 10, 5), (1, 1, 5, 7), 3, "SAME"),
    ((1, 8, 7, 6), (1, 1, 6, 9), (2, 1), "VALID"),
    # one input position (ResNet50's res5 at 32x32): the batch is one GEMM, column blocks per thread
    ((2, 2, 2, 24), (1, 1, 24, 70), 2, "VALID"),
    ((3, 3, 3, 8), (1, 1, 8, 130), 3, "SAME"),
]


@pytest.mark.parametrize("case", PHASE_CASES, ids=lambda c: f"{c[0]}s{c[2]}{c[3]}")
def test_strided_1x1_input_backprop_by_phase_matches_tf(case):
    xs, ks, s, pad = case
    sh, sw = (s, s) if isinstance(s, int) else s
    k = _rand(*ks)
    oh = -(-xs[1] // sh) if pad == "SAME" else (xs[1] - 1) // sh + 1
    ow = -(-xs[2] // sw) if pad == "SAME" else (xs[2] - 1) // sw + 1
    dy = _rand(xs[0], oh, ow, ks[3])
    bi = lambda k, g: tf.raw_ops.Conv2DBackpropInput(  # noqa: E731
        input_sizes=list(xs), filter=k, out_backprop=g, strides=[1, sh, sw, 1], padding=pad)
    _close(txc.function(bi, jit_compile=True)(tf.constant(k), tf.constant(dy)), bi(k, dy))
    # with an epilogue (the backprop feeding an activation gradient)
    f = lambda k, g, x: bi(k, g) * tf.cast(x > 0, tf.float32)  # noqa: E731
    x = _rand(*xs)
    _close(txc.function(f, jit_compile=True)(tf.constant(k), tf.constant(dy), tf.constant(x)), f(k, dy, x))


def test_phase_plan_is_chosen_and_matches_evaluator():
    from tfxla_cluster.codegen.conv import blocked_plan
    from tfxla_cluster.codegen.native_runtime import blas_available
    text = """HloModule m
ENTRY e {
  g = f32[2,4,5,12] parameter(0)
  k = f32[1,1,7,12] parameter(1)
  ROOT c = f32[2,9,10,7] convolution(g, k), window={size=1x1 pad=1_0x0_1 lhs_dilate=2x2}, dim_labels=b01f_01oi->b01f
}
"""
    module, _ = optimize(parse_module(text))
    conv = module.entry.root
    if blas_available():
        plan = blocked_plan(conv, CodegenOptions())
        assert plan.phase and plan.kmat_taps   # the [out, in] filter is read in place, transposed
    args = [random_array(s, np.float32, RNG, specials=False) for s in ((2, 4, 5, 12), (1, 1, 7, 12))]
    for opts in (CodegenOptions(bounds_checks=True, threads=1),
                 CodegenOptions(bounds_checks=True, threads=3, parallel_min_cost=1)):
        exe, _ = check(module, *args, rtol=2e-5, atol=2e-5, options=opts, scale_atol=True)
        if blas_available():
            assert [kk.kind for kk in conv_kernels(exe)] == ["conv-gemm"]


def test_epilogue_fusion_writing_in_place_over_another_operand():
    """relu(conv1 + conv2): the fusion may write into conv1's buffer in place; conv2 (deferred to it) must
    not overwrite conv1's values before the fusion reads them."""
    text = """HloModule m
ENTRY e {
  x = f32[2,6,5,8] parameter(0)
  k1 = f32[3,3,8,16] parameter(1)
  k2 = f32[1,1,8,16] parameter(2)
  c1 = f32[2,6,5,16] convolution(x, k1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  c2 = f32[2,6,5,16] convolution(x, k2), window={size=1x1}, dim_labels=b01f_01io->b01f
  s = f32[2,6,5,16] add(c1, c2)
  zero = f32[] constant(0)
  zz = f32[2,6,5,16] broadcast(zero), dimensions={}
  relu = f32[2,6,5,16] maximum(s, zz)
  k3 = f32[1,1,16,4] parameter(3)
  ROOT c3 = f32[2,6,5,4] convolution(relu, k3), window={size=1x1}, dim_labels=b01f_01io->b01f
}
"""
    module, _ = optimize(parse_module(text))
    args = [random_array(s, np.float32, RNG, specials=False)
            for s in ((2, 6, 5, 8), (3, 3, 8, 16), (1, 1, 8, 16), (1, 1, 16, 4))]
    for opts in (CodegenOptions(bounds_checks=True, threads=1),
                 CodegenOptions(bounds_checks=True, threads=3, parallel_min_cost=1)):
        check(module, *args, rtol=2e-5, atol=2e-5, options=opts, scale_atol=True)


def test_phase_plan_with_one_input_position_splits_filter_columns():
    """1×1 input positions (ResNet50's strided 1×1 input backprop at 32×32): one GEMM over the batch,
    each thread its columns of the filter."""
    from tfxla_cluster.codegen.native_runtime import blas_available
    text = """HloModule m
ENTRY e {
  g = f32[3,1,1,40] parameter(0)
  k = f32[1,1,130,40] parameter(1)
  ROOT c = f32[3,2,2,130] convolution(g, k), window={size=1x1 pad=0_1x0_1 lhs_dilate=2x2}, dim_labels=b01f_01oi->b01f
}
"""
    module, _ = optimize(parse_module(text))
    args = [random_array(s, np.float32, RNG, specials=False) for s in ((3, 1, 1, 40), (1, 1, 130, 40))]
    for threads in (1, 2):
        exe, _ = check(module, *args, rtol=2e-5, atol=2e-5, scale_atol=True,
                       options=CodegenOptions(bounds_checks=True, threads=threads, parallel_min_cost=1))
        if blas_available():
            assert [(kk.kind, kk.work_items) for kk in conv_kernels(exe)] == [("conv-gemm", threads)]
