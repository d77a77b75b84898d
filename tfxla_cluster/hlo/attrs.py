"""Typed HLO instruction attributes and their XLA text forms.

Each attribute value type knows its own text (``to_text``) and, where the text is one token, how to
read it back (``from_text``): windows (``size=2x2 stride=2x2 pad=0_1x0_1``, xla/window_util.cc),
padding configs (``0_1x2_3`` / ``0_1_1x2_3_0``), convolution ``dim_labels`` (``b01f_01io->b01f``),
slice ranges, dot/gather/scatter dimension numbers, comparison direction and type, fusion kinds and
op metadata. The printer and parser both go through here, so the two cannot drift apart.
"""
from __future__ import annotations

import enum
import re
from operator import attrgetter
from typing import Any

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo.shape import PrimitiveType


def ints_text(values) -> str:
    """``{1,0}`` — XLA's braced int list (no spaces)."""
    return "{" + ",".join(str(int(v)) for v in values) + "}"


# ---------------------------------------------------------------- value types
class _Value:
    """Base of the attribute values below: equal and hashed by their fields (``__slots__``, in order) and
    repr'd as the frozen dataclasses they were. Plain slotted classes: a frozen dataclass costs ~0.9 ms of
    CPU to create at import, and this module is on a process's first compile (issue 17). Immutable by
    convention (they are hash keys, e.g. of CSE): :meth:`replace` makes a changed copy."""

    __slots__ = ()
    _fields: Any = None   # attrgetter of every field: the tuple equality and hashing compare

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        names = cls.__slots__
        if not names:
            return   # an intermediate base (its subclasses name the fields)
        # attrgetter of one name gives the value, not a 1-tuple (and is no descriptor, as a lambda would be).
        cls._fields = (attrgetter(*names) if len(names) > 1
                       else staticmethod(lambda obj, _n=names[0]: (getattr(obj, _n),)))
        cls.__match_args__ = names

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._fields(self) == self._fields(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._fields(self))

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}(" + ", ".join(
            f"{n}={v!r}" for n, v in zip(self.__slots__, self._fields(self))) + ")"

    def replace(self, **changes: Any) -> Any:
        """A copy with ``changes`` (``dataclasses.replace``)."""
        return type(self)(**{n: changes.pop(n, v) for n, v in zip(self.__slots__, self._fields(self))}, **changes)


# ---------------------------------------------------------------- enums
class ComparisonDirection(enum.Enum):
    EQ = "EQ"
    NE = "NE"
    GE = "GE"
    GT = "GT"
    LE = "LE"
    LT = "LT"


class ComparisonType(enum.Enum):
    FLOAT = "FLOAT"
    TOTALORDER = "TOTALORDER"
    SIGNED = "SIGNED"
    UNSIGNED = "UNSIGNED"


def default_comparison_type(element_type: PrimitiveType) -> ComparisonType:
    """Comparison::DefaultComparisonType: FLOAT for floats/complex, SIGNED for signed ints, else UNSIGNED."""
    if element_type.is_float or element_type.is_complex:
        return ComparisonType.FLOAT
    if element_type.is_signed_int:
        return ComparisonType.SIGNED
    return ComparisonType.UNSIGNED


class FusionKind(enum.Enum):
    LOOP = "kLoop"
    INPUT = "kInput"
    OUTPUT = "kOutput"
    CUSTOM = "kCustom"


class RandomDistribution(enum.Enum):
    UNIFORM = "rng_uniform"
    NORMAL = "rng_normal"


class RandomAlgorithm(enum.Enum):
    DEFAULT = "rng_default"
    THREE_FRY = "rng_three_fry"
    PHILOX = "rng_philox"


class Precision(enum.Enum):
    DEFAULT = "default"
    HIGH = "high"
    HIGHEST = "highest"


