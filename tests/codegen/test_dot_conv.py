"""Dot and convolution: GEMM path (OpenBLAS through llvmlite's symbol table) and loop path, against
numpy and the evaluator — transposed operands, batch dims, odd sizes, non-row-major layouts, fused
epilogues written in place, f64/int/f16 dots, and convolutions with padding, stride, dilation, groups."""
import numpy as np
import pytest

from tests.codegen.cg_helpers import assert_same, check, module_of, parsed, random_array
from tfxla_cluster.codegen import CodegenOptions, compile_module
from tfxla_cluster.codegen.native_runtime import blas_available
from tfxla_cluster.hlo.attrs import FusionKind, Window
from tfxla_cluster.hlo.builder import HloBuilder
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape

RNG = np.random.default_rng(21)
OPTS = CodegenOptions(bounds_checks=True, threads=2)
NO_BLAS = CodegenOptions(bounds_checks=True, use_blas=False)


def _dot(lhs, rhs, lc, rc, lb=(), rb=()):
    return module_of(lambda b, x, y: b.dot(x, y, lc, rc, lb, rb), lhs, rhs)


CASES = [  # lhs shape, rhs shape, lhs contracting, rhs contracting, lhs batch, rhs batch
    ((33, 47), (47, 29), (1,), (0,), (), ()),        # plain
    ((47, 33), (47, 29), (0,), (0,), (), ()),        # lhs transposed
    ((33, 47), (29, 47), (1,), (1,), (), ()),        # rhs transposed
    ((47, 33), (29, 47), (0,), (1,), (), ()),        # both
    ((3, 17, 20), (3, 20, 9), (2,), (1,), (0,), (0,)),   # batch
    ((17, 3, 20), (20, 9, 3), (2,), (0,), (1,), (2,)),   # batch dims not leading: materialised
    ((4, 5, 6, 7), (6, 7, 8), (2, 3), (0, 1), (), ()),   # two contracting dims
    ((1, 64), (64, 300), (1,), (0,), (), ()),        # vector-matrix
    ((200, 64), (64,), (1,), (0,), (), ()),          # matrix-vector
    ((0, 8), (8, 5), (1,), (0,), (), ()),            # empty
    ((6, 0), (0, 5), (1,), (0,), (), ()),            # K = 0
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}")
@pytest.mark.parametrize("opts", [OPTS, NO_BLAS], ids=["blas", "ir"])
def test_dot_against_numpy(case, opts):
    ls, rs, lc, rc, lb, rb = case
    x, y = random_array(ls, np.float32, RNG, specials=False), random_array(rs, np.float32, RNG, specials=False)
    m = _dot(x, y, lc, rc, lb, rb)
    exe = compile_module(m, opts)
    got = exe(x, y)[0]
    letters = "abcdefgh"
    lsub = [letters[i] for i in range(len(ls))]
    rsub = ["r" + str(i) for i in range(len(rs))]
    rsub = list("mnopqrst"[:len(rs)])
    for a, c in zip(lc + lb, rc + rb):
        rsub[c] = lsub[a]
    out = [lsub[d] for d in lb] + [lsub[d] for d in range(len(ls)) if d not in lc + lb] + \
        [rsub[d] for d in range(len(rs)) if d not in rc + rb]
    want = np.einsum(f"{''.join(lsub)},{''.join(rsub)}->{''.join(out)}", x.astype(np.float64), y.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    if opts.use_blas and blas_available() and ls[0] and all(ls) and all(rs):
        assert any(k.kind == "gemm" for k in exe.kernels)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shapes", [((37, 50), (50, 70)), ((64, 9), (9, 32)), ((5, 3), (3, 16))],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_ir_gemm_tiles_and_edges(dtype, shapes):
    """The IR GEMM's register tiles (4 rows x 2 vectors) and its leftover rows/columns, threaded
    (row blocks start at any row) and not."""
    x = random_array(shapes[0], dtype, RNG, specials=False)
    y = random_array(shapes[1], dtype, RNG, specials=False)
    want = x.astype(np.float64) @ y.astype(np.float64)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    for opts in (NO_BLAS, CodegenOptions(bounds_checks=True, use_blas=False, threads=3, parallel_min_cost=1)):
        got = compile_module(_dot(x, y, (1,), (0,)), opts)(x, y)[0]
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.float16, np.int8])
def test_dot_other_types(dtype):
    x = random_array((9, 13), dtype, RNG, specials=False, low=-9, high=9)
    y = random_array((13, 7), dtype, RNG, specials=False, low=-9, high=9)
    tol = {np.dtype(np.float64): 1e-12, np.dtype(np.float16): 2e-3}.get(np.dtype(dtype), 0.0)
    check(_dot(x, y, (1,), (0,)), x, y, rtol=tol, atol=tol)


