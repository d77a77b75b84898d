"""Math and linear-algebra ops (Angle, CumulativeLogsumexp, Bincount/DenseBincount, MatrixSolve,
TridiagonalSolve/MatMul, SparseMatMul) against TF's own XLA and TF eager."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import Case, run_batch, values
from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.tf2hlo import lower_function

RNG = np.random.default_rng(0)
A = (RNG.normal(size=(2, 4, 4)) + 4 * np.eye(4)).astype(np.float32)
DIAGS = RNG.normal(size=(2, 3, 5)).astype(np.float64)
DIAGS[:, 1] += 5


def cases():
    diags = DIAGS
    return [
     Case("Angle", lambda re, im: tf.math.angle(tf.complex(re, im)), [values("f32",(6,)), values("f32",(6,),seed=1)]),
     Case("CumulativeLogsumexp", lambda v: tf.math.cumulative_logsumexp(v, axis=1), [values("f32",(3,5))], rtol=1e-5, atol=1e-6),
     Case("CumulativeLogsumexp exclusive reverse", lambda v: tf.math.cumulative_logsumexp(v, axis=0, exclusive=True, reverse=True), [values("f64",(4,3))], rtol=1e-12, atol=1e-12),
     Case("CumulativeLogsumexp inf", lambda v: tf.math.cumulative_logsumexp(v, axis=0), [np.array([-np.inf, 1.0, np.inf, 2.0, -np.inf], np.float32)], rtol=1e-6, atol=1e-6),
     Case("Bincount", lambda a, w: tf.raw_ops.Bincount(arr=a, size=6, weights=w), [np.array([0,1,1,5,7,-1,3,3,3],np.int32), values("f32",(9,))], rtol=1e-6, atol=1e-6),
     Case("Bincount no weights", lambda a: tf.raw_ops.Bincount(arr=a, size=4, weights=tf.zeros([0], tf.int32)), [np.array([0,1,1,3,9],np.int32)]),
     Case("DenseBincount 2d binary", lambda a: tf.raw_ops.DenseBincount(input=a, size=5, weights=tf.zeros([0], tf.float32), binary_output=True), [np.array([[0,1,1,4],[2,2,9,3]],np.int32)]),
     Case("DenseBincount weights i64", lambda a, w: tf.raw_ops.DenseBincount(input=a, size=5, weights=w), [np.array([0,1,1,4,4,4],np.int64), values("i64",(6,))]),
     Case("MatrixSolve", lambda a, r: tf.linalg.solve(a, r), [A, values("f32",(2,4,3))], rtol=1e-4, atol=1e-5),
     Case("MatrixSolve adjoint f64", lambda a, r: tf.linalg.solve(a, r, adjoint=True), [A.astype(np.float64), values("f64",(2,4,2))], rtol=1e-10, atol=1e-10),
     Case("TridiagonalSolve", lambda d, r: tf.linalg.tridiagonal_solve(d, r, partial_pivoting=False), [diags, values("f64",(2,5,2))], rtol=1e-10, atol=1e-10),
     Case("TridiagonalMatMul", lambda s, m, l, r: tf.raw_ops.TridiagonalMatMul(superdiag=s, maindiag=m, subdiag=l, rhs=r), [values("f32",(2,1,4)), values("f32",(2,1,4),seed=1), values("f32",(2,1,4),seed=2), values("f32",(2,4,3),seed=3)], rtol=1e-5, atol=1e-5),
     Case("SparseMatMul", lambda a, c: tf.raw_ops.SparseMatMul(a=a, b=c, transpose_b=True, a_is_sparse=True), [values("f32",(3,4)), values("f32",(2,4),seed=1)], rtol=1e-5, atol=1e-5),
     Case("SparseMatMul bf16", lambda a, c: tf.raw_ops.SparseMatMul(a=a, b=c, transpose_a=True), [values("bf16",(4,3)), values("f32",(4,2),seed=1)], rtol=1e-5, atol=1e-5),
    ]


@pytest.mark.parametrize("reference", ["tf_xla", "tf"])
def test_math_linalg_ops(reference: str) -> None:
    run_batch(cases(), reference=reference)


def test_bincount_rank2_counts_per_row_like_tf_xla() -> None:
    """TF's XLA lowers Bincount with DenseBincount's kernel: a [rows, n] arr gives [rows, size] (TF eager
    flattens); TF's XLA is the reference."""
    run_batch([Case("Bincount 2-D", lambda a: tf.raw_ops.Bincount(arr=a, size=4, weights=tf.zeros([0], tf.int32)),
                    [np.array([[0, 1], [1, 3]], np.int32)])], reference="tf_xla")


def test_tridiagonal_solve_pivoting_is_unimplemented_like_tf_xla() -> None:
    fn = lambda d, r: tf.linalg.tridiagonal_solve(d, r)  # noqa: E731  (partial_pivoting defaults to True)
    d, r = DIAGS, values("f64", (2, 5, 2))
    with pytest.raises(tf.errors.OpError, match="pivoting"):
        tf.function(fn, jit_compile=True)(d, r)
    concrete = tf.function(fn).get_concrete_function(tf.TensorSpec(d.shape, tf.float64), tf.TensorSpec(r.shape, tf.float64))
    with pytest.raises(UnimplementedError, match="pivoting"):
        lower_function(concrete, d, r)


def test_f64_erfinv_and_ndtri_are_xla_double_precision_forms() -> None:
    """TF's XLA computes f64 Erfinv (and Ndtri through it) with Giles' double-precision polynomials (three
    ranges of w = -log1p(-x²)); ours is the same HLO: within a few ulps (XLA:CPU fuses Horner steps into FMAs,
    the evaluator rounds each step), where the single-precision polynomial was 1e-8 off."""
    import numpy as np

    from tfxla_cluster.tf2hlo import lower_function

    x = np.concatenate([np.linspace(-0.999999, 0.999999, 41), [1 - 1e-12, -1.0, 1.0, 0.0]]).astype(np.float64)
    p = np.concatenate([np.linspace(1e-9, 1 - 1e-9, 41), [1e-300, 0.0, 1.0, 0.5]]).astype(np.float64)

    def fn(x, p):
        return tf.raw_ops.Erfinv(x=x), tf.raw_ops.Ndtri(x=p)
    want = [w.numpy() for w in tf.function(fn, jit_compile=True)(x, p)]
    spec = tf.TensorSpec(x.shape, tf.float64)
    got = lower_function(tf.function(fn).get_concrete_function(spec, spec), x, p).run(x, p)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-15, atol=0)
