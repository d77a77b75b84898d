"""The clustering picture as DOT (pure Python, no Graphviz): clusters as boxes, reasons on the rest,
crossing edges, legend, focus mode and collapsed clusters — on TF's A–F chain and on sample graphs."""
from __future__ import annotations

import re

import pytest
import tensorflow as tf

from tests.gdb import GDB
from tfxla_cluster.errors import InvalidArgumentError, NotFoundError
from tfxla_cluster.jit.mark_for_compilation import ProcessState, mark_for_compilation
from tfxla_cluster.viz import build_model, cluster_dot, focus, make_plan, to_dot
from tfxla_cluster.viz.dot_text import quote, shorten
from tfxla_cluster.viz.model import short_attr

FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=2"


def chain_result():
    """TF's ChainsTest: A (no XLA kernel) → B → C → D (no XLA kernel) → E → F."""
    b = GDB()
    a = b.placeholder(tf.float32, shape=[2, 3], name="A")
    c = b.op("Relu", b.op("Relu", a, name="B"), name="C")
    d = b.op("DebugIdentity", c, name="D")
    b.op("Relu", b.op("Relu", d, name="E"), name="F")
    return mark_for_compilation(b.graph_def, FLAGS, state=ProcessState())


def subgraph_body(dot: str, cluster: str) -> str:
    m = re.search(r'subgraph "cluster_' + re.escape(cluster) + r'" \{\n(.*?)\n  \}', dot, re.S)
    assert m, f"no box for {cluster}"
    return m.group(1)


def node_line(dot: str, model, name: str) -> str:
    idx = model.nodes[name].index
    m = re.search(rf"^\s*n{idx} \[.*$", dot, re.M)
    assert m, f"no node line for {name}"
    return m.group(0)


def test_chain_model_and_dot():
    result = chain_result()
    model = build_model(result, title="chain")
    assert [c.members for c in model.clusters.values()] == [["B", "C"], ["E", "F"]]
    c0, c1 = model.clusters.values()
    assert c0.inputs == ["A:0"] and c0.outputs == ["C:0"]
    assert c1.inputs == ["D:0"] and c1.outputs == []
    assert model.nodes["B"].outputs == ["float32[2,3]"]
    assert model.nodes["D"].code == "no_xla_kernel" and "DebugIdentity" in model.nodes["D"].reason

    dot = to_dot(make_plan(model))
    assert dot.startswith('digraph "chain" {') and dot.rstrip().endswith("}")
    # One box per cluster, holding exactly its nodes, with its SVG id.
    for cluster in model.clusters.values():
        body = subgraph_body(dot, cluster.name)
        assert f'id="cluster_{cluster.name}"' in body
        ids = re.findall(r"^\s*(n\d+) \[", body, re.M)
        assert ids == [f"n{model.nodes[m].index}" for m in cluster.members]
    # Unclustered nodes: outside any box, labelled with op and short reason code.
    assert 'label="A\\nPlaceholder · [no_xla_kernel]"' in node_line(dot, model, "A")
    assert 'label="D\\nDebugIdentity · [no_xla_kernel]"' in node_line(dot, model, "D")
    assert 'class="unclustered reason-no_xla_kernel"' in node_line(dot, model, "D")
    # Edges: A→B and C→D and D→E cross a cluster boundary; B→C and E→F do not.
    idx = {n: f"n{model.nodes[n].index}" for n in "ABCDEF"}
    edges = dict(re.findall(r"^\s*(n\d+ -> n\d+) \[[^\]]*class=\"([\w-]+)\"", dot, re.M))
    assert edges[f"{idx['A']} -> {idx['B']}"] == "crossing"
    assert edges[f"{idx['C']} -> {idx['D']}"] == "crossing"
    assert edges[f"{idx['D']} -> {idx['E']}"] == "crossing"
    assert edges[f"{idx['B']} -> {idx['C']}"] == "edge-data"
    assert edges[f"{idx['E']} -> {idx['F']}"] == "edge-data"
    # Legend: clusters with sizes, reason codes with counts.
    legend = dot[dot.index("subgraph cluster_legend"):]
    assert "cluster_0 (2)" in legend and "cluster_1 (2)" in legend and "no_xla_kernel (2)" in legend
    # Tooltips carry the details (for a user's own `dot -Tsvg`).
    assert "not clustered [no_xla_kernel]" in node_line(dot, model, "D")


def test_dot_is_deterministic(unique_result):
    result, flags = unique_result
    one = cluster_dot(build_model(result, flags, title="u"))
    two = cluster_dot(build_model(result, flags, title="u"))
    assert one == two


