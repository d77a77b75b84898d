"""Compile profile: where a function's first call spends its time, stage by stage, per cluster.

Stage: instrumentation across all stages. A :class:`CompileProfile` is a list of (stage, cluster,
seconds) records. Code that does a stage's work wraps it in ``with stage("lowering"):`` or calls
``record("llvm-opt", seconds)`` with a time it measured anyway; both go to the profile *active on this
thread* (``with collecting(profile, cluster):``) and cost one thread-local lookup when none is. So the
numbers come from one place, and stages that run on TF's executor threads (a cluster's first launch)
land in the right cluster.

Stage names, in pipeline order (``STAGE_ORDER``):

    trace          TF traces the Python function (get_concrete_function)
    import         GraphDef of the concrete function → our Graph (with CloneConstants)
    grappler       TF's grappler on the function graph
    clustering     MarkForCompilation (or the must-compile check for jit_compile=True)
    encapsulation  clusters → launch nodes
    tf-import      TF imports and prunes the rewritten graph
    lowering       a cluster's TF ops → HLO                                  (per cluster)
    hlo-pass NAME  one HLO pass, e.g. ``hlo-pass cpu/simplification/algsimp``, summed over
                   fixed-point iterations                                    (per cluster)
    buffer-assignment
    llvm-ir        emitting LLVM IR text
    llvm-parse     LLVM parsing and verifying it
    llvm-opt       LLVM's optimisation pipeline
    machine-code   LLVM's instruction selection and object emission
                   (a module split into parts compiled on several threads: the wall time of the parts,
                   shared out among parse, optimisation and machine code by the threads' own times)
    load           loading the object code (also: a persistent-cache hit)
    code-reuse     the LLVM IR equals IR compiled before (a repeated block): its code is reused
    compile-other  the rest of a cluster's compile (HLO text, cache bookkeeping)
    run            the cluster's first run (its launch minus its compile, the native launch's copies of
                   its inputs and outputs included)
    tf-run         TF's runtime on the rewritten function's first run, outside the launches: instantiating
                   it (TF's graph passes, placement, the executor), its ops outside clusters, and handing
                   each first launch to Python (while compiles ahead of their launch go on meanwhile)
    gc             Python's cyclic collector going through what the first call allocated (paused during it,
                   ``_gc``): the collection the next allocation would start, done and timed at its end
    other          the rest of a first call (Python imports in a cold process, argument handling)

Besides times, a profile counts *events* (``note("persistent-cache hit")``): how each compile was answered
— ``persistent-cache hit`` / ``miss`` / ``corrupt`` (an entry ignored with a warning), ``code-reuse``, and
``persistent-cache graph hit`` (a function graph after TF's grappler taken from the persistent cache),
``persistent-cache clustering hit`` (an auto-clustering result taken from it), ``compiled ahead`` (a
cluster's compile that ran before its launch, ``runtime/ahead.py``: its stage times are the part its launch
waited for) —
shown in one line of :meth:`CompileProfile.table` and in ``as_dict()["events"]``.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator, NamedTuple

STAGE_ORDER = ("trace", "import", "grappler", "clustering", "encapsulation", "tf-import", "lowering",
               "hlo-pass", "buffer-assignment", "llvm-ir", "llvm-parse", "llvm-opt", "machine-code", "load",
               "code-reuse", "compile-other", "run", "tf-run", "gc", "other")
HLO_PASS = "hlo-pass"
_ALL = object()


class StageTime(NamedTuple):
    """One stage's time (a tuple of atoms: the cyclic GC untracks it, a profile of thousands costs its
    collections nothing)."""

    stage: str
    cluster: str | None   # None for whole-function stages (trace, import, clustering, ...)
    seconds: float


def _order(stage: str) -> tuple[int, str]:
    group = HLO_PASS if stage.startswith(HLO_PASS + " ") else stage
    return (STAGE_ORDER.index(group) if group in STAGE_ORDER else len(STAGE_ORDER), "")


class CompileProfile:
    """Stage times of one function (all its traced signatures and clusters). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.records: list[StageTime] = []
        self.events: dict[str, int] = {}
        self._by_thread: dict[int, float] = {}   # thread ident -> seconds it recorded (see thread_seconds)

    def add_event(self, event: str, n: int = 1) -> None:
        with self._lock:
            self.events[event] = self.events.get(event, 0) + n

    def add(self, stage_name: str, seconds: float, cluster: str | None = None) -> None:
        ident = threading.get_ident()
        with self._lock:
            self.records.append(StageTime(stage_name, cluster, seconds))
            self._by_thread[ident] = self._by_thread.get(ident, 0.0) + seconds

    def thread_seconds(self) -> float:
        """Seconds this thread has recorded here, whatever the cluster: a launch's own share of the profile
        when other threads record concurrently (and its wait compiled another cluster, runtime.ahead)."""
        with self._lock:
            return self._by_thread.get(threading.get_ident(), 0.0)

    def extend(self, other: "CompileProfile", prefix: str = "") -> None:
        """Add ``other``'s records, their cluster names prefixed (e.g. with the function's name)."""
        with other._lock:
            records = [r if r.cluster is None or not prefix else StageTime(r.stage, prefix + r.cluster, r.seconds)
                       for r in other.records]
        with other._lock:
            events = dict(other.events)
        with self._lock:
            self.records.extend(records)
            for event, n in events.items():
                self.events[event] = self.events.get(event, 0) + n

    def totals(self, cluster: object = _ALL) -> dict[str, float]:
        """Seconds by stage in pipeline order; ``cluster`` given (None: whole-function stages): its only."""
        out: dict[str, float] = {}
        with self._lock:
            for r in self.records:
                if cluster is _ALL or r.cluster == cluster:
                    out[r.stage] = out.get(r.stage, 0.0) + r.seconds
        # Stable sort: passes keep the order they first ran in.
        return dict(sorted(out.items(), key=lambda kv: _order(kv[0])))

    def clusters(self) -> list[str]:
        with self._lock:
            return list(dict.fromkeys(r.cluster for r in self.records if r.cluster is not None))

    @property
    def total(self) -> float:
        with self._lock:
            return sum(r.seconds for r in self.records)

    def as_dict(self) -> dict:
        """JSON-ready: totals by stage, per cluster, and the sum."""
        with self._lock:
            events = dict(self.events)
        return {"total_seconds": self.total, "stages": self.totals(),
                "clusters": {c: self.totals(c) for c in self.clusters()}, "events": events}

    def events_line(self) -> str:
        """How compiles were answered, in one line ("" when nothing was counted)."""
        with self._lock:
            ev = dict(self.events)
        parts = []
        hits, misses, corrupt = (ev.get(f"persistent-cache {k}", 0) for k in ("hit", "miss", "corrupt"))
        if hits or misses or corrupt:
            parts.append(f"persistent cache {hits} hit(s), {misses} miss(es)" +
                         (f", {corrupt} corrupt entr{'y' if corrupt == 1 else 'ies'} ignored" if corrupt else ""))
        if ev.get("persistent-cache graph hit"):
            parts.append(f"{ev['persistent-cache graph hit']} function graph(s) after grappler from the persistent cache")
        if ev.get("persistent-cache clustering hit"):
            parts.append(f"{ev['persistent-cache clustering hit']} clustering(s) from the persistent cache")
        if ev.get("compiled ahead"):
            parts.append(f"{ev['compiled ahead']} cluster(s) compiled ahead of their launch")
        if ev.get("code-reuse"):
            parts.append(f"{ev['code-reuse']} module(s) reused code compiled earlier in the process")
        return "; ".join(parts)

    def table(self, per_cluster: bool = True, top_passes: int = 8) -> str:
        """A text table: total per stage (HLO passes folded into one line plus the slowest ones), then
        one line per cluster."""
        totals = self.totals()
        total = sum(totals.values()) or 1e-12
        passes = {k[len(HLO_PASS) + 1:]: v for k, v in totals.items() if k.startswith(HLO_PASS + " ")}
        lines = [f"compile profile: {sum(totals.values()):.3f} s in {len(self.clusters())} cluster(s)"]
        if self.events_line():
            lines.append(f"  ({self.events_line()})")
        shown_passes = False
        for name, seconds in totals.items():
            if name.startswith(HLO_PASS + " "):
                if shown_passes:
                    continue
                shown_passes = True
                all_passes = sum(passes.values())
                lines.append(f"  {'hlo passes':<46s} {all_passes:8.3f} s {100 * all_passes / total:5.1f}%")
                for pname, ps in sorted(passes.items(), key=lambda kv: -kv[1])[:top_passes]:
                    lines.append(f"    {pname:<44s} {ps:8.3f} s {100 * ps / total:5.1f}%")
                continue
            lines.append(f"  {name:<46s} {seconds:8.3f} s {100 * seconds / total:5.1f}%")
        if per_cluster:
            for c in self.clusters():
                t = self.totals(c)
                hlo = sum(v for k, v in t.items() if k.startswith(HLO_PASS + " "))
                parts = [f"{k} {v:.3f}" for k, v in t.items() if not k.startswith(HLO_PASS + " ")]
                lines.append(f"  {c}: {sum(t.values()):.3f} s (" + ", ".join(parts[:1] + [f"hlo passes {hlo:.3f}"]
                                                                     + parts[1:]) + ")")
        return "\n".join(lines)


