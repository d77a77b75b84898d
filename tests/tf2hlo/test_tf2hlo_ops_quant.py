"""Fake quantization and quantize-dequantize ops against TF's own XLA and TF eager: quantized values must land
on the same quantum (a one-step difference would be far outside the float tolerance)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import Case, run_batch, values

X = np.linspace(-7, 7, 37).astype(np.float32)
XC = values("f32", (5, 3), "wide")


def cases():
    x, xc = X, XC
    return [
     Case("FakeQuantWithMinMaxArgs", lambda v: tf.raw_ops.FakeQuantWithMinMaxArgs(inputs=v, min=-3.3, max=5.1, num_bits=5), [x]),
     Case("FakeQuantWithMinMaxArgs narrow", lambda v: tf.raw_ops.FakeQuantWithMinMaxArgs(inputs=v, min=0.2, max=4.0, narrow_range=True), [x]),
     Case("FakeQuantWithMinMaxArgsGradient", lambda g, v: tf.raw_ops.FakeQuantWithMinMaxArgsGradient(gradients=g, inputs=v, min=-3.3, max=5.1), [values("f32",(37,)), x]),
     Case("FakeQuantWithMinMaxVars", lambda v, lo, hi: tf.raw_ops.FakeQuantWithMinMaxVars(inputs=v, min=lo, max=hi, num_bits=6), [x, np.float32(-2.7), np.float32(3.9)]),
     Case("FakeQuantWithMinMaxVarsGradient", lambda g, v, lo, hi: tf.raw_ops.FakeQuantWithMinMaxVarsGradient(gradients=g, inputs=v, min=lo, max=hi), [values("f32",(37,)), x, np.float32(-2.7), np.float32(3.9)], rtol=1e-5, atol=1e-5),
     Case("FakeQuantWithMinMaxVarsPerChannel", lambda v, lo, hi: tf.raw_ops.FakeQuantWithMinMaxVarsPerChannel(inputs=v, min=lo, max=hi), [xc, np.array([-2.,-1.,0.5],np.float32), np.array([3., 8., 2.],np.float32)]),
     Case("FakeQuantWithMinMaxVarsPerChannelGradient", lambda g, v, lo, hi: tf.raw_ops.FakeQuantWithMinMaxVarsPerChannelGradient(gradients=g, inputs=v, min=lo, max=hi, narrow_range=True), [values("f32",(5,3)), xc, np.array([-2.,-1.,0.5],np.float32), np.array([3., 8., 2.],np.float32)], rtol=1e-5, atol=1e-5),
     Case("QuantizeAndDequantizeV2", lambda v: tf.raw_ops.QuantizeAndDequantizeV2(input=v, input_min=0., input_max=0., num_bits=4), [x]),
     Case("QuantizeAndDequantizeV2 given half_up", lambda v: tf.raw_ops.QuantizeAndDequantizeV2(input=v, input_min=-2.5, input_max=3.0, range_given=True, round_mode="HALF_UP", num_bits=5), [x]),
     Case("QuantizeAndDequantizeV2 unsigned narrow", lambda v: tf.raw_ops.QuantizeAndDequantizeV2(input=v, input_min=0., input_max=0., signed_input=False, narrow_range=True), [np.abs(x)]),
     Case("QuantizeAndDequantizeV3", lambda v, n: tf.raw_ops.QuantizeAndDequantizeV3(input=v, input_min=-4., input_max=4., num_bits=n), [x, np.int32(3)]),
     Case("QuantizeAndDequantizeV4 axis", lambda v: tf.raw_ops.QuantizeAndDequantizeV4(input=v, input_min=[0.,0.,0.], input_max=[0.,0.,0.], axis=1, num_bits=3), [xc]),
     Case("QuantizeAndDequantizeV4 narrow f64", lambda v: tf.raw_ops.QuantizeAndDequantizeV4(input=v, input_min=0., input_max=0., narrow_range=True), [x.astype(np.float64)]),
    ]


@pytest.mark.parametrize("reference", ["tf_xla", "tf"])
def test_quantize_ops(reference: str) -> None:
    run_batch(cases(), reference=reference)


@pytest.mark.parametrize("qtype,storage,values_", [(tf.qint8, np.int8, [-128, -5, 0, 7, 127]),
                                                   (tf.quint8, np.uint8, [0, 5, 128, 200, 255])])
@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_dequantize_equals_tf_xla(qtype, storage, values_, dtype) -> None:
    """A quantized argument is its storage integers (qint8 → s8, quint8 → u8)."""
    from tfxla_cluster.tf2hlo import lower_function

    raw = np.array(values_, storage)
    fn = lambda v: tf.raw_ops.Dequantize(input=v, min_range=-1.5, max_range=2.25, dtype=dtype)  # noqa: E731
    want = tf.function(fn, jit_compile=True)(tf.raw_ops.Bitcast(input=tf.constant(raw), type=qtype)).numpy()
    got = lower_function(tf.function(fn).get_concrete_function(tf.TensorSpec([5], qtype)), raw).run(raw)[0]
    assert got.dtype == want.dtype
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=2e-7, atol=2e-7)


def _ints(t):
    """A quantized TF result as its storage integers."""
    storage = {tf.qint8: tf.int8, tf.qint32: tf.int32}.get(t.dtype)
    return np.asarray(tf.bitcast(t, storage) if storage is not None else t)


UQ_X = np.array([-2.6, -1.25, -0.5, 0.0, 0.3, 0.75, 1.25, 2.5, 9.0, 100.0, -100.0, 0.45], np.float32)


@pytest.mark.parametrize("scale,zp,qtype,lo,hi", [(0.5, 3, tf.qint8, -128, 127), (0.3, -2, tf.qint8, -20, 20),
                                                  (0.07, 5, tf.qint32, -1000, 1000)])
def test_uniform_quantize_dequantize_clip_equal_tf_xla(scale, zp, qtype, lo, hi) -> None:
    """Bit-equal with TF's XLA (which rounds half to even after adding the zero point)."""
    from tfxla_cluster.tf2hlo import lower_function

    def q(v, t=qtype):
        return tf.raw_ops.UniformQuantize(input=v, scales=scale, zero_points=zp, Tout=t, quantization_min_val=lo,
                                          quantization_max_val=hi)

    def programs(v):
        q32 = q(v, tf.qint32)
        return (q(v),
                tf.raw_ops.UniformDequantize(input=q(v), scales=scale, zero_points=zp, Tout=tf.float32,
                                             quantization_min_val=lo, quantization_max_val=hi),
                tf.raw_ops.UniformQuantizedClipByValue(operand=q32, min=q(tf.constant(-1.0), tf.qint32),
                                                       max=q(tf.constant(1.0), tf.qint32), scales=scale,
                                                       zero_points=zp, quantization_min_val=lo,
                                                       quantization_max_val=hi))
    want = [_ints(t) for t in tf.function(programs, jit_compile=True)(UQ_X)]
    got = lower_function(tf.function(programs).get_concrete_function(tf.TensorSpec([12], tf.float32)), UQ_X).run(UQ_X)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g).astype(np.float64), w.astype(np.float64))


