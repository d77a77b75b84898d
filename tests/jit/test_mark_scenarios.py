"""TF's own clustering tests (mark_for_compilation_pass_test.cc), ported node by node.

The harness mirrors TF's MarkForCompilationPassTestHelper: global jit ON_2, deadness analysis off
unless a test turns it on, `_XlaCompile=false` ignored, `--tf_xla_cpu_global_jit
--tf_xla_min_cluster_size=2`, unassigned nodes on CPU:0, a fresh cluster sequence per test. TF's test-only
ops UncompilableNullary/UncompilableUnary are stood in by real TF ops without an XLA kernel
(Placeholder, DebugIdentity). Expected results are TF's, copied from the C++ tests.
"""
from __future__ import annotations

import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, function_pb2, types_pb2

from tests.gdb import FLOAT, GDB, INT32, RESOURCE, T, func_attr
from tfxla_cluster.errors import InternalError
from tfxla_cluster.jit.mark_for_compilation import ProcessState, mark_for_compilation

HARNESS_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=2"
NO_GLOBAL_JIT_FLAGS = "--tf_xla_auto_jit=-1 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=2"
GPU0 = "/job:localhost/replica:0/task:0/device:GPU:0"
GPU1 = "/job:localhost/replica:0/task:0/device:GPU:1"
CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
XLA_CPU0 = "/job:localhost/replica:0/task:0/device:XLA_CPU:0"
XLA_GPU0 = "/job:localhost/replica:0/task:0/device:XLA_GPU:0"
XLA_GPU1 = "/job:localhost/replica:0/task:0/device:XLA_GPU:1"


def mark(b: GDB, flags: str = HARNESS_FLAGS, deadness: bool = False, **kw) -> dict[str, str]:
    result = mark_for_compilation(b.graph_def, flags, state=ProcessState(), disable_deadness=not deadness,
                                  ignore_xla_compile_attr=True, **kw)
    return {name: d.cluster for name, d in result.decisions.items() if d.cluster}


def unc_nullary(b: GDB, name: str, **kw) -> T:
    return b.placeholder(tf.float32, name=name, **kw)


def unc_unary(b: GDB, x: T, name: str, **kw) -> T:
    return b.op("DebugIdentity", x, name=name, **kw)


def fdef(name: str, args: list[tuple[str, int]], rets: list[tuple[str, int]], nodes: list[dict],
         ret_map: dict[str, str], attrs: dict | None = None) -> function_pb2.FunctionDef:
    """A FunctionDef from plain data: nodes are {name, op, input, attr: {k: AttrValue}}."""
    f = function_pb2.FunctionDef()
    f.signature.name = name
    for n, t in args:
        f.signature.input_arg.add(name=n, type=t)
    for n, t in rets:
        f.signature.output_arg.add(name=n, type=t)
    for nd in nodes:
        node = f.node_def.add(name=nd["name"], op=nd["op"])
        node.input.extend(nd.get("input", []))
        for k, v in nd.get("attr", {}).items():
            node.attr[k].CopyFrom(v)
    for k, v in ret_map.items():
        f.ret[k] = v
    for k, v in (attrs or {}).items():
        f.attr[k].CopyFrom(v)
    return f


def tattr(t: int) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(type=t)


def float_const(b: GDB, name: str, value=1.0, shape=(2, 2), **kw) -> T:
    import numpy as np

    return b.const(np.full(shape, value, np.float32), tf.float32, name=name, **kw)


def test_chains():  # 1
    b = GDB()
    a = unc_nullary(b, "A")
    c = b.op("Relu", b.op("Relu", a, name="B"), name="C")
    d = unc_unary(b, c, name="D")
    b.op("Relu", b.op("Relu", d, name="E"), name="F")
    clusters = mark(b)
    assert len(clusters) == 4
    assert clusters["B"] == clusters["C"] and clusters["E"] == clusters["F"]
    assert clusters["B"] != clusters["E"]
    assert "A" not in clusters and "D" not in clusters


def test_uncompilable_cycles():  # 2
    b = GDB()
    a = float_const(b, "A")
    bb = unc_unary(b, a, name="B")
    b.op("MatMul", a, bb, name="C")
    assert mark(b) == {}


def test_compilable_cycles():  # 3
    b = GDB()
    a = float_const(b, "A")
    bb = b.op("Relu", a, name="B")
    b.op("MatMul", a, bb, name="C")
    clusters = mark(b)
    assert len(clusters) == 3 and len(set(clusters.values())) == 1


