"""TF's structured Xla* ops: the XlaBuilder calls ``tensorflow.compiler.tf2xla.python.xla`` and jax2tf emit
(tf2xla's xla_conv_op.cc, xla_reduce_op.cc, xla_select_and_scatter_op.cc, xla_variadic_sort_op.cc,
xla_gather/scatter in gather_scatter_ops.cc, xla_broadcast_helper_op.cc, sharding_util_ops.cc,
dynamic-dimension and custom-call ops, xla_dequantize_op.cc).

Stage: lowering. Each op maps onto one HLO instruction (or a short fixed expansion):

* dimension numbers arrive as serialized ``xla_data_pb2`` protos in a string attr and become our attrs;
  window sizes, strides, dilations and paddings are compile-time-constant inputs (padding ``[n, 2]``);
* function attrs (reducer, comparator, select/scatter, update computation) are lowered into scalar
  computations whose parameters are the function's arguments in order (tf2xla compiles them without a
  tuple argument), so a variadic reducer takes ``(acc_0..acc_{n-1}, x_0..x_{n-1})`` and a sort
  comparator ``(lhs_0, rhs_0, lhs_1, rhs_1, ...)``;
* XlaWhile/XlaIf are the functional While/If (one tuple parameter, as tf2xla compiles them);
* dynamic dimensions: our shapes are static, so XlaSetDynamicDimensionSize with a compile-time size is
  the slice TF hands back (the dynamic dimension's first ``size`` elements) and
  XlaRemoveDynamicDimensionSize returns the padded buffer it came from; a non-constant size is an error;
* XlaConcatND/XlaSplitND (and their resource forms AssignVariableXlaConcatND/ReadVariableXlaSplitND) tile
  a tensor over a grid (row-major tile order), padding/unpadding the high end
  of each dimension with zeros;
* XlaCustomCall(V2) emit ``custom-call`` with the target; running it needs a target we implement (TF's
  XLA:CPU likewise needs one registered);
* XlaDequantize unpacks u32 words into 4 u8 (most significant byte first) and computes in bf16 as
  xla/hlo/builder/lib/quantize.h's ``Dequantize<uint8>`` (MIN_COMBINED only, as XLA).
"""
from __future__ import annotations

from typing import Sequence

import ml_dtypes
import numpy as np

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo import attrs as A
from tfxla_cluster.hlo.ir import HloComputation, HloInstruction
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tfxla_cluster.tf2hlo import control_flow, types
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.registry import lowers


# ---------------------------------------------------------------- helpers
def _proto(ctx, attr: str, cls_name: str):
    from tensorflow.compiler.xla import xla_data_pb2

    msg = getattr(xla_data_pb2, cls_name)()
    raw = ctx.node.attr(attr).s
    try:
        msg.ParseFromString(raw)
    except Exception as e:  # a malformed proto is the user's input
        raise InvalidArgumentError(f"{ctx.op} ({ctx.name}): cannot parse {attr} as xla.{cls_name}: {e}") from None
    return msg


def scalar_computation(ctx, fname: str, param_types: Sequence[P], name: str) -> HloComputation:
    """Library function ``fname`` as a computation of scalar parameters (its arguments in order); one
    result is the root, several are a tuple."""
    sb = ctx.b.sub_builder(name)
    params = [sb.parameter(i, Shape.scalar(t), f"arg{i}") for i, t in enumerate(param_types)]
    sub, rets = ctx.lowerer.lower_function_body(fname, params, sb)
    outs = [sub.retval_hlo(i) for i in range(len(rets))]
    for o in outs:
        if o.shape.rank:
            raise InvalidArgumentError(f"{ctx.op} ({ctx.name}): function {fname} must return scalars, got {o.shape}")
    return sb.build(outs[0] if len(outs) == 1 else sb.tuple(outs))


def _vector(ctx, index: int, n: int, what: str) -> list[int]:
    v = ctx.const_ints(index)
    if len(v) != n:
        raise InvalidArgumentError(f"{ctx.op} ({ctx.name}): {what} must have {n} entries, got {len(v)}")
    return v


