"""HLO modules as Graphviz DOT: instructions as nodes, fusions as nested boxes of their fused computations.

Stage: visualization of HLO (what TF's ``experimental_get_compiler_ir(stage="optimized_hlo_dot")`` and
``tfxla-cluster hlo --dot`` show). :func:`hlo_to_dot` draws one computation (default: the entry), in the
manner of XLA's ``hlo_graph_dumper``:

* each instruction is a node labelled with its name, opcode (plus the attribute that matters: dimensions,
  tuple index, parameter number, comparison direction, small constant values) and shape; the root is
  drawn with a double border; fills follow the opcode's kind (parameters orange, constants grey, data
  movement green, dot/convolution blue, reductions purple, control flow red);
* a fusion is not a node but a box (``subgraph cluster_*``) around the instructions of its fused
  computation — nested fusions nest — and edges into the fusion go to the fused parameters, edges out
  of it leave from the fused root;
* computations called by ``while``/``call``/``conditional`` (and non-trivial reducers) are drawn once,
  as their own boxes, joined to the caller by a dashed edge labelled with the role (body, condition,
  branch 0, to_apply…); a scalar reducer such as ``add`` is named in the caller's label instead.

Pure Python and deterministic: same module, same text. DOT ids are ``i<k>`` in drawing order; each
node's SVG id is ``hlo_<instruction name>`` and its class ``hlo-<opcode>``.
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.hlo.ir import HloComputation, HloInstruction, HloModule
from tfxla_cluster.hlo.opcode import ELEMENTWISE, HloOpcode as O
from tfxla_cluster.viz.dot_text import RawLabel, attrs, label, quote, safe_id, shorten

_DATA_MOVEMENT = frozenset({
    O.BROADCAST, O.RESHAPE, O.TRANSPOSE, O.SLICE, O.DYNAMIC_SLICE, O.DYNAMIC_UPDATE_SLICE, O.CONCATENATE,
    O.PAD, O.COPY, O.BITCAST, O.REVERSE, O.GATHER, O.SCATTER, O.IOTA,
})
_REDUCTIONS = frozenset({O.REDUCE, O.REDUCE_WINDOW, O.SELECT_AND_SCATTER, O.SORT})
_CONTROL = frozenset({O.WHILE, O.CALL, O.CONDITIONAL, O.CUSTOM_CALL})
_TUPLES = frozenset({O.TUPLE, O.GET_TUPLE_ELEMENT})

FILLS = {
    "parameter": "#ffd8a8", "constant": "#e9ecef", "data": "#d3f9d8", "matmul": "#a5d8ff",
    "reduce": "#e5dbff", "control": "#ffc9c9", "tuple": "#ffffff", "elementwise": "#f8f9fa",
    "other": "#fff3bf",
}
FUSION_FILLS = ("#f1f3f5", "#e7f5ff", "#fff9db")   # by nesting depth
CALLEE_FILL = "#fff5f5"


def opcode_kind(opcode: O) -> str:
    """The colour family of an opcode (see ``FILLS``)."""
    if opcode is O.PARAMETER:
        return "parameter"
    if opcode is O.CONSTANT:
        return "constant"
    if opcode in (O.DOT, O.CONVOLUTION):
        return "matmul"
    if opcode in _REDUCTIONS:
        return "reduce"
    if opcode in _CONTROL:
        return "control"
    if opcode in _TUPLES:
        return "tuple"
    if opcode in _DATA_MOVEMENT:
        return "data"
    if opcode in ELEMENTWISE:
        return "elementwise"
    return "other"


def _roles(instr: HloInstruction) -> list[str]:
    """What each called computation is to ``instr``, in ``called_computations`` order."""
    n = len(instr.called_computations)
    if instr.opcode is O.WHILE:
        return ["condition", "body"][:n]
    if instr.opcode is O.CONDITIONAL:
        if n == 2 and instr.operands and instr.operands[0].shape.element_type.is_pred:
            return ["true", "false"]
        return [f"branch {i}" for i in range(n)]
    if instr.opcode is O.SELECT_AND_SCATTER:
        return ["select", "scatter"][:n]
    if instr.opcode is O.SORT:
        return ["comparator"] * n
    return ["to_apply"] * n if n == 1 else [f"called {i}" for i in range(n)]


def scalar_op(comp: HloComputation) -> str | None:
    """``"add"`` for a reducer like ``(a, b) -> add(a, b)`` over scalars; None for anything bigger."""
    root = comp.root
    others = [i for i in comp.instructions if i.opcode is not O.PARAMETER]
    if root is None or others != [root] or root.shape.is_tuple or root.shape.rank != 0:
        return None
    if not all(op.opcode is O.PARAMETER for op in root.operands):
        return None
    text = root.opcode.text
    if root.comparison_direction is not None:
        text += f" {root.comparison_direction.value}"
    return text


def _constant_text(instr: HloInstruction) -> str:
    if instr.literal_elided or instr.literal is None or isinstance(instr.literal, tuple):
        return ""
    value = np.asarray(instr.literal)
    if value.size == 1:
        v = value.reshape(()).item()
        return f"{v:g}" if isinstance(v, float) else str(v).lower() if isinstance(v, bool) else str(v)
    return ""


def _detail(instr: HloInstruction) -> str:
    """The one attribute worth seeing in the node itself."""
    op = instr.opcode
    if op is O.PARAMETER:
        return str(instr.parameter_number)
    if op is O.CONSTANT:
        return _constant_text(instr)
    if op is O.GET_TUPLE_ELEMENT:
        return f"[{instr.tuple_index}]"
    if instr.comparison_direction is not None:
        return instr.comparison_direction.value
    parts = []
    if instr.dimensions is not None and op not in ELEMENTWISE:
        parts.append("dims={" + ",".join(map(str, instr.dimensions)) + "}")
    if op is O.CUSTOM_CALL and instr.custom_call_target:
        parts.append(repr(instr.custom_call_target))
    if op is not O.FUSION and instr.called_computations and op not in (O.WHILE, O.CALL, O.CONDITIONAL):
        names = [scalar_op(c) for c in instr.called_computations]
        if all(names):
            parts.append("(" + ", ".join(names) + ")")
    return " ".join(parts)


class _Drawer:
    def __init__(self, max_label: int) -> None:
        self.max_label = max_label
        self.lines: list[str] = []
        self.boxes: list[str] = []      # callee boxes, drawn at top level after the main computation
        self.ids: dict[tuple[tuple[int, ...], int], str] = {}
        self.count = 0
        self.box_count = 0
        self.drawn_callees: dict[int, tuple[str, str]] = {}   # id(comp) -> (box id, root node id)
        self.dom_ids: set[str] = set()
        self.call_edges: list[str] = []

    # -- ids
    def node_id(self, ctx: tuple[int, ...], instr: HloInstruction) -> str:
        key = (ctx, id(instr))
        if key not in self.ids:
            self.ids[key] = f"i{self.count}"
            self.count += 1
        return self.ids[key]

    def out_id(self, ctx: tuple[int, ...], instr: HloInstruction) -> str:
        """The node a value leaves from: a fusion's value leaves its fused root."""
        while instr.opcode is O.FUSION:
            ctx, instr = ctx + (id(instr),), instr.fused_computation.root
        return self.node_id(ctx, instr)

    def in_id(self, ctx: tuple[int, ...], instr: HloInstruction, operand: int) -> str:
        """The node operand ``operand`` enters: a fusion's operands enter its fused parameters."""
        while instr.opcode is O.FUSION:
            ctx, instr = ctx + (id(instr),), instr.fused_computation.parameter(operand)
            operand = 0
        return self.node_id(ctx, instr)

    # -- drawing
    def computation(self, comp: HloComputation, ctx: tuple[int, ...], out: list[str], indent: str, depth: int) -> None:
        order = comp.post_order()
        for instr in order:
            if instr.opcode is O.FUSION:
                self.fusion(instr, ctx, out, indent, depth)
            else:
                out.append(indent + self.instruction(instr, ctx))
        for instr in order:
            for j, operand in enumerate(instr.operands):
                tip = f"{operand.name} → {instr.name} (operand {j})"
                out.append(f"{indent}{self.out_id(ctx, operand)} -> {self.in_id(ctx, instr, j)}"
                           + attrs(tooltip=tip))
            for pred in instr.control_predecessors:
                target = self.in_id(ctx, instr, 0) if instr.operands else self.out_id(ctx, instr)
                out.append(f"{indent}{self.out_id(ctx, pred)} -> {target}" + attrs(
                    style="dotted", color="#868e96", tooltip=f"control: {pred.name} → {instr.name}"))
            if instr.opcode is not O.FUSION:
                self.callees(instr, ctx)

    def instruction(self, instr: HloInstruction, ctx: tuple[int, ...]) -> str:
        detail = _detail(instr)
        op_line = instr.opcode.text + (f" {detail}" if detail else "")
        lines = [shorten(instr.name, self.max_label), shorten(op_line, self.max_label),
                 shorten(instr.shape.to_string(layout=False), self.max_label)]
        is_root = instr.is_root()
        extra = dict(peripheries="2", penwidth="1.5") if is_root else {}
        dom_id = "hlo_" + safe_id(instr.name)
        while dom_id in self.dom_ids:  # a fused computation drawn twice (shared by two fusions)
            dom_id += "_"
        self.dom_ids.add(dom_id)
        return self.node_id(ctx, instr) + attrs(
            id=dom_id, class_=f"hlo-{safe_id(instr.opcode.text)}" + (" root" if is_root else ""),
            label=RawLabel(label(*lines)), fillcolor=FILLS[opcode_kind(instr.opcode)],
            tooltip=shorten(instr.to_string(), 600), **extra)

    def fusion(self, instr: HloInstruction, ctx: tuple[int, ...], out: list[str], indent: str, depth: int) -> None:
        fused = instr.fused_computation
        kind = instr.fusion_kind.value if instr.fusion_kind is not None else ""
        head = f"{instr.name}: fusion {kind} → {instr.shape.to_string(layout=False)}"
        self.box_count += 1
        out.append(f"{indent}subgraph {quote(f'cluster_fusion_{self.box_count}')} {{")
        out.append(indent + "  graph" + attrs(
            id="fusion_" + safe_id(instr.name), class_="hlo-fusion",
            label=shorten(head, 3 * self.max_label), tooltip=f"{head}\ncalls %{fused.name}",
            style="filled,rounded", fillcolor=FUSION_FILLS[depth % len(FUSION_FILLS)], color="#7048e8",
            penwidth="1.5", fontcolor="#5f3dc4", labeljust="l"))
        self.computation(fused, ctx + (id(instr),), out, indent + "  ", depth + 1)
        out.append(indent + "}")

    def callees(self, instr: HloInstruction, ctx: tuple[int, ...]) -> None:
        control_flow = instr.opcode in (O.WHILE, O.CALL, O.CONDITIONAL)
        for role, callee in zip(_roles(instr), instr.called_computations):
            if not control_flow and scalar_op(callee) is not None:
                continue  # named in the caller's label
            if id(callee) not in self.drawn_callees:
                self.box_count += 1
                box = f"cluster_comp_{self.box_count}"
                body: list[str] = [f"  subgraph {quote(box)} {{", "    graph" + attrs(
                    id="computation_" + safe_id(callee.name), class_="hlo-computation",
                    label=f"{role}: %{callee.name}", style="filled,rounded", fillcolor=CALLEE_FILL,
                    color="#e03131", penwidth="1.5", fontcolor="#c92a2a", labeljust="l")]
                self.drawn_callees[id(callee)] = (box, "")
                self.computation(callee, (), body, "    ", 1)
                body.append("  }")
                self.boxes += body
                self.drawn_callees[id(callee)] = (box, self.out_id((), callee.root))
            box, root_id = self.drawn_callees[id(callee)]
            if root_id:
                # At top level: an edge written inside a box would pull its ends into that box.
                self.call_edges.append(f"  {root_id} -> {self.node_id(ctx, instr)}" + attrs(
                    ltail=box, style="dashed", color="#e03131", fontcolor="#c92a2a", fontsize="9",
                    label=role, tooltip=f"{role} of {instr.name}: %{callee.name}"))


