"""Streaming (non-temporal) stores of flat loops (loops.py ``emit_streaming_flat_loop``): a result of at
least ``STREAM_MIN_BYTES`` is computed block by block into an aligned stack buffer and copied out with
aligned ``!nontemporal`` vector stores, the unaligned head and the tail of each thread's range stored as
usual. The threshold is lowered here so that small arrays take the streaming path, with ranges split
across threads at unaligned points, in-place chains, and several element types. Results are compared
with TF's ops."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tests.codegen.cg_helpers import CHECKED
from tfxla_cluster.codegen import CodegenOptions, compile_module, loops
from tfxla_cluster.codegen.executable import emit_module
from tfxla_cluster.hlo.parser import parse_module

# split across two threads even for these small sizes: each range has its own head and tail
SPLIT = CodegenOptions(threads=2, parallel_min_cost=1024)

GELU = """
HloModule gelu

ENTRY main {
  x = TY[N] parameter(0)
  c = TY[] constant(0.044715)
  cb = TY[N] broadcast(c), dimensions={}
  x3 = TY[N] multiply(x, x)
  x3b = TY[N] multiply(x3, x)
  t = TY[N] multiply(x3b, cb)
  u = TY[N] add(x, t)
  k = TY[] constant(0.7978845608)
  kb = TY[N] broadcast(k), dimensions={}
  v = TY[N] multiply(u, kb)
  th = TY[N] tanh(v)
  one = TY[] constant(1)
  ob = TY[N] broadcast(one), dimensions={}
  w = TY[N] add(th, ob)
  h = TY[] constant(0.5)
  hb = TY[N] broadcast(h), dimensions={}
  hx = TY[N] multiply(x, hb)
  ROOT y = TY[N] multiply(hx, w)
}
"""

# a and b are temporaries each rewritten in place by its user; all of it runs in the output buffer
CHAIN = """
HloModule chain

ENTRY main {
  x = f32[R,C] parameter(0)
  a = f32[R,C] exponential(x)
  b = f32[R,C] tanh(a)
  ROOT c = f32[R,C] multiply(b, x)
}
"""

INT = """
HloModule ints

ENTRY main {
  x = s32[N] parameter(0)
  y = s32[N] parameter(1)
  m = s32[N] multiply(x, y)
  ROOT r = s32[N] add(m, x)
}
"""


@pytest.fixture
def small_threshold(monkeypatch):
    monkeypatch.setattr(loops, "STREAM_MIN_BYTES", 4096)


def _gelu_tf(x):
    return 0.5 * x * (1.0 + tf.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def _streams(text: str, options) -> bool:
    _, ir_text = emit_module(parse_module(text), options)
    return "!nontemporal" in ir_text and "llvm.x86.sse.sfence" in ir_text


@pytest.mark.parametrize("n,dtype", [(15, np.float32), (3 * 1024 + 17, np.float32), (5000, np.float64)])
def test_streamed_gelu_matches_tf(small_threshold, n, dtype):
    text = GELU.replace("TY", "f32" if dtype == np.float32 else "f64").replace("[N]", f"[{n}]")
    assert _streams(text, SPLIT) == (n * np.dtype(dtype).itemsize >= 4096)
    x = np.random.default_rng(n).standard_normal(n).astype(dtype)
    (got,) = compile_module(parse_module(text), SPLIT)(x)
    np.testing.assert_allclose(got, _gelu_tf(tf.constant(x)).numpy(), rtol=2e-6, atol=1e-6)


def test_an_in_place_chain_streams_into_the_output(small_threshold):
    rows, cols = 37, 211
    text = CHAIN.replace("R,C", f"{rows},{cols}")
    prog, ir_text = emit_module(parse_module(text), SPLIT)
    assert "!nontemporal" in ir_text and not prog.plan.of_kind("temp")
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    (got,) = compile_module(parse_module(text), SPLIT)(x)
    np.testing.assert_allclose(got, (tf.tanh(tf.exp(x)) * x).numpy(), rtol=2e-6, atol=1e-7)


def test_integers_stream_exactly(small_threshold):
    n = 4099
    text = INT.replace("[N]", f"[{n}]")
    assert _streams(text, SPLIT)
    rng = np.random.default_rng(1)
    x, y = (rng.integers(-50000, 50000, n).astype(np.int32) for _ in range(2))
    (got,) = compile_module(parse_module(text), SPLIT)(x, y)
    np.testing.assert_array_equal(got, (tf.constant(x) * tf.constant(y) + tf.constant(x)).numpy())


def test_small_results_and_bounds_checks_do_not_stream(small_threshold):
    text = GELU.replace("TY", "f32").replace("[N]", "[5000]")
    assert not _streams(text, dataclasses.replace(CHECKED, parallel_min_cost=1024))
    assert not _streams(GELU.replace("TY", "f32").replace("[N]", "[1000]"), SPLIT)


def test_default_threshold_streams_only_results_beyond_the_caches():
    assert loops.STREAM_MIN_BYTES >= 4 << 20
    assert not _streams(GELU.replace("TY", "f32").replace("[N]", "[5000]"), SPLIT)
