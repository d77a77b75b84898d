"""Every dtype TF's XLA_CPU_JIT kernels allow, op by op, against TF's XLA (issue 18: "with TF's dtype
constraints"): each elementwise op of ``op_table``'s OpDef-built list (one type attribute) on each of the
16 dtypes below its kernel and OpDef allow, run by TF's XLA (``jit_compile=True``) and by our lowering +
evaluator; integers and bools bit-equal, floats within a few ulps of the type. A dtype TF's XLA itself
refuses to compile is skipped.

By default a fixed sample (the complex, 16-bit and unsigned dtypes of a handful of ops, where lowerings
most often assume f32); the whole sweep (~1000 programs, about a minute) runs with ``-m tfsweep``.
"""
from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import types_pb2 as T
from tensorflow.python.framework import op_def_registry

from tests.tf2hlo import op_table
from tests.tf2hlo.tf2hlo_harness import raw

DTYPES = (T.DT_HALF, T.DT_BFLOAT16, T.DT_FLOAT, T.DT_DOUBLE, T.DT_INT8, T.DT_INT16, T.DT_INT32, T.DT_INT64,
          T.DT_UINT8, T.DT_UINT16, T.DT_UINT32, T.DT_UINT64, T.DT_COMPLEX64, T.DT_COMPLEX128, T.DT_BOOL)
_DOMAIN = {op: d for d, ops in op_table.DOMAIN.items() for op in ops}
SAMPLE = {("FloorDiv", T.DT_COMPLEX64), ("ClipByValue", T.DT_COMPLEX128), ("ApproximateEqual", T.DT_COMPLEX64),
          ("ToBool", T.DT_COMPLEX64), ("Erfinv", T.DT_DOUBLE), ("Sign", T.DT_BFLOAT16), ("Abs", T.DT_INT8),
          ("FloorMod", T.DT_UINT8), ("Xlogy", T.DT_COMPLEX128), ("SquaredDifference", T.DT_COMPLEX64)}


def _cases() -> list[tuple[str, int]]:
    from tfxla_cluster.tfops.xla_kernels import jit_kernels

    out = []
    for op in list(op_table.GENERIC) + [o for ops in op_table.DOMAIN.values() for o in ops]:
        attrs = [a for a in op_def_registry.get(op).attr if a.type == "type" and not a.HasField("default_value")]
        if len(attrs) != 1:
            continue
        kernel = {t for kd in jit_kernels("XLA_CPU_JIT").get(op, []) for c in kd.constraint
                  if c.name == attrs[0].name for t in c.allowed_values.list.type}
        opdef = set(attrs[0].allowed_values.list.type)
        out += [(op, t) for t in DTYPES if (not kernel or t in kernel) and (not opdef or t in opdef)]
    return out


def _values(t: int, domain: str, seed: int) -> np.ndarray:
    dt = tf.as_dtype(t)
    rng = np.random.default_rng(seed)
    if t == T.DT_BOOL:
        return rng.integers(0, 2, (2, 3)).astype(bool)
    if dt.is_integer:
        lo, hi = {"pos": (1, 10), "shift": (0, 5)}.get(domain, (-9, 10))
        return rng.integers(max(lo, 0) if dt.is_unsigned else lo, hi, (2, 3)).astype(dt.as_numpy_dtype)
    lo, hi = {"pos": (0.1, 3), "unit": (-0.95, 0.95), "ge1": (1.05, 4), "small": (-0.9, 0.9)}.get(domain, (-3, 3))
    v = rng.uniform(lo, hi, (2, 3))
    if dt.is_complex:
        v = v + 1j * rng.uniform(lo, hi, (2, 3)) * (1 if domain == "any" else 0.3)
    return v.astype(dt.as_numpy_dtype)


def test_sample_is_part_of_the_sweep() -> None:
    assert SAMPLE <= set(_cases())


def _sweeping(config) -> bool:
    return "tfsweep" in (config.getoption("markexpr") or "")


def pytest_generate_tests(metafunc) -> None:
    """The sweeps' cases, generated only when they run (so the default run does not collect ~1500 skips)."""
    sweeping = _sweeping(metafunc.config)
    if metafunc.definition.name == "test_op_dtype_equals_tf_xla":
        cases = [(op, t) for op, t in _cases() if sweeping or (op, t) in SAMPLE]
        metafunc.parametrize("op,dtype", cases, ids=[f"{op}-{tf.as_dtype(t).name}" for op, t in cases])
    elif metafunc.definition.name == "test_family_dtype_equals_tf_xla":
        cases = [(n, d) for n in FAMILIES for d in FAMILY_DTYPES] if sweeping else []
        metafunc.parametrize("name,dt", cases, ids=[f"{n}-{d.name}" for n, d in cases])


