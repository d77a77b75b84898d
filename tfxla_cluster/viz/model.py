"""What the pictures show: a clustering result reduced to nodes, edges and clusters with their details.

Stage: visualization (reads the clustering output, never changes it). :func:`build_model` turns a
:class:`~tfxla_cluster.jit.mark_for_compilation.MarkResult` into a :class:`VizModel`: for every op node
its cluster or reason code, TF's reason text and our hint, device, output dtypes and static shapes and
a short form of its attributes; every edge between op nodes; and for every cluster its size, op
histogram and the tensors that cross its boundary. The DOT, SVG, HTML and TensorBoard writers all read
this one model, so they agree on every fact. Node order is TF's node id order; clusters are in name
order with a stable index (and colour) each.

:func:`focus` selects the undirected neighbourhood of a node (``--around NODE --depth K``) and marks the
boundary: selected nodes that have neighbours left out.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field

import numpy as np
from tensorflow.core.framework import attr_value_pb2, types_pb2

from tfxla_cluster.errors import InvalidArgumentError, NotFoundError
from tfxla_cluster.jit.explain import hint_for
from tfxla_cluster.jit.mark_for_compilation import MarkResult
from tfxla_cluster.tfops.reasons import ReasonCode as R
from tfxla_cluster.viz.dot_text import CLUSTER_FILLS, safe_id, shade, shorten, tint

# Attributes that are bookkeeping, not meaning, in a tooltip.
_HIDDEN_ATTRS = frozenset({"_output_shapes", "_XlaCluster", "_XlaAlreadyClustered"})
_MAX_ATTRS = 10
_ATTR_CHARS = 60

# Fills for unclustered nodes by reason code; codes not listed take a neutral grey.
REASON_FILLS: dict[str, str] = {
    R.NO_XLA_KERNEL: "#f4cccc",
    R.MIN_CLUSTER_SIZE: "#fff2cc",
    R.DEVICE_POLICY: "#e6e6e6",
    R.TOP_LEVEL_ARG_RETVAL: "#eeeeee",
    R.STATEFUL_RANDOM: "#f9cb9c",
    R.UNIQUE: "#ead1dc",
    R.STRING_CONST: "#d9d2e9",
    R.VARIANT: "#d0e0e3",
    R.ASSERT_OR_CHECKNUMERICS: "#fce5cd",
    R.DECLUSTERED_FILL: "#d9ead3",
    R.NOT_IN_OPS_TO_CLUSTER: "#cfe2f3",
    R.XLA_COMPILE_FALSE: "#e6b8af",
}
DEFAULT_REASON_FILL = "#f3f3f3"


@dataclass(slots=True)
class NodeView:
    """One op node as the pictures show it."""

    index: int              # position in TF's node id order; the DOT id is ``n{index}``
    name: str
    op: str
    cluster: str | None
    code: str               # Decision.code ("clustered" for clustered nodes)
    reason: str             # TF's reason text
    hint: str               # plain-words gloss of the reason, or ''
    device: str             # short form: "CPU:0"
    outputs: list[str]      # one "float32[2,3]" per output
    attrs: list[tuple[str, str]]
    related: tuple[str, ...] = ()

    def details(self) -> dict:
        """The tooltip facts, JSON-ready."""
        return {"name": self.name, "op": self.op, "cluster": self.cluster, "code": self.code,
                "reason": self.reason, "hint": self.hint, "device": self.device, "outputs": self.outputs,
                "attrs": [[k, v] for k, v in self.attrs], "related": list(self.related)}

    def details_text(self) -> str:
        """The same facts as plain lines (SVG ``<title>``, DOT tooltips)."""
        lines = [f"{self.name} ({self.op})", f"device: {self.device or '?'}"]
        if self.outputs:
            lines.append("outputs: " + ", ".join(self.outputs))
        lines += [f"  {k} = {v}" for k, v in self.attrs]
        if self.cluster:
            lines.append(f"cluster: {self.cluster}")
        else:
            lines.append(f"not clustered [{self.code}]: {self.reason}")
            if self.hint:
                lines.append(f"  ({self.hint})")
        return "\n".join(lines)


@dataclass(slots=True)
class EdgeView:
    src: str
    dst: str
    src_output: int
    dst_input: int
    control: bool


@dataclass(slots=True)
class ClusterView:
    """One cluster: members in node id order, op histogram (most common first) and boundary."""

    index: int
    name: str
    members: list[str]
    op_histogram: list[tuple[str, int]]
    inputs: list[str]            # tensors "node:k" made outside, read inside (first-use order)
    outputs: list[str]           # tensors made inside, read outside
    control_inputs: int = 0
    control_outputs: int = 0

    @property
    def dom_id(self) -> str:
        """The id of the cluster's SVG group: ``cluster_<name>`` (``cluster_cluster_0``)."""
        return "cluster_" + safe_id(self.name)

    @property
    def fill(self) -> str:
        return CLUSTER_FILLS[self.index % len(CLUSTER_FILLS)]

    @property
    def box_fill(self) -> str:
        return tint(self.fill, 0.65)

    @property
    def border(self) -> str:
        return shade(self.fill, 0.45)

    def histogram_text(self, limit: int = 0) -> str:
        items = self.op_histogram if not limit else self.op_histogram[:limit]
        text = ", ".join(f"{op}×{n}" if n > 1 else op for op, n in items)
        if limit and len(self.op_histogram) > limit:
            text += f", … (+{len(self.op_histogram) - limit} ops)"
        return text


