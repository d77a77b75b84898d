"""The end-to-end proof corpus: tf.functions that go through the whole ``tfxla_cluster.function`` path.

Each entry is a :class:`Case`: a zero-argument *builder* (returning a ``tf_record.Sample``: the plain
Python function, fixed inputs, and the variables it captures, created fresh with fixed values on
every call of the builder, so every run starts from the same state) plus what we know about it:

* ``jit`` — TF itself compiles it with ``jit_compile=True`` (otherwise TF and we must both refuse);
* ``calls`` — how many times it is called in a row (a training loop's steps; variables carry over);
* ``tol`` — the comparison tolerance against TF;
* ``heavy`` — slow enough to be marked ``tfsweep``;
* ``reference`` — TF's answer to compare with: "eager" (default), or "xla" (TF's own
  ``jit_compile=True`` result, where XLA's numbers legitimately differ from TF's kernels: stateless RNG);
  ``reference_auto`` overrides it for auto mode, e.g. "graph" where grappler constant-folds ops before
  TF clusters (their values are then TF's CPU kernels', not XLA's);
* ``unknown_batch`` — the input signature leaves dim 0 of every input unknown;
* ``xfail_auto`` / ``xfail_jit`` — a lowering/codegen gap owned by someone else, with the exact reason;
  ``gaps`` are the texts that identify it in a fallback reason or error (any other failure is real).

The module is also a ``tools/tf_record.py`` target module (``REGISTRY``: name → builder), so the
clustering test can record TF's real clustering of any case in a fresh subprocess, and it runs as a
script (``python tests/e2e/e2e_corpus.py [NAME ...]``) to print the corpus table of the report.
"""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
from tf_record import Sample  # tools/ is on sys.path (setup.cfg pythonpath)

AUTO_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"


@dataclasses.dataclass
class Case:
    """One corpus function and what the sweep expects of it (see the module docstring)."""

    name: str
    build: Callable[[], Sample]
    jit: bool = True
    calls: int = 1
    tol: float = 1e-5
    heavy: bool = False
    xfail_auto: str = ""
    xfail_jit: str = ""
    gaps: tuple[str, ...] = ()
    reference: str = "eager"
    reference_auto: str = ""
    unknown_batch: bool = False
    # jit_compile=True is compiled as several clusters: the body holds a data-dependent-shape op
    # (Unique, Where) whose result feeds an op our dynamic padder does not take, so it runs on TF's kernels
    # in between (runtime/pipeline.py); one cluster when the padder takes every use (tf2hlo/dynamic_padder.py).
    jit_split: bool = False


CASES: dict[str, Case] = {}
#: tf_record target registry: name -> builder.
REGISTRY: dict[str, Callable[[], Sample]] = {}


def case(name: str, **options: Any) -> Callable[[Callable[[], Sample]], Callable[[], Sample]]:
    """Register a builder under ``name`` with the :class:`Case` options."""
    def register(build: Callable[[], Sample]) -> Callable[[], Sample]:
        assert name not in CASES, name
        CASES[name] = Case(name, build, **options)
        REGISTRY[name] = _recordable(CASES[name])
        return build
    return register


def _recordable(c: Case) -> Callable[[], Sample]:
    """The tf_record builder: the sample, traced with the signature every run here uses (tf_record would
    otherwise derive a fully static one from the inputs, so an ``unknown_batch`` case would be recorded
    with TF specialising a graph we never build)."""
    def build() -> Sample:
        s = c.build()
        if c.unknown_batch:
            fn = getattr(s.fn, "python_function", s.fn)
            s = dataclasses.replace(s, fn=_tf().function(fn, input_signature=input_signature(c, s)))
        return s
    return build


def _tf() -> Any:
    import tensorflow as tf
    return tf


