"""``tf.where(p, k, k)`` against TF's XLA, bit for bit: tf2xla reads a constant twice as two constants, CSE
merges them after XLA's simplifier ran, and TF 2.21 runs no simplifier between CSE and fusion, so the select is
fused as it is; a bf16 denormal constant inside that fusion is 0 (fuzz seed 115001251). An argument read twice
is one instruction from the start, which XLA's simplifier folds to a copy."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc


def _bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).view(np.uint16 if np.asarray(x).itemsize == 2 else np.uint32)


@pytest.mark.parametrize("dtype,value", [(tf.bfloat16, 2.938735877055719e-39), (tf.bfloat16, -1.0),
                                         (tf.float32, 1e-40), (tf.float16, 3e-6)],
                         ids=["bf16_denormal", "bf16_normal", "f32_denormal", "f16_denormal"])
@pytest.mark.parametrize("shape", [(), (3,)], ids=["scalar", "vector"])
def test_select_of_one_constant_twice(dtype, value, shape):
    k = np.full(shape, value, dtype.as_numpy_dtype)

    @tf.autograph.experimental.do_not_convert
    def fn(p):
        c = tf.constant(k)
        return tf.where(p, c, c)

    for p in (True, False):
        want = tf.function(fn, jit_compile=True)(tf.constant(p)).numpy()
        got = txc.function(fn, jit_compile=True)(tf.constant(p)).numpy()
        assert (_bits(want) == _bits(got)).all(), f"p={p}: ours {_bits(got)}, TF's XLA {_bits(want)}"


def test_select_of_one_argument_twice():
    fn = tf.autograph.experimental.do_not_convert(lambda p, x: tf.where(p, x, x))
    x = np.array([2.938735877055719e-39, -1.0, 0.5], tf.bfloat16.as_numpy_dtype)
    args = (tf.constant([True, False, True]), tf.constant(x))
    want = tf.function(fn, jit_compile=True)(*args).numpy()
    got = txc.function(fn, jit_compile=True)(*args).numpy()
    assert (_bits(want) == _bits(got)).all()
