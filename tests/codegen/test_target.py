"""Code for a chosen CPU target (codegen/target.py): kernels compiled for an AVX2 CPU (haswell, the host
without AVX-512, ``--xla_cpu_max_isa=AVX2``) and for baseline x86-64 (SSE2) contain no AVX-512 (no zmm, no
mask registers, no EVEX-only instructions or registers) — resp. no AVX at all — and compute what the
evaluator computes, on whatever x86-64 machine runs the tests. Flag errors are typed and readable."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from tests.codegen.cg_helpers import CHECKED, check, parsed, random_array, tolerance
from tfxla_cluster.codegen import CodegenOptions, JitEngine, compile_module, get_engine
from tfxla_cluster.codegen import target as tg
from tfxla_cluster.codegen.executable import emit_module
from tfxla_cluster.errors import FlagError, InternalError
from tfxla_cluster.flags import Flags

# AT&T syntax. zmm and k registers, the upper 16 xmm/ymm registers, embedded broadcasts and instructions
# that exist only with an EVEX encoding.
AVX512_ASM = re.compile(r"%zmm\d|%[xy]mm(1[6-9]|2\d|3[01])\b|%k[0-7]\b|\{1to\d+\}|"
                        r"\b(vscalef|vpternlog|vperm[it]2|vrndscale|vfixupimm|vgetexp|vgetmant|kmov|vpmov[a-z]*2m|"
                        r"vpcmp[a-z]*\s.*%k|vcompress|vexpand|vrcp14|vrsqrt14)")
AVX_ASM = re.compile(r"%ymm\d|^\s+v[a-z0-9]+\s", re.M)

ELEMENTWISE = """HloModule elementwise
fused {
  x = f32[517] parameter(0)
  e = f32[517] exponential(x)
  t = f32[517] tanh(x)
  l = f32[517] log(e)
  r = f32[517] erf(x)
  g = f32[517] logistic(x)
  s1 = f32[517] add(e, t)
  s2 = f32[517] multiply(l, r)
  s3 = f32[517] subtract(s1, s2)
  ROOT s = f32[517] add(s3, g)
}
ENTRY main {
  x = f32[517] parameter(0)
  ROOT f = f32[517] fusion(x), kind=kLoop, calls=fused
}
"""

VECTOR_MATH = """HloModule vector_math
fused {
  x = f32[1031] parameter(0)
  e = f32[1031] exponential(x)
  t = f32[1031] tanh(x)
  l = f32[1031] log(e)
  g = f32[1031] logistic(x)
  s1 = f32[1031] add(e, t)
  s2 = f32[1031] multiply(l, g)
  ROOT s = f32[1031] subtract(s1, s2)
}
ENTRY main {
  x = f32[1031] parameter(0)
  ROOT f = f32[1031] fusion(x), kind=kLoop, calls=fused
}
"""

HALF = """HloModule half
ENTRY main {
  x = f16[300] parameter(0)
  y = bf16[300] parameter(1)
  xf = f32[300] convert(x)
  yf = f32[300] convert(y)
  p = f32[300] multiply(xf, yf)
  e = f32[300] exponential(p)
  ROOT h = f16[300] convert(e)
}
"""

REDUCE = """HloModule reduce
add { a = f32[] parameter(0)
      b = f32[] parameter(1)
      ROOT s = f32[] add(a, b) }
max { a = f32[] parameter(0)
      b = f32[] parameter(1)
      ROOT m = f32[] maximum(a, b) }
