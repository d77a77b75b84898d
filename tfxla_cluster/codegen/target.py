"""Stage: codegen configuration — which x86-64 CPU the generated machine code is for.

A :class:`CpuTarget` is an LLVM CPU name plus an LLVM feature string (``+avx2,-avx512f,...``). The JIT
engine builds its target machine from exactly these two, and the IR emitters ask the target — never the
host — what it can do (:meth:`CpuTarget.info`). How the target is chosen (:func:`resolve_target`):

1. ``--tfxla_cpu_target=NAME`` (``TFXLA_CLUSTER_FLAGS``): LLVM's CPU ``NAME`` (``haswell``,
   ``skylake-avx512``, ``x86-64``, ...) with that CPU's own features; ``host`` means the host.
2. ``--tfxla_cpu_target_features=+f,-g``: LLVM feature changes applied after the CPU's features (to the
   host's when no CPU is named). ``-avx512f`` also turns off every feature that needs AVX-512F (LLVM
   clears implied features).
3. ``--xla_cpu_max_isa=AVX2`` (``XLA_FLAGS``), as XLA:CPU does it (``DetectMachineAttributes``): host
   features newer than the ISA are turned off, and if that removed any, the CPU name becomes the oldest
   CPU with that ISA (``haswell`` for AVX2). Ignored when ``--tfxla_cpu_target`` names a CPU. An unknown
   ISA name is logged and ignored, like XLA does.
4. Otherwise the host: ``llvm.get_host_cpu_name()`` and ``llvm.get_host_cpu_features()``.

``CodegenOptions.target`` of None and ``get_engine()`` without a target mean :func:`default_target`: the
target the process's flags (environment) ask for, else the host.

Guarantees:
- what a target provides is read back from LLVM (:func:`target_info` compiles a small probe module and
  looks at the instructions it gets), so named CPUs need no feature table of ours;
- an unknown CPU or feature name is a :class:`~tfxla_cluster.errors.FlagError` (LLVM itself only warns,
  or aborts the process for an unknown CPU, so named targets are probed in a child process first);
- a target whose vector ISA the host cannot run (AVX-512 code on an AVX2 host) is a ``FlagError``:
  its code would die with SIGILL.
"""
from __future__ import annotations

import functools
import logging
import re
import subprocess
import sys
import threading
from dataclasses import dataclass, field

from tfxla_cluster.errors import FlagError

log = logging.getLogger("tfxla_cluster.codegen")

# Vector ISA levels, oldest first (what hostinfo and the bench print).
ISA_LEVELS = ("SSE2", "SSE4", "AVX", "AVX2", "AVX-512")

# XLA's CpuFeatureFromString (x86 part): --xla_cpu_max_isa value -> oldest CPU with that ISA
# (CpuTargetFromMaxFeature).
_MAX_ISA_CPU = {"SSE4_2": "nehalem", "AVX": "sandybridge", "AVX2": "haswell", "AVX512": "skylake-avx512",
                "AVX512_VNNI": "cascadelake", "AVX512_BF16": "cooperlake", "AMX": "sapphirerapids",
                "AMX_FP16": "graniterapids", "AMX_FP8": "diamondrapids"}
_MAX_ISA_ORDER = tuple(_MAX_ISA_CPU)
_APX_AND_NEWER = {"amx-fp8", "amx-tf32", "amx-avx512", "amx-movrs", "egpr", "ndd", "ccmp", "nf", "zu", "ppx",
                  "push2pop2", "movrs", "jmpabs"}


def _newer_than(feature: str, max_isa: str) -> bool:
    """XLA's ShouldEnableX86CpuFeature, negated: ``feature`` arrived after ``max_isa``."""
    rank = _MAX_ISA_ORDER.index(max_isa)
    tests = [
        lambda f: f.startswith("avx") or f in ("f16c", "vpclmulqdq", "vaes"),   # after SSE4_2
        lambda f: f.startswith("avx2") or f.startswith("fma"),                   # after AVX
        lambda f: f.startswith("avx512") or f == "evex512",                      # after AVX2
        lambda f: f == "avx512vnni",                                             # after AVX512
        lambda f: f == "avx512bf16",                                             # after AVX512_VNNI
        lambda f: f.startswith("amx"),                                           # after AVX512_BF16
        lambda f: f == "amx-fp16",                                               # after AMX
        lambda f: f in _APX_AND_NEWER or f.startswith("avx10.2"),                # after AMX_FP16
    ]
    return any(test(feature) for test in tests[rank:])


