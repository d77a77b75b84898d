"""``explain``'s grouped reasons print TF's text: a node's own reason names it as TF's log does
(never a ``{{node <node>}}`` placeholder); a group of several points at its node list."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tfxla_cluster.graph import load_graph
from tfxla_cluster.jit import explain
from tfxla_cluster.jit.mark_for_compilation import mark_for_compilation

ROOT = Path(__file__).resolve().parents[2]
FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"


@pytest.mark.parametrize("sample", ["cond", "string_ops", "while_loop"])
def test_grouped_reasons_are_tfs_text(sample):
    dump = ROOT / "graphs" / "tf" / sample / "before_mark_for_compilation_1.pbtxt"
    if not dump.exists():
        dump = sorted((ROOT / "graphs" / "tf" / sample).glob("before_mark_for_compilation_*.pbtxt"))[-1]
    text = explain.explain(mark_for_compilation(load_graph(str(dump)), FLAGS))
    assert "<node>" not in text and "\0" not in text
    vlog = (ROOT / "graphs" / "tf" / sample / "vlog.txt").read_text(encoding="utf-8")
    singles = re.findall(r"\] 1 node: unsupported op: (No registered .*?\{\{node [^}]+\}\})", text)
    many = re.findall(r"\] \d+ nodes: unsupported op: (No registered .*)", text)
    assert singles or many, text
    for reason in singles:  # TF's own log line for that node has the same text
        assert reason in vlog, reason
    for reason in many:
        assert "with the nodes below" in reason and "{{node" not in reason
