"""Kernels shared across modules (codegen/kernel_share.py, JitEngine(share=True)): which kernels are units, that a
module importing a kernel computes what it computed alone, that providers stay alive while importers live, and that
persistent-cache entries say what they import (a process without the provider recompiles instead of failing)."""
import ctypes
import gc
import logging
import weakref

import numpy as np
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.codegen import kernel_share
from tfxla_cluster.codegen.engine import JitEngine, MissingSharedKernels, get_engine
from tfxla_cluster.runtime.compile_cache import PersistentCache

import pytest

# A program as program.py emits it: the entry fills each kernel's table and calls it on a constant range, or hands
# its address to the pool. ``{k}``: the kernels' names; ``{m}``: a metadata offset (other modules number their
# nodes otherwise); ``{c}``: the constant the first kernel adds; ``{n}``: its range.
_MODULE = """; ModuleID = "{name}"
target triple = "unknown-unknown-unknown"
target datalayout = ""

define void @"tfxla_entry"(ptr noalias %".1")
{{
entry:
  call void @"{k}_add"(ptr %".1", i64 0, i64 {n})
  call void @"{k}_twice"(ptr %".1", i64 0, i64 4)
  call void @"{k}_twice"(ptr %".1", i64 0, i64 8)
  call void @"{k}_in_group"(ptr %".1", i64 0, i64 8)
  call void @"tfxla_parallel_for"(void (ptr, i64, i64)* @"{k}_pooled", ptr %".1", i64 8, i64 1)
  ret void
}}
define internal void @"{k}_add"(ptr noalias %"table", i64 %"lo", i64 %"hi") noinline nounwind
{{
setup:
  %"p0" = getelementptr inbounds ptr, ptr %"table", i64 0
  %"buf0" = load ptr, ptr %"p0"
  br label %"h"
h:
  %"i" = phi i64 [%"lo", %"setup"], [%"i.next", %"b"]
  %"c" = icmp slt i64 %"i", %"hi"
  br i1 %"c", label %"b", label %"done"
b:
  %"a" = getelementptr inbounds float, ptr %"buf0", i64 %"i"
  %"v" = load float, ptr %"a", align 4, !alias.scope !{m2}, !noalias !{m2}
  %"w" = fadd float %"v", {c}
  store float %"w", ptr %"a", align 4
  %"i.next" = add nsw i64 %"i", 1
  br label %"h", !llvm.loop !{m3}
done:
  ret void
}}
define internal void @"{k}_twice"(ptr noalias %"table", i64 %"lo", i64 %"hi") noinline nounwind
{{
entry:
  ret void
}}
define internal void @"{k}_in_group"(ptr noalias %"table", i64 %"lo", i64 %"hi") noinline nounwind
{{
entry:
  call void @"{k}_grouped"(ptr %"table", i64 %"lo", i64 %"hi")
  ret void
}}
define internal void @"{k}_grouped"(ptr noalias %"table", i64 %"lo", i64 %"hi") noinline nounwind
{{
entry:
  ret void
}}
define internal void @"{k}_pooled"(ptr noalias %"table", i64 %"lo", i64 %"hi") noinline nounwind
{{
setup:
  %"p1" = getelementptr inbounds ptr, ptr %"table", i64 1
  %"buf1" = load ptr, ptr %"p1"
  %"a" = getelementptr inbounds float, ptr %"buf1", i64 %"lo"
  store float 7.0, ptr %"a", align 4
  ret void
}}
declare void @"tfxla_parallel_for"(ptr %".1", ptr %".2", i64 %".3", i64 %".4")
{metadata}
"""


def _module(name="m", k="k", m=0, c="1.0", n=16) -> str:
    nodes = [f'!{m} = !{{ !"tfxla.buffers" }}', f'!{m + 1} = !{{ !"tfxla.slot0", !{m} }}', f"!{m + 2} = !{{ !{m + 1} }}",
             f'!{m + 4} = !{{ !"llvm.loop.unroll.disable" }}', f"!{m + 3} = !{{ !{m + 3}, !{m + 4} }}"]
    if m:
        nodes = [f'!{j} = !{{ !"unused{j}" }}' for j in range(m)] + nodes[::-1]
    return _MODULE.format(name=name, k=k, m=m, m2=m + 2, m3=m + 3, c=c, n=n, metadata="\n".join(nodes))


