"""Index-arithmetic ops compiled == evaluator: broadcast, transpose, reshape, bitcast (with layouts),
slice, reverse, pad (negative and interior), concatenate, dynamic-(update-)slice (clamped starts),
gather (incl. batching dims), iota — unfused and fused into one loop nest."""
import numpy as np
import pytest

from tests.codegen.cg_helpers import check, module_of, parsed, random_array
from tfxla_cluster.hlo.attrs import FusionKind, GatherDimensionNumbers
from tfxla_cluster.hlo.builder import HloBuilder
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape

RNG = np.random.default_rng(11)


def test_shape_ops_unfused():
    x = random_array((3, 5, 7), np.float32, RNG)
    v = random_array((5,), np.float32, RNG)

    def build(b, p, q):
        return b.tuple([
            b.broadcast(q, (3, 5, 7), (1,)),
            b.broadcast(q, (5, 2), (0,)),
            b.transpose(p, (2, 0, 1)),
            b.reshape(p, (15, 7)),
            b.reshape(p, (7, 15)),
            b.reshape(p, (105,)),
            b.reshape(p, (3, 1, 35, 1)),
            b.slice(p, (1, 0, 2), (3, 5, 7), (1, 2, 3)),
            b.reverse(p, (0, 2)),
            b.pad(p, b.constant(-1.0, T.F32), [(1, 2, 0), (-1, 0, 1), (0, -2, 2)]),
            b.concatenate([p, p, b.slice(p, (0, 0, 0), (3, 5, 2))], 2),
            b.concatenate([b.reshape(q, (1, 5)), b.broadcast(q, (2, 5), (1,))], 0),
        ])
    check(module_of(build, x, v), x, v)


def test_empty_and_scalar_shapes():
    x = np.zeros((0, 4), np.float32)
    s = np.float32(2.5)

    def build(b, p, c):
        return b.tuple([b.add(p, p), b.transpose(p, (1, 0)), b.broadcast(c, (3, 0), ()), b.reshape(c, (1, 1)),
                        b.concatenate([p, p], 0), b.pad(p, c, [(1, 0), (0, 1)])])
    check(module_of(build, x, np.asarray(s)), x, np.asarray(s))


def test_layouts_and_bitcast():
    text = """HloModule layouts
ENTRY %main (a: f32[2,3]) -> (f32[3,2], f32[2,3], f32[6], f32[3,2]) {
  %a = f32[2,3]{0,1} parameter(0)
  %copy = f32[2,3]{1,0} copy(%a)
  %bitcast = f32[3,2]{0,1} bitcast(%copy)
  %transpose = f32[3,2]{1,0} transpose(%a), dimensions={1,0}
  %t3 = f32[2,1,3]{1,0,2} reshape(%copy)
  %b3 = f32[6]{0} bitcast(%a)
  %add = f32[3,2]{1,0} add(%bitcast, %transpose)
  %back = f32[2,3]{1,0} reshape(%t3)
  ROOT %t = (f32[3,2]{1,0}, f32[2,3]{1,0}, f32[6]{0}, f32[3,2]{0,1}) tuple(%add, %back, %b3, %bitcast)
}
"""
    a = random_array((2, 3), np.float32, RNG)
    check(parsed(text), a)


def test_fused_transpose_copy_bitcast_like_xla():
    """XLA's attention head split: bitcast → transpose with a non-default layout → copy → bitcast."""
    text = """HloModule heads
%fused (p: f32[4,8]) -> f32[2,4,4] {
  %p = f32[4,8]{1,0} parameter(0)
  %b1 = f32[1,4,2,4]{3,2,1,0} bitcast(%p)
  %t = f32[1,2,4,4]{3,1,2,0} transpose(%b1), dimensions={0,2,1,3}
  %c = f32[1,2,4,4]{3,2,1,0} copy(%t)
  ROOT %b2 = f32[2,4,4]{2,1,0} bitcast(%c)
}
ENTRY %main (x: f32[4,8]) -> f32[2,4,4] {
  %x = f32[4,8]{1,0} parameter(0)
  ROOT %f = f32[2,4,4]{2,1,0} fusion(%x), kind=kLoop, calls=%fused
}
"""
    x = random_array((4, 8), np.float32, RNG)
    check(parsed(text), x)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int64])
def test_dynamic_slices_clamp_their_starts(dtype):
    x = random_array((6, 9), np.float32, RNG)
    u = random_array((2, 4), np.float32, RNG)
    for starts in [(1, 2), (5, 8), (-3, 100), (0, 0)]:
        if np.dtype(dtype).kind == "u" and min(starts) < 0:
            continue
        s0, s1 = (np.asarray(s).astype(dtype) for s in starts)

        def build(b, p, q, i, j):
            return b.tuple([b.dynamic_slice(p, [i, j], (3, 4)), b.dynamic_update_slice(p, q, [i, j])])
        check(module_of(build, x, u, s0, s1), x, u, s0, s1)


def test_gather_and_batching_gather():
    text = """HloModule g
ENTRY %main (a: f32[5,4], idx: s32[3,1], c: f32[2,4,3], bi: s32[2,1]) -> (f32[3,4], f32[2,3], f32[3,2,2]) {
  %a = f32[5,4]{1,0} parameter(0)
  %idx = s32[3,1]{1,0} parameter(1)
  %c = f32[2,4,3]{2,1,0} parameter(2)
  %bi = s32[2,1]{1,0} parameter(3)
  %g = f32[3,4]{1,0} gather(%a, %idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}
  %g2 = f32[2,3]{1,0} gather(%c, %bi), offset_dims={1}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=1, slice_sizes={1,1,3}
  %g3 = f32[3,2,2]{2,1,0} gather(%a, %idx), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0}, index_vector_dim=1, slice_sizes={2,2}
  ROOT %t = (f32[3,4]{1,0}, f32[2,3]{1,0}, f32[3,2,2]{2,1,0}) tuple(%g, %g2, %g3)
}
"""
    a = random_array((5, 4), np.float32, RNG)
    idx = np.array([[1], [7], [-2]], np.int32)  # out-of-range starts are clamped
    c = random_array((2, 4, 3), np.float32, RNG)
    bi = np.array([[3], [0]], np.int32)
    check(parsed(text), a, idx, c, bi)


def test_one_fused_loop_nest_of_mixed_index_ops():
    """A loop fusion mixing broadcast, iota, compare, select, pad, slice, reshape and transpose."""
    fb = HloBuilder("fused")
    p0 = fb.parameter(0, Shape.array(T.F32, (4, 6)), "p0")
    p1 = fb.parameter(1, Shape.array(T.S32, (4,)), "p1")
    io = fb.iota(Shape.array(T.S32, (4, 6)), 1)
    eq = fb.compare(fb.broadcast(p1, (4, 6), (0,)), io, "EQ")
    sel = fb.select(eq, fb.broadcast(fb.constant(1.0, T.F32), (4, 6), ()), p0)
    padded = fb.pad(sel, fb.constant(0.0, T.F32), [(1, 1), (0, 2)])
    sl = fb.slice(padded, (0, 0), (6, 8), (2, 1))
    rs = fb.reshape(fb.transpose(sl, (1, 0)), (4, 6))
    root = fb.add(rs, fb.exp(p0))
    fused = fb.build(root)
    x = random_array((4, 6), np.float32, RNG, specials=False)
    ids = np.array([0, 5, 7, -1], np.int32)

    def build(b, p, q):
        return b.fusion([p, q], fused, FusionKind.LOOP)
    exe, _ = check(module_of(build, x, ids), x, ids, rtol=1e-6, atol=1e-6)
    assert len(exe.kernels) == 1
