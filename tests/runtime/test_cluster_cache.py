"""The persistent cache keyed before lowering: a second function (as a second process would) loads each
cluster's executable without lowering it, with results bit-identical to the first compile and close to
TF's; compile-time-constant values, shapes and flags are part of the key; corrupt entries are reported
as corrupt and recompiled; the LLVM IR of a loaded cluster is emitted again on demand."""
from __future__ import annotations

import logging
import re

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.flags import Flags
from tfxla_cluster.runtime.compile_cache import CLUSTER_KIND, read_entry

AUTO = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"
RNG = np.random.RandomState(0)
X = RNG.randn(8, 16).astype(np.float32)
W = RNG.randn(16, 4).astype(np.float32)


def _dense(x, w):
    y = tf.nn.relu(tf.matmul(x, w) + 0.5)
    return tf.reduce_sum(y * y, axis=1), tf.tanh(y)


def _flags(directory, extra: str = "") -> str:
    return f"{AUTO} --tf_xla_persistent_cache_directory={directory} {extra}".strip()


def _entries(directory, kind: str) -> list:
    return [p for p in directory.glob("*.tfxla") if read_entry(p)[0].get("kind", "ir") == kind]


def _run(fn, *args):
    return [o.numpy() for o in tf.nest.flatten(fn(*args))]


def _origins(f, *args) -> list[str]:
    return [c.origin for launcher in f.get_compiled(*args).launchers.values() for c in launcher.cache.values()]


def test_a_second_function_loads_its_clusters_without_lowering(tmp_path):
    args = (tf.constant(X), tf.constant(W))
    first = txc.function(_dense, flags=_flags(tmp_path))
    want = _run(first, *args)
    assert _origins(first, *args) == ["compiled"] and len(_entries(tmp_path, CLUSTER_KIND)) == 1
    second = txc.function(_dense, flags=_flags(tmp_path))
    got = _run(second, *args)
    assert _origins(second, *args) == ["persistent cache"]
    stages = second.compile_stats().totals()
    assert "lowering" not in stages and "llvm-ir" not in stages and "llvm-opt" not in stages
    assert second.compile_stats().events.get("persistent-cache hit") == 1
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
    for g, e in zip(got, _run(_dense, *args)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
    # The IR of a loaded cluster is emitted again on demand: the same IR as the first compile's.
    ir1, ir2 = (f.experimental_get_compiler_ir(*args)(stage="llvm_ir") for f in (first, second))
    strip = lambda ir: re.sub(r"^; ModuleID.*\n", "", ir)  # noqa: E731 - the module is named after its cluster
    assert strip(ir1) == strip(ir2) and "tfxla_entry" in ir2


def test_constant_values_shapes_and_flags_are_part_of_the_key(tmp_path):
    def total(x, axis):
        return tf.reduce_sum(x * 2.0, axis=axis)
    x = tf.constant(X)
    f0 = txc.function(total, jit_compile=True, flags=_flags(tmp_path))
    np.testing.assert_allclose(f0(x, tf.constant(0)).numpy(), (X * 2).sum(0), rtol=1e-5)
    # Another value of the compile-time-constant axis, another shape: compiled, never the stored entry.
    f1 = txc.function(total, jit_compile=True, flags=_flags(tmp_path))
    np.testing.assert_allclose(f1(x, tf.constant(1)).numpy(), (X * 2).sum(1), rtol=1e-5)
    assert _origins(f1, x, tf.constant(1)) == ["compiled"]
    f2 = txc.function(total, jit_compile=True, flags=_flags(tmp_path))
    np.testing.assert_allclose(f2(x[:3], tf.constant(0)).numpy(), (X[:3] * 2).sum(0), rtol=1e-5)
    assert _origins(f2, x[:3], tf.constant(0)) == ["compiled"]
    # A flag that changes code generation (another LLVM optimisation level) is another key.
    o1 = Flags.parse(tf_xla_flags=_flags(tmp_path), xla_flags="--xla_backend_optimization_level=1")
    f3 = txc.function(total, jit_compile=True, flags=o1)
    np.testing.assert_allclose(f3(x, tf.constant(0)).numpy(), (X * 2).sum(0), rtol=1e-5)
    assert _origins(f3, x, tf.constant(0)) == ["compiled"]
    # The first signature again: loaded.
    f4 = txc.function(total, jit_compile=True, flags=_flags(tmp_path))
    assert f4(x, tf.constant(0)).numpy().tobytes() == f0(x, tf.constant(0)).numpy().tobytes()
    assert _origins(f4, x, tf.constant(0)) == ["persistent cache"]


def test_variables_are_updated_by_a_loaded_cluster(tmp_path):
    v = tf.Variable(np.ones((4,), np.float32))

    def step(x):
        v.assign_add(x * 2.0)
        return v.read_value() * 3.0
    x = tf.constant(np.arange(4, dtype=np.float32))
    first = txc.function(step, jit_compile=True, flags=_flags(tmp_path))
    a = first(x).numpy()
    v.assign(np.ones((4,), np.float32))
    second = txc.function(step, jit_compile=True, flags=_flags(tmp_path))
    b = second(x).numpy()
    assert _origins(second, x) == ["persistent cache"]
    assert a.tobytes() == b.tobytes() and v.numpy().tolist() == [1.0, 3.0, 5.0, 7.0]


@pytest.mark.parametrize("damage", ["payload", "truncated"])
def test_a_corrupt_cluster_entry_is_reported_and_recompiled(tmp_path, caplog, damage):
    args = (tf.constant(X), tf.constant(W))
    want = _run(txc.function(_dense, flags=_flags(tmp_path)), *args)
    (path,) = _entries(tmp_path, CLUSTER_KIND)
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[:-7])
    else:  # a valid header and digest over bytes that are no cluster entry
        import hashlib
        import json
        header, _ = read_entry(path)
        payload = b"not a pickle"
        header.update(object_sha256=hashlib.sha256(payload).hexdigest(), object_bytes=len(payload))
        path.write_bytes(json.dumps(header).encode() + b"\n" + payload)
    caplog.set_level(logging.WARNING, logger="tfxla_cluster.codegen")
    again = txc.function(_dense, flags=_flags(tmp_path))
    got = _run(again, *args)
    assert "corrupt" in caplog.text and path.name in caplog.text
    assert again.compile_stats().events.get("persistent-cache corrupt") == 1
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
    read_entry(path)   # rewritten whole