# ---------------------------------------------------------------- slices and padding
class SliceRange(_Value):
    __slots__ = ("start", "limit", "stride")

    def __init__(self, start: int, limit: int, stride: int = 1) -> None:
        self.start, self.limit, self.stride = start, limit, stride

    def to_text(self, with_stride: bool = True) -> str:
        return f"[{self.start}:{self.limit}:{self.stride}]" if with_stride else f"[{self.start}:{self.limit}]"


def slices_text(slices) -> str:
    """HloSliceInstruction: strides are printed for every dimension iff one of them is not 1."""
    strided = any(s.stride != 1 for s in slices)
    return "{" + ", ".join(s.to_text(strided) for s in slices) + "}"


class PaddingDimension(_Value):
    __slots__ = ("low", "high", "interior")

    def __init__(self, low: int = 0, high: int = 0, interior: int = 0) -> None:
        self.low, self.high, self.interior = low, high, interior


class PaddingConfig(_Value):
    __slots__ = ("dimensions",)

    def __init__(self, dimensions: tuple[PaddingDimension, ...]) -> None:
        self.dimensions = dimensions

    @staticmethod
    def of(pairs) -> "PaddingConfig":
        """From ``[(low, high)]`` or ``[(low, high, interior)]`` per dimension."""
        return PaddingConfig(tuple(PaddingDimension(*p) for p in pairs))

    def to_text(self) -> str:
        # PaddingConfigToString: interior is printed for every dim iff any dim has it.
        interior = any(d.interior for d in self.dimensions)
        return "x".join(
            f"{d.low}_{d.high}" + (f"_{d.interior}" if interior else "") for d in self.dimensions)

    @staticmethod
    def from_text(text: str) -> "PaddingConfig":
        dims = []
        for part in text.split("x"):
            nums = part.split("_")
            if len(nums) not in (2, 3):
                raise InvalidArgumentError(f"expects padding config, e.g., '0_0_0x3_3_1', got '{text}'")
            dims.append(PaddingDimension(*(int(n) for n in nums)))
        return PaddingConfig(tuple(dims))


# ---------------------------------------------------------------- windows
class WindowDimension(_Value):
    __slots__ = ("size", "stride", "padding_low", "padding_high", "window_dilation", "base_dilation",
                 "window_reversal")

    def __init__(self, size: int, stride: int = 1, padding_low: int = 0, padding_high: int = 0,
                 window_dilation: int = 1, base_dilation: int = 1, window_reversal: bool = False) -> None:
        self.size = size
        self.stride = stride
        self.padding_low = padding_low
        self.padding_high = padding_high
        self.window_dilation = window_dilation
        self.base_dilation = base_dilation
        self.window_reversal = window_reversal


