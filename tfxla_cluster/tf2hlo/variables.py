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
from tfxla_cluster.hlo.attrs import ScatterDimensionNumbers
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.tf2hlo.gather_scatter import combiner, gather, scatter_nd
from tfxla_cluster.tf2hlo.registry import lowers
from tfxla_cluster.tf2hlo.slicing import slice_spec, strided_slice_update


def _typed_resource(ctx, index: int, attr: str = "dtype"):
    r = ctx.resource(index)
    want = ctx.attr_type(attr)
    if r.element_type is not want:
        raise InvalidArgumentError(f"Trying to access resource of type {r.element_type.value} as "
                                   f"{want.value}")
    return r


def _split(b, v):
    """A complex resource value as a ComplexValue (what complex lowerings take, as for parameters)."""
    from tfxla_cluster.tf2hlo.complex_ops import ComplexValue
    return ComplexValue(b.unary(O.REAL, v), b.unary(O.IMAG, v)) if v.shape.element_type.is_complex else v


def _value_input(ctx, index: int):
    """Input ``index`` as one HLO array (a ComplexValue joined back into a complex array)."""
    from tfxla_cluster.tf2hlo.complex_ops import complex_hlo
    return complex_hlo(ctx, index)


@lowers("ReadVariableOp")
def _read(ctx, node):
    return [_split(ctx.b, _typed_resource(ctx, 0).read(node.name))]


@lowers("AssignVariableOp")
def _assign(ctx, node):
    r = ctx.resource(0)
    value = _value_input(ctx, 1)
    if r.value is not None and value.shape.dimensions != r.dims:
        raise InvalidArgumentError(f"Trying to assign to variable with tensor with wrong shape. Expected "
                                   f"[{','.join(map(str, r.dims))}] got [{','.join(map(str, value.shape.dimensions))}]")
    r.assign(value)
    return []


def _assign_op(combine):
    def lower(ctx, node):
        r = _typed_resource(ctx, 0)
        delta = _value_input(ctx, 1)
        if delta.shape.dimensions != r.dims:
            raise InvalidArgumentError(f"Shapes of variable and value must match: [{','.join(map(str, r.dims))}] "
                                       f"vs. [{','.join(map(str, delta.shape.dimensions))}]")
        b, v = ctx.b, r.read(node.name)
        if v.shape.element_type.is_complex:  # part by part, as the complex lowerings compute
            re = combine(b, b.unary(O.REAL, v), b.unary(O.REAL, delta))
            im = combine(b, b.unary(O.IMAG, v), b.unary(O.IMAG, delta))
            r.assign(b.binary(O.COMPLEX, re, im))
        else:
            r.assign(combine(b, v, delta))
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


# ---------------------------------------------------------------- scatters into variables
_RESOURCE_SCATTER = {"ResourceScatterUpdate": None, "ResourceScatterAdd": O.ADD, "ResourceScatterSub": O.ADD,
                     "ResourceScatterMul": O.MULTIPLY, "ResourceScatterDiv": O.DIVIDE,
                     "ResourceScatterMin": O.MINIMUM, "ResourceScatterMax": O.MAXIMUM}


@lowers(*_RESOURCE_SCATTER)
def _resource_scatter(ctx, node):
    """Rows of the variable (dim 0) picked by ``indices`` combine with ``updates``."""
    r = _typed_resource(ctx, 0)
    b = ctx.b
    var, indices, updates = r.read(node.name), ctx.input(1), ctx.input(2)
    vd, idims = list(var.shape.dimensions), list(indices.shape.dimensions)
    want = idims + vd[1:]
    if updates.shape.rank == 0:
        updates = b.broadcast(updates, want, ())
    if list(updates.shape.dimensions) != want:
        raise InvalidArgumentError(f"updates must have shape {want}, got {list(updates.shape.dimensions)}")
    if node.op == "ResourceScatterSub":
        updates = b.negate(updates)
    dn = ScatterDimensionNumbers(tuple(range(len(idims), len(want))), (0,), (0,), len(idims))
    comb = combiner(b, _RESOURCE_SCATTER[node.op], var.shape.element_type, f"{node.name}-combiner")
    r.assign(b.scatter(var, indices, updates, comb, dn))
    return []


_RESOURCE_SCATTER_ND = {"ResourceScatterNdUpdate": None, "ResourceScatterNdAdd": O.ADD,
                        "ResourceScatterNdSub": O.ADD}


