"""MarkForCompilation: TF 2.21's auto-clustering pass, decision for decision, with reasons.

Stage: clustering. Input: a :class:`~tfxla_cluster.graph.Graph` (TF's view of a GraphDef) and the
``TF_XLA_FLAGS`` in effect. Output: the same GraphDef with ``_XlaCluster``/``_XlaAlreadyClustered`` on
the clustered nodes — identical to TF's ``mark_for_compilation_N.pbtxt`` — plus a reason for every
node. The steps and their order are TF's (mark_for_compilation_pass.cc):

A. candidates, by node id: fuel, ``_XlaCompile=false``, JIT device, device policy, the recursive
   compilability check, string Const, ``--tf_xla_ops_to_cluster``, must-be-constant stateful ops, the
   loop Identity that drives constants;
B. the cycle-detection graph (GraphCycles over node ids, loop frames collapsed, back edges dropped);
C. one cluster per candidate (effective size, devices, resource ops, deadness, scope, _XlaCompile);
D. edge contraction in post-order, phases 0 (Shape/Rank/Size consumers), 1 (not into sink-like NoOps,
   not from integer ``i++`` resource ops), 2 (all) and 3 (must change nothing);
E. Fill declustering; F. marking with ``--tf_xla_min_cluster_size`` and TF's cluster names.

Process-global state that TF keeps across graphs (fuel, the cluster sequence numbers) lives in a
:class:`~tfxla_cluster.process_state.ProcessState`; the default (``PROCESS``) is shared by the whole
Python process, as in TF.
"""
from __future__ import annotations

import collections
import logging
from dataclasses import dataclass, field
from typing import Iterable

from tensorflow.core.framework import graph_pb2, node_def_pb2, types_pb2

from tfxla_cluster import flags as flags_mod
from tfxla_cluster.process_state import PROCESS, ProcessState
from tfxla_cluster._gc import gc_paused
from tfxla_cluster.errors import InternalError
from tfxla_cluster.graph.graph import Graph, Node
from tfxla_cluster.jit import compilability, deadness, device_util, dumps, resource_safety
from tfxla_cluster.jit.graph_cycles import GraphCycles, describe_cycle
from tfxla_cluster.tfops import op_tables, xla_kernels
from tfxla_cluster.tfops.const_analysis import ConstAnalysis
from tfxla_cluster.tfops.filters import auto_clustering_filter
from tfxla_cluster.tfops.reasons import ReasonCode

log = logging.getLogger("tfxla_cluster.mark_for_compilation")
R = ReasonCode  # short name for the many decisions below

XLA_CLUSTER_ATTR = "_XlaCluster"
XLA_ALREADY_CLUSTERED_ATTR = "_XlaAlreadyClustered"
XLA_COMPILE_ATTR = "_XlaCompile"
XLA_MUST_COMPILE_ATTR = "_XlaMustCompile"
XLA_SCOPE_ATTR = "_XlaScope"
XLA_INTERNAL_SCOPE_ATTR = "_XlaInternalScope"
INT64_MAX = 2**63 - 1


# TF's per-process clustering state (fuel, cluster sequence numbers): the process's ProcessState.
GLOBAL_STATE = PROCESS


@dataclass(slots=True)
class Decision:
    """Why a node ended where it did. ``code`` is stable (tests and --json use it); ``reason`` reads
    like TF's own log text where TF has one."""

    node: str
    op: str
    cluster: str | None
    code: ReasonCode
    reason: str
    related: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"node": self.node, "op": self.op, "cluster": self.cluster, "code": self.code,
                "reason": self.reason, "related": list(self.related)}


@dataclass(slots=True)
class ContractionAttempt:
    """One TryToContractEdge call that failed: the clusters (TF's ``<node + N others #id>`` names and
    representative node ids at the time), the phase, and TF's reason."""

    phase: int
    src: str
    dst: str
    src_id: int
    dst_id: int
    code: ReasonCode
    reason: str


@dataclass
class MarkResult:
    """The pass's output: the marked GraphDef, clusters (name → node names in id order) and a
    decision for every op node."""

    graph_def: graph_pb2.GraphDef
    graph: Graph
    clusters: dict[str, list[str]]
    decisions: dict[str, Decision]
    contractions: list[ContractionAttempt] = field(default_factory=list)
    global_jit_level: int = 0
    cpu_global_jit: bool = False
    skipped: str = ""  # why the whole graph was left alone, if it was
    flags: object = None  # the Flags the pass ran with
    # Where the user's code created each node (a must_compile.CreationStacks), when the graph came from
    # a traced tf.function; explain shows it next to the reasons.
    created_at: object = None

    def cluster_of(self, node: str) -> str | None:
        return self.decisions[node].cluster if node in self.decisions else None

    def release_graph(self, base: Graph) -> None:
        """Drop the marked Graph (~5 Python objects a node, which the cyclic GC walks for as long as the
        result lives); the next read of ``graph`` makes it again as ``base`` — the graph the pass copied,
        unchanged since — copied with the marked GraphDef."""
        if "graph" in self.__dict__:
            del self.graph
            self._graph_from = base

    def __getattr__(self, name: str):
        made_from = self.__dict__.get("_graph_from")
        if name != "graph" or made_from is None:
            raise AttributeError(name)
        graph = self.graph = made_from.copy(self.graph_def)
        return graph

    def summary(self, verbose: bool = True) -> str:
        """TF's ``VLogClusteringSummary`` text (VLOG2 lines; op histograms are TF's VLOG3)."""
        return "\n".join(summary_lines(self.graph_def, verbose))


def summary_lines(graph_def: graph_pb2.GraphDef, verbose: bool = True) -> list[str]:
    """TF's clustering summary for a marked GraphDef. Sizes count SOURCE and SINK (two NoOps), as
    ``Graph::num_nodes()`` does."""
    total = len(graph_def.node) + 2
    clusters: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    unclustered = collections.Counter({"NoOp": 2})
    for nd in graph_def.node:
        if XLA_CLUSTER_ATTR in nd.attr:
            clusters[nd.attr[XLA_CLUSTER_ATTR].s.decode()][nd.op] += 1
        else:
            unclustered[nd.op] += 1

    def ratio(n: int) -> str:
        return f"{n} / {total} ({100.0 * n / total:.2f}%)"

    clustered = sum(sum(c.values()) for c in clusters.values())
    lines = [f"*** Clustering info for graph of size {total}",
             f" Built {len(clusters)} clusters, size {ratio(clustered)}"]
    for name in sorted(clusters):
        lines.append(f"  {name} {ratio(sum(clusters[name].values()))}")
        if verbose:
            lines += [f"   {op}: {count} instances" for op, count in sorted(clusters[name].items())]
    if unclustered:
        lines.append(f" Unclustered nodes: {ratio(sum(unclustered.values()))}")
        if verbose:
            lines += [f"  {op}: {count} instances" for op, count in sorted(unclustered.items())]
    return lines


