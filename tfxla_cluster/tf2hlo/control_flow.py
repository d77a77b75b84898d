"""Functional control flow (tf2xla's if_op.cc, case_op.cc, while_op.cc).

Stage: lowering. Branch, condition and body functions are lowered from the graph's library into called
computations that take ONE tuple parameter, as tf2xla compiles them:

* arguments that are host constants are bound inside the callee as constants (tf2xla's compile-time
  constant arguments) and do not travel in the tuple; tensors and the current values of resource
  variables do;
* If/StatelessIf → ``conditional`` on the predicate (a non-bool scalar predicate is ``!= 0``);
  Case/StatelessCase → ``conditional`` on the s32 branch index (out of range runs the last branch).
  Every branch returns ``tuple(outputs…, resources written by any branch…)``; the branches must agree
  on the output shapes;
* While/StatelessWhile → ``while`` whose condition returns ``pred[]`` and whose body returns the next
  state. A constant argument stays a constant only if the body returns it unchanged (its ``_Retval``
  fed by its ``_Arg`` through identities, tf2xla's ``IsLoopInvariant``, and the lowered body keeps it);
  otherwise it is part of the state from the start. The state's shapes must not change.
  A TensorList reserved without an element shape enters as a buffer of the shape the body writes.

Resource variables written inside a callee are assigned from the corresponding result element. A complex
value (``complex_ops.ComplexValue``) travels as two tuple elements, its real and imaginary parts, in
the arguments, the loop state and the branch results (tf2xla carries one c64/c128 element; the values
are the same).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo.ir import HloInstruction
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape
from tensorflow.core.framework import types_pb2

from tfxla_cluster.graph.opdefs import base_dtype
from tfxla_cluster.tf2hlo import types, xla_lib as xl
from tfxla_cluster.tf2hlo.complex_ops import ComplexValue, is_complex_value, pair_of
from tfxla_cluster.tf2hlo.context import Resource
from tfxla_cluster.tf2hlo.registry import lowers
from tfxla_cluster.tf2hlo.tensor_list import PendingList


class _Operands:
    """How call arguments enter a called computation (see the module docstring)."""

    def __init__(self, values: Sequence[Any]) -> None:
        self.values = list(values)
        self.slots: list[int | tuple[int, int] | None] = []
        self.elements: list[HloInstruction] = []
        for v in self.values:
            if isinstance(v, (np.ndarray, PendingList)) or (
                    isinstance(v, ComplexValue) and isinstance(v.re, PendingList)):
                self.slots.append(None)   # bound inside the callee as itself
                continue
            if isinstance(v, Resource):
                if v.value is None:
                    raise InvalidArgumentError("uninitialized resource passed to a function")
                self.slots.append(len(self.elements))
                self.elements.append(v.value)
            elif isinstance(v, HloInstruction):
                self.slots.append(len(self.elements))
                self.elements.append(v)
            elif isinstance(v, ComplexValue):
                self.slots.append((len(self.elements), len(self.elements) + 1))
                self.elements += [v.re, v.im]
            else:  # a TensorArray or stack resource (tensor_array.py) lives in one computation only
                raise UnimplementedError(f"a {type(v).__name__} passed to a function or loop is not supported")

    @property
    def shape(self) -> Shape:
        return Shape.tuple_of([e.shape for e in self.elements])

    def bind(self, builder) -> list[Any]:
        """The callee-side argument values: constants as themselves, others from the tuple parameter."""
        param = builder.parameter(0, self.shape, "arg_tuple")
        out = []
        for v, slot in zip(self.values, self.slots):
            if slot is None:
                out.append(v)
                continue
            if isinstance(slot, tuple):
                out.append(ComplexValue(*(builder.get_tuple_element(param, s) for s in slot)))
                continue
            gte = builder.get_tuple_element(param, slot)
            out.append(Resource(v.input_index, v.element_type, v.dims, gte, gte) if isinstance(v, Resource) else gte)
        return out


def _paired(value, dtype) -> bool:
    """Whether a value travels as two elements: a complex tensor, or a list of complex elements."""
    return isinstance(value, ComplexValue) or (base_dtype(dtype) != types_pb2.DT_VARIANT
                                               and types.element_type(dtype).is_complex)


def _result_elements(sub, index: int, value, dtype) -> list[HloInstruction]:
    """A callee's result as tuple elements in its builder: a complex one as its two parts."""
    if isinstance(value, ComplexValue) and not isinstance(value.re, HloInstruction):
        raise UnimplementedError(f"result {index} is a list of complex elements that is never written")
    if _paired(value, dtype):
        return list(pair_of(sub.builder, value, dtype))
    return [sub.retval_hlo(index)]


