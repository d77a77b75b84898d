"""Fixtures for the report tests: one report of a script (tiny_program.py, run under the plugin with the
numerics checker on) and one of a sample GraphDef, each built once per session and written to HTML."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"


@pytest.fixture(scope="session")
def script_report(tmp_path_factory):
    """(Report, html path) of tests/report/tiny_program.py: clusters of two functions, a tiny one, a
    recompiled one, Unique between two clusters; numerics checked."""
    from tfxla_cluster.report import build_report, write_report

    saved = os.environ.get("TF_XLA_FLAGS")
    os.environ["TF_XLA_FLAGS"] = FLAGS   # the program's tf.functions read it, as under TF
    try:
        report = build_report(script=str(HERE / "tiny_program.py"), script_args=["3"], check_numerics=True,
                              repeats=3)
    finally:
        if saved is None:
            os.environ.pop("TF_XLA_FLAGS", None)
        else:
            os.environ["TF_XLA_FLAGS"] = saved
    path = write_report(report, tmp_path_factory.mktemp("report") / "tiny_program.html")
    return report, path


@pytest.fixture(scope="session")
def graph_report(tmp_path_factory):
    """(Report, html path) of graphs/unique_in_middle.pbtxt (grappler first), run on generated inputs."""
    from tfxla_cluster.report import build_report, write_report

    report = build_report(str(ROOT / "graphs" / "unique_in_middle.pbtxt"), flags=FLAGS, grappler=True, repeats=3)
    path = write_report(report, tmp_path_factory.mktemp("report") / "unique_in_middle.html")
    return report, path
