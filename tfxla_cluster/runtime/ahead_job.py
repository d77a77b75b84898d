"""A compile done ahead of its launch (:mod:`.ahead`), and everything it keeps back until the launch takes it.

Stage: runtime. A :class:`Job` runs a launcher's compile on a background thread with its log records,
compile-profile records and events, and side effects visible outside the process (persistent-cache writes,
marked :func:`deferred_while_ahead`) kept with it; :meth:`Job.replay` plays them on the launch's thread.
This module imports no other runtime module: the compile cache marks its writes with it.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from tfxla_cluster import compile_profile
from tfxla_cluster._gc import gc_paused

if TYPE_CHECKING:
    from tfxla_cluster.runtime.launcher import CompiledCluster, Launcher

PENDING, RUNNING, DONE, DROPPED = "pending", "running", "done", "dropped"


@dataclass(eq=False)
class Job:
    """One cluster's compile for one signature, ahead of its launch, and what it left to replay."""

    launcher: "Launcher"
    arrays: list[np.ndarray]          # zero-stride stand-ins with the launch's dtypes and shapes
    signature: Any                    # compile_cache.Signature of ``arrays``
    state: str = PENDING
    done: threading.Event = field(default_factory=threading.Event)
    result: "CompiledCluster | None" = None
    failed: bool = False
    seconds: float = 0.0              # the compile's wall time
    attributed: bool = False          # its stage times are in a profile already (attribute)
    profile: compile_profile.CompileProfile = field(default_factory=compile_profile.CompileProfile)
    logs: list[logging.LogRecord] = field(default_factory=list)
    deferred: list[Callable[[], Any]] = field(default_factory=list)

    def run(self) -> None:
        """Compile (on this thread), keeping everything observable for :meth:`replay`."""
        from tfxla_cluster.mxcsr import flushed_denormals

        _capture_logs()
        saved = getattr(_local, "job", None)
        _local.job = self
        t0 = time.perf_counter()
        try:
            # TF's kernel threads, where launches compile, run with FTZ/DAZ set (mxcsr.py).
            with compile_profile.collecting(self.profile, self.launcher.sig.name), gc_paused(), flushed_denormals():
                self.result = self.launcher.compile_signature(self.arrays, self.signature)
        except BaseException:  # noqa: BLE001 - the launch compiles again and raises it there
            self.failed = True
        finally:
            self.seconds = time.perf_counter() - t0
            _local.job = saved

    def attribute(self) -> None:
        """On a launch's thread that compiled this job while it waited for its own: the job's stage times go
        to that launch's profile now, in full and under this job's cluster (they were on its critical path);
        :meth:`replay` then leaves them out."""
        self.attributed = True
        for r in self.profile.records:
            compile_profile.record(r.stage, r.seconds, r.cluster)

    def replay(self, waited: float) -> None:
        """On the launch's thread: the job's log records, persistent-cache writes, and its profile scaled
        to the ``waited`` seconds the launch spent on it."""
        for record in self.logs:
            logger = logging.getLogger(record.name)
            if logger.isEnabledFor(record.levelno):
                record.thread, record.threadName = threading.get_ident(), threading.current_thread().name
                logger.handle(record)
        for write in self.deferred:
            write()
        if not self.attributed:
            scale = min(1.0, max(0.0, waited) / self.seconds) if self.seconds > 0 else 0.0
            for r in self.profile.records:
                compile_profile.record(r.stage, r.seconds * scale)
        for event, n in self.profile.events.items():
            for _ in range(n):
                compile_profile.note(event)
        compile_profile.note("compiled ahead")


# ------------------------------------------------------------------ what a job keeps back until its launch
_local = threading.local()


def running_job() -> Job | None:
    """The job compiling on this thread, if any."""
    return getattr(_local, "job", None)


def deferred_while_ahead(fn: Callable[..., None]) -> Callable[..., None]:
    """Decorate a method with side effects visible outside the process (a persistent-cache write): inside
    a job it runs when the job's launch takes it, never if nobody does."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        job = running_job()
        if job is not None:
            job.deferred.append(functools.partial(fn, *args, **kwargs))
            return None
        return fn(*args, **kwargs)
    return wrapper


class _KeepJobLogs(logging.Filter):
    """Records logged inside a job wait for its launch (:meth:`Job.replay`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        job = running_job()
        if job is None:
            return True
        job.logs.append(record)
        return False


_KEEP_LOGS = _KeepJobLogs()


def _capture_logs() -> None:
    """Put the filter on every logger of the package (a logger filters only what is logged on it)."""
    names = ["tfxla_cluster", *(n for n in list(logging.Logger.manager.loggerDict) if n.startswith("tfxla_cluster."))]
    for name in names:
        logger = logging.getLogger(name)
        if _KEEP_LOGS not in logger.filters:
            logger.addFilter(_KEEP_LOGS)