def test_uniform_quantize_per_axis_equals_tf_xla() -> None:
    from tfxla_cluster.tf2hlo import lower_function

    x = UQ_X.reshape(4, 3)
    scales, zps = np.array([0.5, 0.25, 0.1], np.float32), np.array([1, -3, 0], np.int32)

    def fn(v):
        q = tf.raw_ops.UniformQuantize(input=v, scales=scales, zero_points=zps, Tout=tf.qint8, quantization_axis=1,
                                       quantization_min_val=-128, quantization_max_val=127)
        return q, tf.raw_ops.UniformDequantize(input=q, scales=scales, zero_points=zps, Tout=tf.float32,
                                               quantization_axis=1, quantization_min_val=-128,
                                               quantization_max_val=127)
    want = [_ints(t) for t in tf.function(fn, jit_compile=True)(x)]
    got = lower_function(tf.function(fn).get_concrete_function(tf.TensorSpec([4, 3], tf.float32)), x).run(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g).astype(np.float64), w.astype(np.float64))


@pytest.mark.parametrize("s_l,z_l,s_r,z_r,s_o,z_o", [(0.07, 3, 0.11, -1, 0.13, 2), (0.5, 0, 0.05, 7, 0.021, -5)])
def test_uniform_requantize_and_add_equal_tf_xla(s_l, z_l, s_r, z_r, s_o, z_o) -> None:
    from tfxla_cluster.tf2hlo import lower_function

    rng = np.random.default_rng(7)
    x, y = (rng.uniform(-4, 4, 64).astype(np.float32) for _ in range(2))

    def q(v, s, z):
        return tf.raw_ops.UniformQuantize(input=v, scales=s, zero_points=z, Tout=tf.qint32,
                                          quantization_min_val=-1000, quantization_max_val=1000)

    def fn(v, w):
        req = tf.raw_ops.UniformRequantize(
            input=q(v, s_l, z_l), input_scales=s_l, input_zero_points=z_l, output_scales=s_o, output_zero_points=z_o,
            Tout=tf.qint8, input_quantization_min_val=-1000, input_quantization_max_val=1000,
            output_quantization_min_val=-128, output_quantization_max_val=127)
        add = tf.raw_ops.UniformQuantizedAdd(
            lhs=q(v, s_l, z_l), rhs=q(w, s_r, z_r), lhs_scales=s_l, lhs_zero_points=z_l, rhs_scales=s_r,
            rhs_zero_points=z_r, output_scales=s_o, output_zero_points=z_o, lhs_quantization_min_val=-1000,
            lhs_quantization_max_val=1000, rhs_quantization_min_val=-1000, rhs_quantization_max_val=1000,
            output_quantization_min_val=-1000, output_quantization_max_val=1000)
        return req, add
    want = [_ints(t) for t in tf.function(fn, jit_compile=True)(x, y)]
    spec = tf.TensorSpec([64], tf.float32)
    got = lower_function(tf.function(fn).get_concrete_function(spec, spec), x, y).run(x, y)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g).astype(np.int64), w.astype(np.int64))


