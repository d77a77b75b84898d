"""Complex multiply's FMA contractions and MLIR's complex add/sub folds against TF's XLA, bit for bit.

Where both products of a part overflow, which one TF's XLA:CPU rounds inside an FMA decides +inf, -inf or
NaN: the real part fuses ar·br; the imaginary part the product LLVM's Reassociate ranks first: ai·br, or ar·bi
where its rank is strictly lower (loads rank in XLA's emission order, a broadcast hoisted to an outer loop
below the inner loop's, a computed value one above its highest operand: y * (x + z) loads x, z, then y), or
the other one where one product is negated (conj). The same on the vector body and the remainder of every loop length, c64 and c128. And
(x - y) + y is x (MLIR folds complex.add(complex.sub(x, y), y)), so an infinite part stays infinite."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc


def _overflowing(dtype, n: int, swap: bool = False):
    """Operands whose even elements show the imaginary part's fused product, odd ones the real part's."""
    big = np.finfo(np.float32 if dtype == np.complex64 else np.float64).max
    a, b = np.full(n, complex(big, big), dtype), np.empty(n, dtype)
    b[0::2], b[1::2] = complex(-1.27, 9.69), complex(9.69, 1.27)
    return (b, a) if swap else (a, b)


def _same_bits(want: np.ndarray, got: np.ndarray) -> bool:
    w, g = want.view(want.real.dtype), got.view(got.real.dtype)
    return bool(np.all((w == g) & (np.signbit(w) == np.signbit(g)) | (np.isnan(w) & np.isnan(g))))


def _check(fn, *args) -> None:
    args = [tf.constant(a) for a in args]
    with np.errstate(all="ignore"):
        want = tf.function(fn, jit_compile=True)(*args).numpy()
        got = np.asarray(txc.function(fn, jit_compile=True)(*args))
    assert _same_bits(want, got), f"ours {got.ravel()[:6]}\nTF's XLA {want.ravel()[:6]}"


@tf.autograph.experimental.do_not_convert
def _product(x, y):
    return x * y


@pytest.mark.parametrize("n", [1, 4, 7, 19, 37])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
@pytest.mark.parametrize("swap", [False, True], ids=["big_lhs", "big_rhs"])
def test_product_of_two_arrays(dtype, n, swap):
    _check(_product, *_overflowing(dtype, n, swap))


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
@pytest.mark.parametrize("case", ["lhs_column", "rhs_column", "lhs_row", "rhs_row", "conj", "computed",
                                  "reused", "reversed"])
def test_product_in_fusions(dtype, case):
    n = 9
    a, b = _overflowing(dtype, n)
    one = np.ones(n, dtype)
    forms = {
        "lhs_column": (_product, a.reshape(n, 1), np.repeat(b.reshape(n, 1), 5, 1)),   # hoisted: x first
        "rhs_column": (_product, np.repeat(a.reshape(n, 1), 5, 1), b.reshape(n, 1)),   # hoisted: y first
        "lhs_row": (_product, a, np.stack([b] * 3)),
        "rhs_row": (_product, np.stack([a] * 3), b),
        "conj": (lambda x, y: tf.math.conj(x) * y, np.conj(a), b),
        "computed": (lambda x, y, o: x * (y * o), a, b, one),
        "reused": (lambda x, y: x * y + x, a, b),
        "reversed": (lambda x, y: tf.reverse(x, [0]) * y, a[::-1].copy(), b),
    }
    fn, *args = forms[case]
    _check(tf.autograph.experimental.do_not_convert(fn), *args)


_RANKED_FORMS = {
    "y*(x+z)": lambda y, x, z: y * (x + z), "(x+z)*y": lambda y, x, z: (x + z) * y,
    "y*(z-x)": lambda y, x, z: y * (z - x), "y*(x*2+z)": lambda y, x, z: y * (x * 2 + z),
    "x*y": lambda y, x, z: x * y, "(x+z)*(y+z)": lambda y, x, z: (x + z) * (y + z),
    "(y+z)*(x-z)": lambda y, x, z: (y + z) * (x - z),
}


@pytest.mark.parametrize("dtype, form, y_shape, x_shape", [
    (np.complex128, "y*(x+z)", (3, 7, 7), (3, 7, 1)),   # fuzz seed 204001484's shape
    (np.complex64, "y*(x+z)", (3, 1, 7), (1, 1, 7)),
    (np.complex128, "(x+z)*y", (1, 7, 7), (3, 1, 7)),
    (np.complex64, "y*(z-x)", (3, 7, 7), (3, 7, 7)),
    (np.complex128, "y*(x*2+z)", (3, 1, 7), (3, 7, 1)),
    (np.complex64, "x*y", (3, 7, 7), (3, 1, 7)),
    (np.complex128, "(x+z)*(y+z)", (3, 7, 1), (3, 1, 7)),
    (np.complex64, "(y+z)*(x-z)", (3, 1, 7), (3, 7, 7)),
], ids=lambda v: v.__name__ if isinstance(v, type) else str(v).replace(" ", ""))
def test_product_of_computed_and_broadcast_operands(dtype, form, y_shape, x_shape):
    """A huge broadcast y times a computed or broadcast operand over [3, 7, 7] (z: zeros)."""
    big = np.finfo(np.float32 if dtype == np.complex64 else np.float64).max
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(x_shape) * 5 + 1j * rng.standard_normal(x_shape) * 5).astype(dtype)
    _check(tf.autograph.experimental.do_not_convert(_RANKED_FORMS[form]), np.full(y_shape, complex(big, big), dtype),
           x, np.zeros((3, 7, 7), dtype))


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
def test_add_of_a_subtraction_is_folded(dtype):
    inf, nan = np.inf, np.nan
    x = np.array([complex(inf, 0), complex(0, -inf), complex(inf, inf), complex(-inf, 1), 2 + 3j,
                  complex(nan, 1), 0, 1e30 + 1j], dtype)
    y = np.array([complex(inf, 0), 1, complex(-inf, 2), 3j, complex(inf, nan), 5, complex(0, inf), 7], dtype)
    for fn in (lambda x, y: (x - x) + x, lambda x, y: (x - y) + y, lambda x, y: y + (x - y),
               lambda x, y: (x + y) - y, lambda x, y: (x - y[3]) + y[3]):
        _check(tf.autograph.experimental.do_not_convert(fn), x, y)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
def test_add_of_a_subtraction_of_equal_slices_is_folded(dtype):
    """Two ``y[:1]`` are one value after XLA's CSE, so the fold applies; a broadcast that reads other elements
    (a reshape of a column into a row) is no implicit broadcast of the column, and is not folded."""
    inf, nan = np.inf, np.nan
    x = np.array([[complex(inf, 0), complex(0, -inf), 2 + 3j, 1], [0, 1e30 + 1j, complex(nan, 1), 6],
                  [complex(-inf, 1), 2, 3, 4], [5, 6, 7, complex(inf, inf)]], dtype)
    y = np.array([[complex(inf, 0), 1, complex(-inf, 2), 3j], [7, complex(0, inf), 7, 7],
                  [complex(inf, nan), 1, 2, 3], [4, 5, 6, complex(-inf, 0)]], dtype)
    for fn in (lambda x, y: (x - y[:1]) + y[:1], lambda x, y: (x + y[0]) - y[0],
               lambda x, y: y[1:2, :] + (x - y[1:2, :]),
               lambda x, y: (x - tf.slice(y, [0, 1], [4, 1])) + tf.slice(y, [0, 1], [4, 1]),
               lambda x, y: (x - tf.broadcast_to(tf.reshape(y[:, :1], [1, 4]), [4, 4])) + y[:, :1]):
        _check(tf.autograph.experimental.do_not_convert(fn), x, y)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
def test_log_of_exp_and_exp_of_log_are_folded(dtype):
    """MLIR folds complex log(exp(z)) and exp(log(z)) to z in TF's XLA: z at every value, even where exp
    overflows or log of 0 is -inf."""
    inf, nan = np.inf, np.nan
    values = [0.0, -0.0, 1.0, -2.5, inf, -inf, nan, 1e30, 1e-30]
    re, im = np.meshgrid(values, values)
    z = np.empty(re.size, dtype)
    z.real, z.imag = re.ravel(), im.ravel()
    _check(tf.autograph.experimental.do_not_convert(lambda x: tf.math.log(tf.math.exp(x))), z)
    _check(tf.autograph.experimental.do_not_convert(lambda x: tf.math.exp(tf.math.log(x * 2))), z)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
@pytest.mark.parametrize("side", ["constant_lhs", "constant_rhs"])
def test_product_with_a_constant_keeps_its_operand_order(dtype, side):
    """XLA's simplifier moves a constant to the right of an add, not of a multiply: ``C * y`` stays
    ``multiply(C, broadcast(y))``, so its imaginary part fuses the product TF's operand order picks (fuzz
    seed 113001338: ours had swapped it and gave +inf where TF gives -inf)."""
    a, b = _overflowing(dtype, 18)
    a[::2] = 0               # not uniform: LLVM would see through a splat constant's loads
    a = a.reshape(3, 2, 3)   # a constant in the graph (made inside the function, not a captured input)
    fn = (lambda y: tf.constant(a) * y) if side == "constant_lhs" else (lambda y: y * tf.constant(a))
    _check(tf.autograph.experimental.do_not_convert(fn), b[:3].reshape(1, 1, 3))


def _specials(dtype) -> np.ndarray:
    """Every pair of parts from huge, infinite, NaN, signed zero and plain values."""
    big = np.finfo(np.float32 if dtype == np.complex64 else np.float64).max / 2
    vals = [big, -big, np.inf, -np.inf, 1.5, -2.0, -0.0, np.nan]
    return np.array([complex(r, i) for r in vals for i in vals], dtype)


# A splat constant's parts are immediates to TF's LLVM, which rewrites the products before contracting them:
# products by equal |parts| are shared (no FMA: (1e20, 1e20) gives NaN where an FMA gave ±inf), a one-use
# product by a negative part flips its fadd/fsub, ·±1 and ·NaN fold, x·-2 is negated for free in the backend,
# and x·(1, ±0) is x (MLIR's fold; a constant lhs is multiplied).
SPLATS = [(1e20, 1e20), (-3.0, 3.0), (2.0, -0.5), (-2.0, -3.0), (-1.0, 3.0), (3.0, 1.0), (np.nan, 2.0),
          (1.0, -0.0)]
SPLAT_FORMS = {
    "x_c": lambda x, c: x * c,
    "c_x": lambda x, c: c * x,
    "conj": lambda x, c: tf.math.conj(x) * c,
    "row": lambda x, c: tf.broadcast_to(x, [3, x.shape[0]]) * c,
}


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
@pytest.mark.parametrize("splat", SPLATS, ids=str)
def test_product_by_a_splat_constant(dtype, splat):
    x = _specials(dtype)
    for name, form in SPLAT_FORMS.items():
        shape = [3, x.size] if name == "row" else [x.size]
        fn = tf.autograph.experimental.do_not_convert(
            lambda x, form=form, shape=shape: form(x, tf.constant(complex(*splat), dtype, shape)))
        _check(fn, x)


@tf.autograph.experimental.do_not_convert
def _quotient(x, y):
    return x / y


@pytest.mark.parametrize("n", [1, 7, 64])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
def test_smith_division_contracts_each_product(dtype, n):
    """Smith's division: each product with its one use is an FMA in TF's XLA (x/x's imaginary part is the
    exact residual of bi - (bi/br)·br, not 0: fuzz seed 171001347), on random parts of mixed magnitudes with
    zeros, infinities, NaNs and denormals mixed in."""
    rng = np.random.default_rng(n)
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-310, 1e300, -2.5, 3.0]

    def operand():
        parts = [rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n) for _ in range(2)]
        for p in parts:
            m = rng.random(n) < 0.2
            p[m] = rng.choice(specials, m.sum())
        with np.errstate(all="ignore"):
            return (parts[0] + 1j * parts[1]).astype(dtype)

    x, y = operand(), operand()
    _check(_quotient, x, y)
    _check(lambda v: v / v, x)
    _check(_quotient, np.full(n, complex(-8.24276049608493, -2.059242502247566), dtype),
           np.full(n, complex(-8.24276049608493, -2.059242502247566), dtype))
