"""Convolutions on special values against TF's XLA (codegen/conv_exact.py): infinite or NaN filter taps over
the padding (Eigen's patches multiply them by 0: NaN, for f32 and the f16/bf16 convolutions XLA runs in
f32; f64's elemental loop skips them), an infinite input under the Winograd kernel (no NaN spread over
its tile), a fused epilogue, a constant filter; NaN positions, infinities and signed zeros compared."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc

raw = tf.raw_ops
RNG = np.random.default_rng(1919)


def _same(want, got, rtol):
    want, got = np.asarray(want, np.float64), np.asarray(got, np.float64)
    assert want.shape == got.shape
    wn, gn = np.isnan(want), np.isnan(got)
    assert (wn == gn).all(), f"NaN positions differ at {np.argwhere(wn != gn)[:5].tolist()}"
    w, g = want[~wn], got[~wn]
    wi = np.isinf(w)
    assert (np.isinf(g) == wi).all() and (w[wi] == g[wi]).all(), "infinities differ"
    z = w == 0
    assert (np.signbit(w[z]) == np.signbit(g[z])).all(), "signed zeros differ"
    np.testing.assert_allclose(g[~wi], w[~wi], rtol=rtol, atol=rtol * max(1.0, float(np.max(np.abs(w[~wi]), initial=0))))


def _check(fn, *args, rtol=1e-5):
    args = [tf.constant(a) if not isinstance(a, tf.Tensor) else a for a in args]
    want = tf.function(fn, jit_compile=True)(*args)
    got = txc.function(fn, jit_compile=True)(*args)
    _same(tf.cast(want, tf.float64).numpy(), tf.cast(got, tf.float64).numpy(), rtol)


def _inf_filter(shape, dtype=np.float32, zero=False, at=None):
    w = np.zeros(shape, dtype) if zero else RNG.standard_normal(shape).astype(dtype)
    w[at if at is not None else (0,) * len(shape)] = np.inf
    return w


CONV = [  # input NHWC, filter HWIO, strides, padding, dilations
    ((2, 5, 3, 3), (3, 2, 3, 1), 2, "SAME", 1),      # fuzz seed 52000507 (zero input)
    ((2, 10, 6, 3), (2, 2, 3, 4), 1, "SAME", 2),
    ((1, 7, 8, 5), (3, 3, 5, 6), 1, "SAME", 1),
    ((1, 9, 9, 4), (5, 5, 4, 3), 2, [[0, 0], [2, 1], [1, 2], [0, 0]], 1),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, tf.float16, tf.bfloat16], ids=str)
@pytest.mark.parametrize("case", CONV, ids=lambda c: f"{c[0]}w{c[1]}s{c[2]}d{c[4]}")
def test_conv2d_infinite_filter_over_padding(case, dtype):
    xs, ws, s, pad, d = case
    base = np.float64 if dtype is np.float64 else np.float32
    x = RNG.standard_normal(xs).astype(base)
    x[0, 0, 0, 0] = 0.0
    w = _inf_filter(ws, base, zero=case is CONV[0])
    if case is CONV[0]:
        x[...] = 0.0
    tx, tw = tf.constant(x), tf.constant(w)
    if dtype in (tf.float16, tf.bfloat16):
        tx, tw = tf.cast(tx, dtype), tf.cast(tw, dtype)
    rtol = {tf.float16: 2e-2, tf.bfloat16: 2e-2}.get(dtype, 1e-5)
    _check(lambda x, w: tf.nn.conv2d(x, w, s, pad, dilations=d), tx, tw, rtol=rtol)


def test_depthwise_and_input_backprop_with_nan_filter():
    x = RNG.standard_normal((2, 7, 6, 5)).astype(np.float32)
    w = RNG.standard_normal((3, 3, 5, 1)).astype(np.float32)
    w[2, 0, 1, 0] = np.nan
    w[0, 2, 3, 0] = -np.inf
    _check(lambda x, w: raw.DepthwiseConv2dNative(input=x, filter=w, strides=[1, 1, 1, 1], padding="SAME"), x, w)
    wf = RNG.standard_normal((3, 3, 5, 4)).astype(np.float32)
    wf[0, 0, 2, 1] = np.inf
    g = RNG.standard_normal((2, 4, 3, 4)).astype(np.float32)
    _check(lambda w, g: raw.Conv2DBackpropInput(input_sizes=[2, 7, 6, 5], filter=w, out_backprop=g,
                                                strides=[1, 2, 2, 1], padding="SAME"), wf, g)


def test_winograd_infinite_input_stays_in_its_window():
    x = RNG.standard_normal((1, 32, 32, 16)).astype(np.float32)
    x[0, 5, 6, 3] = np.inf
    x[0, 11, 2, 7] = -np.inf
    w = RNG.standard_normal((3, 3, 16, 64)).astype(np.float32)
    _check(lambda x, w: tf.nn.conv2d(x, w, 1, "SAME"), x, w, rtol=1e-4)


def test_fused_epilogue_and_constant_filter():
    x = RNG.standard_normal((1, 12, 12, 16)).astype(np.float32)
    w = _inf_filter((3, 3, 16, 16), at=(0, 0, 4, 5))
    bias = RNG.standard_normal(16).astype(np.float32)
    _check(lambda x, w: tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME") + bias), x, w, rtol=1e-4)
    _check(lambda x: tf.nn.conv2d(x, tf.constant(w), 1, "SAME") * 2.0, x, rtol=1e-4)


def test_finite_values_keep_the_fast_kernels():
    """Ordinary values: the same results (within rounding) through the fast path."""
    x = RNG.standard_normal((2, 14, 14, 16)).astype(np.float32)
    w = RNG.standard_normal((3, 3, 16, 32)).astype(np.float32)
    _check(lambda x, w: tf.nn.conv2d(x, w, 1, "SAME"), x, w, rtol=1e-4)


@pytest.mark.parametrize("multiplier", [1, 2])
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=str)
def test_depthwise_nan_input_reaches_other_groups_only_in_f64(dtype, multiplier):
    """XLA:CPU turns an f64 depthwise convolution into a dense one over a block-diagonal filter
    (ConvolutionGroupConverter, passes/expanders.py): 0·NaN and 0·inf reach every channel's outputs; f32
    keeps the grouped convolution (Eigen's), where they stay in their channel."""
    x = RNG.standard_normal((2, 5, 4, 3)).astype(dtype)
    x[1, 2, 1, 0] = np.nan
    x[0, 0, 3, 2] = np.inf
    w = RNG.standard_normal((3, 2, 3, multiplier)).astype(dtype)
    _check(lambda x, w: tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME"), x, w)


def test_f64_grouped_conv_nan_stays_in_its_group():
    """Groups of two input features: XLA's base-dilated form skips the other groups (no leak)."""
    x = RNG.standard_normal((1, 5, 5, 4))
    x[0, 2, 2, 1] = np.nan
    w = RNG.standard_normal((3, 3, 2, 6))
    _check(lambda x, w: tf.nn.conv2d(x, w, 1, "SAME"), x, w)


def test_conv2d_of_constants_is_folded_by_tf_eigen_kernel():
    """A Conv2D of constants is TF's constant folding's (its CPU kernel: Eigen patches + contraction), whose
    FMAs keep ``max·138.5 + max·(-1.25)`` at inf where XLA's evaluator gives NaN (fuzz seed 62000286)."""
    big = np.finfo(np.float32).max
    x = np.zeros((1, 5, 1, 2), np.float32)
    x[0, 0, 0, :] = big
    w = np.zeros((2, 1, 2, 2), np.float32)
    w[0, 0, 0, 1], w[0, 0, 1, 1] = 138.53965759277344, -1.2513458728790283
    xd = RNG.standard_normal((1, 6, 5, 3)).astype(np.float32)
    wd = RNG.standard_normal((2, 3, 3, 4)).astype(np.float32)
    xd[0, 1, 1, 0] = np.inf
    _check(lambda: tf.nn.conv2d(tf.constant(x), tf.constant(w), 1, "SAME") + 0.0)
    _check(lambda: tf.nn.conv2d(tf.constant(xd), tf.constant(wd), 2, [[0, 0], [1, 0], [2, 1], [0, 0]],
                                dilations=1) * 1.0)


@pytest.mark.parametrize("xs,ws", [((2, 5, 1, 1), (3, 1, 1, 1)), ((1, 6, 6, 2), (3, 3, 2, 1)),
                                   ((2, 5, 5, 4), (2, 2, 4, 1)), ((1, 7, 7, 5), (3, 3, 5, 1)),
                                   ((1, 6, 6, 12), (3, 3, 12, 1)), ((1, 6, 5, 6), (3, 2, 6, 3))],
                         ids=lambda s: "x".join(map(str, s)))
def test_one_output_feature_sums_in_gemv_lanes(xs, ws):
    """One output feature per group: TF's XLA sums each output in oneDNN's gemv_t lanes (k mod 8 in blocks
    of 16, then blocks of 8/4/2/1 of rounded products): overflowing products of both signs give NaN or an
    infinity by lane (fuzz seed 53000509), not by the order of one FMA chain."""
    big = np.finfo(np.float32).max
    rng = np.random.default_rng(53)
    for _ in range(3):
        x = rng.standard_normal(xs).astype(np.float32) * 4
        w = (rng.choice([-1.0, 0.0, 1.0], ws) * big * rng.uniform(0.1, 1.0, ws)).astype(np.float32)
        w[rng.random(ws) < 0.5] = 0.0
        w.flat[0] = big
        if ws[3] == 1:
            _check(lambda x, w: tf.nn.conv2d(x, w, 1, "SAME"), x, w)
        else:   # depthwise: one output feature per group
            _check(lambda x, w: tf.nn.depthwise_conv2d(x, w[:, :, :, :1], [1, 1, 1, 1], "SAME"), x, w)




@pytest.mark.parametrize("hc", [(40, 20), (12, 100), (64, 64), (3, 120), (8, 164), (7, 40), (5, 150)],
                         ids=lambda s: f"{s[0]}x{s[0]}x{s[1]}")
def test_one_output_feature_in_eigens_depth_shards_and_blocks(hc):
    """Deeper or over larger images, Eigen splits the depth before oneDNN's gemv_t sees it
    (``eigen_blocking.k_blocks``): two depth shards summed at the end where it shards by the inner dimension
    (a 40×40 image at depth 180: 96 + 84; 64×64 at 576: 288 + 288), thread-pool k-blocks of ≤ 320 in equal
    slices, the sequential contraction's evened-out blocks (3×3 at 1080); each block's lanes start afresh. A
    last patch alone in oneDNN's column blocks (7×7 = 48 + 1, 5×5 = 24 + 1) is one FMA chain."""
    h, c = hc
    big = np.finfo(np.float32).max
    rng = np.random.default_rng(h * c)
    x = rng.choice(np.array([1.5, -2.0, 0.5, 1.25], np.float32), (1, h, h, c))
    w = rng.standard_normal((3, 3, c, 1)).astype(np.float32)
    w.flat[rng.choice(w.size, 6, replace=False)] = rng.choice([big, -big], 6)
    _check(lambda x, w: tf.nn.conv2d(x, w, 1, "SAME"), x, w)


F32_MAX, F64_MAX, BF16_MAX = float(np.finfo(np.float32).max), float(np.finfo(np.float64).max), 3.3895313892515355e38
HUGE_INPUT = [  # fuzz seed, dtype, depthwise, input shape and elements, filter shape and elements, padding
    (72000800, tf.float32, False, (2, 3, 5, 3), {(1, 0, 1, 1): -F32_MAX, (1, 1, 1, 0): np.inf},
     (3, 3, 3, 1), {(1, 2, 1, 0): -163.6089630126953, (2, 2, 0, 0): -0.7783721685409546}, "SAME"),
    (73000981, tf.float32, True, (2, 2, 3, 3), {(1, 0, 1, 2): F32_MAX, (1, 1, 2, 2): F32_MAX},
     (2, 3, 3, 1), {(0, 0, 2, 0): 127.857177734375, (1, 1, 2, 0): -2.5167243480682373}, "SAME"),
    (73000986, tf.float64, False, (2, 3, 2, 2), {(1, 1, 0, 1): -F64_MAX, (1, 1, 1, 0): -np.inf},
     (2, 3, 2, 4), {(1, 0, 1, 2): 1.6825906956246097, (1, 1, 0, 2): -143.45193007093542}, "SAME"),
    (75000252, tf.bfloat16, False, (2, 3, 5, 3), {(1, 0, 3, 2): np.inf, (1, 0, 4, 2): -BF16_MAX},
     (1, 2, 3, 1), {(0, 0, 2, 0): 39.5, (0, 1, 2, 0): 71.0}, "VALID"),
    (75000643, tf.bfloat16, False, (1, 2, 5, 2), {(0, 0, 1, 1): -BF16_MAX, (0, 0, 3, 0): np.inf},
     (3, 3, 2, 4), {(1, 0, 1, 0): -4.5625, (1, 2, 0, 0): -5.25}, "SAME"),
]


@pytest.mark.parametrize("const_filter", [False, True], ids=["arg", "const"])
@pytest.mark.parametrize("case", HUGE_INPUT, ids=lambda c: str(c[0]))
def test_huge_input_next_to_an_infinity_with_a_small_filter(case, const_filter):
    """A small finite filter and an input holding ±max (and ±inf): TF's XLA rounds the huge element's
    product to an infinity, which meets one of the other sign as NaN, where the fast kernels' FMA keeps
    ``max·w - inf`` at -inf. So the guard checks the input as well as the filter."""
    seed, dtype, depthwise, xs, xv, ws, wv, pad = case
    x, w = np.zeros(xs), np.zeros(ws)
    for a, vals in ((x, xv), (w, wv)):
        for at, v in vals.items():
            a[at] = v
    tx, tw = tf.cast(tf.constant(x), dtype), tf.cast(tf.constant(w), dtype)
    conv = (lambda x, w: tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], pad)) if depthwise else \
        (lambda x, w: tf.nn.conv2d(x, w, 1, pad))
    if const_filter:   # the filter's check is decided at compile time, the input's per call
        _check(lambda x: conv(x, tw), tx, rtol=2e-2)
    else:
        _check(conv, tx, tw, rtol=2e-2)


