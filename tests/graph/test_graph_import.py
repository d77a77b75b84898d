"""Graph import: files, tf.functions, inlining, SavedModels, devices, dtypes/shapes, bad input.

Every semantic check runs real TensorFlow: imported graphs are executed by TF and compared with the
original function's results; shapes and dtypes are compared with TF's own tensors.
"""
from __future__ import annotations

import subprocess
from pathlib import Path
import sys

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format
from tensorflow.core.framework import graph_pb2

from tfxla_cluster.errors import DataLossError, InvalidArgumentError, NotFoundError
from tfxla_cluster.graph import Graph, load_graph, read_graph_def, write_graph_def
from tfxla_cluster.graph.devices import DEFAULT_CPU_DEVICE, canonical_device
from tfxla_cluster.graph.function import runtime_to_placeholders
from tfxla_cluster.graph.loader import graph_def_from_function
from tfxla_cluster.graph.opdefs import base_dtype

from tests.gdb import GDB, INT32, T


@tf.function
def _inner(x):
    return tf.nn.relu(x) * 2.0


@tf.function
def _middle(x, y):
    return _inner(x) + y, tf.reduce_sum(y)


@tf.function
def _outer(x, y):
    a, s = _middle(x, y)
    return tf.tanh(a) - s, tf.exp(y)


X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
Y = np.array([0.5, -1.0, 2.0], dtype=np.float32)


