"""A reduce-window's init is not folded into its first step (XLA:CPU's kernel reads the init from a buffer),
and its float sums run in XLA:CPU's vector lanes over the window's rows.

``tf.math.cumprod`` is a reduce-window of ``multiply`` with init 1 over a padded window. In TF's XLA the
first step ``1 * x`` runs, so a denormal ``x`` flushes to 0 under DAZ; with the init as an LLVM constant,
LLVM folds ``1 * x`` to ``x`` and the denormal survived wherever the window held one real element (fuzz
seed 186000584). Expectations: TF's XLA on this machine, bit for bit."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster
from tfxla_cluster.codegen.row_lanes import PER_ELEMENT_TARGETS, host_target

DENORMALS = {np.float32: 1e-40, np.float64: 5.562684646268003e-309, tf.bfloat16.as_numpy_dtype: 5.9e-39,
             np.float16: 3e-6}


@pytest.mark.parametrize("dtype", list(DENORMALS), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", [tf.math.cumprod, tf.math.cumsum], ids=lambda f: f.__name__)
def test_scan_of_denormals_equals_tf(dtype, op) -> None:
    for n in (1, 2, 3):
        x = np.full([n], DENORMALS[dtype], np.float64).astype(dtype)
        x[-1] = -x[-1]
        for reverse in (False, True):
            for exclusive in (False, True):
                def fn(v):
                    return op(v, axis=0, exclusive=exclusive, reverse=reverse)
                want = tf.function(fn, jit_compile=True)(x).numpy()
                got = tfxla_cluster.function(fn, jit_compile=True)(x).numpy()
                assert got.tobytes() == want.tobytes(), (n, reverse, exclusive, got, want)


def test_pools_of_denormals_equal_tf() -> None:
    x = np.array([[1e-40, -1e-40], [3.0, 1e-40]], np.float32)[None, :, :, None]
    for pool in (tf.nn.max_pool2d, tf.nn.avg_pool2d):
        for k in (1, 2):
            def fn(v):
                return pool(v, k, 1, "VALID")
            want = tf.function(fn, jit_compile=True)(x).numpy()
            got = tfxla_cluster.function(fn, jit_compile=True)(x).numpy()
            assert got.tobytes() == want.tobytes(), (pool.__name__, k, got, want)


# XLA:CPU's reduce-window sums a [R, C] window in ``row_lanes`` (per element) vector lanes over its rows
# (``elemental._window_lanes``); measured on AVX2 only, in window order elsewhere.
on_per_element_target = pytest.mark.skipif(host_target() not in PER_ELEMENT_TARGETS,
                                           reason="window lanes measured on AVX2 hosts only")


@on_per_element_target
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_avg_pool_lane_order_equals_tf(dtype) -> None:
    rng = np.random.default_rng(7)
    for (kh, kw), channels, stride in itertools.product([(2, 2), (4, 3), (3, 2), (8, 2), (2, 8), (1, 4)], (1, 16),
                                                        (1, 2)):
        h = max(kh, kw) + 3
        # magnitudes 2^-20..2^20: every reassociation of a window's sum rounds differently
        x = (rng.standard_normal((2, h, h, channels)) * 2.0 ** rng.integers(-20, 20, (2, h, h, channels))).astype(dtype)

        def fn(v):
            return tf.nn.avg_pool2d(v, (kh, kw), stride, "VALID")
        want = tf.function(fn, jit_compile=True)(x).numpy()
        got = tfxla_cluster.function(fn, jit_compile=True)(x).numpy()
        assert got.tobytes() == want.tobytes(), ((kh, kw), channels, stride, int((got != want).sum()))


def test_f64_avg_pool_overflows_in_lanes_as_tf() -> None:
    big = np.finfo(np.float64).max
    x = np.array([0, 0, 0, 0, 0, big, 0, 0, -big, 0, 0, -big], np.float64).reshape(1, 2, 2, 3)

    def fn(v):
        return tf.nn.avg_pool2d(v, 2, 2, "VALID")
    want = tf.function(fn, jit_compile=True)(x).numpy()
    got = tfxla_cluster.function(fn, jit_compile=True)(x).numpy()
    assert got.tobytes() == want.tobytes(), (got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_same_avg_pool_divides_by_run_time_counts(dtype) -> None:
    """tf2xla counts a SAME avg_pool's elements over pad(ones); padded in one spatial dim only, XLA's simplifier
    sinks the pad into broadcast(pad(ones)), which constant folding leaves alone, so the sums are divided by the
    counts at run time (not multiplied by constant reciprocals: 1/3 rounds)."""
    rng = np.random.default_rng(3)
    for (kh, kw), stride, channels in itertools.product([(1, 3), (3, 1), (1, 5), (5, 2)], (1, 2), (1, 3)):
        x = (rng.standard_normal((2, 6, 6, channels)) * 2.0 ** rng.integers(-20, 20, (2, 6, 6, channels))).astype(dtype)

        def fn(v):
            return tf.nn.avg_pool2d(v, (kh, kw), stride, "SAME")
        want = tf.function(fn, jit_compile=True)(x).numpy()
        got = tfxla_cluster.function(fn, jit_compile=True)(x).numpy()
        assert got.tobytes() == want.tobytes(), ((kh, kw), stride, channels, int((got != want).sum()))


@on_per_element_target
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_same_avg_pool_padded_in_one_dim_lane_order_equals_tf(dtype) -> None:
    """A window padded high in one dim only: its block of leading offsets in bounds for every output sums in
    ``row_lanes`` lanes (in order where they give 0), then the other positions row-major where in bounds."""
    rng = np.random.default_rng(11)
    cases = [((2, 3), 2, (6, 6)), ((3, 2), 2, (6, 6)), ((2, 2), 2, (6, 3)), ((2, 4), 3, (2, 6)),
             ((3, 3), 3, (5, 3)), ((2, 3), 3, (3, 5)), ((4, 3), 2, (8, 7)), ((3, 2), 3, (5, 6))]
    for (kh, kw), stride, (h, w) in cases:
        for channels in (1, 3):
            x = (rng.standard_normal((2, h, w, channels)) * 2.0 ** rng.integers(-20, 20, (2, h, w, channels))
                 ).astype(dtype)

            def fn(v):
                return tf.nn.avg_pool2d(v, (kh, kw), stride, "SAME")
            want = tf.function(fn, jit_compile=True)(x).numpy()
            got = tfxla_cluster.function(fn, jit_compile=True)(x).numpy()
            assert got.tobytes() == want.tobytes(), ((kh, kw), stride, (h, w), channels, int((got != want).sum()))