@lowers(*_RESOURCE_SCATTER_ND)
def _resource_scatter_nd(ctx, node):
    r = _typed_resource(ctx, 0, "T")
    b = ctx.b
    updates = ctx.input(2)
    if node.op == "ResourceScatterNdSub":
        updates = b.negate(updates)
    r.assign(scatter_nd(b, r.read(node.name), ctx.input(1), updates, _RESOURCE_SCATTER_ND[node.op],
                        f"{node.name}-combiner"))
    return []


@lowers("ResourceStridedSliceAssign")
def _resource_strided_slice_assign(ctx, node):
    r = _typed_resource(ctx, 0, "T")
    b = ctx.b
    var = r.read(node.name)
    spec = slice_spec(ctx, var.shape.dimensions, 1)
    r.assign(strided_slice_update(b, var, ctx.input(4), spec))
    return []


@lowers("TensorStridedSliceUpdate")
def _tensor_strided_slice_update(ctx, node):
    x = ctx.input(0)
    spec = slice_spec(ctx, x.shape.dimensions, 1)
    return [strided_slice_update(ctx.b, x, ctx.input(4), spec)]


# ---------------------------------------------------------------- more optimizers (training_ops.cc)
def _scalars(ctx, first: int, names: str):
    return [_scalar(ctx, first + i, n) for i, n in enumerate(names.split())]


@lowers("ResourceApplyAdagrad", "ResourceApplyAdagradV2")
def _apply_adagrad(ctx, node):
    (var_r, var), (acc_r, accum) = _vars(ctx, node, 2)
    b = ctx.b
    v2 = node.op.endswith("V2")
    lr = _scalar(ctx, 2, "lr")
    eps = _scalar(ctx, 3, "epsilon") if v2 else None
    grad = ctx.input(4 if v2 else 3)
    if ctx.attr("update_slots", True):
        accum = b.add(accum, b.multiply(grad, grad))
    denom = b.sqrt(accum) if eps is None else xl.add(b, b.sqrt(accum), eps)
    var_r.assign(b.subtract(var, b.divide(xl.mul(b, grad, lr), denom)))
    acc_r.assign(accum)
    return []


@lowers("ResourceApplyRMSProp")
def _apply_rms_prop(ctx, node):
    (var_r, var), (ms_r, ms), (mom_r, mom) = _vars(ctx, node, 3)
    b = ctx.b
    lr, rho, momentum, eps = _scalars(ctx, 3, "lr rho momentum epsilon")
    grad = ctx.input(7)
    ms = b.add(ms, xl.mul(b, b.subtract(b.multiply(grad, grad), ms), xl.sub(b, 1, rho)))
    mom = b.add(xl.mul(b, mom, momentum), b.divide(xl.mul(b, grad, lr), b.sqrt(xl.add(b, ms, eps))))
    var_r.assign(b.subtract(var, mom))
    ms_r.assign(ms)
    mom_r.assign(mom)
    return []


@lowers("ResourceApplyCenteredRMSProp")
def _apply_centered_rms_prop(ctx, node):
    (var_r, var), (mg_r, mg), (ms_r, ms), (mom_r, mom) = _vars(ctx, node, 4)
    b = ctx.b
    lr, rho, momentum, eps = _scalars(ctx, 4, "lr rho momentum epsilon")
    grad = ctx.input(8)
    one_minus_rho = xl.sub(b, 1, rho)
    mg = b.add(mg, xl.mul(b, b.subtract(grad, mg), one_minus_rho))
    ms = b.add(ms, xl.mul(b, b.subtract(b.multiply(grad, grad), ms), one_minus_rho))
    denom = xl.add(b, b.subtract(ms, b.multiply(mg, mg)), eps)
    mom = b.add(xl.mul(b, mom, momentum), b.divide(xl.mul(b, grad, lr), b.sqrt(denom)))
    var_r.assign(b.subtract(var, mom))
    mg_r.assign(mg)
    ms_r.assign(ms)
    mom_r.assign(mom)
    return []


@lowers("ResourceApplyAdadelta")
def _apply_adadelta(ctx, node):
    (var_r, var), (acc_r, accum), (upd_r, accum_update) = _vars(ctx, node, 3)
    b = ctx.b
    lr, rho, eps = _scalars(ctx, 3, "lr rho epsilon")
    grad = ctx.input(6)
    one_minus_rho = xl.sub(b, 1, rho)
    accum = b.add(xl.mul(b, accum, rho), xl.mul(b, b.multiply(grad, grad), one_minus_rho))
    update = b.multiply(b.multiply(b.sqrt(xl.add(b, accum_update, eps)), b.rsqrt(xl.add(b, accum, eps))), grad)
    accum_update = b.add(xl.mul(b, accum_update, rho), xl.mul(b, b.multiply(update, update), one_minus_rho))
    var_r.assign(b.subtract(var, xl.mul(b, update, lr)))
    acc_r.assign(accum)
    upd_r.assign(accum_update)
    return []


