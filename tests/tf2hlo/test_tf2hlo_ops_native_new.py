"""The lowerings added last for issue 18 (UniformQuantizedDot/Convolution, _FusedConv2D on int8,
RandomGammaGrad) through our HLO pipeline and native code: the same integers as the reference evaluator
(whose results the op tests compare with TF's XLA bit for bit), and the same floats within a few ulps."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from tests.tf2hlo.test_tf2hlo_ops_fused_conv_int8 import _fused_conv
from tests.tf2hlo.test_tf2hlo_ops_quant import _uq_conv_dnums, _uq_dot
from tests.tf2hlo.test_tf2hlo_ops_special import GA, GX

from tfxla_cluster.codegen import compile_module
from tfxla_cluster.passes.pipeline import optimize
from tfxla_cluster.tf2hlo import lower_function


def _native_and_evaluator(fn, args, specs):
    lowered = lower_function(tf.function(fn).get_concrete_function(*specs), *args)
    module, _ = optimize(lowered.module)
    params = [np.asarray(args[p.index]).astype(p.element_type.dtype) for p in lowered.parameters]
    return compile_module(module)(*params), lowered.run(*args)


def test_quantized_and_int8_ops_native_equal_evaluator() -> None:
    rng = np.random.default_rng(11)
    l, r = rng.integers(-128, 128, (9, 33)).astype(np.int8), rng.integers(-127, 128, (33, 6)).astype(np.int8)
    x, w = rng.integers(-128, 128, (2, 3, 6, 5)).astype(np.int8), rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    xh, wh = rng.integers(-128, 128, (1, 5, 5, 3)).astype(np.int8), rng.integers(-127, 128, (3, 3, 3, 4)).astype(np.int8)
    bias, side = rng.uniform(-20, 20, (4,)).astype(np.float32), rng.integers(-128, 128, (1, 5, 5, 4)).astype(np.int8)

    def fn(a, c, xx, ww, xn, wn, bb, sd):
        conv = tf.raw_ops.UniformQuantizedConvolution(
            lhs=xx, rhs=ww, lhs_scales=0.07, lhs_zero_points=2, rhs_scales=0.3, rhs_zero_points=-1, output_scales=0.9,
            output_zero_points=4, Tout=tf.qint32, lhs_quantization_min_val=-128, lhs_quantization_max_val=127,
            rhs_quantization_min_val=-127, rhs_quantization_max_val=127, output_quantization_min_val=-700,
            output_quantization_max_val=700, padding="SAME", window_strides=[1, 1], lhs_dilation=[1, 1],
            rhs_dilation=[1, 1], feature_group_count=1, batch_group_count=1, dimension_numbers=_uq_conv_dnums(False))
        fused = _fused_conv(xn, wn, bb, sd, 0.02, 0.5, nchw=False, fused_ops=["BiasAdd", "Relu"])
        return _uq_dot(a, c, 0.3, 4, 0.7, -2, 0.05, 7), conv, fused

    args = [l, r, x, w, xh, wh, bias, side]
    specs = [tf.TensorSpec(a.shape, tf.float32 if a.dtype == np.float32 else tf.qint8) for a in args]
    native, evaluated = _native_and_evaluator(fn, args, specs)
    for n, e in zip(native, evaluated):
        np.testing.assert_array_equal(np.asarray(n), np.asarray(e))


def test_random_gamma_grad_native_equals_evaluator() -> None:
    a, x = GA.astype(np.float32), GX.astype(np.float32)
    native, evaluated = _native_and_evaluator(lambda p, q: tf.raw_ops.RandomGammaGrad(alpha=p, sample=q), [a, x],
                                              [tf.TensorSpec(a.shape, tf.float32)] * 2)
    np.testing.assert_allclose(native[0], evaluated[0], rtol=2e-6, atol=1e-7, equal_nan=True)
