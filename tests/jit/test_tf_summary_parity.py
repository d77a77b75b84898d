"""Our clustering of each bundled sample equals real TF's, down to TF's logged summary text.

For every sample in graphs/tf/, TF's own ``before_mark_for_compilation`` dump of the user function is
fed to our pass (with TF's process-global cluster counter where TF had it), and we require:
the same ``_XlaCluster`` attribute on every node as TF's ``mark_for_compilation`` dump, and the same
"*** Clustering info" summary lines TF logged (VLOG 2 and 3) in the recording.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from google.protobuf import text_format
from tensorflow.core.framework import graph_pb2

from tfxla_cluster import ProcessState, mark_for_compilation

TF_DIR = Path(__file__).resolve().parents[2] / "graphs" / "tf"
RUNS = []
for meta_path in sorted(TF_DIR.glob("*/meta.json")):
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    for run in meta["runs"]:
        if run.get("is_user_function") and run["dumps"].get("mark_for_compilation"):
            RUNS.append((meta_path.parent, meta, run))


def _load(path: Path) -> graph_pb2.GraphDef:
    return text_format.Parse(path.read_text(encoding="utf-8"), graph_pb2.GraphDef())


def _tf_summary(vlog: str, annotated_dump: str) -> list[str]:
    """The summary block TF logged right after writing ``annotated_dump``."""
    lines = vlog.splitlines()
    start = next(i for i, line in enumerate(lines) if line.endswith(f"Dumped Graph to {annotated_dump}"))
    out = []
    for line in lines[start + 1:]:
        m = re.match(r"I \S+ mark_for_compilation_pass\.cc:\d+\] (.*)$", line)
        if not m or "time:" in m.group(1):
            break
        out.append(m.group(1))
    return out


@pytest.mark.parametrize("sample_dir,meta,run", RUNS, ids=[f"{d.name}-{r['run']}" for d, _, r in RUNS])
def test_sample_clustering_and_summary_match_tf(sample_dir, meta, run):
    before = _load(sample_dir / run["dumps"]["before_mark_for_compilation"])
    after = _load(sample_dir / run["dumps"]["mark_for_compilation"])
    state = ProcessState()
    state.sequence[0] = run["clusters_before"]  # TF's process-global counter at this point
    result = mark_for_compilation(before, meta["flags"], state=state)
    tf_marks = {n.name: n.attr["_XlaCluster"].s.decode() for n in after.node if "_XlaCluster" in n.attr}
    ours = {n.name: n.attr["_XlaCluster"].s.decode() for n in result.graph_def.node if "_XlaCluster" in n.attr}
    assert ours == tf_marks
    assert all(n.attr["_XlaAlreadyClustered"].b for n in result.graph_def.node if n.name in ours)
    # The whole marked GraphDef is TF's dump, byte for byte in text format.
    assert text_format.MessageToString(result.graph_def) == text_format.MessageToString(after)
    tf_lines = _tf_summary((sample_dir / "vlog.txt").read_text(encoding="utf-8"), run["dumps"]["mark_for_compilation_annotated"])
    assert result.summary(verbose=True).splitlines() == tf_lines


@pytest.mark.parametrize("sample_dir,meta,run", RUNS, ids=[f"{d.name}-{r['run']}" for d, _, r in RUNS])
def test_debug_dumps_match_tf(sample_dir, meta, run, tmp_path, monkeypatch):
    """--tf_xla_clustering_debug writes TF's three files, with TF's names and TF's contents."""
    from tfxla_cluster.jit import dumps

    dumps.reset_counters()
    monkeypatch.setenv("TF_DUMP_GRAPH_PREFIX", str(tmp_path))
    before = _load(sample_dir / run["dumps"]["before_mark_for_compilation"])
    flags = meta["flags"] + " --tf_xla_clustering_debug"
    for _ in range(2):  # the second run of the process gets TF's "_1" suffix
        state = ProcessState()
        state.sequence[0] = run["clusters_before"]
        mark_for_compilation(before, flags, state=state)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "before_mark_for_compilation.pbtxt", "before_mark_for_compilation_1.pbtxt",
        "mark_for_compilation.pbtxt", "mark_for_compilation_1.pbtxt",
        "mark_for_compilation_annotated.pbtxt", "mark_for_compilation_annotated_1.pbtxt"]
    for ours, theirs in (("before_mark_for_compilation_1.pbtxt", run["dumps"]["before_mark_for_compilation"]),
                         ("mark_for_compilation_1.pbtxt", run["dumps"]["mark_for_compilation"]),
                         ("mark_for_compilation_annotated_1.pbtxt",
                          run["dumps"]["mark_for_compilation_annotated"])):
        got = text_format.MessageToString(_load(tmp_path / ours))
        want = text_format.MessageToString(_load(sample_dir / theirs))
        assert got == want, ours
