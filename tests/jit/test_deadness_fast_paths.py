"""Deadness fast paths: graphs without Switch/NextIteration have only #true predicates, graphs without
Enter only the root frame; the answers equal the general computation's on a graph with control flow."""
import tensorflow as tf

from tfxla_cluster.graph import Graph
from tfxla_cluster.jit import deadness


def _graph(fn, *specs) -> Graph:
    gd = tf.function(fn).get_concrete_function(*specs).graph.as_graph_def()
    return Graph(gd)


def test_straight_line_graph_is_all_true():
    g = _graph(lambda x: tf.nn.relu(x * 2.0) + 1.0, tf.TensorSpec([4], tf.float32))
    preds = deadness.compute_predicates(g)
    assert set(preds) == {n.id for n in g.topological_order()}
    assert all(p == deadness.TRUE for p in preds.values())
    assert deadness.frame_names(g) == {}


def test_v1_cond_still_gets_switch_predicates():
    tf.compat.v1.disable_control_flow_v2()
    try:
        with tf.Graph().as_default() as tg:
            p = tf.compat.v1.placeholder(tf.bool, [], name="p")
            x = tf.compat.v1.placeholder(tf.float32, [3], name="x")
            tf.identity(tf.cond(p, lambda: x * 2.0, lambda: x - 1.0), name="out")
        g = Graph(tg.as_graph_def())
    finally:
        tf.compat.v1.enable_control_flow_v2()
    preds = deadness.compute_predicates(g)
    assert any(p != deadness.TRUE for p in preds.values())
    assert any(deadness.to_string(p).count("p:0") for p in preds.values())
