"""The clustering as one self-contained HTML page.

Stage: visualization. :func:`to_html` wraps an annotated SVG (:func:`~tfxla_cluster.viz.svg.cluster_svg`)
in a page with no external assets (no CDN, no fonts, no images — it works from a file on a machine
without network):

* a summary block: the flags in effect (as ``TF_XLA_FLAGS=...``), TF's clustering summary text;
* the picture, inline, with zoom and a node search; hovering a node shows a tooltip panel
  (``#tooltip``) with its op, attributes, output dtypes and shapes, device and clustering reason
  (the same facts are in each node's SVG ``<title>``);
* a table of clusters (``#clusters``: size, op histogram, tensors crossing the boundary) and a table
  of unclustered nodes grouped by reason (``#reasons``: code, TF's reason, our hint, the nodes).

The node facts travel as JSON in ``<script id="viz-data" type="application/json">``; ``</`` is
escaped so no node name can end the script early. Everything shown is HTML-escaped.

The picture's toolbar, hover data and script (:func:`picture_toolbar`, :func:`picture_data`,
:data:`PICTURE_JS`) and :data:`CSS` serve the report page too (one picture per function there).
"""
from __future__ import annotations

import collections
import html
import json
from typing import Any, Callable

from tfxla_cluster.viz.graph_dot import Plan
from tfxla_cluster.viz.model import VizModel, reason_fill

_MAX_LISTED = 60


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def to_html(plan: Plan, svg: str) -> str:
    """The page for ``plan`` with its annotated ``svg`` (an ``<svg>`` element)."""
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
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>XLA clusters: {_e(title)}</title>",
        f"<style>{CSS}</style></head><body>",
        f'<header><h1>XLA clusters: {_e(title)}{view}</h1><p class="stats">{stats}</p></header>',
        _summary_section(model),
        '<section id="graph"><h2>Graph</h2>',
        picture_toolbar("id", "hover a node for details"),
        f'<div id="canvas">{svg}</div></section>',
        _clusters_section(model),
        _reasons_section(model),
        '<div id="tooltip" role="tooltip" hidden></div>',
        f'<script type="application/json" id="viz-data">{script_json(picture_data(plan))}</script>',
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
    """Zoom and search over a picture; ``attr`` names its parts by "id" (one picture on the page) or by
    "class" (several), as :data:`PICTURE_JS` ``install`` is told."""
    return (f'<div class="toolbar"><button {attr}="zoom-in" title="zoom in">+</button>'
            f'<button {attr}="zoom-out" title="zoom out">−</button><button {attr}="zoom-fit">fit</button>'
            f'<button {attr}="zoom-1">100%</button>'
            f'<input {attr}="search" type="search" placeholder="find node by name…" autocomplete="off">'
            f'<span {attr}="search-count"></span>'
            f'<span class="help">{_e(help_text)}</span></div>')


def picture_data(plan: Plan, cluster_extra: Callable[[Any], dict] | None = None) -> dict:
    """The hover facts of ``plan``'s picture; ``cluster_extra(cluster)`` adds fields to a cluster's."""
    clusters = {}
    for c in plan.model.clusters.values():
        clusters[c.name] = {"name": c.name, "size": len(c.members), "ops": c.histogram_text(12),
                            "inputs": len(c.inputs), "outputs": len(c.outputs)}
        if cluster_extra is not None:
            clusters[c.name].update(cluster_extra(c))
    # Collapsed clusters are hovered as a whole: their members' details are not needed.
    return {"nodes": {n.name: n.details() for n in plan.visible if not plan.is_collapsed(n)}, "clusters": clusters}


def script_json(data: object) -> str:
    """``data`` as JSON to put inside a ``<script>`` element."""
    # "</" would end the <script> element early; "\u003c/" is the same JSON string.
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("</", "\\u003c/")


