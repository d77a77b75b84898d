"""The compile profile: stage timers, their thread-local routing, and a function's first-call split."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from tfxla_cluster import compile_profile as cp


def test_stage_and_record_go_to_the_active_profile_only():
    prof = cp.CompileProfile()
    with cp.stage("lowering"):   # nothing active: no record, no error
        pass
    cp.record("llvm-opt", 1.0)
    assert prof.records == []
    with cp.collecting(prof, "cluster_0"):
        with cp.stage("lowering"):
            pass
        cp.record("llvm-opt", 0.25)
        with cp.collecting(prof):   # nested: whole-function stages, then back to the cluster
            cp.record("clustering", 0.5)
        cp.record("run", 0.125)
    cp.record("run", 9.0)       # after the block: inactive again
    assert [(r.stage, r.cluster) for r in prof.records] == [
        ("lowering", "cluster_0"), ("llvm-opt", "cluster_0"), ("clustering", None), ("run", "cluster_0")]
    assert prof.totals("cluster_0")["llvm-opt"] == 0.25 and prof.totals(None) == {"clustering": 0.5}
    assert prof.clusters() == ["cluster_0"]


def test_thread_seconds_are_what_this_thread_recorded():
    prof = cp.CompileProfile()
    t = threading.Thread(target=lambda: prof.add("run", 4.0, "c"))
    t.start()
    t.join()
    with cp.collecting(prof, "c"):
        cp.record("lowering", 0.5)
        cp.record("llvm-opt", 0.25, "d")   # another cluster's stage, recorded by this thread
    assert prof.thread_seconds() == 0.75 and prof.totals("d") == {"llvm-opt": 0.25} and prof.total == 4.75


def test_other_threads_do_not_see_this_threads_profile():
    prof, seen = cp.CompileProfile(), []
    with cp.collecting(prof, "c"):
        t = threading.Thread(target=lambda: (cp.record("run", 1.0), seen.append(cp.active())))
        t.start()
        t.join()
    assert prof.records == [] and seen == [None]


def test_totals_follow_pipeline_order_and_sum_passes():
    prof = cp.CompileProfile()
    for stage, s in [("run", 1.0), ("hlo-pass cpu/fusion", 2.0), ("trace", 3.0), ("hlo-pass cpu/dce", 4.0),
                     ("hlo-pass cpu/fusion", 5.0), ("lowering", 6.0)]:
        prof.add(stage, s, None if stage == "trace" else "c")
    assert list(prof.totals().items()) == [("trace", 3.0), ("lowering", 6.0), ("hlo-pass cpu/fusion", 7.0),
                                          ("hlo-pass cpu/dce", 4.0), ("run", 1.0)]
    assert prof.total == 21.0 and prof.as_dict()["clusters"]["c"]["hlo-pass cpu/fusion"] == 7.0
    text = prof.table()
    assert "hlo passes" in text and "11.000 s" in text and "cpu/fusion" in text and "c: 18.000 s" in text


def test_function_first_call_is_split_into_stages():
    tf = pytest.importorskip("tensorflow")
    import tfxla_cluster as txc

    def f(x, w):
        return tf.reduce_sum(tf.nn.relu(x @ w + 1.0), axis=1)

    x = tf.constant(np.random.default_rng(0).random((8, 16), dtype=np.float32))
    w = tf.constant(np.random.default_rng(1).random((16, 4), dtype=np.float32))
    fn = txc.function(f, jit_compile=True)
    np.testing.assert_allclose(fn(x, w).numpy(), tf.function(f)(x, w).numpy(), rtol=1e-5)
    prof = fn.compile_stats()
    stages = prof.totals()
    for stage in ("trace", "import", "clustering", "encapsulation", "tf-import", "lowering", "buffer-assignment",
                  "llvm-ir", "llvm-parse", "llvm-opt", "machine-code", "load", "run"):
        assert stage in stages, (stage, stages)
    passes = [s for s in stages if s.startswith("hlo-pass ")]
    assert "hlo-pass cpu/fusion" in passes and "hlo-pass cpu/layout-assignment" in passes
    assert prof.clusters() == ["cluster_0"]
    cluster = prof.totals("cluster_0")
    assert "lowering" in cluster and "llvm-opt" in cluster and "trace" not in cluster
    assert all(v >= 0 for v in stages.values())
    # Later calls of the same signature add nothing: the profile is of first calls.
    n = len(prof.records)
    fn(x, w)
    assert len(prof.records) == n


def test_auto_clustering_profiles_grappler_and_each_cluster():
    tf = pytest.importorskip("tensorflow")
    import tfxla_cluster as txc

    def f(x):
        return tf.reduce_sum(tf.tanh(x) * x + 1.0)

    fn = txc.function(f, flags="--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit")
    x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert float(fn(x)) == pytest.approx(float(tf.function(f)(x)), rel=1e-5)
    prof = fn.compile_stats()
    assert {"grappler", "clustering", "lowering", "run"} <= set(prof.totals())
    assert prof.clusters() == list(fn.get_compiled(x).launchers)


def test_cli_run_profile_prints_the_table(tmp_path, capsys, monkeypatch):
    pytest.importorskip("tensorflow")
    from tfxla_cluster.cli import main

    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit")
    script = tmp_path / "prog.py"
    script.write_text("import tensorflow as tf\n"
                      "@tf.function(jit_compile=True)\n"
                      "def double_plus(x):\n    return x * 2.0 + 1.0\n"
                      "print(float(tf.reduce_sum(double_plus(tf.ones([3])))))\n")
    assert main(["run", "--profile", str(script)]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == "9.0"
    assert "compile profile:" in captured.err and "double_plus/cluster_0:" in captured.err
    assert "llvm-opt" in captured.err and "machine-code" in captured.err


def test_native_launch_nodes_profile_each_clusters_compile():
    """Clusters inside TF's graph run as native launch nodes: their first launch compiles on TF's thread,
    and the profile still has every cluster's stages (it had none: '0 cluster(s)')."""
    tf = pytest.importorskip("tensorflow")
    import tfxla_cluster as txc

    def f(x):
        a = tf.exp(tf.tanh(x) * x + 1.0) - 0.5
        s = tf.strings.to_number(tf.strings.as_string(a))   # string ops: no XLA kernel, so two clusters
        return tf.reduce_sum(tf.sigmoid(s * 2.0 + a) * 3.0 - 1.0)

    fn = txc.function(f, flags="--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit")
    x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3) / 6.0)
    assert float(fn(x)) == pytest.approx(float(tf.function(f)(x)), rel=1e-5)
    compiled = fn.get_compiled(x)
    assert len(compiled.launchers) == 2 and compiled._direct is None
    prof = fn.compile_stats()
    assert sorted(prof.clusters()) == sorted(compiled.launchers)
    for name in compiled.launchers:
        stages = prof.totals(name)
        assert {"lowering", "llvm-ir", "run"} <= set(stages), (name, stages)
        # LLVM compiled it, or reused the code of identical IR compiled earlier in this process.
        assert {"llvm-opt", "machine-code"} <= set(stages) or "code-reuse" in stages, (name, stages)
    # TF's runtime around the launches and the collection after the first call are stages of their own.
    assert {"tf-run", "gc"} <= set(prof.totals(None)), prof.totals(None)


