"""TF's XLA CPU semantics at the edges (issue 19): each case runs under TF's XLA (jit_compile=True,
the oracle) and ours (jit_compile=True), and the results must be equal bit for bit (NaNs by position,
zeros by sign)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        return bool(np.array_equal(np.isnan(a64), np.isnan(b64))
                    and np.array_equal(np.signbit(a64), np.signbit(b64) | np.isnan(b64) & np.signbit(a64))
                    and np.array_equal(np.nan_to_num(a64), np.nan_to_num(b64)))
    return bool(np.array_equal(a, b))


def assert_like_xla(fn, *args, auto: bool = False) -> None:
    want = tf.function(fn, jit_compile=True)(*args)
    runs = [txc.function(fn, jit_compile=True)(*args)]
    if auto:
        runs.append(txc.function(fn, flags="--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit "
                                           "--tf_xla_min_cluster_size=1")(*args))
    want = want if isinstance(want, (list, tuple)) else [want]
    bad = []
    for got in runs:
        got = got if isinstance(got, (list, tuple)) else [got]
        bad += [f"output {k}: ours {g.numpy()!r}, TF's XLA {w.numpy()!r}"
                for k, (w, g) in enumerate(zip(want, got)) if not _same(w.numpy(), g.numpy())]
    assert not bad, "\n".join(bad)


DENORMAL = np.float32(1e-40)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_denormals_are_flushed_like_tf(dtype):
    tiny = np.finfo(dtype).tiny
    x = np.array([tiny / 4, -tiny / 4, 1.0, 0.0, tiny], dtype)
    y = np.array([1e30, 1e30, tiny / 8, 2.0, 0.5], dtype)

    def f(x, y):
        return (tf.sign(x), x * 1.0, tf.sqrt(x), x / y, x < 0, tf.floor(x), x * y,
                tf.math.xlogy(x, y), tf.math.atan2(x, y), tf.argmin(x), tf.nn.l2_normalize(x), tf.math.log1p(x))
    assert_like_xla(f, x, y, auto=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_expm1_and_elu_pass_denormals_through(dtype):
    # XLA:CPU's expm1 of an x equal to 0 under DAZ is x itself (libm's flushes it); elu's negative side is expm1
    tiny = np.finfo(dtype).tiny
    x = np.array([tiny / 4, -tiny / 4, tiny / 1e6, 0.0, -0.0], dtype)
    assert_like_xla(lambda x: (tf.math.expm1(x), tf.nn.elu(x)), x, auto=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [3, 7])
def test_max_min_of_denormals_flush_on_short_loops(dtype, n):
    """TF's XLA returns an f32/f64 max/min's ±denormal as ±0 on every shape (x86 max/min under DAZ). On a loop
    shorter than one vector, relu's constant 0 is a masked lane's poison in ours and LLVM blended the raw
    bits instead (relu of a -denormal was -denormal; seed 74000814)."""
    tiny = np.finfo(dtype).tiny
    x = np.full((n, 1), -tiny / 4, dtype)
    x[1] = tiny / 4
    y = np.zeros((n, 1), dtype)

    def f(x, y):
        return tf.nn.relu(x), tf.maximum(x, -1.0), tf.minimum(x, 1.0), tf.maximum(x, y), tf.minimum(-y, x)
    assert_like_xla(f, x, y, auto=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(1, 4, 4, 7), (2, 9, 9, 8)])
def test_max_pool_and_reduce_max_of_denormals(dtype, shape):
    """Reducers' max/min over ±denormals (max pools, short and long reductions) as TF's XLA's: the short-loop
    flush above is an elementwise op's, and a reducer's x86 max/min flushes under DAZ by itself."""
    tiny = np.finfo(dtype).tiny
    vals = np.array([tiny / 4, -tiny / 4, -tiny / 2, tiny / 3, 0.0, -0.0, -1.0], dtype)
    x = np.random.default_rng(len(shape) + shape[-1]).choice(vals, size=shape)

    def f(x):
        return (tf.nn.max_pool2d(x, 3, 2, "VALID"), tf.nn.max_pool2d(x, 2, 1, "SAME"), tf.reduce_max(x, axis=-1),
                tf.reduce_min(x, axis=1), tf.reduce_min(x))
    assert_like_xla(f, x, auto=True)


def test_short_loop_flush_is_not_applied_to_reducers():
    """The flush goes by a loop's length: a reducer's max is scalar but runs per window step of a longer loop,
    where a flush per step doubled a 3x3 max pool's time (ftz19's, 0.22 -> 0.44 ms on f32[1,147,147,64]). The
    reduce-window keeps its one flush of each result (a select chain's ±denormal); an elementwise max over
    f32[7] keeps its own."""
    from tfxla_cluster.codegen.options import CodegenOptions
    from tfxla_cluster.codegen.executable import emit_module
    from tfxla_cluster.hlo.parser import parse_module

    def ir(entry: str) -> str:
        text = ("HloModule m\n\nmax {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                "  ROOT c = f32[] maximum(a, b)\n}\n\nENTRY main {\n" + entry + "\n}\n")
        return str(emit_module(parse_module(text), CodegenOptions())[1])
    pool = ir("  x = f32[1,35,35,64]{3,2,1,0} parameter(0)\n  z = f32[] constant(-inf)\n"
              "  ROOT r = f32[1,17,17,64]{3,2,1,0} reduce-window(x, z), window={size=1x3x3x1 stride=1x2x2x1}, "
              "to_apply=max")
    relu = ir("  x = f32[7]{0} parameter(0)\n  z = f32[] constant(0)\n  b = f32[7]{0} broadcast(z), dimensions={}\n"
              "  ROOT r = f32[7]{0} maximum(x, b)")
    flush = 'call float @"llvm.copysign'
    assert pool.count(flush) == 1 and flush in relu


def test_f64_log_of_denormals_under_daz():
    # XLA:CPU's f64 log tests x == 0 as a float compare: under DAZ ±denormals are 0, so -inf (glibc's log
    # would give -745.13, or NaN for a negative one). (f32: the next test.)
    tiny = np.finfo(np.float64).tiny
    x = np.array([tiny / 4, -tiny / 4, 5e-324, -5e-324, tiny, 0.0, -0.0, 1.0, -1.0, np.inf], np.float64)
    assert_like_xla(lambda x: (tf.math.log(x), tf.math.xlogy(tf.ones_like(x), x), tf.math.log1p(x)), x, auto=True)
    assert_like_xla(lambda x: tf.math.log(x[:1]), x)


@pytest.mark.parametrize("n", [3, 4, 7, 8, 13, 15, 16, 23])
def test_f32_log_of_denormals_glibc_in_short_remainders(n):
    """TF's XLA runs a lone f32 log over f32[n], n < 16, in 8-lane vectors plus one vector of n mod 8 lanes; 3, 5, 6
    or 7 lanes become glibc logf calls: -103.97 for a positive denormal under DAZ, NaN for a negative one (its
    own log: -inf). Fused with another op, or on other shapes, every element is XLA's (seeds 74000330/856)."""
    tiny = np.finfo(np.float32).tiny
    x = np.full((n,), tiny / 4, np.float32)
    x[::3] = -tiny / 2
    x[1::4] = 0.5
    assert_like_xla(lambda x: tf.math.log(x), x, auto=True)
    assert_like_xla(lambda x: tf.math.log(x) * 2.0, x)
    assert_like_xla(lambda x: tf.math.log(x), x.reshape(1, n))


def test_denormals_flushed_in_parallel_kernels():
    # big enough that the elementwise kernel is split across pool threads
    x = np.full((1 << 20,), DENORMAL, np.float32)
    assert_like_xla(lambda x: (tf.sign(x), x * 3.0), x)


@pytest.mark.parametrize("dtype", [tf.int8, tf.int16, tf.int32, tf.int64])
def test_floordiv_floormod_integer_edges(dtype):
    xs = [-5, 5, 0, -7, dtype.min, 0, dtype.min, 7, -7, dtype.max]
    ys = [0, 0, 0, 2, -1, dtype.min, 3, -2, -2, -1]
    x, y = tf.constant(xs, dtype), tf.constant(ys, dtype)
    assert_like_xla(lambda x, y: (tf.math.floordiv(x, y), tf.math.floormod(x, y)), x, y)


def test_integer_pow_negative_exponents():
    x = tf.constant([-1, -1, 2, 0, -1, 1, 3, -2], tf.int32)
    y = tf.constant([-3, -2, -1, -1, -4, -5, 2, 3], tf.int32)
    assert_like_xla(lambda x, y: tf.pow(x, y), x, y)
    # constant-folded: XLA's evaluator (not its emitter) decides
    assert_like_xla(lambda: tf.pow(tf.constant([-1, -1, 2, 1]), tf.constant([-3, -2, -1, -5])))


@pytest.mark.parametrize("dtype", [tf.int8, tf.uint8, tf.int16, tf.uint16])
def test_narrow_int_reductions_accumulate_in_32_bits(dtype):
    x = tf.constant([[dtype.max, dtype.max - 1, dtype.max, 3], [1, 2, 3, 4]], dtype)
    assert_like_xla(lambda x: (tf.reduce_mean(x), tf.reduce_mean(x, 1), tf.reduce_sum(x, 0),
                               tf.reduce_prod(x, 1)), x)


def test_gather_with_empty_indices_or_empty_axis():
    x = tf.zeros([3, 0, 2])
    assert_like_xla(lambda x: (tf.gather(x, tf.constant([], tf.int32), axis=1),
                               tf.gather(x, tf.zeros([0, 2], tf.int32), axis=0),
                               tf.gather_nd(x, tf.zeros([0, 2], tf.int32))), x)
    y = tf.reshape(tf.range(6.0), [3, 2])
    assert_like_xla(lambda y: (tf.gather(y, tf.constant([], tf.int32)), tf.gather_nd(y, tf.zeros([0, 1], tf.int32))), y)


def test_gather_from_empty_axis():
    def f(x, y):
        return (tf.gather(x, tf.constant([0, 0]), axis=1), tf.gather(x, tf.zeros([2, 1], tf.int32), axis=1),
                tf.gather_nd(x, tf.zeros([4, 2], tf.int32)), tf.gather_nd(y, tf.zeros([2, 2], tf.int32)),
                tf.gather(y, tf.constant([1]), axis=0))
    assert_like_xla(f, np.zeros([3, 0, 2], np.float32), np.zeros([0, 3], np.int32))


def test_empty_slice_of_concat():
    def f(x, y):
        c = tf.concat([x, y], 0)
        return tf.slice(c, [1], [0]), tf.slice(c, [0], [0]), tf.slice(c, [5], [0]), c[3:3], c[1:4]
    assert_like_xla(f, np.ones([2], np.float32), np.arange(3, dtype=np.float32), auto=True)


def test_roll_with_computed_shift():
    assert_like_xla(lambda x: (tf.roll(x, tf.size(x) // 2, 0), tf.roll(x, tf.reduce_sum(tf.shape(x)) - 7, 0)),
                    np.arange(5, dtype=np.float32))


@pytest.mark.parametrize("op", [tf.reduce_max, tf.reduce_min, tf.reduce_sum, tf.reduce_prod])
def test_reductions_over_many_elements(op):
    x = np.random.default_rng(0).standard_normal(300_000).astype(np.float32) * 0.001 + 1.0
    assert_like_xla(lambda x: (op(x), op(tf.reshape(x, [3, 100_000]), 1)), x) if op not in (
        tf.reduce_sum, tf.reduce_prod) else None
    if op in (tf.reduce_sum, tf.reduce_prod):  # reassociated: compare within rounding
        want = tf.function(lambda x: op(x), jit_compile=True)(x).numpy()
        got = txc.function(lambda x: op(x), jit_compile=True)(x).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_exact_gelu_special_values(dtype):
    x = tf.constant([np.inf, -np.inf, 0.0, -0.0, np.nan, -30.0, 30.0, 1e4], dtype)
    assert_like_xla(lambda x: tf.nn.gelu(x, approximate=False), x)


@pytest.mark.parametrize("dtype", [tf.int32, tf.uint8, tf.bool])
def test_integer_and_bool_reductions_over_many_elements(dtype):
    rng = np.random.default_rng(1)
    x = tf.constant(rng.integers(0, 2 if dtype == tf.bool else 100, 300_000).astype(dtype.as_numpy_dtype))
    f = (lambda x: (tf.reduce_any(x), tf.reduce_all(x))) if dtype == tf.bool else \
        (lambda x: (tf.reduce_max(x), tf.reduce_min(x), tf.reduce_sum(x)))
    assert_like_xla(f, x)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_signed_zeros_of_max_min_relu_clip(dtype):
    x = tf.constant([-0.0, 0.0, -0.0, 0.0, np.nan, 1.0], dtype)
    y = tf.constant([0.0, -0.0, -0.0, 0.0, 0.0, np.nan], dtype)

    def f(x, y):
        z, mz = tf.constant(0.0, dtype), tf.constant(-0.0, dtype)
        return (tf.nn.relu(x), tf.nn.relu6(x), tf.maximum(x, y), tf.minimum(x, y), tf.maximum(z, x),
                tf.maximum(mz, x), tf.minimum(z, x), tf.minimum(x, mz), tf.clip_by_value(x, y, 6.0),
                tf.clip_by_value(x, z, 6.0), tf.clip_by_value(x, -1.0, mz))
    assert_like_xla(f, x, y, auto=True)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_max_min_with_nan_follow_xla_fast_min_max(dtype):
    x = tf.constant([1.0, np.nan, 2.0, np.nan, -1.0], dtype)
    y = tf.constant([np.nan, 1.0, np.nan, np.nan, 3.0], dtype)

    def f(x, y):
        return (tf.maximum(x, y), tf.minimum(x, y), tf.reduce_max(x), tf.reduce_max(y), tf.reduce_min(x),
                tf.maximum(x, 1.5), tf.nn.relu(y), tf.reduce_max(tf.reshape(tf.tile(x, [9]), [5, 9]), 1))
    assert_like_xla(f, x, y, auto=True)


@pytest.mark.parametrize("dtype", [tf.int32, tf.int64])
def test_integer_pow_huge_exponents(dtype):
    x = tf.constant([10, 3, -1, 2, 7, 1, 0], dtype)
    y = tf.constant([dtype.max, dtype.max - 1, dtype.max, 64, 65, dtype.max, dtype.max], dtype)
    assert_like_xla(lambda x, y: tf.pow(x, y), x, y)


def test_int32_sum_and_mean_wrap():
    big = [0, 11, 0, 0, 0, 0, 2147483647, 0, 0, 0, 0, 0, 5, 2147483647, 9]
    assert_like_xla(lambda x: (tf.reduce_mean(x), tf.reduce_sum(x), tf.reduce_sum(tf.reshape(x, [3, 5]), 0)),
                    tf.constant(big, tf.int32))


def test_hlo_evaluator_int32_reduce_wraps():
    """XLA's HloEvaluator (constant folding) adds in the element type: int32 sums wrap."""
    from tfxla_cluster.hlo.evaluator import evaluate
    from tfxla_cluster.hlo.parser import parse_module

    m = parse_module("""HloModule m
%add (a: s32[], b: s32[]) -> s32[] {
  %a = s32[] parameter(0)
  %b = s32[] parameter(1)
  ROOT %s = s32[] add(%a, %b)
}
ENTRY %e () -> s32[] {
  %c = s32[3] constant({2147483647, 11, 2147483647})
  %z = s32[] constant(0)
  ROOT %r = s32[] reduce(%c, %z), dimensions={0}, to_apply=%add
}""")
    assert int(evaluate(m)) == (2 * 2147483647 + 11) - 2 ** 32


def test_tanh_saturates_to_exactly_one():
    x = tf.constant([-92.6, -10.0, -8.0, -7.95, 7.95, 8.0, 9.0, 20.0, -3.0, 0.0003], tf.float32)
    assert_like_xla(lambda x: (tf.tanh(x), tf.nn.gelu(x, approximate=True)), x)


def test_max_min_with_nan_constant():
    x = np.array([0.0, -1.0, 3.0, np.nan], np.float64)
    assert_like_xla(lambda x: (tf.maximum(tf.constant(np.nan, tf.float64), x), tf.minimum(tf.constant(np.nan, tf.float64), x),
                               tf.maximum(tf.constant(1.5, tf.float64), x)), x)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_scatter_max_min_of_one_index_over_a_broadcast_constant(dtype):
    """XLA:CPU inlines a one-index scatter into max(broadcast init, update), constant on the rhs: a NaN
    update wins over the init; with two indices, or a non-constant operand, the operand slice stays first."""
    x = tf.constant([[0.0, np.nan]], dtype)
    two = tf.constant([[0.0, np.nan], [np.nan, 1.0]], dtype)

    def f(x, two):
        return (tf.math.unsorted_segment_max(x, [0], 1), tf.math.unsorted_segment_min(x, [1], 3),
                tf.math.unsorted_segment_max(x, [-1], 2), tf.math.unsorted_segment_max(two, [0, 0], 1),
                tf.tensor_scatter_nd_max(tf.fill([2, 2], tf.constant(5, dtype)), [[1]], x),
                tf.tensor_scatter_nd_min(tf.constant([[0, 2], [3, 4]], dtype), [[0]], x),
                tf.tensor_scatter_nd_max(two, [[1]], x))
    assert_like_xla(f, x, two, auto=True)


def test_generated_code_restores_the_callers_denormal_mode():
    """FTZ/DAZ hold only while our code runs: afterwards the calling thread's own float arithmetic (numpy's,
    our compiler's constant folding) keeps denormals, as before the call. (The restore was missing on
    ``ret void``, so one call left Python's thread flushing denormals and broke later HLO literal tests.)"""
    import numpy as np
    import tensorflow as tf

    import tfxla_cluster as txc

    def denormal_survives() -> bool:
        return float(np.float64(1e-320) * np.float64(1.0)) != 0.0

    assert denormal_survives()
    f = txc.function(lambda x: x * 2.0 + 1.0, jit_compile=True)
    np.testing.assert_array_equal(f(tf.ones([4])), np.full(4, 3.0, np.float32))
    assert denormal_survives()
    g = txc.function(lambda x: tf.exp(x) * 2.0, flags="--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit "
                                                       "--tf_xla_min_cluster_size=1")
    g(tf.ones([64, 64]))
    assert denormal_survives()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pow_with_denormal_exponent(dtype):
    # libm's pow (XLA:CPU calls it) tests y == ±0 on the bits: a denormal exponent under DAZ is not 0
    tiny = np.finfo(dtype).tiny
    x = np.array([np.inf, -np.inf, 0.0, -0.0, np.nan, 1.0, 2.0, 0.5], dtype)
    pos, neg = np.full_like(x, tiny / 4), np.full_like(x, -tiny / 4)
    assert_like_xla(lambda x, p, n: (tf.pow(x, p), tf.pow(x, n), tf.pow(x, tf.zeros_like(x)), tf.pow(tf.ones_like(x), x)),
                    x, pos, neg, auto=True)


def test_bf16_computes_in_f32_with_excess_precision_into_f32_casts():
    """XLA:CPU's float normalization: a bf16 op computes in f32 and is rounded to bf16, except for a user
    that converts it to f32 (xla_allow_excess_precision): that user reads the unrounded f32 value (a cast,
    the f32 accumulation of a bf16 sum or mean)."""
    a = tf.constant([1.0078125, 3.0, -1.5, 0.333984375, 100.5, 7.0], tf.bfloat16)
    b = tf.constant([1.0078125, 1.0078125, 0.1, 3.0, 1.0078125, -0.3], tf.bfloat16)

    def f(a, b):
        return (tf.cast(a * b, tf.float32), tf.reduce_sum(a * b), tf.cast(tf.exp(a) + b, tf.float32),
                a * b + b, tf.reduce_mean(tf.sqrt(tf.abs(a)) * b), tf.nn.relu(a * b))
    assert_like_xla(f, a, b, auto=True)


def _pool_specials(dtype: str, shape, seed: int) -> np.ndarray:
    """±0, ±1, ±inf, NaN and ±denormals (of f32 for bf16) drawn into ``shape``."""
    tiny = float(np.finfo(np.float32 if dtype == "bfloat16" else dtype).tiny)
    values = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, tiny / 4, -tiny / 4])
    x = np.random.default_rng(seed).choice(values, size=shape)
    return x.astype(tf.bfloat16.as_numpy_dtype if dtype == "bfloat16" else dtype)


def _max_pools(x):
    # 2x2 SAME: XLA's loop emitter visits the window's last column after the rest (which of -0/+0 stays);
    # 1x1: algsimp makes it maximum(x, -inf) and the denormal stays; the others flush ±denormals (x86 max
    # under DAZ), bf16 included; a bf16 1x1 window stays a loop (its NaN loses to -inf)
    return tuple(tf.nn.max_pool2d(x, k, s, p) for k, s, p in
                 [(2, 1, "SAME"), (3, 2, "SAME"), (2, 2, "VALID"), (1, 1, "SAME"), ((3, 1), 1, "SAME")])


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
def test_max_pool_special_values(dtype):
    for seed, shape in ((0, (1, 3, 3, 2)), (1, (2, 4, 5, 3)), (2, (1, 4, 4, 1))):
        assert_like_xla(_max_pools, _pool_specials(dtype, shape, seed))


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
def test_max_pool_of_a_constant_is_tfs_kernel(dtype):
    """TF folds a constant max_pool with its own (Eigen) kernel before XLA sees it: NaNs never win, an all-NaN
    window is the type's lowest value, and ±denormals compare equal to 0 (FTZ/DAZ)."""
    c = _pool_specials(dtype, (2, 4, 5, 3), 3)
    c[0, :2, :2, 0] = np.nan
    assert_like_xla(lambda: _max_pools(tf.constant(c)))


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_abs_of_a_constant_is_tfs_kernel(dtype):
    # TF folds it with its kernel: Eigen's hypot (inf for (-inf, NaN)), where XLA's formula gives NaN
    parts = [0.0, -0.0, 1.0, np.inf, -np.inf, np.nan, 1e30]
    c = np.array([complex(a, b) for a in parts for b in parts]).astype(dtype)
    assert_like_xla(lambda: (tf.abs(tf.constant(c)), tf.math.real(tf.constant(c) * 2)))
