"""Image resize (ResizeBilinear / ResizeNearestNeighbor) against TF eager's CPU kernels, every
align_corners / half_pixel_centers combination TF accepts, up- and downscaling, odd sizes, and the
integer input types (bilinear returns f32). Bilinear uses TF's interpolation formula, so f32 results
agree to the last bit or two (tolerance 1 ulp-ish); nearest neighbour is a pure gather: exact."""
from __future__ import annotations

import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import Case, raw, run_batch, values

FLAGS = [(False, False), (True, False), (False, True)]   # (align_corners, half_pixel_centers)
SIZES = [((1, 4, 4, 2), [6, 6]), ((2, 5, 7, 3), [3, 4]), ((1, 3, 5, 1), [7, 2]), ((1, 1, 1, 2), [3, 3])]


def cases():
    out = []
    for shape, size in SIZES:
        for align, half in FLAGS:
            for op in ("ResizeBilinear", "ResizeNearestNeighbor"):
                out.append(Case(f"{op} {shape}->{size} align={align} half={half}",
                                lambda x, op=op, size=size, align=align, half=half: getattr(tf.raw_ops, op)(
                                    images=x, size=size, align_corners=align, half_pixel_centers=half),
                                [values("f32", shape)], rtol=1e-6, atol=1e-6))
    for dt in ("i32", "f16"):
        for op in ("ResizeBilinear", "ResizeNearestNeighbor"):
            out.append(Case(f"{op}[{dt}]", lambda x, op=op: getattr(tf.raw_ops, op)(
                images=x, size=[5, 3], half_pixel_centers=True), [values(dt, (1, 3, 4, 2))], rtol=1e-3, atol=1e-3))
    out.append(Case("tf.image.resize bilinear+nearest", lambda x: (
        tf.image.resize(x, [6, 6], method="bilinear"), tf.image.resize(x, [8, 8], method="nearest")),
        [values("f32", (1, 4, 4, 2))], rtol=1e-6, atol=1e-6))
    return out


def test_resize_equals_tf() -> None:
    run_batch(cases(), xla="all")
