"""XLA's simplifier treats abs, exp, iota, A*A, a power of a non-negative base and min/max/select of
non-negatives as non-negative (IsNonNegative): abs of one is dropped (HandleAbs), its compare with 0 is
folded, NaN included, and its pow(A, 0.5) is sqrt(A); pow(exp(A), B) is exp(A*B); sqrt(A*A) is abs(A). Bit-compared with TF 2.21's XLA: asinh(exp(x)) keeps log(abs(exp(x))) -> x in its
large-|x| branch, so an overflowing exp gives x + log 2, not inf (fuzz seed 138001017)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc

X = [np.nan, -np.nan, 1.0, -2.0, np.inf, -np.inf, 0.0, -0.0, 88.0, 89.0, 215.49312, -215.49312, 750.0]
Y = [2.0, 0.5, np.nan, 3.0, -1.0, 0.0, -0.0, 2.0, 1.5, -0.5, np.nan, 0.25, 1.0]

CASES = {
    "asinh_exp": lambda a, b: tf.math.asinh(tf.exp(a)),
    "acosh_exp": lambda a, b: tf.math.acosh(tf.exp(a)),
    "log_abs_exp": lambda a, b: tf.math.log(tf.abs(tf.exp(a))),
    "log_abs_min": lambda a, b: tf.math.log(tf.abs(tf.minimum(tf.exp(a), tf.exp(b)))),
    "exp_ge_0": lambda a, b: (tf.exp(a) >= 0, 0.0 <= tf.exp(a), tf.exp(a) < 0),
    "min_ge_0": lambda a, b: (tf.minimum(tf.abs(a), tf.exp(b)) >= 0, tf.minimum(tf.abs(a), b) >= 0),
    "pow_ge_0": lambda a, b: (tf.pow(tf.abs(a), b) >= 0, tf.pow(a, b) >= 0),
    "max_zero_ge_0": lambda a, b: (tf.maximum(a, -0.0) >= 0, tf.maximum(a, 0.0) >= 0),
    "sqrt_ge_0": lambda a, b: (tf.sqrt(tf.abs(a)) >= 0, tf.math.rsqrt(tf.abs(a)) >= 0),
    "select_ge_0": lambda a, b: tf.where(a > b, tf.exp(a), tf.abs(b)) >= 0,
    "pow_exp": lambda a, b: (tf.pow(tf.exp(a), b), tf.pow(tf.exp(a), 0.01), tf.abs(tf.pow(tf.exp(a), b))),
    "pow_half": lambda a, b: (tf.pow(tf.abs(a), 0.5), tf.pow(tf.exp(b), 0.5), tf.pow(a, 0.5)),
    # HandleSqrt: sqrt(A*A) is abs(A), so the square cannot overflow (a*1e20) or underflow (b*1e-30)
    "sqrt_square": lambda a, b: (tf.sqrt(a * a), tf.sqrt((a * 1e20) * (a * 1e20)), tf.sqrt((b * 1e-30) * (b * 1e-30)),
                                 tf.sqrt(a * b)),
}


def _same(want: np.ndarray, got: np.ndarray) -> bool:
    """Bits equal, a NaN's sign and payload aside (x86 picks an operand's NaN)."""
    if want.dtype == bool:
        return bool((want == got).all())
    w, g = want.astype(np.float64), got.astype(np.float64)
    return bool((np.isnan(w) == np.isnan(g)).all() and
                (np.where(np.isnan(w), 0, w).view(np.uint64) == np.where(np.isnan(g), 0, g).view(np.uint64)).all())


@pytest.mark.parametrize("dtype", [np.float32, np.float16, tf.bfloat16.as_numpy_dtype, np.float64],
                         ids=["f32", "f16", "bf16", "f64"])
@pytest.mark.parametrize("name", list(CASES))
def test_non_negative_folds_like_xla(name, dtype):
    fn = tf.autograph.experimental.do_not_convert(CASES[name])
    scale = 0.1 if dtype == np.float16 else 1.0  # f16's exp overflows near 11
    a, b = np.array(X) * scale, np.array(Y)
    args = (tf.constant(a.astype(dtype)), tf.constant(b.astype(dtype)))
    want = tf.nest.flatten(tf.function(fn, jit_compile=True)(*args))
    got = tf.nest.flatten(txc.function(fn, jit_compile=True)(*args))
    for k, (w, g) in enumerate(zip(want, got)):
        assert _same(w.numpy(), g.numpy()), f"output {k}: ours {g.numpy()}, TF's XLA {w.numpy()}"
