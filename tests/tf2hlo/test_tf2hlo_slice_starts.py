"""Slice starts out of range, against TF's XLA (jit_compile=True), bit for bit.

* A start computed at run time (a loop index) is a dynamic-slice start, which XLA clamps into range.
* A start read from a resource variable is a must-be-constant input: TF compiles the variable's value
  at call time as a constant (``kConstantResource``, part of the compilation's key), so ``x[v:v + 3]``
  has Python's static bounds (an empty slice past the end) and ``x[v]`` out of range fails to compile;
  a new value of the variable is a new compilation.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc

X = np.arange(10, dtype=np.float32)


def _outcome(fn, *args):
    try:
        return [np.asarray(a) for a in tf.nest.flatten(fn(*args))]
    except tf.errors.OpError as e:   # ours are OpError subclasses of the same name
        return type(e).__name__


def _loop(x, i):
    def body(k, acc):
        return k + 1, acc + x[k + i] * tf.cast(k + 1, tf.float32)
    return tf.while_loop(lambda k, acc: k < 4, body, (tf.constant(0), tf.constant(0.0)))[1]


def test_run_time_start_in_a_loop_clamps_as_tf_xla() -> None:
    ours, theirs = txc.function(_loop, jit_compile=True), tf.function(_loop, jit_compile=True)
    for i in (-12, -2, 3, 8, 11):
        want = theirs(X, tf.constant(i)).numpy()
        np.testing.assert_array_equal(ours(X, tf.constant(i)).numpy(), want, err_msg=f"i={i}")


def _programs(v: tf.Variable) -> dict:
    def bounds(x):
        i = v.read_value()
        return x[i:i + 3], tf.slice(x, [tf.maximum(i, 0) // 2], [2]) * tf.cast(i, tf.float32)

    def index_then_bump(x):
        y = x[v.read_value()]
        v.assign_add(3)
        return y
    return {"bounds": bounds, "index_then_bump": index_then_bump}


@pytest.mark.parametrize("name", ["bounds", "index_then_bump"])
def test_start_read_from_a_variable_is_compiled_as_its_value(name) -> None:
    v_tf, v_ours = tf.Variable(0), tf.Variable(0)
    theirs = tf.function(_programs(v_tf)[name], jit_compile=True)
    ours = txc.function(_programs(v_ours)[name], jit_compile=True)
    for i in (-1, 8, 11, 3):
        v_tf.assign(i)
        v_ours.assign(i)
        want, got = _outcome(theirs, X), _outcome(ours, X)
        if isinstance(want, str):
            assert got == want, f"v={i}: TF's XLA fails with {want}, we give {got}"
        else:
            assert not isinstance(got, str), f"v={i}: we fail with {got}"
            for g, w in zip(got, want):
                assert g.shape == w.shape, f"v={i}: shape {g.shape} != TF's XLA {w.shape}"
                np.testing.assert_array_equal(g, w, err_msg=f"v={i}")
        assert v_ours.numpy() == v_tf.numpy()
