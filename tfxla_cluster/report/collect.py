"""Collect what ran: a launch observer, and the cluster reports built from launchers afterwards.

Stage: report. :class:`Recorder` is a launch observer
(:func:`tfxla_cluster.runtime.launcher.add_observer`); per launcher and signature it counts launches,
keeps their wall times and a copy of the first launch's inputs (so timings can be repeated on real
inputs later without slowing the program). :func:`cluster_report` turns a launcher plus the recorded
runs into a :class:`~.model.ClusterReport` (compiles with causes, kernels of the optimised HLO,
structure); :func:`measure` times a signature compiled and on TF's kernels on the captured inputs.
"""
from __future__ import annotations

import collections
import statistics
import threading
import time
from typing import Any

import numpy as np

from tfxla_cluster.report.model import ClusterReport, Kernel, SignatureRun

_MAX_TIMES = 2000   # launch times kept per signature (a training loop need not grow memory)


def key_text(key: Any) -> str:
    """A signature key in HLO-like words: a ``runtime.compile_cache.Signature`` (``.args`` of ArgSpec: dtype name,
    shape, constant-value digest) or a tuple of (dtype str, shape[, constant bytes]) per input."""
    parts = []
    entries = [(a.dtype, a.shape) + ((a.value_digest,) if a.value_digest else ()) for a in key.args] \
        if hasattr(key, "args") else list(key)
    for entry in entries:
        dt, shape = entry[0], entry[1]
        try:
            name = np.dtype(dt).name if dt else "?"
        except TypeError:
            name = str(dt)
        short = {"float32": "f32", "float64": "f64", "float16": "f16", "int32": "s32", "int64": "s64",
                 "bool": "pred", "bfloat16": "bf16", "uint8": "u8", "int8": "s8", "complex64": "c64",
                 "complex128": "c128"}.get(name, name)
        parts.append(f"{short}[{','.join(str(d) for d in shape)}]" + (" (const)" if len(entry) > 2 else ""))
    return ", ".join(parts) or "(no inputs)"


class Recorder:
    """Launch observer: per launcher, per signature, launches, times and the first inputs."""

    def __init__(self) -> None:
        self.launchers: dict[int, Any] = {}
        self.runs: dict[int, dict[tuple, SignatureRun]] = collections.defaultdict(dict)
        self.order: list[int] = []
        self._lock = threading.Lock()
        self.on_new_launcher: Any = None   # callback(launcher), e.g. to keep the owning function alive

    def install(self) -> "Recorder":
        from tfxla_cluster.runtime.launcher import add_observer

        add_observer(self)
        return self

    def uninstall(self) -> None:
        from tfxla_cluster.runtime.launcher import remove_observer

        remove_observer(self)

    def __call__(self, launcher: Any, compiled: Any, arrays: list, outputs: list, seconds: float) -> None:
        key = compiled.key if compiled is not None else ("tf-kernels",) + tuple((a.dtype.str, a.shape) for a in arrays)
        with self._lock:
            new = id(launcher) not in self.launchers
            if new:
                self.launchers[id(launcher)] = launcher
                self.order.append(id(launcher))
            runs = self.runs[id(launcher)]
            run = runs.get(key)
            if run is None:
                # Copies: the arrays may be views of TF buffers that are reused after the launch.
                run = runs[key] = SignatureRun(key_text(key if compiled is not None else key[1:]),
                                               compiled=compiled, arrays=[np.array(a, copy=True) for a in arrays])
            run.launches += 1
            if len(run.launch_seconds) < _MAX_TIMES:
                run.launch_seconds.append(seconds)
        if new and self.on_new_launcher is not None:
            self.on_new_launcher(launcher)


# ------------------------------------------------------------------------------------ cluster facts
def kernels_of(optimized_hlo_text: str) -> list[Kernel]:
    """The kernels of an optimised module: its entry's fusions (with kinds) and unfused instructions
    that do work (parameters, constants, tuples and bitcasts are not kernels)."""
    from tfxla_cluster.hlo import parse_module

    if not optimized_hlo_text:
        return []
    module = parse_module(optimized_hlo_text)
    out = []
    skip = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast"}
    for instr in module.entry.instructions:
        op = instr.opcode.text
        if op == "fusion":
            fused = instr.fused_computation.instructions
            hist = collections.Counter(i.opcode.text for i in fused if i.opcode.text not in ("parameter",))
            ops = ", ".join(f"{o}×{c}" if c > 1 else o for o, c in hist.most_common(8))
            kind = instr.fusion_kind.value if instr.fusion_kind else "?"
            out.append(Kernel(instr.name, kind, sum(hist.values()), str(instr.shape), ops))
        elif op not in skip:
            out.append(Kernel(instr.name, op, 1, str(instr.shape), op))
    return out


def independent_groups(graph: Any, members: list[str]) -> int:
    """Weakly connected components of the cluster's data edges, leaving out constants: pieces TF's
    executor could run at the same time on its inter-op threads."""
    names = {m for m in members if graph.node(m).op not in ("Const", "NoOp")}
    parent = {m: m for m in names}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for m in names:
        for e in graph.node(m).out_edges:
            if not e.is_control and e.dst.name in names:
                a, b = find(m), find(e.dst.name)
                if a != b:
                    parent[a] = b
    return len({find(m) for m in names})


