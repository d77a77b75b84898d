"""Complex values that TF's graph constant folding computes with its own kernels (tf2hlo/graph_folding.py):
a complex division of constants is TF's kernel's in TF's XLA (NaN for (-inf, NaN) over a finite divisor, where
XLA's formula gives infinities), so ours substitutes the folded complex value too. Every pair of special
complex values, c64 and c128: ours jit against TF's XLA, ours auto-clustered against TF's graph, bit for bit
(NaN positions per part). Also a folded value with an infinite part (it is joined from its parts without
arithmetic: ``re + 1j·im`` would make inf·0 = NaN, and a denormal part would flush under DAZ)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc

PARTS = [0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan, 1e300, 1e-310]


def _specials(dtype):
    part = np.float32 if dtype == np.complex64 else np.float64
    vals = [complex(part(a), part(b)) for a, b in itertools.product(PARTS, PARTS[:7])]
    pairs = list(itertools.product(vals, vals[::5]))
    return np.array([p[0] for p in pairs], dtype), np.array([p[1] for p in pairs], dtype)


def _same(want, got):
    want, got = np.asarray(want), np.asarray(got)
    assert want.shape == got.shape and want.dtype == got.dtype
    for w, g in ((want.real, got.real), (want.imag, got.imag)):
        ok = (w == g) & (np.signbit(w) == np.signbit(g)) | (np.isnan(w) & np.isnan(g))
        assert ok.all(), f"{int((~ok).sum())} differ, first at {np.argwhere(~ok)[:4].ravel().tolist()}"


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
def test_complex_division_of_constants_is_tfs_kernel(dtype):
    a, b = _specials(dtype)

    def fn():
        return tf.constant(a) / tf.constant(b), tf.math.conj(tf.constant(a)) * tf.constant(b)
    for want, got in zip(tf.function(fn, jit_compile=True)(), txc.function(fn, jit_compile=True)()):
        _same(want.numpy(), got.numpy())
    for want, got in zip(tf.function(fn)(), txc.function(fn)()):
        _same(want.numpy(), got.numpy())


def test_folded_complex_value_with_infinite_and_denormal_parts():
    c = np.array([[complex(np.inf, 0.0), complex(0.0, np.inf)], [complex(2.9e-39, -1.0), complex(1.0, -1.0)]],
                 np.complex64)

    def fn(x):
        return tf.transpose(tf.constant(c), conjugate=True) + x, tf.constant(c) / tf.constant(c[::-1])
    x = tf.constant(np.zeros((2, 2), np.complex64))
    for want, got in zip(tf.function(fn, jit_compile=True)(x), txc.function(fn, jit_compile=True)(x)):
        _same(want.numpy(), got.numpy())