def _padding(ctx, index: int, n: int) -> list[tuple[int, int]]:
    p = np.asarray(ctx.const_input(index)).astype(np.int64)
    if p.shape != (n, 2):
        raise InvalidArgumentError(f"{ctx.op} ({ctx.name}): padding must have shape [{n},2], got {list(p.shape)}")
    return [(int(a), int(c)) for a, c in p]


# ---------------------------------------------------------------- convolution
@lowers("XlaConv", "XlaConvV2")
def _xla_conv(ctx, node):
    b = ctx.b
    lhs, rhs = ctx.input(0), ctx.input(1)
    n = lhs.shape.rank - 2
    if n < 0 or rhs.shape.rank != lhs.shape.rank:
        raise InvalidArgumentError(f"{ctx.op}: lhs and rhs must have the same rank >= 2")
    strides = _vector(ctx, 2, n, "window_strides")
    padding = _padding(ctx, 3, n)
    lhs_dil = _vector(ctx, 4, n, "lhs_dilation")
    rhs_dil = _vector(ctx, 5, n, "rhs_dilation")
    groups = ctx.const_int(6)
    dn = _proto(ctx, "dimension_numbers", "ConvolutionDimensionNumbers")
    cdn = A.ConvolutionDimensionNumbers(
        dn.input_batch_dimension, dn.input_feature_dimension, tuple(dn.input_spatial_dimensions),
        dn.kernel_input_feature_dimension, dn.kernel_output_feature_dimension, tuple(dn.kernel_spatial_dimensions),
        dn.output_batch_dimension, dn.output_feature_dimension, tuple(dn.output_spatial_dimensions))
    window = A.Window.make([rhs.shape.dimensions[d] for d in cdn.kernel_spatial_dimensions], strides, padding,
                           lhs_dil, rhs_dil)
    out_t = ctx.output_type(0)
    # preferred_element_type: operands widened exactly to the result type (int8→int32, bf16→f32).
    lhs, rhs = xl.convert(b, lhs, out_t), xl.convert(b, rhs, out_t)
    batch_groups = int(ctx.attr("batch_group_count", 1)) if ctx.op == "XlaConvV2" else 1
    return [b.convolution(lhs, rhs, window, cdn, feature_group_count=groups, batch_group_count=batch_groups)]


# ---------------------------------------------------------------- gather / scatter
@lowers("XlaGather")
def _xla_gather(ctx, node):
    dn = _proto(ctx, "dimension_numbers", "GatherDimensionNumbers")
    gdn = A.GatherDimensionNumbers(tuple(dn.offset_dims), tuple(dn.collapsed_slice_dims), tuple(dn.start_index_map),
                                   dn.index_vector_dim, tuple(dn.operand_batching_dims),
                                   tuple(dn.start_indices_batching_dims))
    return [ctx.b.gather(ctx.input(0), ctx.input(1), gdn, ctx.const_ints(2),
                         indices_are_sorted=bool(ctx.attr("indices_are_sorted", False)))]


@lowers("XlaScatter")
def _xla_scatter(ctx, node):
    operand, indices, updates = ctx.input(0), ctx.input(1), ctx.input(2)
    dn = _proto(ctx, "dimension_numbers", "ScatterDimensionNumbers")
    sdn = A.ScatterDimensionNumbers(tuple(dn.update_window_dims), tuple(dn.inserted_window_dims),
                                    tuple(dn.scatter_dims_to_operand_dims), dn.index_vector_dim,
                                    tuple(dn.input_batching_dims), tuple(dn.scatter_indices_batching_dims))
    et = operand.shape.element_type
    comp = scalar_computation(ctx, ctx.attr("update_computation"), [et, et], f"{node.name}-update")
    return [ctx.b.scatter(operand, indices, updates, comp, sdn,
                          indices_are_sorted=bool(ctx.attr("indices_are_sorted", False)))]


