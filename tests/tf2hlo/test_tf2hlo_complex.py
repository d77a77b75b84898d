"""Complex arithmetic inside a lowered function, carried as (re, im) pairs of real arrays, against TF
eager: build, +, -, *, /, neg, square, conj with complex constants, then abs/real/imag back to reals
(complex64 and complex128); complex arguments and results of a function; complex atan2/remainder."""
from __future__ import annotations

import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import Case, run_batch, values

from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.tf2hlo import lower_function


def _expr(re, im):
    z = tf.complex(re, im)
    c = tf.constant(1.5 - 0.5j, dtype=z.dtype)
    w = (z * z + c) / (tf.math.conj(z) - c) - tf.square(z) + (-z)
    return tf.abs(w), tf.math.real(w), tf.math.imag(w * 2.0j)


def test_complex_arithmetic_equals_tf() -> None:
    run_batch([Case(f"complex arithmetic [{dt}]", _expr, [values(dt, (2, 3)), values(dt, (2, 3), seed=1)],
                    rtol=1e-5 if dt == "f32" else 1e-12, atol=1e-5 if dt == "f32" else 1e-12)
               for dt in ("f32", "f64")], xla="all")


def _boundary(z, w):
    return z * w + tf.math.conj(z), tf.abs(z), tf.complex(tf.math.real(w), 2.0 * tf.math.imag(z)), z


@pytest.mark.parametrize("dtype", [tf.complex64, tf.complex128])
def test_complex_arguments_and_results_equal_tf_xla(dtype) -> None:
    """A complex argument is a c64/c128 parameter (seen inside as its parts), a complex result one
    ``complex(re, im)`` array: a function taking and returning complex values, as TF's XLA runs it."""
    import numpy as np

    z = np.array([1 + 2j, -3 + 0.5j, 0.25j], dtype.as_numpy_dtype)
    w = np.array([2 - 1j, 1j, -1.5], dtype.as_numpy_dtype)
    want = tf.function(_boundary, jit_compile=True)(z, w)
    spec = tf.TensorSpec([3], dtype)
    lowered = lower_function(tf.function(_boundary).get_concrete_function(spec, spec), z, w)
    assert [p.element_type.value for p in lowered.parameters] == [dtype.name.replace("omplex", "")] * 2
    got = lowered.run(z, w)
    tol = 1e-6 if dtype == tf.complex64 else 1e-15
    for g, x in zip(got, want):
        assert g.dtype == x.dtype.as_numpy_dtype
        np.testing.assert_allclose(g, x.numpy(), rtol=tol, atol=tol)


def test_complex_function_compiled_by_us_equals_tf_xla() -> None:
    """The whole path (codegen, launch): ``tfxla_cluster.function(jit_compile=True)`` on complex64."""
    import numpy as np

    import tfxla_cluster as txc

    z = tf.constant([1 + 2j, -3 + 0.5j, 0.25j], tf.complex64)
    w = tf.constant([2 - 1j, 1j, -1.5], tf.complex64)
    want = tf.function(_boundary, jit_compile=True)(z, w)
    got = txc.function(_boundary, jit_compile=True)(z, w)
    for g, x in zip(got, want):
        assert g.dtype == x.dtype
        np.testing.assert_allclose(g.numpy(), x.numpy(), rtol=1e-6, atol=1e-6)


def test_complex_value_read_as_real_is_refused() -> None:
    """A lowering that takes real tensors refuses a complex one instead of reading its parts as one."""
    fn = tf.function(lambda z: tf.raw_ops.Relu(features=tf.bitcast(z, tf.float32)),
                     input_signature=[tf.TensorSpec([2], tf.complex64)])
    with pytest.raises(UnimplementedError, match="cannot be used as an HLO tensor"):
        lower_function(fn.get_concrete_function())


