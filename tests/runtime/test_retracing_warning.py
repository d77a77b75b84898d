"""TF's frequent-retracing warning reaches the user under ``tfxla_cluster.function`` and under ``run``,
with TF's wording and limits (compared with real ``tf.function`` on the same calls)."""
from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import tensorflow as tf

import tfxla_cluster as txc

ROOT = Path(__file__).resolve().parents[2]


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _retracing_warnings(wrap, f) -> list[str]:
    g = wrap(f)
    capture = _Capture()
    logger = logging.getLogger("tensorflow")
    logger.addHandler(capture)
    try:
        for n in range(1, 9):           # a new shape each call: every call retraces
            g(tf.ones([n]))
        for _ in range(3):              # and calls that don't
            g(tf.ones([2]))
    finally:
        logger.removeHandler(capture)
    found = [m for m in capture.messages if "triggered tf.function retracing" in m]
    return [re.sub(r" at 0x[0-9a-f]+", "", m) for m in found]


def test_warning_as_tfs_own():
    # TF keys its detector by the Python function's code object: one function each.
    def f(x):
        return x * 2.0 + 1.0

    def g(x):
        return x * 2.0 + 1.0

    theirs = _retracing_warnings(tf.function, f)
    ours = [m.replace(".g>", ".f>") for m in _retracing_warnings(txc.function, g)]
    # TF warns at most twice per function: "5 out of the last 5 calls", then "6 out of the last 6".
    assert len(theirs) == 2 and theirs[0].startswith("5 out of the last 5 calls to <function ")
    assert ours == theirs


def test_warning_under_run(tmp_path):
    script = tmp_path / "retrace.py"
    script.write_text("import tensorflow as tf\n\n@tf.function\ndef step(x):\n    return x + 1.0\n\n"
                      "for n in range(1, 8):\n    step(tf.ones([n]))\nprint('done')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TF_XLA_FLAGS", "TF_CPP_MIN_LOG_LEVEL")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-m", "tfxla_cluster", "run", str(script)], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "done" in proc.stdout
    assert re.search(r"5 out of the last 5 calls to <function step at 0x[0-9a-f]+> triggered tf\.function "
                     r"retracing", proc.stderr), proc.stderr[-2000:]
    assert "tfxla_cluster summary:" in proc.stderr  # the run went through our functions
