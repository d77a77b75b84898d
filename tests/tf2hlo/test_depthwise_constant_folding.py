"""A DepthwiseConv2dNative of two constants is folded by TF's plain CPU kernel before TF's XLA sees it
(tf2hlo/graph_folding.py): per channel (f64 is not XLA's block-diagonal dense convolution, so a NaN or an
infinity stays in its channel), padding taps multiplied (0·inf = NaN), summed in the kernel's order. With
oneDNN on, our session would run oneDNN's kernel (f32/bf16 here), so ours emulates TF's kernel. Checked bit for
bit against TF's XLA (ours jit) and TF's graph (ours auto-clustered) on random and special values, every float
type, SAME and VALID, strides 1 and 2, depth multipliers 1 and 2."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.tf2hlo.graph_folding import _depthwise_eigen

DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
SPECIALS = [np.inf, -np.inf, np.nan, -0.0, 1e-40, 6e4]


def _case(dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 5, 6, 3)) * 30
    f = rng.standard_normal((3, 2, 3, 2)) * 30
    for arr in (x, f):
        flat = arr.reshape(-1)
        flat[rng.integers(flat.size, size=3)] = rng.choice(SPECIALS, 3)
    f[0, 0, 1, 0] = np.inf  # a tap over the top padding row: NaN there, as TF's kernel multiplies it
    return x.astype(dtype), f.astype(dtype)


def _same(want, got):
    want, got = np.asarray(want), np.asarray(got)
    assert want.shape == got.shape and want.dtype == got.dtype
    w, g = want.astype(np.float64), got.astype(np.float64)
    ok = (w == g) & (np.signbit(w) == np.signbit(g)) | (np.isnan(w) & np.isnan(g))
    assert ok.all(), f"{int((~ok).sum())} differ, first at {np.argwhere(~ok)[:4].tolist()}"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_constant_depthwise_is_tfs_kernel(dtype):
    x, f = _case(dtype, 19)

    def fn():
        outs = []
        for stride, padding, mult in ((1, "SAME", 2), (2, "SAME", 1), (1, "VALID", 2), (2, "VALID", 2)):
            outs.append(tf.nn.depthwise_conv2d(tf.constant(x), tf.constant(f[..., :mult]), [1, stride, stride, 1],
                                               padding))
        return outs
    want_xla = tf.function(fn, jit_compile=True)()
    for want, got in zip(want_xla, txc.function(fn, jit_compile=True)()):
        _same(want.numpy(), got.numpy())
    for want, got in zip(tf.function(fn)(), txc.function(fn)()):
        _same(want.numpy(), got.numpy())
    # the emulation alone, against TF's XLA's folded values
    _same(want_xla[0].numpy(), _depthwise_eigen(x, f, 1, "SAME"))
    assert np.isnan(want_xla[0].numpy()[:, 0, :, 2].astype(np.float64)).all()


def test_kernel_failure_folds_nothing():
    """A VALID filter two rows taller than the input fails TF's kernel ("output size would be negative"): no
    value (the fold is abandoned); one row taller, or with C++'s truncating division, an empty output."""
    x = np.zeros((1, 1, 2, 1), np.float32)
    assert _depthwise_eigen(x, np.zeros((3, 1, 1, 1), np.float32), 1, "VALID") is None
    assert _depthwise_eigen(x, np.zeros((2, 1, 1, 1), np.float32), 1, "VALID").shape == (1, 0, 2, 1)
    assert _depthwise_eigen(x, np.zeros((4, 1, 1, 1), np.float32), 2, "VALID").shape == (1, 0, 1, 1)
    assert _depthwise_eigen(np.zeros((1, 2, 2, 1), np.float32), np.zeros((1, 1, 2, 1), np.float32), 1, "SAME") \
        is None


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_constant_depthwise_beside_a_while_loop_is_xlas_evaluator(dtype):
    """A tf.while_loop over constants abandons TF's graph folding: the convolution reaches XLA, whose
    HloEvaluator skips padding taps (an infinite filter tap over padding adds nothing: 0, not NaN; f64's
    block-diagonal dense form still spreads a NaN input over the other channels)."""
    x, f = _case(dtype, 76)
    x[1, 0, 0, 1] = np.inf

    def fn():
        y = tf.nn.depthwise_conv2d(tf.constant(x), tf.constant(f), [1, 2, 2, 1], "SAME")
        return y, tf.while_loop(lambda i, v: i < 1, lambda i, v: (i + 1, tf.sign(v)), (0, y))[1]
    for want, got in zip(tf.function(fn, jit_compile=True)(), txc.function(fn, jit_compile=True)()):
        w, g = want.numpy().astype(np.float64), got.numpy().astype(np.float64)
        assert (np.isnan(w) == np.isnan(g)).all(), np.argwhere(np.isnan(w) != np.isnan(g))[:4].tolist()
        np.testing.assert_allclose(g, w, rtol=1e-2 if dtype in (np.float16, ml_dtypes.bfloat16) else 1e-6,
                                   atol=1e-3)


def test_depthwise_of_a_folded_input_is_tfs_kernel():
    """The input a folded node (a Cast of a constant): TF folds the convolution with its plain kernel too."""
    x, f = _case(np.float32, 23)

    def fn():
        xx = tf.cast(tf.constant(x.astype(np.float64)), tf.float32)
        return [tf.nn.depthwise_conv2d(xx, tf.constant(f), [1, 1, 1, 1], padding) for padding in ("SAME", "VALID")]
    for want, got in zip(tf.function(fn, jit_compile=True)(), txc.function(fn, jit_compile=True)()):
        _same(want.numpy(), got.numpy())
