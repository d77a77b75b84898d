"""TF's PRE_PLACEMENT lowering of functional control flow and function calls, done before grappler.

Stage: import, between instantiation and grappler. TF's function runtime runs ``LowerFunctionalOpsPass``
(lower_functional_ops.cc) in its PRE_PLACEMENT pass group, *before* grappler. It visits the graph's
nodes in node-id order — nodes it adds get new, higher ids, so what a rewrite adds is visited later
and nested constructs are lowered as they appear — and:

* inlines every function call (``PartitionedCall``/``StatefulPartitionedCall``, and the branch/body
  calls its own rewrites create) with ``InlineFunctionBody``: ``Func/<call>/input/_n`` Identity nodes,
  body nodes ``<call>/<node>``, ``Func/<call>/output/_n``, ``Func/<call>/output_control_node/_n`` and a
  NoOp keeping the caller's name; calls TF will not inline stay calls (``_noinline``; a function
  ``_XlaMustCompile=true``, which XLA compiles as a whole: checked against TF's dump);
* lowers ``If``/``StatelessIf`` (lower_if_op.cc), ``Case``/``StatelessCase`` (lower_case_op.cc) and
  ``While``/``StatelessWhile`` (lower_while_op.cc) whose ``_lower_using_switch_merge`` attribute is
  true to Switch/Merge (``_SwitchN`` for Case) and Enter/Exit/NextIteration frames around one call per
  branch/cond/body. A function graph has ``_Arg``/``_Retval`` nodes, so the lowered node's name stays
  as a NoOp control target (never the fetchable IdentityN);
* skips nodes marked for XLA (``_xla_compile_id``) or TPU (``_tpu_replicate``) compilation.

New names come from one graph-wide ``<prefix>/_<n>`` counter (``Graph::NewName``). Through
``tf_optimizer.OptimizeGraph`` grappler's function optimizer would do this itself, differently
(strict-input control edges, ``ConstantFoldingCtrl`` anchors): other nodes, other clusters. Given the
lowered graph TF's pass produces, our grappler call gives TF's post-grappler graph node for node.

Guarantee: :func:`lower_functional_ops` returns the graph TF's PRE_PLACEMENT pass group gives — names,
ops, inputs and node order as TF's ``after_opt_group_pre_placement`` dump (tests/graph/
test_lower_functional_tf.py checks it live on loops, conds, cases, nested calls and their nestings).
"""
from __future__ import annotations

import heapq

from tensorflow.core.framework import graph_pb2, node_def_pb2, types_pb2

from tfxla_cluster.graph.function import CALL_OPS, _keeps_call, instantiate
from tfxla_cluster.graph.opdefs import ARG_OP, RETVAL_OP

WHILE_OPS = ("While", "StatelessWhile")
IF_OPS = ("If", "StatelessIf")
CASE_OPS = ("Case", "StatelessCase")
LOWER_ATTR = "_lower_using_switch_merge"
MULTI_DEVICE_ATTR = "_lower_as_multi_device_function"


def _flag(nd: node_def_pb2.NodeDef, name: str) -> bool:
    attr = nd.attr.get(name)
    return attr is not None and attr.b


def _inlined_callee(nd: node_def_pb2.NodeDef, functions: dict):
    """The FunctionDef TF's pass inlines for node ``nd`` (a (Stateful)PartitionedCall or a node whose op
    is a library function), or None: not a call, or one TF keeps (``_noinline``, ``_XlaMustCompile``)."""
    fname = nd.attr["f"].func.name if nd.op in CALL_OPS and "f" in nd.attr else nd.op
    fdef = functions.get(fname)
    if fdef is None or _keeps_call(fdef, nd):
        return None
    return fdef


def _lowered(nd: node_def_pb2.NodeDef) -> bool:
    return _flag(nd, LOWER_ATTR) and nd.op in (*IF_OPS, *CASE_OPS, *WHILE_OPS)


