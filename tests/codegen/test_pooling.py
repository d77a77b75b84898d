"""The channel-vectorised max-pool gradient (codegen/kernels/pooling.py): select-and-scatter over
channels-last arrays equals the HLO evaluator bit for bit (ties keep the first window position, NaNs as
the compare says, padding, strides, a channel count that is not a multiple of the vector, f64, the other
compare directions); other forms keep the generic kernel."""
from __future__ import annotations

import numpy as np
import pytest

from tests.codegen.cg_helpers import CHECKED
from tfxla_cluster.codegen import compile_module
from tfxla_cluster.codegen.executable import emit_module
from tfxla_cluster.codegen.kernels import pooling
from tfxla_cluster.hlo.evaluator import evaluate
from tfxla_cluster.hlo.parser import parse_module


def _module(x, src, et="f32", direction="GE", window="size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0",
            layout="{3,2,1,0}", init="0"):
    xs, ss = ",".join(map(str, x)), ",".join(map(str, src))
    return f"""
HloModule pool_grad

sel {{
  a = {et}[] parameter(0)
  b = {et}[] parameter(1)
  ROOT c = pred[] compare(a, b), direction={direction}
}}

add {{
  a = {et}[] parameter(0)
  b = {et}[] parameter(1)
  ROOT s = {et}[] add(a, b)
}}

ENTRY main {{
  x = {et}[{xs}]{layout} parameter(0)
  g = {et}[{ss}]{layout} parameter(1)
  z = {et}[] constant({init})
  ROOT r = {et}[{xs}]{layout} select-and-scatter(x, g, z), window={{{window}}}, select=sel, scatter=add
}}
"""


def _inputs(x, src, dtype, rng):
    # Few distinct values: many ties inside a window; a few NaNs and infinities.
    xv = rng.integers(-3, 4, size=x).astype(dtype)
    flat = xv.reshape(-1)
    flat[rng.integers(0, flat.size, 6)] = np.nan
    flat[rng.integers(0, flat.size, 4)] = np.inf
    flat[rng.integers(0, flat.size, 4)] = -np.inf
    return xv, rng.standard_normal(src).astype(dtype)


CASES = [
    # (x shape, source shape, dtype, direction, window, init)
    ((1, 9, 9, 21), (1, 5, 5, 21), "f32", "GE", "size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0", "0"),
    ((2, 7, 8, 40), (2, 3, 3, 40), "f32", "GE", "size=1x3x3x1 stride=1x2x2x1", "0"),
    ((1, 6, 6, 16), (1, 6, 6, 16), "f32", "GT", "size=1x3x3x1 stride=1x1x1x1 pad=0_0x1_1x1_1x0_0", "0.5"),
    ((1, 6, 5, 8), (1, 3, 5, 8), "f32", "LE", "size=1x2x1x1 stride=1x2x1x1", "0"),
    ((2, 5, 5, 12), (2, 3, 3, 12), "f64", "GE", "size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0", "0"),
    # big enough to be split over the threads
    ((1, 32, 32, 72), (1, 16, 16, 72), "f32", "GE", "size=1x3x3x1 stride=1x2x2x1 pad=0_0x0_1x0_1x0_0", "0"),
]


@pytest.mark.parametrize("x, src, et, direction, window, init", CASES)
def test_matches_the_evaluator_bit_for_bit(x, src, et, direction, window, init):
    module = parse_module(_module(x, src, et, direction, window, init=init))
    instr = module.entry.root
    assert pooling.plan(instr, [type("R", (), {"shape": o.shape})() for o in instr.operands]) is not None
    dtype = np.float32 if et == "f32" else np.float64
    xv, g = _inputs(x, src, dtype, np.random.default_rng(len(x) + src[-1]))
    (got,) = compile_module(module, CHECKED)(xv, g)
    want = np.asarray(evaluate(module, xv, g))
    if x[1] == 32:
        assert [k.tasks for k in emit_module(module, CHECKED)[0].kernels if k.kind == "select-and-scatter"] == [2]
    np.testing.assert_array_equal(got.view(np.uint32 if et == "f32" else np.uint64),
                                  want.view(np.uint32 if et == "f32" else np.uint64))


def test_nchw_keeps_the_generic_kernel():
    text = _module((1, 16, 6, 6), (1, 16, 3, 3), window="size=1x1x2x2 stride=1x1x2x2")
    module = parse_module(text)
    instr = module.entry.root
    assert pooling.plan(instr, [type("R", (), {"shape": o.shape})() for o in instr.operands]) is None
    kernels = emit_module(module, CHECKED)[0].kernels
    assert [k.kind for k in kernels if k.kind == "select-and-scatter"] and all(k.tasks == 1 for k in kernels)
    xv, g = _inputs((1, 16, 6, 6), (1, 16, 3, 3), np.float32, np.random.default_rng(5))
    (got,) = compile_module(module, CHECKED)(xv, g)
    np.testing.assert_array_equal(got, np.asarray(evaluate(module, xv, g)))