def _rand(shape: tuple[int, ...], seed: int, dtype: Any = np.float32, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def _ints(shape: tuple[int, ...], seed: int, low: int, high: int, dtype: Any = np.int32) -> np.ndarray:
    return np.random.default_rng(seed).integers(low, high, shape).astype(dtype)


def _s(fn: Callable[..., Any], *inputs: np.ndarray, names: list[str] | None = None,
       variables: dict[str, Any] | None = None) -> Sample:
    return Sample(fn, list(inputs), names, variables or {}, (fn.__doc__ or "").strip())


def _vars(weights: list[Any]) -> dict[str, Any]:
    """Keras variables keyed by position (layer and optimizer variable names differ between builds)."""
    return {f"keras_var_{i}": v for i, v in enumerate(weights)}


def _set_weights(layer: Any, seed: int, scale: float = 0.3) -> None:
    """Fixed weights for a Keras layer (independent of Keras' initializer seeding)."""
    rng = np.random.default_rng(seed)
    for v in layer.weights:
        shape = tuple(v.shape)
        if "variance" in v.path:
            value = rng.uniform(0.5, 1.5, shape)
        elif "gamma" in v.path:
            value = 1.0 + rng.standard_normal(shape) * 0.1
        else:
            value = rng.standard_normal(shape) * scale
        v.assign(value.astype(np.float32))


# ============================================================================ control flow

@case("cond_branches")
def _cond_branches() -> Sample:
    tf = _tf()

    def cond_branches(x):
        """tf.cond on a reduction choosing between two elementwise branches."""
        y = tf.cond(tf.reduce_sum(x) > 0.0, lambda: tf.exp(-x) * 2.0 + 1.0, lambda: tf.sin(x) * x - 1.0)
        return y * 3.0 + tf.tanh(x)
    return _s(cond_branches, _rand((2, 3), 1), names=["x"])


@case("cond_both_ways")
def _cond_both_ways() -> Sample:
    tf = _tf()

    def cond_both_ways(x, flag):
        """Two tf.conds on a bool input and on its negation (both branches run across the conds)."""
        a = tf.cond(flag, lambda: tf.matmul(x, x), lambda: x - 1.0)
        b = tf.cond(tf.logical_not(flag), lambda: tf.matmul(x, x), lambda: x * 0.5)
        return a + b, tf.reduce_max(a - b)
    return _s(cond_both_ways, _rand((3, 3), 2), np.array(True), names=["x", "flag"])


@case("while_matmul")
def _while_matmul() -> Sample:
    tf = _tf()
    w = _rand((4, 4), 3, scale=0.5)

    def while_matmul(x):
        """tf.while_loop running 5 iterations of x = tanh(x @ w) + 0.1."""
        def body(i, y):
            return i + 1, tf.tanh(tf.matmul(y, w)) + 0.1
        _, y = tf.while_loop(lambda i, y: i < 5, body, [tf.constant(0), x])
        return y * 2.0
    return _s(while_matmul, _rand((2, 4), 4), names=["x"])


@case("while_data_dependent")
def _while_data_dependent() -> Sample:
    tf = _tf()

    def while_data_dependent(x):
        """A while loop whose trip count depends on the data (halve until the norm is small)."""
        def body(i, y):
            return i + 1, y * 0.5
        n, y = tf.while_loop(lambda i, y: tf.reduce_sum(y * y) > 0.01, body, [tf.constant(0), x])
        return y + tf.cast(n, tf.float32)
    return _s(while_data_dependent, _rand((3,), 5, scale=3.0), names=["x"])


@case("switch_case")
def _switch_case() -> Sample:
    tf = _tf()

    def switch_case(x, i):
        """tf.switch_case (Case op) with three branches on an int32 index."""
        y = tf.switch_case(i, [lambda: x * 2.0, lambda: tf.exp(x), lambda: tf.reduce_sum(x) + x])
        return y - 1.0
    return _s(switch_case, _rand((2, 2), 6), np.array(1, np.int32), names=["x", "i"])


@case("tf_case")
def _tf_case() -> Sample:
    tf = _tf()

    def tf_case(x):
        """tf.case with predicates on a reduction (nested conds) and a default."""
        s = tf.reduce_sum(x)
        return tf.case([(s > 10.0, lambda: x * 10.0), (s > 0.0, lambda: x + 100.0)],
                       default=lambda: -x, exclusive=False)
    return _s(tf_case, np.abs(_rand((4,), 7)), names=["x"])


@case("cond_in_while")
def _cond_in_while() -> Sample:
    tf = _tf()

    def cond_in_while(x):
        """A tf.cond inside a while loop body (Collatz-like update on floats)."""
        def body(i, y):
            y = tf.cond(tf.reduce_sum(y) > 1.0, lambda: y * 0.5, lambda: y * 3.0 + 1.0)
            return i + 1, y
        _, y = tf.while_loop(lambda i, y: i < 6, body, [tf.constant(0), x])
        return y
    return _s(cond_in_while, _rand((3,), 8), names=["x"])


# ============================================================================ variables

@case("var_reads")
def _var_reads() -> Sample:
    tf = _tf()
    w = tf.Variable(_rand((3, 2), 10), name="w")
    b = tf.Variable(_rand((2,), 11), name="b")

    def var_reads(x):
        """Dense layer reading two variables."""
        return tf.nn.relu(tf.matmul(x, w) + b)
    return _s(var_reads, _rand((4, 3), 12), names=["x"], variables={"w": w, "b": b})


@case("var_updates")
def _var_updates() -> Sample:
    tf = _tf()
    w = tf.Variable(_rand((3, 2), 13), name="w")
    b = tf.Variable(np.zeros((2,), np.float32), name="b")
    m = tf.Variable(np.ones((2,), np.float32), name="m")
    step = tf.Variable(np.int64(0), name="step")

    def var_updates(x):
        """assign, assign_add, assign_sub on several variables and an int64 step counter."""
        y = tf.matmul(x, w) + b
        b.assign_add(tf.reduce_mean(y, axis=0) * 0.1)
        w.assign(w * 0.5 + 1.0)
        m.assign_sub(b * 0.25)
        step.assign_add(1)
        return tf.nn.relu(y) + b.read_value(), w.read_value() * 2.0, step.read_value()
    return _s(var_updates, _rand((4, 3), 14), names=["x"], variables={"w": w, "b": b, "m": m, "step": step})


@case("var_read_after_write", calls=3)
def _var_read_after_write() -> Sample:
    tf = _tf()
    v = tf.Variable(_rand((4,), 15), name="v")

    def var_read_after_write(x):
        """Write then read the same variable in one function; called three times."""
        v.assign(tf.tanh(v * x))
        return v.read_value() * 2.0 + x
    return _s(var_read_after_write, _rand((4,), 16), names=["x"], variables={"v": v})


@case("var_gather")
def _var_gather() -> Sample:
    tf = _tf()
    table = tf.Variable(_rand((10, 4), 17), name="table")

    def var_gather(ids):
        """Embedding lookup (ResourceGather) followed by a reduction."""
        e = tf.gather(table, ids)
        return tf.reduce_sum(e * e, axis=-1)
    return _s(var_gather, _ints((2, 3), 18, 0, 10), names=["ids"], variables={"table": table})


# ============================================================================ unsupported in the middle

@case("strings_mid", jit=False)
def _strings_mid() -> Sample:
    tf = _tf()

    def strings_mid(x):
        """AsString / StringToNumber / StringLength between numeric chains."""
        y = tf.tanh(x * 2.0) + 1.0
        s = tf.strings.as_string(y, precision=4)
        n = tf.strings.to_number(s)
        ln = tf.cast(tf.strings.length(tf.strings.join([s, s], separator="=")), tf.float32)
        return n * 3.0 + ln - tf.exp(y)
    return _s(strings_mid, _rand((2, 3), 20), names=["x"])


@case("unique_mid")
def _unique_mid() -> Sample:
    tf = _tf()

    def unique_mid(x):
        """tf.unique (never auto-clustered; TF's XLA compiles it under jit_compile) between two chains."""
        y = tf.round(tf.nn.relu(x * 2.0 + 1.0) - 0.5)
        u, idx = tf.unique(tf.reshape(y, [-1]))
        z = tf.cast(idx, tf.float32) * 3.0 + tf.reduce_sum(u)
        return tf.exp(-tf.abs(z)) * 2.0 + 1.0
    return _s(unique_mid, _rand((3, 4), 21), names=["x"])


@case("py_function_mid", jit=False)
def _py_function_mid() -> Sample:
    tf = _tf()

    def py_function_mid(x):
        """tf.py_function between two compilable chains."""
        y = tf.nn.relu(x) * 2.0 + 1.0
        z = tf.py_function(lambda a: a * 0.5, [y], tf.float32)
        z = tf.ensure_shape(z, [2, 3])
        return tf.tanh(z) * y + 3.0
    return _s(py_function_mid, _rand((2, 3), 22), names=["x"])


@case("boolean_mask_mid")
def _boolean_mask_mid() -> Sample:
    tf = _tf()

    def boolean_mask_mid(x):
        """tf.boolean_mask (Where: a data-dependent shape) followed by a reduction."""
        kept = tf.boolean_mask(x * 2.0, x > 0.0)
        return tf.reduce_sum(tf.exp(-kept)), tf.reduce_max(x)
    return _s(boolean_mask_mid, _rand((3, 4), 23), names=["x"])


# ============================================================================ numerics

@case("stateless_random", reference="xla")
def _stateless_random() -> Sample:
    tf = _tf()

    def stateless_random(x, seed):
        """Stateless uniform / normal (Philox) mixed with arithmetic, and a stateless dropout mask."""
        r = tf.random.stateless_uniform([2, 3], seed=seed)
        n = tf.random.stateless_normal([2, 3], seed=seed + 1)
        keep = tf.random.stateless_uniform([2, 3], seed=seed + 2) > 0.3
        return (x + r) * 2.0 + tf.exp(n) * x - 1.0, tf.where(keep, x / 0.7, 0.0)
    return _s(stateless_random, _rand((2, 3), 24), np.array([7, 11], np.int32), names=["x", "seed"])


@case("stateless_random_const_seed", reference="xla", reference_auto="graph")
def _stateless_random_const_seed() -> Sample:
    tf = _tf()

    def stateless_random_const_seed(x):
        """Stateless RNG with constant seeds: under jit_compile the Philox key becomes u64 constants that
        algsimp folds; in auto mode grappler folds the random ops first, on TF's CPU kernels."""
        r = tf.random.stateless_uniform([4, 4], seed=[1, 2])
        return x + r + tf.random.stateless_normal([4, 4], seed=[3, 4])
    return _s(stateless_random_const_seed, _rand((4, 4), 25), names=["x"])


@case("reductions")
def _reductions() -> Sample:
    tf = _tf()

    def reductions(x):
        """Sum/mean/max/min/prod over axes, keepdims, argmax/argmin, all/any."""
        return (tf.reduce_sum(x, axis=[0, 2]), tf.reduce_mean(x, axis=1, keepdims=True),
                tf.reduce_max(x), tf.reduce_min(x, axis=-1), tf.reduce_prod(x * 0.5 + 1.0, axis=0),
                tf.argmax(x, axis=1), tf.argmin(x, axis=2, output_type=tf.int32),
                tf.reduce_all(x > -3.0, axis=1), tf.reduce_any(x > 1.5), tf.math.reduce_logsumexp(x, axis=-1))
    return _s(reductions, _rand((2, 3, 4), 25), names=["x"])


@case("broadcasting")
def _broadcasting() -> Sample:
    tf = _tf()

    def broadcasting(a, b, c):
        """Implicit broadcasting [4,1,3]+[5,3]*[1], broadcast_to, tile."""
        y = a + b * c
        return y, tf.broadcast_to(c, [2, 3]) * 2.0, tf.tile(b, [2, 1])
    return _s(broadcasting, _rand((4, 1, 3), 26), _rand((5, 3), 27), _rand((1,), 28),
              names=["a", "b", "c"])


@case("gather_scatter")
def _gather_scatter() -> Sample:
    tf = _tf()

    def gather_scatter(x, idx, nd_idx):
        """gather (axis, batch_dims), gather_nd, scatter_nd, tensor_scatter update/add."""
        g0 = tf.gather(x, idx)
        g1 = tf.gather(x, idx, axis=1)
        g2 = tf.gather(tf.reshape(x, [4, 3, 2]), tf.constant([[0, 1], [1, 0], [0, 0], [1, 1]]), axis=2,
                       batch_dims=1)
        gn = tf.gather_nd(x, nd_idx)
        sn = tf.scatter_nd(nd_idx, gn * 2.0, [4, 6])
        tu = tf.tensor_scatter_nd_update(x, nd_idx, gn + 100.0)
        ta = tf.tensor_scatter_nd_add(x, nd_idx, gn)
        return g0, g1, g2, gn, sn, tu, ta
    return _s(gather_scatter, _rand((4, 6), 29), np.array([3, 0, 2], np.int32),
              np.array([[0, 1], [3, 5], [2, 2]], np.int32), names=["x", "idx", "nd_idx"])


@case("concat_split_stack")
def _concat_split_stack() -> Sample:
    tf = _tf()

    def concat_split_stack(a, b):
        """concat, split (equal and sized), stack/unstack."""
        c = tf.concat([a, b, a * 2.0], axis=1)
        p, q, r = tf.split(c, 3, axis=1)
        s1, s2 = tf.split(c, [2, 7], axis=1)
        st = tf.stack([p, q, r], axis=0)
        u0, u1 = tf.unstack(a, axis=0)
        return c, p - q + r, s1, tf.reduce_sum(s2, axis=1), st, u0 * u1
    return _s(concat_split_stack, _rand((2, 3), 30), _rand((2, 3), 31), names=["a", "b"])


@case("slicing_layout")
def _slicing_layout() -> Sample:
    tf = _tf()

    def slicing_layout(x):
        """Strided slices (negative stride, new axis, shrink), reverse, pad, transpose, reshape."""
        a = x[:, 1:4:2, ::-1]
        b = x[0, tf.newaxis, ..., -1]
        c = tf.reverse(x, axis=[1])
        d = tf.pad(x, [[0, 0], [1, 2], [0, 1]], constant_values=0.5)
        e = tf.pad(x, [[0, 0], [1, 1], [1, 1]], mode="REFLECT")
        f = tf.reshape(tf.transpose(x, [2, 0, 1]), [4, -1])
        return a, b, c, d, e, f, tf.expand_dims(tf.squeeze(x[:, :1]), 0)
    return _s(slicing_layout, _rand((2, 5, 4), 32), names=["x"])


@case("conv_pool")
def _conv_pool() -> Sample:
    tf = _tf()
    k1, b1 = _rand((3, 3, 3, 4), 33, scale=0.3), _rand((4,), 34, scale=0.1)
    k2 = _rand((2, 2, 4, 2), 35, scale=0.3)

    def conv_pool(image):
        """Conv2D SAME + bias + ReLU, max pool, strided VALID conv, avg pool."""
        y = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(image, k1, strides=1, padding="SAME"), b1))
        y = tf.nn.max_pool2d(y, ksize=2, strides=2, padding="VALID")
        z = tf.nn.conv2d(y, k2, strides=[1, 2, 2, 1], padding="VALID")
        return tf.nn.avg_pool2d(y, ksize=3, strides=1, padding="SAME"), z
    return _s(conv_pool, _rand((2, 8, 8, 3), 36), names=["image"])


