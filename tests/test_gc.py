"""tfxla_cluster._gc.gc_paused: the collector is off inside (also when entered from several threads at once) and
back to its previous state after the last one leaves."""
from __future__ import annotations

import gc
import threading

from tests.codegen.cg_helpers import run_threads
from tfxla_cluster._gc import collect_before_resume, gc_paused


def test_nested_and_concurrent_pauses_restore_the_collector():
    assert gc.isenabled()
    inside = []
    barrier = threading.Barrier(3)

    def work(k: int) -> None:
        with gc_paused():
            barrier.wait()
            inside.append(gc.isenabled())
            with gc_paused():
                inside.append(gc.isenabled())
            barrier.wait()

    run_threads(work, 3)
    assert inside == [False] * 6 and gc.isenabled()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_last_pause_collects_before_it_resumes_and_a_nested_one_does_not():
    class Cycle:
        def __init__(self) -> None:
            self.me = self

    with gc_paused():
        Cycle()
        with gc_paused():
            assert collect_before_resume() == 0.0   # not the last pause: the collector stays off
        assert gc.get_count()[0] > 0
        assert collect_before_resume() > 0.0
        assert gc.get_count()[0] < 5 and not gc.isenabled()
    assert gc.isenabled()
