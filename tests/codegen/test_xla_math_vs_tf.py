"""Math XLA:CPU emits inline rather than through libm, bit for bit against TF's XLA on this machine: f64 tanh is
``xla.tanh.f64`` (a rational approximation, not libm's tanh), and gelu_tanh's x³ is pow(x, 3) rewritten to
x·(x·x) by XLA's algsimp. An ulp of difference in either is magnified by 1 + tanh(z) near z = -1."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc


def _values(dtype) -> np.ndarray:
    rng = np.random.default_rng(19)
    x = np.concatenate([rng.normal(0, 3, 400), rng.uniform(-25, 25, 200),
                        10.0 ** rng.uniform(-300, 1.3, 100) * rng.choice([-1, 1], 100),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 17.714196154005176, 20.0, -20.0, 19.999999, -4.1978936690030455]])
    return x.astype(dtype)


def _same_bits(want: np.ndarray, got: np.ndarray) -> np.ndarray:
    return (want == got) & (np.signbit(want) == np.signbit(got)) | (np.isnan(want) & np.isnan(got))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tanh_gelu_cube_bitwise(dtype):
    @tf.autograph.experimental.do_not_convert
    def f(a):
        return tf.tanh(a), tf.nn.gelu(a, approximate=True), tf.pow(a, 3), a / tf.nn.gelu(a, approximate=True)
    x = _values(dtype)
    want = [w.numpy() for w in tf.function(f, jit_compile=True)(x)]
    got = [np.asarray(g) for g in txc.function(f, jit_compile=True)(x)]
    for name, w, g in zip(("tanh", "gelu_tanh", "pow3", "x/gelu_tanh"), want, got):
        bad = ~_same_bits(w, g)
        assert not bad.any(), (name, x[bad][:4], g[bad][:4], w[bad][:4])
