"""Native code for complex numbers (c64, c128) against TF's own XLA (``tf.function(jit_compile=True)``).

Every pair of a grid of parts (±0, finite, huge, ±inf, NaN) goes through each op TF lowers to a complex
HLO opcode: add, subtract, multiply, divide, power, negate, abs (ComplexAbs), exp, expm1, log, log1p,
sqrt, rsqrt, sin, cos, tan, tanh, sign, conj
(``complex(real(x), negate(imag(x)))``, TF's XLA Conj), real, imag, complex, compare EQ/NE, a complex
dot (MatMul) and a complex sum. Ours is one HLO module per type, compiled once; TF's is one jit-compiled
function per type. NaN positions, infinities and signs of zero must match part by part; finite values
agree exactly for the exact ops and within a few ulp where exp/log/sin/cos/atan2/pow are involved.
"""
from __future__ import annotations

import numpy as np
import pytest

from tfxla_cluster.codegen import CodegenOptions, compile_module
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.passes.pipeline import optimize

_PARTS = [0.0, -0.0, 1.5, -2.5, 1e30, np.inf, -np.inf, np.nan]
_GRID = np.array([complex(r, i) for r in _PARTS for i in _PARTS])          # 64 values
N = _GRID.size * _GRID.size                                                # every (x, y) pair
# XLA's defaults (fast min/max: abs(0 + NaN·i) is 0 in TF's XLA), bounds checks on
OPTIONS = CodegenOptions(bounds_checks=True, threads=2)

# name -> (HLO of the op on %x / %y (c[N]) and %r (real[N]), result type, TF expression, transcendental?)
OPS = {
    "add": ("add(%x, %y)", "C", lambda tf, x, y, r: x + y, False),
    "subtract": ("subtract(%x, %y)", "C", lambda tf, x, y, r: x - y, False),
    "multiply": ("multiply(%x, %y)", "C", lambda tf, x, y, r: x * y, False),
    "divide": ("divide(%x, %y)", "C", lambda tf, x, y, r: x / y, False),
    "negate": ("negate(%x)", "C", lambda tf, x, y, r: -x, False),
    "abs": ("abs(%x)", "R", lambda tf, x, y, r: tf.abs(x), True),
    "exp": ("exponential(%x)", "C", lambda tf, x, y, r: tf.exp(x), True),
    "log": ("log(%x)", "C", lambda tf, x, y, r: tf.math.log(x), True),
    "sqrt": ("sqrt(%x)", "C", lambda tf, x, y, r: tf.sqrt(x), True),
    "sign": ("sign(%x)", "C", lambda tf, x, y, r: tf.sign(x), True),
    "rsqrt": ("rsqrt(%x)", "C", lambda tf, x, y, r: tf.math.rsqrt(x), True),
    "sin": ("sine(%x)", "C", lambda tf, x, y, r: tf.sin(x), True),
    "cos": ("cosine(%x)", "C", lambda tf, x, y, r: tf.cos(x), True),
    "tanh": ("tanh(%x)", "C", lambda tf, x, y, r: tf.tanh(x), True),
    "tan": ("tan(%x)", "C", lambda tf, x, y, r: tf.tan(x), True),
    "expm1": ("exponential-minus-one(%x)", "C", lambda tf, x, y, r: tf.math.expm1(x), True),
    "log1p": ("log-plus-one(%x)", "C", lambda tf, x, y, r: tf.math.log1p(x), True),
    "power": ("power(%x, %y)", "C", lambda tf, x, y, r: tf.pow(x, y), True),
    "real": ("real(%x)", "R", lambda tf, x, y, r: tf.math.real(x), False),
    "imag": ("imag(%x)", "R", lambda tf, x, y, r: tf.math.imag(x), False),
    "complex": ("complex(%r, %r2)", "C", lambda tf, x, y, r: tf.complex(r, -r), False),
    "eq": ("compare(%x, %y), direction=EQ", "P", lambda tf, x, y, r: tf.equal(x, y), False),
    "ne": ("compare(%x, %y), direction=NE", "P", lambda tf, x, y, r: tf.not_equal(x, y), False),
}
_TYPES = {"c64": ("f32", np.complex64), "c128": ("f64", np.complex128)}