ENTRY main {
  x = f32[37,301] parameter(0)
  z = f32[] constant(0)
  ninf = f32[] constant(-inf)
  rows = f32[37] reduce(x, z), dimensions={1}, to_apply=add
  cols = f32[301] reduce(x, ninf), dimensions={0}, to_apply=max
  all = f32[] reduce(x, z), dimensions={0,1}, to_apply=add
  ROOT t = (f32[37], f32[301], f32[]) tuple(rows, cols, all)
}
"""

DOT = """HloModule dot
ENTRY main {
  x = f32[33,47] parameter(0)
  y = f32[47,29] parameter(1)
  ROOT d = f32[33,29] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""

CONV = """HloModule conv
ENTRY main {
  x = f32[2,9,9,3] parameter(0)
  k = f32[3,3,3,8] parameter(1)
  ROOT c = f32[2,9,9,8] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}
"""

SOFTMAX = """HloModule softmax
max_f32 { a = f32[] parameter(0)
          b = f32[] parameter(1)
          ROOT m = f32[] maximum(a, b) }
add_f32 { a = f32[] parameter(0)
          b = f32[] parameter(1)
          ROOT s = f32[] add(a, b) }
fused_exp {
  x = f32[67,37] parameter(0)
  m = f32[67] parameter(1)
  mb = f32[67,37] broadcast(m), dimensions={0}
  d = f32[67,37] subtract(x, mb)
  ROOT e = f32[67,37] exponential(d)
}
fused_div {
  e = f32[67,37] parameter(0)
  s = f32[67] parameter(1)
  sb = f32[67,37] broadcast(s), dimensions={0}
  ROOT q = f32[67,37] divide(e, sb)
}
ENTRY main {
  x = f32[67,37] parameter(0)
  ninf = f32[] constant(-inf)
  zero = f32[] constant(0)
  m = f32[67] reduce(x, ninf), dimensions={1}, to_apply=max_f32
  e = f32[67,37] fusion(x, m), kind=kLoop, calls=fused_exp
  s = f32[67] reduce(e, zero), dimensions={1}, to_apply=add_f32
  ROOT q = f32[67,37] fusion(e, s), kind=kLoop, calls=fused_div
}
"""

RNG = """HloModule rng
ENTRY main {
  s = u64[2]{0} parameter(0)
  ROOT r = (u64[2]{0}, u32[13,7]{1,0}) rng-bit-generator(s), algorithm=rng_philox
}
"""

_R = np.random.default_rng(23)
KERNELS = {  # name -> (HLO, inputs, (rtol, atol))
    "elementwise": (ELEMENTWISE, [random_array((517,), np.float32, _R)], (2e-5, 2e-6)),
    "vector_math": (VECTOR_MATH, [random_array((1031,), np.float32, _R)], (2e-5, 2e-6)),
    "f16_bf16": (HALF, [random_array((300,), np.float16, _R, specials=False),
                        random_array((300,), "bfloat16", _R, specials=False)], tolerance(np.float16, True)),
    "reduce": (REDUCE, [random_array((37, 301), np.float32, _R, specials=False)], (1e-5, 1e-4)),
    "dot": (DOT, [random_array((33, 47), np.float32, _R, specials=False),
                  random_array((47, 29), np.float32, _R, specials=False)], (2e-5, 2e-5)),
    "conv": (CONV, [random_array((2, 9, 9, 3), np.float32, _R, specials=False),
                    random_array((3, 3, 3, 8), np.float32, _R, specials=False)], (2e-5, 2e-5)),
    "softmax": (SOFTMAX, [random_array((67, 37), np.float32, _R, specials=False)], (1e-6, 1e-7)),
    "rng": (RNG, [np.array([0x1234_5678_9ABC_DEF0, 7], np.uint64)], (0.0, 0.0)),
}


def _target_or_skip(make):
    try:
        return make()
    except FlagError as e:   # e.g. haswell on a host without AVX2/FMA: its code could not run here
        pytest.skip(str(e))


AVX2_TARGETS = {
    "haswell": lambda: tg.make_target("haswell"),
    "host-avx512f": lambda: tg.make_target("", "-avx512f"),
    "max_isa_AVX2": lambda: CodegenOptions.from_flags(Flags.parse("", "--xla_cpu_max_isa=AVX2", "")).cpu_target,
}


def _asm(module_text: str, options: CodegenOptions) -> str:
    _, ir_text = emit_module(parsed(module_text), options)
    return get_engine(options.opt_level, options.cpu_target).assembly(ir_text)


def _compile_and_check(name: str, options: CodegenOptions, forbidden: re.Pattern) -> None:
    text, args, (rtol, atol) = KERNELS[name]
    # With BLAS (a library, not our code) and with the IR GEMM loops for dot and conv.
    for opts in (options, dataclasses.replace(options, use_blas=False)):
        asm = _asm(text, opts)
        hit = forbidden.search(asm)
        assert hit is None, f"{name} for {options.cpu_target.cpu}: {hit.group(0)!r} in the assembly"
        if name in ("vector_math", "softmax") and forbidden is AVX512_ASM:
            assert "%ymm" in asm   # vectorised at the AVX2 width, not scalar
        check(parsed(text), *args, rtol=rtol, atol=atol, options=opts)


@pytest.mark.parametrize("name", KERNELS)
@pytest.mark.parametrize("which", AVX2_TARGETS)
def test_avx2_target_code_has_no_avx512_and_is_right(which, name):
    target = _target_or_skip(AVX2_TARGETS[which])
    if target is None:   # the host itself is the AVX2 target (no AVX-512 features to remove)
        target = tg.host_target()
    assert target.info.isa == "AVX2" and target.info.fma and not target.info.scalef
    _compile_and_check(name, dataclasses.replace(CHECKED, target=target), AVX512_ASM)


@pytest.mark.parametrize("name", KERNELS)
def test_baseline_x86_64_target_code_has_no_avx_and_is_right(name):
    target = tg.make_target("x86-64")
    assert target.info == tg.TargetInfo(isa="SSE2", fma=False, scalef=False)
    _compile_and_check(name, dataclasses.replace(CHECKED, target=target), AVX_ASM)


def test_the_asm_check_sees_avx512_where_the_target_has_it():
    """The detector is not vacuous: for an AVX-512 target softmax's vectorised exp uses vscalefps (an
    EVEX-only instruction)."""
    if tg.host_target().info.isa != "AVX-512":
        pytest.skip("the host has no AVX-512")
    asm = _asm(SOFTMAX, dataclasses.replace(CHECKED, target=tg.make_target("skylake-avx512")))
    assert AVX512_ASM.search(asm) and "vscalefps" in asm
    host = dataclasses.replace(CHECKED, target=tg.host_target())
    assert "vscalefps" in _asm(SOFTMAX, host)


def test_host_target_is_llvmlites_view_of_the_host():
    import llvmlite.binding as llvm
    host = tg.host_target()
    assert (host.cpu, host.features) == (llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten())
    assert CodegenOptions().cpu_target == tg.default_target() == get_engine().target
    assert host.info.isa in tg.ISA_LEVELS
    has_avx512 = tg.host_features().get("avx512f", False)
    assert (host.info.isa == "AVX-512") == has_avx512 and host.info.scalef == (
        has_avx512 and tg.host_features().get("avx512vl", False))


def test_max_isa_filters_the_host_features_like_xla():
    target = CodegenOptions.from_flags(Flags.parse("", "--xla_cpu_max_isa=avx2", "")).target
    host = tg.host_features()
    if not any(on and (f.startswith("avx512") or f.startswith("amx") or f == "avxvnni") for f, on in host.items()):
        assert target is None  # nothing newer than AVX2 on this host: XLA keeps the host CPU name
        return
    assert target.cpu == "haswell"
    enabled = {f[1:] for f in target.features.split(",") if f.startswith("+")}
    assert not {f for f in enabled if f.startswith(("avx512", "amx"))}
    assert {"avx2", "fma"} <= enabled and enabled <= {f for f, on in host.items() if on}
    # Unknown ISA names are ignored (XLA logs "Unknown CPU ISA" and compiles for the host).
    assert CodegenOptions.from_flags(Flags.parse("", "--xla_cpu_max_isa=AVX9", "")).target is None


@pytest.mark.parametrize("max_isa,isa", [("SSE4_2", "SSE4"), ("AVX", "AVX"), ("AVX2", "AVX2"), ("AVX512", "AVX-512")])
def test_max_isa_caps_the_vector_isa(max_isa, isa):
    """Turning AVX2 off also turns off what implies it (AVX-VNNI, AVX-512): XLA's sorted feature list."""
    target = CodegenOptions.from_flags(Flags.parse("", f"--xla_cpu_max_isa={max_isa}", "")).cpu_target
    host_level = tg.ISA_LEVELS.index(tg.host_target().info.isa)
    assert tg.ISA_LEVELS.index(target.info.isa) == min(host_level, tg.ISA_LEVELS.index(isa))


def test_named_cpu_uses_its_own_features_not_the_hosts():
    eng = JitEngine(3, cpu="haswell")
    assert (eng.cpu, eng.features) == ("haswell", "") and "haswell" in eng.key
    assert eng.key != JitEngine(3, target=tg.host_target()).key


def test_engine_and_options_must_agree_on_the_target():
    opts = dataclasses.replace(CHECKED, target=tg.make_target("x86-64"))
    with pytest.raises(InternalError, match="JIT engine compiles for"):
        compile_module(parsed(DOT), opts, JitEngine(3, target=tg.host_target()))


def test_the_environments_flags_set_the_default_target(monkeypatch):
    """What lets CI run every codegen test as an AVX2 (or SSE2) machine would, on any x86-64 host."""
    from tfxla_cluster.flags import get_flags
    monkeypatch.setenv("TFXLA_CLUSTER_FLAGS", "--tfxla_cpu_target=x86-64")
    get_flags.cache_clear()
    try:
        assert CodegenOptions().cpu_target == tg.CpuTarget("x86-64", "") == get_engine().target
        assert not AVX_ASM.search(_asm(DOT, CodegenOptions(use_blas=False)))
        _, args, _ = KERNELS["dot"]
        (got,) = compile_module(parsed(DOT), CodegenOptions(use_blas=False))(*args)
        np.testing.assert_allclose(got, args[0].astype(np.float64) @ args[1], rtol=2e-5, atol=2e-5)
    finally:
        monkeypatch.undo()
        get_flags.cache_clear()


@pytest.mark.parametrize("own,message", [
    ("--tfxla_cpu_target=nosuchcpu", "'nosuchcpu' is not a recognized processor"),
    ("--tfxla_cpu_target=haswell --tfxla_cpu_target_features=+nosuchfeature",
     "'+nosuchfeature' is not a recognized feature"),
    ("--tfxla_cpu_target_features=avx2", "'avx2' is not +name or -name"),
])
def test_bad_target_flags_are_flag_errors(own, message):
    with pytest.raises(FlagError, match=re.escape(message)) as info:
        CodegenOptions.from_flags(Flags.parse("", "", own))
    assert "\n" not in str(info.value)


def test_engine_with_an_unknown_cpu_is_a_flag_error_not_an_llvm_abort():
    with pytest.raises(FlagError, match="'nosuchcpu' is not a recognized processor"):
        JitEngine(3, cpu="nosuchcpu")


def test_a_target_the_host_cannot_run_is_refused(monkeypatch):
    monkeypatch.setattr(tg, "host_target", lambda: tg.CpuTarget("x86-64", ""))
    with pytest.raises(FlagError, match="this host has only SSE2"):
        tg.make_target("haswell")


def test_target_flags_reach_the_options_and_the_cache_key():
    opts = _target_or_skip(lambda: CodegenOptions.from_flags(Flags.parse("", "", "--tfxla_cpu_target=haswell")))
    assert opts.cpu_target == tg.CpuTarget("haswell", "") and opts.key() != CodegenOptions.from_flags(
        Flags.parse("", "", "")).key()
    assert CodegenOptions.from_flags(Flags.parse("", "", "--tfxla_cpu_target=host")).target is None


@pytest.mark.parametrize("cpu,bf16", [("cooperlake", True), ("znver4", True), ("skylake-avx512", False),
                                      ("znver3", False), ("haswell", False)])
def test_bf16_probe_sees_vcvtneps2bf16(cpu, bf16):
    """The bf16 splat rule (elemental ``_bf16_splat_flushed``) holds only where f32 → bf16 is AVX512_BF16's
    VCVTNEPS2BF16: an AVX-512 CPU without it (Skylake-X) narrows with integer rounding, as AVX2 does."""
    assert tg.target_info(tg.CpuTarget(cpu, "", named=True)).bf16 is bf16
