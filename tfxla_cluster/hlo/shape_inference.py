"""Per-opcode shape inference (xla/service/shape_inference.cc), one rule per opcode in ``_RULES``.

``infer_shape(instr)`` reads the operands' shapes and the instruction's attributes and returns the
result shape, raising ``InvalidArgumentError`` when the operands do not fit the opcode. Opcodes whose
result cannot be derived from their operands (parameter, constant, reshape, broadcast, convert, iota,
bitcast, rng, custom-call, ...) take the instruction's declared ``shape`` and check it against the
operands. The builder uses the result as the new instruction's shape; the verifier compares it with the
declared one. Layouts are ignored: inferred shapes have the default layout.

Bounded dynamic dimensions propagate as in XLA's shape inference where lowerings make them (elementwise
ops, select, clamp, reductions, broadcast, transpose, gather, set-dimension-size): a result dimension is
dynamic when an operand dimension it comes from is. Dimension checks compare the static bounds.
"""
from __future__ import annotations

from typing import Callable

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo import attrs as A
from tfxla_cluster.hlo import opcode as ops
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape


def _merged(result: Shape, *shapes: Shape) -> Shape:
    """``result`` with a dimension dynamic wherever that dimension of one of ``shapes`` (of its rank) is."""
    flags = [s.dynamic_dimensions for s in shapes if s.dynamic_dimensions and s.rank == result.rank]
    if not flags:
        return result
    return result.with_dynamic_dimensions(any(f[d] for f in flags) for d in range(result.rank))


def _fail(instr, message: str) -> None:
    raise InvalidArgumentError(f"{instr.opcode.text} '{instr.name}': {message}")


def _array(instr, i: int) -> Shape:
    s = instr.operands[i].shape
    if not s.is_array:
        _fail(instr, f"operand {i} must be an array, got {s}")
    return s


def _expect_operands(instr, n: int) -> None:
    if len(instr.operands) != n:
        _fail(instr, f"expects {n} operands, got {len(instr.operands)}")


def _signature_check(instr, comp, params: list[Shape], result: Shape | None, what: str) -> Shape:
    """Check ``comp`` takes ``params`` (and returns ``result`` if given); return its result shape."""
    got = [p.shape for p in comp.parameters]
    if len(got) != len(params) or any(not a.compatible(b) for a, b in zip(got, params)):
        _fail(instr, f"{what} %{comp.name} takes ({', '.join(map(str, got))}), "
                     f"expected ({', '.join(map(str, params))})")
    root = comp.root.shape
    if result is not None and not root.compatible(result):
        _fail(instr, f"{what} %{comp.name} returns {root}, expected {result}")
    return root


