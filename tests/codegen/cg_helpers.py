"""Shared helpers of the codegen tests: build modules, random inputs with special values, and the
compiled == evaluator comparison (bounds checks on)."""
from __future__ import annotations

import functools
import threading
from typing import Callable

import ml_dtypes
import numpy as np
import pytest

from tfxla_cluster.codegen import CodegenOptions, compile_module
from tfxla_cluster.codegen.conv_exact import SPECIAL_CHECK_KIND
from tfxla_cluster.codegen.row_lanes import AVX512, host_target
from tfxla_cluster.hlo.builder import HloBuilder
from tfxla_cluster.hlo.evaluator import evaluate
from tfxla_cluster.hlo.ir import HloModule
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.hlo.shape import Shape, primitive_type_from_dtype

# Tests of TF's LLVM vectorisation choices tabled on AVX-512 only (kept ±denormals, pool and bf16 lanes:
# row_lanes.py)
avx512_measured = pytest.mark.skipif(host_target() != AVX512,
                                     reason="TF's vectorisation choices measured on AVX-512 targets only (row_lanes.py)")

# NaN-propagating min/max, as the evaluator (XLA's default fast min/max is tested against TF's XLA in
# tests/e2e/test_edge_semantics.py)
CHECKED = CodegenOptions(bounds_checks=True, threads=2, fast_min_max=False)
BF16 = np.dtype(ml_dtypes.bfloat16)


def module_of(build, *arrays, name="m") -> HloModule:
    """A module whose parameters match ``arrays``; ``build(b, *params)`` returns the root."""
    b = HloBuilder("main")
    params = [b.parameter(i, Shape.array(primitive_type_from_dtype(a.dtype), a.shape), f"p{i}")
              for i, a in enumerate(arrays)]
    root = build(b, *params)
    m = HloModule(name)
    m.add_entry_computation(b.build(root))
    # Round-trip through text, as the compiler sees modules in practice.
    return parse_module(m.to_string())


_SPECIAL_F = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 0.5, -2.5, 3.5, 1e-3, 65000.0]


def random_array(shape, dtype, rng, specials=True, low=None, high=None):
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind == "f" or dtype == BF16:
        x = rng.standard_normal(n) * 3
        if specials and n:
            k = min(n, len(_SPECIAL_F))
            pos = rng.choice(n, k, replace=False)
            x[pos] = rng.permutation(_SPECIAL_F)[:k]
        return x.astype(dtype).reshape(shape)
    info = np.iinfo(dtype)
    lo = info.min if low is None else low
    hi = info.max if high is None else high
    x = rng.integers(lo, hi, n, dtype=np.int64 if dtype != np.uint64 else np.uint64, endpoint=True)
    x = x.astype(dtype)
    if specials and n and low is None:
        sp = np.array([0, 1, info.max, info.min, 2, 7], dtype=np.int64 if dtype != np.uint64 else np.uint64)
        k = min(n, len(sp))
        x[rng.choice(n, k, replace=False)] = sp[:k].astype(dtype)
        if info.min < 0 and n > k:
            x[rng.choice(n, 1)] = -1
    return x.reshape(shape)


def _leaves(v):
    if isinstance(v, tuple):
        return [x for e in v for x in _leaves(e)]
    return [v]


