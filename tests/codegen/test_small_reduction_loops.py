"""Row reductions of a few elements under the light LLVM pipeline (what a big cluster's module gets).

llvmlite's LLVM vectoriser, run without unrolling, aborted the process on f64 max/min over rows of 6 or 7
elements ("VPlan cost model and legacy cost model disagreed", tools/fuzz.py seed 41, a merged batch past
LITE_PIPELINE_IR_SIZE) and gave wrong f32 maxima there. Reduction loops with a small static trip count are
now never vectorised (``loops.for_range(..., reduction=True)``). It aborted the same way on f32 max/min rows of
20-23, 28-31, 36-39 and 44-47 elements (a softmax over 37 classes): maxnum/minnum reduction loops are given
their vector width. Expectations come from TF's XLA."""
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


@pytest.mark.parametrize("light", [True, False])
def test_min_max_rows_llvm_once_aborted_on_equal_tf_xla(monkeypatch, light):
    if light:
        monkeypatch.setattr(engine, "LITE_PIPELINE_IR_SIZE", 0)
    rng = np.random.RandomState(11)
    for dtype in ("float32", "float64"):
        for n in (21, 30, 37, 44, 47):
            x = rng.randn(5, n).astype(dtype)
            x[1, 3] = np.nan
            for name in ("max", "min"):
                def fn(a, op=OPS[name]):
                    return op(a, axis=1), tf.nn.softmax(a, axis=-1)
                want = tf.function(fn, jit_compile=True)(x)
                got = txc.function(fn, jit_compile=True)(x)
                np.testing.assert_array_equal(got[0].numpy(), want[0].numpy(), err_msg=f"{name} over rows of {n}")
                np.testing.assert_allclose(got[1].numpy(), want[1].numpy(), rtol=1e-6 if dtype == "float32" else 1e-12,
                                           atol=0, err_msg=f"softmax over rows of {n}")


def test_min_max_reduction_loops_carry_their_vector_width():
    import llvmlite.ir as ir

    from tfxla_cluster.codegen.loops import for_range

    m = ir.Module()
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [ir.FloatType(), ir.DoubleType()]), "f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    for ty, arg in ((ir.FloatType(), fn.args[0]), (ir.DoubleType(), fn.args[1])):
        maxnum = m.declare_intrinsic("llvm.maxnum", [ty])
        with for_range(b, 0, 37, "r", reduction=True):
            b.call(maxnum, [arg, arg])
    with for_range(b, 0, 37, "o", reduction=True):   # an outer loop: not pinned
        with for_range(b, 0, 37, "i", reduction=True):
            b.call(maxnum, [fn.args[1], fn.args[1]])
    b.ret_void()
    text = str(m)
    assert text.count('"llvm.loop.vectorize.width", i32 8') == 1
    assert text.count('"llvm.loop.vectorize.width", i32 4') == 1   # one node, two loops
    assert text.count("!llvm.loop") == 3
