"""Encapsulation: each cluster of a marked graph becomes one launch node TF can run.

Stage: after clustering (TF's EncapsulateSubgraphs + BuildXlaOps, passes 50/60). For every cluster the
rewritten GraphDef has one node named after the cluster — a ``TfxlaLaunch`` (the native launch op of
:mod:`.native`) when ``register`` returns a :class:`NativeLaunch`, else an ``EagerPyFunc`` (TF's own
py-func mechanism); TF imports and runs the graph with its own kernels everywhere else — whose inputs are
the cluster's external data inputs in a fixed order (:attr:`ClusterSignature.inputs`), whose outputs
are the cluster tensors used outside it, and which carries the control edges of its members:

* control inputs of members from outside become control inputs of the launch node;
* outside nodes that waited on a member wait on the launch node;
* references ``member:i`` outside the cluster become ``<cluster>:k``.

Attributes ``_tfxla_cluster`` (the cluster name) and ``_tfxla_launch`` (the launcher's token or key) name what
the node runs; every node gets ``_XlaCompile=false`` so that TF's own auto-clustering, if enabled in
the process, leaves the rewritten graph alone. The Python callable behind the token is a :class:`Launcher` (see :mod:`.launcher`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from tensorflow.core.framework import graph_pb2

from tfxla_cluster.graph.graph import Graph
from tfxla_cluster.jit import dumps
from tfxla_cluster.tfops.cluster_boundary import ClusterBoundary, cluster_boundaries

Tensor = tuple[str, int]


@dataclass(eq=False)
class ClusterSignature:
    """One cluster's launch node: its :class:`~tfxla_cluster.tfops.cluster_boundary.ClusterBoundary` in the
    launch node's order (inputs in edge order, outputs by producer id and slot)."""

    boundary: ClusterBoundary
    control_node: str = ""                # what waits on a member waits on this node (default: the launch)

    @property
    def name(self) -> str:
        return self.boundary.name

    @property
    def members(self) -> list[str]:
        return self.boundary.members

    @property
    def inputs(self) -> list[Tensor]:
        """External producer tensors (data edges into the cluster)."""
        return self.boundary.inputs

    @property
    def outputs(self) -> list[Tensor]:
        """Member tensors consumed outside."""
        return self.boundary.launch_outputs

    @property
    def input_dtypes(self) -> list[int]:
        return self.boundary.input_dtypes

    @property
    def output_dtypes(self) -> list[int]:
        return self.boundary.launch_output_dtypes

    @property
    def control_inputs(self) -> list[str]:
        return self.boundary.control_inputs


@dataclass(frozen=True)
class NativeLaunch:
    """What ``register`` returns for a cluster bound to the native ``TfxlaLaunch`` op: its ``key`` attr,
    and for resource variables how they move out of the op (the kernel sees values, never handles):

    * ``reads``: input position -> variable dtype; a ``ReadVariableOp`` (``<cluster>/read_<p>``, with the
      launch node's control inputs) feeds the value in place of the handle;
    * ``written``: input positions whose variable the cluster may assign; the op's extra outputs (after
      the value outputs, in this order) are their final values, stored by ``AssignVariableOp`` nodes
      (``<cluster>/assign_<p>``); whatever waited on a member waits on ``<cluster>/done``, a ``NoOp``
      after the launch and the assignments — as XlaLaunch reads variables before and writes them after;
    * ``passthrough``: output index -> input position, resource outputs that are an input handle: their
      consumers take the handle itself.
    """

    key: str
    reads: dict = field(default_factory=dict)
    written: tuple = ()
    passthrough: dict = field(default_factory=dict)


def cluster_signatures(graph: Graph, clusters: dict[str, list[str]]) -> list[ClusterSignature]:
    """The launch-node view of every cluster's boundary (computed once, in one walk over the edges)."""
    return [ClusterSignature(b) for b in cluster_boundaries(graph, clusters).values()]


