"""NN and image ops (colour spaces, hue/saturation/contrast, image patches, ResizeBilinearGrad, LRN/LRNGrad,
ReverseSequence, MirrorPadGrad, the N-d Conv, the MaxPoolGradGrad family) against TF's own XLA
(``jit_compile=True``) and against TF eager's CPU kernels."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import Case, raw, run_batch, values
from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.tf2hlo import lower_function

IMG = np.random.default_rng(0).uniform(0, 1, (2, 3, 4, 3)).astype(np.float32)
X4 = values("f32", (2, 3, 4, 7))
def mpgg(x, g):
    y = tf.nn.max_pool2d(x, 2, 2, "SAME")
    return tf.raw_ops.MaxPoolGradGrad(orig_input=x, orig_output=y, grad=g, ksize=[1,2,2,1], strides=[1,2,2,1], padding="SAME")
def mpgg3(x, g):
    y = tf.nn.max_pool3d(x, 2, 1, "VALID")
    return tf.raw_ops.MaxPool3DGradGrad(orig_input=x, orig_output=y, grad=g, ksize=[1,2,2,2,1], strides=[1,1,1,1,1], padding="VALID")
def mpgg2(x, g):
    y = tf.nn.max_pool2d(x, [2,3], [1,2], "VALID")
    return tf.raw_ops.MaxPoolGradGradV2(orig_input=x, orig_output=y, grad=g, ksize=[1,2,3,1], strides=[1,1,2,1], padding="VALID")


def cases():
    img = IMG
    return [
     Case("RGBToHSV", raw("RGBToHSV"), [img]),
     Case("HSVToRGB", raw("HSVToRGB"), [img]),
     Case("AdjustHue", lambda x: tf.raw_ops.AdjustHue(images=x, delta=0.3), [img]),
     Case("AdjustHue neg", lambda x: tf.raw_ops.AdjustHue(images=x, delta=-0.7), [img]),
     Case("AdjustSaturation", lambda x: tf.raw_ops.AdjustSaturation(images=x, scale=1.7), [img]),
     Case("AdjustContrastv2", lambda x: tf.raw_ops.AdjustContrastv2(images=x, contrast_factor=1.7), [img]),
     Case("ExtractImagePatches SAME", lambda x: tf.raw_ops.ExtractImagePatches(images=x, ksizes=[1,2,3,1], strides=[1,2,1,1], rates=[1,1,2,1], padding="SAME"), [values("f32",(1,5,6,2))]),
     Case("ExtractImagePatches VALID", lambda x: tf.raw_ops.ExtractImagePatches(images=x, ksizes=[1,2,2,1], strides=[1,1,2,1], rates=[1,2,1,1], padding="VALID"), [values("i32",(2,5,6,2))]),
     Case("ResizeBilinearGrad", lambda g, x: tf.raw_ops.ResizeBilinearGrad(grads=g, original_image=x, half_pixel_centers=True), [values("f32",(1,5,7,2)), values("f32",(1,3,4,2))], rtol=1e-5, atol=1e-5),
     Case("ResizeBilinearGrad align", lambda g, x: tf.raw_ops.ResizeBilinearGrad(grads=g, original_image=x, align_corners=True), [values("f32",(2,3,2,1)), values("f32",(2,4,5,1))], rtol=1e-5, atol=1e-5),
     Case("LRN", lambda x: tf.raw_ops.LRN(input=x, depth_radius=2, bias=1.5, alpha=0.3, beta=0.75), [X4], rtol=1e-5, atol=1e-6),
     Case("LRNGrad", lambda g, x: tf.raw_ops.LRNGrad(input_grads=g, input_image=x, output_image=tf.raw_ops.LRN(input=x, depth_radius=2, bias=1.5, alpha=0.3, beta=0.75), depth_radius=2, bias=1.5, alpha=0.3, beta=0.75), [values("f32",(2,3,4,7), seed=1), X4], rtol=1e-4, atol=1e-5),
     Case("ReverseSequence", lambda x, l: tf.raw_ops.ReverseSequence(input=x, seq_lengths=l, seq_dim=1, batch_dim=0), [values("f32",(3,5,2)), np.array([5,0,3], np.int64)]),
     Case("ReverseSequence b2 s0", lambda x, l: tf.raw_ops.ReverseSequence(input=x, seq_lengths=l, seq_dim=0, batch_dim=2), [values("i32",(4,2,3)), np.array([1,4,2], np.int32)]),
     Case("MirrorPadGrad REFLECT", lambda g: tf.raw_ops.MirrorPadGrad(input=g, paddings=[[1,2],[2,0]], mode="REFLECT"), [values("f32",(7,6))]),
     Case("MirrorPadGrad SYMMETRIC", lambda g: tf.raw_ops.MirrorPadGrad(input=g, paddings=[[2,1],[0,3],[1,1]], mode="SYMMETRIC"), [values("i32",(7,7,4))]),
     Case("Conv 2d", lambda x, w: tf.raw_ops.Conv(input=x, filter=w, strides=[1,1,2,1], padding="SAME", dilations=[1,2,1,1]), [values("f32",(2,5,6,4)), values("f32",(2,3,4,3),seed=1)], rtol=1e-5, atol=1e-5),
     Case("Conv batch_dims=2 channels_first", lambda x, w: tf.raw_ops.Conv(input=x, filter=w, strides=[1,1,1,1], padding="VALID", data_format="CHANNELS_FIRST", batch_dims=2), [values("f32",(2,2,4,5,5)), values("f32",(2,2,4,3),seed=1)], rtol=1e-5, atol=1e-5),
     Case("Conv 3d grouped", lambda x, w: tf.raw_ops.Conv(input=x, filter=w, strides=[1,1,2,1,1], padding="SAME", groups=2), [values("f32",(1,4,4,3,4)), values("f32",(2,2,1,2,6),seed=1)], rtol=1e-5, atol=1e-5),
     Case("Conv 2d explicit", lambda x, w: tf.raw_ops.Conv(input=x, filter=w, strides=[1,2,1,1], padding="EXPLICIT", explicit_paddings=[0,0,1,2,0,1,0,0]), [values("f32",(1,5,4,2)), values("f32",(2,2,2,3),seed=1)], rtol=1e-5, atol=1e-5),
     Case("MaxPoolGradGrad", mpgg, [values("f32",(2,5,5,3)), values("f32",(2,5,5,3),seed=3)]),
     Case("MaxPoolGradGradV2", mpgg2, [values("f32",(1,5,6,2)), values("f32",(1,5,6,2),seed=3)]),
     Case("MaxPool3DGradGrad", mpgg3, [values("f32",(1,3,3,3,2)), values("f32",(1,3,3,3,2),seed=3)]),
    ]


@pytest.mark.parametrize("reference", ["tf_xla", "tf"])
def test_nn_image_ops(reference: str) -> None:
    run_batch(cases(), reference=reference)


def test_lrn_half_is_rejected_like_tf_xla() -> None:
    x = values("f16", (1, 2, 2, 5))
    fn = lambda v: tf.raw_ops.LRN(input=v, depth_radius=1)  # noqa: E731
    with pytest.raises(tf.errors.OpError, match="mixed precision"):
        tf.function(fn, jit_compile=True)(tf.constant(x))
    with pytest.raises(InvalidArgumentError, match="mixed precision"):
        lower_function(tf.function(fn).get_concrete_function(tf.TensorSpec(x.shape, tf.float16)), x)


BOXES = np.array([[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11], [0, 10.1, 1, 11.1],
                  [0, 100, 1, 101], [1, 1, 0, 0], [5, 5, 6, 6]], np.float32)
SCORES = np.array([0.9, 0.75, 0.6, 0.95, 0.5, 0.3, 0.85, 0.05], np.float32)


def _nms(max_out: int, iou: float, score: float):
    return lambda bx, sc: tf.raw_ops.NonMaxSuppressionV4(boxes=bx, scores=sc, max_output_size=max_out,
                                                         iou_threshold=iou, score_threshold=score,
                                                         pad_to_max_output_size=True)


def nms_cases():
    rng = np.random.default_rng(3)
    rand = np.sort(values("f32", (12, 4), "pos").reshape(12, 2, 2), axis=1).reshape(12, 4) * 3
    return [Case("NMSv4", _nms(3, 0.5, 0.0), [BOXES, SCORES]),
            Case("NMSv4 padded", _nms(7, 0.5, 0.2), [BOXES, SCORES]),
            Case("NMSv4 all boxes, flipped corners", _nms(8, 0.3, -1.0), [BOXES, SCORES]),
            Case("NMSv4 random", _nms(5, 0.4, 0.1), [rand, rng.permutation(12).astype(np.float32) / 12])]


def test_non_max_suppression_v4_equals_tf_xla() -> None:
    """TF's XLA fills the padding with the positions of the first unkept boxes (TF eager with zeros): TF's XLA
    is the reference for the whole output; TF eager agrees on the valid part."""
    run_batch(nms_cases(), reference="tf_xla")
    for case in nms_cases():
        specs = [tf.TensorSpec(a.shape, tf.float32) for a in case.args]
        got = lower_function(tf.function(case.fn).get_concrete_function(*specs), *case.args).run(*case.args)
        idx, valid = case.fn(*case.args)
        assert int(got[1]) == int(valid)
        np.testing.assert_array_equal(got[0][:int(valid)], idx.numpy()[:int(valid)], err_msg=case.label)
