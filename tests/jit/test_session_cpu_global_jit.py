"""A session ConfigProto's ``optimizer_options.cpu_global_jit`` (issue 13): TF 2.21 auto-clusters a
tf.function on CPU with it alone (no --tf_xla_cpu_global_jit, no set_jit); without it, nothing. TF's own
dumps of that run (tests/data/session_cpu_global_jit/make.py) against our MarkForCompilation and against
``tfxla_cluster.function`` under the same context config."""
from __future__ import annotations

from pathlib import Path

import tensorflow as tf
from google.protobuf import text_format
from tensorflow.core.framework import graph_pb2
from tensorflow.core.protobuf import config_pb2
from tensorflow.python.eager import context

import tfxla_cluster as txc
from tfxla_cluster.jit.mark_for_compilation import mark_for_compilation

DATA = Path(__file__).resolve().parents[1] / "data" / "session_cpu_global_jit"


def _graph(name: str) -> graph_pb2.GraphDef:
    return text_format.Parse((DATA / name).read_text(encoding="utf-8"), graph_pb2.GraphDef())


def _members(clusters: dict[str, list[str]]) -> list[list[str]]:
    """The clusters' members (cluster numbers are process-wide, as TF's: a fresh TF process starts at 0)."""
    return sorted(sorted(m) for m in clusters.values())


def _tf_clusters() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for n in _graph("mark_for_compilation.pbtxt").node:
        if "_XlaCluster" in n.attr:
            out.setdefault(n.attr["_XlaCluster"].s.decode(), []).append(n.name)
    return out


def test_mark_for_compilation_with_the_session_option_equals_tf() -> None:
    before = _graph("before_mark_for_compilation.pbtxt")
    assert _members(mark_for_compilation(before, "", cpu_global_jit_config=True).clusters) == _members(_tf_clusters())
    assert mark_for_compilation(before, "").clusters == {}


def test_function_under_a_context_config_with_cpu_global_jit_clusters_as_tf() -> None:
    def f(x, y):
        return tf.nn.relu(tf.matmul(x, y) + 1.0) * 2.0
    x = tf.ones([4, 4])
    ours = txc.function(f, flags="")
    assert ours.get_compiled(x, x).clusters == {}
    cfg = config_pb2.ConfigProto()
    cfg.graph_options.optimizer_options.cpu_global_jit = True
    ctx = context.context()
    saved = ctx._config
    ctx._config = cfg
    try:
        assert _members(ours.get_compiled(x, x).clusters) == _members(_tf_clusters())
        assert float(ours(x, x).numpy().sum()) == float(tf.function(f)(x, x).numpy().sum())
    finally:
        ctx._config = saved
    assert ours.get_compiled(x, x).clusters == {}
