"""Lower a cluster (a set of nodes of a Graph) or a whole ``jit_compile`` function to an HloModule.

Stage: lowering (TF's ``XlaCompiler::CompileGraph``). The module has tf2xla's form:

* **Inputs.** A cluster's inputs are, first, its own ``_Arg`` nodes in ``index`` order (the
  whole-function case), then every tensor produced outside the cluster and consumed inside it, once
  per tensor, in TF's edge order, stably reordered as TF's encapsulation orders a launch op's
  arguments: compile-time constants first, resource variables last. Input ``i`` is either a
  compile-time constant (no parameter; the value comes from ``const_args[i]`` or from folding the
  constant subgraph that produces it — the cluster is *specialised* on it, as TF does) or a parameter.
  Parameters are numbered consecutively in input order and named ``arg<p>`` (XLA may print them
  uniquified), with ``metadata={op_name="XLA_Args"}``. Resource variables are parameters holding the
  variable's value.
* **Outputs.** The root is a ``tuple``: the inputs of the cluster's ``_Retval`` nodes in ``index``
  order, then every cluster tensor consumed outside the cluster, once, in TF's edge order, then the
  final value of every resource the cluster writes, in input order (``[retvals…, updated resources…]``).
* **Instructions** carry ``metadata={op_type=… op_name=…}`` of the node they lower and are named after
  it (see ``builder.py``); dead instructions are removed and the module passes ``verify_module``.

Shapes are static: an input's shape is the producer's inferred shape unless ``arg_shapes`` gives one
(required for unknown dims). Failures name the node: a missing lowering is ``UnimplementedError(
"Lowering node 'dense/MatMul' (MatMul): no lowering for op MatMul")``; any other error is re-raised
with the same ``Lowering node '<name>' (<op>): `` prefix.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np
from tensorflow.core.framework import types_pb2

from tfxla_cluster.errors import InternalError, InvalidArgumentError, TfXlaError, UnimplementedError
from tfxla_cluster.graph import Graph, Node
from tfxla_cluster.graph.opdefs import ARG_OP, DEVICE_ARG_OP, DEVICE_RETVAL_OP, RETVAL_OP, base_dtype
from tfxla_cluster.hlo.evaluator import evaluate
from tfxla_cluster.hlo.ir import HloComputation, HloInstruction, HloModule, NameUniquer
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType, Shape
from tfxla_cluster.hlo.verifier import verify_module
from tfxla_cluster.tf2hlo import graph_folding, types
from tfxla_cluster.tf2hlo.complex_ops import ComplexValue, lower_partwise, lowers_partwise, whole as complex_whole
from tfxla_cluster.tf2hlo.bounded_dynamic import BoundedDynamic, with_dynamic_shapes
from tfxla_cluster.tf2hlo.cluster_input import ClusterInput
from tfxla_cluster.tf2hlo.builder import TfBuilder
from tfxla_cluster.tf2hlo.dynamic_padder import dynamic_inputs, lower_with_dynamic
from tfxla_cluster.tf2hlo.context import ConstantFolder, LoweringContext, Resource, Value
from tfxla_cluster.tf2hlo.registry import NOT_LOWERED, lookup, lowers

if TYPE_CHECKING:
    from tfxla_cluster.tfops.cluster_boundary import ClusterBoundary

Tensor = tuple[str, int]  # (node name, output slot)

_ARG_OPS = (ARG_OP, DEVICE_ARG_OP)
_RETVAL_OPS = (RETVAL_OP, DEVICE_RETVAL_OP)
# Ops whose own lowering takes bounded dynamic inputs (the others go through dynamic_padder.py first).
_BOUNDED_DYNAMIC_AWARE = frozenset({"GatherV2", "Gather", "PartitionedCall", "StatefulPartitionedCall",
                                    *_RETVAL_OPS})


# ===================================================================================== the result
@dataclass
class ClusterOutput:
    """One element of the root tuple: a retval, an escaping tensor, or a resource's final value."""

    index: int
    kind: str                           # "retval" | "tensor" | "resource" | "dynamic_size"
    tensor: Tensor | None = None        # the cluster tensor (retval/tensor outputs)
    retval_index: int | None = None
    resource_input: int | None = None   # the resource's input index (resource outputs)
    # A bounded dynamic result (NonMaxSuppressionV3's): (dimension, tuple index of its s32[] run-time size);
    # the element is padded to the bound and :meth:`LoweredCluster.trim_results` cuts it to the size.
    dynamic: tuple[int, int] | None = None


