"""``_FusedConv2D`` on int8 (the only dtype XLA_CPU_JIT registers it for): no TF Python API builds the node,
so the tests create it in a function graph with its attrs and compare our lowering with TF's own XLA
(``jit_compile=True``), bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.python.framework import ops

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.tf2hlo import lower_function

L = attr_value_pb2.AttrValue.ListValue


def _fused_conv(x, w, bias, side, conv_scale: float, side_scale: float, *, nchw: bool, fused_ops, padding="SAME",
                strides=(1, 1)):
    s = [1, 1, *strides] if nchw else [1, *strides, 1]
    attrs = {
        "T": attr_value_pb2.AttrValue(type=tf.qint8.as_datatype_enum),
        "TArgs": attr_value_pb2.AttrValue(list=L(type=[tf.float32.as_datatype_enum, tf.qint8.as_datatype_enum])),
        "num_args": attr_value_pb2.AttrValue(i=2), "num_host_args": attr_value_pb2.AttrValue(i=2),
        "strides": attr_value_pb2.AttrValue(list=L(i=s)), "padding": attr_value_pb2.AttrValue(s=padding.encode()),
        "data_format": attr_value_pb2.AttrValue(s=b"NCHW" if nchw else b"NHWC"),
        "filter_format": attr_value_pb2.AttrValue(s=b"HWIO"),
        "fused_ops": attr_value_pb2.AttrValue(list=L(s=[f.encode() for f in fused_ops])),
        "dilations": attr_value_pb2.AttrValue(list=L(i=[1, 1, 1, 1])),
    }
    inputs = [x, w, bias, side, tf.constant(conv_scale, tf.float32), tf.constant(side_scale, tf.float32)]
    return ops.get_default_graph().create_op("_FusedConv2D", inputs, [tf.qint8], attrs=attrs, name="fc").outputs[0]


def _q(a):
    return tf.bitcast(tf.constant(a), tf.qint8)


CASES = [  # (nchw, fused_ops, padding, strides, conv_scale, side_scale)
    (False, ["BiasAdd", "Relu"], "SAME", (1, 1), 0.02, 0.5),
    (False, ["BiasAdd"], "VALID", (2, 1), 0.013, 0.0),
    (True, ["BiasAdd", "Relu"], "SAME", (2, 2), 0.031, 1.25),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_fused_conv2d_int8_equals_tf_xla_bit_for_bit(case) -> None:
    nchw, fused_ops, padding, strides, conv_scale, side_scale = CASES[case]
    rng = np.random.default_rng(case)
    xs = (2, 3, 6, 5) if nchw else (2, 6, 5, 3)
    x = rng.integers(-128, 128, xs).astype(np.int8)
    w = rng.integers(-127, 128, (3, 3, 3, 4)).astype(np.int8)
    bias = rng.uniform(-20, 20, (4,)).astype(np.float32)

    def fn(a, c, bb, sd):
        return _fused_conv(a, c, bb, sd, conv_scale, side_scale, nchw=nchw, fused_ops=fused_ops, padding=padding,
                           strides=strides)
    h, wd = (xs[2], xs[3]) if nchw else (xs[1], xs[2])
    oh, ow = ((-(-h // strides[0]), -(-wd // strides[1])) if padding == "SAME"
              else ((h - 3) // strides[0] + 1, (wd - 3) // strides[1] + 1))
    out_shape = (2, 4, oh, ow) if nchw else (2, oh, ow, 4)
    side = rng.integers(-128, 128, out_shape).astype(np.int8)
    want = tf.bitcast(tf.function(fn, jit_compile=True)(_q(x), _q(w), tf.constant(bias), _q(side)), tf.int8).numpy()
    concrete = tf.function(fn).get_concrete_function(tf.TensorSpec(xs, tf.qint8), tf.TensorSpec(w.shape, tf.qint8),
                                                      tf.TensorSpec([4], tf.float32),
                                                      tf.TensorSpec(out_shape, tf.qint8))
    got = lower_function(concrete, x, w, bias, side).run(x, w, bias, side)[0]
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, want)


def test_unknown_activation_is_refused_as_tf_xla_refuses_it() -> None:
    x, w, side = np.zeros((1, 3, 3, 1), np.int8), np.zeros((1, 1, 1, 2), np.int8), np.zeros((1, 3, 3, 2), np.int8)
    bias = np.zeros((2,), np.float32)

    def fn(a, c, bb, sd):
        return _fused_conv(a, c, bb, sd, 1.0, 0.0, nchw=False, fused_ops=["BiasAdd", "Elu"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="must be 'None' or 'Relu'"):
        tf.function(fn, jit_compile=True)(_q(x), _q(w), tf.constant(bias), _q(side))
    specs = [tf.TensorSpec(x.shape, tf.qint8), tf.TensorSpec(w.shape, tf.qint8), tf.TensorSpec([2], tf.float32),
             tf.TensorSpec(side.shape, tf.qint8)]
    with pytest.raises(InvalidArgumentError, match="must be 'None' or 'Relu'"):
        lower_function(tf.function(fn).get_concrete_function(*specs))