def _window_output_dims(instr, dims, window) -> tuple[int, ...]:
    if len(window.dimensions) != len(dims):
        _fail(instr, f"window has {len(window.dimensions)} dimensions, operand has rank {len(dims)}")
    out = []
    for d, w in zip(dims, window.dimensions):
        if w.size <= 0 or w.stride <= 0 or w.base_dilation <= 0 or w.window_dilation <= 0:
            _fail(instr, "window size, stride and dilations must be positive")
        base = (d - 1) * w.base_dilation + 1 if d > 0 else 0
        padded = base + w.padding_low + w.padding_high
        win = (w.size - 1) * w.window_dilation + 1
        out.append(0 if padded < win else (padded - win) // w.stride + 1)
    return tuple(out)


# ---------------------------------------------------------------- elementwise
_FLOAT_OR_COMPLEX_UNARY = {O.EXP, O.EXPM1, O.LOG, O.LOG1P, O.LOGISTIC, O.SQRT, O.RSQRT, O.CBRT, O.COS,
                           O.SIN, O.TAN, O.TANH, O.ERF}
_FLOAT_UNARY = {O.FLOOR, O.CEIL, O.ROUND_NEAREST_AFZ, O.ROUND_NEAREST_EVEN, O.IS_FINITE}
_INT_UNARY = {O.POPCNT, O.CLZ}


def _unary(instr) -> Shape:
    _expect_operands(instr, 1)
    s = _array(instr, 0)
    et, op = s.element_type, instr.opcode
    if op in _FLOAT_OR_COMPLEX_UNARY and not (et.is_float or et.is_complex):
        _fail(instr, f"expects a floating-point or complex operand, got {et.value}")
    if op in _FLOAT_UNARY and not et.is_float:
        _fail(instr, f"expects a floating-point operand, got {et.value}")
    if op in _INT_UNARY and not et.is_integral:
        _fail(instr, f"expects an integral operand, got {et.value}")
    if op is O.NOT and not (et.is_integral or et.is_pred):
        _fail(instr, f"expects a pred or integral operand, got {et.value}")
    if op in (O.NEGATE, O.ABS, O.SIGN) and et.is_pred:
        _fail(instr, "does not accept pred")
    if op is O.IS_FINITE:
        return s.with_element_type(T.PRED).without_layout()
    if op in (O.REAL, O.IMAG) or (op is O.ABS and et.is_complex):
        return s.with_element_type(et.component_type).without_layout()
    return s.without_layout()


def _binary(instr) -> Shape:
    _expect_operands(instr, 2)
    a, b = _array(instr, 0), _array(instr, 1)
    if a.dimensions != b.dimensions:
        _fail(instr, f"operand shapes must have identical dimensions (HLO has no implicit broadcast): "
                     f"{a} vs {b}")
    if a.element_type is not b.element_type:
        _fail(instr, f"operand element types differ: {a.element_type.value} vs {b.element_type.value}")
    et, op = a.element_type, instr.opcode
    if op in ops.BITWISE_BINARY and not (et.is_integral or et.is_pred):
        _fail(instr, f"expects pred or integral operands, got {et.value}")
    if op in ops.SHIFTS and not et.is_integral:
        _fail(instr, f"expects integral operands, got {et.value}")
    if op is O.ATAN2 and not (et.is_float or et.is_complex):
        _fail(instr, f"expects floating-point operands, got {et.value}")
    if op in (O.MAXIMUM, O.MINIMUM, O.REMAINDER) and et.is_complex:
        _fail(instr, "does not accept complex operands")
    if op is O.COMPARE:
        if instr.comparison_direction is None:
            _fail(instr, "compare needs a direction")
        ctype, default = instr.comparison_type, A.default_comparison_type(et)
        # ShapeVerifier::HandleCompare: the type must suit the operands (floats may use TOTALORDER).
        if ctype is not None and ctype is not default and not (
                et.is_float and ctype is A.ComparisonType.TOTALORDER):
            _fail(instr, f"expected comparison type {default.value}, got {ctype.value} for {et.value}")
        return _merged(a.with_element_type(T.PRED).without_layout(), b)
    if op is O.COMPLEX:
        if et not in (T.F32, T.F64):
            _fail(instr, f"complex expects f32 or f64 operands, got {et.value}")
        return _merged(a.with_element_type(T.C64 if et is T.F32 else T.C128).without_layout(), b)
    return _merged(a.without_layout(), b)


def _select(instr) -> Shape:
    _expect_operands(instr, 3)
    p, a, b = (_array(instr, i) for i in range(3))
    if p.element_type is not T.PRED:
        _fail(instr, f"predicate must be pred, got {p.element_type.value}")
    if not a.compatible(b):
        _fail(instr, f"on_true and on_false shapes differ: {a} vs {b}")
    if p.dimensions != a.dimensions:
        _fail(instr, f"predicate dimensions {p} do not match operands {a}")
    return _merged(a.without_layout(), p, b)


def _clamp(instr) -> Shape:
    _expect_operands(instr, 3)
    lo, x, hi = (_array(instr, i) for i in range(3))
    for name, s in (("min", lo), ("max", hi)):
        if s.element_type is not x.element_type:
            _fail(instr, f"{name} element type {s.element_type.value} differs from {x.element_type.value}")
        if s.dimensions and s.dimensions != x.dimensions:
            _fail(instr, f"{name} must be a scalar or match the operand: {s} vs {x}")
    return _merged(x.without_layout(), lo, hi)


def _convert(instr) -> Shape:
    _expect_operands(instr, 1)
    src, dst = _array(instr, 0), instr.shape
    if src.dimensions != dst.dimensions:
        _fail(instr, f"convert changes dimensions: {src} -> {dst}")
    if src.element_type.is_complex and not dst.element_type.is_complex:
        _fail(instr, f"conversion from complex to real type {src} => {dst} is not implemented")
    return dst.without_layout()


def _bitcast_convert(instr) -> Shape:
    _expect_operands(instr, 1)
    src, dst = _array(instr, 0), instr.shape
    sb, db = src.element_type.bit_width, dst.element_type.bit_width
    if sb == db:
        ok = src.dimensions == dst.dimensions
    elif sb > db:
        ok = dst.dimensions == src.dimensions + (sb // db,)
    else:
        ok = bool(src.dimensions) and src.dimensions[-1] == db // sb and dst.dimensions == src.dimensions[:-1]
    if not ok:
        _fail(instr, f"cannot bitcast-convert {src} to {dst}")
    return dst.without_layout()


def _same_as_operand(instr) -> Shape:
    _expect_operands(instr, 1)
    return instr.operands[0].shape.without_layout()


def _reduce_precision(instr) -> Shape:
    s = _same_as_operand(instr)
    if not s.element_type.is_float:
        _fail(instr, f"expects a floating-point operand, got {s.element_type.value}")
    if instr.exponent_bits is None or instr.exponent_bits < 1 or (instr.mantissa_bits or 0) < 0:
        _fail(instr, "needs exponent_bits >= 1 and mantissa_bits >= 0")
    return s


# ---------------------------------------------------------------- shape manipulation
def _given(instr) -> Shape:
    if instr.shape is None:
        _fail(instr, "the result shape must be given")
    return instr.shape.without_layout()


def _bitcast(instr) -> Shape:
    _expect_operands(instr, 1)
    if instr.operands[0].shape.byte_size() != instr.shape.byte_size():
        _fail(instr, f"bitcast changes the byte size: {instr.operands[0].shape} -> {instr.shape}")
    return _given(instr)


def reshape_dynamic_dimension(src: tuple[int, ...], dim: int, dst: tuple[int, ...]) -> tuple[int, int] | None:
    """Where a reshape ``src -> dst`` takes the bounded dynamic dimension ``dim`` of ``src``: (the output
    dimension, the factor its run-time size is multiplied by), or None when the padding would not stay at
    the end of that output dimension (the dynamic dimension split, or merged with a more major one)."""
    prefix = 1
    for n in src[:dim]:
        prefix *= n
    before = 1
    for k, n in enumerate(dst):
        if before == prefix:
            merged = src[dim]
            for j in range(dim + 1, len(src) + 1):
                if merged == n and (n != 1 or src[dim] == 1):
                    return k, merged // src[dim] if src[dim] else 1
                if j == len(src) or merged > n:
                    break
                merged *= src[j]
        before *= n
        if before > prefix:
            return None
    return None


def _reshape(instr) -> Shape:
    _expect_operands(instr, 1)
    src, dst = _array(instr, 0), instr.shape
    if src.num_elements != dst.num_elements or src.element_type is not dst.element_type:
        _fail(instr, f"reshape must keep the element type and count: {src} -> {dst}")
    out = dst.without_layout()
    for d, dyn in enumerate(src.dynamic_dimensions):
        mapped = reshape_dynamic_dimension(src.dimensions, d, dst.dimensions) if dyn else None
        if mapped is not None:
            out = out.with_dynamic_dimension(mapped[0])
    return out


def _broadcast(instr) -> Shape:
    _expect_operands(instr, 1)
    src, dst, dims = _array(instr, 0), instr.shape, instr.dimensions
    if dims is None or len(dims) != src.rank:
        _fail(instr, f"needs one broadcast dimension per operand dimension ({src.rank})")
    if len(set(dims)) != len(dims):
        _fail(instr, f"broadcast dimensions {list(dims)} repeat")
    for i, d in enumerate(dims):
        if not 0 <= d < dst.rank or dst.dimensions[d] != src.dimensions[i]:
            _fail(instr, f"operand dimension {i} (size {src.dimensions[i]}) does not match output "
                         f"dimension {d} of {dst}")
    if src.element_type is not dst.element_type:
        _fail(instr, f"broadcast changes the element type: {src} -> {dst}")
    if src.dynamic_dimensions:   # an operand dimension's dynamic size goes where the dimension goes
        return dst.without_layout().with_dynamic_dimensions(
            d in {dims[i] for i, f in enumerate(src.dynamic_dimensions) if f} for d in range(dst.rank))
    return dst.without_layout()


def _check_dims(instr, dims, rank: int, what: str = "dimensions") -> None:
    if dims is None or len(set(dims)) != len(dims) or any(not 0 <= d < rank for d in dims):
        _fail(instr, f"invalid {what} {list(dims or [])} for rank {rank}")


def _transpose(instr) -> Shape:
    _expect_operands(instr, 1)
    s, perm = _array(instr, 0), instr.dimensions
    _check_dims(instr, perm, s.rank)
    if len(perm) != s.rank:
        _fail(instr, f"permutation {list(perm)} does not cover rank {s.rank}")
    out = s.with_dimensions(s.dimensions[p] for p in perm)
    return out.with_dynamic_dimensions(s.dynamic_dimensions[p] for p in perm) if s.dynamic_dimensions else out


def _reverse(instr) -> Shape:
    s = _same_as_operand(instr)
    _check_dims(instr, instr.dimensions, s.rank)
    return s


def _slice(instr) -> Shape:
    _expect_operands(instr, 1)
    s = _array(instr, 0)
    if instr.slices is None or len(instr.slices) != s.rank:
        _fail(instr, f"needs {s.rank} slice ranges")
    out = []
    for d, r in zip(s.dimensions, instr.slices):
        if not (0 <= r.start <= r.limit <= d) or r.stride < 1:
            _fail(instr, f"slice [{r.start}:{r.limit}:{r.stride}] out of bounds for dimension of size {d}")
        out.append(-(-(r.limit - r.start) // r.stride))
    return s.with_dimensions(out)


def _check_indices(instr, first: int, rank: int) -> None:
    idx = instr.operands[first:]
    if len(idx) != rank:
        _fail(instr, f"needs {rank} scalar start indices, got {len(idx)}")
    types = {i.shape.element_type for i in idx}
    if any(not i.shape.is_scalar or not i.shape.element_type.is_integral for i in idx) or len(types) > 1:
        _fail(instr, "start indices must be integral scalars of one type")


def _dynamic_slice(instr) -> Shape:
    s = _array(instr, 0)
    _check_indices(instr, 1, s.rank)
    sizes = instr.dynamic_slice_sizes
    if sizes is None or len(sizes) != s.rank or any(not 0 <= z <= d for z, d in zip(sizes, s.dimensions)):
        _fail(instr, f"dynamic_slice_sizes {list(sizes or [])} do not fit {s}")
    return s.with_dimensions(sizes)


def _dynamic_update_slice(instr) -> Shape:
    s, u = _array(instr, 0), _array(instr, 1)
    _check_indices(instr, 2, s.rank)
    if u.rank != s.rank or any(a > b for a, b in zip(u.dimensions, s.dimensions)):
        _fail(instr, f"update {u} does not fit operand {s}")
    if u.element_type is not s.element_type:
        _fail(instr, "update element type differs from the operand's")
    return s.without_layout()


def _concatenate(instr) -> Shape:
    if not instr.operands:
        _fail(instr, "needs at least one operand")
    shapes = [_array(instr, i) for i in range(len(instr.operands))]
    first = shapes[0]
    if instr.dimensions is None or len(instr.dimensions) != 1:
        _fail(instr, "needs exactly one dimension")
    dim = instr.dimensions[0]
    if not 0 <= dim < first.rank:
        _fail(instr, f"dimension {dim} out of range for rank {first.rank}")
    total = 0
    for s in shapes:
        if s.rank != first.rank or s.element_type is not first.element_type or any(
                a != b for i, (a, b) in enumerate(zip(s.dimensions, first.dimensions)) if i != dim):
            _fail(instr, f"operands {first} and {s} cannot be concatenated on dimension {dim}")
        total += s.dimensions[dim]
    dims = list(first.dimensions)
    dims[dim] = total
    return first.with_dimensions(dims)


def _pad(instr) -> Shape:
    _expect_operands(instr, 2)
    s, v = _array(instr, 0), _array(instr, 1)
    if not v.is_scalar or v.element_type is not s.element_type:
        _fail(instr, f"padding value must be a {s.element_type.value} scalar, got {v}")
    cfg = instr.padding_config
    if cfg is None or len(cfg.dimensions) != s.rank:
        _fail(instr, f"needs a padding config with {s.rank} dimensions")
    out = []
    for d, p in zip(s.dimensions, cfg.dimensions):
        if p.interior < 0:
            _fail(instr, "interior padding must be non-negative")
        n = p.low + p.high + d + max(d - 1, 0) * p.interior
        if n < 0:
            _fail(instr, f"padding {p.low}_{p.high}_{p.interior} makes dimension of size {d} negative")
        out.append(n)
    return s.with_dimensions(out)


def _iota(instr) -> Shape:
    s = _given(instr)
    if not s.is_array or s.rank == 0 or instr.iota_dimension is None or not 0 <= instr.iota_dimension < s.rank:
        _fail(instr, f"iota_dimension {instr.iota_dimension} invalid for {s}")
    return s


# ---------------------------------------------------------------- reductions and windows
def _split_inputs_inits(instr) -> tuple[list[Shape], list[Shape]]:
    n = len(instr.operands)
    if n == 0 or n % 2:
        _fail(instr, f"needs inputs and as many init values, got {n} operands")
    shapes = [_array(instr, i) for i in range(n)]
    inputs, inits = shapes[: n // 2], shapes[n // 2:]
    for i, (x, init) in enumerate(zip(inputs, inits)):
        if not init.is_scalar or init.element_type is not x.element_type:
            _fail(instr, f"init value {i} must be a {x.element_type.value} scalar, got {init}")
        if x.dimensions != inputs[0].dimensions:
            _fail(instr, f"inputs have different dimensions: {inputs[0]} vs {x}")
    return inputs, inits


def _reducer_check(instr, comp, inits: list[Shape], what: str) -> None:
    scalars = [s.without_layout() for s in inits]
    result = scalars[0] if len(scalars) == 1 else Shape.tuple_of(scalars)
    _signature_check(instr, comp, scalars + scalars, result, what)


def _result(instr, shapes: list[Shape]) -> Shape:
    return shapes[0] if len(shapes) == 1 else Shape.tuple_of(shapes)


def _reduce(instr) -> Shape:
    inputs, inits = _split_inputs_inits(instr)
    _check_dims(instr, instr.dimensions, inputs[0].rank)
    _reducer_check(instr, instr.to_apply, inits, "to_apply")
    kept = [i for i in range(inputs[0].rank) if i not in instr.dimensions]
    keep = [inputs[0].dimensions[i] for i in kept]
    dyn = [any(x.is_dynamic_dimension(i) for x in inputs) for i in kept]
    return _result(instr, [Shape.array(x.element_type, keep, None, dyn) for x in inputs])


def _reduce_window(instr) -> Shape:
    inputs, inits = _split_inputs_inits(instr)
    _reducer_check(instr, instr.to_apply, inits, "to_apply")
    dims = _window_output_dims(instr, inputs[0].dimensions, instr.window)
    return _result(instr, [Shape.array(x.element_type, dims) for x in inputs])


def _select_and_scatter(instr) -> Shape:
    _expect_operands(instr, 3)
    s, src, init = (_array(instr, i) for i in range(3))
    scalar = Shape.scalar(s.element_type)
    if not init.compatible(scalar):
        _fail(instr, f"init value must be {scalar}, got {init}")
    select, scatter = instr.called_computations
    _signature_check(instr, select, [scalar, scalar], Shape.scalar(T.PRED), "select")
    _signature_check(instr, scatter, [scalar, scalar], scalar, "scatter")
    expected = _window_output_dims(instr, s.dimensions, instr.window)
    if src.dimensions != expected:
        _fail(instr, f"source shape {src} does not match the window output {list(expected)}")
    return s.without_layout()


# ---------------------------------------------------------------- dot and convolution
def _dot(instr) -> Shape:
    _expect_operands(instr, 2)
    lhs, rhs = _array(instr, 0), _array(instr, 1)
    dn = instr.dot_dimension_numbers
    if dn is None:
        _fail(instr, "dot needs dimension numbers")
    _check_dims(instr, dn.lhs_contracting_dimensions + dn.lhs_batch_dimensions, lhs.rank, "lhs dimensions")
    _check_dims(instr, dn.rhs_contracting_dimensions + dn.rhs_batch_dimensions, rhs.rank, "rhs dimensions")
    if len(dn.lhs_contracting_dimensions) != len(dn.rhs_contracting_dimensions) or len(
            dn.lhs_batch_dimensions) != len(dn.rhs_batch_dimensions):
        _fail(instr, "lhs and rhs must have as many contracting and batch dimensions")
    for a, b in zip(dn.lhs_contracting_dimensions, dn.rhs_contracting_dimensions):
        if lhs.dimensions[a] != rhs.dimensions[b]:
            _fail(instr, f"contracting dimension sizes differ: {lhs} dim {a} vs {rhs} dim {b}")
    for a, b in zip(dn.lhs_batch_dimensions, dn.rhs_batch_dimensions):
        if lhs.dimensions[a] != rhs.dimensions[b]:
            _fail(instr, f"batch dimension sizes differ: {lhs} dim {a} vs {rhs} dim {b}")
    et = instr.shape.element_type if instr.shape is not None else lhs.element_type
    if lhs.element_type is not rhs.element_type and instr.shape is None:
        _fail(instr, f"operand types differ ({lhs.element_type.value}, {rhs.element_type.value}); "
                     "give the result type")
    lhs_used = set(dn.lhs_contracting_dimensions) | set(dn.lhs_batch_dimensions)
    rhs_used = set(dn.rhs_contracting_dimensions) | set(dn.rhs_batch_dimensions)
    dims = [lhs.dimensions[d] for d in dn.lhs_batch_dimensions]
    dims += [d for i, d in enumerate(lhs.dimensions) if i not in lhs_used]
    dims += [d for i, d in enumerate(rhs.dimensions) if i not in rhs_used]
    return Shape.array(et, dims)


def _convolution(instr) -> Shape:
    _expect_operands(instr, 2)
    lhs, rhs = _array(instr, 0), _array(instr, 1)
    dn, g, bg = instr.convolution_dimension_numbers, instr.feature_group_count, instr.batch_group_count
    if dn is None:
        _fail(instr, "convolution needs dim_labels")
    n = len(dn.input_spatial_dimensions)
    if lhs.rank != n + 2 or rhs.rank != n + 2:
        _fail(instr, f"dim_labels {dn.to_text()} need rank {n + 2} operands, got {lhs} and {rhs}")
    batch, feat = lhs.dimensions[dn.input_batch_dimension], lhs.dimensions[dn.input_feature_dimension]
    kin, kout = rhs.dimensions[dn.kernel_input_feature_dimension], rhs.dimensions[dn.kernel_output_feature_dimension]
    if g < 1 or bg < 1 or feat != kin * g or kout % g or batch % bg or kout % bg:
        _fail(instr, f"input features {feat}, kernel features {kin}->{kout}, feature_group_count {g}, "
                     f"batch_group_count {bg}, batch {batch} do not fit")
    window = instr.window
    if window is None or len(window.dimensions) != n:
        _fail(instr, f"convolution needs a window with {n} dimensions")
    for i, (w, kd) in enumerate(zip(window.dimensions, dn.kernel_spatial_dimensions)):
        if w.size != rhs.dimensions[kd]:
            _fail(instr, f"window size {w.size} differs from kernel spatial dimension {i} ({rhs.dimensions[kd]})")
    spatial = _window_output_dims(instr, [lhs.dimensions[d] for d in dn.input_spatial_dimensions], window)
    out = [0] * (n + 2)
    out[dn.output_batch_dimension] = batch // bg
    out[dn.output_feature_dimension] = kout
    for d, size in zip(dn.output_spatial_dimensions, spatial):
        out[d] = size
    et = instr.shape.element_type if instr.shape is not None else lhs.element_type
    return Shape.array(et, out)


# ---------------------------------------------------------------- gather / scatter
def _gather(instr) -> Shape:
    _expect_operands(instr, 2)
    operand, indices = _array(instr, 0), _array(instr, 1)
    dn, sizes = instr.gather_dimension_numbers, instr.gather_slice_sizes
    if dn is None or sizes is None or len(sizes) != operand.rank:
        _fail(instr, "gather needs dimension numbers and one slice size per operand dimension")
    if not indices.element_type.is_integral:
        _fail(instr, "start indices must be integral")
    idims = list(indices.dimensions)
    if dn.index_vector_dim == len(idims):
        idims.append(1)
    if not 0 <= dn.index_vector_dim < len(idims) or idims[dn.index_vector_dim] != len(dn.start_index_map):
        _fail(instr, f"index vector size does not match start_index_map {list(dn.start_index_map)}")
    for d, (z, od) in enumerate(zip(sizes, operand.dimensions)):
        if not 0 <= z <= od:
            _fail(instr, f"slice size {z} out of bounds for operand dimension {d} of size {od}")
    removed = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    for d in removed:
        if sizes[d] > 1:
            _fail(instr, f"collapsed/batching dimension {d} must have slice size <= 1")
    offset_sizes = [z for d, z in enumerate(sizes) if d not in removed]
    if len(offset_sizes) != len(dn.offset_dims):
        _fail(instr, f"offset_dims {list(dn.offset_dims)} do not match {len(offset_sizes)} kept slice dims")
    batch = [(z, indices.is_dynamic_dimension(d)) for d, z in enumerate(idims[:indices.rank])
             if d != dn.index_vector_dim]
    kept_dyn = [operand.is_dynamic_dimension(d) and z == operand.dimensions[d]
                for d, z in enumerate(sizes) if d not in removed]
    offsets = list(zip(offset_sizes, kept_dyn))
    rank = len(batch) + len(offset_sizes)
    out, bi, oi = [], iter(batch), iter(offsets)
    for d in range(rank):
        out.append(next(oi) if d in dn.offset_dims else next(bi))
    return Shape.array(operand.element_type, [z for z, _ in out], None, [f for _, f in out])


def _scatter(instr) -> Shape:
    n = len(instr.operands)
    if n < 3 or (n - 1) % 2:
        _fail(instr, f"scatter needs operands, indices and updates, got {n} operands")
    k = (n - 1) // 2
    operands = [_array(instr, i) for i in range(k)]
    updates = [_array(instr, i) for i in range(k + 1, n)]
    dn = instr.scatter_dimension_numbers
    if dn is None:
        _fail(instr, "scatter needs dimension numbers")
    scalars = [Shape.scalar(s.element_type) for s in operands]
    _signature_check(instr, instr.to_apply, scalars + scalars,
                     scalars[0] if k == 1 else Shape.tuple_of(scalars), "to_apply")
    for u, s in zip(updates, operands):
        if u.element_type is not s.element_type:
            _fail(instr, f"updates {u} and operand {s} element types differ")
    return _result(instr, [s.without_layout() for s in operands])


# ---------------------------------------------------------------- sort, tuples, control flow
def _sort(instr) -> Shape:
    if not instr.operands:
        _fail(instr, "sort needs operands")
    shapes = [_array(instr, i) for i in range(len(instr.operands))]
    if any(s.dimensions != shapes[0].dimensions for s in shapes):
        _fail(instr, "sort operands must have the same dimensions")
    _check_dims(instr, instr.dimensions, shapes[0].rank)
    if len(instr.dimensions) != 1:
        _fail(instr, "sort needs exactly one dimension")
    params = [Shape.scalar(s.element_type) for s in shapes for _ in (0, 1)]
    _signature_check(instr, instr.to_apply, params, Shape.scalar(T.PRED), "comparator")
    return _result(instr, [s.without_layout() for s in shapes])


def _topk(instr) -> Shape:
    """(values, s32 indices) of the k largest (smallest) elements along the last dimension."""
    _expect_operands(instr, 1)
    s = _array(instr, 0)
    if s.rank < 1:
        _fail(instr, "topk needs an operand of rank >= 1")
    if instr.k is None or not 0 <= instr.k <= s.dimensions[-1]:
        _fail(instr, f"k={instr.k} is out of range for the last dimension of {s}")
    dims = s.dimensions[:-1] + (instr.k,)
    return Shape.tuple_of([Shape.array(s.element_type, dims), Shape.array(T.S32, dims)])


def _tuple(instr) -> Shape:
    return Shape.tuple_of(o.shape.without_layout() for o in instr.operands)


def _get_tuple_element(instr) -> Shape:
    _expect_operands(instr, 1)
    s = instr.operands[0].shape
    if not s.is_tuple or instr.tuple_index is None or not 0 <= instr.tuple_index < len(s.tuple_shapes):
        _fail(instr, f"index {instr.tuple_index} out of range for {s}")
    return s.tuple_shapes[instr.tuple_index].without_layout()


def _call(instr) -> Shape:
    return _signature_check(instr, instr.to_apply, [o.shape for o in instr.operands], None, "to_apply")


def _conditional(instr) -> Shape:
    if not instr.operands:
        _fail(instr, "conditional needs a predicate or branch index")
    sel = _array(instr, 0)
    branches = instr.called_computations
    if not sel.is_scalar or sel.element_type not in (T.PRED, T.S32):
        _fail(instr, f"branch selector must be pred[] or s32[], got {sel}")
    if (sel.element_type is T.PRED and len(branches) != 2) or not branches:
        _fail(instr, f"a {sel} selector needs {'2' if sel.element_type is T.PRED else '>= 1'} branches")
    if len(instr.operands) != len(branches) + 1:
        _fail(instr, f"needs one operand per branch ({len(branches)}), got {len(instr.operands) - 1}")
    result = None
    for comp, arg in zip(branches, instr.operands[1:]):
        root = _signature_check(instr, comp, [arg.shape], result, "branch")
        result = result or root
    return result.without_layout()


def _while(instr) -> Shape:
    _expect_operands(instr, 1)
    s = instr.operands[0].shape
    _signature_check(instr, instr.while_condition, [s], Shape.scalar(T.PRED), "condition")
    _signature_check(instr, instr.while_body, [s], s, "body")
    return s.without_layout()


def _fusion(instr) -> Shape:
    return _signature_check(instr, instr.fused_computation, [o.shape for o in instr.operands], None,
                            "fused computation")


def _map(instr) -> Shape:
    shapes = [_array(instr, i) for i in range(len(instr.operands))]
    if not shapes or any(s.dimensions != shapes[0].dimensions for s in shapes):
        _fail(instr, "map operands must have the same dimensions")
    root = _signature_check(instr, instr.to_apply, [Shape.scalar(s.element_type) for s in shapes], None,
                            "to_apply")
    if not root.is_scalar:
        _fail(instr, f"mapped computation must return a scalar, got {root}")
    return Shape.array(root.element_type, shapes[0].dimensions)


def _rng(instr) -> Shape:
    _expect_operands(instr, 2)
    a, b = _array(instr, 0), _array(instr, 1)
    out = _given(instr)
    if not (a.is_scalar and b.is_scalar) or a.element_type is not out.element_type or b.element_type is not a.element_type:
        _fail(instr, f"rng parameters must be {out.element_type.value} scalars")
    return out


def _rng_get_and_update_state(instr) -> Shape:
    _expect_operands(instr, 0)
    out = _given(instr)
    if out.is_tuple or out.element_type is not T.U64 or out.dimensions != (2,):
        _fail(instr, f"rng-get-and-update-state must be u64[2], got {out}")
    return out


def _rng_bit_generator(instr) -> Shape:
    _expect_operands(instr, 1)
    out = _given(instr)
    state = _array(instr, 0)
    if not out.is_tuple or len(out.tuple_shapes) != 2 or not out.tuple_shapes[0].compatible(state):
        _fail(instr, f"result must be (state {state}, output), got {out}")
    return out


def _set_dimension_size(instr) -> Shape:
    _expect_operands(instr, 2)
    if not instr.operands[1].shape.compatible(Shape.scalar(T.S32)):
        _fail(instr, "size operand must be s32[]")
    s = _array(instr, 0)
    if instr.dimensions is None or len(instr.dimensions) != 1 or not 0 <= instr.dimensions[0] < s.rank:
        _fail(instr, f"needs one dimension of the operand's {s.rank}")
    return s.without_layout().with_dynamic_dimension(instr.dimensions[0])


def _constant(instr) -> Shape:
    s = _given(instr)
    if instr.literal is None and not instr.literal_elided:
        _fail(instr, "constant has no literal")
    return s


_RULES: dict[O, Callable] = {op: _unary for op in ops.ELEMENTWISE_UNARY - {O.COPY}}
_RULES.update({op: _binary for op in ops.ELEMENTWISE_BINARY})
_RULES.update({
    O.PARAMETER: _given, O.CONSTANT: _constant, O.IOTA: _iota, O.CUSTOM_CALL: _given,
    O.SELECT: _select, O.CLAMP: _clamp, O.CONVERT: _convert, O.BITCAST_CONVERT: _bitcast_convert,
    O.BITCAST: _bitcast, O.COPY: _same_as_operand, O.OPTIMIZATION_BARRIER: _same_as_operand,
    O.REDUCE_PRECISION: _reduce_precision, O.RESHAPE: _reshape, O.BROADCAST: _broadcast,
    O.TRANSPOSE: _transpose, O.REVERSE: _reverse, O.SLICE: _slice, O.DYNAMIC_SLICE: _dynamic_slice,
    O.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice, O.CONCATENATE: _concatenate, O.PAD: _pad,
    O.REDUCE: _reduce, O.REDUCE_WINDOW: _reduce_window, O.SELECT_AND_SCATTER: _select_and_scatter,
    O.DOT: _dot, O.CONVOLUTION: _convolution, O.GATHER: _gather, O.SCATTER: _scatter, O.SORT: _sort, O.TOPK: _topk,
    O.TUPLE: _tuple, O.GET_TUPLE_ELEMENT: _get_tuple_element, O.CALL: _call,
    O.CONDITIONAL: _conditional, O.WHILE: _while, O.FUSION: _fusion, O.MAP: _map, O.RNG: _rng,
    O.RNG_BIT_GENERATOR: _rng_bit_generator, O.RNG_GET_AND_UPDATE_STATE: _rng_get_and_update_state,
    O.SET_DIMENSION_SIZE: _set_dimension_size,
    O.GET_DIMENSION_SIZE: lambda i: Shape.scalar(T.S32),
    O.PARTITION_ID: lambda i: Shape.scalar(T.U32), O.REPLICA_ID: lambda i: Shape.scalar(T.U32),
    O.AFTER_ALL: lambda i: Shape.token(),
})


def infer_shape(instr) -> Shape:
    """The shape ``instr`` must have given its operands and attributes (default layout)."""
    rule = _RULES.get(instr.opcode)
    if rule is None:
        raise InvalidArgumentError(f"no shape inference for opcode {instr.opcode.text}")
    return rule(instr)
