"""Resource variables (tf2xla's variable_ops.cc and training_ops.cc).

Stage: lowering. A resource input is a :class:`~tfxla_cluster.tf2hlo.context.Resource` whose value
starts as its parameter. Reads return the current value; writes replace it and mark the resource
written, and :func:`~tfxla_cluster.tf2hlo.lower.lower_cluster` appends the final value of every
written resource to the root tuple (``[retvals…, updated resources…]`` in input order). Nodes are lowered
in TF's topological order, which follows control edges, so reads and writes happen in graph order.

The optimizer ops follow training_ops.cc (scalars broadcast to the variable's shape):
GradientDescent ``var -= alpha·delta``; Momentum ``accum = accum·momentum + grad``, ``var -= lr·accum``
(Nesterov: ``var -= lr·grad + lr·momentum·accum``); KerasMomentum ``accum = accum·momentum - lr·grad``,
``var += accum`` (Nesterov: ``var += accum·momentum - lr·grad``); Adam with
``alpha = lr·sqrt(1-β2^t)/(1-β1^t)``, ``m += (g-m)(1-β1)``, ``v += (g²-v)(1-β2)``,
``var -= alpha·m/(sqrt(v)+ε)`` (Nesterov: ``alpha·(m·β1 + (1-β1)·g)/(sqrt(v)+ε)``).
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.gather_scatter import gather
from tfxla_cluster.tf2hlo.registry import lowers


def _typed_resource(ctx, index: int, attr: str = "dtype"):
    r = ctx.resource(index)
    want = ctx.attr_type(attr)
    if r.element_type is not want:
        raise InvalidArgumentError(f"Trying to access resource of type {r.element_type.value} as "
                                   f"{want.value}")
    return r


@lowers("ReadVariableOp")
def _read(ctx, node):
    return [_typed_resource(ctx, 0).read(node.name)]


@lowers("AssignVariableOp")
def _assign(ctx, node):
    r = ctx.resource(0)
    value = ctx.input(1)
    if r.value is not None and value.shape.dimensions != r.dims:
        raise InvalidArgumentError(f"Trying to assign to variable with tensor with wrong shape. Expected "
                                   f"[{','.join(map(str, r.dims))}] got [{','.join(map(str, value.shape.dimensions))}]")
    r.assign(value)
    return []


def _assign_op(combine):
    def lower(ctx, node):
        r = _typed_resource(ctx, 0)
        delta = ctx.input(1)
        if delta.shape.dimensions != r.dims:
            raise InvalidArgumentError(f"Shapes of variable and value must match: [{','.join(map(str, r.dims))}] "
                                       f"vs. [{','.join(map(str, delta.shape.dimensions))}]")
        r.assign(combine(ctx.b, r.read(node.name), delta))
        return []
    return lower


lowers("AssignAddVariableOp")(_assign_op(lambda b, v, d: b.add(v, d)))
lowers("AssignSubVariableOp")(_assign_op(lambda b, v, d: b.subtract(v, d)))


@lowers("ResourceGather")
def _resource_gather(ctx, node):
    r = _typed_resource(ctx, 0)
    indices = ctx.input(1)
    return [gather(ctx.b, r.read(node.name), indices, int(ctx.attr("batch_dims", 0)), int(ctx.attr("batch_dims", 0)))]


@lowers("VarIsInitializedOp")
def _is_initialized(ctx, node):
    return [np.asarray(ctx.resource(0).value is not None)]


@lowers("VariableShape")
def _variable_shape(ctx, node):
    return [np.asarray(ctx.resource(0).dims).astype(ctx.output_type(0).dtype)]


def _vars(ctx, node, n: int):
    """The first ``n`` inputs as (resource, current value) pairs of the op's type ``T``."""
    out = []
    for i in range(n):
        r = _typed_resource(ctx, i, "T")
        out.append((r, r.read(node.name)))
    shape = out[0][1].shape.dimensions
    for r, v in out[1:]:
        if v.shape.dimensions != shape:
            raise InvalidArgumentError(f"var and accum do not have the same shape: [{','.join(map(str, shape))}] "
                                       f"[{','.join(map(str, v.shape.dimensions))}]")
    return out


def _scalar(ctx, index: int, name: str):
    v = ctx.input(index)
    if v.shape.rank:
        raise InvalidArgumentError(f"{name} is not a scalar: [{','.join(map(str, v.shape.dimensions))}]")
    return v


@lowers("ResourceApplyGradientDescent")
def _apply_gd(ctx, node):
    ((var_r, var),) = _vars(ctx, node, 1)
    b = ctx.b
    alpha, delta = _scalar(ctx, 1, "alpha"), ctx.input(2)
    var_r.assign(b.subtract(var, xl.mul(b, delta, alpha)))
    return []


@lowers("ResourceApplyMomentum")
def _apply_momentum(ctx, node):
    (var_r, var), (acc_r, accum) = _vars(ctx, node, 2)
    b = ctx.b
    lr, grad, momentum = _scalar(ctx, 2, "lr"), ctx.input(3), _scalar(ctx, 4, "momentum")
    accum = b.add(xl.mul(b, accum, momentum), grad)
    if ctx.attr("use_nesterov", False):
        var = b.subtract(var, b.add(xl.mul(b, grad, lr), xl.mul(b, xl.mul(b, accum, momentum), lr)))
    else:
        var = b.subtract(var, xl.mul(b, accum, lr))
    var_r.assign(var)
    acc_r.assign(accum)
    return []


@lowers("ResourceApplyKerasMomentum")
def _apply_keras_momentum(ctx, node):
    (var_r, var), (acc_r, accum) = _vars(ctx, node, 2)
    b = ctx.b
    lr, grad, momentum = _scalar(ctx, 2, "lr"), ctx.input(3), _scalar(ctx, 4, "momentum")
    accum = b.subtract(xl.mul(b, accum, momentum), xl.mul(b, grad, lr))
    if ctx.attr("use_nesterov", False):
        var = b.add(var, b.subtract(xl.mul(b, accum, momentum), xl.mul(b, grad, lr)))
    else:
        var = b.add(var, accum)
    var_r.assign(var)
    acc_r.assign(accum)
    return []


@lowers("ResourceApplyAdam")
def _apply_adam(ctx, node):
    (var_r, var), (m_r, m), (v_r, v) = _vars(ctx, node, 3)
    b = ctx.b
    beta1_power, beta2_power, lr, beta1, beta2, eps = (
        _scalar(ctx, i, n) for i, n in zip(range(3, 9), ("beta1_power", "beta2_power", "lr", "beta1", "beta2",
                                                          "epsilon")))
    grad = ctx.input(9)
    alpha = b.divide(b.multiply(lr, b.sqrt(xl.sub(b, 1, beta2_power))), xl.sub(b, 1, beta1_power))
    one_minus_b1, one_minus_b2 = xl.sub(b, 1, beta1), xl.sub(b, 1, beta2)
    m = b.add(m, xl.mul(b, b.subtract(grad, m), one_minus_b1))
    v = b.add(v, xl.mul(b, b.subtract(b.multiply(grad, grad), v), one_minus_b2))
    denom = xl.add(b, b.sqrt(v), eps)
    if ctx.attr("use_nesterov", False):
        step = b.add(xl.mul(b, m, beta1), xl.mul(b, grad, one_minus_b1))
        var = b.subtract(var, b.divide(xl.mul(b, step, alpha), denom))
    else:
        var = b.subtract(var, b.divide(xl.mul(b, m, alpha), denom))
    var_r.assign(var)
    m_r.assign(m)
    v_r.assign(v)
    return []
