"""``txc.function(..., flags=Flags.parse(xla_flags=...))``: the XLA_FLAGS part of a function's own flags
reaches its HLO pipeline (runtime/launcher.py ``_optimize``), as the same text in ``XLA_FLAGS`` does for
TF's XLA. TF parses XLA_FLAGS once per process, so its side runs in a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.flags import Flags

XLA_FLAGS = "--xla_disable_hlo_passes=algsimp,cse"

_TF_SCRIPT = """
import tensorflow as tf, numpy as np
def f(x, y):
    return tf.exp(x) * y + tf.exp(x) * 2.0
x = tf.constant(np.arange(4, dtype=np.float32))
text = tf.function(f, jit_compile=True).experimental_get_compiler_ir(x, x)(stage="optimized_hlo")
print("EXPS", sum(" exponential(" in line for line in text.splitlines()))
"""


def _body(x, y):
    return tf.exp(x) * y + tf.exp(x) * 2.0


def _exponentials(text: str) -> int:
    return sum(" exponential(" in line for line in text.splitlines())


def _tf_exponentials(xla_flags: str) -> int:
    env = dict(os.environ, XLA_FLAGS=xla_flags, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", _TF_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=300, check=True).stdout
    return int(out.split("EXPS")[-1])


def test_function_flags_reach_the_hlo_pipeline(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    x = tf.constant(np.arange(4, dtype=np.float32))
    want = _tf_exponentials(XLA_FLAGS)
    assert want == 2        # TF's XLA keeps both exponentials with CSE off
    ours = txc.function(_body, jit_compile=True, flags=Flags.parse(xla_flags=XLA_FLAGS))
    assert _exponentials(ours.experimental_get_compiler_ir(x, x)(stage="optimized_hlo")) == want
    default = txc.function(_body, jit_compile=True)
    assert _exponentials(default.experimental_get_compiler_ir(x, x)(stage="optimized_hlo")) == 1
    np.testing.assert_array_equal(ours(x, x).numpy(), default(x, x).numpy())
