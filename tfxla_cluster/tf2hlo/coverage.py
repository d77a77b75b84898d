"""Which ops we lower, next to TF's XLA_CPU_JIT kernel registry (what ``tfxla-cluster ops`` prints).

Stage: lowering (introspection only). Every row comes from the two tables of record: TF's own registry,
queried in-process (``tfops.xla_kernels``), and ours (``registry.lowered_ops()`` and
``registry.NOT_LOWERED`` with its reasons). The dtypes are the registry's kernel constraints (per type
attr, the union over the op's kernels); an attr without a constraint takes any type the OpDef allows.
For a graph, each node is also checked as TF checks it (``find_kernel_def``): the right op with a dtype
XLA_CPU_JIT does not register is still refused by TF's XLA.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field

from tfxla_cluster.graph.opdefs import dtype_name
from tfxla_cluster.tf2hlo.registry import NOT_LOWERED, lowered_ops
from tfxla_cluster.tfops.xla_kernels import all_xla_ops, find_kernel_def, jit_kernels

JIT_DEVICE = "XLA_CPU_JIT"


@dataclass
class OpRow:
    """One op: in TF's XLA registry, lowered by us, its allowed dtypes, why we do not lower it."""

    op: str
    in_tf_registry: bool
    lowered: bool
    dtypes: dict[str, list[str]] = field(default_factory=dict)  # type attr -> XLA_CPU_JIT's allowed dtypes
    reason: str = ""            # NOT_LOWERED's reason, or why TF's XLA has no kernel
    nodes: int = 0              # in a graph: how many nodes of the op
    used: dict[str, list[str]] = field(default_factory=dict)  # in a graph: the dtypes its nodes give each attr
    dtype_refused: list[str] = field(default_factory=list)  # in a graph: nodes whose dtypes TF's XLA refuses

    @property
    def status(self) -> str:
        if self.lowered:
            return "lowered" if self.in_tf_registry else "lowered (not in TF's XLA registry)"
        if self.in_tf_registry:
            return "not lowered"
        return "no XLA kernel"

    def as_dict(self) -> dict:
        out = {"op": self.op, "status": self.status, "in_tf_registry": self.in_tf_registry,
               "lowered": self.lowered, "dtypes": self.dtypes}
        if self.reason:
            out["reason"] = self.reason
        if self.nodes:
            out["nodes"] = self.nodes
            out["used"] = self.used
            out["dtype_refused"] = self.dtype_refused
        return out


def _dtype_name(t: int) -> str:
    """TF's Python name of a DataType enum (``float32``, ``qint8``), or the enum's name."""
    import tensorflow as tf

    try:
        return tf.dtypes.as_dtype(t).name
    except TypeError:
        return dtype_name(t)


def _dtypes(op: str) -> dict[str, list[str]]:
    allowed: dict[str, set[int]] = collections.defaultdict(set)
    for kdef in jit_kernels(JIT_DEVICE).get(op, []):
        for c in kdef.constraint:
            allowed[c.name] |= set(c.allowed_values.list.type)
    return {attr: sorted(_dtype_name(t) for t in types) for attr, types in sorted(allowed.items())}


def _row(op: str, registry: frozenset[str], lowered: frozenset[str]) -> OpRow:
    in_reg = op in registry
    reason = NOT_LOWERED.get(op, "") if in_reg else ("" if op in lowered else
                                                    f"TF registers no {JIT_DEVICE} kernel for it")
    return OpRow(op, in_reg, op in lowered, _dtypes(op), reason)


def all_ops() -> list[OpRow]:
    """Every op of TF's registry and every op we lower, by name."""
    registry, lowered = all_xla_ops(), lowered_ops()
    return [_row(op, registry, lowered) for op in sorted(registry | lowered)]


def graph_ops(graph) -> list[OpRow]:
    """The ops of ``graph`` (a ``tfxla_cluster.graph.Graph``), with node counts and the nodes whose dtypes
    TF's XLA_CPU_JIT kernels refuse (named with TF's reason)."""
    registry, lowered = all_xla_ops(), lowered_ops()
    rows: dict[str, OpRow] = {}
    for node in graph.op_nodes():
        row = rows.get(node.op) or rows.setdefault(node.op, _row(node.op, registry, lowered))
        row.nodes += 1
        for attr in row.dtypes:
            value = node.node_def.attr.get(attr)
            types = [] if value is None else list(value.list.type) if value.HasField("list") else [value.type]
            row.used[attr] = sorted(set(row.used.get(attr, [])) | {_dtype_name(t) for t in types})
        if row.in_tf_registry:
            ok, why = find_kernel_def(JIT_DEVICE, node.node_def, node.op_def)
            if not ok:
                row.dtype_refused.append(why)
    return [rows[op] for op in sorted(rows)]


def summary(rows: list[OpRow]) -> dict[str, int]:
    """Counts: in TF's registry, lowered of those, not lowered, lowered outside the registry."""
    return {"tf_registry": sum(r.in_tf_registry for r in rows),
            "lowered": sum(r.in_tf_registry and r.lowered for r in rows),
            "not_lowered": sum(r.in_tf_registry and not r.lowered for r in rows),
            "lowered_outside_registry": sum(r.lowered and not r.in_tf_registry for r in rows),
            "no_xla_kernel": sum(not r.in_tf_registry and not r.lowered for r in rows)}