@case("depthwise_dilated_conv")
def _depthwise_dilated_conv() -> Sample:
    tf = _tf()
    dk = _rand((3, 3, 3, 2), 37, scale=0.3)
    k = _rand((3, 3, 3, 4), 38, scale=0.3)

    def depthwise_dilated_conv(image):
        """Depthwise conv (multiplier 2) and a dilated conv."""
        a = tf.nn.depthwise_conv2d(image, dk, strides=[1, 1, 1, 1], padding="SAME")
        b = tf.nn.conv2d(image, k, strides=1, padding="VALID", dilations=2)
        return a, tf.nn.relu6(b)
    return _s(depthwise_dilated_conv, _rand((1, 7, 7, 3), 39), names=["image"])


@case("matmul_einsum")
def _matmul_einsum() -> Sample:
    tf = _tf()

    def matmul_einsum(a, b, c):
        """matmul (transposes), batch matmul with broadcasting, einsums."""
        m1 = tf.matmul(a, b, transpose_b=True)
        m2 = tf.matmul(a, b, transpose_a=True)
        bm = tf.matmul(c, a)
        e1 = tf.einsum("bij,jk->bik", c, a)
        e2 = tf.einsum("ij,ij->i", a, b)
        e3 = tf.einsum("bij->bji", c)
        return m1, m2, bm, e1, e2, e3
    return _s(matmul_einsum, _rand((4, 4), 40), _rand((4, 4), 41), _rand((3, 2, 4), 42),
              names=["a", "b", "c"])


