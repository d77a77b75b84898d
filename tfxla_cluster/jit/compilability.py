"""Can XLA compile this node? TF's ``RecursiveCompilabilityChecker``, with reasons.

Stage: clustering (step A) and must-compile checking. ``CompilabilityChecker.check_node`` answers for
one node exactly as TF 2.21's ``compilability_check_util.cc`` does, in TF's check order: SOURCE/SINK,
top-level ``_Arg``/``_Retval``, ``_scoped_allocator``/``_forward_from``, function calls (recursively,
depth-limited), the XLA kernel registry (:mod:`tfxla_cluster.tfops.xla_kernels`), functional
While/If/Case bodies, then the operation filter (stateful RNG, ControlTrigger, Assert/CheckNumerics,
CollectiveReduceV2, Where, Unique, DT_VARIANT, Stack, TensorArray, resource ops in called functions,
inaccurate and slow ops).

Every "no" carries TF's reason text and its :class:`~tfxla_cluster.tfops.reasons.ReasonCode`, and
``find_uncompilable_nodes`` lists *all* offending nodes of a function (with their call stack) for the
must-compile error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from tensorflow.core.framework import function_pb2, node_def_pb2, types_pb2

from tfxla_cluster.errors import NotFoundError
from tfxla_cluster.graph import opdefs
from tfxla_cluster.graph.function import CALL_OPS, instantiate
from tfxla_cluster.graph.opdefs import ARG_OP, RETVAL_OP, SINK_NODE, SOURCE_NODE
from tfxla_cluster.tfops import op_tables, xla_kernels
from tfxla_cluster.tfops.filters import MUST_COMPILE_FILTER, OperationFilter
from tfxla_cluster.tfops.reasons import ReasonCode as R


@dataclass(frozen=True, slots=True)
class Frame:
    """One step of the call stack: a node and the function it sits in (None at top level)."""

    node: str
    function: str | None


@dataclass(frozen=True, slots=True)
class Uncompilable:
    """A node XLA cannot compile, why, and the call stack that reaches it (outermost first)."""

    node: str
    op: str
    reason: str
    stack: tuple[Frame, ...] = field(default=())
    code: R = R.NOT_COMPILABLE

    @property
    def function(self) -> str | None:
        return self.stack[-1].function if self.stack else None


# Functional control flow whose bodies must compile too: op → (kind, function attrs).
_FUNCTIONAL_BODIES = {op: (R.UNCOMPILABLE_WHILE, ("cond", "body")) for op in op_tables.WHILE_OPS}
_FUNCTIONAL_BODIES.update({op: (R.UNCOMPILABLE_IF, ("then_branch", "else_branch")) for op in op_tables.IF_OPS})


# Attrs no check reads (a Const's tensor, shape annotations): left out of the memo key of
# ``check_node`` so that nodes differing only in them share one answer.
_UNREAD_ATTRS = frozenset({"value", "_output_shapes"})


def _has_dtype(slots: Iterable[opdefs.ArgSlot], dtype: int) -> bool:
    return any(opdefs.base_dtype(s.dtype) == dtype for s in slots)


class CompilabilityChecker:
    """Checks nodes (NodeDefs, so function bodies work the same) against one JIT device and filter."""

    def __init__(self, op_filter: OperationFilter, jit_device: str,
                 library: function_pb2.FunctionDefLibrary) -> None:
        self.filter = op_filter
        self.jit_device = jit_device
        self.library = library
        self._functions = {f.signature.name: f for f in library.function}
        self._call_cache: dict[tuple[str, int], list[Uncompilable]] = {}
        self._op_defs: dict[str, object] = {}
        # Top-level nodes found compilable, by (op, ref_input, attrs): graphs repeat the same op with
        # the same attrs thousands of times. Only "yes" is kept; a "no" names its node.
        self._compilable: set[tuple] = set()

    # ----- public ---------------------------------------------------------------------------------
    def check_node(self, node_def: node_def_pb2.NodeDef, stack: tuple[Frame, ...] = (),
                   ref_input: bool = False) -> Uncompilable | None:
        """None if compilable, else the first problem (TF's reason and its code). ``stack`` is the
        frames *above* this node; ``ref_input``: some data input is produced as a ref type (TF's
        HasForwardedRefInput looks at the producers, which a NodeDef alone doesn't show)."""
        key = None
        if not stack and node_def.name not in (SOURCE_NODE, SINK_NODE):
            # Asked for every candidate: indexing the map by key is faster than .items() in upb.
            attrs = node_def.attr
            key = (node_def.op, ref_input, *sorted(
                [(k, attrs[k].SerializeToString(deterministic=True)) for k in attrs if k not in _UNREAD_ATTRS]))
            if key in self._compilable:
                return None
        found = self._check(node_def, stack + (Frame(node_def.name, stack[-1].function if stack else None),),
                            first_only=True, ref_input=ref_input)
        if found:
            return found[0]
        if key is not None:
            self._compilable.add(key)
        return None

    def _lookup_op_def(self, op: str):
        """``opdefs.lookup_op_def`` through a dict (the library is scanned once, not per node)."""
        op_def = self._op_defs.get(op)
        if op_def is None:
            fdef = self._functions.get(op)
            op_def = fdef.signature if fdef is not None else opdefs.lookup_op_def(op)
            self._op_defs[op] = op_def
        return op_def

    def find_uncompilable_in_function(self, fname: str) -> list[Uncompilable]:
        """Every uncompilable node of function ``fname`` (recursively), as TF's FindUncompilableNodes
        reports for a must-compile call."""
        return self._check_call(fname, (Frame(fname, None),), first_only=False)

    # ----- TF's IsCompilableNode ------------------------------------------------------------------
    def _check(self, nd: node_def_pb2.NodeDef, stack: tuple[Frame, ...], first_only: bool,
               ref_input: bool = False) -> list[Uncompilable]:
        def bad(code: R, reason: str = "") -> list[Uncompilable]:
            return [Uncompilable(nd.name, nd.op, reason or code.text, stack, code)]

        depth = len(stack)
        if nd.name in (SOURCE_NODE, SINK_NODE) and nd.op == "NoOp" and depth == 1:
            return bad(R.SOURCE_SINK)
        if depth == 1 and nd.op in (ARG_OP, RETVAL_OP):
            return bad(R.TOP_LEVEL_ARG_RETVAL)
        if "_scoped_allocator" in nd.attr or "_forward_from" in nd.attr:
            return bad(R.SCOPED_ALLOCATOR)
        try:
            op_def = self._lookup_op_def(nd.op)
        except NotFoundError as e:
            return bad(R.NO_XLA_KERNEL, f"{R.NO_XLA_KERNEL.text}: {e}")
        inputs = opdefs.input_slots(nd, op_def) if op_def else []
        outputs = opdefs.output_slots(nd, op_def) if op_def else []

        fname = self._callee(nd)
        if fname is not None:
            inner = self._check_call(fname, stack, first_only)
            if inner:
                if first_only:
                    first = inner[0]
                    return bad(R.UNCOMPILABLE_FUNCTION,
                               f"{R.UNCOMPILABLE_FUNCTION.text}: {fname} (node {first.node}: {first.reason})")
                return inner
        else:
            code, reason = self._xla_kernel_reason(nd, op_def, ref_input)
            if reason:
                return bad(code, f"{R.NO_XLA_KERNEL.text}: {reason}")

        functional = _FUNCTIONAL_BODIES.get(nd.op)
        if functional is not None:
            code, attr_names = functional
            for attr in attr_names:
                body = nd.attr[attr].func.name
                inner = self._check_call(body, stack, first_only)
                if inner:
                    return inner if not first_only else bad(
                        code, f"{code.text}: {attr} {body} (node {inner[0].node}: {inner[0].reason})")
        if self.filter.require_always_compilable and nd.op in op_tables.CASE_OPS:
            for branch in nd.attr["branches"].list.func:
                inner = self._check_call(branch.name, stack, first_only)
                if inner:
                    return inner if not first_only else bad(
                        R.UNCOMPILABLE_CASE,
                        f"{R.UNCOMPILABLE_CASE.text}: branch {branch.name} (node {inner[0].node}: {inner[0].reason})")

        f = self.filter
        resource_info = op_tables.resource_op_info(nd.op)
        if not f.allow_stateful_rng_ops and nd.op in op_tables.STATEFUL_RANDOM_OPS:
            return bad(R.STATEFUL_RANDOM)
        if not f.allow_control_trigger and nd.op == "ControlTrigger":
            return bad(R.CONTROL_TRIGGER)
        if not f.allow_eliding_assert_and_checknumerics_ops and nd.op in op_tables.ASSERT_OPS:
            return bad(R.ASSERT_OR_CHECKNUMERICS)
        if not f.allow_collective_reduce_v2 and nd.op == "CollectiveReduceV2":
            return bad(R.COLLECTIVE)
        if not f.allow_where_op and nd.op == "Where":
            return bad(R.WHERE_EXCLUDED)
        if not f.allow_unique_op and nd.op == "Unique":
            return bad(R.UNIQUE)
        if not f.allow_ops_producing_or_consuming_variant and (
                _has_dtype(inputs, types_pb2.DT_VARIANT) or _has_dtype(outputs, types_pb2.DT_VARIANT)):
            return bad(R.VARIANT)
        if not f.allow_stack_ops and resource_info is not None and resource_info[1] == "stack":
            return bad(R.STACK_OP)
        if not f.allow_tensor_array_ops and resource_info is not None and resource_info[1] == "tensor_array":
            return bad(R.TENSOR_ARRAY_OP)
        if not f.allow_resource_ops_in_called_functions and depth > 1 and _has_dtype(inputs, types_pb2.DT_RESOURCE):
            return bad(R.RESOURCE_OP_IN_FUNCTION)
        if not f.allow_inaccurate_ops and nd.op in op_tables.INACCURATE_OPS:
            return bad(R.INACCURATE_OP)
        if not f.allow_slow_ops and nd.op in op_tables.SLOW_OPS:
            return bad(R.SLOW_OP)
        return []

    def _xla_kernel_reason(self, nd: node_def_pb2.NodeDef, op_def, ref_input: bool) -> tuple[R, str]:
        """TF's HasXLAKernel: (code, '') if a kernel matches, else (code, the reason)."""
        if nd.op == op_tables.SYMBOLIC_GRADIENT_OP:
            return R.NO_XLA_KERNEL, "SymbolicGradient should be handled by IsCompilableCall()."
        if nd.op == op_tables.STRING_CONST_OP and not self.filter.allow_string_consts and \
                nd.attr["dtype"].type == types_pb2.DT_STRING:
            return R.STRING_CONST, R.STRING_CONST.text
        if nd.op in op_tables.FORWARDS_REF_INPUT_OPS and ref_input:
            return R.REF_IDENTITY, R.REF_IDENTITY.text
        ok, reason = xla_kernels.find_kernel_def(self.jit_device, nd, op_def)
        return R.NO_XLA_KERNEL, ("" if ok else reason)

    def _has_ref_input(self, nd: node_def_pb2.NodeDef, by_name: dict) -> bool:
        if nd.op not in op_tables.FORWARDS_REF_INPUT_OPS:
            return False
        for ref in nd.input:
            if ref.startswith("^"):
                continue
            name, _, idx = ref.partition(":")
            src = by_name.get(name)
            if src is None:
                continue
            try:
                slots = opdefs.output_slots(src, opdefs.lookup_op_def(src.op, self.library))
            except NotFoundError:
                continue
            i = int(idx or 0)
            if i < len(slots) and slots[i].is_ref:
                return True
        return False

    def _callee(self, nd: node_def_pb2.NodeDef) -> str | None:
        """The function a call node runs (Node::IsFunctionCall + NameAndAttrsFromFunctionCall)."""
        if nd.op in CALL_OPS:
            return nd.attr["f"].func.name
        if nd.op == "SymbolicGradient":
            # TF instantiates the gradient of `f`; its ops are the gradients of f's ops, which XLA
            # compiles iff it compiles f's ops. We check f itself (documented approximation).
            return nd.attr["f"].func.name
        if nd.op in self._functions:
            return nd.op
        return None

    def _check_call(self, fname: str, stack: tuple[Frame, ...], first_only: bool) -> list[Uncompilable]:
        """TF's IsCompilableCall: every op node of the instantiated body must be compilable."""
        if len(stack) > op_tables.MAX_RECURSION_DEPTH:
            return [Uncompilable(stack[-1].node, "", R.FUNCTION_DEPTH.text, stack, R.FUNCTION_DEPTH)]
        # Only the yes/no and reason text matter when stopping at the first problem, so those answers
        # are shared between call sites; full reports keep each site's own stack.
        key = (fname, len(stack))
        cached = self._call_cache.get(key) if first_only else None
        if cached is not None:
            return cached
        fdef = self._functions.get(fname)
        if fdef is None:
            result = [Uncompilable(stack[-1].node if stack else fname, "",
                                   f"{R.BAD_FUNCTION.text}: '{fname}'", stack, R.BAD_FUNCTION)]
        else:
            body = instantiate(fdef, self.library)
            by_name = {n.name: n for n in body.node}
            result = []
            for nd in body.node:
                if nd.op in (ARG_OP, RETVAL_OP):
                    continue
                found = self._check(nd, stack + (Frame(nd.name, fname),), first_only,
                                    ref_input=self._has_ref_input(nd, by_name))
                if found:
                    result.extend(found)
                    if first_only:
                        break
        if first_only:
            self._call_cache[key] = result
        return result


def must_compile_checker(jit_device: str, library: function_pb2.FunctionDefLibrary) -> CompilabilityChecker:
    """The permissive checker TF uses for ``jit_compile=True`` functions."""
    return CompilabilityChecker(MUST_COMPILE_FILTER, jit_device, library)
