"""Op-by-op coverage of TF's XLA_CPU_JIT registry (issue 18, deliverable 2), from one table each:

* every op TF's registry has is lowered or excluded in ``registry.NOT_LOWERED`` with a reason, and no
  excluded op has a lowering (the table would be stale);
* every lowered op has a test that compiles it and compares it with TF: its name appears in a test of
  tests/tf2hlo or tests/e2e (``tf.raw_ops.Op(``, ``R.Op(``, ``gen_*_ops.op_name(``, a quoted ``"Op"``
  such as a case label or an op table), or a public API that builds it is named in ``VIA_API`` (checked to
  be in that file), or it is graph plumbing every lowered function has (``PLUMBING``), or it has a small
  program in ``EXAMPLES`` below, run by TF's XLA (``jit_compile=True``) and by us and compared.
"""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.compiler.tf2xla.ops import gen_xla_ops as gx
from tensorflow.compiler.tf2xla.python import xla

from tests.tf2hlo.tf2hlo_harness import Case, raw, run_batch, values
from tests.tf2hlo.tf2hlo_tfxla import compare, lower_and_run, tf_xla

from tfxla_cluster.tf2hlo.registry import NOT_LOWERED, lowered_ops
from tfxla_cluster.tfops.xla_kernels import all_xla_ops

TESTS = pathlib.Path(__file__).resolve().parent.parent
TEST_DIRS = (TESTS / "tf2hlo", TESTS / "e2e")

# Ops every lowered function goes through (arguments, results, control dependencies, calls): each test
# of tests/tf2hlo compiles them.
PLUMBING = {
    "_Retval": "every lowered function's results", "_DeviceRetval": "an encapsulated cluster's results",
    "_DeviceArg": "an encapsulated cluster's arguments", "NoOp": "control dependencies",
    "ControlTrigger": "v1 control flow's control joins", "_EagerConst": "eager constants captured by a function",
    "PlaceholderWithDefault": "a function's defaulted inputs", "FakeParam": "an If/While branch's unused input",
    "StatefulPartitionedCall": "a tf.function calling another that holds a variable",
}

# Ops a test builds through a public API rather than by name: op -> (test file, text the file holds).
VIA_API: dict[str, tuple[str, str]] = {
    "Assert": ("e2e/e2e_corpus.py", "tf.debugging.assert"),
    "AssignAddVariableOp": ("tf2hlo/test_tf2hlo_variables.py", "assign_add"),
    "AssignSubVariableOp": ("tf2hlo/test_tf2hlo_variables.py", "assign_sub"),
    "RandomStandardNormal": ("tf2hlo/test_tf2hlo_array_ops.py", "tf.random.normal("),
    "RandomUniform": ("tf2hlo/test_tf2hlo_array_ops.py", "tf.random.uniform("),
    "SelfAdjointEigV2": ("tf2hlo/test_tf2hlo_ops_decomp.py", "tf.linalg.eigh"),
    "Svd": ("tf2hlo/test_tf2hlo_ops_decomp.py", "tf.linalg.svd"),
    "XlaSvd": ("tf2hlo/test_tf2hlo_ops_decomp.py", "xla.svd"),
    "XlaSelfAdjointEig": ("tf2hlo/test_tf2hlo_ops_decomp.py", "xla.self_adjoint_eig"),
    "StatelessIf": ("tf2hlo/test_tf2hlo_control_flow.py", "tf.cond"),
    "StatelessCase": ("tf2hlo/test_tf2hlo_control_flow.py", "tf.switch_case"),
    "TensorListReserve": ("tf2hlo/test_tf2hlo_tensor_list.py", "tf.TensorArray(tf.float32, size=3"),
    "XlaCustomCall": ("tf2hlo/test_tf2hlo_ops_xla.py", "custom_call"),
    "XlaCustomCallV2": ("tf2hlo/test_tf2hlo_ops_xla.py", "custom_call_v2"),
}

R = tf.raw_ops
# Complex values live inside a cluster only (complex_ops.py): built from real arguments, returned as reals.
RE_IM = [values("f32", (2, 3)), values("f32", (2, 3), seed=1)]
SEED = np.array([7, 11], np.int32)
KEY, CTR = np.array([1234567], np.uint64), np.array([0, 99], np.uint64)


