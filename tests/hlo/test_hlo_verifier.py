"""Verifier: every check fails on a module that breaks it, naming the instruction."""
import numpy as np
import pytest

from tests.hlo.hlo_corpus import MODULES
from tfxla_cluster.errors import InternalError
from tfxla_cluster.hlo.builder import HloBuilder, make_scalar_computation
from tfxla_cluster.hlo.ir import HloInstruction, HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape
from tfxla_cluster.hlo.verifier import verify_module

HEADER = "HloModule m\n\n"


def entry(body: str, params: str = "a: f32[2,3]", result: str = "f32[2,3]", extra: str = "") -> str:
    return f"{HEADER}{extra}ENTRY %e ({params}) -> {result} {{\n{body}\n}}\n"


ADD = "%add (x: f32[], y: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n  %y = f32[] parameter(1)\n  ROOT %s = f32[] add(%x, %y)\n}\n\n"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_corpus_verifies(name):
    verify_module(parse_module(MODULES[name]))


@pytest.mark.parametrize("body, extra, message", [
    # elementwise operands must have identical shapes (no implicit broadcast)
    ("  %a = f32[2,3]{1,0} parameter(0)\n  %b = f32[3]{0} constant({1, 2, 3})\n  ROOT %r = f32[2,3]{1,0} add(%a, %b)",
     "", "identical dimensions"),
    ("  %a = f32[2,3]{1,0} parameter(0)\n  ROOT %r = f32[3,2]{1,0} negate(%a)", "", "shape is f32[3,2]"),
    ("  %a = f32[2,3]{1,0} parameter(0)\n  %i = s32[2,3]{1,0} convert(%a)\n  ROOT %r = f32[2,3]{1,0} add(%a, %i)",
     "", "element types differ"),
    # broadcast: operand dim sizes must match the mapped output dims
    ("  %a = f32[2,3]{1,0} parameter(0)\n  %c = f32[3]{0} constant({1, 2, 3})\n"
     "  ROOT %r = f32[2,3]{1,0} broadcast(%c), dimensions={0}", "", "does not match output dimension 0"),
    ("  %a = f32[2,3]{1,0} parameter(0)\n  ROOT %r = f32[5]{0} reshape(%a)", "", "element type and count"),
    ("  %a = f32[2,3]{1,0} parameter(0)\n  ROOT %r = f32[3,2]{1,0} transpose(%a), dimensions={0,0}", "",
     "invalid dimensions"),
    ("  %a = f32[2,3]{1,0} parameter(0)\n  %z = f32[] constant(0)\n"
     "  ROOT %r = f32[3]{0} reduce(%a, %z), dimensions={1}, to_apply=%add", ADD, "shape is f32[3]"),
    ("  %a = f32[2,3]{1,0} parameter(0)\n  %z = s32[] constant(0)\n"
     "  ROOT %r = f32[2]{0} reduce(%a, %z), dimensions={1}, to_apply=%add", ADD, "init value 0 must be a f32 scalar"),
    ("  %a = f32[2,3]{1,0} parameter(0)\n  ROOT %r = f32[2,2]{1,0} dot(%a, %a), lhs_contracting_dims={1}, "
     "rhs_contracting_dims={0}", "", "contracting dimension sizes differ"),
    ("  %a = f32[2,3]{1,0} parameter(0)\n  %t = (f32[2,3]{1,0}) tuple(%a)\n"
     "  ROOT %r = f32[2,3]{1,0} get-tuple-element(%t), index=1", "", "index 1 out of range"),
    # to_apply signatures
    ("  %a = f32[2,3]{1,0} parameter(0)\n  %z = f32[] constant(0)\n"
     "  ROOT %r = f32[2]{0} reduce(%a, %z), dimensions={1}, to_apply=%neg",
     "%neg (x: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n  ROOT %n = f32[] negate(%x)\n}\n\n", "takes (f32[])"),
    ("  %a = f32[2,3]{1,0} parameter(0)\n  ROOT %r = f32[2,3]{1,0} negate(%a, %a)", "", "expects 1 operands"),
    ("  %a = f32[2,3]{1,0} parameter(0)\n  ROOT %r = f32[2,2]{1,0} slice(%a), slice={[0:2], [2:4]}", "",
     "out of bounds"),
    ("  %a = f32[2,3]{1,0} parameter(0)\n  %b = f32[2,3]{1,0} parameter(2)\n  ROOT %r = f32[2,3]{1,0} add(%a, %b)",
     "", "parameter numbers [0, 2]"),
    ("  %a = f32[2,3]{1,0} parameter(0)\n  %c = f32[2]{0} constant({1, 2})\n"
     "  ROOT %r = f32[2,3]{1,0} select(%c, %a, %a)", "", "predicate must be pred"),
    ("  %a = f32[2,3]{1,0} parameter(0)\n  %z = f32[] constant(0)\n"
     "  ROOT %r = f32[3,3]{1,0} pad(%a, %z), padding=0_1x0_0_1", "", "shape is f32[3,3]"),
])
def test_shape_errors_name_the_instruction(body, extra, message):
    module = parse_module(entry(body, extra=extra))
    with pytest.raises(InternalError) as err:
        verify_module(module)
    assert message in str(err.value)
    assert "computation %e" in str(err.value)


