"""More math ops (tf2xla's unary complex Angle, scan_ops.cc's CumulativeLogsumexp, bincount_op.cc).

Stage: lowering.

* Angle: ``atan2(imag, real)``.
* CumulativeLogsumexp: the Cumsum/Cumprod scan (a reduce-window over the whole axis) with a log-add-exp
  reducer ``max + log1p(exp(min - max))``, which keeps ``-inf`` (the window padding) and ``+inf``
  exact.
* Bincount/DenseBincount: a scatter-add of the weights (or ones) into ``size`` bins; indices outside
  ``[0, size)`` are dropped as XLA's scatter drops out-of-bounds updates; rank-2 DenseBincount counts
  per row (Bincount too: TF's XLA lowers it with DenseBincount's kernel); ``binary_output`` stores 1
  instead of adding.
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo.attrs import ScatterDimensionNumbers
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.complex_ops import component_parts
from tfxla_cluster.tf2hlo.reduction import _scan
from tfxla_cluster.tf2hlo.registry import lowers


@lowers("Angle")
def _angle(ctx, node):
    re, im = component_parts(ctx)   # complex tensors are (re, im) pairs inside a cluster (complex_ops.py)
    return [ctx.b.atan2(im, re)]


def log_add_exp_computation(b, et: P, name: str):
    r = b.sub_builder(name)
    s = Shape.scalar(et)
    x, y = r.parameter(0, s, "x"), r.parameter(1, s, "y")
    hi, lo = r.maximum(x, y), r.minimum(x, y)
    value = r.add(hi, r.log1p(r.exp(r.subtract(lo, hi))))
    inf = r.compare(r.abs(hi), xl.scalar(r, np.inf, et), "EQ")
    r.select(inf, hi, value)
    return r.build()


lowers("CumulativeLogsumexp")(_scan(None, -np.inf, log_add_exp_computation))


def _bincount(b, idx, weights, size: int, binary: bool, out_t: P, name: str):
    """Counts along the last axis of ``idx`` ([n] or [rows, n]) into [.., size] bins."""
    rank = idx.shape.rank
    dims = idx.shape.dimensions
    out_dims = dims[:-1] + (size,)
    if binary:
        updates = xl.full(b, 1, out_t, dims)
    else:
        updates = xl.convert(b, weights, out_t) if weights is not None else xl.full(b, 1, out_t, dims)
    idx = xl.convert(b, idx, P.S32)
    if rank == 1:
        indices = b.reshape(idx, dims + (1,))
        dn = ScatterDimensionNumbers((), (0,), (0,), 1)
    else:
        rows = b.iota(Shape.array(P.S32, dims), 0)
        indices = b.concatenate([b.reshape(rows, dims + (1,)), b.reshape(idx, dims + (1,))], 2)
        dn = ScatterDimensionNumbers((), (0, 1), (0, 1), 2)
    r = b.sub_builder(name)
    s = Shape.scalar(out_t)
    p0, p1 = r.parameter(0, s, "a"), r.parameter(1, s, "b")
    if binary:
        r.select(r.compare(p1, p1, "EQ"), p1, p0)   # store the update (1); keeps the combiner 2-ary
    else:
        r.add(p0, p1)
    comp = r.build()
    return b.scatter(xl.full(b, 0, out_t, out_dims), indices, updates, comp, dn)


def _size(ctx, index: int) -> int:
    size = ctx.const_int(index)
    if size < 0:
        raise InvalidArgumentError(f"Input size should be greater than or equal to 0, got {size}")
    return size


@lowers("DenseBincount", "Bincount")
def _dense_bincount(ctx, node):
    x = ctx.input(0)   # Bincount's ``arr``: TF's XLA shares DenseBincount's kernel (rank 2 counts per row)
    if x.shape.rank not in (1, 2):
        raise InvalidArgumentError(f"Shape must be at most rank 2 but is rank {x.shape.rank}")
    size = _size(ctx, 1)
    w = ctx.input(2)
    weights = w if w.shape.num_elements else None
    if weights is not None and w.shape.dimensions != x.shape.dimensions:
        raise InvalidArgumentError("weights must be empty or have the shape of input")
    binary = bool(ctx.attr("binary_output", False))   # Bincount has no such attr
    return [_bincount(ctx.b, x, weights, size, binary, ctx.output_type(0), f"{node.name}-add")]
