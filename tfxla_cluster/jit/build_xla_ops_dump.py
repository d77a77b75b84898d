"""TF's own form of the rewrite after clustering, reproduced for TF's debug dumps.

Stage: after clustering (TF's EncapsulateSubgraphsPass and BuildXlaOpsPass, passes 50/60). From the
marked graph and every cluster's :class:`~tfxla_cluster.tfops.cluster_boundary.ClusterBoundary` this
builds what those passes would have produced — the cluster subgraphs and functions
(``encapsulate_subgraphs_subgraph_<c>``, ``encapsulate_fdef_graph_<c>``, ``encapsulate_fdef_<c>``), the
graph with one call node per cluster (``encapsulate_subgraphs_after``) and the graph with
``_XlaCompile``/``_XlaRun`` (``build_xla_ops``) — and :func:`write_tf_dumps` writes them under TF's
triggers with TF's file names. Only written as dumps: the graph that runs is the launch-node form of
:mod:`tfxla_cluster.runtime.encapsulate`. Guarantee: for one cluster the files equal TF's byte for byte
(tests/e2e/test_encapsulate_dumps.py); with several, only the order of the call nodes may differ (TF's
hash-map order).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from tensorflow.core.framework import graph_pb2

from tfxla_cluster.graph.graph import Graph
from tfxla_cluster.graph.opdefs import ARG_OP, RETVAL_OP
from tfxla_cluster.tfops.cluster_boundary import ClusterBoundary

Tensor = tuple[str, int]


@dataclass
class TfCluster:
    """One cluster as TF's Encapsulator sees it: the function's arguments (after TF's permutation:
    compile-time constants first, resources last) and results, in TF's edge-order numbering."""

    name: str
    members: list[str]
    args: list[Tensor]
    results: list[Tensor]
    num_constant_args: int
    num_resource_args: int
    control_inputs: list[str]
    device: str
    subgraph: graph_pb2.GraphDef            # encapsulate_subgraphs_subgraph_<name>: members + _Arg/_Retval
    optimized: graph_pb2.GraphDef           # encapsulate_fdef_graph_<name>: after TF's classic OptimizeGraph
    fdef: object                            # function_pb2.FunctionDef (encapsulate_fdef_<name>)


def _normalize(name: str) -> str:
    """GraphToFunctionDef's NodeNameMapping::Normalize: lower case, non-alphanumerics → ``_``,
    starting at the first letter."""
    out = "".join(c.lower() if c.isascii() and c.isalnum() else "_" for c in name)
    for i, c in enumerate(out):
        if c.isalpha():
            return out[i:]
    return "unknown"


class _Names:
    """NodeNameMapping's uniquifier: a used name gets ``_0``, ``_1``, ... until unused."""

    def __init__(self) -> None:
        self.used: dict[str, int] = {}

    def unique(self, name: str) -> str:
        if name not in self.used:
            self.used[name] = 0
            return name
        while True:
            candidate = f"{name}_{self.used[name]}"
            self.used[name] += 1
            if candidate not in self.used:
                self.used[candidate] = 0
                return candidate


def _ref(name: str, idx: int) -> str:
    return name if idx == 0 else f"{name}:{idx}"