def test_the_input_is_checked_where_it_pays(monkeypatch):
    """The input's check costs ~1% at most: a 3×3 convolution reads its input with its filter, a 1×1 one of
    few features over a large image its filter only (a huge input element is not emulated there); TF's XLA's
    results either way on finite values."""
    from tfxla_cluster.codegen import conv_exact
    checked = []
    flag = conv_exact._special_flag
    monkeypatch.setattr(conv_exact, "_special_flag", lambda prog, instr, refs, limit: (
        checked.append(sorted(r.shape.num_elements for r in refs)), flag(prog, instr, refs, limit))[1])
    x = RNG.standard_normal((1, 64, 64, 32)).astype(np.float32)
    w1 = RNG.standard_normal((1, 1, 32, 8)).astype(np.float32)
    _check(lambda x, w: tf.nn.conv2d(x, w, 1, "VALID"), x, w1, rtol=1e-4)
    assert checked == [[w1.size]]
    checked.clear()
    xs = x[:, :12, :12, :8]
    w3 = RNG.standard_normal((3, 3, 8, 40)).astype(np.float32)
    _check(lambda x, w: tf.nn.conv2d(x, w, 2, "SAME"), xs, w3, rtol=1e-4)
    assert checked == [sorted([xs.size, w3.size])]


