"""Row-vector reductions (``codegen/reductions.py``, issue 17): a fused reduce that keeps its input's minor
dim as its result row's minor dim (a global average pool, [N, H, W, C] -> [N, C]) accumulates a whole row
at once, the channels innermost. Results equal TF's XLA bit for bit (each element is combined in the same
order as before), match the evaluator with bounds checks on (row chunks, several reduces in one fusion,
integer and half types), and the per-element loops are gone from the kernel.

On AVX2 TF's LLVM sums many of these in vector lanes over the last two reduced dims (``row_lanes``'
per_element): those reduces are emitted per element in that order instead, equal to TF's XLA too (issue 19;
the batch-norm gradient of tools/zoo.py's small_cnn included)."""
from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tests.codegen.cg_helpers import CHECKED, check
from tfxla_cluster.codegen import CodegenOptions
from tfxla_cluster.codegen.executable import emit_module
from tfxla_cluster.hlo.parser import parse_module

RNG = np.random.RandomState(17)


def _mean(axes):
    return lambda a: tf.reduce_mean(a, axis=axes)


def _sum_squares(axes):
    return lambda a: tf.reduce_sum(a * a, axis=axes)


def _pool_relu(axes):
    return lambda a: tf.nn.relu(tf.reduce_mean(a, axis=axes)) * 2 + tf.reduce_sum(a, axis=axes)


def _moments(axes):   # two reduces of one input in one fusion
    def f(a):
        m, v = tf.nn.moments(a, axes=axes)
        return m, v
    return f


def _input(shape, dtype):
    x = RNG.randn(*shape) * 3
    x.flat[::11] *= 1e4   # large terms: the order of the sum shows in the low bits
    if dtype == "int32":
        return tf.constant(x.astype(np.int32))
    return tf.cast(tf.constant(x.astype(np.float64)), dtype)


# (shape, axes) where TF's XLA emits the reduce itself (no YNNPACK): f32 rows of 16, any f64; on AVX2 the
# ones with 2, 4, 8 or 16+ rows of the last two reduced dims in vector lanes (measured on a Zen 3 host)
TF_CASES = [((2, 8, 8, 16), (1, 2), "float32"), ((3, 5, 6, 24), (1, 2), "float64"),
            ((2, 7, 7, 64), (1, 2), "float64"), ((4, 9, 40), (1,), "float64"), ((2, 8, 8, 16), (1, 2), "bfloat16"),
            ((2, 6, 6, 32), (1, 2), "float16"), ((3, 6, 5, 40), (1, 2), "int32"), ((2, 3, 4, 5, 24), (1, 3), "float64"),
            ((3, 8, 8, 8), (0, 1, 2), "float32"),    # a batch norm's sums: N in order around 8 lanes over H
            ((2, 20, 8, 4), (1, 2), "float32"),      # 4 lanes (to one element: 8)
            ((2, 16, 5, 16), (1, 2), "float32"), ((2, 8, 8, 16), (1, 2), "float64"), ((4, 2, 8, 8), (1, 2, 3), "float32")]


