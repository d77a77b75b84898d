"""The performance advisor: which clusters cost more than they give, and why, with the evidence.

Stage: report. Reads :class:`~.model.ClusterReport` (measured) and the clustering result; writes
:class:`~.model.Advice` entries. The rules, each a plain-words diagnosis TF users asked for (see
``user_needs.md`` §B/§C):

* **tiny cluster** — at most 3 compute ops, or at most 8 on at most 4096 elements: a launch (TF → launch node → our code → TF) has a fixed
  cost that the fused work cannot pay back. Reported for every tiny cluster (TF's own default
  ``--tf_xla_min_cluster_size=4`` exists for this reason); a *warning* when measured slower than TF.
* **lost parallelism** — slower than TF, and the cluster holds independent groups of ops that TF's
  executor runs concurrently on its inter-op threads, while one compiled cluster runs them in turn.
* **slower than TF** — slower, with neither explanation: the evidence (kernels, times) is shown.
* **recompilation storm** — several compiles of one cluster (their causes), or megamorphic fallback.
* **fallback** — the cluster ran on TF's kernels; TF's reason.
* **numerics** — with the numerics checker on: outputs outside tolerance, and where they start.
* **splitter** — an unclustered node with clustered producers and consumers in different clusters:
  it cut what could have been one cluster; TF's reason and our hint.
"""
from __future__ import annotations

import collections

from tfxla_cluster.report.model import Advice, ClusterReport, FunctionReport

TINY_OPS = 3             # compute ops at most ...
TINY_ELEMENTS = 4096     # ... or elements read and written per launch at most ...
TINY_SMALL_OPS = 8       # ... with at most this many compute ops
SLOWER = 1.10            # compiled launch / TF kernels above this ratio is "slower"
STORM_COMPILES = 3       # this many compiles of one cluster is a storm