_TOL = {np.dtype(np.float16): 2e-3, np.dtype(ml_dtypes.bfloat16): 1.6e-2, np.dtype(np.float32): 2e-5,
        np.dtype(np.float64): 1e-12, np.dtype(np.complex64): 2e-5, np.dtype(np.complex128): 1e-12}


def test_op_dtype_equals_tf_xla(op: str, dtype: int) -> None:
    from tfxla_cluster.tf2hlo import lower_function

    op_def = op_def_registry.get(op)
    t_attr = next(a.name for a in op_def.attr if a.type == "type" and not a.HasField("default_value"))
    if any(not (a.type or a.type_attr == t_attr) for a in op_def.input_arg):
        pytest.skip("an input of another type attribute")
    args = [_values(a.type or dtype, _DOMAIN.get(op, "any"), k) for k, a in enumerate(op_def.input_arg)]
    fn = raw(op)
    try:
        want = [w.numpy() for w in tf.nest.flatten(tf.function(fn, jit_compile=True)(*args))]
    except tf.errors.OpError:
        pytest.skip("TF's XLA does not compile it either")
    specs = [tf.TensorSpec(a.shape, tf.as_dtype(a.dtype)) for a in args]
    if (op, dtype) in _COMPILED:
        import tfxla_cluster as txc
        got = [np.asarray(g) for g in tf.nest.flatten(txc.function(fn, jit_compile=True)(*args))]
    else:
        got = lower_function(tf.function(fn).get_concrete_function(*specs), *args).run(*args)
    _assert_equals_tf_xla(got, want, lambda dt: _TOL[dt])


# Cases checked through our compiled program rather than the HLO evaluator: XLA's evaluator rounds each product
# of a complex multiply, its compiled code fuses one into the other's add (as ours do), and FloorDiv's floor
# turns that ulp into a whole unit (the quotient's real part -6.9016 here, -7.9016 evaluated).
_COMPILED = {("FloorDiv", tf.complex64.as_datatype_enum), ("FloorDiv", tf.complex128.as_datatype_enum)}



def _assert_equals_tf_xla(got, want, tol: Callable[[np.dtype], float]) -> None:
    """Our outputs against TF's XLA's: same shapes and dtypes, integers and bools exact, floats within
    ``tol(dtype)`` (NaN positions equal)."""
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, f"{g.shape} {g.dtype} != TF's XLA {w.shape} {w.dtype}"
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
        else:
            wide = np.complex128 if w.dtype.kind == "c" else np.float64
            t = tol(w.dtype)
            np.testing.assert_allclose(g.astype(wide), w.astype(wide), rtol=t, atol=t, equal_nan=True)


# ------------------------------------------------------------------ other families (-m tfsweep only)
R = tf.raw_ops
FAMILY_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int8, tf.int16, tf.int32, tf.int64, tf.uint8,
                 tf.uint16, tf.uint32, tf.uint64, tf.complex64, tf.complex128, tf.bool)


def _eye_plus(x, k: float):
    return x[:, :2] + k * tf.eye(2, dtype=x.dtype)