@dataclass
class VizModel:
    """Nodes (TF id order), edges between op nodes, clusters (name order) and the run's context."""

    title: str
    nodes: dict[str, NodeView]
    edges: list[EdgeView]
    clusters: dict[str, ClusterView]
    summary: str                       # TF's "*** Clustering info" text
    flags: dict[str, str] = field(default_factory=dict)   # env var -> value that reproduces the flags
    global_jit_level: int = 0
    cpu_global_jit: bool = False
    skipped: str = ""
    _adjacency: dict[str, set[str]] | None = field(default=None, repr=False)

    @property
    def unclustered(self) -> list[NodeView]:
        return [n for n in self.nodes.values() if not n.cluster]

    def reason_counts(self) -> list[tuple[str, int]]:
        """Unclustered nodes per reason code, most common first."""
        counts = collections.Counter(n.code for n in self.nodes.values() if not n.cluster)
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))

    def neighbours(self, name: str) -> set[str]:
        """Op nodes joined to ``name`` by any edge, either direction."""
        if self._adjacency is None:
            adj: dict[str, set[str]] = collections.defaultdict(set)
            for e in self.edges:
                adj[e.src].add(e.dst)
                adj[e.dst].add(e.src)
            self._adjacency = adj
        return self._adjacency.get(name, set())


def reason_fill(code: str) -> str:
    return REASON_FILLS.get(code, DEFAULT_REASON_FILL)


# ----- formatting --------------------------------------------------------------------------------
_DTYPE_ALIASES = {"float": "float32", "double": "float64", "half": "float16"}


def dtype_short(dtype: int) -> str:
    """TF's Python spelling of a DataType enum: DT_FLOAT → float32, DT_INT32_REF → int32_ref."""
    ref = dtype > 100
    base = dtype - 100 if ref else dtype
    try:
        name = types_pb2.DataType.Name(base)[3:].lower()
    except ValueError:
        return f"dtype{dtype}"
    name = _DTYPE_ALIASES.get(name, name)
    return name + "_ref" if ref else name


def shape_text(shape) -> str:
    """``[2,?]`` for a static shape; `` (unknown shape)`` for unknown rank."""
    if shape is None:
        return " (unknown shape)"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def _proto_shape_text(shape) -> str:
    if shape.unknown_rank:
        return "<unknown>"
    return "[" + ",".join("?" if d.size < 0 else str(d.size) for d in shape.dim) + "]"


