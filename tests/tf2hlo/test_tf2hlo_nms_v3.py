"""NonMaxSuppressionV3 (issue 18): TF's XLA returns its indices as ``s32[<=max_output_size]`` (V4's padded
indices with ``set-dimension-size`` to the valid count), and its boundary gives the caller the valid ones.
Ours: a bounded dynamic cluster result, cut to its run-time size by the launch — against TF's XLA through
the whole ``jit_compile=True`` path and auto-clustering (also gathered: ``tf.gather(boxes, selected)``);
consumed inside the cluster by elementwise ops, reductions, ``tf.size``/``tf.shape``, reshapes and
concatenations as TF's XLA (its dynamic padder) computes them (tests/tf2hlo/test_bounded_dynamic.py); other
consumers are refused."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.tf2hlo import lower_function

BOXES = np.array([[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11], [0, 10.1, 1, 11.1],
                  [0, 100, 1, 101]], np.float32)
SCORES = np.array([0.9, 0.75, 0.6, 0.95, 0.5, 0.3], np.float32)


def _v3(b, s, max_out=4, score=0.1):
    return tf.raw_ops.NonMaxSuppressionV3(boxes=b, scores=s, max_output_size=max_out, iou_threshold=0.5,
                                          score_threshold=score)


def _program(b, s):
    return (_v3(b, s), _v3(b, s, 6, 0.55), s * 2.0, tf.gather(b, _v3(b, s)),
            tf.gather(tf.transpose(b), _v3(b, s), axis=1))


@pytest.mark.parametrize("mode", [dict(jit_compile=True), dict(flags="--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit")],
                         ids=["jit_compile", "auto"])
def test_nms_v3_equals_tf_xla(mode) -> None:
    want = tf.function(_program, jit_compile=True)(BOXES, SCORES)
    got = txc.function(_program, **mode)(tf.constant(BOXES), tf.constant(SCORES))
    assert [w.shape for w in want] == [(3,), (2,), (6,), (3, 4), (4, 3)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())


def test_nms_v3_lowers_to_padded_indices_and_their_count() -> None:
    spec = [tf.TensorSpec(BOXES.shape, tf.float32), tf.TensorSpec(SCORES.shape, tf.float32)]
    lowered = lower_function(tf.function(_v3).get_concrete_function(*spec), BOXES, SCORES)
    raw = lowered.run(BOXES, SCORES)
    assert raw[0].shape == (4,) and int(raw[1]) == 3 and lowered.outputs[0].dynamic == (0, 1)
    np.testing.assert_array_equal(lowered.trim_results(raw)[0], [3, 0, 5])


def _consumers(b, s):
    sel = _v3(b, s)
    g, gs = tf.gather(b, sel), tf.gather(s, sel)
    return (tf.reduce_sum(g), tf.size(sel), tf.shape(sel), sel * 2, tf.cast(sel, tf.float32) + 0.5,
            tf.reduce_max(gs), tf.reduce_min(gs), tf.reduce_mean(gs), tf.shape(g), tf.reduce_sum(g, 1),
            tf.reduce_sum(g, 0), tf.reduce_prod(gs + 1), tf.reduce_mean(g, 0), tf.size(g),
            tf.reduce_any(gs > 0.94), tf.reduce_all(gs > 0.3), tf.cast(tf.size(sel), tf.float32) * s,
            tf.argmax(gs), tf.reduce_sum(g, keepdims=True), tf.reduce_max(g, axis=1, keepdims=True),
            gs - tf.reduce_mean(gs), tf.where(gs > 0.5, gs, -gs))


def test_nms_v3_consumed_inside_the_cluster_equals_tf_xla() -> None:
    """Reductions mask the padding (Mean divides by the run-time count), elementwise results keep the run-time
    size and are cut at the boundary, sizes and shapes are the run-time ones."""
    want = tf.function(_consumers, jit_compile=True)(BOXES, SCORES)
    got = txc.function(_consumers, jit_compile=True)(tf.constant(BOXES), tf.constant(SCORES))
    assert len(got) == len(want) and want[2].numpy().tolist() == [3]
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, k
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6, err_msg=f"output {k}")


def test_nms_v3_other_consumers_are_refused() -> None:
    """A consumer beyond those (here a sort, which TF's dynamic padder handles): a typed error."""
    fn = lambda b, s: tf.sort(_v3(b, s))  # noqa: E731
    np.testing.assert_array_equal(tf.function(fn, jit_compile=True)(BOXES, SCORES).numpy(), [0, 3, 5])
    spec = [tf.TensorSpec(BOXES.shape, tf.float32), tf.TensorSpec(SCORES.shape, tf.float32)]
    with pytest.raises(UnimplementedError, match="bounded dynamic dimension"):
        lower_function(tf.function(fn).get_concrete_function(*spec), BOXES, SCORES)
