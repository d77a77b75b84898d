"""Plugin mode on an unmodified Keras 3 program: ``model.fit`` / ``model.predict`` with every internal
tf.function routed through tfxla_cluster (``install()``), against the same program on plain TF.

Keras builds its train step as nested tf.functions (``multi_step_on_iterator`` calling
``one_step_on_data``, jit-compiled when ``jit_compile=True``), with an iterator, a distribution
strategy and optimizer variables: losses, weights and predictions must equal TF's.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest

import tfxla_cluster as txc

AUTO = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"
#: tf2hlo refuses a cluster whose output is a resource handle (an inlined call's input Identity);
#: the runtime forwards such handles itself, lowering only has to accept them.
RESOURCE_OUTPUT_GAP = "resource outputs are not supported"


def _fit(jit_compile: bool, plugin: bool):
    import keras

    from tfxla_cluster.runtime import plugin as plugin_mod

    if plugin:
        txc.install(flags=AUTO)
    try:
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu", name="h"),
                                  keras.layers.Dense(3, name="o")])
        model.compile(optimizer=keras.optimizers.Adam(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit_compile)
        rng = np.random.default_rng(1)
        x, y = rng.standard_normal((32, 6)).astype(np.float32), rng.integers(0, 3, 32)
        history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        predictions = model.predict(x[:4], verbose=0)
        fallbacks = [launcher.stats.fallback_reason for fn in list(plugin_mod._functions)
                     for compiled in fn._compiled.values() for launcher in compiled.launchers.values()
                     if launcher.stats.fallback_reason] if plugin else []
        compiled = sum(len(c.clusters) for fn in list(plugin_mod._functions) for c in fn._compiled.values())
        return history.history["loss"], predictions, [w.numpy() for w in model.weights], fallbacks, compiled
    finally:
        if plugin:
            txc.uninstall()
            plugin_mod._functions.clear()


@pytest.mark.parametrize("jit_compile", [False, True], ids=["auto_clustering", "jit_compile"])
def test_keras_fit_and_predict_under_the_plugin_equal_tf(jit_compile: bool) -> None:
    logging.getLogger("tfxla_cluster.runtime").setLevel(logging.ERROR)
    loss, pred, weights, _, _ = _fit(jit_compile, plugin=False)
    ours_loss, ours_pred, ours_weights, fallbacks, clusters = _fit(jit_compile, plugin=True)
    assert clusters > 0
    np.testing.assert_allclose(ours_loss, loss, rtol=1e-5)
    np.testing.assert_allclose(ours_pred, pred, rtol=1e-5, atol=1e-6)
    for got, want in zip(ours_weights, weights):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert all(RESOURCE_OUTPUT_GAP in f for f in fallbacks), fallbacks


def test_keras_fit_under_the_plugin_compiles_every_cluster() -> None:
    """Every cluster of Keras' train step compiles. (It used to fall back: grappler's own inlining left an
    Identity of an inlined call's resource input as a cluster output; calls are now inlined with TF's
    inliner names before grappler, as TF's runtime graph has them, and no cluster outputs a resource.)"""
    logging.getLogger("tfxla_cluster.runtime").setLevel(logging.ERROR)
    fallbacks = _fit(False, plugin=True)[3]
    assert not fallbacks, fallbacks


TRAIN_SCRIPT = '''
import numpy as np, keras
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(4)])
model.compile(optimizer="adam", loss="mse", jit_compile=False)
x = np.random.default_rng(0).random((64, 8), np.float32)
y = np.random.default_rng(1).random((64, 4), np.float32)
model.fit(x, y, epochs=1, batch_size=16, verbose=0)
model.evaluate(x, y, batch_size=16, verbose=0)
model.predict(x, batch_size=16, verbose=0)
'''


def test_keras_fit_jit_compile_false_clusters_like_tf(tmp_path) -> None:
    """Keras wraps its train step in tf.function(jit_compile=False) (``_XlaMustCompile=false``) called from
    ``multi_step_on_iterator``. TF's runtime inlines that call before clustering and clusters its ops under
    TF_XLA_FLAGS; ours used to see our own rewritten inner graph (every node ``_XlaCompile=false``) and
    formed no cluster. The expectation is TF's live run of the same script (``fit``, ``evaluate`` and
    ``predict``; its mark_for_compilation dumps): every function graph's clusters equal TF's, cluster names
    and node names included."""
    import collections
    import os
    import subprocess
    import sys

    from google.protobuf import text_format
    from tensorflow.core.framework import graph_pb2

    flags = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    env = dict(os.environ, TF_XLA_FLAGS=flags + " --tf_xla_clustering_debug", TF_DUMP_GRAPH_PREFIX=str(tmp_path),
               TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tf_parts = []
    for dump in tmp_path.glob("mark_for_compilation_*.pbtxt"):
        if "annotated" in dump.name:
            continue
        g = text_format.Parse(dump.read_text(encoding="utf-8"), graph_pb2.GraphDef())
        clusters = collections.defaultdict(list)
        for n in g.node:
            if "_XlaCluster" in n.attr:
                clusters[n.attr["_XlaCluster"].s.decode()].append(n.name)
        if clusters:
            tf_parts.append({name: sorted(nodes) for name, nodes in clusters.items()})
    assert tf_parts, "TF formed no cluster"

    import keras

    from tfxla_cluster.process_state import PROCESS
    from tfxla_cluster.runtime import plugin as plugin_mod

    # names as in TF's fresh process: Keras numbers its layers and optimizers per session, and cluster
    # sequence numbers are per process (the earlier tests of this file built models and clusters)
    keras.backend.clear_session()
    PROCESS.reset()
    txc.install(flags=flags)
    try:
        exec(compile(TRAIN_SCRIPT, str(script), "exec"), {})
        ours = [{name: sorted(nodes) for name, nodes in c.clusters.items()}
                for fn in list(plugin_mod._functions) for c in fn._compiled.values() if c.clusters]
    finally:
        txc.uninstall()
        plugin_mod._functions.clear()
    key = lambda part: sorted(part.items())  # noqa: E731 - graphs in any order
    assert sorted(ours, key=key) == sorted(tf_parts, key=key)
