"""Corpus of small tf.functions for the clustering-parity sweep (``tools/compare_with_tf.py``).

Each entry is a zero-argument *builder* returning a :class:`tf_record.Sample` (function + fixed
inputs). Builders import TensorFlow lazily, so listing the corpus (``python tools/corpus.py``) is
cheap and the recording parent process never loads TF. Every builder must be deterministic: fixed
seeds, fixed variable initial values, tiny shapes.

The entries cover what makes MarkForCompilationPass interesting: ops without an XLA kernel in the
middle of compilable chains (would-be cycles), strings, py_function, stateful vs stateless RNG,
resource variables (safe and unsafe read/write orders), lowered while/cond (deadness, frames),
Where/boolean_mask, Unique, Assert/CheckNumerics/Print, TensorArray/TensorList (DT_VARIANT),
inaccurate/slow linalg, convolutions, attention, Shape/Size/Rank consumers, Fill, integer
AssignAdd with a constant, Identity chains, nested function calls with jit attributes, and random
DAGs of mixed ops with "barrier" ops (fixed seeds).

Also defines the flag sets of the sweep (:data:`FLAGSETS`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tf_record import DEFAULT_FLAGS, Sample  # noqa: E402

#: flag-set name -> TF_XLA_FLAGS (without --tf_xla_clustering_debug, which the recorder adds).
FLAGSETS: dict[str, str] = {
    "default": DEFAULT_FLAGS,
    "min_cluster_size_1": f"{DEFAULT_FLAGS} --tf_xla_min_cluster_size=1",
    "max_cluster_size_3": f"{DEFAULT_FLAGS} --tf_xla_max_cluster_size=3",
    "ops_fusible": f"{DEFAULT_FLAGS} --tf_xla_ops_to_cluster=FUSIBLE",
    "exclude_where": f"{DEFAULT_FLAGS} --tf_xla_cluster_exclude_ops=Where",
    "fuel_5": f"{DEFAULT_FLAGS} --tf_xla_clustering_fuel=5",
    "deterministic_names": f"{DEFAULT_FLAGS} --tf_xla_deterministic_cluster_names",
    # max 3 alone can never reach the default min size 4, and fuel 5 (one unit of which the
    # _EagerConst input graph spends) leaves almost nothing; with min size 1 the limits show.
    "max_cluster_size_3_min_1": f"{DEFAULT_FLAGS} --tf_xla_max_cluster_size=3 "
                                "--tf_xla_min_cluster_size=1",
    "fuel_10_min_1": f"{DEFAULT_FLAGS} --tf_xla_clustering_fuel=10 --tf_xla_min_cluster_size=1",
}

REGISTRY: dict[str, Callable[[], Sample]] = {}


def corpus_fn(name: str) -> Callable[[Callable[[], Sample]], Callable[[], Sample]]:
    def register(builder: Callable[[], Sample]) -> Callable[[], Sample]:
        assert name not in REGISTRY, name
        REGISTRY[name] = builder
        return builder
    return register


def _tf() -> Any:
    import tensorflow as tf
    return tf


def _rand(shape: tuple[int, ...], seed: int, dtype: Any = np.float32,
          scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def _s(fn: Callable[..., Any], *inputs: np.ndarray, names: list[str] | None = None,
       variables: dict[str, Any] | None = None, doc: str = "") -> Sample:
    return Sample(fn, list(inputs), names, variables or {}, doc or (fn.__doc__ or "").strip())


# ------------------------------------------------------------------ plain compilable graphs

@corpus_fn("chain_relu")
def _chain_relu() -> Sample:
    tf = _tf()

    def f(x, w):
        """MatMul -> Relu -> Mul/Add: one cluster."""
        return tf.nn.relu(tf.matmul(x, w)) * 2.0 + 1.0
    return _s(f, _rand((2, 3), 0), _rand((3, 4), 1), names=["x", "w"])


@corpus_fn("tiny_two_ops")
def _tiny_two_ops() -> Sample:
    tf = _tf()

    def f(x):
        """Two ops: below the default min cluster size of 4."""
        return tf.tanh(x) + x
    return _s(f, _rand((3,), 2), names=["x"])


@corpus_fn("identity_chain")
def _identity_chain() -> Sample:
    tf = _tf()

    def f(x):
        """Identity nodes (effective size 0) between a few real ops."""
        y = tf.identity(tf.identity(x))
        y = tf.identity(tf.exp(y))
        y = tf.identity(tf.identity(y * 3.0))
        return tf.identity(tf.sin(y) - y)
    return _s(f, _rand((2, 2), 3), names=["x"])


@corpus_fn("identity_only")
def _identity_only() -> Sample:
    tf = _tf()

    def f(x):
        """Only Identity/StopGradient: nothing worth clustering."""
        return tf.identity(tf.stop_gradient(tf.identity(x)))
    return _s(f, _rand((4,), 4), names=["x"])


@corpus_fn("int_bitwise")
def _int_bitwise() -> Sample:
    tf = _tf()

    def f(a, b):
        """Integer arithmetic, bitwise ops, comparisons and casts."""
        c = tf.bitwise.bitwise_and(a, b) + tf.bitwise.left_shift(a, 1)
        d = tf.math.floormod(c, 7) * tf.math.floordiv(b + 9, 3)
        return tf.cast(tf.greater(d, a), tf.int32) + tf.reduce_max(d)
    return _s(f, np.arange(6, dtype=np.int32), np.arange(6, 12, dtype=np.int32), names=["a", "b"])


@corpus_fn("half_precision")
def _half_precision() -> Sample:
    tf = _tf()

    def f(x, w):
        """float16 MatMul/Neg chain."""
        y = -tf.matmul(x, w)
        return tf.cast(tf.nn.sigmoid(y) * tf.constant(2.0, tf.float16), tf.float32)
    return _s(f, _rand((2, 4), 5, np.float16), _rand((4, 2), 6, np.float16), names=["x", "w"])


@corpus_fn("reductions_argmax")
def _reductions_argmax() -> Sample:
    tf = _tf()

    def f(x):
        """Reductions, ArgMax, cumsum, keepdims broadcasting."""
        m = tf.reduce_mean(x, axis=1, keepdims=True)
        v = tf.reduce_sum(tf.square(x - m), axis=1)
        am = tf.cast(tf.argmax(x, axis=1), tf.float32)
        return tf.math.cumsum(v + am) / tf.reduce_prod(tf.abs(x) + 1.0)
    return _s(f, _rand((3, 5), 7), names=["x"])


@corpus_fn("concat_split_pack")
def _concat_split_pack() -> Sample:
    tf = _tf()

    def f(x, y):
        """ConcatV2, SplitV, Pack/Unpack, Transpose, Tile, Pad."""
        c = tf.concat([x, y * 2.0], axis=0)
        a, b = tf.split(c, [1, 3], axis=0)
        s = tf.stack(tf.unstack(tf.transpose(b), axis=0), axis=1)
        t = tf.tile(a, [3, 1])
        return tf.pad(s + t, [[1, 0], [0, 1]]) * 0.5
    return _s(f, _rand((2, 3), 8), _rand((2, 3), 9), names=["x", "y"])


@corpus_fn("gather_scatter")
def _gather_scatter() -> Sample:
    tf = _tf()

    def f(params, idx):
        """Gather/GatherNd/TensorScatterUpdate with integer indices from the inputs."""
        g = tf.gather(params, idx)
        u = tf.tensor_scatter_nd_update(params, tf.expand_dims(idx, 1), g * 2.0)
        return tf.gather_nd(u, [[0, 1], [2, 0]]) + tf.reduce_sum(g)
    return _s(f, _rand((4, 3), 10), np.array([2, 0], np.int32), names=["params", "idx"])


@corpus_fn("topk_sort")
def _topk_sort() -> Sample:
    tf = _tf()

    def f(x):
        """TopKV2 (SORT category) and sort (TopK + reverse) inside arithmetic."""
        v, i = tf.math.top_k(x * 2.0, k=3)
        s = tf.sort(x, axis=-1, direction="DESCENDING")
        return v + tf.cast(i, tf.float32) + s[:, :3]
    return _s(f, _rand((2, 6), 11), names=["x"])


@corpus_fn("einsum_softplus")
def _einsum_softplus() -> Sample:
    tf = _tf()

    def f(a, b):
        """Einsum (BatchMatMul) with softplus/erf elementwise ops."""
        e = tf.einsum("bij,bjk->bik", a, b)
        return tf.math.softplus(e) + tf.math.erf(e)
    return _s(f, _rand((2, 2, 3), 12), _rand((2, 3, 2), 13), names=["a", "b"])


# ------------------------------------------------------------------ uncompilable ops / barriers

@corpus_fn("unique_split")
def _unique_split() -> Sample:
    tf = _tf()

    def f(x):
        """Elementwise chain, tf.unique in the middle, elementwise chain after."""
        y = tf.nn.relu(x * 2.0 + 1.0) - 0.5
        u, idx = tf.unique(tf.reshape(tf.round(y), [-1]))
        z = tf.cast(idx, tf.float32) * 3.0 + tf.reduce_sum(u)
        return tf.exp(-tf.abs(z)) * 2.0 + 1.0
    return _s(f, _rand((3, 4), 14), names=["x"])


@corpus_fn("unique_cycle")
def _unique_cycle() -> Sample:
    tf = _tf()

    def f(x):
        """a -> Unique -> b and a -> b directly: contracting a->b would create a cycle."""
        a = tf.tanh(x * 1.5 + 0.25)
        u, idx = tf.unique(tf.round(a * 2.0))
        b = tf.gather(u, idx)
        return (a * b + a) * 2.0 - 1.0
    return _s(f, _rand((8,), 15), names=["x"])


@corpus_fn("strings_mixed")
def _strings_mixed() -> Sample:
    tf = _tf()

    def f(x):
        """Numeric -> AsString -> StringToNumber -> numeric, plus StringLength."""
        y = x * 3.0 + 1.0
        s = tf.strings.as_string(y, precision=3)
        back = tf.strings.to_number(s)
        ln = tf.cast(tf.strings.length(s), tf.float32)
        return tf.sqrt(tf.abs(back)) + ln * 0.1 + tf.sin(y)
    return _s(f, _rand((2, 3), 16), names=["x"])


@corpus_fn("string_const_join")
def _string_const_join() -> Sample:
    tf = _tf()

    def f(x):
        """String Const feeding string ops next to a numeric chain."""
        pre = tf.constant(["a", "b", "c"])
        joined = tf.strings.join([pre, tf.strings.as_string(x)], separator=":")
        n = tf.cast(tf.strings.length(joined), tf.float32)
        xf = tf.cast(x, tf.float32)
        return n * tf.exp(xf) + tf.cos(xf)
    return _s(f, np.array([1, 2, 3], np.int32), names=["x"])


@corpus_fn("py_function_mid")
def _py_function_mid() -> Sample:
    tf = _tf()

    def f(x):
        """tf.py_function (EagerPyFunc) between two compilable chains."""
        y = tf.nn.relu(x) * 2.0 + 1.0
        z = tf.py_function(lambda a: a * 0.5, [y], tf.float32)
        z = tf.ensure_shape(z, [2, 3])
        return tf.tanh(z) * y + 3.0
    return _s(f, _rand((2, 3), 17), names=["x"])


@corpus_fn("stateful_random")
def _stateful_random() -> Sample:
    tf = _tf()

    def f(x):
        """Stateful RandomUniform / RandomStandardNormal mixed with arithmetic."""
        r = tf.random.uniform([2, 3], seed=1)
        n = tf.random.normal([2, 3], seed=2)
        return (x + r) * 2.0 + tf.exp(n) * x - 1.0
    return _s(f, _rand((2, 3), 18), names=["x"])


@corpus_fn("stateless_random")
def _stateless_random() -> Sample:
    tf = _tf()

    def f(x, seed):
        """Stateless RNG (compilable) mixed with arithmetic."""
        r = tf.random.stateless_uniform([2, 3], seed=seed)
        n = tf.random.stateless_normal([2, 3], seed=seed + 1)
        return (x + r) * 2.0 + tf.exp(n) * x - 1.0
    return _s(f, _rand((2, 3), 19), np.array([7, 11], np.int32), names=["x", "seed"])


@corpus_fn("random_shape")
def _random_shape() -> Sample:
    tf = _tf()

    def f(x):
        """A stateful random op computes a Reshape shape (must-be-constant stateful op)."""
        k = tf.random.uniform([], 2, 3, dtype=tf.int32, seed=3)  # always 2
        y = tf.reshape(x * 2.0 + 1.0, tf.stack([k, -1]))
        return tf.nn.relu(y) - 1.0
    return _s(f, _rand((2, 4), 20), names=["x"])


@corpus_fn("assert_ops")
def _assert_ops() -> Sample:
    tf = _tf()

    def f(x):
        """tf.debugging.assert_* (Assert op) gating arithmetic via control deps."""
        y = tf.abs(x) + 1.0
        with tf.control_dependencies([tf.debugging.assert_positive(y),
                                      tf.debugging.assert_less(x, 100.0)]):
            z = tf.identity(y)
        return tf.math.log(z) * 2.0 + tf.sqrt(z)
    return _s(f, _rand((3,), 21), names=["x"])


@corpus_fn("check_numerics")
def _check_numerics() -> Sample:
    tf = _tf()

    def f(x):
        """CheckNumerics in a chain of compilable ops."""
        y = tf.exp(x) * 2.0 + 1.0
        y = tf.debugging.check_numerics(y, "bad y")
        return tf.math.log(y) - tf.tanh(y) * 0.5
    return _s(f, _rand((2, 2), 22), names=["x"])


@corpus_fn("tf_print")
def _tf_print() -> Sample:
    tf = _tf()

    def f(x):
        """tf.print (StringFormat + PrintV2, stateful) in the middle of arithmetic."""
        y = x * 2.0 + 1.0
        tf.print("y sum:", tf.reduce_sum(y), output_stream=sys.stderr)
        return tf.nn.relu(y) * tf.sigmoid(y) - 0.5
    return _s(f, _rand((2, 2), 23), names=["x"])


@corpus_fn("where_mask")
def _where_mask() -> Sample:
    tf = _tf()

    def f(x):
        """tf.where(cond) (Where op, data-dependent shape) feeding Gather."""
        y = x * 2.0 - 0.5
        idx = tf.where(y > 0.0)
        g = tf.gather_nd(y, idx)
        return tf.reduce_sum(tf.exp(g)) + tf.reduce_mean(y * y)
    return _s(f, _rand((3, 4), 24), names=["x"])


@corpus_fn("boolean_mask")
def _boolean_mask() -> Sample:
    tf = _tf()

    def f(x):
        """tf.boolean_mask (Where + GatherV2 + shape arithmetic)."""
        y = tf.tanh(x) * 3.0
        m = tf.boolean_mask(y, y > 0.1)
        return tf.reduce_sum(m * m + 1.0) * 0.5 + tf.reduce_max(y)
    return _s(f, _rand((10,), 25), names=["x"])


@corpus_fn("where_select")
def _where_select() -> Sample:
    tf = _tf()

    def f(x, y):
        """Three-argument tf.where (SelectV2), fully compilable."""
        c = x > y
        return tf.where(c, x * 2.0, y - 1.0) + tf.where(c, 1.0, 0.0) * tf.exp(y)
    return _s(f, _rand((2, 3), 26), _rand((2, 3), 27), names=["x", "y"])


@corpus_fn("linalg_svd")
def _linalg_svd() -> Sample:
    tf = _tf()

    def f(a):
        """Svd (inaccurate op) between compilable ops."""
        b = tf.matmul(a, a, transpose_b=True) + tf.eye(3)
        s, u, v = tf.linalg.svd(b)
        return tf.reduce_sum(s) * tf.matmul(u, v, transpose_b=True) + b
    return _s(f, _rand((3, 3), 28), names=["a"])


@corpus_fn("linalg_slow")
def _linalg_slow() -> Sample:
    tf = _tf()

    def f(a):
        """MatrixInverse and Qr (slow ops) with arithmetic around them."""
        b = tf.matmul(a, a, transpose_a=True) + 2.0 * tf.eye(3)
        inv = tf.linalg.inv(b)
        q, r = tf.linalg.qr(b)
        return tf.matmul(inv, q) * 2.0 + r - 1.0
    return _s(f, _rand((3, 3), 29), names=["a"])


# ------------------------------------------------------------------ shapes, fill

@corpus_fn("shape_consumers")
def _shape_consumers() -> Sample:
    tf = _tf()

    def f(x):
        """Shape/Size/Rank of an op output consumed by later arithmetic."""
        y = tf.nn.relu(x * 2.0)
        sh = tf.shape(y)
        sz = tf.cast(tf.size(y), tf.float32)
        rk = tf.cast(tf.rank(y), tf.float32)
        z = tf.reshape(y, [sh[0] * sh[1]])
        return z * sz + rk
    return _s(f, _rand((2, 3), 30), names=["x"])


@corpus_fn("shape_after_unique")
def _shape_after_unique() -> Sample:
    tf = _tf()

    def f(x):
        """Shape of a Unique output (dynamic shape) feeding Fill and Reshape."""
        u, _ = tf.unique(tf.round(x))
        n = tf.shape(u)
        ones = tf.fill(n, 2.0)
        return tf.reduce_sum(ones * u) + tf.reduce_sum(x * x)
    return _s(f, _rand((8,), 31) * 2, names=["x"])


@corpus_fn("fill_outside")
def _fill_outside() -> Sample:
    tf = _tf()

    def f(x):
        """Fill whose consumers lie outside its cluster (DeclusterNodes)."""
        y = tf.exp(x) * 2.0 + tf.sin(x)
        filled = tf.fill(tf.shape(y), 3.0)
        s = tf.strings.to_number(tf.strings.as_string(filled))  # consumer that cannot cluster
        return y * 2.0 + s
    return _s(f, _rand((2, 3), 32), names=["x"])


@corpus_fn("fill_inside")
def _fill_inside() -> Sample:
    tf = _tf()

    def f(x):
        """Fill consumed inside the same cluster."""
        filled = tf.fill([2, 3], 0.5)
        return tf.exp(x * filled) + filled * 2.0 - x
    return _s(f, _rand((2, 3), 33), names=["x"])


# ------------------------------------------------------------------ resource variables

@corpus_fn("variables_assign")
def _variables_assign() -> Sample:
    tf = _tf()
    w = tf.Variable(_rand((3, 2), 34), name="w")
    b = tf.Variable(np.zeros((2,), np.float32), name="b")

    def f(x):
        """Reads of w/b, assign_add on b, assign on w, then reads again."""
        y = tf.matmul(x, w) + b
        b.assign_add(tf.reduce_mean(y, axis=0))
        w.assign(w * 0.9)
        return tf.nn.relu(y) + b.read_value() * 2.0
    return _s(f, _rand((4, 3), 35), names=["x"], variables={"w": w, "b": b})


@corpus_fn("variable_write_then_read")
def _variable_write_then_read() -> Sample:
    tf = _tf()
    v = tf.Variable(np.ones((2, 2), np.float32), name="v")

    def f(x):
        """Write then read the same variable: an unsafe (W,R) resource pair."""
        v.assign(tf.tanh(x) * 2.0 + 1.0)
        r = v.read_value()
        return r * r - 1.0 + tf.exp(r)
    return _s(f, _rand((2, 2), 36), names=["x"], variables={"v": v})


@corpus_fn("int_assign_add_const")
def _int_assign_add_const() -> Sample:
    tf = _tf()
    step = tf.Variable(np.int64(0), name="step")
    acc = tf.Variable(np.zeros((3,), np.float32), name="acc")

    def f(x):
        """Integer AssignAddVariableOp with a scalar Const (iteration counter) + float updates."""
        step.assign_add(1)
        acc.assign_add(x * 2.0 + 1.0)
        return tf.exp(acc.read_value()) * tf.cast(step.read_value(), tf.float32)
    return _s(f, _rand((3,), 37), names=["x"], variables={"step": step, "acc": acc})


@corpus_fn("resource_gather")
def _resource_gather() -> Sample:
    tf = _tf()
    table = tf.Variable(_rand((5, 3), 38), name="table")

    def f(ids, x):
        """Embedding lookup on a variable (ResourceGather) followed by a dense chain."""
        e = tf.nn.embedding_lookup(table, ids)
        return tf.nn.relu(tf.matmul(e, x)) * 2.0 + 1.0
    return _s(f, np.array([0, 3, 4], np.int32), _rand((3, 2), 39), names=["ids", "x"],
              variables={"table": table})


# ------------------------------------------------------------------ control flow

@corpus_fn("while_loop")
def _while_loop() -> Sample:
    tf = _tf()

    def f(x):
        """tf.while_loop lowered to Enter/Merge/Switch/NextIteration/Exit."""
        i = tf.constant(0)

        def body(i, y):
            return i + 1, tf.tanh(y) * 1.5 + 0.1
        _, y = tf.while_loop(lambda i, y: i < 4, body, [i, x])
        return tf.exp(y) * 2.0 - y + 1.0
    return _s(f, _rand((2, 3), 40), names=["x"])


@corpus_fn("while_tensorarray")
def _while_tensorarray() -> Sample:
    tf = _tf()

    def f(x):
        """TensorArray written in a while loop, stacked afterwards."""
        ta = tf.TensorArray(tf.float32, size=3)

        def body(i, ta):
            return i + 1, ta.write(i, tf.sin(x * tf.cast(i, tf.float32)) + 1.0)
        _, ta = tf.while_loop(lambda i, ta: i < 3, body, [tf.constant(0), ta])
        return tf.reduce_sum(ta.stack() * 2.0, axis=0) + x
    return _s(f, _rand((4,), 41), names=["x"])


@corpus_fn("tensor_list")
def _tensor_list() -> Sample:
    tf = _tf()

    def f(x):
        """TensorArray outside loops (TensorList ops on DT_VARIANT)."""
        ta = tf.TensorArray(tf.float32, size=2, element_shape=[3])
        ta = ta.write(0, x * 2.0).write(1, tf.exp(x))
        return ta.stack() + 1.0
    return _s(f, _rand((3,), 42), names=["x"])


@corpus_fn("cond_simple")
def _cond_simple() -> Sample:
    tf = _tf()

    def f(x):
        """tf.cond lowered to Switch/Merge: deadness splits the branches."""
        s = tf.reduce_sum(x)
        y = tf.cond(s > 0.0, lambda: tf.exp(x) * 2.0 + 1.0, lambda: tf.sin(x) - 1.0)
        return y * 3.0 + tf.tanh(x)
    return _s(f, _rand((2, 3), 43), names=["x"])


@corpus_fn("cond_nested")
def _cond_nested() -> Sample:
    tf = _tf()

    def f(x, p):
        """Nested tf.cond with a predicate from the input."""
        def inner():
            return tf.cond(tf.reduce_max(x) > 1.0, lambda: x * 2.0, lambda: x + 3.0)
        y = tf.cond(p, inner, lambda: tf.square(x))
        return tf.exp(y) + tf.cos(y) * y
    return _s(f, _rand((3,), 44), np.array(True), names=["x", "p"])


@corpus_fn("control_deps")
def _control_deps() -> Sample:
    tf = _tf()

    def f(x):
        """Control dependencies and NoOps (tf.group) between compilable ops."""
        a = tf.exp(x) * 2.0
        b = tf.sin(x) + 1.0
        g = tf.group(a, b)
        with tf.control_dependencies([g]):
            c = tf.identity(x * 3.0)
        return a + b * c - 1.0
    return _s(f, _rand((4,), 45), names=["x"])


# ------------------------------------------------------------------ nested functions

@corpus_fn("noinline_uncompilable_call")
def _noinline_uncompilable_call() -> Sample:
    tf = _tf()

    @tf.function(experimental_attributes={"_noinline": True})
    def inner(a):
        return tf.strings.to_number(tf.strings.as_string(a * 2.0)) + tf.exp(a) * 3.0 - 1.0

    def f(x):
        """A _noinline callee containing string ops: instantiated as its own graph."""
        y = tf.nn.relu(x) * 2.0 + 1.0
        return inner(y) * tf.sin(y) + 0.5
    return _s(f, _rand((2, 3), 46), names=["x"])


@corpus_fn("jit_compile_inner")
def _jit_compile_inner() -> Sample:
    tf = _tf()

    @tf.function(jit_compile=True)
    def inner(a):
        return tf.tanh(a) * 2.0 + 1.0

    def f(x):
        """Callee with jit_compile=True (_XlaMustCompile) inside an auto-clustered caller."""
        return inner(tf.exp(x)) - tf.strings.to_number(tf.strings.as_string(x))
    return _s(f, _rand((2, 2), 47), names=["x"])


@corpus_fn("jit_compile_false_inner")
def _jit_compile_false_inner() -> Sample:
    tf = _tf()

    @tf.function(jit_compile=False)
    def inner(a):
        return tf.tanh(a) * 2.0 + 1.0 - tf.exp(a)

    def f(x):
        """Callee with jit_compile=False (_XlaMustCompile=false) inside an auto-clustered caller."""
        return inner(tf.exp(x) * 3.0) + tf.sin(x) * 2.0
    return _s(f, _rand((2, 2), 48), names=["x"])


@corpus_fn("nested_inlined_call")
def _nested_inlined_call() -> Sample:
    tf = _tf()

    @tf.function
    def inner(a, b):
        return tf.nn.relu(a * b + 1.0) - tf.unique(tf.reshape(a, [-1]))[0][0]

    def f(x):
        """A plain nested tf.function (inlined before clustering) used twice."""
        y = inner(x, tf.exp(x)) * 2.0
        return inner(y, x) + tf.sin(y)
    return _s(f, _rand((2, 3), 61), names=["x"])


# ------------------------------------------------------------------ model-ish blocks

@corpus_fn("conv_block")
def _conv_block() -> Sample:
    tf = _tf()
    k = _rand((3, 3, 2, 4), 49, scale=0.3)
    bias = _rand((4,), 50)

    def f(x):
        """Conv2D + BiasAdd + Relu + MaxPool + reduce."""
        y = tf.nn.conv2d(x, k, strides=1, padding="SAME")
        y = tf.nn.relu(tf.nn.bias_add(y, bias))
        y = tf.nn.max_pool2d(y, 2, 2, "VALID")
        return tf.reduce_mean(y, axis=[1, 2])
    return _s(f, _rand((1, 6, 6, 2), 51), names=["x"])


@corpus_fn("depthwise_avgpool")
def _depthwise_avgpool() -> Sample:
    tf = _tf()
    k = _rand((3, 3, 2, 1), 52, scale=0.3)

    def f(x):
        """DepthwiseConv2dNative + AvgPool + FusedBatchNorm (inference)."""
        y = tf.nn.depthwise_conv2d(x, k, [1, 1, 1, 1], "SAME")
        y = tf.nn.avg_pool2d(y, 2, 2, "VALID")
        y, _, _ = tf.compat.v1.nn.fused_batch_norm(
            y, tf.ones([2]), tf.zeros([2]), tf.zeros([2]), tf.ones([2]), is_training=False)
        return tf.nn.relu6(y)
    return _s(f, _rand((1, 4, 4, 2), 53), names=["x"])


@corpus_fn("attention")
def _attention() -> Sample:
    tf = _tf()
    wq, wk, wv = (_rand((8, 8), s, scale=0.3) for s in (54, 55, 56))

    def f(x):
        """Single-head attention: projections, scaled scores, softmax, weighted sum."""
        q, k, v = tf.matmul(x, wq), tf.matmul(x, wk), tf.matmul(x, wv)
        s = tf.matmul(q, k, transpose_b=True) / np.sqrt(8.0).astype(np.float32)
        return tf.matmul(tf.nn.softmax(s, axis=-1), v)
    return _s(f, _rand((4, 8), 57), names=["x"])


@corpus_fn("layer_norm_gelu")
def _layer_norm_gelu() -> Sample:
    tf = _tf()

    def f(x, g, b):
        """Layer norm (moments, rsqrt) followed by GELU."""
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        y = (x - mean) * tf.math.rsqrt(var + 1e-5) * g + b
        return tf.nn.gelu(y)
    return _s(f, _rand((3, 6), 58), np.ones((6,), np.float32), np.zeros((6,), np.float32),
              names=["x", "gamma", "beta"])


@corpus_fn("sparse_xent")
def _sparse_xent() -> Sample:
    tf = _tf()

    def f(logits, labels):
        """SparseSoftmaxCrossEntropyWithLogits + OneHot + LogSoftmax."""
        l1 = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        oh = tf.one_hot(labels, 5)
        l2 = -tf.reduce_sum(oh * tf.nn.log_softmax(logits), axis=-1)
        return tf.reduce_mean(l1 + l2)
    return _s(f, _rand((4, 5), 59), np.array([0, 3, 1, 4], np.int32), names=["logits", "labels"])


@corpus_fn("dynamic_reshape")
def _dynamic_reshape() -> Sample:
    tf = _tf()

    def f(x):
        """Reshape with a shape computed from tf.shape (compile-time constant input)."""
        n = tf.shape(x)[0]
        y = tf.reshape(x * 2.0, tf.stack([n, -1, 2]))
        return tf.reduce_sum(tf.nn.softmax(y), axis=1) + tf.cast(n, tf.float32)
    return _s(f, _rand((2, 4), 60), names=["x"])


# ------------------------------------------------------------------ random DAGs

_UNARY = ("tanh", "exp_neg", "relu", "sigmoid", "sin", "square", "neg")
_BINARY = ("add", "mul", "sub", "maximum", "matmul")
_BARRIER = ("py", "str", "uniq", "rng", "check", "assert")


def _dag_ops(seed: int, n: int, barrier_p: float) -> list[tuple[str, list[int]]]:
    """A reproducible op list: (kind, input ids); ids < 0 are the function arguments."""
    rng = np.random.default_rng(1000 + seed)
    ops: list[tuple[str, list[int]]] = []
    for i in range(n):
        def pick() -> int:
            # Prefer recent nodes so chains form; sometimes reach back to inputs.
            lo = max(-2, i - 4)
            return int(rng.integers(lo, i)) if i > 0 else int(rng.integers(-2, 0))
        r = rng.random()
        if r < barrier_p:
            ops.append((str(rng.choice(_BARRIER)), [pick()]))
        elif r < barrier_p + (1 - barrier_p) * 0.5:
            ops.append((str(rng.choice(_UNARY)), [pick()]))
        else:
            ops.append((str(rng.choice(_BINARY)), [pick(), pick()]))
    return ops


def _random_dag(seed: int, n: int = 16, barrier_p: float = 0.2) -> Sample:
    tf = _tf()
    ops = _dag_ops(seed, n, barrier_p)

    def apply(kind: str, a: Any, b: Any = None) -> Any:
        if kind == "tanh":
            return tf.tanh(a)
        if kind == "exp_neg":
            return tf.exp(-tf.abs(a))
        if kind == "relu":
            return tf.nn.relu(a)
        if kind == "sigmoid":
            return tf.sigmoid(a)
        if kind == "sin":
            return tf.sin(a)
        if kind == "square":
            return tf.square(a) * 0.5
        if kind == "neg":
            return -a
        if kind == "add":
            return a + b
        if kind == "mul":
            return a * b
        if kind == "sub":
            return a - b
        if kind == "maximum":
            return tf.maximum(a, b)
        if kind == "matmul":
            return tf.matmul(a, b) * 0.25
        if kind == "py":
            return tf.ensure_shape(tf.py_function(lambda t: t, [a], tf.float32), [4, 4])
        if kind == "str":
            return tf.strings.to_number(tf.strings.as_string(a, precision=4))
        if kind == "uniq":
            u, idx = tf.unique(tf.reshape(a, [-1]))
            return tf.reshape(tf.gather(u, idx), [4, 4])
        if kind == "rng":
            return a + tf.random.uniform([4, 4], seed=seed) * 0.01
        if kind == "check":
            return tf.debugging.check_numerics(a, "dag")
        if kind == "assert":
            with tf.control_dependencies([tf.debugging.assert_all_finite(a, "dag")]):
                return tf.identity(a)
        raise ValueError(kind)

    def f(x, y):
        vals: dict[int, Any] = {-2: x, -1: y}
        used: set[int] = set()
        for i, (kind, ins) in enumerate(ops):
            used.update(ins)
            vals[i] = apply(kind, *[vals[j] for j in ins])
        sinks = [vals[i] for i in range(len(ops)) if i not in used]
        return tf.add_n(sinks) if len(sinks) > 1 else sinks[0]

    f.__doc__ = f"Random DAG seed={seed}: " + " ".join(
        f"{i}={k}({','.join(map(str, ins))})" for i, (k, ins) in enumerate(ops))
    return _s(f, _rand((4, 4), 2000 + seed, scale=0.5), _rand((4, 4), 3000 + seed, scale=0.5),
              names=["x", "y"])


for _seed, (_n, _p) in enumerate([(12, 0.15), (16, 0.2), (20, 0.25), (24, 0.2), (18, 0.35),
                                  (30, 0.15), (14, 0.0), (22, 0.3)]):
    corpus_fn(f"random_dag_{_seed}")(lambda _seed=_seed, _n=_n, _p=_p: _random_dag(_seed, _n, _p))


def describe(name: str) -> str:
    """First docstring line of a corpus entry (builds it, so TF gets imported)."""
    return REGISTRY[name]().description.splitlines()[0] if REGISTRY[name]().description else ""


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="List the clustering-parity corpus and its flag sets.")
    ap.add_argument("--describe", action="store_true", help="build each entry and print its doc "
                                                            "(imports TensorFlow)")
    args = ap.parse_args()
    print(f"{len(REGISTRY)} functions; flag sets: {', '.join(FLAGSETS)}")
    for key in REGISTRY:
        print(f"  {key:28s} {describe(key) if args.describe else ''}")