def _ms(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{x * 1e3:.0f} µs" if x < 1 else f"{x:.2f} ms"


def inter_op_threads() -> int:
    """TF's inter-op pool size (0 in TF's config means one thread per core)."""
    import os

    try:
        import tensorflow as tf

        n = tf.config.threading.get_inter_op_parallelism_threads()
    except Exception:  # noqa: BLE001 - TF not importable or not configurable: one thread per core, TF's default
        n = 0
    return n or (os.cpu_count() or 1)


def advise_cluster(c: ClusterReport, threads: int | None = None) -> list[Advice]:
    """The advice for one cluster (see the module docstring)."""
    out: list[Advice] = []
    where = dict(cluster=c.name, function=c.function)
    if c.fallback_reason:
        storm = c.fallback_reason.startswith("megamorphic")
        out.append(Advice(
            "recompilation" if storm else "fallback", "warn",
            f"{c.name} ran on TF's kernels" + (" (megamorphic)" if storm else ""),
            ("it was recompiled so often for so few runs that, like TF's DeviceCompilationProfiler, we stopped "
             "compiling it; its inputs' shapes or constant values keep changing." if storm else
             "compiling it failed, so auto-clustering fell back to TF's own kernels for it (jit_compile=True "
             "would have raised instead)."),
            [f"reason: {c.fallback_reason}"] + ([f"compile causes: {', '.join(c.causes[:8])}"] if c.causes else []),
            **where))
    elif c.compiles >= STORM_COMPILES:
        out.append(Advice(
            "recompilation", "warn", f"{c.name} was compiled {c.compiles} times",
            "each new input shape (or compile-time-constant value) compiles the cluster again; "
            "pad or bucket the varying dimension to a few sizes. (An input_signature with None dimensions "
            "stops tf.function retracing, but XLA still compiles once per concrete shape.)",
            [f"{c.compiles} compiles ({c.compile_seconds:.2f} s) for {c.executions} executions",
             "causes: " + ", ".join(c.causes[:8]) + (" …" if len(c.causes) > 8 else "")],
            **where))
    if c.numerics is not None and not c.numerics.ok and not c.numerics.error:
        d = c.numerics.divergence
        bad = [o for o in c.numerics.outputs.values() if not o.comparison.ok]
        out.append(Advice(
            "numerics", "warn", f"{c.name} computes different values than TF's kernels",
            "the compiled cluster's results are outside the tolerance for their dtype"
            + (f"; they first differ at HLO instruction %{d.instruction} ({d.opcode}), lowered from TF op "
               f"{d.op_name or '?'} ({d.op_type or '?'})." if d else "."),
            [f"{o.kind} {o.tensor}: max abs {o.comparison.max_abs:.3g}, max rel {o.comparison.max_rel:.3g}"
             for o in bad[:4]] + ([d.text.strip()] if d else []), **where))
    run = next((s for s in c.signatures if s.compiled is not None and s.tf_ms is not None
                and s.launch_ms is not None), None)
    # Few ops, or a handful of ops on few elements: little work to pay for a launch.
    tiny = c.compute_ops <= TINY_OPS or (0 < c.elements <= TINY_ELEMENTS and c.compute_ops <= TINY_SMALL_OPS)
    if run is None:
        if tiny and c.ran and not c.fallback_reason:
            errors = [f"not measured: {s.measure_error}" for s in c.signatures[:1] if s.measure_error]
            out.append(Advice("tiny_cluster", "info", f"{c.name} is tiny: launch overhead dominates",
                              (f"it computes {c.compute_ops} op{'s' if c.compute_ops != 1 else ''} on {c.elements} "
                               "elements; a launch has a fixed cost that a cluster this small can hardly pay back."),
                              [f"ops: {c.histogram_text(8)}", *errors], **where))
        return out
    ratio = run.launch_ms / run.tf_ms if run.tf_ms else float("inf")
    slower = ratio > SLOWER
    how = f" ({run.tf_how})" if run.tf_how and "eager" in run.tf_how else ""
    timing = (f"compiled launch {_ms(run.launch_ms)} (kernel {_ms(run.kernel_ms)}) vs TF's kernels{how} "
              f"{_ms(run.tf_ms)}: {ratio:.2f}× " + ("slower" if slower else "the time of TF"))
    overhead = run.launch_ms - (run.kernel_ms or 0.0)
    share = overhead / run.launch_ms if run.launch_ms else 0.0
    explained = False
    if tiny:
        explained = True
        out.append(Advice(
            "tiny_cluster", "warn" if slower else "info",
            f"{c.name} is tiny: launch overhead dominates",
            (f"it computes {c.compute_ops} op{'s' if c.compute_ops != 1 else ''} on {c.elements} elements; "
             f"{share:.0%} of each launch is the fixed cost of entering and leaving compiled code, more than "
             "the work fused. Let TF run it (raise --tf_xla_min_cluster_size) or grow the cluster."),
            [timing, f"launch overhead {_ms(overhead)} per launch",
             f"ops: {c.histogram_text(8)}", f"signature: {run.key_text}"], **where))
    n_threads = threads if threads is not None else inter_op_threads()
    if slower and c.groups >= 2 and n_threads > 1:
        explained = True
        out.append(Advice(
            "lost_parallelism", "warn", f"{c.name} lost TF's parallelism",
            (f"the cluster holds {c.groups} independent groups of ops; TF's executor runs such groups at "
             f"the same time on its {n_threads} inter-op threads, while the compiled "
             "cluster runs them one after another. Limit --tf_xla_max_cluster_size or keep the branches in "
             "separate clusters (jit_scope)."),
            [timing, f"{c.groups} independent groups, {len(c.kernels)} kernels", f"ops: {c.histogram_text(8)}"],
            **where))
    if slower and not explained:
        kinds = collections.Counter(k.kind for k in c.kernels)
        out.append(Advice(
            "slower_than_tf", "warn", f"{c.name} is slower than TF's kernels",
            "the compiled code for these ops is slower than TF's own kernels on these inputs; the kernels "
            "below show how it was fused.",
            [timing, "kernels: " + (", ".join(f"{k}×{n}" for k, n in kinds.most_common()) or "none"),
             f"ops: {c.histogram_text(8)}"], **where))
    return out


def splitters(fn: FunctionReport) -> list[Advice]:
    """Unclustered nodes fed by one cluster and feeding another (or fed and feeding clusters): each cut
    what could have been one cluster."""
    result = fn.mark_result
    if result is None:
        return []
    from tfxla_cluster.jit.explain import hint_for
    from tfxla_cluster.tfops.reasons import ReasonCode

    graph = result.graph
    out = []
    for name, d in result.decisions.items():
        if d.cluster or d.code == ReasonCode.TOP_LEVEL_ARG_RETVAL:
            continue
        node = graph.node(name)
        before = {result.cluster_of(e.src.name) for e in node.in_edges if e.src.is_op} - {None, ""}
        after = {result.cluster_of(e.dst.name) for e in node.out_edges if e.dst.is_op} - {None, ""}
        if not before or not after:
            continue
        between = sorted(before | after)
        hint = hint_for(d.code, d.op)
        out.append(Advice(
            "splitter", "info", f"{name} ({d.op}) splits the clustering",
            f"it is not clustered [{d.code}]: {d.reason}" + (f" — {hint}" if hint else "")
            + ". Nodes before and after it were clustered separately; rewriting or moving this op could "
              "let them form one cluster.",
            [f"fed by {', '.join(sorted(before))}; feeds {', '.join(sorted(after))}"],
            cluster=between[0], function=fn.name, node=name))
    return out


def advise(functions: list[FunctionReport]) -> None:
    """Attach the advice to every cluster and function of the report."""
    threads = inter_op_threads()
    for fn in functions:
        for c in fn.clusters.values():
            c.advice = advise_cluster(c, threads)
        fn.advice = splitters(fn)
