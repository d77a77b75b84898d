"""Kernels with inline f32 transcendentals (exp/log/tanh) get the target's full vector width (512 bits on
AVX-512), everything else the preferred width (XLA's 256); the results do not depend on the width."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.codegen.cg_helpers import CHECKED
from tfxla_cluster.codegen import compile_module
from tfxla_cluster.codegen.executable import emit_module
from tfxla_cluster.codegen.target import CpuTarget
from tfxla_cluster.hlo.parser import parse_module

MODULE = """
HloModule widths

ENTRY main {
  x = f32[1037] parameter(0)
  y = f32[1037] parameter(1)
  e = f32[1037] exponential(x)
  t = f32[1037] tanh(y)
  l = f32[1037] log(y)
  s = f32[1037] add(t, l)
  m = f32[1037] multiply(e, s)
  c = f32[1037] copy(y)
  ROOT r = (f32[1037], f32[1037]) tuple(m, c)
}
"""


def _widths(ir_text: str) -> dict[str, str]:
    out = {}
    for line in ir_text.splitlines():
        if line.startswith("define"):
            name = line.split("@", 1)[1].split("(", 1)[0].strip('"')
            out[name] = line.split('"prefer-vector-width"="', 1)[1].split('"', 1)[0]
    return out


@pytest.mark.parametrize("cpu, wide", [("skylake-avx512", "512"), ("haswell", "256")])
def test_transcendental_kernels_get_the_full_width(cpu, wide):
    opts = dataclasses.replace(CHECKED, target=CpuTarget(cpu, ""))
    widths = _widths(emit_module(parse_module(MODULE), opts)[1])
    exp_kernels = ["k_e", "k_t", "k_l"]     # kernels are named after their instruction
    others = [n for n in widths if n not in exp_kernels]
    assert set(exp_kernels) <= set(widths) and {"k_s", "k_c", "tfxla_entry"} <= set(others)
    assert all(widths[n] == wide for n in exp_kernels)
    assert all(widths[n] == "256" for n in others)
    # A narrower preference is kept everywhere (no widening below 256 bits).
    narrow = _widths(emit_module(parse_module(MODULE), dataclasses.replace(opts, prefer_vector_width=128))[1])
    assert set(narrow.values()) == {"128"}


def test_results_do_not_depend_on_the_width():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(1037) * 30).astype(np.float32)
    y = np.abs(rng.standard_normal(1037) * 5).astype(np.float32)
    x[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 88.9]
    y[:4] = [0.0, np.inf, np.nan, 1e-40]
    module = parse_module(MODULE)
    wide = compile_module(module, CHECKED)(x, y)
    narrow = compile_module(module, dataclasses.replace(CHECKED, prefer_vector_width=128))(x, y)
    for a, b in zip(wide, narrow):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