def _run_runtime_graph(gd: graph_pb2.GraphDef, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Execute a runtime-form GraphDef with TF (placeholders for _Arg), fetching the _Retval nodes in
    index order."""
    runnable = runtime_to_placeholders(gd)
    retvals = sorted((n for n in gd.node if n.op == "_Retval"), key=lambda n: n.attr["index"].i)
    with tf.Graph().as_default() as g:
        tf.graph_util.import_graph_def(runnable, name="")
        with tf.compat.v1.Session(graph=g) as sess:
            return sess.run([f"{n.name}:0" for n in retvals], {f"{k}:0": v for k, v in feeds.items()})


def test_nested_functions_are_inlined_and_compute_the_same():
    gd = graph_def_from_function(_outer, X, Y)
    ops = {n.op for n in gd.node}
    assert not ops & {"PartitionedCall", "StatefulPartitionedCall"}
    names = {n.name for n in gd.node}
    # TF's inliner naming: <call>/<node>, nested calls nest their prefixes.
    assert any(name.count("/") >= 2 and name.endswith("Relu") for name in names), names
    got = _run_runtime_graph(gd, {"x": X, "y": Y})
    want = _outer(X, Y)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-6)


def test_no_inline_keeps_call_nodes():
    gd = graph_def_from_function(_outer, X, Y, inline=False)
    assert any(n.op in ("PartitionedCall", "StatefulPartitionedCall") for n in gd.node)
    got = _run_runtime_graph(gd, {"x": X, "y": Y})
    np.testing.assert_allclose(got[0], _outer(X, Y)[0].numpy(), rtol=1e-6)


def test_jit_compile_function_is_not_inlined():
    compiled = tf.function(lambda x: tf.sin(x) * 3.0, jit_compile=True)

    @tf.function
    def caller(x):
        return compiled(x) + 1.0

    gd = graph_def_from_function(caller, X)
    calls = [n for n in gd.node if n.op in ("PartitionedCall", "StatefulPartitionedCall")]
    assert len(calls) == 1
    fname = calls[0].attr["f"].func.name
    fdef = next(f for f in gd.library.function if f.signature.name == fname)
    assert fdef.attr["_XlaMustCompile"].b


def test_grappler_output_is_what_tf_clusters():
    gd = graph_def_from_function(_outer, X, Y, grappler=True)
    assert not any(n.op in ("PartitionedCall", "StatefulPartitionedCall") for n in gd.node)
    got = _run_runtime_graph(gd, {"x": X, "y": Y})
    np.testing.assert_allclose(got[0], _outer(X, Y)[0].numpy(), rtol=1e-6)


def test_runtime_form_args_and_retvals():
    gd = graph_def_from_function(_outer, X, Y)
    args = [n for n in gd.node if n.op == "_Arg"]
    rets = [n for n in gd.node if n.op == "_Retval"]
    assert [a.name for a in args] == ["x", "y"]
    assert [a.attr["index"].i for a in args] == [0, 1]
    assert [r.name for r in rets] == ["identity_RetVal", "identity_1_RetVal"]


def _concrete_tensors(fn, *args):
    concrete = fn.get_concrete_function(*args)
    return concrete, {op.name: op.outputs for op in concrete.graph.get_operations()}


def test_dtypes_and_shapes_match_tf():
    @tf.function
    def f(x, ids):
        parts = tf.split(x, 3, axis=1)
        g = tf.gather(x, ids)
        m = tf.reduce_max(g, axis=0, keepdims=True)
        return parts[0] * m[:, :1], tf.cast(ids, tf.float64), tf.shape(x)

    ids = np.array([1, 0, 1], dtype=np.int64)
    concrete, tensors = _concrete_tensors(f, X, ids)
    graph = Graph(concrete.graph.as_graph_def())  # placeholder form: same node names as TF's graph
    checked = 0
    for node in graph.op_nodes():
        outs = tensors[node.name]
        assert [base_dtype(d) for d in node.output_dtypes] == [t.dtype.as_datatype_enum for t in outs], node
        for i, t in enumerate(outs):
            want = None if t.shape.rank is None else tuple(t.shape.as_list())
            assert graph.output_shapes(node)[i] == want, (node.name, i)
            checked += 1
    assert checked > 10


def test_unknown_dims_and_rank_are_explicit():
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec(None, tf.float32)])
    def f(x, z):
        return x * 2.0, z + 1.0

    gd = graph_def_from_function(f, input_signature=None)
    graph = Graph(gd)
    assert graph.output_shapes("x") == [(None, 3)]
    assert graph.output_shapes("z") == [None]


def test_node_ids_edges_and_devices():
    gd = graph_def_from_function(_outer, X, Y)
    graph = Graph(gd)
    assert [n.id for n in graph.op_nodes()] == list(range(2, len(gd.node) + 2))
    assert all(n.assigned_device == DEFAULT_CPU_DEVICE for n in graph.op_nodes())
    edges = graph.edges()
    assert [e.id for e in edges] == list(range(len(edges)))
    # Every op node hangs between SOURCE and SINK (TF's FixupSourceAndSinkEdges).
    for node in graph.op_nodes():
        assert node.in_edges and node.out_edges
    topo = graph.topological_order()
    pos = {n.id: i for i, n in enumerate(topo)}
    for e in edges:
        if e.src.is_op and e.dst.is_op:
            assert pos[e.src.id] < pos[e.dst.id]
    nxg = graph.to_networkx()
    assert nxg.number_of_nodes() == len(graph)


@pytest.mark.parametrize("requested,want", [
    ("", DEFAULT_CPU_DEVICE),
    ("/cpu:0", DEFAULT_CPU_DEVICE),
    ("/device:CPU:0", DEFAULT_CPU_DEVICE),
    ("/device:GPU:1", "/job:localhost/replica:0/task:0/device:GPU:1"),
    ("/job:localhost/replica:0/task:0/device:XLA_CPU:0", "/job:localhost/replica:0/task:0/device:XLA_CPU:0"),
    ("/job:worker/task:3/device:CPU:0", "/job:worker/replica:0/task:3/device:CPU:0"),
])
def test_canonical_device(requested, want):
    assert canonical_device(requested) == want


def test_explicit_devices_are_kept():
    gd = text_format.Parse('node { name: "a" op: "Const" device: "/device:GPU:0" '
                           'attr { key: "dtype" value { type: DT_FLOAT } } '
                           'attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape {} float_val: 1 } } } }',
                           graph_pb2.GraphDef())
    assert Graph(gd).node("a").assigned_device == "/job:localhost/replica:0/task:0/device:GPU:0"


def test_pbtxt_and_pb_round_trip_is_byte_identical(tmp_path):
    gd = graph_def_from_function(_outer, X, Y)
    txt = write_graph_def(gd, tmp_path / "g.pbtxt")
    pb = write_graph_def(read_graph_def(txt), tmp_path / "g.pb")
    back = read_graph_def(pb)
    assert back.SerializeToString(deterministic=True) == gd.SerializeToString(deterministic=True)
    assert write_graph_def(back, tmp_path / "h.pbtxt").read_bytes() == txt.read_bytes()


def test_saved_model_import(tmp_path):
    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable([[1.0], [2.0], [3.0]])

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def __call__(self, x):
            return {"y": tf.nn.relu(tf.matmul(x, self.w))}

    m = M()
    tf.saved_model.save(m, str(tmp_path / "sm"), signatures={"serving_default": m.__call__})
    graph = load_graph(tmp_path / "sm")
    ops = {n.op for n in graph.op_nodes()}
    assert {"MatMul", "Relu", "_Arg", "_Retval"} <= ops
    assert graph.output_shapes("x") == [(None, 3)]
    with pytest.raises(NotFoundError, match="no signature 'nope'"):
        load_graph(tmp_path / "sm", signature="nope")


# ----- bad input -------------------------------------------------------------------------------
def _write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return p


def test_missing_file(tmp_path):
    with pytest.raises(NotFoundError, match="No such file"):
        read_graph_def(tmp_path / "nope.pbtxt")


def test_not_a_graph_def(tmp_path):
    with pytest.raises(InvalidArgumentError, match="not a valid GraphDef"):
        read_graph_def(_write(tmp_path, "x.pbtxt", "hello: world\n"))


def test_pbtxt_syntax_error_names_line(tmp_path):
    p = _write(tmp_path, "x.pbtxt", 'node {\n  name: "a"\n  op: \n}\n')
    with pytest.raises(InvalidArgumentError, match=r"x.pbtxt: .*\b4:1\b"):
        read_graph_def(p)


def test_truncated_pb(tmp_path):
    gd = graph_def_from_function(_outer, X, Y)
    data = gd.SerializeToString()
    with pytest.raises((DataLossError, InvalidArgumentError)):
        read_graph_def(_write(tmp_path, "t.pb", data[: len(data) // 2 + 3]))


def test_cycle_not_through_loop_ops():
    gd = text_format.Parse("""
      node { name: "a" op: "NoOp" input: "^c" }
      node { name: "b" op: "NoOp" input: "^a" }
      node { name: "c" op: "NoOp" input: "^b" }""", graph_pb2.GraphDef())
    with pytest.raises(InvalidArgumentError, match="cycle .* a -> b -> c -> a|cycle .*: [abc] -> "):
        Graph(gd)


def test_missing_input_node():
    gd = text_format.Parse('node { name: "a" op: "NoOp" input: "^ghost" }', graph_pb2.GraphDef())
    with pytest.raises(InvalidArgumentError, match="Node 'a': Unknown input node '\\^ghost'"):
        Graph(gd)


def test_invalid_output_index():
    gd = text_format.Parse("""
      node { name: "c" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } }
             attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape {} float_val: 1 } } } }
      node { name: "n" op: "Neg" input: "c:3" attr { key: "T" value { type: DT_FLOAT } } }""",
                           graph_pb2.GraphDef())
    with pytest.raises(InvalidArgumentError, match="invalid output 3 of source node c which has 1 outputs"):
        Graph(gd)


def test_unknown_op():
    gd = text_format.Parse('node { name: "a" op: "NoSuchOpAnywhere" }', graph_pb2.GraphDef())
    with pytest.raises(NotFoundError, match="Op type not registered 'NoSuchOpAnywhere'"):
        Graph(gd)


def test_duplicate_node_name():
    gd = text_format.Parse('node { name: "a" op: "NoOp" } node { name: "a" op: "NoOp" }', graph_pb2.GraphDef())
    with pytest.raises(InvalidArgumentError, match="not unique"):
        Graph(gd)


def test_loop_back_edges_are_not_cycles():
    # A v1 while loop frame: Enter -> Merge -> Switch -> body -> NextIteration -> Merge, Exit.
    b = GDB()
    zero = b.const(0, tf.int32, name="zero")
    limit = b.const(10, tf.int32, name="limit")
    enter = b.op("Enter", zero, name="enter", frame_name="loop")
    merge = b.op("Merge", [enter, T("next", 0, INT32)], name="merge")
    less = b.op("Less", merge, b.const(10, tf.int32, name="ten", ctrl=("merge",)), name="less")
    cond = b.op("LoopCond", less, name="cond")
    switch = b.op("Switch", merge, cond, name="switch")
    body = b.op("AddV2", switch[1], b.const(1, tf.int32, name="one", ctrl=("switch",)), name="body")
    b.op("NextIteration", body, name="next")
    b.op("Exit", switch[0], name="exit")
    graph = Graph(b.graph_def)
    back = [e for e in graph.edges() if e.src.op == "NextIteration"]
    assert len(back) == 1 and back[0].dst.name == "merge"
    # TF creates loop back edges after all other op-to-op edges.
    assert back[0].id == max(e.id for e in graph.edges() if e.src.is_op and e.dst.is_op)
    assert len(graph.topological_order()) == len(graph)
    assert limit.node in graph


@pytest.mark.parametrize("content,needle", [
    (None, "No such file"),
    ('node { name: "a" op: "Foo" }', "Op type not registered 'Foo'"),
    ('node { name: "a" op: ', "not a valid GraphDef"),
    ('node { name: "a" op: "NoOp" input: "^b" }', "Unknown input node"),
])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, content, needle):
    path = tmp_path / "g.pbtxt"
    if content is not None:
        path.write_text(content)
    proc = subprocess.run([sys.executable, "-m", "tfxla_cluster", "info", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("tfxla-cluster: error: ") and needle in lines[0]
    assert "Traceback" not in proc.stderr


def test_cli_info(tmp_path):
    gd = graph_def_from_function(_outer, X, Y)
    path = write_graph_def(gd, tmp_path / "g.pbtxt")
    proc = subprocess.run([sys.executable, "-m", "tfxla_cluster", "info", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"nodes: {len(gd.node)}" in proc.stdout
    assert "x: DT_FLOAT [2,3]" in proc.stdout
    assert "identity_RetVal <- " in proc.stdout


SAMPLES = sorted((Path(__file__).resolve().parents[2] / "graphs").glob("*.pbtxt"))


@pytest.mark.parametrize("path", SAMPLES, ids=[p.stem for p in SAMPLES])
def test_sample_graph_dtypes_and_shapes_match_tf(path):
    """Every output of every node of every bundled sample: our dtype/shape == TF's imported graph's."""
    gd = read_graph_def(path)
    graph = Graph(gd)
    with tf.Graph().as_default() as g:
        tf.graph_util.import_graph_def(gd, name="")
    for node in graph.op_nodes():
        tf_outputs = g.get_operation_by_name(node.name).outputs
        assert [base_dtype(d) for d in node.output_dtypes] == [t.dtype.as_datatype_enum for t in tf_outputs], node
        for i, t in enumerate(tf_outputs):
            want = None if t.shape.rank is None else tuple(t.shape.as_list())
            assert graph.output_shapes(node)[i] == want, (node.name, i)
