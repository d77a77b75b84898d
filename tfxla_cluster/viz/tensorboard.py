"""The marked graph as a TensorBoard event file: the graph dashboard colours nodes by ``_XlaCluster``.

Stage: visualization. :func:`write_tensorboard` writes the clustering pass's marked GraphDef (the one TF
dumps as ``mark_for_compilation_N.pbtxt``, with ``_XlaCluster`` on every clustered node) with TF's own
summary writer (``tf.summary.create_file_writer`` + ``tf.summary.graph``), so the file is exactly what
TensorBoard reads; its graph dashboard offers "Color by: XLA Cluster" when nodes carry ``_XlaCluster``.
Nodes also get ``_output_shapes`` (TF's ``add_shapes`` convention, from our shape inference) where they
have none, so edges show tensor shapes. The caller's GraphDef is never changed.
"""
from __future__ import annotations

import os
from pathlib import Path

from tensorflow.core.framework import attr_value_pb2, graph_pb2, tensor_shape_pb2

from tfxla_cluster.jit.mark_for_compilation import MarkResult


def _shape_proto(shape) -> tensor_shape_pb2.TensorShapeProto:
    if shape is None:
        return tensor_shape_pb2.TensorShapeProto(unknown_rank=True)
    return tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=-1 if d is None else d) for d in shape])


def graph_def_for_tensorboard(result: MarkResult, *, add_shapes: bool = True) -> graph_pb2.GraphDef:
    """A copy of the marked GraphDef, with ``_output_shapes`` added where missing."""
    gd = graph_pb2.GraphDef()
    gd.CopyFrom(result.graph_def)
    if add_shapes:
        graph = result.graph
        # Shape inference is best effort already (graph/shapes.py: a graph TF cannot shape has unknown
        # shapes, written as unknown rank), so any exception here is a bug and propagates.
        for nd in gd.node:
            node = graph.get(nd.name)
            if node is None or "_output_shapes" in nd.attr or not node.outputs:
                continue
            shapes = graph.output_shapes(node)
            nd.attr["_output_shapes"].CopyFrom(attr_value_pb2.AttrValue(
                list=attr_value_pb2.AttrValue.ListValue(shape=[_shape_proto(s) for s in shapes])))
    return gd


def write_tensorboard(result: MarkResult, logdir: str | os.PathLike, *, add_shapes: bool = True) -> Path:
    """Write the marked graph of ``result`` as a TensorBoard event file in ``logdir``; return its path."""
    import tensorflow as tf

    logdir = Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    before = set(logdir.glob("events.out.tfevents.*"))
    gd = graph_def_for_tensorboard(result, add_shapes=add_shapes)
    writer = tf.summary.create_file_writer(str(logdir))
    try:
        with writer.as_default():
            # tf.summary.graph takes a tf.Graph or a tf.compat.v1.GraphDef (the same proto class).
            tf.summary.graph(tf.compat.v1.GraphDef.FromString(gd.SerializeToString()))
        writer.flush()
    finally:
        writer.close()
    new = sorted(set(logdir.glob("events.out.tfevents.*")) - before, key=lambda p: p.stat().st_mtime)
    if not new:
        from tfxla_cluster.errors import InternalError

        raise InternalError(f"TF's summary writer wrote no event file in {logdir}")
    return new[-1]
