"""The one table of which attributes each opcode has, in XLA's print order (``OPCODE_ATTRS``).

The printer walks an opcode's entries to produce ``dimensions={1,0}, to_apply=%add``; the parser walks
the same entries to turn the ``name=text`` pairs it read back into typed instruction fields. Each entry
is a small object with ``print(instr) -> [str]`` and ``parse(instr, attrs, ctx)``; ``attrs`` maps
attribute names to their raw text (with its source position for errors) and entries pop what they use.
Subclass attributes come before called computations, as in ``HloInstruction::PrintExtraAttributes``.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo import attrs as A
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType


class AttrError(InvalidArgumentError):
    """A bad attribute value; the parser adds the position."""

    def __init__(self, message: str, name: str) -> None:
        super().__init__(message)
        self.attr_name = name


# ---------------------------------------------------------------- value kinds: (format, parse)
# The entry classes below are plain slotted classes, not dataclasses: they are built once, compared never,
# and a frozen dataclass costs ~0.6 ms of CPU to create at import (issue 17: this module is on a process's
# first compile, through CSE's attribute keys).
class Kind:
    """How a value kind prints (``fmt``) and parses (``parse``)."""

    __slots__ = ("fmt", "parse")

    def __init__(self, fmt: Callable[[Any], str], parse: Callable[[str], Any]) -> None:
        self.fmt, self.parse = fmt, parse


def _parse_ints(text: str) -> tuple[int, ...]:
    text = text.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError("expects a braced list of integers, e.g. {1,0}")
    body = text[1:-1].strip()
    return tuple(int(t) for t in body.split(",")) if body else ()


def _parse_bool(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError("expects true or false")
    return text == "true"


def _parse_slices(text: str) -> tuple[A.SliceRange, ...]:
    text = text.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError("expects slice ranges, e.g. {[0:2:1], [1:3]}")
    out = []
    for m in re.finditer(r"\[([^\]]*)\]", text):
        nums = [int(t) for t in m[1].split(":")]
        if len(nums) not in (2, 3):
            raise ValueError(f"bad slice range [{m[1]}]")
        out.append(A.SliceRange(*nums))
    return tuple(out)


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        raise ValueError("expects a quoted string")
    return c_unescape(text[1:-1])


def c_unescape(s: str) -> str:
    """Undo absl::CEscape (\\n, \\t, \\", \\\\, octal and hex escapes)."""
    out, i = [], 0
    simple = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "\\": "\\", "?": "?", "a": "\a",
              "b": "\b", "f": "\f", "v": "\v"}
    while i < len(s):
        ch = s[i]
        if ch != "\\" or i + 1 == len(s):
            out.append(ch)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt in simple:
            out.append(simple[nxt])
            i += 2
        elif nxt in "01234567":
            m = re.match(r"[0-7]{1,3}", s[i + 1:])
            out.append(chr(int(m[0], 8)))
            i += 1 + len(m[0])
        elif nxt == "x":
            m = re.match(r"[0-9a-fA-F]+", s[i + 2:])
            out.append(chr(int(m[0], 16)) if m else "x")
            i += 2 + (len(m[0]) if m else 0)
        else:
            out.append(nxt)
            i += 2
    return "".join(out)


def _enum(cls) -> Kind:
    def parse(text: str):
        try:
            return cls(text.strip())
        except ValueError:
            raise ValueError(f"expects one of {', '.join(e.value for e in cls)}") from None
    return Kind(lambda v: v.value, parse)


def _parse_precisions(text: str) -> tuple[A.Precision, ...]:
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        raise ValueError("expects {default,highest}")
    return tuple(A.Precision(t.strip().lower()) for t in body[1:-1].split(",") if t.strip())


INTS = Kind(A.ints_text, _parse_ints)
INT = Kind(str, lambda t: int(t.strip()))
BOOL = Kind(lambda v: "true" if v else "false", _parse_bool)
STRING = Kind(lambda v: f'"{A.c_escape(v)}"', _unquote)
SLICES = Kind(A.slices_text, _parse_slices)
PADDING = Kind(lambda v: v.to_text(), lambda t: A.PaddingConfig.from_text(t.strip()))
WINDOW = Kind(lambda v: v.to_text(),
              lambda t: A.Window.from_text(t.strip()[1:-1]) if t.strip().startswith("{") else _bad("window"))
