"""A plain ``pip install .`` (a wheel, not editable) works from any directory.

The wheel is built from a copy of the source tree (so the test never writes ``build/`` into the
checkout), installed into a fresh venv that sees the system site-packages (TF is not downloaded
again), and its console script runs ``demo`` on a bundled sample from an unrelated directory. Every
subprocess has a timeout, so a hang fails the test instead of stalling the suite.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.install


def _run(cmd: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TF_XLA_FLAGS", "XLA_FLAGS")}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_wheel_carries_samples_and_demo_runs_from_elsewhere(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "tests", "build", "dist", "*.egg-info",
                                                             "__pycache__", ".pytest_cache", ".hypothesis", "out"))
    wheels = tmp_path / "wheels"
    # No build isolation: setuptools and wheel are already installed (test extra); nothing is fetched.
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
          str(src)], cwd=tmp_path, timeout=300)
    (wheel,) = wheels.glob("tfxla_cluster-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for sample in ("transformer_block", "mlp"):
        assert f"tfxla_cluster/_graphs/{sample}.pbtxt" in names
        assert f"tfxla_cluster/_graphs/tf/{sample}/inputs.npz" in names

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], cwd=tmp_path, timeout=300)
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], cwd=tmp_path, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # The venv's copy, not the editable checkout the suite runs from.
    where = _run([str(python), "-c", "import tfxla_cluster; print(tfxla_cluster.__file__)"], cwd=elsewhere,
                 timeout=120).stdout.strip()
    assert Path(where).is_relative_to(venv), where
    proc = _run([str(venv / "bin" / "tfxla-cluster"), "demo", "mlp"], cwd=elsewhere, timeout=600)
    assert "== Clustering" in proc.stdout
    assert "== Result vs TF: max abs error" in proc.stdout
    listing = subprocess.run([str(venv / "bin" / "tfxla-cluster"), "demo", "nope"], cwd=elsewhere,
                             capture_output=True, text=True, timeout=300)
    assert listing.returncode == 2 and "samples: " in listing.stderr and "transformer_block" in listing.stderr