def test_dot_output_with_column_major_layout_and_small_dot():
    text = """HloModule d
ENTRY %main (a: f32[40,50], b: f32[50,30], c: f32[3,2], d: f32[2,3]) -> (f32[40,30], f32[3,3]) {
  %a = f32[40,50]{0,1} parameter(0)
  %b = f32[50,30]{1,0} parameter(1)
  %c = f32[3,2]{1,0} parameter(2)
  %d = f32[2,3]{1,0} parameter(3)
  %dot = f32[40,30]{0,1} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %small = f32[3,3]{1,0} dot(%c, %d), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = (f32[40,30]{0,1}, f32[3,3]{1,0}) tuple(%dot, %small)
}
"""
    args = [random_array(s, np.float32, RNG, specials=False) for s in [(40, 50), (50, 30), (3, 2), (2, 3)]]
    check(parsed(text), *args, rtol=1e-5, atol=1e-5)


def _dense_relu_fusion(m, k, n):
    """relu(dot(x, w) + b) as an output fusion: the GEMM writes the result buffer, then the epilogue
    runs in place on it."""
    fb = HloBuilder("fused")
    x = fb.parameter(0, Shape.array(T.F32, (m, k)), "x")
    w = fb.parameter(1, Shape.array(T.F32, (k, n)), "w")
    bias = fb.parameter(2, Shape.array(T.F32, (n,)), "bias")
    d = fb.dot(x, w)
    y = fb.add(d, fb.broadcast(bias, (m, n), (1,)))
    root = fb.maximum(y, fb.broadcast(fb.constant(0.0, T.F32), (m, n), ()))
    fused = fb.build(root)
    xs = [random_array(s, np.float32, RNG, specials=False) for s in [(m, k), (k, n), (n,)]]
    return module_of(lambda b, *p: b.fusion(list(p), fused, FusionKind.OUTPUT), *xs), xs


def test_output_fusion_gemm_with_in_place_epilogue():
    m, xs = _dense_relu_fusion(64, 48, 80)
    exe, _ = check(m, *xs, rtol=1e-5, atol=1e-5)
    if blas_available():
        # the epilogue runs on each GEMM block inside the GEMM kernel (no pass of its own)
        assert [k.kind for k in exe.kernels] == ["gemm"]
        assert exe.arena_bytes == 0  # no scratch: the dot result lives in the output buffer
    exe, _ = check(m, *xs, rtol=1e-5, atol=1e-5, options=CodegenOptions(bounds_checks=True, output_fusion=False))
    if blas_available():
        assert [k.kind for k in exe.kernels] == ["gemm", "fusion:kOutput"]


CONVS = [
    ("b01f_01io->b01f", (2, 9, 9, 3), (3, 3, 3, 8), Window.make([3, 3], [1, 1], [(1, 1), (1, 1)]), 1),
    ("b01f_01io->b01f", (1, 10, 7, 4), (3, 2, 4, 6), Window.make([3, 2], [2, 1], [(0, 1), (1, 0)]), 1),
    ("bf01_oi01->bf01", (2, 4, 8, 8), (6, 2, 3, 3), Window.make([3, 3], [1, 2], [(1, 1), (0, 0)]), 2),
    ("b01f_01io->b01f", (1, 7, 7, 2), (3, 3, 2, 2), Window.make([3, 3], [1, 1], [(2, 2), (2, 2)],
                                                                rhs_dilation=[2, 2]), 1),
    ("b01f_01io->b01f", (1, 5, 5, 2), (2, 2, 2, 3), Window.make([2, 2], [1, 1], [(1, 1), (1, 1)],
                                                                lhs_dilation=[2, 2]), 1),
    ("b0f_0io->b0f", (3, 30, 16), (5, 16, 32), Window.make([5], [1], [(2, 2)]), 1),
]


@pytest.mark.parametrize("conv", CONVS, ids=lambda c: f"{c[0]}-{c[1]}")
def test_convolution(conv):
    labels, xs, ks, window, groups = conv
    x, k = random_array(xs, np.float32, RNG, specials=False), random_array(ks, np.float32, RNG, specials=False)
    m = module_of(lambda b, p, q: b.convolution(p, q, window, labels, feature_group_count=groups), x, k)
    check(m, x, k, rtol=2e-5, atol=2e-5)
    check(m, x, k, rtol=2e-5, atol=2e-5, options=CodegenOptions(bounds_checks=True, gemm_min_flops=1 << 60))


def test_batch_group_convolution_loop_path():
    x = random_array((4, 5, 5, 2), np.float32, RNG, specials=False)
    k = random_array((2, 2, 2, 6), np.float32, RNG, specials=False)
    m = module_of(lambda b, p, q: b.convolution(p, q, Window.make([2, 2]), "b01f_01io->b01f",
                                                batch_group_count=2), x, k)
    check(m, x, k, rtol=1e-5, atol=1e-5)