def tf_clusters(boundaries: Iterable[ClusterBoundary]) -> list[TfCluster]:
    """Every cluster's boundary and function as TF's Encapsulator builds them. Clusters in name order:
    TF iterates its subgraphs in a hash map whose order changes from process to process (three runs of
    one function gave three orders), so only the order of the call nodes in the dumps differs."""
    from tensorflow.core.framework import types_pb2

    from tfxla_cluster.tfops.const_analysis import ConstAnalysis

    out = []
    for boundary in sorted(boundaries, key=lambda b: b.name):
        graph, cname = boundary.graph, boundary.name
        member_set, members = boundary.member_set, boundary.members
        # TF numbers arguments and results in edge order (CopySubgraphEdges walks the edges in id order).
        args, results = list(boundary.inputs), list(boundary.outputs)
        control, control_outputs = boundary.control_inputs, boundary.control_outputs
        dtype_of = {t: boundary.dtype_of(t) for t in args + results}
        device = graph.node(members[0]).assigned_device

        # The subgraph: members (id order), then _Arg / _Retval nodes, as the Encapsulator adds them.
        sub = graph_pb2.GraphDef()
        sub.versions.CopyFrom(graph.graph_def.versions)
        arg_name = {t: f"{t[0]}_{t[1]}_arg" for t in args}
        for name in members:
            nd = sub.node.add()
            nd.CopyFrom(graph.node(name).node_def)
            del nd.input[:]
            if "_XlaCluster" in nd.attr:
                del nd.attr["_XlaCluster"]
            for ref in graph.node(name).node_def.input:
                base, _, idx = ref.lstrip("^").partition(":")
                if ref.startswith("^"):
                    if base in member_set:
                        nd.input.append(ref)
                elif base in member_set:
                    nd.input.append(ref)
                else:
                    nd.input.append(arg_name[(base, int(idx or 0))])
        for i, t in enumerate(args):
            a = sub.node.add(name=arg_name[t], op=ARG_OP)
            a.attr["T"].type = dtype_of[t]
            a.attr["index"].i = i
        for i, t in enumerate(results):
            r = sub.node.add(name=f"{t[0]}_{t[1]}_retval", op=RETVAL_OP, input=[_ref(*t)])
            r.attr["T"].type = dtype_of[t]
            r.attr["index"].i = i

        unoptimized = graph_pb2.GraphDef()
        unoptimized.CopyFrom(sub)
        _optimize_subgraph(sub)
        # TF's RewriteSubgraph callback: compile-time-constant args first, resources last (stable).
        const_args = ConstAnalysis(graph.graph_def.library).compile_time_const_nodes(
            Graph(sub, assign_devices=False))[1]
        is_res = [dtype_of[t] == types_pb2.DT_RESOURCE for t in args]
        order = ([i for i in range(len(args)) if i in const_args] +
                 [i for i in range(len(args)) if i not in const_args and not is_res[i]] +
                 [i for i in range(len(args)) if i not in const_args and is_res[i]])
        position = {old: new for new, old in enumerate(order)}
        for nd in sub.node:
            if nd.op == ARG_OP:
                nd.attr["index"].i = position[nd.attr["index"].i]
        args = [args[i] for i in order]

        fdef = _function_def(cname, graph, sub, member_set, args, results, arg_name, dtype_of,
                             control_outputs)
        out.append(TfCluster(cname, members, args, results, sum(1 for i in order if i in const_args),
                             sum(is_res), control, device, unoptimized, sub, fdef))
    return out


def _optimize_subgraph(sub: graph_pb2.GraphDef) -> None:
    """What TF's RewriteSubgraph callback does to a cluster body before it becomes a function: the
    classic ``OptimizeGraph`` (function runtime options: L1, inlining on) — here its two rewrites that
    change already-grappled graphs: RemoveIdentityNodes and CSE, to a fixed point (TF: ≤ 10 rounds).
    Not reproduced: its ConstantFold (only fires on constant subexpressions grappler left behind)."""
    for _ in range(10):
        changed = _remove_identity_nodes(sub)
        changed = _cse(sub) or changed
        if not changed:
            return


def _ref_names(nd) -> list[str]:
    """The node names ``nd`` references (data and control), once per reference."""
    return [ref.lstrip("^").partition(":")[0] for ref in nd.input]


