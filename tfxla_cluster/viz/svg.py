"""The clustering picture as SVG, drawn from our own layout (no Graphviz), and made findable.

Stage: visualization. :func:`cluster_svg` lays out a plan (:func:`~tfxla_cluster.viz.scene.build_scene`)
and writes SVG markup in which tests, scripts and the HTML page can find things:

* each cluster is one ``<g class="cluster xla-cluster" id="cluster_<name>" data-cluster="<name>">``
  that contains its members' groups — or, collapsed, ``<g class="node xla-cluster collapsed">``;
* each node is ``<g class="node ..." id="n<index>" data-node="<TF name>" data-op=... data-code=...>``,
  its ``<title>`` holding the node's details (op, attrs, outputs, device, reason), which browsers show
  on hover;
* each edge is ``<g class="edge ..." data-src=... data-dst=...>`` titled ``src → dst`` and the tensors;
* the legend is ``<g class="legend">``, not a node.

Top-level boxes carry ``data-item="<k>"`` and top-level edges ``data-e="<k>"``: the page's script
moves them when a cluster is expanded or collapsed (:func:`cluster_inner` writes the other state of a
cluster for it). Every id gets ``prefix`` so several pictures can share a page. All text is escaped.
"""
from __future__ import annotations

import html

from tfxla_cluster.viz.graph_dot import CONTROL_COLOR, CROSSING_COLOR, Plan
from tfxla_cluster.viz.model import reason_fill
from tfxla_cluster.viz.scene import (CLUSTER_FONT, FONT, LINE_H, PAD_Y, Box, ClusterBox, Edge, Scene,
                                     build_scene, edge_path, text_width)

SVG_NS = "http://www.w3.org/2000/svg"
MARGIN = 12.0
TITLE_H = 24.0
LEGEND_GAP = 30.0
LEGEND_MAX_CLUSTERS = 16
BOLD = ' font-weight="bold"'


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def cluster_svg(plan: Plan, *, prefix: str = "") -> str:
    """The laid-out, annotated SVG of a clustering :class:`Plan` (an ``<svg>`` element, no prolog)."""
    return scene_svg(build_scene(plan, interiors=False), prefix)


def item_name(key: str) -> str:
    return key.split(":", 1)[1]


def scene_svg(scene: Scene, prefix: str = "", titles: bool = True) -> str:
    """The ``<svg>`` element of a laid-out scene. Without ``titles`` nodes have no ``<title>`` (the
    HTML page shows the same facts in its own panel, from its data; this keeps big pages small)."""
    model = scene.plan.model
    title = model.title or "graph"
    if scene.plan.focus is not None:
        title += f" — around {scene.plan.focus.center}, depth {scene.plan.focus.radius}"
    keys = list(scene.items)
    item_index = {k: i for i, k in enumerate(keys)}
    parts = []
    boxes = {}
    for k, item in scene.items.items():
        w, h = item.size if isinstance(item, ClusterBox) else (item.w, item.h)
        boxes[k] = (item.x - w / 2, item.y - h / 2, w, h)
    edge_parts = []
    for k, e in enumerate(scene.edges):
        edge_parts.append(edge_svg(e, boxes[e.src], boxes[e.dst], f"{prefix}e{k}", item_name(e.src),
                                   item_name(e.dst), k, ports(scene, e.src, e.src_ports, boxes),
                                   ports(scene, e.dst, e.dst_ports, boxes)))
    parts.append('<g class="edges">' + "".join(edge_parts) + "</g>")
    for k, item in scene.items.items():
        left, top, _, _ = boxes[k]
        tr = f' data-item="{item_index[k]}" transform="translate({left:.1f},{top:.1f})"'
        if isinstance(item, ClusterBox):
            state = "node xla-cluster collapsed" if item.is_collapsed else "cluster xla-cluster expanded"
            parts.append(f'<g id="{prefix}{item.cluster.dom_id}" class="{state}" data-cluster="{_e(item.cluster.name)}"'
                         f"{tr}>{cluster_inner(item, prefix, item.is_collapsed, titles)}</g>")
        else:
            parts.append(node_svg(item, prefix, tr, titles=titles))
    width, height = scene.width, scene.height
    if scene.plan.legend:
        legend, lw, lh = legend_svg(scene)
        parts.append(f'<g id="{prefix}legend" class="legend" data-item="{len(keys)}" '
                     f'transform="translate({width + LEGEND_GAP:.1f},0)">{legend}</g>')
        width += LEGEND_GAP + lw
        height = max(height, lh)
    full_w, full_h = width + 2 * MARGIN, height + 2 * MARGIN + TITLE_H
    return (f'<svg xmlns="{SVG_NS}" class="tfxla-picture" width="{full_w:.0f}px" height="{full_h:.0f}px" '
            f'viewBox="0 0 {full_w:.0f} {full_h:.0f}" font-family="Helvetica, Arial, sans-serif">'
            f'<g id="{prefix}graph0" class="graph"><title>{_e(model.title or "graph")}</title>'
            f'<text class="graph-title" x="{MARGIN}" y="{MARGIN + 10}" font-size="14">{_e(title)}</text>'
            f'<g class="scene" transform="translate({MARGIN},{MARGIN + TITLE_H})">{"".join(parts)}</g></g></svg>')


