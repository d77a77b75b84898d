"""What a compiled function keeps alive after its first call (issue 17): every object it keeps is walked by
each full collection of Python's cyclic GC for as long as the function lives, and a first call that keeps
~70k of them set off one such collection (0.25 s over TF's heap). So a compiled cluster keeps no HloModule
(its HLO text and its cold code are made again from the cluster on need) and the clustering's result no
marked Graph (made again from the graph the pass copied); what is made again is what was compiled, and the
results are TF's."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.hlo.ir import HloModule
from tfxla_cluster.jit import explain
from tfxla_cluster.jit.mark_for_compilation import mark_for_compilation
from tfxla_cluster.runtime import launcher as launcher_mod

AUTO = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"
RNG = np.random.default_rng(17)
X = RNG.standard_normal((2, 6, 6, 3)).astype(np.float32)
W = RNG.standard_normal((3, 3, 3, 4)).astype(np.float32)


def model(x, w):
    y = tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME") * 0.5 + 1.0)
    return tf.reduce_mean(tf.tanh(y), axis=[1, 2])


def test_compiled_entries_keep_no_hlo_module_and_make_it_again_as_compiled(monkeypatch):
    compiled_text: dict[str, str] = {}
    optimize = launcher_mod.Launcher._optimize

    def first_optimized(self, module, flags=None):   # the module the compile optimised, as text
        out = optimize(self, module, flags)
        compiled_text.setdefault(self.sig.name, out.to_string())
        return out
    monkeypatch.setattr(launcher_mod.Launcher, "_optimize", first_optimized)
    x, w = tf.constant(X), tf.constant(W)
    f = txc.function(model, flags=AUTO)
    np.testing.assert_allclose(f(x, w).numpy(), model(x, w).numpy(), rtol=1e-5, atol=1e-6)
    entries = [(la, e) for la in f.get_compiled(x, w).launchers.values() for e in la.cache.values()]
    assert entries
    for la, entry in entries:
        assert not isinstance(entry.optimized_hlo_source, HloModule) and callable(entry.optimized_hlo_source)
        cold = entry.executable.layout.cold
        if cold is not None and cold.source is not None:
            assert not any(isinstance(a, HloModule) for a in cold.source.args)
        assert entry.optimized_hlo_text == compiled_text[la.sig.name]
    np.testing.assert_allclose(f(x, w).numpy(), model(x, w).numpy(), rtol=1e-5, atol=1e-6)


def test_the_marked_graph_is_released_and_made_again_as_the_pass_left_it():
    x, w = tf.constant(X), tf.constant(W)
    f = txc.function(model, flags=AUTO)
    np.testing.assert_allclose(f(x, w).numpy(), model(x, w).numpy(), rtol=1e-5, atol=1e-6)
    compiled = f.get_compiled(x, w)
    result = compiled.mark_result
    assert "graph" not in vars(result)   # released by the pipeline
    again = result.graph
    fresh = mark_for_compilation(compiled.graph, result.flags)   # the pass again (its clusters numbered anew)
    assert [(n.id, n.name, n.op, n.assigned_device) for n in again.nodes] == \
        [(n.id, n.name, n.op, n.assigned_device) for n in fresh.graph.nodes]
    assert [(e.src.id, e.src_output, e.dst.id, e.dst_input) for e in again.edges()] == \
        [(e.src.id, e.src_output, e.dst.id, e.dst_input) for e in fresh.graph.edges()]
    assert again.to_graph_def() == result.graph_def
    # explain reads the graph: the same text from the released result and from one that kept its graph
    kept = mark_for_compilation(compiled.graph, result.flags)
    text = explain.explain(kept)
    kept.release_graph(compiled.graph)
    assert "graph" not in vars(kept) and explain.explain(kept) == text
