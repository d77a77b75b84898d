"""A small while loop is one kernel in TF 2.21's XLA (SmallWhileLoopHoistingPass's ``xla_cpu_small_call``,
emitted by the legacy IrEmitter): its max/min and clamp of ±denormals and -0 must equal TF's bit for bit
(codegen/small_call.py). Each case is a relu-like op in a while of 1-3 trips, against real TF."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.codegen.row_lanes import AVX2, host_target

OPS = {
    "relu": tf.nn.relu,
    "relu6": tf.nn.relu6,
    "min0": lambda x: tf.minimum(x, tf.zeros_like(x)),
}


def _loop(op, trips: int):
    f = OPS[op]

    def fn(x):
        return tf.while_loop(lambda i, x: i < trips, lambda i, x: (i + 1, f(x)), (tf.constant(0), x))[1]
    return fn


def _denormals(dtype, shape) -> np.ndarray:
    tiny = np.finfo(dtype).tiny
    n = int(np.prod(shape))
    return np.array([(-1) ** k * tiny / (2 + k % 3) for k in range(n)], dtype).reshape(shape)


CASES = [
    # (op, dtype, shape, trips): kept by a masked vector blend in TF's one-kernel loop ...
    ("relu", np.float64, (1, 3, 1), 3),   # fuzz seed 120000360
    ("relu", np.float32, (5, 1), 2),
    ("min0", np.float64, (8, 1), 2),
    ("relu", np.float32, (2, 3, 1), 3),
    ("relu", np.float32, (17, 1), 2),     # 16 kept, the last flushed
    # ... flushed by x86 max/min under DAZ
    ("relu", np.float64, (5, 1), 2),
    ("relu", np.float32, (2, 1), 3),
    ("relu", np.float32, (3,), 2),
    ("relu", np.float64, (3, 2), 2),
    # one trip: TF's WhileLoopSimplifier inlines the body, no small call (flushed)
    ("relu", np.float64, (1, 3, 1), 1),
    # relu6: the legacy clamp is min(6, max(0, x)): -0 and -denormals give +0 after the first trip
    ("relu6", np.float32, (3, 1), 2),
    ("relu6", np.float64, (4,), 3),
    ("relu6", np.float32, (3, 1), 1),
]


@pytest.mark.parametrize("op,dtype,shape,trips", CASES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_small_while_like_tf(op, dtype, shape, trips):
    fn = _loop(op, trips)
    x = tf.constant(_denormals(dtype, shape))
    want = tf.function(fn, jit_compile=True)(x).numpy()
    got = txc.function(fn, jit_compile=True)(x).numpy()
    assert got.tobytes() == want.tobytes(), (got.reshape(-1), want.reshape(-1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_minus_inf_whole_constant_in_small_while_keeps_denormal(dtype):
    """An unfused [1,1] max(x, -inf) in a 2-trip while: TF 2.21's one kernel lets LLVM fold it to x, so ±denormals
    keep their bits (measured: f32 0x3/0x80000003, f64 0x3/0x8000000000000003); the -inf is a whole [1,1]
    constant, not a broadcast scalar."""
    d = np.finfo(dtype).smallest_subnormal * 3
    x = np.array([[d, -d]], dtype).reshape(2, 1, 1)[:, 0]   # two [1,1] inputs, one call each

    def fn(v):
        return tf.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, tf.maximum(y, dtype(-np.inf))), (0, v))[1]
    for v in x:
        got = txc.function(fn, jit_compile=True)(v[None]).numpy()
        assert got.tobytes() == v[None].tobytes()


ARMS = {"relu": tf.nn.relu, "neg": tf.negative, "relu_neg": lambda x: -tf.nn.relu(x), "sign": tf.sign}

COND_CASES = [
    # (true arm, false arm, dtype, loop length): a tf.cond in a 2-trip small while, which TF's LLVM unswitches
    # (fuzz seed 234001616): its max keeps or flushes by the arm's own lengths (codegen/small_call.py)
    ("relu", "sign", np.float32, 5),
    ("relu", "neg", np.float32, 4),        # a full vector: x86 max (kept at the root)
    ("relu", "neg", np.float32, 8),
    ("relu", "neg", np.float64, 4),
    ("relu", "neg", np.float64, 12),
    ("relu", "neg", np.float32, 22),       # groups of 4 from 16 on
    ("relu", "neg", np.float32, 36),       # groups of 8 from 33 on
    ("relu", "neg", np.float64, 38),       # an f64 arm of 38: flushed
    ("relu", "relu_neg", np.float32, 19),  # a relu both arms share
    ("relu_neg", "neg", np.float32, 9),    # -max(x, 0): every element kept
    ("relu_neg", "neg", np.float64, 6),
    ("relu", None, np.float64, 37),        # no cond: the root table from 16 on
    ("relu_neg", None, np.float32, 11),
]


@pytest.mark.parametrize("a1,a2,dtype,n", COND_CASES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_small_while_cond_arm_like_tf(a1, a2, dtype, n):
    tiny = np.finfo(dtype).tiny
    x = np.resize(np.array([tiny / 4, -tiny / 4], dtype), n).reshape(n, 1)
    x[-1] = 90   # any(x > 0) holds: under DAZ the denormals are not > 0
    f1, f2 = ARMS[a1], ARMS.get(a2)

    def body(i, v):
        return i + 1, (f1(v) if f2 is None else tf.cond(tf.reduce_any(v > 0), lambda: f1(v), lambda: f2(v)))

    def fn(v):
        return tf.while_loop(lambda i, v: i < 2, body, (tf.constant(0), v))[1]
    want = tf.function(fn, jit_compile=True)(x).numpy()
    got = txc.function(fn, jit_compile=True)(x).numpy()
    assert got.tobytes() == want.tobytes(), (got.reshape(-1), want.reshape(-1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5,), (3, 2), (5, 1), (15,)])
@pytest.mark.parametrize("op", ["relu", "min0"])
def test_negated_minmax_of_constant_keeps_like_tf(dtype, shape, op):
    """``-relu(x)`` and ``-minimum(x, 0)`` outside a loop: LLVM folds the negate into the select, whose blend
    keeps ±denormals on loops short enough that a plain relu flushes (elemental
    ``_negated_minmax_of_constant``)."""
    x = tf.constant(_denormals(dtype, shape))
    f = OPS[op]

    def fn(v):
        return -f(v)
    want = tf.function(fn, jit_compile=True)(x).numpy()
    got = txc.function(fn, jit_compile=True)(x).numpy()
    assert got.tobytes() == want.tobytes(), (got.reshape(-1), want.reshape(-1))


@pytest.mark.parametrize("dtype,n,w", [(np.float32, 4, 2), (np.float32, 8, 3), (np.float32, 8, 5),
                                       (np.float32, 21, 2), (np.float32, 17, 8), (np.float64, 4, 3),
                                       (np.float64, 4, 2), (np.float64, 12, 6), (np.float64, 24, 2)])
@pytest.mark.parametrize("cond", [False, True])
def test_small_while_rows_like_tf(dtype, n, w, cond):
    """relu over [N, W] rows in a 2-trip while, at the body's root or in a tf.cond's arm (the loop a small
    call or not by its size): the rows and columns TF's vectorised loops keep (elemental
    ``_avx2_scalar_arg_kept``; measured on AVX2)."""
    if host_target(None) != AVX2:
        pytest.skip("TF's row loops measured on an AVX2 host")
    tiny = np.finfo(dtype).tiny
    x = np.full((n, w), tiny / 4, dtype)
    x[1::2] *= -1
    x[-1] = 90

    def body(i, v):
        return i + 1, (tf.cond(tf.reduce_any(v > 0), lambda: tf.nn.relu(v), lambda: -v) if cond else tf.nn.relu(v))

    def fn(v):
        return tf.while_loop(lambda i, v: i < 2, body, (tf.constant(0), v))[1]
    want = tf.function(fn, jit_compile=True)(x).numpy()
    got = txc.function(fn, jit_compile=True)(x).numpy()
    assert got.tobytes() == want.tobytes(), (got.reshape(-1), want.reshape(-1))
