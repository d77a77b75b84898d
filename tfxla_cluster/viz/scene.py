"""Where everything of a clustering picture goes: boxes, labels and edge routes, without Graphviz.

Stage: visualization (layout). :func:`build_scene` turns a :class:`~tfxla_cluster.viz.graph_dot.Plan`
into a :class:`Scene` laid out by :func:`~tfxla_cluster.viz.layered.layered_layout` in two levels:

* inside each cluster, its members (and the edges between them) are laid out on their own; the
  cluster's expanded box is that layout plus a margin and a header line;
* at the top level, every unclustered node and every cluster is one box — the expanded box, or the
  small collapsed box when the plan collapses clusters — and edges between them are merged per
  (source box, target box, data/control) and routed between the boxes.

Both sizes of every cluster box are kept, so the HTML page can expand or collapse a cluster without
a new layout: the boxes right of / below the cluster's centre move by how much it grew (this keeps
boxes apart and keeps the picture's shape, so a reader does not lose their place). Edges that enter
or leave a cluster attach to the cluster's border. Label widths are estimated from character
counts (no font metrics are available in Python); the estimate errs wide.
"""
from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field

from tfxla_cluster.viz.dot_text import shorten
from tfxla_cluster.viz.graph_dot import CONTROL_COLOR, CROSSING_COLOR, EDGE_COLOR, Plan
from tfxla_cluster.viz.layered import layered_layout
from tfxla_cluster.viz.model import ClusterView, NodeView, reason_fill

FONT = 10.0                 # node label font size (px)
CHAR_W = 0.6 * FONT         # estimated advance of one character
LINE_H = 12.0
PAD_X, PAD_Y = 8.0, 5.0
CLUSTER_FONT = 11.0
CLUSTER_PAD = 10.0
CLUSTER_HEAD = 18.0         # the expanded box's header line
NODE_SEP, RANK_SEP = 14.0, 34.0
ARROW = 7.0


@dataclass
class Box:
    """A laid-out node: ``lines`` of label, size, and centre in its parent's coordinates."""

    node: NodeView
    lines: list[str]
    w: float
    h: float
    x: float = 0.0
    y: float = 0.0
    fill: str = "#ffffff"
    stroke: str = "#8c8c8c"
    classes: str = ""


@dataclass
class Edge:
    """One drawn edge: endpoints (box keys), waypoints, style, and the TF edges it stands for."""

    src: str
    dst: str
    points: list[tuple[float, float]]
    control: bool
    crossing: bool
    tensors: list[str]
    count: int
    src_ports: list[str] = field(default_factory=list)   # members the edge leaves from / goes to, when
    dst_ports: list[str] = field(default_factory=list)   # that end is a cluster (drawn when it is expanded)

    @property
    def css(self) -> str:
        return "edge-control" if self.control else ("crossing" if self.crossing else "edge-data")

    @property
    def color(self) -> str:
        return CONTROL_COLOR if self.control else (CROSSING_COLOR if self.crossing else EDGE_COLOR)

    @property
    def width(self) -> float:
        base = 1.8 if self.crossing and not self.control else 1.0
        return max(base, min(6.0, 1.0 + math.log2(self.count))) if self.count > 2 else base


@dataclass
class ClusterBox:
    """A cluster: its members laid out inside (local coordinates from the box's top-left), its
    expanded and collapsed sizes, and whether the picture starts with it collapsed."""

    cluster: ClusterView
    members: list[Box]
    edges: list[Edge]
    expanded: tuple[float, float]
    collapsed: tuple[float, float]
    collapsed_lines: list[str]
    head: str
    is_collapsed: bool
    x: float = 0.0       # centre, top-level coordinates
    y: float = 0.0

    @property
    def size(self) -> tuple[float, float]:
        return self.collapsed if self.is_collapsed else self.expanded

    def member_boxes(self) -> dict[str, tuple[float, float, float, float]]:
        """Each member's (left, top, width, height) inside the expanded box."""
        return {b.node.name: (b.x - b.w / 2, b.y - b.h / 2, b.w, b.h) for b in self.members}


@dataclass
class Scene:
    """The laid-out picture. ``items`` are the top-level boxes in drawing order (key ``n:<name>`` or
    ``c:<cluster>``); ``edges`` the top-level edges; coordinates start at (0, 0)."""

    plan: Plan
    items: dict[str, Box | ClusterBox]
    edges: list[Edge]
    width: float
    height: float
    clusters: dict[str, ClusterBox] = field(default_factory=dict)


def text_width(text: str, font: float = FONT) -> float:
    return len(text) * 0.6 * font