class _Users:
    """Who references each node of ``sub`` (once per reference), kept up to date as references are
    moved from a removed node to its replacement, so that each removal costs the removed node's
    degree rather than a walk over the whole graph. Removed nodes leave ``sub`` together in
    :meth:`drop_removed` (their order among the others is kept)."""

    def __init__(self, sub: graph_pb2.GraphDef) -> None:
        self.sub = sub
        self.of: dict[str, list] = {}
        self.removed: set[str] = set()
        for nd in sub.node:
            for name in _ref_names(nd):
                self.of.setdefault(name, []).append(nd)

    def get(self, name: str) -> list:
        return self.of.get(name, [])

    def remove(self, nd, replacement: str) -> None:
        """``nd`` leaves the graph; its users (already rewritten by the caller) now use ``replacement``."""
        for name in _ref_names(nd):
            self.of[name] = [u for u in self.of.get(name, []) if u is not nd]
        self.of.setdefault(replacement, []).extend(self.of.pop(nd.name, []))
        self.removed.add(nd.name)

    def drop_removed(self) -> None:
        for i in reversed([i for i, nd in enumerate(self.sub.node) if nd.name in self.removed]):
            del self.sub.node[i]
        self.removed.clear()


def _replace_refs(nd, old: str, new_data: str, new_ctrl: str) -> None:
    """Point ``nd``'s references to ``old`` at ``new_data`` (data) / ``new_ctrl`` (control, deduplicated);
    control inputs end up sorted by name, as TF's ToGraphDef writes them."""
    data, ctrl = [], []
    for ref in nd.input:
        base, _, idx = ref.lstrip("^").partition(":")
        if ref.startswith("^"):
            ctrl.append("^" + (new_ctrl if base == old else base))
        elif base == old:
            data.append(new_data)
        else:
            data.append(ref)
    del nd.input[:]
    nd.input.extend(data + sorted(dict.fromkeys(ctrl)))


def _remove_identity_nodes(sub: graph_pb2.GraphDef) -> bool:
    """TF's RemoveIdentityNodes: an Identity with exactly one data input (no control inputs, not from a
    Switch/Recv or a ref) and at least one consumer is bypassed and removed."""
    by_name = {nd.name: nd for nd in sub.node}
    users_of = _Users(sub)
    removed = False
    for nd in list(sub.node):
        if nd.op not in ("Identity", "RefIdentity") or len(nd.input) != 1 or nd.input[0].startswith("^"):
            continue
        src_name, _, idx = nd.input[0].partition(":")
        src = by_name.get(src_name)
        if src is None or src.op in ("Switch", "RefSwitch", "_Recv", "_HostRecv"):
            continue
        users = list(users_of.get(nd.name))
        if not users:
            continue
        for u in users:
            _replace_refs(u, nd.name, nd.input[0], src_name)
        users_of.remove(nd, src_name)
        del by_name[nd.name]
        removed = True
    users_of.drop_removed()
    return removed


def _reverse_post_order(sub: graph_pb2.GraphDef) -> list:
    """TF's GetReversePostOrder with NodeComparatorName: DFS from the source, children sorted by name
    and pushed on a stack."""
    by_name = {nd.name: nd for nd in sub.node}
    children: dict[str, set] = {nd.name: set() for nd in sub.node}
    roots = []
    for nd in sub.node:
        srcs = {r.lstrip("^").partition(":")[0] for r in nd.input}
        if not srcs:
            roots.append(nd.name)
        for src in srcs:
            children[src].add(nd.name)
    post: list[str] = []
    visited: set[str] = set()
    stack: list[tuple[str | None, bool]] = [(None, False)]
    while stack:
        name, leave = stack.pop()
        if leave:
            if name is not None:
                post.append(name)
            continue
        if name in visited:
            continue
        visited.add(name)
        stack.append((name, True))
        for child in sorted(roots if name is None else children[name]):
            if child not in visited:
                stack.append((child, False))
    return [by_name[n] for n in reversed(post)]


