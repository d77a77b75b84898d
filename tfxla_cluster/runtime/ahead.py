"""Compile ahead: a function's clusters compiled on background threads before TF launches them.

Stage: runtime, at a function's first run. Without it each cluster compiles when TF's executor first runs
its launch node (TF's ``_XlaCompile``), one after another, so the GIL-free LLVM stages of one cluster
never overlap the Python stages (lowering, HLO passes, IR emission) of the next. When a rewritten graph
first runs eagerly, :func:`start` plans one :class:`Job` per cluster whose first signature is known from
the graph (every input's dtype and static shape; a variable's declared dtype and shape) and that has no
compile-time-constant inputs (their values are known only at the launch); a few worker threads
(``codegen.engine.compile_threads()``: the idle cores) compile them in the order TF will launch them.
The launch of a cluster then asks :meth:`AheadCompiler.take` for its job: it waits for a running job,
takes a finished one, and takes over a job not started yet (it compiles the cluster itself, as without
this module). ``TFXLA_COMPILE_AHEAD=0`` switches it off (A/B timing); so does dumping (``--xla_dump_to``:
XLA numbers dumped modules in compile order).

Guarantees:

- a job compiles with the launch's own code (``Launcher.compile_signature``) on inputs of the same dtypes
  and shapes, on a thread with TF's kernel threads' FTZ/DAZ state: the same HLO, IR and object code. A
  launch whose signature differs from its job's compiles at the launch, as without this module.
- nothing a job does is observable before its launch takes it: its log records, compile-profile records
  (but those of a job a waiting launch compiled: below) and events and its persistent-cache writes
  (:func:`deferred_while_ahead`) are kept with the job and replayed by the launch that takes it, on the
  launch's thread; the compile cache's rules (lazy compilation, megamorphic clusters, statistics, the
  "Compiled cluster" log) all run at the launch as before. A job nobody takes leaves nothing behind but the CPU time it used.
- a job whose compile raised is dropped and its launch compiles the cluster again: an error surfaces where
  and as it does without this module (auto-clustering's fallback included).
- the profile still sums to the first call's wall time: a taken job's stage times are scaled to the time
  its launch waited for it (a job done before its launch costs the call nothing), as a split module's
  parts are scaled to their wall time; a job a waiting launch compiled itself is that launch's time, its
  stages recorded then under its own cluster (and not again at its launch); the profile counts
  "compiled ahead" events.
- thread-safe: TF may launch several clusters at once on its threads; a launch never waits for a job that
  has not started, and a job never waits for a launch.
"""
from __future__ import annotations

import atexit
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from tfxla_cluster.runtime.ahead_job import DONE, DROPPED, PENDING, RUNNING, Job

if TYPE_CHECKING:
    from tfxla_cluster.runtime.launcher import CompiledCluster, Launcher


def enabled() -> bool:
    """``TFXLA_COMPILE_AHEAD`` (default on): 0/false/no/off compiles every cluster at its launch."""
    from tfxla_cluster.flags import env_switch

    return (env_switch("TFXLA_COMPILE_AHEAD") or "").strip().lower() not in ("0", "false", "no", "off")