def test_a_persistent_cache_hit_shows_in_the_profile_summary(tmp_path):
    """The second function compiling the same cluster loads its code from the persistent cache: the
    profile counts the hit (and no LLVM optimisation) and the must-compile check's, and its table says so."""
    tf = pytest.importorskip("tensorflow")
    import tfxla_cluster as txc

    def f(x):
        return tf.nn.relu(x * 3.0 - 1.0)

    flags = f"--tf_xla_persistent_cache_directory={tmp_path}"
    x = tf.constant(np.linspace(-1, 1, 16, dtype=np.float32))
    first, second = txc.function(f, jit_compile=True, flags=flags), txc.function(f, jit_compile=True, flags=flags)
    np.testing.assert_allclose(first(x).numpy(), tf.function(f)(x).numpy(), rtol=1e-6, atol=1e-6)
    assert first.compile_stats().events == {"persistent-cache miss": 1}
    np.testing.assert_array_equal(second(x).numpy(), first(x).numpy())
    prof = second.compile_stats()
    assert prof.events == {"persistent-cache hit": 1, "persistent-cache clustering hit": 1}
    assert "llvm-opt" not in prof.totals()
    assert "(persistent cache 1 hit(s), 0 miss(es); 1 clustering(s) from the persistent cache)" in prof.table()


def test_native_runtime_compile_is_not_counted_as_ir_emission(monkeypatch):
    """The process's first compile also compiles the native runtime's module, which records its own LLVM
    stages; it must stay outside the llvm-ir window (else the first cluster's time is counted twice and
    the clamped remainders hide it). A fake clock that the runtime's set-up advances shows which window
    it fell in."""
    from tfxla_cluster.codegen import executable, native_runtime
    from tfxla_cluster.hlo.parser import parse_module

    module = parse_module("HloModule m\n\nENTRY e {\n  p = f32[8] parameter(0)\n  ROOT n = f32[8] negate(p)\n}\n")
    clock = [0.0]

    class FakeTime:
        @staticmethod
        def perf_counter() -> float:
            clock[0] += 1e-6
            return clock[0]

    real_setup, done = native_runtime.ensure_registered, []

    def slow_setup() -> None:
        if not done:   # once per process, as the real one: what compiling the runtime's module takes
            clock[0] += 100.0
            done.append(True)
        real_setup()

    monkeypatch.setattr(executable, "time", FakeTime)
    monkeypatch.setattr(native_runtime, "ensure_registered", slow_setup)
    prof = cp.CompileProfile()
    with cp.collecting(prof, "c"):
        exe = executable.compile_module(module)
    np.testing.assert_array_equal(exe(np.arange(8, dtype=np.float32))[0], -np.arange(8, dtype=np.float32))
    assert 0 < prof.totals()["llvm-ir"] < 1.0
