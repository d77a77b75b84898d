"""A process's first compile imports the compiler (clustering, lowering, HLO passes, IR emission, the launch
side) while TF's grappler runs (runtime/pipeline.py ``_import_compiler``): after grappler returns, the first
call imports no more of tfxla_cluster. ``TFXLA_IMPORT_ALONGSIDE=0`` leaves those imports to their first use,
with the same results."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import tfxla_cluster

_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    import tfxla_cluster as txc
    from tfxla_cluster.graph import grappler

    seen = {}
    optimize = grappler._optimize

    def recorded(config, meta, alongside):
        out = optimize(config, meta, alongside)
        seen.setdefault("after_grappler", set(sys.modules))
        return out
    grappler._optimize = recorded

    def block(x, k, w):   # a 3x3 stride-1 convolution (Winograd's candidate), then a dense layer
        y = tf.nn.relu(tf.nn.conv2d(x, k, strides=1, padding="SAME"))
        return tf.tanh(tf.matmul(tf.reshape(y, [2, -1]), w))

    args = (tf.constant(np.linspace(-1, 1, 2 * 6 * 6 * 3, dtype=np.float32).reshape(2, 6, 6, 3)),
            tf.constant(np.linspace(-0.5, 0.5, 3 * 3 * 3 * 4, dtype=np.float32).reshape(3, 3, 3, 4)),
            tf.constant(np.linspace(-0.1, 0.1, 144 * 5, dtype=np.float32).reshape(144, 5)))
    before = set(sys.modules)
    f = txc.function(block, flags="--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1")
    out = f(*args).numpy()
    ours = lambda names: sorted(m for m in names if m.startswith("tfxla_cluster"))
    print(json.dumps({"out": out.tolist(), "clusters": len(next(iter(f._compiled.values())).clusters),
                      "during": ours(seen["after_grappler"] - before),
                      "late": ours(set(sys.modules) - seen["after_grappler"])}))
""")


def _run(switch: str) -> dict:
    env = {**os.environ, "TFXLA_COMPILE_CACHE": "off", "TFXLA_IMPORT_ALONGSIDE": switch,
           "PYTHONPATH": os.pathsep.join([str(Path(tfxla_cluster.__file__).resolve().parents[1]),
                                          os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_first_compile_imports_nothing_after_grappler():
    on, off = _run("1"), _run("0")
    assert on["clusters"] >= 1
    # The compiler came in while grappler ran: nothing of ours is imported after it returns.
    assert on["late"] == []
    assert {"tfxla_cluster.codegen.program", "tfxla_cluster.jit.mark_for_compilation",
            "tfxla_cluster.passes.pipeline", "tfxla_cluster.runtime.native"} <= set(on["during"])
    # Switched off, the same modules come in at their first use, after grappler; the results are the same.
    assert {"tfxla_cluster.codegen.program", "tfxla_cluster.jit.mark_for_compilation"} <= set(off["late"])
    assert off["out"] == on["out"] and off["clusters"] == on["clusters"]
