"""Grappler's memory optimizer follows XLA's global JIT level, as in TF's function runtime
(tfxla_cluster/graph/grappler.py ``runtime_config``).

TF's MetaOptimizer leaves its default memory optimizer out when auto-clustering is on for every graph
(``IsXlaGlobalJitOn``). That optimizer turns an AddN of more than 2 inputs into a ``TemporaryVariable`` +
``AssignAdd`` chain when the estimated peak memory passes 80% of the device's 256 MiB: a large training
step (keras InceptionV3's gradient AddN_20, whose rewrite split one of TF's clusters in two), or here one
AddN of three 64 MiB tensors. With auto-clustering off, TF's own optimized graph (RunMetadata
``post_optimization_graph`` of this process, whose ``TF_XLA_FLAGS`` our flags default to) has the chain and
so does ours; with it on (TF recorded live under ``--tf_xla_auto_jit=2``), see ``big_add_n`` in
tests/graph/test_lower_functional_tf.py, which shares that file's TF process.
"""
from __future__ import annotations

import tensorflow as tf

from tfxla_cluster.graph.grappler import runtime_config, xla_auto_clustering_on
from tfxla_cluster.graph.loader import graph_def_from_concrete

import tf_record  # tools/ is on sys.path (setup.cfg pythonpath)


def test_memory_optimizer_as_tfs_runtime_in_this_process() -> None:
    big_add_n = tf_record.memory_optimizer_probe()
    want = tf_record.post_optimization_graph(big_add_n, tf.ones((4096, 4096)))
    got = graph_def_from_concrete(big_add_n.get_concrete_function(), grappler=True)  # flags: the environment's
    assert tf_record.node_tuples(got) == tf_record.node_tuples(want)
    rewritten = any(n.op == "TemporaryVariable" for n in want.node)
    assert rewritten == (not xla_auto_clustering_on())  # the rule, seen in TF's own graph


def test_jit_level_rule() -> None:
    """``IsXlaGlobalJitOn``: on only when both the single-GPU and the general level are at least ON_1."""
    assert xla_auto_clustering_on("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit")
    assert xla_auto_clustering_on("--tf_xla_auto_jit=1")
    assert not xla_auto_clustering_on("--tf_xla_auto_jit=single-gpu(2)")  # the general level stays OFF
    assert not xla_auto_clustering_on("--tf_xla_auto_jit=-1")
    assert runtime_config("--tf_xla_auto_jit=2").graph_options.optimizer_options.global_jit_level == 1
    assert runtime_config("").graph_options.optimizer_options.global_jit_level == 0
