"""The package's layering rules (DESIGN.md, "layers"), checked on the source text.

Only ``tfxla_cluster/tf_compat.py`` touches TF internals; importing it (and the CLI parser) does not
import TensorFlow.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

PKG = pathlib.Path(__file__).resolve().parent.parent / "tfxla_cluster"


def _sources() -> dict[str, str]:
    return {str(p.relative_to(PKG)): p.read_text() for p in PKG.rglob("*.py")}


def test_tf_internals_only_in_tf_compat():
    offenders = sorted(f"{path}:{i}" for path, text in _sources().items() if path != "tf_compat.py"
                       for i, line in enumerate(text.splitlines(), 1) if "tensorflow.python" in line)
    assert not offenders, f"private TF imports outside tf_compat.py: {offenders}"


def test_tf_compat_and_cli_parser_do_not_import_tensorflow():
    code = ("import contextlib, io, runpy, sys\n"
            "import tfxla_cluster.tf_compat, tfxla_cluster.errors, tfxla_cluster.hostinfo\n"
            "sys.argv = ['tfxla-cluster', '--help']\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    runpy.run_module('tfxla_cluster', run_name='__main__')\n"
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=PKG.parent, env=_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(PKG.parent)}
