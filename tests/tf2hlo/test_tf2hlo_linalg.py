"""Cholesky, MatrixTriangularSolve and MatrixInverse against TF eager (Eigen's LLT / triangular solve /
PartialPivLU): batched and unbatched, lower/upper, adjoint, broadcast batch dims, a matrix that needs
row pivoting. Different operation order than Eigen: f32 1e-4, f64 1e-10."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import Case, run_batch

TOL = {np.float32: dict(rtol=1e-4, atol=1e-4), np.float64: dict(rtol=1e-10, atol=1e-10)}


def _spd(shape, seed, dtype):
    a = np.random.default_rng(seed).normal(size=shape).astype(dtype)
    n = shape[-1]
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dtype)


def cases():
    out = []
    for dt in (np.float32, np.float64):
        out.append(Case(f"Cholesky 4x4 {dt.__name__}", tf.linalg.cholesky, [_spd((4, 4), 1, dt)], **TOL[dt]))
        out.append(Case(f"Cholesky batch 2x3x5 {dt.__name__}", tf.linalg.cholesky, [_spd((2, 3, 5, 5), 2, dt)], **TOL[dt]))
        tri = np.tril(np.random.default_rng(3).normal(size=(2, 4, 4))).astype(dt) + 3 * np.eye(4, dtype=dt)
        rhs = np.random.default_rng(4).normal(size=(2, 4, 3)).astype(dt)
        for lower in (True, False):
            for adjoint in (False, True):
                m = tri if lower else np.swapaxes(tri, -1, -2).copy()
                out.append(Case(f"MatrixTriangularSolve lower={lower} adjoint={adjoint} {dt.__name__}",
                                lambda a, b, lower=lower, adjoint=adjoint: tf.raw_ops.MatrixTriangularSolve(
                                    matrix=a, rhs=b, lower=lower, adjoint=adjoint), [m, rhs], **TOL[dt]))
        out.append(Case(f"MatrixTriangularSolve broadcast batch {dt.__name__}",
                        lambda a, b: tf.linalg.triangular_solve(a, b), [tri[:1], rhs], **TOL[dt]))
        full = np.random.default_rng(5).normal(size=(3, 4, 4)).astype(dt) + 2 * np.eye(4, dtype=dt)
        out.append(Case(f"MatrixInverse batch {dt.__name__}", tf.linalg.inv, [full], **TOL[dt]))
        out.append(Case(f"MatrixInverse adjoint {dt.__name__}",
                        lambda a: tf.raw_ops.MatrixInverse(input=a, adjoint=True), [full[0]], **TOL[dt]))
        pivot = np.array([[0, 2, 1], [1, 0, 3], [4, 1, 0]], dt)   # zero on the diagonal: needs pivoting
        out.append(Case(f"MatrixInverse with row swaps {dt.__name__}", tf.linalg.inv, [pivot], **TOL[dt]))
    return out


def test_linalg_equals_tf() -> None:
    run_batch(cases(), xla="all")


def _evaluated_and_compiled(fn, *args) -> tuple[list, list]:
    """``fn``'s outputs on ``args`` from our evaluator (its lowered HLO) and from our compiled code
    (``jit_compile=True``)."""
    import tfxla_cluster as txc
    from tfxla_cluster.tf2hlo import lower_function

    specs = [tf.TensorSpec(a.shape, a.dtype) for a in args]
    evaluated = lower_function(tf.function(fn).get_concrete_function(*specs), *args).run(*args)
    return evaluated, [g.numpy() for g in txc.function(fn, jit_compile=True)(*args)]


def _assert_ours_equal_tf_xla(fn, args: tuple, tol: float) -> None:
    """Evaluator and compiled code against TF's XLA: same dtypes and shapes, values within ``tol``."""
    want = [w.numpy() for w in tf.function(fn, jit_compile=True)(*args)]
    for got in _evaluated_and_compiled(fn, *args):
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.complex64])   # c128 runs the same code (the sweep's -m tfsweep has it)
def test_complex_cholesky_and_triangular_solve_equal_tf_xla(dtype) -> None:
    """TF's XLA_CPU_JIT kernels take complex Cholesky (A = L·Lᴴ) and MatrixTriangularSolve (adjoint is the
    conjugate transpose): evaluator and compiled code against TF's XLA."""
    rng = np.random.default_rng(0)
    m = rng.normal(size=(2, 3, 3)) + 1j * rng.normal(size=(2, 3, 3))
    a = (m @ np.conj(np.swapaxes(m, -1, -2)) + 3 * np.eye(3)).astype(dtype)
    rhs = (rng.normal(size=(2, 3, 2)) + 1j * rng.normal(size=(2, 3, 2))).astype(dtype)

    def fn(a, rhs):
        R = tf.raw_ops
        chol = R.Cholesky(input=a)
        return (chol, R.MatrixTriangularSolve(matrix=chol, rhs=rhs, lower=True, adjoint=True),
                R.MatrixTriangularSolve(matrix=a, rhs=rhs, lower=False, adjoint=False))
    _assert_ours_equal_tf_xla(fn, (a, rhs), 2e-6 if dtype == np.complex64 else 1e-14)


@pytest.mark.parametrize("dtype", [np.complex128])
def test_complex_qr_equals_tf_xla(dtype) -> None:
    """Complex Qr as TF's XLA (XLA's complex Householder: the same phases, not just the same span)."""
    rng = np.random.default_rng(1)
    tall = (rng.normal(size=(2, 4, 3)) + 1j * rng.normal(size=(2, 4, 3))).astype(dtype)
    wide = (rng.normal(size=(3, 4)) + 1j * rng.normal(size=(3, 4))).astype(dtype)

    def fn(tall, wide):
        return (*tf.raw_ops.Qr(input=tall, full_matrices=False), *tf.raw_ops.Qr(input=wide, full_matrices=True))
    _assert_ours_equal_tf_xla(fn, (tall, wide), 4e-6 if dtype == np.complex64 else 1e-14)


@pytest.mark.parametrize("dtype", [np.complex64])
def test_complex_self_adjoint_eig(dtype) -> None:
    """Complex SelfAdjointEigV2 (Hermitian Jacobi with complex rotations). The eigenvectors are TF's XLA's up
    to a phase per vector; the eigenvalues are TF's kernel's: TF's XLA hands back its real eigenvalue
    buffer as complex (half of the values read as imaginary parts, the rest past the buffer), so it is
    no reference for them."""
    rng = np.random.default_rng(2)
    m = rng.normal(size=(2, 4, 4)) + 1j * rng.normal(size=(2, 4, 4))
    a = (m + np.conj(np.swapaxes(m, -1, -2))).astype(dtype)
    fn = lambda x: tf.raw_ops.SelfAdjointEigV2(input=x, compute_v=True)  # noqa: E731
    want_e = fn(tf.constant(a))[0].numpy()
    want_v = tf.function(fn, jit_compile=True)(a)[1].numpy()
    tol = 2e-5 if dtype == np.complex64 else 1e-12
    for e, v in _evaluated_and_compiled(fn, a):
        assert e.dtype == v.dtype == dtype
        np.testing.assert_allclose(e, want_e, rtol=tol, atol=tol)
        overlap = np.abs(np.einsum("bij,bij->bj", np.conj(v), want_v))   # |<ours, theirs>| per vector
        np.testing.assert_allclose(overlap, 1.0, atol=tol)
