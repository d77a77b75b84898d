"""Call arguments bound as tf.function binds them (issue 19): a tf.Variable passed as an argument, and with an
input_signature numpy arrays of another dtype, Python lists and numbers cast to the signature; what TF rejects
is rejected with TF's exception and text. Every case runs under tf.function and ours and must agree."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc

AUTO = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"
SIG = [tf.TensorSpec([2], tf.float32)]


def _outcome(make, fn, args, kwargs=None, **options):
    try:
        out = make(fn, **options)(*args, **(kwargs or {}))
    except Exception as e:  # the exception is the outcome compared
        return type(e), str(e)
    return [(t.dtype, t.numpy().tolist()) for t in tf.nest.flatten(out)]


def _ours(**flags):
    return lambda fn, **o: txc.function(fn, **o, **flags)


@pytest.mark.parametrize("mode", ["jit", "auto"])
def test_variable_argument_read_and_updated(mode):
    def step(v, w, y, k=2):
        v.assign_add(y * k)
        w.assign_add(1)
        return v.read_value() * 2.0, w + 0

    options = {"jit_compile": True} if mode == "jit" else {}
    ours = _ours(**({} if mode == "jit" else {"flags": AUTO}))
    results = []
    for make in (tf.function, ours):
        v, w = tf.Variable([1.0, 2.0]), tf.Variable(3, dtype=tf.int64)
        f = make(step, **options)
        first = _outcome(lambda fn, **_: fn, f, (v, w, tf.constant([1.0, 1.0])))
        second = _outcome(lambda fn, **_: fn, f, (v, w, np.array([1.0, 1.0], np.float32)), {"k": 3})
        results.append((first, second, v.numpy().tolist(), int(w.numpy())))
    assert results[0] == results[1]
    assert results[1][2] == [6.0, 7.0]


@pytest.mark.parametrize("value", [np.array([1.0, 2.0]), [1.0, 2.0], [1, 2], (3.5, -1.0), np.array([1, 2], np.int64)],
                         ids=["numpy_f64", "list", "int_list", "tuple", "numpy_i64"])
def test_input_signature_casts_like_tf(value):
    f = lambda x: x * 2.0  # noqa: E731
    want = _outcome(tf.function, f, (value,), jit_compile=True, input_signature=SIG)
    assert want[0][0] == tf.float32  # TF converts them
    assert _outcome(_ours(), f, (value,), jit_compile=True, input_signature=SIG) == want
    assert _outcome(_ours(flags=AUTO), f, (value,), input_signature=SIG) == want


@pytest.mark.parametrize("args", [([1.0, 2.0, 3.0],), (tf.constant([1, 2]),), (tf.constant([1.0, 2.0], tf.float64),),
                                  ("ab",), ([1.0, 2.0], [1.0])],
                         ids=["shape", "int32_tensor", "f64_tensor", "string", "too_many"])
def test_input_signature_rejects_like_tf(args):
    f = lambda x: x * 2.0  # noqa: E731
    want = _outcome(tf.function, f, args, jit_compile=True, input_signature=SIG)
    assert want[0] is TypeError and "Binding inputs to tf.function failed" in want[1]
    assert _outcome(_ours(), f, args, jit_compile=True, input_signature=SIG) == want


def test_variable_with_input_signature_and_keywords_and_defaults():
    def f(v, y, scale=3.0, *, shift=None):
        return v + y * scale + (0.0 if shift is None else shift)

    sig = [tf.TensorSpec([2], tf.float32), tf.TensorSpec([2], tf.float32)]
    v = tf.Variable([1.0, 2.0])
    for kwargs in ({}, {"scale": 2.0}, {"shift": 1.0}):
        want = _outcome(tf.function, f, (v, [1.0, 1.0]), kwargs, jit_compile=True)
        assert _outcome(_ours(), f, (v, [1.0, 1.0]), kwargs, jit_compile=True) == want
    want = _outcome(tf.function, lambda v, y: v + y, (v, np.ones(2)), jit_compile=True, input_signature=sig)
    assert want[0] == (tf.float32, [2.0, 3.0])
    assert _outcome(_ours(), lambda v, y: v + y, (v, np.ones(2)), jit_compile=True, input_signature=sig) == want