@case("softmax_xent")
def _softmax_xent() -> Sample:
    tf = _tf()

    def softmax_xent(logits, labels):
        """softmax, log_softmax, dense and sparse softmax cross-entropy."""
        onehot = tf.one_hot(labels, 6)
        a = tf.nn.softmax_cross_entropy_with_logits(labels=onehot, logits=logits)
        b = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        c = -tf.reduce_sum(onehot * tf.nn.log_softmax(logits), axis=-1)
        return tf.nn.softmax(logits, axis=0), tf.reduce_mean(a), b, c
    return _s(softmax_xent, _rand((4, 6), 43, scale=1.5), np.array([1, 0, 5, 3], np.int32),
              names=["logits", "labels"])


@case("layer_norm_gelu")
def _layer_norm_gelu() -> Sample:
    tf = _tf()

    def layer_norm_gelu(x, gamma, beta):
        """Hand-written layer norm (moments, rsqrt) then exact and tanh-approximate GELU."""
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        y = (x - mean) * tf.math.rsqrt(var + 1e-5) * gamma + beta
        return tf.nn.gelu(y), tf.nn.gelu(y, approximate=True)
    return _s(layer_norm_gelu, _rand((4, 8), 44, scale=2.0), 1 + _rand((8,), 45, scale=0.1),
              _rand((8,), 46, scale=0.1), names=["x", "gamma", "beta"])


@case("activations")
def _activations() -> Sample:
    tf = _tf()

    def activations(x):
        """Elementwise math: sigmoid, softplus, elu, selu, leaky_relu, log1p, expm1, pow, erf, clip."""
        return (tf.sigmoid(x), tf.nn.softplus(x), tf.nn.elu(x), tf.nn.selu(x), tf.nn.leaky_relu(x, 0.1),
                tf.math.log1p(tf.abs(x)), tf.math.expm1(x), tf.pow(tf.abs(x) + 0.5, 1.7), tf.math.erf(x),
                tf.clip_by_value(x, -0.5, 0.5), tf.math.squared_difference(x, 0.3), tf.math.sign(x),
                tf.math.floor(x * 3.0), tf.math.atan2(x, x + 2.0))
    return _s(activations, _rand((3, 5), 47), names=["x"])


@case("int_math")
def _int_math() -> Sample:
    tf = _tf()

    def int_math(a, b, c):
        """int32/int64 arithmetic: floordiv/floormod on negatives, truncatediv, bitwise, shifts, abs, cumsum."""
        d = tf.where(b == 0, tf.ones_like(b), b)
        return (a * 3 + d, a // d, a % d, tf.truncatediv(a, d), tf.bitwise.bitwise_and(a, d),
                tf.bitwise.bitwise_xor(a, 5), tf.bitwise.left_shift(tf.abs(a), 2),
                tf.bitwise.right_shift(tf.abs(a), 1), tf.maximum(a, d) - tf.minimum(a, d),
                c * 1000000007 + tf.cast(a, tf.int64), tf.math.cumsum(a, axis=0))
    return _s(int_math, _ints((3, 4), 48, -20, 20), _ints((3, 4), 49, -5, 5),
              _ints((3, 4), 50, -9, 9, np.int64), names=["a", "b", "c"])


@case("bool_logic")
def _bool_logic() -> Sample:
    tf = _tf()

    def bool_logic(x, y, p):
        """Comparisons, logical and/or/xor/not, select on masks, casting bools."""
        m = tf.logical_and(x > 0.0, y < 0.5)
        n = tf.logical_or(tf.equal(tf.round(x), tf.round(y)), tf.logical_not(p))
        k = tf.math.logical_xor(m, n)
        return k, tf.where(k, x, y), tf.cast(m, tf.float32) + tf.cast(n, tf.float32), tf.not_equal(x, y)
    return _s(bool_logic, _rand((3, 4), 51), _rand((3, 4), 52), np.random.default_rng(53).random((3, 4)) > 0.5,
              names=["x", "y", "p"])


@case("dtype_f16_bf16", tol=2e-2)
def _dtype_f16_bf16() -> Sample:
    tf = _tf()

    def dtype_f16_bf16(x):
        """float16 and bfloat16 arithmetic, matmul and reductions, cast back to float32."""
        h = tf.cast(x, tf.float16)
        hb = tf.nn.relu(tf.matmul(h, h) * tf.constant(0.5, tf.float16) + h)
        bf = tf.cast(x, tf.bfloat16)
        bb = tf.tanh(bf * bf + tf.constant(1.0, tf.bfloat16))
        return tf.cast(hb, tf.float32), tf.cast(tf.reduce_sum(hb), tf.float32), tf.cast(bb, tf.float32)
    return _s(dtype_f16_bf16, _rand((4, 4), 54), names=["x"])


@case("dtype_f64_i64")
def _dtype_f64_i64() -> Sample:
    tf = _tf()

    def dtype_f64_i64(x, n):
        """float64 math and matmul, int64 arithmetic and casts between the two (and int32/uint8)."""
        d = tf.cast(x, tf.float64)
        y = tf.matmul(d, d, transpose_b=True) / tf.constant(3.0, tf.float64) + tf.exp(d[:, :1])
        k = n * 7 + tf.cast(tf.math.floor(d[:, :2] * 10.0), tf.int64)
        return y, k, tf.cast(k, tf.float32), tf.cast(tf.cast(k, tf.int32), tf.uint8), tf.cast(x > 0, tf.int64)
    return _s(dtype_f64_i64, _rand((3, 4), 55), _ints((3, 2), 56, -100, 100, np.int64), names=["x", "n"])