# ---------------------------------------------------------------- reductions
def _reduce(ctx, node, operands: list[HloInstruction], inits: list[HloInstruction]):
    b = ctx.b
    if len(operands) != len(inits) or not operands:
        raise InvalidArgumentError(f"{ctx.op}: need as many init values as inputs")
    dims = [int(d) for d in ctx.attr("dimensions_to_reduce")]
    rank = operands[0].shape.rank
    for d in dims:
        if not 0 <= d < rank:
            raise InvalidArgumentError(f"Invalid reduction dimension {d} for input of rank {rank}")
    for op in operands[1:]:
        if op.shape.dimensions != operands[0].shape.dimensions:
            raise InvalidArgumentError(f"{ctx.op}: all inputs must have the same shape")
    for init in inits:
        if init.shape.rank:
            raise InvalidArgumentError(f"{ctx.op}: init values must be scalars")
    types_ = [o.shape.element_type for o in operands]
    comp = scalar_computation(ctx, ctx.attr("reducer"), types_ + types_, f"{node.name}-reducer")
    r = b.reduce(operands, inits, dims, comp)
    return [r] if len(operands) == 1 else [b.get_tuple_element(r, i) for i in range(len(operands))]


@lowers("XlaReduce")
def _xla_reduce(ctx, node):
    return _reduce(ctx, node, [ctx.input(0)], [ctx.input(1)])


@lowers("XlaVariadicReduce", "XlaVariadicReduceV2")
def _xla_variadic_reduce(ctx, node):
    n = ctx.num_inputs // 2
    return _reduce(ctx, node, [ctx.input(i) for i in range(n)], [ctx.input(n + i) for i in range(n)])


@lowers("XlaReduceWindow")
def _xla_reduce_window(ctx, node):
    x, init = ctx.input(0), ctx.input(1)
    n = x.shape.rank
    window = A.Window.make(_vector(ctx, 2, n, "window_dimensions"), _vector(ctx, 3, n, "window_strides"),
                           _padding(ctx, 6, n), _vector(ctx, 4, n, "base_dilations"),
                           _vector(ctx, 5, n, "window_dilations"))
    et = x.shape.element_type
    comp = scalar_computation(ctx, ctx.attr("computation"), [et, et], f"{node.name}-reducer")
    return [ctx.b.reduce_window(x, init, window, comp)]


@lowers("XlaSelectAndScatter")
def _xla_select_and_scatter(ctx, node):
    operand, source, init = ctx.input(0), ctx.input(4), ctx.input(5)
    n = operand.shape.rank
    window = A.Window.make(_vector(ctx, 1, n, "window_dimensions"), _vector(ctx, 2, n, "window_strides"),
                           _padding(ctx, 3, n))
    et = operand.shape.element_type
    select = scalar_computation(ctx, ctx.attr("select"), [et, et], f"{node.name}-select")
    if select.root.shape.element_type is not P.PRED:
        raise InvalidArgumentError("select function must return a bool")
    scatter = scalar_computation(ctx, ctx.attr("scatter"), [et, et], f"{node.name}-scatter")
    return [ctx.b.select_and_scatter(operand, select, window, source, init, scatter)]


@lowers("XlaVariadicSort")
def _xla_variadic_sort(ctx, node):
    b = ctx.b
    n = ctx.num_inputs - 1
    operands = [ctx.input(i) for i in range(n)]
    dim = ctx.const_int(n)
    rank = operands[0].shape.rank
    dim = ctx.normalize_axis(dim, rank, "dimension")
    ptypes = [t for o in operands for t in (o.shape.element_type,) * 2]
    comp = scalar_computation(ctx, ctx.attr("comparator"), ptypes, f"{node.name}-comparator")
    s = b.sort(operands, dim, comp, is_stable=bool(ctx.attr("is_stable", False)))
    return [s] if n == 1 else [b.get_tuple_element(s, i) for i in range(n)]


# ---------------------------------------------------------------- control flow
lowers("XlaWhile")(control_flow._while)
lowers("XlaIf")(control_flow._if)


