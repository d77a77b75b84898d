"""Collectives, replica/device ids, send/recv and SPMD sharding markers on one CPU device (tf2xla's
collective_ops.cc, device_index_op.cc, replica_id_op.cc, sendrecv_ops.cc, spmd_*_op.cc, and the MLIR
legalizations of XlaAllReduce/XlaReduceScatter/CollectiveAssignGroupV2).

Stage: lowering. What TF 2.21's XLA does in one process with one CPU device (checked with
``jit_compile=True``):

* ``DeviceIndex`` is the constant ``len(device_names)`` (XLA's "not in the list": a Case on it takes
  the default branch). ``XlaReplicaId`` is ``replica-id`` (0 here) converted to s32.
* ``XlaAllReduce`` over the one replica group ``{0}`` is the identity (``Mean`` divides by the group
  size 1); ``XlaReduceScatter`` over ``{0}`` is the identity too — TF's XLA:CPU compiles it but fails
  to run it ("Device assignment is null"), so here we are more permissive, with the one-replica
  meaning. Groups of more than one replica need other devices: a typed error.
* ``CollectiveAssignGroupV2`` is the constants (number of devices in ``group_assignment``, key 0),
  as TF's XLA folds it. ``CollectiveReduceV2`` is refused as TF refuses it ("Collectives are not yet
  implemented for CPU devices when compiling with XLA").
* ``XlaSend``/``XlaRecv`` are refused as XLA:CPU refuses the ``send``/``recv`` opcodes.
* ``XlaSpmdFullToShardShape``/``XlaSpmdShardToFullShape`` with a replicated, maximal, manual or empty
  sharding keep the shape and values (TF's XLA emits ``Sharding``/``SPMD*`` custom-calls that one
  device's partitioner removes); a tiled sharding needs several devices: a typed error.
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tfxla_cluster.tf2hlo.registry import lowers


@lowers("DeviceIndex")
def _device_index(ctx, node):
    return [np.asarray(len(ctx.attr("device_names", [])), np.int32)]


@lowers("XlaReplicaId")
def _replica_id(ctx, node):
    b = ctx.b
    return [b.convert(b.instruction(O.REPLICA_ID, (), Shape.scalar(P.U32)), P.S32)]


def _one_replica_groups(ctx, index: int) -> None:
    groups = np.asarray(ctx.const_input(index))
    if groups.ndim != 2:
        raise InvalidArgumentError(f"group_assignment must be a matrix, got shape {list(groups.shape)}")
    if groups.size != 1 or int(groups.reshape(-1)[0]) != 0:
        raise UnimplementedError(f"{ctx.op} over replica groups {groups.tolist()}: one CPU device has only "
                                 "replica 0")


@lowers("XlaAllReduce")
def _all_reduce(ctx, node):
    _one_replica_groups(ctx, 1)
    op = ctx.attr("reduce_op")
    if op not in ("Min", "Max", "Mul", "Add", "Mean"):
        raise InvalidArgumentError(f"Unsupported reduce_op {op}")
    return [ctx.input_value(0)]


@lowers("XlaReduceScatter")
def _reduce_scatter(ctx, node):
    _one_replica_groups(ctx, 1)
    dim = ctx.const_int(2)
    rank = ctx.input_rank(0)
    if not 0 <= dim < rank:
        raise InvalidArgumentError(f"scatter_dimension {dim} out of range for rank {rank}")
    return [ctx.input_value(0)]


@lowers("CollectiveAssignGroupV2")
def _assign_group(ctx, node):
    groups = np.asarray(ctx.const_input(0))
    return [np.asarray(groups.size, np.int32), np.asarray(0, np.int32)]


@lowers("CollectiveReduceV2")
def _collective_reduce(ctx, node):
    raise UnimplementedError("Collectives are not yet implemented for CPU devices when compiling with XLA "
                             f"({ctx.name})")


@lowers("XlaSend", "XlaRecv")
def _send_recv(ctx, node):
    opcode = "send" if node.op == "XlaSend" else "recv"
    raise UnimplementedError(f"HLO opcode `{opcode}` is not supported by XLA:CPU ({ctx.name})")


def _sharding_is_single_device(serialized: bytes | str) -> bool:
    from tensorflow.compiler.xla import xla_data_pb2

    if not serialized:
        return True
    sharding = xla_data_pb2.OpSharding()
    sharding.ParseFromString(serialized.encode("latin-1") if isinstance(serialized, str) else serialized)
    t = xla_data_pb2.OpSharding
    if sharding.type in (t.REPLICATED, t.MAXIMAL, t.MANUAL):
        return True
    return int(np.prod(list(sharding.tile_assignment_dimensions) or [1])) <= 1


@lowers("XlaSpmdFullToShardShape", "XlaSpmdShardToFullShape")
def _spmd_shape(ctx, node):
    raw = ctx.node.attr("manual_sharding").s if ctx.node.has_attr("manual_sharding") else b""
    if not _sharding_is_single_device(raw):
        raise UnimplementedError(f"{node.op} with a tiled sharding needs several devices")
    x = ctx.input_value(0)
    if node.op == "XlaSpmdShardToFullShape":
        full = [int(d) for d in ctx.attr("full_shape")]
        if list(ctx.input_dims(0)) != full:
            raise InvalidArgumentError(f"full_shape {full} differs from the shard shape {list(ctx.input_dims(0))} "
                                       "on one device")
    return [x]
