"""Pictures of clusterings and HLO: DOT / SVG / HTML, and TensorBoard event files.

Stage: visualization — reads results of the earlier stages, never changes them.

    model.py        MarkResult → VizModel (nodes with reasons, shapes, attrs; clusters with boundaries);
                    focus (``--around NODE --depth K``)
    graph_dot.py    Plan (what to draw: all / focus, boxed / collapsed clusters) → DOT text (pure Python)
    layered.py      a layered (Sugiyama-style) layout in pure Python: boxes and edges → centres, routes
    scene.py        a Plan laid out in two levels (inside each cluster, then clusters and loose nodes)
    svg.py          the scene as SVG: one group per cluster (``id="cluster_<name>"``) holding one group
                    per node (``data-node``) — no Graphviz anywhere
    html.py         one self-contained HTML page: inline SVG, hover panel, expand/collapse clusters,
                    search, neighbourhood focus, colour by cluster/reason, cluster and reason tables;
                    its script and style are package data in ``assets/``
    layout.py       output formats, the collapse threshold, and ``dot_to_svg`` (Graphviz, for users'
                    own DOT; our pictures do not use it)
    api.py          render(result, "dot"|"svg"|"html", ...) / write(result, path, ...)
    hlo_dot.py      hlo_to_dot(module): computations, fusions as nested boxes
    tensorboard.py  write_tensorboard(result, logdir): the marked graph as a TensorBoard event file
    cli_commands.py the ``viz`` and ``tensorboard`` subcommands

Names are resolved lazily so that importing the CLI commands does not import TensorFlow.
"""
from __future__ import annotations

from tfxla_cluster._lazy import lazy_attributes


_LAZY = {
    "render": "tfxla_cluster.viz.api",
    "write": "tfxla_cluster.viz.api",
    "format_for": "tfxla_cluster.viz.layout",
    "build_model": "tfxla_cluster.viz.model",
    "VizModel": "tfxla_cluster.viz.model",
    "focus": "tfxla_cluster.viz.model",
    "make_plan": "tfxla_cluster.viz.graph_dot",
    "to_dot": "tfxla_cluster.viz.graph_dot",
    "cluster_dot": "tfxla_cluster.viz.graph_dot",
    "dot_to_svg": "tfxla_cluster.viz.layout",
    "layered_layout": "tfxla_cluster.viz.layered",
    "build_scene": "tfxla_cluster.viz.scene",
    "graphviz_available": "tfxla_cluster.viz.layout",
    "cluster_svg": "tfxla_cluster.viz.svg",
    "to_html": "tfxla_cluster.viz.html",
    "hlo_to_dot": "tfxla_cluster.viz.hlo_dot",
    "write_tensorboard": "tfxla_cluster.viz.tensorboard",
}

__all__ = list(_LAZY)

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
