"""conv_exact's exact kernels are emitted and compiled on first need (issue 17): a guarded convolution's first
call emits and compiles its check and fast kernels only (``Executable.cold_compiles`` stays 0, the cold
module's IR is not made); a later call with an
infinite or NaN filter tap compiles the cold code then and gives TF's XLA's result — through the Python
launch, the native launch op (the rare branch taken on a TF executor thread) and an executable loaded from
the persistent cache (whose lazily compiled cold code is stored there too); an AOT object holds it all."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.runtime import native
from tfxla_cluster.runtime.compile_cache import read_entry

from .test_conv_special_values import _same

AUTO = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"
RNG = np.random.default_rng(1717)
# 9·10·6 outputs × 45 taps: above conv_exact.EXACT_ORDER_WORK (smaller ones run the exact kernel always)
X = RNG.standard_normal((1, 9, 10, 5)).astype(np.float32)
W = RNG.standard_normal((3, 3, 5, 6)).astype(np.float32)
W_SPECIAL = W.copy()
W_SPECIAL[0, 0, 1, 2] = np.inf     # a corner tap: over the padding, 0 * inf = NaN in TF's XLA
W_SPECIAL[2, 1, 3, 0] = np.nan


def conv(x, w):
    return tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"))


def _executables(f, *args) -> list:
    return [c.executable for la in f.get_compiled(*args).launchers.values() for c in la.cache.values()]


def _check_lazy(f, *, native_launch: bool = False) -> list:
    """First call finite: no cold code compiled. Then the special filter: compiled once, TF's XLA's result."""
    xla = tf.function(conv, jit_compile=True)
    x, w, ws = tf.constant(X), tf.constant(W), tf.constant(W_SPECIAL)
    _same(xla(x, w).numpy(), f(x, w).numpy(), 1e-5)
    (exe,) = _executables(f, x, w)
    assert exe.cold is not None and exe.cold_compiles == 0
    # Not even emitted at first call: the entry calls one rare arm, whose module is made on need.
    assert "_exact" not in exe.ir and exe.layout.cold.ir is None and exe.layout.cold.names == ["cold_arm.0"]
    if native_launch:
        _same(xla(x, w).numpy(), f(x, w).numpy(), 1e-5)   # published: later launches run in the kernel
    before = sum(native.native_executions(la) for la in f.get_compiled(x, w).launchers.values())
    for _ in range(2):
        _same(xla(x, ws).numpy(), f(x, ws).numpy(), 1e-5)
        assert exe.cold_compiles == 1
        assert [k.kind for k in exe.layout.cold.kernels] == ["conv-exact"] and "_exact" in exe.layout.cold.ir
    _same(xla(x, w).numpy(), f(x, w).numpy(), 1e-5)   # the fast kernels again
    if native_launch:
        after = sum(native.native_executions(la) for la in f.get_compiled(x, w).launchers.values())
        assert after - before == 3   # the special calls ran natively: the cold code compiled from TF's thread
    return _executables(f, x, w)


def test_jit_first_call_leaves_the_exact_kernel_uncompiled():
    _check_lazy(txc.function(conv, jit_compile=True))


@pytest.mark.skipif(not native.available(), reason=f"native launch: {native.unavailable_reason()}")
def test_native_launch_compiles_the_exact_kernel_on_first_need():
    _check_lazy(txc.function(conv, flags=AUTO), native_launch=True)


def test_persistent_cache_hit_compiles_the_exact_kernel_on_first_need_and_keeps_it(tmp_path):
    flags = f"{AUTO} --tf_xla_persistent_cache_directory={tmp_path}"
    first = txc.function(conv, flags=flags)
    first(tf.constant(X), tf.constant(W))
    stored = len(list(tmp_path.glob("*.tfxla")))
    (loaded,) = _check_lazy(txc.function(conv, flags=flags))
    assert loaded.origin == "persistent cache"
    # The cold code compiled on the loaded executable's rare branch is kept (an entry keyed by its IR)...
    kinds = [read_entry(p)[0].get("kind", "ir") for p in tmp_path.glob("*.tfxla")]
    assert len(kinds) == stored + 1 and kinds.count("ir") >= 1
    # ...and a third function loads it instead of compiling it.
    (third,) = _check_lazy(txc.function(conv, flags=flags))
    stats = third.cold.library.stats
    assert third.origin == "persistent cache" and stats.parse == stats.optimize == stats.codegen == 0.0


def test_aot_emission_calls_the_exact_kernel_directly():
    """An AOT object links against libc/libm only: its exact kernels are in it, called directly."""
    from tfxla_cluster.codegen import CodegenOptions
    from tfxla_cluster.codegen.aot import compile_object
    from tfxla_cluster.codegen.program import ProgramEmitter
    from tfxla_cluster.hlo.parser import parse_module

    hlo = txc.function(conv, jit_compile=True).experimental_get_compiler_ir(
        tf.constant(X), tf.constant(W))(stage="optimized_hlo")
    eager = ProgramEmitter(parse_module(hlo), CodegenOptions(use_blas=False))
    text = eager.emit()
    assert '_exact"(ptr' in text and "tfxla_resolve_cold" not in text and not eager.cold_ir
    assert [k.kind for k in eager.cold_kernels] == ["conv-exact"] and not eager.cold_names
    obj = compile_object(parse_module(hlo), "conv")   # its externals are checked against libc and libm
    assert obj.object_code[:4] == b"\x7fELF"


def test_a_cold_code_compile_failure_runs_the_usual_kernels(monkeypatch, caplog):
    """Should compiling the cold code fail, the call runs the fast kernels (finite taps equal TF's) and logs why."""
    from tfxla_cluster.codegen.engine import JitEngine

    compile_ = JitEngine.compile

    def failing(self, ir_text, exports, name="module", max_parts=1, **options):
        if name.endswith(".cold"):
            raise RuntimeError("no cold code today")
        return compile_(self, ir_text, exports, name, max_parts, **options)

    monkeypatch.setattr(JitEngine, "compile", failing)
    f = txc.function(conv, jit_compile=True)
    x, ws = tf.constant(X), tf.constant(W_SPECIAL)
    with caplog.at_level("ERROR", logger="tfxla_cluster.codegen"):
        got = f(x, ws).numpy()
    (exe,) = _executables(f, x, ws)
    assert exe.cold_compiles == 0 and exe.cold.failed and "no cold code today" in caplog.text
    caplog.clear()
    with caplog.at_level("ERROR", logger="tfxla_cluster.codegen"):
        again = f(x, ws).numpy()
    assert not caplog.text and again.tobytes() == got.tobytes()   # not tried (nor logged) again
    want = tf.function(conv, jit_compile=True)(x, ws).numpy()
    inner = (slice(None), slice(1, -1), slice(1, -1))   # away from the padding, where only the fast path's NaN differs
    np.testing.assert_array_equal(np.isnan(got[inner]), np.isnan(want[inner]))


def test_concurrent_rare_branches_compile_the_cold_code_once():
    import threading

    f = txc.function(conv, jit_compile=True)
    x, w, ws = tf.constant(X), tf.constant(W), tf.constant(W_SPECIAL)
    f(x, w)
    (exe,) = _executables(f, x, w)
    results = [None] * 4

    def run(k):
        results[k] = exe(X, W_SPECIAL)[0]

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    want = tf.function(conv, jit_compile=True)(x, ws).numpy()
    assert exe.cold_compiles == 1
    for got in results:
        _same(want, got, 1e-5)


def test_guarded_f64_dot_defers_its_exact_kernel_too():
    """dot_exact's guard (an f64 GEMM that TF's XLA runs on FMA-less Eigen) shares the lazy cold code."""
    def mm(a, b):
        return tf.nn.relu(tf.linalg.matmul(a, b))
    a = RNG.standard_normal((40, 64))
    b = RNG.standard_normal((64, 48))
    b_special = b.copy()
    a_special = a.copy()
    a_special[3, 0], a_special[3, 63] = np.finfo(np.float64).max, -4.2
    b_special[0, 5], b_special[63, 5] = -5.4, -np.finfo(np.float64).max   # -inf + inf: NaN in TF's XLA
    f = txc.function(mm, jit_compile=True)
    xla = tf.function(mm, jit_compile=True)
    _same(xla(a, b).numpy(), f(a, b).numpy(), 1e-12)
    (exe,) = _executables(f, tf.constant(a), tf.constant(b))
    assert exe.cold is not None and exe.cold_compiles == 0 and exe.layout.cold.ir is None
    want = xla(a_special, b_special).numpy()
    assert np.isnan(want[3, 5])
    _same(want, f(a_special, b_special).numpy(), 1e-12)
    assert exe.cold_compiles == 1
    assert [k.kind for k in exe.layout.cold.kernels] == ["dot-exact"]
