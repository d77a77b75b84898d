"""The report as one self-contained HTML page (no network, no external files).

Stage: report (rendering). :func:`to_html` lays out, top to bottom:

* ``#summary`` — source, flags in effect (``TF_XLA_FLAGS=...``), what ran and how long the report took;
* ``#advisor`` — the performance advisor's findings (``div.advice`` with ``data-kind``,
  ``data-cluster``), warnings first; ``#dynamic-missing`` says why timings are absent, if they are;
* ``#numerics`` — with ``--check-numerics``: max abs/rel error per cluster output, and the first
  diverging HLO instruction of a divergence;
* per function ``section.function#fn-K``: TF's clustering summary, the cluster picture (the viz SVG:
  one ``g.xla-cluster`` per cluster holding one ``g.node`` per member; hover shows details; zoom,
  search, expand/collapse a cluster on a click, a node's neighbourhood on a click, colour by cluster or
  reason; clusters start collapsed on big graphs, or a focus neighbourhood is drawn; no Graphviz), a table of
  clusters with compile and run times, the unclustered nodes by reason, and one ``details.cluster-detail``
  per cluster: compiles and causes, signatures with timings compiled vs TF's kernels, kernels of the
  optimised module, HLO before and after optimisation, numerics.

Every DOM id inside a function's section is prefixed ``fK-`` so several functions' pictures coexist.
Everything shown is HTML-escaped; JSON in ``<script>`` has ``</`` escaped.
"""
from __future__ import annotations

import html
import json
import re
from typing import Any

from tfxla_cluster.report.model import Advice, ClusterReport, FunctionReport, Report
from tfxla_cluster.viz.layout import COLLAPSE_OVER  # nodes: over this, pictures start collapsed
MAX_HLO_LINES = 3000       # per module shown; the rest is elided with a note
_MAX_ROWS = 400            # clusters listed in full before the table is cut
_MAX_ADVICE = 300          # advisor findings shown per severity
_OPEN_INFOS = 12           # informational findings shown unfolded at most


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _ms(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x * 1e3:.1f} µs" if x < 1 else f"{x:.2f} ms"


def to_html(report: Report, *, around: str | None = None, depth: int = 2, collapse: bool | None = None) -> str:
    """The page for ``report``. ``around``/``depth`` draw a focus neighbourhood in the function that
    has the node; ``collapse`` forces (True/False) collapsed clusters; None: collapse big graphs."""
    from tfxla_cluster.viz.html import CSS as VIZ_CSS, PICTURE_JS

    n_clusters = sum(len(f.clusters) for f in report.functions)
    n_nodes = sum(len(f.mark_result.decisions) if f.mark_result else 0 for f in report.functions)
    stats = (f"{len(report.functions)} function{'s' if len(report.functions) != 1 else ''} · "
             f"{n_clusters} cluster{'s' if n_clusters != 1 else ''} · {n_nodes} nodes · "
             + ("ran: compiled vs TF's kernels measured" if report.dynamic else "static only"))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>XLA clustering report: {_e(report.title)}</title>",
        f"<style>{VIZ_CSS}{_CSS}</style></head><body>",
        f'<header><h1>XLA clustering report: {_e(report.title)}</h1><p class="stats">{_e(stats)}</p>'
        f'<nav>{_nav(report)}</nav></header>',
        _summary(report),
        _advisor(report),
        _numerics(report),
    ]
    datas = []
    for k, fn in enumerate(report.functions):
        section, data = _function(report, fn, k, around=around, depth=depth, collapse=collapse)
        parts.append(section)
        datas.append(f'<script type="application/json" class="viz-data" data-fn="{k}">{data}</script>')
    parts += ['<div id="tooltip" role="tooltip" hidden></div>', *datas, f"<script>{PICTURE_JS}{_JS}</script>",
              "</body></html>"]
    return "\n".join(parts) + "\n"


def _nav(report: Report) -> str:
    links = ['<a href="#summary">summary</a>', '<a href="#advisor">advisor</a>']
    if report.numerics is not None:
        links.append('<a href="#numerics">numerics</a>')
    links += [f'<a href="#fn-{k}">{_e(f.name)}</a>' for k, f in enumerate(report.functions[:20])]
    return " · ".join(links)