@dataclass(frozen=True)
class TargetInfo:
    """What LLVM generates for a target, read from the probe's assembly."""

    isa: str          # one of ISA_LEVELS: the widest vectors the target has
    fma: bool         # fused multiply-add instructions
    scalef: bool      # a vector llvm.ldexp is one instruction (AVX-512's vscalefps), not a libm call
    fp16: bool = False  # native half arithmetic (AVX512-FP16): f16 ops are not promoted to f32 one by one
    bf16: bool = False  # f32 → bf16 in one instruction (AVX512_BF16's VCVTNEPS2BF16, which flushes denormals)


@dataclass(frozen=True)
class CpuTarget:
    """An LLVM CPU name and feature string; equal targets generate identical code."""

    cpu: str
    features: str = ""
    # Chosen by the user, not derived from the host: probed in a child process first.
    named: bool = field(default=False, compare=False)

    @property
    def description(self) -> str:
        """``haswell (AVX2, FMA)``: the CPU name and what LLVM generates for it."""
        return f"{self.cpu} ({self.info.isa}{', FMA' if self.info.fma else ''})"

    @property
    def info(self) -> TargetInfo:
        return target_info(self)


_llvm_lock = threading.Lock()
_init_lock = threading.Lock()
_initialized = False


def initialize_llvm() -> None:
    """Current llvmlite needs only the native target and asm printer (no ``llvm.initialize()``). Lives
    here, below the engine, because asking LLVM about the host needs it as much as compiling does."""
    global _initialized
    import llvmlite.binding as llvm

    with _init_lock:
        if not _initialized:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _initialized = True


def _llvm():
    import llvmlite.binding as llvm

    initialize_llvm()
    return llvm


@functools.lru_cache(maxsize=1)
def host_target() -> CpuTarget:
    """The host as llvmlite reports it (what the engine compiles for by default)."""
    llvm = _llvm()
    return CpuTarget(llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten())


def host_features() -> dict[str, bool]:
    """LLVM's host feature names → enabled (``avx512f``, ``avx2``, ``fma``, ``amx-tile``, ...)."""
    return dict(_llvm().get_host_cpu_features())


def max_isa_target(max_isa: str) -> CpuTarget:
    """XLA's ``--xla_cpu_max_isa``: host features newer than ``max_isa`` off; if any were on, the CPU is the
    oldest with that ISA. Empty or unknown (logged, like XLA) → the host."""
    if not max_isa:
        return host_target()
    isa = max_isa.upper()
    if isa not in _MAX_ISA_CPU:
        log.warning("Unknown CPU ISA: %s", max_isa)   # XLA's own message; it then compiles for the host
        return host_target()
    host = host_target()
    features, filtered = [], 0
    for name, enabled in host_features().items():
        keep = enabled and not _newer_than(name, isa)
        filtered += keep != enabled
        features.append(("+" if keep else "-") + name)
    if not filtered:
        return host
    # Sorted as strings, as XLA does: every "-f" comes after every "+g", so turning a feature off also turns
    # off what implies it (-avx2 after +avxvnni leaves no AVX2).
    return CpuTarget(_MAX_ISA_CPU[isa], ",".join(sorted(features)))


_FEATURE_RE = re.compile(r"^[+-][a-z0-9][a-z0-9.\-_]*$")


