"""Printer ↔ parser: round trips, exact XLA spellings, XLA's own dumps, and error positions."""
import pathlib

import ml_dtypes
import numpy as np
import pytest

from tests.hlo.hlo_corpus import MODULES
from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo.literal import float_to_text, literal_to_text
from tfxla_cluster.hlo.opcode import HloOpcode
from tfxla_cluster.hlo.parser import parse_module, parse_shape
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape
from tfxla_cluster.hlo.verifier import verify_module

TF_DIR = pathlib.Path(__file__).parent / "data" / "tf"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_corpus_round_trips_exactly(name):
    text = MODULES[name]
    module = parse_module(text)
    verify_module(module)
    assert module.to_string() == text
    assert parse_module(module.to_string()).to_string() == text


def test_corpus_covers_every_opcode():
    seen = set()
    for text in MODULES.values():
        for comp in parse_module(text).computations:
            seen |= {i.opcode for i in comp.instructions}
    missing = set(HloOpcode) - seen
    assert not missing, sorted(o.text for o in missing)


@pytest.mark.parametrize("path", sorted(TF_DIR.glob("*.txt")), ids=lambda p: p.name)
def test_parses_tensorflow_dumps(path):
    """TF 2.21's experimental_get_compiler_ir text (old operand-shape style and optimized)."""
    module = parse_module(path.read_text(encoding="utf-8"))
    verify_module(module)
    again = parse_module(module.to_string())
    assert again.to_string() == module.to_string()
    assert again.to_string(operand_shapes=True).count("(f32[") >= 0


def test_operand_shape_style_and_optional_percent():
    text = """HloModule m

ENTRY main {
  a = f32[2]{0} parameter(0)
  b = f32[2] negate(f32[2]{0} a)
  ROOT c = f32[2]{0} add(f32[2]{0} %a, b)
}
"""
    module = parse_module(text)
    assert module.entry.root.name == "c"
    assert module.to_string().splitlines()[-2] == "  ROOT %c = f32[2]{0} add(%a, %b)"
    assert "add(f32[2]{0} %a, f32[2]{0} %b)" in module.to_string(operand_shapes=True)


def test_root_and_entry_default_to_last():
    text = """HloModule m

%f (x: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] negate(%x)
}

%g (x: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %c = f32[] call(%x), to_apply=%f
}
"""
    module = parse_module(text)
    assert module.entry.name == "g"
    assert module.entry.root.opcode is HloOpcode.CALL
    assert module.get_computation("f").root.opcode is HloOpcode.NEGATE
    # Names are unique module-wide, as XLA's parser makes them.
    assert [i.name for i in module.entry.instructions] == ["x.1", "c"]


def test_unknown_attributes_are_kept_verbatim():
    text = MODULES["ATTRIBUTES"]
    module = parse_module(text)
    wh = next(i for i in module.entry.instructions if i.opcode is HloOpcode.WHILE)
    assert wh.raw_attributes["backend_config"] == '{"known_trip_count":{"n":"3"}}'
    dot = next(i for i in module.entry.instructions if i.opcode is HloOpcode.DOT)
    assert dot.raw_attributes["frontend_attributes"] == '{grad_x="false",grad_y="false"}'
    assert dot.metadata.op_type == "MatMul" and dot.metadata.op_name == "MatMul"


def test_metadata_escapes_round_trip():
    text = ('HloModule m\n\nENTRY %e (a: f32[]) -> f32[] {\n'
            '  ROOT %a = f32[] parameter(0), metadata={op_type="Add" op_name="a/\\"q\\"\\\\b" '
            'source_file="x.py" source_line=7 deduplicated_name="fusion.1"}\n}\n')
    module = parse_module(text)
    md = module.entry.root.metadata
    assert md.op_name == 'a/"q"\\b' and md.source_line == 7
    assert md.extra == (("deduplicated_name", '"fusion.1"'),)
    assert module.to_string().split("\n", 2)[2] == text.split("\n", 2)[2]


