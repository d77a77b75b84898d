"""The browser tests' guard (tests/conftest.py ``no_browser``): a missing Chromium fails under CI=true and
is skipped with a warning elsewhere, never silently."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def _root_conftest():
    path = Path(__file__).resolve().parents[1] / "conftest.py"
    spec = importlib.util.spec_from_file_location("tests_root_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("ci", ["true", "1"])
def test_missing_chromium_fails_in_ci(monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match="CI is set but chromium is gone"):
        _root_conftest().no_browser("chromium is gone")


@pytest.mark.parametrize("ci", [None, "", "false"])
def test_missing_chromium_skips_loudly_elsewhere(monkeypatch, ci):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.warns(pytest.PytestWarning, match="browser test skipped: chromium is gone"):
        with pytest.raises(pytest.skip.Exception, match="browser test skipped: chromium is gone"):
            _root_conftest().no_browser("chromium is gone")
