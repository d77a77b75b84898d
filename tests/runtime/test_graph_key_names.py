"""The persistent cache's key of a function graph's runtime rewrites does not depend on the uid TF numbers the
function's name with (``__inference_f_<uid>``): a second process that traced other functions first (or in
another order) finds the graph the first one stored, with its own function names back in it. Two
different functions never share a key; a stored graph runs as the function TF traced."""
from __future__ import annotations

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

import tfxla_cluster as txc
from tfxla_cluster.flags import Flags
from tfxla_cluster.graph.loader import graph_def_from_concrete
from tfxla_cluster.runtime.compile_cache import FunctionNames, graph_key, rewritten_graph

X = np.arange(12, dtype=np.float32).reshape(3, 4)


def _f(x):
    return tf.nn.relu(x * 2.0 - 3.0)


def _g(x):
    return tf.nn.relu(x * 2.0 - 4.0)


def _graph(fn, name: str = "f") -> graph_pb2.GraphDef:
    """``fn`` traced afresh (a new uid for its name) as the pipeline imports it before grappler."""
    fn.__name__ = name
    return graph_def_from_concrete(tf.function(fn).get_concrete_function(tf.TensorSpec([3, 4], tf.float32)),
                                   inline=False)


def _names(gd) -> list[str]:
    return [f.signature.name for f in gd.library.function]


def _flags(directory) -> Flags:
    return Flags.parse(tf_xla_flags=f"--tf_xla_auto_jit=2 --tf_xla_persistent_cache_directory={directory}")


def test_the_same_function_traced_twice_has_one_key_and_another_function_another():
    first, again, other = _graph(_f), _graph(_f), _graph(_g)
    assert _names(first) != _names(again)                       # TF numbered the two traces apart
    assert graph_key(first, ["a"]) == graph_key(again, ["a"])
    assert graph_key(first, ["a"]) != graph_key(other, ["a"])   # the constant differs


def test_canonical_names_are_a_length_keeping_bijection():
    gd = graph_pb2.GraphDef()
    for name in ("__inference_f_123", "__inference_f_1234", "__forward_f_77", "__inference_f_9"):
        gd.library.function.add().signature.name = name
    names = FunctionNames.of(gd)
    canonical = names.to_canonical
    assert len(set(canonical.values())) == len(canonical)
    assert all(len(k) == len(v) for k, v in canonical.items())
    assert b"__inference_f_9" not in canonical                  # one digit: no room for a leading zero
    data = b"__inference_f_1234 __inference_f_123 __inference_f_123_specialized __inference_f_12345"
    renamed = names.canonical(data)
    assert b"__inference_f_12345" in renamed                    # another name (more digits) is left alone
    assert names.local(renamed) == data


def test_a_stored_graph_is_loaded_with_this_processs_function_names(tmp_path):
    flags = _flags(tmp_path)
    before = _graph(_f)
    out = graph_pb2.GraphDef()
    out.CopyFrom(before)
    out.node.add(name="rewritten", op="NoOp")
    assert rewritten_graph(before, ["a"], flags, lambda: out) == out

    def never():
        raise AssertionError("rewritten again")
    later = _graph(_f)                                          # "another process": other uids
    loaded = rewritten_graph(later, ["a"], flags, never)
    assert _names(loaded) == _names(later) != _names(out)
    assert [n.name for n in loaded.node] == [n.name for n in out.node]


def test_a_function_traced_after_others_runs_from_the_stored_graph_with_tfs_results(tmp_path, monkeypatch):
    monkeypatch.setenv("TFXLA_COMPILE_CACHE", str(tmp_path))
    want = _f(X).numpy()
    first = txc.function(_f, flags="--tf_xla_auto_jit=2 --tf_xla_min_cluster_size=1")
    np.testing.assert_array_equal(first(X).numpy(), want)
    tf.function(_g).get_concrete_function(X)                    # other traces move TF's uid counter
    second = txc.function(_f, flags="--tf_xla_auto_jit=2 --tf_xla_min_cluster_size=1")
    np.testing.assert_array_equal(second(X).numpy(), want)
    events = second.compile_stats().as_dict()["events"]
    assert events.get("persistent-cache graph hit") == 1, events
