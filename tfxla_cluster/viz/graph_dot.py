"""The clustered TF graph as Graphviz DOT text: clusters as coloured boxes, reasons on the rest.

Stage: visualization. Input: a :class:`~tfxla_cluster.viz.model.VizModel`; output: DOT text (pure
Python, no Graphviz needed). A :class:`Plan` says what is drawn:

* every op node (or, with ``around``, the undirected neighbourhood of one node, its boundary marked
  with a double border and a "+N hidden" line);
* each cluster as a ``subgraph cluster_*`` box with id ``cluster_<name>`` — or, with ``collapse``, as
  one node with that id, and the edges between collapsed clusters merged;
* every unclustered node labelled with its op and short reason code, filled by reason;
* edges that cross a cluster boundary drawn thick and orange, control edges dashed;
* a legend (clusters with sizes, reason codes with counts, edge styles).

DOT ids are fixed by the model: node ``n<index>`` (TF node id order), collapsed cluster ``c<index>``,
edge ``e<k>``; the SVG post-processing (:mod:`tfxla_cluster.viz.svg`) relies on them.
"""
from __future__ import annotations

import collections
import math
from dataclasses import dataclass

from tfxla_cluster.viz.dot_text import RawLabel, attrs, html_label_text, label, quote, shorten
from tfxla_cluster.viz.model import ClusterView, Focus, NodeView, VizModel, focus, reason_fill

CROSSING_COLOR = "#d95f02"
CONTROL_COLOR = "#9a9a9a"
EDGE_COLOR = "#5f5f5f"
LEGEND_MAX_CLUSTERS = 16


@dataclass
class Plan:
    """What one picture shows (see the module docstring)."""

    model: VizModel
    visible: list[NodeView]
    focus: Focus | None = None
    collapse: bool = False
    legend: bool = True
    max_label: int = 40

    def is_collapsed(self, node: NodeView) -> bool:
        return self.collapse and node.cluster is not None

    def endpoint(self, name: str) -> str:
        """The DOT id an edge to/from ``name`` attaches to."""
        node = self.model.nodes[name]
        if self.is_collapsed(node):
            return f"c{self.model.clusters[node.cluster].index}"
        return f"n{node.index}"


def make_plan(model: VizModel, *, around: str | None = None, depth: int = 2, collapse: bool = False,
              legend: bool = True, max_label: int = 40) -> Plan:
    """Choose the nodes to draw: all of them, or the ``depth``-hop neighbourhood of ``around``."""
    fc = focus(model, around, depth) if around is not None else None
    visible = [n for n in model.nodes.values() if fc is None or n.name in fc]
    return Plan(model, visible, fc, collapse, legend, max_label)


def to_dot(plan: Plan, *, tooltips: bool = True) -> str:
    """DOT text for ``plan``. ``tooltips`` adds each node's details as a Graphviz tooltip (useful for
    a user's own ``dot -Tsvg``; our SVG writer puts them in ``<title>`` instead)."""
    model = plan.model
    title = model.title or "graph"
    if plan.focus is not None:
        title += f" — around {plan.focus.center}, depth {plan.focus.radius}"
    out = [f"digraph {quote(title)} {{",
           "  graph" + attrs(label=title, labelloc="t", fontname="Helvetica", fontsize="14", rankdir="TB",
                             newrank="true", nodesep="0.25", ranksep="0.35"),
           "  node" + attrs(shape="box", style="rounded,filled", fontname="Helvetica", fontsize="10",
                            height="0.3", margin="0.08,0.03", penwidth="1"),
           "  edge" + attrs(color=EDGE_COLOR, arrowsize="0.6", penwidth="1", fontname="Helvetica")]
    by_cluster: dict[str, list[NodeView]] = collections.defaultdict(list)
    loose: list[NodeView] = []
    for node in plan.visible:
        (by_cluster[node.cluster] if node.cluster else loose).append(node)
    for cluster in model.clusters.values():
        members = by_cluster.get(cluster.name)
        if not members:
            continue
        if plan.collapse:
            out.append("  " + _collapsed_node(plan, cluster, members, tooltips))
        else:
            out += _cluster_box(plan, cluster, members, tooltips)
    for node in loose:
        out.append("  " + _node(plan, node, tooltips))
    out += _edges(plan)
    if plan.legend:
        out += _legend(plan)
    out.append("}")
    return "\n".join(out) + "\n"