def test_string_unsupported():  # 4
    b = GDB()
    a = b.const(b"string", tf.string, name="A")
    bb = b.op("EncodeBase64", a, name="B")
    b.op("StringSplit", a, bb, name="C")
    assert mark(b) == {}


def test_where_supported():  # 5
    b = GDB()
    a = b.const([[1, 0], [0, 1]], tf.int32, name="A")
    bb = b.op("Where", a, name="B", out_dtype=types_pb2.DT_INT64)
    b.op("GatherV2", a, bb, b.const(0, tf.int32, name="axis"), name="C", Taxis=tf.int32, Tindices=tf.int64,
         Tparams=tf.int32)
    assert mark(b) != {}


def test_half_supported():  # 6
    b = GDB()
    a = b.const([[1.0, 2.0], [3.0, 4.0]], tf.float16, name="A")
    bb = b.op("Neg", a, name="B")
    b.op("MatMul", a, bb, name="C")
    assert mark(b) != {}


def _compilable_fn(name="CompilableFn", **attrs):
    return fdef(name, [("n_a", FLOAT), ("n_b", FLOAT)], [("n_c", FLOAT)],
                [{"name": "n_c", "op": "Add", "input": ["n_a", "n_b"], "attr": {"T": tattr(FLOAT)}}],
                {"n_c": "n_c:z:0"}, attrs)


def _uncompilable_fn(name="UncompilableFn"):
    return fdef(name, [("n_a", FLOAT)], [("n_c", FLOAT)],
                [{"name": "n_c", "op": "DebugIdentity", "input": ["n_a"], "attr": {"T": tattr(FLOAT)}}],
                {"n_c": "n_c:output:0"})


def test_partitioned_call_unsupported():  # 7
    b = GDB()
    b.add_function(_compilable_fn())
    b.add_function(_uncompilable_fn())
    a = b.placeholder(tf.float32, name="A")
    call_b = b.op("PartitionedCall", [a, a], name="B", f=func_attr("CompilableFn"),
                  Tin=[tf.float32, tf.float32], Tout=[tf.float32], out_dtype=FLOAT)
    call_c = b.op("PartitionedCall", [a], name="C", f=func_attr("UncompilableFn"),
                  Tin=[tf.float32], Tout=[tf.float32], out_dtype=FLOAT)
    b.op("Add", call_b, call_c, name="D")
    clusters = mark(b)
    assert clusters["B"] == clusters["D"]
    assert "C" not in clusters


def test_function_calls():  # 8
    b = GDB()
    b.add_function(_compilable_fn())
    b.add_function(_uncompilable_fn())
    b.add_function(_compilable_fn("NoInlineFn", _noinline=attr_value_pb2.AttrValue(b=True)))
    a = unc_nullary(b, "A")
    call_b = b.op("CompilableFn", a, a, name="B", out_dtype=FLOAT)
    c = b.op("Relu", call_b, name="C")
    b.op("UncompilableFn", c, name="D", out_dtype=FLOAT)
    b.op("NoInlineFn", c, c, name="E", out_dtype=FLOAT)
    clusters = mark(b)
    assert clusters.get("C") is not None and clusters["C"] == clusters.get("E")
    assert not {"A", "B", "D"} & set(clusters)


def test_symbolic_gradients():  # 10
    b = GDB()
    b.add_function(fdef("Supported", [("x", FLOAT)], [("y", FLOAT)],
                        [{"name": "y", "op": "Relu", "input": ["x"], "attr": {"T": tattr(FLOAT)}}],
                        {"y": "y:activations:0"}))
    b.add_function(fdef("Unsupported", [("x", FLOAT)], [("y", FLOAT)],
                        [{"name": "y", "op": "DebugIdentity", "input": ["x"], "attr": {"T": tattr(FLOAT)}}],
                        {"y": "y:output:0"}))
    a = unc_nullary(b, "A")
    grad_b = b.op("SymbolicGradient", [a, a], name="B", f=func_attr("Supported"),
                  Tin=[tf.float32, tf.float32], Tout=[tf.float32], out_dtype=FLOAT)
    c = b.op("Relu", grad_b, name="C")
    b.op("SymbolicGradient", [c, c], name="D", f=func_attr("Unsupported"),
         Tin=[tf.float32, tf.float32], Tout=[tf.float32], out_dtype=FLOAT)
    clusters = mark(b)
    assert clusters.get("B") is not None and clusters["B"] == clusters.get("C")
    assert "A" not in clusters and "D" not in clusters


