"""Resource variables: reads, assigns, gathers and the SGD/Momentum/Adam optimizer ops, lowered from a
tf.function that captures variables. Resources become extra parameters (in _Arg order: captures come
after the explicit arguments) and written resources extra tuple outputs; both are checked against the
same function run by TF (default f32 tolerance; Adam's sqrt/divide chain 1e-6 relative).
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import HAVE_JAX, values

from tfxla_cluster.hlo import parse_module
from tfxla_cluster.tf2hlo import lower_function


def _check(build, *args, rtol=2e-6, atol=1e-6):
    """``build(vars) -> fn``; ``fn(*args)`` is lowered and compared with TF on fresh variables."""
    inits = {"w": values("f32", (3, 2)), "m": values("f32", (3, 2), seed=1), "v": values("f32", (3, 2), "pos", seed=2),
             "step": np.array(3, np.int64)}
    ours = {k: tf.Variable(v, name=k) for k, v in inits.items()}
    theirs = {k: tf.Variable(v, name=k) for k, v in inits.items()}
    fn = tf.function(build(ours), autograph=False)
    concrete = fn.get_concrete_function(*[tf.TensorSpec(a.shape, tf.as_dtype(a.dtype)) for a in args])
    lc = lower_function(concrete, *args)
    text = lc.module.to_string()
    assert parse_module(text).to_string() == text
    by_handle = {id(v.handle): k for k, v in ours.items()}
    graph_vars = {id(v.handle): v for v in concrete.graph.variables}
    feed, resource_names = [], {}
    for inp in lc.inputs:
        if inp.index < len(args):
            feed.append(args[inp.index])
            continue
        handle = concrete.captured_inputs[inp.index - len(args)]
        name = by_handle.get(id(handle))
        if name is None:  # e.g. an optimizer's slot or iteration variable: its current value
            feed.append(graph_vars[id(handle)].numpy())
        else:
            feed.append(inits[name])
            resource_names[inp.index] = name
    got = lc.run(*feed)
    want = tf.function(build(theirs), autograph=False)(*args)
    want = [w.numpy() for w in (want if isinstance(want, (list, tuple)) else [want])]
    n_ret = sum(1 for o in lc.outputs if o.kind == "retval")
    for i in range(n_ret):
        np.testing.assert_allclose(got[i], want[i], rtol=rtol, atol=atol)
    updated = lc.resource_updates()
    for index, name in resource_names.items():
        expect = theirs[name].numpy()
        if index in updated:
            np.testing.assert_allclose(got[updated[index]], expect, rtol=rtol, atol=atol, err_msg=name)
        else:
            np.testing.assert_array_equal(inits[name], expect, err_msg=f"{name} changed in TF but not in ours")
    if HAVE_JAX:
        from tests.tf2hlo.tf2hlo_xla import xla_run

        params = [np.asarray(feed[i.index]).astype(i.element_type.dtype) for i in lc.parameters]
        for a, b in zip(xla_run(text, *params), got):
            np.testing.assert_allclose(a, b, rtol=max(rtol, 1e-6), atol=atol)
    return lc


def test_read_assign_add_and_outputs_order():
    def build(v):
        def f(x):
            y = tf.matmul(x, v["w"])
            v["w"].assign_add(tf.ones([3, 2]))
            v["step"].assign_add(1)
            v["m"].assign(v["w"] * 2.0)
            return y, v["w"].read_value()
        return f
    lc = _check(build, values("f32", (4, 3)))
    kinds = [i.kind for i in lc.inputs]
    assert kinds[0] == "parameter" and set(kinds[1:]) == {"resource"}
    assert [o.kind for o in lc.outputs][:2] == ["retval", "retval"]
    assert all(o.kind == "resource" for o in lc.outputs[2:]) and len(lc.outputs) == 5
    assert [o.resource_input for o in lc.outputs[2:]] == sorted(o.resource_input for o in lc.outputs[2:])


def test_assign_sub_and_gather():
    def build(v):
        def f(i):
            v["v"].assign_sub(tf.ones([3, 2]) * 0.5)
            return tf.raw_ops.ResourceGather(resource=v["v"].handle, indices=i, dtype=tf.float32)
        return f
    _check(build, np.array([2, 0, 2], np.int32))


@pytest.mark.parametrize("nesterov", [False, True])
def test_optimizers(nesterov):
    def build(v):
        def f(g):
            tf.raw_ops.ResourceApplyGradientDescent(var=v["w"].handle, alpha=0.1, delta=g)
            tf.raw_ops.ResourceApplyMomentum(var=v["m"].handle, accum=v["v"].handle, lr=0.1, grad=g,
                                             momentum=0.9, use_nesterov=nesterov)
            return tf.constant(0.0)
        return f
    _check(build, values("f32", (3, 2), seed=9))

    def build_keras(v):
        def f(g):
            tf.raw_ops.ResourceApplyKerasMomentum(var=v["w"].handle, accum=v["m"].handle, lr=0.1, grad=g,
                                                  momentum=0.9, use_nesterov=nesterov)
            return tf.constant(0.0)
        return f
    _check(build_keras, values("f32", (3, 2), seed=9))

    def build_adam(v):
        def f(g):
            tf.raw_ops.ResourceApplyAdam(var=v["w"].handle, m=v["m"].handle, v=v["v"].handle, beta1_power=0.9,
                                         beta2_power=0.999, lr=0.01, beta1=0.9, beta2=0.999, epsilon=1e-7, grad=g,
                                         use_nesterov=nesterov)
            return tf.constant(0.0)
        return f
    _check(build_adam, values("f32", (3, 2), seed=9), rtol=1e-6)


def test_keras_sgd_step():
    """A real Keras optimizer step: what TF emits for `optimizer.apply_gradients`."""
    def build(v):
        opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)
        opt.build([v["w"]])

        def f(g):
            opt.apply_gradients([(g, v["w"])])
            return v["w"].read_value()
        return f
    _check(build, values("f32", (3, 2), seed=9))


@pytest.mark.parametrize("op", ["ResourceScatterUpdate", "ResourceScatterAdd", "ResourceScatterSub",
                                "ResourceScatterMul", "ResourceScatterDiv", "ResourceScatterMin", "ResourceScatterMax"])
def test_resource_scatter(op):
    def build(v):
        def f(u):
            getattr(tf.raw_ops, op)(resource=v["v"].handle, indices=tf.constant([2, 0]), updates=u)
            return v["v"].read_value()
        return f
    _check(build, values("f32", (2, 2), "pos", seed=7))


def test_scatter_nd_and_strided_slice_assign():
    def build(v):
        def f(u):
            tf.raw_ops.ResourceScatterNdAdd(ref=v["w"].handle, indices=[[1, 0], [2, 1]], updates=u)
            tf.raw_ops.ResourceScatterNdUpdate(ref=v["m"].handle, indices=[[0]], updates=[[5.0, 6.0]])
            tf.raw_ops.ResourceStridedSliceAssign(ref=v["v"].handle, begin=[2, 0], end=[-1, 2], strides=[-2, 1],
                                                  value=tf.ones([1, 2]) * 7.0)
            return tf.tensor_scatter_nd_update(v["w"].read_value(), [[0, 0]], [1.0]), \
                tf.raw_ops.TensorStridedSliceUpdate(input=v["w"].read_value(), begin=[0, 1], end=[3, 2],
                                                    strides=[2, 1], value=[[9.0], [8.0]])
        return f
    _check(build, values("f32", (2,), seed=7))


OPTIMIZERS = {
    "Adagrad": lambda v, g: tf.raw_ops.ResourceApplyAdagrad(var=v["w"].handle, accum=v["v"].handle, lr=0.1, grad=g),
    "AdagradV2": lambda v, g: tf.raw_ops.ResourceApplyAdagradV2(var=v["w"].handle, accum=v["v"].handle, lr=0.1,
                                                                epsilon=1e-3, grad=g),
    "RMSProp": lambda v, g: tf.raw_ops.ResourceApplyRMSProp(var=v["w"].handle, ms=v["v"].handle, mom=v["m"].handle,
                                                            lr=0.01, rho=0.9, momentum=0.5, epsilon=1e-6, grad=g),
    "Adadelta": lambda v, g: tf.raw_ops.ResourceApplyAdadelta(var=v["w"].handle, accum=v["v"].handle,
                                                              accum_update=v["m"].handle, lr=1.0, rho=0.95,
                                                              epsilon=1e-6, grad=g),
    "AdaMax": lambda v, g: tf.raw_ops.ResourceApplyAdaMax(var=v["w"].handle, m=v["m"].handle, v=v["v"].handle,
                                                          beta1_power=0.9, lr=0.01, beta1=0.9, beta2=0.999,
                                                          epsilon=1e-7, grad=g),
    "ProximalGradientDescent": lambda v, g: tf.raw_ops.ResourceApplyProximalGradientDescent(
        var=v["w"].handle, alpha=0.1, l1=0.05, l2=0.01, delta=g),
    "AddSign": lambda v, g: tf.raw_ops.ResourceApplyAddSign(var=v["w"].handle, m=v["m"].handle, lr=0.1, alpha=1.0,
                                                            sign_decay=0.9, beta=0.9, grad=g),
    "PowerSign": lambda v, g: tf.raw_ops.ResourceApplyPowerSign(var=v["w"].handle, m=v["m"].handle, lr=0.1,
                                                                logbase=0.5, sign_decay=0.9, beta=0.9, grad=g),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_more_optimizers(name):
    def build(v):
        def f(g):
            OPTIMIZERS[name](v, g)
            return tf.constant(0.0)
        return f
    _check(build, values("f32", (3, 2), seed=9), rtol=1e-5, atol=1e-6)
