"""TF's lazy compilation of auto-clustered clusters, against TF's own decisions.

TF 2.21 (``DeviceCompiler::CompileImpl``, ``DeviceCompilationProfiler::ShouldCompileCluster``) always compiles a
cluster at its first execution. After that, with ``--tf_xla_enable_lazy_compilation`` (the default), a new
signature compiles only at its second request; its first runs on TF's kernels. With the flag false every
signature compiles at once. TF's decisions are read from its ``device_compiler`` VLOG in a child process."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc

SHAPES = [4, 5, 5, 6, 4, 6, 7]
AUTO = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"

TF_PROGRAM = textwrap.dedent(f"""
    import numpy as np, sys, tensorflow as tf
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def f(x):
        return tf.nn.relu(x * 2.0 + 1.0) - tf.tanh(x) * 3.0 + tf.exp(x)
    for n in {SHAPES}:
        print("CALL", n, file=sys.stderr, flush=True)
        f(tf.constant(np.ones([n], np.float32)))
""")


def _tf_decisions(flags: str) -> list[str]:
    env = dict(os.environ, TF_XLA_FLAGS=flags, TF_CPP_VMODULE="device_compiler=2", TF_CPP_MIN_LOG_LEVEL="0")
    err = subprocess.run([sys.executable, "-c", TF_PROGRAM], env=env, capture_output=True, text=True,
                         timeout=300, check=True).stderr
    decisions: list[str] = []
    for line in err.splitlines():
        if line.startswith("CALL"):
            decisions.append("")
        elif decisions and not decisions[-1]:
            for needle, what in (("Instantly compiling", "compile"), ("Not compiling for signature", "tf-kernels"),
                                 ("Already Compiled", "hit")):
                if needle in line:
                    decisions[-1] = what
    return decisions


def _our_decisions(flags: str) -> list[str]:
    def fn(x):
        return tf.nn.relu(x * 2.0 + 1.0) - tf.tanh(x) * 3.0 + tf.exp(x)

    spec = tf.TensorSpec([None], tf.float32)
    f = txc.function(fn, flags=flags, input_signature=[spec])
    decisions, before = [], (0, 0)
    for n in SHAPES:
        x = np.linspace(-1, 1, n, dtype=np.float32)
        np.testing.assert_allclose(f(x).numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-6)
        (launcher,) = f.get_compiled(spec).launchers.values()
        cache = launcher.compilation_cache().clusters[launcher.sig.name]
        now = (launcher.stats.compiles, cache.lazy_fallbacks)
        decisions.append("compile" if now[0] > before[0] else "tf-kernels" if now[1] > before[1] else "hit")
        before = now
    return decisions


@pytest.mark.parametrize("lazy", ["", " --tf_xla_enable_lazy_compilation=false"])
def test_new_signatures_compile_as_tf_decides(lazy):
    want = _tf_decisions(AUTO + lazy)
    assert len(want) == len(SHAPES) and all(want), want
    assert _our_decisions(AUTO + lazy) == want