def _inputs(np_type):
    x = np.repeat(_GRID, _GRID.size).astype(np_type)
    y = np.tile(_GRID, _GRID.size).astype(np_type)
    return x, y, x.real.copy()


def _module(ct: str) -> str:
    rt = _TYPES[ct][0]
    ty = {"C": ct, "R": rt, "P": "pred"}
    lines = [f"  %{name} = {ty[k]}[{N}]{{0}} {hlo}" for name, (hlo, k, _, _) in OPS.items()]
    lines.insert(lines.index(next(x for x in lines if x.startswith("  %complex"))),
                 f"  %r2 = {rt}[{N}]{{0}} negate(%r)")
    outs = [f"{ty[k]}[{N}]{{0}}" for _, k, _, _ in OPS.values()]
    outs += [f"{ct}[4,4]{{1,0}}", f"{ct}[]"]
    return f"""HloModule complex_{ct}
%add (a: {ct}[], b: {ct}[]) -> {ct}[] {{
  %a = {ct}[] parameter(0)
  %b = {ct}[] parameter(1)
  ROOT %s = {ct}[] add(%a, %b)
}}
ENTRY %main (x: {ct}[{N}], y: {ct}[{N}], r: {rt}[{N}], m: {ct}[4,3], n: {ct}[3,4]) -> ({", ".join(outs)}) {{
  %x = {ct}[{N}]{{0}} parameter(0)
  %y = {ct}[{N}]{{0}} parameter(1)
  %r = {rt}[{N}]{{0}} parameter(2)
  %m = {ct}[4,3]{{1,0}} parameter(3)
  %n = {ct}[3,4]{{1,0}} parameter(4)
{chr(10).join(lines)}
  %conj_im = {rt}[{N}]{{0}} negate(%imag)
  %conj = {ct}[{N}]{{0}} complex(%real, %conj_im)
  %dot = {ct}[4,4]{{1,0}} dot(%m, %n), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %zero = {ct}[] constant((0, 0))
  %sum = {ct}[] reduce(%conj, %zero), dimensions={{0}}, to_apply=%add
  ROOT %t = ({", ".join(outs)}) tuple({", ".join("%" + k for k in OPS)}, %dot, %sum)
}}
"""


def _matmul_inputs(np_type):
    rng = np.random.default_rng(3)
    m = (rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3))).astype(np_type)
    n = (rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))).astype(np_type)
    m[0, 0] = complex(np.inf, 0)   # inf and NaN through the dot too
    n[1, 2] = complex(0, np.nan)
    return m, n


@pytest.fixture(scope="module", params=list(_TYPES))
def results(request):
    """(ct, ours, TF's XLA) for one complex type."""
    import tensorflow as tf

    ct = request.param
    np_type = _TYPES[ct][1]
    x, y, r = _inputs(np_type)
    m, n = _matmul_inputs(np_type)
    module, _ = optimize(parse_module(_module(ct)))
    ours = [np.asarray(o) for o in compile_module(module, OPTIONS)(x, y, r, m, n)]

    def fn(x, y, r, m, n):
        outs = [f(tf, x, y, r) for _, _, f, _ in OPS.values()]
        return outs + [tf.linalg.matmul(m, n), tf.reduce_sum(tf.math.conj(x))]

    want = [o.numpy() for o in tf.function(fn, jit_compile=True)(x, y, r, m, n)]
    return ct, ours, want


