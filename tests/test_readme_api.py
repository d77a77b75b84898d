"""The README's Python API example runs as written (it is the first code users copy)."""
from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_python_api_example_runs(tmp_path, monkeypatch):
    code = README.read_text(encoding="utf-8").split("## Python API", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})
    text = out.getvalue()
    # Cluster numbers are process-global (cluster_0 in a fresh process, as the README shows).
    assert re.search(r"'cluster_\d+': \[", text) and re.search(r"clustered into cluster_\d+", text)
    assert "Built 1 clusters" in text
    assert "HloModule" in text and "OK over 1 launch" in text
    assert (tmp_path / "report.html").stat().st_size > 10_000