def _node_box(plan: Plan, node: NodeView) -> Box:
    lines = [shorten(node.name, plan.max_label)]
    if node.cluster:
        if node.op != node.name:
            lines.append(node.op)
        cluster = plan.model.clusters[node.cluster]
        fill, stroke, classes = cluster.fill, cluster.border, "clustered"
    else:
        lines.append(f"{shorten(node.op, plan.max_label)} · [{node.code}]")
        fill, stroke, classes = reason_fill(node.code), "#8c8c8c", f"unclustered reason-{node.code}"
    fc = plan.focus
    if fc is not None:
        if node.name == fc.center:
            classes += " focus-center"
        if node.name in fc.hidden:
            lines.append(f"+{fc.hidden[node.name]} hidden")
            classes += " boundary"
    w = max(text_width(s) for s in lines) + 2 * PAD_X
    h = len(lines) * LINE_H + 2 * PAD_Y
    return Box(node, lines, w, h, fill=fill, stroke=stroke, classes=classes)


def _shown_count(cluster: ClusterView, shown: int) -> str:
    if shown == len(cluster.members):
        return f"{shown} node{'s' if shown != 1 else ''}"
    return f"{shown} of {len(cluster.members)} nodes shown"


MAX_PORTS = 16   # an edge into an expanded cluster fans out to at most this many members, else ends at the box


def _ports(names: list[str]) -> list[str]:
    unique = list(dict.fromkeys(names))
    return unique if len(unique) <= MAX_PORTS else []


def _merge_edges(plan: Plan, key_of) -> list[Edge]:
    """Edges between the boxes ``key_of(node name)`` names (None: not drawn), merged per box pair."""
    model = plan.model
    merged: dict[tuple[str, str, bool], list] = {}
    for e in model.edges:
        a, b = key_of(e.src), key_of(e.dst)
        if a is None or b is None or a == b:
            continue
        merged.setdefault((a, b, e.control), []).append(e)
    out = []
    for (a, b, control), group in merged.items():
        first = group[0]
        crossing = model.nodes[first.src].cluster != model.nodes[first.dst].cluster
        tensors = [f"^{e.src} → {e.dst}" if e.control else f"{e.src}:{e.src_output} → {e.dst}:{e.dst_input}"
                   for e in group[:6]]
        if len(group) > 6:
            tensors.append(f"… ({len(group)} edges)")
        out.append(Edge(a, b, [], control, crossing, tensors, len(group),
                        _ports([e.src for e in group]) if a.startswith("c:") else [],
                        _ports([e.dst for e in group]) if b.startswith("c:") else []))
    return out


def build_scene(plan: Plan, *, interiors: bool = True) -> Scene:
    """Lay out ``plan``. With ``interiors`` every cluster's inside is laid out even when it starts
    collapsed (the HTML page expands clusters); without, collapsed clusters skip it (``.svg``)."""
    model = plan.model
    visible = {n.name for n in plan.visible}
    by_cluster: dict[str, list[NodeView]] = collections.defaultdict(list)
    items: dict[str, Box | ClusterBox] = {}
    for node in plan.visible:
        if node.cluster:
            by_cluster[node.cluster].append(node)
    clusters: dict[str, ClusterBox] = {}
    for cluster in model.clusters.values():
        members = by_cluster.get(cluster.name)
        if not members:
            continue
        clusters[cluster.name] = _cluster_box(plan, cluster, members, visible,
                                              interior=interiors or not plan.collapse)
    # Top-level boxes in TF node order: a cluster takes the place of its first visible member.
    for node in plan.visible:
        if node.cluster:
            key = "c:" + node.cluster
            if key not in items:
                items[key] = clusters[node.cluster]
        else:
            items["n:" + node.name] = _node_box(plan, node)

    def key_of(name: str) -> str | None:
        if name not in visible:
            return None
        node = model.nodes[name]
        return "c:" + node.cluster if node.cluster else "n:" + name

    edges = _merge_edges(plan, key_of)
    sizes = {k: ((v.size if isinstance(v, ClusterBox) else (v.w, v.h))) for k, v in items.items()}
    layout = layered_layout(list(items), sizes, [(e.src, e.dst) for e in edges], node_sep=NODE_SEP * 1.5,
                            rank_sep=RANK_SEP * 1.2)
    for key, item in items.items():
        item.x, item.y = layout.pos[key]
    for e, route in zip(edges, layout.routes):
        e.points = route
    return Scene(plan, items, edges, layout.width, layout.height, clusters)