DIM_LABELS = Kind(lambda v: v.to_text(), lambda t: A.ConvolutionDimensionNumbers.from_text(t.strip()))
PRECISIONS = Kind(lambda v: "{" + ",".join(p.value for p in v) + "}", _parse_precisions)


def _bad(what: str):
    raise ValueError(f"expects a {what}")


# ---------------------------------------------------------------- entries
class ParseContext:
    """What entries need from the parser: computations by name and the element type of operand 0."""

    __slots__ = ("computation",)

    def __init__(self, computation: Callable[[str], Any]) -> None:
        self.computation = computation


def _take(attrs: dict, name: str, kind: Kind):
    text = attrs.pop(name)
    try:
        return kind.parse(text)
    except AttrError:
        raise
    except (ValueError, InvalidArgumentError, AttributeError, IndexError) as e:
        raise AttrError(f"error parsing attribute {name}: {e}", name) from None


class Field:
    """``name=value`` stored in instruction field ``field``; omitted from print when equal to ``default``."""

    __slots__ = ("name", "kind", "field", "required", "default")

    def __init__(self, name: str, kind: Kind, field: str, required: bool = True, default: Any = None) -> None:
        self.name, self.kind, self.field, self.required, self.default = name, kind, field, required, default

    def print(self, instr) -> list[str]:
        value = getattr(instr, self.field)
        if value is None or (not self.required and value == self.default):
            return []
        return [f"{self.name}={self.kind.fmt(value)}"]

    def parse(self, instr, attrs: dict, ctx: ParseContext) -> None:
        if self.name in attrs:
            setattr(instr, self.field, _take(attrs, self.name, self.kind))
        elif self.required:
            raise AttrError(f"attribute {self.name} is expected but not seen", self.name)


class Comp:
    """A called computation at ``index`` of ``called_computations`` (``to_apply=%c``)."""

    __slots__ = ("name", "index")

    def __init__(self, name: str, index: int = 0) -> None:
        self.name, self.index = name, index

    def print(self, instr) -> list[str]:
        return [f"{self.name}=%{instr.called_computations[self.index].name}"]

    def parse(self, instr, attrs: dict, ctx: ParseContext) -> None:
        if self.name not in attrs:
            raise AttrError(f"attribute {self.name} is expected but not seen", self.name)
        name = attrs.pop(self.name).strip().lstrip("%")
        while len(instr.called_computations) <= self.index:
            instr.called_computations.append(None)
        instr.called_computations[self.index] = ctx.computation(name)


def _comp_list(text: str, ctx: ParseContext) -> list:
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        raise ValueError("expects a braced list of computations")
    return [ctx.computation(t.strip().lstrip("%")) for t in body[1:-1].split(",") if t.strip()]


class CompList:
    """All called computations as ``name={%a, %b}`` (custom-call's called_computations)."""

    __slots__ = ("name", "required")

    def __init__(self, name: str, required: bool = False) -> None:
        self.name, self.required = name, required

    def print(self, instr) -> list[str]:
        if not instr.called_computations:
            return []
        return [f"{self.name}={{" + ", ".join(f"%{c.name}" for c in instr.called_computations) + "}"]

    def parse(self, instr, attrs: dict, ctx: ParseContext) -> None:
        if self.name in attrs:
            instr.called_computations = _comp_list(attrs.pop(self.name), ctx)
        elif self.required:
            raise AttrError(f"attribute {self.name} is expected but not seen", self.name)


