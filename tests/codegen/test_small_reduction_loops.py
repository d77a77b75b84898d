"""Row reductions of a few elements under the light LLVM pipeline (what a big cluster's module gets).

llvmlite's LLVM vectoriser, run without unrolling, aborted the process on f64 max/min over rows of 6 or 7
elements ("VPlan cost model and legacy cost model disagreed", tools/fuzz.py seed 41, a merged batch past
LITE_PIPELINE_IR_SIZE) and gave wrong f32 maxima there. Reduction loops with a small static trip count are
now never vectorised (``loops.for_range(..., reduction=True)``). Expectations come from TF's XLA."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.codegen import engine

OPS = {"max": tf.reduce_max, "min": tf.reduce_min, "sum": tf.reduce_sum}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_short_rows_under_the_light_pipeline_equal_tf_xla(monkeypatch, dtype):
    monkeypatch.setattr(engine, "LITE_PIPELINE_IR_SIZE", 0)   # every module gets the light pipeline
    rng = np.random.RandomState(7)
    for n in (5, 6, 7, 9):
        x = rng.randn(3, n).astype(dtype)
        for name, op in OPS.items():
            def fn(a, op=op):
                return op(a, axis=1)
            want = tf.function(fn, jit_compile=True)(x).numpy()
            got = txc.function(fn, jit_compile=True)(x).numpy()
            np.testing.assert_array_equal(got, want, err_msg=f"{name} over rows of {n} ({dtype})")


def test_small_static_reduction_loops_carry_the_no_vectorise_hint():
    import llvmlite.ir as ir

    from tfxla_cluster.codegen.loops import for_range

    m = ir.Module()
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), []), "f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    for stop, reduction in ((7, True), (64, True), (7, False)):
        with for_range(b, 0, stop, f"r{stop}{int(reduction)}", reduction=reduction):
            pass
    b.ret_void()
    text = str(m)
    assert text.count('"llvm.loop.vectorize.enable", i1 0') == 1
    assert text.count("!llvm.loop") == 1
