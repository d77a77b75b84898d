"""``tfxla-cluster bench``: the benchmark from the installed CLI (a quick smoke run, no timing asserts)."""
from __future__ import annotations

import json

from tfxla_cluster import cli, hostinfo


def test_bench_quick_one_workload_writes_table_and_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert cli.main(["bench", "--quick", "--only", "dense_relu", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| workload | TF graph (ms) | TF oneDNN | real XLA (ms) | ours (ms) |" in text and "| dense_relu |" in text
    data = json.loads(out.read_text(encoding="utf-8"))
    [row] = data["rows"]
    assert row["workload"] == "dense_relu" and data["quick"] is True
    assert all(row[k] > 0 for k in ("tf_graph_ms", "xla_ms", "ours_ms", "ours_vs_graph", "ours_vs_xla"))
    # The header names the CPU, its vector ISA and TF's oneDNN mode in this process (TF's own answer).
    assert f"host: {hostinfo.cpu_model()}" in text and hostinfo.vector_isa() in text
    assert data["tf_onednn_in_process"] == hostinfo.onednn_enabled() and data["host"]["cpu_model"]
    # TF graph mode timed in both oneDNN modes (the other one in a child); the faster one is compared.
    assert data["tf_graph_other_mode"] == "measured in a child process", data["tf_graph_other_mode"]
    on, off = row["tf_graph_onednn_on_ms"], row["tf_graph_onednn_off_ms"]
    assert on > 0 and off > 0 and row["tf_graph_ms"] == min(on, off)
    assert row["tf_graph_ms"] == (on if row["tf_graph_onednn"] else off)
    mode = "on" if row["tf_graph_onednn"] else "off"
    assert f"| dense_relu | {row['tf_graph_ms']:.2f} | {mode}, " in text


def test_bench_unknown_workload_is_one_line_error(capsys):
    assert cli.main(["bench", "--only", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tfxla-cluster: error:") and "unknown workload(s) nope" in err and "\n" not in err


def test_bench_launch_rows_compare_ours_with_tf_graph_and_xla(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert cli.main(["bench", "--quick", "--only", "launch_rnn_loop,launch_tiny_jit", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| launch row | per | TF graph (µs) | TF XLA jit_compile (µs) | TF XLA auto-clustering (µs) |" in text
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["rows"] == []
    rows = {r["row"]: r for r in data["launch_rows"]}
    assert set(rows) == {"launch_rnn_loop", "launch_tiny_jit"}
    loop, call = rows["launch_rnn_loop"], rows["launch_tiny_jit"]
    assert loop["per"] == "iteration" and call["per"] == "call"
    assert all(r[k] > 0 for r in rows.values() for k in ("graph_us", "xla_us", "ours_us", "python_launch_us"))
    assert loop["xla_auto_us"] > 0 and loop["launches"] >= 1 and call["launches"] == 1
    assert f"| launch_rnn_loop | iteration | {loop['graph_us']:.2f} |" in text


def test_bench_layers_table_in_gflops(tmp_path, capsys):
    out = tmp_path / "layers.json"
    assert cli.main(["bench", "--layers", "--quick", "--only", "square/512,dw 3x3 32", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| layer | op | MFLOP | TF graph GFLOP/s | TF XLA GFLOP/s | ours GFLOP/s | numpy sgemm GFLOP/s |" in text
    data = json.loads(out.read_text(encoding="utf-8"))
    rows = {r["layer"]: r for r in data["rows"]}
    assert set(rows) == {"square/512", "mobilenetv2/dw 3x3 32"}
    mm, dw = rows["square/512"], rows["mobilenetv2/dw 3x3 32"]
    assert mm["gemm"] == [1, 512, 512, 512] and mm["mflop"] == 2 * 512 ** 3 / 1e6
    assert all(mm[k] > 0 for k in ("graph_gflops", "xla_gflops", "ours_gflops", "numpy_gflops", "ours_best_gflops"))
    assert mm["ours_best_gflops"] >= mm["ours_gflops"]
    # The sgemm reference is the faster of OpenBLAS's modes (all threads, one thread), ours relative to it.
    if mm["numpy_threads"]:     # 0: numpy's OpenBLAS thread control not found, one mode only
        assert mm["numpy_gflops"] == max(mm["numpy_modes_gflops"].values())
        assert f"{mm['numpy_threads']}t" in mm["numpy_modes_gflops"] and "1t" in mm["numpy_modes_gflops"]
    assert abs(mm["ours_vs_sgemm"] - mm["ours_gflops"] / mm["numpy_gflops"]) < 1e-9
    assert dw["ours_vs_sgemm"] is None and "ours % of sgemm" in text and "lowest" in text
    # A depthwise convolution is not a GEMM: no sgemm column; 2·N·H·W·C·kh·kw flops.
    assert dw["gemm"] is None and dw["numpy_gflops"] is None and dw["mflop"] == 2 * 112 * 112 * 32 * 9 / 1e6
    assert f"| square/512 | matmul | {mm['mflop']:.1f} |" in text and "geomean ours / best of TF" in text


def test_bench_layers_unknown_layer_is_one_line_error(capsys):
    assert cli.main(["bench", "--layers", "--only", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tfxla-cluster: error:") and "no layer matches --only 'nope'" in err and "\n" not in err
