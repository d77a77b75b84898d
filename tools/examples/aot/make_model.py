"""Writes model.pbtxt: a small classifier (dense → relu → dense → softmax, plus the argmax) as a frozen
GraphDef, the kind of graph tfcompile takes. Deterministic: the weights come from a fixed seed."""
import numpy as np
import tensorflow as tf

rng = np.random.default_rng(20)
w1 = rng.standard_normal((8, 16)).astype(np.float32) * 0.5
b1 = rng.standard_normal(16).astype(np.float32) * 0.1
w2 = rng.standard_normal((16, 4)).astype(np.float32) * 0.5
b2 = rng.standard_normal(4).astype(np.float32) * 0.1

graph = tf.Graph()
with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 8], name="x")
    h = tf.nn.relu(tf.matmul(x, tf.constant(w1, name="w1")) + tf.constant(b1, name="b1"), name="hidden")
    logits = tf.add(tf.matmul(h, tf.constant(w2, name="w2")), tf.constant(b2, name="b2"), name="logits")
    tf.nn.softmax(logits, name="probs")
    tf.argmax(logits, axis=1, name="label")
tf.io.write_graph(graph.as_graph_def(), ".", "model.pbtxt", as_text=True)