_local = threading.local()


def active() -> tuple[CompileProfile, str | None] | None:
    """The (profile, cluster) collecting on this thread, or None."""
    return getattr(_local, "top", None)


@contextlib.contextmanager
def collecting(profile: CompileProfile | None, cluster: str | None = None) -> Iterator[None]:
    """Send this thread's stage times to ``profile`` (under ``cluster``) for the body; nests."""
    if profile is None:
        yield
        return
    saved = getattr(_local, "top", None)
    _local.top = (profile, cluster)
    try:
        yield
    finally:
        _local.top = saved


def record(stage_name: str, seconds: float, cluster: object = _ALL) -> None:
    """Add a time measured elsewhere to the active profile (nothing when none is active), under its
    cluster or the ``cluster`` given."""
    top = getattr(_local, "top", None)
    if top is not None:
        top[0].add(stage_name, seconds, top[1] if cluster is _ALL else cluster)


def note(event: str) -> None:
    """Count ``event`` in the active profile (nothing when none is active)."""
    top = getattr(_local, "top", None)
    if top is not None:
        top[0].add_event(event)


@contextlib.contextmanager
def stage(stage_name: str) -> Iterator[None]:
    """Time the body as ``stage_name`` in the active profile."""
    top = getattr(_local, "top", None)
    if top is None:
        yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        top[0].add(stage_name, time.perf_counter() - t0, top[1])


def seconds_since(mark: int, profile: CompileProfile, cluster: object = _ALL) -> float:
    """Seconds recorded (for ``cluster``, or all) since ``len(profile.records)`` was ``mark``."""
    with profile._lock:
        return sum(r.seconds for r in profile.records[mark:] if cluster is _ALL or r.cluster == cluster)
