"""A second process whose clusters all come from the persistent cache imports nothing of lowering (tf2hlo's
op families), the HLO passes, the HLO IR, IR emission or the clustering pass: its first call takes the
rewritten graph, the clustering and each cluster's code from disk, with the same cluster names and
results as the process that compiled them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

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
    f = txc.function(dense, flags=FLAGS)
    out = [o.numpy().tolist() for o in f(*ARGS)]
    compiled = next(iter(f._compiled.values()))
    origins = [c.origin for launcher in compiled.launchers.values() for c in launcher.cache.values()]
    print(json.dumps({"events": f.compile_stats().events, "clusters": compiled.clusters, "out": out, "origins": origins,
                      "modules": sorted(m for m in sys.modules if m.startswith(("tfxla_cluster", "llvmlite")))}))
""")

# Imported only by a compile: lowering, the HLO passes and IR, IR emission, the clustering pass.
_COMPILE_ONLY = ("tfxla_cluster.tf2hlo.lower", "tfxla_cluster.tf2hlo.elementwise", "tfxla_cluster.tf2hlo.registry",
                 "tfxla_cluster.passes", "tfxla_cluster.hlo.ir", "tfxla_cluster.hlo.evaluator",
                 "tfxla_cluster.codegen.program", "tfxla_cluster.codegen.kernels",
                 "tfxla_cluster.jit.mark_for_compilation")


def test_a_second_process_on_a_warm_cache_imports_no_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("TFXLA_COMPILE_CACHE", str(tmp_path))
    scope: dict = {}
    exec(_FUNCTION, scope)   # this process compiles (and stores) the same function the child runs
    f = scope["txc"].function(scope["dense"], flags=scope["FLAGS"])
    want = [o.numpy() for o in f(*scope["ARGS"])]
    clusters = next(iter(f._compiled.values())).clusters
    env = {**os.environ, "TFXLA_COMPILE_CACHE": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(Path(tfxla_cluster.__file__).resolve().parents[1]),
                                          os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    child = json.loads(out.stdout.strip().splitlines()[-1])
    events = child["events"]
    # Each cluster's code from disk (the native thread pool's too, unless this process built its pool before,
    # with the cache off).
    assert child["origins"] == ["persistent cache"] * len(clusters)
    # (The graph layer's key holds the function's own name, __inference_dense_N, numbered by the process's
    # history: this test process traced other functions first, so the child's graph layer may miss.)
    assert events.get("persistent-cache clustering hit") == 1
    # A fresh process numbers its clusters from 0, as this one did for its first function.
    assert list(child["clusters"].values()) == list(clusters.values())
    assert all(name.startswith("cluster_") for name in child["clusters"])
    for got, w in zip(child["out"], want):
        np.testing.assert_array_equal(np.asarray(got, np.float32), w)
    loaded = set(child["modules"])
    assert not [m for m in loaded if m.startswith(_COMPILE_ONLY)], sorted(loaded)
