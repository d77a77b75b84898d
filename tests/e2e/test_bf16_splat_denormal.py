"""A bf16 scalar broadcast that is its kernel's whole loop (XLA's ``wrapped_broadcast``; also a pad of an empty
operand) against TF's XLA, bit for bit: where its stores stay scalar in a loop nest, TF's x86 code narrows the
value from an f32 register with VCVTNEPS2BF16 and a ±denormal is ±0; vector stores keep its bits
(``elemental._bf16_splat_flushed``; fuzz seed 138001308)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc

BF16 = tf.bfloat16.as_numpy_dtype
SHAPES = [(7,), (100,), (2, 2), (2, 5), (3, 2), (3, 5), (4, 8), (4, 9), (8, 3), (10, 10), (16, 8), (6, 3, 2),
          (3, 2, 4), (2, 3, 4, 5), (3, 1), (3, 2, 1), (40, 12)]


def _bits(x) -> np.ndarray:
    return np.asarray(x).reshape(-1).view(np.uint16)


@pytest.mark.parametrize("value", [-5.877471754111438e-39, 5.877471754111438e-39, -1.5], ids=["-den", "den", "normal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_bf16_scalar_broadcast(shape, value):
    v = np.array(value, BF16)
    const = tf.autograph.experimental.do_not_convert(lambda a: tf.broadcast_to(tf.constant(v), shape))
    arg = tf.autograph.experimental.do_not_convert(lambda a: tf.broadcast_to(a, shape))
    for fn in (const, arg):
        want = tf.function(fn, jit_compile=True)(tf.constant(v)).numpy()
        got = txc.function(fn, jit_compile=True)(tf.constant(v)).numpy()
        assert (_bits(want) == _bits(got)).all(), f"ours {_bits(got)[:8]}, TF's XLA {_bits(want)[:8]}"


@pytest.mark.parametrize("shape,paddings", [((5, 2, 0), [[0, 1], [0, 1], [1, 1]]), ((2, 0), [[0, 0], [1, 1]]),
                                            ((0,), [[1, 1]])], ids=["6x3x2", "2x2", "2"])
def test_bf16_pad_of_empty_operand(shape, paddings):
    fn = tf.autograph.experimental.do_not_convert(
        lambda: tf.pad(tf.constant(np.zeros(shape, BF16)), paddings, constant_values=-5.877471754111438e-39))
    want = tf.function(fn, jit_compile=True)().numpy()
    got = txc.function(fn, jit_compile=True)().numpy()
    assert (_bits(want) == _bits(got)).all(), f"ours {_bits(got)[:8]}, TF's XLA {_bits(want)[:8]}"