def make_target(cpu: str = "", features: str = "", max_isa: str = "") -> CpuTarget | None:
    """The target the flags ask for, or None for the host (see the module docstring for the order).

    Raises ``FlagError`` for a malformed feature string, an unknown CPU or feature, or a target the host
    cannot run."""
    cpu, features = cpu.strip(), features.replace(" ", "").strip(",")
    for f in filter(None, features.split(",")):
        if not _FEATURE_RE.match(f):
            raise FlagError(f"--tfxla_cpu_target_features: {f!r} is not +name or -name "
                            f"(example: +avx2,+fma,-avx512f)")
    if cpu in ("", "host") and not features:
        base = max_isa_target(max_isa)
        return None if base == host_target() else base
    if cpu in ("", "host"):
        base = max_isa_target(max_isa)
        target = CpuTarget(base.cpu, f"{base.features},{features}" if base.features else features, named=True)
    else:
        target = CpuTarget(cpu, features, named=True)
    check_runnable(target)
    return target


def check_runnable(target: CpuTarget) -> None:
    """``FlagError`` if the host cannot run code for ``target``: its vector ISA is newer than the host's, or
    it uses FMA the host lacks. Finer features (VNNI on a plain AVX-512 host, ...) are the user's to get
    right."""
    have, want = host_target().info, target.info
    if ISA_LEVELS.index(want.isa) > ISA_LEVELS.index(have.isa) or (want.fma and not have.fma):
        raise FlagError(f"cannot compile for CPU target {target.cpu!r}: it uses {want.isa}"
                        f"{' and FMA' if want.fma else ''}, this host has only {have.isa}"
                        f"{' and FMA' if have.fma else ''} (the code would stop with an illegal instruction)")


# ---------------------------------------------------------------------------------------------------------
# Reading a target's capabilities back from LLVM
# ---------------------------------------------------------------------------------------------------------

# One function per question; the attributes let LLVM use 512-bit registers where the target has them.
_PROBE_IR = r"""
define void @probe_f512(ptr %p) #0 {
  %a = load <16 x float>, ptr %p
  %b = fadd <16 x float> %a, %a
  store <16 x float> %b, ptr %p
  ret void
}
define void @probe_i256(ptr %p) #0 {
  %a = load <8 x i32>, ptr %p
  %b = mul <8 x i32> %a, %a
  store <8 x i32> %b, ptr %p
  ret void
}
define void @probe_f256(ptr %p) #0 {
  %a = load <8 x float>, ptr %p
  %b = fadd <8 x float> %a, %a
  store <8 x float> %b, ptr %p
  ret void
}
define void @probe_sse4(ptr %p) #0 {
  %a = load <4 x float>, ptr %p
  %b = call <4 x float> @llvm.floor.v4f32(<4 x float> %a)
  store <4 x float> %b, ptr %p
  ret void
}
define void @probe_fma(ptr %p) #0 {
  %a = load <4 x float>, ptr %p
  %b = call <4 x float> @llvm.fma.v4f32(<4 x float> %a, <4 x float> %a, <4 x float> %a)
  store <4 x float> %b, ptr %p
  ret void
}
define void @probe_ldexp(ptr %p, ptr %q) #0 {
  %a = load <8 x float>, ptr %p
  %n = load <8 x i32>, ptr %q
  %b = call <8 x float> @llvm.ldexp.v8f32.v8i32(<8 x float> %a, <8 x i32> %n)
  store <8 x float> %b, ptr %p
  ret void
}
define void @probe_fp16(ptr %p) #0 {
  %a = load <8 x half>, ptr %p
  %b = fadd <8 x half> %a, %a
  store <8 x half> %b, ptr %p
  ret void
}
define void @probe_bf16(ptr %p, ptr %q) #0 {
  %a = load <8 x float>, ptr %p
  %b = fptrunc <8 x float> %a to <8 x bfloat>
  store <8 x bfloat> %b, ptr %q
  ret void
}
declare <4 x float> @llvm.floor.v4f32(<4 x float>)
declare <4 x float> @llvm.fma.v4f32(<4 x float>, <4 x float>, <4 x float>)
declare <8 x float> @llvm.ldexp.v8f32.v8i32(<8 x float>, <8 x i32>)
attributes #0 = { "min-legal-vector-width"="512" "prefer-vector-width"="512" }
"""

