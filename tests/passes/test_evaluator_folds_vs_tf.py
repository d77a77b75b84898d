"""Reduces and select-and-scatters that XLA folds with its HloEvaluator, bit for bit against TF's XLA.

Beside a while loop TF's graph folding gives up and XLA's constant folding runs the evaluator on the
constant; XLA-only ops (XlaReduce, XlaSelectAndScatter) reach it directly. The evaluator's float max/min
keep the left operand on a tie (0 against -0, or against a denormal under DAZ) and keep a denormal's bits;
a reduce's left operand is the accumulator, a select-and-scatter's the source. Its float add reduce sums
in double (chunks of 512) and rounds once; over a dimension longer than 32 XLA:CPU's TreeReductionRewriter
has made it a reduce-window first (windows of 32, padded half low, half high with the init, each window
summed in the element type), whose sums the reduce adds."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.compiler.tf2xla.python import xla

import tfxla_cluster as txc

_D32 = np.frombuffer(np.uint32(1).tobytes(), np.float32)[0]  # the smallest f32 denormal


def _bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32 if a.dtype.itemsize == 4 else np.uint64)


def _both(f):
    want = tf.function(f, jit_compile=True)()
    got = txc.function(f, jit_compile=True)()
    return [np.asarray(w) for w in want], [np.asarray(g) for g in got]


def _scalar_fn(fn, dtype):
    spec = tf.TensorSpec([], dtype)
    return tf.function(fn, autograph=False).get_concrete_function(spec, spec)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_min_reduce_beside_a_while_keeps_the_first_of_ties(dtype):
    d = dtype(_D32) if dtype == np.float32 else np.frombuffer(np.uint64(1).tobytes(), np.float64)[0]
    vals = [0.0, -0.0, d, -d, 1.0, np.nan]
    rows = np.array([list(p) + [p[-1]] for p in itertools.product(vals, repeat=2)], dtype)

    def f():
        c = tf.constant(rows)
        _, r = tf.while_loop(lambda i, x: i < 2, lambda i, x: (i + 1, tf.abs(x)), (tf.constant(0), c))
        return r, tf.reduce_max(c, axis=1), tf.reduce_min(c, axis=1), tf.reduce_max(c, axis=0)
    want, got = _both(f)
    for w, g in zip(want[1:], got[1:]):
        assert np.array_equal(_bits(w), _bits(g)), (w, g)


def test_select_and_scatter_max_min_keep_the_source_on_ties():
    """Both windows of each row [0, 5, 0] select the 5: the scatter combines ``scatter(source, current)``
    twice, over every init and pair of sources from ±0, ±denormal and 1."""
    vals = [0.0, -0.0, _D32, -_D32, 1.0]
    sources = np.array(list(itertools.product(vals, repeat=2)), np.float32)
    operand = np.tile(np.array([0.0, 5.0, 0.0], np.float32), (len(sources), 1))
    ge = _scalar_fn(lambda a, c: a >= c, tf.float32)

    def f():
        return [tf.stack([xla.select_and_scatter(tf.constant(operand), [1, 2], [1, 1], [[0, 0], [0, 0]],
                                                 tf.constant(sources), tf.constant(init, tf.float32),
                                                 select=ge, scatter=_scalar_fn(op, tf.float32))
                          for op in (tf.maximum, tf.minimum) for init in vals])]
    want, got = _both(f)
    assert np.array_equal(_bits(want[0]), _bits(got[0])), np.nonzero(_bits(want[0]) != _bits(got[0]))


@pytest.mark.parametrize("dtype, shape, dims, init", [
    (np.float32, (2, 32, 32), [1, 2], 0.0),   # two 512-element chunks
    (np.float64, (2, 32, 32), [1, 2], 0.0),
    (np.float32, (3, 20), [1], 1e8),
    (np.float16, (3, 30, 30), [1, 2], 100.0),
    (np.float32, (30, 4, 30), [0, 2], 3.0),
])
def test_add_reduce_folds_in_double(dtype, shape, dims, init):
    rng = np.random.default_rng(len(shape) * 7 + shape[-1])
    scale = 10.0 ** rng.integers(-3, 3 if dtype == np.float16 else 9, shape)
    x = (rng.standard_normal(shape) * scale).astype(dtype)
    add = _scalar_fn(lambda a, c: a + c, tf.as_dtype(dtype))
    want, got = _both(lambda: [xla.reduce(tf.constant(x), dtype(init), dims, add)])
    assert np.array_equal(_bits(want[0]), _bits(got[0])), (want[0], got[0])


@pytest.mark.parametrize("dtype, shape, dims, init", [
    (np.float32, (40,), [0], 0.0),          # padded 12 + 40 + 12
    (np.float32, (3, 257), [1], 0.0),
    (np.float32, (33, 5), [0], 3.0),        # the padding is the init
    (np.float64, (35, 34), [0, 1], 0.0),
    (np.float16, (2, 70), [1], 0.0),
    (np.float32, (5, 1100), [1], 0.0),      # 35 windows, then the reduce of 35 sums
])
def test_add_reduce_over_more_than_32_folds_tree_windows(dtype, shape, dims, init):
    rng = np.random.default_rng(shape[-1])
    x = (rng.standard_normal(shape) * np.exp(rng.standard_normal(shape) * 3)).astype(np.float32)
    x.reshape(-1)[::7] = 1e4 if dtype == np.float16 else 3e7   # where the rounding order shows
    x = x.astype(dtype)
    add = _scalar_fn(lambda a, c: a + c, tf.as_dtype(dtype))

    def f():
        c = tf.constant(x)
        _, r = tf.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, v), (tf.constant(0), c))
        return r, tf.reduce_sum(c, axis=dims), xla.reduce(c, dtype(init), dims, add)
    want, got = _both(f)
    for w, g in zip(want[1:], got[1:]):
        assert np.array_equal(_bits(w), _bits(g)), (w, g)
