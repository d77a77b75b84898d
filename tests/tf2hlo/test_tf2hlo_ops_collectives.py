"""Collectives, ids, send/recv and SPMD markers on one CPU device, against TF's own XLA where TF's XLA
runs them (see tfxla_cluster/tf2hlo/collectives.py for what it refuses)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.compiler.tf2xla.ops import gen_xla_ops as gx
from tensorflow.python.ops import gen_collective_ops as gc

from tests.tf2hlo.tf2hlo_harness import values
from tests.tf2hlo.tf2hlo_tfxla import compare, lower_and_run, tf_xla

from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.tf2hlo import lower_function


def _single_device(x):
    groups = [gc.collective_assign_group_v2(group_assignment=a, device_index=d, base_key=k)
              for a, d, k in (([[0]], 0, 1), ([[1, 2], [0, 3]], 3, 5), ([[0, 1, 2]], 1, 7))]
    return (tf.raw_ops.DeviceIndex(device_names=["CPU", "GPU"]),
            gx.xla_all_reduce(input=x, group_assignment=[[0]], reduce_op="Add", mode="CrossReplica"),
            gx.xla_all_reduce(input=x * 2.0, group_assignment=[[0]], reduce_op="Mean",
                              mode="CrossReplicaAndPartition"),
            gx.xla_spmd_full_to_shard_shape(x, manual_sharding="", dim=-1, unspecified_dims=[]),
            gx.xla_spmd_shard_to_full_shape(x + 1.0, manual_sharding="", full_shape=[2, 3], dim=-1,
                                            unspecified_dims=[]),
            *[t for g in groups for t in g])


def test_single_device_meanings_equal_tf_xla():
    args = [values("f32", (2, 3))]
    compare(lower_and_run(_single_device, args), tf_xla(_single_device, args))


def test_replica_id_and_reduce_scatter_on_one_replica():
    """TF's XLA:CPU cannot run these in one process (no device assignment); one replica's meaning:
    replica 0, and a reduce-scatter over {0} that keeps its input."""
    def fn(x):
        return gx.xla_replica_id(), gx.xla_reduce_scatter(input=x, group_assignment=[[0]], scatter_dimension=0,
                                                          reduce_op="Add")
    x = values("f32", (4, 2))
    rid, scattered = lower_and_run(fn, [x])
    assert rid.dtype == np.int32 and rid == 0
    np.testing.assert_array_equal(scattered, x)


@pytest.mark.parametrize("fn, match", [
    (lambda x: gc.collective_reduce_v2(x, group_size=1, group_key=1, instance_key=1, ordering_token=[],
                                       merge_op="Add", final_op="Id"), "Collectives are not yet implemented"),
    (lambda x: gx.xla_recv(dtype=tf.float32, tensor_name="t", shape=[2, 3]) + x, "`recv` is not supported"),
    (lambda x: gx.xla_all_reduce(input=x, group_assignment=[[0, 1]], reduce_op="Add", mode="CrossReplica"),
     "only replica 0"),
])
def test_refused_as_tf_xla_refuses(fn, match):
    with pytest.raises(UnimplementedError, match=match):
        lower_function(tf.function(fn, autograph=False).get_concrete_function(tf.TensorSpec([2, 3], tf.float32)))