@case("size_zero_dims")
def _size_zero_dims() -> Sample:
    tf = _tf()

    def size_zero_dims(e, x):
        """Tensors with a size-0 dimension: elementwise, reductions, matmul and concat with them."""
        y = tf.exp(e) * 2.0
        return (y, tf.reduce_sum(e, axis=0), tf.reduce_max(e, axis=1), tf.matmul(tf.transpose(e), e),
                tf.concat([e, x], axis=0) + 1.0, tf.reduce_sum(e) + tf.reduce_sum(x))
    return _s(size_zero_dims, np.zeros((0, 4), np.float32), _rand((2, 4), 57), names=["e", "x"])


@case("topk_cumulative")
def _topk_cumulative() -> Sample:
    tf = _tf()

    def topk_cumulative(x):
        """top_k, cumulative sums/products (exclusive, reverse), one_hot of argmax."""
        v, i = tf.math.top_k(x, k=3)
        return (v, i, tf.math.cumsum(x, axis=1, exclusive=True), tf.math.cumprod(x * 0.1 + 1.0, axis=1,
                reverse=True), tf.one_hot(tf.argmax(x, axis=1), 6, on_value=2.0, off_value=-1.0))
    return _s(topk_cumulative, _rand((3, 6), 58), names=["x"])


@case("attention_block")
def _attention_block() -> Sample:
    tf = _tf()
    wq, wk, wv, wo = (_rand((8, 8), 60 + i, scale=0.35) for i in range(4))

    def attention_block(x, mask):
        """Masked two-head self-attention with einsum projections and a residual connection."""
        def heads(y):
            return tf.transpose(tf.reshape(y, [2, 4, 2, 4]), [0, 2, 1, 3])
        q, k, v = (heads(tf.einsum("btd,de->bte", x, w)) for w in (wq, wk, wv))
        scores = tf.matmul(q, k, transpose_b=True) * 0.5 + (1.0 - mask) * -1e9
        ctx = tf.matmul(tf.nn.softmax(scores, axis=-1), v)
        return x + tf.einsum("btd,de->bte", tf.reshape(tf.transpose(ctx, [0, 2, 1, 3]), [2, 4, 8]), wo)
    mask = np.tril(np.ones((4, 4), np.float32))
    return _s(attention_block, _rand((2, 4, 8), 64), mask, names=["x", "mask"])


@case("var_in_while")
def _var_in_while() -> Sample:
    tf = _tf()
    acc = tf.Variable(np.zeros((3,), np.float32), name="acc")

    def var_in_while(x):
        """A variable updated inside a while loop body, read after the loop."""
        def body(i, y):
            acc.assign_add(y)
            return i + 1, y * 0.5
        tf.while_loop(lambda i, y: i < 4, body, [tf.constant(0), x])
        return acc.read_value() * 2.0
    return _s(var_in_while, _rand((3,), 100), names=["x"], variables={"acc": acc})


@case("while_tensorarray")
def _while_tensorarray() -> Sample:
    tf = _tf()

    def while_tensorarray(x):
        """A TensorArray written in a while loop and stacked (TensorList ops, DT_VARIANT)."""
        ta = tf.TensorArray(tf.float32, size=4)
        def body(i, y, ta):
            y = tf.tanh(y) + 0.5
            return i + 1, y, ta.write(i, y)
        _, _, ta = tf.while_loop(lambda i, y, ta: i < 4, body, [tf.constant(0), x, ta])
        return ta.stack() * 2.0
    return _s(while_tensorarray, _rand((2, 3), 101), names=["x"])


@case("structured_io")
def _structured_io() -> Sample:
    tf = _tf()

    def structured_io(x, y):
        """Outputs in a dict and tuple: an input passed through, the same tensor twice, a constant."""
        z = x * y + 1.0
        return {"z": z, "again": (z, tf.identity(z)), "x": x, "c": tf.constant([1, 2, 3]),
                "n": tf.shape(x)[0]}
    return _s(structured_io, _rand((2, 3), 102), _rand((2, 3), 103), names=["x", "y"])


@case("segment_sort")
def _segment_sort() -> Sample:
    tf = _tf()

    def segment_sort(x, seg):
        """unsorted_segment_sum/max, embedding-style gathers, sort and argsort."""
        return (tf.math.unsorted_segment_sum(x, seg, 3), tf.math.unsorted_segment_max(x, seg, 3),
                tf.sort(x, axis=-1, direction="DESCENDING"), tf.argsort(x[:, 0]))
    return _s(segment_sort, _rand((5, 4), 104), np.array([0, 2, 0, 1, 2], np.int32), names=["x", "seg"])


@case("image_resize")
def _image_resize() -> Sample:
    tf = _tf()

    def image_resize(image):
        """tf.image.resize bilinear and nearest (ResizeBilinear / ResizeNearestNeighbor)."""
        return (tf.image.resize(image, [6, 6], method="bilinear") * 2.0,
                tf.image.resize(image, [8, 8], method="nearest") + 1.0)
    return _s(image_resize, _rand((1, 4, 4, 2), 105), names=["image"])


@case("linalg_small", tol=1e-4)
def _linalg_small() -> Sample:
    tf = _tf()

    def linalg_small(a):
        """Cholesky, triangular solve and matrix inverse of a small SPD matrix."""
        spd = tf.matmul(a, a, transpose_b=True) + 4.0 * tf.eye(4)
        chol = tf.linalg.cholesky(spd)
        return chol, tf.linalg.inv(spd), tf.linalg.triangular_solve(chol, tf.ones([4, 1]))
    return _s(linalg_small, _rand((4, 4), 106), names=["a"])


@case("dynamic_batch", unknown_batch=True)
def _dynamic_batch() -> Sample:
    tf = _tf()
    w = _rand((8, 4), 107, scale=0.3)

    def dynamic_batch(x):
        """An input signature with an unknown batch dim (specialised per call): Shape, reshape, matmul."""
        n = tf.shape(x)[0]
        y = tf.reshape(tf.matmul(x, w), [n, 2, 2])
        return tf.reduce_sum(y, axis=[1, 2]) / tf.cast(n, tf.float32), tf.nn.softmax(tf.matmul(x, w))
    return _s(dynamic_batch, _rand((5, 8), 108), names=["x"])


