"""The ``topk`` opcode (XLA's kTopK): parse/print, evaluator and ``topk-decomposer`` + codegen, each
checked against real XLA:CPU (jaxlib) on total-order corner cases (NaNs of both signs, ±0, ±inf, ties)."""
import numpy as np
import pytest

pytest.importorskip("jax")

from tests.hlo.xla_oracle import xla_reprint, xla_run  # noqa: E402

from tfxla_cluster.codegen import compile_module  # noqa: E402
from tfxla_cluster.hlo.evaluator import evaluate  # noqa: E402
from tfxla_cluster.hlo.opcode import HloOpcode as O  # noqa: E402
from tfxla_cluster.hlo.parser import parse_module  # noqa: E402
from tfxla_cluster.passes.pipeline import optimize  # noqa: E402

_TEXT = """HloModule t

ENTRY %e (x: {et}[3,6]) -> ({et}[3,{k}], s32[3,{k}]) {{
  %x = {et}[3,6]{{1,0}} parameter(0)
  ROOT %t = ({et}[3,{k}]{{1,0}}, s32[3,{k}]{{1,0}}) topk(%x), k={k}, largest={largest}
}}
"""

_F32 = np.array([[3, 1, 1, np.nan, -0.0, 0.0],
                 [5, 4, 3, 2, 1, 0],
                 [-np.inf, 2, np.nan, -np.nan, 7, 7]], np.float32)
_S32 = np.array([[3, -1, 3, 9, 9, 0], [1, 1, 1, 1, 1, 1], [-5, 6, -7, 8, 0, 2]], np.int32)


@pytest.mark.parametrize("et, x", [("f32", _F32), ("s32", _S32)])
@pytest.mark.parametrize("largest", ["true", "false"])
@pytest.mark.parametrize("k", [1, 4])
def test_topk_matches_xla(et, x, largest, k):
    text = _TEXT.format(et=et, k=k, largest=largest)
    module = parse_module(text)
    assert module.to_string().strip() == xla_reprint(text).strip()  # we print it as XLA does
    want = xla_run(text, x)
    got_eval = evaluate(module, x)
    optimized, _ = optimize(module.clone())
    assert not any(i.opcode is O.TOPK for c in optimized.computations for i in c.instructions)
    got_native = compile_module(optimized)(x)
    for got in (got_eval, got_native):
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0].view(np.int32) if et == "f32" else got[0],
                                      want[0].view(np.int32) if et == "f32" else want[0])
