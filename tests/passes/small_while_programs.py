"""Small programs with a ``tf.while_loop`` for the SmallWhileLoopHoistingPass tests: name -> (function,
arguments). Sizes near the 1024-byte threshold sit where TF's optimised HLO puts them."""
from __future__ import annotations

import numpy as np
import tensorflow as tf


def _loop(body, n: int = 3):
    def fn(x):
        _, r = tf.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, body(x)), (tf.constant(0), x))
        return r
    return fn


def _cond_in_loop(x):
    def body(i, x):
        return i + 1, tf.cond(tf.reduce_any(x > 0), lambda: tf.nn.relu(x), lambda: -x)
    return tf.while_loop(lambda i, x: i < 2, body, (tf.constant(0), x))[1]


def _nested(x):
    inner = _loop(tf.nn.relu, 2)
    return tf.while_loop(lambda i, x: i < 2, lambda i, x: (i + 1, inner(x) + 1.0), (tf.constant(0), x))[1]


def _data_trip(x):   # a trip count the data decides
    n = tf.reduce_sum(tf.cast(x > 0, tf.int32))
    return tf.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x * 0.5), (tf.constant(0), x))[1]


def _z(shape, dtype=np.float32):
    return np.linspace(-1, 1, int(np.prod(shape))).astype(dtype).reshape(shape)


PROGRAMS = {
    "relu_f32_123": (_loop(tf.nn.relu), [_z([123])]),      # 8n + 37 bytes in TF's HLO: 1021 < 1024
    "relu_f32_124": (_loop(tf.nn.relu), [_z([124])]),      # 1029: not small
    "relu_f64_61": (_loop(tf.nn.relu), [_z([61], np.float64)]),
    "relu_f64_62": (_loop(tf.nn.relu), [_z([62], np.float64)]),
    "relu_f64_3x1": (_loop(tf.nn.relu), [_z([1, 3, 1], np.float64)]),
    "relu_f32_1000": (_loop(tf.nn.relu), [_z([1000])]),
    "sort_f32_4": (_loop(lambda x: tf.sort(x)), [_z([4])]),  # a sort: no small call
    "matmul_f32_2x2": (_loop(lambda x: tf.matmul(x, x)), [_z([2, 2])]),
    "reduce_f32_8": (_loop(lambda x: x - tf.reduce_max(x)), [_z([8])]),
    "cond_in_loop_f32_6": (_cond_in_loop, [_z([6])]),
    "cond_in_loop_f32_200": (_cond_in_loop, [_z([200])]),
    "nested_f32_5": (_nested, [_z([5])]),
    "data_trip_f32_4": (_data_trip, [_z([4])]),
}
