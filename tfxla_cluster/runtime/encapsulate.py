"""Encapsulation: each cluster of a marked graph becomes one launch node TF can run.

Stage: after clustering (TF's EncapsulateSubgraphs + BuildXlaOps, passes 50/60). For every cluster the
rewritten GraphDef has one node named after the cluster — an ``EagerPyFunc`` (TF's own py-func
mechanism), so TF imports and runs the graph with its own kernels everywhere else — whose inputs are
the cluster's external data inputs in a fixed order (:attr:`ClusterSignature.inputs`), whose outputs
are the cluster tensors used outside it, and which carries the control edges of its members:

* control inputs of members from outside become control inputs of the launch node;
* outside nodes that waited on a member wait on the launch node;
* references ``member:i`` outside the cluster become ``<cluster>:k``.

Attributes ``_tfxla_cluster`` (the cluster name) and ``_tfxla_launch`` (the launcher's token) name what
the node runs; every node gets ``_XlaCompile=false`` so that TF's own auto-clustering, if enabled in
the process, leaves the rewritten graph alone. The Python callable behind the token is a :class:`Launcher` (see :mod:`.launcher`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from tensorflow.core.framework import graph_pb2

from tfxla_cluster.graph.graph import Graph
from tfxla_cluster.graph.opdefs import base_dtype

Tensor = tuple[str, int]


@dataclass
class ClusterSignature:
    """What crosses a cluster's boundary, in the launch node's order."""

    name: str
    members: list[str]
    inputs: list[Tensor]                  # external producer tensors (data edges into the cluster)
    outputs: list[Tensor]                 # member tensors consumed outside (or fetched)
    input_dtypes: list[int] = field(default_factory=list)
    output_dtypes: list[int] = field(default_factory=list)
    control_inputs: list[str] = field(default_factory=list)


def cluster_signatures(graph: Graph, clusters: dict[str, list[str]]) -> list[ClusterSignature]:
    """The boundary of every cluster: inputs in edge order, outputs in (node id, slot) order."""
    sigs = []
    for name, members in clusters.items():
        member_set = set(members)
        inputs: list[Tensor] = []
        outputs: set[Tensor] = set()
        control: list[str] = []
        for e in graph.edges():
            src_in, dst_in = e.src.name in member_set, e.dst.name in member_set
            if dst_in and not src_in and e.src.is_op:
                if e.is_control:
                    if e.src.name not in control:
                        control.append(e.src.name)
                elif (e.src.name, e.src_output) not in inputs:
                    inputs.append((e.src.name, e.src_output))
            if src_in and not dst_in and not e.is_control and (e.dst.is_op or e.dst.is_sink):
                outputs.add((e.src.name, e.src_output))
        ordered_outputs = sorted(outputs, key=lambda t: (graph.node(t[0]).id, t[1]))
        sigs.append(ClusterSignature(
            name, sorted(members, key=lambda n: graph.node(n).id), inputs, ordered_outputs,
            [base_dtype(graph.node(n).outputs[i].dtype) for n, i in inputs],
            [base_dtype(graph.node(n).outputs[i].dtype) for n, i in ordered_outputs], control))
    return sigs


def encapsulate(graph: Graph, clusters: dict[str, list[str]],
                register: Callable[[ClusterSignature], bytes], *,
                flags=None) -> tuple[graph_pb2.GraphDef, list[ClusterSignature]]:
    """Rewrite ``graph`` with one launch node per cluster. ``register(signature)`` returns the
    EagerPyFunc token of the callable that runs the cluster. ``flags`` (a :class:`~tfxla_cluster.flags.Flags`)
    are the flags in effect for the function being rewritten (debug dumps follow them)."""
    sigs = cluster_signatures(graph, clusters)
    member_of = {m: s for s in sigs for m in s.members}
    out_index = {s.name: {t: k for k, t in enumerate(s.outputs)} for s in sigs}
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph.graph_def.versions)
    out.library.CopyFrom(graph.graph_def.library)
    emitted: set[str] = set()

    def rewrite_ref(ref: str) -> str | None:
        ctrl = ref.startswith("^")
        name, _, idx = ref.lstrip("^").partition(":")
        sig = member_of.get(name)
        if sig is None:
            return ref
        if ctrl:
            return "^" + sig.name
        return f"{sig.name}:{out_index[sig.name][(name, int(idx or 0))]}"

    def rewrite_colocation(loc: str) -> str:
        name = loc.removeprefix("loc:@")
        sig = member_of.get(name)
        return f"loc:@{sig.name}" if loc.startswith("loc:@") and sig is not None else loc

    for node in graph.op_nodes():
        sig = member_of.get(node.name)
        if sig is not None:
            if sig.name in emitted:
                continue
            emitted.add(sig.name)
            launch = out.node.add(name=sig.name, op="EagerPyFunc", device=node.assigned_device)
            launch.input.extend(rewrite_ref(f"{n}:{i}") for n, i in sig.inputs)
            launch.input.extend(dict.fromkeys(rewrite_ref("^" + c) for c in sig.control_inputs))
            launch.attr["token"].s = register(sig)
            launch.attr["Tin"].list.type.extend(sig.input_dtypes)
            launch.attr["Tout"].list.type.extend(sig.output_dtypes)
            launch.attr["is_async"].b = False
            launch.attr["_tfxla_cluster"].s = sig.name.encode()
            launch.attr["_tfxla_launch"].s = launch.attr["token"].s
            continue
        nd = out.node.add()
        nd.CopyFrom(node.node_def)
        del nd.input[:]
        refs = [rewrite_ref(r) for r in node.node_def.input]
        # Several members may have been control inputs: one control edge on the launch node is enough.
        # Data inputs stay as they are, duplicates included (Switch(pred, pred) has two inputs).
        data = [r for r in refs if not r.startswith("^")]
        nd.input.extend(data + list(dict.fromkeys(r for r in refs if r.startswith("^"))))
        if "_class" in nd.attr:
            # Colocation with a member (``loc:@member``) becomes colocation with its launch node:
            # the member no longer exists in the rewritten graph, and TF rejects unknown names.
            locs = [rewrite_colocation(v.decode()) for v in nd.attr["_class"].list.s]
            del nd.attr["_class"].list.s[:]
            nd.attr["_class"].list.s.extend(v.encode() for v in dict.fromkeys(locs))
    for nd in out.node:
        # TF's own auto-clustering must leave the rewritten graph alone (it would try to compile our
        # launch nodes, or cluster what we left to TF on purpose).
        nd.attr["_XlaCompile"].b = False
    return out, sigs
