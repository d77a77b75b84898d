"""The function TF runs for a rewritten graph (tf_compat.function_from_graph_def) and the call options
that keep TF's runtime from running grappler on it a second time (tf_compat.without_grappler)."""
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2
from tensorflow.python.eager import context

import tfxla_cluster as txc
from tfxla_cluster import tf_compat
from tfxla_cluster.graph.function import runtime_to_placeholders
from tfxla_cluster.runtime.pipeline import import_into_tf


def _meta_optimizer_disabled() -> bool:
    cfg = config_pb2.ConfigProto()
    cfg.ParseFromString(context.context().function_call_options.config_proto_serialized)
    return cfg.graph_options.rewrite_options.disable_meta_optimizer


def test_without_grappler_is_scoped_to_the_call_and_reuses_its_options():
    before = context.context().function_call_options
    seen = []
    assert not _meta_optimizer_disabled()
    for _ in range(2):
        assert tf_compat.without_grappler(lambda: (seen.append(context.context().function_call_options),
                                                    _meta_optimizer_disabled())[1])
    assert seen[0] is seen[1]   # one options object: TF's kernel cache keeps the first instantiation
    assert context.context().function_call_options is before and not _meta_optimizer_disabled()


def test_function_from_graph_def_runs_outputs_and_run_ops():
    v = tf.Variable(np.zeros(3, np.float32))

    @tf.function
    def step(x):
        v.assign_add(x)          # a control output only
        return tf.reduce_sum(x * 2.0)

    concrete = step.get_concrete_function(tf.TensorSpec([3], tf.float32))
    txf = txc.function(step, flags="--tf_xla_auto_jit=0")
    compiled = txf.get_compiled(tf.constant(np.ones(3, np.float32)))
    gd = compiled.graph_def
    args = sorted((n for n in gd.node if n.op == "_Arg"), key=lambda n: n.attr["index"].i)
    rets = sorted((n for n in gd.node if n.op == "_Retval"), key=lambda n: n.attr["index"].i)
    fn = import_into_tf(gd, [a.name for a in args], [f"{r.name}:0" for r in rets],
                        list(concrete.function_def.control_ret.values()))
    x = tf.constant([1.0, 2.0, 3.0])
    out = fn._call_flat([x, *concrete.captured_inputs], fn.captured_inputs)
    want = step(x)   # TF's own: the same value and the same variable update
    np.testing.assert_array_equal(out[0].numpy(), want.numpy())
    np.testing.assert_array_equal(v.numpy(), 2 * x.numpy())
    # Every node of the graph is in the function (nothing copied or added, unlike a prune).
    assert {n.name for n in fn.function_def.node_def} == {n.name for n in runtime_to_placeholders(gd).node} - \
        {a.name for a in args}
