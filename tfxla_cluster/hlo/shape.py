"""Element types and shapes of the HLO layer (XLA's ``PrimitiveType`` and ``Shape``).

One table (``_TYPE_TABLE``) lists every element type once with its text name, numpy dtype and kind;
everything else is derived from it. A ``Shape`` is immutable: an array shape (element type, dimensions,
layout as minor_to_major) or a tuple shape. Array shapes always carry a concrete layout — when none is
given the default row-major layout ``{rank-1, ..., 0}`` is filled in, as XLA's parser does — so two shapes
built from the same text compare equal. ``str(shape)`` is XLA's text with layout (``f32[2,3]{1,0}``,
``f32[]``, ``(f32[2]{0}, s32[])``); ``shape.to_string(layout=False)`` is the signature form.

Bounded dynamic dimensions (XLA's ``is_dynamic_dimension``): ``dynamic_dimensions`` flags the dimensions
whose run-time size may be smaller than their static bound (text ``f32[<=4]{0}``); ``()`` means all static.
They appear between lowering and the HLO passes (``set-dimension-size`` results and what is computed
from them); the first pass pads them away (tf2hlo/bounded_dynamic.py ``pad_dynamic_module``).
``compatible`` ignores them, as XLA's ``ShapeUtil::Compatible``; equality does not.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from math import prod

import ml_dtypes
import numpy as np

from tfxla_cluster.errors import InvalidArgumentError


class PrimitiveType(enum.Enum):
    """XLA element types; the value is the text spelling used in HLO."""

    __hash__ = object.__hash__   # singletons: identity hashing (Enum's hashes the name in Python)

    PRED = "pred"
    S8 = "s8"
    S16 = "s16"
    S32 = "s32"
    S64 = "s64"
    U8 = "u8"
    U16 = "u16"
    U32 = "u32"
    U64 = "u64"
    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    F64 = "f64"
    C64 = "c64"
    C128 = "c128"
    TUPLE = "tuple"
    TOKEN = "token"

    @property
    def dtype(self) -> np.dtype:
        info = _TYPE_TABLE[self]
        if info.dtype is None:
            raise InvalidArgumentError(f"element type {self.value} has no numpy dtype")
        return info.dtype

    @property
    def bit_width(self) -> int:
        return _TYPE_TABLE[self].bits

    @property
    def is_pred(self) -> bool:
        return self is PrimitiveType.PRED

    @property
    def is_float(self) -> bool:
        return _TYPE_TABLE[self].kind == "f"

    @property
    def is_complex(self) -> bool:
        return _TYPE_TABLE[self].kind == "c"

    @property
    def is_signed_int(self) -> bool:
        return _TYPE_TABLE[self].kind == "s"

    @property
    def is_unsigned_int(self) -> bool:
        return _TYPE_TABLE[self].kind == "u"

    @property
    def is_integral(self) -> bool:
        """XLA's ``primitive_util::IsIntegralType``: signed or unsigned ints, not pred."""
        return _TYPE_TABLE[self].kind in ("s", "u")

    @property
    def is_array_type(self) -> bool:
        return self is not _TUPLE and self is not _TOKEN

    @property
    def mantissa_bits(self) -> int:
        """Explicit mantissa bits of a float type (XLA's ``SignificandWidth - 1``)."""
        return _FLOAT_BITS[self][1]

    @property
    def exponent_bits(self) -> int:
        return _FLOAT_BITS[self][0]

    @property
    def component_type(self) -> "PrimitiveType":
        """The real type of a complex type (c64 -> f32); other types map to themselves."""
        return {PrimitiveType.C64: PrimitiveType.F32, PrimitiveType.C128: PrimitiveType.F64}.get(self, self)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class _TypeInfo:
    dtype: np.dtype | None
    bits: int
    kind: str  # 'pred' | 's' | 'u' | 'f' | 'c' | 'tuple' | 'token'