def test_loops():  # 11
    b = GDB()
    a = float_const(b, "A")
    bb = float_const(b, "B")
    c = b.op("Add", a, bb, name="C")
    enter = b.op("Enter", c, name="enter", frame_name="aframe")
    nxt = b.op("NextIteration", enter, name="next")
    ex = b.op("Exit", nxt, name="exit")
    b.op("Add", c, ex, name="D")
    assert mark(b) == {}


def _scoped_cycle(scopes, compile_attr=False):
    b = GDB()
    extra = lambda s: ({"_XlaScope": s} if s else {}) | ({"_XlaCompile": True} if compile_attr else {})
    a = float_const(b, "A", **extra(scopes[0]))
    bb = b.op("Relu", a, name="B", **extra(scopes[1]))
    b.op("MatMul", a, bb, name="C", **extra(scopes[2]))
    return b


def test_cycles_with_all_different_scopes_global_jit_overridden():  # 12
    clusters = mark(_scoped_cycle(["ScopeA", "ScopeB", "ScopeC"]))
    assert len(clusters) == 3 and len(set(clusters.values())) == 1


def test_cycles_with_all_different_scopes():  # 13
    assert mark(_scoped_cycle(["ScopeA", "ScopeB", "ScopeC"]), NO_GLOBAL_JIT_FLAGS) == {}


def test_cycles_with_splitting_scopes():  # 14
    b = GDB()
    attrs1 = {"_XlaScope": "Scope1", "_XlaCompile": True}
    attrs2 = {"_XlaScope": "Scope2", "_XlaCompile": True}
    a = float_const(b, "A", **attrs1)
    bb = b.op("Relu", a, name="B", **attrs1)
    c = b.op("MatMul", a, bb, name="C", **attrs2)
    b.op("Add", bb, c, name="D", **attrs2)
    clusters = mark(b, NO_GLOBAL_JIT_FLAGS)
    assert clusters["A"] == clusters["B"] and clusters["C"] == clusters["D"]
    assert clusters["A"] != clusters["C"]


def test_cycles_with_different_scopes_and_bridge():  # 15
    b = GDB()
    a = float_const(b, "A", _XlaScope="ScopeA", _XlaCompile=True)
    bb = b.op("Relu", a, name="B", _XlaScope="ScopeB", _XlaCompile=True)
    b.op("MatMul", a, bb, name="C")
    clusters = mark(b, NO_GLOBAL_JIT_FLAGS)
    assert clusters["A"] != clusters["B"]
    assert "C" not in clusters


def _switches(b: GDB):
    value = b.placeholder(tf.float32, name="value")
    cond_a = b.placeholder(tf.bool, name="cond_a")
    cond_b = b.placeholder(tf.bool, name="cond_b")
    sw_a = b.op("Switch", value, cond_a, name="switch_a")
    sw_b = b.op("Switch", value, cond_b, name="switch_b")
    return sw_a, sw_b


def test_dont_cluster_nodes_with_mismatching_deadness():  # 16
    b = GDB()
    sw_a, sw_b = _switches(b)
    ta1 = b.op("Tanh", b.op("Tanh", sw_a[1], name="tan_a0"), name="tan_a1")
    tb1 = b.op("Tanh", b.op("Tanh", sw_b[1], name="tan_b0"), name="tan_b1")
    b.op("Add", ta1, tb1, name="add")
    clusters = mark(b, deadness=True)
    assert clusters["tan_a0"] == clusters["tan_a1"]
    assert clusters["tan_b0"] == clusters["tan_b1"]
    assert clusters["tan_a0"] != clusters["tan_b0"]
    assert "add" not in clusters


def test_cluster_nodes_with_mismatching_input_deadness():  # 17
    b = GDB()
    sw_a, sw_b = _switches(b)
    add_a = b.op("Add", sw_a[1], sw_b[1], name="add_a")
    add_b = b.op("Add", sw_a[1], sw_b[1], name="add_b")
    b.op("Add", add_a, add_b, name="add_c")
    clusters = mark(b, deadness=True)
    assert clusters["add_a"] == clusters["add_b"] == clusters["add_c"]


