"""A Switch whose predicate is a ``Const`` (grappler folds a tf.cond's constant condition): TF's
deadness analysis makes the predicate #true or #false rather than a symbol (``MakeSymbolPredicate``), so
the live branch shares the predicate of the code around the cond and clusters with it, and the dead branch's
nodes are #false together. TF 2.21's own dumps of fuzz seed 280001830's program (a variable read and
assigned in both branches of a tf.cond on ``reduce_any(cast(zeros))``) under auto-clustering with
--tf_xla_min_cluster_size=1, recorded on this project's AVX2 host: ours must give TF's partition."""
from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format
from tensorflow.core.framework import graph_pb2

from tfxla_cluster import ProcessState, mark_for_compilation

DATA = Path(__file__).resolve().parents[1] / "data" / "deadness_const_switch"
FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"


def _partition(gd: graph_pb2.GraphDef) -> set[frozenset[str]]:
    clusters: dict[str, set[str]] = {}
    for n in gd.node:
        if "_XlaCluster" in n.attr:
            clusters.setdefault(n.attr["_XlaCluster"].s.decode(), set()).add(n.name)
    return {frozenset(v) for v in clusters.values()}


def test_constant_switch_predicate_partition_matches_tf():
    want = graph_pb2.GraphDef()
    text_format.Parse((DATA / "mark_for_compilation.pbtxt").read_text(), want)
    result = mark_for_compilation(str(DATA / "before_mark_for_compilation.pbtxt"), FLAGS, state=ProcessState())
    got = _partition(result.graph_def)
    assert got == _partition(want)
    # the read and the live (else) branch's assignment of the same variable share one cluster
    assert any({"Read/ReadVariableOp", "cond/else/_1/cond/AssignVariableOp"} <= c for c in got)
