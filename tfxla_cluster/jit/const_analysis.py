"""Which nodes must be compile-time constants: TF's ``BackwardsConstAnalysis``.

Stage: clustering (step A, the "must-be-constant stateful op" rule) and lowering (which inputs must be
resolved at compile time). Visiting nodes consumers-first, an op's compile-time-constant inputs (from
the tf2xla registrations in :mod:`.op_tables`) mark their producers must-be-const, and a must-be-const
node marks all its data inputs, except that metadata ops (Shape, Rank, Size, ...) stop the
propagation, ``_Arg`` nodes record their argument index, and IdentityN/While are looked through to
the corresponding input. Function calls and functional If/While contribute the constant inputs their
bodies need.
"""
from __future__ import annotations

from tensorflow.core.framework import function_pb2

from tfxla_cluster.graph.graph import Graph, Node
from tfxla_cluster.jit import op_tables

_WHILE_OPS = ("While", "StatelessWhile")
_IF_OPS = ("If", "StatelessIf")
_CALL_OPS = ("PartitionedCall", "StatefulPartitionedCall")


def _traversable(node: Node) -> bool:
    """``IsConstTraversableOpType``: IdentityN and While forward input i to output i."""
    return node.op == "IdentityN" or node.op in _WHILE_OPS


class ConstAnalysis:
    """Runs the analysis over a graph; function bodies are analysed on demand and memoised."""

    def __init__(self, library: function_pb2.FunctionDefLibrary) -> None:
        self.library = library
        self._arg_memo: dict[str, frozenset[int]] = {}

    def compile_time_const_nodes(self, graph: Graph) -> tuple[set[int], set[int]]:
        """(ids of must-be-const nodes, indices of ``_Arg``s that must be const)."""
        const_nodes: set[int] = set()
        const_args: set[int] = set()

        def mark_through(edge) -> None:
            while _traversable(edge.src):
                inputs = edge.src.data_inputs()
                if edge.src_output >= len(inputs):
                    return
                edge = inputs[edge.src_output]
            const_nodes.add(edge.src.id)

        for node in reversed(graph.topological_order()):
            if node.op in op_tables.METADATA_OPS:
                continue  # a Shape of a tensor doesn't need the tensor's value
            if node.id in const_nodes:
                if node.op == "_Arg":
                    const_args.add(node.node_def.attr["index"].i)
                    continue
                for e in node.data_inputs():
                    mark_through(e)
                continue
            idxs = self.const_input_indices(node)
            if idxs:
                for e in node.data_inputs():
                    if e.dst_input in idxs:
                        mark_through(e)
        return const_nodes, const_args

    def const_input_indices(self, node: Node) -> set[int]:
        """Flat input indices of ``node`` that must be compile-time constants."""
        if "_XlaCompileTimeConstantInputs" in node.node_def.attr:
            names = set(s.decode() for s in node.node_def.attr["_XlaCompileTimeConstantInputs"].list.s)
            return {i for i, slot in enumerate(op_tables_input_slots(node)) if slot.arg_name in names}
        if node.op in _IF_OPS:
            # Input 0 is the predicate; input i+1 feeds argument i of both branches.
            args = set()
            for attr in ("then_branch", "else_branch"):
                args |= self._const_args_of(node.node_def.attr[attr].func.name)
            return {i + 1 for i in args}
        if node.op in _WHILE_OPS:
            args = set()
            for attr in ("cond", "body"):
                args |= self._const_args_of(node.node_def.attr[attr].func.name)
            return args
        fname = node.node_def.attr["f"].func.name if node.op in _CALL_OPS else (
            node.op if any(f.signature.name == node.op for f in self.library.function) else None)
        if fname is not None:
            return set(self._const_args_of(fname))
        return set(op_tables.const_input_indices(node.node_def, node.op_def))

    def _const_args_of(self, fname: str) -> frozenset[int]:
        memo = self._arg_memo.get(fname)
        if memo is not None:
            return memo
        self._arg_memo[fname] = frozenset()  # recursion guard
        from tfxla_cluster.graph.function import instantiate

        fdef = next((f for f in self.library.function if f.signature.name == fname), None)
        if fdef is None:
            return frozenset()
        body = Graph(instantiate(fdef, self.library), assign_devices=False)
        _, args = self.compile_time_const_nodes(body)
        result = frozenset(args)
        self._arg_memo[fname] = result
        return result


def op_tables_input_slots(node: Node):
    from tfxla_cluster.graph.opdefs import input_slots

    return input_slots(node.node_def, node.op_def)
