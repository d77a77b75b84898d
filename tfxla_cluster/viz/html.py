"""The clustering as one self-contained HTML page.

Stage: visualization. :func:`to_html` puts the picture (:func:`picture`: our own layered layout, see
:mod:`tfxla_cluster.viz.scene` — no Graphviz) in a page with no external assets (no CDN, no fonts, no
images — it works from a file on a machine without network):

* a summary block: the flags in effect (as ``TF_XLA_FLAGS=...``), TF's clustering summary text;
* the picture, inline, with zoom; hovering a node shows a tooltip panel (``#tooltip``) with its op,
  attributes, output dtypes and shapes, device and clustering reason (the same facts are in each
  node's SVG ``<title>``); a click on a collapsed cluster expands it (a click on an expanded cluster's
  box collapses it); a click on a node dims everything but its neighbourhood (depth 1–3); search by
  node name (Enter: expand the match's cluster and focus on it); colour by cluster, by reason or both;
* a table of clusters (``#clusters``: size, op histogram, tensors crossing the boundary) and a table
  of unclustered nodes grouped by reason (``#reasons``: code, TF's reason, our hint, the nodes).

Clusters start collapsed with ``collapse`` (the CLI's ``--collapse``; the report collapses big graphs):
the page then holds only the collapsed boxes and lays nothing out on load; a cluster's members are put
in the page when it is first expanded (their positions were computed in Python).

The node facts and the layout travel as JSON in ``<script id="viz-data" type="application/json">``;
``</`` is escaped so no node name can end the script early. Everything shown is HTML-escaped.

The picture's toolbar, data and script (:func:`picture_toolbar`, :func:`picture`, :data:`PICTURE_JS`)
and :data:`CSS` serve the report page too (one picture per function there). The script and style
are package data (``tfxla_cluster/viz/assets``), read once.
"""
from __future__ import annotations

import collections
import html
import json
from importlib import resources
from typing import Any, Callable

from tfxla_cluster.viz.graph_dot import Plan
from tfxla_cluster.viz.model import VizModel, reason_fill

_MAX_LISTED = 60


def _asset(name: str) -> str:
    return resources.files("tfxla_cluster.viz").joinpath("assets", name).read_text(encoding="utf-8")


CSS = _asset("picture.css")
PICTURE_JS = _asset("picture.js")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def to_html(plan: Plan) -> str:
    """The page for ``plan``."""
    model = plan.model
    title = model.title or "graph"
    view = ""
    if plan.focus is not None:
        view = f" — around <code>{_e(plan.focus.center)}</code>, depth {plan.focus.radius}"
    if plan.collapse:
        view += " — clusters collapsed"
    clustered = sum(1 for n in model.nodes.values() if n.cluster)
    stats = (f"{len(model.nodes)} nodes · {len(model.clusters)} cluster{'s' if len(model.clusters) != 1 else ''}"
             f" ({clustered} nodes clustered) · {len(model.nodes) - clustered} not clustered")
    if plan.focus is not None:
        stats += f" · {len(plan.visible)} shown"
    svg, data = picture(plan)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>XLA clusters: {_e(title)}</title>",
        f"<style>{CSS}</style></head><body>",
        f'<header><h1>XLA clusters: {_e(title)}{view}</h1><p class="stats">{stats}</p></header>',
        _summary_section(model),
        '<section id="graph"><h2>Graph</h2>',
        picture_toolbar("id", "hover: details · click a cluster: expand/collapse · click a node: its neighbourhood"),
        f'<div id="canvas">{svg}</div></section>',
        _clusters_section(model),
        _reasons_section(model),
        '<div id="tooltip" role="tooltip" hidden></div>',
        f'<script type="application/json" id="viz-data">{script_json(data)}</script>',
        f"<script>{PICTURE_JS}{_JS}</script>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _summary_section(model: VizModel) -> str:
    if model.flags:
        flags = "\n".join(f"{env}={json.dumps(value)}" for env, value in model.flags.items())
    else:
        flags = "(TF's defaults: no TF_XLA_FLAGS / XLA_FLAGS set)"
    rows = [f"<tr><th>global_jit_level</th><td>{model.global_jit_level}</td></tr>",
            f"<tr><th>cpu_global_jit</th><td>{str(model.cpu_global_jit).lower()}</td></tr>"]
    skipped = f'<p id="skipped" class="warn">No clusters: {_e(model.skipped)}.</p>' if model.skipped else ""
    return ('<section id="summary"><h2>Summary</h2><div class="cols">'
            f'<div><h3>Flags in effect</h3><pre id="flags">{_e(flags)}</pre>'
            f'<table class="kv">{"".join(rows)}</table>{skipped}</div>'
            f"<div><h3>TF's clustering summary</h3><pre id=\"tf-summary\">{_e(model.summary)}</pre></div>"
            "</div></section>")


