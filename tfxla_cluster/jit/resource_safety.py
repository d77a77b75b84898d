"""Resource-variable operation safety: pairs of resource ops that must not share a cluster.

Stage: clustering (step C). TF's ``ComputeIncompatibleResourceOperationPairs``
(resource_operation_safety_analysis.cc): an XLA cluster reads all its resource variables before it
runs and writes them after, so a cluster may not contain a resource op W and a later op R (W reaches R
through data or control edges, loop back edges excluded) unless W only reads or R only writes. Calls to
functions count as read-write. Ops on devices whose registration clusters resource ops "unsafely"
(XLA_*), or on devices without a registration, are ignored.

``incompatible_pairs`` returns the set of ``(W id, R id)`` pairs; there is no alias analysis, as in TF.
"""
from __future__ import annotations

from typing import Callable

from tfxla_cluster.graph.graph import Graph, Node
from tfxla_cluster.tfops import op_tables

READ, WRITE, READ_WRITE = "Read", "Write", "ReadWrite"


def may_call_function(node: Node, graph: Graph, memo: dict[int, bool] | None = None) -> bool:
    """``MayCallFunction``: the op is a library function, or any attr holds a function. ``memo`` (node id
    -> answer) spares asking twice for one node within a pass."""
    if memo is None:
        return _may_call_function(node, graph)
    found = memo.get(node.id)
    if found is None:
        found = memo[node.id] = _may_call_function(node, graph)
    return found


def _may_call_function(node: Node, graph: Graph) -> bool:
    if graph.function(node.op) is not None:
        return True
    attrs = node.node_def.attr
    if not attrs:
        return False
    op_def = node.op_def
    if op_def is None:
        return any(_holds_func(v) for v in attrs.values())
    # Not a library function, so op_def is the registry's: its func attrs can be memoised by op name.
    declared = _DECLARED.get(op_def.name)
    if declared is None:
        declared = _DECLARED[op_def.name] = (tuple(a.name for a in op_def.attr if a.type == "func"),
                                              len(op_def.attr))
    func_attrs, n_declared = declared
    if func_attrs and any(name in attrs and _holds_func(attrs[name]) for name in func_attrs):
        return True
    # Attrs the OpDef doesn't declare (``_...`` annotations) could hold functions too; only scan the
    # map when there are such extras, since scanning a proto map is slow.
    if len(attrs) <= n_declared:
        return False
    return any(_holds_func(v) for v in attrs.values())


# Registry op name -> (names of its ``func`` attrs, number of attrs it declares).
_DECLARED: dict[str, tuple[tuple[str, ...], int]] = {}


def _holds_func(value) -> bool:
    # TF's check is AttrValue::has_func(): a list(func) attr (Case's branches) does not count.
    return value.HasField("func")


def resource_op_kind(node: Node, graph: Graph, ignore: Callable[[Node], bool],
                     memo: dict[int, bool] | None = None) -> str | None:
    if ignore(node):
        return None
    info = op_tables.resource_op_info(node.op)
    if info is not None:
        return info[0]
    return READ_WRITE if may_call_function(node, graph, memo) else None


def _is_edge_safe(from_kind: str, to_kind: str) -> bool:
    return from_kind == READ or to_kind == WRITE


def incompatible_pairs(graph: Graph, ignore: Callable[[Node], bool],
                       memo: dict[int, bool] | None = None) -> set[tuple[int, int]]:
    """All (earlier, later) resource-op id pairs that may not be clustered together (``memo``: see
    ``may_call_function``)."""
    result: set[tuple[int, int]] = set()
    order = graph.topological_order()
    kinds = [resource_op_kind(node, graph, ignore, memo) for node in order]
    # Only writes (and read-writes) start a reaching set; a graph without any has no unsafe pair, and
    # most graphs have none, so the walk below is skipped.
    if all(kind is None or kind == READ for kind in kinds):
        return result
    # Reaching resource ops (id, kind) per node; reads are never stored (an edge from a read is safe).
    # Nodes with one predecessor share its set object, so chains cost nothing.
    reaching: dict[int, frozenset[tuple[int, str]]] = {}
    empty: frozenset[tuple[int, str]] = frozenset()
    for node, kind in zip(order, kinds):
        incoming = [reaching.get(e.src.id, empty) for e in node.in_edges
                    if e.src.is_op and not (e.src.op == "NextIteration" and node.op in ("Merge", "RefMerge"))]
        incoming = [s for s in incoming if s]
        if not incoming:
            current = empty
        elif len(incoming) == 1 or all(s is incoming[0] for s in incoming):
            current = incoming[0]
        else:
            current = frozenset().union(*incoming)
        if kind is not None:
            for src_id, src_kind in current:
                if not _is_edge_safe(src_kind, kind):
                    result.add((src_id, node.id))
            if kind != READ:
                current = current | {(node.id, kind)}
        reaching[node.id] = current
    return result