@dataclass
class LoweredCluster:
    """An HloModule with the bookkeeping a launch op needs to call it."""

    name: str
    module: HloModule
    inputs: list[ClusterInput]
    outputs: list[ClusterOutput]

    @property
    def parameters(self) -> list[ClusterInput]:
        """Inputs that are parameters, in parameter order."""
        return sorted((i for i in self.inputs if i.parameter is not None), key=lambda i: i.parameter)

    @property
    def constant_inputs(self) -> dict[int, np.ndarray]:
        return {i.index: i.value for i in self.inputs if i.kind == "constant"}

    def input_edges(self) -> dict[tuple[str, int, str, int], int | None]:
        """(src, src_output, dst, dst_input) → parameter number (None for constant inputs)."""
        out: dict[tuple[str, int, str, int], int | None] = {}
        for inp in self.inputs:
            for dst, slot in inp.consumers:
                out[(*inp.tensor, dst, slot)] = inp.parameter
        return out

    def output_tensors(self) -> dict[Tensor, int]:
        """Cluster tensor → tuple index (retvals and escaping tensors)."""
        return {o.tensor: o.index for o in self.outputs if o.tensor is not None}

    def resource_updates(self) -> dict[int, int]:
        """Resource input index → tuple index of its final value."""
        return {o.resource_input: o.index for o in self.outputs if o.kind == "resource"}

    def trim_results(self, result: Sequence[Any]) -> list[Any]:
        """The root tuple's elements with each bounded dynamic result cut to its run-time size (what TF's
        XLA returns at the boundary); the size elements stay where they are."""
        from tfxla_cluster.tf2hlo.bounded_dynamic import trim

        out = list(result)
        for o in self.outputs:
            if o.dynamic is not None:
                out[o.index] = trim(out[o.index], o.dynamic[0], out[o.dynamic[1]])
        return out

    def run(self, *args: Any) -> list[np.ndarray]:
        """Evaluate with one value per *input* (in input order; constants are ignored, resources take
        the variable's value); returns the tuple elements as a list (bounded dynamic results padded:
        see :meth:`trim_results`)."""
        if len(args) != len(self.inputs):
            raise InvalidArgumentError(f"{self.name} takes {len(self.inputs)} inputs, got {len(args)}")
        params = [np.asarray(args[i.index]).astype(i.element_type.dtype) for i in self.parameters]
        return list(evaluate(self.module, *params))


