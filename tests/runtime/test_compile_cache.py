"""Compilation cache: hits and compile causes, TF's megamorphic rule, the persistent cache (round trip,
corrupt entries, read-only, on by default in the user's cache directory, hits and corrupt entries in the
compile profile), and concurrency (8 threads, 2 signatures, exactly 2 compiles)."""
import logging
import threading

import numpy as np
import pytest

from tests.codegen.cg_helpers import module_of, run_threads
from tfxla_cluster.codegen import CodegenOptions, JitEngine
from tfxla_cluster import compile_profile
from tfxla_cluster.runtime.compile_cache import (CompilationCache, PersistentCache, Signature, clear_entries,
                                                 default_directory, list_entries)
from tfxla_cluster.flags import Flags

OPTS = CodegenOptions(threads=2)


def _builder(shape, dtype=np.float32):
    x = np.zeros(shape, dtype)
    return lambda: module_of(lambda b, p: b.add(b.multiply(p, p), p), x, name=f"sq_{'x'.join(map(str, shape))}")


def _cache(**kw):
    return CompilationCache(OPTS, engine=JitEngine(3), **kw)


def test_hits_and_compile_causes(caplog):
    cache = _cache()
    caplog.set_level(logging.INFO, logger="tfxla_cluster.codegen")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    r1 = cache.get_or_compile("c0", Signature.of([a]), _builder((2, 3)))
    assert r1.compiled and r1.cause.startswith("first signature (float32[2,3])")
    np.testing.assert_array_equal(r1.run(a)[0], a * a + a)
    r2 = cache.get_or_compile("c0", Signature.of([a]), _builder((2, 3)))
    assert not r2.compiled and r2.executable is r1.executable
    b = np.ones((4, 3), np.float32)
    r3 = cache.get_or_compile("c0", Signature.of([b]), _builder((4, 3)))
    assert "argument 0 dim 0 changed 2 -> 4" in r3.cause
    c = np.ones((4, 3), np.float64)
    r4 = cache.get_or_compile("c0", Signature.of([c]), _builder((4, 3), np.float64))
    assert "argument 0 dtype changed float32 -> float64" in r4.cause
    assert "Compiled cluster c0" in caplog.text and "first signature" in caplog.text
    assert cache.engine.compiles == 3


def test_constant_arguments_are_part_of_the_signature():
    s1 = Signature.of([np.ones(3), np.array([1, 2])], constant_args=(1,))
    s2 = Signature.of([np.ones(3), np.array([1, 3])], constant_args=(1,))
    assert s1 != s2 and "value of compile-time constant argument 1 changed" in s2.change_from(s1)


def test_megamorphic_cluster_falls_back_with_a_warning(caplog):
    cache = _cache()
    caplog.set_level(logging.WARNING, logger="tfxla_cluster.codegen")
    results = []
    for n in range(1, 14):
        x = np.ones((n,), np.float32)
        r = cache.get_or_compile("poly", Signature.of([x]), _builder((n,)))
        if r.executable is not None:
            r.run(x)
        results.append(r)
    assert all(r.executable is not None for r in results[:11])
    assert results[11].fell_back and results[12].fell_back
    assert cache.clusters["poly"].megamorphic and cache.clusters["poly"].compiles == 11
    assert "megamorphic" in caplog.text and caplog.text.count("megamorphic") == 1
    # Known signatures still hit.
    assert cache.get_or_compile("poly", Signature.of([np.ones((3,), np.float32)]), _builder((3,))).executable


def test_many_executions_keep_a_cluster_polymorphic():
    cache = _cache()
    for n in range(1, 13):
        x = np.ones((n,), np.float32)
        r = cache.get_or_compile("busy", Signature.of([x]), _builder((n,)))
        for _ in range(50):
            r.run(x)
    assert not cache.clusters["busy"].megamorphic


def test_persistent_cache_round_trip(tmp_path):
    store = PersistentCache(tmp_path)
    a = np.arange(5, dtype=np.float32)
    first = _cache(persistent=store)
    r = first.get_or_compile("c", Signature.of([a]), _builder((5,)))
    assert len(store.entries()) == 1 and first.engine.compiles == 1
    second = _cache(persistent=PersistentCache(tmp_path))
    r2 = second.get_or_compile("c", Signature.of([a]), _builder((5,)))
    assert second.engine.compiles == 0  # loaded, not compiled
    np.testing.assert_array_equal(r2.run(a)[0], r.run(a)[0])
    assert list_entries(tmp_path)[0]["ok"] and clear_entries(tmp_path) == 1 and not store.entries()


@pytest.mark.parametrize("damage", ["truncate", "garbage", "stale"])
def test_corrupt_entries_are_ignored_with_a_warning(tmp_path, caplog, damage):
    store = PersistentCache(tmp_path)
    a = np.arange(5, dtype=np.float32)
    _cache(persistent=store).get_or_compile("c", Signature.of([a]), _builder((5,)))
    path = store.entries()[0]
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00garbage")
    else:
        head, _, obj = data.partition(b"\n")
        path.write_bytes(head.replace(b'"ir_sha256": "', b'"ir_sha256": "0') + b"\n" + obj)
    caplog.set_level(logging.WARNING, logger="tfxla_cluster.codegen")
    again = _cache(persistent=PersistentCache(tmp_path))
    r = again.get_or_compile("c", Signature.of([a]), _builder((5,)))
    assert "Ignoring persistent cache entry" in caplog.text and "(corrupt: " in caplog.text
    assert again.engine.compiles == 1
    np.testing.assert_array_equal(r.run(a)[0], a * a + a)
    assert list_entries(tmp_path)[0]["ok"]  # rewritten


