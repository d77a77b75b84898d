"""exp of a select between two splat constants, one a NaN: TF's XLA gives exp of the other constant in every
element (LLVM folds ``llvm.exp`` into the select's arms and ``exp(NaN)`` to poison) for f32 and f16; bf16,
an infinite other arm and non-splat arms keep the NaN. Expectations from TF's XLA, computed here."""
import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc

X = tf.constant([0.5, -1.0, 3.0, 2.0, -0.25], tf.float32)


def _fill(dt, v):
    return tf.fill([5], tf.constant(v, dt))


CASES = {
    "nan_then_c": lambda dt: lambda x: tf.exp(tf.where(x > 0, _fill(dt, np.nan), _fill(dt, 2.5))),
    "c_then_nan": lambda dt: lambda x: tf.exp(tf.where(x > 0, _fill(dt, -1.0), _fill(dt, np.nan))),
    "overflow": lambda dt: lambda x: tf.exp(tf.where(x > 0, _fill(dt, np.nan), _fill(dt, 100.0))),
    "denormal_result": lambda dt: lambda x: tf.exp(tf.where(x > 0, _fill(dt, np.nan), _fill(dt, -90.0))),
    "inf_arm": lambda dt: lambda x: tf.exp(tf.where(x > 0, _fill(dt, np.inf), _fill(dt, np.nan))),
    "non_splat": lambda dt: lambda x: tf.exp(tf.where(x > 0, tf.constant([np.nan, 1, 2, 3, 4], dt),
                                                      tf.constant([4, 5, 6, 7, 8], dt))),
    "one_hot": lambda dt: lambda x: tf.exp(tf.one_hot(tf.cast(x > 0, tf.int32), 2, on_value=tf.constant(np.nan, dt),
                                                      off_value=tf.constant(2.5, dt))),
}


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("case", sorted(CASES))
def test_exp_of_nan_select_matches_tf_xla(case, dtype):
    f = CASES[case](dtype)
    want = tf.function(f, jit_compile=True)(X).numpy()
    got = txc.function(f, jit_compile=True)(X).numpy()
    assert got.tobytes() == want.tobytes(), (got, want)
