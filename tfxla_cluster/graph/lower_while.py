"""TF's PRE_PLACEMENT lowering of functional ``While`` loops, done before grappler as TF's runtime does.

Stage: import, between instantiation and grappler. TF's function runtime lowers ``While`` (marked
``_lower_using_switch_merge``) with ``LowerFunctionalOpsPass`` in the PRE_PLACEMENT pass group, *before*
grappler; through ``tf_optimizer.OptimizeGraph`` the loop is instead lowered by grappler's function
optimizer, which first adds "strict input semantics" control edges (a ``LoopControlInputs`` NoOp, an
``input_control_node`` gating the body): other nodes, other ``/_N`` numbers, other clusters. Given the
lowered graph TF's pass produces, our grappler call gives TF's post-grappler graph node for node.

Guarantee: for a graph whose functional control flow is only ``While`` loops whose cond/body hold no
function calls nor functional control flow, :func:`lower_while_loops` returns the graph TF's
PRE_PLACEMENT pass group gives (names from one ``<prefix>/_<n>`` counter as ``Graph::NewName``, nodes in
TF's node-id order, bodies inlined as ``Func/<call>/input/_n`` …); other graphs are returned unchanged
(``None``) and left to grappler. Checked against TF's ``after_opt_group_pre_placement`` dump.
"""
from __future__ import annotations

import heapq

from tensorflow.core.framework import graph_pb2, node_def_pb2, types_pb2

from tfxla_cluster.graph.function import CALL_OPS, callee_name, find_function, instantiate
from tfxla_cluster.graph.opdefs import ARG_OP, RETVAL_OP

WHILE_OPS = ("While", "StatelessWhile")
_FUNCTIONAL = ("If", "StatelessIf", "Case", "StatelessCase", *WHILE_OPS, *CALL_OPS)


def _lowered(nd: node_def_pb2.NodeDef) -> bool:
    attr = nd.attr.get("_lower_using_switch_merge")
    return nd.op in WHILE_OPS and attr is not None and attr.b


def _simple_function(library, name: str) -> bool:
    fdef = find_function(library, name)
    return fdef is not None and not any(
        n.op in _FUNCTIONAL or callee_name(n, library) for n in fdef.node_def)


def applies(graph_def: graph_pb2.GraphDef) -> bool:
    """Whether :func:`lower_while_loops` reproduces TF's lowering of this graph (module docstring)."""
    lib = graph_def.library
    whiles = [n for n in graph_def.node if _lowered(n)]
    if not whiles:
        return False
    if any((n.op in _FUNCTIONAL and not _lowered(n)) or (n.op not in _FUNCTIONAL and callee_name(n, lib))
           for n in graph_def.node):
        return False
    return all(_simple_function(lib, w.attr[k].func.name) for w in whiles for k in ("cond", "body"))


