"""Functional control flow (If/StatelessIf, While/StatelessWhile, Case/StatelessCase) lowered to HLO
conditional/while with computations built from the branch/body functions, against TF eager.
Default float tolerances (the same ops run in both)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import Case, run_batch, values


def _cond(x, y):
    return tf.cond(tf.reduce_sum(x) > 0, lambda: x * 2.0 + y, lambda: x - y)


def _cond_multi(x, p):
    return tf.cond(p, lambda: (x + 1.0, tf.shape(x)[0] * 2), lambda: (x * x, tf.constant(7)))


def _while(x):
    i = tf.constant(0)
    _, out = tf.while_loop(lambda i, v: i < 5, lambda i, v: (i + 1, tf.tanh(v) + 0.1), (i, x))
    return out


def _while_invariant_shape(x):
    # The reshape target is a loop-invariant constant: it stays a compile-time constant in the body.
    s = tf.constant([2, 3])
    _, _, out = tf.while_loop(lambda i, s, v: i < 3,
                              lambda i, s, v: (i + 1, s, tf.reshape(tf.reshape(v, [-1]) * 2.0, s)), (0, s, x),
                              shape_invariants=(tf.TensorShape([]), tf.TensorShape([2]), tf.TensorShape(None)))
    return out


def _while_count(n):
    return tf.while_loop(lambda i, acc: i < n, lambda i, acc: (i + 1, acc + i * i), (0, 0))[1]


def _case(i, x):
    return tf.switch_case(i, [lambda: x + 1.0, lambda: x * 3.0, lambda: -x])


def _nested(x):
    def body(i, v):
        return i + 1, tf.cond(i % 2 == 0, lambda: v * 2.0, lambda: v - 1.0)
    return tf.while_loop(lambda i, v: i < 4, body, (0, x))[1]


def batches():
    x, y = values("f32", (2, 3)), values("f32", (2, 3), seed=1)
    return [
        Case("If true", _cond, [np.abs(x), y]),
        Case("If false", _cond, [-np.abs(x), y]),
        Case("If multi-output with constants", _cond_multi, [x, np.array(False)]),
        Case("If multi-output true", _cond_multi, [x, np.array(True)]),
        Case("While", _while, [x]),
        Case("While invariant constant", _while_invariant_shape, [x]),
        Case("While int count", _while_count, [np.array(6, np.int32)]),
        Case("Case 0", _case, [np.array(0, np.int32), x]),
        Case("Case 2", _case, [np.array(2, np.int32), x]),
        Case("Case out of range", _case, [np.array(7, np.int32), x]),
        Case("While with nested If", _nested, [x]),
    ]


def test_control_flow():
    result = run_batch(batches())
    text = result.text
    assert " conditional(" in text and " while(" in text


def test_while_with_variable():
    from tfxla_cluster.tf2hlo import lower_function

    v = tf.Variable(np.ones(3, np.float32))

    @tf.function(autograph=False)
    def f(x):
        def body(i):
            v.assign_add(x)
            return i + 1
        tf.while_loop(lambda i: i < 3, body, [0])
        return v.read_value()

    x = values("f32", (3,))
    lc = lower_function(f.get_concrete_function(tf.TensorSpec([3])), x)
    got = lc.run(x, np.ones(3, np.float32))
    np.testing.assert_allclose(got[0], 1 + 3 * x, rtol=1e-6)
    assert lc.resource_updates(), "the variable is written"
    np.testing.assert_allclose(got[lc.resource_updates()[1]], 1 + 3 * x, rtol=1e-6)


def test_branch_shape_mismatch_is_an_error():
    from tfxla_cluster.errors import InvalidArgumentError
    from tfxla_cluster.tf2hlo import lower_function

    f = tf.function(lambda x, p: tf.cond(p, lambda: x, lambda: tf.concat([x, x], 0)), autograph=False)
    c = f.get_concrete_function(tf.TensorSpec([None]), tf.TensorSpec([], tf.bool))
    with pytest.raises(InvalidArgumentError, match="branches return different shapes"):
        lower_function(c, np.zeros(2, np.float32), np.array(True))


def _indexed_in_loop(x):
    """``x[i]``, ``x[i - 1:i + 1]`` with the loop counter ``i`` (run-time indices: tf2xla's dynamic slices)."""
    def body(i, a, c):
        return (i + 1, a + x[i] * tf.cast(i, tf.float32) + x[:, i - 1, 1][i] + x[..., i % 2][i - 4][:, tf.newaxis],
                tf.concat([c[1:], x[tf.newaxis, i, 2]], 0))
    def ranges(i, s):   # run-time begin and end, compile-time length (tf2xla's value inference)
        return i + 1, s + x[i - 1:i + 1, i - 1:1 + i, :][tf.newaxis, ..., 1]
    return (tf.while_loop(lambda i, a, c: i < 4, body, (0, tf.zeros([3, 2]), tf.zeros([2, 2]))),
            tf.while_loop(lambda i, s: i < 3, ranges, (1, tf.zeros([1, 2, 2]))))


def test_run_time_index_in_a_loop_equals_tf_xla():
    from tfxla_cluster.tf2hlo import lower_function

    x = np.arange(24, dtype=np.float32).reshape(4, 3, 2)
    want = tf.function(_indexed_in_loop, jit_compile=True)(x)
    concrete = tf.function(_indexed_in_loop).get_concrete_function(tf.TensorSpec(x.shape, tf.float32))
    got = lower_function(concrete, x).run(x)
    want = tf.nest.flatten(want)
    assert len(got) == len(want) == 5
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.numpy())


