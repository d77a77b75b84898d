"""A reduce-window's init is not folded into its first step (XLA:CPU's kernel reads the init from a buffer).

``tf.math.cumprod`` is a reduce-window of ``multiply`` with init 1 over a padded window. In TF's XLA the
first step ``1 * x`` runs, so a denormal ``x`` flushes to 0 under DAZ; with the init as an LLVM constant,
LLVM folds ``1 * x`` to ``x`` and the denormal survived wherever the window held one real element (fuzz
seed 186000584). Expectations: TF's XLA on this machine, bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster

DENORMALS = {np.float32: np.float32(1e-40), np.float64: np.float64(5.562684646268003e-309)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", [tf.math.cumprod, tf.math.cumsum], ids=lambda f: f.__name__)
def test_scan_of_denormals_equals_tf(dtype, op) -> None:
    for n in (1, 2, 3):
        x = np.full([n], DENORMALS[dtype], dtype)
        x[-1] = -x[-1]
        for reverse in (False, True):
            for exclusive in (False, True):
                def fn(v):
                    return op(v, axis=0, exclusive=exclusive, reverse=reverse)
                want = tf.function(fn, jit_compile=True)(x).numpy()
                got = tfxla_cluster.function(fn, jit_compile=True)(x).numpy()
                assert got.tobytes() == want.tobytes(), (n, reverse, exclusive, got, want)


def test_pools_of_denormals_equal_tf() -> None:
    x = np.array([[1e-40, -1e-40], [3.0, 1e-40]], np.float32)[None, :, :, None]
    for pool in (tf.nn.max_pool2d, tf.nn.avg_pool2d):
        for k in (1, 2):
            def fn(v):
                return pool(v, k, 1, "VALID")
            want = tf.function(fn, jit_compile=True)(x).numpy()
            got = tfxla_cluster.function(fn, jit_compile=True)(x).numpy()
            assert got.tobytes() == want.tobytes(), (pool.__name__, k, got, want)
