"""``tf.config.optimizer.set_jit`` turns auto-clustering on for our functions as it does for TF's
(tfxla_cluster/runtime/function.py ``effective_flags``, flags.py ``Flags.with_session_jit_level``).

``set_jit(True)``/``"autoclustering"`` sets the function runtime's ConfigProto ``global_jit_level`` to
ON_1 (``set_jit(False)``: OFF); TF's passes combine it with ``--tf_xla_auto_jit`` (xla_cluster_util.cc
``GetXlaGlobalJitLevel``: the session level, DEFAULT meaning OFF, overridden by each flag level that is not
DEFAULT). TF is recorded live in one process (tools/tf_record.py ``record_batch``) under
``--tf_xla_cpu_global_jit`` only, each target's builder calling ``set_jit`` first: a plain function, the
same body under ``jit_compile=False`` (TF clusters it too: ``_XlaMustCompile=false`` keeps nothing out),
and ``set_jit(False)`` (no clusters). Our side runs in this process with the same ``set_jit`` state,
restored after each test. Grappler's side of the rule (``IsXlaGlobalJitOn`` drops the memory optimizer) is
checked against TF's own optimized graph in this process.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.eager import context

import tfxla_cluster as txc
from tfxla_cluster.flags import Flags, GlobalJitLevel, global_jit_level_for_graph
from tfxla_cluster.graph.grappler import xla_auto_clustering_on
from tfxla_cluster.graph.loader import graph_def_from_concrete
from tfxla_cluster.runtime.function import effective_flags
from tfxla_cluster.tf_compat import session_jit_level

import tf_record  # tools/ is on sys.path (setup.cfg pythonpath)

FLAGS = "--tf_xla_cpu_global_jit"


def _body(x):
    return tf.reduce_sum(tf.tanh(x * 2.0 + 1.0) * tf.sin(x), axis=1)


SPEC = [tf.TensorSpec((3, 4), tf.float32)]
plain = tf.function(_body, input_signature=SPEC)
no_jit = tf.function(_body, input_signature=SPEC, jit_compile=False)
X = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4)


def _with_jit(setting: Any, fn: Any):
    def build():
        tf.config.optimizer.set_jit(setting)   # in the recording process, before the function is traced
        return fn, [X]
    return build


REGISTRY = {
    "plain": _with_jit(True, plain),
    "no_jit": _with_jit("autoclustering", no_jit),
    "off": _with_jit(False, plain),
}
NAMES = list(REGISTRY)


@pytest.fixture(scope="module")
def tf_runs() -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="set_jit_") as tmp:
        outs = [Path(tmp) / name for name in NAMES]
        metas = tf_record.record_batch([f"{__file__}:{n}" for n in NAMES], outs, FLAGS, annotated=False)
        got = {}
        for name, meta, out in zip(NAMES, metas, outs):
            assert not meta.get("error"), meta.get("error")
            runs = [r for r in meta["runs"] if r.get("is_user_function")]
            assert len(runs) == 1, meta["runs"]
            dumps = runs[0]["dumps"]   # none when TF found no compilation candidate
            got[name] = {"before": tf_record.load_graph_def(out / dumps["before_mark_for_compilation"]),
                         "clusters": tf_record.clusters_of(tf_record.load_graph_def(
                             out / dumps["mark_for_compilation"]))} if dumps else None
        return got


@pytest.fixture
def restore_jit():
    ctx = context.context()
    saved = ctx.optimizer_jit if ctx._optimizer_jit is not None else None
    yield
    ctx.optimizer_jit = saved   # None again if it was unset: the context's ConfigProto level is DEFAULT


def _renumbered(clusters: dict[str, list[str]]) -> dict[str, list[str]]:
    first = min((int(c.rpartition("_")[2]) for c in clusters), default=0)
    return {f"cluster_{int(c.rpartition('_')[2]) - first}": sorted(m) for c, m in clusters.items()}


@pytest.mark.parametrize("name", NAMES)
def test_partition_under_set_jit_is_tfs(tf_runs, restore_jit, name: str) -> None:
    fn, inputs = REGISTRY[name]()   # sets set_jit in this process as in TF's
    ours = txc.function(fn, jit_compile=False if fn is no_jit else None, flags=FLAGS)
    compiled = ours.get_compiled(*[tf.constant(a) for a in inputs])
    tf_side = tf_runs[name]
    if tf_side is None:   # TF's pass ran on the function (instantiated again) and found no candidate
        assert compiled.clusters == {}
        return
    assert tf_record.node_tuples(compiled.graph.graph_def) == tf_record.node_tuples(tf_side["before"])
    assert _renumbered(compiled.mark_result.clusters) == _renumbered(tf_side["clusters"])
    assert tf_side["clusters"], "set_jit(True) with --tf_xla_cpu_global_jit: TF clusters the body"
    np.testing.assert_allclose(ours(tf.constant(X)).numpy(), _body(tf.constant(X)).numpy(), rtol=1e-5)


def test_set_jit_after_a_call_reclusters_as_tf(tf_runs, restore_jit) -> None:
    """TF instantiates a function again when set_jit changes its ConfigProto: a function first called
    with auto-clustering off is clustered on its next call after set_jit(True) (seen in TF 2.21)."""
    tf.config.optimizer.set_jit(False)
    ours = txc.function(_body, input_signature=SPEC, flags=FLAGS)
    x = tf.constant(X)
    ours(x)
    assert ours.get_compiled(x).clusters == {}
    tf.config.optimizer.set_jit("autoclustering")
    ours(x)
    assert _renumbered(ours.get_compiled(x).clusters) == _renumbered(tf_runs["plain"]["clusters"])


def test_level_rule_is_tfs() -> None:
    """GetXlaGlobalJitLevel: the session's level unless --tf_xla_auto_jit sets a level itself."""
    on = GlobalJitLevel.ON_1
    cases = {  # flags -> (general, single-GPU) level for a session at ON_1
        "": (on, on),
        "--tf_xla_auto_jit=-1": (GlobalJitLevel.OFF, GlobalJitLevel.OFF),
        "--tf_xla_auto_jit=2": (GlobalJitLevel.ON_2, GlobalJitLevel.ON_2),
        "--tf_xla_auto_jit=single-gpu(2)": (on, GlobalJitLevel.ON_2),
        "--tf_xla_auto_jit=2 --tf_xla_auto_jit=single-gpu(0)": (GlobalJitLevel.ON_2, on),
    }
    for text, (general, single) in cases.items():
        flags = Flags.parse(text).with_session_jit_level(on)
        assert (flags.auto_jit_level, flags.auto_jit_single_gpu_level) == (general, single), text
        assert (global_jit_level_for_graph(Flags.parse(text), False, on),
                global_jit_level_for_graph(Flags.parse(text), True, on)) == (general, single), text
        assert Flags.parse(flags.env_strings().get("TF_XLA_FLAGS", "")) == flags   # a TF_XLA_FLAGS with those levels
    for level in (GlobalJitLevel.DEFAULT, GlobalJitLevel.OFF):   # both leave auto-clustering as the flags say
        assert Flags.parse("").with_session_jit_level(level) == Flags.parse("")
    assert xla_auto_clustering_on(Flags.parse("").with_session_jit_level(on))
    assert not xla_auto_clustering_on(Flags.parse("--tf_xla_auto_jit=-1").with_session_jit_level(on))