# ===================================================================================== lowering core
class GraphLowerer:
    """Lowers nodes of one Graph into one builder, keeping the value of every tensor."""

    def __init__(self, graph: Graph, builder: TfBuilder, folder: ConstantFolder | None = None,
                 function_cache: dict | None = None) -> None:
        self.graph = graph
        self.builder = builder
        self.folder = folder or ConstantFolder()
        self.values: dict[Tensor, Value] = {}
        self.arg_values: dict[int, Value] = {}
        self.retvals: dict[int, Value] = {}
        self.retval_tensors: dict[int, Tensor] = {}
        self._hlo_cache: dict[Tensor, HloInstruction] = {}
        self._functions = function_cache if function_cache is not None else {}

    # ---- values
    def bind(self, tensor: Tensor, value: Value) -> None:
        self.values[tensor] = value

    def value(self, tensor: Tensor) -> Value:
        try:
            return self.values[tensor]
        except KeyError:
            raise InternalError(f"tensor {tensor[0]}:{tensor[1]} has no value yet") from None

    def as_hlo(self, tensor: Tensor) -> HloInstruction:
        v = self.value(tensor)
        if isinstance(v, HloInstruction):
            return v
        if isinstance(v, Resource):
            raise InvalidArgumentError(f"{tensor[0]}:{tensor[1]} is a resource handle, not a tensor")
        if isinstance(v, BoundedDynamic):
            raise UnimplementedError(f"{tensor[0]}:{tensor[1]} has a bounded dynamic dimension (a run-time "
                                     f"size): it can be gathered with, computed on elementwise, reduced, sized "
                                     f"or returned, not used otherwise inside the cluster (that needs more of "
                                     f"XLA's dynamic padder)")
        if not isinstance(v, (np.ndarray, np.generic, int, float, bool)):
            # e.g. a complex value (kept as two real arrays) or a TensorList used where a tensor is needed
            raise UnimplementedError(f"{tensor[0]}:{tensor[1]} ({type(v).__name__}) cannot be used as an HLO "
                                     f"tensor here (a complex value where a real tensor is needed, or a TensorList "
                                     f"crossing a cluster or function boundary)")
        cached = self._hlo_cache.get(tensor)
        if cached is None:
            cached = self._materialize(tensor, np.asarray(v))
            self._hlo_cache[tensor] = cached
        return cached

    def _materialize(self, tensor: Tensor, value: np.ndarray) -> HloInstruction:
        """A host constant as HLO, in the scope of the node that produced it (tf2xla's ConstOp: a
        uniform value becomes ``Broadcast(ConstantR0)``)."""
        node = self.graph.get(tensor[0])
        b = self.builder
        et = _element_type_of(node, tensor[1], value)
        from tfxla_cluster.tf2hlo.xla_lib import full

        with b.node_scope(node.op if node is not None else "Const", tensor[0]):
            flat = value.reshape(-1)
            if value.ndim > 0 and value.size > 1 and _uniform_bits(flat):
                return full(b, flat[0], et, value.shape)
            return b.constant(value.astype(et.dtype), et)

    # ---- running nodes
    def run(self, nodes: Iterable[Node]) -> None:
        for node in nodes:
            self.lower_node(node)

    def run_folded(self, order: Sequence[Node], members: set[str],
                   known: dict[str, np.ndarray] | None = None) -> None:
        """Lower ``order`` after TF's graph constant folding (graph_folding.py): the folded nodes' values are
        bound as host constants and those nodes are not lowered (``known``: nodes TF sees as constants)."""
        folded = graph_folding.fold(self.graph, list(order), members, known)
        for t, v in folded.items():
            self.bind(t, v)
        self.run(n for n in order if not n.outputs or not all((n.name, i) in folded for i in range(len(n.outputs))))

    def lower_node(self, node: Node) -> None:
        fn = lookup(node.op)
        if fn is None:
            why = NOT_LOWERED.get(node.op)
            raise UnimplementedError(f"Lowering node '{node.name}' ({node.op}): no lowering for op {node.op}"
                                     + (f" ({why})" if why else ""))
        ctx = LoweringContext(self, node)
        with self.builder.node_scope(node.op, node.name):
            try:
                dynamic = dynamic_inputs(self, node, ctx.input_keys) if node.op not in _BOUNDED_DYNAMIC_AWARE else None
                outs = lower_with_dynamic(self, node, fn, dynamic) if dynamic else None
                if outs is not None:
                    pass
                elif lowers_partwise(self, node):
                    outs = lower_partwise(self, node, fn)
                else:
                    outs = fn(ctx, node)
                outs = with_dynamic_shapes(self.builder, outs)
            except TfXlaError as e:
                if e.message.startswith(f"Lowering node '{node.name}'"):
                    raise
                err = type(e)(f"Lowering node '{node.name}' ({node.op}): {e.message}")
                # The node and bare reason, for TF's tf2xla message form (jit/must_compile.py).
                err.node_name, err.reason = node.name, e.message
                raise err from e
            except Exception as e:  # a bug or an unexpected input: keep the node in the message
                err = InternalError(f"Lowering node '{node.name}' ({node.op}): {type(e).__name__}: {e}")
                err.node_name, err.reason = node.name, f"{type(e).__name__}: {e}"
                raise err from e
        if len(outs) != len(node.outputs):
            raise InternalError(f"Lowering node '{node.name}' ({node.op}): lowering gave {len(outs)} outputs, "
                                f"the op has {len(node.outputs)}")
        for i, v in enumerate(outs):
            self.values[(node.name, i)] = v

    # ---- functions (control flow bodies)
    def function_graph(self, name: str) -> Graph:
        graph = self._functions.get(name)
        if graph is None:
            from tfxla_cluster.graph.function import instantiate

            fdef = self.graph.function(name)
            if fdef is None:
                raise InvalidArgumentError(f"function '{name}' is not in the graph's library")
            graph = Graph(instantiate(fdef, self.graph.library), assign_devices=False)
            self._functions[name] = graph
        return graph

    def lower_function_body(self, fname: str, arg_values: Sequence[Value], builder: TfBuilder,
                            constant_args: bool = False) -> tuple["GraphLowerer", list[Value]]:
        """Lower library function ``fname`` into ``builder`` with ``arg_values`` bound to its _Args;
        returns the sub-lowerer and the values of its _Retvals in index order. With ``constant_args`` an
        argument that is a host constant is a constant to TF's folding in the body (tf2xla's If/Case make
        compile-time-constant arguments Const nodes; a call is inlined first)."""
        graph = self.function_graph(fname)
        sub = GraphLowerer(graph, builder, self.folder, self._functions)
        sub.arg_values = dict(enumerate(arg_values))
        order = graph.topological_order()
        # XlaCompiler compiles a branch or loop body as a function, with TF's constant folding too: a
        # constant-only subgraph there is TF's kernels' value (a Relu of a constant denormal is 0).
        known = {n.name: v for n in order if n.op in _ARG_OPS and constant_args
                 and isinstance(v := sub.arg_values.get(int(n.node_def.attr["index"].i)), np.ndarray)}
        sub.run_folded(order, {n.name for n in order}, known)
        n = sum(1 for n in graph.op_nodes() if n.op in _RETVAL_OPS)
        missing = [i for i in range(n) if i not in sub.retvals]
        if missing:
            raise InvalidArgumentError(f"function '{fname}' has no _Retval for output {missing[0]}")
        return sub, [sub.retvals[i] for i in range(n)]

    def retval_hlo(self, index: int) -> HloInstruction:
        """Retval ``index`` as HLO in this lowerer's builder (host constants materialised)."""
        return self.as_hlo(self.retval_tensors[index])