def _summary(report: Report) -> str:
    env = report.flags.env_strings() if report.flags is not None else {}
    flags = "\n".join(f"{k}={json.dumps(v)}" for k, v in env.items()) or "(TF's defaults: no TF_XLA_FLAGS / XLA_FLAGS set)"
    rows = [("source", f"<code>{_e(report.source)}</code>")]
    if report.inputs:
        rows.append(("inputs fed (random, seed 0)", "<br>".join(f"<code>{_e(i)}</code>" for i in report.inputs)))
    rows.append(("report built in", _e(", ".join(f"{k} {v:.2f} s" for k, v in report.seconds.items()))))
    table = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    run = f'<h3>Run</h3><pre id="run-output">{_e(report.run_output)}</pre>' if report.run_output else ""
    if report.profile is not None and report.profile.records:
        run += f'<h3>Compile profile (first calls)</h3><pre id="compile-profile">{_e(report.profile.table())}</pre>'
    missing = (f'<p id="dynamic-missing" class="warn">No run-time numbers: {_e(report.dynamic_missing)}.</p>'
               if report.dynamic_missing else "")
    return ('<section id="summary"><h2>Summary</h2><div class="cols">'
            f'<div><h3>Flags in effect</h3><pre id="flags">{_e(flags)}</pre><table class="kv">{table}</table>'
            f"{missing}</div><div>{run}</div></div></section>")


def _advice_html(a: Advice) -> str:
    evidence = "".join(f"<li>{_e(x)}</li>" for x in a.evidence)
    where = " · ".join(x for x in (a.function, a.cluster, a.node) if x)
    return (f'<div class="advice {_e(a.severity)}" data-kind="{_e(a.kind)}" data-cluster="{_e(a.cluster)}" '
            f'data-node="{_e(a.node)}"><div class="a-head"><span class="a-kind">{_e(a.kind.replace("_", " "))}</span> '
            f'<b>{_e(a.title)}</b> <span class="a-where">{_e(where)}</span></div>'
            f'<div class="a-text">{_e(a.text)}</div><ul class="a-evidence">{evidence}</ul></div>')


def _advisor(report: Report) -> str:
    items = report.advice
    warn = sum(1 for a in items if a.severity == "warn")
    head = (f"{warn} finding{'s' if warn != 1 else ''} that cost time; "
            f"{len(items) - warn} other finding{'s' if len(items) - warn != 1 else ''}") if items else \
        "No findings" + ("" if report.dynamic else " (nothing ran, so only static findings were possible)")
    # Warnings always show; on big graphs the informational findings fold away (hundreds of splitters).
    warns = [a for a in items if a.severity == "warn"][:_MAX_ADVICE]
    infos = [a for a in items if a.severity != "warn"][:_MAX_ADVICE]
    more = len(items) - len(warns) - len(infos)
    body = "".join(_advice_html(a) for a in warns)
    if len(infos) > _OPEN_INFOS:
        body += (f'<details class="infos"><summary>{len(infos)} informational findings</summary>'
                 + "".join(_advice_html(a) for a in infos) + "</details>")
    else:
        body += "".join(_advice_html(a) for a in infos)
    if more:
        body += f"<p>… {more} more findings</p>"
    return f'<section id="advisor"><h2>Performance advisor</h2><p class="stats">{_e(head)}</p>{body}</section>'


def _numerics(report: Report) -> str:
    checker = report.numerics
    if checker is None:
        return ""
    rows = []
    for res in checker.results.values():
        rows.append(_numerics_block(res))
    body = "".join(rows) or "<p>No compiled cluster ran, so nothing was compared.</p>"
    status = "all outputs within tolerance" if checker.ok else "DIVERGENCE found"
    return (f'<section id="numerics"><h2>Numerics check</h2><p class="stats">compiled clusters vs TF\'s kernels on '
            f"the same inputs: {_e(status)}</p>{body}</section>")


