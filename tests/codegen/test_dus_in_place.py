"""dynamic-update-slice in place (``kernels/loop.py`` ``_emit_dynamic_update_slice``), bit for bit against TF's XLA.

XLA writes a dynamic-update-slice (and a loop fusion with one at its root) in place: the result shares the
updated operand's buffer when buffer assignment allows (else that operand is copied into it first) and only the
update's region is written, the start indices clamped into [0, dim - update dim]. Cases: clamped starts, several
dtypes and ranks, the fused form, a one-index ``tensor_scatter_nd_update`` (scatter_expander's DUS), and a DUS
whose operand is read again afterwards (must not be updated in place)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.compiler.tf2xla.python import xla

import tfxla_cluster as txc
from tfxla_cluster.codegen import CodegenOptions
from tfxla_cluster.codegen.executable import emit_module
from tfxla_cluster.hlo.parser import parse_module

RNG = np.random.RandomState(5)


def _same(fn, *args) -> None:
    want = tf.function(fn, jit_compile=True)(*args)
    got = txc.function(fn, jit_compile=True)(*args)
    for w, g in zip(tf.nest.flatten(want), tf.nest.flatten(got)):
        assert w.dtype == g.dtype and w.numpy().tobytes() == g.numpy().tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64])
@pytest.mark.parametrize("start", [[-4, 0], [3, 1], [9, 7], [100, -100]])
def test_plain_clamped(dtype, start) -> None:
    x = (RNG.randn(12, 8) * 10).astype(dtype)
    u = (RNG.randn(3, 5) * 10).astype(dtype)
    _same(lambda x, u, s: xla.dynamic_update_slice(x, u, s), x, u, np.array(start, np.int32))


@pytest.mark.parametrize("start", [[0, 2, 1], [-1, 9, 3], [2, 0, 0]])
def test_fused_update_on_computed_operand(start) -> None:
    # exp(x) is a temp: the fusion (update u * 2 + 1) writes its region into exp's buffer, which is the result.
    x, u = RNG.randn(4, 6, 5).astype(np.float32), RNG.randn(2, 3, 5).astype(np.float32)
    _same(lambda x, u, s: xla.dynamic_update_slice(tf.exp(x), u * 2.0 + 1.0, s), x, u, np.array(start, np.int64))


def test_operand_read_afterwards_is_not_updated_in_place() -> None:
    x, u = RNG.randn(10, 4).astype(np.float32), RNG.randn(3, 4).astype(np.float32)

    def fn(x, u, s):
        y = tf.exp(x)
        d = xla.dynamic_update_slice(y, tf.sqrt(tf.abs(u)), s)
        return d * 3.0 + y, d
    _same(fn, x, u, np.array([6, 0], np.int32))


@pytest.mark.parametrize("row", [5, 0, 999])
def test_one_index_scatter(row) -> None:
    z, u = RNG.randn(1000, 64).astype(np.float32), RNG.randn(1, 64).astype(np.float32)
    _same(lambda z, u: tf.tensor_scatter_nd_update(z, [[row]], u), z, u)


HLO = """HloModule m

ENTRY main {
  p0 = f32[1000,64]{1,0} parameter(0)
  p1 = f32[1,64]{1,0} parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  e = f32[1000,64]{1,0} exponential(p0)
  ROOT d = f32[1000,64]{1,0} dynamic-update-slice(%s, p1, i, z)
}
"""


@pytest.mark.parametrize("operand, copies", [("e", 0), ("p0", 1)])
def test_only_the_region_is_written(operand, copies) -> None:
    """The kernel's work is the update's elements; a parameter operand is copied into the result first."""
    prog, text = emit_module(parse_module(HLO % operand), CodegenOptions())
    dus = [k for k in prog.kernels if k.kind == "dynamic-update-slice"]
    assert len(dus) == 1 and dus[0].work_items == 64
    assert text.count("call void @\"llvm.memcpy") == copies