def _element_type_of(node: Node | None, slot: int, value: np.ndarray) -> PrimitiveType:
    if node is not None and slot < len(node.outputs):
        try:
            return types.element_type(node.outputs[slot].dtype)
        except TfXlaError:
            pass
    from tfxla_cluster.hlo.shape import primitive_type_from_dtype

    return primitive_type_from_dtype(value.dtype)


@lowers(*_ARG_OPS)
def _arg(ctx: LoweringContext, node: Node) -> list[Value]:
    index = int(ctx.attr("index"))
    try:
        return [ctx.lowerer.arg_values[index]]
    except KeyError:
        raise InternalError(f"no value bound for argument {index}") from None


@lowers(*_RETVAL_OPS)
def _retval(ctx: LoweringContext, node: Node) -> list[Value]:
    index = int(ctx.attr("index"))
    ctx.lowerer.retvals[index] = ctx.input_value(0)
    ctx.lowerer.retval_tensors[index] = ctx._inputs[0]
    return []


# ===================================================================================== clusters
def lower_cluster(graph: Graph, node_names: Iterable[str], *, arg_shapes=None,
                  const_args: Mapping[int, Any] | None = None, name: str | None = None,
                  check_kernels: bool = False, fetches: Iterable[Tensor] = ()) -> LoweredCluster:
    """Lower the nodes ``node_names`` of ``graph`` to one module (see the module docstring): the
    cluster's boundary is computed here, then :func:`lower_boundary`."""
    from tfxla_cluster.tfops.cluster_boundary import ClusterBoundary

    boundary = ClusterBoundary.of(graph, node_names, name or "cluster")
    return lower_boundary(boundary, arg_shapes=arg_shapes, const_args=const_args, check_kernels=check_kernels,
                          fetches=fetches)


