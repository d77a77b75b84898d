"""Regenerate the TF-produced HLO goldens in tests/hlo/data/tf/ (needs TensorFlow; ~20 s).

For each case: ``<name>.hlo.txt`` and ``<name>.optimized_hlo.txt`` from
``tf.function(f, jit_compile=True).experimental_get_compiler_ir(*args)(stage=...)``, and
``<name>.npz`` holding the inputs (``arg0``, ...) and TF's jit-compiled outputs (``out0``, ...).

    python tests/hlo/data/make_tf_goldens.py
"""
from __future__ import annotations

import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

OUT = pathlib.Path(__file__).parent / "tf"
rs = np.random.RandomState(0)
x = rs.randn(8, 16).astype(np.float32)
w = rs.randn(16, 4).astype(np.float32)
b = rs.randn(4).astype(np.float32)
img = rs.rand(2, 8, 8, 3).astype(np.float32)
ker = rs.rand(3, 3, 3, 5).astype(np.float32)
ints = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)

CASES = {
    "mlp": (lambda x, w, b: tf.nn.relu(tf.matmul(x, w) + b), (x, w, b)),
    "softmax": (lambda x: tf.nn.softmax(x), (x,)),
    "reduce": (lambda x: (tf.reduce_sum(x, axis=1), tf.reduce_max(x), tf.reduce_mean(x, axis=0)), (x,)),
    "conv": (lambda i, k: tf.nn.max_pool2d(tf.nn.relu(tf.nn.conv2d(i, k, strides=1, padding="SAME")), 2, 2,
                                           "VALID"), (img, ker)),
    "misc": (lambda x: (tf.argmax(x, axis=1), tf.sort(x, axis=1), tf.gather(x, [1, 3], axis=1),
                        tf.cumsum(x, axis=1), tf.math.top_k(x, 3).values), (x,)),
    "ints": (lambda i: (i // 3, i % 3, tf.bitwise.left_shift(i, 2), tf.cast(i, tf.float16), tf.transpose(i),
                        tf.reverse(i, [0]), tf.pad(i, [[1, 0], [0, 2]]), tf.concat([i, i], 0), i[1:3, ::2],
                        tf.where(i > 3, i, -i)), (ints,)),
    "while": (lambda x: tf.while_loop(lambda j, a: j < 3, lambda j, a: (j + 1, a * 2.0), (0, x))[1], (x,)),
    "cond": (lambda x, p: tf.cond(p, lambda: x * 2.0, lambda: x - 1.0), (x, np.array(True))),
    "rng": (lambda x: tf.random.stateless_uniform([4, 4], seed=[1, 2]) + x[:4, :4], (x,)),
    "grad": (lambda x, w: tf.gradients(tf.reduce_sum(tf.nn.sigmoid(tf.matmul(x, w))), [x, w]), (x, w)),
    "maxpoolgrad": (lambda i: tf.gradients(tf.reduce_sum(tf.nn.max_pool2d(i, 3, 2, "SAME")), [i]), (img,)),
    "convgrad": (lambda i, k: tf.gradients(tf.reduce_sum(tf.nn.conv2d(i, k, strides=2, padding="SAME") ** 2),
                                           [i, k]), (img, ker)),
    "scatter": (lambda x: tf.tensor_scatter_nd_add(x, [[1], [3], [1]], x[:3] * 2), (x,)),
    "math": (lambda x: (tf.math.erf(x), tf.math.floormod(x, 0.7), tf.math.pow(tf.abs(x), 1.5), tf.math.round(x),
                        tf.math.sign(x), tf.math.atan2(x, x + 1.0), tf.clip_by_value(x, -0.5, 0.5),
                        tf.cast(x * 100, tf.int8), tf.cast(x, tf.bfloat16)), (x,)),
    "dconv": (lambda i, k: tf.nn.depthwise_conv2d(i, k[:, :, :3, :1], strides=[1, 2, 2, 1], padding="VALID"),
              (img, ker)),
    "resize": (lambda i: tf.image.resize(i, [5, 7]), (img,)),
    "einsum": (lambda a, c: tf.einsum("bij,jk->bki", a, c), (rs.randn(3, 4, 5).astype(np.float32),
                                                              rs.randn(5, 2).astype(np.float32))),
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (fn, args) in CASES.items():
        tf_args = [tf.constant(a) for a in args]
        jitted = tf.function(fn, jit_compile=True)
        for stage in ("hlo", "optimized_hlo"):
            (OUT / f"{name}.{stage}.txt").write_text(jitted.experimental_get_compiler_ir(*tf_args)(stage=stage))
        outs = jitted(*tf_args)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        arrays = {f"arg{i}": a for i, a in enumerate(args)}
        arrays.update({f"out{i}": o.numpy() for i, o in enumerate(outs)})
        np.savez(OUT / f"{name}.npz", **arrays)
        print("wrote", name)


if __name__ == "__main__":
    main()