class Branches:
    """conditional: ``true_computation=, false_computation=`` for a pred selector, else
    ``branch_computations={...}`` (HloConditionalInstruction printing)."""

    def print(self, instr) -> list[str]:
        comps = instr.called_computations
        if instr.operands and instr.operands[0].shape.element_type is PrimitiveType.PRED and len(comps) == 2:
            return [f"true_computation=%{comps[0].name}", f"false_computation=%{comps[1].name}"]
        return ["branch_computations={" + ", ".join(f"%{c.name}" for c in comps) + "}"]

    def parse(self, instr, attrs: dict, ctx: ParseContext) -> None:
        if "branch_computations" in attrs:
            instr.called_computations = _comp_list(attrs.pop("branch_computations"), ctx)
        elif "true_computation" in attrs and "false_computation" in attrs:
            instr.called_computations = [ctx.computation(attrs.pop(n).strip().lstrip("%"))
                                         for n in ("true_computation", "false_computation")]
        else:
            raise AttrError("conditional expects branch_computations or true_computation and "
                            "false_computation", "branch_computations")


class CompareType:
    """``type=`` is printed only when it differs from the operand type's default."""

    def print(self, instr) -> list[str]:
        t = instr.comparison_type
        if t is None or t is A.default_comparison_type(instr.operands[0].shape.element_type):
            return []
        return [f"type={t.value}"]

    def parse(self, instr, attrs: dict, ctx: ParseContext) -> None:
        if "type" in attrs:
            t = _take(attrs, "type", _enum(A.ComparisonType))
            default = A.default_comparison_type(instr.operands[0].shape.element_type)
            instr.comparison_type = None if t is default else t


class DotDims:
    def print(self, instr) -> list[str]:
        return instr.dot_dimension_numbers.to_attrs()

    def parse(self, instr, attrs: dict, ctx: ParseContext) -> None:
        get = lambda n: _take(attrs, n, INTS) if n in attrs else ()
        instr.dot_dimension_numbers = A.DotDimensionNumbers(
            get("lhs_contracting_dims"), get("rhs_contracting_dims"), get("lhs_batch_dims"),
            get("rhs_batch_dims"))


class GatherDims:
    def print(self, instr) -> list[str]:
        return instr.gather_dimension_numbers.to_attrs()

    def parse(self, instr, attrs: dict, ctx: ParseContext) -> None:
        get = lambda n: _take(attrs, n, INTS) if n in attrs else ()
        if "index_vector_dim" not in attrs:
            raise AttrError("attribute index_vector_dim is expected but not seen", "index_vector_dim")
        instr.gather_dimension_numbers = A.GatherDimensionNumbers(
            get("offset_dims"), get("collapsed_slice_dims"), get("start_index_map"),
            _take(attrs, "index_vector_dim", INT), get("operand_batching_dims"),
            get("start_indices_batching_dims"))


class ScatterDims:
    def print(self, instr) -> list[str]:
        return instr.scatter_dimension_numbers.to_attrs()

    def parse(self, instr, attrs: dict, ctx: ParseContext) -> None:
        get = lambda n: _take(attrs, n, INTS) if n in attrs else ()
        if "index_vector_dim" not in attrs:
            raise AttrError("attribute index_vector_dim is expected but not seen", "index_vector_dim")
        instr.scatter_dimension_numbers = A.ScatterDimensionNumbers(
            get("update_window_dims"), get("inserted_window_dims"), get("scatter_dims_to_operand_dims"),
            _take(attrs, "index_vector_dim", INT), get("input_batching_dims"),
            get("scatter_indices_batching_dims"))


class OptionalWindow:
    """``window={...}``; left out for rank-0 windows, which XLA does not print."""

    def print(self, instr) -> list[str]:
        w = instr.window
        return [f"window={w.to_text()}"] if w is not None and w.dimensions else []

    def parse(self, instr, attrs: dict, ctx: ParseContext) -> None:
        instr.window = _take(attrs, "window", WINDOW) if "window" in attrs else A.Window(())


# ---------------------------------------------------------------- the table
DIMENSIONS = Field("dimensions", INTS, "dimensions")
TO_APPLY = Comp("to_apply")
WINDOW_ATTR = OptionalWindow()