def cluster_report(name: str, members: list[str], graph: Any, *, function: str = "",
                   launcher: Any = None, runs: dict | None = None) -> ClusterReport:
    """A :class:`ClusterReport` from the static clustering and, if it ran, its launcher and runs."""
    ops = collections.Counter(graph.node(m).op for m in members)
    rep = ClusterReport(name, list(members), ops, function=function, launcher=launcher)
    rep.groups = independent_groups(graph, members)
    if launcher is None:
        return rep
    st = launcher.stats
    rep.compiles, rep.executions = st.compiles, st.executions
    rep.compile_seconds, rep.causes, rep.fallback_reason = st.compile_seconds, list(st.causes), st.fallback_reason
    runs = runs or {}
    cause_of = {k: (st.causes[i] if i < len(st.causes) else "") for i, k in enumerate(launcher.cache)}
    for key, compiled in launcher.cache.items():
        run = runs.get(key) or SignatureRun(key_text(key), compiled=compiled)
        run.cause, run.compile_seconds, run.compiled = cause_of.get(key, ""), compiled.compile_seconds, compiled
        rep.signatures.append(run)
    rep.signatures += [r for k, r in runs.items() if r.compiled is None]
    first = next((s.compiled for s in rep.signatures if s.compiled is not None), None)
    if first is not None:
        rep.kernels = kernels_of(first.optimized_hlo_text)
    arrays = next((s.arrays for s in rep.signatures if s.arrays), None)
    if arrays:
        rep.elements = sum(int(np.size(a)) for a in arrays)
    return rep


# ------------------------------------------------------------------------------------ measurement
def _median_ms(call: Any, repeats: int) -> float:
    call()   # warm-up: first calls build TF functions and touch memory
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(samples)


def _tensors(launcher: Any, arrays: list) -> list:
    """TF inputs for a launch of ``launcher``: values as constants, resources as temporary variables
    holding the captured values (the program's variables are never touched)."""
    import tensorflow as tf
    from tensorflow.core.framework import types_pb2

    out = []
    for a, dt in zip(arrays, launcher.sig.input_dtypes):
        out.append(tf.Variable(a, trainable=False).handle if dt == types_pb2.DT_RESOURCE else tf.constant(a))
    return out


def _specs(launcher: Any, arrays: list) -> list:
    import tensorflow as tf

    return [tf.TensorSpec(np.shape(a), tf.as_dtype(dt)) for a, dt in zip(arrays, launcher.sig.input_dtypes)]


def _launch_function(launcher: Any, arrays: list) -> Any:
    """A TF graph function whose only node is the cluster's launch (a py-func calling the launcher),
    as the launch node runs inside the program's graph."""
    import tensorflow as tf

    out_dtypes = [tf.as_dtype(t) for t in launcher.sig.output_dtypes]

    def call(*tensors: Any) -> list:
        return [tf.convert_to_tensor(a) for a in launcher(*tensors)]
    return tf.compat.v1.wrap_function(lambda *xs: tf.py_function(call, list(xs), out_dtypes),
                                      _specs(launcher, arrays))


def _empty_function(launcher: Any, arrays: list) -> Any:
    """A TF graph function with the same inputs that computes nothing: the call's fixed cost."""
    import tensorflow as tf

    return tf.compat.v1.wrap_function(lambda *xs: [tf.constant(0.0)], _specs(launcher, arrays))


def measure(launcher: Any, run: SignatureRun, repeats: int = 5) -> None:
    """Fill ``run``'s timings on its captured inputs (medians of ``repeats`` runs after a warm-up):

    * ``tf_ms`` — the cluster's nodes on TF's kernels, as a TF graph function (TF's executor, so
      independent ops run concurrently as in the program);
    * ``launch_ms`` — a TF graph function holding just the launch node, i.e. the cluster as the
      program runs it (TF → py-func → our launcher → native code → TF);
    * ``kernel_ms`` — the compiled code alone on numpy arrays.

    Both TF-side numbers have the fixed cost of calling a graph function with these inputs removed
    (measured on one that computes nothing), so they compare the cluster's own cost. Resource inputs are
    temporary variables holding the captured values; the launcher's statistics are restored after.
    """
    if run.arrays is None:
        run.measure_error = "no captured inputs"
        return
    arrays = run.arrays
    base = 0.0
    try:
        empty = _empty_function(launcher, arrays)
        tensors = _tensors(launcher, arrays)
        base = _median_ms(lambda: empty(*tensors), repeats)
    except Exception:  # the fixed cost is only subtracted when it can be measured
        base = 0.0
    try:
        tensors = _tensors(launcher, arrays)
        try:
            tf_run = launcher.tf_graph_runner()
            tf_run(tensors)
            run.tf_how = "TF graph function"
        except Exception:  # noqa: BLE001 - any failure to build it: measure TF's kernels one by one
            # Some subgraphs fail to instantiate as a function (seen: "N nodes in a cycle" after another
            # graph with the same nodes was imported in the process); TF's kernels one by one still
            # give the cluster's cost on TF, with eager dispatch per op (so TF looks slower).
            base = 0.0
            tf_run = launcher.run_on_tf
            run.tf_how = "TF eager ops, one by one"
        run.tf_ms = max(_median_ms(lambda: tf_run(tensors), repeats) - base, 1e-3)
    except Exception as e:  # a timing TF can't take is reported on the page, not raised
        run.measure_error = f"TF's kernels: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    if run.compiled is None:
        return
    try:
        run.kernel_ms = _median_ms(lambda: run.compiled.run(arrays), repeats)
        # Same inputs, so the launch hits the compile cache: nothing is compiled. The program's own
        # launch counts are restored afterwards, and our observers are off while timing.
        with launcher.measuring():
            fn = _launch_function(launcher, arrays)
            tensors = _tensors(launcher, arrays)
            run.launch_ms = max(_median_ms(lambda: fn(*tensors), repeats) - base, run.kernel_ms)
    except Exception as e:  # reported on the page, not raised
        run.measure_error = (run.measure_error + "; " if run.measure_error else "") + \
            f"compiled: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