def _uq_dot(l, r, ls, lz, rs, rz, os_, oz, **axes):
    return tf.raw_ops.UniformQuantizedDot(
        lhs=l, rhs=r, lhs_scales=ls, lhs_zero_points=lz, rhs_scales=rs, rhs_zero_points=rz, output_scales=os_,
        output_zero_points=oz, Tout=tf.qint32, lhs_quantization_min_val=-128, lhs_quantization_max_val=127,
        rhs_quantization_min_val=-127, rhs_quantization_max_val=127, output_quantization_min_val=-(2 ** 31),
        output_quantization_max_val=2 ** 31 - 1, **axes)


@pytest.mark.parametrize("seed", range(6))
def test_uniform_quantized_dot_equals_tf_xla_bit_for_bit(seed) -> None:
    """Random int8 operands and scales: TF's XLA rescales the s32 accumulator and the zero points' cross
    terms separately, truncating each product to s32; every element must be the same integer."""
    from tfxla_cluster.tf2hlo import lower_function

    # (the rescale factor must be folded as TF folds it: f32 scales combined in f64, rounded once; an f32
    # product then quotient differs in 8 of 30 such draws)
    rng = np.random.default_rng(100 + seed)
    l = rng.integers(-128, 128, (9, 33)).astype(np.int8)
    r = rng.integers(-127, 128, (33, 6)).astype(np.int8)
    params = (np.float32(rng.uniform(0.001, 3)), np.int32(rng.integers(-128, 127)), np.float32(rng.uniform(0.001, 3)),
              np.int32(rng.integers(-127, 127)), np.float32(rng.uniform(0.0001, 0.9)), np.int32(rng.integers(-500, 500)))
    fn = lambda a, c: _uq_dot(a, c, *params)  # noqa: E731
    want = _ints(tf.function(fn, jit_compile=True)(tf.bitcast(tf.constant(l), tf.qint8),
                                                     tf.bitcast(tf.constant(r), tf.qint8)))
    concrete = tf.function(fn).get_concrete_function(tf.TensorSpec([9, 33], tf.qint8), tf.TensorSpec([33, 6], tf.qint8))
    got = lower_function(concrete, l, r).run(l, r)[0]
    np.testing.assert_array_equal(np.asarray(got), want)


def test_uniform_quantized_dot_per_axis_is_refused_as_tf_xla_refuses_it() -> None:
    from tfxla_cluster.errors import UnimplementedError
    from tfxla_cluster.tf2hlo import lower_function

    fn = lambda a, c: _uq_dot(a, c, 0.5, 3, [0.25, 0.3], [-2, 1], [0.07, 0.11], [5, -3], rhs_quantization_axis=1,  # noqa: E731
                              output_quantization_axis=1)
    specs = (tf.TensorSpec([2, 3], tf.qint8), tf.TensorSpec([3, 2], tf.qint8))
    q = tf.bitcast(tf.zeros([2, 3], tf.int8), tf.qint8), tf.bitcast(tf.zeros([3, 2], tf.int8), tf.qint8)
    with pytest.raises(tf.errors.InvalidArgumentError, match="legaliz"):
        tf.function(fn, jit_compile=True)(*q)
    with pytest.raises(UnimplementedError, match="per-axis"):
        lower_function(tf.function(fn).get_concrete_function(*specs))


def _uq_conv_dnums(nhwc: bool) -> bytes:
    from tensorflow.core.util.quantization import uniform_quant_ops_attr_pb2 as uq

    f, sp = (3, [1, 2]) if nhwc else (1, [2, 3])
    return uq.UniformQuantizedConvolutionDimensionNumbersAttr(
        input_batch_dimension=0, input_feature_dimension=f, input_spatial_dimensions=sp,
        kernel_output_feature_dimension=3 if nhwc else 0, kernel_input_feature_dimension=2 if nhwc else 1,
        kernel_spatial_dimensions=[0, 1] if nhwc else [2, 3], output_batch_dimension=0, output_feature_dimension=f,
        output_spatial_dimensions=sp).SerializeToString()


