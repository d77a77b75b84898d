"""A small TF program for the report tests: a deliberately tiny cluster, a bigger one, an unclusterable
op (Unique) between them, and a cluster recompiled for several input lengths.

    TF_XLA_FLAGS="--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit" tfxla-cluster report -o r.html -- tiny_program.py
"""
import sys

import numpy as np
import tensorflow as tf


@tf.function
def step(x, w):
    tiny = tf.abs(x * 2.0 + 1.0) - 0.5            # 4 elements: the tiny cluster
    u, _ = tf.unique(tf.reshape(tiny, [-1]))      # Unique: TF never auto-clusters it
    big = tf.reduce_sum(tf.tanh(tf.matmul(w, w)) * 3.0 + 1.0, axis=1)
    return tf.reduce_sum(u) + big


@tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
def varying(v):
    return tf.reduce_sum(tf.exp(v) * 2.0 + tf.sin(v) - 1.0)


calls = int(sys.argv[1]) if len(sys.argv) > 1 else 3
rng = np.random.default_rng(0)
x = tf.constant(rng.standard_normal([2, 2]).astype(np.float32))
w = tf.constant(rng.standard_normal([64, 64]).astype(np.float32))
for _ in range(calls):
    step(x, w)
for n in (5, 6, 7, 8):                            # one recompilation per new length: with TF's lazy
    for _ in range(2):                            # compilation a new length compiles at its second call
        varying(tf.ones([n]))
print("done")
