"""A thin graph over a GraphDef: TF's node ids, edges in TF's order, devices, dtypes and shapes.

Stage: import. ``Graph`` is what every later stage (clustering, encapsulation, lowering) reads. It keeps
the GraphDef as the single source of truth — ``Node.node_def`` is the proto inside ``Graph.graph_def`` —
and adds what TF's in-memory ``Graph`` has:

* node ids as TF numbers them: 0 = SOURCE, 1 = SINK, op nodes from 2 in GraphDef order (a dumped
  ``before_mark_for_compilation`` graph lists nodes in id order, so this order reproduces TF's);
* edges in TF's creation order (each node's inputs in NodeDef order as the node is created, loop back
  edges NextIteration→Merge last, then the SOURCE/SINK fix-up edges), which the clustering pass's
  cycle graph depends on;
* the assigned device of every node, as TF's placer would give on a CPU-only host
  (``/job:localhost/replica:0/task:0/device:CPU:0``), keeping explicit devices;
* typed outputs from TF's OpDefs, and static shapes (lazily, from ``_output_shapes`` or TF's C++ shape
  inference).

Construction validates the graph: duplicate names, inputs naming missing nodes or outputs, unknown ops
and cycles that do not pass through loop back edges all raise typed errors with TF's wording.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Iterator

from tensorflow.core.framework import graph_pb2, node_def_pb2

from tfxla_cluster._gc import gc_paused
from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.graph import devices, opdefs
from tfxla_cluster.graph.opdefs import SINK_NODE, SOURCE_NODE
from tfxla_cluster.graph.shapes import Shape, infer_shapes

if TYPE_CHECKING:  # networkx costs ~0.15 s to import: only the views and error paths need it
    import networkx as nx

CONTROL_SLOT = -1
SOURCE_ID = 0
SINK_ID = 1


@dataclass(slots=True, eq=False)
class Edge:
    """A data edge ``src:src_output -> dst:dst_input`` or a control edge (both slots CONTROL_SLOT)."""

    id: int
    src: "Node"
    src_output: int
    dst: "Node"
    dst_input: int

    @property
    def is_control(self) -> bool:
        return self.src_output == CONTROL_SLOT

    def __repr__(self) -> str:
        if self.is_control:
            return f"Edge(^{self.src.name} -> {self.dst.name})"
        return f"Edge({self.src.name}:{self.src_output} -> {self.dst.name}:{self.dst_input})"


class Node:
    """One node: its id, its NodeDef, its edges and its typed outputs."""

    __slots__ = ("id", "node_def", "name", "op", "in_edges", "out_edges", "outputs", "inputs", "assigned_device",
                 "_op_def")

    def __init__(self, node_id: int, node_def: node_def_pb2.NodeDef) -> None:
        self.id = node_id
        self.node_def = node_def
        self.name: str = node_def.name   # names and ops never change after import; plain fields are fast
        self.op: str = node_def.op
        self.in_edges: list[Edge] = []
        self.out_edges: list[Edge] = []
        self.outputs: list[opdefs.ArgSlot] = []
        self.inputs: list[opdefs.ArgSlot] = []   # typed data-input slots, from the OpDef
        self.assigned_device = ""
        self._op_def = None

    requested_device = property(lambda self: self.node_def.device)
    op_def = property(lambda self: self._op_def)

    @property
    def is_source(self) -> bool:
        return self.id == SOURCE_ID

    @property
    def is_sink(self) -> bool:
        return self.id == SINK_ID

    @property
    def is_op(self) -> bool:
        return self.id > SINK_ID

    def attr(self, name: str, default=None):
        """The AttrValue proto of ``name``, or ``default``."""
        return self.node_def.attr[name] if name in self.node_def.attr else default

    def has_attr(self, name: str) -> bool:
        return name in self.node_def.attr

    @property
    def output_dtypes(self) -> list[int]:
        return [slot.dtype for slot in self.outputs]

    def data_inputs(self) -> list[Edge]:
        """Data in-edges sorted by input slot."""
        return sorted((e for e in self.in_edges if not e.is_control), key=lambda e: e.dst_input)

    def __repr__(self) -> str:
        return f"Node({self.id}, {self.name!r}, {self.op})"


def _parse_input(name: str) -> tuple[str, int]:
    """``"x:2"`` → ("x", 2); ``"^x"`` → ("x", CONTROL_SLOT); ``"x"`` → ("x", 0)."""
    if name.startswith("^"):
        return name[1:], CONTROL_SLOT
    node, sep, idx = name.rpartition(":")
    if sep and idx.isdigit():
        return node, int(idx)
    return name, 0


class Graph:
    """TF's view of a GraphDef (see the module docstring). Build with ``Graph(graph_def)``."""

    def __init__(self, graph_def: graph_pb2.GraphDef, *, assign_devices: bool = True,
                 check_acyclic: bool = True, check_attrs: bool = True) -> None:
        """``check_attrs=False`` skips TF's attr checks (ValidateNodeDef) for a GraphDef whose nodes were
        checked before: one a Graph was imported from, plus copies of its nodes, or a digest-checked
        persistent-cache entry written from such a graph."""
        with gc_paused():
            self._import(graph_def, assign_devices, check_acyclic, check_attrs)

    def _import(self, graph_def: graph_pb2.GraphDef, assign_devices: bool, check_acyclic: bool,
                check_attrs: bool = True) -> None:
        self._start(graph_def)
        for f in self.graph_def.library.function:  # TF's importer rejects these too (its library differs)
            seen: set[str] = set()
            for nd in f.node_def:
                if nd.name in seen:
                    raise InvalidArgumentError(f"Function '{f.signature.name}': node '{nd.name}' is not unique")
                seen.add(nd.name)
        op_defs: dict[str, object] = {}
        slot_cache = opdefs.SlotCache()
        for node_def in self.graph_def.node:
            if not node_def.name:
                raise InvalidArgumentError(f"Node with op '{node_def.op}' has an empty name")
            if node_def.name in self._by_name:
                raise InvalidArgumentError(f"Node '{node_def.name}' is not unique")
            node = Node(len(self.nodes), node_def)
            op_def = op_defs.get(node_def.op)
            if op_def is None:
                op_def = op_defs[node_def.op] = opdefs.lookup_op_def(node_def.op, self.graph_def.library)
            node._op_def = op_def
            try:
                if check_attrs and op_def.name == node_def.op and not self._functions.get(node_def.op):
                    opdefs.validate_attrs(node_def, op_def)
                node.outputs = slot_cache.slots(node_def, op_def, outputs=True)
                node.inputs = slot_cache.slots(node_def, op_def, outputs=False)
            except InvalidArgumentError as e:
                raise InvalidArgumentError(f"Node '{node_def.name}': {e}") from None
            if assign_devices:
                node.assigned_device = devices.canonical_device(node_def.device)
                node_def.device = node.assigned_device
            else:
                node.assigned_device = node_def.device
            self.nodes.append(node)
            self._by_name[node_def.name] = node
        self._build_edges()
        if check_acyclic:  # the clustering pass reports cycles itself, in TF's words
            self._check_acyclic()

    def _start(self, graph_def: graph_pb2.GraphDef) -> None:
        """Every construction path's first step: a copy of ``graph_def``, the SOURCE and SINK nodes, no other
        nodes or edges yet, nothing derived (shapes, order), and the function library by name."""
        self.graph_def = graph_pb2.GraphDef()
        self.graph_def.CopyFrom(graph_def)
        self.nodes: list[Node] = [Node(SOURCE_ID, node_def_pb2.NodeDef(name=SOURCE_NODE, op="NoOp")),
                                  Node(SINK_ID, node_def_pb2.NodeDef(name=SINK_NODE, op="NoOp"))]
        self._by_name: dict[str, Node] = {}
        self._edges: list[Edge] = []
        self._shapes: dict[str, list[Shape]] | None = None
        self._topo: list[Node] | None = None
        self._functions = {f.signature.name: f for f in self.graph_def.library.function}

    def copy(self, graph_def: graph_pb2.GraphDef | None = None) -> "Graph":
        """An independent copy — its own GraphDef, nodes and edges — made without re-importing.

        Node ids, edge ids and edge order, devices, typed slots and OpDefs are carried over as they
        are (slot lists are shared: they are never mutated), so the copy equals a fresh import of
        this graph's GraphDef at a fraction of the cost. Passes that annotate their graph (the
        clustering pass sets ``_XlaCluster``) work on a copy so the caller's graph stays untouched.
        ``graph_def``: the copy's GraphDef instead of this graph's (copied too): one such a pass made of
        this graph, its nodes in the same order with attributes added.
        """
        source = self.graph_def if graph_def is None else graph_def
        if len(self.graph_def.node) != len(self.nodes) - 2 or len(source.node) != len(self.nodes) - 2:
            return Graph(source, assign_devices=False, check_acyclic=False)   # edited: import it afresh
        with gc_paused():
            return self._copy(source)

    def _copy(self, source: graph_pb2.GraphDef) -> "Graph":
        new = Graph.__new__(Graph)
        new._start(source)
        nodes = new.nodes
        for old, node_def in zip(self.nodes[2:], new.graph_def.node):
            node = Node(old.id, node_def)
            node._op_def, node.outputs, node.inputs = old._op_def, old.outputs, old.inputs
            node.assigned_device = old.assigned_device
            nodes.append(node)
        new._by_name = {node.name: node for node in nodes[2:]}
        edges = new._edges = []
        for e in self._edges:
            src, dst = nodes[e.src.id], nodes[e.dst.id]
            edge = Edge(e.id, src, e.src_output, dst, e.dst_input)
            edges.append(edge)
            src.out_edges.append(edge)
            dst.in_edges.append(edge)
        new._shapes = self._shapes
        new._topo = None if self._topo is None else [nodes[n.id] for n in self._topo]
        return new

    def derived(self, graph_def: graph_pb2.GraphDef, copies: dict[str, str]) -> "Graph":
        """The Graph of ``graph_def``, made without importing its nodes again: ``graph_def`` is this graph's
        GraphDef with some nodes' inputs rewritten and, appended, copies of its nodes under new names
        (``copies``: new name -> the copied node's; CloneConstants' output). Each node's OpDef and typed slots
        are this graph's (they depend on its op and attrs, not its inputs); devices are assigned; edges are built
        afresh, in TF's order. Equal to ``Graph(graph_def, check_attrs=False)`` (tested) at about half the
        cost; no cycle check (a copy has its original's inputs, so no new cycle). Any other GraphDef is
        imported afresh."""
        n = len(self.nodes) - 2
        if len(graph_def.node) < n or any(graph_def.node[k].name != self.nodes[2 + k].name for k in range(n)) or \
                any(copies.get(nd.name) not in self._by_name for nd in islice(graph_def.node, n, None)):
            return Graph(graph_def, check_attrs=False)
        with gc_paused():
            new = Graph.__new__(Graph)
            new._start(graph_def)
            nodes = new.nodes
            for k, node_def in enumerate(new.graph_def.node):
                old = self.nodes[2 + k] if k < n else self._by_name[copies[node_def.name]]
                if node_def.name in new._by_name:
                    raise InvalidArgumentError(f"Node '{node_def.name}' is not unique")
                node = Node(len(nodes), node_def)
                node._op_def, node.outputs, node.inputs = old._op_def, old.outputs, old.inputs
                node.assigned_device = node_def.device = devices.canonical_device(node_def.device)
                nodes.append(node)
                new._by_name[node_def.name] = node
            new._build_edges()
        return new

    # ----- construction -----------------------------------------------------------------------
    def _add_edge(self, src: Node, src_output: int, dst: Node, dst_input: int) -> Edge:
        edge = Edge(len(self._edges), src, src_output, dst, dst_input)
        self._edges.append(edge)
        src.out_edges.append(edge)
        dst.in_edges.append(edge)
        return edge

    def _build_edges(self) -> None:
        """Create edges in the order TF's own Graph would have them (edge order drives the clustering
        pass's cycle graph). TF builds a graph with its nodes in topological id order, so an edge
        whose source has a *higher* id than its destination was added later by a pass (for example
        CloneConstants' clones): such "late" edges, and the SOURCE edges of nodes that only feed late
        edges, come after the graph's own edges and its SOURCE/SINK fix-up edges."""
        back_edges: list[tuple[Node, int, Node, int]] = []
        late_edges: list[tuple[Node, int, Node, int]] = []
        for node in self.nodes[2:]:
            data_index = 0
            seen_control: set[str] = set()
            for input_name in node.node_def.input:
                src_name, slot = _parse_input(input_name)
                src = self._by_name.get(src_name)
                if src is None:
                    raise InvalidArgumentError(f"Node '{node.name}': Unknown input node '{input_name}'")
                if slot == CONTROL_SLOT:
                    # TF drops duplicate control edges when building its Graph.
                    if src_name in seen_control:
                        continue
                    seen_control.add(src_name)
                    dst_input = CONTROL_SLOT
                else:
                    if slot >= len(src.outputs):
                        raise InvalidArgumentError(
                            f"Node '{node.name}': Connecting to invalid output {slot} of source node "
                            f"{src_name} which has {len(src.outputs)} outputs.")
                    dst_input = data_index
                    data_index += 1
                edge = (src, slot, node, dst_input)
                if src.op == "NextIteration" and node.op in ("Merge", "RefMerge"):
                    back_edges.append(edge)  # loop back edges are created last, as TF does
                elif src.id > node.id:
                    late_edges.append(edge)
                else:
                    self._add_edge(*edge)
        for edge in back_edges:
            self._add_edge(*edge)
        late_only = {e[0].id for e in late_edges} - {e.src.id for e in self._edges} - {e[0].id for e in back_edges}
        # FixupSourceAndSinkEdges: every op node gets a path from SOURCE and to SINK.
        source, sink = self.nodes[SOURCE_ID], self.nodes[SINK_ID]
        for node in self.nodes[2:]:
            if not node.in_edges and node.id not in late_only:
                self._add_edge(source, CONTROL_SLOT, node, CONTROL_SLOT)
            if not node.out_edges and node.id not in late_only:
                self._add_edge(node, CONTROL_SLOT, sink, CONTROL_SLOT)
        for edge in late_edges:
            self._add_edge(*edge)
        for node in self.nodes[2:]:
            if node.id in late_only and not node.in_edges:
                self._add_edge(source, CONTROL_SLOT, node, CONTROL_SLOT)

    def _check_acyclic(self) -> None:
        order = self.topological_order()
        if len(order) == len(self.nodes) - 2:
            return
        done = {n.id for n in order}
        stuck = [n for n in self.nodes[2:] if n.id not in done]
        cycle = _find_cycle(stuck)
        raise InvalidArgumentError(
            "Graph contains a cycle that does not pass through a loop back edge (NextIteration->Merge): "
            + " -> ".join(n.name for n in cycle))

    # ----- queries ----------------------------------------------------------------------------
    def node(self, name: str) -> Node:
        try:
            return self._by_name[name]
        except KeyError:
            raise InvalidArgumentError(f"Graph has no node named '{name}'") from None

    def get(self, name: str) -> Node | None:
        return self._by_name.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        """Number of op nodes (SOURCE/SINK excluded), like ``Graph::num_op_nodes``."""
        return len(self.nodes) - 2

    def op_nodes(self) -> Iterator[Node]:
        """Op nodes in id order."""
        return iter(self.nodes[2:])

    def edges(self) -> list[Edge]:
        """All edges in TF's creation order (``Graph::edges()``)."""
        return self._edges

    @property
    def source(self) -> Node:
        return self.nodes[SOURCE_ID]

    @property
    def sink(self) -> Node:
        return self.nodes[SINK_ID]

    @property
    def library(self):
        return self.graph_def.library

    def function(self, name: str):
        """The library FunctionDef called ``name``, or None."""
        return self._functions.get(name)

    def topological_order(self) -> list[Node]:
        """Op nodes in TF's GraphConstructor order: the ready node with the smallest id goes first.

        Loop back edges (NextIteration→Merge) are ignored, as TF does; nodes on a real cycle are
        left out (the constructor reports them). Computed once; callers must not mutate the list.
        """
        if self._topo is None:
            self._topo = self._compute_topological_order()
        return self._topo

    def _compute_topological_order(self) -> list[Node]:
        import heapq

        pending: dict[int, int] = {}
        for node in self.nodes[2:]:
            pending[node.id] = sum(1 for e in node.in_edges if e.src.is_op and not _is_back_edge(e))
        ready = [nid for nid, count in pending.items() if count == 0]
        heapq.heapify(ready)
        order: list[Node] = []
        while ready:
            node = self.nodes[heapq.heappop(ready)]
            order.append(node)
            for edge in node.out_edges:
                if edge.dst.is_op and not _is_back_edge(edge):
                    pending[edge.dst.id] -= 1
                    if pending[edge.dst.id] == 0:
                        heapq.heappush(ready, edge.dst.id)
        return order

    def output_shapes(self, node: Node | str) -> list[Shape]:
        """Static output shapes of ``node`` (computed for the whole graph on first use)."""
        if isinstance(node, str):
            node = self.node(node)
        if self._shapes is None:
            self._shapes = infer_shapes(self)
        return self._shapes.get(node.name, [None] * len(node.outputs))

    def to_networkx(self, include_control: bool = True) -> nx.MultiDiGraph:
        """A networkx view of the op nodes (edge keys are TF edge ids; attrs carry slots)."""
        import networkx as nx

        g = nx.MultiDiGraph()
        for node in self.op_nodes():
            g.add_node(node.name, op=node.op, id=node.id, device=node.assigned_device)
        for e in self._edges:
            if e.src.is_op and e.dst.is_op and (include_control or not e.is_control):
                g.add_edge(e.src.name, e.dst.name, key=e.id, src_output=e.src_output,
                           dst_input=e.dst_input, control=e.is_control)
        return g

    def to_graph_def(self) -> graph_pb2.GraphDef:
        """A copy of the GraphDef (with assigned devices and any attributes set since)."""
        out = graph_pb2.GraphDef()
        out.CopyFrom(self.graph_def)
        return out


def _is_back_edge(edge: Edge) -> bool:
    return edge.src.op == "NextIteration" and edge.dst.op in ("Merge", "RefMerge")


def _find_cycle(stuck: list[Node]) -> list[Node]:
    """One cycle among ``stuck`` nodes, for the error message (closed: first == last)."""
    import networkx as nx

    stuck_ids = {n.id for n in stuck}
    g = nx.DiGraph()
    for n in stuck:
        for e in n.in_edges:
            if e.src.id in stuck_ids and not _is_back_edge(e):
                g.add_edge(e.src.id, n.id)
    cycle = nx.find_cycle(g)
    by_id = {n.id: n for n in stuck}
    path = [by_id[u] for u, _ in cycle]
    return path + [path[0]]