@lowers("ResourceApplyAdaMax")
def _apply_ada_max(ctx, node):
    (var_r, var), (m_r, m), (v_r, v) = _vars(ctx, node, 3)
    b = ctx.b
    beta1_power, lr, beta1, beta2, eps = _scalars(ctx, 3, "beta1_power lr beta1 beta2 epsilon")
    grad = ctx.input(8)
    m = b.add(xl.mul(b, m, beta1), xl.mul(b, grad, xl.sub(b, 1, beta1)))
    v = b.maximum(xl.mul(b, v, beta2), b.abs(grad))
    step = b.divide(lr, xl.sub(b, 1, beta1_power))
    var_r.assign(b.subtract(var, b.divide(xl.mul(b, m, step), xl.add(b, v, eps))))
    m_r.assign(m)
    v_r.assign(v)
    return []


@lowers("ResourceApplyProximalGradientDescent")
def _apply_proximal_gd(ctx, node):
    ((var_r, var),) = _vars(ctx, node, 1)
    b = ctx.b
    alpha, l1, l2 = _scalars(ctx, 1, "alpha l1 l2")
    delta = ctx.input(4)
    prox = b.subtract(var, xl.mul(b, delta, alpha))
    shrunk = b.multiply(b.sign(prox), xl.maximum(b, xl.sub(b, b.abs(prox), b.multiply(alpha, l1)), 0))
    denom = xl.add(b, b.multiply(alpha, l2), 1)
    value = b.select(b.broadcast(xl.gt(b, l1, 0), prox.shape.dimensions, ()), shrunk, prox)
    var_r.assign(xl.div(b, value, denom))
    return []


def _apply_sign(ctx, node, scale_fn):
    (var_r, var), (m_r, m) = _vars(ctx, node, 2)
    b = ctx.b
    lr, a, sign_decay, beta = _scalars(ctx, 2, "lr alpha sign_decay beta")
    grad = ctx.input(6)
    m = b.add(xl.mul(b, m, beta), xl.mul(b, grad, xl.sub(b, 1, beta)))
    sign_gm = b.multiply(b.sign(grad), b.sign(m))
    scale = scale_fn(b, a, xl.mul(b, sign_gm, sign_decay))
    var_r.assign(b.subtract(var, b.multiply(xl.mul(b, scale, lr), grad)))
    m_r.assign(m)
    return []


@lowers("ResourceApplyAddSign")
def _apply_add_sign(ctx, node):
    return _apply_sign(ctx, node, lambda b, alpha, s: xl.add(b, s, alpha))


@lowers("ResourceApplyPowerSign")
def _apply_power_sign(ctx, node):
    return _apply_sign(ctx, node, lambda b, logbase, s: b.exp(xl.mul(b, s, logbase)))


def _proximal_update(b, var, lr, l1, l2, grad):
    """tf2xla's ProximalGradientDescentUpdate: ``prox = var - lr·grad``, soft-thresholded by ``lr·l1``
    when ``l1 > 0``, divided by ``1 + lr·l2`` (``lr`` a scalar or of var's shape)."""
    dims = var.shape.dimensions
    lr_b = lr if lr.shape.dimensions == dims else b.broadcast(lr, dims, ())
    prox = b.subtract(var, b.multiply(grad, lr_b))
    denom = xl.add(b, b.multiply(lr_b, b.broadcast(l2, dims, ())), 1)
    threshold = b.multiply(lr_b, b.broadcast(l1, dims, ()))
    shrunk = b.multiply(b.sign(prox), xl.maximum(b, b.subtract(b.abs(prox), threshold), 0))
    pick = b.broadcast(xl.gt(b, l1, 0), dims, ())
    return b.select(pick, b.divide(shrunk, denom), b.divide(prox, denom))


@lowers("ResourceApplyProximalAdagrad")
def _apply_proximal_adagrad(ctx, node):
    (var_r, var), (acc_r, accum) = _vars(ctx, node, 2)
    b = ctx.b
    lr, l1, l2 = _scalars(ctx, 2, "lr l1 l2")
    grad = ctx.input(5)
    accum = b.add(accum, b.multiply(grad, grad))
    adagrad_lr = b.multiply(b.broadcast(lr, var.shape.dimensions, ()), b.rsqrt(accum))
    var_r.assign(_proximal_update(b, var, adagrad_lr, l1, l2, grad))
    acc_r.assign(accum)
    return []