_CONTENT_DTYPES = {
    types_pb2.DT_FLOAT: "<f4", types_pb2.DT_DOUBLE: "<f8", types_pb2.DT_HALF: "<f2",
    types_pb2.DT_INT32: "<i4", types_pb2.DT_INT64: "<i8", types_pb2.DT_INT16: "<i2", types_pb2.DT_INT8: "i1",
    types_pb2.DT_UINT8: "u1", types_pb2.DT_UINT16: "<u2", types_pb2.DT_UINT32: "<u4",
    types_pb2.DT_UINT64: "<u8", types_pb2.DT_BOOL: "?",
}


def _values_text(vals: list, more: bool) -> str:
    shown = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in vals[:4])
    return " {" + shown + (", …" if more or len(vals) > 4 else "") + "}"


def _tensor_text(t) -> str:
    text = dtype_short(t.dtype) + _proto_shape_text(t.tensor_shape)
    # The first few values of a constant, from whichever field holds them.
    if t.tensor_content and t.dtype in _CONTENT_DTYPES:
        dtype = np.dtype(_CONTENT_DTYPES[t.dtype])
        count = min(5, len(t.tensor_content) // dtype.itemsize)
        vals = np.frombuffer(t.tensor_content, dtype=dtype, count=count).tolist()
        return text + _values_text(vals, len(t.tensor_content) > count * dtype.itemsize)
    for field_name in ("float_val", "double_val", "int_val", "int64_val", "bool_val"):
        vals = list(getattr(t, field_name))
        if vals:
            return text + _values_text(vals, False)
    if t.string_val:
        return text + " {" + ", ".join(repr(s.decode("utf-8", "replace"))[:20] for s in t.string_val[:2]) + "}"
    return text


def short_attr(value: attr_value_pb2.AttrValue, limit: int = _ATTR_CHARS) -> str:
    """An AttrValue in a few characters: ``float32``, ``[1,2]``, ``"SAME"``, ``float32[8,16]``…"""
    kind = value.WhichOneof("value")
    if kind == "s":
        text = repr(value.s.decode("utf-8", "replace"))
    elif kind in ("i", "b"):
        text = str(getattr(value, kind))
    elif kind == "f":
        text = f"{value.f:g}"
    elif kind == "type":
        text = dtype_short(value.type)
    elif kind == "shape":
        text = _proto_shape_text(value.shape)
    elif kind == "tensor":
        text = _tensor_text(value.tensor)
    elif kind == "func":
        text = value.func.name
    elif kind == "placeholder":
        text = "$" + value.placeholder
    elif kind == "list":
        lst = value.list
        parts: list[str] = []
        parts += [repr(s.decode("utf-8", "replace")) for s in lst.s]
        parts += [str(i) for i in lst.i]
        parts += [f"{f:g}" for f in lst.f]
        parts += [str(b) for b in lst.b]
        parts += [dtype_short(t) for t in lst.type]
        parts += [_proto_shape_text(s) for s in lst.shape]
        parts += [f.name for f in lst.func]
        text = "[" + ",".join(parts) + "]"
    else:
        text = ""
    return shorten(text, limit)


def _short_device(device: str) -> str:
    return device.rsplit("/device:", 1)[-1] if "/device:" in device else device


# ----- building ----------------------------------------------------------------------------------
def build_model(result: MarkResult, flags=None, *, title: str = "", shapes: bool = True) -> VizModel:
    """The :class:`VizModel` of a clustering result.

    ``flags`` (a :class:`~tfxla_cluster.flags.Flags`) is only shown, as the flags in effect. With
    ``shapes`` the static output shapes are inferred (TF's shape inference, once per graph); a graph
    whose shapes cannot be inferred is still drawn, with unknown shapes.
    """
    graph = result.graph
    # Shape inference is best effort already (graph/shapes.py: a graph TF cannot shape has unknown
    # shapes), so an exception from it is a bug and propagates.
    shape_of = graph.output_shapes if shapes else (lambda node: [None] * len(node.outputs))
    nodes: dict[str, NodeView] = {}
    for index, node in enumerate(graph.op_nodes()):
        d = result.decisions.get(node.name)
        cluster = d.cluster if d else None
        code = d.code if d else "unknown"
        reason = d.reason if d else "no decision recorded"
        out_shapes = shape_of(node)
        outputs = [dtype_short(slot.dtype) + shape_text(out_shapes[i] if i < len(out_shapes) else None)
                   for i, slot in enumerate(node.outputs)]
        node_attrs = [(k, short_attr(v)) for k, v in sorted(node.node_def.attr.items())
                      if k not in _HIDDEN_ATTRS][:_MAX_ATTRS]
        nodes[node.name] = NodeView(index, node.name, node.op, cluster, code, reason,
                                    "" if cluster else hint_for(code, node.op),
                                    _short_device(node.assigned_device), outputs, node_attrs,
                                    tuple(d.related) if d else ())
    edges = [EdgeView(e.src.name, e.dst.name, e.src_output, e.dst_input, e.is_control)
             for e in graph.edges() if e.src.is_op and e.dst.is_op]
    clusters = _cluster_views(result, nodes, edges)
    env = flags.env_strings() if flags is not None else {}
    return VizModel(title=title, nodes=nodes, edges=edges, clusters=clusters, summary=result.summary(),
                    flags=env, global_jit_level=int(result.global_jit_level),
                    # TF's XlaAutoClusteringActivity: the flag, or the session config's option.
                    cpu_global_jit=bool(result.cpu_global_jit
                                        or (flags is not None and flags.tf_xla_cpu_global_jit)),
                    skipped=result.skipped)


def _cluster_views(result: MarkResult, nodes: dict[str, NodeView],
                   edges: list[EdgeView]) -> dict[str, ClusterView]:
    names = sorted(result.clusters)
    inputs: dict[str, dict[str, None]] = {n: {} for n in names}    # dicts keep first-seen order
    outputs: dict[str, dict[str, None]] = {n: {} for n in names}
    ctl_in: collections.Counter = collections.Counter()
    ctl_out: collections.Counter = collections.Counter()
    for e in edges:
        cs, cd = nodes[e.src].cluster, nodes[e.dst].cluster
        if cs == cd:
            continue
        tensor = f"{e.src}:{e.src_output}"
        if e.control:
            if cd:
                ctl_in[cd] += 1
            if cs:
                ctl_out[cs] += 1
            continue
        if cd:
            inputs[cd][tensor] = None
        if cs:
            outputs[cs][tensor] = None
    views = {}
    for index, name in enumerate(names):
        members = sorted(result.clusters[name], key=lambda m: nodes[m].index if m in nodes else 1 << 62)
        hist = collections.Counter(nodes[m].op for m in members if m in nodes)
        views[name] = ClusterView(index, name, members, sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])),
                                  list(inputs[name]), list(outputs[name]), ctl_in[name], ctl_out[name])
    return views


