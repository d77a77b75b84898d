"""Build hook: the bundled sample graphs (``graphs/`` at the repository root) go into the package.

Stage: packaging. ``graphs/`` stays at the root, where the tools, tests and TF recordings use it;
a built wheel carries a copy as ``tfxla_cluster/_graphs`` so ``tfxla-cluster demo`` works from any
directory after a plain ``pip install .``. An editable install reads the root ``graphs/`` directly
(``tfxla_cluster.demo.samples_dir`` looks in both places). Everything else is in ``setup.cfg``.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithSamples(build_py):
    """``build_py`` that also copies ``graphs/`` into the built package as ``tfxla_cluster/_graphs``."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # the source tree's graphs/ is used in place
        source = ROOT / "graphs"
        target = Path(self.build_lib) / "tfxla_cluster" / "_graphs"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildPyWithSamples})
