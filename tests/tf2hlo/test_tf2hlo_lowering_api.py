"""The lowering's contract: registry, errors that name the node, module form (parameters, metadata,
root tuple), input/output bookkeeping, cluster_modules."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from tfxla_cluster.errors import InternalError, UnimplementedError
from tfxla_cluster.graph import Graph
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.tf2hlo import cluster_input_tensors, cluster_modules, lower_cluster, lowered_ops, lowers
from tfxla_cluster.tf2hlo import registry


def _graph(*nodes):
    """A GraphDef from (name, op, inputs, attrs) tuples; attrs: name → (field, value)."""
    gd = graph_pb2.GraphDef()
    for name, op, inputs, attrs in nodes:
        nd = gd.node.add(name=name, op=op, input=inputs)
        for k, (field, v) in attrs.items():
            if field == "shape":
                for d in v:
                    nd.attr[k].shape.dim.add(size=d)
            else:
                setattr(nd.attr[k], field, v)
    return Graph(gd)


F32 = tf.float32.as_datatype_enum


def _mlp_graph():
    return _graph(
        ("x", "Placeholder", [], {"dtype": ("type", F32), "shape": ("shape", [2, 3])}),
        ("w", "Placeholder", [], {"dtype": ("type", F32), "shape": ("shape", [3, 4])}),
        ("dense/MatMul", "MatMul", ["x", "w"], {"T": ("type", F32)}),
        ("dense/Relu", "Relu", ["dense/MatMul"], {"T": ("type", F32)}),
        ("out", "Identity", ["dense/Relu"], {"T": ("type", F32)}),
        ("out2", "Identity", ["dense/MatMul"], {"T": ("type", F32)}),
    )


def test_registry_rejects_duplicates_and_lists_ops():
    assert {"AddV2", "MatMul", "While", "StatelessRandomUniformV2"} <= lowered_ops()
    with pytest.raises(InternalError, match="already has a lowering"):
        lowers("AddV2")(lambda ctx, node: [])
    assert registry.lookup("NoSuchOp") is None


def test_missing_op_is_unimplemented_and_names_the_node():
    # MatrixExponential: no XLA kernel in TF either, so it stays unlowered
    g = _graph(("x", "Placeholder", [], {"dtype": ("type", F32), "shape": ("shape", [3, 3])}),
               ("u/Expm", "MatrixExponential", ["x"], {"T": ("type", F32)}),
               ("o", "Identity", ["u/Expm"], {"T": ("type", F32)}))
    with pytest.raises(UnimplementedError,
                       match=r"^Lowering node 'u/Expm' \(MatrixExponential\): no lowering for op MatrixExponential$"):
        lower_cluster(g, ["u/Expm"])


def test_module_form_and_bookkeeping():
    g = _mlp_graph()
    lc = lower_cluster(g, ["dense/MatMul", "dense/Relu"], name="cluster_0")
    m = lc.module
    assert m.name == "cluster_0"
    params = m.entry.parameters
    assert [p.name for p in params] == ["arg0", "arg1"]
    assert all(p.metadata.op_name == "XLA_Args" for p in params)
    root = m.entry.root
    assert root.opcode is O.TUPLE and root.metadata.op_name == "XLA_Retvals"
    for instr in m.entry.instructions:
        assert instr.metadata is not None and instr.metadata.op_name, instr.name
    dot = next(i for i in m.entry.instructions if i.opcode is O.DOT)
    assert (dot.metadata.op_type, dot.metadata.op_name, dot.name) == ("MatMul", "dense/MatMul", "MatMul")
    # Inputs in TF's edge order; outputs: tensors consumed outside, in edge order.
    assert [i.tensor for i in lc.inputs] == [("x", 0), ("w", 0)] == cluster_input_tensors(g, ["dense/MatMul",
                                                                                             "dense/Relu"])
    assert lc.input_edges() == {("x", 0, "dense/MatMul", 0): 0, ("w", 0, "dense/MatMul", 1): 1}
    assert lc.output_tensors() == {("dense/MatMul", 0): 0, ("dense/Relu", 0): 1} or \
        lc.output_tensors() == {("dense/Relu", 0): 0, ("dense/MatMul", 0): 1}
    x, w = np.ones((2, 3), np.float32), np.full((3, 4), -1.0, np.float32)
    got = lc.run(x, w)
    by_tensor = lc.output_tensors()
    np.testing.assert_array_equal(got[by_tensor[("dense/Relu", 0)]], np.zeros((2, 4)))
    np.testing.assert_array_equal(got[by_tensor[("dense/MatMul", 0)]], np.full((2, 4), -3.0))


def test_unknown_shapes_need_arg_shapes():
    from tfxla_cluster.errors import InvalidArgumentError

    g = _graph(("x", "Placeholder", [], {"dtype": ("type", F32)}),
               ("neg", "Neg", ["x"], {"T": ("type", F32)}), ("o", "Identity", ["neg"], {"T": ("type", F32)}))
    with pytest.raises(InvalidArgumentError, match="pass arg_shapes"):
        lower_cluster(g, ["neg"])
    lc = lower_cluster(g, ["neg"], arg_shapes={0: (2, 2)})
    assert lc.inputs[0].dims == (2, 2)
    lc = lower_cluster(g, ["neg"], arg_shapes={("x", 0): (3,)})
    assert lc.inputs[0].dims == (3,)


def test_cluster_modules_over_a_marking():
    from tfxla_cluster import mark_for_compilation

    g = _mlp_graph()
    result = mark_for_compilation(g, "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1")
    modules = cluster_modules(result.graph, result)
    assert list(modules) == list(result.clusters)
    for name, module in modules.items():
        assert module.name == name and module.entry.root.opcode is O.TUPLE


def test_other_failures_are_wrapped_with_the_node():
    @lowers("_TestBoom")
    def boom(ctx, node):
        raise ValueError("kaboom")

    try:

        f = tf.function(lambda x: -x, autograph=False).get_concrete_function(tf.TensorSpec([2]))
        from tfxla_cluster.graph.loader import graph_def_from_concrete

        gd = graph_def_from_concrete(f)
        neg = next(n for n in gd.node if n.op == "Neg")
        g = Graph(gd)
        registry._LOWERINGS["Neg"], saved = boom, registry._LOWERINGS["Neg"]
        try:
            with pytest.raises(InternalError, match=rf"Lowering node '{neg.name}' \(Neg\): ValueError: kaboom"):
                lower_cluster(g, [n.name for n in g.op_nodes()], arg_shapes={0: (2,)})
        finally:
            registry._LOWERINGS["Neg"] = saved
    finally:
        registry._LOWERINGS.pop("_TestBoom", None)