def test_units_are_entry_only_kernels_on_one_range_or_by_address():
    units = {u.kernel: u for u in kernel_share.units_of(_module(), "salt")}
    # two ranges: no constant range to specialise on; called from another kernel: stays with it
    assert set(units) == {"k_add", "k_pooled"}
    assert units["k_add"].span == ("0", "16") and units["k_pooled"].span is None
    assert all(u.symbol.startswith(kernel_share.SYMBOL_PREFIX) for u in units.values())


def test_unit_symbols_name_the_code_not_the_names_or_metadata_numbers():
    first = {u.kernel[2:]: u.symbol for u in kernel_share.units_of(_module(), "salt")}
    renamed = {u.kernel[len("other_"):]: u.symbol for u in kernel_share.units_of(_module(k="other", m=5), "salt")}
    assert renamed == first
    assert kernel_share.units_of(_module(c="2.0"), "salt")[0].symbol != first["add"]       # other code
    assert kernel_share.units_of(_module(n=32), "salt")[0].symbol != first["add"]          # other range
    assert kernel_share.units_of(_module(), "other engine")[0].symbol != first["add"]     # other target


def test_rewrite_imports_what_is_available_and_exports_the_rest():
    text = _module()
    units = kernel_share.units_of(text, "salt")
    add = next(u for u in units if u.kernel == "k_add")
    pooled = next(u for u in units if u.kernel == "k_pooled")
    shared = kernel_share.rewrite(text, units, {add.symbol})
    assert shared.imports == (add.symbol,) and shared.provides == (pooled.symbol,)
    assert 'define internal void @"k_add"' not in shared.text
    assert f'declare void @"{add.symbol}"(ptr)' in shared.text
    assert f'call void @"{add.symbol}"(ptr %".1")' in shared.text
    assert f'define void @"{pooled.symbol}"(ptr noalias %"table", i64 %"lo", i64 %"hi")' in shared.text
    assert f'(void (ptr, i64, i64)* @"k_pooled"' in shared.text   # its own module still hands out its address
    alone = kernel_share.rewrite(text, units, set())
    assert alone.imports == () and set(alone.provides) == {add.symbol, pooled.symbol}
    imports_all = kernel_share.rewrite(text, units, {add.symbol, pooled.symbol})
    assert f'(void (ptr, i64, i64)* @"{pooled.symbol}"' in imports_all.text
    assert f'declare void @"{pooled.symbol}"(ptr, i64, i64)' in imports_all.text
    # the range unit stays internal, reached through an exported thunk on its range
    assert 'define internal void @"k_add"' in alone.text
    assert f'call void @"k_add"(ptr %"table", i64 0, i64 16)' in alone.text


def _run(lib, n=16) -> tuple[np.ndarray, np.ndarray]:
    a = np.arange(n, dtype=np.float32)
    b = np.zeros(8, np.float32)
    table = (ctypes.c_void_p * 2)(a.ctypes.data, b.ctypes.data)
    lib.get_function("tfxla_entry", None, ctypes.c_void_p)(ctypes.addressof(table))
    return a, b


@pytest.fixture
def engine():
    from tfxla_cluster.codegen import native_runtime
    native_runtime.ensure_registered()   # tfxla_parallel_for
    return JitEngine()


def test_importing_module_computes_what_it_computes_alone(engine):
    first = engine.compile(_module("first"), ["tfxla_entry"], share=True)
    second = engine.compile(_module("second", k="other", m=3), ["tfxla_entry"], share=True)
    assert first.imports == () and len(first.provides) == 2
    assert sorted(second.imports) == sorted(first.provides) and second.provides == ()
    assert engine.shared_imports == 2
    alone = JitEngine().compile(_module("alone", k="other", m=3), ["tfxla_entry"], share=False)
    want = _run(alone)
    np.testing.assert_array_equal(want[0], np.arange(16) + 1)
    assert want[1][0] == 7
    for got in (_run(first), _run(second)):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    # the importer keeps its provider's code: drop every other reference, collect, call again
    del first
    gc.collect()
    got = _run(second)
    np.testing.assert_array_equal(got[0], want[0])
    third = engine.compile(_module("third", k="x", m=1), ["tfxla_entry"], share=True)
    assert len(third.imports) == 2   # still provided: by the library the second one holds


def test_engines_of_one_key_share_one_provider(engine):
    """A kernel one engine provides is not provided again by another of the same key (the process's symbol table
    is one: re-pointing the symbol would hand the first engine's importers code they do not hold)."""
    first = engine.compile(_module("first"), ["tfxla_entry"], share=True)
    other = JitEngine()
    second = other.compile(_module("second", k="other"), ["tfxla_entry"], share=True)
    assert sorted(second.imports) == sorted(first.provides)
    del first
    gc.collect()
    np.testing.assert_array_equal(_run(second)[0], np.arange(16) + 1)