class Window(_Value):
    __slots__ = ("dimensions",)

    def __init__(self, dimensions: tuple[WindowDimension, ...]) -> None:
        self.dimensions = dimensions

    @staticmethod
    def make(sizes, strides=None, padding=None, lhs_dilation=None, rhs_dilation=None) -> "Window":
        n = len(sizes)
        strides = strides or [1] * n
        padding = padding or [(0, 0)] * n
        lhs_dilation = lhs_dilation or [1] * n
        rhs_dilation = rhs_dilation or [1] * n
        return Window(tuple(
            WindowDimension(int(sizes[i]), int(strides[i]), int(padding[i][0]), int(padding[i][1]),
                            int(rhs_dilation[i]), int(lhs_dilation[i]))
            for i in range(n)))

    def to_text(self) -> str:
        """window_util::ToString: fields equal to their defaults in every dimension are left out."""
        d = self.dimensions
        parts = ["size=" + "x".join(str(w.size) for w in d)]
        if any(w.stride != 1 for w in d):
            parts.append("stride=" + "x".join(str(w.stride) for w in d))
        if any(w.padding_low or w.padding_high for w in d):
            parts.append("pad=" + "x".join(f"{w.padding_low}_{w.padding_high}" for w in d))
        if any(w.base_dilation != 1 for w in d):
            parts.append("lhs_dilate=" + "x".join(str(w.base_dilation) for w in d))
        if any(w.window_dilation != 1 for w in d):
            parts.append("rhs_dilate=" + "x".join(str(w.window_dilation) for w in d))
        if any(w.window_reversal for w in d):
            parts.append("rhs_reversal=" + "x".join(str(int(w.window_reversal)) for w in d))
        return "{" + " ".join(parts) + "}"

    @staticmethod
    def from_text(body: str) -> "Window":
        """Parse the inside of ``window={...}``."""
        fields: dict[str, list[str]] = {}
        for item in body.split():
            key, _, value = item.partition("=")
            if key not in ("size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal"):
                raise InvalidArgumentError(f"unknown window field '{key}'")
            fields[key] = value.split("x") if value else []
        if "size" not in fields:
            if fields:
                raise InvalidArgumentError("window has no size")
            return Window(())
        n = len(fields["size"])
        for key, vals in fields.items():
            if len(vals) != n:
                raise InvalidArgumentError(f"window field '{key}' has {len(vals)} entries, size has {n}")

        def col(key, i, default):
            return int(fields[key][i]) if key in fields else default

        dims = []
        for i in range(n):
            lo, hi = (0, 0)
            if "pad" in fields:
                lo, hi = (int(v) for v in fields["pad"][i].split("_"))
            dims.append(WindowDimension(
                size=int(fields["size"][i]), stride=col("stride", i, 1), padding_low=lo, padding_high=hi,
                window_dilation=col("rhs_dilate", i, 1), base_dilation=col("lhs_dilate", i, 1),
                window_reversal=bool(col("rhs_reversal", i, 0))))
        return Window(tuple(dims))


# ---------------------------------------------------------------- dimension numbers
class DotDimensionNumbers(_Value):
    __slots__ = ("lhs_contracting_dimensions", "rhs_contracting_dimensions", "lhs_batch_dimensions",
                 "rhs_batch_dimensions")

    def __init__(self, lhs_contracting_dimensions: tuple[int, ...] = (),
                 rhs_contracting_dimensions: tuple[int, ...] = (), lhs_batch_dimensions: tuple[int, ...] = (),
                 rhs_batch_dimensions: tuple[int, ...] = ()) -> None:
        self.lhs_contracting_dimensions = lhs_contracting_dimensions
        self.rhs_contracting_dimensions = rhs_contracting_dimensions
        self.lhs_batch_dimensions = lhs_batch_dimensions
        self.rhs_batch_dimensions = rhs_batch_dimensions

    def to_attrs(self) -> list[str]:
        """DotDimensionNumbersToString: batch dims only when present, contracting dims always."""
        out = []
        if self.lhs_batch_dimensions:
            out.append("lhs_batch_dims=" + ints_text(self.lhs_batch_dimensions))
        out.append("lhs_contracting_dims=" + ints_text(self.lhs_contracting_dimensions))
        if self.rhs_batch_dimensions:
            out.append("rhs_batch_dims=" + ints_text(self.rhs_batch_dimensions))
        out.append("rhs_contracting_dims=" + ints_text(self.rhs_contracting_dimensions))
        return out


