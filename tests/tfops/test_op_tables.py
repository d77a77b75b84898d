"""op_tables against TensorFlow 2.21 itself.

Three kinds of check, cheapest first:
- structure: every name is a registered op, every constant-input name is an input of its OpDef, the
  flag helpers accept and reject what TF does, ``const_input_indices`` handles list arguments;
- TF's in-process registries, read in a subprocess through ctypes (the XLA op registry's
  compile-time-constant inputs and metadata ops, the resource-op table, two of the checker's predicates);
- TF's own behaviour for ``--tf_xla_ops_to_cluster`` (its log line and its error text), in subprocesses.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, node_def_pb2, types_pb2
from tensorflow.python.framework import kernels, op_def_registry

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.tfops import op_tables as T

# Names TF itself lists that are not registered ops: REF_CLASS("_SwitchN") in graph.cc also adds
# "Ref_SwitchN", which no op registration defines.
TF_LISTED_BUT_UNREGISTERED = {"Ref_SwitchN"}


def _all_table_op_names() -> set[str]:
    names: set[str] = set()
    for ops in T.ALLOWLIST_TABLE.values():
        names |= ops
    for ops in (T.STATEFUL_RANDOM_OPS, T.ASSERT_OPS, T.INACCURATE_OPS, T.SLOW_OPS, T.NODE_CLASSES,
                T.RESOURCE_OP_TABLE, T.COMPILE_TIME_CONSTANT_INPUTS, T.METADATA_OPS,
                T.CONST_TRAVERSABLE_OPS, T.CONST_ANALYSIS_FUNCTION_ATTRS, T.SHAPE_CONSUMER_OPS,
                T.SCALAR_INTEGER_RESOURCE_OPS, T.DECLUSTER_IF_ALL_CONSUMERS_OUTSIDE_OPS,
                T.TPU_EXECUTE_OPS, T.CLUSTER_EXCLUDE_SUPPORTED_OPS):
        names |= set(ops)
    names |= {T.CONTROL_TRIGGER_OP, T.COLLECTIVE_REDUCE_V2_OP, T.WHERE_OP, T.UNIQUE_OP,
              T.SYMBOLIC_GRADIENT_OP, T.STRING_CONST_OP, T.SINK_LIKE_OP, T.VAR_HANDLE_OP}
    return names


@pytest.fixture(scope="module")
def xla_cpu_ops() -> frozenset[str]:
    """Op names with an XLA_CPU_JIT kernel (TF registers them once XLA is first used)."""
    tf.function(lambda x: x + 1, jit_compile=True)(tf.constant(1.0))
    return frozenset(k.op for k in kernels.get_all_registered_kernels().kernel
                     if k.device_type == "XLA_CPU_JIT")


def _node(op: str, **attrs) -> node_def_pb2.NodeDef:
    nd = node_def_pb2.NodeDef(name="n", op=op)
    for key, value in attrs.items():
        nd.attr[key].CopyFrom(value)
    return nd


# ----- structure ----------------------------------------------------------------------------------------

def test_every_table_name_is_a_registered_op():
    missing = sorted(n for n in _all_table_op_names() if op_def_registry.get(n) is None)
    assert set(missing) == TF_LISTED_BUT_UNREGISTERED


def test_constant_input_names_are_opdef_inputs():
    for op, names in T.COMPILE_TIME_CONSTANT_INPUTS.items():
        inputs = [a.name for a in op_def_registry.get(op).input_arg]
        assert names, op
        assert all(n in inputs for n in names), (op, names, inputs)
        assert list(names) == sorted(names, key=inputs.index), f"{op}: not in OpDef order"


def test_constant_input_ops_have_xla_cpu_kernels(xla_cpu_ops):
    assert set(T.COMPILE_TIME_CONSTANT_INPUTS) <= xla_cpu_ops
    assert T.METADATA_OPS <= xla_cpu_ops
    # Every op a category stands for is an XLA op, so FUSIBLE itself never trips the validation.
    assert T.FUSIBLE_OPS <= xla_cpu_ops


def test_allowlist_shape():
    assert T.ALLOWLIST_CATEGORIES == ("PW", "RED", "PWRED", "REDUCEWINDOW", "REDUCEWINDOWPW", "BN",
                                      "Conv", "SORT", "MISC")
    assert T.ALLOWLIST_TABLE["PWRED"] == T.ALLOWLIST_TABLE["REDUCEWINDOW"]
    assert {"Transpose", "Const"} <= T.ALLOWLIST_TABLE["PW"] & T.ALLOWLIST_TABLE["MISC"]
    assert len(T.FUSIBLE_OPS) == 185
    with pytest.raises(TypeError):
        T.ALLOWLIST_TABLE["X"] = frozenset()  # frozen


def test_expand_ops_to_cluster(xla_cpu_ops):
    assert T.expand_ops_to_cluster("", xla_cpu_ops) == frozenset()
    assert T.expand_ops_to_cluster("FUSIBLE", xla_cpu_ops) == T.FUSIBLE_OPS
    assert T.expand_ops_to_cluster(["RED", "MatMul"], xla_cpu_ops) == T.ALLOWLIST_TABLE["RED"] | {"MatMul"}
    # Any XLA op is accepted, allowlisted or not; empty pieces are skipped.
    assert T.expand_ops_to_cluster("Add,,Unique", xla_cpu_ops) == {"Add", "Unique"}
    for bad in ("BOGUS", "fusible", " Add", "StringJoin", "Add,conv"):
        with pytest.raises(InvalidArgumentError) as err:
            T.expand_ops_to_cluster(bad, xla_cpu_ops)
        name = [p for p in bad.split(",") if p not in xla_cpu_ops][0]
        assert str(err.value) == (f"The operation '{name}' passed to --tf_xla_ops_to_cluster is not "
                                  "supported by XLA.")
        assert err.value.status.startswith("INVALID_ARGUMENT: ")
    # Category members are validated too: with a registry lacking TopKV2, SORT is an error.
    with pytest.raises(InvalidArgumentError, match="'TopKV2'"):
        T.expand_ops_to_cluster("SORT", xla_cpu_ops - {"TopKV2"})
    assert T.known_ops_to_cluster_names({"Add"}) == {"Add", "FUSIBLE", *T.ALLOWLIST_CATEGORIES}


def test_check_cluster_exclude_ops():
    assert T.check_cluster_exclude_ops("") is True
    assert T.check_cluster_exclude_ops("Where") is False
    assert T.check_cluster_exclude_ops(",Where,") is False
    for bad in ("Unique", "where", "Where,Add"):
        with pytest.raises(InvalidArgumentError) as err:
            T.check_cluster_exclude_ops(bad)
        name = [p for p in bad.split(",") if p != "Where"][0]
        assert str(err.value) == (f"The operation '{name}' passed to --tf_xla_cluster_exclude_ops is not "
                                  "supported by XLA.")


def test_const_input_indices():
    def od(op):
        return op_def_registry.get(op)

    i32 = attr_value_pb2.AttrValue(type=types_pb2.DT_INT32)
    assert T.const_input_indices(_node("Sum"), od("Sum")) == [1]
    assert T.const_input_indices(_node("AddV2"), od("AddV2")) == []
    # ConcatV2's `values` is a list of N: the axis is input N.
    assert T.const_input_indices(_node("ConcatV2", N=attr_value_pb2.AttrValue(i=3), Tidx=i32),
                                 od("ConcatV2")) == [3]
    # Every element of a list argument is constant: DynamicStitch's N indices come first.
    assert T.const_input_indices(_node("DynamicStitch", N=attr_value_pb2.AttrValue(i=2)),
                                 od("DynamicStitch")) == [0, 1]
    assert T.const_input_indices(_node("StridedSlice"), od("StridedSlice")) == [1, 2, 3]
    assert T.const_input_indices(_node("Range"), od("Range")) == [0, 1, 2]
    # _FusedConv2D: `args` is a type list (TArgs), `host_args` a list of num_host_args floats.
    targs = attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(
        type=[types_pb2.DT_FLOAT, types_pb2.DT_FLOAT]))
    fused = _node("_FusedConv2D", TArgs=targs, num_host_args=attr_value_pb2.AttrValue(i=2))
    assert T.const_input_indices(fused, od("_FusedConv2D")) == [4, 5]
    # The node attr overrides the registration; an empty list means no constant inputs; unknown names
    # are skipped.
    override = attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(s=[]))
    assert T.const_input_indices(_node("Reshape", _XlaCompileTimeConstantInputs=override),
                                 od("Reshape")) == []
    override = attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(s=[b"size", b"nope"]))
    assert T.const_input_indices(_node("Slice", _XlaCompileTimeConstantInputs=override),
                                 od("Slice")) == [2]
    with pytest.raises(InvalidArgumentError, match="missing attr 'N'"):
        T.const_input_indices(_node("ConcatV2"), od("ConcatV2"))


def test_resource_ops():
    assert T.resource_op_info("AssignVariableOp") == ("Write", "variable")
    assert T.resource_op_kind("AssignAddVariableOp") == "ReadWrite"
    assert T.resource_op_kind("ReadVariableOp") == "Read"
    assert T.resource_op_kind("MatMul") is None and T.resource_op_info("VarHandleOp") is None
    assert T.STACK_OPS == {"StackV2", "StackCloseV2", "StackPopV2", "StackPushV2"}
    assert len(T.TENSOR_ARRAY_OPS) == 10 and len(T.RESOURCE_OP_TABLE) == 59
    assert T.is_non_variable_resource_op("TensorArrayV3")
    assert not T.is_non_variable_resource_op("ReadVariableOp")
    assert T.RESOURCE_OP_KIND_NAMES[T.READ_WRITE] == "Modify"


def test_node_classes():
    assert T.IDENTITY_OPS == {"Identity", "RefIdentity"} and T.CONSTANT_OPS == {"Const", "HostConst"}
    assert T.WHILE_OPS == {"While", "StatelessWhile"} and T.IF_OPS == {"If", "StatelessIf"}
    assert T.node_class("MatMul") == "OTHER" and T.node_class("RefEnter") == "ENTER"
    # Const analysis walks through plain Identity but not RefIdentity.
    assert "RefIdentity" not in T.CONST_TRAVERSABLE_OPS and "While" in T.CONST_TRAVERSABLE_OPS


def test_integer_dtypes_match_tf_header():
    # TF ships its C++ headers; kDataTypeIsInteger in types.h is the set DataTypeIsInteger tests.
    header = os.path.join(os.path.dirname(tf.__file__), "include", "tensorflow", "core", "framework",
                          "types.h")
    if not os.path.exists(header):
        pytest.skip("TF headers not installed")
    text = open(header).read()
    body = re.search(r"kDataTypeIsInteger\s*=(.*?);", text, re.S).group(1)
    names = re.findall(r"ToSet\((DT_\w+)\)", body)
    assert {getattr(types_pb2, n) for n in names} == T.INTEGER_DTYPES


def _tf_header(*parts: str) -> str:
    path = os.path.join(os.path.dirname(tf.__file__), "include", *parts)
    if not os.path.exists(path):
        pytest.skip("TF headers not installed")
    return open(path, encoding="utf-8").read()


def test_checker_constants_match_tf_header():
    text = _tf_header("tensorflow", "compiler", "jit", "compilability_check_util.h")
    assert int(re.search(r"kMaxRecursionDepth = (\d+);", text).group(1)) == T.MAX_RECURSION_DEPTH
    body = re.search(r"bool IsStatefulRandomOp\(.*?\{(.*?)\}", text, re.S).group(1)
    assert set(re.findall(r'"(\w+)"', body)) == T.STATEFUL_RANDOM_OPS
    text = _tf_header("tensorflow", "compiler", "tf2xla", "tf2xla_util.h")
    body = re.search(r"IsConstTraversableOpType\(const Node\* node\) \{(.*?)\}", text, re.S).group(1)
    assert set(re.findall(r'"(\w+)"', body)) | T.WHILE_OPS == T.CONST_TRAVERSABLE_OPS
    assert "IsWhileNode()" in body


# ----- TF's registries, read through ctypes --------------------------------------------------------------

_REGISTRY_PROBE = textwrap.dedent(r'''
    import ctypes, json, os
    import tensorflow as tf
    from tensorflow.python.client import pywrap_tf_session as p
    from tensorflow.core.framework import op_def_pb2
    lib = ctypes.CDLL(os.path.join(os.path.dirname(tf.__file__), "libtensorflow_cc.so.2"))

    class Str(ctypes.Structure):  # libstdc++ (cxx11 ABI) std::string
        _fields_ = [("ptr", ctypes.c_void_p), ("size", ctypes.c_size_t), ("buf", ctypes.c_char * 16)]

    class Vec(ctypes.Structure):
        _fields_ = [("b", ctypes.c_void_p), ("e", ctypes.c_void_p), ("c", ctypes.c_void_p)]

    def read_str(addr):
        s = Str.from_address(addr)
        return ctypes.string_at(s.ptr, s.size).decode()

    def fn(name, restype, argtypes):
        f = getattr(lib, name)
        f.restype, f.argtypes = restype, argtypes
        return f

    ns = "_ZN10tensorflow13XlaOpRegistry"
    sarg = "ERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
    get_all = fn(ns + "19GetAllRegisteredOpsB5cxx11Ev", None, [ctypes.POINTER(Vec)])
    ctc = fn(ns + "32CompileTimeConstantInputArgNames" + sarg, ctypes.c_void_p, [ctypes.c_void_p])
    meta = fn(ns + "12IsMetadataOp" + sarg, ctypes.c_bool, [ctypes.c_void_p])
    v = Vec(); get_all(ctypes.byref(v))
    ops = [read_str(v.b + 32 * i) for i in range((v.e - v.b) // 32)]

    def string_set(addr):  # std::unordered_set<std::string>: walk the node list, check the count
        words = (ctypes.c_void_p * 4).from_address(addr)
        out, node = [], words[2]
        while node:
            out.append(read_str(node + 8))
            node = ctypes.c_void_p.from_address(node).value
        assert len(out) == (words[3] or 0)
        return sorted(out)

    def as_std(s):
        b = ctypes.create_string_buffer(s.encode())
        st = Str(); st.ptr = ctypes.addressof(b); st.size = len(s.encode())
        return st, b

    ctc_table, metadata = {}, []
    for op in ops:
        st, keep = as_std(op)
        names = string_set(ctc(ctypes.addressof(st)))
        if names:
            ctc_table[op] = names
        if meta(ctypes.addressof(st)):
            metadata.append(op)

    known = fn("_ZN10tensorflow26resource_op_table_internal19GetKnownResourceOpsEv", None,
               [ctypes.POINTER(Vec)])
    info = fn("_ZN10tensorflow22GetResourceOpInfoForOpESt17basic_string_viewIcSt11char_traitsIcEE",
              ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_char_p])
    v = Vec(); known(ctypes.byref(v))
    resource = {}
    for i in range((v.e - v.b) // 16):  # std::string_view: length, then pointer
        n, ptr = (ctypes.c_size_t * 2).from_address(v.b + 16 * i)
        name = ctypes.string_at(ptr, n)
        kind, res = (ctypes.c_int32 * 2).from_address(info(len(name), name))
        resource[name.decode()] = [["Read", "Write", "ReadWrite"][kind],
                                   ["variable", "stack", "tensor_array"][res]]

    ol = op_def_pb2.OpList(); ol.ParseFromString(p.TF_GetBuffer(p.TF_GetAllOpList()))
    every_op = [o.name for o in ol.op]
    dummy = ctypes.create_string_buffer(64)  # `this`: the predicates don't read members
    preds = {}
    for key, sym in (("stateful_random", "18IsStatefulRandomOp"), ("assert", "23IsAssertOrCheckNumerics")):
        f = fn("_ZNK10tensorflow29RecursiveCompilabilityChecker" + sym
               + "ESt17basic_string_viewIcSt11char_traitsIcEE",
               ctypes.c_bool, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p])
        preds[key] = sorted(o for o in every_op if f(ctypes.addressof(dummy), len(o.encode()), o.encode()))
    print(json.dumps({"all_ops": ops, "ctc": ctc_table, "metadata": metadata, "resource": resource,
                      **preds}))
''')


@pytest.fixture(scope="module")
def tf_registry() -> dict:
    proc = subprocess.run([sys.executable, "-c", _REGISTRY_PROBE], capture_output=True, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=300)
    if proc.returncode != 0:
        pytest.skip(f"could not read TF's registries through ctypes: {proc.stderr[-500:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    if data["ctc"].get("Sum") != ["reduction_indices"]:  # the layouts we assume don't hold
        pytest.skip("unexpected std:: layouts in this TF build")
    return data


def test_compile_time_constant_inputs_match_tf_registry(tf_registry):
    ours = {op: sorted(names) for op, names in T.COMPILE_TIME_CONSTANT_INPUTS.items()}
    assert ours == tf_registry["ctc"]


def test_metadata_ops_match_tf_registry(tf_registry):
    assert T.METADATA_OPS == set(tf_registry["metadata"])


def test_xla_registry_equals_xla_cpu_kernels(tf_registry, xla_cpu_ops):
    # XlaOpRegistry::GetAllRegisteredOps() is what --tf_xla_ops_to_cluster is checked against; in a CPU
    # build it is exactly the ops with an XLA_CPU_JIT kernel.
    assert set(tf_registry["all_ops"]) == xla_cpu_ops


def test_resource_table_matches_tf(tf_registry):
    assert {op: tuple(v) for op, v in tf_registry["resource"].items()} == dict(T.RESOURCE_OP_TABLE)


def test_checker_predicates_match_tf(tf_registry):
    assert set(tf_registry["stateful_random"]) == T.STATEFUL_RANDOM_OPS
    assert set(tf_registry["assert"]) == T.ASSERT_OPS


# ----- TF's behaviour for the flags -------------------------------------------------------------------

_FLAG_PROBE = textwrap.dedent('''
    import tensorflow as tf
    @tf.function
    def f(x):
        return tf.nn.relu(x * 2.0 + 1.0) - tf.exp(x)
    try:
        f(tf.constant([1.0, 2.0]))
        print("RESULT ok")
    except Exception as e:
        print("RESULT", type(e).__name__, e)
''')


def _run_with_flags(flags: str) -> tuple[str, set[str] | None, set[str] | None]:
    """Run a small auto-clustered function under TF_XLA_FLAGS; return TF's result line and the op sets
    it logged for --tf_xla_ops_to_cluster and --tf_xla_cluster_exclude_ops (VLOG 2)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_VMODULE": "mark_for_compilation_pass=2",
           "TF_XLA_FLAGS": f"--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit {flags}"}
    proc = subprocess.run([sys.executable, "-c", _FLAG_PROBE], capture_output=True, text=True, env=env,
                          timeout=300)
    out = proc.stdout + proc.stderr
    result = re.search(r"^RESULT (.*)$", out, re.M)
    assert result, out[-2000:]
    allow = re.search(r"will only consider the following TF operations: (.*)", out)
    exclude = re.search(r"will exclude following TF operations from auto clustering: (.*)", out)
    return (result.group(1), set(allow.group(1).split()) if allow else None,
            set(exclude.group(1).split()) if exclude else None)