CSS = """
:root { --fg:#222; --muted:#666; --line:#ddd; }
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: var(--fg);
       margin: 0 1.2em 2em; }
h1 { font-size: 1.35em; margin: .8em 0 .2em; } h2 { font-size: 1.15em; margin: 1.2em 0 .4em; }
h3 { font-size: 1em; margin: .4em 0; } .stats { color: var(--muted); margin: 0; }
pre { background: #f6f6f6; border: 1px solid var(--line); padding: .5em .7em; overflow: auto; max-height: 22em;
      font-size: 12px; }
.cols { display: flex; gap: 1.5em; flex-wrap: wrap; } .cols > div { flex: 1 1 28em; min-width: 0; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: .25em .6em; text-align: left; vertical-align: top; }
td.num { text-align: right; } table.kv th { font-weight: normal; color: var(--muted); }
.swatch { display: inline-block; width: .9em; height: .9em; border: 1px solid #999; margin-right: .4em;
          vertical-align: -2px; }
.warn { color: #a33; }
.toolbar { display: flex; gap: .4em; align-items: center; margin-bottom: .4em; }
.toolbar button { min-width: 2.2em; } .toolbar .help { color: var(--muted); margin-left: auto; font-size: 12px; }
#canvas, .canvas { border: 1px solid var(--line); overflow: auto; max-height: 82vh; background: #fff; }
#canvas svg, .canvas svg { display: block; }
g.node { cursor: default; }
g.node.hover > path, g.node.hover > polygon, g.node.hover > ellipse { stroke-width: 3; }
g.node.match > path, g.node.match > polygon { stroke: #c00000; stroke-width: 3; }
g.xla-cluster.flash > path, g.xla-cluster.flash > polygon { stroke-width: 5; }
#tooltip { position: fixed; z-index: 10; max-width: 30em; background: #fffff8; border: 1px solid #999;
           box-shadow: 0 2px 8px rgba(0,0,0,.25); padding: .5em .7em; font-size: 12px; pointer-events: none; }
#tooltip .t-name { font-weight: bold; word-break: break-all; } #tooltip .t-op { color: #1a5fb4; }
#tooltip table { font-size: 12px; } #tooltip th, #tooltip td { border: 0; padding: 0 .5em 0 0; }
#tooltip th { color: var(--muted); font-weight: normal; } #tooltip code { word-break: break-all; }
#tooltip .t-reason { margin-top: .3em; } #tooltip .t-hint { color: var(--muted); }
code.node-link { cursor: pointer; text-decoration: underline dotted; }
"""

