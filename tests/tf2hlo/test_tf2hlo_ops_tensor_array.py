"""TF1 TensorArrays (TensorArrayV3 and its ops, gradient arrays) and stacks (StackV2/Push/Pop/Close)
built with raw ops in a function, against TF's own XLA (``jit_compile=True``)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import values
from tests.tf2hlo.tf2hlo_tfxla import compare, lower_and_run, tf_xla

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.tf2hlo import lower_function

R = tf.raw_ops


def _tensor_arrays(x, rows):
    f = tf.float32
    # Known element shape: write overwrites, read, gather (dense slice and general), concat, size.
    ta, flow = R.TensorArrayV3(size=4, dtype=f, element_shape=[2, 3])
    flow = R.TensorArrayWriteV3(handle=ta, index=1, value=x[0], flow_in=flow)
    flow = R.TensorArrayWriteV3(handle=ta, index=3, value=x[1], flow_in=flow)
    flow = R.TensorArrayWriteV3(handle=ta, index=1, value=x[2], flow_in=flow)   # overwrites row 1
    read = R.TensorArrayReadV3(handle=ta, index=1, flow_in=flow, dtype=f)
    dense = R.TensorArrayGatherV3(handle=ta, indices=[0, 1], flow_in=flow, dtype=f, element_shape=[2, 3])
    picked = R.TensorArrayGatherV3(handle=ta, indices=rows, flow_in=flow, dtype=f, element_shape=[2, 3])
    concat, lengths = R.TensorArrayConcatV3(handle=ta, flow_in=flow, dtype=f, element_shape_except0=[3])
    size = R.TensorArraySizeV3(handle=ta, flow_in=flow)
    # Gradient array: writes add up; the same source gives the same array.
    g, gflow = R.TensorArrayGradV3(handle=ta, flow_in=flow, source="gradients")
    gflow = R.TensorArrayWriteV3(handle=g, index=2, value=x[0], flow_in=gflow)
    g2, gflow = R.TensorArrayGradV3(handle=ta, flow_in=gflow, source="gradients")
    gflow = R.TensorArrayWriteV3(handle=g2, index=2, value=x[1], flow_in=gflow)
    gsum = R.TensorArrayGatherV3(handle=g, indices=[0, 1, 2, 3], flow_in=gflow, dtype=f)
    # Unknown element shape: initialised by scatter (in order, then arbitrary rows: adds) and split.
    tb, fb = R.TensorArrayV3(size=3, dtype=f, element_shape=tf.TensorShape(None))
    fb = R.TensorArrayScatterV3(handle=tb, indices=[0, 1, 2], value=x[:3], flow_in=fb)
    fb = R.TensorArrayScatterV3(handle=tb, indices=rows[:2], value=x[1:3] * 10.0, flow_in=fb)
    scattered = R.TensorArrayGatherV3(handle=tb, indices=[0, 1, 2], flow_in=fb, dtype=f)
    tc, fc = R.TensorArrayV3(size=2, dtype=f)
    fc = R.TensorArraySplitV3(handle=tc, value=tf.reshape(x[:2], [4, 3]), lengths=tf.constant([2, 2], tf.int64),
                              flow_in=fc)
    split = R.TensorArrayReadV3(handle=tc, index=1, flow_in=fc, dtype=f)
    R.TensorArrayCloseV3(handle=tc)
    return read, dense, picked, concat, lengths, size, gsum, scattered, split


def _stacks(x):
    st = R.StackV2(max_size=4, elem_type=tf.int32, stack_name="s")
    R.StackPushV2(handle=st, elem=x[0])
    pushed = R.StackPushV2(handle=st, elem=x[1] * 2)
    top = R.StackPopV2(handle=st, elem_type=tf.int32)
    R.StackPushV2(handle=st, elem=x[2] + 5)
    a = R.StackPopV2(handle=st, elem_type=tf.int32)
    b = R.StackPopV2(handle=st, elem_type=tf.int32)
    R.StackCloseV2(handle=st)
    return pushed, top, a, b


def test_tensor_array_ops_equal_tf_xla():
    args = [values("f32", (4, 2, 3)), np.array([3, 1, 3], np.int32)]
    compare(lower_and_run(_tensor_arrays, args), tf_xla(_tensor_arrays, args), rtol=1e-6)


def test_stack_ops_equal_tf_xla():
    args = [values("i32", (3, 5))]
    compare(lower_and_run(_stacks, args), tf_xla(_stacks, args))


def test_errors_are_typed():
    spec = [tf.TensorSpec([2], tf.float32)]

    def dynamic(x):
        ta, flow = R.TensorArrayV3(size=2, dtype=tf.float32, dynamic_size=True)
        return R.TensorArrayWriteV3(handle=ta, index=0, value=x, flow_in=flow)

    def read_uninitialized(x):
        ta, flow = R.TensorArrayV3(size=2, dtype=tf.float32)
        return R.TensorArrayReadV3(handle=ta, index=0, flow_in=flow, dtype=tf.float32)
    with pytest.raises(UnimplementedError, match="dynamic size"):
        lower_function(tf.function(dynamic, autograph=False).get_concrete_function(*spec))
    with pytest.raises(InvalidArgumentError, match="Uninitialized TensorArray"):
        lower_function(tf.function(read_uninitialized, autograph=False).get_concrete_function(*spec))
