"""Matrix products, softmax family and top-k (tf2xla's matmul_op.cc, batch_matmul_op.cc, einsum_op.cc,
softmax_op.cc, sparse xent, topk_op.cc).

Stage: lowering.

* MatMul: optional ``transpose({1,0})`` per operand, then ``dot`` (contract lhs 1 with rhs 0).
* BatchMatMulV2/V3 (``MatrixUtil::BatchDot``): batch dims broadcast numpy-style, then one ``dot`` with
  the leading dims as batch dims and the adjoint flags choosing the contracting dims. V3 converts
  both operands to a wider ``Tout``, and the result to a narrower one (XLA's operand upcaster).
* Einsum: one or two operands, with ``...`` broadcasting; labels summed out of one operand are reduced
  first, shared labels kept in the output are batch dims, the others contract; the ``dot`` result is
  transposed into the output's label order. Repeated labels within an operand (diagonals) are not
  supported.
* Softmax/LogSoftmax and the cross-entropy ops: max-shifted ``exp``, sums in the accumulation type
  (f32 for f16/bf16), as softmax_op.cc's ``CrossEntropyWithLogits``. Sparse labels become a one-hot
  with NaN rows for out-of-range labels (TF's CPU kernel raises an error there instead).
* TopKV2: a stable ``sort`` of (value, iota) pairs, greatest first under XLA's total order, then a
  ``slice`` of the first k (XLA's TopK decomposition); ties keep the lower index.
"""
from __future__ import annotations

import re

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo.attrs import ComparisonType
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.registry import lowers


def _dims(d) -> str:
    return "[" + ",".join(map(str, d)) + "]"


# ---------------------------------------------------------------- products
@lowers("MatMul")
def _matmul(ctx, node):
    a, bm = ctx.input(0), ctx.input(1)
    b = ctx.b
    if a.shape.rank != 2 or bm.shape.rank != 2:
        raise InvalidArgumentError(f"In[0] and In[1] are not matrices: {_dims(a.shape.dimensions)} "
                                   f"{_dims(bm.shape.dimensions)}")
    if ctx.attr("transpose_a", False):
        a = b.transpose(a, [1, 0])
    if ctx.attr("transpose_b", False):
        bm = b.transpose(bm, [1, 0])
    if a.shape.dimensions[1] != bm.shape.dimensions[0]:
        raise InvalidArgumentError(f"Matrix size-incompatible: In[0]: {_dims(a.shape.dimensions)}, In[1]: "
                                   f"{_dims(bm.shape.dimensions)}")
    return [b.dot(a, bm)]


def batch_dot(b, x, y, adj_x: bool, adj_y: bool):
    """``MatrixUtil::BatchDot``: numpy-broadcast batch dims, contract x's last (or second-to-last when
    adjoint) with y's second-to-last (or last)."""
    xd, yd = x.shape.dimensions, y.shape.dimensions
    if len(xd) < 2 or len(yd) < 2:
        raise InvalidArgumentError(f"In[0] and In[1] must have rank >= 2: {_dims(xd)} {_dims(yd)}")
    try:
        batch = xl.broadcast_shape(xd[:-2], yd[:-2])
    except InvalidArgumentError:
        raise InvalidArgumentError(f"In[0] and In[1] must have compatible batch dimensions: {_dims(xd)} vs. "
                                   f"{_dims(yd)}") from None
    x = xl.broadcast_to(b, x, batch + xd[-2:])
    y = xl.broadcast_to(b, y, batch + yd[-2:])
    n = len(batch)
    xc = n if adj_x else n + 1
    yc = n + 1 if adj_y else n
    if x.shape.dimensions[xc] != y.shape.dimensions[yc]:
        raise InvalidArgumentError(f"Matrix size-incompatible: In[0]: {_dims(xd)}, In[1]: {_dims(yd)}")
    r = b.dot(x, y, lhs_contracting=[xc], rhs_contracting=[yc], lhs_batch=list(range(n)), rhs_batch=list(range(n)))
    return r