def _numerics_block(res: Any) -> str:
    head = f"{res.cluster}" + (f" — {res.function}" if res.function else "")
    if res.error:
        return f'<div class="numerics" data-cluster="{_e(res.cluster)}"><h3>{_e(head)}</h3><p class="warn">{_e(res.error)}</p></div>'
    trs = []
    for o in res.outputs.values():
        c = o.comparison
        trs.append(f'<tr class="{"ok" if c.ok else "bad"}"><td>{_e(o.kind)} {o.index}</td><td><code>{_e(o.tensor)}</code></td>'
                   f"<td>{_e(o.dtype)}{_e(list(o.shape))}</td><td class=\"num\">{c.max_abs:.3g}</td>"
                   f'<td class="num">{c.max_rel:.3g}</td><td>atol {c.atol:g}, rtol {c.rtol:g}</td>'
                   f"<td>{'ok' if c.ok else 'DIVERGES'}{(' — ' + _e(c.detail)) if c.detail else ''}</td></tr>")
    div = ""
    if res.divergence is not None:
        d = res.divergence
        div = (f'<div class="divergence"><b>{_e(d.describe())}</b><pre>{_e(d.text.strip())}</pre>'
               f"<p>Found by bisection over {d.candidates} instructions with {d.compiles} truncated-module "
               f"compiles; its operands agree with the evaluator: {'yes' if d.operands_agree else 'no'}.</p></div>")
    elif res.bisect_error:
        div = f'<p class="warn">bisection: {_e(res.bisect_error)}</p>'
    return (f'<div class="numerics" data-cluster="{_e(res.cluster)}"><h3>{_e(head)} — '
            f"{'OK' if res.ok else 'DIVERGES'} over {res.launches} launch(es)</h3>"
            "<table><thead><tr><th>what</th><th>tensor</th><th>type</th><th>max abs</th><th>max rel</th>"
            f"<th>tolerance</th><th></th></tr></thead><tbody>{''.join(trs)}</tbody></table>{div}</div>")


# ---------------------------------------------------------------------------------------- functions
def _prefix_ids(fragment: str, prefix: str) -> str:
    fragment = re.sub(r'(\s)id="', rf'\1id="{prefix}', fragment)
    return fragment.replace('href="#', f'href="#{prefix}')


def _picture(report: Report, fn: FunctionReport, k: int, *, around: str | None, depth: int,
             collapse: bool | None) -> tuple[str, dict]:
    """(the picture's HTML, its data: hover facts and layout). Laid out by the viz package's own
    layered layout: no Graphviz needed."""
    from tfxla_cluster.viz.graph_dot import make_plan
    from tfxla_cluster.viz.html import picture, picture_toolbar
    from tfxla_cluster.viz.model import build_model

    if fn.mark_result is None:
        members = ", ".join(next(iter(fn.clusters.values())).members[:40]) if fn.clusters else ""
        return (f'<p class="note">{_e(fn.note)}; no clustering picture. Members: <code>{_e(members)}</code></p>', {})
    model = build_model(fn.mark_result, report.flags, title=fn.name)
    here = around if around is not None and around in model.nodes else None
    big = len(model.nodes) > COLLAPSE_OVER
    plan = make_plan(model, around=here, depth=depth, collapse=bool(collapse) if collapse is not None else
                     (big and here is None), legend=True)
    view = []
    if plan.collapse:
        view.append(f"clusters collapsed ({len(model.nodes)} nodes; click a cluster to expand it; "
                    "--around NODE draws one node's neighbourhood in full)")
    if plan.focus is not None:
        view.append(f"around {here}, depth {plan.focus.radius}: {len(plan.visible)} of {len(model.nodes)} nodes")
    try:
        svg, data = picture(plan, prefix=f"f{k}-",
                            cluster_extra=lambda c: {"timing": _timing_text(fn.clusters.get(c.name))})
    except Exception as e:   # the rest of the report does not depend on the picture
        return f'<p class="warn">No picture: {_e(type(e).__name__)}: {_e(str(e)[:300])}</p>', {}
    toolbar = picture_toolbar("class", " · ".join(view) or
                              "hover: details · click a cluster: expand/collapse · click a node: its neighbourhood")
    return f'{toolbar}<div class="canvas" data-fn="{k}">{svg}</div>', data


def _timing_text(c: ClusterReport | None) -> str:
    if c is None or not c.signatures:
        return ""
    s = c.signatures[0]
    if s.launch_ms is None and s.tf_ms is None:
        return f"{c.compiles} compile(s), {c.executions} execution(s)"
    return f"launch {_ms(s.launch_ms)} vs TF's kernels {_ms(s.tf_ms)}; {c.compiles} compile(s)"