def _scalar_pred(ctx, b, x: HloInstruction, what: str) -> HloInstruction:
    if x.shape.rank:
        raise InvalidArgumentError(f"{what} must be a scalar, got shape [{','.join(map(str, x.shape.dimensions))}]")
    return x if x.shape.element_type is P.PRED else xl.ne(b, x, 0)


def _lower_branches(ctx, node, fnames: list[str], args: list[Any], selector: HloInstruction,
                    constant_args: bool):
    """``constant_args``: the branches see host-constant arguments as constants to TF's graph folding (tf2xla's
    If). tf2xla's Case passes them as constant expressions instead: TF's folding leaves a ``sign`` of one in
    the branch, and XLA folds it later on the compile thread, under DAZ (``sign`` of a constant denormal is 0
    from a Case branch, the denormal from an If branch, as TF's CPU kernel gives; seed 86000411)."""
    b = ctx.b
    ops = _Operands(args)
    operand = b.tuple(ops.elements)
    lowered = []
    for k, fname in enumerate(fnames):
        sb = b.sub_builder(fname)
        inner = ops.bind(sb)
        sub, rets = ctx.lowerer.lower_function_body(fname, inner, sb, constant_args=constant_args)
        lowered.append((sb, sub, rets, inner))
    n_out = len(node.outputs)
    written = sorted({i for (_, _, _, inner) in lowered for i, v in enumerate(inner)
                      if isinstance(v, Resource) and v.written})
    comps, signature = [], None
    for k, (sb, sub, rets, inner) in enumerate(lowered):
        if len(rets) != n_out:
            raise InvalidArgumentError(f"branch {fnames[k]} returns {len(rets)} values, the node has {n_out} outputs")
        elems = []
        for i, r in enumerate(rets):
            if isinstance(r, Resource):
                raise InvalidArgumentError(f"branch {fnames[k]} returns a resource handle (output {i})")
            elems += _result_elements(sub, i, r, node.outputs[i].dtype)
        elems += [inner[i].value for i in written]
        shapes = [e.shape.without_layout() for e in elems]
        if signature is not None and shapes != signature:
            raise InvalidArgumentError(f"{node.op}: branches return different shapes: "
                                       f"{[str(s) for s in signature]} vs. {[str(s) for s in shapes]}")
        signature = shapes
        comps.append(sb.build(sb.tuple(elems)))
    cond = b.conditional(selector, comps, [operand] * len(comps))
    outs, k = [], 0
    for i in range(n_out):
        if _paired(lowered[0][2][i], node.outputs[i].dtype):
            outs.append(ComplexValue(b.get_tuple_element(cond, k), b.get_tuple_element(cond, k + 1)))
            k += 2
        else:
            outs.append(b.get_tuple_element(cond, k))
            k += 1
    for j, i in enumerate(written):
        args[i].assign(b.get_tuple_element(cond, k + j))
    return outs


@lowers("If", "StatelessIf")
def _if(ctx, node):
    pred = _scalar_pred(ctx, ctx.b, ctx.input(0), "cond")
    args = [ctx.input_value(i) for i in range(1, ctx.num_inputs)]
    return _lower_branches(ctx, node, [ctx.attr("then_branch"), ctx.attr("else_branch")], args, pred,
                           constant_args=True)


@lowers("Case", "StatelessCase")
def _case(ctx, node):
    index = ctx.input(0)
    if index.shape.rank or index.shape.element_type is not P.S32:
        raise InvalidArgumentError("branch_index must be an int32 scalar")
    args = [ctx.input_value(i) for i in range(1, ctx.num_inputs)]
    return _lower_branches(ctx, node, list(ctx.attr("branches")), args, index,
                           constant_args=False)


