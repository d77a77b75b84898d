"""Stage: codegen — what the runtime and the compile log know about one emitted kernel (``KernelInfo``).

Its own module, below the program emitter and the executable: the layouts the persistent compile cache
stores (``executable.ExecutableLayout.kernels``) hold these, and unpickling them in a process whose clusters
all come from the cache must not import IR emission (``kernel_builder.py`` and what it imports).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class KernelInfo:
    """What the runtime and the compile log know about one kernel."""

    name: str
    instruction: str
    kind: str
    work_items: int
    tasks: int
    cost: int
