"""What a second process with the persistent cache skips, and what it must still do right.

* A ``jit_compile=True`` function's must-compile check is kept in the cache (``must_compile_checked``): a
  later check of the same graph takes the stored cluster without running the check; another graph, or a
  function TF refuses, runs it (a refusal is never stored: it raises in every process, with TF's error).
* ``source_digest`` is kept under the source files' stat: a kept digest of other files is not used.
* ``GraphDefFunction`` (the rewritten graph as a FunctionDef made in C++, no Python ``Operation``) returns
  what TF's function over the same graph returns — calling a library function, under a gradient tape
  (TF's ConcreteFunction then runs it: gradients equal TF's), and inside another function's trace.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from tfxla_cluster.flags import Flags
from tfxla_cluster.runtime import compile_cache
from tfxla_cluster.runtime.compile_cache import CLUSTERING_KIND, must_compile_checked, read_entry
from tfxla_cluster.tf_compat import GraphDefFunction


def _flags(directory) -> Flags:
    return Flags.parse(tf_xla_flags=f"--tf_xla_persistent_cache_directory={directory}")


def _graph_def(scale: float):
    @tf.function
    def f(x):
        return tf.tanh(x * scale) + 1.0
    return f.get_concrete_function(tf.TensorSpec([4])).graph.as_graph_def()


def test_a_must_compile_check_is_replayed_from_the_cache(tmp_path):
    flags, calls = _flags(tmp_path), []
    gd = _graph_def(2.0)
    members = [n.name for n in gd.node]

    def run():
        calls.append(1)
        return {"cluster_0": members}, None
    assert must_compile_checked(gd, flags, run) == ({"cluster_0": members}, None) and calls == [1]
    assert [read_entry(p)[0]["kind"] for p in tmp_path.glob("*.tfxla")] == [CLUSTERING_KIND]
    assert must_compile_checked(gd, flags, run) == ({"cluster_0": members}, None) and calls == [1]
    must_compile_checked(_graph_def(3.0), flags, run)   # another graph: checked
    assert calls == [1, 1]
    must_compile_checked(gd, Flags.parse(tf_xla_flags="--tf_xla_persistent_cache_directory="), run)   # cache off
    assert calls == [1, 1, 1]


def test_a_refused_function_is_checked_in_every_process(tmp_path, monkeypatch):
    import tfxla_cluster as txc

    monkeypatch.setenv("TFXLA_COMPILE_CACHE", str(tmp_path))

    def f(x):
        return tf.strings.length(tf.strings.as_string(x))   # no XLA kernel: TF's error, each time
    for _ in range(2):
        with pytest.raises(tf.errors.InvalidArgumentError) as tf_error:
            tf.function(f, jit_compile=True)(tf.constant([1.0, 2.0]))
        with pytest.raises(tf.errors.InvalidArgumentError) as ours:
            txc.function(f, jit_compile=True)(tf.constant([1.0, 2.0]))
        assert isinstance(ours.value, type(tf_error.value))
        assert "AsString" in str(ours.value) and "AsString" in str(tf_error.value)
    assert not [p for p in tmp_path.glob("*.tfxla") if read_entry(p)[0].get("kind") == CLUSTERING_KIND]


def test_a_kept_source_digest_of_other_files_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("TFXLA_COMPILE_CACHE", str(tmp_path))
    fresh = compile_cache.source_digest.__wrapped__()
    memo = tmp_path / "source_digest.json"
    kept = json.loads(memo.read_text(encoding="utf-8"))
    assert kept["digest"] == fresh and compile_cache.source_digest.__wrapped__() == fresh
    memo.write_text(json.dumps({"stamp": "other files", "digest": "stale"}), encoding="utf-8")
    assert compile_cache.source_digest.__wrapped__() == fresh
    assert json.loads(memo.read_text(encoding="utf-8")) == kept
    memo.write_text("not json", encoding="utf-8")
    assert compile_cache.source_digest.__wrapped__() == fresh


@pytest.fixture(scope="module")
def looped():
    """A function whose graph calls library functions (a functional While's cond and body)."""
    @tf.function
    def f(x, n):
        i, y = tf.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, tf.sin(y) * 1.5 + 0.25), (0, x))
        return y * 2.0, tf.reduce_sum(y)
    concrete = f.get_concrete_function(tf.TensorSpec([3]), tf.TensorSpec([], tf.int32))
    gd = concrete.graph.as_graph_def()
    feeds = [t.op.name for t in concrete.graph.inputs]
    fetches = [t.name for t in concrete.graph.outputs]
    return f, GraphDefFunction(gd, feeds, fetches, [])


def test_graph_def_function_returns_tfs_results(looped):
    f, fn = looped
    x, n = tf.constant([0.1, -0.7, 2.0]), tf.constant(4)
    got = fn._call_flat([x, n], [])
    want = f(x, n)
    assert len(got) == 2 and fn.captured_inputs == []
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    np.testing.assert_array_equal(fn(x, n)[0].numpy(), want[0].numpy())


def test_graph_def_function_under_a_tape_and_in_a_trace(looped):
    @tf.function
    def g(x, w):
        return tf.tanh(tf.matmul(x, w)) * 2.0
    concrete = g.get_concrete_function(tf.TensorSpec([2, 3]), tf.TensorSpec([3, 2]))
    fn = GraphDefFunction(concrete.graph.as_graph_def(), [t.op.name for t in concrete.graph.inputs],
                          [t.name for t in concrete.graph.outputs], [])
    x = tf.constant(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))
    w = tf.constant(np.linspace(0.5, -0.5, 6, dtype=np.float32).reshape(3, 2))
    with tf.GradientTape() as tape:
        tape.watch(w)
        got = tf.reduce_sum(fn(x, w)[0] ** 2)
    with tf.GradientTape() as tape_tf:
        tape_tf.watch(w)
        want = tf.reduce_sum(g(x, w) ** 2)
    np.testing.assert_allclose(tape.gradient(got, w).numpy(), tape_tf.gradient(want, w).numpy(), rtol=1e-6)
    f, looped_fn = looped   # inside another function's trace: a call op of TF's function over the graph
    n = tf.constant(3)
    traced = tf.function(lambda a, b: looped_fn(a, b)[1] * 3.0)
    np.testing.assert_allclose(traced(x[0], n).numpy(), f(x[0], n)[1].numpy() * 3.0, rtol=1e-6)
