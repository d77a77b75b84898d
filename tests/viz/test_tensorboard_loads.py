"""TensorBoard itself loads what ``tfxla-cluster tensorboard`` writes: its event loader finds one graph
event, and the graph holds every node with the pass's ``_XlaCluster`` attributes (TensorBoard's
"Color by: XLA Cluster"). Needs the ``tensorboard`` extra (``pip install tfxla_cluster[tensorboard]``;
the test extra has it too)."""
from __future__ import annotations

from pathlib import Path

import pytest

event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator",
    reason="TensorBoard is not installed: pip install 'tfxla_cluster[tensorboard]' (or the test extra)")

from tfxla_cluster.cli import main  # noqa: E402
from tfxla_cluster.graph import load_graph  # noqa: E402
from tfxla_cluster.jit.mark_for_compilation import ProcessState, mark_for_compilation  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"


def test_tensorboard_loads_the_marked_graph(tmp_path, capsys):
    sample = ROOT / "graphs" / "tf" / "unique_in_middle" / "before_mark_for_compilation_1.pbtxt"
    logdir = tmp_path / "tb"
    assert main(["tensorboard", str(sample), "--flags", FLAGS, "--logdir", str(logdir)]) == 0
    capsys.readouterr()

    acc = event_accumulator.EventAccumulator(str(logdir))
    acc.Reload()
    assert acc.Tags()["graph"] is True
    graph = acc.Graph()
    want = mark_for_compilation(load_graph(str(sample)), FLAGS, state=ProcessState())
    assert {n.name for n in graph.node} == {n.name for n in want.graph_def.node}
    clusters = {n.name: n.attr["_XlaCluster"].s.decode() for n in graph.node if "_XlaCluster" in n.attr}
    # The partition TF itself made on this graph (its recorded mark_for_compilation dump).
    from tfxla_cluster.graph.io import read_graph_def

    tf_marked = read_graph_def(sample.with_name("mark_for_compilation_1.pbtxt"))
    tf_clusters = {n.name: n.attr["_XlaCluster"].s.decode() for n in tf_marked.node if "_XlaCluster" in n.attr}
    assert set(clusters) == set(tf_clusters) and clusters
    # Shapes for TensorBoard's edge labels.
    assert all("_output_shapes" in n.attr for n in graph.node if n.op not in ("NoOp",) and n.name in clusters)