@pytest.mark.parametrize("op", ["Atan2", "FloorMod", "TruncateMod", "Mod"])
def test_complex_atan2_and_remainders_are_refused_as_tf_refuses_them(op) -> None:
    """TF's OpDefs and its XLA_CPU_JIT kernels take no complex type for these, so no TF graph holds a complex
    atan2 or remainder: TF refuses to build the node, and its registry (which our clustering asks) refuses it."""
    from tensorflow.core.framework import node_def_pb2, types_pb2
    from tensorflow.python.framework import op_def_registry

    from tfxla_cluster.tfops.xla_kernels import find_kernel_def

    z = tf.constant([1 + 2j], tf.complex64)
    refused = (TypeError, tf.errors.InvalidArgumentError)
    with pytest.raises(refused, match="complex64 (is )?not in (the )?list of allowed"):
        getattr(tf.raw_ops, op)(**dict(zip([a.name for a in op_def_registry.get(op).input_arg], [z, z])))
    node = node_def_pb2.NodeDef(name="n", op=op)
    node.attr["T"].type = types_pb2.DT_COMPLEX64
    ok, why = find_kernel_def("XLA_CPU_JIT", node, op_def_registry.get(op))
    assert not ok and "T=DT_COMPLEX64 is not supported" in why


def test_hlo_complex_atan2_equals_xla() -> None:
    """HLO itself allows atan2 on complex values (XLA computes -i·log((x + iy) / sqrt(x² + y²))); the
    evaluator does the same."""
    import numpy as np

    from tfxla_cluster.hlo import parse_module
    from tfxla_cluster.hlo.evaluator import evaluate

    text = "HloModule m\nENTRY e {\n  a = c64[2] parameter(0)\n  b = c64[2] parameter(1)\n" \
           "  ROOT r = c64[2] atan2(a, b)\n}\n"
    y = np.array([1 + 2j, -1 + 0.5j], np.complex64)
    x = np.array([3 - 1j, 2 + 2j], np.complex64)
    got = np.asarray(evaluate(parse_module(text), y, x))
    # XLA:CPU's result (jaxlib 0.10.2) for the same module and arguments.
    np.testing.assert_allclose(got, [0.19025323 + 0.8418239j, -0.14402775 + 0.38648123j], rtol=2e-6)


def _floor_div_inputs(dtype):
    """Complex FloorDiv inputs whose ``q·y != x`` test does not hang on rounding (or on whether LLVM fuses
    q·y into an FMA): exact quotients (y a power of two, ±i, 1 + i) and quotients that underflow to 0
    or overflow (|x| tiny or huge against |y|), with every sign pattern of both parts, so the complex
    ``x < 0`` / ``y < 0`` tests (lexicographic on (re, im)) decide."""
    import numpy as np

    part = np.float32 if dtype == tf.complex64 else np.float64
    t, big = part(1e-30), part(1e30)
    xs = [(3, 4), (-7, 2), (1, -9), (0, 0), (-0.0, 0), (t, 0), (-t, 0), (0, t), (0, -t), (t, -t), (-t, t),
          (big, -big), (0, big)]
    ys = [(2, 0), (-0.5, 0), (0, 1), (0, -4), (1, 1), (big, 0), (-big, 0), (0, big), (0, -big), (t, 0), (0, -t)]
    pairs = [(a, b) for a in xs for b in ys]
    x = np.array([complex(*a) for a, _ in pairs], dtype.as_numpy_dtype)
    y = np.array([complex(*b) for _, b in pairs], dtype.as_numpy_dtype)
    return x, y