# ----- focus -------------------------------------------------------------------------------------
@dataclass(slots=True)
class Focus:
    """A node's neighbourhood: ``depth[name]`` = hops from the centre; ``hidden[name]`` = how many of a
    boundary node's neighbours were left out."""

    center: str
    radius: int
    depth: dict[str, int]
    hidden: dict[str, int]

    def __contains__(self, name: str) -> bool:
        return name in self.depth


def focus(model: VizModel, center: str, radius: int) -> Focus:
    """Undirected breadth-first neighbourhood of ``center`` up to ``radius`` hops (data and control)."""
    if center not in model.nodes:
        close = [n for n in model.nodes if center.lower() in n.lower()][:3]
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise NotFoundError(f"graph has no node named '{center}'{hint}")
    if radius < 0:
        raise InvalidArgumentError(f"--depth must be >= 0, got {radius}")
    depth = {center: 0}
    frontier = [center]
    for hop in range(1, radius + 1):
        nxt = []
        for name in frontier:
            for other in sorted(model.neighbours(name), key=lambda n: model.nodes[n].index):
                if other not in depth:
                    depth[other] = hop
                    nxt.append(other)
        frontier = nxt
    hidden = {}
    for name in depth:
        out = sum(1 for other in model.neighbours(name) if other not in depth)
        if out:
            hidden[name] = out
    return Focus(center, radius, depth, hidden)
