"""What a report holds: functions, their clusters, what each cluster cost, and the advice.

Stage: report (reads the results of clustering, compilation and runs; changes nothing). These are
plain dataclasses filled by :mod:`.collect` (what ran), :mod:`.measure` (timings on the captured
inputs) and :mod:`.advisor` (the advice), and rendered by :mod:`.html`.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Kernel:
    """One kernel of an optimised module: a fusion (with its kind) or an unfused entry instruction."""

    name: str
    kind: str            # "kLoop" / "kInput" / "kOutput" / ... for fusions; the opcode otherwise
    instructions: int    # fused instructions (1 for an unfused one)
    shape: str
    ops: str = ""        # opcode histogram of the fused computation


@dataclass
class SignatureRun:
    """One compiled signature of a cluster (or its TF-kernel fallback) and what it cost."""

    key_text: str                            # e.g. "f32[4,8], f32[8]"
    cause: str = ""                          # why it was compiled (first signature, arg0 shape ...)
    compile_seconds: float = 0.0
    launches: int = 0
    launch_seconds: list[float] = field(default_factory=list)   # observed wall time per launch
    compiled: Any = None                     # the CompiledCluster, None when TF's kernels ran it
    arrays: list | None = None               # inputs of its first launch (copies)
    # measured after the run, on ``arrays`` (median of a few runs, milliseconds):
    kernel_ms: float | None = None           # the compiled code alone
    launch_ms: float | None = None           # the whole launch path (tensors in, tensors out)
    tf_ms: float | None = None               # the same nodes on TF's kernels (TF's executor)
    tf_how: str = ""                         # how tf_ms was measured
    measure_error: str = ""

    @property
    def steady_launch_ms(self) -> float | None:
        """Median observed launch time, leaving out the first launch (it compiles)."""
        xs = sorted(self.launch_seconds[1:] or self.launch_seconds)
        return 1e3 * xs[len(xs) // 2] if xs else None


@dataclass
class Advice:
    """One finding of the performance advisor."""

    kind: str            # tiny_cluster, lost_parallelism, slower_than_tf, recompilation, fallback, splitter
    severity: str        # "warn" (costs time) or "info"
    title: str
    text: str            # the why, in plain words
    evidence: list[str] = field(default_factory=list)
    cluster: str = ""
    function: str = ""
    node: str = ""


@dataclass
class ClusterReport:
    """One cluster: members, compilations, runs, kernels and advice."""

    name: str
    members: list[str]
    ops: collections.Counter
    function: str = ""
    launcher: Any = None
    compiles: int = 0
    executions: int = 0
    compile_seconds: float = 0.0
    causes: list[str] = field(default_factory=list)
    fallback_reason: str = ""
    signatures: list[SignatureRun] = field(default_factory=list)
    kernels: list[Kernel] = field(default_factory=list)
    groups: int = 1                      # independent groups of ops (weakly connected components)
    elements: int = 0                    # elements read + written per launch (first signature)
    numerics: Any = None                 # runtime.numerics.ClusterNumerics
    advice: list[Advice] = field(default_factory=list)

    @property
    def ran(self) -> bool:
        return bool(self.signatures)

    def histogram_text(self, limit: int = 0) -> str:
        items = sorted(self.ops.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = items[:limit] if limit else items
        text = ", ".join(f"{op}×{c}" if c > 1 else op for op, c in shown)
        return text + (f", … (+{len(items) - len(shown)} ops)" if len(items) > len(shown) else "")

    @property
    def compute_ops(self) -> int:
        """Members that compute (not Const, Identity, NoOp): what the launch actually buys."""
        return sum(c for op, c in self.ops.items() if op not in ("Const", "Identity", "NoOp", "Snapshot"))


@dataclass
class FunctionReport:
    """One traced function (script mode) or the loaded graph (graph mode)."""

    name: str
    mark_result: Any = None             # MarkResult (None for jit_compile=True functions)
    graph: Any = None
    clusters: dict[str, ClusterReport] = field(default_factory=dict)
    note: str = ""                      # e.g. "jit_compile=True: the whole function is one cluster"
    advice: list[Advice] = field(default_factory=list)   # static findings (splitters)


@dataclass
class Report:
    """Everything one report page shows."""

    title: str
    source: str
    flags: Any = None
    functions: list[FunctionReport] = field(default_factory=list)
    dynamic: bool = False                # something ran (timings, compiles)
    dynamic_missing: str = ""            # why not, when it did not
    numerics: Any = None                 # runtime.numerics.NumericsChecker
    run_output: str = ""                 # the plugin's summary (script mode)
    inputs: list[str] = field(default_factory=list)   # what was fed (graph mode)
    picture_options: dict = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)   # time per phase of building the report
    keep_alive: Any = None               # what must outlive the run (a SavedModel owns its variables)
    profile: Any = None                  # compile_profile.CompileProfile of the run's first calls

    @property
    def advice(self) -> list[Advice]:
        out: list[Advice] = []
        for f in self.functions:
            for c in f.clusters.values():
                out += c.advice
            out += f.advice
        order = {"warn": 0, "info": 1}
        return sorted(out, key=lambda a: order.get(a.severity, 2))
