"""Denormal scalar constants in fused code, bit for bit against TF's XLA: XLA:CPU's tiled fusion emitter (a
fusion of elementwise ops on one-element values, no broadcast) flushes an f32 or bf16 constant's ±denormal to
±0 (its value passes through a double under DAZ); its loop emitter and f64 constants keep the bits."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc


def _assert_bits(fn, *args) -> None:
    want = tf.function(fn, jit_compile=True)(*args).numpy()
    got = txc.function(fn, jit_compile=True)(*args).numpy()
    assert want.tobytes() == got.tobytes(), f"TF's XLA {want.astype(np.float64).tolist()} ours {got.astype(np.float64).tolist()}"


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float64], ids=["f32", "bf16", "f64"])
@pytest.mark.parametrize("shape", [(), (1,), (1, 1), (2,), (3, 2)])
@pytest.mark.parametrize("sign", [1, -1])
def test_denormal_constant_by_emitter(dtype, shape, sign):
    tiny = np.finfo(np.float64 if dtype == np.float64 else np.float32).tiny
    c = np.array(sign * tiny / 4, dtype)
    a = np.zeros(shape, dtype)
    _assert_bits(lambda v: tf.where(v > 0, v, tf.constant(c)), a)
    _assert_bits(lambda v: tf.math.floormod(tf.constant(np.full(shape, c)), v + 1.5), a)  # seed 89000357