def cluster_dot(model: VizModel, *, around: str | None = None, depth: int = 2, collapse: bool = False,
                legend: bool = True, tooltips: bool = True) -> str:
    """One call: plan and DOT text."""
    return to_dot(make_plan(model, around=around, depth=depth, collapse=collapse, legend=legend),
                  tooltips=tooltips)


# ----- pieces ------------------------------------------------------------------------------------
def _shown_count(cluster: ClusterView, members: list[NodeView]) -> str:
    if len(members) == len(cluster.members):
        return f"{len(members)} node{'s' if len(members) != 1 else ''}"
    return f"{len(members)} of {len(cluster.members)} nodes shown"


def _cluster_box(plan: Plan, cluster: ClusterView, members: list[NodeView], tooltips: bool) -> list[str]:
    head = f"{cluster.name} · {_shown_count(cluster, members)}"
    box = attrs(id=cluster.dom_id, class_="xla-cluster", label=head, style="filled,rounded",
                fillcolor=cluster.box_fill, color=cluster.border, penwidth="2", fontcolor=cluster.border,
                fontsize="12", labeljust="l",
                tooltip=f"{head}\n{cluster.histogram_text(8)}" if tooltips else None)
    lines = [f"  subgraph {quote('cluster_' + cluster.name)} {{", "    graph" + box]
    lines += ["    " + _node(plan, node, tooltips) for node in members]
    lines.append("  }")
    return lines


def _collapsed_node(plan: Plan, cluster: ClusterView, members: list[NodeView], tooltips: bool) -> str:
    text = label(cluster.name, _shown_count(cluster, members), shorten(cluster.histogram_text(3), 48))
    tip = None
    if tooltips:
        tip = (f"{cluster.name}: {len(cluster.members)} nodes\n{cluster.histogram_text()}\n"
               f"inputs: {len(cluster.inputs)}  outputs: {len(cluster.outputs)}")
    return f"c{cluster.index}" + attrs(id=cluster.dom_id, class_="xla-cluster collapsed", shape="box3d",
                                        style="filled", fillcolor=cluster.fill, color=cluster.border,
                                        penwidth="2", fontsize="11", label=RawLabel(text), tooltip=tip)


def _node(plan: Plan, node: NodeView, tooltips: bool) -> str:
    lines = [shorten(node.name, plan.max_label)]
    if node.cluster:
        if node.op != node.name:
            lines.append(node.op)
        cluster = plan.model.clusters[node.cluster]
        style = dict(fillcolor=cluster.fill, color=cluster.border)
        cls = "clustered"
    else:
        lines.append(f"{shorten(node.op, plan.max_label)} · [{node.code}]")
        style = dict(fillcolor=reason_fill(node.code), color="#8c8c8c")
        cls = f"unclustered reason-{node.code}"
    extra: dict[str, str] = {}
    fc = plan.focus
    if fc is not None:
        if node.name == fc.center:
            extra.update(penwidth="3", color="#c00000")
            cls += " focus-center"
        if node.name in fc.hidden:
            lines.append(f"+{fc.hidden[node.name]} hidden")
            extra.update(peripheries="2", style="rounded,filled,dashed")
            cls += " boundary"
    style.update(extra)
    return f"n{node.index}" + attrs(id=f"n{node.index}", class_=cls, label=RawLabel(label(*lines)),
                                     tooltip=node.details_text() if tooltips else None, **style)