# name → (program, number of [2, 4] inputs of the swept dtype)
FAMILIES = {
    "Sum": (lambda x: R.Sum(input=x, axis=[1]), 1), "Prod": (lambda x: R.Prod(input=x, axis=[0]), 1),
    "Max": (lambda x: R.Max(input=x, axis=[1]), 1), "Mean": (lambda x: R.Mean(input=x, axis=[1]), 1),
    "ArgMax": (lambda x: R.ArgMax(input=x, dimension=1), 1), "Cumprod": (lambda x: R.Cumprod(x=x, axis=0), 1),
    "MatMul": (lambda x, y: R.MatMul(a=x, b=y, transpose_b=True), 2),
    "BatchMatMulV2": (lambda x, y: R.BatchMatMulV2(x=x[None], y=y[None], adj_y=True), 2),
    "ConcatV2": (lambda x, y: R.ConcatV2(values=[x, y], axis=1), 2),
    "Tile": (lambda x: R.Tile(input=x, multiples=[2, 1]), 1),
    "MirrorPad": (lambda x: R.MirrorPad(input=x, paddings=[[1, 0], [0, 2]], mode="REFLECT"), 1),
    "GatherNd": (lambda x: R.GatherNd(params=x, indices=[[1, 2], [0, 0]]), 1),
    "TopKV2": (lambda x: R.TopKV2(input=x, k=2), 1),
    "Sort": (lambda x: tf.sort(x, axis=1), 1),
    "ScatterNd": (lambda x: R.ScatterNd(indices=[[1], [0]], updates=x, shape=[3, 4]), 1),
    "UnsortedSegmentMax": (lambda x: R.UnsortedSegmentMax(data=x, segment_ids=[1, 1], num_segments=2), 1),
    "MatrixDiagV3": (lambda x: R.MatrixDiagV3(diagonal=x, k=0, num_rows=-1, num_cols=-1, padding_value=x[0, 0]), 1),
    "MatrixSetDiagV3": (lambda x: R.MatrixSetDiagV3(input=x, diagonal=x[:, 0], k=0), 1),
    "Roll": (lambda x: R.Roll(input=x, shift=[1], axis=[1]), 1),
    "Einsum": (lambda x, y: R.Einsum(inputs=[x, y], equation="ij,kj->ik"), 2),
    "Conv2D": (lambda x, y: R.Conv2D(input=tf.reshape(x, [1, 2, 4, 1]), filter=tf.reshape(y[:, :2], [2, 2, 1, 1]),
                                     strides=[1, 1, 1, 1], padding="VALID"), 2),
    "MaxPool": (lambda x: R.MaxPool(input=tf.reshape(x, [1, 2, 4, 1]), ksize=[1, 2, 2, 1], strides=[1, 1, 1, 1],
                                    padding="VALID"), 1),
    "Cholesky": (lambda x: R.Cholesky(input=tf.matmul(x[:, :2], x[:, :2], adjoint_a=True) + tf.eye(2, dtype=x.dtype)),
                 1),
    "MatrixTriangularSolve": (lambda x, y: R.MatrixTriangularSolve(matrix=_eye_plus(x, 3.0), rhs=y), 2),
    "MatrixInverse": (lambda x: R.MatrixInverse(input=_eye_plus(x, 3.0)), 1), "FFT": (lambda x: R.FFT(input=x), 1),
    "ComplexAbs": (lambda x: R.ComplexAbs(x=x, Tout=x.dtype.real_dtype), 1),
    "Angle": (lambda x: R.Angle(input=x, Tout=x.dtype.real_dtype), 1),
    "Cast->f16": (lambda x: tf.cast(x, tf.float16), 1),
    "Xlogy": (lambda x, y: R.Xlogy(x=x, y=tf.abs(y) + 1), 2), "Pow": (lambda x, y: R.Pow(x=x, y=y), 2),
}


def _family_value(dt, k: int) -> np.ndarray:
    rng = np.random.default_rng(k)
    if dt == tf.bool:
        return rng.integers(0, 2, (2, 4)).astype(bool)
    if dt.is_integer:
        return rng.integers(0 if dt.is_unsigned else -5, 6, (2, 4)).astype(dt.as_numpy_dtype)
    v = rng.uniform(-2, 2, (2, 4))
    return (v + 1j * rng.uniform(-2, 2, (2, 4)) if dt.is_complex else v).astype(dt.as_numpy_dtype)


@pytest.mark.tfsweep
def test_family_dtype_equals_tf_xla(name: str, dt) -> None:
    from tfxla_cluster.tf2hlo import lower_function

    fn, n = FAMILIES[name]
    args = [_family_value(dt, k) for k in range(n)]
    try:
        want = [w.numpy() for w in tf.nest.flatten(tf.function(fn, jit_compile=True)(*args))]
    except (tf.errors.OpError, TypeError, ValueError):
        pytest.skip("TF's XLA does not compile it either")
    specs = [tf.TensorSpec(a.shape, dt) for a in args]
    got = lower_function(tf.function(fn).get_concrete_function(*specs), *args).run(*args)
    _assert_equals_tf_xla(got, want, lambda dt: ({2: 3e-2, 4: 1e-4, 8: 1e-9, 16: 1e-9}[dt.itemsize] if dt.kind != "c"
                                             else (1e-4 if dt.itemsize == 8 else 1e-9)))
