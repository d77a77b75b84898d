"""End to end: tfxla_cluster.function runs real TF programs; results and variables equal TF's."""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.jit.must_compile import MustCompileError

AUTO = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"
RNG = np.random.default_rng(0)


def _close(got, want, tol=1e-5):
    for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol)


def mlp(x, w1, w2):
    h = tf.nn.relu(tf.matmul(x, w1) + 0.1)
    return tf.nn.softmax(tf.matmul(h, w2)), tf.reduce_mean(h)


def layer_norm(x):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + 1e-5) * 1.5 + 0.2


def with_unique(x):
    y = tf.exp(x) * 2.0 + 1.0
    u, _ = tf.unique(tf.cast(y > 2.5, tf.int32))
    return tf.reduce_sum(y) + tf.cast(tf.size(u), tf.float32)


CASES = [
    (mlp, [RNG.random((8, 16), np.float32), RNG.random((16, 32), np.float32), RNG.random((32, 4), np.float32)]),
    (layer_norm, [RNG.random((4, 64), np.float32)]),
    (with_unique, [RNG.random((10,), np.float32)]),
]


@pytest.mark.parametrize("backend", ["llvm", "evaluator"])
@pytest.mark.parametrize("fn,args", CASES, ids=[c[0].__name__ for c in CASES])
def test_auto_clustering_equals_tf(fn, args, backend):
    tensors = [tf.constant(a) for a in args]
    ours = txc.function(fn, flags=AUTO, backend=backend)
    _close(ours(*tensors), tf.function(fn)(*tensors))
    compiled = ours.get_compiled(*tensors)
    assert compiled.clusters, "auto-clustering on: something must be clustered"
    assert all(l.stats.compiles == 1 and not l.stats.fallback_reason for l in compiled.launchers.values())


def test_jit_compile_true_and_false():
    args = [tf.constant(a) for a in CASES[0][1]]
    must = txc.function(mlp, jit_compile=True)
    _close(must(*args), tf.function(mlp, jit_compile=True)(*args))
    assert list(must.get_compiled(*args).clusters) == ["cluster_0"]
    # jit_compile=False is not "never": TF 2.21 auto-clusters such a function's body like any other
    # (tests/runtime/test_set_jit.py compares the partition with TF's live dump).
    not_must = txc.function(mlp, jit_compile=False, flags=AUTO)
    _close(not_must(*args), tf.function(mlp, jit_compile=False)(*args))
    plain = txc.function(mlp, flags=AUTO)
    assert sorted(map(sorted, not_must.get_compiled(*args).clusters.values())) == \
        sorted(map(sorted, plain.get_compiled(*args).clusters.values())) != []


def test_jit_compile_true_lists_every_uncompilable_node():
    def strings(x):
        return tf.strings.length(tf.strings.as_string(x)), tf.strings.as_string(x * 2.0)

    with pytest.raises(MustCompileError) as err:
        txc.function(strings, jit_compile=True)(tf.constant([1.0, 2.0]))
    assert str(err.value).startswith("Detected unsupported operations when trying to compile graph ")
    assert {p.op for p in err.value.problems} >= {"AsString", "StringLength"}


def test_variables_update_like_tf():
    def step(v, x):
        y = tf.nn.relu(tf.matmul(x, v) + 1.0)
        v.assign_add(tf.ones_like(v) * 0.5)
        return tf.reduce_sum(y * y, axis=1)

    x = tf.constant(RNG.random((3, 4), np.float32))
    ours_v = tf.Variable(np.ones((4, 4), np.float32))
    tf_v = tf.Variable(np.ones((4, 4), np.float32))
    ours = txc.function(lambda x: step(ours_v, x), flags=AUTO)
    ref = tf.function(lambda x: step(tf_v, x))
    for _ in range(3):
        _close(ours(x), ref(x))
        np.testing.assert_allclose(ours_v.numpy(), tf_v.numpy())
    launchers = ours.get_compiled(x).launchers.values()
    assert all(not l.stats.fallback_reason for l in launchers)