class ConvolutionDimensionNumbers(_Value):
    __slots__ = ("input_batch_dimension", "input_feature_dimension", "input_spatial_dimensions",
                 "kernel_input_feature_dimension", "kernel_output_feature_dimension", "kernel_spatial_dimensions",
                 "output_batch_dimension", "output_feature_dimension", "output_spatial_dimensions")

    def __init__(self, input_batch_dimension: int, input_feature_dimension: int,
                 input_spatial_dimensions: tuple[int, ...], kernel_input_feature_dimension: int,
                 kernel_output_feature_dimension: int, kernel_spatial_dimensions: tuple[int, ...],
                 output_batch_dimension: int, output_feature_dimension: int,
                 output_spatial_dimensions: tuple[int, ...]) -> None:
        self.input_batch_dimension = input_batch_dimension
        self.input_feature_dimension = input_feature_dimension
        self.input_spatial_dimensions = input_spatial_dimensions
        self.kernel_input_feature_dimension = kernel_input_feature_dimension
        self.kernel_output_feature_dimension = kernel_output_feature_dimension
        self.kernel_spatial_dimensions = kernel_spatial_dimensions
        self.output_batch_dimension = output_batch_dimension
        self.output_feature_dimension = output_feature_dimension
        self.output_spatial_dimensions = output_spatial_dimensions

    def to_text(self) -> str:
        """ConvolutionDimensionNumbersToString: e.g. ``b01f_01io->b01f``."""
        def labels(rank, first, first_ch, second, second_ch, spatial):
            out = ["?"] * rank
            out[first], out[second] = first_ch, second_ch
            for i, d in enumerate(spatial):
                out[d] = str(i)
            return "".join(out)

        n = len(self.input_spatial_dimensions) + 2
        lhs = labels(n, self.input_batch_dimension, "b", self.input_feature_dimension, "f",
                     self.input_spatial_dimensions)
        rhs = labels(n, self.kernel_input_feature_dimension, "i", self.kernel_output_feature_dimension, "o",
                     self.kernel_spatial_dimensions)
        out = labels(n, self.output_batch_dimension, "b", self.output_feature_dimension, "f",
                     self.output_spatial_dimensions)
        return f"{lhs}_{rhs}->{out}"

    @staticmethod
    def from_text(text: str) -> "ConvolutionDimensionNumbers":
        m = re.fullmatch(r"([0-9bf]+)_([0-9io]+)->([0-9bf]+)", text)
        if not m or not (len(m[1]) == len(m[2]) == len(m[3])):
            raise InvalidArgumentError(f"expects dim labels pattern, e.g., 'bf0_0io->0bf', got '{text}'")

        def split(s, a, b):
            if s.count(a) != 1 or s.count(b) != 1:
                raise InvalidArgumentError(f"dim labels '{s}' need exactly one '{a}' and one '{b}'")
            digits = sorted((int(c), i) for i, c in enumerate(s) if c.isdigit())
            if [d for d, _ in digits] != list(range(len(digits))):
                raise InvalidArgumentError(f"spatial labels of '{s}' must be 0..{len(digits) - 1}")
            return s.index(a), s.index(b), tuple(i for _, i in digits)

        ib, if_, isp = split(m[1], "b", "f")
        ki, ko, ksp = split(m[2], "i", "o")
        ob, of, osp = split(m[3], "b", "f")
        return ConvolutionDimensionNumbers(ib, if_, isp, ki, ko, ksp, ob, of, osp)

    @staticmethod
    def nhwc(num_spatial: int = 2) -> "ConvolutionDimensionNumbers":
        """TF's default layout: input/output ``b01f``, kernel ``01io``."""
        sp = tuple(range(1, num_spatial + 1))
        return ConvolutionDimensionNumbers(0, num_spatial + 1, sp, num_spatial, num_spatial + 1,
                                           tuple(range(num_spatial)), 0, num_spatial + 1, sp)


def _index_dims_attrs(dnums, always: int) -> list[str]:
    """Gather/Scatter DimensionNumbersToString: the first ``always`` fields, the batching ones when present
    (the fields after ``index_vector_dim``), then ``index_vector_dim``."""
    out = []
    for k, name in enumerate(dnums.__slots__):
        value = getattr(dnums, name)
        if name != "index_vector_dim" and (k < always or value):
            out.append(f"{name}={ints_text(value)}")
    out.append(f"index_vector_dim={dnums.index_vector_dim}")
    return out


