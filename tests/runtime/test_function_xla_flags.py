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


_TF_DUMP_SCRIPT = """
import tensorflow as tf, numpy as np
tf.function(lambda x: tf.sin(x) * 2.0 + 1.0, jit_compile=True)(tf.constant(np.arange(4, dtype=np.float32)))
"""


def _prefixes(directory, suffix: str) -> set[str]:
    return {name[: -len(suffix)] for name in os.listdir(directory) if name.endswith(suffix)}


def _under_hlo_prefix(ir: set[str], hlo: set[str]) -> bool:
    return all(any(name == p or name.startswith(p + ".") for p in hlo) for name in ir)


def test_llvm_ir_dumped_beside_the_hlo_under_one_module_id(tmp_path, monkeypatch):
    """XLA:CPU writes a module's ``ir-no-opt.ll``/``ir-with-opt.ll`` under the prefix of its HLO dumps
    (``module_NNNN.<name>``, TF 2.21 then a kernel module's name; ours emits one module); a function's own
    ``--xla_dump_to`` dumps its LLVM IR too."""
    theirs = tmp_path / "tf"
    env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={theirs}", TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run([sys.executable, "-c", _TF_DUMP_SCRIPT], env=env, capture_output=True, timeout=300,
                   check=True)
    tf_ir = _prefixes(theirs, ".ir-no-opt.ll")
    assert tf_ir and _under_hlo_prefix(tf_ir, _prefixes(theirs, ".before_optimizations.txt"))
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    ours_dir = tmp_path / "ours"
    f = txc.function(lambda x: tf.sin(x) * 2.0 + 1.0, jit_compile=True,
                     flags=Flags.parse(xla_flags=f"--xla_dump_to={ours_dir}"))
    f(tf.constant(np.arange(4, dtype=np.float32)))
    ir = _prefixes(ours_dir, ".ir-no-opt.ll")
    assert ir and _under_hlo_prefix(ir, _prefixes(ours_dir, ".before_optimizations.txt"))
    assert ir == _prefixes(ours_dir, ".ir-with-opt.ll")
