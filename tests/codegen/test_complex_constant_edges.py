"""Complex values at their edges, bit for bit against TF's XLA: constants with infinite and signed-zero
parts, complex abs/sqrt/log/log1p/rsqrt with one constant part (TF 2.21's XLA emits fused loops through
MLIR, whose canonicalizer moves a constant operand of max/min to the rhs), and the HLO evaluator's complex
product against C's own Annex G multiplication (libgcc's ``__mulsc3``/``__muldc3``)."""
import ctypes
import ctypes.util
import itertools

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster
from tfxla_cluster.hlo.eval_elementwise import complex_multiply

INF, NAN = np.inf, np.nan


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.uint64 if a.dtype in (np.complex128, np.float64) else np.uint32)


def _same_as_tfs_xla(f, *args):
    ours = tfxla_cluster.function(f, jit_compile=True)(*args).numpy()
    theirs = tf.function(f, jit_compile=True)(*args).numpy()
    np.testing.assert_array_equal(_bits(ours), _bits(theirs), err_msg=f"ours {ours}\nTF's XLA {theirs}")


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_constants_with_infinite_and_signed_zero_parts(dtype):
    values = np.array([complex(0.0, -0.0), complex(INF, -INF), complex(-0.0, 0.0), complex(NAN, INF),
                       complex(-INF, -0.0)], dtype)
    _same_as_tfs_xla(lambda: tf.constant(values))
    uniform = np.zeros([7, 3], dtype)
    uniform.imag[3, 0] = -0.0   # all equal by ==, not by bits
    _same_as_tfs_xla(lambda: tf.constant(uniform))


@pytest.mark.parametrize("op", [tf.abs, tf.sqrt, tf.math.log, tf.math.log1p, tf.math.rsqrt],
                         ids=lambda op: op.__name__)
def test_one_constant_part(op):
    parts = tf.constant([NAN, INF, 0.0, 3.0, -0.0, 1e30], tf.float32)
    for value, constant_first in itertools.product([0.0, 2.0, INF, NAN], [True, False]):
        def f(x, value=value, constant_first=constant_first):
            c = tf.fill([6], value)
            return op(tf.complex(c, x) if constant_first else tf.complex(x, c))
        _same_as_tfs_xla(f, parts)


def _c_multiply(dtype):
    """C's complex product of ``dtype`` (libgcc's Annex G helper), or None where libgcc is not loadable."""
    name = ctypes.util.find_library("gcc_s")
    if name is None:
        return None
    lib = ctypes.CDLL(name)
    real = ctypes.c_float if dtype == np.complex64 else ctypes.c_double

    class Pair(ctypes.Structure):   # returned as _Complex is on x86-64 and AArch64 (two SSE/FP registers)
        _fields_ = [("re", real), ("im", real)]
    fn = lib.__mulsc3 if dtype == np.complex64 else lib.__muldc3
    fn.restype, fn.argtypes = Pair, [real] * 4

    def mul(a: complex, b: complex) -> complex:
        r = fn(a.real, a.imag, b.real, b.imag)
        return complex(r.re, r.im)
    return mul


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_evaluator_product_is_cs_annex_g_product(dtype):
    mul = _c_multiply(dtype)
    if mul is None:
        pytest.skip("libgcc_s not found")
    big = 3e38 if dtype == np.complex64 else 1.7e308
    edge = [0.0, -0.0, 1.0, -2.5, big, -big, INF, -INF, NAN]
    values = np.array([complex(r, i) for r in edge for i in edge], dtype)
    a, b = np.meshgrid(values, values)
    a, b = a.ravel(), b.ravel()
    with np.errstate(all="ignore"):
        numpy_product = np.multiply(a, b)
    # Where the product came out (NaN, NaN), C recomputes it (Annex G): those are the evaluator's own.
    recovered = np.isnan(numpy_product.real) & np.isnan(numpy_product.imag)
    assert recovered.sum() > 50
    ours = complex_multiply(a, b)[recovered]
    expected = np.array([mul(complex(x), complex(y)) for x, y in zip(a[recovered], b[recovered])], dtype)
    for got, want in ((ours.real, expected.real), (ours.imag, expected.imag)):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(_bits(got[~np.isnan(want)]), _bits(want[~np.isnan(want)]))
    assert not np.isnan(ours).all()   # numpy's textbook product was (NaN, NaN) on every one of them