def _cluster_box(plan: Plan, cluster: ClusterView, members: list[NodeView], visible: set[str],
                 interior: bool) -> ClusterBox:
    head = f"{cluster.name} · {_shown_count(cluster, len(members))}"
    collapsed_lines = [cluster.name, _shown_count(cluster, len(members)), shorten(cluster.histogram_text(3), 48)]
    cw = max(text_width(s, CLUSTER_FONT) for s in collapsed_lines) + 2 * PAD_X
    ch = len(collapsed_lines) * (CLUSTER_FONT + 3) + 2 * PAD_Y
    boxes: list[Box] = []
    edges: list[Edge] = []
    ew, eh = cw, ch
    if interior:
        boxes = [_node_box(plan, n) for n in members]
        inside = {n.name for n in members}
        edges = _merge_edges(plan, lambda name: name if name in inside and name in visible else None)
        layout = layered_layout([b.node.name for b in boxes], {b.node.name: (b.w, b.h) for b in boxes},
                                [(e.src, e.dst) for e in edges], node_sep=NODE_SEP, rank_sep=RANK_SEP)
        ox, oy = CLUSTER_PAD, CLUSTER_HEAD + CLUSTER_PAD
        for b in boxes:
            x, y = layout.pos[b.node.name]
            b.x, b.y = x + ox, y + oy
        for e, route in zip(edges, layout.routes):
            e.points = [(x + ox, y + oy) for x, y in route]
        ew = max(layout.width + 2 * CLUSTER_PAD, text_width(head, CLUSTER_FONT + 1) + 2 * CLUSTER_PAD)
        eh = layout.height + CLUSTER_HEAD + 2 * CLUSTER_PAD
        # Members centred when the header is wider than the layout.
        extra = (ew - 2 * CLUSTER_PAD - layout.width) / 2
        if extra > 0:
            for b in boxes:
                b.x += extra
            for e in edges:
                e.points = [(x + extra, y) for x, y in e.points]
    return ClusterBox(cluster, boxes, edges, (ew, eh), (cw, ch), collapsed_lines, head, plan.collapse)


# ----- edge geometry (the page's script computes the same; see picture.js edgePath) -----------------
Rect = tuple[float, float, float, float]


def edge_path(src: Rect, dst: Rect, points: list[tuple[float, float]], src_ports: list[Rect] = (),
              dst_ports: list[Rect] = ()) -> tuple[str, str]:
    """(SVG path ``d`` of the line, path ``d`` of the arrowheads) for an edge from box ``src`` to box
    ``dst`` (each ``left, top, width, height``) through ``points``: vertical S-curves between layers.
    With ports (member boxes of an expanded cluster at that end) the line leaves/enters the cluster's
    border above/below their mean and fans out to each of them, one arrowhead per target member."""
    sl, st, sw, sh = src
    dl, dt, dw, dh = dst
    downward = st + sh / 2 <= dt + dh / 2
    nxt = points[0] if points else (dl + dw / 2, dt)
    prv = points[-1] if points else (sl + sw / 2, st)
    if src_ports:
        nxt = (sum(p[0] + p[2] / 2 for p in src_ports) / len(src_ports), nxt[1])
    if dst_ports:
        prv = (sum(p[0] + p[2] / 2 for p in dst_ports) / len(dst_ports), prv[1])
    x0 = min(max(nxt[0], sl + 0.2 * sw), sl + 0.8 * sw)
    x1 = min(max(prv[0], dl + 0.2 * dw), dl + 0.8 * dw)
    y0 = st + sh if downward else st
    border = dt if downward else dt + dh
    y1 = border if dst_ports else (border - ARROW if downward else border + ARROW)
    d = [_curve([(x0, y0), *points, (x1, y1)])]
    arrows = []
    for p in src_ports:   # member → the cluster's border
        px, py = p[0] + p[2] / 2, (p[1] + p[3] if downward else p[1])
        d.append(_curve([(px, py), (x0, y0)]))
    if dst_ports:
        for p in dst_ports:
            px, tip = p[0] + p[2] / 2, (p[1] if downward else p[1] + p[3])
            base = tip - ARROW if downward else tip + ARROW
            d.append(_curve([(x1, y1), (px, base)]))
            arrows.append(_arrow(px, base, tip))
    else:
        arrows.append(_arrow(x1, y1, border))
    return " ".join(d), " ".join(arrows)


def _curve(pts: list[tuple[float, float]]) -> str:
    out = [f"M{pts[0][0]:.1f},{pts[0][1]:.1f}"]
    for (ax, ay), (bx, by) in zip(pts, pts[1:]):
        my = (ay + by) / 2
        out.append(f"C{ax:.1f},{my:.1f} {bx:.1f},{my:.1f} {bx:.1f},{by:.1f}")
    return " ".join(out)


def _arrow(x: float, base: float, tip: float) -> str:
    half = ARROW / 2
    return f"M{x - half:.1f},{base:.1f} L{x + half:.1f},{base:.1f} L{x:.1f},{tip:.1f} Z"