@case("var_mixed_order", calls=2, jit=False)
def _var_mixed_order() -> Sample:
    tf = _tf()
    v = tf.Variable(_rand((3,), 119), name="v")

    def var_mixed_order(x):
        """A variable read by compiled ops, written by a TF-only chain (strings), read and written again:
        the launch nodes and TF's ops must keep the program order of the variable accesses."""
        before = v.read_value() * 2.0
        as_text = tf.strings.as_string(v + x, precision=6)
        v.assign(tf.strings.to_number(as_text) * 0.5)
        after = tf.exp(v.read_value()) + before
        v.assign_add(after * 0.1)
        return before, after, v.read_value()
    return _s(var_mixed_order, _rand((3,), 125), names=["x"], variables={"v": v})


@case("no_inputs_update_only", calls=3)
def _no_inputs_update_only() -> Sample:
    tf = _tf()
    v = tf.Variable(_rand((3,), 110), name="v")
    count = tf.Variable(np.int32(0), name="count")

    def no_inputs_update_only():
        """No arguments and no outputs: only variable updates (called three times)."""
        v.assign(v * 0.5 + tf.cast(count, tf.float32))
        count.assign_add(2)
    return _s(no_inputs_update_only, variables={"v": v, "count": count})


@case("nested_tf_function")
def _nested_tf_function() -> Sample:
    tf = _tf()

    @tf.function
    def inner(a, b):
        return tf.nn.relu(a * b) + 1.0

    @tf.function(autograph=False)
    def inner2(a):
        return tf.reduce_sum(inner(a, a) * 2.0, axis=-1)

    def nested_tf_function(x):
        """tf.functions called from the function (inlined calls, one nested two deep)."""
        return inner(x, x + 1.0) - 1.0, inner2(x)
    return _s(nested_tf_function, _rand((3, 4), 111), names=["x"])


@case("print_and_asserts", jit=False)
def _print_and_asserts() -> Sample:
    tf = _tf()

    def print_and_asserts(x):
        """tf.print (a stateful op TF runs) and tf.debugging asserts between compilable ops."""
        y = tf.exp(x) * 2.0
        tf.debugging.assert_positive(y, message="y must be positive")
        tf.print("sum:", tf.reduce_sum(y), output_stream="file:///dev/null")
        with tf.control_dependencies([tf.debugging.assert_less(tf.reduce_max(x), 100.0)]):
            z = tf.identity(y) + 1.0
        return tf.math.log(z)
    return _s(print_and_asserts, _rand((2, 3), 112), names=["x"])


@case("asserts_and_check_numerics")
def _asserts_and_check_numerics() -> Sample:
    tf = _tf()

    def asserts_and_check_numerics(x):
        """tf.debugging asserts and check_numerics, which TF's XLA compiles: the Asserts are dropped (their
        string messages never reach HLO) and CheckNumerics passes its value through."""
        tf.debugging.assert_positive(x + 10.0)
        tf.debugging.assert_less(x, 100.0, message="too big")
        return tf.debugging.check_numerics(x * 2.0, "bad value") + tf.exp(x)
    return _s(asserts_and_check_numerics, _rand((2, 3), 114), names=["x"])


@case("while_reads_variable")
def _while_reads_variable() -> Sample:
    tf = _tf()
    w = tf.Variable(_rand((4, 4), 115, scale=0.5), name="w")

    def while_reads_variable(x):
        """An RNN-shaped while loop whose body reads a captured variable (the handle enters the While)."""
        def body(i, a):
            return i + 1, tf.tanh(a @ w)
        return tf.while_loop(lambda i, a: i < 5, body, (0, x))[1]
    return _s(while_reads_variable, _rand((4, 4), 116), names=["x"], variables={"w": w})


@case("captured_tensor")
def _captured_tensor() -> Sample:
    tf = _tf()
    table = tf.constant(_rand((6, 3), 113))   # an EagerTensor captured by the function (a captured input)
    scale = tf.constant(np.float32(1.5))

    def captured_tensor(ids):
        """Captured eager tensors (not variables) used with an int input."""
        return tf.gather(table, ids) * scale + tf.reduce_mean(table)
    return _s(captured_tensor, np.array([5, 0, 3], np.int32), names=["ids"])


@case("uint8_image")
def _uint8_image() -> Sample:
    tf = _tf()

    def uint8_image(img):
        """uint8 image -> float normalisation, int8/int16/uint16 casts, saturating round trip."""
        f = tf.cast(img, tf.float32) / 255.0
        g = tf.image.convert_image_dtype(f * 0.5, tf.uint8, saturate=True)
        return (f * 2.0 - 1.0, g, tf.cast(tf.cast(img, tf.int16) - 128, tf.int8),
                tf.cast(img, tf.uint16) * 3, tf.reduce_max(img, axis=[0, 1]))
    return _s(uint8_image, np.random.default_rng(114).integers(0, 256, (4, 4, 3)).astype(np.uint8),
              names=["img"])


@case("larger_shapes", tol=1e-4)
def _larger_shapes() -> Sample:
    tf = _tf()
    w = _rand((256, 384), 115, scale=0.05)

    def larger_shapes(x):
        """Bigger tensors (GEMM split across threads, row-parallel reductions): layer norm, GEMM, softmax."""
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        h = tf.matmul((x - mean) * tf.math.rsqrt(var + 1e-5), w)
        return tf.nn.softmax(h, axis=-1), tf.reduce_sum(h, axis=0)
    return _s(larger_shapes, _rand((128, 256), 116), names=["x"])


@case("complex_math")
def _complex_math() -> Sample:
    tf = _tf()

    def complex_math(re, im):
        """complex64 arithmetic: build, multiply, abs, real/imag parts."""
        z = tf.complex(re, im)
        w = z * z + tf.complex(1.0, -1.0)
        return tf.abs(w), tf.math.real(w) + tf.math.imag(w)
    return _s(complex_math, _rand((2, 3), 117), _rand((2, 3), 118), names=["re", "im"])


# ============================================================================ Keras layers

def _keras() -> Any:
    import keras
    return keras


@case("keras_dense")
def _keras_dense() -> Sample:
    keras = _keras()
    d1 = keras.layers.Dense(16, activation="relu", name="dense_in")
    d2 = keras.layers.Dense(4, activation="softmax", name="dense_out")
    d1.build((None, 8))
    d2.build((None, 16))
    _set_weights(d1, 70)
    _set_weights(d2, 71)

    def keras_dense(x):
        """Two keras.layers.Dense layers (relu, softmax)."""
        return d2(d1(x))
    return _s(keras_dense, _rand((5, 8), 72), names=["x"],
              variables=_vars(d1.weights + d2.weights))


