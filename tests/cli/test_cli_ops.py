"""``tfxla-cluster ops``: our lowerings next to TF's XLA_CPU_JIT registry, in general and for a graph,
checked against TF's registry queried in the test and registry.NOT_LOWERED."""
from __future__ import annotations

import json

import tensorflow as tf

from tfxla_cluster.cli import main
from tfxla_cluster.tf2hlo.registry import NOT_LOWERED, lowered_ops
from tfxla_cluster.tfops.xla_kernels import all_xla_ops, jit_kernels


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _allowed(op: str, attr: str) -> set[str]:
    return {tf.dtypes.as_dtype(t).name for k in jit_kernels("XLA_CPU_JIT")[op] for c in k.constraint
            if c.name == attr for t in c.allowed_values.list.type}


def test_ops_json_is_tf_registry_and_ours(capsys) -> None:
    code, out, _ = _run(capsys, "ops", "--json")
    assert code == 0
    data = json.loads(out)
    registry, lowered = all_xla_ops(), lowered_ops()
    rows = {r["op"]: r for r in data["ops"]}
    assert set(rows) == registry | lowered
    assert data["summary"]["tf_registry"] == len(registry)
    assert data["summary"]["lowered"] == len(registry & lowered)
    assert data["summary"]["lowered_outside_registry"] == len(lowered - registry)
    assert {op for op, r in rows.items() if r["status"] == "not lowered"} == set(NOT_LOWERED)
    assert all(rows[op]["reason"] == why for op, why in NOT_LOWERED.items())
    # dtypes are the registry's kernel constraints: MatMul has no string, Cast names both its attrs
    assert set(rows["MatMul"]["dtypes"]["T"]) == _allowed("MatMul", "T") and "string" not in rows["MatMul"]["dtypes"]["T"]
    assert {"SrcT", "DstT"} <= set(rows["Cast"]["dtypes"])


def test_ops_text_lists_every_op_and_the_reasons(capsys) -> None:
    code, out, _ = _run(capsys, "ops")
    assert code == 0
    head, *lines = out.splitlines()
    assert f"registry: {len(all_xla_ops())} ops" in head
    for op, why in NOT_LOWERED.items():
        i = next(i for i, line in enumerate(lines) if line.split()[0] == op)
        assert "not lowered" in lines[i] and lines[i + 1].strip() == f"why: {why}"
    assert any(line.split()[:2] == ["AddV2", "lowered"] for line in lines)


def _graph(tmp_path) -> str:
    """A graph with a lowered op, an op of a dtype XLA_CPU_JIT does not register (string Add) and an op
    without any XLA kernel (StringLength)."""
    with tf.Graph().as_default() as g:
        x = tf.compat.v1.placeholder(tf.float32, [3], name="x")
        tf.identity(tf.nn.relu(x) + 1.0, name="y")
        s = tf.compat.v1.placeholder(tf.string, [2], name="s")
        tf.strings.length(tf.raw_ops.Add(x=s, y=s, name="concat"), name="n")
    path = tmp_path / "g.pbtxt"
    tf.io.write_graph(g.as_graph_def(), str(tmp_path), "g.pbtxt")
    return str(path)


def test_ops_for_a_graph(capsys, tmp_path) -> None:
    path = _graph(tmp_path)
    code, out, _ = _run(capsys, "ops", path, "--json")
    assert code == 0
    rows = {r["op"]: r for r in json.loads(out)["ops"]}
    assert set(rows) == {"Placeholder", "Relu", "AddV2", "Add", "Const", "Identity", "StringLength"}
    assert rows["AddV2"]["nodes"] == 1 and rows["AddV2"]["used"]["T"] == ["float32"]
    assert rows["Add"]["used"]["T"] == ["string"] and rows["Add"]["status"] == "lowered"
    assert len(rows["Add"]["dtype_refused"]) == 1 and "concat" in rows["Add"]["dtype_refused"][0]
    assert rows["Relu"]["status"] == "lowered" and rows["Relu"]["dtype_refused"] == []
    assert rows["StringLength"]["status"] == "no XLA kernel" and not rows["StringLength"]["lowered"]

    code, out, _ = _run(capsys, "ops", path)
    assert code == 0 and out.startswith(f"{path}: ")
    assert "TF's XLA refuses: No registered 'Add' OpKernel for XLA_CPU_JIT devices compatible with node " \
           "{{node concat}} (T=DT_STRING is not supported)" in out


def test_ops_bad_graph_is_one_line_exit_2(capsys, tmp_path) -> None:
    code, out, err = _run(capsys, "ops", str(tmp_path / "missing.pbtxt"))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "missing.pbtxt" in err
    bad = tmp_path / "bad.pbtxt"
    bad.write_text("node { name: ")
    code, _, err = _run(capsys, "ops", str(bad))
    assert code == 2 and len(err.strip().splitlines()) == 1