def encapsulate(graph: Graph, clusters: dict[str, list[str]],
                register: Callable[[ClusterSignature], "bytes | NativeLaunch"], *,
                flags=None) -> tuple[graph_pb2.GraphDef, list[ClusterSignature]]:
    """Rewrite ``graph`` with one launch node per cluster. ``register(signature)`` returns the
    EagerPyFunc token of the callable that runs the cluster, or a :class:`NativeLaunch`. ``flags`` (a :class:`~tfxla_cluster.flags.Flags`)
    are the flags in effect for the function being rewritten (debug dumps follow them)."""
    sigs = cluster_signatures(graph, clusters)
    if any(dumps.after_clustering_triggers(flags)):   # (the dump writer is imported only to write)
        from tfxla_cluster.jit.build_xla_ops_dump import write_tf_dumps

        write_tf_dumps(graph, [s.boundary for s in sigs], flags)
    member_of = {m: s for s in sigs for m in s.members}
    handles = {s.name: register(s) for s in sigs}
    out_index: dict[str, dict[Tensor, int]] = {}
    passthrough: dict[str, dict[Tensor, Tensor]] = {}   # resource output -> the input handle tensor
    for s in sigs:
        h = handles[s.name]
        through = h.passthrough if isinstance(h, NativeLaunch) else {}
        kept = [t for k, t in enumerate(s.outputs) if k not in through]
        out_index[s.name] = {t: k for k, t in enumerate(kept)}
        passthrough[s.name] = {s.outputs[k]: s.inputs[p] for k, p in through.items()}
        s.control_node = f"{s.name}/done" if isinstance(h, NativeLaunch) and h.written else s.name
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph.graph_def.versions)
    out.library.CopyFrom(graph.graph_def.library)
    emitted: set[str] = set()

    def rewrite_ref(ref: str) -> str | None:
        ctrl = ref.startswith("^")
        name, _, idx = ref.lstrip("^").partition(":")
        sig = member_of.get(name)
        if sig is None:
            return ref
        if ctrl:
            return "^" + sig.control_node
        t = (name, int(idx or 0))
        if t in passthrough[sig.name]:
            src = passthrough[sig.name][t]
            return rewrite_ref(f"{src[0]}:{src[1]}")
        return f"{sig.name}:{out_index[sig.name][t]}"

    def rewrite_colocation(loc: str) -> str:
        name = loc.removeprefix("loc:@")
        sig = member_of.get(name)
        return f"loc:@{sig.name}" if loc.startswith("loc:@") and sig is not None else loc

    for node in graph.op_nodes():
        sig = member_of.get(node.name)
        if sig is not None:
            if sig.name in emitted:
                continue
            emitted.add(sig.name)
            handle = handles[sig.name]
            native = isinstance(handle, NativeLaunch)
            launch = out.node.add(name=sig.name, op="TfxlaLaunch" if native else "EagerPyFunc",
                                  device=node.assigned_device)
            inputs = [rewrite_ref(f"{n}:{i}") for n, i in sig.inputs]
            control = list(dict.fromkeys(rewrite_ref("^" + c) for c in sig.control_inputs))
            if native:
                _emit_variable_io(out, sig, handle, launch, inputs, control)
                launch.attr["key"].s = handle.key.encode()
            else:
                launch.attr["token"].s = handle
                launch.attr["is_async"].b = False
            launch.input.extend(inputs + control)
            reads = handle.reads if native else {}
            through = handle.passthrough if native else {}
            launch.attr["Tin"].list.type.extend(reads.get(p, dt) for p, dt in enumerate(sig.input_dtypes))
            launch.attr["Tout"].list.type.extend(dt for k, dt in enumerate(sig.output_dtypes) if k not in through)
            if native:
                launch.attr["Tout"].list.type.extend(reads[p] for p in handle.written)
            launch.attr["_tfxla_cluster"].s = sig.name.encode()
            launch.attr["_tfxla_launch"].s = launch.attr["key" if native else "token"].s
            continue
        nd = out.node.add()
        nd.CopyFrom(node.node_def)
        del nd.input[:]
        refs = [rewrite_ref(r) for r in node.node_def.input]
        # Several members may have been control inputs: one control edge on the launch node is enough.
        # Data inputs stay as they are, duplicates included (Switch(pred, pred) has two inputs).
        data = [r for r in refs if not r.startswith("^")]
        nd.input.extend(data + list(dict.fromkeys(r for r in refs if r.startswith("^"))))
        if "_class" in nd.attr:
            # Colocation with a member (``loc:@member``) becomes colocation with its launch node:
            # the member no longer exists in the rewritten graph, and TF rejects unknown names.
            locs = [rewrite_colocation(v.decode()) for v in nd.attr["_class"].list.s]
            del nd.attr["_class"].list.s[:]
            nd.attr["_class"].list.s.extend(v.encode() for v in dict.fromkeys(locs))
    from tfxla_cluster.flags import Flags

    flags = Flags.resolve(flags)
    if sigs and (flags.tf_xla_check_cluster_input_numerics or flags.tf_xla_check_cluster_output_numerics
                 or flags.tf_xla_print_cluster_outputs):
        _add_debugging_ops(out, sigs, flags)
    for nd in out.node:
        # TF's own auto-clustering must leave the rewritten graph alone (it would try to compile our
        # launch nodes, or cluster what we left to TF on purpose).
        nd.attr["_XlaCompile"].b = False
    return out, sigs