def test_sample_graph_dot(unique_result):
    result, flags = unique_result
    model = build_model(result, flags, title="unique_in_middle")
    dot = cluster_dot(model)
    assert len(re.findall(r'subgraph "cluster_cluster_\d+"', dot)) == len(result.clusters) == 2
    unique = node_line(dot, model, "Unique")
    assert "Unique · [unique]" in unique and "TF never auto-clusters Unique" in unique
    assert "outputs: float32[?], int32[12]" in unique
    # Every op node is drawn exactly once.
    drawn = re.findall(r"^\s*n(\d+) \[", dot, re.M)
    assert sorted(map(int, drawn)) == sorted(n.index for n in model.nodes.values())


def test_focus_neighbourhood_and_boundary():
    model = build_model(chain_result())
    fc = focus(model, "C", 1)
    assert fc.depth == {"C": 0, "B": 1, "D": 1}
    assert fc.hidden == {"B": 1, "D": 1}       # A and E are one hop further
    assert set(focus(model, "C", 2).depth) == set("ABCDE")
    assert focus(model, "C", 0).depth == {"C": 0}

    dot = to_dot(make_plan(model, around="C", depth=1))
    drawn = {int(i) for i in re.findall(r"^\s*n(\d+) \[", dot, re.M)}
    assert drawn == {model.nodes[n].index for n in "BCD"}
    b, c = node_line(dot, model, "B"), node_line(dot, model, "C")
    assert "+1 hidden" in b and 'peripheries="2"' in b and "boundary" in b
    assert "focus-center" in c and "hidden" not in c
    assert "cluster_0 · 2 nodes" in dot and "around C, depth 1" in dot
    # A box shows how much of its cluster is in view.
    around_d = to_dot(make_plan(model, around="D", depth=1))
    assert len(re.findall(r'label="cluster_\d · 1 of 2 nodes shown"', around_d)) == 2
    # Only edges between drawn nodes.
    for src, dst in re.findall(r"^\s*n(\d+) -> n(\d+)", dot, re.M):
        assert int(src) in drawn and int(dst) in drawn


def test_focus_errors():
    model = build_model(chain_result())
    with pytest.raises(NotFoundError, match="graph has no node named 'c'.*did you mean 'C'"):
        focus(model, "c", 1)
    with pytest.raises(InvalidArgumentError, match="--depth"):
        focus(model, "C", -1)


def test_collapse_draws_each_cluster_as_one_node(variables_result):
    result, flags = variables_result
    model = build_model(result, flags)
    dot = to_dot(make_plan(model, collapse=True))
    assert "subgraph \"cluster_cluster_" not in dot
    for c in model.clusters.values():
        line = re.search(rf"^\s*c{c.index} \[.*$", dot, re.M).group(0)
        assert f'id="cluster_{c.name}"' in line and 'shape="box3d"' in line
        assert f"{len(c.members)} nodes" in line
    clustered = {n.index for n in model.nodes.values() if n.cluster}
    drawn = {int(i) for i in re.findall(r"^\s*n(\d+) \[", dot, re.M)}
    assert drawn.isdisjoint(clustered) and len(drawn) == len(model.unclustered)
    pairs = re.findall(r"^\s*(\w+) -> (\w+) \[", dot, re.M)
    assert all(a != b for a, b in pairs)            # no self-loops inside a collapsed cluster
    keys = re.findall(r"^\s*(\w+ -> \w+) \[[^\]]*class=\"([\w-]+)\"", dot, re.M)
    assert len(keys) == len(set(keys))             # parallel edges merged (per kind)
    assert any(cls == "edge-control" for _, cls in keys)


def test_collapse_and_focus_together(unique_result):
    result, flags = unique_result
    model = build_model(result, flags)
    dot = to_dot(make_plan(model, around="Unique", depth=1, collapse=True))
    # Unique's neighbours are in both clusters: both collapsed, with the part shown.
    assert re.search(r'c0 \[.*id="cluster_cluster_0"', dot) and re.search(r'c1 \[.*id="cluster_cluster_1"', dot)
    assert "of 10 nodes shown" in dot


def test_quoting_and_attrs():
    assert quote('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    assert shorten("abcdefghij", 5) == "ab…ij" and shorten("abc", 5) == "abc"
    b = GDB()
    x = b.placeholder(tf.float32, shape=[4], name='we"ird\\name>')
    b.op("Relu", x, name="r")
    b.const([1.0, 2.0], name="k")
    b.const(list(range(10)), tf.int32, name="big")
    result = mark_for_compilation(b.graph_def, FLAGS, state=ProcessState())
    model = build_model(result)
    dot = cluster_dot(model)
    assert 'label="we\\"ird\\\\name>\\nPlaceholder' in dot
    assert dict(model.nodes["k"].attrs)["value"] == "float32[2] {1, 2}"
    assert dict(model.nodes["big"].attrs)["value"] == "int32[10] {0, 1, 2, 3, …}"
    assert short_attr(b.node("r").attr["T"]) == "float32"
