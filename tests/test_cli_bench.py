"""``tfxla-cluster bench``: the benchmark from the installed CLI (a quick smoke run, no timing asserts)."""
from __future__ import annotations

import json

from tfxla_cluster import cli


def test_bench_quick_one_workload_writes_table_and_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert cli.main(["bench", "--quick", "--only", "dense_relu", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| workload | TF graph (ms) | real XLA (ms) | ours (ms) |" in text and "| dense_relu |" in text
    data = json.loads(out.read_text())
    [row] = data["rows"]
    assert row["workload"] == "dense_relu" and data["quick"] is True
    assert all(row[k] > 0 for k in ("tf_graph_ms", "xla_ms", "ours_ms", "ours_vs_graph", "ours_vs_xla"))


def test_bench_unknown_workload_is_one_line_error(capsys):
    assert cli.main(["bench", "--only", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tfxla-cluster: error:") and "unknown workload(s) nope" in err and "\n" not in err