def _var(b: GDB, name: str, **kw) -> T:
    return b.op("VarHandleOp", name=name, dtype=tf.float32, shape=tf.TensorShape([]),
                out_dtype=RESOURCE, **kw)


def _resources(b: GDB, write_then_read: bool):
    var_r = _var(b, "VarR")
    var_w = _var(b, "VarW")
    value = b.const(1.0, tf.float32, name="ValueToAssignW")
    read = b.op("ReadVariableOp", var_r, name="ReadR", dtype=tf.float32)
    assign = b.op("AssignVariableOp", var_w, value, name="AssignmentW", dtype=tf.float32)
    if write_then_read:
        b.node("ReadR").input.append("^AssignmentW")
    else:
        b.node("AssignmentW").input.append("^ReadR")
    return read, assign


def test_resources_clustering_allowed():  # 18
    b = GDB()
    _resources(b, write_then_read=False)
    clusters = mark(b)
    assert set(clusters) == {"AssignmentW", "ReadR", "ValueToAssignW"}
    assert len(set(clusters.values())) == 1


def test_resources_clustering_disallowed():  # 19
    b = GDB()
    _resources(b, write_then_read=True)
    assert mark(b) == {}


def test_chain_of_ops():  # 20
    b = GDB()
    var_w0, var_r0, var_w1, var_r1 = (_var(b, n) for n in ("VarW0", "VarR0", "VarW1", "VarR1"))
    value0 = b.const(1.0, tf.float32, name="ValueToAssignW0")
    value1 = b.const(1.0, tf.float32, name="ValueToAssignW1")
    b.op("AssignVariableOp", var_w0, value0, name="AssignmentW0", dtype=tf.float32)
    b.const(2.0, tf.float32, name="ConstN0", ctrl=("AssignmentW0",))
    b.op("ReadVariableOp", var_r0, name="ReadR0", dtype=tf.float32, ctrl=("ConstN0",))
    b.op("AssignVariableOp", var_w1, value1, name="AssignmentW1", dtype=tf.float32, ctrl=("ReadR0",))
    b.const(3.0, tf.float32, name="ConstN1", ctrl=("AssignmentW1",))
    b.op("ReadVariableOp", var_r1, name="ReadR1", dtype=tf.float32, ctrl=("ConstN1",))
    clusters = mark(b)
    assert set(clusters) == {"AssignmentW1", "ConstN0", "ReadR0", "ValueToAssignW1"}
    assert len(set(clusters.values())) == 1


def test_illegal_cycle_useful_error_message():  # 21
    # TF's test adds a->b, b->c, then c->a; c->a points backwards in node order, so it comes last.
    b = GDB()
    b.op("NoOp", name="a", ctrl=("c",))
    b.op("NoOp", name="b", ctrl=("a",))
    b.op("NoOp", name="c", ctrl=("b",))
    with pytest.raises(InternalError) as err:
        mark(b)
    assert "Edge from c to a would create a cycle.\n+-> a\n|   b\n+-- c\n" in str(err.value)


def test_retval():  # 22
    b = GDB()
    a = float_const(b, "A")
    relu = b.op("Relu", a, name="B")
    b.op("_Retval", relu, name="R", index=0)
    assert mark(b) == {}


def test_dont_count_identity_ops():  # 23
    b = GDB()
    arg = b.op("_Arg", name="A", T=tf.float32, index=0)
    i2 = b.op("Identity", b.op("Identity", arg, name="B"), name="C")
    b.op("_Retval", i2, name="R", index=0)
    assert mark(b) == {}


def test_const_op():  # 24
    b = GDB()
    float_const(b, "const", _XlaCompile=True)
    assert len(set(mark(b).values())) == 1
    b = GDB()
    b.const(b"s", tf.string, name="const", _XlaCompile=True)
    assert mark(b) == {}


def _ref_variable_graph(identity_input_is_ref: bool):
    b = GDB()
    var = b.op("VariableV2", name="variable", dtype=tf.float32, shape=tf.TensorShape([]),
               out_dtype=types_pb2.DT_FLOAT_REF)
    if identity_input_is_ref:
        read = b.op("Identity", var, name="read", T=tf.float32)
        neg = b.op("Neg", read, name="negate")
    else:
        read = b.op("Identity", var, name="read", T=tf.float32)
        neg = b.op("Neg", read, name="negate")
        neg = b.op("Identity", neg, name="identity")
    b.op("Add", neg, neg, name="add")
    return b


