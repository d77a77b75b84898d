"""HLO verifier (xla/service/hlo_verifier.cc): structural checks, then per-instruction shape checks.

``verify_module(module)`` raises ``InternalError`` naming the computation and instruction on the first
problem, and returns None when the module is well formed:

- structure: an entry exists; computation names are unique; instruction names are unique in the whole
  module; every computation has a root that belongs to it; parameter numbers are 0..n-1 without gaps;
  operands and control predecessors are defined in the same computation and the instruction list is
  in definition order (no use before def, no cycles); called computations belong to the module;
- arity: fixed-arity opcodes have exactly ``opcode.arity`` operands;
- shapes: every instruction's declared shape is what shape inference derives from its operands and
  attributes (layouts ignored), which covers elementwise shape identity, broadcast dimension rules,
  reshape/reduce/dot element counts, transpose permutations, tuple index ranges and the signatures of
  to_apply/condition/body/branch computations; constants' literals match their shapes.
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.errors import InternalError, InvalidArgumentError
from tfxla_cluster.hlo.opcode import HloOpcode
from tfxla_cluster.hlo.shape_inference import infer_shape


def _where(comp, instr=None) -> str:
    return f"computation %{comp.name}" + (f", instruction %{instr.name} ({instr.opcode.text})" if instr else "")


def _check_literal(comp, instr) -> None:
    if not instr.literal_elided:
        _check_literal_value(comp, instr, instr.literal, instr.shape)


def _check_literal_value(comp, instr, value, shape) -> None:
    # A module-level function, not a recursive closure: each call of one would leave a reference cycle
    # (the closure and its cell) for the cyclic collector.
    if shape.is_tuple:
        if not isinstance(value, tuple) or len(value) != len(shape.tuple_shapes):
            raise InternalError(f"{_where(comp, instr)}: tuple literal does not match {shape}")
        for v, s in zip(value, shape.tuple_shapes):
            _check_literal_value(comp, instr, v, s)
        return
    if not isinstance(value, np.ndarray) or value.dtype != shape.dtype or value.shape != shape.dimensions:
        got = f"{getattr(value, 'dtype', type(value).__name__)}{list(getattr(value, 'shape', ()))}"
        raise InternalError(f"{_where(comp, instr)}: literal {got} does not match shape {shape}")


def verify_computation(comp, module=None, seen_names: set[str] | None = None) -> None:
    """Check one computation (see module docstring). ``seen_names`` collects module-wide names."""
    if comp.root is None or comp.root.parent is not comp:
        raise InternalError(f"{_where(comp)}: root is missing or not in the computation")
    # The instructions checked so far (each one's parent is ``comp``): an operand in it is defined in this
    # computation before its use. Instructions hash by identity; the common case is one C-level check.
    defined: set = set()
    all_defined = defined.issuperset
    numbers = []
    seen_names = set() if seen_names is None else seen_names
    for instr in comp.instructions:
        if instr.parent is not comp:
            raise InternalError(f"{_where(comp, instr)}: instruction's parent is {instr.parent!r}")
        if instr.name in seen_names:
            raise InternalError(f"{_where(comp, instr)}: instruction name is not unique in the module")
        seen_names.add(instr.name)
        if not all_defined(instr.operands) or (instr.control_predecessors
                                               and not all_defined(instr.control_predecessors)):
            for op in instr.operands + instr.control_predecessors:
                if op.parent is not comp:
                    raise InternalError(f"{_where(comp, instr)}: operand %{op.name} is not in this computation")
                if op not in defined:
                    raise InternalError(f"{_where(comp, instr)}: operand %{op.name} is used before it is defined")
        arity = instr.opcode.arity
        if arity >= 0 and len(instr.operands) != arity:
            raise InternalError(f"{_where(comp, instr)}: expects {arity} operands, has {len(instr.operands)}")
        for callee in instr.called_computations:
            if module is not None and callee.parent is not module:
                raise InternalError(f"{_where(comp, instr)}: calls %{callee.name}, which is not in the module")
        if instr.opcode is HloOpcode.PARAMETER:
            numbers.append(instr.parameter_number)
        if instr.opcode is HloOpcode.CONSTANT:
            _check_literal(comp, instr)
        defined.add(instr)
        try:
            expected = infer_shape(instr)
        except InvalidArgumentError as e:
            raise InternalError(f"{_where(comp, instr)}: {e}") from None
        if not expected.compatible(instr.shape):
            raise InternalError(f"{_where(comp, instr)}: shape is {instr.shape.to_string(False)}, "
                                f"but its operands and attributes give {expected.to_string(False)}")
    if sorted(numbers) != list(range(len(numbers))):
        raise InternalError(f"{_where(comp)}: parameter numbers {sorted(numbers)} are not 0..{len(numbers) - 1}")


def verify_module(module) -> None:
    """Verify every computation of ``module``; raise ``InternalError`` on the first problem."""
    if module.entry is None or module.entry not in module.computations:
        raise InternalError(f"module {module.name} has no entry computation")
    comp_names: set[str] = set()
    names: set[str] = set()
    for comp in module.computations:
        if comp.name in comp_names:
            raise InternalError(f"computation name %{comp.name} is not unique in module {module.name}")
        comp_names.add(comp.name)
        if comp.parent is not module:
            raise InternalError(f"{_where(comp)}: parent is not module {module.name}")
        verify_computation(comp, module, names)
