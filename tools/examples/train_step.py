"""A plain TF program (no tfxla_cluster import): a few SGD steps of a small regression model.

Run it as is with TF, or through tfxla_cluster: `tfxla-cluster run tools/examples/train_step.py`
(with TF_XLA_FLAGS="--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit" to auto-cluster).
"""
import numpy as np
import tensorflow as tf

rng = np.random.default_rng(0)
x = tf.constant(rng.standard_normal((64, 8)).astype(np.float32))
y = tf.constant(rng.standard_normal((64, 1)).astype(np.float32))
w = tf.Variable(np.zeros((8, 1), np.float32))
b = tf.Variable(np.zeros((1,), np.float32))


@tf.function
def step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
    gw, gb = tape.gradient(loss, [w, b])
    w.assign_sub(0.1 * gw)
    b.assign_sub(0.1 * gb)
    return loss


for i in range(5):
    loss = step(x, y)
print("losses:", " ".join(f"{float(step(x, y)):.6f}" for _ in range(3)))
print("w[0]:", f"{float(w.numpy()[0, 0]):.6f}")