_TYPE_TABLE: dict[PrimitiveType, _TypeInfo] = {
    PrimitiveType.PRED: _TypeInfo(np.dtype(np.bool_), 8, "pred"),
    PrimitiveType.S8: _TypeInfo(np.dtype(np.int8), 8, "s"),
    PrimitiveType.S16: _TypeInfo(np.dtype(np.int16), 16, "s"),
    PrimitiveType.S32: _TypeInfo(np.dtype(np.int32), 32, "s"),
    PrimitiveType.S64: _TypeInfo(np.dtype(np.int64), 64, "s"),
    PrimitiveType.U8: _TypeInfo(np.dtype(np.uint8), 8, "u"),
    PrimitiveType.U16: _TypeInfo(np.dtype(np.uint16), 16, "u"),
    PrimitiveType.U32: _TypeInfo(np.dtype(np.uint32), 32, "u"),
    PrimitiveType.U64: _TypeInfo(np.dtype(np.uint64), 64, "u"),
    PrimitiveType.F16: _TypeInfo(np.dtype(np.float16), 16, "f"),
    PrimitiveType.BF16: _TypeInfo(np.dtype(ml_dtypes.bfloat16), 16, "f"),
    PrimitiveType.F32: _TypeInfo(np.dtype(np.float32), 32, "f"),
    PrimitiveType.F64: _TypeInfo(np.dtype(np.float64), 64, "f"),
    PrimitiveType.C64: _TypeInfo(np.dtype(np.complex64), 64, "c"),
    PrimitiveType.C128: _TypeInfo(np.dtype(np.complex128), 128, "c"),
    PrimitiveType.TUPLE: _TypeInfo(None, 0, "tuple"),
    PrimitiveType.TOKEN: _TypeInfo(None, 0, "token"),
}

# (exponent bits, explicit mantissa bits) of the float types.
# Module-level aliases: an Enum member looked up on its class costs a metaclass attribute lookup, and
# these are asked about in every shape query.
_TUPLE, _TOKEN = PrimitiveType.TUPLE, PrimitiveType.TOKEN
# The default (major-to-minor) layout of each rank, shared.
_DEFAULT_LAYOUTS = tuple(tuple(range(r - 1, -1, -1)) for r in range(33))


def _default_layout(rank: int) -> tuple[int, ...]:
    return _DEFAULT_LAYOUTS[rank] if rank < len(_DEFAULT_LAYOUTS) else tuple(range(rank - 1, -1, -1))


_FLOAT_BITS = {
    PrimitiveType.F16: (5, 10),
    PrimitiveType.BF16: (8, 7),
    PrimitiveType.F32: (8, 23),
    PrimitiveType.F64: (11, 52),
}

_BY_DTYPE = {info.dtype: t for t, info in _TYPE_TABLE.items() if info.dtype is not None}