def _cse(sub: graph_pb2.GraphDef) -> bool:
    """TF's OptimizeCSE: in reverse post order, a stateless node equal to an earlier one (op, device,
    inputs, control inputs, attrs) is replaced by it."""
    from tfxla_cluster.errors import NotFoundError
    from tfxla_cluster.graph import opdefs

    seen: dict[bytes, str] = {}
    users_of = _Users(sub)
    removed = False
    for nd in _reverse_post_order(sub):
        if nd.op in (ARG_OP, RETVAL_OP, "Placeholder", "PlaceholderV2", "PlaceholderWithDefault"):
            continue
        try:
            if opdefs.lookup_op_def(nd.op, sub.library).is_stateful:
                continue
        except NotFoundError:  # not a registered op (a function call: the subgraph has no library)
            continue
        key = nd.op.encode() + b"\0" + b"\0".join(r.encode() for r in nd.input) + b"\0" + nd.device.encode() + \
            b"".join(k.encode() + nd.attr[k].SerializeToString(deterministic=True) for k in sorted(nd.attr))
        keep = seen.get(key)
        if keep is None:
            seen[key] = nd.name
            continue
        for u in users_of.get(nd.name):
            _replace_refs_keep_index(u, nd.name, keep)
        users_of.remove(nd, keep)
        removed = True
    users_of.drop_removed()
    return removed


def _replace_refs_keep_index(nd, old: str, new: str) -> None:
    data, ctrl = [], []
    for ref in nd.input:
        base, sep, idx = ref.lstrip("^").partition(":")
        name = new if base == old else base
        if ref.startswith("^"):
            ctrl.append("^" + name)
        else:
            data.append(name + sep + idx)
    del nd.input[:]
    nd.input.extend(data + sorted(dict.fromkeys(ctrl)))


def _function_def(cname: str, graph: Graph, sub, member_set, args, results, arg_name, dtype_of,
                  control_outputs: set[str] = frozenset()):
    """GraphToFunctionDef of the cluster subgraph: args/results become the signature (normalized
    names), data inputs become ``node:out_arg:index`` references."""
    from tensorflow.core.framework import function_pb2

    names = _Names()
    fdef = function_pb2.FunctionDef()
    fdef.signature.name = cname
    arg_of = {}
    for t in args:
        a = fdef.signature.input_arg.add(name=names.unique(_normalize(arg_name[t])), type=dtype_of[t])
        arg_of[arg_name[t]] = a.name
    body_name = {}
    for nd in sub.node:
        if nd.op not in (ARG_OP, RETVAL_OP):
            body_name[nd.name] = names.unique(nd.name)

    def out_ref(node_name: str, idx: int) -> str:
        node = graph.node(node_name)
        slot = node.outputs[idx]
        return f"{body_name[node_name]}:{slot.arg_name}:{slot.index_in_arg}"

    def data_ref(ref: str) -> str:
        if ref in arg_of:
            return arg_of[ref]
        base, _, idx = ref.partition(":")
        return out_ref(base, int(idx or 0))

    for nd in sub.node:
        if nd.op in (ARG_OP, RETVAL_OP):
            continue
        fn = fdef.node_def.add()
        fn.CopyFrom(nd)
        fn.name = body_name[nd.name]
        del fn.input[:]
        for ref in nd.input:
            if ref.startswith("^"):
                fn.input.append("^" + (arg_of.get(ref[1:]) or body_name[ref[1:]]))
            else:
                fn.input.append(data_ref(ref))
    retval_input = {nd.attr["index"].i: nd.input[0] for nd in sub.node if nd.op == RETVAL_OP}
    for i, t in enumerate(results):
        o = fdef.signature.output_arg.add(name=names.unique(_normalize(f"{t[0]}_{t[1]}_retval")),
                                          type=dtype_of[t])
        fdef.ret[o.name] = data_ref(retval_input[i])
    for nd in sub.node:
        if nd.name in control_outputs:
            fdef.signature.control_output.append(body_name[nd.name])
            fdef.control_ret[body_name[nd.name]] = body_name[nd.name]
    return fdef