def _emit_variable_io(out: graph_pb2.GraphDef, sig: ClusterSignature, handle: NativeLaunch, launch,
                      inputs: list[str], control: list[str]) -> None:
    """The ReadVariableOp / AssignVariableOp / NoOp nodes around a native launch (see NativeLaunch);
    ``inputs`` (the launch node's data inputs) get the read values in place of the handles."""
    values = len(sig.outputs) - len(handle.passthrough)
    handle_refs = {p: inputs[p] for p in handle.reads}
    # A read waits for everything the launch waits for (its control inputs and the producers of its
    # other inputs), so it sees the variable when the Python launch, reading inside the node, did.
    after = list(dict.fromkeys([*control, *("^" + r.split(":")[0] for p, r in enumerate(inputs)
                                            if p not in handle.reads)]))
    for p, dtype in handle.reads.items():
        read = out.node.add(name=f"{sig.name}/read_{p}", op="ReadVariableOp", device=launch.device,
                            input=[inputs[p], *after])
        read.attr["dtype"].type = dtype
        inputs[p] = read.name
    assigns = []
    for j, p in enumerate(handle.written):
        assign = out.node.add(name=f"{sig.name}/assign_{p}", op="AssignVariableOp", device=launch.device,
                              input=[handle_refs[p], f"{sig.name}:{values + j}"])
        assign.attr["dtype"].type = handle.reads[p]
        assigns.append(assign.name)
    if assigns:
        out.node.add(name=sig.control_node, op="NoOp", device=launch.device,
                     input=["^" + sig.name, *("^" + a for a in assigns)])


# DataTypeIsFloating: what TF's debugging CheckNumerics ops are put on (the types CheckNumerics takes).
_FLOATING = frozenset({1, 2, 14, 19})     # DT_FLOAT, DT_DOUBLE, DT_BFLOAT16, DT_HALF


def _add_debugging_ops(out: graph_pb2.GraphDef, sigs: list[ClusterSignature], flags) -> None:
    """BuildXlaOps' debugging options on the launch nodes, with TF's node names and messages:

    * ``--tf_xla_check_cluster_input_numerics``: a ``CheckNumerics`` on every floating-point
      non-constant input (``<scope>/check_input_<i>``, ``i`` counting TF's non-constant arguments), so a
      NaN/Inf fed to a cluster fails the step with "CheckNumerics failed for input i(src:k) into c";
    * ``--tf_xla_print_cluster_outputs``: a ``Print`` of every used output (``<scope>/print_<o>``);
    * ``--tf_xla_check_cluster_output_numerics``: a ``CheckNumerics`` on every floating-point used
      output (``<scope>/check_output_<o>``), "CheckNumerics failed for output o(...) from cluster c".

    ``<scope>`` is TF's build_xla_ops scope ``<cluster>_1`` (uniquified against the graph's names), whose
    ``xla_run`` node is what TF's messages name as the producer; ``o`` is TF's result index.
    """
    from tensorflow.core.framework import types_pb2

    from tfxla_cluster.jit.build_xla_ops_dump import tf_clusters

    tfcs = {c.name: c for c in tf_clusters(s.boundary for s in sigs)}
    names = {nd.name for nd in out.node}
    by_name = {nd.name: nd for nd in out.node}
    for sig in sigs:
        c = tfcs[sig.name]
        k = 1
        while f"{sig.name}_{k}" in names:
            k += 1
        scope = f"{sig.name}_{k}/"
        launch = by_name[sig.name]
        device = launch.device
        if flags.tf_xla_check_cluster_input_numerics:
            nonconst = c.args[c.num_constant_args:len(c.args) - c.num_resource_args]
            for idx, t in enumerate(nonconst):
                position = sig.inputs.index(t)
                dtype = sig.input_dtypes[position]
                if dtype not in _FLOATING:
                    continue
                check = out.node.add(name=f"{scope}check_input_{idx}", op="CheckNumerics", device=device)
                check.input.append(launch.input[position])
                check.attr["T"].type = dtype
                check.attr["message"].s = (f"CheckNumerics failed for input {idx}({t[0]}:{t[1]}) into "
                                           f"{sig.name}").encode()
                launch.input[position] = check.name
        replacement: dict[str, str] = {}
        for k_out, (t, dtype) in enumerate(zip(sig.outputs, sig.output_dtypes)):
            if dtype == types_pb2.DT_RESOURCE:
                continue
            oidx = c.results.index(t) if t in c.results else k_out
            current, shown = f"{sig.name}:{k_out}", f"{scope}xla_run:{oidx}"
            if flags.tf_xla_print_cluster_outputs:
                pr = out.node.add(name=f"{scope}print_{oidx}", op="Print", device=device,
                                  input=[current, current])
                pr.attr["T"].type = dtype
                pr.attr["U"].list.type.append(dtype)
                pr.attr["message"].s = f"output {oidx} from {sig.name} is ".encode()
                pr.attr["first_n"].i = 1000
                pr.attr["summarize"].i = -1
                current, shown = pr.name, f"{pr.name}:0"
            if flags.tf_xla_check_cluster_output_numerics and dtype in _FLOATING:
                check = out.node.add(name=f"{scope}check_output_{oidx}", op="CheckNumerics", device=device,
                                     input=[current])
                check.attr["T"].type = dtype
                check.attr["message"].s = (f"CheckNumerics failed for output {oidx}({shown}) from cluster "
                                           f"{sig.name}").encode()
                current = check.name
            if current != f"{sig.name}:{k_out}":
                replacement[f"{sig.name}:{k_out}"] = current
        if not replacement:
            continue
        for nd in out.node:
            if nd.name.startswith(scope):       # the chain itself reads the launch node's outputs
                continue
            for j, ref in enumerate(nd.input):
                if ref in replacement:
                    nd.input[j] = replacement[ref]