def _function(report: Report, fn: FunctionReport, k: int, *, around: str | None, depth: int,
              collapse: bool | None) -> tuple[str, str]:
    from tfxla_cluster.viz.html import _reasons_section, script_json
    from tfxla_cluster.viz.model import build_model

    picture, data = _picture(report, fn, k, around=around, depth=depth, collapse=collapse)
    summary = fn.mark_result.summary() if fn.mark_result is not None else fn.note
    reasons = ""
    if fn.mark_result is not None:
        reasons = _prefix_ids(_reasons_section(build_model(fn.mark_result, None, shapes=False)), f"f{k}-")
    details = "".join(_cluster_detail(c, k) for c in list(fn.clusters.values())[:_MAX_ROWS])
    if len(fn.clusters) > _MAX_ROWS:
        details += f"<p>… {len(fn.clusters) - _MAX_ROWS} more clusters (see the table)</p>"
    section = (f'<section class="function" id="fn-{k}" data-function="{_e(fn.name)}"><h2>{_e(fn.name)}</h2>'
               + (f'<p class="note">{_e(fn.note)}</p>' if fn.note else "")
               + f"<details class=\"tf-summary-box\"><summary>TF's clustering summary</summary>"
               f'<pre class="tf-summary">{_e(summary)}</pre></details>'
               f"<h3>Clusters</h3>{picture}{_clusters_table(fn, k)}{reasons}"
               f'<h3>Per cluster</h3><div class="cluster-details">{details}</div></section>')
    return section, script_json(data)


def _clusters_table(fn: FunctionReport, k: int) -> str:
    rows = []
    for c in list(fn.clusters.values())[:_MAX_ROWS]:
        s = c.signatures[0] if c.signatures else None
        ratio = ""
        if s is not None and s.launch_ms and s.tf_ms:
            ratio = f"{s.launch_ms / s.tf_ms:.2f}×"
        warn = sum(1 for a in c.advice if a.severity == "warn")
        state = f"fell back: {c.fallback_reason}" if c.fallback_reason else (
            "" if c.ran else "did not run")
        rows.append(
            f'<tr data-cluster="{_e(c.name)}"><td><a href="#f{k}-detail-{_e(c.name)}">{_e(c.name)}</a></td>'
            f'<td class="num">{len(c.members)}</td><td>{_e(c.histogram_text(8))}</td>'
            f'<td class="num">{c.compiles}</td><td class="num">{c.executions}</td>'
            f'<td class="num">{c.compile_seconds:.2f}</td><td class="num">{_ms(s.launch_ms if s else None)}</td>'
            f'<td class="num">{_ms(s.tf_ms if s else None)}</td><td class="num">{ratio}</td>'
            f'<td class="num">{len(c.kernels) or "–"}</td><td>{"⚠ " * min(warn, 1)}{len(c.advice) or ""}'
            f'{(" " + _e(state)) if state else ""}</td></tr>')
    if not rows:
        rows.append('<tr><td colspan="11">No clusters were formed.</td></tr>')
    more = f"<p>… {len(fn.clusters) - _MAX_ROWS} more clusters</p>" if len(fn.clusters) > _MAX_ROWS else ""
    return (f'<table class="clusters" id="f{k}-clusters"><thead><tr><th>cluster</th><th>nodes</th><th>ops</th>'
            "<th>compiles</th><th>runs</th><th>compile s</th><th>launch (compiled)</th><th>TF's kernels</th>"
            "<th>ratio</th><th>kernels</th><th>advice</th></tr></thead><tbody>"
            + "".join(rows) + f"</tbody></table>{more}")


def _hlo_block(label: str, text: str) -> str:
    lines = text.splitlines()
    shown = lines[:MAX_HLO_LINES]
    note = f"\n… {len(lines) - len(shown)} more lines" if len(lines) > len(shown) else ""
    return (f'<details class="hlo"><summary>{_e(label)} ({len(lines)} lines)</summary>'
            f"<pre>{_e(chr(10).join(shown) + note)}</pre></details>")


