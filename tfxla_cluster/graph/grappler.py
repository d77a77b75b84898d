"""TF's own grappler, run on a GraphDef the way TF's function runtime runs it before the JIT passes.

Stage: optional pre-clustering rewrite. TF optimizes every function graph with grappler's meta
optimizer (function inlining, constant folding, dependency and arithmetic optimizers, pruning, ...)
before MarkForCompilation. Running the same C++ optimizer through ``tf_optimizer.OptimizeGraph`` on a
runtime-form GraphDef (``_Arg``/``_Retval``, calls not yet inlined) yields the graph TF's
``before_mark_for_compilation`` dump shows — same nodes, same names, same order — provided nodes are
placed first (done here), since some rewrites (the CPU remapper's fused MatMul/Conv2D) need devices.
"""
from __future__ import annotations

from typing import Sequence

from tensorflow.core.framework import graph_pb2
from tensorflow.core.protobuf import config_pb2, meta_graph_pb2

from tfxla_cluster.errors import InvalidArgumentError


def default_fetch(graph_def: graph_pb2.GraphDef) -> list[str]:
    """What the graph computes: its ``_Retval`` nodes, else the nodes nothing consumes."""
    retvals = [n.name for n in graph_def.node if n.op in ("_Retval", "_DeviceRetval")]
    if retvals:
        return retvals
    consumed = {ref.lstrip("^").split(":")[0] for n in graph_def.node for ref in n.input}
    return [n.name for n in graph_def.node if n.name not in consumed]


def run_grappler(graph_def: graph_pb2.GraphDef, fetch: Sequence[str] | None = None,
                 config: config_pb2.ConfigProto | None = None) -> graph_pb2.GraphDef:
    """Optimize ``graph_def`` with TF's meta optimizer, keeping ``fetch`` (default: see default_fetch)."""
    from tensorflow.python.grappler import tf_optimizer

    from tfxla_cluster.graph.devices import canonical_device

    meta = meta_graph_pb2.MetaGraphDef()
    meta.graph_def.CopyFrom(graph_def)
    # TF places a function's nodes before grappler runs; device-dependent rewrites (the remapper's
    # _FusedMatMul/_FusedConv2D on CPU) only fire on placed nodes.
    for nd in meta.graph_def.node:
        nd.device = canonical_device(nd.device)
    meta.collection_def["train_op"].node_list.value.extend(fetch or default_fetch(graph_def))
    try:
        out = tf_optimizer.OptimizeGraph(config or config_pb2.ConfigProto(), meta, verbose=False)
    except Exception as e:  # grappler reports through TF status exceptions; keep the first line
        raise InvalidArgumentError(f"grappler failed: {str(e).splitlines()[0]}") from None
    if not out.HasField("versions"):
        out.versions.CopyFrom(graph_def.versions)
    return out
