"""Elementwise lowerings against TF eager: every op × dtype (among f32 f64 f16 bf16 i32 i64 bool that
XLA_CPU_JIT allows) × shapes (0-d, size-0, broadcasting edge cases).

Tolerances: the default is a few ulps of the type (tf2hlo_harness.TOL). Ops built from several HLO ops in
XLA's math library style (Erfc, Acosh, Asinh, Atanh, Acos, Asin, Sinh, Cosh, Softplus, Selu/Elu via
expm1) get 1e-5 relative in f32 and 1e-11 in f64: each step rounds, so the result drifts a few ulps from
Eigen's direct implementation. XLA:CPU's own exp/log/tanh/... approximations differ from the evaluator's
numpy by up to ~1e-6 relative in f32, which ``xla_rtol`` allows for transcendental ops.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import FLOATS, INTS, Case, raw, run_batch, values, xla_dtypes

UNARY_SHAPES = [(), (0,), (2, 3)]
# scalar, rank broadcast, degenerate dims on both sides, size-0, rank difference plus degenerate dims.
BINARY_SHAPES = [((), ()), ((2, 3), (3,)), ((2, 1), (1, 3)), ((0, 3), (1, 3)), ((3, 1, 2), (4, 1))]
SAME_SHAPES = [((), ()), ((0,), (0,)), ((2, 3), (2, 3))]

UNARY_DOMAIN = {
    "Log": "pos", "Sqrt": "pos", "Rsqrt": "pos", "Log1p": "unit", "Acosh": "ge1", "Atanh": "unit",
    "Asin": "unit", "Acos": "unit", "Reciprocal": "nonzero", "Inv": "nonzero", "Tan": "small",
    "Invert": "any", "Relu6": "wide",
}
COMPOSITE = {"Erfc", "Acosh", "Asinh", "Atanh", "Acos", "Asin", "Atan", "Sinh", "Cosh", "Softplus", "Selu",
             "Elu", "Softsign", "Sigmoid", "Expm1", "Log1p", "Erf", "Tan"}
TRANSCENDENTAL = COMPOSITE | {"Exp", "Log", "Tanh", "Sin", "Cos", "Rsqrt", "Sqrt", "Reciprocal", "Inv", "Pow",
                              "Atan2", "Xlogy", "Xlog1py", "SigmoidGrad", "SoftplusGrad", "RsqrtGrad"}
UNARY_OPS = ["Abs", "Neg", "Exp", "Expm1", "Log", "Log1p", "Sqrt", "Rsqrt", "Square", "Reciprocal", "Inv", "Sin",
             "Cos", "Tan", "Tanh", "Sigmoid", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Asin", "Acos", "Atan",
             "Erf", "Erfc", "Floor", "Ceil", "Round", "Rint", "Sign", "IsNan", "IsInf", "IsFinite", "LogicalNot",
             "Invert", "Relu", "Relu6", "Elu", "Selu", "Softplus", "Softsign"]
SPECIALS = {"Sign", "IsNan", "IsInf", "IsFinite", "Abs", "Neg", "Floor", "Ceil", "Round", "Rint", "Relu"}


def _tolerances(op: str, dtype: str) -> dict:
    out = {}
    if op in COMPOSITE and dtype in ("f32", "f64"):
        out = {"rtol": 1e-5 if dtype == "f32" else 1e-11, "atol": 1e-6 if dtype == "f32" else 1e-12}
    if op in TRANSCENDENTAL:
        out["xla_rtol"] = {"f32": 2e-6, "f64": 1e-12}.get(dtype, None)
    return out


def _unary_input(op: str, dtype: str, shape) -> np.ndarray:
    x = values(dtype, shape, UNARY_DOMAIN.get(op, "any"))
    if dtype in FLOATS and op in ("Round", "Rint") and x.size:
        halves = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5], np.float64)
        x = np.resize(halves, x.size).reshape(shape).astype(x.dtype)
    if dtype in FLOATS and op in SPECIALS and x.size >= 3:
        flat = x.reshape(-1).copy()
        flat[:3] = [np.nan, np.inf, -np.inf]
        x = flat.reshape(shape)
    return x


def unary_cases(op):
    dtypes = xla_dtypes(op)
    if op in ("Round", "Rint"):
        dtypes = [d for d in dtypes if d in FLOATS]  # TF 2.21's XLA rejects integer RoundToEven
    assert dtypes, op
    cases = []
    for dt in dtypes:
        for shape in UNARY_SHAPES:
            cases.append(Case(f"{op}[{dt}]{shape}", raw(op), [_unary_input(op, dt, shape)], **_tolerances(op, dt)))
    return cases


BINARY_DOMAIN = {
    "Div": ("any", "nonzero"), "RealDiv": ("any", "nonzero"), "FloorDiv": ("any", "nonzero"),
    "FloorMod": ("any", "nonzero"), "TruncateDiv": ("any", "nonzero"), "TruncateMod": ("any", "nonzero"),
    "Mod": ("any", "nonzero"), "Pow": ("pos", "any"), "Xlogy": ("any", "pos"), "Xlog1py": ("any", "unit"),
    "Xdivy": ("any", "nonzero"), "LeftShift": ("any", "shift"), "RightShift": ("any", "shift"),
    "DivNoNan": ("any", "small"), "MulNoNan": ("any", "small"),
}
BINARY_OPS = ["Add", "AddV2", "Sub", "Mul", "Div", "RealDiv", "DivNoNan", "MulNoNan", "FloorDiv", "FloorMod",
              "TruncateDiv", "TruncateMod", "Mod", "Pow", "Maximum", "Minimum", "SquaredDifference", "Atan2",
              "Xlogy", "Xdivy", "Xlog1py", "Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual",
              "LogicalAnd", "LogicalOr", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "LeftShift", "RightShift"]


def _binary_inputs(op: str, dtype: str, sx, sy):
    dx, dy = BINARY_DOMAIN.get(op, ("any", "any"))
    if op == "Pow" and dtype in INTS:
        dx, dy = "small", "shift"
    x, y = values(dtype, sx, dx, seed=1), values(dtype, sy, dy, seed=2)
    if op in ("DivNoNan", "MulNoNan") and y.size:
        y = y.copy().reshape(-1)
        y[0] = 0
        y = y.reshape(sy)
    if op in ("Xlogy", "Xdivy", "Xlog1py") and x.size:
        x = x.copy().reshape(-1)
        x[0] = 0
        x = x.reshape(sx)
    return [x, y]


def binary_cases(op):
    cases = []
    for dt in xla_dtypes(op):
        for sx, sy in BINARY_SHAPES:
            tol = _tolerances(op, dt)
            if op == "FloorDiv" and dt == "bf16":
                # tf2xla divides bf16 in f32 before the floor (binary_ops.cc); TF's CPU kernel divides in
                # bf16, so a quotient that rounds up to an integer floors one higher there.
                tol["atol"] = 1.0
            cases.append(Case(f"{op}[{dt}]{sx}x{sy}", raw(op), _binary_inputs(op, dt, sx, sy), **tol))
    return cases


GRAD_DOMAIN = {"SigmoidGrad": ("unit", "any"), "TanhGrad": ("unit", "any"), "RsqrtGrad": ("pos", "any"),
               "SqrtGrad": ("pos", "any"), "ReciprocalGrad": ("nonzero", "any"), "Relu6Grad": ("any", "wide"),
               "EluGrad": ("any", "any"), "SeluGrad": ("any", "any")}
GRAD_OPS = ["ReluGrad", "Relu6Grad", "EluGrad", "SeluGrad", "SigmoidGrad", "TanhGrad", "RsqrtGrad", "SqrtGrad",
            "ReciprocalGrad", "SoftplusGrad", "SoftsignGrad", "LeakyReluGrad"]


def gradient_cases(op):
    fn = raw(op, alpha=0.3) if op == "LeakyReluGrad" else raw(op)
    cases = []
    for dt in xla_dtypes(op):
        da, db = GRAD_DOMAIN.get(op, ("any", "any"))
        for sx, sy in SAME_SHAPES:
            args = [values(dt, sx, da, seed=3), values(dt, sy, db, seed=4)]
            tol = _tolerances(op, dt)
            if op in ("RsqrtGrad", "ReciprocalGrad", "SeluGrad") and dt in ("f16", "bf16"):
                tol.update(rtol=2e-2 if dt == "bf16" else 3e-3)  # three roundings in half precision
            cases.append(Case(f"{op}[{dt}]{sx}", fn, args, **tol))
    return cases


def leaky_relu_and_approximate_equal_cases():
    cases = []
    for dt in xla_dtypes("LeakyRelu"):
        for shape in UNARY_SHAPES:
            cases.append(Case(f"LeakyRelu[{dt}]{shape}", raw("LeakyRelu", alpha=0.2), [values(dt, shape)]))
    for dt in xla_dtypes("ApproximateEqual", among=FLOATS + INTS):
        for sx, sy in SAME_SHAPES:
            cases.append(Case(f"ApproximateEqual[{dt}]{sx}", raw("ApproximateEqual", tolerance=0.5),
                              [values(dt, sx, seed=5), values(dt, sy, seed=6)]))
    return cases


def add_n_cases():
    cases = []
    for dt in xla_dtypes("AddN"):
        if dt == "bool":
            continue
        for shape in UNARY_SHAPES:
            args = [values(dt, shape, seed=s) for s in range(3)]
            cases.append(Case(f"AddN[{dt}]{shape}", lambda a, b, c: tf.raw_ops.AddN(inputs=[a, b, c]), args))
    return cases


CAST_DTYPES = ("f32", "f64", "f16", "bf16", "i32", "i64", "bool")


def cast_cases():
    """Every src→dst pair; floats are in range and non-half-way for the integer targets (TF's C++
    casts truncate like XLA's convert there)."""
    cases = []
    for src in CAST_DTYPES:
        for dst in CAST_DTYPES:
            x = values(src, (2, 3), "wide" if src in FLOATS else "any", seed=7)
            dst_tf = tf.as_dtype(np.dtype({"f32": np.float32, "f64": np.float64, "f16": np.float16,
                                           "bf16": tf.bfloat16.as_numpy_dtype, "i32": np.int32, "i64": np.int64,
                                           "bool": np.bool_}[dst]))
            cases.append(Case(f"Cast[{src}->{dst}]", lambda t, d=dst_tf: tf.raw_ops.Cast(x=t, DstT=d), [x]))
            cases.append(Case(f"Cast[{src}->{dst}]()", lambda t, d=dst_tf: tf.raw_ops.Cast(x=t, DstT=d),
                              [values(src, (), seed=8)]))
    return cases


def clip_select_bias_cases():
    cases = []
    for dt in xla_dtypes("ClipByValue", among=FLOATS + INTS):
        x = values(dt, (2, 3))
        cases.append(Case(f"ClipByValue[{dt}] scalar bounds", raw("ClipByValue"),
                          [x, np.asarray(-1).astype(x.dtype), np.asarray(1).astype(x.dtype)]))
        cases.append(Case(f"ClipByValue[{dt}] tensor bounds", raw("ClipByValue"),
                          [x, -np.abs(values(dt, (2, 3), "small", seed=9)), np.ones((2, 3), x.dtype)]))  # lo <= hi
    for dt in ("f32", "i32", "bool", "bf16"):
        c = values("bool", (2, 3), seed=10)
        cases.append(Case(f"Select[{dt}] same shape", raw("Select"), [c, values(dt, (2, 3), seed=11),
                                                                      values(dt, (2, 3), seed=12)]))
        cases.append(Case(f"Select[{dt}] row vector", raw("Select"), [values("bool", (2,), seed=13),
                                                                      values(dt, (2, 3), seed=11),
                                                                      values(dt, (2, 3), seed=12)]))
        cases.append(Case(f"Select[{dt}] scalar", raw("Select"), [np.asarray(True), values(dt, (2, 3), seed=11),
                                                                  values(dt, (2, 3), seed=12)]))
        cases.append(Case(f"SelectV2[{dt}] broadcast", raw("SelectV2"), [values("bool", (2, 1), seed=14),
                                                                        values(dt, (3,), seed=15),
                                                                        values(dt, (), seed=16)]))
        cases.append(Case(f"SelectV2[{dt}] size-0", raw("SelectV2"), [values("bool", (0, 3), seed=14),
                                                                     values(dt, (3,), seed=15),
                                                                     values(dt, (0, 1), seed=16)]))
    for dt in xla_dtypes("BiasAdd", among=FLOATS + INTS):
        cases.append(Case(f"BiasAdd[{dt}] NHWC", raw("BiasAdd"), [values(dt, (2, 3, 4)), values(dt, (4,), seed=1)]))
        cases.append(Case(f"BiasAdd[{dt}] NCHW", raw("BiasAdd", data_format="NCHW"),
                          [values(dt, (2, 3, 4, 5)), values(dt, (3,), seed=1)]))
        cases.append(Case(f"BiasAdd[{dt}] 2-D", raw("BiasAdd"), [values(dt, (0, 4)), values(dt, (4,), seed=1)]))
        tol = {"rtol": 2e-2, "atol": 5e-2} if dt in ("f16", "bf16") else {}
        cases.append(Case(f"BiasAddGrad[{dt}] NHWC", raw("BiasAddGrad"), [values(dt, (2, 3, 4))], **tol))
        cases.append(Case(f"BiasAddGrad[{dt}] NCHW", raw("BiasAddGrad", data_format="NCHW"),
                          [values(dt, (2, 3, 4, 5))], **tol))
    return cases


def _groups(ops, size):
    """Several ops per batch: one trace, lowering and XLA compile serve them all."""
    return [ops[i:i + size] for i in range(0, len(ops), size)]


BATCHES = {
    **{"unary-" + "-".join(g): (lambda g=g: [c for op in g for c in unary_cases(op)]) for g in _groups(UNARY_OPS, 6)},
    **{"binary-" + "-".join(g): (lambda g=g: [c for op in g for c in binary_cases(op)])
       for g in _groups(BINARY_OPS, 5)},
    **{"grad-" + "-".join(g): (lambda g=g: [c for op in g for c in gradient_cases(op)]) for g in _groups(GRAD_OPS, 6)},
    "leaky_relu-approximate_equal": leaky_relu_and_approximate_equal_cases,
    "add_n": add_n_cases,
    "cast": cast_cases,
    "clip-select-bias": clip_select_bias_cases,
}


@pytest.mark.parametrize("name", list(BATCHES))
def test_batch(name):
    run_batch(BATCHES[name]())


def test_unary_ops_composition():
    """Grappler's fused chain of unary ops lowers as the chain."""
    from tfxla_cluster.graph import Graph
    from tfxla_cluster.tf2hlo import lower_cluster
    from tensorflow.core.framework import graph_pb2

    gd = graph_pb2.GraphDef()
    x = gd.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = tf.float32.as_datatype_enum
    x.attr["shape"].shape.dim.add(size=4)
    comp = gd.node.add(name="comp", op="_UnaryOpsComposition", input=["x"])
    comp.attr["T"].type = tf.float32.as_datatype_enum
    comp.attr["op_names"].list.s.extend([b"Neg", b"Exp", b"Tanh"])
    gd.node.add(name="out", op="Identity", input=["comp"]).attr["T"].type = tf.float32.as_datatype_enum
    graph = Graph(gd)
    lc = lower_cluster(graph, ["comp"])
    v = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
    np.testing.assert_allclose(lc.run(v)[0], np.tanh(np.exp(-v)), rtol=1e-6)


def test_round_of_integers_is_rejected_as_tf_xla_does():
    from tfxla_cluster.errors import InvalidArgumentError
    from tfxla_cluster.tf2hlo import lower_function

    f = tf.function(raw("Round"), autograph=False).get_concrete_function(tf.TensorSpec([2], tf.int32))
    with pytest.raises(InvalidArgumentError, match="Operands to RoundToEven must be real-valued floating-point, "
                                                   "but got S32"):
        lower_function(f, np.zeros(2, np.int32))


def test_incompatible_shapes_error():
    from tfxla_cluster.errors import InvalidArgumentError
    from tfxla_cluster.tf2hlo import lower_function

    f = tf.function(lambda a, b: a + b, autograph=False).get_concrete_function(
        tf.TensorSpec([None, None]), tf.TensorSpec([None]))
    with pytest.raises(InvalidArgumentError, match=r"Lowering node 'add' \(AddV2\): Incompatible shapes: \[2,3\] "
                                                   r"vs. \[4\]"):
        lower_function(f, np.zeros((2, 3), np.float32), np.zeros(4, np.float32))


def test_truncating_casts_equal_tf_xla() -> None:
    """``Cast(Truncate=True)`` to a narrower float zeroes the mantissa bits the target lacks (toward zero,
    on the bits: a NaN whose payload is only there becomes an inf), then converts: bit for bit."""
    import numpy as np

    from tfxla_cluster.tf2hlo import lower_function

    x64 = np.array([-300.7, 0.49, 127.9, 255.5, 70000.3, 1e20, -1e-30, np.inf, np.nan, 0.0, -0.0])
    x64 = np.concatenate([x64, np.array([0x7FF0000000000001], np.uint64).view(np.float64)])
    with np.errstate(all="ignore"):
        x32, x16 = x64.astype(np.float32), x64.astype(np.float16)

    def fn(a, b, c):
        cast = lambda v, t: tf.raw_ops.Cast(x=v, DstT=t, Truncate=True)  # noqa: E731
        return cast(a, tf.float32), cast(a, tf.bfloat16), cast(b, tf.bfloat16), cast(b, tf.float16), \
            cast(c, tf.bfloat16)
    want = [w.numpy() for w in tf.function(fn, jit_compile=True)(x64, x32, x16)]
    specs = [tf.TensorSpec(v.shape, v.dtype) for v in (x64, x32, x16)]
    got = lower_function(tf.function(fn).get_concrete_function(*specs), x64, x32, x16).run(x64, x32, x16)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(np.asarray(g).view(f"u{w.itemsize}"), w.view(f"u{w.itemsize}"))