OPCODE_ATTRS: dict[O, tuple] = {
    O.PARAMETER: (),  # parameter(N): the number is the operand text, handled by the parser
    O.CONSTANT: (),
    O.IOTA: (Field("iota_dimension", INT, "iota_dimension"),),
    O.COMPARE: (Field("direction", _enum(A.ComparisonDirection), "comparison_direction"), CompareType()),
    O.BROADCAST: (DIMENSIONS,),
    O.TRANSPOSE: (DIMENSIONS,),
    O.REVERSE: (DIMENSIONS,),
    O.CONCATENATE: (DIMENSIONS,),
    O.SET_DIMENSION_SIZE: (DIMENSIONS,),
    O.GET_DIMENSION_SIZE: (DIMENSIONS,),
    O.SLICE: (Field("slice", SLICES, "slices"),),
    O.DYNAMIC_SLICE: (Field("dynamic_slice_sizes", INTS, "dynamic_slice_sizes"),),
    O.PAD: (Field("padding", PADDING, "padding_config"),),
    O.REDUCE: (DIMENSIONS, TO_APPLY),
    O.MAP: (Field("dimensions", INTS, "dimensions", required=False), TO_APPLY),
    O.REDUCE_WINDOW: (WINDOW_ATTR, TO_APPLY),
    O.SELECT_AND_SCATTER: (WINDOW_ATTR, Comp("select", 0), Comp("scatter", 1)),
    O.DOT: (DotDims(), Field("operand_precision", PRECISIONS, "operand_precision", required=False)),
    O.CONVOLUTION: (WINDOW_ATTR, Field("dim_labels", DIM_LABELS, "convolution_dimension_numbers"),
                    Field("feature_group_count", INT, "feature_group_count", required=False, default=1),
                    Field("batch_group_count", INT, "batch_group_count", required=False, default=1),
                    Field("operand_precision", PRECISIONS, "operand_precision", required=False)),
    O.GATHER: (GatherDims(), Field("slice_sizes", INTS, "gather_slice_sizes"),
               Field("indices_are_sorted", BOOL, "indices_are_sorted", required=False, default=False)),
    O.SCATTER: (ScatterDims(),
                Field("indices_are_sorted", BOOL, "indices_are_sorted", required=False, default=False),
                Field("unique_indices", BOOL, "unique_indices", required=False, default=False), TO_APPLY),
    O.SORT: (DIMENSIONS, Field("is_stable", BOOL, "is_stable", required=False, default=False), TO_APPLY),
    # XLA always prints largest=; its parser defaults it to true.
    O.TOPK: (Field("k", INT, "k"), Field("largest", BOOL, "largest", required=False)),
    O.GET_TUPLE_ELEMENT: (Field("index", INT, "tuple_index"),),
    O.CALL: (TO_APPLY,),
    O.WHILE: (Comp("condition", 0), Comp("body", 1)),
    O.CONDITIONAL: (Branches(),),
    O.FUSION: (Field("kind", _enum(A.FusionKind), "fusion_kind"), Comp("calls")),
    O.REDUCE_PRECISION: (Field("exponent_bits", INT, "exponent_bits"),
                         Field("mantissa_bits", INT, "mantissa_bits")),
    O.RNG: (Field("distribution", _enum(A.RandomDistribution), "distribution"),),
    O.RNG_BIT_GENERATOR: (Field("algorithm", _enum(A.RandomAlgorithm), "rng_algorithm"),),
    O.RNG_GET_AND_UPDATE_STATE: (Field("delta", INT, "delta"),),
    O.CUSTOM_CALL: (Field("custom_call_target", STRING, "custom_call_target"),
                    CompList("called_computations")),
}

# Attributes any instruction may carry that we keep verbatim, and where they print: "pre" right after
# the typed subclass attributes, "post" after the called computations, "tail" after the metadata.
RAW_ATTRIBUTE_PLACES = {
    "sharding": "post", "frontend_attributes": "post", "backend_config": "tail",
}
RAW_PRE_ATTRIBUTES = frozenset({
    "parameter_replication", "api_version", "custom_call_has_side_effect", "operand_layout_constraints",
    "output_to_operand_aliasing", "custom_call_schedule", "literal", "algorithm", "result_accuracy",
    "origin", "statistics", "schedule", "padding_type", "sparsity", "is_host_transfer", "channel_id",
})


def attrs_for(opcode: O) -> tuple:
    return OPCODE_ATTRS.get(opcode, ())