def test_new_shapes_recompile_with_cause(caplog):
    ours = txc.function(layer_norm, flags=AUTO, input_signature=[tf.TensorSpec([None, 64], tf.float32)])
    with caplog.at_level(logging.INFO, logger="tfxla_cluster"):
        for rows in (2, 3, 3):
            x = tf.constant(RNG.random((rows, 64), np.float32))
            _close(ours(x), layer_norm(x))
    launcher = next(iter(ours.get_compiled(tf.TensorSpec([None, 64], tf.float32)).launchers.values()))
    assert launcher.stats.compiles == 2 and launcher.stats.executions == 3
    assert launcher.stats.causes[0] == "first signature (float32[2,64])"
    assert launcher.stats.causes[1] == "new signature (float32[3,64]): argument 0 dim 0 changed 2 -> 3"
    assert any(r.levelno == logging.INFO and "argument 0 dim 0 changed 2 -> 3" in r.getMessage()
               for r in caplog.records)
    assert len(launcher.cache) == 2 and all(c.backend == "llvm" for c in launcher.cache.values())


def test_wrong_dtype_is_a_tf_like_error():
    ours = txc.function(layer_norm, flags=AUTO, input_signature=[tf.TensorSpec([None, 64], tf.float32)])
    with pytest.raises((TypeError, ValueError, txc.InvalidArgumentError, tf.errors.InvalidArgumentError)):
        ours(tf.constant(np.ones((2, 64), np.int32)))


def test_compiler_ir_stages():
    args = [tf.constant(a) for a in CASES[0][1]]
    ours = txc.function(mlp, jit_compile=True)
    ours(*args)
    hlo = ours.experimental_get_compiler_ir(*args)(stage="hlo")
    assert hlo.startswith("HloModule") and "dot(" in hlo
    optimized = ours.experimental_get_compiler_ir(*args)(stage="optimized_hlo")
    assert "fusion" in optimized
    llvm_ir = ours.experimental_get_compiler_ir(*args)(stage="llvm_ir")
    assert "define" in llvm_ir and "tfxla_entry" in llvm_ir
    dot = ours.experimental_get_compiler_ir(*args)(stage="optimized_hlo_dot")
    assert dot.startswith("digraph") and "fusion" in dot and dot.rstrip().endswith("}")
    with pytest.raises(txc.InvalidArgumentError, match="Unsupported stage"):
        ours.experimental_get_compiler_ir(*args)(stage="nope")


