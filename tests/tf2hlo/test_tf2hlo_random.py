"""Stateless random v2 ops. TF's XLA (``jit_compile=True``) is the reference here: TF's CPU kernels draw
different numbers for the same seed (see tfxla_cluster/tf2hlo/random.py), so eager values are only
checked for distribution properties. Uniform values are bit-exact with TF's XLA (same bits, same
conversion); normals go through erfinv, whose exp/log/sqrt XLA:CPU approximates: rtol 1e-5 (f32).
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import HAVE_JAX

from tfxla_cluster.hlo import parse_module
from tfxla_cluster.tf2hlo import lower_function
from tfxla_cluster.tf2hlo.random import key_counter_from_seed


def _lower_and_run(fn):
    lc = lower_function(tf.function(fn, autograph=False).get_concrete_function())
    text = lc.module.to_string()
    assert parse_module(text).to_string() == text
    got = lc.run()
    if HAVE_JAX:
        from tests.tf2hlo.tf2hlo_xla import xla_run

        for a, b in zip(xla_run(text), got):
            # XLA:CPU computes half-precision elementwise chains in f32 and rounds once: 1-2 ulps.
            if b.dtype.kind in "iu":
                np.testing.assert_array_equal(a, b)
                continue
            eps = 2 ** -7 if b.dtype == tf.bfloat16.as_numpy_dtype else float(np.finfo(b.dtype).eps)
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=max(1e-5, 2 * eps),
                                       atol=max(1e-6, 4 * eps))  # cancellation in u·(hi-lo)+lo
    return got


@pytest.mark.parametrize("seed", [(1, 2), (-7, 123456789), (0, 0)])
def test_key_counter_matches_tf(seed):
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=tf.constant(seed, tf.int64))
    ours = key_counter_from_seed(*seed)
    np.testing.assert_array_equal(ours[0], key.numpy())
    np.testing.assert_array_equal(ours[1], counter.numpy())


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.float16, tf.bfloat16])
def test_uniform_and_normal_match_tf_xla(dtype):
    def fn():
        return (tf.random.stateless_uniform([3, 5], seed=[1, 2], dtype=dtype),
                tf.random.stateless_uniform([7], seed=[5, 6], minval=-2.0, maxval=3.0, dtype=dtype),
                tf.random.stateless_normal([4, 4], seed=[3, 4], dtype=dtype),
                tf.random.stateless_uniform([0, 2], seed=[1, 2], dtype=dtype))
    got = _lower_and_run(fn)
    want = [w.numpy() for w in tf.function(fn, jit_compile=True)()]
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype
        eps = float(np.finfo(g.dtype).eps) if g.dtype != tf.bfloat16.as_numpy_dtype else 2 ** -7
        # 0: bit-exact; 1: scaled by TF ops, which TF's XLA fuses into one rounding (1 ulp);
        # 2: normals through log/sqrt/sin or erfinv, approximated differently by XLA:CPU.
        rtol = [0.0, eps, {tf.float32: 1e-5, tf.float64: 1e-12}.get(dtype, 1e-2), 0.0][i]
        atol = 4 * eps if i == 1 else (1e-6 if rtol else 0.0)  # output 1: cancellation in u·5 - 2
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                   err_msg=f"output {i}")


def test_threefry_algorithm_and_distribution():
    def fn():
        key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=[4, 2])
        return (tf.raw_ops.StatelessRandomUniformV2(shape=[4096], key=key, counter=counter, alg=2),
                tf.raw_ops.StatelessRandomNormalV2(shape=[4096], key=key, counter=counter, alg=1))
    u, n = _lower_and_run(fn)
    want = [w.numpy() for w in tf.function(fn, jit_compile=True)()]
    np.testing.assert_array_equal(u, want[0])
    assert 0.0 <= u.min() and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.02
    assert abs(n.mean()) < 0.05 and abs(n.std() - 1.0) < 0.05


@pytest.mark.parametrize("dtype", [tf.int32, tf.int64])
def test_uniform_int_matches_tf_xla(dtype):
    def fn():
        return (tf.random.stateless_uniform([3, 4], seed=[7, 8], minval=-5, maxval=9, dtype=dtype),
                tf.random.stateless_uniform([6], seed=[1, 1], minval=None, maxval=None, dtype=dtype))
    got = _lower_and_run(fn)
    want = [w.numpy() for w in tf.function(fn, jit_compile=True)()]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_truncated_normal_distribution():
    def fn():
        return tf.random.stateless_truncated_normal([4096], seed=[2, 3])
    (got,) = _lower_and_run(fn)
    want = tf.function(fn, jit_compile=True)().numpy()
    assert got.min() >= -2.0 and got.max() <= 2.0 and abs(got.mean()) < 0.05
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)  # erfinv: Giles' polynomial vs XLA's


def test_key_counter_from_run_time_seed_equals_tf() -> None:
    """A seed that is a function input (not a constant) is scrambled inside the module; TF eager's
    kernel computes the same key and counter (int32 and int64 seeds, negative words included)."""
    import numpy as np

    from tests.tf2hlo.tf2hlo_harness import Case, run_batch

    seeds = [np.array([7, 11], np.int32), np.array([-1, 2**31 - 1], np.int32),
             np.array([-(2**40) - 3, 2**62 + 5], np.int64), np.array([0, 0], np.int64)]
    run_batch([Case(f"StatelessRandomGetKeyCounter {s.dtype} {s.tolist()}",
                    lambda seed: tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed), [s]) for s in seeds],
              xla="all")
