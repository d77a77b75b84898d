"""Complex arithmetic inside a lowered function, carried as (re, im) pairs of real arrays, against TF
eager: build, +, -, *, /, neg, square, conj with complex constants, then abs/real/imag back to reals
(complex64 and complex128). A complex function result is refused with a clear error."""
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


def test_complex_result_is_refused() -> None:
    fn = tf.function(lambda re, im: tf.complex(re, im) * 2.0,
                     input_signature=[tf.TensorSpec([2], tf.float32)] * 2)
    with pytest.raises(UnimplementedError, match="cannot be used as an HLO tensor"):
        lower_function(fn.get_concrete_function())


def test_complex_argument_is_refused() -> None:
    """A complex argument would otherwise reach real-only lowerings (ComplexAbs read it as real)."""
    fn = tf.function(lambda z: tf.abs(z), input_signature=[tf.TensorSpec([2], tf.complex64)])
    with pytest.raises(UnimplementedError, match="complex input"):
        lower_function(fn.get_concrete_function())
