"""A second process whose clusters all come from the persistent cache imports nothing of lowering (tf2hlo's
op families), the HLO passes, the HLO IR, IR emission, the clustering pass or the must-compile check, and its
compile profile has none of their stages: its first call takes the rewritten graph, the clustering (or a
``jit_compile=True`` function's must-compile check) and each cluster's code from disk, with the same cluster
names and results as the process that compiled them. (Loading the stored object code is LLVM's work:
``llvmlite.binding`` is imported, and with it ``llvmlite.ir``; our IR emission is not.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tfxla_cluster

_FUNCTION = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    import tfxla_cluster as txc

    def dense(x, w):
        y = tf.nn.relu(tf.matmul(x, w) + 0.5)
        return tf.reduce_sum(y * y, axis=1), tf.tanh(y)

    ARGS = (tf.constant(np.arange(32, dtype=np.float32).reshape(4, 8) / 32),
            tf.constant(np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)))
    FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"
""")

_CHILD = _FUNCTION + textwrap.dedent("""
    import json, sys
    f = txc.function(dense, jit_compile=True) if sys.argv[1] == "jit" else txc.function(dense, flags=FLAGS)
    out = [o.numpy().tolist() for o in f(*ARGS)]
    compiled = next(iter(f._compiled.values()))
    origins = [c.origin for launcher in compiled.launchers.values() for c in launcher.cache.values()]
    print(json.dumps({"events": f.compile_stats().events, "clusters": compiled.clusters, "out": out, "origins": origins,
                      "stages": sorted(f.compile_stats().as_dict()["stages"]),
                      "modules": sorted(m for m in sys.modules if m.startswith(("tfxla_cluster", "llvmlite")))}))
""")

# Imported only by a compile: lowering, the HLO passes and IR, IR emission (its contexts, kernel builder and
# loops; the engine's module splitting and kernel sharing), the clustering pass; and by a debug dump.
_COMPILE_ONLY = ("tfxla_cluster.tf2hlo.lower", "tfxla_cluster.tf2hlo.elementwise", "tfxla_cluster.tf2hlo.registry",
                 "tfxla_cluster.passes", "tfxla_cluster.hlo.ir", "tfxla_cluster.hlo.evaluator",
                 "tfxla_cluster.codegen.program", "tfxla_cluster.codegen.kernels",
                 "tfxla_cluster.codegen.context", "tfxla_cluster.codegen.kernel_builder",
                 "tfxla_cluster.codegen.loops", "tfxla_cluster.codegen.irtypes", "tfxla_cluster.codegen.split",
                 "tfxla_cluster.codegen.kernel_share",
                 "tfxla_cluster.jit.mark_for_compilation", "tfxla_cluster.jit.must_compile",
                 "tfxla_cluster.jit.compilability", "tfxla_cluster.jit.build_xla_ops_dump")
# The compile profile's stages of a compile (a hit records "load" and "compile-other" for each cluster).
_COMPILE_STAGES = ("lowering", "hlo-pass", "buffer-assignment", "llvm-ir", "llvm-parse", "llvm-opt", "machine-code")


@pytest.mark.parametrize("mode", ["auto", "jit"])
def test_a_second_process_on_a_warm_cache_imports_no_compiler(tmp_path, mode):
    scope: dict = {}
    exec(_FUNCTION, scope)   # this process compiles the same function the children run (cache off: conftest)
    f = (scope["txc"].function(scope["dense"], jit_compile=True) if mode == "jit"
         else scope["txc"].function(scope["dense"], flags=scope["FLAGS"]))
    want = [o.numpy() for o in f(*scope["ARGS"])]
    clusters = next(iter(f._compiled.values())).clusters
    env = {**os.environ, "TFXLA_COMPILE_CACHE": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(Path(tfxla_cluster.__file__).resolve().parents[1]),
                                          os.environ.get("PYTHONPATH", "")])}
    # A cold process first (this one may have built its native thread pool before, with the cache off: a fresh
    # process stores the pool's code too), then the warm one.
    cold, child = (_run_child(mode, env) for _ in range(2))
    events = child["events"]
    assert not cold["events"].get("persistent-cache hit") and cold["origins"] == ["compiled"] * len(clusters)
    # Each cluster's code from disk, and the native thread pool's.
    assert child["origins"] == ["persistent cache"] * len(clusters)
    assert events.get("persistent-cache hit") == len(clusters) + 1 and not events.get("persistent-cache miss")
    assert events.get("persistent-cache clustering hit") == 1
    assert child["out"] == cold["out"]
    # A fresh process numbers its clusters from 0, as this one did for its first function.
    assert list(child["clusters"].values()) == list(clusters.values())
    assert all(name.startswith("cluster_") for name in child["clusters"])
    for got, w, tf_eager in zip(child["out"], want, scope["dense"](*scope["ARGS"])):
        np.testing.assert_array_equal(np.asarray(got, np.float32), w)
        np.testing.assert_allclose(np.asarray(got, np.float32), tf_eager.numpy(), rtol=1e-5, atol=1e-6)
    loaded = set(child["modules"])
    assert not [m for m in loaded if m.startswith(_COMPILE_ONLY)], sorted(loaded)
    assert not [s for s in child["stages"] if s.startswith(_COMPILE_STAGES)], child["stages"]
    assert "load" in child["stages"]


def _run_child(mode: str, env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])
