"""Pause Python's cyclic garbage collector around bulk graph work.

Stage: helper (import, clustering, a cluster's compile). With TensorFlow loaded a process holds ~400k
GC-tracked objects (a Keras model, more), and a full collection walks all of them (~0.4-0.7 s). Importing
or clustering a 10k-node graph, or compiling a cluster, allocates enough objects to trigger one or more
full collections, which then cost more than the work itself. That work builds few garbage cycles (the
HLO instructions passes drop), so the collector is paused meanwhile and collects them as usual
afterwards. A function's first call holds one pause from its trace to its last cluster's compile
(runtime.function): paused only stage by stage, the collections between stages promoted the live work to
the oldest generation and so set off a full collection in most mid-size first calls. What a compiled
function keeps alive is kept small for the same reason (no HloModules, no marked Graph: runtime.launcher,
jit.mark_for_compilation): a full collection comes once the objects promoted since the last one exceed a
quarter of the heap. (Freezing the old objects instead, ``gc.freeze``, was measured: the collections of the
body's own objects then come so often that clustering 100k nodes got 60% slower. Freezing after a first
call would leak: it moves the process's every object, the user's and TF's included, to a generation that is
never collected, so any of them in a cycle that dies later stays.) Nested and concurrent pauses are
counted: the collector is re-enabled only when the last one ends, and only if it was enabled when the
first began. :func:`collect_before_resume` lets the last one do the collection its end sets off (the next
allocation would) at a point of its choosing, so a first call times it (compile profile: ``gc``).
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


def collect_before_resume() -> float:
    """Inside a pause: if it is the only one and the collector resumes when it ends, collect the youngest
    generation now — everything allocated during the pause, which the first allocation after it would
    collect anyway. Returns the seconds it took (0.0 when nothing was collected)."""
    import time

    with _lock:
        if _depth != 1 or not _was_enabled:
            return 0.0
    t0 = time.perf_counter()
    gc.collect(0)
    return time.perf_counter() - t0
