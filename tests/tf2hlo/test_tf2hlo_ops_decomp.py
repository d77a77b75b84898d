"""Qr, SelfAdjointEigV2, Svd, XlaSelfAdjointEig and XlaSvd against TF's own XLA and TF eager.

Eigen- and singular vectors are compared up to a per-vector sign (each column normalised so that its
largest entry is positive). TF's XLA stops its f64 Jacobi iterations at a tolerance (about 1e-8 in eigenvectors,
1e-6 in singular vectors); ours converges further, so f64 vectors are compared with TF's XLA at that
accuracy and with TF eager (Eigen/LAPACK) tightly."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.compiler.tf2xla.python import xla

from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.tf2hlo import lower_function

RNG = np.random.default_rng(0)
TOL = {np.float32: (1e-4, 1e-3), np.float64: (1e-10, 1e-7)}   # (values, vectors vs TF's XLA)


def _signfix(v: np.ndarray) -> np.ndarray:
    idx = np.argmax(np.abs(v), axis=-2)
    return v * np.sign(np.take_along_axis(v, idx[..., None, :], axis=-2))


def _run(fn, *args):
    specs = [tf.TensorSpec(a.shape, tf.as_dtype(a.dtype)) for a in args]
    ours = lower_function(tf.function(fn, autograph=False).get_concrete_function(*specs), *args).run(*args)
    out = tf.function(fn, jit_compile=True, autograph=False)(*args)
    theirs = [t.numpy() for t in (out if isinstance(out, (list, tuple)) else [out])]
    return ours, theirs


# One program per op family (TF's XLA takes seconds to compile each decomposition).
QR_CASES = [((2, 4, 3), False), ((3, 5), True), ((4, 4), True)]


def _inputs(cases):
    return [RNG.normal(size=shape).astype(dt) for dt in (np.float32, np.float64) for shape, _ in cases]


def test_qr_equals_tf_xla() -> None:
    args = _inputs(QR_CASES)
    fulls = [full for _ in range(2) for _, full in QR_CASES]
    ours, theirs = _run(lambda *xs: [t for x, f in zip(xs, fulls) for t in tf.linalg.qr(x, full_matrices=f)], *args)
    for k, (o, t) in enumerate(zip(ours, theirs)):
        tol = TOL[args[k // 2].dtype.type][0] * 10
        assert o.shape == t.shape
        np.testing.assert_allclose(o, t, rtol=tol, atol=tol, err_msg=f"output {k}")


def test_eigh_equals_tf_xla_and_eager() -> None:
    args = []
    for dt in (np.float32, np.float64):
        a = RNG.normal(size=(2, 5, 5)).astype(dt)
        args.append(a + np.swapaxes(a, -1, -2))

    def fn(*xs):
        out = []
        for x in xs:
            out += [*tf.linalg.eigh(x), *xla.self_adjoint_eig(x, True, 100, 1e-6), tf.linalg.eigvalsh(x)]
        return out
    ours, theirs = _run(fn, *args)
    for d, a in enumerate(args):
        vals, vecs = TOL[a.dtype.type]
        o, t = ours[5 * d:5 * d + 5], theirs[5 * d:5 * d + 5]
        for w in (0, 2, 4):
            np.testing.assert_allclose(o[w], t[w], rtol=vals, atol=vals)
        for v in (1, 3):
            np.testing.assert_allclose(_signfix(o[v]), _signfix(t[v]), rtol=vecs, atol=vecs)
        eager = tf.linalg.eigh(a)[1].numpy()
        np.testing.assert_allclose(_signfix(o[1]), _signfix(eager), rtol=vals * 100, atol=vals * 100)


def test_svd_equals_tf_xla_and_eager() -> None:
    """TF's XLA f64 SVD stops at about 1e-6 in the vectors: f64 is compared with it at 1e-5 and with TF
    eager at 1e-9."""
    cases = [((2, 5, 3), False, np.float32), ((3, 4), False, np.float32), ((4, 4), True, np.float64)]
    args = [RNG.normal(size=shape).astype(dt) for shape, _, dt in cases]

    def fn(*xs):
        out = [t for x, (_, f, _) in zip(xs, cases) for t in tf.linalg.svd(x, full_matrices=f)]
        return out + list(xla.svd(xs[0][0, :3, :3], 100, 1e-6))   # XlaSvd stops at its epsilon
    ours, theirs = _run(fn, *args)
    for k, a in enumerate(args):
        vals = TOL[a.dtype.type][0]
        vecs = 1e-3 if a.dtype == np.float32 else 1e-5
        o, t = ours[3 * k:3 * k + 3], theirs[3 * k:3 * k + 3]
        np.testing.assert_allclose(o[0], t[0], rtol=vals, atol=vals)
        for i in (1, 2):
            assert o[i].shape == t[i].shape
            np.testing.assert_allclose(_signfix(o[i]), _signfix(t[i]), rtol=vecs, atol=vecs)
        if a.dtype == np.float64:
            s, u, v = (x.numpy() for x in tf.linalg.svd(a, full_matrices=True))
            np.testing.assert_allclose(o[0], s, rtol=1e-10, atol=1e-10)
            np.testing.assert_allclose(_signfix(o[1]), _signfix(u), rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(_signfix(o[2]), _signfix(v), rtol=1e-9, atol=1e-9)
    o, t = ours[9:], theirs[9:]
    np.testing.assert_allclose(o[0], t[0], rtol=1e-4, atol=1e-4)
    for i in (1, 2):
        np.testing.assert_allclose(_signfix(o[i]), _signfix(t[i]), rtol=1e-3, atol=1e-3)


def test_full_svd_of_non_square_is_unimplemented() -> None:
    a = RNG.normal(size=(3, 5)).astype(np.float32)
    concrete = tf.function(lambda x: tf.linalg.svd(x, full_matrices=True)).get_concrete_function(
        tf.TensorSpec(a.shape, tf.float32))
    with pytest.raises(UnimplementedError, match="full_matrices"):
        lower_function(concrete, a)
