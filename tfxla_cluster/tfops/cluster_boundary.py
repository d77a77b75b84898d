"""The boundary of a cluster: what crosses it, computed once per cluster.

Stage: after clustering (TF's EncapsulateSubgraphs sees the same edges). A :class:`ClusterBoundary` is
built from one walk over the graph's edges in id order (TF's ``CopySubgraphEdges`` order) and is then
used, unchanged, by every later stage:

* encapsulation (:mod:`tfxla_cluster.runtime.encapsulate`): the launch node's inputs are
  :attr:`~ClusterBoundary.inputs`, its outputs :attr:`~ClusterBoundary.launch_outputs`, its control
  inputs :attr:`~ClusterBoundary.control_inputs`; TF's own form of the rewrite (the debug dumps of
  :mod:`tfxla_cluster.jit.build_xla_ops_dump`) numbers the same tensors in edge order;
* lowering (:func:`tfxla_cluster.tf2hlo.lower.lower_boundary`): the module's inputs are
  :meth:`~ClusterBoundary.lowering_inputs` (compile-time constants first, resources last, as TF's
  encapsulation orders a launch op's arguments), its escaping outputs :attr:`~ClusterBoundary.outputs`;
* the launcher: resource handles (their dtype, their users, handles passed straight through).

It lives in ``tfops/``, the layer below both ``jit/`` and ``tf2hlo/``: lowering is *given* a boundary (as
tf2xla's XlaCompiler is given its arguments by the JIT) and must not import the JIT.

Guarantees: inputs and outputs are listed once each, in the order of the first edge that carries them;
``members`` are in node-id order; nothing here depends on dict or set iteration order.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from tensorflow.core.framework import types_pb2

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.graph.graph import Graph, Node
from tfxla_cluster.graph.opdefs import ARG_OP, DEVICE_ARG_OP, base_dtype
from tfxla_cluster.tfops.const_analysis import ConstAnalysis

Tensor = tuple[str, int]  # (node name, output slot)

_ARG_OPS = (ARG_OP, DEVICE_ARG_OP)
_PASS_THROUGH_OPS = ("Identity", "Snapshot", "IdentityN")   # forward a resource handle unchanged
_HANDLE_FORWARDING_OPS = ("Switch", "RefSwitch", "Enter", "RefEnter")   # and so do these, control flow's


@dataclass(eq=False)
class ClusterBoundary:
    """What crosses one cluster's boundary (see the module docstring)."""

    name: str
    graph: Graph = field(repr=False)
    members: list[str]                     # node-id order
    inputs: list[Tensor]                   # external tensors consumed inside, in edge order
    outputs: list[Tensor]                  # member tensors consumed outside, in edge order
    control_inputs: list[str]              # outside nodes a member waits for, in edge order
    control_outputs: set[str]              # members an outside node (or the sink) waits for
    consumers: dict[Tensor, list[tuple[str, int]]]   # input tensor -> (member, input slot), edge order

    # ---- derived facts (pure functions of the fields above)
    @functools.cached_property
    def member_set(self) -> frozenset[str]:
        return frozenset(self.members)

    @functools.cached_property
    def input_dtypes(self) -> list[int]:
        return [self.dtype_of(t) for t in self.inputs]

    @functools.cached_property
    def launch_outputs(self) -> list[Tensor]:
        """The outputs as a launch node returns them: by producer id, then slot."""
        return sorted(self.outputs, key=lambda t: (self.graph.node(t[0]).id, t[1]))

    @functools.cached_property
    def launch_output_dtypes(self) -> list[int]:
        return [self.dtype_of(t) for t in self.launch_outputs]

    @functools.cached_property
    def topological_members(self) -> list[Node]:
        return [n for n in self.graph.topological_order() if n.name in self.member_set]

    @functools.cached_property
    def args(self) -> list[Tensor]:
        """The cluster's own ``_Arg`` members (a whole function lowered as one cluster), in index order."""
        nodes = sorted((n for n in self.topological_members if n.op in _ARG_OPS),
                       key=lambda n: n.node_def.attr["index"].i)
        return [(n.name, 0) for n in nodes]

    @functools.cached_property
    def resources(self) -> frozenset[Tensor]:
        """Inputs that are resource handles (variables)."""
        return frozenset(t for t, dt in zip(self.inputs, self.input_dtypes) if dt == types_pb2.DT_RESOURCE)

    @functools.cached_property
    def constants(self) -> frozenset[Tensor]:
        """Inputs (external tensors, or the cluster's own ``_Arg`` outputs) that must be compile-time
        constants: ``BackwardsConstAnalysis`` restricted to the cluster."""
        return frozenset(_compile_time_constants(self.graph, self.member_set, self.topological_members))

    def lowering_inputs(self) -> list[Tensor]:
        """The lowered module's inputs: own ``_Arg``s, then the inputs stably reordered compile-time
        constants first, resources last (TF's argument order of a launch op)."""
        constants, resources = self.constants, self.resources
        external = sorted(self.inputs, key=lambda t: 0 if t in constants else (2 if t in resources else 1))
        return self.args + external

    def dtype_of(self, t: Tensor) -> int:
        return base_dtype(self.graph.node(t[0]).outputs[t[1]].dtype)

    # ---- resource handles
    def handle_users(self, position: int) -> Iterator[Node]:
        """The members that use the resource handle at input ``position``, looking through
        pass-through members (the Identity an inlined call puts on each of its inputs)."""
        frontier, seen = [self.inputs[position]], set()
        while frontier:
            tensor = frontier.pop()
            if tensor in seen:
                continue
            seen.add(tensor)
            for e in self.graph.node(tensor[0]).out_edges:
                if e.is_control or e.src_output != tensor[1] or e.dst.name not in self.member_set:
                    continue
                if e.dst.op in _PASS_THROUGH_OPS:
                    frontier.append((e.dst.name, e.dst_input if e.dst.op == "IdentityN" else 0))
                else:
                    yield e.dst

    @functools.cached_property
    def duplicate_variable(self) -> bool:
        """Whether two resource inputs carry the same variable's handle (traced back through Identity-like
        ops, Switch and Enter to one producer): TF's XlaCompile locks each input variable once and fails
        the launch with ``Duplicate variable passed to XLA cluster`` (xla_launch_util.cc LockVariables; a
        variable's read and its assignment in a tf.cond's branch, whose handle comes through a Switch,
        in one cluster: fuzz seed 280001830)."""
        roots = set()
        for t in (t for t in self.inputs if t in self.resources):
            while True:
                node = self.graph.node(t[0])
                data = node.data_inputs()
                if node.op in _PASS_THROUGH_OPS + _HANDLE_FORWARDING_OPS and data:
                    e = data[t[1]] if node.op == "IdentityN" and t[1] < len(data) else data[0]
                    t = (e.src.name, e.src_output)
                    continue
                break
            if t in roots:
                return True
            roots.add(t)
        return False

    def resource_dtype(self, position: int) -> int:
        """The variable's dtype behind input ``position``: the producer's ``_handle_dtypes``, else how
        the members use the handle (``dtype`` attrs; ``T`` of ResourceApply* ops)."""
        src, slot = self.inputs[position]
        attr = self.graph.node(src).node_def.attr
        handle_dtypes = attr["_handle_dtypes"].list.type if "_handle_dtypes" in attr else []
        if handle_dtypes:
            return handle_dtypes[0]
        for node in self.handle_users(position):
            attr = node.node_def.attr
            if "dtype" in attr:
                return attr["dtype"].type
            if "T" in attr and attr["T"].type not in (types_pb2.DT_RESOURCE, types_pb2.DT_INVALID):
                return attr["T"].type
        raise InvalidArgumentError(f"cluster {self.name}: can't tell the dtype of resource input {src}:{slot}")

    @functools.cached_property
    def resource_passthrough(self) -> dict[int, int]:
        """Launch output index -> input position, for each resource output that is an input handle
        forwarded through pass-through members: its consumers take the handle itself."""
        positions = {t: i for i, t in enumerate(self.inputs)}
        out: dict[int, int] = {}
        for k, (t, dtype) in enumerate(zip(self.launch_outputs, self.launch_output_dtypes)):
            if dtype != types_pb2.DT_RESOURCE:
                continue
            while t not in positions and t[0] in self.member_set:
                node = self.graph.node(t[0])
                if node.op not in _PASS_THROUGH_OPS:
                    break
                slot = t[1] if node.op == "IdentityN" else 0
                edge = next(e for e in node.data_inputs() if e.dst_input == slot)
                t = (edge.src.name, edge.src_output)
            if t in positions:
                out[k] = positions[t]
        return out

    # ---- construction
    @staticmethod
    def of(graph: Graph, members: Iterable[str], name: str = "cluster") -> "ClusterBoundary":
        """The boundary of one cluster (unknown member names raise)."""
        return cluster_boundaries(graph, {name: list(members)})[name]


