"""What TF's Eigen kernels learn about the CPU they run on: the intra-op thread count and the cache sizes.

Stage: base (no TF, no llvmlite). Eigen's contractions (which TF's XLA runs f64 dots on) choose their depth
blocks from the data-cache sizes CPUID reports (``manage_caching_sizes``) and their sharding from the
threads of TF's intra-op pool, so code that reproduces Eigen's summation order depends on both, and so
does every cache entry holding such code (:func:`key`). Read from Linux's sysfs, which reports the same
sizes CPUID does; elsewhere the sizes of the machine the order was first measured on (AMD EPYC, Zen 4).
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

# (L1 data per core, L2 per core, L3) in bytes where sysfs says nothing.
_FALLBACK = (32 << 10, 1 << 20, 32 << 20)


@lru_cache(maxsize=1)
def eigen_threads() -> int:
    """The threads of TF's intra-op pool: one per schedulable core (tsl's ``port::MaxParallelism``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _size(text: str) -> int | None:
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text.rstrip("KMG")
    return int(digits) * scale if digits.isdigit() else None


@lru_cache(maxsize=1)
def cache_sizes() -> tuple[int, int, int]:
    """(L1 data, L2, L3) cache sizes in bytes of the first CPU, as Eigen's CPUID query finds them."""
    found: dict[int, int] = {}
    try:
        for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
            kind = (index / "type").read_text().strip()
            if kind == "Instruction":
                continue
            level, size = int((index / "level").read_text()), _size((index / "size").read_text())
            if size and level in (1, 2, 3):
                found.setdefault(level, size)
    except (OSError, ValueError):
        found = {}
    return tuple(found.get(level, _FALLBACK[level - 1]) for level in (1, 2, 3))  # type: ignore[return-value]


def key() -> str:
    """What generated code that follows Eigen's order depends on, for cache keys."""
    return f"eigen_threads={eigen_threads()} caches={','.join(map(str, cache_sizes()))}"