def _cluster_detail(c: ClusterReport, k: int) -> str:
    parts = [f'<details class="cluster-detail" id="f{k}-detail-{_e(c.name)}" data-cluster="{_e(c.name)}">'
             f"<summary><b>{_e(c.name)}</b>: {len(c.members)} nodes ({_e(c.histogram_text(6))})"
             + (f" — {len(c.advice)} advisor finding{'s' if len(c.advice) != 1 else ''}" if c.advice else "")
             + "</summary>"]
    parts.append(f"<p>{c.groups} independent group{'s' if c.groups != 1 else ''} of ops · members: "
                 + _e(", ".join(c.members[:30])) + (f" … (+{len(c.members) - 30})" if len(c.members) > 30 else "")
                 + "</p>")
    if c.fallback_reason:
        parts.append(f'<p class="warn">Ran on TF\'s kernels: {_e(c.fallback_reason)}</p>')
    if c.signatures:
        rows = []
        for s in c.signatures:
            rows.append(f"<tr><td><code>{_e(s.key_text)}</code></td><td>{_e(s.cause or ('TF kernels' if s.compiled is None else ''))}</td>"
                        f'<td class="num">{s.compile_seconds:.3f}</td><td class="num">{s.launches}</td>'
                        f'<td class="num">{_ms(s.steady_launch_ms)}</td><td class="num">{_ms(s.kernel_ms)}</td>'
                        f'<td class="num">{_ms(s.launch_ms)}</td><td class="num">{_ms(s.tf_ms)}</td>'
                        f"<td>{_e(s.measure_error)}</td></tr>")
        parts.append("<table class=\"signatures\"><thead><tr><th>signature</th><th>compile cause</th><th>compile s</th>"
                     "<th>launches</th><th>observed launch</th><th>kernel alone</th><th>launch (measured)</th>"
                     "<th>TF's kernels</th><th></th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>")
        if c.compiles > 1:
            parts.append(f"<p>Recompiled {c.compiles - 1} time(s): " + _e("; ".join(c.causes)) + "</p>")
    else:
        parts.append("<p>Did not run.</p>")
    if c.kernels:
        rows = "".join(f"<tr><td><code>{_e(kn.name)}</code></td><td>{_e(kn.kind)}</td><td class=\"num\">{kn.instructions}</td>"
                       f"<td><code>{_e(kn.shape)}</code></td><td>{_e(kn.ops)}</td></tr>" for kn in c.kernels)
        parts.append(f"<table class=\"kernels\"><thead><tr><th>kernel</th><th>kind</th><th>instructions</th><th>shape</th>"
                     f"<th>ops</th></tr></thead><tbody>{rows}</tbody></table>")
    compiled = next((s.compiled for s in c.signatures if s.compiled is not None), None)
    if compiled is not None:
        parts.append(_hlo_block("HLO before optimisation", compiled.hlo_text))
        if compiled.optimized_hlo_text:
            parts.append(_hlo_block("HLO after our XLA:CPU pipeline", compiled.optimized_hlo_text))
    for a in c.advice:
        parts.append(_advice_html(a))
    if c.numerics is not None:
        parts.append(_numerics_block(c.numerics))
    parts.append("</details>")
    return "".join(parts)


_CSS = """
header nav { font-size: 12px; margin: .3em 0; } header nav a { color: #1a5fb4; }
.advice { border-left: 4px solid #999; background: #f8f8f8; padding: .4em .7em; margin: .5em 0; }
.advice.warn { border-color: #d95f02; background: #fff4ec; color: inherit; } .advice.info { border-color: #1a5fb4; }
.a-kind { text-transform: uppercase; font-size: 11px; color: #666; letter-spacing: .04em; }
.a-where { color: #666; font-size: 12px; } .a-text { margin: .2em 0; }
.a-evidence { margin: .2em 0 0 1.2em; padding: 0; font-size: 12px; color: #333; }
section.function { border-top: 2px solid #ddd; margin-top: 1.5em; }
details.cluster-detail { border: 1px solid #ddd; margin: .4em 0; padding: .3em .6em; }
details.cluster-detail > summary { cursor: pointer; } details.hlo pre { max-height: 30em; }
tr.bad td { color: #a33; font-weight: bold; } .divergence { background: #fff0f0; padding: .4em .7em; }
.note { color: #555; }
"""

# The pictures' hover, zoom and search are the viz page's (PICTURE_JS); one picture per function section.
_JS = r"""
(function () {
  "use strict";
  document.querySelectorAll("script.viz-data").forEach(function (script) {
    var k = script.getAttribute("data-fn"), data = JSON.parse(script.textContent);
    var section = document.getElementById("fn-" + k);
    var canvas = section && section.querySelector(".canvas");
    if (canvas && canvas.querySelector("svg")) tfxlaPicture.install(section, data, "class");
  });
  // A link to a cluster's details opens them.
  tfxlaPicture.onLinks('a[href*="-detail-"]', function (el) { el.open = true; });
})();
"""