class _Cluster:
    __slots__ = ("rep", "size", "effective_size", "has_functional_cf", "devices", "resource_op_device",
                 "deadness", "xla_compile_attr_true", "scope", "resource_var_ids")

    def __init__(self, rep, effective_size, has_functional_cf, device, resource_op_device, resource_var_id,
                 deadness_pred, xla_compile_attr_true, scope):
        self.rep = rep
        self.size = 1
        self.effective_size = effective_size
        self.has_functional_cf = has_functional_cf
        self.devices = frozenset([device])
        self.resource_op_device = resource_op_device
        self.deadness = deadness_pred
        self.xla_compile_attr_true = xla_compile_attr_true
        self.scope = scope
        self.resource_var_ids = [resource_var_id] if resource_var_id is not None else []

    def merge(self, other: "_Cluster") -> None:
        self.size += other.size
        self.effective_size += other.effective_size
        self.has_functional_cf |= other.has_functional_cf
        if other.devices is not self.devices and not other.devices <= self.devices:
            self.devices = self.devices | other.devices   # else keep the shared (interned) set
        if self.resource_op_device is None:
            self.resource_op_device = other.resource_op_device
        self.xla_compile_attr_true |= other.xla_compile_attr_true
        if self.scope is None:
            self.scope = other.scope
        self.resource_var_ids.extend(other.resource_var_ids)
        other.resource_var_ids = []


