"""Grappler as TF's function runtime runs it: the function's control outputs are nodes grappler must keep.

TF's runtime hands a function's ``control_ret`` nodes to grappler as the item's ``keep_ops``. They change
what the dependency optimizer removes and therefore the order of the nodes it leaves, which is the node-id
order every JIT pass sees (CloneConstants numbers its ``clone_<n>`` copies in that order). Checked against
TF's own optimized function graph (RunMetadata ``post_optimization_graph``), node for node, order included.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context

from tfxla_cluster.flags import Flags
from tfxla_cluster.graph.loader import control_outputs, graph_def_from_concrete
from tfxla_cluster.runtime import pipeline


def _train_like_step():
    """A BatchNorm-like moving-statistics update plus an SGD-like step: stateful control outputs."""
    mean, var = tf.Variable(tf.zeros([3])), tf.Variable(tf.ones([3]))
    w, step = tf.Variable(tf.ones([3])), tf.Variable(0, dtype=tf.int64)

    @tf.function
    def f(x):
        m = tf.reduce_mean(x, axis=0)
        mean.assign(mean * 0.9 + m * 0.1)
        var.assign(var * 0.9 + tf.reduce_mean(tf.square(x - m), axis=0) * 0.1)
        step.assign_add(1)
        y = (x - m) * w
        w.assign_sub(0.1 * tf.reduce_sum(y, axis=0))
        return tf.reduce_sum(y)

    return f


def _tf_optimized_nodes(f, x) -> list[str]:
    """The node names, in id order, of TF's optimized graph of ``f`` (its function runtime's own run)."""
    context.enable_run_metadata()
    try:
        f(x)
        metadata = context.export_run_metadata()
    finally:
        context.disable_run_metadata()
    graphs = [g.post_optimization_graph for g in metadata.function_graphs
              if any(n.op == "_Arg" for n in g.post_optimization_graph.node)]
    assert graphs, "TF recorded no optimized function graph"
    return [n.name for n in graphs[-1].node]


def test_grappler_keeps_control_outputs_in_tf_order() -> None:
    f = _train_like_step()
    x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    concrete = f.get_concrete_function(x)
    want = _tf_optimized_nodes(f, x)
    assert control_outputs(concrete)  # the stateful updates are control outputs
    got = graph_def_from_concrete(concrete, grappler=True, resource_handle_data=True)
    assert [n.name for n in got.node] == want


def test_pipeline_import_gives_tf_node_order() -> None:
    f = _train_like_step()
    x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    concrete = f.get_concrete_function(x)
    want = _tf_optimized_nodes(f, x)
    # Auto-jit off: CloneConstants does nothing, so the imported graph is grappler's output as TF orders it.
    gd, graph = pipeline.import_concrete(concrete, jit_compile=None, flags=Flags.resolve(""), grappler=True)
    assert [n.name for n in gd.node] == want
    assert [n.name for n in graph.op_nodes()] == want


def test_kept_nested_call_is_kept_through_its_control_node() -> None:
    v = tf.Variable(tf.zeros([3]))

    @tf.function
    def inner(x):
        v.assign_add(x)
        return x * 2.0

    @tf.function
    def outer(x):
        return inner(x) + 1.0

    x = tf.constant(np.arange(3, dtype=np.float32))
    concrete = outer.get_concrete_function(x)
    assert control_outputs(concrete) == ["StatefulPartitionedCall"]
    want = _tf_optimized_nodes(outer, x)
    got = graph_def_from_concrete(concrete, grappler=True, resource_handle_data=True)
    # TF's PRE_PLACEMENT inlining (graph/lower_functional.py) keeps the caller as a NoOp named after it,
    # waiting on the call's output control node; grappler keeps that NoOp. Every node and the order are TF's.
    assert [n.name for n in got.node] == want
    by_name = {n.name: n for n in got.node}
    assert by_name["StatefulPartitionedCall"].op == "NoOp"


def test_grappler_beside_other_work_gives_tf_node_order_and_its_errors() -> None:
    """``run_grappler(alongside=...)`` (a process's first grappler run, next to the compiler's imports): TF's
    optimizer runs on a helper thread, ``alongside`` on the caller's; the graph is TF's, node for node, and
    a grappler failure is still the caller's typed error."""
    import threading

    import pytest

    from tfxla_cluster.errors import InvalidArgumentError
    from tfxla_cluster.graph import grappler
    from tfxla_cluster.graph.loader import runtime_rewrites

    f = _train_like_step()
    x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    concrete = f.get_concrete_function(x)
    want = _tf_optimized_nodes(f, x)
    ran_on: list = []
    before = graph_def_from_concrete(concrete, inline=False, resource_handle_data=True)
    got = runtime_rewrites(before, concrete,
                           alongside=lambda graph: ran_on.append((threading.current_thread(), graph)))
    assert [n.name for n in got.node] == want
    assert [t for t, _ in ran_on] == [threading.current_thread()]
    # It is handed the graph grappler optimizes: the function's nodes, before grappler's rewrites.
    assert {n.name for n in before.node if n.op != "StatefulPartitionedCall"} <= {n.name for n in ran_on[0][1].node}
    # A graph grappler rejects (a fetch that names no node): the same error as without the helper thread.
    with pytest.raises(InvalidArgumentError, match="grappler failed") as without:
        grappler.run_grappler(got, fetch=["no_such_node"])
    with pytest.raises(InvalidArgumentError, match="grappler failed") as beside:
        grappler.run_grappler(got, fetch=["no_such_node"], alongside=lambda: None)
    assert str(beside.value) == str(without.value)
