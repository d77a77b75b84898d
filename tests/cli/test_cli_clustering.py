"""The clustering CLI: `mark` prints TF's summary and writes TF's marked graph; `explain` gives reasons."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import text_format
from tensorflow.core.framework import graph_pb2

ROOT = Path(__file__).resolve().parents[2]
FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"


def run(*args: str, env_flags: str | None = None) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ)
    env.pop("TF_XLA_FLAGS", None)
    if env_flags is not None:
        env["TF_XLA_FLAGS"] = env_flags
    return subprocess.run([sys.executable, "-m", "tfxla_cluster", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)


def test_mark_writes_tf_marked_graph(tmp_path):
    out = tmp_path / "marked.pbtxt"
    proc = run("mark", "graphs/tf/unique_in_middle/before_mark_for_compilation_1.pbtxt", "--flags", FLAGS,
               "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "*** Clustering info for graph of size" in proc.stdout
    assert " Built 2 clusters" in proc.stdout
    want = text_format.Parse((ROOT / "graphs/tf/unique_in_middle/mark_for_compilation_1.pbtxt").read_text(encoding="utf-8"),
                             graph_pb2.GraphDef())
    got = text_format.Parse(out.read_text(encoding="utf-8"), graph_pb2.GraphDef())
    assert got == want


def test_explain_json_reasons_from_env_flags():
    proc = run("explain", "graphs/tf/unique_in_middle/before_mark_for_compilation_1.pbtxt", "--json",
               env_flags=FLAGS)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    by_node = {n["node"]: n for n in report["nodes"]}
    unique = next(n for n in by_node.values() if n["op"] == "Unique")
    assert unique["cluster"] is None and unique["code"] == "unique"
    assert len(report["clusters"]) == 2
    assert report["unclustered_op_histogram"]["Unique"] == 1


def _tf_live_clusters(target: str) -> tuple[dict[str, str], dict[str, str]]:
    """TF's own run of ``target`` (tools/tf_record.py, a fresh TF process in this machine's oneDNN mode):
    node -> op of the graph TF clusters, and node -> cluster name."""
    import tempfile

    import tf_record

    with tempfile.TemporaryDirectory() as tmp:
        meta = tf_record.record(target, tmp, FLAGS, keep="function", annotated=False)
        runs = [r for r in meta["runs"] if r.get("is_user_function")]
        assert len(runs) == 1, meta.get("error") or meta.get("stderr_tail", "")[-500:]
        graph = tf_record.load_graph_def(Path(tmp) / (runs[0]["dumps"].get("mark_for_compilation")
                                                      or runs[0]["input_dump"]))
    ops = {n.name: n.op for n in graph.node if n.op not in ("_Arg", "_Retval")}
    return ops, {n.name: n.attr["_XlaCluster"].s.decode() for n in graph.node if "_XlaCluster" in n.attr}


@pytest.mark.onednn_mode
def test_explain_text_and_node():
    """explain --grappler on the mlp sample says what TF's live run of the same function does in this
    oneDNN mode: the same ops (remapper fusions when oneDNN is on, named as such) and the same partition."""
    tf_ops, tf_cluster = _tf_live_clusters("tools/make_graphs.py:mlp")
    proc = run("explain", "graphs/mlp.pbtxt", "--grappler", "--flags", FLAGS, "--json")
    assert proc.returncode == 0, proc.stderr
    ours = {n["node"]: n for n in json.loads(proc.stdout)["nodes"] if n["node"] in tf_ops}
    assert {k: n["op"] for k, n in ours.items()} == tf_ops
    partition = {frozenset(k for k in ours if ours[k]["cluster"] == c) for c in {n["cluster"] for n in ours.values()}
                 if c is not None}
    assert partition == {frozenset(k for k in tf_cluster if tf_cluster[k] == c) for c in set(tf_cluster.values())}

    proc = run("explain", "graphs/mlp.pbtxt", "--grappler", "--flags", FLAGS)
    assert proc.returncode == 0, proc.stderr
    if "_FusedMatMul" in tf_ops.values():
        assert "_FusedMatMul" in proc.stdout and "remapper" in proc.stdout
    proc = run("explain", "graphs/mlp.pbtxt", "--grappler", "--flags", FLAGS, "--node", "Softmax")
    assert proc.returncode == 0
    assert proc.stdout.startswith("Softmax (Softmax) on CPU:0")
    if "Softmax" in tf_cluster:
        assert "clustered into" in proc.stdout
    else:
        assert "not clustered [min_cluster_size]" in proc.stdout


def test_bad_flag_is_one_line_exit_2():
    proc = run("mark", "graphs/mlp.pbtxt", "--flags", "--tf_xla_auto_jitt=2")
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1
    assert lines[0].startswith("tfxla-cluster: error: INVALID_ARGUMENT: Unknown flag in TF_XLA_FLAGS: "
                               "--tf_xla_auto_jitt=2")
    assert "did you mean --tf_xla_auto_jit" in lines[0]


def test_unknown_node_and_help():
    proc = run("explain", "graphs/mlp.pbtxt", "--flags", FLAGS, "--node", "nope")
    assert proc.returncode == 2 and "no node named 'nope'" in proc.stderr
    for cmd in ("info", "flags", "mark", "explain"):
        proc = run(cmd, "--help")
        assert proc.returncode == 0 and "usage: tfxla-cluster" in proc.stdout


def test_hlo_command_prints_parsable_modules():
    from tfxla_cluster.hlo import parse_module

    proc = run("hlo", "graphs/tf/layer_norm/before_mark_for_compilation_1.pbtxt", "--flags", FLAGS)
    assert proc.returncode == 0, proc.stderr
    module = parse_module(proc.stdout)
    assert module.name == "cluster_0"
    proc = run("hlo", "graphs/tf/layer_norm/before_mark_for_compilation_1.pbtxt", "--flags", FLAGS,
               "--optimized")
    assert proc.returncode == 0 and "fusion(" in proc.stdout
    proc = run("hlo", "graphs/mlp.pbtxt", "--flags", FLAGS, "--cluster", "nope")
    assert proc.returncode == 2 and "no cluster named 'nope'" in proc.stderr


def test_cache_command(tmp_path):
    (tmp_path / "xla_compile_cache__bad.tfxla").write_bytes(b"not an entry")
    proc = run("cache", "verify", "--dir", str(tmp_path))
    assert proc.returncode == 1 and "CORRUPT" in proc.stdout and "1 entries, 1 corrupt" in proc.stdout
    proc = run("cache", "clear", "--dir", str(tmp_path))
    assert proc.returncode == 0 and "removed 1 entries" in proc.stdout
    proc = run("cache", "list")
    assert proc.returncode == 2 and "no cache directory" in proc.stderr
