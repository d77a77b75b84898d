"""In-place chains that end in an output (program.py ``_move_claims_to_operands``): when the producer of an
entry output writes in place of a temporary operand (XLA's CanShareOperandBufferWithUser), that operand
is computed straight into the output buffer — softmax's exp is written into the result and divided
there, so the arena holds no [rows, cols] temporary. Where the operand is still read after its user, or
escapes as another output, it keeps its own buffer. Results are compared with TF's ops."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tests.codegen.cg_helpers import CHECKED, SOFTMAX_ROOT, softmax_text
from tfxla_cluster.codegen import CodegenOptions, compile_module
from tfxla_cluster.codegen.executable import emit_module
from tfxla_cluster.hlo.parser import parse_module

# ee is read again after the divide: the divide must not overwrite it.
E_STILL_LIVE = """  qq = f32[R,C] fusion(ee, s), kind=kLoop, calls=fused_div
  ROOT y = f32[R,C] add(qq, ee)"""

# ee escapes as output 1: output 0 (the divide) gets a buffer of its own.
E_ESCAPES = """  qq = f32[R,C] fusion(ee, s), kind=kLoop, calls=fused_div
  ROOT t = (f32[R,C], f32[R,C]) tuple(qq, ee)"""

# A chain of three elementwise ops ending at the output: all run in the output buffer.
CHAIN = """
HloModule chain

ENTRY main {
  x = f32[R,C] parameter(0)
  a = f32[R,C] exponential(x)
  b = f32[R,C] tanh(a)
  ROOT c = f32[R,C] multiply(b, b)
}
"""

FAST = CodegenOptions(threads=2)


def _module(tail: str, rows: int, cols: int):
    """The softmax module ending in ``tail`` (or, given a whole module, that module) at these sizes."""
    if tail.lstrip().startswith("HloModule"):
        return parse_module(tail.replace("[R,C]", f"[{rows},{cols}]"))
    return parse_module(softmax_text(rows, cols, tail))


def _x(rows: int, cols: int) -> np.ndarray:
    return np.random.default_rng(rows * cols).standard_normal((rows, cols)).astype(np.float32)


def _slots_of(prog, name: str):
    return [s for s in prog.plan.slots if s.name == name]


@pytest.mark.parametrize("options,rows,cols", [(FAST, 3, 5), (FAST, 300, 130), (CHECKED, 67, 37),
                                                (dataclasses.replace(FAST, row_groups=False), 67, 37)],
                         ids=["fast-small", "fast", "checked", "no-row-groups"])
def test_softmax_exp_is_written_into_the_output_and_divided_there(options, rows, cols):
    prog, _ = emit_module(_module(SOFTMAX_ROOT, rows, cols), options)
    (e_slot,) = _slots_of(prog, "ee")
    assert e_slot.kind == "output" and e_slot.number == 0
    assert prog.output_slots == [e_slot]
    # only the [rows] max and sum are temporaries
    assert [sl.shape.dimensions for sl in prog.plan.of_kind("temp")] == [(rows,), (rows,)]
    x = _x(rows, cols)
    (got,) = compile_module(_module(SOFTMAX_ROOT, rows, cols), options)(x)
    np.testing.assert_allclose(got, tf.nn.softmax(x).numpy(), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("options", [FAST, CHECKED], ids=["fast", "checked"])
def test_an_operand_read_after_its_in_place_user_keeps_its_own_buffer(options):
    rows, cols = 67, 37
    prog, _ = emit_module(_module(E_STILL_LIVE, rows, cols), options)
    # y = qq + ee may finish in ee's buffer (ee dies at y), but qq must not overwrite ee before y reads it
    (e_slot,) = _slots_of(prog, "ee")
    (q_slot,) = _slots_of(prog, "qq")
    assert q_slot.kind == "temp" and q_slot is not e_slot
    x = _x(rows, cols)
    (got,) = compile_module(_module(E_STILL_LIVE, rows, cols), options)(x)
    e = tf.exp(x - tf.reduce_max(x, axis=1, keepdims=True))
    np.testing.assert_allclose(got, (tf.nn.softmax(x) + e).numpy(), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("options", [FAST, CHECKED], ids=["fast", "checked"])
def test_an_operand_that_is_itself_an_output_is_not_overwritten(options):
    rows, cols = 67, 37
    prog, _ = emit_module(_module(E_ESCAPES, rows, cols), options)
    assert prog.output_slots[0] is not prog.output_slots[1]
    x = _x(rows, cols)
    q, e = compile_module(_module(E_ESCAPES, rows, cols), options)(x)
    np.testing.assert_allclose(q, tf.nn.softmax(x).numpy(), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(e, tf.exp(x - tf.reduce_max(x, axis=1, keepdims=True)).numpy(), rtol=2e-6)


def test_an_elementwise_chain_runs_in_the_output_buffer():
    rows, cols = 40, 50
    prog, _ = emit_module(_module(CHAIN, rows, cols), FAST)
    (a_slot,) = _slots_of(prog, "a")
    assert a_slot.kind == "output" and prog.output_slots == [a_slot] and not prog.plan.of_kind("temp")
    x = _x(rows, cols)
    (got,) = compile_module(_module(CHAIN, rows, cols), FAST)(x)
    np.testing.assert_allclose(got, tf.square(tf.tanh(tf.exp(x))).numpy(), rtol=2e-6, atol=1e-7)