def _bn_grad(op):
    def fn(dy, x, sc, m, v):
        return getattr(R, op)(y_backprop=dy, x=x, scale=sc, reserve_space_1=m, reserve_space_2=v,
                              epsilon=1e-3, is_training=True)[:3]
    return fn


X4 = values("f32", (2, 3, 3, 2))
CH = [values("f32", (2,), "pos", seed=s) for s in range(3)]

# Small programs for the ops no other test names: (label starting with the op) -> Case. Run by TF's XLA.
EXAMPLES = [
    Case("BatchMatMul", raw("BatchMatMul", adj_y=True), [values("f32", (2, 3, 4)), values("f32", (2, 5, 4), seed=1)]),
    Case("ComplexAbs", lambda re, im: R.ComplexAbs(x=tf.complex(re, im)), RE_IM),
    Case("ConjugateTranspose", lambda re, im: (lambda t: (tf.math.real(t), tf.math.imag(t)))(
        R.ConjugateTranspose(x=tf.complex(re, im), perm=[1, 0])), RE_IM),
    Case("Transpose complex", lambda re, im: tf.math.imag(R.Transpose(x=tf.complex(re, im), perm=[1, 0])), RE_IM),
    Case("Empty", lambda x: x + R.Empty(shape=[2, 3], dtype=tf.float32, init=True), [values("f32", (2, 3))]),
    Case("FusedBatchNorm", lambda x, s, o: R.FusedBatchNorm(x=x, scale=s, offset=o, mean=[], variance=[],
                                                            epsilon=1e-3, is_training=True)[:3], [X4, CH[0], CH[1]],
         rtol=1e-5, atol=1e-5),
    Case("FusedBatchNormV2", lambda x, s, o: R.FusedBatchNormV2(x=x, scale=s, offset=o, mean=[], variance=[],
                                                                epsilon=1e-3, is_training=True)[:3],
         [X4, CH[0], CH[1]], rtol=1e-5, atol=1e-5),
    Case("FusedBatchNormGrad", _bn_grad("FusedBatchNormGrad"), [values("f32", (2, 3, 3, 2), seed=3), X4, *CH],
         rtol=1e-4, atol=1e-5),
    Case("FusedBatchNormGradV2", _bn_grad("FusedBatchNormGradV2"), [values("f32", (2, 3, 3, 2), seed=3), X4, *CH],
         rtol=1e-4, atol=1e-5),
    Case("MatrixSetDiagV3", lambda a, d: R.MatrixSetDiagV3(input=a, diagonal=d, k=0, align="LEFT_RIGHT"),
         [values("f32", (2, 3, 4)), values("f32", (2, 3), seed=1)]),
    Case("AvgPool3DGrad", lambda g: R.AvgPool3DGrad(orig_input_shape=[1, 4, 4, 4, 2], grad=g, ksize=[1, 2, 2, 2, 1],
                                                    strides=[1, 2, 2, 2, 1], padding="VALID"),
         [values("f32", (1, 2, 2, 2, 2))]),
    Case("MaxPool3DGrad", lambda x, g: R.MaxPool3DGrad(orig_input=x, orig_output=tf.nn.max_pool3d(x, 2, 2, "VALID"),
                                                       grad=g, ksize=[1, 2, 2, 2, 1], strides=[1, 2, 2, 2, 1],
                                                       padding="VALID"),
         [values("f32", (1, 4, 4, 4, 2), "wide"), values("f32", (1, 2, 2, 2, 2))]),
    Case("SegmentMaxV2", lambda d, i: R.SegmentMaxV2(data=d, segment_ids=i, num_segments=4),
         [values("f32", (5, 2)), np.array([0, 0, 1, 3, 3], np.int32)]),
    Case("SegmentMinV2", lambda d, i: R.SegmentMinV2(data=d, segment_ids=i, num_segments=4),
         [values("i32", (5, 2)), np.array([0, 1, 1, 1, 2], np.int32)]),
    Case("SegmentProdV2", lambda d, i: R.SegmentProdV2(data=d, segment_ids=i, num_segments=np.int64(3)),
         [values("f32", (4,)), np.array([0, 0, 2, 2], np.int64)]),
    Case("StatelessRandomGetAlg", lambda x: x + tf.cast(R.StatelessRandomGetAlg(), tf.int32), [np.int32(1)]),
    Case("StatelessRandomGetKeyCounterAlg", lambda s: R.StatelessRandomGetKeyCounterAlg(seed=s)[:2], [SEED]),
    Case("StatelessRandomUniformIntV2", lambda k, c: R.StatelessRandomUniformIntV2(
        shape=[3, 4], key=k, counter=c, alg=1, minval=np.int32(-7), maxval=np.int32(20)), [KEY, CTR]),
    Case("StatelessRandomUniformFullIntV2", lambda k, c: R.StatelessRandomUniformFullIntV2(
        shape=[5], key=k, counter=c, alg=1, dtype=tf.int64), [KEY, CTR]),
    Case("StatelessTruncatedNormalV2", lambda k, c: R.StatelessTruncatedNormalV2(shape=[6], key=k, counter=c, alg=1),
         [KEY, CTR], rtol=1e-5, atol=1e-6),
    Case("TensorListElementShape", lambda x: R.TensorListElementShape(
        input_handle=R.TensorListFromTensor(tensor=x, element_shape=[3]), shape_type=tf.int32), [values("f32", (2, 3))]),
    Case("XlaDotV2", lambda a, b: xla.dot_general(a, b, _dot_dims(), None, preferred_element_type=tf.float32),
         [values("f32", (2, 3)), values("f32", (3, 4), seed=1)]),
    Case("XlaEinsum", lambda a, b: gx.xla_einsum(a=a, b=b, equation="ij,jk->ik"),
         [values("f32", (2, 3)), values("f32", (3, 4), seed=1)]),
    Case("XlaOptimizationBarrier", lambda a, b: gx.xla_optimization_barrier(input=[a, b]),
         [values("f32", (3,)), values("i32", (2,))]),
    Case("XlaSharding", lambda a: gx.xla_sharding(input=a) * 2.0, [values("f32", (2, 3))]),
    Case("XlaReducePrecision", lambda a: gx.xla_reduce_precision(operand=a, exponent_bits=5, mantissa_bits=3),
         [values("f32", (8,), "wide")]),
]


