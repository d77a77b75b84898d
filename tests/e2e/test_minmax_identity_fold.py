"""A fused float ``maximum(x, -inf)``, ``minimum(x, +inf)`` or ``maximum(x, x)`` is ``x`` itself in TF's XLA
(MLIR's arith folder in XLA:CPU's loop fusion emitter), so a denormal keeps its bits where a max that stays
an x86 max under DAZ would flush it (``codegen/elemental._minmax_identity_operand``; fuzz seed 141000705);
so is ``minimum(maximum(x, y), x)`` and its dual (``_minmax_absorbed_operand``; fuzz seed 246001571).
Compared bit for bit with TF's XLA."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc

FNS = {
    "max_minus_inf": lambda x: tf.maximum(x, -np.inf),
    "minus_inf_max": lambda x: tf.maximum(tf.constant(-np.inf, x.dtype), x),
    "min_plus_inf_times_2": lambda x: tf.minimum(x, np.inf) * 2,
    "max_x_x": lambda x: tf.maximum(x, x),
    "clip_to_infinities": lambda x: tf.clip_by_value(x, -np.inf, np.inf),
    "max_pool_1x1": lambda x: tf.nn.max_pool2d(tf.reshape(x, (1, 1, -1, 1)), 1, 1, "SAME"),
    "max_plus_inf": lambda x: tf.maximum(x, np.inf),    # no fold: +inf wins
    "min_of_relu_and_x": lambda x: tf.minimum(tf.nn.relu(x), x),
    "max_of_min_and_x": lambda x: tf.maximum(tf.minimum(x, 3.0), x),
    "min_of_max_nan_and_x": lambda x: tf.minimum(tf.maximum(x, np.nan), x),
    "min_of_x_and_relu": lambda x: tf.minimum(x, tf.nn.relu(x)),   # no fold in this order
}
DENORMAL = {np.float32: 5.877471754111438e-39, np.float64: 1e-310}


def _bits(t: tf.Tensor) -> np.ndarray:
    return tf.bitcast(t, {2: tf.uint16, 4: tf.uint32, 8: tf.uint64}[t.dtype.size]).numpy()


@pytest.mark.parametrize("shape", [(8,), (150,), (3, 5)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("name", FNS)
def test_fused_minmax_identity_keeps_bits_as_tfs_xla(name, dtype, shape):
    d = DENORMAL[dtype]
    x = np.resize(np.array([-d, d, 0.0, -0.0, np.nan, 1.5, -np.inf, np.inf], dtype), shape).reshape(shape)
    fn = FNS[name]
    want = tf.function(fn, jit_compile=True)(x)
    got = txc.function(fn, jit_compile=True)(x)
    nan = np.isnan(want.numpy())
    np.testing.assert_array_equal(np.isnan(got.numpy()), nan)
    np.testing.assert_array_equal(_bits(got)[~nan], _bits(want)[~nan])
