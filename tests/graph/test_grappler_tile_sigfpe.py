"""TF 2.21's grappler dies of SIGFPE on some graphs with zero-size tensors (graph/grappler.py
``_tile_rewrite_divides_by_zero``): ArithmeticOptimizer's ReplaceMulWithBroadcastByTile divides the
output's dimensions by those of ``x`` in ``Mul(x, ones)``, and a folded zero-element constant counts as
all ones. TF's own ``tf.function`` aborts the process (checked here in a subprocess: exit by SIGFPE);
ours runs grappler without the arithmetic optimizer on such a graph, warns, and computes what TF's XLA
computes. Fuzz seed 151001388 (``x / cabs(asin(empty const))``) found it."""
from __future__ import annotations

import os
import signal
import subprocess
import warnings
import sys

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.flags import Flags
from tfxla_cluster.graph.grappler import _args_as_shaped_stand_ins, _tile_rewrite_divides_by_zero
from tfxla_cluster.graph.loader import graph_def_from_concrete

AUTO = Flags.parse("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit")

BODIES = {
    "div_by_ones": lambda x: x / tf.ones([1, 3]),
    "mul_by_empty": lambda x: x * tf.zeros([0, 3]),
    "div_by_folded_empty": lambda x: x / tf.abs(tf.sin(tf.zeros([0, 3]))),
}

_TF_SCRIPT = """
import sys, tensorflow as tf
body = {"div_by_ones": lambda x: x / tf.ones([1, 3]), "mul_by_empty": lambda x: x * tf.zeros([0, 3]),
        "div_by_folded_empty": lambda x: x / tf.abs(tf.sin(tf.zeros([0, 3])))}[sys.argv[1]]
print(tf.function(body)(tf.zeros([0, 1])).shape)
"""


@pytest.mark.parametrize("name", sorted(BODIES))
def test_tf_graph_mode_dies_and_ours_runs(name):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", _TF_SCRIPT, name], env=env, capture_output=True, timeout=300)
    assert done.returncode == -signal.SIGFPE      # TF's own process is killed by grappler
    x = tf.zeros([0, 1])
    with pytest.warns(RuntimeWarning, match="ReplaceMulWithBroadcastByTile"):
        ours = txc.function(BODIES[name], flags=AUTO)(x)
    want = tf.function(BODIES[name], jit_compile=True)(x)    # TF's XLA runs no grappler
    assert ours.shape == want.shape == (0, 3) and ours.dtype == want.dtype


def test_detector_names_the_node_and_ignores_ordinary_graphs():
    empty = tf.function(BODIES["div_by_folded_empty"]).get_concrete_function(tf.TensorSpec([0, 1], tf.float32))
    gd = graph_def_from_concrete(empty)
    _args_as_shaped_stand_ins(gd)        # what run_grappler hands TF's optimizer: argument shapes known
    assert _tile_rewrite_divides_by_zero(gd) == "truediv"
    plain = graph_def_from_concrete(
        tf.function(BODIES["div_by_ones"]).get_concrete_function(tf.TensorSpec([2, 1], tf.float32)))
    _args_as_shaped_stand_ins(plain)
    assert _tile_rewrite_divides_by_zero(plain) is None
    x = tf.constant(np.arange(2, dtype=np.float32).reshape(2, 1))
    np.testing.assert_array_equal(txc.function(BODIES["div_by_ones"], flags=AUTO)(x).numpy(),
                                  tf.function(BODIES["div_by_ones"])(x).numpy())


def _empty_slice_body(x):
    """``x / zeros([0, 3])`` beside an empty strided slice of an int32 constant: StridedSlice's shape
    function reads the constant as a shape and rejects the empty slice, so grappler's static shape
    inference fails and the arithmetic optimizer leaves out ReplaceMulWithBroadcastByTile."""
    shape = tf.concat([tf.constant([0, 0, 0])[-2:-3:3], tf.constant([0, 3])], 0)
    return tf.reshape(x / tf.zeros([0, 3]), shape)


_TF_EMPTY_SLICE = """
import tensorflow as tf
def body(x):
    shape = tf.concat([tf.constant([0, 0, 0])[-2:-3:3], tf.constant([0, 3])], 0)
    return tf.reshape(x / tf.zeros([0, 3]), shape)
print(tf.function(body)(tf.zeros([0, 1])).shape)
"""


def test_failed_shape_inference_shields_the_rewrite_in_tf_and_ours():
    """Fuzz seed 348001179: the detector's own shape inference raised TF's 'Subshape must have computed
    start <= end' and our auto-clustered run failed where TF's ran. Now the detector follows TF: no shapes
    (after constant folding, the arithmetic optimizer's input), no rewrite, no crash, no warning."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", _TF_EMPTY_SLICE], env=env, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr[-500:]       # TF's grappler skips the rewrite and survives
    gd = graph_def_from_concrete(
        tf.function(_empty_slice_body).get_concrete_function(tf.TensorSpec([0, 1], tf.float32)))
    _args_as_shaped_stand_ins(gd)
    assert _tile_rewrite_divides_by_zero(gd) is None
    x = tf.zeros([0, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        ours = txc.function(_empty_slice_body, flags=AUTO)(x)
    want = tf.function(_empty_slice_body)(x)
    assert ours.shape == want.shape == (0, 3) and ours.dtype == want.dtype