def test_session_level_follows_set_jit(restore_jit) -> None:
    def config_level() -> int:   # what TF's function runtime gets (the context's full ConfigProto)
        return context.context().config.graph_options.optimizer_options.global_jit_level

    tf.config.optimizer.set_jit(True)
    assert session_jit_level() == GlobalJitLevel.ON_1 == config_level()
    assert effective_flags(FLAGS).auto_jit_level == GlobalJitLevel.ON_1
    tf.config.optimizer.set_jit(False)
    assert session_jit_level() == GlobalJitLevel.OFF == config_level()


def test_grappler_follows_set_jit_as_tfs_runtime(restore_jit) -> None:
    """Under set_jit(True), TF's own optimized graph in this process keeps the large AddN (the memory
    optimizer is off when auto-clustering is on for every graph) unless TF_XLA_FLAGS turns it off; ours too."""
    tf.config.optimizer.set_jit(True)
    big_add_n = tf_record.memory_optimizer_probe()
    want = tf_record.post_optimization_graph(big_add_n, tf.ones((4096, 4096)))
    flags = effective_flags(None)
    got = graph_def_from_concrete(big_add_n.get_concrete_function(), grappler=True, flags=flags)
    assert tf_record.node_tuples(got) == tf_record.node_tuples(want)
    assert any(n.op == "TemporaryVariable" for n in want.node) == (not xla_auto_clustering_on(flags))
    # a direct call that names no flags runs under the session's level too, as TF's runtime does
    assert Flags.resolve(None) == flags
    got = graph_def_from_concrete(big_add_n.get_concrete_function(), grappler=True)
    assert tf_record.node_tuples(got) == tf_record.node_tuples(want)
