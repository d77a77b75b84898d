"""runtime.pipeline: the one driver. compile_concrete (what tfxla_cluster.function builds per traced
signature) and compile_graph (the report's marked GraphDefs) give one launch node and launcher per
cluster, and a function whose results equal TF's own run of the same function."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfxla_cluster.flags import Flags
from tfxla_cluster.jit.mark_for_compilation import mark_for_compilation
from tfxla_cluster.process_state import ProcessState
from tfxla_cluster.runtime import pipeline

AUTO = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"


def _py_launch(launcher):
    def call(*tensors):
        return [tf.convert_to_tensor(a) for a in launcher(*tensors)]
    return call


def _fn(x, y):
    a = tf.exp(x) * y
    u, _ = tf.unique(tf.reshape(a, [-1]))   # no XLA kernel: two clusters around it
    return tf.reduce_sum(u) + tf.reduce_sum(tf.tanh(y))


def test_compile_concrete_runs_the_function_as_tf_does() -> None:
    x = tf.constant(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))
    y = x + 2.0
    concrete = tf.function(_fn).get_concrete_function(x, y)
    program = pipeline.compile_concrete(concrete, jit_compile=None, flags=AUTO, grappler=True, backend="llvm",
                                        py_launch=_py_launch)
    assert program.clusters and set(program.launchers) == set(program.clusters)
    assert [s.name for s in program.signatures] == list(program.clusters)
    assert sum(n.op == "EagerPyFunc" for n in program.graph_def.node) == len(program.clusters)
    got = program.fn(x, y)
    np.testing.assert_allclose(got[0].numpy(), _fn(x, y).numpy(), rtol=1e-5)
    assert all(la.stats.compiles == 1 and la.stats.executions == 1 for la in program.launchers.values())


def test_compile_graph_of_a_marked_graph() -> None:
    x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3) / 6)
    y = x * 3.0
    concrete = tf.function(_fn).get_concrete_function(x, y)
    flags = Flags.resolve(AUTO)
    gd, graph = pipeline.import_concrete(concrete, jit_compile=None, flags=flags, grappler=True)
    marked = mark_for_compilation(graph, flags, state=ProcessState())
    args = sorted((n for n in gd.node if n.op == "_Arg"), key=lambda n: n.attr["index"].i)
    rets = sorted((n for n in gd.node if n.op == "_Retval"), key=lambda n: n.attr["index"].i)
    program = pipeline.compile_graph(graph, marked.clusters, flags=flags, backend="evaluator", must_compile=False,
                                     py_launch=_py_launch, feeds=[a.name for a in args],
                                     fetches=[f"{r.name}:0" for r in rets], run_ops=[])
    np.testing.assert_allclose(program.fn(x, y)[0].numpy(), _fn(x, y).numpy(), rtol=1e-5)
    assert {la.backend for la in program.launchers.values()} == {"evaluator"}
