"""Deadness predicates: when is a node's output "dead" (not computed) in v1 control flow?

Stage: clustering (step B/C). With Switch/Merge control flow, a node runs only when its inputs are
alive; TF refuses to put nodes with different liveness predicates in one cluster
(deadness_analysis.cc). Predicates here are canonical, hashable boolean expressions over symbols
``s(tensor)`` — the value of a Switch predicate tensor — so equal predicates compare equal:

* a node's predicate is the AND of its inputs' predicates (data and control edges);
* Switch output 1 ANDs ``s(pred)``, output 0 ANDs ``!s(pred)``; a ``_SwitchN`` (``tf.switch_case``) has
  integer symbols ``s(index)=k``: output k < N-1 ANDs ``!(=0) & ... & !(=k-1) & (=k)``, the last
  (default) output the negation of all of them, as TF's HandleSwitch builds them — so the Merge of an
  N-way switch stays ``(=0) | (!(=0) & (=1)) | ...``, which TF does not simplify to true either;
* a Merge ORs its data inputs (control inputs don't count, as in TF), factoring common terms so a cond's two branches merge back to the
  predicate before the Switch (``(a & s) | (a & !s) = a``);
* a loop Merge (fed by NextIteration) gets its frame's symbol, shared by all Merges of the frame (TF's
  optimistic mode), ANDed with the loop's entry predicate; the body's predicates therefore differ
  from the code around the loop;
* an Exit is alive iff its loop was entered (the AND of what the frame's Enter nodes receive), as TF
  assumes loops terminate.

This is a documented simplification of TF's predicate factory (no AndRecurrence induction and no
fallback to pessimistic mode when the optimistic assumption fails).
"""
from __future__ import annotations

from tfxla_cluster.graph.graph import Graph
from tfxla_cluster.tfops import op_tables

# Expressions: ("sym", name) | ("not", ("sym", name)) | ("and", frozenset) | ("or", frozenset)
TRUE = ("and", frozenset())
FALSE = ("or", frozenset())


def _neg(term):
    return term[1] if term[0] == "not" else ("not", term)


def make_and(*terms):
    flat: set = set()
    for t in terms:
        if t == FALSE:
            return FALSE
        if t[0] == "and":
            flat |= t[1]
        else:
            flat.add(t)
    if any(_neg(t) in flat for t in flat if t[0] in ("sym", "not")):
        return FALSE
    if len(flat) == 1:
        return next(iter(flat))
    return ("and", frozenset(flat))


def _conjuncts(t) -> frozenset:
    return t[1] if t[0] == "and" else frozenset([t])


def make_or(*terms):
    flat: set = set()
    for t in terms:
        if t == TRUE:
            return TRUE
        if t[0] == "or":
            flat |= t[1]
        else:
            flat.add(t)
    if not flat:
        return FALSE
    if len(flat) == 1:
        return next(iter(flat))
    # Factor the conjuncts all disjuncts share: (a & x) | (a & y) = a & (x | y).
    conj = [_conjuncts(t) for t in flat]
    common = frozenset.intersection(*conj)
    rests = []
    for c in conj:
        rest = c - common
        rests.append(make_and(*rest) if rest else TRUE)
    if any(r == TRUE for r in rests):
        rest_pred = TRUE
    elif len(rests) == 2 and rests[0][0] in ("sym", "not") and _neg(rests[0]) == rests[1]:
        rest_pred = TRUE  # x | !x
    else:
        rest_pred = ("or", frozenset(rests)) if common else ("or", frozenset(flat))
        if not common:
            return rest_pred
    return make_and(*common, rest_pred)


def to_string(p) -> str:
    kind = p[0]
    if kind == "sym":
        return p[1]
    if kind == "not":
        return "~" + to_string(p[1])
    if not p[1]:
        return "#true" if kind == "and" else "#false"
    sep = " & " if kind == "and" else " | "
    return "(" + sep.join(sorted(to_string(t) for t in p[1])) + ")"


def frame_names(graph: Graph) -> dict[int, str]:
    """The loop frame of Enter nodes (their attr) and Exit nodes (the frame their input is in). Nodes
    outside every loop may be absent (read with ``.get(id, "")``)."""
    frame: dict[int, str] = {}
    if not any(node.op in op_tables.ENTER_OPS for node in graph.op_nodes()):
        return frame   # no loops: every node is in the root frame ""
    parent: dict[str, str] = {}
    for node in graph.topological_order():
        if node.op in ("Enter", "RefEnter"):
            name = node.node_def.attr["frame_name"].s.decode()
            data = node.data_inputs()
            parent[name] = frame.get(data[0].src.id, "") if data else ""
            frame[node.id] = name
            continue
        data = [e for e in node.in_edges
                if e.src.is_op and not (e.src.op in op_tables.NEXT_ITERATION_OPS and node.op in op_tables.MERGE_OPS)]
        if not data:
            frame[node.id] = ""
            continue
        src = data[0].src
        f = frame.get(src.id, "")
        frame[node.id] = parent.get(f, "") if src.op in ("Exit", "RefExit") else f
    return frame



