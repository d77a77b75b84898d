"""Static output shapes for every node of a Graph.

Stage: import. Shapes come, in order of preference, from a node's ``_output_shapes`` attribute (what TF
dumps and concrete functions record) or from TF's own C++ shape inference, run by importing the graph
into a ``tf.Graph``. Function arguments (``_Arg``) are given their recorded shapes for inference (a
resource ``_Arg`` its variable's, from ``_handle_dtypes``/``_handle_shapes``, as TF's runtime does). A
shape that cannot be known is ``None`` (unknown rank) or has ``None`` dims; nothing is guessed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tensorflow.core.framework import graph_pb2, tensor_shape_pb2

from tfxla_cluster.graph.opdefs import ARG_OP, ARG_OPS, RETVAL_OPS, base_dtype

if TYPE_CHECKING:  # type names only: graph.graph imports this module, never the reverse
    from tfxla_cluster.graph.graph import Graph

# A static shape: None = unknown rank; otherwise a tuple of dims, None for an unknown dim.
Shape = tuple[int | None, ...] | None


def shape_from_proto(proto: tensor_shape_pb2.TensorShapeProto) -> Shape:
    if proto.unknown_rank:
        return None
    return tuple(None if d.size < 0 else int(d.size) for d in proto.dim)


def shape_to_proto(shape: Shape) -> tensor_shape_pb2.TensorShapeProto:
    proto = tensor_shape_pb2.TensorShapeProto()
    if shape is None:
        proto.unknown_rank = True
        return proto
    for d in shape:
        proto.dim.add(size=-1 if d is None else d)
    return proto


def _recorded(node) -> list[Shape] | None:
    attr = node.attr("_output_shapes")
    if attr is None or len(attr.list.shape) != len(node.outputs):
        return None
    return [shape_from_proto(s) for s in attr.list.shape]


def infer_shapes(graph: "Graph") -> dict[str, list[Shape]]:
    """Shapes of every op node's outputs, by node name."""
    shapes: dict[str, list[Shape]] = {}
    inferred = _tf_shape_inference(graph, handle_data=True)
    if not inferred:  # the graph did not import with typed resource _Args: try plain Placeholders
        inferred = _tf_shape_inference(graph, handle_data=False)
    for node in graph.op_nodes():
        recorded = _recorded(node)
        if recorded is not None:
            shapes[node.name] = recorded
        else:
            shapes[node.name] = inferred.get(node.name, [None] * len(node.outputs))
    return shapes


def _tf_shape_inference(graph: "Graph", handle_data: bool) -> dict[str, list[Shape]]:
    import tensorflow as tf

    gd = graph_pb2.GraphDef()
    gd.versions.CopyFrom(graph.graph_def.versions)
    gd.library.CopyFrom(graph.graph_def.library)
    for node in graph.op_nodes():
        if node.op in RETVAL_OPS:
            continue  # no outputs to infer
        nd = gd.node.add()
        nd.CopyFrom(node.node_def)
        nd.device = ""  # inference must not depend on devices this host lacks
        if handle_data and node.op in ARG_OPS and node.attr("_handle_shapes") is not None:
            # A resource _Arg with its variable's dtype and shape: TF's _Arg shape function passes
            # them on to the reads. Only the attributes that function reads are kept.
            nd.ClearField("attr")
            for key in ("T", "index", "_handle_dtypes", "_handle_shapes"):
                nd.attr[key].CopyFrom(node.node_def.attr[key])
            nd.op = ARG_OP
        elif node.op in ARG_OPS:
            # An _Arg's shape comes from its caller; stand in a Placeholder with the recorded shape.
            recorded = _recorded(node)
            nd.op = "Placeholder"
            nd.ClearField("attr")
            nd.attr["dtype"].type = base_dtype(node.outputs[0].dtype)
            nd.attr["shape"].shape.CopyFrom(shape_to_proto(recorded[0] if recorded else None))
    try:
        with tf.Graph().as_default() as g:
            tf.graph_util.import_graph_def(gd, name="")
    except (TypeError, ValueError, tf.errors.OpError):
        # What import_graph_def raises for a graph it can't import (its documented TypeError/ValueError,
        # or a TF status): inference is best effort, such a graph just has unknown shapes.
        return {}
    out: dict[str, list[Shape]] = {}
    for op in g.get_operations():
        out[op.name] = [None if t.shape.rank is None else tuple(t.shape.as_list()) for t in op.outputs]
    return out
