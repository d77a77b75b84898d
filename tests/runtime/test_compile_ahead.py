"""Compile ahead (runtime/ahead.py): a function's clusters compiled on background threads before TF launches
them give TF's results, the same code, errors at the launch, and a profile that still sums to the call."""
from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import tfxla_cluster as txc  # noqa: E402
from tfxla_cluster import errors  # noqa: E402
from tfxla_cluster.runtime import ahead_job  # noqa: E402
from tfxla_cluster.runtime.launcher import Launcher  # noqa: E402

AUTO = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"


def three_clusters(x, w):
    """String ops have no XLA kernel: the compilable ops around them make three clusters."""
    a = tf.tanh(x @ w) * 2.0 + 1.0
    s = tf.strings.to_number(tf.strings.as_string(a))
    b = tf.sigmoid(s * a - 0.5) @ w
    t = tf.strings.to_number(tf.strings.as_string(b))
    return tf.reduce_sum(tf.exp(-t * b), axis=1), a


def _inputs():
    rng = np.random.default_rng(0)
    return (tf.constant(rng.standard_normal((4, 8), dtype=np.float32)),
            tf.constant(rng.standard_normal((8, 8), dtype=np.float32) / 4))


def _ahead_done(fn, *args):
    """The CompiledGraph of ``fn`` for ``args``, its clusters compiled ahead and finished, not launched."""
    compiled = fn.get_compiled(*args)
    compiled._start_ahead()
    assert compiled.ahead is not None
    compiled.ahead.join()
    return compiled


@pytest.fixture(autouse=True)
def _no_persistent_cache(monkeypatch):
    monkeypatch.setenv("TFXLA_COMPILE_CACHE", "off")
    monkeypatch.delenv("TFXLA_COMPILE_AHEAD", raising=False)


@pytest.mark.parametrize("switch", ["1", "0"])
def test_results_equal_tf_with_compile_ahead_on_and_off(monkeypatch, switch):
    monkeypatch.setenv("TFXLA_COMPILE_AHEAD", switch)
    x, w = _inputs()
    fn = txc.function(three_clusters, flags=AUTO)
    got = fn(x, w)
    want = tf.function(three_clusters)(x, w)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)
    compiled = fn.get_compiled(x, w)
    assert len(compiled.launchers) == 3
    ahead = fn.compile_stats().events.get("compiled ahead", 0)
    assert (ahead > 0) == (switch == "1"), fn.compile_stats().events
    assert all(launcher.stats.compiles == 1 for launcher in compiled.launchers.values())


def test_code_compiled_ahead_is_the_code_compiled_at_the_launch():
    x, w = _inputs()
    fn = txc.function(three_clusters, flags=AUTO)
    compiled = _ahead_done(fn, x, w)
    jobs = compiled.ahead.jobs
    assert sorted(jobs) == sorted(compiled.launchers) and {job.state for job in jobs.values()} == {"done"}
    fn(x, w)
    assert fn.compile_stats().events["compiled ahead"] == 3
    for name, launcher in compiled.launchers.items():
        (entry,) = launcher.cache.values()
        assert entry.ahead_wait is not None and entry is jobs[name].result
        # The launch's signature is the job's, and compiling it here gives the same IR.
        assert entry.key == jobs[name].signature
        again = launcher.compile_signature(list(jobs[name].arrays), entry.key)
        assert again.executable.ir == entry.executable.ir
        assert again.executable.library.object_code == entry.executable.library.object_code


def test_a_job_leaves_nothing_behind_before_its_launch(tmp_path, monkeypatch, caplog):
    """Log records and persistent-cache writes of a job wait for the launch that takes it, and come from
    the launch's thread."""
    monkeypatch.setenv("TFXLA_COMPILE_CACHE", str(tmp_path))
    x, w = _inputs()
    warm = txc.function(three_clusters, flags=AUTO)   # fills the cache: the next function's jobs load from it
    warm(x, w)
    stored = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert stored
    caplog.set_level(logging.INFO, logger="tfxla_cluster.codegen")   # the compile cache logs there
    fn = txc.function(three_clusters, flags=AUTO)
    _ahead_done(fn, x, w)
    assert not [r for r in caplog.records if "persistent cache" in r.getMessage()]
    fn(x, w)
    loaded = [r for r in caplog.records if r.getMessage().startswith("Loaded cluster")]
    assert len(loaded) == 3 and not any(r.threadName.startswith("tfxla-ahead") for r in loaded)
    assert fn.compile_stats().events["persistent-cache hit"] >= 3