def _edges(plan: Plan) -> list[str]:
    model = plan.model
    shown = {n.name for n in plan.visible}
    # Merge parallel edges (x*x, collapsed clusters): one drawn edge per endpoint pair and kind.
    merged: dict[tuple[str, str, bool], list] = {}
    for e in model.edges:
        if e.src not in shown or e.dst not in shown:
            continue
        a, b = plan.endpoint(e.src), plan.endpoint(e.dst)
        if a == b:
            continue  # inside a collapsed cluster
        merged.setdefault((a, b, e.control), []).append(e)
    lines = []
    for k, ((a, b, control), group) in enumerate(merged.items()):
        first = group[0]
        cs, cd = model.nodes[first.src].cluster, model.nodes[first.dst].cluster
        crossing = cs != cd
        if control:
            style = dict(style="dashed", color=CONTROL_COLOR, arrowhead="odot")
        elif crossing:
            style = dict(color=CROSSING_COLOR, penwidth="1.8")
        else:
            style = {}
        if len(group) > 2:
            style["penwidth"] = f"{min(6.0, 1.0 + math.log2(len(group))):.1f}"
        cls = "edge-control" if control else ("crossing" if crossing else "edge-data")
        tip = "; ".join(f"{e.src}:{e.src_output} → {e.dst}:{e.dst_input}" if not e.control
                        else f"^{e.src} → {e.dst}" for e in group[:4])
        if len(group) > 4:
            tip += f"; … ({len(group)} edges)"
        lines.append(f"  {a} -> {b}" + attrs(id=f"e{k}", class_=cls, tooltip=tip, **style))
    return lines


def _legend(plan: Plan) -> list[str]:
    model = plan.model
    rows = ['<tr><td colspan="2" align="left"><b>clusters</b></td></tr>']
    clusters = list(model.clusters.values())
    for c in clusters[:LEGEND_MAX_CLUSTERS]:
        rows.append(f'<tr><td bgcolor="{c.fill}" width="16" height="12"></td>'
                    f'<td align="left">{html_label_text(c.name)} ({len(c.members)})</td></tr>')
    if len(clusters) > LEGEND_MAX_CLUSTERS:
        rows.append(f'<tr><td></td><td align="left">… {len(clusters) - LEGEND_MAX_CLUSTERS} more</td></tr>')
    if not clusters:
        rows.append('<tr><td></td><td align="left">(none)</td></tr>')
    reasons = model.reason_counts()
    if reasons:
        rows.append('<tr><td colspan="2" align="left"><b>not clustered: [reason code]</b></td></tr>')
        for code, count in reasons:
            rows.append(f'<tr><td bgcolor="{reason_fill(code)}" width="16" height="12"></td>'
                        f'<td align="left">{html_label_text(code)} ({count})</td></tr>')
    rows.append('<tr><td colspan="2" align="left"><b>edges</b></td></tr>')
    rows.append(f'<tr><td><font color="{CROSSING_COLOR}"><b>━━</b></font></td>'
                '<td align="left">crosses a cluster boundary</td></tr>')
    rows.append(f'<tr><td><font color="{CONTROL_COLOR}"><b>╌╌</b></font></td>'
                '<td align="left">control edge</td></tr>')
    if plan.focus is not None:
        rows.append('<tr><td>◫</td><td align="left">double border: neighbours not shown</td></tr>')
    if plan.collapse:
        rows.append('<tr><td>▣</td><td align="left">a whole cluster, collapsed</td></tr>')
    table = '<<table border="0" cellborder="0" cellspacing="2" cellpadding="1">' + "".join(rows) + "</table>>"
    return ["  subgraph cluster_legend {",
            "    graph" + attrs(id="legend_box", class_="legend", label="legend", style="rounded",
                                color="#bbbbbb", fontsize="11"),
            "    legend" + attrs(id="legend", class_="legend", shape="plain", style="solid", fontsize="10",
                                 label=RawLabel(table)),
            "  }"]
