"""bf16 max/min reductions bit for bit against TF's XLA, where ±denormals survive in the output lanes LLVM
vectorises and flush (x86 max/min under DAZ) in the scalar ones (``reductions.bf16_minmax_reduces``): every
row length 1..40 of [2, W] and [3, W] over rows, [1, 2, W, 1] (a VALID max_pool whose window covers the image
becomes that reduce: fuzz seed 72000459), rows of [W, 2], nested output loops, long reduced rows, and f16/f32
(never kept: no f32 denormal there, or no rounding through bf16). Each case is one jit-compiled function
with many outputs, so the whole grid costs a few compiles."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tests.codegen.cg_helpers import avx512_measured

DEN = 5.877471754111438e-39   # a bf16 denormal
VALUES = [0.0, -0.0, DEN, -DEN, 1.0, -1.0, -2.28125, np.inf, -np.inf, np.nan]


def _bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32 if a.dtype.itemsize == 4 else np.uint64)


def _inputs(shapes, axes, dtype, seed: int) -> list[np.ndarray]:
    """Per shape: the denormal in the last reduced position behind normals (kept or flushed by lane), then
    random special values."""
    rng = np.random.default_rng(seed)
    out = []
    for shape, axis in zip(shapes, axes):
        x = np.full(shape, -2.28125)
        idx = [slice(None)] * len(shape)
        idx[axis] = -1
        x[tuple(idx)] = -DEN
        out.append(x.astype(dtype))
        out.append(rng.choice(VALUES, size=shape).astype(dtype))
    return out


def _assert_grid(shapes, axes, dtype=ml_dtypes.bfloat16, op=tf.reduce_max, seed=0) -> None:
    xs = _inputs(shapes, axes, dtype, seed)
    ax = [a for a in axes for _ in range(2)]

    def fn(*args):
        return [op(a, axis=k) for a, k in zip(args, ax)]
    want = tf.function(fn, jit_compile=True)(*xs)
    got = txc.function(fn, jit_compile=True)(*xs)
    bad = [(x.shape, k, w.numpy().astype(np.float64).ravel().tolist(), g.numpy().astype(np.float64).ravel().tolist())
           for x, k, w, g in zip(xs, ax, want, got) if _bits(w.numpy()).tobytes() != _bits(g.numpy()).tobytes()]
    assert not bad, f"{len(bad)} differ from TF's XLA, first: {bad[0]}"


@pytest.mark.parametrize("rows,op", [(2, tf.reduce_max), (3, tf.reduce_min)], ids=["max-2", "min-3"])
def test_rows_every_width(rows, op):
    _assert_grid([(rows, w) for w in range(1, 41)], [0] * 40, op=op, seed=rows)


@avx512_measured
def test_pool_layout_and_row_reductions():
    shapes = [(1, 2, w, 1) for w in range(1, 41)] + [(w, 2) for w in (1, 2, 3, 8, 9, 16, 17, 20, 36)]
    _assert_grid(shapes, [1] * len(shapes))


def test_nested_output_loops_and_long_rows():
    shapes = [(2, 3, n) for n in (2, 3, 4, 8, 12, 16, 17, 20, 28, 36, 37)] + \
             [(2, n, 3) for n in (4, 8)] + [(r, 20) for r in (4, 9, 16, 22, 23, 33)] + [(2, 60), (2, 68), (2, 100)]
    _assert_grid(shapes, [0] * len(shapes))


def test_reduce_over_two_dims_and_to_one_element():
    xs = _inputs([(2, 3, 4), (2, 36)], [0, 0], ml_dtypes.bfloat16, 5)

    def fn(a, b, c, d):
        return [tf.reduce_max(a, axis=[0, 2]), tf.reduce_max(b, axis=[0, 2]), tf.reduce_max(c), tf.reduce_min(d)]
    want = tf.function(fn, jit_compile=True)(*xs)
    got = txc.function(fn, jit_compile=True)(*xs)
    for w, g in zip(want, got):
        assert _bits(w.numpy()).tobytes() == _bits(g.numpy()).tobytes(), (w, g)


@pytest.mark.parametrize("dtype", [np.float16, np.float32], ids=["f16", "f32"])
def test_other_float_types_unchanged(dtype):
    _assert_grid([(2, w) for w in (2, 4, 8, 9, 16, 20, 36)], [0] * 7, dtype=dtype)


@pytest.mark.parametrize("ksize", [(2, 1), (3, 1), (2, 4), (1, 4)])
def test_max_pool_covering_the_image(ksize):
    """A VALID max_pool whose window covers whole dimensions is a reduce in TF's XLA (algsimp's
    reduce_window_to_reduce), with that reduce's lanes."""
    rng = np.random.default_rng(sum(ksize))
    xs = [rng.choice(VALUES, size=(1, ksize[0], 4, c)).astype(ml_dtypes.bfloat16) for c in (1, 2, 4)]
    xs += [np.array([-2.28125, 0, -DEN, 0], ml_dtypes.bfloat16).reshape(1, 2, 2, 1)]

    def fn(*args):
        return [tf.nn.max_pool2d(a, ksize=[min(ksize[0], a.shape[1]), min(ksize[1], a.shape[2])], strides=1, padding="VALID")
                for a in args]
    want = tf.function(fn, jit_compile=True)(*xs)
    got = txc.function(fn, jit_compile=True)(*xs)
    for w, g in zip(want, got):
        assert _bits(w.numpy()).tobytes() == _bits(g.numpy()).tobytes(), (w, g)


def test_fused_producer():
    """A reduce of -|x| fused with its producer vectorises the same lanes in TF's XLA. (One input per shape:
    two equal fusions of it trip the codegen tests' kernel-reuse check, also on main.)"""
    xs = _inputs([(2, w) for w in (2, 3, 4, 8, 9, 16, 17, 20, 36)], [0] * 9, ml_dtypes.bfloat16, 9)[::2]

    def fn(*args):
        return [tf.reduce_max(-tf.abs(a), axis=0) for a in args]
    want = tf.function(fn, jit_compile=True)(*xs)
    got = txc.function(fn, jit_compile=True)(*xs)
    for w, g in zip(want, got):
        assert _bits(w.numpy()).tobytes() == _bits(g.numpy()).tobytes(), (w, g)


@avx512_measured
def test_nested_rows_of_two_next_to_the_reduced_dim():
    """A row of 2 inside output loops is vectorised when the reduced dim strides over that row only (a VALID
    max_pool whose window covers W: fuzz seed 296001142, found on AVX2 and replayed on every host by
    tests/e2e/test_fuzz.py), scalar when a kept dim lies between them (above). This grid measured on Zen 4."""
    shapes = [(2, r, 2) for r in (2, 3, 5)] + [(3, 4, 2), (2, 2, 3, 2), (2, 2, 3, 1)]
    _assert_grid(shapes, [len(s) - 2 for s in shapes])