def _bits_same(want, got):
    """Bit for bit, but any NaN for any NaN (payloads aside)."""
    want, got = np.asarray(want, np.float64), np.asarray(got, np.float64)
    wn, gn = np.isnan(want), np.isnan(got)
    assert (wn == gn).all(), f"NaN positions differ at {np.argwhere(wn != gn)[:5].tolist()}"
    diff = np.argwhere((want.view(np.int64) != got.view(np.int64)) & ~wn)
    assert not diff.size, f"at {diff[:3].tolist()}: TF's XLA {want[tuple(diff[0])]}, ours {got[tuple(diff[0])]}"


XLA_FORMS = [  # dtype, input NHWC, filter HWIO, padding: the path TF's XLA takes (conv_exact.xla_dot_form, eigen_aligned)
    ("float32", (2, 3, 3, 3), (1, 1, 3, 1), "VALID"),    # a dot [18,3]x[3,1]: row-major gemv, one FMA chain
    ("float32", (2, 3, 3, 8), (1, 1, 8, 1), "SAME"),     # ... 8 lanes, adjacent pairs (8-row tiles), AddReduce (2 rows)
    ("float32", (3, 7, 5, 20), (1, 1, 20, 1), "VALID"),  # ... lanes over 16, then a chain of 4
    ("float32", (1, 1, 1, 9), (1, 1, 9, 3), "VALID"),    # one patch: column-major gemv, one chain
    ("float32", (2, 3, 3, 2), (1, 1, 2, 2), "VALID"),    # a tiny dot (K ≤ 3): one chain
    ("float32", (2, 5, 5, 1), (1, 2, 1, 1), "VALID"),    # 8-byte filter: XLA's elemental loop
    ("float32", (2, 5, 5, 1), (2, 1, 1, 1), "SAME"),     # ... skipping the padding
    ("bfloat16", (2, 5, 5, 1), (1, 2, 1, 1), "VALID"),   # fuzz seed 107000534
    ("bfloat16", (2, 3, 3, 7), (1, 1, 7, 1), "VALID"),
    ("float16", (2, 3, 3, 9), (1, 1, 9, 1), "VALID"),
    ("float64", (2, 3, 3, 9), (1, 1, 9, 1), "VALID"),    # 4 lanes, AddReduce (8-row tiles)
    ("float64", (1, 3, 4, 9), (1, 1, 9, 1), "VALID"),    # ... a last tile of 4 rows: adjacent pairs
    ("float64", (2, 3, 3, 8), (1, 1, 8, 4), "VALID"),    # a library dot: Eigen's rounded products
    ("float64", (2, 5, 5, 1), (1, 2, 1, 1), "VALID"),    # XLA's elemental loop
]