def _tensor_list(items: list[str], controls: int) -> str:
    if not items and not controls:
        return "0"
    head = f"{len(items)} tensor{'s' if len(items) != 1 else ''}"
    if controls:
        head += f" + {controls} control"
    if not items:
        return head
    shown = items[:_MAX_LISTED]
    more = f"<li>… {len(items) - len(shown)} more</li>" if len(items) > len(shown) else ""
    return (f"<details><summary>{head}</summary><ul>"
            + "".join(f"<li><code>{_e(t)}</code></li>" for t in shown) + more + "</ul></details>")


def _clusters_section(model: VizModel) -> str:
    rows = []
    for c in model.clusters.values():
        rows.append(
            f'<tr data-cluster="{_e(c.name)}"><td><span class="swatch" style="background:{c.fill}"></span>'
            f'<a href="#{_e(c.dom_id)}" class="cluster-link">{_e(c.name)}</a></td>'
            f'<td class="num">{len(c.members)}</td><td>{_e(c.histogram_text())}</td>'
            f"<td>{_tensor_list(c.inputs, c.control_inputs)}</td>"
            f"<td>{_tensor_list(c.outputs, c.control_outputs)}</td></tr>")
    if not rows:
        rows.append('<tr><td colspan="5">No clusters were formed.</td></tr>')
    return ('<section id="clusters-section"><h2>Clusters</h2><table id="clusters"><thead><tr>'
            "<th>cluster</th><th>size</th><th>op histogram</th><th>inputs (from outside)</th>"
            "<th>outputs (read outside)</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></section>")


def _reasons_section(model: VizModel) -> str:
    groups: dict[tuple[str, str], list] = collections.defaultdict(list)
    for n in model.unclustered:
        # Reasons that differ only in the node they name are one reason.
        key = n.reason.replace(f"{{{{node {n.name}}}}}", "{{node …}}")
        groups[(n.code, key)].append(n)
    rows = []
    for (code, reason), nodes in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        names = ", ".join(f'<code class="node-link" data-node="{_e(n.name)}">{_e(n.name)}</code>'
                          for n in nodes[:_MAX_LISTED])
        if len(nodes) > _MAX_LISTED:
            names += f" … +{len(nodes) - _MAX_LISTED}"
        ops = collections.Counter(n.op for n in nodes)
        op_text = ", ".join(f"{op}×{k}" if k > 1 else op for op, k in ops.most_common(6))
        rows.append(
            f'<tr data-code="{_e(code)}"><td><span class="swatch" style="background:{reason_fill(code)}"></span>'
            f"<code>[{_e(code)}]</code></td><td class=\"num\">{len(nodes)}</td>"
            f'<td class="reason">{_e(reason)}</td><td class="hint">{_e(nodes[0].hint)}</td>'
            f"<td>{_e(op_text)}</td><td>{names}</td></tr>")
    if not rows:
        rows.append('<tr><td colspan="6">Every node was clustered.</td></tr>')
    return ('<section id="unclustered-section"><h2>Not clustered, by reason</h2><table id="reasons"><thead>'
            "<tr><th>code</th><th>nodes</th><th>TF's reason</th><th>what it means</th><th>ops</th>"
            "<th>nodes</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></section>")


def picture_toolbar(attr: str, help_text: str) -> str:
    """The picture's controls; ``attr`` names its parts by "id" (one picture on the page) or by
    "class" (several), as :data:`PICTURE_JS` ``install`` is told."""
    def el(tag: str, name: str, inner: str = "", extra: str = "") -> str:
        return f'<{tag} {attr}="{name}"{extra}>{inner}</{tag}>'

    return ('<div class="toolbar">'
            + el("button", "zoom-in", "+", ' title="zoom in"') + el("button", "zoom-out", "−", ' title="zoom out"')
            + el("button", "zoom-fit", "fit") + el("button", "zoom-1", "100%")
            + el("button", "expand-all", "expand all", ' title="expand every cluster"')
            + el("button", "collapse-all", "collapse all", ' title="collapse every cluster"')
            + f'<input {attr}="search" type="search" placeholder="find node by name…" autocomplete="off">'
            + el("span", "search-count")
            + '<label>colour by ' + el("select", "color-by", '<option value="both">cluster and reason</option>'
                                       '<option value="cluster">cluster</option><option value="reason">reason</option>')
            + '</label><label>neighbourhood depth ' + el("select", "focus-depth", "".join(
                f'<option value="{k}"{" selected" if k == 2 else ""}>{k}</option>' for k in (1, 2, 3)))
            + "</label>" + el("span", "focus-info") + el("button", "focus-clear", "show all", " hidden")
            + f'<span class="help">{_e(help_text)}</span></div>')


