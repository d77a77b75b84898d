"""Kernels identical up to their buffers are emitted once: each kernel reads its buffers from a table of
its own, gathered at the call, so a model's repeated blocks share their kernels. Results equal TF's;
the call count is unchanged; bounds-check mode keeps one kernel per call (its handler reads the
program's table)."""
from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.codegen import CodegenOptions
from tfxla_cluster.codegen.executable import emit_module
from tfxla_cluster.hlo.parser import parse_module

RNG = np.random.RandomState(0)
X = RNG.randn(64, 32).astype(np.float32)
WS = [RNG.randn(32, 32).astype(np.float32) * 0.3 for _ in range(4)]


def _blocks(x, w0, w1, w2, w3):
    # Four blocks of the same shapes: dense, bias, tanh, row softmax (a row group), residual.
    for w in (w0, w1, w2, w3):
        x = x + tf.nn.softmax(tf.tanh(tf.matmul(x, w) + 0.25), axis=-1)
    return x


@pytest.fixture(scope="module")
def compiled():
    fn = txc.function(_blocks, jit_compile=True)
    got = fn(X, *WS).numpy()
    return fn, got


def _kernel_defs(ir_text: str) -> list[str]:
    return re.findall(r'^define internal void @"(k_[^"]+)"', ir_text, flags=re.M)


def test_results_equal_tfs(compiled):
    _, got = compiled
    want = tf.function(_blocks)(X, *WS).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_repeated_blocks_share_their_kernels(compiled):
    fn, _ = compiled
    module = parse_module(fn.experimental_get_compiler_ir(X, *WS)(stage="optimized_hlo"))
    shared, ir_shared = emit_module(module, CodegenOptions())
    each, ir_each = emit_module(parse_module(module.to_string()), CodegenOptions(bounds_checks=True))
    assert len(shared.kernels) == len(each.kernels)           # every call is still made
    assert len(_kernel_defs(ir_each)) == len(each.kernels)    # bounds checks: one kernel per call
    defs = _kernel_defs(ir_shared)
    assert len(defs) == len(set(defs)) == len({k.name for k in shared.kernels})
    assert len(defs) <= len(shared.kernels) // 2 + 2, (len(defs), len(shared.kernels))
    assert shared.reused_kernels == len(shared.kernels) - len(defs)
    # A shared kernel names no program slot: it reads its own table, filled at each call.
    assert len(ir_shared) < len(ir_each)
