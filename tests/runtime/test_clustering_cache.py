"""Auto-clustering results in the persistent cache: a later clustering of the same graph (as in a second
process) is replayed from disk with the names, members and process state (cluster sequence numbers,
fuel) the clustering pass itself gives from the same state; the pass's full result is computed on
demand; the fuel left is part of the key when the graph could spend it; corrupt entries are reported as
corrupt and replaced; debug dumps bypass the cache."""
from __future__ import annotations

import collections
import json
import logging

import pytest
import tensorflow as tf

from tfxla_cluster.flags import Flags
from tfxla_cluster.graph.graph import Graph
from tfxla_cluster.jit.mark_for_compilation import mark_for_compilation
from tfxla_cluster.process_state import PROCESS
from tfxla_cluster.runtime.compile_cache import (CLUSTERING_KIND, LazyMarkResult, clustered, read_entry)

AUTO = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"


@pytest.fixture(scope="module")
def graph_def():
    """Two clusters: TF's string conversions (no XLA kernels) sit between them."""
    @tf.function
    def f(x, w):
        s = tf.strings.as_string(tf.nn.relu(tf.matmul(x, w) + 1.0))
        return tf.tanh(tf.strings.to_number(s)) * 2.0
    return f.get_concrete_function(tf.TensorSpec([4, 8]), tf.TensorSpec([8, 3])).graph.as_graph_def()


@pytest.fixture
def fresh_state(monkeypatch):
    """TF's fresh-process clustering state, restored after the test."""
    monkeypatch.setattr(PROCESS, "fuel", None)
    monkeypatch.setattr(PROCESS, "sequence", collections.defaultdict(int))
    return PROCESS


def _flags(directory, extra: str = "") -> Flags:
    return Flags.parse(tf_xla_flags=f"{AUTO} --tf_xla_persistent_cache_directory={directory} {extra}".strip())


def _runner(gd, flags, calls: list):
    def run(state):
        calls.append(state)
        result = mark_for_compilation(Graph(gd), flags, state=state)
        return result.clusters, result
    return run


def _entries(directory) -> list:
    return [p for p in directory.glob("*.tfxla") if read_entry(p)[0].get("kind") == CLUSTERING_KIND]


def _state(state) -> tuple:
    return state.fuel, {k: v for k, v in state.sequence.items() if v}


@pytest.mark.parametrize("extra", ["", "--tf_xla_deterministic_cluster_names"])
def test_a_replayed_clustering_equals_the_pass_from_the_same_state(tmp_path, graph_def, fresh_state, extra):
    flags, calls = _flags(tmp_path, extra), []
    run = _runner(graph_def, flags, calls)
    cold, cold_result = clustered(graph_def, flags, run, jit_compile=None)
    assert len(cold) == 2 and calls == [None] and len(_entries(tmp_path)) == 1
    # Later graphs are numbered on: a hit replays from the state it finds, as the pass does.
    before = _state(fresh_state)
    hit, lazy = clustered(graph_def, flags, run, jit_compile=None)
    assert calls == [None] and isinstance(lazy, LazyMarkResult)
    after_hit = _state(fresh_state)
    fresh_state.fuel, fresh_state.sequence = before[0], collections.defaultdict(int, before[1])
    want, want_result = run(None)
    assert hit == want and list(hit) == list(want) and set(hit).isdisjoint(cold)
    assert after_hit == _state(fresh_state)
    assert all(name.startswith("cluster_") for name in hit)
    # The pass's own result, on demand: the same decisions as the pass run from that state.
    assert {n: d.cluster for n, d in lazy.decisions.items()} == {n: d.cluster for n, d in want_result.decisions.items()}
    assert lazy.clusters == want and lazy.summary() == want_result.summary()


def test_the_fuel_left_is_part_of_the_key_when_the_graph_could_spend_it(tmp_path, graph_def, fresh_state):
    flags, calls = _flags(tmp_path, "--tf_xla_clustering_fuel=3"), []
    run = _runner(graph_def, flags, calls)
    cold, _ = clustered(graph_def, flags, run, jit_compile=None)
    spent = fresh_state.fuel
    assert spent == 0 and calls == [None]   # 3 candidates, then "fuel exhausted"
    fresh_state.fuel, fresh_state.sequence = None, collections.defaultdict(int)
    hit, _ = clustered(graph_def, flags, run, jit_compile=None)
    assert hit == cold and fresh_state.fuel == 0 and len(calls) == 1
    # Another graph spent fuel first: the fuel left is another key, the pass runs (and spends none).
    clustered(graph_def, flags, run, jit_compile=None)
    assert len(calls) == 2 and fresh_state.fuel == 0


def test_unlimited_fuel_is_one_key_and_is_spent_on_a_hit(tmp_path, graph_def, fresh_state):
    flags, calls = _flags(tmp_path), []
    run = _runner(graph_def, flags, calls)
    clustered(graph_def, flags, run, jit_compile=None)
    spent = flags.tf_xla_clustering_fuel - fresh_state.fuel
    assert spent > 0
    clustered(graph_def, flags, run, jit_compile=None)
    assert len(calls) == 1 and flags.tf_xla_clustering_fuel - fresh_state.fuel == 2 * spent


@pytest.mark.parametrize("damage", ["truncate", "wrong fields", "unknown node"])
def test_a_corrupt_entry_is_reported_and_replaced(tmp_path, graph_def, fresh_state, caplog, damage):
    flags, calls = _flags(tmp_path), []
    run = _runner(graph_def, flags, calls)
    cold, _ = clustered(graph_def, flags, run, jit_compile=None)
    (path,) = _entries(tmp_path)
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:-5])
    else:
        from tfxla_cluster.runtime.compile_cache import PersistentCache

        header, payload = read_entry(path)
        data = json.loads(payload)
        if damage == "wrong fields":
            data["clusters"] = "cluster_0"
        else:
            data["clusters"][0][0] = "no_such_node"
        path.unlink()
        PersistentCache(tmp_path)._write(path, json.dumps(data).encode(), {k: header[k] for k in ("key", "module", "kind")})
    fresh_state.fuel, fresh_state.sequence = None, collections.defaultdict(int)
    with caplog.at_level(logging.WARNING, logger="tfxla_cluster.codegen"):
        again, result = clustered(graph_def, flags, run, jit_compile=None)
    assert again == cold and len(calls) == 2 and not isinstance(result, LazyMarkResult)
    assert any("corrupt" in r.getMessage() and path.name in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tfxla_cluster.codegen"):
        replayed, _ = clustered(graph_def, flags, run, jit_compile=None)   # rewritten: a hit again
    assert len(calls) == 2 and not caplog.records and list(replayed.values()) == list(cold.values())


def test_debug_dumps_and_the_cache_off_run_the_pass(tmp_path, graph_def, fresh_state, monkeypatch):
    monkeypatch.setenv("TF_DUMP_GRAPH_PREFIX", str(tmp_path / "dumps"))
    for flags in (_flags(tmp_path, "--tf_xla_clustering_debug"), Flags.parse(tf_xla_flags=AUTO)):
        calls = []
        run = _runner(graph_def, flags, calls)
        clustered(graph_def, flags, run, jit_compile=None)
        clustered(graph_def, flags, run, jit_compile=None)
        assert calls == [None, None]
    assert not _entries(tmp_path)