def ports(scene: Scene, key: str, names: list[str], boxes: dict) -> list[tuple]:
    """Absolute boxes of the members ``names`` of the cluster ``key`` if it is drawn expanded."""
    item = scene.items[key]
    if not names or not isinstance(item, ClusterBox) or item.is_collapsed:
        return []
    left, top = boxes[key][0], boxes[key][1]
    local = item.member_boxes()
    return [(left + local[n][0], top + local[n][1], local[n][2], local[n][3]) for n in names if n in local]


def node_svg(b: Box, prefix: str, extra: str = "", at: tuple[float, float] | None = None,
             titles: bool = True) -> str:
    """One node's group; ``at`` (top-left) for members placed inside a cluster box."""
    n = b.node
    if at is not None:
        extra += f' transform="translate({at[0]:.1f},{at[1]:.1f})"'
    cluster = f' data-cluster="{_e(n.cluster)}"' if n.cluster else ""
    stroke, width, dash = b.stroke, 1.0, ""
    if "focus-center" in b.classes:
        stroke, width = "#c00000", 3.0
    shapes = [f'<rect class="shape" width="{b.w:.1f}" height="{b.h:.1f}" rx="4" fill="{b.fill}" stroke="{stroke}" '
              f'stroke-width="{width}"{dash}/>']
    if "boundary" in b.classes:   # neighbours left out: a double, dashed border
        shapes.append(f'<rect x="2.5" y="2.5" width="{b.w - 5:.1f}" height="{b.h - 5:.1f}" rx="3" fill="none" '
                      f'stroke="{stroke}" stroke-dasharray="3,2"/>')
    title = f"<title>{_e(n.details_text())}</title>" if titles else ""
    texts = "".join(f'<text x="{b.w / 2:.1f}" y="{PAD_Y + LINE_H * i + 9.5:.1f}" text-anchor="middle" '
                    f'font-size="{FONT:g}">{_e(line)}</text>' for i, line in enumerate(b.lines))
    return (f'<g id="{prefix}n{n.index}" class="node {b.classes}" data-node="{_e(n.name)}" data-op="{_e(n.op)}" '
            f'data-code="{_e(n.code)}"{cluster}{extra}>{title}{"".join(shapes)}'
            f"{texts}</g>")


def edge_svg(e: Edge, src: tuple, dst: tuple, dom_id: str, src_name: str, dst_name: str,
             index: int | None = None, src_ports: list = (), dst_ports: list = ()) -> str:
    d, arrow = edge_path(src, dst, e.points, src_ports, dst_ports)
    dash = ' stroke-dasharray="5,3"' if e.control else ""
    data_e = f' data-e="{index}"' if index is not None else ""
    title = f"{src_name} → {dst_name}\n" + "\n".join(e.tensors)
    return (f'<g id="{dom_id}" class="edge {e.css}"{data_e} data-src="{_e(src_name)}" data-dst="{_e(dst_name)}">'
            f"<title>{_e(title)}</title><path d=\"{d}\" fill=\"none\" stroke=\"{e.color}\" "
            f'stroke-width="{e.width:.1f}"{dash}/><path class="arrow" d="{arrow}" fill="{e.color}" stroke="{e.color}"/></g>')