def test_read_only_cache_never_writes(tmp_path):
    cache = _cache(persistent=PersistentCache(tmp_path, read_only=True))
    cache.get_or_compile("c", Signature.of([np.ones(2, np.float32)]), _builder((2,)))
    assert not list(tmp_path.iterdir())


def test_from_flags_reads_tf_persistent_cache_flags(tmp_path):
    flags = Flags.parse(tf_xla_flags=f"--tf_xla_persistent_cache_directory={tmp_path} "
                                     "--tf_xla_persistent_cache_read_only=true "
                                     "--tf_xla_persistent_cache_prefix=mine")
    cache = CompilationCache.from_flags(flags)
    assert cache.persistent.directory == tmp_path and cache.persistent.read_only
    assert cache.persistent.prefix == "mine"
    assert CompilationCache.from_flags(Flags.parse()).persistent is None


def test_the_default_cache_is_in_the_users_cache_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("TFXLA_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_directory() == tmp_path / "xdg" / "tfxla_cluster" / "compile"
    assert CompilationCache.from_flags(Flags.parse()).persistent.directory == tmp_path / "xdg" / "tfxla_cluster" / "compile"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_directory() == tmp_path / "home" / ".cache" / "tfxla_cluster" / "compile"
    monkeypatch.setenv("TFXLA_COMPILE_CACHE", str(tmp_path / "mine"))
    assert default_directory() == tmp_path / "mine"
    # TF's flag wins over the default; "off" leaves no persistent layer unless the flag sets one.
    flagged = Flags.parse(tf_xla_flags=f"--tf_xla_persistent_cache_directory={tmp_path / 'tf'}")
    assert CompilationCache.from_flags(flagged).persistent.directory == tmp_path / "tf"
    monkeypatch.setenv("TFXLA_COMPILE_CACHE", "off")
    assert default_directory() is None and CompilationCache.from_flags(Flags.parse()).persistent is None
    assert CompilationCache.from_flags(flagged).persistent.directory == tmp_path / "tf"


def test_hits_misses_and_corrupt_entries_are_counted_in_the_profile(tmp_path, caplog):
    a = np.arange(5, dtype=np.float32)
    cold, warm = compile_profile.CompileProfile(), compile_profile.CompileProfile()
    with compile_profile.collecting(cold, "c"):
        _cache(persistent=PersistentCache(tmp_path)).get_or_compile("c", Signature.of([a]), _builder((5,)))
    assert cold.events == {"persistent-cache miss": 1}
    with compile_profile.collecting(warm, "c"):
        _cache(persistent=PersistentCache(tmp_path)).get_or_compile("c", Signature.of([a]), _builder((5,)))
    assert warm.events == {"persistent-cache hit": 1} and "llvm-opt" not in warm.totals()
    assert "persistent cache 1 hit(s), 0 miss(es)" in warm.table()
    entry = PersistentCache(tmp_path).entries()[0]
    entry.write_bytes(entry.read_bytes()[:-1])
    damaged = compile_profile.CompileProfile()
    caplog.set_level(logging.WARNING, logger="tfxla_cluster.codegen")
    with compile_profile.collecting(damaged, "c"):
        again = _cache(persistent=PersistentCache(tmp_path))
        r = again.get_or_compile("c", Signature.of([a]), _builder((5,)))
    assert f"Ignoring persistent cache entry {entry} (corrupt: object code is truncated or corrupt)" in caplog.text
    assert damaged.events == {"persistent-cache corrupt": 1, "persistent-cache miss": 1}
    assert "1 corrupt entry ignored" in damaged.table() and damaged.as_dict()["events"] == damaged.events
    np.testing.assert_array_equal(r.run(a)[0], a * a + a)
    assert list_entries(tmp_path)[0]["ok"]  # rewritten


def test_clusters_lowering_to_the_same_ir_share_one_entry(tmp_path):
    a = np.arange(5, dtype=np.float32)
    cache = _cache(persistent=PersistentCache(tmp_path))
    cache.get_or_compile("c1", Signature.of([a]), _builder((5,)))
    cache.get_or_compile("c2", Signature.of([a]), _builder((5,)))
    assert len(PersistentCache(tmp_path).entries()) == 1


def test_concurrent_callers_two_signatures_exactly_two_compiles():
    cache = _cache()
    shapes = [(64, 33), (7, 5)]
    inputs = [np.random.default_rng(k).standard_normal(shapes[k % 2]).astype(np.float32) for k in range(8)]
    barrier = threading.Barrier(8)

    def work(k):
        x = inputs[k]
        barrier.wait()
        for _ in range(3):
            r = cache.get_or_compile("shared", Signature.of([x]), _builder(x.shape))
            np.testing.assert_allclose(r.run(x)[0], x * x + x, rtol=1e-6)
    run_threads(work, 8)
    assert cache.engine.compiles == 2 and cache.clusters["shared"].compiles == 2
    assert cache.clusters["shared"].executions == 24