_PREDICATE_SOURCES = frozenset(op_tables.SWITCH_OPS) | {"_SwitchN", "Ref_SwitchN"} | frozenset(
    op_tables.NEXT_ITERATION_OPS)


def compute_predicates(graph: Graph, frames: dict[int, str] | None = None) -> dict[int, tuple]:
    """Predicate of every op node's control output (TF's ``GetPredicateFor(n, kControlSlot)``)."""
    out_pred: dict[tuple[int, int], tuple] = {}
    node_pred: dict[int, tuple] = {}
    frames = frame_names(graph) if frames is None else frames
    if not any(node.op in _PREDICATE_SOURCES for node in graph.op_nodes()):
        # Only Switches and loop Merges (fed by NextIteration) make predicates other than #true.
        return dict.fromkeys((node.id for node in graph.topological_order()), TRUE)
    entry: dict[str, tuple] = {}  # a loop frame's entry predicate: AND of what its Enters receive
    for node in graph.topological_order():
        ins = [e for e in node.in_edges if e.src.is_op]
        if node.op in op_tables.EXIT_OPS:
            # TF assumes loops terminate: what leaves a loop is alive iff the loop was entered.
            node_pred[node.id] = entry.get(frames.get(node.id, ""), TRUE)
            continue
        if node.op in ("Merge", "RefMerge"):
            if any(e.src.op == "NextIteration" for e in ins):
                # TF's optimistic mode: every loop Merge of a frame shares one symbol.
                pred = make_and(entry.get(frames.get(node.id, ""), TRUE),
                                ("sym", f"*{frames.get(node.id, '') or node.name}"))
            else:
                # TF's HandleMerge looks at data inputs only: control inputs don't decide liveness.
                pred = make_or(*(out_pred.get((e.src.id, e.src_output), node_pred.get(e.src.id, TRUE))
                                 for e in ins if not e.is_control))
            node_pred[node.id] = pred
            continue
        pred = make_and(*(node_pred.get(e.src.id, TRUE) if e.is_control
                          else out_pred.get((e.src.id, e.src_output), node_pred.get(e.src.id, TRUE))
                          for e in ins))
        node_pred[node.id] = pred
        if node.op in op_tables.ENTER_OPS:
            name = frames.get(node.id, "")
            entry[name] = make_and(entry.get(name, TRUE), pred)
        if node.op in ("_SwitchN", "Ref_SwitchN"):
            data = node.data_inputs()
            if len(data) == 2:
                tensor = f"{data[1].src.name}:{data[1].src_output}"
                n_out = len(node.outputs)
                earlier: list = []
                for k in range(n_out - 1):
                    sym = ("sym", f"{tensor}={k}")
                    out_pred[(node.id, k)] = make_and(pred, *earlier, sym)
                    earlier.append(("not", sym))
                out_pred[(node.id, n_out - 1)] = make_and(pred, *earlier)
        elif node.op in op_tables.SWITCH_OPS:
            data = node.data_inputs()
            if len(data) == 2:
                known = _constant_bool(data[1].src)
                if known is not None:   # MakeSymbolPredicate: a Const predicate is #true or #false
                    out_pred[(node.id, 0)] = FALSE if known else pred
                    out_pred[(node.id, 1)] = pred if known else FALSE
                    continue
                sym = ("sym", f"{data[1].src.name}:{data[1].src_output}")
                out_pred[(node.id, 0)] = make_and(pred, ("not", sym))
                out_pred[(node.id, 1)] = make_and(pred, sym)
    return node_pred


def _constant_bool(node) -> bool | None:
    """The value of a scalar bool ``Const`` node (a Switch predicate grappler folded), else None: TF's
    ``PredicateFactory::MakeSymbolPredicate`` makes such a predicate #true or #false rather than a symbol,
    so the dead branch of a constant tf.cond is #false and the live one keeps its input's predicate (fuzz
    seed 280001830: a variable's read and its assignment in the live branch share a cluster)."""
    if node.op != "Const":
        return None
    proto = node.node_def.attr["value"].tensor
    if proto.dtype != 10 or proto.tensor_shape.dim:   # DT_BOOL, a scalar
        return None
    if proto.bool_val:
        return bool(proto.bool_val[0])
    if proto.tensor_content:
        return bool(proto.tensor_content[0])
    return False   # no value given: the default, false
