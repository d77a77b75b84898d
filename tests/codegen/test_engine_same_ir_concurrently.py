"""JitEngine: identical IR compiled on several threads at once is compiled once, the others reuse it
(runtime/ahead.py compiles clusters concurrently; repeated blocks lower to the same IR)."""
import numpy as np

from tests.codegen.cg_helpers import run_threads
from tests.codegen.test_engine import SCALE, _call_scale
from tfxla_cluster.codegen.engine import JitEngine


def test_identical_ir_on_four_threads_compiles_once_and_every_copy_runs():
    eng = JitEngine()
    libs = [None] * 4

    def work(k: int) -> None:
        libs[k] = eng.compile(f'; ModuleID = "m{k}"\n' + SCALE, ["scale"], name=f"m{k}")
    run_threads(work, 4)
    assert eng.compiles == 1 and eng.reused == 3
    assert sorted(lib.name for lib in libs) == ["m0", "m1", "m2", "m3"]
    assert len({lib.object_code for lib in libs}) == 1
    x = np.arange(5, dtype=np.float32)
    for lib in libs:
        np.testing.assert_array_equal(_call_scale(lib, x, 2.0), x * 2.0)


def test_a_failed_compile_lets_the_waiting_threads_compile_themselves():
    eng = JitEngine()
    failures = []

    def work(k: int) -> None:
        try:
            eng.compile("define void @bad( {", ["bad"], name=f"bad{k}")
        except Exception as e:  # noqa: BLE001 - each thread gets LLVM's error, none waits forever
            failures.append(type(e).__name__)
    run_threads(work, 3)
    assert failures == ["InternalError"] * 3 and eng.compiles == 0 and not eng._compiling