class MarkForCompilationPass:
    """One run of the pass over one graph (TF's ``MarkForCompilationPassImpl``)."""

    def __init__(self, graph: Graph, flags: "flags_mod.Flags", *, session_name: str = "",
                 config_jit_level: int = 0, cpu_global_jit_config: bool = False,
                 ignore_xla_compile_attr: bool = False, disable_deadness: bool | None = None,
                 state: ProcessState | None = None, explain_cycles: bool = True,
                 dump_prefix: str | None = None) -> None:
        self.graph = graph
        self.dump_prefix = dump_prefix
        self.flags = flags
        self.state = state or GLOBAL_STATE
        self.session_name = session_name
        self.ignore_xla_compile_attr = ignore_xla_compile_attr
        self.ignore_deadness = (flags.tf_xla_disable_deadness_safety_checks_for_debugging
                                if disable_deadness is None else disable_deadness)
        self.explain_cycles = explain_cycles
        self.max_cluster_size = flags.tf_xla_max_cluster_size   # read once: asked per contraction
        single_gpu = _is_single_gpu_graph(graph)
        self.global_jit_level = int(flags_mod.global_jit_level_for_graph(flags, single_gpu, config_jit_level))
        self.jit_on = self.global_jit_level != int(flags_mod.GlobalJitLevel.OFF)
        self.cpu_global_jit = cpu_global_jit_config
        self.devices = device_util.DeviceInfoCache()
        self.decisions: dict[str, Decision] = {}
        self.contractions: list[ContractionAttempt] = []
        self.candidates: list[Node] = []
        self.clusters: dict[int, _Cluster] = {}       # union-find root value, by node id
        self._uf_parent: dict[int, int] = {}
        self._uf_rank: dict[int, int] = {}
        self._checkers: dict[tuple[str, bool], compilability.CompilabilityChecker] = {}
        self.declustered: set[int] = set()
        self.phase = -1
        self._pick_cache: dict[frozenset[int], int | None] = {}
        self._failures_by_root: dict[int, list[str]] | None = None
        self.single_device = False
        self._registrations: dict[str, xla_kernels.DeviceRegistration | None] = {}
        self._attr_true: dict[int, bool] = {}

    # ----- helpers ----------------------------------------------------------------------------------
    def _decide(self, node: Node, code: R, reason: str, cluster: str | None = None,
                related: Iterable[str] = ()) -> None:
        self.decisions[node.name] = Decision(node.name, node.op, cluster, code, reason, tuple(related))

    def _node_or_func_attr(self, node: Node, attr: str) -> bool:
        """TF's GetNodeOrFuncAttr: the node's bool attr OR the called library function's."""
        out = False
        if attr in node.node_def.attr:
            out |= node.node_def.attr[attr].b
        fdef = self.graph.function(node.op)
        if fdef is not None and attr in fdef.attr:
            out |= fdef.attr[attr].b
        return out

    def _xla_compile_attr_true(self, node: Node) -> bool:
        # Asked for every candidate in steps A and C; reading proto attrs is the slow part.
        found = self._attr_true.get(node.id)
        if found is None:
            # _node_or_func_attr for both attrs, with one lookup of the NodeDef's attrs and of the callee.
            attrs = node.node_def.attr
            fdef = self.graph.function(node.op)
            fattrs = fdef.attr if fdef is not None else {}
            found = ((XLA_COMPILE_ATTR in attrs and attrs[XLA_COMPILE_ATTR].b)
                     or (XLA_COMPILE_ATTR in fattrs and fattrs[XLA_COMPILE_ATTR].b)
                     or (self.jit_on and ((XLA_MUST_COMPILE_ATTR in attrs and attrs[XLA_MUST_COMPILE_ATTR].b)
                                          or (XLA_MUST_COMPILE_ATTR in fattrs and fattrs[XLA_MUST_COMPILE_ATTR].b))))
            self._attr_true[node.id] = found
        return found

    def _disallowed_by_xla_compile_attr(self, node: Node) -> str:
        if self.ignore_xla_compile_attr:
            return ""
        if XLA_COMPILE_ATTR in node.node_def.attr:
            return "" if node.node_def.attr[XLA_COMPILE_ATTR].b else "_XlaCompile is false"
        fdef = self.graph.function(node.op)
        if fdef is not None and XLA_COMPILE_ATTR in fdef.attr and not fdef.attr[XLA_COMPILE_ATTR].b:
            return "_XlaCompile on callee is false"
        return ""

    def _should_compile(self, attr_true: bool, device_type: str, policy: str) -> bool:
        return (attr_true or policy == "always"
                or (policy == "if_enabled_globally" and self.jit_on)
                or (device_type == "CPU" and policy == "if_explicitly_requested" and self.cpu_global_jit))

    def _registration(self, device_type: str) -> xla_kernels.DeviceRegistration | None:
        try:
            return self._registrations[device_type]
        except KeyError:
            reg = xla_kernels.device_registration(device_type, self.flags.tf_xla_cpu_global_jit)
            self._registrations[device_type] = reg
            return reg

    def _checker(self, reg: xla_kernels.DeviceRegistration, allow_where: bool):
        key = (reg.compilation_device, reg.cluster_resource_variable_ops_unsafely, allow_where)
        checker = self._checkers.get(key)
        if checker is None:
            checker = compilability.CompilabilityChecker(
                auto_clustering_filter(reg, allow_where), reg.compilation_device,
                self.graph.library)
            self._checkers[key] = checker
        return checker

    def _scope(self, node: Node) -> str | None:
        attr = XLA_INTERNAL_SCOPE_ATTR if self.jit_on else XLA_SCOPE_ATTR
        value = node.node_def.attr[attr].s.decode() if attr in node.node_def.attr else ""
        return value or None

    # ----- union-find (TF's UnionFind<Cluster*>: union by rank, value of the first argument) -------
    def _find(self, nid: int) -> int:
        parent = self._uf_parent
        root = nid
        while parent[root] != root:
            root = parent[root]
        while parent[nid] != root:
            parent[nid], nid = root, parent[nid]
        return root

    def _cluster_for_node(self, nid: int) -> _Cluster | None:
        if nid not in self._uf_parent:
            return None
        return self.clusters[self._find(nid)]

    def _uf_merge(self, a: int, b: int) -> None:
        ra, rb = self._find(a), self._find(b)
        if ra == rb:
            return
        value = self.clusters[ra]
        if self._uf_rank[ra] > self._uf_rank[rb]:
            self._uf_parent[rb] = ra
            return
        self._uf_parent[ra] = rb
        if self._uf_rank[ra] == self._uf_rank[rb]:
            self._uf_rank[rb] += 1
        self.clusters[rb] = value

    def _cluster_for_cycles_node(self, cid: int) -> _Cluster | None:
        if cid >= len(self.graph.nodes):
            return None
        return self._cluster_for_node(cid)

    # ----- step A -----------------------------------------------------------------------------------
    def find_candidates(self) -> None:
        flags = self.flags
        allowlist = op_tables.expand_ops_to_cluster(flags.tf_xla_ops_to_cluster, xla_kernels.all_xla_ops)
        allow_where = op_tables.check_cluster_exclude_ops(flags.tf_xla_cluster_exclude_ops)
        if allowlist:
            log.debug("XLA clustering will only consider the following TF operations: %s",
                      " ".join(sorted(allowlist)))
        const_nodes, _ = ConstAnalysis(self.graph.library).compile_time_const_nodes(self.graph)
        if self.state.fuel is None:
            self.state.fuel = flags.tf_xla_clustering_fuel
        fuel_start = self.state.fuel
        log.debug("Starting fuel: %s", "infinity" if fuel_start >= INT64_MAX // 2 else fuel_start)
        # Ops with a ref-typed output (TF1 variables); TF2 graphs have none, so most nodes skip the edge scan.
        ref_producers = {n.id for n in self.graph.op_nodes() if any(o.is_ref for o in n.outputs)}
        device_types: dict[str, str] = {}   # assigned device -> its type (graphs use few devices)
        checkers: dict[int, compilability.CompilabilityChecker] = {}   # id(registration) -> its checker
        function, attr_true_by_id = self.graph.function, self._attr_true
        for node in self.graph.op_nodes():
            if self.state.fuel <= 0:
                self._decide(node, R.FUEL_EXHAUSTED, f"{R.FUEL_EXHAUSTED.text} (started at {fuel_start})")
                continue
            device_type = device_types.get(node.assigned_device)
            if device_type is None:
                device_type = device_types[node.assigned_device] = self.devices.device_type(
                    self.devices.id_for(node.assigned_device))
            attrs = node.node_def.attr
            # Most nodes carry neither attr and call no library function: then nothing below is read
            # (no _XlaCompile=false, and the attrs that request compilation are absent).
            plain = (XLA_COMPILE_ATTR not in attrs and XLA_MUST_COMPILE_ATTR not in attrs
                     and function(node.op) is None)
            if not plain:
                why = self._disallowed_by_xla_compile_attr(node)
                if why:
                    self._decide(node, R.XLA_COMPILE_FALSE, f"{R.XLA_COMPILE_FALSE.text} ({why})")
                    continue
            reg = self._registration(device_type)
            if reg is None:
                self._decide(node, R.NO_JIT_DEVICE, f"{R.NO_JIT_DEVICE.text} {device_type or '(none)'}")
                continue
            if plain:
                attr_true = attr_true_by_id[node.id] = False
            else:
                attr_true = self._xla_compile_attr_true(node)
            if not self._should_compile(attr_true, device_type, reg.autoclustering_policy):
                self._decide(node, R.DEVICE_POLICY, _policy_reason(device_type, reg, self.jit_on))
                continue
            ref_input = bool(ref_producers) and any(
                not e.is_control and e.src.id in ref_producers and e.src.outputs[e.src_output].is_ref
                for e in node.in_edges)
            checker = checkers.get(id(reg))
            if checker is None:
                checker = checkers[id(reg)] = self._checker(reg, allow_where)
            problem = checker.check_node(node.node_def, ref_input=ref_input)
            if problem is not None:
                self._decide(node, problem.code, problem.reason)
                continue
            if node.op == op_tables.STRING_CONST_OP and node.node_def.attr["dtype"].type == types_pb2.DT_STRING:
                self._decide(node, R.STRING_CONST, R.STRING_CONST.text)
                continue
            if allowlist and node.op not in allowlist:
                self._decide(node, R.NOT_IN_OPS_TO_CLUSTER,
                             f"Rejecting TF operation {node.op} {R.NOT_IN_OPS_TO_CLUSTER.text}")
                continue
            if node.id in const_nodes and node.op_def.is_stateful:
                info = op_tables.resource_op_info(node.op)
                if info is None or info[1] == "variable":
                    self._decide(node, R.MUST_BE_CONSTANT_STATEFUL,
                                 f"{R.MUST_BE_CONSTANT_STATEFUL.text}: its value feeds a compile-time constant input, "
                                 "and a stateful op can't be constant-folded")
                    continue
            if _is_identity_driving_consts_in_loop(node):
                self._decide(node, R.LOOP_IDENTITY_DRIVING_CONSTS, R.LOOP_IDENTITY_DRIVING_CONSTS.text)
                continue
            self.candidates.append(node)
            self.state.fuel -= 1

    # ----- steps B and C ------------------------------------------------------------------------------
    def build_cycles_graph(self) -> GraphCycles | None:
        cycles = GraphCycles()
        cycles.new_nodes(len(self.graph.nodes))
        frames = self.frames = deadness.frame_names(self.graph)
        frame_nodes: dict[str, int] = {}

        def frame_node(name: str) -> int:
            if name not in frame_nodes:
                frame_nodes[name] = cycles.new_node()
            return frame_nodes[name]

        def names(cid: int) -> str | None:   # only for the error message
            return {n.id: n.name for n in self.graph.nodes}.get(cid)

        # Ops whose edges need a look below; most graphs have none, and their edges go straight in.
        special = {n.id for n in self.graph.nodes
                   if n.op in ("Enter", "RefEnter", "Exit", "RefExit", "NextIteration", "RefNextIteration")}
        # The edges to insert, in order, and whether each one is a loop-frame edge (whose cycle skips
        # the pass) rather than a plain one (whose cycle is an error); inserted in one call below.
        pairs: list[tuple[int, int]] = []
        frame_edge: dict[int, bool] = {}   # index in pairs -> a loop-frame edge (only when special)
        for e in self.graph.edges():
            src, dst = e.src.id, e.dst.id
            if src not in special and dst not in special:
                pairs.append((src, dst))
                continue
            if e.dst.op in ("Enter", "RefEnter") or e.src.op in ("Exit", "RefExit"):
                if e.dst.op in ("Enter", "RefEnter"):
                    dst = frame_node(frames.get(e.dst.id, ""))
                if e.src.op in ("Exit", "RefExit"):
                    src = frame_node(frames.get(e.src.id, ""))
                frame_edge[len(pairs)] = True
                pairs.append((src, dst))
                continue
            if e.src.op in ("NextIteration", "RefNextIteration"):
                continue
            pairs.append((src, dst))
        bad = cycles.insert_edges(pairs)
        if bad >= 0:
            if frame_edge.get(bad):
                self.skipped = "Could not form cycle detection graph (a cycle through loop frames)"
                return None
            src, dst = pairs[bad]
            raise InternalError(
                "Found cycle in graph without control flow operator during XLA compilation: "
                + describe_cycle(cycles, names, src, dst, len(self.graph.nodes)))
        return cycles

    def build_initial_clusters(self) -> None:
        ignored_by_device: dict[str, bool] = {}   # assigned device -> its resource ops are ignored

        def ignore(node: Node) -> bool:
            device = node.assigned_device
            if not device:
                return False
            found = ignored_by_device.get(device)
            if found is None:
                reg = self._registration(self.devices.device_type(self.devices.id_for(device)))
                found = ignored_by_device[device] = True if reg is None else reg.cluster_resource_variable_ops_unsafely
            return found

        calls: dict[int, bool] = {}   # node id -> may call a function (asked in both steps below)
        self.unsafe_pairs = (set() if self.flags.tf_xla_disable_resource_variable_safety_checks_for_debugging
                             else resource_safety.incompatible_pairs(self.graph, ignore, calls))
        preds = None if self.ignore_deadness else deadness.compute_predicates(self.graph, self.frames)
        device_sets: dict[int, frozenset[int]] = {}
        # Per-node facts that depend on a shared object only, asked once per distinct object: slot lists
        # are shared between nodes of one signature (SlotCache), device names and ops repeat.
        resource_slots: dict[int, bool] = {}    # id(slot list) -> has a resource slot
        device_ids: dict[str, int] = {}         # device name -> DeviceInfoCache id
        op_facts: dict[str, tuple[int, bool]] = {}   # op -> (effective size, functional control flow)
        for node in self.candidates:
            ins, outs = node.inputs, node.outputs
            is_in = resource_slots.get(id(ins))
            if is_in is None:
                is_in = resource_slots[id(ins)] = any(s.dtype in _RESOURCE_DTYPES for s in ins)
            is_resource = is_in
            if not is_in:
                is_resource = resource_slots.get(id(outs))
                if is_resource is None:
                    is_resource = resource_slots[id(outs)] = any(s.dtype in _RESOURCE_DTYPES for s in outs)
            device_name = node.assigned_device or node.requested_device
            device = device_ids.get(device_name)
            if device is None:
                device = device_ids[device_name] = self.devices.id_for(device_name)
            facts = op_facts.get(node.op)
            if facts is None:
                op = node.op
                facts = op_facts[op] = (0 if op in op_tables.IDENTITY_OPS or op in op_tables.CONSTANT_OPS else 1,
                                        op in op_tables.WHILE_OPS or op in op_tables.IF_OPS)
            resource_var_id = node.id if (is_resource or resource_safety.may_call_function(node, self.graph, calls)) else None
            cluster = _Cluster(
                node.id, facts[0], facts[1], device,
                device if is_resource else None, resource_var_id,
                preds[node.id] if preds is not None else None, self._xla_compile_attr_true(node),
                self._scope(node))
            cluster.devices = device_sets.setdefault(device, cluster.devices)   # one shared set per device
            self.clusters[node.id] = cluster
            self._uf_parent[node.id] = node.id
            self._uf_rank[node.id] = 0
        self.single_device = len({d for c in self.clusters.values() for d in c.devices}) == 1

    # ----- step D -------------------------------------------------------------------------------------
    def _only_node(self, cluster: _Cluster) -> Node | None:
        return self.graph.nodes[cluster.rep] if cluster.size == 1 else None

    def _is_sink_like(self, cluster: _Cluster) -> bool:
        n = self._only_node(cluster)
        return bool(n and n.op == "NoOp" and len(n.out_edges) == 1 and n.out_edges[0].dst.is_sink)

    def _is_scalar_integer_resource_op(self, cluster: _Cluster) -> bool:
        n = self._only_node(cluster)
        if n is None or n.op not in op_tables.SCALAR_INTEGER_RESOURCE_OPS:
            return False
        if "dtype" not in n.node_def.attr or n.node_def.attr["dtype"].type not in op_tables.INTEGER_DTYPES:
            return False
        const = next((e.src for e in n.in_edges if not e.is_control and e.src.op in op_tables.CONSTANT_OPS), None)
        if const is None or "value" not in const.node_def.attr:
            return False
        return len(const.node_def.attr["value"].tensor.tensor_shape.dim) == 0

    def _pick(self, devices: frozenset[int]) -> int | None:
        chosen = self._pick_cache.get(devices, -1)
        if chosen == -1:
            chosen = device_util.pick_device_for_xla(self.devices, devices)[0]
            self._pick_cache[devices] = chosen
        return chosen

    def _devices_compatible(self, a: _Cluster, b: _Cluster) -> bool:
        if a.devices is b.devices and a.resource_op_device is None and b.resource_op_device is None:
            # Same device set object (clusters share their frozenset per device): one cached pick.
            return self._pick(a.devices) is not None
        chosen = self._pick(a.devices if a.devices == b.devices else a.devices | b.devices)
        if chosen is None:
            return False
        return all(c.resource_op_device is None or c.resource_op_device == chosen for c in (a, b))

    def _name(self, cluster: _Cluster) -> str:
        node = self.graph.nodes[cluster.rep]
        if cluster.size == 1:
            return f"<{node.name} #{cluster.rep}>"
        return f"<{node.name} + {cluster.size - 1} others #{cluster.rep}>"

    def _fail(self, src: _Cluster, dst: _Cluster, code: R, reason: str) -> bool:
        self.contractions.append(ContractionAttempt(self.phase, self._name(src), self._name(dst), src.rep, dst.rep,
                                                    code, reason))
        if log.isEnabledFor(5):   # names are built per failure; only when someone listens
            log.log(5, "Could not contract %s -> %s because %s.", self._name(src), self._name(dst), reason)
        return False

    def try_to_contract_edge(self, src: _Cluster, dst: _Cluster) -> bool:
        if src.deadness != dst.deadness:
            return self._fail(src, dst, R.DEADNESS, f"{R.DEADNESS.text}: "
                              f"{deadness.to_string(src.deadness)} and {deadness.to_string(dst.deadness)}")
        if not self._devices_compatible(src, dst):
            return self._fail(src, dst, R.DEVICES, R.DEVICES.text)
        if src.scope is not None and dst.scope is not None and src.scope != dst.scope:
            return self._fail(src, dst, R.SCOPE, R.SCOPE.text)
        if src.size + dst.size > self.max_cluster_size:
            return self._fail(src, dst, R.MAX_CLUSTER_SIZE, R.MAX_CLUSTER_SIZE.text)
        # With one device in the whole graph every device check passes; skip the predecessor scan.
        for in_id in (() if self.single_device else self.cycles.predecessors(dst.rep)):
            c_in = self._cluster_for_cycles_node(in_id)
            if c_in is not None and (not self._devices_compatible(dst, c_in)
                                     or not self._devices_compatible(src, c_in)):
                return self._fail(src, dst, R.CROSS_DEVICE, R.CROSS_DEVICE.text)
        if self.unsafe_pairs:
            for a in src.resource_var_ids:
                for b in dst.resource_var_ids:
                    if (a, b) in self.unsafe_pairs:
                        return self._fail(src, dst, R.RESOURCE_SAFETY,
                                          f"{R.RESOURCE_SAFETY.text} ({self.graph.nodes[a].name} before {self.graph.nodes[b].name})")
        return self.merge_clusters(src, dst)

    def merge_clusters(self, src: _Cluster, dst: _Cluster) -> bool:
        a, b = src.rep, dst.rep
        merged = self.cycles.contract_edge(a, b)
        if merged is None:
            path = self._potential_cycle(a, b) if self.explain_cycles else ""
            reason = R.CYCLE.text + (f" via {path}" if path else "")
            return self._fail(src, dst, R.CYCLE, reason)
        src.merge(dst)
        src.rep = merged
        self._uf_merge(a, b)
        return True

    def _potential_cycle(self, a: int, b: int) -> str:
        """TF's DescribePotentialCycle: an a→…→b path besides the direct edge, preferring
        unclusterable nodes. TF scans the whole graph in reverse post-order; only nodes reachable from
        ``a`` with rank below ``b``'s can be on such a path, so we scan just those, in the same order."""
        cycles = self.cycles
        rank_of = cycles.ranks().__getitem__
        successors, predecessors = cycles.successors, cycles.predecessors
        limit = rank_of(b)
        region, stack = {a}, [a]
        while stack:
            for nxt in successors(stack.pop()):
                if nxt not in region and rank_of(nxt) < limit:
                    region.add(nxt)
                    stack.append(nxt)
        # _cluster_for_cycles_node(p) is None, inlined: asked for every predecessor in the region.
        n_graph, in_union = len(self.graph.nodes), self._uf_parent
        best: dict[int, int] = {a: -1}
        for n in sorted(region - {a}, key=rank_of) + [b]:
            some = preferred = None
            for p in predecessors(n):
                if p not in best or (n == b and p == a):
                    continue
                some = p
                if p >= n_graph or p not in in_union:
                    preferred = p
            if some is not None:
                best[n] = preferred if preferred is not None else some
        if b not in best:
            return ""
        path, cur = [], best[b]
        while cur != a:
            path.append(cur)
            cur = best[cur]
        labels, unclustered = [], False
        for cid in reversed(path):
            c = self._cluster_for_cycles_node(cid)
            if c is not None:
                labels.append(self._name(c))
            else:
                unclustered = True
                labels.append(self.graph.nodes[cid].name if cid < len(self.graph.nodes) else f"<oob #{cid}>")
        return ("" if unclustered else "(all clusters) ") + "[" + ",".join(labels) + "]"

    def for_each_edge_in_post_order(self, fn) -> bool:
        # _cluster_for_cycles_node, inlined: this loop visits every edge four times.
        changed = False
        n_graph = len(self.graph.nodes)
        in_union, clusters, find = self._uf_parent, self.clusters, self._find
        successors = self.cycles.successors
        for nid in self.cycles.all_nodes_in_post_order():
            if nid >= n_graph or nid not in in_union:
                continue
            root = in_union[nid]   # _find, skipped when nid is its own root (the common case)
            src = clusters[nid if root == nid else find(nid)]
            for to in list(successors(src.rep)):
                if to >= n_graph:
                    continue
                root = in_union.get(to)
                if root is None:
                    continue
                if fn(src, clusters[to if root == to else find(to)]):
                    changed = True
        return changed

    def run_edge_contraction_loop(self) -> None:
        # The phase filters ask about singleton clusters only (_only_node), and only a few ops can
        # pass or fail them: test the op first, through bound locals (every edge is asked).
        nodes, contract = self.graph.nodes, self.try_to_contract_edge
        shape_consumers = op_tables.SHAPE_CONSUMER_OPS
        int_resource_ops = op_tables.SCALAR_INTEGER_RESOURCE_OPS
        is_sink_like, is_int_resource = self._is_sink_like, self._is_scalar_integer_resource_op
        self.phase = 0
        self.for_each_edge_in_post_order(
            lambda s, d: d.size == 1 and nodes[d.rep].op in shape_consumers and contract(s, d))
        self.phase = 1
        self.for_each_edge_in_post_order(
            lambda s, d: not (d.size == 1 and nodes[d.rep].op == "NoOp" and is_sink_like(d))
            and not (s.size == 1 and nodes[s.rep].op in int_resource_ops and is_int_resource(s))
            and contract(s, d))
        self.phase = 2
        self.for_each_edge_in_post_order(self.try_to_contract_edge)
        self.phase = 3
        if self.for_each_edge_in_post_order(self.try_to_contract_edge):
            raise InternalError("MarkForCompilation: edge contraction is not idempotent (phase 3 changed)")

    # ----- steps E and F ------------------------------------------------------------------------------
    def decluster_nodes(self) -> None:
        for node in self.candidates:
            cluster = self._cluster_for_node(node.id)
            if node.op_def.name != "Fill" or not node.out_edges:
                continue
            if all(self._cluster_for_node(e.dst.id) is not cluster for e in node.out_edges):
                self.declustered.add(node.id)

    def should_compile_cluster(self, cluster: _Cluster, cache: dict) -> tuple[bool, str]:
        if id(cluster) in cache:
            return cache[id(cluster)]
        chosen, why = device_util.pick_device_for_xla(self.devices, cluster.devices)
        if chosen is None:
            raise InternalError(f"cluster with no device: {why}")
        dtype = self.devices.device_type(chosen)
        reg = self._registration(dtype)
        # The candidates' rule (a session's cpu_global_jit included: TF 2.21 clusters on CPU with it alone).
        ok = self._should_compile(cluster.xla_compile_attr_true, dtype, reg.autoclustering_policy)
        result = (ok, "" if ok else _policy_reason(dtype, reg, self.jit_on))
        if not ok and self.jit_on and dtype == "CPU":
            _warn_cpu_once(self.flags)
        cache[id(cluster)] = result
        return result

    def create_clusters(self, fingerprint: int) -> dict[str, list[str]]:
        names: dict[int, str] = {}
        members: dict[str, list[str]] = {}
        cache: dict = {}
        min_size = self.flags.tf_xla_min_cluster_size
        # cluster rep -> (the two attrs as a NodeDef to merge in, reason): built once per cluster; one
        # MergeFrom sets both attrs (every candidate is marked, and proto map writes are slow).
        encoded: dict[int, tuple[node_def_pb2.NodeDef, str]] = {}
        decisions, clustered = self.decisions, R.CLUSTERED
        clusters, parent, find = self.clusters, self._uf_parent, self._find
        for node in self.candidates:
            nid = node.id
            cluster = clusters[nid if parent[nid] == nid else find(nid)]   # every candidate is in the union
            ok, why = self.should_compile_cluster(cluster, cache)
            if not ok:
                self._decide(node, R.DEVICE_POLICY, why)
                continue
            if node.id in self.declustered:
                self._decide(node, R.DECLUSTERED_FILL, R.DECLUSTERED_FILL.text)
                continue
            if (cluster.effective_size >= min_size or cluster.has_functional_cf
                    or cluster.xla_compile_attr_true):
                name = names.get(cluster.rep)
                if name is None:
                    prefix = f"{self.session_name}_" if self.session_name else "cluster_"
                    if self.flags.tf_xla_deterministic_cluster_names:
                        prefix += f"{fingerprint}_"
                    name = prefix + str(self.state.next_sequence(fingerprint))
                    names[cluster.rep] = name
                    marks = node_def_pb2.NodeDef()
                    marks.attr[XLA_CLUSTER_ATTR].s = name.encode()
                    marks.attr[XLA_ALREADY_CLUSTERED_ATTR].b = True
                    encoded[cluster.rep] = (marks, f"{R.CLUSTERED.text} {name}")
                    members[name] = []
                marks, reason = encoded[cluster.rep]
                node.node_def.MergeFrom(marks)   # map entries replace any old value, as assignment does
                members[name].append(node.name)
                decisions[node.name] = Decision(node.name, node.op, name, clustered, reason)
            else:
                self._decide(node, R.MIN_CLUSTER_SIZE,
                             f"{R.MIN_CLUSTER_SIZE.text} (effective size "
                             f"{cluster.effective_size} < {min_size}; Identity and Const count 0)",
                             related=self._cluster_failures(cluster))
        return members

    def _cluster_failures(self, cluster: _Cluster, limit: int = 8) -> tuple[str, ...]:
        """Why this cluster stayed small: the failed contractions into or out of it (final clusters)."""
        if self._failures_by_root is None:
            index: dict[int, list[str]] = collections.defaultdict(list)
            for att in self.contractions:
                ra, rb = self._find(att.src_id), self._find(att.dst_id)
                if ra == rb:
                    continue
                for root, other, word in ((ra, att.dst_id, "to"), (rb, att.src_id, "from")):
                    line = f"{word} {self.graph.nodes[other].name}: {att.reason}"
                    if len(index[root]) < limit and line not in index[root]:
                        index[root].append(line)
            self._failures_by_root = index
        return tuple(self._failures_by_root.get(self._find(cluster.rep), ()))

    # ----- driver -------------------------------------------------------------------------------------
    def run(self) -> MarkResult:
        graph = self.graph
        self.skipped = ""
        clusters: dict[str, list[str]] = {}
        if any(XLA_ALREADY_CLUSTERED_ATTR in n.node_def.attr for n in graph.op_nodes()):
            self.skipped = "graph already clustered (a node has _XlaAlreadyClustered)"
        elif any(n.op in op_tables.TPU_EXECUTE_OPS for n in graph.op_nodes()):
            self.skipped = "graph contains TPUExecute"
        else:
            self.find_candidates()
            if not self.candidates:
                self.skipped = "No compilable candidates"
            else:
                self.cycles = self.build_cycles_graph()
                if self.cycles is not None:
                    self.build_initial_clusters()
                    self.run_edge_contraction_loop()
                    self.decluster_nodes()
                    fingerprint = (fingerprint_graph(graph.graph_def)
                                   if self.flags.tf_xla_deterministic_cluster_names else 0)
                    # TF dumps only graphs that reach CreateClusters (so dump numbering matches).
                    if self.flags.tf_xla_clustering_debug:
                        dumps.dump_graph("before_mark_for_compilation", graph.graph_def, self.dump_prefix)
                    clusters = self.create_clusters(fingerprint)
                    if self.flags.tf_xla_clustering_debug:
                        dumps.dump_graph("mark_for_compilation", graph.graph_def, self.dump_prefix)
                        dumps.dump_graph("mark_for_compilation_annotated", dumps.annotated(graph.graph_def),
                                         self.dump_prefix)
        for node in graph.op_nodes():
            if node.name not in self.decisions:
                self._decide(node, R.NOT_MARKED, self.skipped or R.NOT_MARKED.text)
        result = MarkResult(graph.to_graph_def(), graph, clusters, self.decisions, self.contractions,
                            self.global_jit_level, self.cpu_global_jit, self.skipped, self.flags)
        if log.isEnabledFor(logging.INFO):   # a scan of the whole GraphDef: only when someone listens
            for line in summary_lines(result.graph_def, verbose=log.isEnabledFor(logging.DEBUG)):
                log.info("%s", line)
        return result


# Dtypes whose base (opdefs_base) is DT_RESOURCE: the resource type and its ref form.
_RESOURCE_DTYPES = frozenset({types_pb2.DT_RESOURCE, types_pb2.DT_RESOURCE_REF})


def opdefs_base(dtype: int) -> int:
    return dtype - 100 if dtype > 100 else dtype


def _policy_reason(device_type: str, reg, jit_on: bool) -> str:
    if device_type == "CPU" and reg.autoclustering_policy == "if_explicitly_requested":
        return ("not compiling on CPU: XLA:CPU auto-clustering needs --tf_xla_cpu_global_jit "
                "(or _XlaCompile=true / jit_compile=True)")
    if not jit_on:
        return f"auto-clustering is off (--tf_xla_auto_jit) and nothing requests compilation on {device_type}"
    return f"device policy for {device_type} does not compile this cluster"


_CPU_WARNED = False


def _warn_cpu_once(flags) -> None:
    global _CPU_WARNED
    if not _CPU_WARNED:
        _CPU_WARNED = True
        log.warning("(One-time warning): Not using XLA:CPU for cluster because envvar "
                    "TF_XLA_FLAGS=--tf_xla_cpu_global_jit was not set.  If you want XLA:CPU, either set "
                    "that envvar, or use experimental_jit_scope to enable XLA:CPU.")


def _is_identity_driving_consts_in_loop(node: Node) -> bool:
    if node.op not in op_tables.IDENTITY_OPS:
        return False
    switch_edge = next((e for e in node.in_edges if e.src.op in op_tables.SWITCH_OPS and e.src_output == 1), None)
    if switch_edge is None:
        return False
    data = switch_edge.src.data_inputs()
    if len(data) < 2 or data[1].src.op != "LoopCond":
        return False
    return any(e.is_control and e.dst.op in op_tables.CONSTANT_OPS for e in node.out_edges)


def _is_single_gpu_graph(graph: Graph) -> bool:
    from tfxla_cluster.graph.devices import parse_device

    # Graphs name a handful of devices thousands of times: parse each distinct name once.
    names = {n.assigned_device for n in graph.op_nodes() if n.assigned_device}
    return sum(1 for name in names if parse_device(name).type == "GPU") == 1


def fingerprint_graph(graph_def: graph_pb2.GraphDef) -> int:
    """TF's ``FingerprintGraph``: Hash64 of the graph's deterministic serialization (C++'s
    ``SerializeToStringDeterministic``; see :func:`serialize_deterministic`).

    TF serializes its in-memory Graph with *that Graph's own* function library: the function runtime
    builds it from grappler's output, whose library is pruned to the functions the graph still
    reaches. A graph dump instead carries the pass's whole library (e.g. the bodies of calls grappler
    inlined), so the library is pruned the same way here; the field stays present when empty, as
    ``Graph::ToGraphDef`` always sets it.
    """
    gd = graph_pb2.GraphDef()
    gd.CopyFrom(graph_def)
    reachable = _reachable_functions(graph_def)
    del gd.library.function[:]
    gd.library.function.extend(f for f in graph_def.library.function if f.signature.name in reachable)
    del gd.library.gradient[:]
    gd.library.gradient.extend(g for g in graph_def.library.gradient if g.function_name in reachable)
    gd.library.SetInParent()
    return _hash64(serialize_deterministic(gd))


def _reachable_functions(graph_def: graph_pb2.GraphDef) -> set[str]:
    """Names of library functions reachable from the graph's nodes (as op, or through a ``func`` /
    ``list(func)`` attr, transitively through function bodies and their gradients)."""
    library = {f.signature.name: f for f in graph_def.library.function}
    gradients = {g.function_name: g.gradient_func for g in graph_def.library.gradient}

    def referenced(nodes) -> list[str]:
        names = []
        for nd in nodes:
            names.append(nd.op)
            for value in nd.attr.values():
                if value.HasField("func"):
                    names.append(value.func.name)
                elif value.HasField("list"):
                    names.extend(f.name for f in value.list.func)
        return [n for n in names if n in library]

    seen: set[str] = set()
    todo = referenced(graph_def.node)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(referenced(library[name].node_def))
        if gradients.get(name) in library:
            todo.append(gradients[name])
    return seen


def serialize_deterministic(message) -> bytes:
    """``message`` serialized exactly as C++ protobuf's deterministic serialization writes it.

    Python's ``SerializeToString(deterministic=True)`` (upb) orders map entries differently when one
    key is a prefix of another — it writes ``Tshape`` before ``T`` — while C++ sorts keys with
    ``std::less`` (``T`` first). Every Reshape/Sum/Gather node has such a pair, so TF's graph
    fingerprint (and with it every ``--tf_xla_deterministic_cluster_names`` name) depends on it.
    Map fields are written here, entry by entry in C++ key order; every other field is written by
    protobuf itself, one field at a time, in field-number order as both implementations do.
    """
    out = bytearray()
    for fd, value in message.ListFields():
        is_map = fd.message_type is not None and fd.message_type.GetOptions().map_entry
        if not is_map and not _has_map(fd.message_type):
            single = type(message)()
            if _repeated(fd):
                getattr(single, fd.name).extend(value)
            elif fd.message_type is not None:
                getattr(single, fd.name).CopyFrom(value)
            else:
                setattr(single, fd.name, value)
            out += single.SerializeToString(deterministic=True)
            continue
        tag = _varint((fd.number << 3) | 2)
        if is_map:
            entry_type = fd.message_type
            key_fd, value_fd = entry_type.fields_by_name["key"], entry_type.fields_by_name["value"]
            for key in sorted(value.keys()):
                body = _map_entry_field(key_fd, key) + _map_entry_field(value_fd, value[key])
                out += tag + _varint(len(body)) + body
        else:
            for item in (value if _repeated(fd) else [value]):
                body = serialize_deterministic(item)
                out += tag + _varint(len(body)) + body
    return bytes(out)


_HAS_MAP: dict[str, bool] = {}


def _repeated(fd) -> bool:
    # protobuf ≥ 5.28 deprecates ``label`` in favour of ``is_repeated``; TF pins either.
    flag = getattr(fd, "is_repeated", None)
    return bool(flag) if flag is not None else fd.label == fd.LABEL_REPEATED


def _has_map(descriptor) -> bool:
    """Whether messages of this type can contain a map field anywhere below them."""
    if descriptor is None:
        return False
    name = descriptor.full_name
    if name not in _HAS_MAP:
        _HAS_MAP[name] = False  # recursion guard (AttrValue → NameAttrList → AttrValue)
        _HAS_MAP[name] = any(
            f.message_type is not None and (f.message_type.GetOptions().map_entry or _has_map(f.message_type))
            for f in descriptor.fields)
    return _HAS_MAP[name]


def _map_entry_field(fd, value) -> bytes:
    """One field (key or value) of a map entry; C++ writes both even when they are defaults."""
    if fd.message_type is not None:
        body = serialize_deterministic(value)
        return _varint((fd.number << 3) | 2) + _varint(len(body)) + body
    if fd.type in (fd.TYPE_STRING, fd.TYPE_BYTES):
        raw = value.encode() if isinstance(value, str) else bytes(value)
        return _varint((fd.number << 3) | 2) + _varint(len(raw)) + raw
    if fd.type in (fd.TYPE_INT32, fd.TYPE_INT64, fd.TYPE_UINT32, fd.TYPE_UINT64, fd.TYPE_BOOL, fd.TYPE_ENUM):
        return _varint(fd.number << 3) + _varint(int(value) & ((1 << 64) - 1))
    raise InternalError(f"fingerprint: unsupported map field type {fd.type} in {fd.full_name}")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _hash64(data: bytes, seed: int = 0xDECAFCAFFE) -> int:
    """TF's ``Hash64`` (tensorflow/core/lib/hash/hash.cc, a MurmurHash64A variant)."""
    mask = (1 << 64) - 1
    m, r = 0xC6A4A7935BD1E995, 47
    n = len(data)
    h = (seed ^ (n * m)) & mask
    full = n - n % 8
    for i in range(0, full, 8):
        k = int.from_bytes(data[i:i + 8], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h ^= k
        h = (h * m) & mask
    tail = data[full:]
    if tail:
        for i in range(len(tail) - 1, -1, -1):
            h ^= tail[i] << (8 * i)
        h = (h * m) & mask
    h ^= h >> r
    h = (h * m) & mask
    h ^= h >> r
    return h


def mark_for_compilation(graph, flags=None, *, session_name: str = "", state: ProcessState | None = None,
                         config_jit_level: int = 0, cpu_global_jit_config: bool = False,
                         ignore_xla_compile_attr: bool = False, disable_deadness: bool | None = None,
                         explain_cycles: bool = True, dump_prefix: str | None = None) -> MarkResult:
    """Run TF's MarkForCompilation on ``graph`` (a Graph, GraphDef or anything ``load_graph`` takes).

    ``flags``: a :class:`~tfxla_cluster.flags.Flags`, a ``TF_XLA_FLAGS``-syntax string, or None to read
    the environment. ``session_name`` is TF's session-metadata cluster-name prefix. With
    ``--tf_xla_clustering_debug``, TF's dump files are written under ``dump_prefix`` (default:
    ``$TF_DUMP_GRAPH_PREFIX``).
    """
    flags = flags_mod.Flags.resolve(flags)
    with gc_paused():
        return _mark_for_compilation(graph, flags, session_name, state, config_jit_level, cpu_global_jit_config,
                                     ignore_xla_compile_attr, disable_deadness, explain_cycles, dump_prefix)


def _mark_for_compilation(graph, flags, session_name, state, config_jit_level, cpu_global_jit_config,
                          ignore_xla_compile_attr, disable_deadness, explain_cycles, dump_prefix) -> MarkResult:
    if not isinstance(graph, Graph):
        if isinstance(graph, graph_pb2.GraphDef):
            graph = Graph(graph, check_acyclic=False)
        else:
            from tfxla_cluster.graph import load_graph

            graph = load_graph(graph)
    else:
        graph = graph.copy()  # never mutate the caller's
    return MarkForCompilationPass(
        graph, flags, session_name=session_name, config_jit_level=config_jit_level,
        cpu_global_jit_config=cpu_global_jit_config, ignore_xla_compile_attr=ignore_xla_compile_attr,
        disable_deadness=disable_deadness, state=state, explain_cycles=explain_cycles,
        dump_prefix=dump_prefix).run()
