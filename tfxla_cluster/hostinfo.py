"""The host as reports describe it: CPU model, vector ISA, and TensorFlow's oneDNN mode.

Stage: reporting (``bench``, ``info``, ``explain``). Nothing here imports TensorFlow.

TensorFlow 2.21 decides once per process whether its oneDNN ops and graph rewrites are on
(``IsMklEnabled`` in ``tensorflow/core/util/port.cc``; the remapper makes ``_FusedMatMul``,
``_FusedConv2D``, ... only then):

- ``TF_ENABLE_ONEDNN_OPTS`` read as a bool (``0``/``1``/``false``/``true``, any case) wins;
- unset or unreadable (TF logs a warning), the default policy: on Linux x86-64, on iff the CPU has
  AVX512_VNNI, AVX512_BF16, AVX_VNNI, AMX_TILE, AMX_INT8 or AMX_BF16 (Cascade Lake and newer; plain
  AVX-512 such as Skylake-X is *not* enough). Elsewhere off.

:func:`onednn_enabled` asks TensorFlow itself when it is already imported (its answer is fixed at the
first call, whatever the environment says later), and otherwise predicts TF's answer by that rule.
CPU features are LLVM's view of the host (llvmlite), the same the code generator compiles for.
"""
from __future__ import annotations

import os
import platform
import sys

from tfxla_cluster.flags import env_switch

__all__ = ["cpu_model", "vector_isa", "onednn_env", "onednn_default", "onednn_enabled", "onednn_mode",
           "host_summary", "host_dict", "ONEDNN_ENV", "ONEDNN_DEFAULT_FEATURES"]

ONEDNN_ENV = "TF_ENABLE_ONEDNN_OPTS"
# TF's CPUFeature name -> LLVM's feature name, in the order TF tests them.
ONEDNN_DEFAULT_FEATURES = {"AVX512_VNNI": "avx512vnni", "AVX512_BF16": "avx512bf16", "AVX_VNNI": "avxvnni",
                           "AMX_TILE": "amx-tile", "AMX_INT8": "amx-int8", "AMX_BF16": "amx-bf16"}


def cpu_model() -> str:
    """``model name`` from /proc/cpuinfo, else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _host_features() -> dict[str, bool]:
    from tfxla_cluster.codegen.target import host_features
    return host_features()


def vector_isa(features: dict[str, bool] | None = None) -> str:
    """The widest x86 vector ISA of the host: ``AVX-512``, ``AVX2``, ``AVX``, ``SSE4`` or ``SSE2``
    (``features``: LLVM feature names; default the host's)."""
    f = _host_features() if features is None else features
    for name, isa in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sse4.1", "SSE4"),
                      ("sse2", "SSE2")):
        if f.get(name):
            return isa
    return platform.machine() or "unknown"


def onednn_env(environ=None) -> bool | None:
    """``TF_ENABLE_ONEDNN_OPTS`` as TF's ``ReadBoolFromEnvVar`` reads it; None when unset or unreadable
    (then TF uses its default)."""
    value = env_switch(ONEDNN_ENV, environ)
    if value is None:
        return None
    return {"0": False, "false": False, "1": True, "true": True}.get(value.lower())


def _is_x86_64_linux() -> bool:
    return sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")


def onednn_default(features: dict[str, bool] | None = None) -> bool:
    """TF's default policy on this host (``DefaultOneDnnPolicy``): Linux x86-64 with one of the neural
    network features."""
    if not _is_x86_64_linux():
        return False
    f = _host_features() if features is None else features
    return any(f.get(llvm_name) for llvm_name in ONEDNN_DEFAULT_FEATURES.values())


def _tf_answer() -> bool | None:
    """TensorFlow's own ``IsMklEnabled()`` if TF is already imported in this process."""
    from tfxla_cluster.tf_compat import mkl_enabled

    return mkl_enabled()


def onednn_enabled(environ=None) -> bool:
    """Whether TF's oneDNN mode is on in this process (or, with ``environ``, in a process started with
    that environment on this host)."""
    if environ is None:
        answer = _tf_answer()
        if answer is not None:
            return answer
    env = onednn_env(environ)
    return onednn_default() if env is None else env


def onednn_mode(environ=None) -> str:
    """One phrase: the mode and why, e.g. ``on (TF's default on this CPU: it has AVX512_VNNI)``."""
    on = onednn_enabled(environ)
    value = env_switch(ONEDNN_ENV, environ)
    env = onednn_env(environ)
    if env is not None and env == on:
        return f"{'on' if on else 'off'} ({ONEDNN_ENV}={value})"
    if environ is None and _tf_answer() is not None and env is not None:
        return f"{'on' if on else 'off'} (TensorFlow read {ONEDNN_ENV} before it was set to {value})"
    f = _host_features()
    have = [tf_name for tf_name, llvm_name in ONEDNN_DEFAULT_FEATURES.items() if f.get(llvm_name)]
    if on:
        reason = f"it has {', '.join(have[:2])}{', ...' if len(have) > 2 else ''}" if have else "its platform default"
    elif _is_x86_64_linux():
        reason = "it has none of " + ", ".join(ONEDNN_DEFAULT_FEATURES)
    else:
        reason = "not Linux x86-64"
    unreadable = f"; {ONEDNN_ENV}={value!r} is not 0/1/true/false" if value is not None else ""
    return f"{'on' if on else 'off'} (TF's default on this CPU: {reason}{unreadable})"


def _codegen_target():
    """(target, "") — or (None, the flag error) when the target flags are bad: a report still prints."""
    from tfxla_cluster.codegen.target import default_target
    from tfxla_cluster.errors import FlagError
    try:
        return default_target(), ""
    except FlagError as e:
        return None, str(e)


def host_dict() -> dict:
    """The facts of :func:`host_summary` as JSON-ready values."""
    from tfxla_cluster.codegen.target import host_target
    host, (target, error) = host_target(), _codegen_target()
    return {"cpu_model": cpu_model(), "llvm_cpu": host.cpu, "cores": os.cpu_count(), "vector_isa": vector_isa(),
            "tf_onednn": onednn_enabled(), "tf_onednn_mode": onednn_mode(),
            "codegen_target": target.cpu if target else error, "codegen_isa": target.info.isa if target else ""}


def host_summary() -> str:
    """One line: CPU model (LLVM's name), cores, vector ISA, TF's oneDNN mode, and the code generation
    target when it is not the host."""
    from tfxla_cluster.codegen.target import host_target
    d = host_dict()
    text = (f"{d['cpu_model']} (LLVM: {d['llvm_cpu']}), {d['cores']} cores, {d['vector_isa']}; "
            f"TF oneDNN {d['tf_onednn_mode']}")
    target, error = _codegen_target()
    if error:
        text += f"; code generation target: {error}"
    elif target != host_target():
        text += f"; code generated for {target.description}"
    return text


if __name__ == "__main__":
    print(host_summary())
