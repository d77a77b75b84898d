"""DOT text helpers shared by the cluster and HLO pictures: quoting, attribute lists, colours.

Stage: visualization (output only). Everything here is pure Python: a ``.dot`` file never needs
Graphviz installed. Guarantees: every string that reaches DOT goes through :func:`quote` (or
:func:`html_label_text` inside ``<...>`` labels), so node names with quotes, backslashes or angle
brackets cannot break the file; output is deterministic for the same input.
"""
from __future__ import annotations

import html

# Pastel fills for clusters (ColorBrewer Set3 without its grey, then Pastel1); a cluster keeps its
# colour by index, so the same graph always draws the same way.
CLUSTER_FILLS = (
    "#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5",
    "#bc80bd", "#ccebc5", "#ffed6f", "#a6cee3", "#b2df8a", "#cab2d6", "#fbb4ae", "#decbe4",
)


def quote(text: str) -> str:
    """A DOT double-quoted string. Backslashes are doubled so that names never turn into DOT's
    ``\\n``/``\\N`` escapes; use :func:`label` for text whose newlines should break lines."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def label(*lines: str) -> str:
    """A quoted multi-line label (centred lines)."""
    return quote("\n".join(lines))


def attrs(**kw: object) -> str:
    """``[a="1", b="x"]`` for the non-None values (``class_`` → ``class``), or ''."""
    items = []
    for key, value in kw.items():
        if value is None:
            continue
        key = key.rstrip("_")
        if isinstance(value, RawLabel):
            items.append(f"{key}={value.text}")
        else:
            items.append(f"{key}={quote(str(value))}")
    return f" [{', '.join(items)}]" if items else ""


class RawLabel:
    """An already-formed DOT value (an HTML-like ``<...>`` label) that :func:`attrs` must not quote."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def html_label_text(text: str) -> str:
    """Text inside an HTML-like label: XML-escaped (Graphviz parses these labels as XML)."""
    return html.escape(text, quote=True)


def shorten(text: str, limit: int) -> str:
    """``text`` cut in the middle to at most ``limit`` characters (node names keep both ends)."""
    if limit <= 0 or len(text) <= limit:
        return text
    keep = limit - 1
    head = (keep + 1) // 2
    return text[:head] + "…" + text[len(text) - (keep - head):]


def tint(color: str, amount: float) -> str:
    """``#rrggbb`` mixed with white (``amount`` 0 = unchanged, 1 = white)."""
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    mix = [round(c + (255 - c) * amount) for c in (r, g, b)]
    return "#" + "".join(f"{c:02x}" for c in mix)


def shade(color: str, amount: float) -> str:
    """``#rrggbb`` mixed with black (``amount`` 0 = unchanged, 1 = black)."""
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(c * (1 - amount)):02x}" for c in (r, g, b))


def safe_id(text: str) -> str:
    """An XML-id-friendly fragment: letters, digits, ``_``, ``-``, ``.`` kept (HLO names stay readable),
    anything else becomes ``_``."""
    return "".join(ch if (ch.isascii() and ch.isalnum()) or ch in "_-." else "_" for ch in text)
