"""Compare a lowered tf.function with TF's own XLA (``jit_compile=True``) on this machine: lower, evaluate
with the reference evaluator, run the same HLO text on real XLA (jax), and compare with TF's XLA.
Captured variables are fed their current values; the lowered function's outputs are its results then
its written variables (compare those with the variables' values after TF's call)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import HAVE_JAX

from tfxla_cluster.hlo import parse_module
from tfxla_cluster.tf2hlo import lower_function

# 16-bit: TF's XLA computes the erfinv chain in f32 and rounds once; the evaluator rounds per op.
RTOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12, np.dtype(np.float16): 2e-2,
        np.dtype(ml_dtypes.bfloat16): 2e-2}


def lower_and_run(fn, args=(), seedless: bool = False):
    """Lower, evaluate and run on XLA; captured variables are fed their current values. ``seedless``:
    XLA's own draws differ from the evaluator's, so only shapes and dtypes are compared with XLA."""
    specs = [tf.TensorSpec(np.shape(a), tf.as_dtype(np.asarray(a).dtype)) for a in args]
    concrete = tf.function(fn, autograph=False).get_concrete_function(*specs)
    lc = lower_function(concrete, *args)
    text = lc.module.to_string()
    assert parse_module(text).to_string() == text
    variables = {id(v.handle): v for v in concrete.graph.variables}
    feed = list(args) + [variables[id(h)].numpy() for h in concrete.captured_inputs]
    feed = [feed[i.index] for i in lc.inputs]
    got = lc.run(*feed)
    if HAVE_JAX:
        from tests.tf2hlo.tf2hlo_xla import xla_run

        by_index = {i.index: f for i, f in zip(lc.inputs, feed)}
        params = [np.asarray(by_index[p.index]).astype(p.element_type.dtype) for p in lc.parameters]
        for i, (x, g) in enumerate(zip(xla_run(text, *params), got)):
            assert np.shape(x) == g.shape and np.asarray(x).dtype == g.dtype, f"XLA vs evaluator output {i}"
            if seedless:
                continue
            if g.dtype.kind in "iub":
                np.testing.assert_array_equal(x, g, err_msg=f"XLA vs evaluator output {i}")
            else:
                np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(g, np.float64),
                                           rtol=RTOL[g.dtype], atol=1e-6, err_msg=f"XLA vs evaluator {i}")
    return got


def tf_xla(fn, args=()):
    out = tf.function(fn, jit_compile=True, autograph=False)(*[tf.constant(a) for a in args])
    return [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])]


def compare(got, want, exact: tuple[int, ...] = (), rtol: float | None = None):
    """Integers and the ``exact`` outputs bit-equal; floats within ``rtol`` (default: RTOL of the dtype)."""
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"output {i}: {g.shape} {g.dtype} vs {w.shape} {w.dtype}"
        if i in exact or g.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol or RTOL[g.dtype],
                                       atol=1e-6, err_msg=f"output {i}")