def cluster_inner(cb: ClusterBox, prefix: str, collapsed: bool, titles: bool = True) -> str:
    """The inside of a cluster's group, collapsed (one 3-D box) or expanded (its members)."""
    c = cb.cluster
    if collapsed:
        w, h = cb.collapsed
        tip = (f"{c.name}: {len(c.members)} nodes\n{c.histogram_text()}\n"
               f"inputs: {len(c.inputs)}  outputs: {len(c.outputs)}\n(click to expand)")
        texts = "".join(f'<text x="{w / 2:.1f}" y="{PAD_Y + (CLUSTER_FONT + 3) * i + 10.5:.1f}" text-anchor="middle" '
                        f'font-size="{CLUSTER_FONT:g}"{BOLD if i == 0 else ""}>{_e(line)}</text>'
                        for i, line in enumerate(cb.collapsed_lines))
        return (f"<title>{_e(tip)}</title>"
                f'<rect x="4" y="-4" width="{w:.1f}" height="{h:.1f}" fill="{c.border}" stroke="{c.border}"/>'
                f'<rect class="shape" width="{w:.1f}" height="{h:.1f}" fill="{c.fill}" stroke="{c.border}" '
                f'stroke-width="2"/>{texts}')
    w, h = cb.expanded
    members = {b.node.name: b for b in cb.members}
    edges = []
    for k, e in enumerate(cb.edges):
        a, b = members[e.src], members[e.dst]
        edges.append(edge_svg(e, (a.x - a.w / 2, a.y - a.h / 2, a.w, a.h), (b.x - b.w / 2, b.y - b.h / 2, b.w, b.h),
                              f"{prefix}{c.dom_id}-e{k}", e.src, e.dst))
    nodes = "".join(node_svg(b, prefix, at=(b.x - b.w / 2, b.y - b.h / 2), titles=titles) for b in cb.members)
    return (f"<title>{_e(cb.head)}\n{_e(c.histogram_text(8))}\n(click the box to collapse)</title>"
            f'<rect class="cluster-box" width="{w:.1f}" height="{h:.1f}" rx="6" fill="{c.box_fill}" fill-opacity="0.6" '
            f'stroke="{c.border}" stroke-width="2"/>'
            f'<text class="cluster-label" x="10" y="14" font-size="{CLUSTER_FONT + 1:g}" font-weight="bold" '
            f'fill="{c.border}">{_e(cb.head)}</text><g class="inner-edges">{"".join(edges)}</g>{nodes}')


def legend_svg(scene: Scene) -> tuple[str, float, float]:
    """(markup, width, height) of the legend: clusters with sizes, reason codes with counts, edges."""
    model = scene.plan.model
    rows: list[tuple[str, str | None, str]] = [("head", None, "clusters")]
    clusters = list(model.clusters.values())
    for c in clusters[:LEGEND_MAX_CLUSTERS]:
        rows.append(("swatch", c.fill, f"{c.name} ({len(c.members)})"))
    if len(clusters) > LEGEND_MAX_CLUSTERS:
        rows.append(("text", None, f"… {len(clusters) - LEGEND_MAX_CLUSTERS} more"))
    if not clusters:
        rows.append(("text", None, "(none)"))
    reasons = model.reason_counts()
    if reasons:
        rows.append(("head", None, "not clustered: [reason code]"))
        rows += [("swatch", reason_fill(code), f"{code} ({count})") for code, count in reasons]
    rows.append(("head", None, "edges"))
    rows.append(("line", CROSSING_COLOR, "crosses a cluster boundary"))
    rows.append(("dash", CONTROL_COLOR, "control edge"))
    if scene.plan.focus is not None:
        rows.append(("text", None, "dashed double border: neighbours not shown"))
    if scene.clusters:
        rows.append(("text", None, "▣ a whole cluster, collapsed"))
    out, y = [], 22.0
    for kind, color, text in rows:
        if kind == "head":
            y += 4
            out.append(f'<text x="8" y="{y:.1f}" font-size="10" font-weight="bold">{_e(text)}</text>')
        else:
            if kind == "swatch":
                out.append(f'<rect x="8" y="{y - 9:.1f}" width="16" height="11" fill="{color}" stroke="#999"/>')
            elif kind in ("line", "dash"):
                dash = ' stroke-dasharray="5,3"' if kind == "dash" else ""
                out.append(f'<line x1="8" x2="24" y1="{y - 4:.1f}" y2="{y - 4:.1f}" stroke="{color}" '
                           f'stroke-width="2"{dash}/>')
            x = 8 if kind == "text" else 30
            out.append(f'<text x="{x}" y="{y:.1f}" font-size="10">{_e(text)}</text>')
        y += 15
    width = max(text_width(t) + (30 if k != "text" else 8) for k, _, t in rows) + 16
    height = y + 4
    return (f'<rect width="{width:.1f}" height="{height:.1f}" rx="5" fill="#ffffff" stroke="#bbbbbb"/>'
            f'<text x="8" y="13" font-size="11" fill="#666">legend</text>' + "".join(out)), width, height


def standalone(svg_element: str) -> str:
    """An SVG file's text for an ``<svg>`` element."""
    return '<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n' + svg_element + "\n"