@case("keras_conv2d")
def _keras_conv2d() -> Sample:
    keras = _keras()
    conv = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="conv_a")
    conv2 = keras.layers.Conv2D(2, 3, strides=2, name="conv_b")
    pool = keras.layers.MaxPooling2D(2, name="pool")
    conv.build((None, 8, 8, 3))
    conv2.build((None, 4, 4, 4))
    _set_weights(conv, 73)
    _set_weights(conv2, 74)

    def keras_conv2d(x):
        """keras.layers.Conv2D (same, relu) + MaxPooling2D + strided Conv2D."""
        return conv2(pool(conv(x)))
    return _s(keras_conv2d, _rand((2, 8, 8, 3), 75), names=["x"],
              variables=_vars(conv.weights + conv2.weights))


@case("keras_layer_norm")
def _keras_layer_norm() -> Sample:
    keras = _keras()
    ln = keras.layers.LayerNormalization(epsilon=1e-5, name="ln")
    ln.build((None, 4, 8))
    _set_weights(ln, 76)

    def keras_layer_norm(x):
        """keras.layers.LayerNormalization over the last axis."""
        return ln(x)
    return _s(keras_layer_norm, _rand((3, 4, 8), 77, scale=2.0), names=["x"],
              variables=_vars(ln.weights))


@case("keras_mha", tol=1e-4)
def _keras_mha() -> Sample:
    tf = _tf()
    keras = _keras()
    mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, name="mha")
    q = _rand((2, 5, 8), 78)
    mha(tf.constant(q), tf.constant(q))  # builds the weights
    _set_weights(mha, 79)

    def keras_mha(x):
        """keras.layers.MultiHeadAttention self-attention with a causal mask."""
        return mha(x, x, use_causal_mask=True)
    return _s(keras_mha, q, names=["x"], variables=_vars(mha.weights))


@case("keras_batchnorm_train", calls=2, tol=1e-4)
def _keras_batchnorm_train() -> Sample:
    keras = _keras()
    bn = keras.layers.BatchNormalization(momentum=0.9, name="bn")
    bn.build((None, 4, 4, 3))
    _set_weights(bn, 80)

    def keras_batchnorm_train(x):
        """keras.layers.BatchNormalization(training=True): batch statistics and moving-average updates."""
        return bn(x, training=True)
    return _s(keras_batchnorm_train, _rand((2, 4, 4, 3), 81, scale=2.0), names=["x"],
              variables=_vars(bn.weights))


@case("keras_embedding_pool")
def _keras_embedding_pool() -> Sample:
    keras = _keras()
    emb = keras.layers.Embedding(20, 6, name="emb")
    pool = keras.layers.GlobalAveragePooling1D(name="pool")
    head = keras.layers.Dense(3, name="head")
    emb.build((None, 5))
    head.build((None, 6))
    _set_weights(emb, 120)
    _set_weights(head, 121)

    def keras_embedding_pool(ids):
        """keras Embedding (ResourceGather) + GlobalAveragePooling1D + Dense."""
        return head(pool(emb(ids)))
    return _s(keras_embedding_pool, _ints((4, 5), 122, 0, 20), names=["ids"], variables=_vars(emb.weights + head.weights))


@case("keras_lstm", tol=1e-4)
def _keras_lstm() -> Sample:
    keras = _keras()
    lstm = keras.layers.LSTM(4, return_sequences=False, name="lstm")
    lstm.build((None, 5, 3))
    _set_weights(lstm, 123)

    def keras_lstm(x):
        """keras LSTM over 5 steps (a while loop with TensorList ops)."""
        return lstm(x)
    return _s(keras_lstm, _rand((2, 5, 3), 124), names=["x"], variables=_vars(lstm.weights))


# ============================================================================ training loops

@case("train_sgd_manual", calls=5, tol=1e-4)
def _train_sgd_manual() -> Sample:
    tf = _tf()
    w1 = tf.Variable(_rand((6, 8), 90, scale=0.4), name="w1")
    b1 = tf.Variable(np.zeros((8,), np.float32), name="b1")
    w2 = tf.Variable(_rand((8, 3), 91, scale=0.4), name="w2")
    params = [w1, b1, w2]

    def train_sgd_manual(x, labels):
        """One step of an MLP classifier: GradientTape, sparse xent, hand-written SGD updates."""
        with tf.GradientTape() as tape:
            logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        for p, g in zip(params, tape.gradient(loss, params)):
            p.assign_sub(0.5 * g)
        return loss
    return _s(train_sgd_manual, _rand((8, 6), 92), _ints((8,), 93, 0, 3), names=["x", "labels"],
              variables={"w1": w1, "b1": b1, "w2": w2})


@case("train_keras_sgd", calls=5, tol=1e-4)
def _train_keras_sgd() -> Sample:
    tf = _tf()
    keras = _keras()
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh", name="hidden"),
                              keras.layers.Dense(1, name="head")], name="regressor")
    _set_weights(model, 94)
    opt = keras.optimizers.SGD(learning_rate=0.1, momentum=0.9, name="sgd")
    opt.build(model.trainable_variables)

    def train_keras_sgd(x, y):
        """A Keras model's training step: GradientTape, MSE, keras.optimizers.SGD with momentum."""
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    variables = _vars(model.weights + opt.variables)
    return _s(train_keras_sgd, _rand((8, 6), 95), _rand((8, 1), 96), names=["x", "y"], variables=variables)


@case("train_keras_adam", calls=5, tol=1e-4)
def _train_keras_adam() -> Sample:
    tf = _tf()
    keras = _keras()
    model = keras.Sequential([keras.Input((4, 4, 2)), keras.layers.Conv2D(3, 3, activation="relu", name="conv"),
                              keras.layers.Flatten(name="flatten"), keras.layers.Dense(5, name="head")],
                             name="classifier")
    _set_weights(model, 97)
    opt = keras.optimizers.Adam(learning_rate=0.01, name="adam")
    opt.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def train_keras_adam(x, labels):
        """Conv2D + Dense Keras classifier trained with keras.optimizers.Adam."""
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    variables = _vars(model.weights + opt.variables)
    return _s(train_keras_adam, _rand((6, 4, 4, 2), 98), _ints((6,), 99, 0, 5), names=["x", "labels"],
              variables=variables)


# ============================================================================ the bundled samples