def test_provider_freed_when_nobody_imports(engine):
    first = engine.compile(_module("first"), ["tfxla_entry"], share=True)
    provides = first.provides
    del first
    gc.collect()
    again = engine.compile(_module("again", k="y"), ["tfxla_entry"], share=True)
    assert again.imports == () and again.provides == provides   # defines them again, registers its own
    np.testing.assert_array_equal(_run(again)[0], np.arange(16) + 1)


def test_freed_providers_leave_no_entries(engine, monkeypatch):
    """The process's provider table drops the entries of freed libraries once it has grown (no leak per symbol)."""
    from tfxla_cluster.codegen import engine as engine_mod

    class _Gone:
        pass
    table = dict(engine_mod._PROVIDERS)
    for i in range(80):    # dead entries, as freed providers leave them
        table[f"tfxla_k.dead{i}"] = weakref.ref(_Gone())
    monkeypatch.setattr(engine_mod, "_PROVIDERS", table)
    monkeypatch.setattr(engine_mod, "_PROVIDERS_PRUNE_AT", [64])
    lib = engine.compile(_module("prune", k="z", c="3.0"), ["tfxla_entry"], share=True)
    assert not any(k.startswith("tfxla_k.dead") for k in table)
    assert lib.provides and all(engine_mod._provider(sym) is lib for sym in lib.provides)


def test_object_code_needing_a_provider(engine, tmp_path, caplog):
    provider = engine.compile(_module("first"), ["tfxla_entry"], share=True)
    importer = engine.compile(_module("second", k="other"), ["tfxla_entry"], share=True)
    cache = PersistentCache(tmp_path)
    cache.store("aa", "d1", provider, "first")
    cache.store("bb", "d2", importer, "second")
    obj, imports = importer.object_code, importer.imports
    del provider, importer
    gc.collect()   # nothing in the process defines the kernels now: as in a new process
    fresh = JitEngine()
    with pytest.raises(MissingSharedKernels):
        fresh.load_object(obj, ["tfxla_entry"], imports=imports)
    with caplog.at_level(logging.INFO, logger="tfxla_cluster"):
        assert cache.load("bb", "d2", fresh, "second") is None
    assert not any("corrupt" in r.getMessage() for r in caplog.records)   # a miss, not a corrupt entry
    loaded_provider = cache.load("aa", "d1", fresh, "first")
    loaded = cache.load("bb", "d2", fresh, "second")
    assert loaded is not None and loaded.imports == imports
    np.testing.assert_array_equal(_run(loaded)[0], np.arange(16) + 1)
    del loaded_provider
    gc.collect()
    np.testing.assert_array_equal(_run(loaded)[1][:1], [7])


def test_header_lists_must_be_names(engine, tmp_path, caplog):
    import json
    from tfxla_cluster.runtime.compile_cache import read_entry
    lib = engine.compile(_module("first"), ["tfxla_entry"], share=True)
    cache = PersistentCache(tmp_path)
    cache.store("aa", "d1", lib, "first")
    header, obj = read_entry(cache.path_for("aa"))
    header["imports"] = {"not": "a list"}
    cache.path_for("aa").unlink()
    cache._write(cache.path_for("aa"), obj, header)
    with caplog.at_level(logging.WARNING, logger="tfxla_cluster"):
        assert cache.load("aa", "d1", JitEngine(), "first") is None
    assert any("corrupt" in r.getMessage() for r in caplog.records)
    assert json.dumps(header)


def test_models_blocks_share_kernels_across_clusters():
    """Two jit functions whose modules hold the same fused kernel: the second calls the first's, and both give TF's
    XLA's bits."""
    x = np.random.default_rng(0).standard_normal((64, 33)).astype(np.float32)

    def f1(v):
        return tf.exp(v) * 3.0 + 1.0, tf.reduce_max(v, axis=0)

    def f2(v):
        return tf.exp(v) * 3.0 + 1.0, tf.reduce_max(v, axis=1)

    before = get_engine().shared_imports
    for fn in (f1, f2):
        want = tf.function(fn, jit_compile=True)(x)
        got = txc.function(fn, jit_compile=True)(x)
        for w, g in zip(want, got):
            assert w.numpy().tobytes() == g.numpy().tobytes()
    assert get_engine().shared_imports > before
