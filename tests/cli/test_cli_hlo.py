"""``tfxla-cluster hlo``: graph outputs are cluster outputs, resource shapes come from the graph or
``--arg-shape NAME=D0,D1:DTYPE``, and bad specs are one-line errors (exit 2)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import tensorflow as tf

ROOT = Path(__file__).resolve().parents[2]
AUTO = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"


class Proc:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def hlo(capsys, monkeypatch):
    """Run ``tfxla-cluster hlo ARGS`` in this process (from the repository root)."""
    from tfxla_cluster.cli import main

    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("TF_XLA_FLAGS", raising=False)

    def run(*args: str) -> Proc:
        capsys.readouterr()
        code = main(["hlo", *args])
        out = capsys.readouterr()
        return Proc(code, out.out, out.err)
    return run


def _layout(text: str) -> tuple[list[str], list[str]]:
    """(parameter shapes, result shapes) of the first module's entry_computation_layout."""
    params, result = re.search(r"entry_computation_layout=\{\((.*?)\)->(.*?)\}\n", text).groups()
    shapes = re.compile(r"[a-z0-9]+\[[0-9,]*\]")
    return shapes.findall(params), shapes.findall(result)


@pytest.mark.parametrize("sample", ["layer_norm", "mlp", "attention", "conv_block", "softmax_xent"])
def test_cluster_that_ends_the_graph_returns_the_graph_outputs_like_tf(hlo, sample):
    """The whole sample is one cluster ending in the graph's outputs (nodes nothing consumes): its
    module returns them — the result shapes of TF's own jit_compile=True module of the same function."""
    proc = hlo(f"graphs/{sample}.pbtxt", "--flags", AUTO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("HloModule ") == 1
    params, results = _layout(proc.stdout)
    tf_params, tf_results = _layout((ROOT / "graphs" / "tf" / sample / "hlo.txt").read_text(encoding="utf-8"))
    assert sorted(params) == sorted(tf_params)
    assert results == tf_results


def test_resource_variables_shapes_from_arg_shape(hlo):
    """The sample's captured variables are Placeholders without shapes: --arg-shape gives them."""
    args = ["graphs/variables.pbtxt", "--flags", "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"]
    proc = hlo(*args)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "--arg-shape MatMul/ReadVariableOp/resource=" in proc.stderr
    proc = hlo(*args, "--arg-shape", "MatMul/ReadVariableOp/resource=3,2:float32",
               "--arg-shape", "add/ReadVariableOp/resource=2", "--arg-shape", "AssignAddVariableOp_1/resource=:int64")
    assert proc.returncode == 0, proc.stderr
    # Both clusters lower; the second is fed by the first, whose output shape only the given variable
    # shapes determine. The variables' shapes are those of TF's own jit_compile=True module.
    modules = ["HloModule " + m for m in proc.stdout.split("HloModule ")[1:]]
    assert len(modules) == 2
    params = {p for m in modules for p in _layout(m)[0]}
    tf_params, _ = _layout((ROOT / "graphs" / "tf" / "variables" / "hlo.txt").read_text(encoding="utf-8"))
    assert {"f32[4,3]", "f32[3,2]", "f32[2]"} <= params and {"f32[3,2]", "f32[2]"} <= set(tf_params)


def test_resource_shape_from_var_handle_op(hlo, tmp_path):
    """A TF1-style graph: the variable's VarHandleOp declares its dtype and shape; no --arg-shape."""
    g = tf.Graph()
    with g.as_default():
        v = tf.compat.v1.get_variable("v", shape=[3, 5], use_resource=True)
        x = tf.compat.v1.placeholder(tf.float32, [4, 3], name="x")
        w = tf.raw_ops.ReadVariableOp(resource=v.handle, dtype=tf.float32)
        tf.identity(tf.nn.relu(tf.matmul(x, w) + 1.0) * 2.0, name="y")
    path = tmp_path / "g.pbtxt"
    tf.io.write_graph(g.as_graph_def(), str(tmp_path), "g.pbtxt")
    proc = hlo(str(path), "--flags", AUTO)
    assert proc.returncode == 0, proc.stderr
    modules = ["HloModule " + m for m in proc.stdout.split("HloModule ")[1:]]
    layouts = [_layout(m) for m in modules]
    assert (["f32[4,3]", "f32[3,5]"], ["f32[4,5]"]) in [(sorted(p, reverse=True), r) for p, r in layouts], layouts


@pytest.mark.parametrize("spec, message", [
    ("x=a", "bad --arg-shape 'x=a'"),
    ("x", "bad --arg-shape 'x'"),
    ("x=2:nope", "unknown dtype 'nope'"),
    ("nope=2", "graph has no node named 'nope'"),
])
def test_bad_arg_shape_is_one_line(hlo, spec, message):
    proc = hlo("graphs/mlp.pbtxt", "--flags", AUTO, "--arg-shape", spec)
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
