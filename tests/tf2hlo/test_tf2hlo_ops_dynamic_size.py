"""ListDiff, Unique, UniqueV2 and DynamicPartition: TF's XLA gives their outputs dynamic sizes; we lower them
when the size-deciding inputs are compile-time constants (and DynamicPartition's data may be a run-time
value), compared with TF's own XLA and TF eager; a run-time size is a typed error."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import Case, run_batch, values
from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.tf2hlo import lower_function

c = tf.constant


def cases():
    return [
     Case("ListDiff", lambda v: [t + tf.cast(v, t.dtype) for t in tf.raw_ops.ListDiff(x=c([3, 1, 3, 2, 1, 5]), y=c([1, 5]), out_idx=tf.int64)], [np.int64(0)]),
     Case("Unique", lambda v: [tf.unique(c([3., 1., 3., 2., 1., 5.]))[0] * v, tf.unique(c([3., 1., 3., 2., 1., 5.]))[1]], [np.float32(2)]),
     Case("UniqueV2 axis", lambda v: [tf.raw_ops.UniqueV2(x=c([[1, 2], [3, 4], [1, 2], [0, 0]]), axis=[0])[0] + v, tf.raw_ops.UniqueV2(x=c([[1, 2], [3, 4], [1, 2], [0, 0]]), axis=[0], out_idx=tf.int64)[1]], [np.int32(1)]),
     Case("UniqueV2 axis 1", lambda v: [tf.raw_ops.UniqueV2(x=c([[1, 2, 1], [3, 4, 3]]), axis=[1])[0] + v], [np.int32(1)]),
     Case("DynamicPartition", lambda d: tf.dynamic_partition(d, c([0, 2, 0, 2, 2]), 3), [values("f32", (5, 2))]),
     Case("DynamicPartition 2-D partitions", lambda d: tf.dynamic_partition(d, c([[1, 0, 1], [0, 0, 1]]), 2), [values("i32", (2, 3, 2))]),
    ]


@pytest.mark.parametrize("reference", ["tf_xla", "tf"])
def test_value_sized_ops(reference: str) -> None:
    run_batch(cases(), reference=reference)


@pytest.mark.parametrize("fn", [lambda v: tf.raw_ops.UniqueV2(x=tf.reshape(v, [3, 1]), axis=[0])[0],
                                lambda v: tf.dynamic_partition(v * 2, v, 2)[0]])
def test_run_time_sizes_are_unimplemented(fn) -> None:
    """(ListDiff is not here: TF registers its inputs as compile-time constants, so a jit_compile=True
    function is specialised on their values, by TF and by us. Unique of a run-time vector is a bounded
    dynamic result: below and tests/tf2hlo/test_bounded_dynamic.py.)"""
    x = np.array([1, 0, 1], np.int32)
    concrete = tf.function(fn).get_concrete_function(tf.TensorSpec([3], tf.int32))
    with pytest.raises(UnimplementedError, match="dynamic"):
        lower_function(concrete, x)


def test_list_diff_of_a_specialised_argument() -> None:
    fn = lambda v: tf.raw_ops.ListDiff(x=v, y=c([1]))  # noqa: E731
    x = np.array([1, 0, 1, 4], np.int32)
    got = lower_function(tf.function(fn).get_concrete_function(tf.TensorSpec([4], tf.int32)), x).run(x)
    want = tf.function(fn, jit_compile=True)(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.numpy())


def test_unique_of_a_run_time_vector_is_bounded_dynamic() -> None:
    """y padded to the input's length plus its run-time size (cut at the boundary), idx static: TF's XLA's."""
    fn = lambda v: tf.unique(v)  # noqa: E731
    x = np.array([4, 1, 4, 4, -2, 1], np.int32)
    lowered = lower_function(tf.function(fn).get_concrete_function(tf.TensorSpec([6], tf.int32)), x)
    assert lowered.outputs[0].dynamic is not None and "s32[<=6]" in lowered.module.to_string()
    got = lowered.trim_results(lowered.run(x))
    want = tf.function(fn, jit_compile=True)(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.numpy())
