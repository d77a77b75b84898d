"""The README's Python API example runs as written (it is the first code users copy)."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_python_api_example_runs(tmp_path, monkeypatch):
    code = README.read_text().split("## Python API", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})
    text = out.getvalue()
    assert "'cluster_0': [" in text and "clustered into cluster_0" in text and "Built 1 clusters" in text
    assert "HloModule" in text and "OK over 1 launch" in text
    assert (tmp_path / "report.html").stat().st_size > 10_000