def topological_by_index(graph_def: graph_pb2.GraphDef) -> list[node_def_pb2.NodeDef]:
    """Nodes in the order TF's GraphConstructor adds them (so their node ids): a node once all its
    inputs are in, the lowest GraphDef index first (NextIteration back edges do not wait)."""
    index = {n.name: i for i, n in enumerate(graph_def.node)}
    pending = [0] * len(graph_def.node)
    outs: list[list[int]] = [[] for _ in graph_def.node]
    for i, n in enumerate(graph_def.node):
        if n.op in ("Merge", "RefMerge"):
            srcs = {index[r.lstrip("^").split(":")[0]] for r in n.input
                    if graph_def.node[index[r.lstrip("^").split(":")[0]]].op != "NextIteration"}
        else:
            srcs = {index[r.lstrip("^").split(":")[0]] for r in n.input}
        pending[i] = len(srcs)
        for s in srcs:
            outs[s].append(i)
    ready = [i for i, p in enumerate(pending) if p == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(graph_def.node[i])
        for j in outs[i]:
            pending[j] -= 1
            if pending[j] == 0:
                heapq.heappush(ready, j)
    return order


class _Lowering:
    def __init__(self, graph_def: graph_pb2.GraphDef) -> None:
        self.gd = graph_def
        self.counter = 0
        self.nodes: list[node_def_pb2.NodeDef] = []   # in node-id order
        self.removed: set[str] = set()
        self.rename: dict[str, str] = {}   # "node:i" / "^node" of removed nodes -> replacement

    def new_name(self, prefix: str) -> str:
        name = f"{prefix}/_{self.counter}"
        self.counter += 1
        return name

    def add(self, name: str, op: str, inputs: list[str], device: str = "", **attrs) -> node_def_pb2.NodeDef:
        nd = node_def_pb2.NodeDef(name=name, op=op, device=device)
        nd.input.extend(inputs)
        for key, value in attrs.items():
            if isinstance(value, bool):
                nd.attr[key].b = value
            elif isinstance(value, int) and key in ("T",):
                nd.attr[key].type = value
            elif isinstance(value, int):
                nd.attr[key].i = value
            elif isinstance(value, bytes):
                nd.attr[key].s = value
        self.nodes.append(nd)
        return nd

    # ------------------------------------------------------------------ While
    def lower_while(self, w: node_def_pb2.NodeDef) -> list[node_def_pb2.NodeDef]:
        """Lower ``w``; returns the cond and body call nodes still to inline (in that order)."""
        lib = self.gd.library
        types = list(w.attr["T"].list.type)
        data = [r for r in w.input if not r.startswith("^")]
        controls = [r for r in w.input if r.startswith("^")]
        body = find_function(lib, w.attr["body"].func.name)
        body_arg = {a.name: i for i, a in enumerate(body.signature.input_arg)}
        # A loop-invariant resource (the body returns its own argument) enters as a constant.
        constant = [t == types_pb2.DT_RESOURCE and body_arg.get(body.ret[body.signature.output_arg[i].name]) == i
                    for i, t in enumerate(types)]
        name, par = w.name, w.attr["parallel_iterations"].i
        cond_call = self.new_name(f"{name}/cond")
        body_call = self.new_name(f"{name}/body")
        enters = [self.add(self.new_name(f"{name}/enter"), "Enter", [r], T=types[i], frame_name=name.encode(),
                           is_constant=constant[i], parallel_iterations=par)
                  for i, r in enumerate(data)]
        if controls:
            gate = self.add(self.new_name(f"{name}/LoopControlInputs"), "NoOp", controls)
            for e in enters:
                e.input.append("^" + gate.name)
        loop = [i for i in range(len(data)) if not constant[i]]
        merges = {i: self.add(self.new_name(f"{name}/merge"), "Merge", [enters[i].name], T=types[i], N=2)
                  for i in loop}
        cond_inputs = [merges[i].name if i in merges else enters[i].name for i in range(len(data))]
        cond = node_def_pb2.NodeDef(name=cond_call, op="PartitionedCall")
        cond.input.extend(cond_inputs + ["^" + merges[loop[0]].name])
        cond.attr["f"].CopyFrom(w.attr["cond"])
        loop_cond = self.add(self.new_name(f"{name}/LoopCond"), "LoopCond", [f"{cond_call}:0"])
        switches = {i: self.add(self.new_name(f"{name}/{data[i].split(':')[0]}_switch"), "Switch",
                                [merges[i].name, loop_cond.name], T=types[i]) for i in loop}
        body_control = self.add(self.new_name(f"{name}/loop_body_control"), "Identity",
                                [f"{switches[loop[0]].name}:1"], T=types[loop[0]])
        call = node_def_pb2.NodeDef(name=body_call, op="PartitionedCall")
        call.input.extend([f"{switches[i].name}:1" if i in switches else enters[i].name for i in range(len(data))]
                          + ["^" + body_control.name])
        call.attr["f"].CopyFrom(w.attr["body"])
        exits = {i: self.add(self.new_name(f"{name}/exit"), "Exit", [switches[i].name], T=types[i]) for i in loop}
        executed = self.add(self.new_name(f"{name}/LoopExecuted"), "NoOp", ["^" + exits[i].name for i in loop])
        self.add(name, "NoOp", ["^" + executed.name])   # the While's name stays, as a control target
        for i in loop:
            nxt = self.add(self.new_name(f"{name}/next_iteration"), "NextIteration",
                           [f"{body_call}:{i}", "^" + body_call], T=types[i])
            merges[i].input.append(nxt.name)
        for i in range(len(data)):
            self.rename[f"{name}:{i}"] = exits[i].name if i in exits else data[i]
        self.rename["^" + name] = "^" + executed.name
        return [cond, call]

    # ------------------------------------------------------------------ calls
    def inline(self, caller: node_def_pb2.NodeDef) -> None:
        """TF's InlineFunctionBody of a multi-device call, the caller kept as a NoOp control target."""
        lib = self.gd.library
        fdef = find_function(lib, caller.attr["f"].func.name)
        body = instantiate(fdef, lib)
        data = [r for r in caller.input if not r.startswith("^")]
        controls = [r for r in caller.input if r.startswith("^")]
        prefix = f"Func/{caller.name}"
        gate = self.add(self.new_name(f"{prefix}/input_control_node"), "NoOp", controls) if controls else None
        gate_ref = ["^" + gate.name] if gate is not None else []
        args = {}
        for bn in body.node:
            if bn.op == ARG_OP:
                i = bn.attr["index"].i
                args[bn.name] = self.add(self.new_name(f"{prefix}/input"), "Identity", [data[i]] + gate_ref,
                                         T=bn.attr["T"].type).name
        retvals = []
        for bn in topological_by_index(body):
            if bn.op == ARG_OP:
                continue
            if bn.op == RETVAL_OP:
                retvals.append(bn)
                continue
            nd = node_def_pb2.NodeDef()
            nd.CopyFrom(bn)
            nd.name = f"{caller.name}/{bn.name}"
            del nd.input[:]
            for ref in bn.input:
                ctrl, src = ref.startswith("^"), ref.lstrip("^")
                if src.partition(":")[0] in args:
                    nd.input.append(("^" if ctrl else "") + args[src.partition(":")[0]])
                else:
                    nd.input.append(("^" if ctrl else "") + f"{caller.name}/{src}")
            if not bn.input:
                nd.input.extend(gate_ref)
            self.nodes.append(nd)
        outputs = []
        for bn in sorted(retvals, key=lambda n: n.attr["index"].i):
            src = bn.input[0]
            node = src.split(":")[0]
            ref = args[node] if node in args else f"{caller.name}/{src}"
            outputs.append(self.add(self.new_name(f"{prefix}/output"), "Identity", [ref], T=bn.attr["T"].type).name)
        # The function's control outputs, in its control_ret map's (sorted) key order.
        ctrl_outs = ["^" + f"{caller.name}/{fdef.control_ret[k]}" for k in sorted(fdef.control_ret)] or gate_ref
        done = self.add(self.new_name(f"{prefix}/output_control_node"), "NoOp", ctrl_outs)
        self.add(caller.name, "NoOp", ["^" + done.name])
        for i, out in enumerate(outputs):
            self.rename[f"{caller.name}:{i}"] = out
        self.rename["^" + caller.name] = "^" + done.name

    def run(self) -> graph_pb2.GraphDef:
        kept = []
        calls = []
        for nd in self.gd.node:
            if _lowered(nd):
                kept.append(None)
                calls += self.lower_while(nd)
            else:
                copy = node_def_pb2.NodeDef()
                copy.CopyFrom(nd)
                kept.append(copy)
        # TF's pass visits nodes in id order: every While of the graph is lowered before the cond/body
        # calls the lowering appended are reached and inlined, in the order they were made.
        for call in calls:
            self.inline(call)
        out = graph_pb2.GraphDef()
        out.versions.CopyFrom(self.gd.versions)
        out.library.CopyFrom(self.gd.library)
        out.node.extend([n for n in kept if n is not None] + self.nodes)
        for nd in out.node:
            refs = list(nd.input)
            del nd.input[:]
            for ref in refs:
                nd.input.append(self._resolve(ref))
        return out

    def _resolve(self, ref: str) -> str:
        seen = 0
        while seen < 64:   # a renamed tensor may itself be a renamed node's (a call output inside a loop)
            if ref.startswith("^"):
                new = self.rename.get(ref, ref)
            else:
                node, _, port = ref.partition(":")
                new = self.rename.get(f"{node}:{port or 0}", ref)
            if new == ref:
                return ref
            ref, seen = new, seen + 1
        return ref


def lower_while_loops(graph_def: graph_pb2.GraphDef) -> graph_pb2.GraphDef | None:
    """TF's PRE_PLACEMENT lowering of ``graph_def``'s While loops, or None where it does not apply."""
    if not applies(graph_def):
        return None
    # TF's function graph holds the FunctionDef's nodes in GraphConstructor order (its node ids).
    ordered = graph_pb2.GraphDef()
    ordered.CopyFrom(graph_def)
    del ordered.node[:]
    ordered.node.extend(topological_by_index(graph_def))
    return _Lowering(ordered).run()