def lower_boundary(boundary: "ClusterBoundary", *, arg_shapes=None, const_args: Mapping[int, Any] | None = None,
                   check_kernels: bool = False, fetches: Iterable[Tensor] = ()) -> LoweredCluster:
    """Lower the cluster whose boundary (:class:`~tfxla_cluster.tfops.cluster_boundary.ClusterBoundary`,
    computed once when the cluster was encapsulated) is ``boundary`` to one module named after it.

    ``arg_shapes`` (dict input index → dims, or a list in input order; a resource may be given as
    ``(dtype, dims)``; keys may also be the producer tensors ``(node, slot)``) specialises unknown input
    shapes; ``const_args`` (input index or producer tensor → value) gives the
    values of compile-time-constant inputs that are not constant in the graph. ``check_kernels``
    first checks every node against TF's XLA_CPU_JIT kernel registry (op and dtype constraints).
    ``fetches``: tensors of member nodes the program reads although no node consumes them (a GraphDef's
    outputs, which a session fetches); they become outputs after those consumed outside the cluster.
    """
    graph, name = boundary.graph, boundary.name
    member_set = boundary.member_set
    order = boundary.topological_members
    if check_kernels:
        _check_kernels(order)
    shapes = _normalize_arg_shapes(arg_shapes)
    const_args = dict(const_args or {})

    # ---- inputs
    tensors, must_const, consumers = boundary.lowering_inputs(), boundary.constants, boundary.consumers

    b = TfBuilder(name)
    inputs: list[ClusterInput] = []
    values: list[Value] = []
    next_param = 0
    for index, t in enumerate(tensors):
        producer = graph.node(t[0])
        dtype = base_dtype(producer.outputs[t[1]].dtype if producer.op not in _ARG_OPS
                           else producer.node_def.attr["T"].type)
        cons = consumers.get(t, [(e.dst.name, e.dst_input) for e in producer.out_edges
                                 if not e.is_control and e.dst.name in member_set])
        if dtype == types_pb2.DT_RESOURCE:
            et, dims = _resource_spec(graph, t, shapes.get(index, shapes.get(t)), member_set)
            with b.metadata(op_name="XLA_Args"):
                p = b.parameter(next_param, Shape.array(et, dims), f"arg{next_param}")
            known = None
            if t in must_const and (index in const_args or t in const_args):
                known = np.asarray(const_args[index] if index in const_args else const_args[t]).astype(et.dtype)
                if tuple(known.shape) != tuple(dims):
                    raise InvalidArgumentError(f"resource input {t[0]}:{t[1]}: its value has shape "
                                               f"{list(known.shape)}, the variable {list(dims)}")
            inputs.append(ClusterInput(index, t, "resource", et, dims, next_param, value=known, consumers=cons))
            values.append(Resource(index, et, dims, p, p))
            next_param += 1
            continue
        et = types.element_type(dtype)
        if t in must_const:
            value = _constant_input_value(graph, t, index, const_args, cons)
            value = np.asarray(value).astype(et.dtype)
            inputs.append(ClusterInput(index, t, "constant", et, tuple(value.shape), value=value, consumers=cons))
            values.append(value)
            continue
        dims = _input_dims(graph, t, shapes.get(index, shapes.get(t)), index)
        with b.metadata(op_name="XLA_Args"):
            p = b.parameter(next_param, Shape.array(et, dims), f"arg{next_param}")
        inputs.append(ClusterInput(index, t, "parameter", et, dims, next_param, consumers=cons))
        # A complex argument is a c64/c128 parameter the lowerings see as its (real, imaginary) parts
        # (complex_ops.py): real-only lowerings then refuse it instead of reading it as real.
        values.append(ComplexValue(b.unary(O.REAL, p), b.unary(O.IMAG, p)) if et.is_complex else p)
        next_param += 1

    # ---- the nodes
    lowerer = GraphLowerer(graph, b)
    for inp, v in zip(inputs, values):
        if isinstance(v, Resource) and inp.value is not None:
            # A read of it still gives the parameter; resolving a compile-time constant gives its value.
            lowerer.folder.know(v.initial, inp.value)
        if graph.node(inp.tensor[0]).op in _ARG_OPS and inp.tensor[0] in member_set:
            lowerer.arg_values[int(graph.node(inp.tensor[0]).node_def.attr["index"].i)] = v
        else:
            lowerer.bind(inp.tensor, v)
    lowerer.run_folded(order, member_set)  # TF's kernels compute constant subgraphs

    # ---- outputs
    outputs: list[ClusterOutput] = []
    elements: list[HloInstruction] = []
    for i in sorted(lowerer.retvals):
        ret_node = next(n for n in order if n.op in _RETVAL_OPS and n.node_def.attr["index"].i == i)
        src = ret_node.data_inputs()[0]
        outputs.append(ClusterOutput(len(outputs), "retval", (src.src.name, src.src_output), retval_index=i))
        elements.append(_output_hlo(lowerer, (src.src.name, src.src_output)))
    seen: set[Tensor] = set()
    for t in boundary.outputs:
        if graph.node(t[0]).op in _ARG_OPS:
            continue
        seen.add(t)
        outputs.append(ClusterOutput(len(outputs), "tensor", t))
        elements.append(_output_hlo(lowerer, t))
    for t in fetches:
        if t[0] in member_set and t not in seen and graph.node(t[0]).op not in _ARG_OPS + _RETVAL_OPS:
            seen.add(t)
            outputs.append(ClusterOutput(len(outputs), "tensor", t))
            elements.append(_output_hlo(lowerer, t))
    for inp, v in zip(inputs, values):
        if isinstance(v, Resource) and v.written:
            outputs.append(ClusterOutput(len(outputs), "resource", resource_input=inp.index))
            elements.append(v.value)
    for o in list(outputs):   # bounded dynamic results: their run-time sizes follow every other element
        v = lowerer.value(o.tensor) if o.tensor is not None else None
        if isinstance(v, BoundedDynamic):
            o.dynamic = (v.dimension, len(outputs))
            outputs.append(ClusterOutput(len(outputs), "dynamic_size"))
            elements.append(v.size)
    with b.metadata(op_name="XLA_Retvals"):
        root = b.tuple(elements, name="XLA_Retvals")
    module = _finish_module(name, b.build(root))
    return LoweredCluster(name, module, inputs, outputs)