# ---------------------------------------------------------------- shapes
@lowers("XlaBroadcastHelper")
def _xla_broadcast_helper(ctx, node):
    lhs, rhs = ctx.input(0), ctx.input(1)
    dims = ctx.const_ints(2)
    lr, rr = lhs.shape.rank, rhs.shape.rank
    if not dims:
        if not (lr == rr or lr == 0 or rr == 0):
            raise InvalidArgumentError("If broadcast_dims is empty, both arguments must have equal rank; argument "
                                       "shapes, or at least one argument must be a scalar")
        return [lhs, rhs]
    small, big = (lhs, rhs) if lr < rr else (rhs, lhs)
    if len(dims) != small.shape.rank:
        raise InvalidArgumentError(f"broadcast_dims must have size equal to the smaller argument rank; "
                                   f"broadcast_dims: [{','.join(map(str, dims))}]")
    if len(set(dims)) != len(dims) or dims != sorted(dims):
        raise InvalidArgumentError(f"Duplicate or nonmonotonic dimension in broadcast_dims; broadcast_dims: "
                                   f"[{','.join(map(str, dims))}]")
    out = [1] * big.shape.rank
    for i, d in enumerate(dims):
        if not 0 <= d < len(out):
            raise InvalidArgumentError(f"Invalid broadcast dimension ({d})")
        out[d] = small.shape.dimensions[i]
    widened = ctx.b.broadcast(small, out, dims)
    return [widened, rhs] if lr < rr else [lhs, widened]


@lowers("XlaSetBound")
def _xla_set_bound(ctx, node):
    # The bound only informs XLA's dynamic padder; the value is the input.
    x = ctx.input(0)
    if x.shape.rank:
        raise InvalidArgumentError("XlaSetBound: input must be a scalar")
    ctx.const_int(1)  # TF requires a constant bound
    return [x]


_DYNAMIC_ORIGIN = "_xla_dynamic_origin"


@lowers("XlaSetDynamicDimensionSize")
def _xla_set_dynamic_size(ctx, node):
    x = ctx.input(0)
    dim = ctx.normalize_axis(ctx.const_int(1), x.shape.rank, "dim_index")
    size = ctx.try_const_input(2)
    if size is None:
        raise UnimplementedError(f"{ctx.name}: XlaSetDynamicDimensionSize with a size known only at run time "
                                 "needs dynamic shapes, which this implementation does not have")
    size = int(np.asarray(size).reshape(()))
    if not 0 <= size <= x.shape.dimensions[dim]:
        raise InvalidArgumentError(f"size {size} is out of range [0, {x.shape.dimensions[dim]}] for dimension {dim}")
    limits = list(x.shape.dimensions)
    limits[dim] = size
    out = ctx.b.slice(x, [0] * x.shape.rank, limits)
    ctx.lowerer.__dict__.setdefault(_DYNAMIC_ORIGIN, {})[id(out)] = (out, x, dim)
    return [out]


@lowers("XlaRemoveDynamicDimensionSize")
def _xla_remove_dynamic_size(ctx, node):
    x = ctx.input(0)
    dim = ctx.normalize_axis(ctx.const_int(1), x.shape.rank, "dim_index")
    origin = ctx.lowerer.__dict__.get(_DYNAMIC_ORIGIN, {}).get(id(x))
    if origin is not None and origin[0] is x and origin[2] == dim:
        return [origin[1]]   # the static buffer the dynamic view was cut from
    return [x]               # already static in that dimension


def _tile_grid(counts: Sequence[int]):
    """Tile coordinates in row-major order (TF's XlaConcatND/XlaSplitND order)."""
    return [tuple(int(c) for c in idx) for idx in np.ndindex(*counts)]


