"""SVG and HTML output (our own layered layout: no Graphviz), ``dot_to_svg``'s clear error when Graphviz is
missing, and the ``viz`` CLI command."""
from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tfxla_cluster import cli
from tfxla_cluster.errors import FailedPreconditionError
from tfxla_cluster.viz import render
from tfxla_cluster.viz.layout import dot_to_svg

ROOT = Path(__file__).resolve().parents[2]
FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
SVG = "{http://www.w3.org/2000/svg}"


def groups(root: ET.Element, cls: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if cls in g.get("class", "").split()]


def test_svg_has_one_group_per_cluster_holding_its_nodes(unique_result):
    result, flags = unique_result
    svg = render(result, "svg", flags=flags, title="unique_in_middle")
    assert svg.startswith("<?xml")
    root = ET.fromstring(svg.split("?>", 1)[1])
    boxes = {g.get("id"): g for g in groups(root, "xla-cluster")}
    assert set(boxes) == {"cluster_cluster_0", "cluster_cluster_1"}
    for name, members in result.clusters.items():
        box = boxes[f"cluster_{name}"]
        assert box.get("data-cluster") == name
        inside = sorted(g.get("data-node") for g in groups(box, "node"))
        assert inside == sorted(members)
    nodes = {g.get("data-node"): g for g in groups(root, "node")}
    assert set(nodes) == set(result.decisions)             # every op node, once
    unique = nodes["Unique"]
    assert unique.get("data-code") == "unique" and unique.get("data-op") == "Unique"
    title = unique.find(f"{SVG}title").text
    assert "Unique (Unique)" in title and "not clustered [unique]: Unique op" in title
    assert "outputs: float32[?], int32[12]" in title and "device: CPU:0" in title
    texts = " ".join(t.text or "" for t in unique.iter(f"{SVG}text"))
    assert "[unique]" in texts
    assert groups(root, "legend") and not any("legend" in (g.get("data-node") or "") for g in nodes.values())
    edge_titles = [g.find(f"{SVG}title").text for g in groups(root, "edge")]
    assert "Unique → Sum" in edge_titles or any(t.startswith("Unique → ") for t in edge_titles)


def test_html_is_self_contained(unique_result):
    result, flags = unique_result
    page = render(result, "html", flags=flags, title="unique_in_middle")
    # No external assets: no src=/href= to other files or the network, no <link>.
    assert not re.search(r"<(script|img|iframe)[^>]*\bsrc=", page)
    assert "<link" not in page
    hrefs = re.findall(r'\bhref="([^"]*)"', page)
    assert hrefs and all(h.startswith("#") for h in hrefs)
    assert not re.search(r"(?<!xmlns=\")(?<!xmlns:xlink=\")https?://(?!www\.w3\.org/)", page)
    # Summary: flags in effect and TF's summary text.
    assert 'TF_XLA_FLAGS=&quot;--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit&quot;' in page
    assert "*** Clustering info for graph of size 24" in page
    # Tables: clusters with sizes and boundaries; reasons with TF's text and our hint.
    assert re.search(r'<tr data-cluster="cluster_0">.*?<td class="num">10</td>', page)
    assert "<code>Unique:0</code>" in page
    assert 'data-code="unique"' in page and "TF never auto-clusters Unique" in page
    data = json.loads(re.search(r'<script type="application/json" id="viz-data">(.*?)</script>', page, re.S)
                      .group(1))
    assert data["nodes"]["Unique"]["reason"] == "Unique op"
    assert data["clusters"]["cluster_1"]["size"] == 10


def test_html_escapes_script_end():
    from tests.gdb import GDB
    import tensorflow as tf
    from tfxla_cluster.jit.mark_for_compilation import ProcessState, mark_for_compilation

    b = GDB()
    b.op("Relu", b.placeholder(tf.float32, shape=[2], name="</script><b>x"), name="r")
    page = render(mark_for_compilation(b.graph_def, FLAGS, state=ProcessState()), "html")
    assert "</script><b>" not in page
    body = re.search(r'id="viz-data">(.*?)</script>', page, re.S).group(1)
    assert "</script><b>x" in json.loads(body)["nodes"]


def test_missing_dot_is_one_clear_error(monkeypatch):
    pytest.importorskip("graphviz")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(FailedPreconditionError, match=r"'dot' program was not found.*Debian package 'graphviz'"):
        dot_to_svg("digraph { a }")