def _marked_for_compilation(nd: node_def_pb2.NodeDef) -> bool:
    """TF's pass leaves nodes an XLA/TPU compilation already owns (non-empty string attributes)."""
    return any(k in nd.attr and nd.attr[k].s for k in ("_xla_compile_id", "_tpu_replicate"))


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
    """One run of TF's pass over a graph whose nodes are in node-id order (``slots``; a rewritten node's
    slot becomes None, what a rewrite adds is appended and visited in turn)."""

    def __init__(self, graph_def: graph_pb2.GraphDef) -> None:
        self.gd = graph_def
        self.lib = graph_def.library
        self.functions = {f.signature.name: f for f in self.lib.function}
        self.counter = 0
        self.slots: list[node_def_pb2.NodeDef | None] = []
        self.by_name: dict[str, node_def_pb2.NodeDef] = {}
        for nd in graph_def.node:
            copy = node_def_pb2.NodeDef()
            copy.CopyFrom(nd)
            self.append(copy)
        self.rename: dict[str, str] = {}   # "node:i" / "^node" of rewritten nodes -> replacement

    def append(self, nd: node_def_pb2.NodeDef) -> None:
        self.slots.append(nd)
        self.by_name[nd.name] = nd

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
            elif isinstance(value, int) and key == "T":
                nd.attr[key].type = value
            elif isinstance(value, int):
                nd.attr[key].i = value
            elif isinstance(value, bytes):
                nd.attr[key].s = value
            elif isinstance(value, list):   # _class
                nd.attr[key].list.s.extend(value)
        self.append(nd)
        return nd

    def call_node(self, name: str, func, inputs: list[str], device: str) -> node_def_pb2.NodeDef:
        """A branch/cond/body call as TF's lowering builds it: the function as the op, marked to be
        inlined as a multi-device function (added to the graph by :meth:`add_call`)."""
        nd = node_def_pb2.NodeDef(name=name, op=func.name, device=device)
        nd.input.extend(inputs)
        nd.attr[MULTI_DEVICE_ATTR].b = True
        for key, value in func.attr.items():
            nd.attr[key].CopyFrom(value)
        return nd

    # ------------------------------------------------------------------ If / Case
    def lower_conditional(self, n: node_def_pb2.NodeDef) -> None:
        """lower_if_op.cc / lower_case_op.cc: Switch (``_SwitchN``) per input, a pivot Identity per branch,
        one call per branch gated on its pivot, a Merge per output and ``branch_executed``."""
        is_case = n.op in CASE_OPS
        name, device = n.name, n.device
        if is_case:
            funcs = list(n.attr["branches"].list.func)
            calls = [self.new_name(f"{name}/branch{b}") for b in range(len(funcs))]
        else:
            funcs = [n.attr["then_branch"].func, n.attr["else_branch"].func]
            calls = [self.new_name(f"{name}/then"), self.new_name(f"{name}/else")]
        data = [self.resolve(r) for r in n.input if not r.startswith("^")]
        controls = [self.resolve(r) for r in n.input if r.startswith("^")]
        pred, args = data[0], data[1:]
        tin = list(n.attr["Tin"].list.type)
        nb = len(funcs)
        if is_case:
            switch = self.add(self.new_name(f"{name}/branch_index"), "_SwitchN", [pred, pred] + controls, device,
                              T=types_pb2.DT_INT32, num_outs=nb)
            pivots = [self.add(self.new_name(f"{name}/pivot_{b}"), "Identity", [_port(switch.name, b)], device,
                               T=types_pb2.DT_INT32) for b in range(nb)]
        else:
            switch = self.add(self.new_name(f"{name}/switch_pred"), "Switch", [pred, pred] + controls, device,
                              T=types_pb2.DT_BOOL)
            # TF's branch order: 1 = then (Switch output 1), 0 = else; pivot_f is made first.
            pivot_f = self.add(self.new_name(f"{name}/pivot_f"), "Identity", [switch.name], device,
                               T=types_pb2.DT_BOOL)
            pivot_t = self.add(self.new_name(f"{name}/pivot_t"), "Identity", [f"{switch.name}:1"], device,
                               T=types_pb2.DT_BOOL)
            pivots = [pivot_t, pivot_f]
        ports = list(range(nb)) if is_case else [1, 0]   # branch b reads switch output ports[b]
        call_inputs: list[list[str]] = [[] for _ in range(nb)]
        for i, src in enumerate(args):
            src_node = src.split(":")[0]
            src_def = self._node(src_node)
            if is_case:
                sw = self.add(self.new_name(f"{name}/{src_node}"), "_SwitchN", [src, pred],
                              src_def.device if src_def is not None else "", T=tin[i], num_outs=nb)
            else:
                sw = self.add(self.new_name(f"{name}/{src_node}"), "Switch", [src, pred],
                              src_def.device if src_def is not None else "", T=tin[i])
            sw.attr["_class"].list.s.append(f"loc:@{src_node}".encode())
            for b in range(nb):
                call_inputs[b].append(_port(sw.name, ports[b]))
        call_nodes = []
        for b in range(nb):
            call = self.call_node(calls[b], funcs[b], call_inputs[b] + ["^" + pivots[b].name], device)
            self.append(call)
            call_nodes.append(call)
        tout = list(n.attr["Tout"].list.type)
        merges = [self.add(self.new_name(f"{name}/{'merge' if is_case else 'output'}"), "Merge",
                           [_port(c.name, i) for c in call_nodes], device, T=tout[i], N=nb)
                  for i in range(len(tout))]
        executed = self.add(self.new_name(f"{name}/branch_executed"), "Merge",
                            [p.name for p in pivots] + ["^" + c.name for c in call_nodes], device,
                            T=types_pb2.DT_INT32 if is_case else types_pb2.DT_BOOL, N=nb)
        self.add(name, "NoOp", ["^" + executed.name], device)
        for i, m in enumerate(merges):
            self.rename[f"{name}:{i}"] = m.name
        self.rename["^" + name] = "^" + executed.name

    # ------------------------------------------------------------------ While
    def lower_while(self, w: node_def_pb2.NodeDef) -> None:
        """lower_while_op.cc: Enter/Merge/LoopCond/Switch/Exit/NextIteration around a cond and a body call."""
        types = list(w.attr["T"].list.type)
        data = [self.resolve(r) for r in w.input if not r.startswith("^")]
        controls = [self.resolve(r) for r in w.input if r.startswith("^")]
        body = self.functions[w.attr["body"].func.name]
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
        cond = self.call_node(cond_call, w.attr["cond"].func, cond_inputs + ["^" + merges[loop[0]].name], "")
        self.append(cond)
        loop_cond = self.add(self.new_name(f"{name}/LoopCond"), "LoopCond", [f"{cond_call}:0"])
        switches = {i: self.add(self.new_name(f"{name}/{data[i].split(':')[0]}_switch"), "Switch",
                                [merges[i].name, loop_cond.name], T=types[i]) for i in loop}
        body_control = self.add(self.new_name(f"{name}/loop_body_control"), "Identity",
                                [f"{switches[loop[0]].name}:1"], T=types[loop[0]])
        call = self.call_node(body_call, w.attr["body"].func,
                              [f"{switches[i].name}:1" if i in switches else enters[i].name for i in range(len(data))]
                              + ["^" + body_control.name], "")
        self.append(call)
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

    # ------------------------------------------------------------------ calls
    def inline(self, caller: node_def_pb2.NodeDef, fdef) -> None:
        """TF's InlineFunctionBody of a multi-device call, the caller kept as a NoOp control target."""
        body = instantiate(fdef, self.lib)
        data = [self.resolve(r) for r in caller.input if not r.startswith("^")]
        controls = [self.resolve(r) for r in caller.input if r.startswith("^")]
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
            self.append(nd)
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

    # ------------------------------------------------------------------ the pass
    def _node(self, name: str) -> node_def_pb2.NodeDef | None:
        return self.by_name.get(name)

    def run(self) -> graph_pb2.GraphDef:
        i = 0
        while i < len(self.slots):   # the list grows as rewrites append nodes (TF: higher node ids)
            nd = self.slots[i]
            if nd is not None and not _marked_for_compilation(nd):
                fdef = _inlined_callee(nd, self.functions)
                if fdef is not None:
                    self.slots[i] = None
                    self.inline(nd, fdef)
                elif _lowered(nd):
                    self.slots[i] = None
                    if nd.op in WHILE_OPS:
                        self.lower_while(nd)
                    else:
                        self.lower_conditional(nd)
            i += 1
        out = graph_pb2.GraphDef()
        out.versions.CopyFrom(self.gd.versions)
        out.library.CopyFrom(self.gd.library)
        out.node.extend(n for n in self.slots if n is not None)
        for nd in out.node:
            refs = [self.resolve(ref) for ref in nd.input]
            data = [r for r in refs if not r.startswith("^")]
            # TF's Graph holds one control edge per source and its GraphDef lists them by source name.
            controls = sorted(dict.fromkeys(r for r in refs if r.startswith("^")))
            del nd.input[:]
            nd.input.extend(data + controls)
        return out

    def resolve(self, ref: str) -> str:
        """``ref`` after the rewrites so far (a renamed tensor may itself be a rewritten node's)."""
        for _ in range(64):
            if ref.startswith("^"):
                new = self.rename.get(ref, ref)
            else:
                node, _, port = ref.partition(":")
                new = self.rename.get(f"{node}:{port or 0}", ref)
            if new == ref:
                return ref
            ref = new
        return ref


def _port(node: str, port: int) -> str:
    return node if port == 0 else f"{node}:{port}"


def needs_lowering(graph_def: graph_pb2.GraphDef) -> bool:
    """Whether TF's pass changes the graph: a call it inlines or a node marked for lowering."""
    functions = {f.signature.name: f for f in graph_def.library.function}
    return any(not _marked_for_compilation(nd) and (_lowered(nd) or _inlined_callee(nd, functions) is not None)
               for nd in graph_def.node)


def lower_functional_ops(graph_def: graph_pb2.GraphDef) -> graph_pb2.GraphDef:
    """TF's PRE_PLACEMENT lowering of ``graph_def`` (module docstring); the graph itself if nothing
    is to lower."""
    if not needs_lowering(graph_def):
        return graph_def
    # TF's function graph holds the FunctionDef's nodes in GraphConstructor order (its node ids).
    ordered = graph_pb2.GraphDef()
    ordered.CopyFrom(graph_def)
    del ordered.node[:]
    ordered.node.extend(topological_by_index(graph_def))
    return _Lowering(ordered).run()