def _dot_dims():
    from tensorflow.compiler.xla import xla_data_pb2

    dn = xla_data_pb2.DotDimensionNumbers()
    dn.lhs_contracting_dimensions.append(1)
    dn.rhs_contracting_dimensions.append(0)
    return dn


def _variable_examples():
    """Examples with resource variables: op -> (function of the variables and the argument, argument)."""
    return {
        "ResourceApplyCenteredRMSProp": lambda vs, g: R.ResourceApplyCenteredRMSProp(
            var=vs[0].handle, mg=vs[1].handle, ms=vs[2].handle, mom=vs[3].handle, lr=0.1, rho=0.9,
            momentum=0.5, epsilon=1e-6, grad=g),
        "ResourceScatterNdSub": lambda vs, g: R.ResourceScatterNdSub(ref=vs[0].handle, indices=[[1], [3], [1]],
                                                                     updates=g[:3]),
        "VarIsInitializedOp": lambda vs, g: R.VarIsInitializedOp(resource=vs[1].handle),
        "VariableShape": lambda vs, g: R.VariableShape(input=vs[2].handle),
        "RandomUniformInt": None,  # stateful: shapes and range only, below
    }


def _ops_named_in_tests() -> set[str]:
    text = "\n".join(p.read_text() for d in TEST_DIRS for p in d.glob("*.py") if p.name != pathlib.Path(__file__).name)
    names = set(re.findall(r"\.([A-Z]\w*)\(", text)) | set(re.findall(r"""["'](\w+)""", text))
    return names | set(re.findall(r"\.([a-z_0-9]+)\(", text))


def _snake(op: str) -> str:
    """The generated Python wrapper's name of an op (``gen_xla_ops.xla_all_reduce``)."""
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", op)
    return re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s).lower()


def test_every_registry_op_is_lowered_or_excluded_with_a_reason() -> None:
    registry, lowered = all_xla_ops(), lowered_ops()
    uncovered = sorted(registry - lowered - set(NOT_LOWERED))
    assert not uncovered, f"TF's XLA registry has ops neither lowered nor in registry.NOT_LOWERED: {uncovered}"
    stale = sorted(set(NOT_LOWERED) & lowered)
    assert not stale, f"registry.NOT_LOWERED lists ops that now have a lowering: {stale}"
    unknown = sorted(set(NOT_LOWERED) - registry)
    assert not unknown, f"registry.NOT_LOWERED lists ops TF's XLA registry does not have: {unknown}"
    assert all(len(why) > 30 for why in NOT_LOWERED.values())