# The picture's hover panel, zoom and search; a page calls tfxlaPicture.install for each picture.
PICTURE_JS = r"""
var tfxlaPicture = (function () {
  "use strict";
  var tip = document.getElementById("tooltip");
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c];
    });
  }
  function row(k, v) { return "<tr><th>" + esc(k) + "</th><td>" + v + "</td></tr>"; }
  function nodeHtml(d) {
    var h = '<div class="t-name">' + esc(d.name) + '</div><div class="t-op">op: ' + esc(d.op) + "</div><table>";
    h += row("device", esc(d.device || "?"));
    h += row("outputs", d.outputs.length ? d.outputs.map(function (o) { return "<code>" + esc(o) + "</code>"; })
                                                     .join("<br>") : "none");
    d.attrs.forEach(function (kv) { h += row(kv[0], "<code>" + esc(kv[1]) + "</code>"); });
    h += "</table>";
    if (d.cluster) {
      h += '<div class="t-reason">cluster: <b>' + esc(d.cluster) + "</b></div>";
    } else {
      h += '<div class="t-reason">not clustered <code>[' + esc(d.code) + "]</code>: " + esc(d.reason) + "</div>";
      if (d.hint) h += '<div class="t-hint">' + esc(d.hint) + "</div>";
    }
    return h;
  }
  function clusterHtml(c) {
    return '<div class="t-name">' + esc(c.name) + "</div><table>" + row("size", c.size + " nodes") +
           row("ops", esc(c.ops)) + row("inputs", c.inputs + " tensors") + row("outputs", c.outputs + " tensors") +
           (c.timing ? row("cost", esc(c.timing)) : "") + "</table>";
  }
  function place(ev) {
    var pad = 14, r = tip.getBoundingClientRect();
    var x = ev.clientX + pad, y = ev.clientY + pad;
    if (x + r.width > window.innerWidth) x = Math.max(0, ev.clientX - r.width - pad);
    if (y + r.height > window.innerHeight) y = Math.max(0, ev.clientY - r.height - pad);
    tip.style.left = x + "px"; tip.style.top = y + "px";
  }
  var current = null;   // one panel for all pictures of the page
  function show(g, ev, data) {
    var name = g.getAttribute("data-node"), cl = g.getAttribute("data-cluster");
    var html = name && data.nodes[name] ? nodeHtml(data.nodes[name])
             : cl && data.clusters[cl] ? clusterHtml(data.clusters[cl]) : null;
    if (!html) return;
    if (current) current.classList.remove("hover");
    current = g; g.classList.add("hover");
    tip.innerHTML = html; tip.hidden = false;
    tip.setAttribute("data-node", name || ""); tip.setAttribute("data-cluster", cl || "");
    place(ev);
  }
  function hide() {
    if (current) current.classList.remove("hover");
    current = null; tip.hidden = true;
  }
  // root: what holds the picture's toolbar, canvas and node links; attr: "id" or "class", as the
  // toolbar was written (picture_toolbar); data: the picture's hover facts (picture_data).
  function install(root, data, attr) {
    function part(name) { return root.querySelector((attr === "id" ? "#" : ".") + name); }
    var canvas = part("canvas"), svg = canvas.querySelector("svg");
    if (svg) {
      svg.addEventListener("mouseover", function (ev) {
        var g = ev.target.closest("g.node");
        if (g && g !== current) show(g, ev, data);
      });
      svg.addEventListener("mousemove", function (ev) { if (current) place(ev); });
      svg.addEventListener("mouseout", function (ev) {
        var g = ev.target.closest("g.node");
        if (g && !(ev.relatedTarget && g.contains(ev.relatedTarget))) hide();
      });
    }
    // Zoom: scale the SVG's own size; the canvas scrolls.
    var baseW = svg ? svg.width.baseVal.value : 0, baseH = svg ? svg.height.baseVal.value : 0, scale = 1;
    function setScale(s) {
      if (!svg) return;
      scale = Math.min(8, Math.max(0.02, s));
      svg.setAttribute("width", (baseW * scale) + "px"); svg.setAttribute("height", (baseH * scale) + "px");
    }
    function fitScale() { return baseW ? (canvas.clientWidth - 4) / baseW : 1; }
    part("zoom-in").onclick = function () { setScale(scale * 1.25); };
    part("zoom-out").onclick = function () { setScale(scale / 1.25); };
    part("zoom-fit").onclick = function () { setScale(fitScale()); };
    part("zoom-1").onclick = function () { setScale(1); };
    setScale(Math.max(0.2, Math.min(1, fitScale())));
    // Search: highlight nodes whose name contains the text; scroll to the first.
    var search = part("search"), count = part("search-count");
    search.addEventListener("input", function () {
      var q = search.value.trim().toLowerCase(), first = null, n = 0;
      svg && svg.querySelectorAll("g.node[data-node]").forEach(function (g) {
        var hit = q !== "" && g.getAttribute("data-node").toLowerCase().indexOf(q) >= 0;
        g.classList.toggle("match", hit);
        if (hit) { n++; if (!first) first = g; }
      });
      count.textContent = q ? n + " found" : "";
      if (first) first.scrollIntoView({block: "center", inline: "center"});
    });
    root.querySelectorAll("code.node-link").forEach(function (c) {
      c.addEventListener("click", function () {
        search.value = c.getAttribute("data-node"); search.dispatchEvent(new Event("input"));
      });
    });
  }
  // A click on a link (matching selector) to an element of this page calls act(element, event).
  function onLinks(selector, act) {
    document.querySelectorAll(selector).forEach(function (a) {
      a.addEventListener("click", function (ev) {
        var el = document.getElementById(a.getAttribute("href").slice(1));
        if (el) act(el, ev);
      });
    });
  }
  return {install: install, onLinks: onLinks};
})();
"""

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
