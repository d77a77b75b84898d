"""HLO text parser (xla/hlo/parser/hlo_parser.cc): ``parse_module(text) -> HloModule``.

Recursive descent over characters: module → computations → instructions → shape, opcode, operands,
attributes. It reads our printer's output and XLA's own dumps, old and new:

- operands as ``%name`` or ``shape %name``, with or without ``%``; ``/*index=5*/`` and ``//`` comments;
- the stack frame index XLA prints after the header (``FileNames`` ... ``StackFrames``), kept verbatim;
- layouts ``{1,0}`` (tiling after ``:`` is skipped); ``ROOT`` optional (last instruction is the root);
  ``ENTRY`` optional (last computation is the entry);
- attributes go through the shared table in ``attr_table``; attributes we do not model
  (``backend_config``, ``sharding``, ``frontend_attributes``, ``parameter_replication``, ...) are kept
  verbatim by brace/quote matching, so they print back unchanged. Anything else is an error.

Every error is an ``InvalidArgumentError`` naming the line and column, with the line and a caret.
"""
from __future__ import annotations

import re

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo import attr_table as T
from tfxla_cluster.hlo.attrs import OpMetadata
from tfxla_cluster.hlo.ir import HloComputation, HloInstruction, HloModule
from tfxla_cluster.hlo.literal import _BITS_VIEW
from tfxla_cluster.hlo.opcode import HloOpcode
from tfxla_cluster.hlo.shape import PrimitiveType, Shape

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_NAME = re.compile(r"%?([A-Za-z0-9_.\-]+)")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)")
_FLOAT_WORD = re.compile(r"(-?)(inf|nan)(?:\((0x[0-9a-fA-F]+)\))?")
_SHAPE_START = re.compile(r"([a-z]+\d*)\[")
_STACK_FRAME_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_PRIMITIVE_NAMES = {t.value for t in PrimitiveType} - {"tuple"}