class _IndexDimensionNumbers(_Value):
    """Gather's and scatter's dimension numbers: three index lists, ``index_vector_dim``, then the two
    batching-dimension lists (default empty), by position or by name; printed by one rule."""

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        names = self.__slots__
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__} takes at most {len(names)} fields, got {len(args)}")
        values = dict(zip(names, args))
        for name, value in kwargs.items():
            if name not in names or name in values:
                raise TypeError(f"{type(self).__name__}: {'unknown' if name not in names else 'repeated'} "
                                f"field {name!r}")
            values[name] = value
        missing = [n for n in names[:4] if n not in values]
        if missing:
            raise TypeError(f"{type(self).__name__}: missing {', '.join(missing)}")
        for name in names:
            setattr(self, name, values.get(name, ()))

    def to_attrs(self) -> list[str]:
        return _index_dims_attrs(self, 3)


class GatherDimensionNumbers(_IndexDimensionNumbers):
    __slots__ = ("offset_dims", "collapsed_slice_dims", "start_index_map", "index_vector_dim",
                 "operand_batching_dims", "start_indices_batching_dims")


class ScatterDimensionNumbers(_IndexDimensionNumbers):
    __slots__ = ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims", "index_vector_dim",
                 "input_batching_dims", "scatter_indices_batching_dims")


# ---------------------------------------------------------------- metadata
def c_escape(s: str) -> str:
    """absl::CEscape for the strings XLA prints inside quotes."""
    out = []
    for ch in s:
        if ch in '"\'\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\{ord(ch):03o}")
        else:
            out.append(ch)
    return "".join(out)


class OpMetadata(_Value):
    """OpMetadata as printed by xla/hlo/ir/hlo_op_metadata.cc; ``extra`` keeps other fields verbatim."""

    __slots__ = ("op_type", "op_name", "source_file", "source_line", "extra")

    def __init__(self, op_type: str = "", op_name: str = "", source_file: str = "", source_line: int = 0,
                 extra: tuple[tuple[str, str], ...] = ()) -> None:
        self.op_type = op_type
        self.op_name = op_name
        self.source_file = source_file
        self.source_line = source_line
        self.extra = extra

    def is_empty(self) -> bool:
        return not (self.op_type or self.op_name or self.source_file or self.source_line or self.extra)

    def to_text(self) -> str:
        parts = []
        if self.op_type:
            parts.append(f'op_type="{c_escape(self.op_type)}"')
        if self.op_name:
            parts.append(f'op_name="{c_escape(self.op_name)}"')
        if self.source_file:
            parts.append(f'source_file="{c_escape(self.source_file)}"')
        if self.source_line:
            parts.append(f"source_line={self.source_line}")
        parts.extend(f"{k}={v}" for k, v in self.extra)
        return "{" + " ".join(parts) + "}"


# ---------------------------------------------------------------- frontend attributes of our own
# A convert to one part of a complex value (tf2hlo lowers complex values as pairs of real parts): XLA's
# convert(bf16 -> c64) reads the bf16 value, and float normalization must not let the part's convert(bf16 ->
# f32) read its producer's f32 result before the bf16 rounding, as it does for a real convert to f32.
COMPLEX_PART_ATTRIBUTE = ("frontend_attributes", '{_tfxla_complex_part="true"}')


def mark_complex_part(instr) -> None:
    instr.raw_attributes[COMPLEX_PART_ATTRIBUTE[0]] = COMPLEX_PART_ATTRIBUTE[1]


def is_complex_part(instr) -> bool:
    return instr.raw_attributes.get(COMPLEX_PART_ATTRIBUTE[0]) == COMPLEX_PART_ATTRIBUTE[1]


# ---------------------------------------------------------------- frontend attributes
# XLA:CPU's SmallWhileLoopHoistingPass tags the call it outlines a small while into with this frontend
# attribute; its thunk emitter then emits the callee as one kernel (passes/small_while_loop_hoisting.py).
SMALL_CALL_ATTRIBUTE = "xla_cpu_small_call"


def is_small_call(instr) -> bool:
    """Whether ``instr`` is a call tagged ``xla_cpu_small_call="true"``."""
    return instr.opcode.text == "call" and \
        f'{SMALL_CALL_ATTRIBUTE}="true"' in instr.raw_attributes.get("frontend_attributes", "")