def test_persistent_cache_writes_wait_for_the_launch(tmp_path, monkeypatch):
    monkeypatch.setenv("TFXLA_COMPILE_CACHE", str(tmp_path))
    x, w = _inputs()
    fn = txc.function(three_clusters, flags=AUTO)
    _ahead_done(fn, x, w)
    before = {p for p in tmp_path.rglob("*") if p.is_file()}   # the function's graph and clustering
    fn(x, w)
    after = {p for p in tmp_path.rglob("*") if p.is_file()}
    assert fn.compile_stats().events["compiled ahead"] == 3
    assert len(after - before) >= 3   # each cluster's entry, written at its launch


def _failing(monkeypatch, cluster: str, error: Exception) -> list[bool]:
    """Make the compile of ``cluster`` raise ``error``; the list records, per attempt, whether a job made it."""
    attempts: list[bool] = []
    build = Launcher.compile_signature

    def failing(self, arrays, key):
        if self.sig.name == cluster:
            attempts.append(ahead_job.running_job() is not None)
            raise error
        return build(self, arrays, key)
    monkeypatch.setattr(Launcher, "compile_signature", failing)
    return attempts


def test_a_refused_cluster_falls_back_at_its_launch_as_without_compile_ahead(monkeypatch, caplog):
    x, w = _inputs()
    caplog.set_level(logging.WARNING, logger="tfxla_cluster.runtime")
    fn = txc.function(three_clusters, flags=AUTO)
    target = sorted(fn.get_compiled(x, w).launchers)[1]
    attempts = _failing(monkeypatch, target, errors.UnimplementedError("no lowering for this op"))
    compiled = _ahead_done(fn, x, w)
    assert attempts == [True] and compiled.launchers[target].stats.fallback_reason == ""
    assert not [r for r in caplog.records if "falls back" in r.getMessage()]
    got = fn(x, w)
    assert attempts == [True, False]   # the launch compiled it again, and the error surfaced there
    warned = [r.getMessage() for r in caplog.records if "falls back" in r.getMessage()]
    assert warned == [f"Cluster {target} falls back to TF's kernels: UnimplementedError: no lowering for this op"]
    want = tf.function(three_clusters)(x, w)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("switch", ["1", "0"])
def test_an_internal_error_in_a_clusters_compile_is_raised_by_the_call(monkeypatch, switch):
    monkeypatch.setenv("TFXLA_COMPILE_AHEAD", switch)
    x, w = _inputs()
    fn = txc.function(three_clusters, flags=AUTO)
    target = sorted(fn.get_compiled(x, w).launchers)[2]
    _failing(monkeypatch, target, errors.InternalError("broken emitter"))
    with pytest.raises(tf.errors.InternalError, match="broken emitter"):
        fn(x, w)


def test_a_job_for_another_signature_is_dropped(monkeypatch):
    """A job planned from a wrong static shape is never taken: its launch compiles the real signature."""
    from tfxla_cluster.runtime.function import CompiledGraph

    traced = CompiledGraph._traced_shape
    monkeypatch.setattr(CompiledGraph, "_traced_shape",
                        lambda self, name, slot: None if (s := traced(self, name, slot)) is None else (s[0] + 1, *s[1:]))
    x, w = _inputs()
    fn = txc.function(three_clusters, flags=AUTO)
    compiled = _ahead_done(fn, x, w)
    assert compiled.ahead.jobs   # the clusters fed by other clusters got a (wrong) job
    got = fn(x, w)
    want = tf.function(three_clusters)(x, w)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)
    assert fn.compile_stats().events.get("compiled ahead", 0) < len(compiled.launchers)


