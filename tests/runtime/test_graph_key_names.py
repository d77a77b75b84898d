"""The persistent cache's key of a function graph's runtime rewrites does not depend on the uid TF numbers the
function's name with (``__inference_f_<uid>``): a second process that traced other functions first (or in
another order) finds the graph the first one stored, with its own function names back in it. Two
different functions never share a key; a stored graph runs as the function TF traced."""
from __future__ import annotations

import logging

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

import tfxla_cluster as txc
from tfxla_cluster.flags import Flags
from tfxla_cluster.graph.loader import graph_def_from_concrete
from tfxla_cluster.runtime.compile_cache import FunctionNames, graph_key, rewritten_graph

X = np.arange(12, dtype=np.float32).reshape(3, 4)


@pytest.fixture(autouse=True)
def _multi_digit_uids():
    """A uid of one digit has no room for the canonical name's leading zero (its graphs never hit: see
    FunctionNames); in a fresh process (a test run on its own) TF's first traces get such uids."""
    from tensorflow.python.framework import ops

    while ops.uid() < 100:
        pass


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


def _concrete(fn, name: str = "f"):
    fn.__name__ = name
    return tf.function(fn).get_concrete_function(tf.TensorSpec([3, 4], tf.float32))


def _function_key(concrete, flags):
    from tfxla_cluster.runtime.pipeline import _function_key

    return _function_key(concrete, [], flags, "v")


def test_the_traced_function_keys_its_graph_so_a_hit_skips_the_conversion(tmp_path):
    from tfxla_cluster.runtime.compile_cache import rewritten_function_graph

    flags = _flags(tmp_path)
    first, again, other = _concrete(_f), _concrete(_f), _concrete(_g)
    key = _function_key(first, flags)
    assert key[0] == _function_key(again, flags)[0] != _function_key(other, flags)[0]
    converted = graph_def_from_concrete(first, inline=False)
    out, cached = rewritten_function_graph(key, flags, lambda: converted, lambda before: before, [], "f", "v")
    assert not cached and out == converted

    def never(*_):
        raise AssertionError("converted or rewritten again")
    loaded, cached = rewritten_function_graph(_function_key(again, flags), flags, never, never, [], "f", "v")
    assert cached and _names(loaded) == _names(graph_def_from_concrete(again, inline=False)) != _names(out)


def test_a_corrupt_function_keyed_graph_is_reported_and_made_again(tmp_path, caplog):
    from tfxla_cluster import compile_profile
    from tfxla_cluster.runtime.compile_cache import PersistentCache, rewritten_function_graph

    # The cache's logger, at WARNING whatever an earlier test in this worker left its level at.
    caplog.set_level(logging.WARNING, logger="tfxla_cluster.codegen")
    flags = _flags(tmp_path)
    concrete = _concrete(_f)
    key = _function_key(concrete, flags)
    converted = graph_def_from_concrete(concrete, inline=False)
    rewritten_function_graph(key, flags, lambda: converted, lambda before: before, [], "f", "v")
    path = PersistentCache(tmp_path).path_for(key[0])
    path.write_bytes(path.read_bytes()[:-3] + b"xyz")
    profile = compile_profile.CompileProfile()
    with compile_profile.collecting(profile):
        out, cached = rewritten_function_graph(key, flags, lambda: converted, lambda before: before, [], "f", "v")
    assert profile.events.get("persistent-cache corrupt") == 1 and "corrupt" in caplog.text
    assert out == converted


def test_a_variables_shape_is_part_of_the_function_key(tmp_path):
    flags = _flags(tmp_path)

    def keyed(shape):
        v = tf.Variable(tf.zeros(shape))
        return _function_key(tf.function(lambda: v.read_value() * 2.0).get_concrete_function(), flags)[0]
    assert keyed([3]) != keyed([4])