@pytest.mark.parametrize("dtype", [tf.complex64, tf.complex128])
def test_complex_floor_div_equals_tf_xla(dtype) -> None:
    """TF's XLA compiles complex FloorDiv (tf2xla's integer form: q = x / y, q - 1 where q·y != x and
    x < 0 != y < 0, complex ``<`` lexicographic) though TF has no CPU kernel for it; our evaluator and our
    compiled code give its results bit for bit."""
    import numpy as np

    import tfxla_cluster as txc

    x, y = _floor_div_inputs(dtype)
    fn = lambda a, b: tf.raw_ops.FloorDiv(x=a, y=b)  # noqa: E731
    want = tf.function(fn, jit_compile=True)(x, y).numpy()
    with np.errstate(all="ignore"):
        assert np.sum(np.real(want) == np.real(x / y) - 1) > 20, "the inputs must exercise the q - 1 branch"
    spec = tf.TensorSpec(x.shape, dtype)
    evaluated = lower_function(tf.function(fn).get_concrete_function(spec, spec), x, y).run(x, y)[0]
    compiled = txc.function(fn, jit_compile=True)(x, y).numpy()
    for got in (evaluated, compiled):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_complex_abs_and_divide_at_extremes_equal_tf_xla() -> None:
    """|z| and z / w are HLO's complex abs and divide (XLA's overflow-safe forms and inf/NaN rules), not
    sqrt(re² + im²) and the textbook quotient, which overflow at 1e20 in f32. (The evaluator's abs is XLA's
    evaluator's, std::abs: |(NaN, inf)| = inf where the compiled form gives NaN; see the next test.)"""
    import numpy as np

    import tfxla_cluster as txc

    inf, nan = np.inf, np.nan
    z = np.array([3 + 4j, 1e20 + 1e20j, 1e-30 - 1e-30j, complex(inf, 1), complex(nan, inf), complex(inf, inf), 0j,
                  -0.5 - 0.25j], np.complex64)
    w = np.array([1e20 - 3e20j, 2e-20 + 1e-20j, 1e30j, 2 + 1j, 1 + 1j, complex(1, inf), 0j, 3 - 7j], np.complex64)
    fn = lambda a, b: (tf.abs(a), a / b)  # noqa: E731
    want = [t.numpy() for t in tf.function(fn, jit_compile=True)(z, w)]
    spec = tf.TensorSpec(z.shape, tf.complex64)
    evaluated = lower_function(tf.function(fn).get_concrete_function(spec, spec), z, w).run(z, w)
    compiled = [t.numpy() for t in txc.function(fn, jit_compile=True)(z, w)]
    np.testing.assert_array_equal(compiled[0], want[0])
    for got in (evaluated, compiled):
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6)


@pytest.mark.parametrize("dtype", [tf.complex64, tf.complex128])
def test_complex_abs_of_a_constant_folded_by_xla_is_std_abs(dtype) -> None:
    """Where TF's graph folding is abandoned (an integer division by zero fails TF's CPU kernel, and its one
    folding run with it), |constant| reaches XLA, whose constant folding runs HloEvaluator's std::abs = C's
    hypot: an infinite part wins over NaN (|(-inf, NaN)| = inf, where compiled code gives NaN), and finite
    values are hypot's, not the compiled max·sqrt(1 + (min/max)²) (1 ulp apart on some). Fuzz seed 88000462."""
    import numpy as np

    import tfxla_cluster as txc

    part = dtype.real_dtype.as_numpy_dtype
    inf, nan = np.inf, np.nan
    special = [0.0, -0.0, 1.0, -2.5, inf, -inf, nan, np.finfo(part).max]
    re = [a for a in special for _ in special] + [1049.0012, 1.0, 3e20, -7.25e-3]
    im = [b for _ in special for b in special] + [0.6370732, -2.5, -4e20, 1.5e-2]
    z = np.empty(len(re), dtype.as_numpy_dtype)
    z.real, z.imag = re, im

    def fn():
        k = tf.constant(np.zeros(3, np.uint16))
        return tf.abs(tf.constant(z)), tf.truncatediv(k, k)

    want = tf.function(fn, jit_compile=True)()[0].numpy()
    got = txc.function(fn, jit_compile=True)()[0].numpy()
    np.testing.assert_array_equal(got.view(f"u{part().itemsize}"), want.view(f"u{part().itemsize}"))
    assert want[special.index(-inf) * len(special) + special.index(nan)] == inf  # (the oracle's rule)