@lowers("ResourceApplyAdagradDA")
def _apply_adagrad_da(ctx, node):
    """Dual averaging: ``accum += g``, ``sq += g²``; ``var = -lr·shrink(accum)/(step·lr·l2 + sqrt(sq))``
    where shrink soft-thresholds by ``step·l1`` when ``l1 > 0`` (step converted to T)."""
    (var_r, var), (acc_r, accum), (sq_r, sq) = _vars(ctx, node, 3)
    b = ctx.b
    grad = ctx.input(3)
    lr, l1, l2, step = _scalars(ctx, 4, "lr l1 l2 global_step")
    et = var.shape.element_type
    step = xl.convert(b, step, et)
    dims = var.shape.dimensions
    accum = b.add(accum, grad)
    sq = b.add(sq, b.multiply(grad, grad))
    bc = lambda s: b.broadcast(s, dims, ())  # noqa: E731
    denom = b.add(bc(b.multiply(b.multiply(step, lr), l2)), b.sqrt(sq))
    neg_lr = bc(b.negate(lr))
    le_zero = b.divide(b.multiply(neg_lr, accum), denom)
    shrunk = xl.maximum(b, b.subtract(b.abs(accum), bc(b.multiply(step, l1))), 0)
    gt_zero = b.divide(b.multiply(b.multiply(neg_lr, b.sign(accum)), shrunk), denom)
    var_r.assign(b.select(bc(xl.gt(b, l1, 0)), gt_zero, le_zero))
    acc_r.assign(accum)
    sq_r.assign(sq)
    return []


@lowers("ResourceApplyFtrl", "ResourceApplyFtrlV2")
def _apply_ftrl(ctx, node):
    """tf2xla's CompileFtrl: ``g' = g + 2·l2_shrinkage·var`` (V2); ``n' = n + g²``;
    ``linear += g' - (n'^-p - n^-p)/lr·var``; ``var = (clamp(linear, ±l1) - linear)/(n'^-p/lr + 2·l2)``.
    With ``multiply_linear_by_lr`` (TF's kernels' variant) linear is kept scaled by lr:
    ``linear += g'·lr - (n'^-p - n^-p)·var``, clipped to ±l1·lr, quadratic ``n'^-p + 2·l2·lr``."""
    (var_r, var), (acc_r, accum), (lin_r, linear) = _vars(ctx, node, 3)
    b = ctx.b
    v2 = node.op.endswith("V2")
    grad = ctx.input(3)
    if v2:
        lr, l1, l2, shrink, power = _scalars(ctx, 4, "lr l1 l2 l2_shrinkage lr_power")
    else:
        (lr, l1, l2, power), shrink = _scalars(ctx, 4, "lr l1 l2 lr_power"), None
    dims = var.shape.dimensions
    bc = lambda s: b.broadcast(s, dims, ())  # noqa: E731
    g = grad if shrink is None else b.add(grad, b.multiply(bc(xl.mul(b, shrink, 2.0)), var))
    new_accum = b.add(accum, b.multiply(grad, grad))
    neg_p = bc(b.negate(power))
    new_pow, old_pow = b.power(new_accum, neg_p), b.power(accum, neg_p)
    if ctx.attr("multiply_linear_by_lr", False):
        linear = b.subtract(b.add(linear, b.multiply(g, bc(lr))), b.multiply(b.subtract(new_pow, old_pow), var))
        bound = bc(b.multiply(l1, lr))
        quadratic = b.add(new_pow, bc(xl.mul(b, b.multiply(l2, lr), 2.0)))
    else:
        linear = b.subtract(b.add(linear, g), b.multiply(b.divide(b.subtract(new_pow, old_pow), bc(lr)), var))
        bound = bc(l1)
        quadratic = b.add(b.divide(new_pow, bc(lr)), bc(xl.mul(b, l2, 2.0)))
    clipped = b.clamp(b.negate(bound), linear, bound)
    var_r.assign(b.divide(b.subtract(clipped, linear), quadratic))
    acc_r.assign(new_accum)
    lin_r.assign(linear)
    return []


# ReadVariableXlaSplitND / AssignVariableXlaConcatND share XlaSplitND/XlaConcatND's tiling: xla_structured.py.


@lowers("_XlaAotOnlyVarHandleOp")
def _aot_var_handle(ctx, node):
    """tfcompile's in-graph variable (AOT only): tf2xla looks ``shared_name`` up among the variables the
    tfcompile config declares; a JIT compilation (TF's and ours) declares none, so it is refused with
    tf2xla's error."""
    name = ctx.attr("shared_name", "") or node.name
    raise InvalidArgumentError(f"Variable: {name} not configured (only tfcompile's AOT config declares "
                               "variables for _XlaAotOnlyVarHandleOp)")