def _check_parts(name, got, want, rtol):
    """Part by part: NaN positions equal; values equal (with the sign of zero) or, with ``rtol``, within
    rtol of the larger finite part of the same element (a cancelled part is compared at its number's scale)."""
    w_all = np.asarray(want)
    with np.errstate(invalid="ignore"):
        scale = np.maximum(np.abs(np.nan_to_num(w_all.real, posinf=0, neginf=0)),
                           np.abs(np.nan_to_num(w_all.imag, posinf=0, neginf=0)))
    for part in ("real", "imag") if np.iscomplexobj(want) else ("real",):
        g, w = getattr(np.asarray(got), part), getattr(np.asarray(want), part)
        gn, wn = np.isnan(g), np.isnan(w)
        bad = np.flatnonzero(gn != wn)
        assert not bad.size, f"{name}.{part}: NaN differs at {bad[:6]} (x, y = {_pairs(bad[:6])}): {g.ravel()[bad[:6]]} vs {w.ravel()[bad[:6]]}"
        g, w = np.where(gn, 0, g), np.where(wn, 0, w)
        with np.errstate(invalid="ignore"):
            ok = (g == w) | (np.isfinite(w) & (np.abs(g - w) <= rtol * scale + 1e-300))
        ok &= (np.signbit(g) == np.signbit(w)) | (w != 0) | (rtol > 0)
        bad = np.flatnonzero(~ok)
        assert not bad.size, f"{name}.{part}: {bad.size} differ, e.g. {_pairs(bad[:4])}: {g.ravel()[bad[:4]]} vs {w.ravel()[bad[:4]]}"