def test_function_graphs_after_grappler_are_stored_and_loaded(tmp_path, caplog, monkeypatch):
    from tensorflow.core.framework import graph_pb2

    from tfxla_cluster.runtime.compile_cache import GRAPH_KIND, graph_key, rewritten_graph

    flags = Flags.parse(tf_xla_flags=_flags(tmp_path))
    gd = graph_pb2.GraphDef()
    gd.node.add(name="a", op="NoOp")
    out = graph_pb2.GraphDef()
    out.node.add(name="a_rewritten", op="NoOp")

    def never():
        raise AssertionError("rewritten again")
    assert rewritten_graph(gd, ["a", "b"], flags, lambda: out) == out
    assert len(_entries(tmp_path, GRAPH_KIND)) == 1
    assert rewritten_graph(gd, ["b", "a"], flags, never) == out       # the kept nodes' order is no part of the key
    assert rewritten_graph(gd, ["a"], flags, lambda: gd) == gd          # other kept nodes: rewritten again
    key = graph_key(gd, ["a", "b"], flags)
    with monkeypatch.context() as m:   # oneDNN changes grappler's rewrites
        m.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
        off = graph_key(gd, ["a", "b"], flags)
        m.setenv("TF_ENABLE_ONEDNN_OPTS", "1")
        assert off != graph_key(gd, ["a", "b"], flags)
    path = tmp_path / f"xla_compile_cache__{key}.tfxla"
    path.write_bytes(path.read_bytes()[:-3])
    caplog.set_level(logging.WARNING, logger="tfxla_cluster.codegen")
    assert rewritten_graph(gd, ["a", "b"], flags, lambda: out) == out
    assert "corrupt" in caplog.text and path.name in caplog.text
    read_entry(path)   # rewritten whole
    assert rewritten_graph(gd, ["a", "b"], Flags.parse(tf_xla_flags=AUTO), lambda: gd) == gd   # cache off: no store