# Run in a child for user-named targets: LLVM aborts the process on some bad CPU names.
_CHILD = r"""
import sys
import llvmlite.binding as llvm
llvm.initialize_native_target(); llvm.initialize_native_asmprinter()
tm = llvm.Target.from_triple(llvm.get_default_triple()).create_target_machine(
    cpu=sys.argv[1], features=sys.argv[2], opt=2, jit=True)
sys.stdout.write(tm.emit_assembly(llvm.parse_assembly(sys.stdin.read())))
"""


def _function_bodies(asm: str) -> dict[str, str]:
    bodies, name, lines = {}, None, []
    for line in asm.splitlines():
        m = re.match(r"^(probe_\w+):", line)
        if m:
            name, lines = m.group(1), []
        elif name and line.startswith(".Lfunc_end"):
            bodies[name] = "\n".join(lines)
            name = None
        elif name:
            lines.append(line.split("#")[0])   # comments name registers the code does not use
    return bodies


def _info_from_asm(asm: str) -> TargetInfo:
    f = _function_bodies(asm)
    if "zmm" in f["probe_f512"]:
        isa = "AVX-512"
    elif "ymm" in f["probe_i256"]:
        isa = "AVX2"
    elif "ymm" in f["probe_f256"]:
        isa = "AVX"
    elif "roundps" in f["probe_sse4"]:
        isa = "SSE4"
    else:
        isa = "SSE2"
    return TargetInfo(isa=isa, fma="vfmadd" in f["probe_fma"], scalef="vscalef" in f["probe_ldexp"],
                      fp16="vaddph" in f["probe_fp16"], bf16="vcvtneps2bf16" in f["probe_bf16"])


@functools.lru_cache(maxsize=None)
def target_info(target: CpuTarget) -> TargetInfo:
    """The target's vector ISA, FMA, scalef, FP16 and BF16, as LLVM compiles the probe for it."""
    if not target.named:
        llvm = _llvm()
        with _llvm_lock:
            tm = llvm.Target.from_triple(llvm.get_default_triple()).create_target_machine(
                cpu=target.cpu, features=target.features, opt=2, jit=True)
            return _info_from_asm(tm.emit_assembly(llvm.parse_assembly(_PROBE_IR)))
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, target.cpu, target.features], input=_PROBE_IR,
                              capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise FlagError(f"probing CPU target {target.cpu!r} with LLVM timed out") from None
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    # LLVM's own words: the unknown names first (an unknown CPU then also aborts with "LLVM ERROR").
    unknown = sorted({re.sub(r" \(ignoring \w+\)$", "", line) for line in lines if "not a recognized" in line})
    if proc.returncode != 0 or unknown:
        detail = "; ".join(unknown) or next((line for line in lines if "LLVM ERROR" in line),
                                            lines[-1] if lines else f"exit {proc.returncode}")
        raise FlagError(f"LLVM cannot compile for CPU target {target.cpu!r}"
                        f"{' with features ' + target.features if target.features else ''}: {detail}")
    return _info_from_asm(proc.stdout)


_default_memo: tuple[object, CpuTarget] | None = None


def default_target() -> CpuTarget:
    """The process's target: what the environment's flags (``get_flags()``) ask for, else the host. What
    ``CodegenOptions()`` and ``get_engine()`` compile for, so running the tests with
    ``TFXLA_CLUSTER_FLAGS=--tfxla_cpu_target=haswell`` runs every kernel as an AVX2 machine would."""
    global _default_memo
    from tfxla_cluster.flags import get_flags

    flags = get_flags()
    memo = _default_memo
    if memo is None or memo[0] is not flags:
        memo = _default_memo = (flags, resolve_target(flags) or host_target())
    return memo[1]


def resolve_target(flags) -> CpuTarget | None:
    """The target ``flags`` ask for (``--tfxla_cpu_target``, ``--tfxla_cpu_target_features``,
    ``--xla_cpu_max_isa``); None means the host."""
    return make_target(str(flags.tfxla_cpu_target), str(flags.tfxla_cpu_target_features),
                       str(flags.xla_cpu_max_isa))
