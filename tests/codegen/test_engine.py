"""JitEngine: compile IR text, call it, keep code alive, compile from many threads at once."""
import ctypes
import gc
import threading

import numpy as np
import pytest

from tests.codegen.cg_helpers import run_threads
from tfxla_cluster.codegen.engine import JitEngine, get_engine
from tfxla_cluster.errors import InternalError

SCALE = """
define void @scale(ptr noalias %x, ptr noalias %y, i64 %n, float %a) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %body]
  %c = icmp slt i64 %i, %n
  br i1 %c, label %body, label %done
body:
  %px = getelementptr inbounds float, ptr %x, i64 %i
  %v = load float, ptr %px
  %m = fmul float %v, %a
  %py = getelementptr inbounds float, ptr %y, i64 %i
  store float %m, ptr %py
  %i1 = add i64 %i, 1
  br label %loop
done:
  ret void
}
"""


def _call_scale(lib, x, a):
    fn = lib.get_function("scale", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_float)
    y = np.empty_like(x)
    fn(x.ctypes.data, y.ctypes.data, x.size, a)
    return y


def test_compile_and_call_vectorised_loop():
    eng = get_engine()
    lib = eng.compile(SCALE, ["scale"], name="scale")
    x = np.arange(1003, dtype=np.float32)
    np.testing.assert_array_equal(_call_scale(lib, x, 2.0), x * 2)
    assert "<8 x float>" in lib.optimized_ir or "<16 x float>" in lib.optimized_ir or "<4 x float>" in lib.optimized_ir
    assert eng.cpu and "O3" in eng.key and eng.cpu in eng.key   # a named CPU target may have no feature string


def test_object_code_round_trip():
    eng = get_engine()
    lib = eng.compile(SCALE, ["scale"])
    again = eng.load_object(lib.object_code, ["scale"])
    x = np.linspace(-1, 1, 17, dtype=np.float32)
    np.testing.assert_array_equal(_call_scale(again, x, -3.0), x * -3)


def test_callable_keeps_code_alive():
    eng = get_engine()
    fn = eng.compile(SCALE, ["scale"]).get_function("scale", None, ctypes.c_void_p, ctypes.c_void_p,
                                                     ctypes.c_int64, ctypes.c_float)
    gc.collect()
    x = np.ones(64, np.float32)
    y = np.empty_like(x)
    fn(x.ctypes.data, y.ctypes.data, 64, 5.0)
    assert (y == 5).all()


def test_bad_ir_and_missing_symbol_are_errors():
    eng = get_engine()
    with pytest.raises(InternalError, match="rejected"):
        eng.compile("define void @f( {", ["f"])
    lib = eng.compile(SCALE, ["scale"])
    with pytest.raises(InternalError, match="does not export"):
        lib.address_of("nope")


def test_threaded_compiles():
    eng = JitEngine(opt_level=2)
    out = []

    def work(k):
        # Distinct IR per thread (the body's value names), so each one really compiles.
        lib = eng.compile(SCALE.replace("%m", f"%m{k}"), ["scale"], name=f"t{k}")
        out.append((k, _call_scale(lib, np.full(33, k, np.float32), 2.0)))

    run_threads(work, 6)
    assert len(out) == 6 and eng.compiles == 6 and eng.reused == 0
    for k, y in out:
        np.testing.assert_array_equal(y, np.full(33, 2.0 * k, np.float32))


def test_identical_ir_is_compiled_once_and_its_code_shared():
    eng = JitEngine(opt_level=2)
    a = eng.compile('; ModuleID = "cluster_1"\n' + SCALE, ["scale"], name="cluster_1")
    b = eng.compile('; ModuleID = "cluster_2"\n' + SCALE, ["scale"], name="cluster_2")
    assert eng.compiles == 1 and eng.reused == 1
    assert b.name == "cluster_2" and b.stats.total == 0.0 and a.stats.total > 0.0
    assert b.address_of("scale") == a.address_of("scale") and b.object_code == a.object_code
    x = np.arange(9, dtype=np.float32)
    del a
    gc.collect()   # the shared code stays mapped while any library using it lives
    np.testing.assert_array_equal(_call_scale(b, x, 3.0), x * 3.0)
    # Different IR, or different exports: compiled.
    eng.compile(SCALE.replace("fmul", "fadd"), ["scale"])
    assert eng.compiles == 2
    # Once every library with that code is gone, the same IR compiles again.
    del b
    gc.collect()
    eng.compile(SCALE, ["scale"])
    assert eng.compiles == 3


def test_big_module_gets_the_light_pipeline_and_still_vectorises():
    """A module past LITE_PIPELINE_IR_SIZE (a cluster of many kernels) is optimised without unrolling or
    interleaving, but its loops are still vectorised and compute the same values."""
    from tfxla_cluster.codegen.engine import LITE_PIPELINE_IR_SIZE

    eng = get_engine()
    copies = LITE_PIPELINE_IR_SIZE // len(SCALE) + 2
    big = "".join(SCALE.replace("@scale(", f"@scale{i}(") for i in range(copies))
    assert len(big) >= LITE_PIPELINE_IR_SIZE
    assert eng.pipeline(len(big)) == (2, True, False)
    assert eng.pipeline(len(SCALE)) == (eng.opt_level, True, True)
    lib = eng.compile(big, ["scale0", f"scale{copies - 1}"], name="big")
    assert "<8 x float>" in lib.optimized_ir or "<16 x float>" in lib.optimized_ir or "<4 x float>" in lib.optimized_ir
    x = np.arange(1003, dtype=np.float32) - 500
    for sym in ("scale0", f"scale{copies - 1}"):
        fn = lib.get_function(sym, None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_float)
        y = np.empty_like(x)
        fn(x.ctypes.data, y.ctypes.data, x.size, 0.5)
        np.testing.assert_array_equal(y, x * np.float32(0.5))
    assert "pipe" in eng.key   # the pipeline policy is part of what names cached code