def cluster_input_tensors(graph: Graph, node_names: Iterable[str]) -> list[Tensor]:
    """The cluster's inputs in input order (see the module docstring), without lowering anything —
    what a caller needs to fetch argument values and shapes first."""
    from tfxla_cluster.tfops.cluster_boundary import ClusterBoundary

    return ClusterBoundary.of(graph, node_names).lowering_inputs()


def _output_hlo(lowerer: GraphLowerer, t: Tensor) -> HloInstruction:
    v = lowerer.value(t)
    if isinstance(v, Resource):
        raise UnimplementedError(f"cluster output {t[0]}:{t[1]} is a resource handle; resource outputs are "
                                 "not supported")
    if isinstance(v, ComplexValue):  # a complex result leaves as one c64/c128 array, as TF's XLA returns it
        return complex_whole(lowerer.builder, v.re, v.im)
    if isinstance(v, BoundedDynamic):  # padded to its bound; its size is a further element (lower_boundary)
        return v.value
    return lowerer.as_hlo(t)


def _finish_module(name: str, entry: HloComputation) -> HloModule:
    """Drop dead instructions (e.g. the HLO behind folded constants), assemble and verify."""
    module = HloModule(NameUniquer.sanitize(name))  # XLA's parser wants an identifier
    module.add_entry_computation(entry)
    for comp in module.computations:
        comp.remove_dead_instructions()
    module.remove_unused_computations()
    verify_module(module)
    return module


def _check_kernels(order: Sequence[Node]) -> None:
    from tfxla_cluster.tfops.xla_kernels import find_kernel_def

    for node in order:
        ok, reason = find_kernel_def("XLA_CPU_JIT", node.node_def, node.op_def)
        if not ok:
            exc = UnimplementedError if "No registered" in reason and "(" not in reason[-30:] else InvalidArgumentError
            raise exc(f"Lowering node '{node.name}' ({node.op}): {reason}")


def _normalize_arg_shapes(arg_shapes) -> dict[int, Any]:
    if arg_shapes is None:
        return {}
    if isinstance(arg_shapes, Mapping):
        return dict(arg_shapes)
    return {i: s for i, s in enumerate(arg_shapes) if s is not None}


def _static_dims(graph: Graph, t: Tensor) -> tuple[int | None, ...] | None:
    node = graph.node(t[0])
    if node.op in _ARG_OPS:
        attr = node.attr("_output_shapes")
        if attr is not None and attr.list.shape:
            from tfxla_cluster.graph.shapes import shape_from_proto

            return shape_from_proto(attr.list.shape[0])
        return None
    shapes = graph.output_shapes(node)
    return shapes[t[1]] if t[1] < len(shapes) else None


def _split_given(given) -> tuple[Any, tuple[int, ...] | None]:
    """(dtype or None, dims or None) of an ``arg_shapes`` entry: dims, ``(dtype, dims)`` (dtype may be
    None: from the graph) or an array-like value (its dtype and shape)."""
    if given is None:
        return None, None
    if hasattr(given, "dtype") and hasattr(given, "shape") and not isinstance(given, tuple):
        return getattr(given.dtype, "as_numpy_dtype", given.dtype), tuple(int(d) for d in given.shape)
    if hasattr(given, "shape") and not isinstance(given, tuple):
        return None, tuple(int(d) for d in given.shape)
    if isinstance(given, (tuple, list)) and len(given) == 2 and isinstance(given[1], (tuple, list)):
        return given[0], tuple(int(d) for d in given[1])
    return None, tuple(int(d) for d in given)


def _element_type(dtype) -> PrimitiveType:
    from tfxla_cluster.hlo.shape import primitive_type_from_dtype

    if isinstance(dtype, PrimitiveType):
        return dtype
    if isinstance(dtype, int):  # a DataType enum value
        return types.element_type(dtype)
    return primitive_type_from_dtype(np.dtype(dtype))


def _input_dims(graph: Graph, t: Tensor, given, index: int) -> tuple[int, ...]:
    _, dims = _split_given(given)
    if dims is not None:
        return dims
    dims = _static_dims(graph, t)
    if dims is None or any(d is None for d in dims):
        shown = "unknown rank" if dims is None else "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"
        raise InvalidArgumentError(f"input {index} ({t[0]}:{t[1]}) has shape {shown}; pass arg_shapes to "
                                   f"specialise it (command line: --arg-shape {t[0]}=D0,D1,...)")
    return tuple(dims)


