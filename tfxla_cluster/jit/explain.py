"""Human and JSON reports of a clustering: the ``explain`` view.

Stage: clustering output. Given a :class:`~tfxla_cluster.jit.mark_for_compilation.MarkResult`, this
module renders what TF leaves in VLOG lines: each cluster with its members, every unclustered node with
its reason, the reasons grouped and de-duplicated (most common first), and the unclustered-op
histogram. The JSON form carries the same data with stable reason codes.
"""
from __future__ import annotations

import collections
import json

from tfxla_cluster.jit.mark_for_compilation import MarkResult
from tfxla_cluster.tfops.reasons import ReasonCode as R

# Codes of nodes that were never candidates for structural reasons a user rarely cares about first.
_QUIET_CODES = frozenset({R.TOP_LEVEL_ARG_RETVAL})

# What TF's terse reason means, for the codes whose TF text does not say it.
HINTS: dict[R, str] = {
    R.UNIQUE: "TF never auto-clusters Unique: its output size depends on the data",
    R.WHERE_EXCLUDED: "excluded by --tf_xla_cluster_exclude_ops=Where",
    R.STATEFUL_RANDOM: "XLA's RNG does not reproduce TF's seeding, so auto-clustering leaves it to TF",
    R.ASSERT_OR_CHECKNUMERICS: "XLA only has dummy implementations; auto-clustering leaves them to TF",
    R.VARIANT: "DT_VARIANT values (TensorLists, datasets, ...) can't enter or leave an XLA cluster",
    R.TOP_LEVEL_ARG_RETVAL: "function inputs and outputs are fed and fetched by TF",
    R.MIN_CLUSTER_SIZE: "raise the cluster's size or lower --tf_xla_min_cluster_size",
    R.DEVICE_POLICY: "on CPU, auto-clustering needs --tf_xla_auto_jit and --tf_xla_cpu_global_jit",
    R.MUST_BE_CONSTANT_STATEFUL: "e.g. a random shape: XLA needs the value at compile time",
}


def _short_device(device: str) -> str:
    return device.rsplit("/device:", 1)[-1] if "/device:" in device else device


def hint_for(code: str, op: str) -> str:
    """A plain-words gloss of a reason, or ''."""
    if code == R.NO_XLA_KERNEL and op.startswith("_Fused"):
        return ("grappler's remapper fused this into a TF-only CPU kernel before clustering; XLA has no "
                "kernel for it")
    return HINTS.get(code, "")


def created_at(result: MarkResult, node: str) -> list[str]:
    """The user's frames that created ``node`` ("File ..., line N, in f", outermost first), or []."""
    return result.created_at.lookup(None, node) if result.created_at is not None else []


def as_json(result: MarkResult) -> str:
    graph = result.graph
    clusters = []
    for name, members in sorted(result.clusters.items()):
        ops = collections.Counter(graph.node(n).op for n in members)
        clusters.append({"name": name, "size": len(members), "nodes": members,
                         "op_histogram": dict(sorted(ops.items()))})
    unclustered = collections.Counter(d.op for d in result.decisions.values() if not d.cluster)
    by_code = collections.Counter(d.code for d in result.decisions.values() if not d.cluster)
    return json.dumps({
        "global_jit_level": result.global_jit_level,
        "skipped": result.skipped or None,
        "clusters": clusters,
        "nodes": [{**d.as_dict(), **({"created_at": frames} if (frames := created_at(result, d.node)) else {})}
                  for d in result.decisions.values()],
        "unclustered_op_histogram": dict(sorted(unclustered.items())),
        "unclustered_by_reason": dict(by_code.most_common()),
        "summary": result.summary().splitlines(),
    }, indent=2)


def explain_node(result: MarkResult, name: str) -> str:
    d = result.decisions[name]
    node = result.graph.node(name)
    lines = [f"{name} ({d.op}) on {_short_device(node.assigned_device)}"]
    if d.cluster:
        members = result.clusters[d.cluster]
        lines.append(f"  clustered into {d.cluster} with {len(members) - 1} other nodes")
    else:
        hint = hint_for(d.code, d.op)
        hint = f" ({hint})" if hint else ""
        lines.append(f"  not clustered [{d.code}]: {d.reason}{hint}")
    for rel in d.related:
        lines.append(f"    - {rel}")
    frames = created_at(result, name)
    if frames:
        lines.append("  created at:")
        lines.extend(f"    {f}" for f in frames)
    return "\n".join(lines)


# Where a grouped reason named its node (TF's "{{node NAME}}"); never printed as such.
_NODE_SLOT = "\0node\0"


def _group_reason(reason: str, nodes: list[str]) -> str:
    """A group's reason as printed: TF's own text for one node; for several, the node reference points
    at the list below instead of naming one of them."""
    if len(nodes) == 1:
        return reason.replace(_NODE_SLOT, f"{{{{node {nodes[0]}}}}}")
    return reason.replace(f"with node {_NODE_SLOT}", "with the nodes below").replace(_NODE_SLOT, "(the nodes below)")


def explain(result: MarkResult, max_examples: int = 4) -> str:
    """The full text report."""
    graph = result.graph
    out: list[str] = []
    if result.skipped:
        out.append(f"No clusters: {result.skipped}.")
    out.append(f"Clusters: {len(result.clusters)}")
    for name, members in sorted(result.clusters.items()):
        ops = collections.Counter(graph.node(n).op for n in members)
        hist = ", ".join(f"{op}×{c}" if c > 1 else op for op, c in sorted(ops.items()))
        out.append(f"  {name}: {len(members)} nodes ({hist})")
    groups: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for d in result.decisions.values():
        if d.cluster:
            continue
        # De-duplicate reasons that differ only in the node they name.
        key_reason = d.reason.replace(f"{{{{node {d.node}}}}}", _NODE_SLOT)
        groups[(d.code, key_reason)].append(d.node)
    if groups:
        out.append("Unclustered nodes, by reason:")
        ordered = sorted(groups.items(), key=lambda kv: (kv[0][0] in _QUIET_CODES, -len(kv[1]), kv[0]))
        for (code, reason), nodes in ordered:
            shown = ", ".join(nodes[:max_examples]) + (f", … (+{len(nodes) - max_examples})"
                                                        if len(nodes) > max_examples else "")
            hint = hint_for(code, result.decisions[nodes[0]].op)
            hint = f" ({hint})" if hint else ""
            out.append(f"  [{code}] {len(nodes)} node{'s' if len(nodes) != 1 else ''}: "
                       f"{_group_reason(reason, nodes)}{hint}")
            out.append(f"      {shown}")
            first = result.decisions[nodes[0]]
            for rel in first.related[:3]:
                out.append(f"      - {rel}")
            frames = created_at(result, nodes[0]) if code not in _QUIET_CODES else []
            if frames:   # the innermost user frame: the line that made the op
                out.append(f"      {nodes[0]} created at {frames[-1]}")
    hist = collections.Counter(d.op for d in result.decisions.values() if not d.cluster)
    if hist:
        out.append("Unclustered op histogram:")
        for op, count in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])):
            out.append(f"  {op}: {count}")
    return "\n".join(out)