class HloParseError(InvalidArgumentError):
    """Unparseable HLO text: ``line``/``column`` (1-based) and ``what`` is wrong; the message adds the
    offending line and a caret."""

    def __init__(self, message: str, line: int, column: int, what: str) -> None:
        super().__init__(message)
        self.line, self.column, self.what = line, column, what


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.positions: dict[int, int] = {}   # id(computation or instruction) -> offset of its name

    # ---------------------------------------------------------------- low level
    def line_col(self, pos: int) -> tuple[int, int]:
        return self.s.count("\n", 0, pos) + 1, pos - (self.s.rfind("\n", 0, pos) + 1) + 1

    def error(self, message: str, pos: int | None = None) -> HloParseError:
        pos = self.i if pos is None else pos
        line_no, col = self.line_col(pos)
        start = pos - col + 1
        end = self.s.find("\n", pos)
        line = self.s[start:end if end >= 0 else len(self.s)]
        return HloParseError(f"{line_no}:{col}: error: {message}\n{line}\n{' ' * (col - 1)}^", line_no, col,
                             message)

    def ws(self) -> None:
        s, n = self.s, len(self.s)
        while self.i < n:
            c = s[self.i]
            if c in " \t\r\n":
                self.i += 1
            elif s.startswith("/*", self.i):
                end = s.find("*/", self.i + 2)
                if end < 0:
                    raise self.error("unterminated comment")
                self.i = end + 2
            elif s.startswith("//", self.i):
                end = s.find("\n", self.i)
                self.i = n if end < 0 else end
            else:
                break

    def peek(self, tok: str) -> bool:
        self.ws()
        return self.s.startswith(tok, self.i)

    def accept(self, tok: str) -> bool:
        if self.peek(tok):
            self.i += len(tok)
            return True
        return False

    def expect(self, tok: str, what: str | None = None) -> None:
        if not self.accept(tok):
            raise self.error(f"expects '{tok}'" + (f" {what}" if what else ""))

    def match(self, pattern: re.Pattern, what: str) -> re.Match:
        self.ws()
        m = pattern.match(self.s, self.i)
        if not m:
            raise self.error(f"expects {what}")
        self.i = m.end()
        return m

    def ident(self, what: str = "an identifier") -> str:
        return self.match(_IDENT, what)[0]

    def name(self) -> str:
        return self.match(_NAME, "a name")[1]

    def integer(self) -> int:
        m = self.match(re.compile(r"[-+]?\d+"), "an integer")
        return int(m[0])

    def raw_value(self) -> tuple[str, int]:
        """Text up to the next top-level ',' or end of line, matching brackets and quotes."""
        self.ws()
        start, depth, s, n = self.i, 0, self.s, len(self.s)
        while self.i < n:
            c = s[self.i]
            if c == '"':
                j = self.i + 1
                while j < n and s[j] != '"':
                    j += 2 if s[j] == "\\" else 1
                if j >= n:
                    raise self.error("unterminated string", self.i)
                self.i = j + 1
                continue
            if c in "{[(":
                depth += 1
            elif c in "}])":
                if depth == 0:
                    break
                depth -= 1
            elif depth == 0 and c in ",\n":
                break
            self.i += 1
        if depth:
            raise self.error("unbalanced brackets in attribute value", start)
        return s[start:self.i].strip(), start

    # ---------------------------------------------------------------- shapes
    def shape(self) -> Shape:
        self.ws()
        if self.accept("("):
            elems = []
            if not self.accept(")"):
                elems.append(self.shape())
                while self.accept(","):
                    elems.append(self.shape())
                self.expect(")", "at the end of a tuple shape")
            return Shape.tuple_of(elems)
        pos = self.i
        m = _SHAPE_START.match(self.s, self.i)
        if not m or m[1] not in _PRIMITIVE_NAMES:
            raise self.error("expects a shape, e.g. f32[2,3]{1,0}")
        et = PrimitiveType(m[1])
        self.i = m.end()
        dims, dynamic = [], []
        if not self.accept("]"):
            while True:
                self.ws()
                if self.peek("?"):
                    raise self.error("unbounded dynamic dimensions are not supported (bounded ones, <=N, are)")
                dynamic.append(self.accept("<="))
                dims.append(self.integer())
                if self.accept("]"):
                    break
                self.expect(",", "between dimensions")
        layout = None
        if self.s.startswith("{", self.i):  # a layout must follow the ']' directly
            self.i += 1
            layout = []
            self.ws()
            while not self.peek("}"):
                if self.accept(":"):  # tiling / memory space: not modelled
                    depth = 0
                    while self.i < len(self.s) and not (self.s[self.i] == "}" and depth == 0):
                        depth += {"(": 1, ")": -1}.get(self.s[self.i], 0)
                        self.i += 1
                    break
                layout.append(self.integer())
                self.accept(",")
            self.expect("}", "at the end of a layout")
        try:
            return Shape(et, tuple(dims), tuple(layout) if layout is not None and dims else None, (), tuple(dynamic))
        except InvalidArgumentError as e:
            raise self.error(str(e), pos) from None

    # ---------------------------------------------------------------- literals
    def literal(self, shape: Shape):
        self.ws()
        if shape.is_tuple:
            self.expect("(", "to start a tuple literal")
            values = []
            for k, sub in enumerate(shape.tuple_shapes):
                if k:
                    self.expect(",", "between tuple literal elements")
                values.append(self.literal(sub))
            self.expect(")", "to end a tuple literal")
            return tuple(values)
        pos = self.i
        if shape.rank == 0:
            braced = self.accept("{")  # some printers brace scalars: constant({3})
            value = self.element(shape.element_type)
            if braced:
                self.expect("}")
            return np.asarray(value, dtype=shape.dtype).reshape(())
        nested = self.nested_elements(shape.element_type)
        dims = []
        probe = nested
        while isinstance(probe, list):
            dims.append(len(probe))
            probe = probe[0] if probe else None
        flat: list = []

        def flatten(x, depth):
            if depth == shape.rank:
                if isinstance(x, list):
                    raise self.error(f"literal nests deeper than the rank of {shape}", pos)
                flat.append(x)
                return
            if not isinstance(x, list) or len(x) != shape.dimensions[depth]:
                raise self.error(f"literal does not match shape {shape}", pos)
            for y in x:
                flatten(y, depth + 1)

        flatten(nested, 0)
        return np.asarray(flat, dtype=shape.dtype).reshape(shape.dimensions)

    def nested_elements(self, et: PrimitiveType):
        self.expect("{", "to start an array literal")
        items = []
        if self.accept("}"):
            return items
        while True:
            self.ws()
            items.append(self.nested_elements(et) if self.peek("{") else self.element(et))
            if self.accept("}"):
                return items
            self.expect(",", "between literal elements")

    def element(self, et: PrimitiveType):
        pos = self.i
        self.ws()
        if et.is_complex:
            self.expect("(", "to start a complex value")
            re_ = self.element(et.component_type)
            self.expect(",")
            im = self.element(et.component_type)
            self.expect(")")
            value = complex(float(re_), float(im))
        elif et is PrimitiveType.PRED:
            if self.accept("true"):
                value = True
            elif self.accept("false"):
                value = False
            else:
                value = self.integer() != 0
        elif et.is_float:
            value = self.float_element(et)
        else:
            value = self.integer()
            info = np.iinfo(et.dtype)
            if et is PrimitiveType.U64 and -(1 << 63) <= value < 0:
                value += 1 << 64  # XLA reads u64 literals through int64, so -1 is all ones
            if not info.min <= value <= info.max:
                raise self.error(f"value {value} is out of range for literal's primitive type "
                                 f"{et.value.upper()} namely [{info.min}, {info.max}]", pos)
        return value

    def float_element(self, et: PrimitiveType):
        self.ws()
        pos = self.i
        m = _FLOAT_WORD.match(self.s, self.i)
        if m and not _IDENT.match(self.s, m.end()):
            self.i = m.end()
            sign, word, payload = m[1], m[2], m[3]
            if word == "inf":
                return float("-inf") if sign else float("inf")
            mbits = et.mantissa_bits
            bits = int(payload, 16) if payload else 1 << (mbits - 1)
            raw = (int(bool(sign)) << (et.bit_width - 1)) | (((1 << et.exponent_bits) - 1) << mbits) | (
                bits & ((1 << mbits) - 1))
            return np.array([raw], dtype=_BITS_VIEW[et]).view(et.dtype)[0]
        text = self.match(_NUMBER, "a number")[0]
        value = np.asarray(float(text)).astype(np.float32 if et in (PrimitiveType.F16, PrimitiveType.BF16)
                                                else np.float64)
        with np.errstate(over="ignore"):
            result = value.astype(et.dtype)
        if np.isinf(result.astype(np.float64)) and not np.isinf(value):  # finite text that rounds to inf
            big = float(np.finfo(et.dtype).max)
            raise self.error(f"value {text} is out of range for literal's primitive type "
                             f"{et.value.upper()} namely [{-big:g}, {big:g}]", pos)
        return result

    # ---------------------------------------------------------------- module / computation
    def module(self) -> HloModule:
        self.ws()
        if not self.accept("HloModule"):
            raise self.error("expects HloModule")
        module = HloModule(self.name())
        while self.accept(","):
            key = self.ident("a module attribute")
            self.expect("=")
            value, _ = self.raw_value()
            if key == "is_scheduled":
                module.is_scheduled = value == "true"
            elif key != "entry_computation_layout":
                module.raw_attributes[key] = value
        module.stack_frames = self.stack_frame_sections()
        comps: dict[str, HloComputation] = {}
        entry = None
        order: list[HloComputation] = []
        self.ws()
        while self.i < len(self.s):
            is_entry = self.accept("ENTRY")
            comp = self.computation(comps)
            if comp.name in comps:
                raise self.error(f"computation {comp.name} is defined twice")
            comps[comp.name] = comp
            order.append(comp)
            if is_entry:
                if entry is not None:
                    raise self.error("more than one ENTRY computation")
                entry = comp
            self.ws()
        if not order:
            raise self.error("module has no computations")
        entry = entry or order[-1]
        for comp in order:
            module.add_computation(comp, entry=comp is entry)
            for instr in comp.instructions:
                if instr.opcode is HloOpcode.FUSION:
                    instr.fused_computation.is_fusion_computation = True
        return module

    def stack_frame_sections(self) -> str:
        """XLA's stack frame index (``FileNames``, ``FunctionNames``, ``FileLocations``, ``StackFrames``
        sections of ``N value`` lines after the header), kept verbatim: metadata's ``stack_frame_id``
        points into it, nothing we run does."""
        start = None
        while True:
            self.ws()
            m = _IDENT.match(self.s, self.i)
            if not m or m[0] not in _STACK_FRAME_SECTIONS:
                break
            start = self.i if start is None else start
            self.i = m.end()
            while True:
                self.ws()
                if not re.match(r"\d", self.s[self.i:self.i + 1]):
                    break
                end = self.s.find("\n", self.i)
                self.i = len(self.s) if end < 0 else end
        return "" if start is None else self.s[start:self.i].rstrip()

    def computation(self, comps: dict[str, HloComputation]) -> HloComputation:
        self.ws()
        pos = self.i
        comp = HloComputation(self.name())
        self.positions[id(comp)] = pos
        if self.accept("("):  # the signature repeats what the parameters say
            depth = 1
            while depth and self.i < len(self.s):
                depth += {"(": 1, ")": -1}.get(self.s[self.i], 0)
                self.i += 1
            self.expect("->", "after the computation's parameters")
            self.shape()
        self.expect("{", "to start a computation")
        names: dict[str, HloInstruction] = {}
        root = None
        while not self.accept("}"):
            if self.i >= len(self.s):
                raise self.error("expects '}' at the end of a computation")
            is_root = self.accept("ROOT")
            instr = self.instruction(names, comps)
            comp.add_instruction(instr, unique_name=False)
            if is_root:
                if root is not None:
                    raise self.error(f"computation {comp.name} has more than one ROOT")
                root = instr
        if not comp.instructions:
            raise self.error(f"computation {comp.name} has no instructions")
        comp.set_root(root or comp.instructions[-1])
        return comp

    # ---------------------------------------------------------------- instruction
    def instruction(self, names: dict[str, HloInstruction], comps: dict[str, HloComputation]) -> HloInstruction:
        self.ws()
        pos = self.i
        name = self.name()
        if name in names:
            raise self.error(f"instruction {name} is defined twice", pos)
        self.expect("=")
        shape = self.shape()
        op_pos = self.i
        op_text = self.ident("an opcode")
        try:
            opcode = HloOpcode(op_text)
        except ValueError:
            raise self.error(f"unknown opcode: {op_text}", op_pos) from None
        instr = HloInstruction(name, opcode, shape)
        self.positions[id(instr)] = pos
        self.expect("(", "after the opcode")
        if opcode is HloOpcode.PARAMETER:
            instr.parameter_number = self.integer()
            self.expect(")")
        elif opcode is HloOpcode.CONSTANT:
            if self.accept("{...}"):
                instr.literal_elided = True
            else:
                instr.literal = self.literal(shape)
            self.expect(")", "at the end of the constant's literal")
        else:
            instr.operands = self.operands(names)
        attrs: dict[str, str] = {}
        positions: dict[str, int] = {}
        key_positions: dict[str, int] = {}
        while self.inline_accept(","):
            self.ws()
            key_pos = self.i
            key = self.ident("an attribute name")
            self.expect("=")
            value, vpos = self.raw_value()
            if key in attrs:
                raise self.error(f"attribute {key} already exists", key_pos)
            attrs[key], positions[key], key_positions[key] = value, vpos, key_pos
        self.apply_attributes(instr, attrs, positions, names, comps, op_pos, key_positions)
        self.end_of_line()
        names[name] = instr
        return instr

    def inline_accept(self, tok: str) -> bool:
        """Like ``accept`` but without crossing a line break (attributes stay on their line)."""
        j = self.i
        while j < len(self.s) and self.s[j] in " \t\r":
            j += 1
        if self.s.startswith(tok, j):
            self.i = j + len(tok)
            return True
        return False

    def end_of_line(self) -> None:
        """An instruction ends its line (only '}' or a comment may follow)."""
        j = self.i
        while j < len(self.s) and self.s[j] in " \t\r":
            j += 1
        if j < len(self.s) and self.s[j] not in "\n}" and not self.s.startswith(("/*", "//"), j):
            raise self.error("expects ',' and an attribute, or the end of the instruction", j)

    def operands(self, names: dict[str, HloInstruction]) -> list[HloInstruction]:
        result = []
        if self.accept(")"):
            return result
        while True:
            self.ws()
            if self._at_shape():
                self.shape()  # the operand's shape is redundant with its definition
            pos = self.i
            ref = self.name()
            if ref not in names:
                raise self.error(f"instruction does not exist: {ref}", pos)
            result.append(names[ref])
            if self.accept(")"):
                return result
            self.expect(",", "between operands")

    def _at_shape(self) -> bool:
        if self.s.startswith("(", self.i):
            return True
        m = _SHAPE_START.match(self.s, self.i)
        return bool(m) and m[1] in _PRIMITIVE_NAMES

    def apply_attributes(self, instr, attrs, positions, names, comps, op_pos: int,
                         key_positions: dict[str, int] | None = None) -> None:
        def computation(name: str) -> HloComputation:
            if name not in comps:
                raise T.AttrError(f"computation does not exist: {name}", "")
            return comps[name]

        ctx = T.ParseContext(computation)
        try:
            for entry in T.attrs_for(instr.opcode):
                entry.parse(instr, attrs, ctx)
        except T.AttrError as e:
            raise self.error(str(e), positions.get(e.attr_name, op_pos)) from None
        if None in instr.called_computations:
            raise self.error(f"{instr.opcode.text} is missing a called computation", op_pos)
        for key, value in attrs.items():
            if key == "metadata":
                instr.metadata = self.metadata(value, positions[key])
            elif key == "control-predecessors":
                preds = [t.strip().lstrip("%") for t in value.strip()[1:-1].split(",") if t.strip()]
                for p in preds:
                    if p not in names:
                        raise self.error(f"instruction does not exist: {p}", positions[key])
                instr.control_predecessors = [names[p] for p in preds]
            elif key in T.RAW_ATTRIBUTE_PLACES or key in T.RAW_PRE_ATTRIBUTES:
                instr.raw_attributes[key] = value
            else:
                raise self.error(f"unexpected attribute {key} for {instr.opcode.text}",
                                 (key_positions or positions)[key])

    def metadata(self, text: str, pos: int) -> OpMetadata:
        if not (text.startswith("{") and text.endswith("}")):
            raise self.error("expects metadata={...}", pos)
        known: dict[str, object] = {}
        extra = []
        for m in re.finditer(r'([A-Za-z_]+)=("(?:[^"\\]|\\.)*"|\{[^}]*\}|[^\s}]+)', text[1:-1]):
            key, value = m[1], m[2]
            if key in ("op_type", "op_name", "source_file") and value.startswith('"'):
                known[key] = T.c_unescape(value[1:-1])
            elif key == "source_line" and value.lstrip("-").isdigit():
                known[key] = int(value)
            else:
                extra.append((key, value))
        return OpMetadata(extra=tuple(extra), **known)


def parse_module(text: str) -> HloModule:
    """Parse HLO module text (ours or XLA's) into an ``HloModule``."""
    return _Parser(text).module()


def parse_module_located(text: str):
    """``(module, locate)``: ``locate(x)`` is the (line, column) where computation or instruction ``x``
    of the parsed module is defined in ``text`` (for messages about the text), or None."""
    p = _Parser(text)
    module = p.module()

    def locate(x) -> tuple[int, int] | None:
        pos = p.positions.get(id(x))
        return None if pos is None else p.line_col(pos)
    return module, locate


def parse_shape(text: str) -> Shape:
    """Parse one shape, e.g. ``f32[2,3]{1,0}`` or ``(f32[], s32[2])``."""
    p = _Parser(text)
    shape = p.shape()
    p.ws()
    if p.i != len(text):
        raise p.error("unexpected text after the shape")
    return shape