@pytest.mark.parametrize("ahead_done", [False, True])
def test_profile_sums_to_the_first_calls_wall_time_and_names_each_clusters_stages(ahead_done):
    x, w = _inputs()
    fn = txc.function(three_clusters, flags=AUTO)
    prof = fn.compile_stats()
    if ahead_done:   # every job finished before the call: the launches wait for nothing
        _ahead_done(fn, x, w)
    before = prof.total
    t0 = time.perf_counter()
    fn(x, w)
    wall = time.perf_counter() - t0
    if ahead_done:
        # The CompiledGraph was made before the call (no "other" for it): the clusters' records alone
        # fit in the call — the jobs' own times, spent before, are not counted again.
        assert prof.total - before <= wall * 1.02 + 0.01
    else:
        assert prof.total - before == pytest.approx(wall, rel=0.02, abs=0.01)
    compiled = fn.get_compiled(x, w)
    assert sorted(prof.clusters()) == sorted(compiled.launchers)
    for name in compiled.launchers:
        stages = prof.totals(name)
        assert {"lowering", "llvm-ir", "run"} <= set(stages), (name, stages)
        assert {"llvm-opt", "machine-code"} <= set(stages) or "code-reuse" in stages, (name, stages)
    if ahead_done:
        assert "3 cluster(s) compiled ahead of their launch" in prof.events_line()


def test_a_job_a_waiting_launch_compiled_is_its_time_under_its_own_cluster():
    """A launch that compiled another cluster's job while it waited records that job's stages then, in full,
    under the job's cluster; the job's own launch later replays its events only (no stage twice)."""
    from tfxla_cluster import compile_profile as cp

    job = ahead_job.Job(launcher=None, arrays=[], signature=None, seconds=0.5)
    job.profile.add("lowering", 0.25, "cluster_1")
    job.profile.add("llvm-opt", 0.125, "cluster_1")
    job.profile.add_event("code-reuse")
    prof = cp.CompileProfile()
    with cp.collecting(prof, "cluster_0"):
        job.attribute()
    assert prof.totals("cluster_1") == {"lowering": 0.25, "llvm-opt": 0.125} and prof.totals("cluster_0") == {}
    assert prof.thread_seconds() == 0.375
    with cp.collecting(prof, "cluster_1"):
        job.replay(waited=0.5)
    assert prof.total == 0.375 and prof.events == {"code-reuse": 1, "compiled ahead": 1}


def test_launches_on_several_threads_take_their_jobs_once():
    """TF may launch clusters concurrently: launches from several threads each get their cluster's entry."""
    x, w = _inputs()
    fn = txc.function(three_clusters, flags=AUTO)
    compiled = fn.get_compiled(x, w)
    compiled._start_ahead()
    results, failures = [], []

    def call():
        try:
            results.append([t.numpy() for t in fn(x, w)])
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(e)
    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures and len(results) == 4
    for r in results[1:]:
        for a, b in zip(r, results[0]):
            np.testing.assert_array_equal(a, b)
    assert all(launcher.stats.compiles == 1 for launcher in compiled.launchers.values())


def test_clusters_fed_through_a_lowered_while_loop_are_planned_and_taken():
    """TF's lowering of While (Switch/Merge/Exit, never traced) forwards shapes: the cluster after the loop
    gets a job, and every planned job is the one its launch takes."""
    def looped(x):
        a = tf.sigmoid(tf.tanh(x) * 2.0 + 1.0) - 0.25

        def body(i, y):   # a string op in the body: the loop stays on TF's kernels (Switch/Merge/Exit)
            return i + 1, tf.strings.to_number(tf.strings.as_string(tf.tanh(y * 0.5 + a) * 3.0 - 1.0))
        _, y = tf.while_loop(lambda i, y: i < 3, body, [tf.constant(0), a])
        return tf.reduce_sum(tf.exp(tf.tanh(y) * a + 1.0) - y, axis=0)

    x = _inputs()[0]
    fn = txc.function(looped, flags=AUTO)
    compiled = _ahead_done(fn, x)
    planned = compiled.ahead.jobs
    exits = {name for name, job in planned.items()
             if any(job.launcher.sig.boundary.graph.node(t[0]).op == "Exit" for t in job.launcher.sig.boundary.inputs)}
    assert exits, sorted(planned)
    got = fn(x)
    np.testing.assert_allclose(got.numpy(), tf.function(looped)(x).numpy(), rtol=1e-5)
    assert fn.compile_stats().events["compiled ahead"] == len(planned)