def tf_encapsulated_graph(graph: Graph, tfcs: list[TfCluster]) -> graph_pb2.GraphDef:
    """``encapsulate_subgraphs_after``: members replaced by one call node per cluster (op = the
    cluster's function, appended after the other nodes), the functions added to the library."""
    member_of = {m: c for c in tfcs for m in c.members}
    result_index = {c.name: {t: k for k, t in enumerate(c.results)} for c in tfcs}
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph.graph_def.versions)
    out.library.CopyFrom(graph.graph_def.library)
    def rewrite(refs, nd) -> None:
        for ref in refs:
            base, _, idx = ref.lstrip("^").partition(":")
            c = member_of.get(base)
            if c is None:
                nd.input.append(ref)
            elif ref.startswith("^"):
                if "^" + c.name not in nd.input:
                    nd.input.append("^" + c.name)
            else:
                nd.input.append(_ref(c.name, result_index[c.name][(base, int(idx or 0))]))

    for node in graph.op_nodes():
        if node.name in member_of:
            continue
        nd = out.node.add()
        nd.CopyFrom(node.node_def)
        del nd.input[:]
        rewrite(node.node_def.input, nd)
    for c in tfcs:   # another cluster's output feeding this one is the other call node's output
        call = out.node.add(name=c.name, op=c.name, device=c.device)
        rewrite([_ref(*t) for t in c.args] + ["^" + m for m in c.control_inputs], call)
        call.attr["_XlaCompiledKernel"].b = True
        call.attr["_XlaNumConstantArgs"].i = c.num_constant_args
        call.attr["_XlaNumResourceArgs"].i = c.num_resource_args
        out.library.function.add().CopyFrom(c.fdef)
    _sort_control_inputs(out)
    return out


def _sort_control_inputs(gd: graph_pb2.GraphDef) -> None:
    """TF's ToGraphDef writes each node's control inputs sorted by name."""
    for nd in gd.node:
        data = [r for r in nd.input if not r.startswith("^")]
        ctrl = sorted(r for r in nd.input if r.startswith("^"))
        if list(nd.input) != data + ctrl:
            del nd.input[:]
            nd.input.extend(data + ctrl)


def _function_runtime_config() -> bytes:
    """The ConfigProto TF's function runtime hands BuildXlaOps (the eager context's config with
    function inlining on), serialized deterministically as TF does."""
    from tfxla_cluster.tf_compat import function_runtime_config

    cfg = function_runtime_config()
    cfg.graph_options.optimizer_options.do_function_inlining = True
    return cfg.SerializeToString(deterministic=True)


