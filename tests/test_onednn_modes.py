"""Both of TF's oneDNN modes on any machine.

TF 2.21 turns oneDNN on by default only on CPUs with AVX-512 (``TF_ENABLE_ONEDNN_OPTS`` overrides it), and
the mode changes TF's CPU kernels and grappler's remapper (``_FusedMatMul``, ``_FusedBatchNormEx``, ...).
The tests whose expectations depend on it carry the ``onednn_mode`` mark (tests/conftest.py); this test
runs exactly those again, in a fresh pytest process, in the mode this process is *not* in — so a change
that breaks either mode is red on whatever machine runs the suite.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INNER = "TFXLA_CLUSTER_ONEDNN_OTHER_MODE_RUN"


def _onednn_on() -> bool:
    from tfxla_cluster.hostinfo import onednn_enabled

    return onednn_enabled()


@pytest.mark.skipif(bool(os.environ.get(INNER)), reason="this is the other-mode run itself")
def test_mode_dependent_tests_pass_in_the_other_onednn_mode():
    other = "0" if _onednn_on() else "1"
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=other, **{INNER: "1"})
    # At most 2 inner workers: beside the outer suite's (setup.cfg: up to 4), each holding TF, jax and LLVM.
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "onednn_mode", "-p", "no:cacheprovider",
                           "-rfE", "--no-header", "--maxprocesses=2"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    tail = "\n".join(proc.stdout.splitlines()[-40:])
    assert proc.returncode == 0, f"with TF_ENABLE_ONEDNN_OPTS={other}:\n{tail}\n{proc.stderr[-2000:]}"
    assert " passed" in tail, tail
