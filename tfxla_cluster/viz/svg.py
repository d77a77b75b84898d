"""The clustering picture as SVG, made findable: one group per cluster, one per node.

Stage: visualization. :func:`cluster_svg` lays out a plan's DOT with Graphviz
(:func:`~tfxla_cluster.viz.layout.dot_to_svg`) and rewrites the SVG so that tests, scripts and the HTML
page can find things:

* each cluster is one ``<g class="cluster xla-cluster" id="cluster_<name>" data-cluster="<name>">``
  that *contains* its nodes' groups (Graphviz draws cluster boxes and nodes as siblings; clusters never
  overlap, so nesting changes nothing on screen);
* each node is ``<g class="node ..." data-node="<TF name>" data-op=... data-code=...>``, its
  ``<title>`` holding the node's details (op, attrs, outputs, device, reason), which browsers show on
  hover;
* the legend is ``<g class="legend">``, not a node.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from tfxla_cluster.errors import InternalError
from tfxla_cluster.viz.graph_dot import Plan, to_dot
from tfxla_cluster.viz.layout import dot_to_svg

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
ET.register_namespace("", SVG_NS)
ET.register_namespace("xlink", XLINK_NS)
_G = f"{{{SVG_NS}}}g"
_TITLE = f"{{{SVG_NS}}}title"

def cluster_svg(plan: Plan) -> str:
    """The laid-out, annotated SVG of a clustering :class:`Plan` (an ``<svg>`` element, no prolog)."""
    return annotate(dot_to_svg(to_dot(plan, tooltips=False)), plan)


def annotate(svg_text: str, plan: Plan) -> str:
    """Rewrite Graphviz's SVG of ``to_dot(plan)`` as the module docstring says."""
    # Graphviz writes a DOCTYPE with an external DTD; expat does not fetch it, but drop it anyway.
    svg_text = re.sub(r"<!DOCTYPE[^>]*>", "", svg_text, count=1)
    root = ET.fromstring(svg_text)
    model = plan.model
    by_index = {n.index: n for n in plan.visible}
    by_cluster_index = {c.index: c for c in model.clusters.values()}
    graph_g = root.find(_G)
    if graph_g is None:
        raise InternalError("Graphviz's SVG has no graph group")
    title = graph_g.find(_TITLE)
    if title is not None:
        title.text = model.title or "graph"
    cluster_groups: dict[str, ET.Element] = {}
    moves: list[tuple[ET.Element, str]] = []
    for g in list(graph_g):
        if g.tag != _G:
            continue
        gid = g.get("id", "")
        classes = g.get("class", "").split()
        if "legend" in classes:
            g.set("class", "legend")
            continue
        if "cluster" in classes and gid.startswith("cluster_"):
            name = _cluster_name(model, gid)
            g.set("data-cluster", name)
            cluster_groups[name] = g
            continue
        if "edge" in classes:
            _name_edge(g, plan, by_index, by_cluster_index)
            continue
        if "node" not in classes:
            continue
        if gid.startswith("n") and gid[1:].isdigit():
            node = by_index.get(int(gid[1:]))
            if node is None:
                continue
            g.set("data-node", node.name)
            g.set("data-op", node.op)
            g.set("data-code", node.code)
            if node.cluster:
                g.set("data-cluster", node.cluster)
                moves.append((g, node.cluster))
            t = g.find(_TITLE)
            if t is not None:
                t.text = node.details_text()
        elif gid.startswith("cluster_"):  # a collapsed cluster: the node *is* the cluster's group
            cluster = next((c for c in by_cluster_index.values() if c.dom_id == gid), None)
            if cluster is not None:
                g.set("data-cluster", cluster.name)
                t = g.find(_TITLE)
                if t is not None:
                    t.text = (f"{cluster.name}: {len(cluster.members)} nodes\n{cluster.histogram_text()}\n"
                              f"inputs: {len(cluster.inputs)}  outputs: {len(cluster.outputs)}")
    for g, cluster in moves:
        box = cluster_groups.get(cluster)
        if box is not None:
            graph_g.remove(g)
            box.append(g)
    return ET.tostring(root, encoding="unicode")


def _name_edge(g: ET.Element, plan: Plan, by_index: dict, by_cluster_index: dict) -> None:
    """Graphviz titles edges with DOT ids (``n3->n7``); show TF names instead."""
    t = g.find(_TITLE)
    if t is None or not t.text or "->" not in t.text:
        return

    def name(dot_id: str) -> str:
        table = by_index if dot_id.startswith("n") else by_cluster_index
        item = table.get(int(dot_id[1:])) if dot_id[1:].isdigit() else None
        return item.name if item is not None else dot_id

    src, dst = (name(part.strip()) for part in t.text.split("->", 1))
    g.set("data-src", src)
    g.set("data-dst", dst)
    t.text = f"{src} → {dst}"


def _cluster_name(model, dom_id: str) -> str:
    for c in model.clusters.values():
        if c.dom_id == dom_id:
            return c.name
    return dom_id[len("cluster_"):]


def standalone(svg_element: str) -> str:
    """An SVG file's text for an ``<svg>`` element."""
    return '<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n' + svg_element + "\n"
