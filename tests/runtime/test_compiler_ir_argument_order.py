"""``experimental_get_compiler_ir`` of a ``jit_compile=True`` function with a ``tf.cond`` (issue 13): TF's HLO
takes the function's arguments in order; our launch node takes them in the cluster's input order (the
predicate first), and the IR texts are renumbered to TF's order. Checked against live TF: the entry's
parameter shapes are TF's, the text runs in real XLA with TF's result, before any call."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc

pytest.importorskip("jax")
from tests.hlo.xla_oracle import xla_parse, xla_run  # noqa: E402


def _f(x, p):
    return tf.cond(p > 0, lambda: x * 2.0, lambda: x - 1.0) + 1.0


def _params(text: str) -> str:
    return text.split("entry_computation_layout={(", 1)[1].split(")->", 1)[0]


@pytest.mark.parametrize("p", [1.0, -1.0])
def test_cond_hlo_takes_the_arguments_in_tfs_order(p) -> None:
    x = np.array([1.0, 2.0], np.float32)
    args = [tf.constant(x), tf.constant(np.float32(p))]
    theirs = tf.function(_f, jit_compile=True)
    ours = txc.function(_f, jit_compile=True)
    ir = ours.experimental_get_compiler_ir(*args)
    hlo, optimized = ir(stage="hlo"), ir(stage="optimized_hlo")
    assert _params(hlo) == _params(theirs.experimental_get_compiler_ir(*args)(stage="hlo"))
    assert _params(optimized) == _params(hlo)
    xla_parse(optimized)
    want = theirs(*args).numpy()
    np.testing.assert_array_equal(xla_run(hlo, x, np.float32(p))[0], want)
    np.testing.assert_array_equal(ours(*args).numpy(), want)