def assert_same(got, want, rtol=0.0, atol=0.0, signed_zero=True):
    """Equal values (NaN == NaN). Floats: within rtol/atol, bit-level sign of zero when exact."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if got.dtype.kind == "c":   # part by part
        assert_same(got.real, want.real, rtol, atol, signed_zero)
        assert_same(got.imag, want.imag, rtol, atol, signed_zero)
        return
    if got.dtype.kind in "fc" or got.dtype == BF16:
        g, w = got.astype(np.float64), want.astype(np.float64)
        gn, wn = np.isnan(g), np.isnan(w)
        bad = np.flatnonzero(gn != wn)
        assert not bad.size, f"NaN mismatch at {bad[:5]}: got {g.ravel()[bad[:5]]}, want {w.ravel()[bad[:5]]}"
        g, w = np.where(gn, 0, g), np.where(wn, 0, w)
        if rtol == 0 and atol == 0:
            ok = (g == w) & ((np.signbit(g) == np.signbit(w)) | (not signed_zero))
        else:
            with np.errstate(invalid="ignore"):
                ok = (g == w) | (np.abs(g - w) <= atol + rtol * np.abs(w))
        bad = np.flatnonzero(~ok)
        assert not bad.size, (f"{bad.size} mismatches, e.g. at {bad[:5]}: got {g.ravel()[bad[:5]]}, "
                              f"want {w.ravel()[bad[:5]]}")
    else:
        assert np.array_equal(got, want), (got, want)


def check(module, *args, rtol=0.0, atol=0.0, options=CHECKED, signed_zero=True, scale_atol=False):
    """Compile ``module`` (bounds checks on), run it, and compare every output with the evaluator.

    ``scale_atol``: ``atol`` is relative to the largest finite magnitude of each output — for whole models,
    where sums of large terms cancel to small values and the summation order follows the target's vector
    width (AVX2 and AVX-512 code differ there)."""
    exe = compile_module(module, options)
    got = exe(*args)
    want = evaluate(module, *args)
    want = want if isinstance(want, tuple) else (want,)
    assert len(_leaves(got)) == len(_leaves(want))
    for g, w in zip(_leaves(got), _leaves(want)):
        scale = 1.0
        if scale_atol and np.asarray(w).dtype.kind == "f" and np.asarray(w).size:
            finite = np.abs(np.asarray(w, np.float64))[np.isfinite(np.asarray(w, np.float64))]
            scale = max(1.0, float(finite.max())) if finite.size else 1.0
        assert_same(g, w, rtol, atol * scale, signed_zero)
    return exe, got


def tolerance(dtype, approx: bool) -> tuple[float, float]:
    dtype = np.dtype(dtype)
    if not approx:
        return 0.0, 0.0
    return {np.dtype(np.float32): (5e-6, 1e-6), np.dtype(np.float64): (1e-13, 1e-14),
            np.dtype(np.float16): (2e-3, 1e-4), BF16: (1.6e-2, 1e-3)}.get(dtype, (0.0, 0.0))


@functools.lru_cache(maxsize=None)
def parsed(text: str) -> HloModule:
    return parse_module(text)


def fill_elided(module, seed=0):
    rng = np.random.default_rng(seed)
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.literal_elided:
                instr.literal = random_array(instr.shape.dimensions, instr.shape.dtype, rng, specials=False)
                instr.literal_elided = False
    return module


def inputs_for(module, seed=1):
    rng = np.random.default_rng(seed)
    out = []
    for p in module.entry.parameters:
        et = p.shape.element_type
        if et.is_integral:
            out.append(random_array(p.shape.dimensions, p.shape.dtype, rng, specials=False, low=0, high=3))
        else:
            out.append(random_array(p.shape.dimensions, p.shape.dtype, rng, specials=False))
    return out


def run_threads(work: Callable[[int], None], n: int) -> None:
    """Run ``work(k)`` for k in range(n), each on its own thread, all at once; re-raise the first error
    any of them raised (an assertion inside ``work`` fails the test)."""
    errors: list[BaseException] = []

    def guarded(k: int) -> None:
        try:
            work(k)
        except Exception as e:  # reported on the test's thread below
            errors.append(e)
    threads = [threading.Thread(target=guarded, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


# Softmax as XLA's optimised HLO has it (max reduce, exp fusion, sum reduce, divide fusion) over f32[R,C];
# ``softmax_text`` fills in the sizes and the entry's last lines (default: the divide as the root).
_SOFTMAX_HLO = """HloModule softmax

max_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

fused_exp {
  x = f32[R,C] parameter(0)
  m = f32[R] parameter(1)
  mb = f32[R,C] broadcast(m), dimensions={0}
  d = f32[R,C] subtract(x, mb)
  ROOT e = f32[R,C] exponential(d)
}

fused_div {
  e = f32[R,C] parameter(0)
  s = f32[R] parameter(1)
  sb = f32[R,C] broadcast(s), dimensions={0}
  ROOT q = f32[R,C] divide(e, sb)
}

ENTRY main {
  x = f32[R,C] parameter(0)
  ninf = f32[] constant(-inf)
  zero = f32[] constant(0)
  m = f32[R] reduce(x, ninf), dimensions={1}, to_apply=max_f32
  ee = f32[R,C] fusion(x, m), kind=kLoop, calls=fused_exp
  s = f32[R] reduce(ee, zero), dimensions={1}, to_apply=add_f32
TAIL
}
"""
SOFTMAX_ROOT = "  ROOT qq = f32[R,C] fusion(ee, s), kind=kLoop, calls=fused_div"


def softmax_text(rows: int, cols: int, tail: str = SOFTMAX_ROOT) -> str:
    """The softmax module over f32[rows, cols]; ``tail``: the entry's lines after the sum (R, C for sizes)."""
    text = _SOFTMAX_HLO.replace("TAIL", tail)
    return text.replace("[R,C]", f"[{rows},{cols}]").replace("[R]", f"[{rows}]")


def conv_kernels(exe) -> list:
    """``exe``'s kernels but the per-call special-value checks of codegen/conv_exact.py (a filter scan in
    front of the convolutions where it costs under ~1%)."""
    return [k for k in exe.kernels if k.kind != SPECIAL_CHECK_KIND]