def _sample_cases() -> None:
    """Every sample of ``tools/make_graphs.py`` is a corpus case too (prefixed ``sample_``)."""
    import make_graphs

    for name, build in make_graphs.REGISTRY.items():
        extra: dict[str, Any] = {}
        CASES[f"sample_{name}"] = Case(f"sample_{name}", build, jit=name != "string_ops", tol=1e-4, **extra)
        REGISTRY[f"sample_{name}"] = build


_sample_cases()


# ============================================================================ running a case

@dataclasses.dataclass
class Outcome:
    """What running one case in one mode gave: outputs and variable values after every call, and
    (for our runs) the number of clusters and the fallback reason of every launcher that fell back."""

    outputs: list[list[np.ndarray]]
    variables: list[dict[str, np.ndarray]]
    clusters: int = 0
    fallbacks: dict[str, str] = dataclasses.field(default_factory=dict)
    compiled: Any = None


def input_signature(c: Case, sample: Sample) -> list[Any]:
    """The signature every run uses: the fixed inputs' dtypes and shapes (dim 0 unknown with
    ``unknown_batch``), named as the sample names them."""
    tf = _tf()
    return [tf.TensorSpec([None, *a.shape[1:]] if c.unknown_batch and a.ndim else a.shape, tf.as_dtype(a.dtype),
                          name=n) for a, n in zip(sample.inputs, sample.names())]


def _flat(out: Any) -> list[np.ndarray]:
    tf = _tf()
    return [np.asarray(t.numpy() if hasattr(t, "numpy") else t) for t in tf.nest.flatten(out)]


def _calls(c: Case, fn: Callable[..., Any], s: Sample) -> tuple[list[list[np.ndarray]], list[dict[str, np.ndarray]]]:
    tf = _tf()
    args = [tf.constant(a) for a in s.inputs]
    outputs, variables = [], []
    for _ in range(c.calls):
        outputs.append(_flat(fn(*args)))
        variables.append({k: np.asarray(v.numpy()) for k, v in s.variables.items()})
    return outputs, variables


def run_tf(c: Case, mode: str | None = None) -> Outcome:
    """TF's answer: ``mode`` "eager" (the Python function itself), "graph" (tf.function) or "xla"
    (tf.function(jit_compile=True)); default: the case's ``reference``."""
    tf = _tf()
    mode = mode or c.reference
    s = c.build()
    fn = s.fn if mode == "eager" else tf.function(s.fn, input_signature=input_signature(c, s),
                                                  jit_compile=True if mode == "xla" else None)
    return Outcome(*_calls(c, fn, s))


def run_ours(c: Case, jit_compile: bool | None, backend: str = "llvm") -> Outcome:
    """Our answer: auto-clustering under :data:`AUTO_FLAGS` (``jit_compile=None``) or must-compile."""
    import tfxla_cluster as txc

    tf = _tf()
    s = c.build()
    fn = txc.function(s.fn, jit_compile=jit_compile, flags=AUTO_FLAGS, input_signature=input_signature(c, s),
                      backend=backend)
    outputs, variables = _calls(c, fn, s)
    compiled = fn.get_compiled(*[tf.constant(a) for a in s.inputs])
    fallbacks = {name: l.stats.fallback_reason for name, l in compiled.launchers.items()
                 if l.stats.fallback_reason}
    return Outcome(outputs, variables, len(compiled.clusters), fallbacks, compiled)


def compare(got: Outcome, want: Outcome, tol: float) -> list[str]:
    """Differences between two outcomes, call by call (empty: equal within ``tol``)."""
    problems = []
    for k, (g_call, w_call) in enumerate(zip(got.outputs, want.outputs)):
        if len(g_call) != len(w_call):
            problems.append(f"call {k}: {len(g_call)} outputs, want {len(w_call)}")
            continue
        for i, (g, w) in enumerate(zip(g_call, w_call)):
            problems += _diff(f"call {k} output {i}", g, w, tol)
    for k, (g_vars, w_vars) in enumerate(zip(got.variables, want.variables)):
        for name, w in w_vars.items():
            problems += _diff(f"call {k} variable {name}", g_vars[name], w, tol)
    return problems


def _diff(what: str, g: np.ndarray, w: np.ndarray, tol: float) -> list[str]:
    if g.shape != w.shape or g.dtype != w.dtype:
        return [f"{what}: {g.dtype}{list(g.shape)}, want {w.dtype}{list(w.shape)}"]
    if w.dtype.kind in "OSUbiu":
        return [] if np.array_equal(g, w) else [f"{what}: values differ ({g!r} vs {w!r})"]
    g64, w64 = g.astype(np.float64), w.astype(np.float64)
    if np.allclose(g64, w64, rtol=tol, atol=tol, equal_nan=True):
        return []
    err = np.nanmax(np.abs(g64 - w64)) if g.size else 0.0
    return [f"{what}: max abs error {err:.3g} > {tol}"]


def main(argv: list[str]) -> int:
    """Print the corpus table (auto-mode and jit_compile=True results, fallback reasons)."""
    import logging
    import time

    logging.getLogger("tfxla_cluster.runtime").setLevel(logging.ERROR)
    names = argv or list(CASES)
    print("| function | auto mode | jit_compile=True | fallback reasons |")
    print("|---|---|---|---|")
    for name in names:
        c = CASES[name]
        t0 = time.perf_counter()
        try:
            want = run_tf(c)
        except Exception as e:  # noqa: BLE001 - the report shows whatever happened
            print(f"| {name} | TF ERROR {type(e).__name__}: {str(e).splitlines()[0][:200]} | | |", flush=True)
            continue
        cells, reasons = [], []
        for mode in (None, True):
            if mode is True and not c.jit:
                try:
                    run_ours(c, True)
                    cells.append("compiled (TF refuses!)")
                except Exception as e:  # noqa: BLE001
                    cells.append(f"refused ({type(e).__name__})")
                continue
            try:
                got = run_ours(c, mode)
                diff = compare(got, want, c.tol)
                cells.append(("OK" if not diff else "MISMATCH " + diff[0]) + f" ({got.clusters} clusters)")
                reasons += [f"{'auto' if mode is None else 'jit'} {k}: {v}" for k, v in got.fallbacks.items()]
            except Exception as e:  # noqa: BLE001
                msg = str(e).splitlines()
                detail = next((m for m in msg if "Error:" in m and "Graph execution" not in m), msg[0] if msg else "")
                cells.append(f"ERROR {type(e).__name__}: {detail.strip()[:200]}")
        print(f"| {name} | {cells[0]} | {cells[1]} | {'; '.join(reasons) or '-'} | "
              f"<!-- {time.perf_counter() - t0:.1f}s -->", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
