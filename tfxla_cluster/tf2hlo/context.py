"""What a lowering function sees: ``LoweringContext`` (tf2xla's ``XlaOpKernelContext``) and values.

Stage: lowering. A TF tensor being lowered is one of (tf2xla's ``XlaExpression`` kinds):

* an ``HloInstruction`` — a value computed by the module;
* a host ``np.ndarray`` — known at compile time (``Const``, ``Shape``, a specialised argument). It
  becomes an HLO constant the first time an op needs it as an operand (``ctx.input``), in the scope of
  the node that produced it, and is used directly where an op needs a compile-time constant;
* a :class:`Resource` — a resource variable: its current value and whether the cluster wrote it.

``ctx.const_input(i)`` resolves a compile-time-constant input the way ``XlaOpKernelContext::
ConstantInput`` does: a host value is returned as is, an HLO value is evaluated by the reference
evaluator when it depends on no parameter (``ResolveConstant``), and anything else is the
``InvalidArgumentError`` TF reports for a non-constant "must be constant" input.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo.ir import HloInstruction
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType, Shape
from tfxla_cluster.tf2hlo import types, xla_lib
from tfxla_cluster.tf2hlo.builder import TfBuilder

if TYPE_CHECKING:
    from tfxla_cluster.graph import Node
    from tfxla_cluster.tf2hlo.lower import GraphLowerer

_MISSING = object()


@dataclass(eq=False)
class Resource:
    """A resource variable (``XlaResource``): the cluster input it came from and its current value."""

    input_index: int
    element_type: PrimitiveType
    dims: tuple[int, ...]
    initial: HloInstruction | None
    value: HloInstruction | None
    written: bool = False

    @property
    def shape(self) -> Shape:
        return Shape.array(self.element_type, self.dims)

    def read(self, node_name: str) -> HloInstruction:
        if self.value is None:
            raise InvalidArgumentError(f"Read of uninitialized variable {node_name}")
        return self.value

    def assign(self, value: HloInstruction) -> None:
        if value.shape.element_type is not self.element_type:
            raise InvalidArgumentError(
                f"Trying to assign variable with wrong dtype. Expected {self.element_type.value} got "
                f"{value.shape.element_type.value}")
        self.value = value
        self.dims = value.shape.dimensions
        self.written = True


Value = Any  # HloInstruction | np.ndarray | Resource


# Opcodes whose value is not a function of their operands alone: never folded.
_UNFOLDABLE = frozenset({O.PARAMETER, O.RNG, O.RNG_BIT_GENERATOR, O.CUSTOM_CALL, O.AFTER_ALL,
                         O.PARTITION_ID, O.REPLICA_ID})


class ConstantFolder:
    """Evaluates parameter-free HLO subgraphs on demand (memoised): tf2xla's ``ResolveConstant``."""

    def __init__(self) -> None:
        self._memo: dict[int, Any] = {}
        self._keep: list[HloInstruction] = []  # keeps ids stable while memoised

    def fold(self, instr: HloInstruction) -> np.ndarray | None:
        from tfxla_cluster.hlo.evaluator import HANDLERS, Evaluator

        ev = Evaluator()
        order: list[HloInstruction] = []
        stack = [(instr, False)]
        seen: set[int] = set()
        while stack:
            node, expanded = stack.pop()
            if id(node) in self._memo:
                continue
            if expanded:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            if node.opcode in _UNFOLDABLE:
                self._remember(node, None)
                continue
            stack.append((node, True))
            stack.extend((o, False) for o in node.operands)
        with np.errstate(all="ignore"):
            for node in order:
                args = [self._memo.get(id(o)) for o in node.operands]
                if any(a is None for a in args):
                    self._remember(node, None)
                    continue
                self._remember(node, HANDLERS[node.opcode](ev, node, args))
        value = self._memo.get(id(instr))
        return None if value is None or isinstance(value, tuple) else np.asarray(value)

    def know(self, parameter: HloInstruction, value: np.ndarray) -> None:
        """Resolve ``parameter`` to ``value`` (a resource variable TF compiles as kConstantResource)."""
        self._remember(parameter, np.asarray(value))

    def _remember(self, node: HloInstruction, value) -> None:
        self._memo[id(node)] = value
        self._keep.append(node)