def _split_nd(ctx, node, x: HloInstruction) -> list[HloInstruction]:
    b = ctx.b
    counts = [int(c) for c in ctx.attr("num_splits")]
    pads = [int(p) for p in ctx.attr("paddings")] or [0] * len(counts)
    if len(counts) != x.shape.rank or len(pads) != len(counts):
        raise InvalidArgumentError(f"num_splits and paddings must have the input's rank {x.shape.rank}")
    padded = [d + p for d, p in zip(x.shape.dimensions, pads)]
    for d, c in zip(padded, counts):
        if c <= 0 or d % c:
            raise InvalidArgumentError(f"num_splits {counts} must evenly divide the padded shape {padded}")
    if any(pads):
        x = b.pad(x, xl.scalar(b, 0, x.shape.element_type), [(0, p) for p in pads])
    sizes = [d // c for d, c in zip(padded, counts)]
    outs = []
    for tile in _tile_grid(counts):
        start = [t * s for t, s in zip(tile, sizes)]
        outs.append(b.slice(x, start, [a + s for a, s in zip(start, sizes)]))
    if len(outs) != len(node.outputs):
        raise InvalidArgumentError(f"{ctx.op} produces {len(outs)} tiles for {len(node.outputs)} outputs")
    return outs


@lowers("XlaSplitND")
def _xla_split_nd(ctx, node):
    return _split_nd(ctx, node, ctx.input(0))


@lowers("ReadVariableXlaSplitND")
def _read_variable_split_nd(ctx, node):
    r = ctx.resource(0)
    if r.element_type is not ctx.attr_type("T"):
        raise InvalidArgumentError(f"Trying to read variable with wrong dtype. Expected "
                                   f"{ctx.attr_type('T').value} got {r.element_type.value}")
    return _split_nd(ctx, node, r.read(node.name))


def _concat_nd(b, tiles: list[HloInstruction], counts: list[int], pads: list[int]) -> HloInstruction:
    grid = np.empty(counts, dtype=object)
    for t, tile in zip(_tile_grid(counts), tiles):
        grid[t] = tile
    # Join the grid's last axis (tensor axis ``axis``) until one tensor is left.
    for axis in reversed(range(len(counts))):
        joined = np.empty(grid.shape[:-1], dtype=object)
        for idx in np.ndindex(*grid.shape[:-1]):
            row = list(grid[idx])
            joined[idx] = row[0] if len(row) == 1 else b.concatenate(row, axis)
        grid = joined
    whole = grid[()]
    if any(pads):
        dims = whole.shape.dimensions
        whole = b.slice(whole, [0] * len(dims), [d - p for d, p in zip(dims, pads)])
    return whole


def _concat_tiles(ctx, tiles: list[HloInstruction]) -> HloInstruction:
    counts = [int(c) for c in ctx.attr("num_concats")]
    pads = [int(p) for p in ctx.attr("paddings")] or [0] * len(counts)
    if int(np.prod(counts)) != len(tiles):
        raise InvalidArgumentError(f"num_concats {counts} needs {int(np.prod(counts))} inputs, got {len(tiles)}")
    if len(counts) != tiles[0].shape.rank or len(pads) != len(counts):
        raise InvalidArgumentError(f"num_concats and paddings must have the inputs' rank {tiles[0].shape.rank}")
    for t in tiles[1:]:
        if t.shape.dimensions != tiles[0].shape.dimensions:
            raise InvalidArgumentError(f"{ctx.op}: all inputs must have the same shape")
    for d, c, p in zip(tiles[0].shape.dimensions, counts, pads):
        if p > d * c:
            raise InvalidArgumentError(f"paddings {pads} exceed the concatenated shape")
    return _concat_nd(ctx.b, tiles, counts, pads)


@lowers("XlaConcatND")
def _xla_concat_nd(ctx, node):
    return [_concat_tiles(ctx, [ctx.input(i) for i in range(ctx.num_inputs)])]


@lowers("AssignVariableXlaConcatND")
def _assign_variable_concat_nd(ctx, node):
    r = ctx.resource(0)
    value = _concat_tiles(ctx, [ctx.input(i) for i in range(1, ctx.num_inputs)])
    if r.value is not None and value.shape.dimensions != r.dims:
        raise InvalidArgumentError(f"Trying to assign to variable with tensor with wrong shape. Expected "
                                   f"[{','.join(map(str, r.dims))}] got [{','.join(map(str, value.shape.dimensions))}]")
    r.assign(value)
    return []


# ---------------------------------------------------------------- custom calls
def _backend_config(cc: HloInstruction, ctx) -> None:
    config = str(ctx.attr("backend_config", ""))
    if config:
        cc.raw_attributes["backend_config"] = '"' + A.c_escape(config) + '"'


@lowers("XlaCustomCall")
def _xla_custom_call(ctx, node):
    shape = ctx.attr("shape")
    if shape is None or any(d is None or d < 0 for d in shape):
        raise InvalidArgumentError("XlaCustomCall needs a fully defined result shape")
    out = Shape.array(ctx.attr_type("dtype"), tuple(shape))
    cc = ctx.b.custom_call(str(ctx.attr("target_name")), ctx.inputs(), out)
    _backend_config(cc, ctx)
    return [cc]


@lowers("XlaCustomCallV2")
def _xla_custom_call_v2(ctx, node):
    dtypes = ctx.attr("result_dtypes") or []
    shapes = ctx.attr("result_shapes") or []
    results = []
    for t, s in zip(dtypes, shapes):
        if s is None or any(d is None or d < 0 for d in s):
            raise InvalidArgumentError("XlaCustomCallV2 needs fully defined result shapes")
        results.append(Shape.array(types.element_type(t), tuple(s)))
    b = ctx.b
    cc = b.custom_call(str(ctx.attr("call_target_name")), ctx.inputs(), Shape.tuple_of(results))
    _backend_config(cc, ctx)
    if bool(ctx.attr("has_side_effect", False)):
        cc.raw_attributes["custom_call_has_side_effect"] = "true"
    return [b.get_tuple_element(cc, i) for i in range(len(results))]


# ---------------------------------------------------------------- dequantize
@lowers("XlaDequantize")
def _xla_dequantize(ctx, node):
    b = ctx.b
    x = ctx.input(0)
    if x.shape.element_type is not P.U32:
        raise InvalidArgumentError("Only U32 is supported for input type of xla::Dequantize Op.")
    if str(ctx.attr("mode")) != "MIN_COMBINED":
        raise InvalidArgumentError("Only MIN_COMBINED mode is supported in xla::Dequantize Op.")
    bf16 = ml_dtypes.bfloat16
    lo, hi = bf16(float(ctx.attr("min_range"))), bf16(float(ctx.attr("max_range")))
    # tsl::bfloat16 arithmetic: each operation in float, rounded back to bf16.
    scale = bf16(np.float32(bf16(np.float32(hi) - np.float32(lo))) / np.float32(bf16(255.0)))
    dims = x.shape.dimensions
    wide = dims + (4,)
    words = b.broadcast(x, wide, tuple(range(len(dims))))
    shifts = b.broadcast(b.constant(np.array([24, 16, 8, 0], np.uint32), P.U32), wide, (len(dims),))
    bytes_ = xl.and_(b, b.shift_right_logical(words, shifts), np.uint32(0xFF))
    v = b.convert(bytes_, P.BF16)
    v = xl.add(b, xl.mul(b, xl.add(b, v, 0.0), scale), lo)
    out = b.reshape(v, dims[:-1] + (dims[-1] * 4,)) if dims else b.reshape(v, (4,))
    if bool(ctx.attr("transpose_output", False)):
        out = b.transpose(out, tuple(reversed(range(out.shape.rank))))
    return [out]


# ---------------------------------------------------------------- XlaCallModule (jax2tf's StableHLO)
def _stablehlo_to_hlo_text(module_bytes: bytes) -> str:
    """The HLO text of a serialized StableHLO module (portable artifact or MLIR text/bytecode), through
    jaxlib's MLIR bindings: reading StableHLO needs MLIR, which jaxlib carries and TF's python does not
    expose. jaxlib is optional; without it XlaCallModule is unimplemented."""
    try:
        from jax._src.interpreters import mlir as jax_mlir
        from jax._src.lib import _jax
    except (ImportError, AttributeError):  # jaxlib missing or of another layout
        raise UnimplementedError("XlaCallModule needs jaxlib (pip install jaxlib) to read its StableHLO module") \
            from None
    try:
        context = jax_mlir.make_ir_context()
        try:
            text = str(_jax.mlir.deserialize_portable_artifact(module_bytes, context=context))
        except Exception:   # not a portable artifact: plain MLIR text or bytecode
            text = module_bytes.decode("utf-8") if module_bytes[:4] != b"ML\xefR" else module_bytes
        if isinstance(text, str) and "?x" in text:
            raise UnimplementedError("XlaCallModule: the module has shape-polymorphic (dynamic) dimensions; "
                                     "only static shapes are supported")
        computation = _jax.mlir.mlir_module_to_xla_computation(text, use_tuple_args=False, return_tuple=True)
        return computation.as_hlo_text()
    except UnimplementedError:
        raise
    except Exception as e:  # MLIR's and XLA's converters raise many types: one typed error, cause chained
        raise InvalidArgumentError(f"XlaCallModule: cannot convert the StableHLO module to HLO: "
                                   f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from e


@lowers("XlaCallModule")
def _xla_call_module(ctx, node):
    from tfxla_cluster.hlo.parser import parse_module

    b = ctx.b
    platforms = [str(p) for p in (ctx.attr("platforms", []) or [])]
    if platforms and "CPU" not in platforms and "platform" not in (ctx.attr("disabled_checks", []) or []):
        raise InvalidArgumentError(f"The current platform CPU is not among the platforms required by the module: "
                                   f"[{', '.join(platforms)}]")
    if bool(ctx.attr("has_token_input_output", False)):
        raise UnimplementedError("XlaCallModule with token inputs/outputs (effects) is not supported")
    if ctx.attr("function_list", []):
        raise UnimplementedError("XlaCallModule calling back into TF functions (function_list) is not supported")
    if ctx.attr("dim_args_spec", []):
        raise UnimplementedError("XlaCallModule with dim_args_spec (shape polymorphism) is not supported")
    text = _stablehlo_to_hlo_text(ctx.node.attr("module").s)
    module = parse_module(text)
    entry = module.entry
    args = ctx.inputs()
    if len(platforms) > 1:   # the module's first argument selects the platform
        args = [xl.scalar(b, platforms.index("CPU") if "CPU" in platforms else 0, P.S32)] + args
    params = sorted((i for i in entry.instructions if i.opcode.text == "parameter"),
                    key=lambda i: i.parameter_number)
    if len(params) != len(args):
        raise InvalidArgumentError(f"XlaCallModule: the module takes {len(params)} arguments, the op has "
                                   f"{len(args)} inputs")
    for p, a in zip(params, args):
        if p.shape.element_type is not a.shape.element_type or p.shape.dimensions != a.shape.dimensions:
            raise InvalidArgumentError(f"XlaCallModule: argument {p.parameter_number} has shape {a.shape}, the "
                                       f"module expects {p.shape}")
    for comp in module.computations:   # move them into our module (uniquified when it is built)
        comp.parent = None
    entry.name = f"{node.name.replace('/', '_')}.module"
    call = b.call(entry, args)
    n = len(node.outputs)
    if not call.shape.is_tuple or len(call.shape.tuple_shapes) != n:
        raise InvalidArgumentError(f"XlaCallModule: the module returns {call.shape}, the op has {n} outputs")
    outs = [b.get_tuple_element(call, i) for i in range(n)]
    for i, o in enumerate(outs):
        want = ctx.output_type(i)
        if o.shape.element_type is not want:
            raise InvalidArgumentError(f"XlaCallModule: result {i} is {o.shape.element_type.value}, Tout says "
                                       f"{want.value}")
    return outs
