"""Matrix products, softmax family and top-k against TF eager.

Tolerances: products and sums of k terms in a different order than Eigen's blocked kernels: f32 rtol
1e-5 (atol 1e-5 for values near 0); half types accumulate in f32 in both, so one final rounding:
default half tolerances doubled.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import FLOATS, INTS, Case, raw, run_batch, values, xla_dtypes

SUM_TOL = {"f32": {"rtol": 1e-5, "atol": 1e-5}, "f64": {"rtol": 1e-12, "atol": 1e-12},
           "f16": {"rtol": 4e-3, "atol": 4e-3}, "bf16": {"rtol": 3e-2, "atol": 3e-2}}


def _tol(dt):
    return SUM_TOL.get(dt, {})


def matmul_cases():
    out = []
    for dt in xla_dtypes("MatMul", among=FLOATS + INTS):
        for ta in (False, True):
            for tb in (False, True):
                a = values(dt, (3, 4) if ta else (4, 3), "small")
                bb = values(dt, (5, 3) if tb else (3, 5), "small", seed=1)
                out.append(Case(f"MatMul[{dt}] ta={ta} tb={tb}", raw("MatMul", transpose_a=ta, transpose_b=tb),
                                [a, bb], **_tol(dt)))
    out.append(Case("MatMul k=0", raw("MatMul"), [values("f32", (2, 0)), values("f32", (0, 3))]))
    for dt in xla_dtypes("BatchMatMulV2", among=FLOATS + INTS):
        out.append(Case(f"BatchMatMulV2[{dt}] broadcast", raw("BatchMatMulV2"),
                        [values(dt, (2, 1, 3, 4), "small"), values(dt, (3, 4, 2), "small", seed=1)], **_tol(dt)))
    out += [Case("BatchMatMulV2 adj", raw("BatchMatMulV2", adj_x=True, adj_y=True),
                 [values("f32", (2, 4, 3)), values("f32", (2, 5, 4), seed=1)], **_tol("f32")),
            Case("BatchMatMulV2 2-D", raw("BatchMatMulV2"), [values("f32", (2, 3)), values("f32", (3, 2), seed=1)],
                 **_tol("f32")),
            Case("BatchMatMulV3 int->f32", raw("BatchMatMulV3", Tout=tf.float32),
                 [values("f32", (2, 2, 3)), values("f32", (2, 3, 2), seed=1)], **_tol("f32"))]
    return out


EINSUM = [("ab,bc->ac", (2, 3), (3, 4)), ("bij,bjk->bik", (2, 3, 4), (2, 4, 5)), ("ij->ji", (2, 3), None),
          ("ij->", (2, 3), None), ("ij->j", (2, 3), None), ("i,i->", (4,), (4,)), ("i,j->ij", (3,), (2,)),
          ("bsd,dh->bsh", (1, 4, 8), (8, 8)), ("...ij,...jk->...ik", (2, 1, 2, 3), (3, 3, 2)),
          ("bqhd,bkhd->bhqk", (1, 4, 2, 3), (1, 5, 2, 3)), ("abc,cd->abd", (2, 3, 4), (4, 2)),
          ("ijk,jk->i", (2, 3, 4), (3, 4)), ("ab,cb->ac", (0, 3), (2, 3))]


def einsum_cases():
    out = []
    for eq, sx, sy in EINSUM:
        args = [values("f32", sx)] + ([values("f32", sy, seed=1)] if sy else [])
        out.append(Case(f"Einsum {eq}", lambda *a, eq=eq: tf.einsum(eq, *a), args, **_tol("f32")))
    for dt in xla_dtypes("Einsum", among=FLOATS + INTS):
        out.append(Case(f"Einsum[{dt}]", lambda a, b: tf.einsum("ij,jk->ik", a, b),
                        [values(dt, (2, 3), "small"), values(dt, (3, 2), "small", seed=1)], **_tol(dt)))
    return out


def softmax_cases():
    out = []
    for op in ("Softmax", "LogSoftmax"):
        for dt in xla_dtypes(op, among=FLOATS):
            for shape in ((5,), (2, 3), (2, 3, 4)):  # (size-0 rows: see the evaluator note in test_reduction)
                out.append(Case(f"{op}[{dt}]{shape}", raw(op), [values(dt, shape, "wide")], **_tol(dt)))
    for dt in xla_dtypes("SoftmaxCrossEntropyWithLogits", among=FLOATS):
        labels = np.abs(values(dt, (3, 4), seed=1).astype(np.float32))
        labels = (labels / labels.sum(1, keepdims=True)).astype(labels.dtype if dt != "bf16" else np.float32)
        out.append(Case(f"SoftmaxCrossEntropyWithLogits[{dt}]", raw("SoftmaxCrossEntropyWithLogits"),
                        [values(dt, (3, 4), "wide"), labels.astype(values(dt, ()).dtype)], **_tol(dt)))
        out.append(Case(f"SoftmaxCrossEntropyWithLogits[{dt}] broadcast", raw("SoftmaxCrossEntropyWithLogits"),
                        [values(dt, (3, 4), "wide"), labels[:1].astype(values(dt, ()).dtype)], **_tol(dt)))
    for dt in xla_dtypes("SparseSoftmaxCrossEntropyWithLogits", among=FLOATS):
        for it in (np.int32, np.int64):
            out.append(Case(f"SparseSoftmaxCrossEntropyWithLogits[{dt}] {it.__name__}",
                            raw("SparseSoftmaxCrossEntropyWithLogits"),
                            [values(dt, (3, 4), "wide"), np.array([0, 3, 1], it)], **_tol(dt)))
    return out


def topk_cases():
    out = []
    for dt in xla_dtypes("TopKV2", among=FLOATS + INTS):
        for shape, k in (((5,), 2), ((2, 6), 6), ((2, 3), 0), ((3, 4), 1)):
            x = values(dt, shape, "small" if dt in INTS else "any")
            out.append(Case(f"TopKV2[{dt}]{shape} k={k}", lambda t, k=k: tf.raw_ops.TopKV2(input=t, k=k), [x]))
    out.append(Case("TopKV2 ties", lambda t: tf.raw_ops.TopKV2(input=t, k=3), [np.array([1, 3, 3, 1, 3], np.int32)]))
    return out


BATCHES = {"matmul": matmul_cases, "einsum": einsum_cases, "softmax-xent": softmax_cases, "topk": topk_cases}


@pytest.mark.parametrize("name", list(BATCHES))
def test_batch(name):
    run_batch(BATCHES[name]())


def test_matmul_module_form():
    from tfxla_cluster.tf2hlo import lower_function

    f = tf.function(lambda a, b: tf.matmul(a, b, transpose_b=True), autograph=False)
    text = lower_function(f.get_concrete_function(tf.TensorSpec([2, 3]), tf.TensorSpec([4, 3])),
                          np.zeros((2, 3), np.float32), np.zeros((4, 3), np.float32)).module.to_string()
    assert "f32[3,4]{1,0} transpose(%arg1), dimensions={1,0}" in text
    assert "dot(%arg0, %MatMul), lhs_contracting_dims={1}, rhs_contracting_dims={0}" in text


def test_batch_matmul_v3_narrower_tout_converts_the_result_as_tf_xla() -> None:
    """BatchMatMulV3 with a Tout narrower than its operands (f32 → s32/f16, f64 → f32): TF's XLA computes
    the dot in the operands' type and converts the result; a wider Tout (s8 → f32) converts the operands."""
    import numpy as np

    from tfxla_cluster.tf2hlo import lower_function

    rng = np.random.default_rng(0)
    # Quarters: every product and sum is exact in f32, so only the final conversion rounds (any summation
    # order, any BLAS); truncating the operands instead would give other results.
    a32 = (rng.integers(-36, 37, (2, 3, 40)) / 4).astype(np.float32)
    b32 = (rng.integers(-36, 37, (2, 40, 2)) / 4).astype(np.float32)
    a8, b8 = rng.integers(-100, 100, (2, 3, 40)).astype(np.int8), rng.integers(-100, 100, (2, 40, 2)).astype(np.int8)
    a64, b64 = a32.astype(np.float64) / 1024, b32.astype(np.float64) * (1 + 2.0 ** -30)
    args = (a32, b32, a8, b8, a64, b64)

    def fn(a32, b32, a8, b8, a64, b64):
        mm = lambda x, y, t: tf.raw_ops.BatchMatMulV3(x=x, y=y, Tout=t)  # noqa: E731
        return mm(a32, b32, tf.int32), mm(a32, b32, tf.float16), mm(a64, b64, tf.float32), mm(a8, b8, tf.float32)
    want = [w.numpy() for w in tf.function(fn, jit_compile=True)(*args)]
    specs = [tf.TensorSpec(a.shape, a.dtype) for a in args]
    got = lower_function(tf.function(fn).get_concrete_function(*specs), *args).run(*args)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