def test_complex_clip_approximate_equal_and_to_bool_equal_tf_xla() -> None:
    """TF's XLA_CPU_JIT kernels take complex ClipByValue (its clamp compares real parts only, keeping the
    first operand on a tie: a grid of ties decides), ApproximateEqual (|x - y| < tolerance), ToBool, Prod
    (a reduce of complex multiplies) and a complex constant diagonal (tf.eye)."""
    import itertools

    import numpy as np

    import tfxla_cluster as txc

    grid = [complex(a, b) for a in (-1, 0, 1) for b in (-1, 0, 1)]
    lo, t, hi = (np.array(v, np.complex64) for v in zip(*itertools.product(grid, grid, grid)))
    near = t + np.complex64(0.3 - 0.2j)

    def fn(lo, t, hi, near, s):
        return (tf.raw_ops.ClipByValue(t=t, clip_value_min=lo, clip_value_max=hi),
                tf.raw_ops.ApproximateEqual(x=t, y=near, tolerance=0.35), tf.raw_ops.ToBool(input=s),
                tf.reduce_prod(tf.reshape(near[:12], [3, 4]), axis=1), tf.eye(2, dtype=s.dtype) * s)

    for s in (np.complex64(0), np.complex64(-0.5j)):
        args = (lo, t, hi, near, s)
        want = [w.numpy() for w in tf.function(fn, jit_compile=True)(*args)]
        specs = [tf.TensorSpec(np.shape(a), tf.complex64) for a in args]
        evaluated = lower_function(tf.function(fn).get_concrete_function(*specs), *args).run(*args)
        compiled = [g.numpy() for g in txc.function(fn, jit_compile=True)(*args)]
        for got in (evaluated, compiled):
            for g, w in zip(got, want):
                np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6, atol=0)


@pytest.mark.parametrize("op", ["Real", "Imag", "ComplexAbs", "Angle"])
def test_complex_part_with_another_tout_is_refused(op) -> None:
    """c128 → f32: TF has no kernel; its XLA refuses Real/Imag and returns ComplexAbs/Angle's f64 buffer read
    as f32 (garbage). We refuse all four with a typed error naming the mismatch."""
    from tensorflow.python.framework import op_def_registry

    name = op_def_registry.get(op).input_arg[0].name
    fn = tf.function(lambda z: getattr(tf.raw_ops, op)(**{name: z}, Tout=tf.float32),
                     input_signature=[tf.TensorSpec([2], tf.complex128)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="Tout=f32 is not the component type f64"):
        lower_function(fn.get_concrete_function())


@pytest.mark.parametrize("dtype", [tf.complex64, tf.complex128])
def test_complex_constant_results_keep_their_bits_as_tf_xla(dtype) -> None:
    """A complex constant returned through an Identity (lowered part by part, paired again on the host): (-inf, NaN)
    stays (-inf, NaN), not ``-inf + 1j·NaN`` = (NaN, NaN), and a denormal real part is kept (TF's XLA copies the
    literal; the pairing runs on TF's kernel thread, under DAZ; algsimp compares complex constants by bits)."""
    import numpy as np

    import tfxla_cluster as txc

    tiny = np.finfo(dtype.real_dtype.as_numpy_dtype).tiny / 4
    a = np.array([complex(-np.inf, np.nan), complex(np.nan, -np.inf)], dtype.as_numpy_dtype)
    b = np.zeros(3, dtype.as_numpy_dtype)
    b[1] = complex(tiny, -tiny)

    def f():
        return tf.identity(tf.constant(a)), tf.identity(tf.constant(b))

    want = tf.function(f, jit_compile=True)()
    got = txc.function(f, jit_compile=True)()
    for g, w in zip(got, want):
        part = w.dtype.real_dtype.as_numpy_dtype
        np.testing.assert_array_equal(g.numpy().view(part).view(f"u{part().itemsize}"),
                                      w.numpy().view(part).view(f"u{part().itemsize}"))
    assert np.isneginf(want[0].numpy()[0].real) and want[1].numpy()[1].real == tiny  # (the oracle keeps them)
