"""Convolutions, pooling and fused batch norm against TF eager.

Tolerances: a convolution output sums kh·kw·c products in a different order than TF's kernels:
f32 rtol/atol 1e-5; half types accumulate in f32 in both, one final rounding (default half tolerances,
doubled). Batch norm statistics are E[x²]-E[x]² (XLA's expander) against TF's two-pass variance:
f32 1e-5, half types 2e-2 (bf16 5e-2).
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import FLOATS, Case, raw, run_batch, values, xla_dtypes

TOL = {"f32": {"rtol": 1e-5, "atol": 1e-5}, "f64": {"rtol": 1e-11, "atol": 1e-11},
       "f16": {"rtol": 4e-3, "atol": 4e-3}, "bf16": {"rtol": 3e-2, "atol": 3e-2}}

CONV = [  # (input NHWC, filter, strides, padding, dilations)
    ((1, 5, 5, 2), (3, 3, 2, 4), [1, 1, 1, 1], "SAME", [1, 1, 1, 1]),
    ((2, 6, 7, 3), (2, 3, 3, 2), [1, 2, 3, 1], "VALID", [1, 1, 1, 1]),
    ((1, 7, 7, 2), (3, 2, 2, 3), [1, 2, 2, 1], "SAME", [1, 1, 1, 1]),
    ((1, 8, 8, 2), (3, 3, 2, 2), [1, 1, 1, 1], "VALID", [1, 2, 2, 1]),
    ((1, 4, 4, 4), (1, 1, 2, 6), [1, 1, 1, 1], "SAME", [1, 1, 1, 1]),  # grouped: 2 groups
]


def conv_cases():
    out = []
    for dt in xla_dtypes("Conv2D", among=FLOATS):
        for xs, ws, st, pad, dil in (CONV if dt == "f32" else CONV[:2]):
            out.append(Case(f"Conv2D[{dt}] {xs} {ws} {st} {pad} {dil}",
                            raw("Conv2D", strides=st, padding=pad, dilations=dil),
                            [values(dt, xs), values(dt, ws, seed=1)], **TOL[dt]))
    out.append(Case("Conv2D NCHW", lambda x, w: tf.nn.conv2d(x, w, [1, 1, 2, 1], "SAME", data_format="NCHW"),
                    [values("f32", (1, 2, 5, 5)), values("f32", (3, 3, 2, 2), seed=1)], **TOL["f32"]))
    out.append(Case("Conv2D EXPLICIT", raw("Conv2D", strides=[1, 1, 1, 1], padding="EXPLICIT",
                                           explicit_paddings=[0, 0, 1, 2, 0, 1, 0, 0]),
                    [values("f32", (1, 4, 4, 2)), values("f32", (3, 3, 2, 2), seed=1)], **TOL["f32"]))
    for dt in xla_dtypes("DepthwiseConv2dNative", among=FLOATS):
        out.append(Case(f"DepthwiseConv2dNative[{dt}]", raw("DepthwiseConv2dNative", strides=[1, 2, 2, 1],
                                                             padding="SAME"),
                        [values(dt, (1, 5, 5, 3)), values(dt, (3, 3, 3, 2), seed=1)], **TOL[dt]))
    for xs, ws, st, pad, dil in CONV[:4]:
        fwd = tf.function(lambda x, w, st=st, pad=pad, dil=dil: tf.raw_ops.Conv2D(
            input=x, filter=w, strides=st, padding=pad, dilations=dil), autograph=False)
        ys = tuple(fwd.get_concrete_function(tf.TensorSpec(xs), tf.TensorSpec(ws)).outputs[0].shape)
        out.append(Case(f"Conv2DBackpropInput {xs} {st} {pad} {dil}",
                        lambda w, dy, xs=xs, st=st, pad=pad, dil=dil: tf.raw_ops.Conv2DBackpropInput(
                            input_sizes=list(xs), filter=w, out_backprop=dy, strides=st, padding=pad,
                            dilations=dil), [values("f32", ws, seed=1), values("f32", ys, seed=2)], **TOL["f32"]))
        out.append(Case(f"Conv2DBackpropFilter {xs} {st} {pad} {dil}",
                        lambda x, dy, ws=ws, st=st, pad=pad, dil=dil: tf.raw_ops.Conv2DBackpropFilter(
                            input=x, filter_sizes=list(ws), out_backprop=dy, strides=st, padding=pad,
                            dilations=dil), [values("f32", xs), values("f32", ys, seed=2)],
                        rtol=2e-5, atol=2e-5))
    # Depthwise backprops (MobileNet/EfficientNet training steps) and grouped backprops.
    for xs, ws, st, pad, dil, depthwise in [((1, 5, 5, 3), (3, 3, 3, 2), [1, 2, 2, 1], "SAME", [1, 1, 1, 1], True),
                                            ((2, 6, 7, 4), (2, 3, 4, 1), [1, 1, 1, 1], "VALID", [1, 2, 2, 1], True),
                                            ((1, 4, 4, 4), (1, 1, 2, 6), [1, 1, 1, 1], "SAME", [1, 1, 1, 1], False),
                                            ((1, 6, 6, 6), (3, 3, 2, 3), [1, 2, 2, 1], "SAME", [1, 1, 1, 1], False)]:
        fwd_op = "DepthwiseConv2dNative" if depthwise else "Conv2D"
        fwd = tf.function(lambda x, w, op=fwd_op, st=st, pad=pad, dil=dil: getattr(tf.raw_ops, op)(
            input=x, filter=w, strides=st, padding=pad, dilations=dil), autograph=False)
        ys = tuple(fwd.get_concrete_function(tf.TensorSpec(xs), tf.TensorSpec(ws)).outputs[0].shape)
        bi_op = "DepthwiseConv2dNativeBackpropInput" if depthwise else "Conv2DBackpropInput"
        bf_op = "DepthwiseConv2dNativeBackpropFilter" if depthwise else "Conv2DBackpropFilter"
        out.append(Case(f"{bi_op} {xs} {ws} {st} {pad} {dil}",
                        lambda w, dy, op=bi_op, xs=xs, st=st, pad=pad, dil=dil: getattr(tf.raw_ops, op)(
                            input_sizes=list(xs), filter=w, out_backprop=dy, strides=st, padding=pad,
                            dilations=dil), [values("f32", ws, seed=1), values("f32", ys, seed=2)], **TOL["f32"]))
        out.append(Case(f"{bf_op} {xs} {ws} {st} {pad} {dil}",
                        lambda x, dy, op=bf_op, ws=ws, st=st, pad=pad, dil=dil: getattr(tf.raw_ops, op)(
                            input=x, filter_sizes=list(ws), out_backprop=dy, strides=st, padding=pad,
                            dilations=dil), [values("f32", xs), values("f32", ys, seed=2)], rtol=2e-5, atol=2e-5))
    return out


POOL = [((1, 5, 5, 2), [1, 2, 2, 1], [1, 2, 2, 1], "VALID"), ((2, 5, 6, 1), [1, 3, 3, 1], [1, 2, 2, 1], "SAME"),
        ((1, 4, 4, 3), [1, 2, 1, 1], [1, 1, 2, 1], "SAME")]


def pool_cases():
    out = []
    for op in ("MaxPool", "AvgPool"):
        for dt in xla_dtypes(op, among=FLOATS):
            for xs, k, s, pad in POOL:
                out.append(Case(f"{op}[{dt}] {xs} {k} {s} {pad}", raw(op, ksize=k, strides=s, padding=pad),
                                [values(dt, xs)], **TOL[dt]))
    out.append(Case("MaxPool NCHW", lambda x: tf.nn.max_pool2d(x, 2, 2, "SAME", data_format="NCHW"),
                    [values("f32", (1, 2, 5, 5))]))
    for xs, k, s, pad in POOL:
        mp = tf.function(lambda x, k=k, s=s, pad=pad: tf.raw_ops.MaxPool(input=x, ksize=k, strides=s, padding=pad),
                         autograph=False)
        ys = tuple(mp.get_concrete_function(tf.TensorSpec(xs)).outputs[0].shape)
        x = values("f32", xs)
        out.append(Case(f"MaxPoolGrad {xs} {k} {s} {pad}",
                        lambda x, g, k=k, s=s, pad=pad: tf.raw_ops.MaxPoolGrad(
                            orig_input=x, orig_output=tf.raw_ops.MaxPool(input=x, ksize=k, strides=s, padding=pad),
                            grad=g, ksize=k, strides=s, padding=pad), [x, values("f32", ys, seed=1)], **TOL["f32"]))
        out.append(Case(f"AvgPoolGrad {xs} {k} {s} {pad}",
                        lambda g, xs=xs, k=k, s=s, pad=pad: tf.raw_ops.AvgPoolGrad(
                            orig_input_shape=list(xs), grad=g, ksize=k, strides=s, padding=pad),
                        [values("f32", ys, seed=1)], **TOL["f32"]))
    return out


BN_TOL = {"f32": {"rtol": 1e-4, "atol": 1e-4}, "f16": {"rtol": 2e-2, "atol": 2e-2},
          "bf16": {"rtol": 5e-2, "atol": 5e-2}}


def batch_norm_cases():
    out = []
    for dt in xla_dtypes("FusedBatchNormV3", among=FLOATS):
        if dt == "f64":
            continue
        x = values(dt, (2, 3, 3, 4))
        sc, off = values("f32", (4,), "pos", seed=1), values("f32", (4,), seed=2)
        mean, var = values("f32", (4,), seed=3), values("f32", (4,), "pos", seed=4)
        for training in (True, False):
            fn = lambda x, sc, off, m, v, t=training: tf.raw_ops.FusedBatchNormV3(
                x=x, scale=sc, offset=off, mean=m, variance=v, epsilon=0.001, is_training=t)[:5]
            # Inference: TF's CPU kernel without oneDNN leaves reserve_space_1/2 uninitialised; TF's XLA
            # defines them (the population mean and variance), so they are compared with TF's XLA.
            out.append(Case(f"FusedBatchNormV3[{dt}] training={training}", fn, [x, sc, off, mean, var],
                            tf_undefined=() if training else (3, 4), **BN_TOL[dt]))
        fn = lambda x, sc, off, m, v: tf.raw_ops.FusedBatchNormV3(
            x=x, scale=sc, offset=off, mean=m, variance=v, epsilon=0.001, is_training=True,
            exponential_avg_factor=0.25)[:3]
        out.append(Case(f"FusedBatchNormV3[{dt}] avg", fn, [x, sc, off, mean, var], **BN_TOL[dt]))
    x = values("f32", (2, 4, 3, 3))
    out.append(Case("FusedBatchNormV3 NCHW", lambda x, s, o: tf.raw_ops.FusedBatchNormV3(
        x=x, scale=s, offset=o, mean=tf.zeros([4]), variance=tf.ones([4]), data_format="NCHW")[:3],
        [x, values("f32", (4,), seed=1), values("f32", (4,), seed=2)], **BN_TOL["f32"]))
    for training in (True, False):
        def grad(dy, x, sc, t=training):
            _, m, v, r1, r2, r3 = tf.raw_ops.FusedBatchNormV3(x=x, scale=sc, offset=tf.zeros([4]),
                                                              mean=tf.zeros([4]) + 0.1, variance=tf.ones([4]),
                                                              epsilon=0.001, is_training=True)
            if not t:
                r1, r2 = tf.zeros([4]) + 0.1, tf.ones([4]) * 1.5
            return tf.raw_ops.FusedBatchNormGradV3(y_backprop=dy, x=x, scale=sc, reserve_space_1=r1,
                                                   reserve_space_2=r2, reserve_space_3=r3, epsilon=0.001,
                                                   is_training=t)[:3]
        out.append(Case(f"FusedBatchNormGradV3 training={training}", grad,
                        [values("f32", (2, 3, 3, 4), seed=5), values("f32", (2, 3, 3, 4)),
                         values("f32", (4,), "pos", seed=1)], **BN_TOL["f32"]))
    return out


BATCHES = {"conv": conv_cases, "pool": pool_cases, "batch_norm": batch_norm_cases}


@pytest.mark.parametrize("name", list(BATCHES))
def test_batch(name):
    run_batch(BATCHES[name]())


def test_reserve_space_outputs_have_tf_shapes():
    """Output shapes equal TF's XLA's. (TF's CPU kernel gives reserve_space_3 shape () without oneDNN and
    (0,) with it; TF's XLA gives (0,) in both modes, and a cluster's outputs are XLA's.)"""
    from tfxla_cluster.tf2hlo import lower_function

    f = tf.function(lambda x: tf.raw_ops.FusedBatchNormV3(x=x, scale=tf.ones([2]), offset=tf.zeros([2]),
                                                          mean=tf.zeros([2]), variance=tf.ones([2])), autograph=False)
    x = values("f32", (1, 2, 2, 2))
    got = lower_function(f.get_concrete_function(tf.TensorSpec(x.shape)), x).run(x)
    want = tf.function(f.python_function, jit_compile=True, autograph=False)(x)
    assert [g.shape for g in got] == [tuple(w.shape) for w in want]


def _fused_batch_norm_ex(x, scale, offset, mean, var, side=None, mode="Relu", training=False):
    """A ``_FusedBatchNormEx`` node, as grappler's remapper makes it (no Python op wrapper exists)."""
    from tensorflow.core.framework import attr_value_pb2 as av

    attrs = {"T": av.AttrValue(type=x.dtype.as_datatype_enum), "U": av.AttrValue(type=tf.float32.as_datatype_enum),
             "epsilon": av.AttrValue(f=0.001), "is_training": av.AttrValue(b=training),
             "activation_mode": av.AttrValue(s=mode.encode()), "data_format": av.AttrValue(s=b"NHWC"),
             "num_side_inputs": av.AttrValue(i=0 if side is None else 1)}
    inputs = [x, scale, offset, mean, var] + ([] if side is None else [side])
    op = tf.compat.v1.get_default_graph()._create_op_internal(
        "_FusedBatchNormEx", inputs, [x.dtype] + [tf.float32] * 5, name="bn_ex", attrs=attrs)
    return op.outputs[:5]


@pytest.mark.parametrize("mode", ["Relu", "Identity"])
@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("with_side", [False, True])
def test_fused_batch_norm_ex_equals_tf_xla(mode, training, with_side):
    """The remapper's _FusedBatchNormEx (oneDNN mode makes it from FusedBatchNormV3 [+ Add] + Relu) equals
    TF's XLA. TF's own CPU kernel runs only some attribute combinations, so TF's XLA is the reference."""
    from tfxla_cluster.tf2hlo import lower_function

    args = [values("f32", (2, 3, 3, 4)), values("f32", (4,), "pos", seed=1), values("f32", (4,), seed=2),
            values("f32", (4,), seed=3), values("f32", (4,), "pos", seed=4)]
    if with_side:
        args.append(values("f32", (2, 3, 3, 4), seed=5))

    def fn(*a):
        return _fused_batch_norm_ex(*a[:5], side=a[5] if with_side else None, mode=mode, training=training)
    want = tf.function(fn, jit_compile=True, autograph=False)(*args)
    concrete = tf.function(fn, autograph=False).get_concrete_function(*[tf.TensorSpec(a.shape) for a in args])
    got = lower_function(concrete, *args).run(*args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), **BN_TOL["f32"])