def _pairs(idx):
    n = _GRID.size
    return [(complex(_GRID[i // n]), complex(_GRID[i % n])) for i in np.atleast_1d(idx) if i < N]


@pytest.mark.parametrize("name", list(OPS))
def test_elementwise_equals_tf_xla(results, name):
    ct, ours, want = results
    k = list(OPS).index(name)
    got, ref = ours[k], want[k]
    assert got.shape == ref.shape and got.dtype == ref.dtype
    transcendental = OPS[name][3]
    eps = np.finfo(np.float32 if ct == "c64" else np.float64).eps
    _check_parts(name, got, ref, 8 * eps if transcendental else (4 * eps if name in ("multiply", "divide") else 0))


def test_dot_and_sum_equal_tf_xla(results):
    ct, ours, want = results
    eps = np.finfo(np.float32 if ct == "c64" else np.float64).eps
    _check_parts("dot", ours[-2], want[-2], 16 * eps)
    _check_parts("sum", ours[-1], want[-1], 64 * eps)


MOVES = """HloModule complex_moves
%add (a: c128[], b: c128[]) -> c128[] {
  %a = c128[] parameter(0)
  %b = c128[] parameter(1)
  ROOT %s = c128[] add(%a, %b)
}
ENTRY %main (x: c64[2,3], f: f32[2,3], p: pred[2,3]) -> (c128[3,2], c128[3], f32[2,3], c64[2,6], c64[2,3], c64[2,2]) {
  %x = c64[2,3]{1,0} parameter(0)
  %f = f32[2,3]{1,0} parameter(1)
  %p = pred[2,3]{1,0} parameter(2)
  %k = c64[2,3]{1,0} constant({ {(1, -1), (0, 2), (-3.5, 0)}, {(0, 0), (2, 2), (-1, 0.5)} })
  %fc = c64[2,3]{1,0} convert(%f)
  %m = c64[2,3]{1,0} multiply(%x, %k)
  %a = c64[2,3]{1,0} add(%m, %fc)
  %w = c128[2,3]{1,0} convert(%a)
  %t = c128[3,2]{1,0} transpose(%w), dimensions={1,0}
  %z = c128[] constant((0, 0))
  %r = c128[3]{0} reduce(%w, %z), dimensions={0}, to_apply=%add
  %i = f32[2,3]{1,0} imag(%f)
  %ri = f32[2,3]{1,0} real(%f)
  %ii = f32[2,3]{1,0} add(%i, %ri)
  %c = c64[2,6]{1,0} concatenate(%x, %k), dimensions={1}
  %s = c64[2,3]{1,0} select(%p, %x, %k)
  %sl = c64[2,2]{1,0} slice(%c), slice={[0:2], [2:4]}
  %b = c64[2,2]{1,0} broadcast(%sl), dimensions={0,1}
  ROOT %o = (c128[3,2]{1,0}, c128[3]{0}, f32[2,3]{1,0}, c64[2,6]{1,0}, c64[2,3]{1,0}, c64[2,2]{1,0}) tuple(%t, %r, %ii, %c, %s, %b)
}
"""


def test_data_movement_conversions_and_constants_equal_the_evaluator():
    """Complex constants, converts (f32 → c64 → c128), real/imag of a real value, transpose, reduce,
    concatenate, select, slice, broadcast: native code equals the reference evaluator."""
    from tests.codegen.cg_helpers import check, parsed

    rng = np.random.default_rng(5)
    x = (rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))).astype(np.complex64)
    f = rng.standard_normal((2, 3)).astype(np.float32)
    p = rng.random((2, 3)) < 0.5
    module, _ = optimize(parse_module(MOVES))
    check(module, x, f, p, rtol=1e-6, atol=1e-6)
    check(parsed(MOVES), x, f, p, rtol=1e-6, atol=1e-6)   # unoptimized: every op its own kernel


DOTS = """HloModule dots
ENTRY %main (a: C[2,3,4], b: C[2,4,2], v: C[4], w: C[4]) -> (C[2,3,2], C[], C[3]) {
  %a = C[2,3,4]{2,1,0} parameter(0)
  %b = C[2,4,2]{2,1,0} parameter(1)
  %v = C[4]{0} parameter(2)
  %w = C[4]{0} parameter(3)
  %d = C[2,3,2]{2,1,0} dot(%a, %b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  %e = C[] dot(%v, %w), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %a0 = C[1,3,4]{2,1,0} slice(%a), slice={[0:1], [0:3], [0:4]}
  %a1 = C[3,4]{1,0} reshape(%a0)
  %mv = C[3]{0} dot(%a1, %v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = (C[2,3,2]{2,1,0}, C[], C[3]{0}) tuple(%d, %e, %mv)
}
"""


@pytest.mark.parametrize("ct", list(_TYPES))
def test_batched_and_vector_dots_equal_tf_xla(ct):
    """Batched matrix products run on Eigen in XLA:CPU (an infinite part turns NaN through its alpha
    scaling); dot products and matrix-vector products are plain loops (the infinity survives)."""
    import tensorflow as tf

    np_type = _TYPES[ct][1]
    rng = np.random.default_rng(0)
    cplx = lambda *shape: (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np_type)  # noqa: E731
    a, b, v, w = cplx(2, 3, 4), cplx(2, 4, 2), cplx(4), cplx(4)
    a[0, 0, 0], a[1, 1, 1], v[2] = complex(np.inf, 0), complex(0, -np.inf), complex(np.inf, 1)
    fn = lambda a, b, v, w: (tf.linalg.matmul(a, b), tf.tensordot(v, w, 1), tf.linalg.matvec(a[0], v))  # noqa: E731
    want = [o.numpy() for o in tf.function(fn, jit_compile=True)(a, b, v, w)]
    module, _ = optimize(parse_module(DOTS.replace("C[", f"{ct}[")))
    got = compile_module(module, OPTIONS)(a, b, v, w)
    eps = np.finfo(np.float32 if ct == "c64" else np.float64).eps
    for name, g, ref in zip(("batch matmul", "dot product", "matvec"), got, want):
        assert np.isnan(ref).any() or np.isinf(ref).any()   # the special values reach every result
        _check_parts(name, g, ref, 16 * eps)


CONV = """HloModule complex_conv
ENTRY %main (x: c64[1,5,2], k: c64[3,2,2]) -> c64[1,3,2] {
  %x = c64[1,5,2]{2,1,0} parameter(0)
  %k = c64[3,2,2]{2,1,0} parameter(1)
  ROOT %c = c64[1,3,2]{2,1,0} convolution(%x, %k), window={size=3}, dim_labels=b0f_0io->b0f
}
"""


def test_convolution_equals_the_evaluator():
    from tests.codegen.cg_helpers import check, parsed

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((1, 5, 2)) + 1j * rng.standard_normal((1, 5, 2))).astype(np.complex64)
    k = (rng.standard_normal((3, 2, 2)) + 1j * rng.standard_normal((3, 2, 2))).astype(np.complex64)
    check(parsed(CONV), x, k, rtol=1e-5, atol=1e-5)
