"""Row groups: consecutive kernels whose work items are rows, and which read what the group wrote only at
their own row, run block of rows by block of rows (program.py). Results equal the evaluator with bounds
checks on; softmax's exp lands in the result buffer, which its divide rewrites in place; a kernel that reads a group's output at other rows (a transpose) is not put in that group;
the vector-width flag reaches the IR."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.codegen.cg_helpers import CHECKED, softmax_text
from tfxla_cluster.codegen import compile_module
from tfxla_cluster.codegen.executable import emit_module
from tfxla_cluster.hlo.evaluator import evaluate
from tfxla_cluster.hlo.parser import parse_module

TRANSPOSED = """
HloModule transposed

ENTRY main {
  x = f32[24,24] parameter(0)
  t = f32[24,24] exponential(x)
  tt = f32[24,24] transpose(t), dimensions={1,0}
  ROOT y = f32[24,24] add(t, tt)
}
"""


@pytest.mark.parametrize("rows", [2, 67, 3001])
@pytest.mark.parametrize("row_groups", [True, False])
def test_softmax_kernels_run_as_one_row_group_and_equal_the_evaluator(rows, row_groups):
    text = softmax_text(rows, 37)
    options = dataclasses.replace(CHECKED, row_groups=row_groups)
    prog, _ = emit_module(parse_module(text), options)
    assert len(prog.row_groups) == (1 if row_groups else 0)
    if row_groups:
        assert len(prog.row_groups[0]) == 4
    x = np.random.default_rng(rows).standard_normal((rows, 37)).astype(np.float32)
    exe = compile_module(parse_module(text), options)
    (got,) = exe(x)
    # exp is computed into the result, which the divide then rewrites in place: no temp as large as
    # the result (only the two per-row reductions live in the arena).
    assert exe.arena_bytes < rows * 37 * 4
    want = np.asarray(evaluate(parse_module(text), x))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_a_kernel_reading_other_rows_of_a_group_output_starts_a_new_group():
    prog, _ = emit_module(parse_module(TRANSPOSED), CHECKED)
    names = {k.instruction: k.name for k in prog.kernels}
    for group in prog.row_groups:
        assert not {names["t"], names["tt"]} <= set(group)
    x = np.random.default_rng(1).standard_normal((24, 24)).astype(np.float32)
    (got,) = compile_module(parse_module(TRANSPOSED), CHECKED)(x)
    np.testing.assert_allclose(got, np.exp(x) + np.exp(x).T, rtol=1e-6)


def test_prefer_vector_width_reaches_every_function():
    text = softmax_text(8, 37)
    _, ir_text = emit_module(parse_module(text), dataclasses.replace(CHECKED, prefer_vector_width=512))
    defines = [line for line in ir_text.splitlines() if line.startswith("define")]
    assert defines and all('"prefer-vector-width"="512"' in line for line in defines)
