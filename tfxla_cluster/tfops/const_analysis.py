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

from typing import Callable

from tensorflow.core.framework import function_pb2

from tfxla_cluster.graph.function import instantiate
from tfxla_cluster.graph.graph import Graph, Node
from tfxla_cluster.graph.opdefs import ARG_OP, RETVAL_OP
from tfxla_cluster.tfops import op_tables

Tensor = tuple[str, int]  # (node name, output index)


def _traversable(node: Node) -> bool:
    """``IsConstTraversableOpType``: these forward input i to output i, so the producer behind them
    is the one that must be constant."""
    return node.op in op_tables.CONST_TRAVERSABLE_OPS


class ConstAnalysis:
    """Runs the analysis over a graph; function bodies are analysed on demand and memoised."""

    def __init__(self, library: function_pb2.FunctionDefLibrary) -> None:
        self.library = library
        self._arg_memo: dict[str, frozenset[int]] = {}
        self._function_names: frozenset[str] | None = None

    def compile_time_const_nodes(self, graph: Graph) -> tuple[set[int], set[int]]:
        """(ids of must-be-const nodes, indices of ``_Arg``s that must be const)."""
        const_nodes, _ = self.propagate(graph.topological_order())
        const_args = {graph.nodes[i].node_def.attr["index"].i for i in const_nodes if graph.nodes[i].op == ARG_OP}
        return const_nodes, const_args

    def propagate(self, order: list[Node], inside: Callable[[Node], bool] | None = None
                  ) -> tuple[set[int], set[Tensor]]:
        """``BackwardsConstAnalysis`` over ``order`` (a topological order), consumers first.

        Returns the ids of the nodes that must be compile-time constants and, when ``inside`` restricts
        the analysis to part of the graph (a cluster), the tensors from outside it that must be: the
        walk through Identity/While stops at the border. An ``_Arg`` marked constant passes nothing on
        (the caller feeds its value)."""
        const_nodes: set[int] = set()
        outside: set[Tensor] = set()

        def mark_through(edge) -> None:
            while (inside is None or inside(edge.src)) and _traversable(edge.src):
                inputs = edge.src.data_inputs()
                if edge.src_output >= len(inputs):
                    return
                edge = inputs[edge.src_output]
            if inside is None or inside(edge.src):
                const_nodes.add(edge.src.id)
            else:
                outside.add((edge.src.name, edge.src_output))

        for node in reversed(order):
            if node.op in op_tables.METADATA_OPS:
                continue  # a Shape of a tensor doesn't need the tensor's value
            if node.id in const_nodes:
                if node.op in op_tables.ARG_OPS:
                    continue
                for e in node.data_inputs():
                    mark_through(e)
                continue
            idxs = self.const_input_indices(node)
            if idxs:
                for e in node.data_inputs():
                    if e.dst_input in idxs:
                        mark_through(e)
        return const_nodes, outside

    def const_input_indices(self, node: Node) -> set[int]:
        """Flat input indices of ``node`` that must be compile-time constants."""
        attrs = op_tables.CONST_ANALYSIS_FUNCTION_ATTRS.get(node.op)
        if attrs is None and self._is_library_function(node.op):
            return set(self._const_args_of(node.op))
        if attrs is None:
            # Most ops have no registered constant inputs and no override attr: asked for every node.
            if (node.op not in op_tables.COMPILE_TIME_CONSTANT_INPUTS
                    and op_tables.XLA_COMPILE_TIME_CONSTANT_INPUTS_ATTR not in node.node_def.attr):
                return set()
            return set(op_tables.const_input_indices(node.node_def, node.op_def))
        args: set[int] = set()
        for attr in attrs:
            value = node.node_def.attr[attr]
            for func in (value.list.func if value.HasField("list") else [value.func]):
                args |= self._const_args_of(func.name)
        if node.op in op_tables.WHILE_OPS:
            return {i for i in args if self._loop_invariant(node, i)}
        if attrs[0] in ("then_branch", "branches"):
            return {i + 1 for i in args}  # input 0 is the predicate / branch index
        return args

    def _is_library_function(self, op: str) -> bool:
        if self._function_names is None:   # asked for every node: the library's names, once
            self._function_names = frozenset(f.signature.name for f in self.library.function)
        return op in self._function_names

    def _loop_invariant(self, node: Node, index: int) -> bool:
        """While arg ``index`` is loop-invariant iff the body returns its input ``index`` unchanged."""
        body_name = node.node_def.attr["body"].func.name
        fdef = next((f for f in self.library.function if f.signature.name == body_name), None)
        if fdef is None:
            return False
        body = instantiate(fdef, self.library)
        by_name = {n.name: n for n in body.node}
        for nd in body.node:
            if nd.op == RETVAL_OP and nd.attr["index"].i == index:
                src = by_name.get(nd.input[0].split(":")[0])
                while src is not None and src.op in ("Identity",):
                    src = by_name.get(src.input[0].split(":")[0])
                return src is not None and src.op == ARG_OP and src.attr["index"].i == index
        return False

    def _const_args_of(self, fname: str) -> frozenset[int]:
        memo = self._arg_memo.get(fname)
        if memo is not None:
            return memo
        self._arg_memo[fname] = frozenset()  # recursion guard
        fdef = next((f for f in self.library.function if f.signature.name == fname), None)
        if fdef is None:
            return frozenset()
        body = Graph(instantiate(fdef, self.library), assign_devices=False)
        _, args = self.compile_time_const_nodes(body)
        result = frozenset(args)
        self._arg_memo[fname] = result
        return result
