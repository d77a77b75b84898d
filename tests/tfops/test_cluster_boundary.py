"""ClusterBoundary against TF's own encapsulation (tests/data/encapsulate_tf, real TF 2.21 dumps).

TF's ``encapsulate_subgraphs_after`` replaces each cluster by one call node: its data inputs are the
cluster's arguments (compile-time constants first, resources last — ``_XlaNumConstantArgs`` /
``_XlaNumResourceArgs``), every outside consumer of a member tensor now reads ``<cluster>:k`` with
``k`` the result's number in TF's edge order, and member control edges become control edges of the
call node. Our boundary, computed from TF's ``encapsulate_subgraphs_before`` (the marked graph), must
say the same; and a tiny graph with nodes A–F checks the orders directly.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from tensorflow.core.framework import graph_pb2, types_pb2

from tfxla_cluster.graph.graph import Graph
from tfxla_cluster.tfops.cluster_boundary import ClusterBoundary, cluster_boundaries

DATA = Path(__file__).resolve().parent.parent / "data" / "encapsulate_tf"
FUNCTIONS = sorted(p.name for p in DATA.iterdir() if (p / "meta.json").exists())


def _load(path: Path) -> graph_pb2.GraphDef:
    from google.protobuf import text_format

    return text_format.Parse(path.read_text(encoding="utf-8"), graph_pb2.GraphDef())


def _tensor(ref: str) -> tuple[str, int]:
    name, _, idx = ref.partition(":")
    return name, int(idx or 0)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_boundary_equals_tf_encapsulation(name: str) -> None:
    meta = json.loads((DATA / name / "meta.json").read_text(encoding="utf-8"))
    before = _load(DATA / name / meta["files"]["encapsulate_subgraphs_before"])
    after = _load(DATA / name / meta["files"]["encapsulate_subgraphs_after"])
    clusters: dict[str, list[str]] = {}
    for nd in before.node:
        if "_XlaCluster" in nd.attr:
            clusters.setdefault(nd.attr["_XlaCluster"].s.decode(), []).append(nd.name)
    graph = Graph(before)
    boundaries = cluster_boundaries(graph, clusters)
    member_of = {m: c for c, ms in clusters.items() for m in ms}
    after_nodes = {nd.name: nd for nd in after.node}
    # Outputs: an outside consumer's reference to member:i became <cluster>:k, k = position in edge order.
    for nd in before.node:
        if nd.name in member_of:
            continue
        for pos, ref in enumerate(nd.input):
            if ref.startswith("^") or _tensor(ref)[0] not in member_of:
                continue
            t = _tensor(ref)
            b = boundaries[member_of[t[0]]]
            assert _tensor(after_nodes[nd.name].input[pos]) == (b.name, b.outputs.index(t)), (nd.name, ref)
    for cname, b in boundaries.items():
        call = after_nodes[cname]
        nconst, nres = call.attr["_XlaNumConstantArgs"].i, call.attr["_XlaNumResourceArgs"].i
        data = [_tensor(r) for r in call.input if not r.startswith("^")]
        # An input produced by another cluster is that cluster's call output in TF's graph.
        mine = [(member_of[n], boundaries[member_of[n]].outputs.index((n, i))) if n in member_of else (n, i)
                for n, i in b.inputs]
        assert sorted(mine) == sorted(data)
        position = {t: mine[k] for k, t in enumerate(b.inputs)}
        assert {position[t] for t in b.resources} == set(data[len(data) - nres:])
        assert {position[t] for t in b.constants} == set(data[:nconst])
        middle = [position[t] for t in b.inputs if t not in b.constants and t not in b.resources]
        assert middle == data[nconst:len(data) - nres]      # edge order kept within a group
        fdef = next(f for f in after.library.function if f.signature.name == cname)
        dtype_at = {position[t]: dt for t, dt in zip(b.inputs, b.input_dtypes)}
        assert [dtype_at[t] for t in data] == [a.type for a in fdef.signature.input_arg]
        assert [b.dtype_of(t) for t in b.outputs] == [a.type for a in fdef.signature.output_arg]
        ctrl = {"^" + (member_of.get(c, c)) for c in b.control_inputs}
        assert ctrl == {r for r in call.input if r.startswith("^")}


def _graph(nodes: list[tuple[str, str, list[str]]]) -> Graph:
    gd = graph_pb2.GraphDef()
    for name, op, inputs in nodes:
        nd = gd.node.add(name=name, op=op, input=inputs)
        if op == "Placeholder":
            nd.attr["dtype"].type = types_pb2.DT_FLOAT
        elif op == "Const":
            nd.attr["dtype"].type = types_pb2.DT_INT32
            nd.attr["value"].tensor.dtype = types_pb2.DT_INT32
            nd.attr["value"].tensor.tensor_shape.dim.add(size=1)
            nd.attr["value"].tensor.int_val.append(2)
        elif op == "VarHandleOp":
            nd.attr["dtype"].type = types_pb2.DT_FLOAT
            nd.attr["shape"].shape.dim.add(size=2)
        elif op == "ReadVariableOp":
            nd.attr["dtype"].type = types_pb2.DT_FLOAT
        else:
            nd.attr["T"].type = types_pb2.DT_FLOAT
        if op == "Reshape":
            nd.attr["Tshape"].type = types_pb2.DT_INT32
    return Graph(gd, assign_devices=False)


def test_inputs_outputs_constants_resources_on_a_tiny_graph() -> None:
    g = _graph([("A", "Placeholder", []), ("S", "Const", []), ("V", "VarHandleOp", []),
                ("W", "Placeholder", ["^A"]),
                ("B", "ReadVariableOp", ["V"]), ("C", "AddV2", ["A", "B"]), ("D", "Reshape", ["C", "S"]),
                ("E", "Mul", ["D", "A"]), ("F", "Neg", ["E"]), ("G", "Neg", ["C", "^W"])])
    b = ClusterBoundary.of(g, ["E", "D", "C", "B"], "cluster_0")
    assert b.members == ["B", "C", "D", "E"]
    assert b.inputs == [("V", 0), ("A", 0), ("S", 0)]                # first use, edge order
    assert b.consumers[("A", 0)] == [("C", 0), ("E", 1)]
    assert b.constants == {("S", 0)} and b.resources == {("V", 0)}
    assert b.lowering_inputs() == [("S", 0), ("A", 0), ("V", 0)]     # constants first, resources last
    assert b.outputs == [("E", 0), ("C", 0)]          # edge order: F's input edge is made before G's
    assert b.launch_outputs == [("C", 0), ("E", 0)]   # the launch node's: by producer id
    assert b.resource_dtype(0) == types_pb2.DT_FLOAT
    assert [n.name for n in b.handle_users(0)] == ["B"]
    assert b.control_inputs == [] and b.control_outputs == set()
    g2 = ClusterBoundary.of(g, ["G", "W"], "cluster_1")
    assert g2.control_inputs == ["A"] and g2.inputs == [("C", 0)]


def test_unknown_member_raises() -> None:
    g = _graph([("A", "Placeholder", [])])
    with pytest.raises(Exception, match="nope"):
        ClusterBoundary.of(g, ["nope"])
