"""Bounded dynamic shapes under ``jit_compile=True`` (issue 13): functions whose results have data-dependent
sizes (tf.unique, tf.where, tf.boolean_mask, NonMaxSuppressionV3 then concat, reshape, slices, pad, gather,
stack, transpose, matmul, tile, reverse, gather_nd) compile as one module
with XLA's bounded shapes (``f32[<=4]``, ``set-dimension-size``), as TF's XLA does. Checked against live TF:
every compiler-IR stage is there before the first call; the ``hlo`` text parses and runs in real XLA (jaxlib)
with TF's results (a bounded result comes back padded: its leading part is TF's); the ``optimized_hlo`` text
parses in real XLA; our calls (twice: the second is the cached, native path) return TF's values and shapes."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc

pytest.importorskip("jax")
from tests.hlo.xla_oracle import xla_parse, xla_run  # noqa: E402

BOXES = np.array([[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11], [0, 10.1, 1, 11.1],
                  [0, 100, 1, 101]], np.float32)
SCORES = np.array([0.9, 0.75, 0.6, 0.95, 0.5, 0.3], np.float32)


def _unique(x):
    y, idx = tf.unique(x)
    return tf.reduce_sum(y * 2.0), idx, y, tf.size(y)


def _where(x):
    w = tf.where(tf.reshape(x, [2, 3]) > 1.5)
    return tf.reduce_sum(tf.cast(w, tf.float32)), w


def _mask(x):
    m = tf.boolean_mask(x, x > 1.5)
    return tf.reduce_mean(m), m


def _nms(b, s):
    sel = tf.raw_ops.NonMaxSuppressionV3(boxes=b, scores=s, max_output_size=5, iou_threshold=0.5,
                                         score_threshold=0.1)
    g = tf.gather(b, sel)
    return (tf.concat([sel, sel * 2], 0), tf.concat([g, g], 1), tf.reshape(g, [-1]), tf.expand_dims(sel, 1),
            tf.concat([tf.constant([7]), sel], 0), tf.reduce_sum(tf.concat([sel, sel], 0)),
            sel[1:], sel[:2], tf.slice(sel, [1], [-1]), g[:, 1:3], tf.pad(sel, [[1, 2]], constant_values=9),
            tf.pad(g, [[0, 0], [1, 1]]), tf.gather(g, [0, 3], axis=1), tf.gather(g, [0, 1]),
            tf.stack([sel, sel * 2], axis=1), tf.transpose(g), tf.matmul(g, b, transpose_b=True),
            tf.tile(sel, [2]), tf.tile(g, [2, 2]), tf.reverse(sel, [0]), tf.reverse(g, [0, 1]),
            tf.gather_nd(b, tf.where(s > 0.55)))


X = np.array([1., 2., 1., 3., 2., -1.], np.float32)
CASES = {"unique": (_unique, [X]), "where": (_where, [X]), "boolean_mask": (_mask, [X]),
         "nms_concat_reshape": (_nms, [BOXES, SCORES])}


@pytest.mark.parametrize("name", list(CASES))
def test_compiler_ir_before_the_first_call_runs_in_xla_with_tfs_results(name) -> None:
    fn, args = CASES[name]
    targs = [tf.constant(a) for a in args]
    theirs = tf.function(fn, jit_compile=True)
    want = theirs(*targs)
    assert "set-dimension-size" in theirs.experimental_get_compiler_ir(*targs)(stage="hlo")
    ours = txc.function(fn, jit_compile=True)
    ir = ours.experimental_get_compiler_ir(*targs)   # no call before
    hlo, optimized = ir(stage="hlo"), ir(stage="optimized_hlo")
    assert hlo.count("HloModule") == 1 and "set-dimension-size" in hlo and "[<=" in hlo
    assert "[<=" not in optimized and "set-dimension-size" not in optimized
    xla_parse(optimized)
    ran = xla_run(hlo, *args)
    for k, w in enumerate(want):
        # XLA returns a bounded result compacted to its run-time shape at the front of the padded buffer.
        w = w.numpy()
        np.testing.assert_allclose(ran[k].reshape(-1)[:w.size].reshape(w.shape), w, rtol=1e-6, err_msg=f"{k}")
    for _ in range(2):
        got = ours(*targs)
        for k, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == w.dtype and g.shape == w.shape, k
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6, err_msg=f"output {k}")


def test_unsupported_consumer_still_runs_as_tf() -> None:
    """Unique's values sorted (not taken by our padder): the function is split around Unique, which runs on
    TF's kernel, and still returns TF's values."""
    fn = lambda x: tf.sort(tf.unique(x)[0])  # noqa: E731
    want = tf.function(fn, jit_compile=True)(X)
    ours = txc.function(fn, jit_compile=True)
    np.testing.assert_array_equal(ours(tf.constant(X)).numpy(), want.numpy())
    clustered = [m for members in ours.get_compiled(tf.constant(X)).clusters.values() for m in members]
    assert "Unique" not in clustered


@pytest.mark.parametrize("name,stage", [("unique", "hlo"), ("where", "optimized_hlo")])
def test_tfs_own_bounded_texts_compile_to_tfs_values(name, stage) -> None:
    """TF's texts leave the padding to XLA's dynamic padder (its reductions read padded arrays; its optimized
    text ends in SliceToDynamic): ours (passes/dynamic_padder.py) masks and strips them, and native code
    computes TF's values (a bounded result comes back padded: its leading part is TF's)."""
    from tfxla_cluster.codegen.executable import compile_module
    from tfxla_cluster.hlo.parser import parse_module
    from tfxla_cluster.passes.pipeline import optimize

    fn, args = CASES[name]
    theirs = tf.function(fn, jit_compile=True)
    want = theirs(*args)
    module = parse_module(theirs.experimental_get_compiler_ir(*args)(stage=stage))
    got = compile_module(optimize(module)[0])(*args)
    got = got if isinstance(got, (tuple, list)) else (got,)
    for k, w in enumerate(want):
        w = w.numpy()
        np.testing.assert_allclose(np.asarray(got[k])[tuple(slice(0, n) for n in w.shape)], w, rtol=1e-6,
                                   err_msg=f"{k}")