@lowers("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def _batch_matmul(ctx, node):
    x, y = ctx.input(0), ctx.input(1)
    adj_x, adj_y = bool(ctx.attr("adj_x", False)), bool(ctx.attr("adj_y", False))
    if node.op == "BatchMatMulV3":
        out = ctx.attr_type("Tout")
        src = x.shape.element_type
        if src is y.shape.element_type and not _higher_precision(out, src):
            # A narrower Tout (f32 → f16/bf16/s32): XLA computes the dot in the operands' type and converts
            # the result (its operand upcaster widens operands only).
            return [ctx.b.convert(batch_dot(ctx.b, x, y, adj_x, adj_y), out)]
        x, y = xl.convert(ctx.b, x, out), xl.convert(ctx.b, y, out)
    return [batch_dot(ctx.b, x, y, adj_x, adj_y)]


def _higher_precision(a, b) -> bool:
    """``a`` is ``b`` or of higher precision (XLA's HigherPrecisionType: floats over integers, then width,
    then significand bits)."""
    if a is b:
        return True
    if a.is_float != b.is_float:
        return a.is_float
    if a.is_float and a.bit_width == b.bit_width:
        return a.mantissa_bits > b.mantissa_bits
    return a.bit_width > b.bit_width


_EQUATION = re.compile(r"^([a-zA-Z.]*)(?:,([a-zA-Z.]*))?->([a-zA-Z.]*)$")


def _expand_ellipsis(labels: str, rank: int, ell: str, what: str) -> list[str]:
    """Labels as a list with ``...`` replaced by per-dim labels (right-aligned, shared across operands)."""
    if "..." not in labels:
        if len(labels) != rank:
            raise InvalidArgumentError(f"Expected input {what} to have rank {len(labels)} but got: {rank}")
        return list(labels)
    head, tail = labels.split("...")
    n = rank - len(head) - len(tail)
    if n < 0:
        raise InvalidArgumentError(f"Expected input {what} to have rank at least {len(head) + len(tail)} but got: {rank}")
    return list(head) + [ell[len(ell) - n + i] for i in range(n)] + list(tail)


@lowers("Einsum", "XlaEinsum")
def _einsum(ctx, node):
    eq = ctx.attr("equation").replace(" ", "")
    m = _EQUATION.match(eq)
    if not m:
        raise InvalidArgumentError(f"Invalid Einsum equation '{eq}'")
    b = ctx.b
    operands = ctx.inputs()
    specs = [s for s in (m.group(1), m.group(2)) if s is not None]
    if len(specs) != len(operands):
        raise InvalidArgumentError(f"Expected {len(specs)} inputs for equation '{eq}', got {len(operands)}")
    max_ell = max((op.shape.rank - len(s.replace("...", "")) for op, s in zip(operands, specs) if "..." in s),
                  default=0)
    ell = [chr(0x100 + i) for i in range(max_ell)]  # labels no equation can use
    labels = [_expand_ellipsis(s, op.shape.rank, ell, str(i)) for i, (op, s) in enumerate(zip(operands, specs))]
    out_spec = m.group(3)
    out_labels = list(out_spec.replace("...", "".join(ell))) if "..." in out_spec else list(out_spec)
    if "..." not in out_spec and max_ell and any(lab in ell for ls in labels for lab in ls):
        raise InvalidArgumentError(f"Output subscripts of '{eq}' must contain '...' when the inputs do")
    for ls in labels:
        if len(set(ls)) != len(ls):
            raise UnimplementedError(f"Einsum '{eq}': repeated labels within an operand (diagonals) are not "
                                     "supported")
    sizes: dict[str, int] = {}
    for op, ls in zip(operands, labels):
        for lab, d in zip(ls, op.shape.dimensions):
            if lab in sizes and sizes[lab] != d and 1 not in (sizes[lab], d):
                raise InvalidArgumentError(f"Expected dimension {sizes[lab]} at axis of label {lab!r}, got {d}")
            sizes[lab] = max(sizes.get(lab, d), d) if 1 in (sizes.get(lab, d), d) else d

    # Reduce labels that appear in one operand only and not in the output.
    def sum_out(op, ls, keep):
        drop = [i for i, lab in enumerate(ls) if lab not in keep]
        if not drop:
            return op, ls
        et = op.shape.element_type
        acc = xl.sum_accumulation_type(et)
        r = xl.reduce(b, xl.convert(b, op, acc), 0, drop, O.ADD, f"{node.name}-sum")
        return xl.convert(b, r, et), [lab for i, lab in enumerate(ls) if i not in drop]

    if len(operands) == 1:
        x, ls = sum_out(operands[0], labels[0], set(out_labels))
        perm = [ls.index(lab) for lab in out_labels]
        return [x if perm == list(range(len(perm))) else b.transpose(x, perm)]

    (x, y), (lx, ly) = operands, labels
    x, lx = sum_out(x, lx, set(ly) | set(out_labels))
    y, ly = sum_out(y, ly, set(lx) | set(out_labels))
    # Size-1 broadcasting of shared labels (from "..."): broadcast each side to the common size.
    for side in (0, 1):
        op, ls = (x, lx) if side == 0 else (y, ly)
        target = [sizes[lab] if lab in (ly if side == 0 else lx) else d for lab, d in zip(ls, op.shape.dimensions)]
        if list(op.shape.dimensions) != target:
            op = xl.broadcast_to(b, op, target)
            if side == 0:
                x = op
            else:
                y = op
    batch = [lab for lab in lx if lab in ly and lab in out_labels]
    contract = [lab for lab in lx if lab in ly and lab not in out_labels]
    r = b.dot(x, y, lhs_contracting=[lx.index(lab) for lab in contract],
              rhs_contracting=[ly.index(lab) for lab in contract], lhs_batch=[lx.index(lab) for lab in batch],
              rhs_batch=[ly.index(lab) for lab in batch])
    result = batch + [lab for lab in lx if lab not in ly] + [lab for lab in ly if lab not in lx]
    missing = [lab for lab in out_labels if lab not in result]
    if missing:
        raise InvalidArgumentError(f"Einsum '{eq}': output label {missing[0]!r} is in no input")
    perm = [result.index(lab) for lab in out_labels]
    return [r if perm == list(range(len(perm))) else b.transpose(r, perm)]


# ---------------------------------------------------------------- softmax and cross entropy
def _softmax_parts(ctx, logits, name: str):
    """(shifted logits, exp of them, sum of exps broadcast back) along the last dim."""
    b = ctx.b
    dims = logits.shape.dimensions
    et = logits.shape.element_type
    last = len(dims) - 1
    keep = list(range(last))
    mx = xl.reduce(b, logits, xl.min_value(et), [last], O.MAXIMUM, f"{name}-max")
    shifted = b.subtract(logits, b.broadcast(mx, dims, keep))
    ex = b.exp(shifted)
    acc = xl.sum_accumulation_type(et)
    total = xl.reduce(b, xl.convert(b, ex, acc), 0, [last], O.ADD, f"{name}-sum")
    return shifted, ex, xl.convert(b, total, et), keep


@lowers("Softmax", "LogSoftmax")
def _softmax(ctx, node):
    logits = ctx.input(0)
    b = ctx.b
    if logits.shape.rank < 1:
        raise InvalidArgumentError(f"logits must have >= 1 dimension, got {_dims(logits.shape.dimensions)}")
    shifted, ex, total, keep = _softmax_parts(ctx, logits, node.name)
    dims = logits.shape.dimensions
    if node.op == "LogSoftmax":
        return [b.subtract(shifted, b.broadcast(b.log(total), dims, keep))]
    return [b.divide(ex, b.broadcast(total, dims, keep))]


def cross_entropy(ctx, logits, labels, name: str):
    """(loss [batch], backprop [batch, classes]) — softmax_op.cc's CrossEntropyWithLogits."""
    b = ctx.b
    dims = logits.shape.dimensions
    et = logits.shape.element_type
    shifted, ex, total, keep = _softmax_parts(ctx, logits, name)
    log_total = b.broadcast(b.log(total), dims, keep)
    mul = b.multiply(b.negate(labels), b.subtract(shifted, log_total))
    acc = xl.sum_accumulation_type(et)
    loss = xl.convert(b, xl.reduce(b, xl.convert(b, mul, acc), 0, [len(dims) - 1], O.ADD, f"{name}-loss"), et)
    backprop = b.subtract(b.divide(ex, b.broadcast(total, dims, keep)), labels)
    return loss, backprop


@lowers("SoftmaxCrossEntropyWithLogits")
def _softmax_xent(ctx, node):
    logits, labels = ctx.broadcast_inputs()
    if logits.shape.rank != 2:
        raise InvalidArgumentError(f"logits and labels must be either 2-dimensional, or broadcasted to be "
                                   f"2-dimensional: {_dims(logits.shape.dimensions)}")
    return list(cross_entropy(ctx, logits, labels, node.name))


@lowers("SparseSoftmaxCrossEntropyWithLogits")
def _sparse_softmax_xent(ctx, node):
    logits, indices = ctx.input(0), ctx.input(1)
    b = ctx.b
    ld, idims = logits.shape.dimensions, indices.shape.dimensions
    if len(ld) != 2 or len(idims) != 1 or ld[0] != idims[0]:
        raise InvalidArgumentError(f"logits must be 2-D and labels 1-D with the same first dimension, got "
                                   f"{_dims(ld)} and {_dims(idims)}")
    et, it = logits.shape.element_type, indices.shape.element_type
    batch, depth = ld
    iota = b.iota(Shape.array(it, ld), 1)
    hot = b.compare(b.broadcast(indices, ld, [0]), iota, "EQ")
    labels = b.select(hot, xl.full(b, 1, et, ld), xl.full(b, 0, et, ld))
    # Out-of-range labels make their row NaN (tf2xla's nan_or_zero).
    in_range = b.and_(xl.le(b, 0, indices), xl.lt(b, indices, depth))
    nan_or_zero = b.select(in_range, xl.full(b, 0, et, [batch]), xl.full(b, float("nan"), et, [batch]))
    labels = b.add(labels, b.broadcast(nan_or_zero, ld, [0]))
    return list(cross_entropy(ctx, logits, labels, node.name))


# ---------------------------------------------------------------- top-k
def _greater_first(b, et, index_type, order, name: str):
    """Sort comparator over (value, index) pairs: value.lhs > value.rhs."""
    r = b.sub_builder(name)
    lhs = r.parameter(0, Shape.scalar(et), "p.0.lhs")
    rhs = r.parameter(1, Shape.scalar(et), "p.0.rhs")
    r.parameter(2, Shape.scalar(index_type), "p.1.lhs")
    r.parameter(3, Shape.scalar(index_type), "p.1.rhs")
    return r.build(r.compare(lhs, rhs, "GT", order))


@lowers("TopKV2", "TopK")
def _top_k(ctx, node):
    x = ctx.input(0)
    b = ctx.b
    k = ctx.const_int(1) if node.op == "TopKV2" else int(ctx.attr("k"))
    dims = list(x.shape.dimensions)
    if not dims:
        raise InvalidArgumentError("input must be at least 1-dimensional")
    last = len(dims) - 1
    if not 0 <= k <= dims[last]:
        raise InvalidArgumentError(f"input must have at least k columns. Had {dims[last]}, needed {k}")
    et = x.shape.element_type
    index_type = ctx.output_type(1)
    iota = b.iota(Shape.array(index_type, dims), last)
    order = ComparisonType.TOTALORDER if et.is_float else None
    comp = _greater_first(b, et, index_type, order, f"{node.name}-compare")
    s = b.sort([x, iota], last, comp, is_stable=True)
    values, indices = b.get_tuple_element(s, 0), b.get_tuple_element(s, 1)
    if k != dims[last]:
        starts, limits = [0] * len(dims), dims[:-1] + [k]
        values, indices = b.slice(values, starts, limits), b.slice(indices, starts, limits)
    return [values, indices]



@lowers("ApproxTopK")
def _approx_top_k(ctx, node):
    """Exact on CPU: XLA falls back to a sort along ``reduction_dimension`` and a slice of k."""
    x = ctx.input(0)
    b = ctx.b
    k = int(ctx.attr("k"))
    dims = list(x.shape.dimensions)
    axis = ctx.normalize_axis(int(ctx.attr("reduction_dimension", -1)), len(dims))
    if not 0 <= k <= dims[axis]:
        raise InvalidArgumentError(f"k must be in [0, {dims[axis]}], got {k}")
    et = x.shape.element_type
    iota = b.iota(Shape.array(P.S32, dims), axis)
    order = ComparisonType.TOTALORDER if et.is_float else None
    r = b.sub_builder(f"{node.name}-compare")
    lhs = r.parameter(0, Shape.scalar(et), "p.0.lhs")
    rhs = r.parameter(1, Shape.scalar(et), "p.0.rhs")
    r.parameter(2, Shape.scalar(P.S32), "p.1.lhs")
    r.parameter(3, Shape.scalar(P.S32), "p.1.rhs")
    comp = r.build(r.compare(lhs, rhs, "GT" if ctx.attr("is_max_k", True) else "LT", order))
    s = b.sort([x, iota], axis, comp, is_stable=True)
    limits = list(dims)
    limits[axis] = k
    return [b.slice(b.get_tuple_element(s, i), [0] * len(dims), limits) for i in range(2)]