@pytest.mark.parametrize("shape,axes,dtype", TF_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("make", [_mean, _sum_squares, _pool_relu], ids=lambda f: f.__name__)
def test_equal_tf_xla_bit_for_bit(shape, axes, dtype, make):
    fn = make(axes)
    x = _input(shape, dtype)
    want = tf.function(fn, jit_compile=True)(x).numpy()
    got = txc.function(fn, jit_compile=True)(x).numpy()
    assert got.dtype == want.dtype
    assert got.tobytes() == want.tobytes(), np.abs(got.astype(np.float64) - want.astype(np.float64)).max()


def _optimized(fn, *args):
    return parse_module(txc.function(fn, jit_compile=True).experimental_get_compiler_ir(*args)(stage="optimized_hlo"))


def _row_kernels(module) -> int:
    _, text = emit_module(module, CodegenOptions())
    return len(re.findall(r'%"[^"]*\.rows[^"]*" = alloca \[\d+ x ', text))


def test_pool_kernel_accumulates_rows_and_short_rows_keep_element_loops():
    x = _input((2, 7, 7, 16), "float32")   # (7 rows: in order on AVX2 too)
    assert _row_kernels(_optimized(_mean((1, 2)), x)) == 1
    assert _row_kernels(_optimized(_moments((1, 2)), x)) >= 1
    short = _input((4, 8, 8, 3), "float32")   # rows of 3 channels: per-element loops are faster
    assert _row_kernels(_optimized(_mean((1, 2)), short)) == 0
    inner = _input((4, 8, 16), "float32")     # the minor dim is reduced: not a row-vector reduce
    assert _row_kernels(_optimized(_mean((2,)), inner)) == 0


@pytest.mark.parametrize("shape,axes,dtype,make", [
    ((2, 7, 8, 16), (1, 2), "float32", _pool_relu),
    ((1, 5, 3, 3000), (1, 2), "float32", _mean),        # one row: split into chunks across threads
    ((3, 5, 7, 48), (1, 2), "float32", _moments),
    ((2, 6, 6, 40), (1, 2), "float16", _mean),
    ((2, 6, 6, 40), (1, 2), "int32", _pool_relu),
    ((5, 3, 2, 20), (0, 2), "float64", _sum_squares),    # reduced dims on both sides of a kept one
], ids=lambda v: getattr(v, "__name__", str(v)))
def test_equal_evaluator_with_bounds_checks(shape, axes, dtype, make):
    fn = make(axes)
    x = _input(shape, dtype)
    module = _optimized(fn, x)
    assert _row_kernels(module) >= 1
    # (the evaluator sums in double, as XLA's evaluator folds a sum: the kernel's f32 order, checked against TF
    # above, is off by its roundings of the large terms, so atol is relative to each output's largest magnitude)
    tol = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-14}.get(dtype, 0.0)
    check(module, x.numpy(), rtol=tol, atol=tol, options=CHECKED, scale_atol=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("make", [_mean, _sum_squares, _pool_relu], ids=lambda f: f.__name__)
def test_nan_payloads_equal_tf_xla(dtype, make):
    """Which NaN a sum returns (x86 keeps its first operand's; an FMA its product's), as TF's XLA loop."""
    x = RNG.randn(3, 5, 5, 40).astype(dtype)
    bits = x.view(np.uint32 if dtype == np.float32 else np.uint64).reshape(-1)
    quiet, sign = (0x7FC00000, 0x80000000) if dtype == np.float32 else (0x7FF8000000000000, 1 << 63)
    bits[::13] = quiet | np.arange(0, bits.size, 13, dtype=bits.dtype)
    bits[5::29] = sign | quiet | np.arange(5, bits.size, 29, dtype=bits.dtype)
    fn = make((1, 2))
    want = tf.function(fn, jit_compile=True)(tf.constant(x)).numpy()
    got = txc.function(fn, jit_compile=True)(tf.constant(x)).numpy()
    assert _row_kernels(_optimized(fn, tf.constant(x))) == 1
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("shape,axes,make", [((3, 8, 8, 8), (0, 1, 2), _sum_squares), ((2, 20, 8, 40), (1, 2), _mean),
                                             ((2, 3, 16, 5, 8), (1, 2, 3), _pool_relu)],
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_lane_order_equal_evaluator_with_bounds_checks(shape, axes, make):
    """The reduces TF sums in vector lanes on AVX2 (per element, outer reduced dims in loops around them)."""
    x = _input(shape, "float32")
    check(_optimized(make(axes), x), x.numpy(), rtol=2e-6, atol=2e-6, options=CHECKED, scale_atol=True)


def test_batch_norm_gradient_equal_tf_xla():
    """FusedBatchNormGradV3 at tools/zoo.py small_cnn's first batch norm ([2, 8, 8, 8]): its sums over N, H, W
    (of dy, and of dy·(x-μ) fused) and dx, bit for bit."""
    rng = np.random.RandomState(3)
    dy, x = (tf.constant(rng.randn(2, 8, 8, 8).astype(np.float32)) for _ in range(2))
    scale = tf.constant(rng.rand(8).astype(np.float32) + 0.5)

    def grad(dy, x, scale):
        mean, var = tf.nn.moments(x, axes=(0, 1, 2))
        return tf.raw_ops.FusedBatchNormGradV3(y_backprop=dy, x=x, scale=scale, reserve_space_1=mean,
                                               reserve_space_2=var, reserve_space_3=tf.zeros([0]), epsilon=1e-3,
                                               is_training=True)[:3]
    want = tf.function(grad, jit_compile=True)(dy, x, scale)
    got = txc.function(grad, jit_compile=True)(dy, x, scale)
    for w, g in zip(want, got):
        assert g.numpy().tobytes() == w.numpy().tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("shape", [(2, 8, 8, 16), (2, 16, 5, 8), (2, 20, 3, 8), (3, 4, 6, 8), (2, 2, 9, 8),
                                   (2, 3, 8, 8, 4)], ids=str)
def test_sum_plus_product_per_element_equal_tf_xla(shape, dtype):
    """A product's last lane step (the lanes in loops) contracts into its consumer's add (an FMA) as in TF's
    XLA: 8, 4 and 2 lanes, rows past the lanes, a reduced dim in order around them (its loop kept: unrolled,
    the last pass's product would contract where TF's does not, 2 of these 8 f64 inputs)."""
    axes = tuple(range(1, len(shape) - 1))

    def fn(a):
        return tf.reduce_sum(a, axes) + tf.reduce_prod(a, axes)
    tf_fn, ours = tf.function(fn, jit_compile=True), txc.function(fn, jit_compile=True)
    for seed in range(8):
        x = tf.constant(np.exp(np.random.RandomState(seed).randn(*shape) * 0.2).astype(dtype))
        assert ours(x).numpy().tobytes() == tf_fn(x).numpy().tobytes(), seed
