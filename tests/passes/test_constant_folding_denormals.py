"""Constant folding computes as TF's compile thread does, with denormals flushed (FTZ/DAZ): a folded constant
must equal TF's XLA's for denormal operands and results, bit for bit (NaN positions, zero signs), and the
thread's MXCSR is restored afterwards."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster import mxcsr


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    nan = np.isnan(a.astype(np.float64))
    return a.dtype == b.dtype and bool(np.array_equal(nan, np.isnan(b.astype(np.float64)))) and \
        a[~nan].tobytes() == b[~nan].tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_folded_denormals_like_tf(dtype):
    tiny = np.finfo(dtype).tiny
    c = np.array([tiny / 4, -tiny / 2, tiny, 1.0, -0.0, 4.0], dtype)
    big = np.array([1e30 if dtype == np.float32 else 1e300] * 6, dtype)

    def f():
        x, y = tf.constant(c), tf.constant(big)
        return (tf.sqrt(x), tf.math.rsqrt(x), tf.math.log(x), x * 1.5, x / y, tf.math.reciprocal(x),
                tf.cast(x < 0, dtype), tf.maximum(x, 0.0), x * x)
    want = tf.function(f, jit_compile=True)()
    got = txc.function(f, jit_compile=True)()
    bad = [k for k, (w, g) in enumerate(zip(want, got)) if not _bits_equal(w.numpy(), g.numpy())]
    assert not bad, [(k, got[k].numpy(), want[k].numpy()) for k in bad]



@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_xla_folded_log_of_denormals_like_tf(dtype):
    """xlogy's log of a constant is folded by XLA's evaluator (not TF's kernels: an argument feeds the op).
    TF's binary binds f32 to glibc's logf (a negative denormal is NaN, a positive one finite) and f64 to the
    compat log wrapper (under DAZ every denormal compares equal to 0: -inf)."""
    tiny = np.finfo(dtype).tiny
    c = np.array([tiny / 4, -tiny / 2, 0.0, -0.0, 1.0, -1.0], dtype)

    def f(a):
        return tf.math.xlogy(a, tf.constant(c))
    a = np.ones([6], dtype)
    want = tf.function(f, jit_compile=True)(a).numpy()
    got = np.asarray(txc.function(f, jit_compile=True)(a))
    assert _bits_equal(want, got), (got, want)


@pytest.mark.parametrize("dtype", [np.float16, tf.bfloat16.as_numpy_dtype, np.float32, np.float64])
def test_denormal_constant_copied_bitwise(dtype):
    """A pad value is copied, not computed: TF's XLA keeps its denormal bits. Ours compiles on TF's kernel
    thread (DAZ set), where reading the Const's float_val or emitting the LLVM constant through a Python
    float would flush it."""
    d = np.array(np.finfo(np.float32 if dtype == tf.bfloat16.as_numpy_dtype else dtype).tiny, dtype) / 4
    d = np.asarray(d, dtype)

    def f(a):
        return tf.pad(a, [[1, 2]], constant_values=tf.constant(-d)), tf.where(a > 0, a, tf.constant(d))
    a = np.array([0, 1], dtype)
    want = [w.numpy() for w in tf.function(f, jit_compile=True)(a)]
    got = [np.asarray(g) for g in txc.function(f, jit_compile=True)(a)]
    assert all(_bits_equal(w, g) for w, g in zip(want, got)), (got, want)

def test_mxcsr_restored():
    before = mxcsr.get_mxcsr()
    if before is None:
        pytest.skip("no MXCSR on this CPU")
    with pytest.raises(ZeroDivisionError):
        with mxcsr.flushed_denormals():
            assert mxcsr.get_mxcsr() & mxcsr.MXCSR_FTZ_DAZ == mxcsr.MXCSR_FTZ_DAZ
            assert np.float32(1e-40) * np.float32(1) == 0  # numpy sees DAZ
            1 / 0
    assert mxcsr.get_mxcsr() == before
    assert np.float32(1e-40) * np.float32(1) != 0