def hlo_to_dot(module: HloModule, computation: HloComputation | str | None = None, *,
               title: str | None = None, max_label: int = 40) -> str:
    """DOT text for ``computation`` of ``module`` (a computation, its name, or None for the entry)."""
    if computation is None:
        comp = module.entry
    elif isinstance(computation, str):
        comp = module.get_computation(computation)
    else:
        comp = computation
    if comp is None:
        from tfxla_cluster.errors import InvalidArgumentError

        raise InvalidArgumentError(f"HLO module {module.name} has no entry computation")
    drawer = _Drawer(max_label)
    body: list[str] = []
    drawer.computation(comp, (), body, "  ", 0)
    head = title if title is not None else f"{module.name}: %{comp.name}"
    lines = [f"digraph {quote(head)} {{",
             "  graph" + attrs(label=head, labelloc="t", fontname="Helvetica", fontsize="14", rankdir="TB",
                               compound="true", nodesep="0.2", ranksep="0.3"),
             "  node" + attrs(shape="box", style="rounded,filled", fontname="Helvetica", fontsize="10",
                              height="0.3", margin="0.08,0.03"),
             "  edge" + attrs(color="#495057", arrowsize="0.6", fontname="Helvetica")]
    return "\n".join(lines + body + drawer.boxes + drawer.call_edges + ["}"]) + "\n"
