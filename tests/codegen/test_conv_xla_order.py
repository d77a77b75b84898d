"""Small convolutions (at most ``conv_exact.EXACT_ORDER_WORK`` output-tap pairs) run TF's XLA's own order on
every input, not only on special values (``conv_exact.exact_order``, issue 19): its elemental loop (F64, a
reversed window after algsimp's operand swap, buffers of ≤ 8 bytes: window taps row-major, input features
innermost, FMAs but for the products LLVM hoists, ``conv_hoist``), Eigen's contraction for F32 (F16, BF16)
ones, and the dot forms of 1×1 ones. Bits against TF's XLA on ordinary random operands: before, 239 of 462
such convolutions differed in the last bit (session 49's sweep: f32 and f64, 1×1 to 5×4 images, 1×1 to 3×3
filters, strides 1 and 2, SAME and VALID), and a ``sinh`` after one made it 52 ulp (fuzz seed 320001952).
Measured on a Zen 4 (AVX-512); the AVX2 forms of Eigen's contraction were measured on special values only."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tests.codegen.cg_helpers import avx512_measured
from tfxla_cluster.codegen import xla_llvm

RNG = np.random.default_rng(49)

# (dtype, input NHWC, filter HWIO, stride, padding): one of each kind of the sweep's differences.
CASES = [
    ("float32", (2, 1, 2, 2), (3, 2, 2, 1), 2, "SAME"),     # swapped (fuzz seed 320001952's shape)
    ("float32", (2, 3, 3, 3), (3, 3, 3, 2), 1, "SAME"),     # Eigen's patches and GEMM
    ("float32", (2, 5, 4, 2), (2, 2, 2, 1), 1, "VALID"),    # one output feature: oneDNN's gemv_t lanes
    ("float32", (2, 2, 2, 2), (1, 1, 2, 1), 2, "SAME"),     # 8-byte output: XLA's elemental loop
    ("float32", (2, 3, 3, 3), (1, 1, 3, 2), 1, "SAME"),     # 1×1: a tiny dot (N 3-8 not: seed 312001589)
    ("float64", (2, 5, 4, 3), (3, 3, 3, 2), 1, "SAME"),     # F64: the elemental loop
    ("float64", (2, 2, 5, 1), (2, 2, 1, 3), 1, "VALID"),    # F64, vectorised over output positions
    ("float64", (2, 1, 1, 2), (1, 1, 2, 1), 1, "SAME"),     # F64 1×1: the row-major gemv
    ("float16", (2, 3, 3, 3), (3, 2, 3, 2), 2, "SAME"),
]


def _operands(dtype, xs, ks):
    x = RNG.standard_normal(xs) * np.exp2(RNG.integers(-3, 4, xs))
    w = RNG.standard_normal(ks) * np.exp2(RNG.integers(-3, 4, ks))
    return x.astype(dtype), w.astype(dtype)


@avx512_measured
@pytest.mark.parametrize("dtype,xs,ks,stride,padding", CASES)
def test_small_convolution_bits_equal_tf_xla(dtype, xs, ks, stride, padding):
    def f(x, w):
        return tf.nn.conv2d(x, w, stride, padding)
    for _ in range(3):
        x, w = _operands(dtype, xs, ks)
        want = tf.function(f, jit_compile=True)(x, w).numpy()
        got = np.asarray(txc.function(f, jit_compile=True)(x, w))
        assert got.tobytes() == want.tobytes(), np.argwhere(got != want)[:4].tolist()


@avx512_measured
@pytest.mark.parametrize("multiplier", [1, 2])
def test_small_depthwise_bits_equal_tf_xla(multiplier):
    def f(x, w):
        return tf.nn.depthwise_conv2d(x, w, [1, 2, 2, 1], "SAME")
    for dtype in ("float32", "float64"):
        x, w = _operands(dtype, (2, 5, 4, 3), (3, 3, 3, multiplier))
        want = tf.function(f, jit_compile=True)(x, w).numpy()
        assert np.asarray(txc.function(f, jit_compile=True)(x, w)).tobytes() == want.tobytes()


def test_probe_fuses_each_multiply_into_its_add():
    """``xla_llvm.contract_fma`` makes a multiply feeding one add of its block an ``llvm.fma`` (XLA's
    fp-contract=fast): vector and scalar ones; a multiply used twice or in another block stays."""
    ir = """define void @f(ptr %p, <4 x double> %a, <4 x double> %b, double %c, double %d) {
entry:
  %m = fmul <4 x double> %a, %b
  %s = fadd reassoc <4 x double> %m, zeroinitializer
  %n = fmul double %c, %d
  %u = fadd reassoc double %c, %n
  %v = fadd reassoc double %u, %n
  %h = fmul double %c, %c
  br label %next
next:
  %w = fadd reassoc double %v, %h
  store double %w, ptr %p
  store <4 x double> %s, ptr %p
  ret void
}"""
    out = xla_llvm.contract_fma(ir)
    assert "%s = call reassoc <4 x double> @llvm.fma.v4f64(<4 x double> %a, <4 x double> %b, " \
           "<4 x double> zeroinitializer)" in out
    assert "%n = fmul double %c, %d" in out and "%h = fmul double %c, %c" in out
    assert "declare <4 x double> @llvm.fma.v4f64(<4 x double>, <4 x double>, <4 x double>)" in out
    import llvmlite.binding as llvm
    from tfxla_cluster.codegen.target import initialize_llvm
    initialize_llvm()
    llvm.parse_assembly(out).verify()