def _declared_resource(graph: Graph, t: Tensor) -> tuple[int | None, tuple[int | None, ...] | None]:
    """(DataType, dims) a resource handle declares in the graph, either possibly None: a VarHandleOp's
    ``dtype``/``shape`` attrs, or the ``_handle_dtypes``/``_handle_shapes`` TF's runtime puts on a
    resource ``_Arg`` (and a Placeholder standing for one), looking through Identity nodes."""
    from tfxla_cluster.graph.shapes import shape_from_proto

    node, slot = graph.node(t[0]), t[1]
    for _ in range(64):  # Identity chains are short; the bound only guards against a malformed cycle
        if node.op in ("Identity", "IdentityN") and node.data_inputs():
            edge = node.data_inputs()[slot if node.op == "IdentityN" else 0]
            node, slot = edge.src, edge.src_output
            continue
        break
    if node.op in ("VarHandleOp", "_VarHandlesOp"):
        dtype, shape = node.attr("dtype"), node.attr("shape")
        return (dtype.type if dtype is not None else None,
                shape_from_proto(shape.shape) if shape is not None else None)
    dtypes, shapes = node.attr("_handle_dtypes"), node.attr("_handle_shapes")
    dtype = dtypes.list.type[0] if dtypes is not None and dtypes.list.type else None
    dims = shape_from_proto(shapes.list.shape[0]) if shapes is not None and shapes.list.shape else None
    return dtype, dims


def _resource_spec(graph: Graph, t: Tensor, given, members: set[str]) -> tuple[PrimitiveType, tuple[int, ...]]:
    """A resource's element type and shape: from ``given`` (dims, ``(dtype, dims)`` or a value), then
    from what the graph declares (VarHandleOp attrs, the ``_Arg``'s handle data), then from how the
    cluster uses it (a read's dtype and static shape, an assigned value's shape)."""
    dtype, dims = _split_given(given)
    et = _element_type(dtype) if dtype is not None else None
    declared_dtype, declared_dims = _declared_resource(graph, t)
    if et is None and declared_dtype is not None:
        et = types.element_type(declared_dtype)
    if dims is None and declared_dims is not None and all(d is not None for d in declared_dims):
        dims = tuple(declared_dims)
    producer = graph.node(t[0])
    for e in producer.out_edges:
        if et is not None and dims is not None:
            break
        if e.is_control or e.src_output != t[1]:
            continue
        user = e.dst
        dtype_attr = user.attr("dtype") or user.attr("T")
        if dtype_attr is not None and et is None:
            et = types.element_type(dtype_attr.type)
        if user.op == "ReadVariableOp":
            used = graph.output_shapes(user)[0]
        elif user.op in ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"):
            used = graph.output_shapes(user.data_inputs()[1].src)[user.data_inputs()[1].src_output]
        else:
            continue
        if dims is None and used is not None and all(d is not None for d in used):
            dims = tuple(used)
    if et is None or dims is None:
        missing = "shape and dtype" if et is None and dims is None else ("shape" if dims is None else "dtype")
        raise InvalidArgumentError(f"resource input {t[0]}:{t[1]}: its {missing} is not known from the graph; "
                                   f"pass arg_shapes={{index: (dtype, dims)}} (command line: --arg-shape "
                                   f"{t[0]}=D0,D1,...:DTYPE)")
    return et, dims


def _constant_input_value(graph: Graph, t: Tensor, index: int, const_args: Mapping[int, Any],
                          consumers: list[tuple[str, int]]) -> np.ndarray:
    if index in const_args or t in const_args:
        return np.asarray(const_args[index] if index in const_args else const_args[t])
    value = fold_tensor(graph, t)
    if value is None:
        dst, slot = consumers[0] if consumers else ("?", 0)
        dst_op = graph.node(dst).op if dst in graph else "?"
        raise InvalidArgumentError(
            f"Input {slot} to node `{dst}` with op {dst_op} must be a compile-time constant, but cluster "
            f"input {index} ({t[0]}:{t[1]}) is not constant in the graph; pass const_args={{{index}: value}}")
    return value


_NOT_FOLDABLE_OPS = frozenset({*_ARG_OPS, "Placeholder", "PlaceholderWithDefault", "VarHandleOp",
                               "ReadVariableOp", "ResourceGather"})


