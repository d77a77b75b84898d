"""Regenerate TF 2.21's dumps of a tf.function clustered under a session ConfigProto with only
``graph_options.optimizer_options.cpu_global_jit = True`` (no TF_XLA_FLAGS level, no set_jit):

    TF_XLA_FLAGS=--tf_xla_clustering_debug TF_DUMP_GRAPH_PREFIX=<dir> python make.py

TF clusters the function on CPU (cluster_0: add/y, mul/y, MatMul, add, Relu, mul); without the option it
forms no cluster and writes no mark_for_compilation dump. Copy before_mark_for_compilation.pbtxt and
mark_for_compilation.pbtxt here. (``tf.compat.v1.enable_eager_execution(config=...)`` leaves the context's
config empty in TF 2.21, so the ConfigProto is given to the eager context directly.)
"""
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2
from tensorflow.python.eager import context



@tf.function
def f(x, y):
    return tf.nn.relu(tf.matmul(x, y) + 1.0) * 2.0


if __name__ == "__main__":
    cfg = config_pb2.ConfigProto()
    cfg.graph_options.optimizer_options.cpu_global_jit = True
    context.context()._config = cfg
    x = tf.ones([4, 4])
    print(f(x, x).numpy().sum())
