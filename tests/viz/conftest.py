"""Fixtures for the visualization tests: clustering results of sample graphs (computed once per session),
the ``browser`` marker (the browser fixtures are in tests/conftest.py), and ``needs_graphviz`` for the
tests of Graphviz itself on our DOT text (our pictures never need it)."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: opens pages in headless Chromium (fails in CI when absent, "
                                       "else skipped loudly)")


def _mark(name: str, grappler: bool = True):
    import tfxla_cluster as txc

    flags = txc.Flags.parse(FLAGS)
    graph = txc.load_graph(str(ROOT / "graphs" / f"{name}.pbtxt"), grappler=grappler)
    return txc.mark_for_compilation(graph, flags, state=txc.ProcessState()), flags


@pytest.fixture(scope="session")
def unique_result():
    """graphs/unique_in_middle with grappler: two clusters of 10 around an unclusterable Unique."""
    return _mark("unique_in_middle")


@pytest.fixture(scope="session")
def variables_result():
    """graphs/variables with grappler: two clusters, resource placeholders, control edges."""
    return _mark("variables")


@pytest.fixture(scope="session")
def string_result():
    """graphs/string_ops: one cluster; string Const, no-kernel and min-size reasons."""
    return _mark("string_ops")


@pytest.fixture()
def needs_graphviz():
    from tfxla_cluster.viz.layout import graphviz_available

    if not graphviz_available():
        pytest.skip("Graphviz ('dot' from the Debian package graphviz, and PyPI graphviz) is not installed")

