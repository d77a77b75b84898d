"""Pictures without Graphviz: with no ``dot`` on PATH and no ``graphviz`` Python package, ``viz`` still
writes .svg and .html with every cluster and node, and the report still has its pictures."""
from __future__ import annotations

import re
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tfxla_cluster.viz import render

ROOT = Path(__file__).resolve().parents[2]
FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def no_graphviz(monkeypatch, tmp_path):
    """PATH without Graphviz's ``dot`` (only the Python running the tests stays reachable) and no
    ``graphviz`` binding."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setitem(sys.modules, "graphviz", None)
    assert shutil.which("dot") is None


def test_viz_svg_and_html_without_dot(no_graphviz, unique_result):
    result, flags = unique_result
    root = ET.fromstring(render(result, "svg", flags=flags).split("?>", 1)[1])
    clusters = {g.get("data-cluster"): g for g in root.iter(f"{SVG}g") if "xla-cluster" in g.get("class", "")}
    assert set(clusters) == set(result.clusters)
    for name, members in result.clusters.items():
        inside = sorted(g.get("data-node") for g in clusters[name].iter(f"{SVG}g") if g.get("data-node"))
        assert inside == sorted(members)
    page = render(result, "html", flags=flags, collapse=True)
    for name in result.clusters:
        assert re.search(rf'<g id="cluster_{name}" class="node xla-cluster collapsed" data-cluster="{name}"', page)
    assert 'data-node="Unique"' in page and "<path d=" in page


def test_report_has_pictures_without_dot(no_graphviz, tmp_path):
    from tfxla_cluster.report import build_report, write_report

    report = build_report(str(ROOT / "graphs" / "unique_in_middle.pbtxt"), flags=FLAGS, grappler=True, run=False)
    text = write_report(report, tmp_path / "r.html").read_text(encoding="utf-8")
    assert "No picture" not in text
    (fn,) = report.functions
    for name in fn.clusters:
        assert f'class="cluster xla-cluster expanded" data-cluster="{name}"' in text
    assert re.search(r'<g id="f0-n\d+" class="node unclustered reason-unique" data-node="Unique"', text)