def test_dont_cluster_identity_with_ref_input():  # 25
    clusters = mark(_ref_variable_graph(True))
    assert set(clusters) == {"negate", "add"} and len(set(clusters.values())) == 1


def test_cluster_identity_with_non_ref_input():  # 26
    clusters = mark(_ref_variable_graph(False))
    assert set(clusters) == {"negate", "identity", "add"} and len(set(clusters.values())) == 1


def test_random_shape():  # 28
    b = GDB()
    shape_shape = b.const([2], tf.int32, name="shape_shape")
    minval = b.const(1, tf.int32, name="minval")
    maxval = b.const(20, tf.int32, name="maxval")
    shape = b.op("RandomUniformInt", shape_shape, minval, maxval, name="shape", Tout=tf.int32,
                 T=tf.int32)
    inp = b.placeholder(tf.float32, name="input")
    b.op("Reshape", inp, shape, name="reshape", Tshape=tf.int32)
    clusters = mark(b)
    assert "shape" not in clusters


def test_random_shape_with_func():  # 29
    b = GDB()
    b.add_function(fdef("Stateful_func", [], [("out", INT32)],
                        [{"name": "shape_shape", "op": "Const",
                          "attr": {"dtype": tattr(INT32),
                                   "value": attr_value_pb2.AttrValue(tensor=tf.make_tensor_proto([2], tf.int32))}},
                         {"name": "minval", "op": "Const",
                          "attr": {"dtype": tattr(INT32),
                                   "value": attr_value_pb2.AttrValue(tensor=tf.make_tensor_proto(1, tf.int32))}},
                         {"name": "maxval", "op": "Const",
                          "attr": {"dtype": tattr(INT32),
                                   "value": attr_value_pb2.AttrValue(tensor=tf.make_tensor_proto(20, tf.int32))}},
                         {"name": "shape", "op": "RandomUniformInt",
                          "input": ["shape_shape:output:0", "minval:output:0", "maxval:output:0"],
                          "attr": {"T": tattr(INT32), "Tout": tattr(INT32)}}],
                        {"out": "shape:output:0"}))
    fn_call = b.op("StatefulPartitionedCall", [], name="fn_call", f=func_attr("Stateful_func"),
                   Tin=[], Tout=[tf.int32], out_dtype=INT32)
    inp = b.placeholder(tf.float32, name="input")
    b.op("Reshape", inp, fn_call, name="reshape", Tshape=tf.int32)
    assert "fn_call" not in mark(b)


def test_random_ops_and_dummy_ops_on_cpu_vs_xla_cpu():  # 35-38
    def rng_graph(device):
        b = GDB()
        shape = b.const([2, 2], tf.int32, name="shape", device=device)
        ra = b.op("RandomUniform", shape, name="a", dtype=tf.float32, device=device)
        rb = b.op("RandomUniform", shape, name="b", dtype=tf.float32, device=device)
        b.op("Add", ra, rb, name="c", device=device)
        return b

    on_xla = mark(rng_graph(XLA_CPU0))
    assert {"a", "b", "c"} <= set(on_xla)
    on_cpu = mark(rng_graph(CPU0))
    assert "a" not in on_cpu and "b" not in on_cpu

    def dummy_graph(device):
        b = GDB()
        a = b.placeholder(tf.float32, name="a", device=device)
        bb = b.placeholder(tf.float32, name="b", device=device)
        check = b.op("CheckNumerics", a, name="check", message="oops", device=device)
        ge = b.op("GreaterEqual", check, bb, name="greaterequal", device=device)
        b.op("Assert", ge, [ge], name="assert", T=[tf.bool], device=device)
        return b

    assert {"check", "greaterequal", "assert"} <= set(mark(dummy_graph(XLA_CPU0)))
    on_cpu = mark(dummy_graph(CPU0))
    assert "check" not in on_cpu and "assert" not in on_cpu