def primitive_type_from_dtype(dtype) -> PrimitiveType:
    """Map a numpy dtype (or anything ``np.dtype`` accepts) to its element type."""
    try:
        return _BY_DTYPE[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise InvalidArgumentError(f"no XLA element type for numpy dtype {dtype!r}") from None


def parse_primitive_type(text: str) -> PrimitiveType:
    try:
        return PrimitiveType(text)
    except ValueError:
        raise InvalidArgumentError(f"unknown element type '{text}'") from None


@dataclass(frozen=True, slots=True)
class Shape:
    """An array shape (``element_type``, ``dimensions``, ``minor_to_major``) or a tuple shape.

    Build with ``Shape.array``, ``Shape.scalar`` or ``Shape.tuple_of``. Equality includes the layout;
    ``compatible`` ignores it (XLA's ``ShapeUtil::Compatible``).
    """

    element_type: PrimitiveType
    dimensions: tuple[int, ...] = ()
    minor_to_major: tuple[int, ...] | None = None
    tuple_shapes: tuple["Shape", ...] = field(default=())
    dynamic_dimensions: tuple[bool, ...] = ()   # () or one flag per dimension (True: bounded dynamic)

    def __post_init__(self) -> None:
        dims = tuple(int(d) for d in self.dimensions)
        object.__setattr__(self, "dimensions", dims)
        if self.element_type is _TUPLE:
            object.__setattr__(self, "minor_to_major", None)
            object.__setattr__(self, "tuple_shapes", tuple(self.tuple_shapes))
            return
        if self.dynamic_dimensions:
            flags = tuple(bool(f) for f in self.dynamic_dimensions)
            if len(flags) != len(dims):
                raise InvalidArgumentError(f"{len(flags)} dynamic-dimension flags for rank {len(dims)}")
            # All-static is kept as () so static shapes built either way compare equal.
            object.__setattr__(self, "dynamic_dimensions", flags if any(flags) else ())
        if any(d < 0 for d in dims):
            raise InvalidArgumentError(f"negative dimension in shape {self.element_type.value}{list(dims)}")
        if self.tuple_shapes:
            raise InvalidArgumentError("only tuple shapes have tuple_shapes")
        if self.element_type is _TOKEN:
            object.__setattr__(self, "minor_to_major", None)
            return
        if self.minor_to_major is None:
            object.__setattr__(self, "minor_to_major", _default_layout(len(dims)))
        else:
            m2m = tuple(int(d) for d in self.minor_to_major)
            if sorted(m2m) != list(range(len(dims))):
                raise InvalidArgumentError(
                    f"layout {{{','.join(map(str, m2m))}}} is not a permutation of the {len(dims)} dimensions "
                    f"of {self.element_type.value}{list(dims)}")
            object.__setattr__(self, "minor_to_major", m2m)

    # ---- constructors
    @staticmethod
    def array(element_type: PrimitiveType, dimensions=(), minor_to_major=None, dynamic_dimensions=()) -> "Shape":
        return Shape(element_type, tuple(dimensions), minor_to_major, (), tuple(dynamic_dimensions))

    @staticmethod
    def scalar(element_type: PrimitiveType) -> "Shape":
        return Shape(element_type, ())

    @staticmethod
    def tuple_of(shapes) -> "Shape":
        return Shape(PrimitiveType.TUPLE, (), None, tuple(shapes))

    @staticmethod
    def token() -> "Shape":
        return Shape(PrimitiveType.TOKEN)

    # ---- queries
    @property
    def is_tuple(self) -> bool:
        return self.element_type is _TUPLE

    @property
    def is_array(self) -> bool:
        return self.element_type.is_array_type

    @property
    def is_token(self) -> bool:
        return self.element_type is _TOKEN

    @property
    def rank(self) -> int:
        return len(self.dimensions)

    @property
    def is_scalar(self) -> bool:
        return self.is_array and not self.dimensions

    @property
    def num_elements(self) -> int:
        return prod(self.dimensions)

    @property
    def dtype(self) -> np.dtype:
        return self.element_type.dtype

    @property
    def is_dynamic(self) -> bool:
        """Whether any dimension (of any tuple element) is bounded dynamic."""
        if self.is_tuple:
            return any(s.is_dynamic for s in self.tuple_shapes)
        return bool(self.dynamic_dimensions)

    def is_dynamic_dimension(self, dimension: int) -> bool:
        return bool(self.dynamic_dimensions) and self.dynamic_dimensions[dimension]

    def with_dynamic_dimension(self, dimension: int, dynamic: bool = True) -> "Shape":
        flags = list(self.dynamic_dimensions or (False,) * self.rank)
        flags[dimension] = dynamic
        return Shape(self.element_type, self.dimensions, self.minor_to_major, (), tuple(flags))

    def with_dynamic_dimensions(self, flags) -> "Shape":
        """The shape with ``flags`` (one per dimension) as its dynamic-dimension flags."""
        return Shape(self.element_type, self.dimensions, self.minor_to_major, (), tuple(flags))

    def to_static(self) -> "Shape":
        """The shape with every bounded dynamic dimension made static at its bound (recursively)."""
        if self.is_tuple:
            parts = tuple(s.to_static() for s in self.tuple_shapes)
            return self if all(a is b for a, b in zip(parts, self.tuple_shapes)) else Shape.tuple_of(parts)
        if not self.dynamic_dimensions:
            return self
        return Shape(self.element_type, self.dimensions, self.minor_to_major)

    @property
    def is_default_layout(self) -> bool:
        return self.minor_to_major == _default_layout(len(self.dimensions))

    def byte_size(self) -> int:
        if self.is_tuple:
            return 8 * len(self.tuple_shapes)  # a tuple is a table of pointers
        if self.is_token:
            return 0
        return self.num_elements * (self.element_type.bit_width // 8)

    def with_element_type(self, element_type: PrimitiveType) -> "Shape":
        return Shape(element_type, self.dimensions, self.minor_to_major, (), self.dynamic_dimensions)

    def with_dimensions(self, dimensions) -> "Shape":
        return Shape(self.element_type, tuple(dimensions))

    def without_layout(self) -> "Shape":
        """The shape with the default layout (for comparisons that ignore layout)."""
        # Shapes are immutable: a shape that already has the default layout is its own answer (shape
        # inference asks this for every instruction it checks).
        if self.is_tuple:
            parts = tuple(s.without_layout() for s in self.tuple_shapes)
            return self if all(a is b for a, b in zip(parts, self.tuple_shapes)) else Shape.tuple_of(parts)
        if self.minor_to_major is None or self.is_default_layout:
            return self
        return Shape(self.element_type, self.dimensions, None, (), self.dynamic_dimensions)

    def compatible(self, other: "Shape") -> bool:
        """Same element types and dimensions, recursively; layouts ignored."""
        # Compared field by field: passes ask this for every edit, and building two layout-free copies
        # (``without_layout``) was a large part of a big module's compile time.
        if self is other:
            return True
        if self.element_type is not other.element_type or self.dimensions != other.dimensions:
            return False
        if self.element_type is PrimitiveType.TUPLE:
            return len(self.tuple_shapes) == len(other.tuple_shapes) and all(
                a.compatible(b) for a, b in zip(self.tuple_shapes, other.tuple_shapes))
        return True

    def leaves(self) -> list["Shape"]:
        """The array shapes of a (possibly nested) tuple in order; ``[self]`` for arrays."""
        if not self.is_tuple:
            return [self]
        return [leaf for s in self.tuple_shapes for leaf in s.leaves()]

    # ---- text
    def to_string(self, layout: bool = True) -> str:
        if self.is_tuple:
            # ShapeUtil::PrintHumanString marks every fifth tuple element with /*index=N*/.
            elems = [s.to_string(layout) for s in self.tuple_shapes]
            return "(" + ", ".join(f"/*index={i}*/{e}" if i and i % 5 == 0 else e
                                   for i, e in enumerate(elems)) + ")"
        if self.is_token:
            return "token[]"
        if self.dynamic_dimensions:
            dims = ",".join(f"<={d}" if dyn else str(d) for d, dyn in zip(self.dimensions, self.dynamic_dimensions))
        else:
            dims = ",".join(map(str, self.dimensions))
        text = f"{self.element_type.value}[{dims}]"
        # Scalars carry an empty layout, which XLA does not print.
        if layout and self.dimensions:
            text += "{" + ",".join(map(str, self.minor_to_major)) + "}"
        return text

    def __str__(self) -> str:
        return self.to_string(layout=True)

    def __repr__(self) -> str:
        return f"Shape({self.to_string()})"


def major_to_minor(shape: Shape) -> list[int]:
    """A dense layout's dimensions from the most major to the most minor."""
    return list(reversed(shape.minor_to_major)) if shape.rank else []
