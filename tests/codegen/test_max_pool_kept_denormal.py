"""An f32/f64 max pool whose window is 2 along W (SAME padding 0_1, stride 1) on an AVX2 host: TF's XLA keeps
the last window step's ±denormal bits in the outputs w < W - 1 of the leading channels LLVM vectorises (a
compare and a blend of interleaved vectors), and returns every other ±denormal result as ±0 (x86 max under
DAZ): elemental ``_pool_last_step_kept`` (fuzz seed 183001446). Expectations from TF's XLA on this host."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.codegen.conv_exact import avx2_host

pytestmark = pytest.mark.skipif(not avx2_host(), reason="TF's max pool vectorisation measured on an AVX2 host only")


def _alternating(shape, dtype, first_denormal: bool) -> np.ndarray:
    """-max and -denormal alternating along W: every window's last step decides the result."""
    tiny, big = np.finfo(dtype).tiny, np.finfo(dtype).max
    x = np.empty(shape, dtype)
    x[:, :, 0::2, :], x[:, :, 1::2, :] = (-tiny / 4, -big) if first_denormal else (-big, -tiny / 4)
    return x


def _assert_bits(fn, x) -> None:
    want = tf.function(fn, jit_compile=True)(x).numpy()
    got = txc.function(fn, jit_compile=True)(x).numpy()
    assert want.tobytes() == got.tobytes(), f"TF's XLA {want.ravel().tolist()} ours {got.ravel().tolist()}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("w", [2, 3, 4, 5, 7])
@pytest.mark.parametrize("c", [1, 2, 3, 4, 5, 6, 7, 8, 9])
def test_max_pool_window_of_two_along_w(dtype, w, c):
    for first in (False, True):
        x = _alternating((2, 1, w, c), dtype, first)
        _assert_bits(lambda v: tf.nn.max_pool2d(v, [1, 2], 1, "SAME"), x)


@pytest.mark.parametrize("ksize,h,padding", [((3, 2), 1, "SAME"), ((2, 2), 1, "SAME"), ((1, 2), 2, "SAME"),
                                             ((2, 2), 2, "SAME"), ((3, 2), 3, "SAME"), ((1, 3), 1, "SAME"),
                                             ((1, 2), 2, "VALID"), ((2, 2), 2, "VALID"), ((3, 2), 3, "VALID")])
def test_max_pool_other_windows(ksize, h, padding):
    """An H window of one in-bounds position keeps as a window of 1 along H does; more positions along H, or
    VALID padding, flush every output."""
    rng = np.random.default_rng(sum(ksize) + h)
    tiny = np.finfo(np.float32).tiny
    for _ in range(3):
        x = rng.choice([-tiny / 4, tiny / 2, -3.4e38, 0.0, -0.0], size=(2, h, 3, 4)).astype(np.float32)
        _assert_bits(lambda v: tf.nn.max_pool2d(v, list(ksize), 1, padding), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("h,stride", [(4, 2), (5, 2), (7, 3), (11, 2), (16, 2), (19, 3)])
def test_max_pool_of_one_window_position_over_images(dtype, n, h, stride):
    """[N, H, 1, 1] with one in-bounds window position (1 along H, stride ≥ 2; 1 or 2 along W = 1): TF's XLA
    vectorises across N = 2 (f32: and N = 4 over 3 or more output rows) and keeps the leading output rows'
    ±denormals (elemental ``_pool_one_position_kept_rows``; fuzz seed 195001490)."""
    rng = np.random.default_rng(n * 100 + h)
    tiny = np.finfo(dtype).tiny
    x = rng.choice([tiny / 2, -tiny / 4, 0.0, -np.finfo(dtype).max], size=(n, h, 1, 1)).astype(dtype)
    for kw, padding in ((1, "SAME"), (2, "SAME"), (1, "VALID")):
        _assert_bits(lambda v: tf.nn.max_pool2d(v, [1, kw], [stride, 1], padding), x)
    _assert_bits(lambda v: tf.nn.max_pool2d(v, [1, 2], stride, "SAME"), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape,strides", [((1, 1, 3, 5), 2), ((2, 1, 2, 2), 2), ((2, 3, 3, 3), 2),
                                           ((1, 5, 3, 2), 2), ((2, 3, 5, 1), 2), ((1, 2, 7, 7), (1, 2)),
                                           ((2, 3, 7, 3), (1, 2)), ((2, 4, 1, 5), (1, 3)), ((1, 3, 1, 6), (2, 1)),
                                           ((1, 1, 9, 4), 2), ((2, 3, 4, 2), (2, 1)), ((2, 5, 5, 3), 2)])
def test_max_pool_one_by_one_window_with_strides(dtype, shape, strides):
    """A 1×1 window with a stride over H or W: TF's XLA vectorises the second-innermost output loop of 2 trips
    (or 4, innermost ≥ 3) across the innermost's interleave groups and keeps their ±denormals; the rest and the
    other shapes flush (elemental ``_pool_strided_point_kept``; fuzz seeds 221000928, 221000953, 222001043)."""
    tiny = np.finfo(dtype).tiny
    x = np.full(shape, tiny / 2, dtype)
    x.reshape(-1)[1::3] *= -1
    x.reshape(-1)[2::7] = -np.finfo(dtype).max
    for padding in ("SAME", "VALID"):
        _assert_bits(lambda v: tf.nn.max_pool2d(v, [1, 1], strides, padding), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape,ksize,strides", [((3, 4, 1, 4), (1, 2), 1), ((2, 1, 4, 6), (3, 1), 1),
                                                 ((2, 1, 3, 5), (2, 1), 1), ((3, 5, 1, 2), (1, 3), 1),
                                                 ((2, 1, 1, 7), (2, 2), 1), ((3, 2, 3, 3), (1, 1), (3, 3)),
                                                 ((3, 5, 4, 4), (1, 1), (2, 3)), ((2, 5, 7, 6), (1, 1), (3, 1))])
def test_max_pool_one_static_position(dtype, shape, ksize, strides):
    """A window of one static position (2 or 3 along a dimension of 1, SAME padding) keeps its reduce-window
    at stride 1 too, vectorised as a 1×1 strided one is; and strides 3 and N of 3 (``_pool_strided_point_kept``)."""
    tiny = np.finfo(dtype).tiny
    x = np.full(shape, tiny / 2, dtype)
    x.reshape(-1)[1::3] *= -1
    _assert_bits(lambda v: tf.nn.max_pool2d(v, list(ksize), strides, "SAME"), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("stride,w", [(2, 3), (2, 5), (2, 7), (2, 9), (2, 11), (3, 4), (3, 7), (3, 10), (3, 13)])
@pytest.mark.parametrize("c", [2, 3, 8, 9])
def test_max_pool_window_of_two_with_a_stride(dtype, stride, w, c):
    """Window 2 along W with SAME padding (0, 1) and stride 2 or 3: as at stride 1, the outputs of two in-bounds
    positions keep the peeled last step's bits in the leading channels when there are 2 of them (f32: or 4
    with C ≥ 3), every other output flushes (``_pool_last_step_kept``; fuzz seed 234001375)."""
    tiny, big = np.finfo(dtype).tiny, np.finfo(dtype).max
    x = np.full((2, 1, w, c), -big, dtype)
    x[:, :, 1::stride, :] = -tiny / 4
    _assert_bits(lambda v: tf.nn.max_pool2d(v, [1, 2], [1, stride], "SAME"), x)
    _assert_bits(lambda v: tf.nn.max_pool2d(v[:1, :1], [2, 2], stride, "SAME"), x)   # H of 1: its pad step is out
