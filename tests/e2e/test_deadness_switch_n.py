"""Deadness of an N-way ``_SwitchN`` (``tf.switch_case`` lowered): TF's HandleSwitch gives output k the
integer symbol ``index=k`` (ANDed with the negations of the earlier ones, the last output only the
negations), and the Merge of the branches stays a disjunction TF does not simplify to true — so a Const
(#true) is not contracted into the node after the Merge (the ``switch_case`` difference of
test_clusters_equal_tf under min-cluster-size 1)."""
from __future__ import annotations

from google.protobuf import text_format
from tensorflow.core.framework import graph_pb2

from tfxla_cluster.graph.graph import Graph
from tfxla_cluster.jit import deadness

_GRAPH = """
node { name: "i" op: "Placeholder" attr { key: "dtype" value { type: DT_INT32 } } }
node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }
node { name: "sw" op: "_SwitchN" input: "x" input: "i"
       attr { key: "T" value { type: DT_FLOAT } } attr { key: "num_outs" value { i: 3 } } }
node { name: "b0" op: "Identity" input: "sw" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "b1" op: "Identity" input: "sw:1" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "b2" op: "Identity" input: "sw:2" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "m" op: "Merge" input: "b0" input: "b1" input: "b2"
       attr { key: "T" value { type: DT_FLOAT } } attr { key: "N" value { i: 3 } } }
node { name: "y" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } }
       attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape {} float_val: 1 } } } }
node { name: "sub" op: "Sub" input: "m:0" input: "y" attr { key: "T" value { type: DT_FLOAT } } }
"""


def _preds() -> dict[str, str]:
    g = Graph(text_format.Parse(_GRAPH, graph_pb2.GraphDef()))
    preds = deadness.compute_predicates(g)
    return {n.name: deadness.to_string(preds[n.id]) for n in g.op_nodes()}


def test_switch_n_outputs_get_integer_symbols() -> None:
    p = _preds()
    assert p["b0"] == "i:0=0"
    assert p["b1"] == "(i:0=1 & ~i:0=0)"
    assert p["b2"] == "(~i:0=0 & ~i:0=1)"


def test_merge_of_switch_n_is_not_simplified_to_true() -> None:
    p = _preds()
    assert p["m"] == "((i:0=1 & ~i:0=0) | (~i:0=0 & ~i:0=1) | i:0=0)"
    assert p["sub"] == p["m"] and p["y"] == "#true"
