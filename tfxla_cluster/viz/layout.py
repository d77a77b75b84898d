"""The output formats of the ``viz`` command, and running Graphviz for whoever wants its layout.

Stage: visualization. Our pictures do not need Graphviz (:mod:`tfxla_cluster.viz.scene` lays them
out); :func:`dot_to_svg` is for a user's own DOT text. It lays out DOT with Graphviz's ``dot`` program through the
maintained ``graphviz`` Python binding (which runs the program; nothing is re-implemented). When the
binding or the program is missing it raises :class:`~tfxla_cluster.errors.FailedPreconditionError`
naming exactly what to install. This module imports nothing heavy, so the CLI can check before it
loads TensorFlow.
"""
from __future__ import annotations

from pathlib import Path

from tfxla_cluster import errors  # its classes import TF on first use: only when an error is raised

FORMATS = ("dot", "svg", "html")
# Pictures (.svg/.html) of graphs with more op nodes than this start with clusters collapsed (the page
# expands one on a click); the viz command and the report both use it.
COLLAPSE_OVER = 200
DOT_MISSING = ("Graphviz's 'dot' program was not found on PATH: install the Debian package 'graphviz' "
               "(apt-get install graphviz), or write .dot output, which needs only Python")
BINDING_MISSING = ("the Python package 'graphviz' is not installed (pip install graphviz); it runs Graphviz's "
                   "'dot' (Debian package 'graphviz') to lay out .svg/.html output. .dot output needs neither")


def format_for(path: str | Path, fmt: str | None = None) -> str:
    """The output format: ``fmt`` if given, else the file's extension (``.htm`` is html, ``.gv`` dot)."""
    if fmt is None:
        fmt = Path(path).suffix.lower().lstrip(".")
        fmt = {"htm": "html", "gv": "dot"}.get(fmt, fmt)
    if fmt not in FORMATS:
        raise errors.InvalidArgumentError(f"cannot tell the output format of '{path}': use a .dot, .svg or .html "
                                   "file name, or --format")
    return fmt


def dot_to_svg(dot_text: str) -> str:
    """Lay out ``dot_text`` with Graphviz's ``dot``; return the SVG text."""
    try:
        import graphviz
    except ImportError:
        raise errors.FailedPreconditionError(BINDING_MISSING) from None
    try:
        data = graphviz.pipe("dot", "svg", dot_text.encode("utf-8"), quiet=True)
    except graphviz.ExecutableNotFound:
        raise errors.FailedPreconditionError(DOT_MISSING) from None
    except graphviz.CalledProcessError as e:
        stderr = (e.stderr or b"").decode("utf-8", "replace").strip().splitlines()
        raise errors.InternalError(f"Graphviz's dot failed (exit {e.returncode}): "
                            f"{stderr[0] if stderr else 'no message'}") from None
    return data.decode("utf-8")


def require_graphviz() -> None:
    """Raise the install hint now if :func:`dot_to_svg` could not run."""
    dot_to_svg("digraph {}")


def graphviz_available() -> bool:
    """Whether :func:`dot_to_svg` can run (the binding imports and ``dot`` runs)."""
    try:
        require_graphviz()
        return True
    except (errors.FailedPreconditionError, errors.InternalError):
        return False
