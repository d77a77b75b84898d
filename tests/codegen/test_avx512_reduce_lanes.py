"""Per-element float sums on AVX-512 in TF's XLA's order (``row_lanes`` per element, issue 19): over the input's
two minor-most dims in the one-element lanes; with kept dims inside them (a pool's or a batch norm's channels)
as LLVM vectorises the row loop there (``elemental._avx512_kept_inside``: rows of at most 8 elements are an
interleave group whose gap leaves a scalar epilogue of rows; longer rows are gathered, only for a product of
one load; fewer than 16 rows: ``elemental._avx512_inner_kept_lanes``). Bit for bit against TF's XLA; measured
on a Zen 4 (2026-11-29), so only run on an AVX-512 target (the AVX2 forms are
tests/codegen/test_row_vector_reduce.py's).

A fused product's terms are FMAs into the lanes' adds for rows of up to 4 columns and, for two loaded factors,
rounded products from 5 columns on (LLVM multiplies whole interleaved vectors first; over an interleave group
with a gap of more than 4 elements too, where the epilogue's products are FMAs again). A product of one load
(x·x, x·3, and (x - μ)²) takes no 7-8 column exception in ``row_lanes`` (the sweep of f32/f64 [3, R, C], R
2-28, C 2-12: 13 of 400 differed before, 0 now; [2, R, C, K] with K 2-4 inside, R 4-32: 187 of 504 before, 0
now)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tests.codegen.cg_helpers import avx512_measured

FORMS = {
    "mean": lambda axes: lambda a, b: tf.reduce_mean(a, axis=axes),
    "x*x": lambda axes: lambda a, b: tf.reduce_sum(a * a, axis=axes),
    "x*3": lambda axes: lambda a, b: tf.reduce_sum(a * 3.0, axis=axes),
    "x*y": lambda axes: lambda a, b: tf.reduce_sum(a * b, axis=axes),
    "var": lambda axes: lambda a, b: tf.nn.moments(a, axes=axes)[1],
}
MINOR_DIMS = [((3, 4, 5), (1, 2)), ((3, 20, 3), (1, 2)), ((3, 2, 8, 8), (1, 2, 3)), ((3, 8, 8), (1, 2)),
              ((3, 16, 7), (1, 2))]
KEPT_INSIDE = [((2, 4, 3, 8), (1, 2)), ((2, 8, 5, 4), (1, 2)), ((2, 4, 8, 8), (1, 2)), ((2, 4, 2, 8), (0, 1, 2)),
               ((2, 8, 3, 4), (0, 1, 2)), ((2, 4, 8, 8), (0, 1, 2)), ((2, 8, 8, 4), (0, 1, 2)),
               # interleave groups (C·K ≤ 8) with their scalar epilogue; gathered rows; short buffers in order
               ((2, 16, 2, 2), (1, 2)), ((2, 20, 4, 2), (1, 2)), ((2, 17, 2, 3), (1, 2)), ((2, 24, 3, 3), (1, 2)),
               ((2, 12, 4, 3), (1, 2)), ((2, 8, 2, 5), (1, 2)), ((2, 12, 2, 4), (1, 2))]
CASES = [(s, a, tuple(FORMS)) for s, a in KEPT_INSIDE + MINOR_DIMS]


def _input(shape, dtype, seed):
    x = np.random.RandomState(seed).randn(*shape) * 3
    x.flat[::11] *= 1e4   # large terms: the order of the sum shows in the low bits
    return x.astype(dtype)


@avx512_measured
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,axes,forms", CASES, ids=lambda v: str(v) if not isinstance(v, tuple) or
                         isinstance(v[0], int) else "-".join(v))
def test_per_element_sums_equal_tf_xla(shape, axes, forms, dtype):
    a, b = _input(shape, dtype, 1), _input(shape, dtype, 2)
    for name in forms:
        fn = FORMS[name](axes)
        want = tf.function(fn, jit_compile=True)(a, b).numpy()
        got = np.asarray(txc.function(fn, jit_compile=True)(a, b))
        assert got.tobytes() == want.tobytes(), (name, np.flatnonzero(got != want)[:4])