_DENORMAL = np.float32(2.0 ** -140)


def _constant_subgraphs_in_bodies(x):
    """Constant-only subgraphs inside a cond's branches and a while body: XlaCompiler compiles those bodies as
    functions with TF's constant folding, so TF's kernels (under FTZ) compute them: a Relu or Sign of a
    constant denormal is ±0 there, where XLA's code would keep the denormal or its sign."""
    d = tf.constant([_DENORMAL, -_DENORMAL])
    branches = tf.cond(x[0] > 0, lambda: tf.nn.relu(d) + tf.sign(d) * 0.0, lambda: x)
    loop = tf.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, a + tf.nn.relu(-d)), (0, tf.zeros([2])))[1]
    return branches, tf.sign(tf.cond(x[0] > 0, lambda: tf.sign(d), lambda: x)), loop


def test_constant_subgraphs_in_bodies_are_folded_by_tf_kernels():
    """Captured constants enter the branches as arguments: tf2xla's If makes compile-time-constant arguments
    Const nodes, so they fold too."""
    import tfxla_cluster as txc

    x = np.array([1.0, 2.0], np.float32)
    want = tf.function(_constant_subgraphs_in_bodies, jit_compile=True)(x)
    got = txc.function(_constant_subgraphs_in_bodies, jit_compile=True)(x)
    for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
        np.testing.assert_array_equal(np.asarray(g).view(np.uint32), w.numpy().view(np.uint32))


def _sign_of_constant_denormals_in_branches(i, p):
    """``sign`` of constant denormals captured by Case and If branches, in f32 and f64, with a run-time and a
    constant branch index (the fuzzer's seed 86000411 was the constant-index Case in f64)."""
    d32 = tf.constant([_DENORMAL, -_DENORMAL, 3.0])
    d64 = tf.constant(np.array([5.562684646268003e-309, -5.562684646268003e-309, 91.0]))
    k = tf.math.floormod(tf.reduce_sum(tf.cast(tf.cast(d64, tf.bool), tf.int32)), 2)   # constant: 3 % 2 = 1
    return (tf.switch_case(i, [lambda: tf.sign(d32), lambda: tf.square(d32)]),
            tf.switch_case(k, [lambda: tf.square(d64), lambda: tf.sign(d64)]),
            tf.switch_case(i, [lambda: tf.sign(d64) + 1.0, lambda: d64]),
            tf.cond(p, lambda: tf.sign(d64), lambda: d64))


def test_case_branches_see_constant_arguments_as_xla_constants():
    """tf2xla's Case passes compile-time-constant arguments as constant expressions, not Const nodes: TF's graph
    folding leaves ``sign`` of one in the branch and XLA folds it under DAZ (0 for a denormal), where an If's
    branch folds it with TF's CPU kernel (the denormal itself). Bits compared with TF's XLA."""
    import tfxla_cluster as txc

    args = (tf.constant(0), tf.constant(True))
    want = tf.function(_sign_of_constant_denormals_in_branches, jit_compile=True)(*args)
    got = txc.function(_sign_of_constant_denormals_in_branches, jit_compile=True)(*args)
    for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
        w = w.numpy()
        np.testing.assert_array_equal(np.asarray(g).view(w.dtype.str.replace("f", "u")), w.view(w.dtype.str.replace("f", "u")))