def picture(plan: Plan, *, prefix: str = "", cluster_extra: Callable[[Any], dict] | None = None) -> tuple[str, dict]:
    """(the ``<svg>`` of ``plan``, the JSON-ready data its script needs): node and cluster facts for
    hovering (``cluster_extra(cluster)`` adds fields), the layout for expanding and collapsing
    (base boxes, edge waypoints, each cluster's two sizes and the markup of its other state) and the
    node graph for search and focus. ``prefix`` goes before every id in the SVG."""
    from tfxla_cluster.viz.scene import ClusterBox, build_scene
    from tfxla_cluster.viz.svg import LEGEND_GAP, MARGIN, TITLE_H, cluster_inner, legend_svg, scene_svg

    scene = build_scene(plan, interiors=True)
    svg = scene_svg(scene, prefix, titles=False)
    keys = list(scene.items)
    index = {k: i for i, k in enumerate(keys)}
    ox, oy = MARGIN, MARGIN + TITLE_H       # the scene group's offset in the SVG
    items = []
    for item in scene.items.values():
        w, h = item.size if isinstance(item, ClusterBox) else (item.w, item.h)
        items.append([round(item.x - w / 2, 1), round(item.y - h / 2, 1), round(w, 1), round(h, 1)])
    width, height = scene.width, scene.height
    if plan.legend:
        _, lw, lh = legend_svg(scene)
        items.append([round(width + LEGEND_GAP, 1), 0.0, round(lw, 1), round(lh, 1)])
        keys.append("legend")
        width += LEGEND_GAP + lw
        height = max(height, lh)
    local = {name: cb.member_boxes() for name, cb in scene.clusters.items()}

    def ports(key: str, names: list[str]) -> list | None:
        boxes = local.get(key[2:]) if key.startswith("c:") else None
        return [[round(v, 1) for v in boxes[n]] for n in names if n in boxes] if boxes and names else None

    # [source item, target item, waypoints (x, y, x, y…), source ports, target ports]
    edges = [[index[e.src], index[e.dst], [round(c, 1) for p in e.points for c in p], ports(e.src, e.src_ports),
              ports(e.dst, e.dst_ports)] for e in scene.edges]
    clusters_layout = {}
    for name, cb in scene.clusters.items():
        clusters_layout[name] = {"item": index["c:" + name], "open": not cb.is_collapsed,
                                 "sizes": [[round(v, 1) for v in cb.collapsed], [round(v, 1) for v in cb.expanded]],
                                 "frag": cluster_inner(cb, prefix, not cb.is_collapsed, titles=False)}
    # Coordinates are the scene group's; the SVG's size adds the margins and title.
    layout = {"keys": keys, "items": items, "edges": edges, "clusters": clusters_layout,
              "width": round(width + 2 * ox, 1), "height": round(height + oy + MARGIN, 1)}
    clusters = {}
    for c in plan.model.clusters.values():
        clusters[c.name] = {"name": c.name, "size": len(c.members), "ops": c.histogram_text(12),
                            "inputs": len(c.inputs), "outputs": len(c.outputs)}
        if cluster_extra is not None:
            clusters[c.name].update(cluster_extra(c))
    visible = plan.visible
    names = [n.name for n in visible]
    pos = {n: i for i, n in enumerate(names)}
    graph_edges = sorted({(pos[e.src], pos[e.dst]) for e in plan.model.edges if e.src in pos and e.dst in pos})
    members = {name: [b.node.name for b in cb.members] or
               [n.name for n in visible if n.cluster == name] for name, cb in scene.clusters.items()}
    data = {"nodes": {n.name: n.details() for n in visible}, "clusters": clusters, "layout": layout,
            "graph": {"names": names, "edges": [list(e) for e in graph_edges]}, "members": members}
    return svg, data


def script_json(data: object) -> str:
    """``data`` as JSON to put inside a ``<script>`` element."""
    # "</" would end the <script> element early; "\u003c/" is the same JSON string.
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("</", "\\u003c/")


# The viz page's own script: one picture; cluster table links flash their cluster.
_JS = r"""
(function () {
  "use strict";
  tfxlaPicture.install(document, JSON.parse(document.getElementById("viz-data").textContent), "id");
  function flash(el) {
    el.classList.add("flash"); el.scrollIntoView({block: "center", inline: "center"});
    setTimeout(function () { el.classList.remove("flash"); }, 1500);
  }
  tfxlaPicture.onLinks("a.cluster-link", function (el, ev) { ev.preventDefault(); flash(el); });
})();
"""