def _variant_graph(device, produce: bool):
    b = GDB()
    if produce:
        shape = b.op("Cast", b.const([1], tf.int64, name="shape_i64"), name="cast_shape", DstT=tf.int32,
                     SrcT=tf.int64, device=device)
        n = b.op("Cast", b.const(2, tf.int64, name="n_i64"), name="cast_n", DstT=tf.int32, SrcT=tf.int64,
                 device=device)
        b.op("TensorListReserve", shape, n, name="tensor_list_reserve", element_dtype=tf.float32,
             shape_type=tf.int32, out_dtype=types_pb2.DT_VARIANT, device=device)
    else:
        v = b.placeholder(tf.variant, name="tensor_list_variant", device=device)
        b.op("Cast", b.const(1, tf.int64, name="c_i64"), name="cast", DstT=tf.int32, SrcT=tf.int64,
             device=device)
        b.op("TensorListElementShape", v, name="tensor_list_element_shape", shape_type=tf.int32,
             ctrl=("cast",), device=device)
    return b


def test_variant_ops():  # 39-41
    assert "tensor_list_reserve" not in mark(_variant_graph(CPU0, True))
    assert "tensor_list_element_shape" not in mark(_variant_graph(CPU0, False))
    assert "tensor_list_reserve" in mark(_variant_graph(XLA_CPU0, True))


def test_create_combined_cpu_gpu_clusters():  # 42
    b = GDB()
    a = b.placeholder(tf.float32, name="a", device=GPU0)
    bb = b.placeholder(tf.float32, name="b", device=GPU0)
    x = b.op("Add", a, bb, name="x", device=GPU0)
    y = b.op("MatMul", x, bb, name="y", device=CPU0)
    b.op("Add", x, y, name="z", device=GPU0)
    clusters = mark(b)
    assert clusters["x"] == clusters["y"] == clusters["z"]


def test_dont_create_gpu0_and_gpu1_clusters():  # 43
    b = GDB()
    a = b.placeholder(tf.float32, name="a", device=GPU0)
    bb = b.placeholder(tf.float32, name="b", device=GPU1)
    x = b.op("Add", a, bb, name="x", device=GPU0)
    b.op("Add", x, x, name="y", device=GPU1)
    assert "x" not in mark(b) or mark(b).get("x") != mark(b).get("y")
    assert mark(b) == {}


def test_dont_create_combined_cpu_unknown_clusters():  # 44
    b = GDB()
    a = b.placeholder(tf.float32, name="a", device=CPU0)
    bb = b.placeholder(tf.float32, name="b", device=CPU0)
    x = b.op("Add", a, bb, name="x", device=CPU0)
    b.op("Add", x, x, name="y", device=XLA_GPU0)
    assert mark(b) == {}


def _resource_devices(read_dev, add_dev):
    b = GDB()
    var = _var(b, "var", device=read_dev)
    read = b.op("ReadVariableOp", var, name="read", dtype=tf.float32, device=read_dev)
    p = b.placeholder(tf.float32, name="p", device=add_dev)
    b.op("Add", read, p, name="b", device=add_dev)
    return b


def test_cluster_resource_ops_when_safe():  # 45
    clusters = mark(_resource_devices(GPU0, CPU0))
    assert clusters.get("read") is not None and clusters["read"] == clusters.get("b")


def test_dont_cluster_resource_ops_when_unsafe():  # 46
    clusters = mark(_resource_devices(CPU0, GPU0))
    assert "read" not in clusters and "b" not in clusters


@pytest.mark.parametrize("attr", ["_scoped_allocator", "_forward_from"])
def test_dont_cluster_nodes_with_special_attrs(attr):  # 47, 48
    b = GDB()
    a = b.placeholder(tf.float32, name="a", device=GPU0)
    bb = b.placeholder(tf.float32, name="b", device=GPU0)
    x = b.op("Add", a, bb, name="x", device=GPU0)
    y = b.op("MatMul", a, bb, name="y", device=GPU0)
    value = [0] if attr == "_scoped_allocator" else 0
    b.op("Add", x, y, name="z", device=GPU0, **{attr: value})
    assert "z" not in mark(b)


def test_cluster_shape_consumer_with_producer():  # 49
    b = GDB()
    a = b.placeholder(tf.float32, name="a", device=GPU0)
    bb = b.placeholder(tf.float32, name="b", device=GPU0)
    x = b.op("MatMul", a, bb, name="x", device=GPU0)
    y = b.op("Size", x, name="y", device=CPU0, out_type=tf.int32)
    b.op("Add", y, y, name="z", device=GPU1)
    clusters = mark(b)
    assert clusters.get("x") is not None and clusters["x"] == clusters.get("y")
    assert clusters.get("z") != clusters["x"]