def _simple_module():
    b = HloBuilder("main")
    p = b.parameter(0, Shape.array(T.F32, [4]), "p")
    n = b.negate(p)
    b.add(p, n)
    m = HloModule("m")
    m.add_entry_computation(b.build())
    return m, p, n


def test_use_before_definition():
    m, p, n = _simple_module()
    comp = m.entry
    comp.instructions = [comp.instructions[0], comp.instructions[2], comp.instructions[1]]
    with pytest.raises(InternalError, match="used before it is defined"):
        verify_module(m)
    comp.sort_topologically()
    verify_module(m)


def test_duplicate_names_across_computations():
    m, p, n = _simple_module()
    reducer = make_scalar_computation(O.ADD, T.F32)
    m.add_computation(reducer)
    reducer.instructions[0].name = "p"
    with pytest.raises(InternalError, match="not unique in the module"):
        verify_module(m)


def test_operand_from_another_computation():
    m, p, n = _simple_module()
    other = make_scalar_computation(O.ADD, T.F32)
    m.add_computation(other)
    other.root.operands[0] = p
    with pytest.raises(InternalError, match="not in this computation"):
        verify_module(m)


def test_root_must_belong_and_entry_must_exist():
    m, p, n = _simple_module()
    m.entry.root = HloInstruction("ghost", O.CONSTANT, Shape.scalar(T.F32), literal=np.float32(0))
    with pytest.raises(InternalError, match="root"):
        verify_module(m)
    empty = HloModule("e")
    with pytest.raises(InternalError, match="no entry"):
        verify_module(empty)


def test_literal_must_match_shape():
    m, p, n = _simple_module()
    comp = m.entry
    c = HloInstruction("c", O.CONSTANT, Shape.array(T.F32, [2]), literal=np.zeros(3, np.float32))
    comp.add_instruction(c)
    with pytest.raises(InternalError, match="literal float32\\[3\\] does not match shape f32\\[2\\]"):
        verify_module(m)


def test_called_computation_must_be_in_module():
    b = HloBuilder("main")
    x = b.parameter(0, Shape.array(T.F32, [3]), "x")
    b.reduce(x, b.constant(0.0, T.F32), [0], make_scalar_computation(O.ADD, T.F32))
    comp = b.build()
    m = HloModule("m")
    m.computations.append(comp)
    comp.parent = m
    m.entry = comp
    with pytest.raises(InternalError, match="not in the module"):
        verify_module(m)


def test_while_signature_and_conditional_branches():
    body = ("  %a = f32[2,3]{1,0} parameter(0)\n  %p = pred[] constant(true)\n"
            "  ROOT %r = f32[2,3]{1,0} conditional(%p, %a, %a), true_computation=%id, false_computation=%neg2")
    extra = ("%id (x: f32[2,3]) -> f32[2,3] {\n  ROOT %x = f32[2,3]{1,0} parameter(0)\n}\n\n"
             "%neg2 (x: f32[3]) -> f32[3] {\n  %x = f32[3]{0} parameter(0)\n  ROOT %n = f32[3]{0} negate(%x)\n}\n\n")
    with pytest.raises(InternalError, match="branch %neg2 takes"):
        verify_module(parse_module(entry(body, extra=extra)))
    body = ("  %a = f32[2,3]{1,0} parameter(0)\n"
            "  ROOT %r = f32[2,3]{1,0} while(%a), condition=%id, body=%id")
    with pytest.raises(InternalError, match="condition %id returns f32\\[2,3\\]"):
        verify_module(parse_module(entry(body, extra=extra)))