@lowers("While", "StatelessWhile")
def _while(ctx, node):
    b = ctx.b
    cond_f, body_f = ctx.attr("cond"), ctx.attr("body")
    raw = [ctx.input_value(i) for i in range(ctx.num_inputs)]
    # Host constants the body returns unchanged stay constants (tf2xla's loop-invariant compile-time
    # constants); the others are state from the start, so the body is never lowered with a wrong value.
    invariant = _invariant_args(ctx, body_f)
    constant = {i for i, v in enumerate(raw) if isinstance(v, np.ndarray) and i in invariant}
    for _ in range(len(raw) + 1):
        values = [v if (i in constant or not isinstance(v, np.ndarray)) else _state_value(ctx, i, v)
                  for i, v in enumerate(raw)]
        ops = _Operands(values)
        body_b = b.sub_builder(body_f)
        inner = ops.bind(body_b)
        sub, rets = ctx.lowerer.lower_function_body(body_f, inner, body_b)
        variant = {i for i in constant if rets[i] is not inner[i]}
        # A list reserved without an element shape gets it from the body's first write: start the
        # loop with a zeros buffer of that shape (tf2xla's handling of uninitialized TensorLists).
        pending = {i for i, v in enumerate(raw) if isinstance(v, PendingList) and isinstance(rets[i], HloInstruction)}
        for i in pending:
            raw[i] = raw[i].buffer_for(b, PendingList.element_dims_of(rets[i]))
        pending_pairs = {i for i, v in enumerate(raw) if isinstance(v, ComplexValue) and isinstance(v.re, PendingList)
                         and isinstance(rets[i], ComplexValue) and isinstance(rets[i].re, HloInstruction)}
        for i in pending_pairs:   # a list of complex elements: one buffer per part
            raw[i] = ComplexValue(*(p.buffer_for(b, PendingList.element_dims_of(r))
                                    for p, r in ((raw[i].re, rets[i].re), (raw[i].im, rets[i].im))))
        pending |= pending_pairs
        if not variant and not pending:
            break
        constant -= variant  # not loop invariant: carry it in the state and lower the body again
    if len(rets) != len(raw):
        raise InvalidArgumentError(f"body {body_f} returns {len(rets)} values for {len(raw)} loop variables")
    elems = []
    for i, slot in enumerate(ops.slots):
        if slot is None:
            continue
        if isinstance(values[i], Resource):
            elems.append(inner[i].value)
            continue
        for s, h in zip(slot if isinstance(slot, tuple) else (slot,),
                        _result_elements(sub, i, rets[i], node.inputs[i].dtype)):
            if not h.shape.compatible(ops.elements[s].shape):
                raise InvalidArgumentError(f"While: loop variable {i} changes shape from {ops.elements[s].shape} "
                                           f"to {h.shape} in the body; XLA needs static shapes")
            elems.append(h)
    body = body_b.build(body_b.tuple(elems))
    cond_b = b.sub_builder(cond_f)
    csub, crets = ctx.lowerer.lower_function_body(cond_f, ops.bind(cond_b), cond_b)
    if len(crets) != 1:
        raise InvalidArgumentError(f"cond {cond_f} must return one value, got {len(crets)}")
    pred = _scalar_pred(ctx, cond_b, csub.retval_hlo(0), "while condition")
    cond = cond_b.build(pred)
    loop = b.while_loop(cond, body, b.tuple(ops.elements))
    outs = []
    for i, (v, slot) in enumerate(zip(values, ops.slots)):
        if slot is None:
            outs.append(v)
        elif isinstance(v, Resource):
            if inner[i].written:
                v.assign(b.get_tuple_element(loop, slot))
            outs.append(v)
        elif isinstance(slot, tuple):
            outs.append(ComplexValue(*(b.get_tuple_element(loop, s) for s in slot)))
        else:
            outs.append(b.get_tuple_element(loop, slot))
    return outs


def _invariant_args(ctx, fname: str) -> set[int]:
    """The arguments a loop body returns unchanged: ``_Retval i`` fed by ``_Arg i`` through identities
    (tf2xla's ``IsLoopInvariant``)."""
    graph = ctx.function_graph(fname)
    out = set()
    for node in graph.op_nodes():
        if node.op not in ("_Retval", "_DeviceRetval"):
            continue
        edge = node.data_inputs()[0]
        while edge.src.op in ("Identity", "IdentityN", "Snapshot"):
            edge = edge.src.data_inputs()[edge.src_output if edge.src.op == "IdentityN" else 0]
        src = edge.src
        if src.op in ("_Arg", "_DeviceArg") and src.attr("index").i == node.attr("index").i:
            out.add(int(node.attr("index").i))
    return out


def _state_value(ctx, index: int, v: np.ndarray):
    """A host constant that varies in the loop, as loop state (a complex one as its two parts)."""
    if is_complex_value(v):
        return ComplexValue(*pair_of(ctx.b, v, ctx.node.inputs[index].dtype))
    return ctx.input(index)