@pytest.mark.parametrize("value, et, text", [
    (0.1, T.F32, "0.1"), (1e10, T.F32, "1e+10"), (np.inf, T.F32, "inf"), (-np.inf, T.F32, "-inf"),
    (np.nan, T.F32, "nan"), (-np.nan, T.F32, "-nan"), (1 / 3, T.F32, "0.333333343"), (-0.0, T.F32, "-0"),
    (16777217, T.F32, "16777216"), (123456789, T.F32, "123456792"), (0.5, T.F32, "0.5"),
    (3.4028234663852886e38, T.F32, "3.40282347e+38"), (1e10, T.F64, "10000000000"),
    (0.30000000000000004, T.F64, "0.30000000000000004"), (1e-320, T.F64, "9.99988867182683e-321"),
    (0.1, T.BF16, "0.1001"), (1e10, T.BF16, "9.999e+09"), (0.1, T.F16, "0.099976"), (100, T.F16, "100"),
])
def test_float_text_matches_xla(value, et, text):
    """Spellings observed from XLA's RoundTripFpToString (xla/util.cc)."""
    assert float_to_text(np.asarray(value).astype(et.dtype), et) == text


def test_nan_payloads():
    bits = np.array([0x7F800001, 0x7FC00001, 0xFFFFFFFF, 0x7FC00000], dtype=np.uint32).view(np.float32)
    texts = [float_to_text(b, T.F32) for b in bits]
    assert texts == ["nan(0x1)", "nan(0x400001)", "-nan(0x7fffff)", "nan"]
    shape = Shape.array(T.F32, [4])
    module = parse_module(f"HloModule m\n\nENTRY %e () -> f32[4] {{\n  ROOT %c = f32[4]{{0}} constant("
                          f"{literal_to_text(bits, shape)})\n}}\n")
    assert module.entry.root.literal.view(np.uint32).tolist() == bits.view(np.uint32).tolist()


@pytest.mark.parametrize("et", [T.F32, T.F64, T.F16, T.BF16])
def test_float_literals_round_trip_bit_exactly(et):
    rs = np.random.RandomState(1)
    raw = rs.randint(0, 2 ** min(et.bit_width, 31), size=200).astype(np.uint64)
    values = raw.astype({16: np.uint16, 32: np.uint32, 64: np.uint64}[et.bit_width]).view(et.dtype)
    values = np.concatenate([values, np.array([0, -0.0, 1, -1, np.inf, -np.inf]).astype(et.dtype)])
    shape = Shape.array(et, values.shape)
    text = f"HloModule m\n\nENTRY %e () -> {shape.to_string(False)} {{\n  ROOT %c = {shape} constant({literal_to_text(values, shape)})\n}}\n"
    back = parse_module(text).entry.root.literal
    assert back.tobytes() == values.tobytes()


def test_literal_layouts_of_ranks():
    lit = np.arange(8, dtype=np.float32).reshape(2, 1, 2, 2)
    assert literal_to_text(lit, Shape.array(T.F32, lit.shape)) == (
        "{ { /*i0=0*/ { /*i1=0*/ { 0, 1 }, { 2, 3 } } }, { /*i0=1*/ { /*i1=0*/ { 4, 5 }, { 6, 7 } } } }")
    assert literal_to_text(np.array([[True, False]]), Shape.array(T.PRED, [1, 2])) == "{ { 1, 0 } }"
    assert literal_to_text(np.array(True), Shape.scalar(T.PRED)) == "true"
    assert literal_to_text(np.zeros((0, 3), np.float32), Shape.array(T.F32, [0, 3])) == "{  }"
    assert literal_to_text(np.array([1 + 2j], np.complex64), Shape.array(T.C64, [1])) == "{(1, 2)}"
    bf = np.array([1.5], dtype=ml_dtypes.bfloat16)
    assert literal_to_text(bf, Shape.array(T.BF16, [1])) == "{1.5}"


