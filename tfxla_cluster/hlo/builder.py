"""``HloBuilder``: build one computation op by op, with shapes inferred (XLA's ``XlaBuilder`` role).

    b = HloBuilder("main")
    x = b.parameter(0, Shape.array(F32, [8, 16]), "x")
    w = b.parameter(1, Shape.array(F32, [16, 4]), "w")
    with b.metadata(op_type="MatMul", op_name="dense/MatMul"):
        y = b.dot(x, w, lhs_contracting=[1], rhs_contracting=[0])
    zero = b.broadcast(b.constant(0.0, F32), y.shape.dimensions)
    b.maximum(y, zero)
    module = HloModule("m"); module.add_entry_computation(b.build())

Every method returns the new ``HloInstruction``; its shape comes from ``shape_inference`` (so a bad
combination fails at once with ``InvalidArgumentError``), its default name is the opcode's text
("add", "add.1", ...), or ``name=`` when given. Elementwise ops get one method per opcode, named after
the XLA text with ``-`` → ``_`` (``exponential``, ``log_plus_one``, ``shift_right_logical``) plus the
short aliases in ``_ALIASES`` (``exp``, ``neg``, ``sub``, ``and_``, ...). Called computations are built
with their own builders (``make_scalar_computation`` covers the usual reducers) and are added to the
module together with their caller.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo import attrs as A
from tfxla_cluster.hlo import opcode as ops
from tfxla_cluster.hlo.ir import HloComputation, HloInstruction
from tfxla_cluster.hlo.literal import make_literal
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType, Shape, primitive_type_from_dtype
from tfxla_cluster.hlo.shape_inference import infer_shape

Ints = Sequence[int]


class HloBuilder:
    """Appends instructions to a new ``HloComputation``; ``build()`` returns it."""

    def __init__(self, name: str) -> None:
        self.computation = HloComputation(name)
        self._metadata: A.OpMetadata | None = None

    # ---------------------------------------------------------------- plumbing
    @contextmanager
    def metadata(self, op_type: str = "", op_name: str = "", source_file: str = "",
                 source_line: int = 0) -> Iterator[None]:
        """Attach this metadata to every instruction created inside the ``with`` block."""
        saved = self._metadata
        self._metadata = A.OpMetadata(op_type, op_name, source_file, source_line)
        try:
            yield
        finally:
            self._metadata = saved

    def instruction(self, opcode: O, operands: Sequence[HloInstruction] = (), shape: Shape | None = None,
                    name: str | None = None, **fields) -> HloInstruction:
        """Create, shape-check and append a raw instruction (the generic path every method uses)."""
        for o in operands:
            if o.parent is not self.computation:
                raise InvalidArgumentError(
                    f"operand %{o.name} of {opcode.text} belongs to another computation")
        instr = HloInstruction(name or opcode.text, opcode, shape, list(operands), **fields)
        inferred = infer_shape(instr)
        if shape is not None and not shape.compatible(inferred):
            raise InvalidArgumentError(f"{opcode.text}: requested shape {shape} but operands give {inferred}")
        if shape is not None and inferred.dynamic_dimensions and not shape.is_dynamic and shape.is_array:
            shape = shape.with_dynamic_dimensions(inferred.dynamic_dimensions)  # bounds flow on (convert, broadcast)
        instr.shape = shape if shape is not None else inferred  # a given shape keeps its layout
        instr.metadata = self._metadata
        return self.computation.add_instruction(instr)

    def build(self, root: HloInstruction | None = None) -> HloComputation:
        comp = self.computation
        if not comp.instructions:
            raise InvalidArgumentError(f"computation {comp.name} has no instructions")
        comp.set_root(root if root is not None else comp.instructions[-1])
        return comp

    # ---------------------------------------------------------------- leaves
    def parameter(self, number: int, shape: Shape, name: str | None = None) -> HloInstruction:
        return self.instruction(O.PARAMETER, (), shape, name if name is not None else f"parameter.{number}",
                                parameter_number=number)

    def constant(self, value, element_type: PrimitiveType | None = None, name: str | None = None) -> HloInstruction:
        """A constant from a Python scalar, numpy array or (for tuples) a tuple of them."""
        if isinstance(value, tuple):
            parts = [np.asarray(v) for v in value]
            shape = Shape.tuple_of(Shape.array(primitive_type_from_dtype(p.dtype), p.shape) for p in parts)
        else:
            arr = np.asarray(value)
            if element_type is None:
                element_type = primitive_type_from_dtype(arr.dtype)
            shape = Shape.array(element_type, arr.shape)
        return self.instruction(O.CONSTANT, (), shape, name, literal=make_literal(value, shape))

    def iota(self, shape: Shape, iota_dimension: int, name: str | None = None) -> HloInstruction:
        return self.instruction(O.IOTA, (), shape, name, iota_dimension=iota_dimension)

    # ---------------------------------------------------------------- elementwise
    def unary(self, opcode: O, x: HloInstruction, name: str | None = None) -> HloInstruction:
        if opcode not in ops.ELEMENTWISE_UNARY:
            raise InvalidArgumentError(f"{opcode.text} is not an elementwise unary opcode")
        return self.instruction(opcode, (x,), None, name)

    def binary(self, opcode: O, x: HloInstruction, y: HloInstruction, name: str | None = None) -> HloInstruction:
        if opcode not in ops.ELEMENTWISE_BINARY or opcode is O.COMPARE:
            raise InvalidArgumentError(f"{opcode.text} is not an elementwise binary opcode (use compare)")
        return self.instruction(opcode, (x, y), None, name)

    def compare(self, x: HloInstruction, y: HloInstruction, direction: str | A.ComparisonDirection,
                comparison_type: A.ComparisonType | None = None, name: str | None = None) -> HloInstruction:
        direction = A.ComparisonDirection(direction) if isinstance(direction, str) else direction
        if comparison_type is A.default_comparison_type(x.shape.element_type):
            comparison_type = None
        return self.instruction(O.COMPARE, (x, y), None, name, comparison_direction=direction,
                                comparison_type=comparison_type)

    def select(self, pred: HloInstruction, on_true: HloInstruction, on_false: HloInstruction,
               name: str | None = None) -> HloInstruction:
        return self.instruction(O.SELECT, (pred, on_true, on_false), None, name)

    def clamp(self, lo: HloInstruction, x: HloInstruction, hi: HloInstruction, name: str | None = None) -> HloInstruction:
        return self.instruction(O.CLAMP, (lo, x, hi), None, name)

    def convert(self, x: HloInstruction, element_type: PrimitiveType, name: str | None = None) -> HloInstruction:
        return self.instruction(O.CONVERT, (x,), x.shape.with_element_type(element_type), name)

    def bitcast_convert(self, x: HloInstruction, element_type: PrimitiveType, name: str | None = None) -> HloInstruction:
        sb, db = x.shape.element_type.bit_width, element_type.bit_width
        dims = x.shape.dimensions
        dims = dims if sb == db else (dims + (sb // db,) if sb > db else dims[:-1])
        return self.instruction(O.BITCAST_CONVERT, (x,), Shape.array(element_type, dims), name)

    def reduce_precision(self, x: HloInstruction, exponent_bits: int, mantissa_bits: int,
                         name: str | None = None) -> HloInstruction:
        return self.instruction(O.REDUCE_PRECISION, (x,), None, name, exponent_bits=exponent_bits,
                                mantissa_bits=mantissa_bits)

    def map(self, operands: Sequence[HloInstruction], to_apply: HloComputation,
            name: str | None = None) -> HloInstruction:
        rank = operands[0].shape.rank
        return self.instruction(O.MAP, operands, None, name, dimensions=tuple(range(rank)),
                                called_computations=[to_apply])

    # ---------------------------------------------------------------- shape manipulation
    def broadcast(self, x: HloInstruction, dimensions: Ints, broadcast_dimensions: Ints = (),
                  name: str | None = None) -> HloInstruction:
        """``x`` broadcast to ``dimensions``; operand dim i becomes output dim ``broadcast_dimensions[i]``."""
        shape = Shape.array(x.shape.element_type, dimensions)
        return self.instruction(O.BROADCAST, (x,), shape, name, dimensions=tuple(broadcast_dimensions))

    def reshape(self, x: HloInstruction, dimensions: Ints, name: str | None = None) -> HloInstruction:
        return self.instruction(O.RESHAPE, (x,), Shape.array(x.shape.element_type, dimensions), name)

    def bitcast(self, x: HloInstruction, shape: Shape, name: str | None = None) -> HloInstruction:
        return self.instruction(O.BITCAST, (x,), shape, name)

    def copy(self, x: HloInstruction, name: str | None = None) -> HloInstruction:
        return self.instruction(O.COPY, (x,), None, name)

    def transpose(self, x: HloInstruction, permutation: Ints, name: str | None = None) -> HloInstruction:
        return self.instruction(O.TRANSPOSE, (x,), None, name, dimensions=tuple(permutation))

    def reverse(self, x: HloInstruction, dimensions: Ints, name: str | None = None) -> HloInstruction:
        return self.instruction(O.REVERSE, (x,), None, name, dimensions=tuple(dimensions))

    def slice(self, x: HloInstruction, starts: Ints, limits: Ints, strides: Ints | None = None,
              name: str | None = None) -> HloInstruction:
        strides = strides or [1] * len(starts)
        ranges = tuple(A.SliceRange(int(a), int(b), int(c)) for a, b, c in zip(starts, limits, strides))
        return self.instruction(O.SLICE, (x,), None, name, slices=ranges)

    def dynamic_slice(self, x: HloInstruction, start_indices: Sequence[HloInstruction], sizes: Ints,
                      name: str | None = None) -> HloInstruction:
        return self.instruction(O.DYNAMIC_SLICE, (x, *start_indices), None, name,
                                dynamic_slice_sizes=tuple(sizes))

    def dynamic_update_slice(self, x: HloInstruction, update: HloInstruction,
                             start_indices: Sequence[HloInstruction], name: str | None = None) -> HloInstruction:
        return self.instruction(O.DYNAMIC_UPDATE_SLICE, (x, update, *start_indices), None, name)

    def concatenate(self, operands: Sequence[HloInstruction], dimension: int,
                    name: str | None = None) -> HloInstruction:
        return self.instruction(O.CONCATENATE, operands, None, name, dimensions=(dimension,))

    def pad(self, x: HloInstruction, value: HloInstruction, config, name: str | None = None) -> HloInstruction:
        """``config`` is a ``PaddingConfig`` or ``[(low, high[, interior])]`` per dimension."""
        if not isinstance(config, A.PaddingConfig):
            config = A.PaddingConfig.of(config)
        return self.instruction(O.PAD, (x, value), None, name, padding_config=config)

    # ---------------------------------------------------------------- reductions and windows
    def reduce(self, operands, init_values, dimensions: Ints, to_apply: HloComputation,
               name: str | None = None) -> HloInstruction:
        """Reduce one operand (or a list, variadic) over ``dimensions`` with the scalar ``to_apply``."""
        operands = [operands] if isinstance(operands, HloInstruction) else list(operands)
        init_values = [init_values] if isinstance(init_values, HloInstruction) else list(init_values)
        return self.instruction(O.REDUCE, (*operands, *init_values), None, name,
                                dimensions=tuple(dimensions), called_computations=[to_apply])

    def reduce_window(self, operands, init_values, window: A.Window, to_apply: HloComputation,
                      name: str | None = None) -> HloInstruction:
        operands = [operands] if isinstance(operands, HloInstruction) else list(operands)
        init_values = [init_values] if isinstance(init_values, HloInstruction) else list(init_values)
        return self.instruction(O.REDUCE_WINDOW, (*operands, *init_values), None, name, window=window,
                                called_computations=[to_apply])

    def select_and_scatter(self, operand: HloInstruction, select: HloComputation, window: A.Window,
                           source: HloInstruction, init_value: HloInstruction, scatter: HloComputation,
                           name: str | None = None) -> HloInstruction:
        return self.instruction(O.SELECT_AND_SCATTER, (operand, source, init_value), None, name,
                                window=window, called_computations=[select, scatter])

    # ---------------------------------------------------------------- contractions
    def dot(self, lhs: HloInstruction, rhs: HloInstruction, lhs_contracting: Ints = (1,),
            rhs_contracting: Ints = (0,), lhs_batch: Ints = (), rhs_batch: Ints = (),
            precision: Sequence[A.Precision] | None = None, result_type: PrimitiveType | None = None,
            name: str | None = None) -> HloInstruction:
        """XLA DotGeneral; result dims are batch, lhs free, rhs free. Defaults give a matmul."""
        dn = A.DotDimensionNumbers(tuple(lhs_contracting), tuple(rhs_contracting), tuple(lhs_batch),
                                   tuple(rhs_batch))
        shape = None
        if result_type is not None:
            shape = infer_shape(HloInstruction("dot", O.DOT, Shape.scalar(result_type), [lhs, rhs],
                                               dot_dimension_numbers=dn))
        return self.instruction(O.DOT, (lhs, rhs), shape, name, dot_dimension_numbers=dn,
                                operand_precision=tuple(precision) if precision else None)

    def convolution(self, lhs: HloInstruction, rhs: HloInstruction, window: A.Window,
                    dimension_numbers: A.ConvolutionDimensionNumbers | str, feature_group_count: int = 1,
                    batch_group_count: int = 1, name: str | None = None) -> HloInstruction:
        if isinstance(dimension_numbers, str):
            dimension_numbers = A.ConvolutionDimensionNumbers.from_text(dimension_numbers)
        return self.instruction(O.CONVOLUTION, (lhs, rhs), None, name, window=window,
                                convolution_dimension_numbers=dimension_numbers,
                                feature_group_count=feature_group_count, batch_group_count=batch_group_count)

    def gather(self, operand: HloInstruction, start_indices: HloInstruction,
               dimension_numbers: A.GatherDimensionNumbers, slice_sizes: Ints,
               indices_are_sorted: bool = False, name: str | None = None) -> HloInstruction:
        return self.instruction(O.GATHER, (operand, start_indices), None, name,
                                gather_dimension_numbers=dimension_numbers, gather_slice_sizes=tuple(slice_sizes),
                                indices_are_sorted=indices_are_sorted)

    def scatter(self, operand: HloInstruction, scatter_indices: HloInstruction, updates: HloInstruction,
                to_apply: HloComputation, dimension_numbers: A.ScatterDimensionNumbers,
                indices_are_sorted: bool = False, unique_indices: bool = False,
                name: str | None = None) -> HloInstruction:
        return self.instruction(O.SCATTER, (operand, scatter_indices, updates), None, name,
                                scatter_dimension_numbers=dimension_numbers, called_computations=[to_apply],
                                indices_are_sorted=indices_are_sorted, unique_indices=unique_indices)

    def sort(self, operands, dimension: int, comparator: HloComputation, is_stable: bool = False,
             name: str | None = None) -> HloInstruction:
        operands = [operands] if isinstance(operands, HloInstruction) else list(operands)
        return self.instruction(O.SORT, operands, None, name, dimensions=(dimension,), is_stable=is_stable,
                                called_computations=[comparator])

    # ---------------------------------------------------------------- tuples and control flow
    def tuple(self, elements: Sequence[HloInstruction], name: str | None = None) -> HloInstruction:
        return self.instruction(O.TUPLE, elements, None, name)

    def get_tuple_element(self, t: HloInstruction, index: int, name: str | None = None) -> HloInstruction:
        return self.instruction(O.GET_TUPLE_ELEMENT, (t,), None, name, tuple_index=index)

    def call(self, computation: HloComputation, args: Sequence[HloInstruction],
             name: str | None = None) -> HloInstruction:
        return self.instruction(O.CALL, args, None, name, called_computations=[computation])

    def while_loop(self, condition: HloComputation, body: HloComputation, init: HloInstruction,
                   name: str | None = None) -> HloInstruction:
        return self.instruction(O.WHILE, (init,), None, name, called_computations=[condition, body])

    def conditional(self, selector: HloInstruction, branches: Sequence[HloComputation],
                    branch_args: Sequence[HloInstruction], name: str | None = None) -> HloInstruction:
        """``selector`` is pred[] (branches = [true, false]) or s32[] (index; out of range → last)."""
        return self.instruction(O.CONDITIONAL, (selector, *branch_args), None, name,
                                called_computations=list(branches))

    def fusion(self, operands: Sequence[HloInstruction], fused: HloComputation,
               kind: A.FusionKind = A.FusionKind.LOOP, name: str | None = None) -> HloInstruction:
        fused.is_fusion_computation = True
        return self.instruction(O.FUSION, operands, None, name or "fusion", fusion_kind=kind,
                                called_computations=[fused])

    # ---------------------------------------------------------------- random numbers and custom calls
    def rng_bit_generator(self, state: HloInstruction, shape: Shape,
                          algorithm: A.RandomAlgorithm = A.RandomAlgorithm.DEFAULT,
                          name: str | None = None) -> HloInstruction:
        out = Shape.tuple_of([state.shape, shape])
        return self.instruction(O.RNG_BIT_GENERATOR, (state,), out, name, rng_algorithm=algorithm)

    def rng(self, a: HloInstruction, b: HloInstruction, shape: Shape,
            distribution: A.RandomDistribution = A.RandomDistribution.UNIFORM,
            name: str | None = None) -> HloInstruction:
        return self.instruction(O.RNG, (a, b), shape, name, distribution=distribution)

    def custom_call(self, target: str, operands: Sequence[HloInstruction], shape: Shape,
                    name: str | None = None) -> HloInstruction:
        return self.instruction(O.CUSTOM_CALL, operands, shape, name or "custom-call", custom_call_target=target)

    # ---------------------------------------------------------------- conveniences
    def full(self, value, element_type: PrimitiveType, dimensions: Ints, name: str | None = None) -> HloInstruction:
        """A scalar constant broadcast to ``dimensions`` (XLA's ``Broadcast(ConstantR0(v))``)."""
        scalar = self.constant(value, element_type)
        return scalar if not dimensions else self.broadcast(scalar, dimensions, (), name)


def _unary_method(opcode: O):
    def method(self: HloBuilder, x: HloInstruction, name: str | None = None) -> HloInstruction:
        return self.unary(opcode, x, name)
    method.__doc__ = f"Elementwise ``{opcode.text}``."
    return method


def _binary_method(opcode: O):
    def method(self: HloBuilder, x: HloInstruction, y: HloInstruction, name: str | None = None) -> HloInstruction:
        return self.binary(opcode, x, y, name)
    method.__doc__ = f"Elementwise ``{opcode.text}`` (operand shapes must be identical)."
    return method


_ALIASES = {
    "neg": O.NEGATE, "exp": O.EXP, "expm1": O.EXPM1, "log1p": O.LOG1P, "sin": O.SIN, "cos": O.COS,
    "clz": O.CLZ, "not_": O.NOT, "sub": O.SUBTRACT, "mul": O.MULTIPLY, "div": O.DIVIDE,
    "rem": O.REMAINDER, "max": O.MAXIMUM, "min": O.MINIMUM, "pow": O.POWER, "and_": O.AND, "or_": O.OR,
}


def _install_elementwise_methods() -> None:
    for opcode in ops.ELEMENTWISE_UNARY:
        setattr(HloBuilder, opcode.text.replace("-", "_"), _unary_method(opcode))
    for opcode in ops.ELEMENTWISE_BINARY - {O.COMPARE}:
        method_name = {"and": "and_", "or": "or_"}.get(opcode.text, opcode.text.replace("-", "_"))
        setattr(HloBuilder, method_name, _binary_method(opcode))
    for alias, opcode in _ALIASES.items():
        make = _unary_method if opcode in ops.ELEMENTWISE_UNARY else _binary_method
        setattr(HloBuilder, alias, make(opcode))


_install_elementwise_methods()


def make_scalar_computation(opcode: O, element_type: PrimitiveType, name: str | None = None) -> HloComputation:
    """``(x: T[], y: T[]) -> T[] { opcode(x, y) }`` — the reducer for reduce/reduce-window/scatter."""
    b = HloBuilder(name or f"{opcode.text}_{element_type.value.upper()}")
    scalar = Shape.scalar(element_type)
    x = b.parameter(0, scalar, "x")
    y = b.parameter(1, scalar, "y")
    b.binary(opcode, x, y)
    return b.build()


def make_comparator(direction: str, element_types: Sequence[PrimitiveType],
                    comparison_type: A.ComparisonType | None = None, name: str | None = None) -> HloComputation:
    """A sort comparator over the first operand: ``(p.0.lhs, p.0.rhs, p.1.lhs, ...) -> pred[]``."""
    b = HloBuilder(name or f"compare-{direction}")
    params = []
    for i, et in enumerate(element_types):
        params.append(b.parameter(2 * i, Shape.scalar(et), f"p.{i}.lhs"))
        params.append(b.parameter(2 * i + 1, Shape.scalar(et), f"p.{i}.rhs"))
    b.compare(params[0], params[1], direction, comparison_type)
    return b.build()