def _reference_object(eng, text: str) -> bytes:
    """What llvmlite's own (locked, global-context) calls make of ``text`` with the engine's pipeline."""
    import llvmlite.binding as llvm

    with eng._lock:
        mod = llvm.parse_assembly(text)
        mod.triple, mod.data_layout = eng.triple, eng.data_layout
        eng.optimize(mod, len(text))
        return eng.target_machine.emit_object(mod)


@pytest.mark.parametrize("serial", ["", "1"], ids=["concurrent", "serial"])
def test_object_code_is_llvmlites_whatever_the_thread(monkeypatch, serial):
    """A module compiled in a private context on whichever thread (with or without TFXLA_COMPILE_SERIAL) is
    the object code llvmlite's global-context calls give."""
    monkeypatch.setenv("TFXLA_COMPILE_SERIAL", serial)
    eng = JitEngine()
    texts = [SCALE.replace("%m", f"%m{k}") for k in range(4)]
    libs = {}
    run_threads(lambda k: libs.__setitem__(k, eng.compile(texts[k], ["scale"], name=f"t{k}")), 4)
    for k, text in enumerate(texts):
        assert libs[k].object_code == _reference_object(eng, text)
        assert not libs[k].optimized_ir.startswith("; ---- part")   # a one-part module's IR as LLVM prints it
        x = np.arange(40, dtype=np.float32)
        np.testing.assert_array_equal(_call_scale(libs[k], x, 1.5), x * np.float32(1.5))


@pytest.mark.parametrize("serial", ["", "1"], ids=["concurrent", "serial"])
def test_concurrent_compiles_overlap_and_errors_stay_typed(monkeypatch, serial):
    """Two modules compiled on two threads run their LLVM pass pipelines side by side (one after the other
    with TFXLA_COMPILE_SERIAL=1); bad IR compiled on another thread is still an InternalError there."""
    from tfxla_cluster.codegen.engine import LITE_PIPELINE_IR_SIZE

    monkeypatch.setenv("TFXLA_COMPILE_SERIAL", serial)
    eng = JitEngine()
    copies = LITE_PIPELINE_IR_SIZE // len(SCALE) // 2
    big = ["".join(SCALE.replace("@scale(", f"@scale{i}_{k}(") for i in range(copies)) for k in range(2)]
    spans, errors = {}, []
    barrier = threading.Barrier(3)

    def work(k):
        barrier.wait()
        if k == 2:
            try:
                eng.compile("define void @f( {", ["f"], name="bad")
            except InternalError as e:
                errors.append(e)
            return
        spans[k] = eng.compile(big[k], [f"scale0_{k}"], name=f"big{k}").stats.spans[0]

    run_threads(work, 3)
    assert len(errors) == 1 and "LLVM rejected the IR of bad" in str(errors[0])
    (a0, a1), (b0, b1) = sorted(spans.values())
    assert (b0 < a1) == (not serial), spans   # the second's LLVM work started before the first's ended


def test_concurrent_compiles_leave_the_c_locale_alone():
    """libllvmlite's module printer switches the process's C locale to "C" and back; compiles on several
    threads at once must not leave it at "C" (Python's text I/O would then decode ASCII)."""
    import locale

    before = locale.setlocale(locale.LC_CTYPE)
    eng = JitEngine()
    texts = [SCALE.replace("%m", f"%m{k}").replace("@scale(", f"@scale{k}(") for k in range(32)]
    for _ in range(3):
        run_threads(lambda k: [eng.compile(texts[j], [f"scale{j}"], name=f"loc{j}")
                               for j in range(k, len(texts), 8)], 8)
    assert locale.setlocale(locale.LC_CTYPE) == before


def test_optimized_ir_is_printed_on_first_use_as_the_compile_prints_it():
    # A compile prints its optimised IR only when asked (a dump); otherwise the library prints it when read.
    eng = JitEngine()
    printed = eng.compile(SCALE, ["scale"], print_ir=True)
    eng._by_ir.clear()   # compile again rather than share the first library's code
    lazy = eng.compile(SCALE, ["scale"])
    assert printed._optimized_ir is not None and lazy._optimized_ir is None
    assert lazy.optimized_ir == printed.optimized_ir and "fmul" in lazy.optimized_ir
    assert lazy.object_code == printed.object_code
    assert eng.load_object(lazy.object_code, ["scale"]).optimized_ir == ""   # no IR behind loaded code


def test_compile_threads_leave_out_other_processes_load_not_this_ones(monkeypatch):
    from tfxla_cluster.codegen import engine

    monkeypatch.delenv("TFXLA_COMPILE_THREADS", raising=False)
    monkeypatch.setattr(engine.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    cases = [(0.2, 0.1, 4), (2.0, 2.0, 4), (2.0, 0.5, 3), (3.9, 0.0, 1), (9.0, 1.0, 1)]
    for load, own, threads in cases:   # (load average, this process's part of it, threads)
        monkeypatch.setattr(engine.os, "getloadavg", lambda: (load, load, load))
        monkeypatch.setattr(engine, "_own_load", lambda: own)
        assert engine.compile_threads() == threads, (load, own)
    monkeypatch.setenv("TFXLA_COMPILE_THREADS", "3")
    assert engine.compile_threads() == 3
    monkeypatch.undo()
    assert 0.0 <= engine._own_load() <= (engine.os.cpu_count() or 1) + 1   # this process's, from /proc