# (nhwc, input shape, kernel shape, padding, strides, rhs dilation, explicit padding, output range)
UQ_CONVS = [
    (False, (2, 3, 6, 5), (4, 3, 3, 3), "SAME", [1, 1], [1, 1], [], (-(2 ** 31), 2 ** 31 - 1)),
    (False, (1, 2, 7, 7), (3, 2, 3, 2), "VALID", [2, 1], [1, 2], [], (-500, 500)),
    (True, (2, 6, 6, 3), (3, 3, 3, 4), "SAME", [2, 2], [1, 1], [], (-(2 ** 31), 2 ** 31 - 1)),
    (True, (1, 5, 6, 2), (2, 3, 2, 3), "EXPLICIT", [1, 1], [2, 1], [1, 2, 0, 1], (-1000, 1000)),
]


@pytest.mark.parametrize("case", range(len(UQ_CONVS)))
def test_uniform_quantized_convolution_equals_tf_xla_bit_for_bit(case) -> None:
    """TF's XLA dequantizes both operands, convolves in f32 and requantizes (clamp, round half to even)."""
    from tfxla_cluster.tf2hlo import lower_function

    nhwc, xs, ws, padding, strides, rdil, explicit, (lo, hi) = UQ_CONVS[case]
    rng = np.random.default_rng(case)
    x = rng.integers(-128, 128, xs).astype(np.int8)
    w = rng.integers(-127, 128, ws).astype(np.int8)
    ls, rs, os_ = (np.float32(v) for v in rng.uniform([0.01, 0.01, 0.05], [0.5, 0.5, 3.0]))
    lz, rz, oz = (int(v) for v in rng.integers(-20, 20, 3))

    def fn(a, c):
        return tf.raw_ops.UniformQuantizedConvolution(
            lhs=a, rhs=c, lhs_scales=ls, lhs_zero_points=lz, rhs_scales=rs, rhs_zero_points=rz, output_scales=os_,
            output_zero_points=oz, Tout=tf.qint32, lhs_quantization_min_val=-128, lhs_quantization_max_val=127,
            rhs_quantization_min_val=-127, rhs_quantization_max_val=127, output_quantization_min_val=lo,
            output_quantization_max_val=hi, padding=padding, explicit_padding=explicit, window_strides=strides,
            lhs_dilation=[1, 1], rhs_dilation=rdil, feature_group_count=1, batch_group_count=1,
            dimension_numbers=_uq_conv_dnums(nhwc))
    want = _ints(tf.function(fn, jit_compile=True)(tf.bitcast(tf.constant(x), tf.qint8),
                                                     tf.bitcast(tf.constant(w), tf.qint8)))
    concrete = tf.function(fn).get_concrete_function(tf.TensorSpec(xs, tf.qint8), tf.TensorSpec(ws, tf.qint8))
    got = lower_function(concrete, x, w).run(x, w)[0]
    np.testing.assert_array_equal(np.asarray(got), want)


def test_uniform_quantized_convolution_refusals_match_tf_xla() -> None:
    """Per-axis parameters and the empty default dimension_numbers: TF's XLA fails to legalize both."""
    from tfxla_cluster.errors import TfXlaError
    from tfxla_cluster.tf2hlo import lower_function

    def make(per_axis: bool, dnums: bytes):
        def fn(a, c):
            return tf.raw_ops.UniformQuantizedConvolution(
                lhs=a, rhs=c, lhs_scales=0.2, lhs_zero_points=3, rhs_scales=[0.1, 0.2] if per_axis else 0.1,
                rhs_zero_points=[0, 0] if per_axis else 0, output_scales=0.5, output_zero_points=1, Tout=tf.qint32,
                lhs_quantization_min_val=-128, lhs_quantization_max_val=127, rhs_quantization_min_val=-127,
                rhs_quantization_max_val=127, output_quantization_min_val=-1000, output_quantization_max_val=1000,
                padding="VALID", window_strides=[1, 1], lhs_dilation=[1, 1], rhs_dilation=[1, 1],
                feature_group_count=1, batch_group_count=1, dimension_numbers=dnums,
                rhs_quantization_axis=0 if per_axis else -1)
        return fn
    x, w = np.zeros((1, 1, 3, 3), np.int8), np.zeros((2, 1, 2, 2), np.int8)
    for fn, match in ((make(True, _uq_conv_dnums(False)), "per-axis"), (make(False, b""), "unique")):
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.function(fn, jit_compile=True)(tf.bitcast(tf.constant(x), tf.qint8), tf.bitcast(tf.constant(w), tf.qint8))
        with pytest.raises(TfXlaError, match=match):
            lower_function(tf.function(fn).get_concrete_function(tf.TensorSpec(x.shape, tf.qint8),
                                                                  tf.TensorSpec(w.shape, tf.qint8)))