def test_cluster_shape_consumer_with_producer_and_consumer():  # 50
    b = GDB()
    a = b.placeholder(tf.float32, name="a")
    bb = b.placeholder(tf.float32, name="b")
    x = b.op("MatMul", a, bb, name="x")
    y = b.op("Size", x, name="y", out_type=tf.int32)
    b.op("Add", y, y, name="z")
    clusters = mark(b)
    assert clusters["x"] == clusters["y"] == clusters["z"]


def test_iteration_increment_and_group_deps():  # 51
    b = GDB()
    scalar_int = b.const(1, tf.int64, name="one")
    it_var = b.op("VarHandleOp", name="iter", dtype=tf.int64, shape=tf.TensorShape([]), out_dtype=RESOURCE)
    b.op("AssignAddVariableOp", it_var, scalar_int, name="IncrementIteration", dtype=tf.int64)
    for i in range(2):
        w = _var(b, f"weights_{i}")
        delta = b.placeholder(tf.float32, name=f"delta_{i}")
        b.op("AssignAddVariableOp", w, delta, name=f"weights_{i}_update", dtype=tf.float32)
    b.op("NoOp", name="group_deps")
    b.op("NoOp", name="some_ctrl_input")
    inp = b.placeholder(tf.float32, name="input")
    for i in range(2):
        b.op("MatMul", inp, inp, name=f"matmul_{i}")
    ctrl = [("IncrementIteration", "group_deps"), ("some_ctrl_input", "weights_0_update"),
            ("some_ctrl_input", "weights_1_update")]
    for i in range(2):
        ctrl += [(f"weights_{i}_update", "IncrementIteration"), (f"matmul_{i}", "group_deps"),
                 (f"weights_{i}_update", f"matmul_{i}")]
    for src, dst in ctrl:
        b.node(dst).input.append("^" + src)
    clusters = mark(b)
    members = {"some_ctrl_input", "weights_0_update", "weights_1_update", "matmul_0", "matmul_1"}
    assert members <= set(clusters)
    assert len({clusters[m] for m in members}) == 1


def test_dont_cluster_the_special_identity_driving_consts_in_loop():  # 52
    b = GDB()
    cond = b.placeholder(tf.bool, name="cond")
    value = b.placeholder(tf.float32, name="value")
    loop_cond = b.op("LoopCond", cond, name="loop_cond")
    switch = b.op("Switch", value, loop_cond, name="switch")
    b.op("Identity", switch[1], name="identity")
    const = b.const(1.0, tf.float32, name="const", ctrl=("identity",))
    tanh1 = b.op("Tanh", b.op("Tanh", const, name="tanh0"), name="tanh1")
    b.op("Add", const, tanh1, name="add")
    clusters = mark(b, deadness=True)
    assert "identity" not in clusters


def test_unsupported_enter_exit_pattern():  # 53
    b = GDB()
    a = b.placeholder(tf.float32, name="a")
    enter = b.op("Enter", a, name="enter", frame_name="frame")
    ex = b.op("Exit", enter, name="exit")
    tanh = b.op("Tanh", ex, name="tanh")
    enter1 = b.op("Enter", tanh, name="enter_1", frame_name="frame")
    b.op("Exit", enter1, name="exit_1")
    assert mark(b) == {}


def test_deterministic_cluster_names():  # 54
    state = ProcessState()

    def graph(out_name):
        b = GDB()
        a = float_const(b, "A")
        neg = b.op("Neg", a, name="B")
        b.op("MatMul", a, neg, name=out_name)
        return b

    flags = HARNESS_FLAGS + " --tf_xla_deterministic_cluster_names"
    names = []
    for out in ("out", "differs", "out", "differs"):
        result = mark_for_compilation(graph(out).graph_def, flags, state=state, disable_deadness=True)
        assert len(result.clusters) == 1
        names.append(next(iter(result.clusters)))
    fp = [n.split("_")[1] for n in names]
    seq = [n.split("_")[2] for n in names]
    assert fp[0] == fp[2] and fp[1] == fp[3] and fp[0] != fp[1]
    assert seq[0] != seq[2] and seq[1] != seq[3]
    assert all(n.startswith("cluster_") for n in names)


def test_cluster_session_name():  # 55
    clusters = mark(_ref_variable_graph(True), session_name="test_session_name")
    assert set(clusters) == {"negate", "add"}
    assert all(name.startswith("test_session_name") for name in clusters.values())