def _uniform_bits(flat: np.ndarray) -> bool:
    """Every element has the bits of the first: TF compresses a constant's proto to one value only then
    (tensor_util's PackedValuesNotEqual compares floats as integers), so [0, -0] stays a literal."""
    if flat.dtype.hasobject:
        return bool(np.all(flat == flat[0]))
    raw = np.ascontiguousarray(flat).view(np.uint8).reshape(flat.size, -1)
    return bool(np.all(raw == raw[0]))


def fold_tensor(graph: Graph, t: Tensor) -> np.ndarray | None:
    """The value of ``t`` if it is computed from constants alone (lowering and evaluating its
    ancestors), else None."""
    ancestors: list[Node] = []
    seen: set[str] = set()
    stack = [graph.node(t[0])]
    while stack:
        node = stack.pop()
        if node.name in seen:
            continue
        seen.add(node.name)
        if node.op in _NOT_FOLDABLE_OPS or node.op_def is None or node.op_def.is_stateful or lookup(node.op) is None:
            return None
        ancestors.append(node)
        stack.extend(e.src for e in node.data_inputs())
    members = {n.name for n in ancestors}
    order = [n for n in graph.topological_order() if n.name in members]
    lowerer = GraphLowerer(graph, TfBuilder("fold"))
    try:
        lowerer.run(order)
        v = lowerer.value(t)
    except TfXlaError:
        return None
    if isinstance(v, np.ndarray):
        return v
    if isinstance(v, HloInstruction):
        return lowerer.folder.fold(v)
    return None


# ===================================================================================== functions
def lower_function(fn_or_concrete, *example_args, name: str | None = None, **example_kwargs) -> LoweredCluster:
    """Lower a whole ``jit_compile=True`` function as tf2xla compiles it: one cluster of all its body
    nodes, inputs in ``_Arg`` order (captured variables last, as TF passes them), outputs the
    ``_Retval``s then updated variables. Shapes come from the example arguments; arguments that
    feed compile-time-constant inputs are specialised on their example values."""
    import tensorflow as tf
    from tfxla_cluster.graph.loader import graph_def_from_concrete
    from tfxla_cluster.tf_compat import concrete_function_type, tf_function

    if isinstance(fn_or_concrete, concrete_function_type()):
        concrete = fn_or_concrete
    else:
        fn = fn_or_concrete
        if not hasattr(fn, "get_concrete_function"):
            fn = tf_function()(fn, jit_compile=True)
        concrete = fn.get_concrete_function(*example_args, **example_kwargs)
    graph = Graph(graph_def_from_concrete(concrete, inline=True), assign_devices=False)
    flat = [a for a in tf.nest.flatten((example_args, example_kwargs), expand_composites=False)
            if isinstance(a, (tf.Tensor, tf.Variable, np.ndarray, np.generic))]
    by_handle = {id(v.handle): v for v in concrete.graph.variables}
    values = flat + [by_handle.get(id(c), c) for c in concrete.captured_inputs]
    arg_nodes = sorted((n for n in graph.op_nodes() if n.op in _ARG_OPS), key=lambda n: n.node_def.attr["index"].i)
    shapes: dict[int, Any] = {}
    consts: dict[int, Any] = {}
    if len(values) == len(arg_nodes):
        for i, v in enumerate(values):
            shapes[i] = _example_spec(v)
            if not _is_resource_value(v):
                consts[i] = np.asarray(v)
    return lower_cluster(graph, [n.name for n in graph.op_nodes()], arg_shapes=shapes,
                         const_args=consts, name=name or _text(concrete.name))


def _text(name) -> str:
    return name.decode() if isinstance(name, bytes) else str(name)


def _is_resource_value(v) -> bool:
    import tensorflow as tf

    return isinstance(v, tf.Variable) or (isinstance(v, tf.Tensor) and v.dtype == tf.resource)


def _example_spec(v):
    """dims for tensors; (dtype, dims) for variables / resource handles."""
    import tensorflow as tf

    if isinstance(v, tf.Variable):
        return (v.dtype.as_numpy_dtype, tuple(v.shape))
    if isinstance(v, tf.Tensor) and v.dtype == tf.resource:
        from tfxla_cluster.tf_compat import read_variable

        data = read_variable(v, _handle_dtype(v))
        return (data.dtype.as_numpy_dtype, tuple(data.shape))
    return tuple(np.shape(v))


def _handle_dtype(handle):
    from tfxla_cluster.tf_compat import handle_data

    data = handle_data(handle)
    if data is not None and data.shape_and_type:
        import tensorflow as tf

        return tf.dtypes.as_dtype(data.shape_and_type[0].dtype)
    raise InvalidArgumentError("cannot tell the dtype of a captured resource handle")
