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


@pytest.mark.parametrize("op", ["Atan2", "FloorMod", "TruncateMod", "Mod"])
def test_complex_atan2_and_remainders_are_refused_as_tf_refuses_them(op) -> None:
    """TF's OpDefs and its XLA_CPU_JIT kernels take no complex type for these, so no TF graph holds a complex
    atan2 or remainder: TF refuses to build the node, and its registry (which our clustering asks) refuses it."""
    from tensorflow.core.framework import node_def_pb2, types_pb2
    from tensorflow.python.framework import op_def_registry

    from tfxla_cluster.tfops.xla_kernels import find_kernel_def

    z = tf.constant([1 + 2j], tf.complex64)
    with pytest.raises((TypeError, tf.errors.InvalidArgumentError), match="complex64 (is )?not in (the )?list of allowed"):
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