def test_literal_parse_accepts_xla_forms():
    text = """HloModule m

ENTRY %e () -> pred[3] {
  %a = f32[2,2]{1,0} constant({{1,2},{3,4}})
  %b = u64[] constant(-1)
  %c = f16[] constant(65519)
  %d = f32[] constant({5})
  ROOT %p = pred[3]{0} constant({true, 0, 1})
}
"""
    comp = parse_module(text).entry
    assert comp.get_instruction("a").literal.tolist() == [[1, 2], [3, 4]]
    assert comp.get_instruction("b").literal == np.uint64(2 ** 64 - 1)
    assert float(comp.get_instruction("c").literal) == 65504
    assert comp.get_instruction("p").literal.tolist() == [True, False, True]


@pytest.mark.parametrize("text, message", [
    ("%c = u8[] constant(256)", "value 256 is out of range for literal's primitive type U8 namely [0, 255]"),
    ("%c = f16[] constant(65520)", "out of range for literal's primitive type F16"),
    ("%c = f32[2]{0} constant({1, 2, 3})", "literal does not match shape f32[2]{0}"),
    ("%c = f32[] foo()", "unknown opcode: foo"),
    ("%c = f32[] negate(%nope)", "instruction does not exist: nope"),
    ("%c = f32[] parameter(0), bogus=1", "unexpected attribute bogus for parameter"),
    ("%c = f32[2]{0} broadcast(%p)", "attribute dimensions is expected but not seen"),
    ("%c = f32[] reduce(%p, %p), dimensions={}, to_apply=%missing", "computation does not exist: missing"),
    ("%c = f32[2]{0} broadcast(%p), dimensions={x}", "error parsing attribute dimensions"),
    ("%c = f32[2]{2,0} parameter(0)", "is not a permutation"),
])
def test_parse_errors_name_line_and_column(text, message):
    module_text = f"HloModule m\n\nENTRY %e (p: f32[]) -> f32[] {{\n  %p = f32[] parameter(0)\n  {text}\n}}\n"
    with pytest.raises(InvalidArgumentError) as err:
        parse_module(module_text)
    msg = str(err.value)
    assert message in msg
    assert msg.startswith("5:"), msg  # line 5, then the column
    assert msg.splitlines()[1] == "  " + text  # the offending line, then a caret under the column
    assert msg.splitlines()[2].strip() == "^"


def test_parse_error_column_points_at_token():
    with pytest.raises(InvalidArgumentError) as err:
        parse_module("HloModule m\n\nENTRY %e () -> f32[] {\n  ROOT %c = f32[] constant(1) junk\n}\n")
    line, col = str(err.value).split(":")[:2]
    assert (line, col) == ("4", "31")


def test_shapes_and_layouts():
    assert str(parse_shape("f32[2,3]")) == "f32[2,3]{1,0}"
    assert str(parse_shape("f32[2,3]{0,1}")) == "f32[2,3]{0,1}"
    assert str(parse_shape("(f32[2], s32[])")) == "(f32[2]{0}, s32[])"
    assert parse_shape("f32[4,8]{1,0:T(8,128)}").minor_to_major == (1, 0)
    assert parse_shape("(f32[2]{0}, (pred[], u8[1]{0}))").tuple_shapes[1].tuple_shapes[1].dimensions == (1,)
    # Bounded dynamic dimensions (TF's XLA prints Unique's values as f32[<=4]); unbounded ones are refused.
    bounded = parse_shape("f32[<=4,3]")
    assert str(bounded) == "f32[<=4,3]{1,0}" and bounded.dynamic_dimensions == (True, False)
    assert bounded.compatible(parse_shape("f32[4,3]")) and bounded != parse_shape("f32[4,3]")
    assert bounded.to_static() == parse_shape("f32[4,3]")
    with pytest.raises(InvalidArgumentError):
        parse_shape("f32[?]")


def test_window_padding_and_dim_label_spellings():
    module = parse_module(MODULES["ALL_OPS"])
    by_name = {i.name: i for c in module.computations for i in c.instructions}
    assert by_name["rw2"].window.to_text() == "{size=2x3 pad=0_1x1_1}"
    assert by_name["pd"].padding_config.to_text() == "1_2_0x0_1_1"
    assert by_name["conv"].convolution_dimension_numbers.to_text() == "b01f_01io->b01f"
    assert "slice={[0:1:1], [0:4:2]}" in by_name["sl"].to_string()