def test_bad_ops_to_cluster_error_matches_tf(xla_cpu_ops):
    # One run gives both TF's expansion of FUSIBLE (logged before validation) and its error text.
    result, logged, _ = _run_with_flags("--tf_xla_ops_to_cluster=FUSIBLE,BOGUS")
    assert logged == T.FUSIBLE_OPS | {"BOGUS"}
    with pytest.raises(InvalidArgumentError) as err:
        T.expand_ops_to_cluster("FUSIBLE,BOGUS", xla_cpu_ops)
    assert result == f"InvalidArgumentError {err.value}"
    assert result == ("InvalidArgumentError The operation 'BOGUS' passed to --tf_xla_ops_to_cluster is "
                      "not supported by XLA.")


@pytest.mark.tfsweep
@pytest.mark.parametrize("category", T.ALLOWLIST_CATEGORIES)
def test_each_category_matches_tf(category):
    result, logged, _ = _run_with_flags(f"--tf_xla_ops_to_cluster={category}")
    assert result == "ok"
    assert logged == T.ALLOWLIST_TABLE[category]


@pytest.mark.tfsweep
@pytest.mark.parametrize("flags, expected", [
    ("--tf_xla_ops_to_cluster=Unique", "ok"),  # an XLA op outside every category is accepted
    ("--tf_xla_ops_to_cluster=StringJoin",
     "InvalidArgumentError The operation 'StringJoin' passed to --tf_xla_ops_to_cluster is not supported "
     "by XLA."),
    ("--tf_xla_cluster_exclude_ops=Where", "ok"),
    ("--tf_xla_cluster_exclude_ops=Unique",
     "InvalidArgumentError The operation 'Unique' passed to --tf_xla_cluster_exclude_ops is not "
     "supported by XLA."),
])
def test_flag_validation_matches_tf(flags, expected, xla_cpu_ops):
    result, _, _ = _run_with_flags(flags)
    assert result == expected
    value = flags.split("=", 1)[1]
    if flags.startswith("--tf_xla_ops_to_cluster"):
        check = lambda: T.expand_ops_to_cluster(value, xla_cpu_ops)  # noqa: E731
    else:
        check = lambda: T.check_cluster_exclude_ops(value)  # noqa: E731
    if expected == "ok":
        check()
    else:
        with pytest.raises(InvalidArgumentError) as err:
            check()
        assert expected == f"InvalidArgumentError {err.value}"
