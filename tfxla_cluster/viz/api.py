"""One call from a clustering result to a picture file: ``.dot``, ``.svg`` or ``.html``.

Stage: visualization. ``render(result, "html", ...)`` = build the model → plan (all nodes, or a focus
neighbourhood; clusters boxed or collapsed) → DOT text, or our own layered layout → annotated SVG →
page. Every format is produced by Python alone: Graphviz is not needed (a ``.dot`` file can still be
given to Graphviz by hand).
"""
from __future__ import annotations

from pathlib import Path

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.jit.mark_for_compilation import MarkResult
from tfxla_cluster.viz.graph_dot import make_plan, to_dot
from tfxla_cluster.viz.layout import COLLAPSE_OVER, FORMATS, format_for  # noqa: F401  (format_for: API)
from tfxla_cluster.viz.model import build_model


def render(result: MarkResult, fmt: str, *, flags=None, title: str = "", around: str | None = None,
           depth: int = 2, collapse: bool | None = None, legend: bool = True) -> str:
    """The picture of ``result`` as text in ``fmt`` ("dot", "svg" or "html"). ``collapse`` None: the
    .svg/.html of a graph of more than :data:`COLLAPSE_OVER` nodes starts with clusters collapsed
    (not a focus view, not .dot)."""
    if fmt not in FORMATS:
        raise InvalidArgumentError(f"unknown picture format '{fmt}' (expected one of {', '.join(FORMATS)})")
    # Shapes are only read by tooltips; .dot carries them too, as Graphviz tooltips.
    model = build_model(result, flags, title=title)
    if collapse is None:
        collapse = fmt != "dot" and around is None and len(model.nodes) > COLLAPSE_OVER
    plan = make_plan(model, around=around, depth=depth, collapse=collapse, legend=legend)
    if fmt == "dot":
        return to_dot(plan, tooltips=True)
    if fmt == "svg":
        from tfxla_cluster.viz.svg import cluster_svg, standalone

        return standalone(cluster_svg(plan))
    from tfxla_cluster.viz.html import to_html

    return to_html(plan)


def write(result: MarkResult, path: str | Path, *, fmt: str | None = None, **options) -> Path:
    """Write the picture of ``result`` to ``path`` (format from the extension unless ``fmt``)."""
    path = Path(path)
    text = render(result, format_for(path, fmt), **options)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
