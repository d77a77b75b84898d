"""Our internal use of TF's XLA never shows in the user's ``--xla_dump_to`` directory or TF's log.

Stage: clustering helper (tfops/xla_kernels.py initialises XLA's kernel registry). A fresh process with
``XLA_FLAGS=--xla_dump_to=DIR`` runs a function through our pipeline: DIR holds only our cluster's
modules, TF's once-per-process "Compiled cluster using XLA!" line is not logged, and a real
``jit_compile=True`` call afterwards still dumps as the user asked.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys, tensorflow as tf, tfxla_cluster as txc
f = txc.function(lambda x: tf.nn.relu(x) * 2.0, jit_compile=True)
print(f(tf.constant([1.0, -1.0])).numpy().tolist())
sys.stdout.flush()
import os
print("DUMP:" + ",".join(sorted(os.listdir(sys.argv[1]))))
sys.stdout.flush()
if sys.argv[2] == "real":
    @tf.function(jit_compile=True)
    def users_own(x):
        return x * 3.0
    users_own(tf.constant(1.0))
"""


def _run(tmp_path: Path, then: str) -> tuple[subprocess.CompletedProcess, Path]:
    dump = tmp_path / f"dump_{then}"
    env = {k: v for k, v in os.environ.items() if k != "TF_XLA_FLAGS"}
    env.update(XLA_FLAGS=f"--xla_dump_to={dump}", TF_CPP_MIN_LOG_LEVEL="0",
               PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(dump), then], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, dump


def test_warm_up_leaves_no_trace_in_dump_dir_or_log(tmp_path):
    proc, dump = _run(tmp_path, "none")
    assert "[2.0, 0.0]" in proc.stdout
    ours = proc.stdout.split("DUMP:")[1].split()[0].split(",")
    assert ours and all(name == "manifest.json" or ".cluster_0." in name for name in ours), ours
    assert not any("lambda" in name for name in os.listdir(dump))
    assert "Compiled cluster using XLA!" not in proc.stderr


def test_users_real_xla_still_dumps(tmp_path):
    proc, dump = _run(tmp_path, "real")
    # The user's own jit_compile=True function: TF's XLA dumps it (flags untouched by our warm-up).
    assert any("users_own" in name for name in os.listdir(dump)), sorted(os.listdir(dump))
    assert not any("lambda" in name for name in os.listdir(dump))
    assert "Compiled cluster using XLA!" in proc.stderr