def test_every_lowered_op_has_a_test() -> None:
    named = _ops_named_in_tests()
    examples = {c.label.split()[0] for c in EXAMPLES} | set(_variable_examples()) | EXTRA_TESTED
    for op, (file, needle) in VIA_API.items():
        assert needle in (TESTS / file).read_text(), f"VIA_API[{op}]: {file} no longer has {needle!r}"
    untested = sorted(op for op in lowered_ops() if op not in named and _snake(op) not in named
                      and op not in examples and op not in VIA_API and op not in PLUMBING)
    assert not untested, f"lowered ops no test compiles (name them in a test or add to EXAMPLES): {untested}"
    stale = sorted(op for op in (*PLUMBING, *VIA_API, *examples) if op not in lowered_ops())
    assert not stale, f"coverage tables name ops without a lowering: {stale}"


def test_examples_build_their_op() -> None:
    """Each example's graph has the op its label names (an API change would otherwise hide the op)."""
    for case in EXAMPLES:
        specs = [tf.TensorSpec(np.shape(a), tf.as_dtype(np.asarray(a).dtype)) for a in case.args]
        graph = tf.function(case.fn, autograph=False).get_concrete_function(*specs).graph
        assert case.label.split()[0] in {op.type for op in graph.get_operations()}, case.label


def test_examples_equal_tf_xla() -> None:
    run_batch(EXAMPLES, reference="tf_xla")


def test_conjugate_transpose_of_reals_equals_tf() -> None:
    """Against TF eager: TF's XLA conjugates a real input into a c64 buffer it then returns as f32 (its
    HLO ends in ``c64[3,2] complex(...)`` for an f32 output), which reads back as interleaved garbage."""
    run_batch([Case("ConjugateTranspose real", lambda re: R.ConjugateTranspose(x=re, perm=[1, 0]), RE_IM[:1])])


@pytest.mark.parametrize("op", [op for op, fn in _variable_examples().items() if fn is not None])
def test_variable_examples_equal_tf_xla(op: str) -> None:
    fn = _variable_examples()[op]
    g = values("f32", (4,), seed=5)

    def fresh():
        return [tf.Variable(values("f32", (4,), "pos", seed=s)) for s in range(4)]

    ours_vars, tf_vars = fresh(), fresh()

    def program(vs):
        def run(x):
            out = fn(vs, x)
            outs = [] if out is None or isinstance(out, tf.Operation) else [out]
            return outs + [v.read_value() for v in vs]
        return run
    want = tf_xla(program(tf_vars), [g])
    got = lower_and_run(program(ours_vars), [g])
    compare(got[:len(want)], want, rtol=1e-5)


def test_xla_send_refused_as_tf_xla_refuses_it() -> None:
    """XLA:CPU has no ``send``: TF's XLA fails to compile it, and we refuse it with a typed error."""
    from tfxla_cluster.errors import UnimplementedError
    from tfxla_cluster.tf2hlo import lower_function

    fn = lambda x: (gx.xla_send(tensor=x, tensor_name="t"), x + 1.0)[1]  # noqa: E731
    with pytest.raises(tf.errors.OpError):
        tf.function(fn, jit_compile=True, autograph=False)(tf.constant([1.0]))
    with pytest.raises(UnimplementedError, match="`send` is not supported"):
        lower_function(tf.function(fn, autograph=False).get_concrete_function(tf.TensorSpec([1], tf.float32)))


EXTRA_TESTED = {"XlaSend"}  # ops the tests of this file check outside EXAMPLES


def test_random_uniform_int_shapes_and_range_as_tf_xla() -> None:
    """Stateful: TF's XLA draws from its own RNG state, so the shape, dtype and range are compared."""
    fn = lambda x: x + R.RandomUniformInt(shape=[4, 5], minval=np.int32(-3), maxval=np.int32(6))  # noqa: E731
    got = lower_and_run(fn, [np.int32(0)], seedless=True)[0]
    want = tf_xla(fn, [np.int32(0)])[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.min() >= -3 and got.max() < 6