class AheadCompiler:
    """The jobs of one rewritten graph and the worker threads compiling them (see the module docstring)."""

    def __init__(self, plan: Callable[[], list[Job]], threads: int) -> None:
        self._lock = threading.Lock()
        self._plan = plan
        self._planned = threading.Event()
        self._queue: list[Job] = []                     # launch order
        self._jobs: dict[str, Job] = {}
        self._threads = max(1, threads)
        self._workers: list[threading.Thread] = []
        self._stopped = False

    def start(self) -> None:
        """The first worker plans the jobs (off the calling thread, which goes on to run the graph), then
        starts the others."""
        self._spawn(self._plan_and_work)
        _LIVE.add(self)

    def _spawn(self, target: Callable[[], None]) -> None:
        with self._lock:
            t = threading.Thread(target=target, name=f"tfxla-ahead-{len(self._workers)}", daemon=True)
            self._workers.append(t)
        t.start()

    def _plan_and_work(self) -> None:
        try:
            jobs = self._plan()
        except Exception:  # noqa: BLE001 - planning is best effort: every cluster then compiles at its launch
            jobs = []
        with self._lock:
            self._queue = list(jobs)
            self._jobs = {job.launcher.sig.name: job for job in jobs}
        self._planned.set()
        for _ in range(min(self._threads, len(jobs)) - 1):
            self._spawn(self._work)
        self._work()

    def _next(self) -> Job | None:
        with self._lock:
            while self._queue and not self._stopped:
                job = self._queue.pop(0)
                if job.state == PENDING:
                    job.state = RUNNING
                    return job
            return None

    def _work(self) -> None:
        while (job := self._next()) is not None:
            self._run(job)

    def _run(self, job: Job) -> None:
        job.run()
        with self._lock:
            if job.state == RUNNING:
                job.state = DONE
        job.done.set()

    def take(self, launcher: "Launcher", signature: Any) -> "CompiledCluster | None":
        """The compiled entry of ``launcher``'s job for ``signature``, waited for, with the job replayed on
        this thread; None when the launch must compile it itself (no job, a job not started — taken
        over —, another signature, a compile that raised)."""
        t0 = time.perf_counter()
        self._planned.wait()
        with self._lock:
            job = self._jobs.pop(launcher.sig.name, None)
            if job is None:
                return None
            if job.state == PENDING or job.signature != signature:
                job.state = DROPPED
                return None
        # Waiting, this thread compiles the next job not started: with the workers, the compiles keep two
        # threads busy (one in LLVM, without the GIL, while the other runs Python stages). That compile is
        # this launch's time: its stages go to the profile now, under its own cluster, and the rest of the
        # wait to this job's.
        helped = 0.0
        while not job.done.is_set():
            other = self._next()
            if other is None:
                job.done.wait()
                break
            self._run(other)
            other.attribute()
            helped += other.seconds
        if job.failed or job.result is None:
            return None
        job.replay(time.perf_counter() - t0 - helped)
        compiled = job.result
        compiled.ahead_wait = time.perf_counter() - t0
        return compiled

    @property
    def jobs(self) -> dict[str, Job]:
        """The jobs no launch has asked for yet, by cluster."""
        self._planned.wait()
        with self._lock:
            return dict(self._jobs)

    def join(self) -> None:
        """Wait until the workers are idle (every job started has finished)."""
        self._planned.wait()
        with self._lock:
            workers = list(self._workers)
        for t in workers:
            if t is not threading.current_thread():
                t.join()

    def stop(self) -> None:
        """Start no more jobs; wait for the running ones (interpreter exit: LLVM must not be mid-compile)."""
        with self._lock:
            self._stopped = True
        self.join()


_LIVE: "weakref.WeakSet[AheadCompiler]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for compiler in list(_LIVE):
        compiler.stop()


def start(graph, clusters: dict[str, list[str]], launchers: dict[str, "Launcher"], flags,
          traced_shape: Callable[[str, int], Any] = lambda name, slot: None) -> AheadCompiler | None:
    """Plan and start the jobs of a rewritten graph's clusters (None when none qualifies, or switched off).
    ``traced_shape(node, slot)``: the static dims TF's tracing gave a tensor, or None (our graph's own shape
    inference imports the whole graph into TF: it would cost a big model's first call a second)."""
    from tfxla_cluster.codegen.engine import compile_threads

    if len(launchers) < 2 or not enabled() or getattr(flags, "xla_dump_to", ""):
        return None   # one cluster: its launch follows at once, nothing to overlap

    def plan_all() -> list[Job]:
        order = launch_order(graph, clusters)
        return [job for name in sorted(launchers, key=lambda c: order.get(c, len(order)))
                if (job := plan(launchers[name], traced_shape)) is not None]
    compiler = AheadCompiler(plan_all, compile_threads())
    for launcher in launchers.values():
        launcher.ahead = compiler   # a launch before the plan is made waits for it
    compiler.start()
    return compiler


