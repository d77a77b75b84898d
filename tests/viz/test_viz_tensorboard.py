"""TensorBoard export: the marked graph in an event file written by TF's own summary writer, read back with
``tf.compat.v1.train.summary_iterator``; nodes carry ``_XlaCluster`` (TensorBoard's "color by XLA
cluster") and ``_output_shapes``."""
from __future__ import annotations

from pathlib import Path

import tensorflow as tf

from tfxla_cluster import cli
from tfxla_cluster.viz import write_tensorboard

ROOT = Path(__file__).resolve().parents[2]
FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"


def read_graph_defs(path: Path) -> list[tf.compat.v1.GraphDef]:
    out = []
    for event in tf.compat.v1.train.summary_iterator(str(path)):
        if event.HasField("graph_def"):
            out.append(tf.compat.v1.GraphDef.FromString(event.graph_def))
    return out


def without_shapes(gd):
    gd = tf.compat.v1.GraphDef.FromString(gd.SerializeToString())
    for nd in gd.node:
        nd.attr.pop("_output_shapes", None)
    return gd


def test_event_file_holds_the_marked_graph(unique_result, tmp_path):
    result, _ = unique_result
    before = result.graph_def.SerializeToString(deterministic=True)
    path = write_tensorboard(result, tmp_path / "logs")
    assert path.parent == tmp_path / "logs" and path.name.startswith("events.out.tfevents.")
    (gd,) = read_graph_defs(path)
    # Exactly the pass's marked GraphDef, plus shapes.
    assert without_shapes(gd).SerializeToString(deterministic=True) == \
        without_shapes(result.graph_def).SerializeToString(deterministic=True)
    clusters = {nd.name: nd.attr["_XlaCluster"].s.decode() for nd in gd.node if "_XlaCluster" in nd.attr}
    assert clusters == {n: d.cluster for n, d in result.decisions.items() if d.cluster}
    assert set(clusters.values()) == {"cluster_0", "cluster_1"}
    by_name = {nd.name: nd for nd in gd.node}
    shapes = by_name["mul"].attr["_output_shapes"].list.shape
    assert [[d.size for d in s.dim] for s in shapes] == [[3, 4]]
    unique = [[d.size for d in s.dim] for s in by_name["Unique"].attr["_output_shapes"].list.shape]
    assert unique == [[-1], [12]]
    assert "_XlaCluster" not in by_name["Unique"].attr
    assert result.graph_def.SerializeToString(deterministic=True) == before   # the caller's copy is untouched


def test_cli_tensorboard(tmp_path, capsys):
    logdir = tmp_path / "tb"
    code = cli.main(["tensorboard", str(ROOT / "graphs/variables.pbtxt"), "--grappler", "--flags", FLAGS,
                     "--logdir", str(logdir), "--no-shapes"])
    assert code == 0
    out = capsys.readouterr().out
    assert "wrote" in out and "tensorboard --logdir" in out
    (event_file,) = logdir.glob("events.out.tfevents.*")
    (gd,) = read_graph_defs(event_file)
    # Two clusters (in-process CLI runs share TF's per-process cluster numbering, so names vary).
    assert len({nd.attr["_XlaCluster"].s.decode() for nd in gd.node if "_XlaCluster" in nd.attr}) == 2
    assert not any("_output_shapes" in nd.attr for nd in gd.node)


def test_cli_tensorboard_bad_graph_exits_2(tmp_path, capsys):
    assert cli.main(["tensorboard", str(tmp_path / "missing.pbtxt"), "--logdir", str(tmp_path / "tb")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
