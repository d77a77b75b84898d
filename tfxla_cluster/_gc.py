"""Pause Python's cyclic garbage collector around bulk graph work.

Stage: helper (import, clustering). With TensorFlow loaded a process holds ~400k GC-tracked objects,
and a full collection walks all of them (~0.4 s). Importing a 10k-node graph or clustering it allocates
enough objects to trigger one or more full collections, which then cost more than the work itself.
That work builds no garbage cycles worth collecting early, so the collector is paused meanwhile; what it
allocated is collected as usual afterwards. Nested and concurrent pauses are counted: the collector is
re-enabled only when the last one ends, and only if it was enabled when the first began.
"""
from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Run the body with the cyclic collector off (reference counting still frees memory)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
