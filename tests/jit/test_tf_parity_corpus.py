"""Clustering parity with real TF 2.21 on the recorded corpus (tests/data/tf_parity).

Each recording holds TF's own ``before_mark_for_compilation`` and ``mark_for_compilation`` dumps of a
tf.function run under one flag set (tools/compare_with_tf.py records them). Our pass gets TF's input
graph, TF's flags and the fuel TF had left, and must produce TF's node → cluster partition and TF's
cluster names (TF's process-global numbering shifted to a fresh process, as ``fresh_name`` does).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
import compare_with_tf as cmp  # tools/ is on sys.path (setup.cfg pythonpath)

from tfxla_cluster import ProcessState, mark_for_compilation  # noqa: E402

DATA = ROOT / "tests" / "data" / "tf_parity"
CASES = []
for _fs, _fn, _rec in cmp.recordings(DATA):
    _meta = json.loads((_rec / "meta.json").read_text(encoding="utf-8"))
    CASES += [(_fs, _fn, _rec, _meta, _run) for _run in cmp.runs_to_compare(_meta)]


def ours(graph_def, flags: str = ""):
    """A fresh process's view: a new fuel/sequence state per run."""
    return mark_for_compilation(graph_def, flags, state=ProcessState())


@pytest.mark.parametrize("fs,fn,rec,meta,run", CASES,
                         ids=[f"{fs}/{fn}/{run['run']}" for fs, fn, _, _, run in CASES])
def test_partition_and_names_match_tf(fs, fn, rec, meta, run):
    result = cmp.compare_run(ours, fs, fn, rec, meta, run)
    assert result.error is None, result.error
    assert result.partition_match, result.details
    assert result.names_match, result.details


def test_corpus_is_large_enough():
    fns = {fn for _, fn, *_ in CASES}
    flagsets = {fs for fs, *_ in CASES}
    assert len(fns) >= 40 and len(flagsets) >= 6


def test_deterministic_serialization_orders_map_keys_like_cpp():
    """C++ sorts map keys with std::less ("T" < "Tshape"); Python's upb writes "Tshape" first."""
    from tensorflow.core.framework import graph_pb2

    from tfxla_cluster.jit.mark_for_compilation import serialize_deterministic

    gd = graph_pb2.GraphDef()
    nd = gd.node.add(name="r", op="Reshape", input=["x", "s"])
    nd.attr["Tshape"].type = 3
    nd.attr["T"].type = 1
    nd.attr["_class"].list.s.append(b"loc:@x")
    data = serialize_deterministic(gd)
    assert data.index(b"\n\x01T\x12") < data.index(b"\n\x06Tshape\x12") < data.index(b"\n\x06_class")
    back = graph_pb2.GraphDef()
    back.ParseFromString(data)
    assert back == gd and len(data) == len(gd.SerializeToString(deterministic=True))