def test_missing_binding_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "graphviz", None)   # makes `import graphviz` raise ImportError
    with pytest.raises(FailedPreconditionError, match=r"pip install graphviz"):
        dot_to_svg("digraph { a }")


# ----- CLI ---------------------------------------------------------------------------------------
def run_cli(*args: str) -> int:
    return cli.main(list(args))


def test_cli_viz_dot_needs_no_graphviz(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", "/nonexistent")
    out = tmp_path / "g.dot"
    assert run_cli("viz", str(ROOT / "graphs/unique_in_middle.pbtxt"), "--grappler", "--flags", FLAGS,
                   "-o", str(out)) == 0
    text = out.read_text(encoding="utf-8")
    # In-process CLI runs share TF's process-global cluster counter, so the number varies.
    assert re.search(r'subgraph "cluster_cluster_\d+"', text) and "[unique]" in text
    assert "wrote" in capsys.readouterr().out


def test_cli_viz_svg_and_html_without_dot(tmp_path, monkeypatch, capsys):
    """With no Graphviz on PATH (and no graphviz binding) the CLI still draws .svg and .html."""
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setitem(sys.modules, "graphviz", None)
    for name in ("g.svg", "g.html"):
        assert run_cli("viz", str(ROOT / "graphs/unique_in_middle.pbtxt"), "--grappler", "--flags", FLAGS,
                       "-o", str(tmp_path / name)) == 0
    svg = (tmp_path / "g.svg").read_text(encoding="utf-8")
    root = ET.fromstring(svg.split("?>", 1)[1])
    assert len(groups(root, "xla-cluster")) == 2 and len(groups(root, "node")) == 22
    page = (tmp_path / "g.html").read_text(encoding="utf-8")
    assert 'data-node="Unique"' in page and page.count('class="cluster xla-cluster expanded"') == 2
    assert "wrote" in capsys.readouterr().out


def test_cli_viz_html_focus_and_collapse(tmp_path):
    g = str(ROOT / "graphs/transformer_block.pbtxt")
    out = tmp_path / "focus.html"
    assert run_cli("viz", g, "--grappler", "--flags", FLAGS, "-o", str(out), "--around", "MatMul",
                   "--depth", "1") == 0
    page = out.read_text(encoding="utf-8")
    nodes = re.findall(r'<g id="n\d+" class="node[^"]*" data-node="([^"]*)"', page)
    assert "MatMul" in nodes and len(nodes) < 10
    assert "focus-center" in page and "boundary" in page
    out2 = tmp_path / "collapsed.svg"
    assert run_cli("viz", g, "--grappler", "--flags", FLAGS, "-o", str(out2), "--collapse") == 0
    svg = out2.read_text(encoding="utf-8")
    # (In-process CLI runs share TF's per-process cluster numbering, so the name's number varies.)
    assert len(re.findall(r'<g id="cluster_cluster_(\d+)" class="node xla-cluster collapsed" '
                          r'data-cluster="cluster_\1"', svg)) == 1


@pytest.mark.parametrize("args, message", [
    (["-o", "g.png"], "g.png': use a .dot, .svg or .html file name"),
    (["-o", "g.dot", "--around", "nope"], "graph has no node named 'nope'"),
    (["-o", "g.dot", "--flags", "--tf_xla_bogus=1"], "tf_xla_bogus"),
])
def test_cli_viz_bad_input_exits_2(tmp_path, capsys, args, message):
    args = [a if a not in ("g.png", "g.dot") else str(tmp_path / a) for a in args]
    assert run_cli("viz", str(ROOT / "graphs/mlp.pbtxt"), *args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_html_when_nothing_is_clustered():
    """TF's defaults on CPU: no clusters; the page says so and explains the device policy."""
    import tfxla_cluster as txc

    result = txc.mark_for_compilation(txc.load_graph(str(ROOT / "graphs/mlp.pbtxt")), "",
                                      state=txc.ProcessState())
    page = render(result, "html", flags=txc.Flags.parse(""), title="mlp")
    assert "No clusters were formed." in page and "No clusters: No compilable candidates." in page
    assert "(TF&#x27;s defaults: no TF_XLA_FLAGS / XLA_FLAGS set)" in page
    assert 'data-code="device_policy"' in page and "--tf_xla_cpu_global_jit" in page
    root = ET.fromstring(re.search(r"<svg.*</svg>", page, re.S).group(0))
    assert not groups(root, "xla-cluster") and len(groups(root, "node")) == len(result.decisions)
