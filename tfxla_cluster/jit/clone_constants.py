"""CloneConstantsForBetterClustering: TF's JIT pass 5, run just before MarkForCompilation.

Stage: pre-clustering rewrite. A small constant (``Const``/``HostConst`` with fewer than 16 elements)
feeding several consumers would tie their clusters together through one node; TF gives each consumer
its own copy, named ``<const>/clone_<k>`` with one counter per run (skipping names already in the graph).
Consumers are visited in node-id order and their inputs in edge order; a data edge is moved to the
clone, so the constant's last consumer keeps the original; a control edge gets a clone *in addition*
(TF does not remove it). Nothing happens when auto-jit is off or the graph has an in-place op.
Clones are appended after the original nodes, as TF's node ids are.
"""
from __future__ import annotations

from tensorflow.core.framework import graph_pb2

from tfxla_cluster.graph.graph import SINK_ID, Graph
from tfxla_cluster.tfops import op_tables

SMALL_TENSOR_THRESHOLD = 16
INPLACE_OPS = ("InplaceUpdate", "InplaceAdd", "InplaceSub")


def _is_small_constant(node) -> bool:
    if node.op not in op_tables.CONSTANT_OPS or "value" not in node.node_def.attr:
        return False
    total = 1
    for dim in node.node_def.attr["value"].tensor.tensor_shape.dim:
        total *= dim.size
    return total < SMALL_TENSOR_THRESHOLD


def clone_constants(graph_def: graph_pb2.GraphDef, jit_on: bool = True) -> graph_pb2.GraphDef:
    """The graph after TF's CloneConstantsForBetterClusteringPass (a new GraphDef)."""
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    if not jit_on:
        return out
    clones = _clones(out, Graph(out, assign_devices=False, check_acyclic=False))
    return out if clones is None else clones[0]


def with_cloned_constants(graph_def: graph_pb2.GraphDef, jit_on: bool = True) -> tuple[graph_pb2.GraphDef, Graph]:
    """(:func:`clone_constants` of ``graph_def``, its :class:`Graph`): the GraphDef is ``graph_def`` itself and
    the Graph the one the pass looked at when nothing was cloned (a graph is imported once, not twice;
    with clones, the new GraphDef's nodes are the checked ones and copies of them: its attrs are not
    checked again, nor imported: ``Graph.derived`` carries its nodes over)."""
    graph = Graph(graph_def)
    clones = _clones(graph_def, graph) if jit_on else None
    return (graph_def, graph) if clones is None else (clones[0], graph.derived(*clones))


def _clones(graph_def: graph_pb2.GraphDef, graph: Graph) -> tuple[graph_pb2.GraphDef, dict[str, str]] | None:
    """``graph_def`` (imported as ``graph``) with its small constants cloned (a new GraphDef) and the clones'
    originals (clone name -> constant name), or None when the pass clones nothing."""
    if any(n.op in INPLACE_OPS for n in graph.op_nodes()):
        return None
    names = {n.name for n in graph.op_nodes()}
    out_edges = {n.id: len(n.out_edges) for n in graph.nodes}
    counter = 0
    new_inputs: dict[str, list[str]] = {}   # consumer -> rewritten input list
    clones: list = []
    origin: dict[str, str] = {}
    for node in graph.nodes:
        for edge in sorted(node.in_edges, key=lambda e: e.id):
            src = edge.src
            if not (src.is_op and _is_small_constant(src) and out_edges[src.id] != 1):
                continue
            while True:
                clone_name = f"{src.name}/clone_{counter}"
                counter += 1
                if clone_name not in names:
                    break
            clone = graph_pb2.GraphDef().node.add()
            # The NodeDef as given (the Graph's copy may carry its canonical device name).
            clone.CopyFrom(graph_def.node[src.id - SINK_ID - 1])
            clone.name = clone_name
            clones.append(clone)
            origin[clone_name] = src.name
            if edge.is_control:
                # TF adds the clone's control edge and keeps the original one.
                new_inputs.setdefault(node.name, list(node.node_def.input)).append("^" + clone_name)
            else:
                inputs = new_inputs.setdefault(node.name, list(node.node_def.input))
                inputs[_data_position(node.node_def.input, edge.dst_input)] = clone_name
                out_edges[src.id] -= 1
    if not clones:
        return None
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    for nd in out.node:
        if nd.name in new_inputs:
            del nd.input[:]
            nd.input.extend(new_inputs[nd.name])
    out.node.extend(clones)
    return out, origin


def _data_position(inputs, data_index: int) -> int:
    """Position in a NodeDef's input list of its ``data_index``-th data input."""
    seen = -1
    for pos, ref in enumerate(inputs):
        if not ref.startswith("^"):
            seen += 1
            if seen == data_index:
                return pos
    raise IndexError(data_index)
