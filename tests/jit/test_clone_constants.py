"""CloneConstantsForBetterClustering reproduces TF's clones exactly (names, rewiring, order)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from google.protobuf import text_format
from tensorflow.core.framework import graph_pb2

from tfxla_cluster.jit.clone_constants import clone_constants

DUMPS = sorted(p for p in (Path(__file__).resolve().parents[2] / "graphs" / "tf").glob(
    "*/before_mark_for_compilation*.pbtxt") if "/clone_" in p.read_text(encoding="utf-8"))
CLONE = re.compile(r"^(.*)/clone_\d+$")


def _unclone(gd: graph_pb2.GraphDef) -> graph_pb2.GraphDef:
    """TF's graph as it was before the pass: clones removed, their consumers fed by the original."""
    out = graph_pb2.GraphDef()
    out.CopyFrom(gd)
    keep = [n for n in out.node if not CLONE.match(n.name)]
    for n in keep:
        refs = []
        for ref in n.input:
            ctrl = ref.startswith("^")
            m = CLONE.match(ref.lstrip("^").split(":")[0])
            if m and ctrl:
                continue  # a control edge from a clone was added next to the original's
            refs.append(("^" if ctrl else "") + m.group(1) if m else ref)
        del n.input[:]
        n.input.extend(refs)
    del out.node[:]
    out.node.extend(keep)
    return out


@pytest.mark.parametrize("path", DUMPS, ids=[p.parent.name for p in DUMPS])
def test_clones_equal_tf(path):
    tf_graph = text_format.Parse(path.read_text(encoding="utf-8"), graph_pb2.GraphDef())
    ours = clone_constants(_unclone(tf_graph))
    assert text_format.MessageToString(ours) == text_format.MessageToString(tf_graph)


def test_nothing_when_jit_off_or_inplace_ops():
    gd = text_format.Parse("""
      node { name: "c" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } }
             attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape {} float_val: 1 } } } }
      node { name: "a" op: "Neg" input: "c" attr { key: "T" value { type: DT_FLOAT } } }
      node { name: "b" op: "Neg" input: "c" attr { key: "T" value { type: DT_FLOAT } } }""", graph_pb2.GraphDef())
    assert [n.name for n in clone_constants(gd).node] == ["c", "a", "b", "c/clone_0"]
    assert list(clone_constants(gd).node[1].input) == ["c/clone_0"]
    assert clone_constants(gd, jit_on=False) == gd


def _graph_facts(g) -> tuple:
    nodes = [(n.id, n.name, n.op, n.assigned_device, n.outputs, n.inputs, n.node_def.SerializeToString(deterministic=True),
              [e.id for e in n.in_edges], [e.id for e in n.out_edges]) for n in g.nodes]
    edges = [(e.id, e.src.id, e.src_output, e.dst.id, e.dst_input) for e in g.edges()]
    return nodes, edges, g.graph_def.SerializeToString(deterministic=True), [n.id for n in g.topological_order()]


@pytest.mark.parametrize("path", DUMPS[:4], ids=[p.parent.name for p in DUMPS[:4]])
def test_cloned_graph_is_derived_not_imported_again(path):
    """``with_cloned_constants`` carries the imported nodes over to the cloned graph (``Graph.derived``): the
    same nodes, slots, devices, edges (in TF's order, late edges of the clones included) and GraphDef as a
    fresh import of the cloned GraphDef."""
    from tfxla_cluster.graph.graph import Graph
    from tfxla_cluster.jit.clone_constants import with_cloned_constants
    before = _unclone(text_format.Parse(path.read_text(encoding="utf-8"), graph_pb2.GraphDef()))
    gd, graph = with_cloned_constants(before)
    assert gd is not before
    assert _graph_facts(graph) == _graph_facts(Graph(gd, check_attrs=False))