def tf_build_xla_ops_graph(encapsulated: graph_pb2.GraphDef, tfcs: list[TfCluster], *,
                           lazy_compilation: bool = True) -> graph_pb2.GraphDef:
    """``build_xla_ops``: each cluster call node becomes ``_XlaCompile`` + ``_XlaRun`` in a scope
    ``<cluster>_1`` (TF's scope uniquifies against the call node's own name). With lazy compilation (the
    CPU default) the compilation key goes through a Switch, outputs through ``_XlaMerge`` with a
    ``StatefulPartitionedCall`` of the cluster function as the fallback; without it the call node is
    simply replaced by ``_XlaRun``."""
    from tensorflow.core.framework import types_pb2

    out = graph_pb2.GraphDef()
    out.CopyFrom(encapsulated)
    for nd in out.node:
        nd.attr["_XlaHasReferenceVars"].b = False   # no reference variables in TF2 graphs
    config = _function_runtime_config() if lazy_compilation else b""
    for c in tfcs:
        names = {nd.name for nd in out.node}
        k = 1
        while f"{c.name}_{k}" in names:
            k += 1
        scope = f"{c.name}_{k}/"
        idx = next(i for i, nd in enumerate(out.node) if nd.name == c.name)
        call = out.node[idx]
        data_in = [r for r in call.input if not r.startswith("^")]
        ctrl_in = [r for r in call.input if r.startswith("^")]
        nconst, nres = c.num_constant_args, c.num_resource_args
        consts, nonconst, res = (data_in[:nconst], data_in[nconst:len(data_in) - nres],
                                 data_in[len(data_in) - nres:])
        in_types = [a.type for a in c.fdef.signature.input_arg]     # one per data input, in order
        func_attrs = dict(call.attr)
        out_types = [o.type for o in c.fdef.signature.output_arg]
        dev = call.device

        def add(name: str, op: str, inputs: list[str]):
            nd = out.node.add(name=scope + name, op=op, device=dev)
            nd.input.extend(inputs)
            return nd

        def set_func(attr, name=c.name):
            attr.func.name = name
            for key, value in func_attrs.items():
                attr.func.attr[key].CopyFrom(value)

        compile_ = add("xla_compile", "_XlaCompile", consts + nonconst + res + ctrl_in)
        compile_.attr["Tconstants"].list.type.extend(in_types[:nconst])
        compile_.attr["Targs"].list.type.extend(in_types[nconst:len(in_types) - nres])
        compile_.attr["Nresources"].i = nres
        compile_.attr["must_compile"].b = not lazy_compilation
        set_func(compile_.attr["function"])
        compile_.attr["_XlaHasReferenceVars"].b = False
        key_ref = scope + "xla_compile"
        if lazy_compilation:
            sw = add("predicated_compilation_key", "Switch", [key_ref, key_ref + ":1"])
            sw.attr["T"].type = types_pb2.DT_STRING
            key_ref = scope + "predicated_compilation_key:1"
        run = add("xla_run", "_XlaRun", nonconst + res + [key_ref])
        run.attr["Targs"].list.type.extend(in_types[nconst:])
        run.attr["Tresults"].list.type.extend(out_types)
        consumers = [nd for nd in out.node if any(r.lstrip("^").partition(":")[0] == c.name for r in nd.input)]
        if not lazy_compilation:
            # MoveOutgoingEdges: every consumer now reads _XlaRun; the call node goes.
            for nd in consumers:
                _retarget(nd, c.name, scope + "xla_run", lambda i: scope + "xla_run" + (f":{i}" if i else ""))
            del out.node[idx]
            continue
        ctrl_consumers = [nd for nd in consumers if "^" + c.name in nd.input]
        pcall_name = scope + "stateful_partitioned_call"
        data_as_ctrl = "data_as_ctrl"
        if ctrl_consumers:
            # MergeOutgoingControlEdges: control successors wait for whichever of the two ran.
            a = add("ctrl_as_data", "Const", ["^" + pcall_name])
            b = add("ctrl_as_data_1", "Const", ["^" + scope + "xla_run"])
            for const in (a, b):
                const.attr["dtype"].type = types_pb2.DT_INT32
                const.attr["value"].tensor.dtype = types_pb2.DT_INT32
                const.attr["value"].tensor.tensor_shape.dim.add(size=0)
            merge = add("ctrl_merge", "Merge", [a.name, b.name])
            merge.attr["N"].i = 2
            merge.attr["T"].type = types_pb2.DT_INT32
            ident = add("data_as_ctrl", "Identity", [merge.name])
            ident.attr["T"].type = types_pb2.DT_INT32
            for nd in ctrl_consumers:
                refs = [r for r in nd.input if r != "^" + c.name]
                del nd.input[:]
                nd.input.extend(refs + ["^" + ident.name])
            data_as_ctrl = "data_as_ctrl_1"
        merged: dict[int, str] = {}
        for nd in consumers:       # MergeOutgoingDataEdges: one _XlaMerge per used output
            for j, r in enumerate(nd.input):
                base, _, i = r.partition(":")
                if base != c.name:
                    continue
                oidx = int(i or 0)
                if oidx not in merged:
                    m = add(f"merge_oidx_{oidx}", "_XlaMerge", [_ref(pcall_name, oidx), _ref(scope + "xla_run", oidx)])
                    m.attr["T"].type = out_types[oidx]
                    merged[oidx] = m.name
                nd.input[j] = merged[oidx]
        inv = add(data_as_ctrl, "Identity", [scope + "predicated_compilation_key"])
        inv.attr["T"].type = types_pb2.DT_STRING
        # ReplaceFunctionCallWithPartitionedCall: the fallback runs the cluster function on TF's kernels.
        pcall = add("stateful_partitioned_call", "StatefulPartitionedCall", data_in + ["^" + inv.name])
        pcall.attr["Tin"].list.type.extend(in_types)
        pcall.attr["Tout"].list.type.extend(out_types)
        set_func(pcall.attr["f"])
        pcall.attr["config"].s = b""
        pcall.attr["config_proto"].s = config
        pcall.attr["executor_type"].s = b""
        # PredicateInt32Inputs: int32 inputs (device memory on CPU) pass an IdentityN that waits for the
        # inverse predicate, so the fallback's int32 inputs are only "live" when it runs.
        int32 = [j for j, t in enumerate(in_types) if t == types_pb2.DT_INT32]
        if int32:
            idn = add("int32_id_n", "IdentityN", [data_in[j] for j in int32] + ["^" + inv.name])
            idn.attr["T"].list.type.extend(types_pb2.DT_INT32 for _ in int32)
            for k, j in enumerate(int32):
                pcall.input[j] = _ref(idn.name, k)
        del out.node[idx]
    _sort_control_inputs(out)
    return out


