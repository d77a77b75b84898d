"""MatMul/BatchMatMul of constants are folded by TF's plain CPU kernels before TF's XLA sees them
(tf2hlo/graph_folding.py): f64 ones (oneDNN takes float, bfloat16 and half only) by the session's own plain
kernel; f32 ones, which oneDNN would take in our session, by ``_matmul_eigen``: Eigen's gemv and core
product round each product (``max·-161.8 + -1.23·-max`` is NaN, where an FMA chain keeps -inf: fuzz seed
78000830), the tensor contraction's sgemm is an FMA chain. Inputs that are folded nodes (a Cast of a
constant) fold the same way. Checked bit for bit against TF's XLA (jit_compile=True)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tests.tf2hlo.test_depthwise_constant_folding import _same
from tfxla_cluster.codegen.row_lanes import AVX512, host_target
from tfxla_cluster.hostinfo import onednn_enabled

F32_MAX = float(np.finfo(np.float32).max)

# With oneDNN on, an f32 contraction of constants folds in oneDNN's sgemm, whose kernel (and order) is the
# CPU's: ``_matmul_eigen`` models the AVX-512 one (one FMA chain in k order). On AVX2 (Zen 3, 2026-11-28)
# TF's values match neither that nor rounded products for 3×40×5, 8×64×8 and 20×30×30: not modelled.
sgemm_measured = pytest.mark.skipif(onednn_enabled() and host_target() != AVX512,
                                    reason="oneDNN's f32 sgemm order measured on AVX-512 only (graph_folding.py)")


def _operands(dtype, shape_a, shape_b, seed):
    top = float(np.finfo(dtype).max)
    vals = np.array([0, 1.5, -1.25, top, -top, 2.0, 1e-3, 0.7, -0.3], dtype)
    p = [.3, .1, .1, .15, .15, .05, .05, .05, .05]
    rng = np.random.default_rng(seed)
    return rng.choice(vals, shape_a, p=p).astype(dtype), rng.choice(vals, shape_b, p=p).astype(dtype)


def _compare(fn):
    for want, got in zip(tf.function(fn, jit_compile=True)(), txc.function(fn, jit_compile=True)()):
        _same(want.numpy(), got.numpy())


# (batch, m, k, n): Eigen's lazy product, gemv rows and columns (a core product's row-major gemv: 40×17×1),
# the contraction (one batch, or a cost over 128·128), and a gebp-sized core product of small cost
SHAPES = [(3, 5, 7, 3), (2, 1, 40, 4), (2, 4, 17, 1), (3, 40, 17, 1), (1, 8, 64, 8), (2, 20, 30, 30),
          (2, 16, 32, 32)]


@sgemm_measured
@pytest.mark.parametrize("cast", [False, True], ids=["const", "cast_of_const"])
def test_constant_batch_matmul_is_tfs_kernel(cast):
    def fn():
        outs = []
        for i, (b, m, k, n) in enumerate(SHAPES):
            x, y = _operands(np.float32, (b, m, k), (b, k, n), i)
            x = tf.constant(x)
            if cast:
                x = tf.cast(tf.cast(x, tf.float64), tf.float32)
            outs.append(tf.linalg.matmul(x, tf.constant(y)))
        x, y = _operands(np.float32, (2, 7, 5), (2, 3, 7), 9)
        outs.append(tf.linalg.matmul(tf.constant(x), tf.constant(y), adjoint_a=True, adjoint_b=True))
        return outs
    _compare(fn)


def test_seed78000830_rounded_products_meet_as_nan():
    x = np.zeros((1, 5), np.float32)
    x[0, 1], x[0, 3] = F32_MAX, -1.2330013513565063
    y = np.zeros((5, 3), np.float32)
    y[1, 1], y[3, 1] = -161.81048583984375, -F32_MAX
    fn = lambda: [tf.linalg.matmul(tf.constant(x[None]), tf.constant(y[None]))]
    assert np.isnan(tf.function(fn, jit_compile=True)()[0].numpy()[0, 0, 1])
    _compare(fn)


@pytest.mark.parametrize("dtype", [pytest.param(np.float32, marks=sgemm_measured), np.float64],
                         ids=lambda d: np.dtype(d).name)
def test_constant_matmul_is_tfs_kernel(dtype):
    def fn():
        outs = []
        for i, (m, k, n) in enumerate([(4, 3, 1), (1, 5, 3), (4, 3, 3), (3, 40, 5)]):
            x, y = _operands(dtype, (m, k), (k, n), 20 + i)
            outs.append(tf.linalg.matmul(tf.constant(x), tf.constant(y)))
        x, y = _operands(dtype, (3, 4), (5, 3), 30)
        outs.append(tf.linalg.matmul(tf.constant(x), tf.constant(y), transpose_a=True, transpose_b=True))
        return outs
    _compare(fn)


def test_f64_onednn_ops_of_constants_fold_as_tf():
    """oneDNN takes no f64: an f64 softmax of constants folds with TF's plain kernel in the session (a NaN row's
    other elements NaN too); an f64 AvgPool3D has no plain CPU kernel, so TF leaves it to XLA, as here."""
    x = np.array([[1.0, np.nan, 3.0], [1e308, -1e308, 0.0]])
    v = np.arange(2 * 4 * 4 * 4 * 2, dtype=np.float64).reshape(2, 4, 4, 4, 2) / 7

    def fn():
        return [tf.nn.softmax(tf.constant(x)), tf.nn.log_softmax(tf.constant(x)),
                tf.nn.avg_pool3d(tf.constant(v), 2, 2, "VALID"), tf.nn.avg_pool2d(tf.constant(v[0]), 3, 1, "SAME")]
    _compare(fn)
