"""Constant literals: numpy values of HLO constants and their exact XLA text.

A literal is a numpy array whose dtype is the shape's element type (bf16 via ml_dtypes), or a Python
tuple of literals for tuple shapes. ``literal_to_text`` prints the way XLA's
``Literal::PrintWithoutShapeOneline`` does (xla/literal.cc), always in full:

- floats use ``RoundTripFpToString`` (xla/util.cc): ``%.{digits10}g`` if that reads back exactly, else
  ``%.{max_digits10}g`` — f32 6/9 digits, f64 15/17, f16 always 5, bf16 always 4; ``inf``, ``-inf``,
  ``nan``, ``-nan``, and ``nan(0x...)`` when the NaN payload is not the default quiet-NaN payload;
- ``pred`` scalars print ``true``/``false``, pred arrays ``1``/``0`` (XLA prints arrays densely);
- rank>1 arrays nest braces with XLA's spacing (``{ { 1, 2 }, { 3, 4 } }``), and rank>3 arrays carry
  ``/*i0=0*/`` index comments, which the parser skips.
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo.shape import PrimitiveType, Shape

# (digits10, max_digits10) per float type; f16/bf16 only ever use max_digits10 (GenericRoundTripFpToString).
_FLOAT_DIGITS = {
    PrimitiveType.F32: (6, 9),
    PrimitiveType.F64: (15, 17),
    PrimitiveType.F16: (None, 5),
    PrimitiveType.BF16: (None, 4),
}
# Unsigned int view of each float type, for NaN payloads.
_BITS_VIEW = {
    PrimitiveType.F16: np.uint16, PrimitiveType.BF16: np.uint16,
    PrimitiveType.F32: np.uint32, PrimitiveType.F64: np.uint64,
}


def float_to_text(value, element_type: PrimitiveType) -> str:
    """One float element in XLA's round-trip text form."""
    arr = np.asarray(value, dtype=element_type.dtype)
    x = float(arr)
    if np.isnan(x):
        mbits = element_type.mantissa_bits
        raw = int(arr.reshape(1).view(_BITS_VIEW[element_type])[0])
        payload = raw & ((1 << mbits) - 1)
        sign = "-" if raw >> (element_type.bit_width - 1) else ""
        # The default quiet NaN has only the top mantissa bit set and prints bare.
        suffix = "" if payload == 1 << (mbits - 1) else f"(0x{payload:x})"
        return f"{sign}nan{suffix}"
    if np.isinf(x):
        return "-inf" if x < 0 else "inf"
    short, full = _FLOAT_DIGITS[element_type]
    if short is not None:
        text = "%.*g" % (short, x)
        if np.asarray(float(text), dtype=element_type.dtype) == arr:
            return text
    return "%.*g" % (full, x)


def element_to_text(value, element_type: PrimitiveType, in_array: bool) -> str:
    if element_type is PrimitiveType.PRED:
        if in_array:
            return "1" if value else "0"
        return "true" if value else "false"
    if element_type.is_float:
        return float_to_text(value, element_type)
    if element_type.is_complex:
        part = element_type.component_type
        return f"({float_to_text(value.real, part)}, {float_to_text(value.imag, part)})"
    return str(int(value))


def literal_to_text(value, shape: Shape) -> str:
    """The literal of a ``constant`` in XLA's one-line form (without the shape)."""
    if shape.is_tuple:
        # Tuple literals print as "( a, b )" in XLA's oneline mode.
        return "( " + ", ".join(literal_to_text(v, s) for v, s in zip(value, shape.tuple_shapes)) + " )"
    arr = np.asarray(value)
    et = shape.element_type
    rank = shape.rank
    if rank == 0:
        return element_to_text(arr.reshape(()).item() if not et.is_float else arr.reshape(()), et, False)
    dims = shape.dimensions
    out: list[str] = []

    def rec(index: tuple[int, ...]) -> None:
        depth = len(index)
        if depth == rank:
            v = arr[index]
            out.append(element_to_text(v if et.is_float else v.item(), et, True))
            return
        remaining = rank - depth
        n = dims[depth]
        # Opening brace (DenseArrayPrintHelper's brace_to_string, oneline).
        if rank == 1:
            out.append("{")
        elif remaining == 1:
            out.append("{" + (" " if n > 1 else ""))
        elif rank > 3 and depth > 0:
            out.append("{ " + f"/*i{depth - 1}={index[-1]}*/" + (" " if n > 0 else ""))
        else:
            out.append("{ ")
        for i in range(n):
            rec(index + (i,))
            if i < n - 1:
                out.append(", ")
        if rank == 1:
            out.append("}")
        elif remaining == 1:
            out.append((" " if n > 1 else "") + "}")
        else:
            out.append(" }")

    rec(())
    return "".join(out)


def make_literal(value, shape: Shape):
    """Coerce ``value`` to a literal of ``shape`` (numpy array of the right dtype and dimensions)."""
    if shape.is_tuple:
        if not isinstance(value, (tuple, list)) or len(value) != len(shape.tuple_shapes):
            raise InvalidArgumentError(f"literal for tuple shape {shape} must be a tuple of "
                                       f"{len(shape.tuple_shapes)} values")
        return tuple(make_literal(v, s) for v, s in zip(value, shape.tuple_shapes))
    arr = np.asarray(value)
    if arr.dtype != shape.dtype:
        arr = arr.astype(shape.dtype)
    if arr.shape != shape.dimensions:
        if arr.size != shape.num_elements:
            raise InvalidArgumentError(
                f"literal with {arr.size} elements does not fit shape {shape}")
        arr = arr.reshape(shape.dimensions)
    return arr


def literal_shape(value) -> Shape:
    """The (default-layout) shape of a numpy value or tuple of values."""
    from tfxla_cluster.hlo.shape import primitive_type_from_dtype
    if isinstance(value, tuple):
        return Shape.tuple_of(literal_shape(v) for v in value)
    arr = np.asarray(value)
    return Shape.array(primitive_type_from_dtype(arr.dtype), arr.shape)
