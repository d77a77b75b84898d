"""Fused batch norm (tf2xla's batch_norm_op.cc), expanded as XLA's BatchNormExpander would.

Stage: lowering. tf2xla emits ``batch-norm-training`` / ``batch-norm-inference`` / ``batch-norm-grad``,
which XLA:CPU expands before codegen; we emit the expanded form directly (those opcodes are not in our
opcode table). Half-precision inputs are computed in the scale type (f32).

* training: mean = E[x], var = E[x²] - E[x]² over all but the feature dim; y = (x - mean)·rsqrt(var +
  ε)·scale + offset. Outputs ``batch_mean``/``batch_variance`` (Bessel-corrected: ·n/(n-1)), blended
  with the running values when ``exponential_avg_factor`` != 1; ``reserve_space_1/2`` are the batch mean
  and the *uncorrected* variance (what the CPU path saves for the gradient); V3's ``reserve_space_3`` is
  an empty f32 tensor, as tf2xla's default ``Tensor()``.
* inference: y = (x - mean)·rsqrt(variance + ε)·scale + offset; the statistics pass through.
* gradient (training): XLA's BatchNormGrad formulas; (inference): dx = dy·scale·rsqrt(var + ε).
* ``_FusedBatchNormEx`` (grappler's remapper makes it from FusedBatchNormV3 [+ Add] + Relu): V3, then
  ``relu(side_input + y)`` or ``relu(y)``. As in tf2xla, a side input is only added together with Relu
  (``activation_mode`` "Identity" returns y and ignores it); other modes are InvalidArgument.
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.registry import lowers


def _feature_dim(ctx, rank: int) -> int:
    return 1 if ctx.attr("data_format", "NHWC").startswith("NC") else rank - 1


class _Stats:
    """Per-feature reductions over every non-feature dim, broadcast back on demand."""

    def __init__(self, b, dims, feature: int, name: str):
        self.b, self.dims, self.feature, self.name = b, tuple(dims), feature, name
        self.reduce_dims = [d for d in range(len(dims)) if d != feature]
        self.n = int(np.prod([dims[d] for d in self.reduce_dims], dtype=np.int64))

    def sum(self, x):
        return xl.reduce(self.b, x, 0, self.reduce_dims, O.ADD, f"{self.name}-sum")

    def mean(self, x):
        return xl.div(self.b, self.sum(x), float(self.n))  # 0/0 = NaN for an empty batch, as in TF

    def bcast(self, v):
        return self.b.broadcast(v, self.dims, [self.feature])


def _check(ctx, x, params, feature):
    c = x.shape.dimensions[feature]
    for i, p in params:
        if p.shape.dimensions != (c,):
            raise InvalidArgumentError(f"input {i} must have shape [{c}] (the feature dimension), got "
                                       f"{list(p.shape.dimensions)}")


@lowers("_FusedBatchNormEx")
def _fused_batch_norm_ex(ctx, node):
    b = ctx.b
    num_side_inputs = int(ctx.attr("num_side_inputs", 0))
    if not 0 <= num_side_inputs <= 1:
        raise InvalidArgumentError("FusedBatchNormEx supports at most 1 side input.")
    mode = ctx.attr("activation_mode", "Identity")
    if mode not in ("Identity", "Relu"):
        raise InvalidArgumentError(f"Unsupported FusedBatchNormEx activation mode: {mode}")
    outs = _batch_norm(ctx, node, v3=True)
    if mode == "Relu":
        y = outs[0]
        if num_side_inputs:
            y = b.add(ctx.input(5), y)
        outs[0] = xl.maximum(b, 0, y)
    return outs


@lowers("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
def _fused_batch_norm(ctx, node):
    return _batch_norm(ctx, node, v3=node.op == "FusedBatchNormV3")


def _batch_norm(ctx, node, v3: bool) -> list:
    b = ctx.b
    x = ctx.input(0)
    scale, offset, mean_in, var_in = (ctx.input(i) for i in range(1, 5))
    rank = x.shape.rank
    feature = _feature_dim(ctx, rank)
    _check(ctx, x, [(1, scale), (2, offset)], feature)
    eps = float(ctx.attr("epsilon", 1e-4))
    et = x.shape.element_type
    u = scale.shape.element_type
    xu = xl.convert(b, x, u)
    st = _Stats(b, x.shape.dimensions, feature, node.name)
    outs_extra = [np.zeros((0,), np.float32)] if v3 else []
    if not ctx.attr("is_training", True):
        _check(ctx, x, [(3, mean_in), (4, var_in)], feature)
        inv = b.rsqrt(xl.add(b, var_in, eps))
        y = b.add(b.multiply(b.multiply(b.subtract(xu, st.bcast(mean_in)), st.bcast(inv)), st.bcast(scale)),
                  st.bcast(offset))
        return [xl.convert(b, y, et), mean_in, var_in, mean_in, var_in] + outs_extra
    mean = st.mean(xu)
    var = b.subtract(st.mean(b.multiply(xu, xu)), b.multiply(mean, mean))  # E[x²] - E[x]²
    inv = b.rsqrt(xl.add(b, var, eps))
    y = b.add(b.multiply(b.multiply(b.subtract(xu, st.bcast(mean)), st.bcast(inv)), st.bcast(scale)),
              st.bcast(offset))
    corrected = xl.mul(b, var, st.n / max(st.n - 1, 1))
    factor = float(ctx.attr("exponential_avg_factor", 1.0))
    new_mean, new_var = mean, corrected
    if factor != 1.0:
        _check(ctx, x, [(3, mean_in), (4, var_in)], feature)
        new_mean = b.add(xl.mul(b, mean_in, 1.0 - factor), xl.mul(b, mean, factor))
        new_var = b.add(xl.mul(b, var_in, 1.0 - factor), xl.mul(b, corrected, factor))
    return [xl.convert(b, y, et), new_mean, new_var, mean, var] + outs_extra


@lowers("FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3")
def _fused_batch_norm_grad(ctx, node):
    b = ctx.b
    dy, x, scale, mean, var = (ctx.input(i) for i in range(5))
    rank = x.shape.rank
    feature = _feature_dim(ctx, rank)
    _check(ctx, x, [(2, scale), (3, mean), (4, var)], feature)
    eps = float(ctx.attr("epsilon", 1e-4))
    et = x.shape.element_type
    u = scale.shape.element_type
    xu, dyu = xl.convert(b, x, u), xl.convert(b, dy, u)
    st = _Stats(b, x.shape.dimensions, feature, node.name)
    inv = b.rsqrt(xl.add(b, var, eps))
    centered = b.subtract(xu, st.bcast(mean))
    offset_bp = st.sum(dyu)
    scale_bp = b.multiply(st.sum(b.multiply(dyu, centered)), inv)
    if ctx.attr("is_training", True):
        # dx = scale·inv/N · (N·dy - Σdy - (x-μ)·Σ(dy·(x-μ)) / (var+ε))
        sum_dy_xc = st.sum(b.multiply(dyu, centered))
        t = b.subtract(xl.mul(b, dyu, float(st.n)), st.bcast(offset_bp))
        # as XLA's BatchNormExpander: the product (x-μ)·Σ(dy·(x-μ)) divided per element, not x-μ times a quotient
        t = b.subtract(t, b.divide(b.multiply(st.bcast(sum_dy_xc), centered), st.bcast(xl.add(b, var, eps))))
        coef = xl.div(b, b.multiply(scale, inv), float(max(st.n, 1)))
        dx = b.multiply(st.bcast(coef), t)
    else:
        dx = b.multiply(dyu, st.bcast(b.multiply(scale, inv)))
    empty = np.zeros((0,), u.dtype)
    return [xl.convert(b, dx, et), scale_bp, offset_bp, empty, empty]
