"""TensorList ops (tf.TensorArray in TF2) against TF eager: written in a while loop with the element
shape unknown at reserve (the list takes the shape of the body's first write) or known, read back
with unstack/read, stacked, and the length; lists outside loops too."""
from __future__ import annotations

import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import Case, run_batch, values


def _write_loop(x):
    ta = tf.TensorArray(tf.float32, size=4)

    def body(i, y, ta):
        y = tf.tanh(y) + 0.5
        return i + 1, y, ta.write(i, y)
    _, _, ta = tf.while_loop(lambda i, y, ta: i < 4, body, [tf.constant(0), x, ta])
    return ta.stack() * 2.0


def _read_write_loop(x):
    src = tf.TensorArray(tf.float32, size=3, element_shape=[2]).unstack(x)
    dst = tf.TensorArray(tf.float32, size=3, element_shape=[2])

    def body(i, acc, dst):
        acc = acc + src.read(i)
        return i + 1, acc, dst.write(2 - i, acc * tf.cast(i + 1, tf.float32))
    _, acc, dst = tf.while_loop(lambda i, *_: i < 3, body, [tf.constant(0), tf.zeros([2]), dst])
    return dst.stack(), acc, dst.size()


def _outside_loop(x):
    ta = tf.TensorArray(tf.int32, size=2)
    ta = ta.write(1, x).write(0, x * 3)
    return ta.stack(), ta.read(1)


def test_tensor_lists_equal_tf() -> None:
    run_batch([
        Case("TensorArray written in a while loop (unknown element shape)", _write_loop, [values("f32", (2, 3))]),
        Case("unstack/read + write in a while loop, size()", _read_write_loop, [values("f32", (3, 2))]),
        Case("TensorArray outside loops (int32)", _outside_loop, [values("i32", (3,))]),
    ], xla="all")