def test_compiler_ir_before_the_first_call_matches_tf():
    """Like TF's, the compiler IR of a jit_compile=True function needs no call: it is compiled for the given
    arguments without running (the variable is not updated). Its ENTRY parameters and results are TF's
    (arguments, then variables; a tf.cond inside), and real XLA runs both texts to the same results."""
    pytest.importorskip("jax")
    import re

    from tests.hlo.xla_oracle import xla_parse, xla_run

    v = tf.Variable(tf.ones([4]))

    def g(x, n):
        v.assign_add(tf.fill([4], tf.reduce_sum(x)))
        y = tf.cond(x[0] > 0, lambda: x * 2.0, lambda: x + 1.0)
        return y, tf.cast(n, tf.float32) * 3.0 + tf.reduce_sum(v)
    args = (tf.constant([1.0, -2.0]), tf.constant([1, 2, 3]))
    ours = txc.function(g, jit_compile=True)
    text = ours.experimental_get_compiler_ir(*args)(stage="hlo")
    theirs = tf.function(g, jit_compile=True).experimental_get_compiler_ir(*args)(stage="hlo")
    np.testing.assert_array_equal(v.numpy(), np.ones(4))

    def entry_types(t: str) -> list[str]:
        line = next(ln for ln in t.splitlines() if ln.startswith("ENTRY"))
        return re.findall(r"\b(?:f32|s32|pred)\[[\d,]*\]", line)
    assert entry_types(text) == entry_types(theirs)
    inputs = [a.numpy() for a in args] + [v.numpy()]
    for got, want in zip(xla_run(text, *inputs), xla_run(theirs, *inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    # XLA parses the optimized text. Running it is not asked here: jax's newer XLA:CPU fusion emitter
    # check-fails (computation_partitioner: operand_maps) on the rank-changing bitcast of a loop fusion,
    # and does so on TF's own optimized text of this function too.
    xla_parse(ours.experimental_get_compiler_ir(*args)(stage="optimized_hlo"))
    np.testing.assert_array_equal(v.numpy(), np.ones(4))


def test_compiler_ir_of_a_jit_function_cut_at_a_data_dependent_size_names_why_it_needs_a_call():
    """TF's XLA compiles tf.unique with a bounded dynamic dimension and returns one module before any call;
    so do we where our dynamic padder takes every use of Unique's values (tests/tf2hlo/test_bounded_dynamic.py).
    Here a sort, which it does not take: we run Unique on TF's kernel next to the clusters, so the cluster
    it feeds knows its input shape only after a run: before it the error says so (not "without
    jit_compile=True"); after it the text is there and the function's value is TF's."""
    def g(x):
        y, _ = tf.unique(x)
        return tf.sort(y * 2)
    x = tf.constant([1, 2, 2, 3, 1], tf.int32)
    ours = txc.function(g, jit_compile=True)
    with pytest.raises(txc.InvalidArgumentError, match="jit_compile=True function runs some ops on TF's kernels"):
        ours.experimental_get_compiler_ir(x)(stage="hlo")
    np.testing.assert_array_equal(ours(x).numpy(), tf.function(g, jit_compile=True)(x).numpy())
    assert ours.experimental_get_compiler_ir(x)(stage="hlo").startswith("HloModule")


def test_compiler_ir_serialized_stages_are_hlo_module_protos():
    pytest.importorskip("jax")
    from tensorflow.compiler.xla.service import hlo_pb2

    args = [tf.constant(a) for a in CASES[0][1]]
    ours = txc.function(mlp, jit_compile=True)
    ours(*args)
    for stage in ("hlo_serialized", "optimized_hlo_serialized"):
        proto = hlo_pb2.HloModuleProto.FromString(ours.experimental_get_compiler_ir(*args)(stage=stage))
        assert proto.computations and any(i.opcode == "dot" for c in proto.computations for i in c.instructions)


def test_demo_runs_the_bundled_transformer(capsys):
    from tfxla_cluster import demo

    assert demo.run("transformer_block", hlo_lines=5) == 0
    out = capsys.readouterr().out
    err = float(out.split("max abs error ")[1].split()[0])
    assert err < 1e-4
    assert "HLO before optimization" in out and "after our XLA:CPU pipeline" in out and "real XLA" in out


def test_demo_unknown_sample_is_a_clear_error():
    from tfxla_cluster import demo

    with pytest.raises(txc.NotFoundError, match="no sample 'nope'"):
        demo.run("nope")


def test_plugin_runs_an_unmodified_script_like_tf():
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = root / "tools" / "examples" / "train_step.py"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_XLA_FLAGS", None)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    env["TF_XLA_FLAGS"] = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
    ours = subprocess.run([sys.executable, "-m", "tfxla_cluster", "run", str(script)], capture_output=True,
                          text=True, env=env, timeout=300, cwd=root)
    assert plain.returncode == 0 and ours.returncode == 0, ours.stderr
    assert ours.stdout == plain.stdout          # same losses and weights, printed to 6 decimals
    assert "cluster_0" in ours.stderr and "fell back" not in ours.stderr


def test_install_and_uninstall():
    import tensorflow as tf

    original = tf.function
    txc.install()
    try:
        f = tf.function(layer_norm)
        assert isinstance(f, txc.function(layer_norm).__class__)
        x = tf.constant(RNG.random((2, 64), np.float32))
        _close(f(x), layer_norm(x))
    finally:
        txc.uninstall()
    assert tf.function is original


def test_clusters_stage_says_where_unclustered_ops_were_created():
    import inspect

    from tfxla_cluster.jit import explain

    def f(x):
        y = tf.tanh(x) * 2.0
        s = tf.strings.as_string(y)     # the op that stays on TF
        return y + 1.0, s

    line = inspect.getsourcelines(f)[1] + 2
    g = txc.function(f, flags="--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit")
    x = np.ones(4, np.float32)
    g(x)
    text = g.experimental_get_compiler_ir(x)(stage="clusters")
    where = f'", line {line}, in f'
    assert any(ln.strip().startswith("AsString created at File ") and ln.endswith(where)
               for ln in text.splitlines()), text
    result = g.get_compiled(x).mark_result
    assert explain.explain_node(result, "AsString").splitlines()[-1].endswith(where)
    nodes = {n["node"]: n for n in json.loads(explain.as_json(result))["nodes"]}
    assert nodes["AsString"]["created_at"][-1].endswith(where)