@pytest.mark.parametrize("case", XLA_FORMS, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[1]))}-w{'x'.join(map(str, c[2]))}")
def test_small_and_1x1_convolutions_take_xlas_path(case):
    """Where TF's XLA runs no Eigen convolution — a 1×1 convolution without stride or padding is a dot
    (algsimp's SimplifyConvToDot: a row-major gemv for one output feature, an FMA chain for one patch or a
    tiny dot, Eigen's GEMM in f64), a buffer of ≤ 8 bytes makes its elemental loop — the exact path sums as
    XLA does: bit for bit, NaN positions and infinities' signs included (fuzz seeds 107000534, 107000536:
    an infinity then an overflowing product of the other sign keeps the infinity in an FMA chain)."""
    dtype, xs, ws, pad = case
    base = np.float64 if dtype == "float64" else np.float32
    big = np.finfo(base).max
    specials = np.array([np.inf, -np.inf, big, -big, big / 2, -big / 2, 3.39e38, -3.39e38], base)
    rng = np.random.default_rng(107000536 + sum(xs) + sum(ws))
    fn = lambda x, w: tf.nn.conv2d(x, w, 1, pad)
    tf_fn, our_fn = tf.function(fn, jit_compile=True), txc.function(fn, jit_compile=True)
    for _ in range(3):
        x = (rng.standard_normal(xs) * 2.0 ** rng.integers(-12, 12, xs)).astype(base)
        at = rng.random(xs) < 0.25
        x[at] = rng.choice(specials, at.sum())
        x.flat[0] = np.inf   # the exact path runs
        w = rng.choice(np.array([-1.5603, 1.0431, 53.5, -0.0532, 0.7, -1.3, 2.0], base), ws)
        tx, tw = tf.cast(x, dtype), tf.cast(w, dtype)
        _bits_same(tf.cast(tf_fn(tx, tw), tf.float64).numpy(), tf.cast(our_fn(tx, tw), tf.float64).numpy())