def plan(launcher: "Launcher", traced_shape: Callable[[str, int], Any]) -> Job | None:
    """The job of ``launcher``'s first signature as the graph tells it, or None: another backend, a
    compile-time-constant input, a shape or a variable's dtype or shape not known statically."""
    from tensorflow.core.framework import types_pb2

    from tfxla_cluster.errors import TfXlaError
    from tfxla_cluster.runtime.compile_cache import Signature
    from tfxla_cluster.graph.opdefs import ARG_OP, DEVICE_ARG_OP
    from tfxla_cluster.tf2hlo.lower import _declared_resource, _static_dims  # what lowering reads
    from tfxla_cluster.runtime.native import numpy_dtype

    boundary = launcher.sig.boundary
    if launcher.backend != "llvm" or launcher.const_positions is not None or boundary.constants:
        return None
    arrays = []
    try:
        for position, (t, dt) in enumerate(zip(boundary.inputs, launcher.sig.input_dtypes)):
            if dt == types_pb2.DT_RESOURCE:
                dt, dims = launcher.resource_dtype(position), _declared_resource(boundary.graph, t)[1]
            elif boundary.graph.node(t[0]).op in (ARG_OP, DEVICE_ARG_OP):
                dims = _static_dims(boundary.graph, t)
            else:
                dims = _forwarded_shape(boundary.graph, t, traced_shape)
            if dims is None or any(d is None or d < 0 for d in dims):
                return None
            arrays.append(np.broadcast_to(np.zeros((), numpy_dtype(dt)), tuple(dims)))
    except (TfXlaError, TypeError, ValueError):
        return None
    return Job(launcher, arrays, Signature.of(arrays))


# Ops whose output 0 (Switch: both) is their data input 0 (Merge: one of its inputs): the control-flow nodes
# TF's lowering of While/If and grappler's inlining add, which tracing never saw.
_FORWARDING = frozenset({"Identity", "Snapshot", "StopGradient", "Switch", "Exit", "Enter", "NextIteration",
                         "LoopCond", "Merge"})


def _forwarded_shape(graph, t: tuple[str, int], traced_shape: Callable[[str, int], Any], depth: int = 0):
    """The traced dims of ``t``, looking through forwarding ops (a Merge's inputs must agree); None when
    unknown. A wrong guess costs only a job whose signature its launch does not take."""
    dims = traced_shape(*t)
    if dims is not None or depth > 64:
        return dims
    node = graph.node(t[0])
    if node.op not in _FORWARDING or (node.op != "Switch" and t[1] != 0):
        return None
    inputs = node.data_inputs()
    found = set()
    for e in (inputs if node.op == "Merge" else inputs[:1]):
        if node.op == "Merge" and e.src.op == "NextIteration":
            continue   # the loop's back edge: the value the loop started with decides
        found.add(_forwarded_shape(graph, (e.src.name, e.src_output), traced_shape, depth + 1))
    return found.pop() if len(found) == 1 else None


def launch_order(graph, clusters: dict[str, list[str]]) -> dict[str, int]:
    """Cluster -> its rank in the order TF's executor will likely launch it: by depth in the graph with each
    cluster one node (a launch runs when its inputs are ready; loops' back edges left out), then by first
    member in topological order."""
    unit = {m: c for c, members in clusters.items() for m in members}
    first: dict[str, int] = {}
    for k, node in enumerate(graph.topological_order()):
        first.setdefault(unit.get(node.name, node.name), k)
    succ: dict[str, set[str]] = {u: set() for u in first}
    for e in graph.edges():
        if not (e.src.is_op and e.dst.is_op) or e.src.op == "NextIteration":
            continue
        a, b = unit.get(e.src.name, e.src.name), unit.get(e.dst.name, e.dst.name)
        if a != b and a in succ and b in succ:
            succ[a].add(b)
    pending = {u: 0 for u in succ}
    for u in succ:
        for v in succ[u]:
            pending[v] += 1
    depth = {u: 0 for u in succ}
    ready = [u for u, n in pending.items() if n == 0]
    while ready:
        u = ready.pop()
        for v in succ[u]:
            depth[v] = max(depth[v], depth[u] + 1)
            pending[v] -= 1
            if pending[v] == 0:
                ready.append(v)
    ranked = sorted(clusters, key=lambda c: (depth.get(c, len(depth)), first.get(c, 0)))
    return {c: k for k, c in enumerate(ranked)}


