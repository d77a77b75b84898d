"""ResourceApplyFtrl/FtrlV2 (with and without multiply_linear_by_lr), ResourceApplyAdagradDA and
ResourceApplyProximalAdagrad (l1 > 0 and l1 = 0) against TF's own XLA: two steps on small variables,
the variables read back after each step."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import values
from tests.tf2hlo.tf2hlo_tfxla import compare, lower_and_run, tf_xla


def _vars(dtype, n: int):
    inits = [values("f32", (2, 3), "pos", seed=k) for k in range(n)]
    return [tf.Variable(a.astype(dtype.as_numpy_dtype)) for a in inits], inits


def _step_program(dtype, n_vars: int, apply):
    vs, inits = _vars(dtype, n_vars)

    def fn(g):
        out = []
        for k in range(2):
            apply(vs, g * float(k + 1) - 0.3)
            out += [v.read_value() for v in vs]
        return out
    return vs, inits, fn


def _c(x, dtype):
    return tf.constant(x, dtype)


_OPS = {
    "Ftrl": (3, lambda vs, g, d: tf.raw_ops.ResourceApplyFtrl(
        var=vs[0].handle, accum=vs[1].handle, linear=vs[2].handle, grad=g, lr=_c(0.1, d), l1=_c(0.05, d),
        l2=_c(0.2, d), lr_power=_c(-0.5, d))),
    "Ftrl-linear-by-lr": (3, lambda vs, g, d: tf.raw_ops.ResourceApplyFtrl(
        var=vs[0].handle, accum=vs[1].handle, linear=vs[2].handle, grad=g, lr=_c(0.1, d), l1=_c(0.05, d),
        l2=_c(0.2, d), lr_power=_c(-0.5, d), multiply_linear_by_lr=True)),
    "FtrlV2": (3, lambda vs, g, d: tf.raw_ops.ResourceApplyFtrlV2(
        var=vs[0].handle, accum=vs[1].handle, linear=vs[2].handle, grad=g, lr=_c(0.1, d), l1=_c(0.0, d),
        l2=_c(0.2, d), l2_shrinkage=_c(0.3, d), lr_power=_c(-0.7, d))),
    "AdagradDA": (3, lambda vs, g, d: tf.raw_ops.ResourceApplyAdagradDA(
        var=vs[0].handle, gradient_accumulator=vs[1].handle, gradient_squared_accumulator=vs[2].handle, grad=g,
        lr=_c(0.1, d), l1=_c(0.05, d), l2=_c(0.2, d), global_step=tf.constant(3, tf.int64))),
    "AdagradDA-l1-0": (3, lambda vs, g, d: tf.raw_ops.ResourceApplyAdagradDA(
        var=vs[0].handle, gradient_accumulator=vs[1].handle, gradient_squared_accumulator=vs[2].handle, grad=g,
        lr=_c(0.1, d), l1=_c(0.0, d), l2=_c(0.2, d), global_step=tf.constant(3, tf.int64))),
    "ProximalAdagrad": (2, lambda vs, g, d: tf.raw_ops.ResourceApplyProximalAdagrad(
        var=vs[0].handle, accum=vs[1].handle, lr=_c(0.1, d), l1=_c(0.3, d), l2=_c(0.2, d), grad=g)),
    "ProximalAdagrad-l1-0": (2, lambda vs, g, d: tf.raw_ops.ResourceApplyProximalAdagrad(
        var=vs[0].handle, accum=vs[1].handle, lr=_c(0.1, d), l1=_c(0.0, d), l2=_c(0.2, d), grad=g)),
}


@pytest.mark.parametrize("op", list(_OPS))
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_optimizer_equals_tf_xla(op, dtype):
    n_vars, apply = _OPS[op]
    vs, inits, fn = _step_program(dtype, n_vars, lambda vs, g: apply(vs, g, dtype))
    g = values("f32", (2, 3), seed=9).astype(dtype.as_numpy_dtype)
    want = tf_xla(fn, [g])
    for v, a in zip(vs, inits):
        v.assign(a.astype(dtype.as_numpy_dtype))
    got = lower_and_run(fn, [g])
    compare(got[:len(want)], want, rtol=1e-5 if dtype == tf.float32 else 1e-12)


@pytest.mark.parametrize("splits, paddings", [([2, 3], [0, 0]), ([1, 2], [0, 1]), ([3, 1], [1, 2])])
def test_variable_split_and_concat_nd_equal_tf_xla(splits, paddings):
    init = values("f32", (5, 5)) if paddings != [0, 0] else values("f32", (4, 6))
    v = tf.Variable(init)
    n = int(np.prod(splits))

    def fn(scale):
        parts = tf.raw_ops.ReadVariableXlaSplitND(resource=v.handle, T=tf.float32, N=n, num_splits=splits,
                                                  paddings=paddings)
        tf.raw_ops.AssignVariableXlaConcatND(resource=v.handle, inputs=[p * scale for p in parts],
                                             num_concats=splits, paddings=paddings)
        return list(parts) + [v.read_value()]
    scale = np.float32(3.0)
    want = tf_xla(fn, [scale])
    v.assign(init)
    got = lower_and_run(fn, [scale])
    compare(got[:len(want)], want)


def test_aot_only_variable_is_refused_as_tf_xla_refuses_it():
    """tfcompile's in-graph variable: a JIT compilation declares no variables, so TF's XLA and ours both
    refuse it ("Variable: <name> not configured")."""
    from tensorflow.python.framework import op_def_library

    from tfxla_cluster.errors import InvalidArgumentError
    from tfxla_cluster.tf2hlo import lower_function

    def fn(x):
        _, _, op, _ = op_def_library._apply_op_helper("_XlaAotOnlyVarHandleOp", name="aot_var", dtype=tf.float32,
                                                      container="", shared_name="aot_var", debug_name="",
                                                      shape=[2, 3])
        tf.raw_ops.AssignVariableOp(resource=op.outputs[0], value=x * 2.0)
        return tf.raw_ops.ReadVariableOp(resource=op.outputs[0], dtype=tf.float32) + 1.0
    x = values("f32", (2, 3))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Variable: aot_var not configured"):
        tf_xla(fn, [x])
    with pytest.raises(InvalidArgumentError, match="Variable: aot_var not configured"):
        lower_function(tf.function(fn, autograph=False).get_concrete_function(tf.TensorSpec([2, 3])))