def cluster_boundaries(graph: Graph, clusters: dict[str, list[str]]) -> dict[str, ClusterBoundary]:
    """Every cluster's boundary, from one walk over the graph's edges; in ``clusters``' order."""
    cluster_of: dict[str, str] = {}
    for cname, members in clusters.items():
        for m in members:
            graph.node(m)  # raises for unknown names
            cluster_of[m] = cname
    b = {c: ClusterBoundary(c, graph, sorted(dict.fromkeys(m), key=lambda n: graph.node(n).id), [], [], [], set(), {})
         for c, m in clusters.items()}
    escaping: dict[str, set[Tensor]] = {c: set() for c in clusters}
    for e in graph.edges():   # id order, as TF's CopySubgraphEdges
        src_c, dst_c = cluster_of.get(e.src.name), cluster_of.get(e.dst.name)
        if src_c == dst_c:
            continue
        t = (e.src.name, e.src_output)
        if dst_c is not None and e.src.is_op:
            into = b[dst_c]
            if e.is_control:
                if e.src.name not in into.control_inputs:
                    into.control_inputs.append(e.src.name)
            else:
                if t not in into.consumers:
                    into.inputs.append(t)
                    into.consumers[t] = []
                into.consumers[t].append((e.dst.name, e.dst_input))
        if src_c is not None:
            if e.is_control:
                if e.dst.is_op or e.dst.is_sink:
                    b[src_c].control_outputs.add(e.src.name)   # a member nothing waits for still has to run
            elif t not in escaping[src_c]:
                escaping[src_c].add(t)
                b[src_c].outputs.append(t)
    return b


def _compile_time_constants(graph: Graph, members: frozenset[str], order: list[Node]) -> set[Tensor]:
    """``BackwardsConstAnalysis`` restricted to the cluster: the inputs whose value a member needs at
    compile time, followed back through const-traversable members (a member ``_Arg`` marked constant is
    a cluster input too)."""
    const_nodes, outside = ConstAnalysis(graph.library).propagate(order, lambda n: n.name in members)
    return outside | {(n.name, 0) for n in order if n.id in const_nodes and n.op in _ARG_OPS}