def _retarget(nd, old: str, new_ctrl: str, new_data) -> None:
    refs = list(nd.input)
    del nd.input[:]
    for r in refs:
        base, _, i = r.lstrip("^").partition(":")
        if base != old:
            nd.input.append(r)
        elif r.startswith("^"):
            nd.input.append("^" + new_ctrl)
        else:
            nd.input.append(new_data(int(i or 0)))


def write_tf_dumps(graph: Graph, boundaries: Iterable[ClusterBoundary], flags=None) -> list[str]:
    """TF's dumps of the passes after clustering, under TF's triggers (see :mod:`tfxla_cluster.jit.dumps`):
    ``before_increase_dynamism_for_auto_jit_pass`` (``--tf_xla_clustering_debug``; we do not run that
    pass's Slice rewrite), then with ``VLOG_IS_ON(1)`` in encapsulate_subgraphs_pass ``encapsulate_subgraphs_before``,
    per cluster ``encapsulate_subgraphs_subgraph_<c>``, ``encapsulate_fdef_graph_<c>``, ``encapsulate_fdef_<c>``,
    then ``encapsulate_subgraphs_after``; with it in build_xla_ops_pass, ``build_xla_ops``. Returns the paths.

    The same environment switches TF's own C++ passes on in this process too, and they run on every
    graph TF instantiates (our rewritten graph included) with their own per-name counter: their files
    and ours share names, and the later write of a name wins. Ours are written when the function is
    compiled, before TF instantiates the rewritten graph."""
    from tfxla_cluster.jit import dumps

    paths = []
    dynamism_on, enc_on, build_on = dumps.after_clustering_triggers(flags)
    if dynamism_on:
        paths.append(dumps.dump_graph("before_increase_dynamism_for_auto_jit_pass", graph.graph_def))
    if not (enc_on or build_on):
        return paths
    tfcs = tf_clusters(boundaries)
    after = tf_encapsulated_graph(graph, tfcs)
    if enc_on:
        paths.append(dumps.dump_graph("encapsulate_subgraphs_before", graph.graph_def))
        for c in tfcs:
            paths.append(dumps.dump_graph(f"encapsulate_subgraphs_subgraph_{c.name}", c.subgraph))
            paths.append(dumps.dump_graph(f"encapsulate_fdef_graph_{c.name}", c.optimized))
            paths.append(dumps.dump_graph(f"encapsulate_fdef_{c.name}", c.fdef))
        paths.append(dumps.dump_graph("encapsulate_subgraphs_after", after))
    if build_on:
        lazy = flags.tf_xla_enable_lazy_compilation if flags is not None else True
        paths.append(dumps.dump_graph("build_xla_ops", tf_build_xla_ops_graph(after, tfcs, lazy_compilation=lazy)))
    return paths