class LoweringContext:
    """Inputs, attributes and builder for lowering one node (``XlaOpKernelContext``)."""

    def __init__(self, lowerer: "GraphLowerer", node: "Node") -> None:
        self.lowerer = lowerer
        self.node = node
        self.b: TfBuilder = lowerer.builder
        self._inputs = [(e.src.name, e.src_output) for e in node.data_inputs()]

    # ---------------------------------------------------------------- identity
    @property
    def op(self) -> str:
        return self.node.op

    @property
    def name(self) -> str:
        return self.node.name

    def error(self, message: str) -> InvalidArgumentError:
        return InvalidArgumentError(message)

    # ---------------------------------------------------------------- attributes
    def attr(self, name: str, default=_MISSING):
        """The attr as plain Python (OpDef default when the node does not set it)."""
        if self.node.has_attr(name):
            return types.attr_value(self.node.attr(name))
        op_def = self.node.op_def
        for a in (op_def.attr if op_def is not None else ()):
            if a.name == name and a.HasField("default_value"):
                return types.attr_value(a.default_value)
        if default is _MISSING:
            raise InvalidArgumentError(f"NodeDef missing attr '{name}' from Op<name={self.op}>")
        return default

    def attr_type(self, name: str) -> PrimitiveType:
        return types.element_type(self.attr(name))

    def output_type(self, index: int = 0) -> PrimitiveType:
        return types.element_type(self.node.outputs[index].dtype)

    def input_tf_dtype(self, index: int) -> int:
        return self.node.inputs[index].dtype

    # ---------------------------------------------------------------- inputs
    @property
    def input_keys(self) -> list[tuple[str, int]]:
        """The node's data inputs as (source node name, output index), by input number."""
        return self._inputs

    @property
    def num_inputs(self) -> int:
        return len(self._inputs)

    def input_value(self, index: int) -> Value:
        """The raw value of input ``index`` (HLO, host array or Resource)."""
        return self.lowerer.value(self._inputs[index])

    def input(self, index: int) -> HloInstruction:
        """Input ``index`` as an HLO operand (host constants are materialised)."""
        return self.lowerer.as_hlo(self._inputs[index])

    def inputs(self) -> list[HloInstruction]:
        return [self.input(i) for i in range(self.num_inputs)]

    def input_dims(self, index: int) -> tuple[int, ...]:
        v = self.input_value(index)
        if isinstance(v, np.ndarray):
            return tuple(v.shape)
        if isinstance(v, Resource):
            raise InvalidArgumentError(f"input {index} of {self.name} is a resource, not a tensor")
        return v.shape.dimensions

    def input_rank(self, index: int) -> int:
        return len(self.input_dims(index))

    def input_type(self, index: int) -> PrimitiveType:
        v = self.input_value(index)
        if isinstance(v, np.ndarray):
            return types.element_type(self.node.inputs[index].dtype)
        return v.shape.element_type

    def is_constant(self, index: int) -> bool:
        return self.try_const_input(index) is not None

    def try_const_input(self, index: int) -> np.ndarray | None:
        v = self.input_value(index)
        if isinstance(v, np.ndarray):
            return v
        if isinstance(v, HloInstruction):
            return self.lowerer.folder.fold(v)
        return None

    def const_input(self, index: int) -> np.ndarray:
        """A compile-time-constant input (``ConstantInput``), resolved as described above."""
        value = self.try_const_input(index)
        if value is None:
            src = self._inputs[index][0]
            raise InvalidArgumentError(
                f"Input {index} to node `{self.name}` with op {self.op} must be a compile-time constant. "
                f"(It is computed from a non-constant value via `{src}`.)")
        return value

    def const_ints(self, index: int) -> list[int]:
        """A constant input as a flat list of Python ints (``ConstantInputAsIntVector``, reshaped)."""
        return [int(v) for v in np.asarray(self.const_input(index)).reshape(-1)]

    def const_int(self, index: int) -> int:
        value = np.asarray(self.const_input(index))
        if value.size != 1:
            raise InvalidArgumentError(
                f"{self.op} ({self.name}): input {index} must be a scalar, got shape {list(value.shape)}")
        return int(value.reshape(()))

    def resource(self, index: int) -> Resource:
        v = self.input_value(index)
        if not isinstance(v, Resource):
            raise InvalidArgumentError(f"input {index} of {self.name} ({self.op}) is not a resource variable")
        return v

    # ---------------------------------------------------------------- helpers
    def broadcast_inputs(self, i: int = 0, j: int = 1) -> tuple[HloInstruction, HloInstruction]:
        """Inputs ``i`` and ``j`` broadcast to their common shape (TF's BCast, then ``BroadcastTo``)."""
        return xla_lib.broadcast_pair(self.b, self.input(i), self.input(j))

    def normalize_axis(self, axis: int, rank: int, what: str = "axis") -> int:
        if not -rank <= axis < max(rank, 1):
            raise InvalidArgumentError(f"Expected {what} in the range [{-rank}, {rank}), but got {axis}")
        return axis % rank if rank else 0

    def function_graph(self, name: str):
        """The Graph of library function ``name`` instantiated as TF's runtime does (``_Arg``/``_Retval``)."""
        return self.lowerer.function_graph(name)

    def sub_lowering(self, fname: str, arg_shapes: Sequence[Shape], name: str | None = None,
                     resources: dict[int, Resource] | None = None):
        """Lower library function ``fname`` into a computation taking one tuple parameter."""
        return self.lowerer.lower_function_body(fname, list(arg_shapes), name or fname, self.b, resources)
