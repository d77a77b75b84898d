"""XLA's FloatNormalization for bf16 on CPU (xla/hlo/transforms/simplifiers/float_normalization.cc with
xla::cpu::CpuFloatSupport, which adds nothing to FloatSupport's lists for ordinary dots).

Stage: HLO pass, run by ``cpu_pipeline`` right after dot-decomposer (XLA:CPU runs it in
RunHloPassesThroughLayoutAssn before logistic-expander, so a bf16 logistic is expanded in f32).

Guarantee: afterwards no instruction of the entry computation (or of a while body/condition, a conditional
branch or a called computation) computes in bf16 except those FloatSupport lets keep it — convert (a bf16
operand or result), tuple, get-tuple-element, parameter, constant, bitcast-convert, call/while/conditional,
custom-call. Every other instruction with a bf16 operand gets ``convert(operand) -> f32`` in front of that
operand, and one with a bf16 result computes in f32 and is followed by ``convert -> bf16`` for its users.
Data movement (broadcast, reshape, slice, ...), compare and select are normalized too, as in TF 2.21's XLA
(its optimized HLO shows them in f32).

Excess precision (``xla_allow_excess_precision``, XLA's default true): a user of the normalized result
that is itself a ``convert`` to f32 reads the f32 result directly, so the bf16 rounding in between is
skipped (``tf.cast(a * b, tf.float32)`` of bf16 ``a, b`` is the unrounded f32 product, and so is the input
of a bf16 ``reduce_sum``, which tf2xla accumulates in f32) — not for a convert to a complex value's part
(``hlo.attrs.is_complex_part``: XLA's convert to complex is not a convert to f32). That is the only place where the values differ
from computing each bf16 op in f32 and rounding it back.

Not normalized (a documented difference in the HLO only): instructions with a tuple shape and instructions
that call a computation (reduce, reduce-window, sort, scatter, map, select-and-scatter), together with the
computations they call; XLA clones those computations with f32 parameters and root. Our code generator
computes such bf16 computations per step in f32 and rounds back, which is what XLA's clone does.
"""
from __future__ import annotations

from tfxla_cluster.hlo import attrs as A
from tfxla_cluster.hlo.ir import HloComputation, HloInstruction, HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P
from tfxla_cluster.passes.pass_ import HloPass
from tfxla_cluster.passes.util import UseGraph

LOW, HIGH = P.BF16, P.F32

# FloatNormalizationVisitor::DefaultAction leaves these alone (entry/exit, tuples, fusion, convert, control
# flow, bitcast-convert), plus side-effecting instructions.
_UNTOUCHED = frozenset({O.TUPLE, O.GET_TUPLE_ELEMENT, O.CONSTANT, O.PARAMETER, O.FUSION, O.CONVERT, O.CALL,
                        O.CUSTOM_CALL, O.WHILE, O.CONDITIONAL, O.BITCAST_CONVERT})
# FloatSupport::SupportsLowPrecisionOperand/Output beyond the untouched ones: these compute the same in
# bf16 as in f32 or differ when upcast (integer-only here, so they never see bf16).
_LOW_PRECISION_OK = frozenset({O.CLZ, O.SHIFT_RIGHT_LOGICAL, O.SHIFT_RIGHT_ARITHMETIC})
# Instructions whose called computations XLA would clone in f32 (see the module docstring).
_CALLERS_KEPT = frozenset({O.REDUCE, O.REDUCE_WINDOW, O.SORT, O.SCATTER, O.MAP, O.SELECT_AND_SCATTER})


def _is_low(instr: HloInstruction) -> bool:
    return instr.shape.is_array and instr.shape.element_type is LOW


class FloatNormalization(HloPass):
    """bf16 -> f32 compute with converts around, as XLA:CPU's FloatNormalization(bf16)."""

    name = "float-normalization-bf16"

    def __init__(self, allow_excess_precision: bool = True) -> None:
        self.allow_excess_precision = allow_excess_precision

    def run_on_module(self, module: HloModule) -> bool:
        kept = _computations_called_by_kept(module)
        changed = False
        for comp in module.computation_post_order():
            if comp.is_fusion_computation or id(comp) in kept:
                continue
            changed |= self._run_on_computation(comp)
        return changed

    def _run_on_computation(self, comp: HloComputation) -> bool:
        g = UseGraph(comp)
        changed = False
        for instr in comp.post_order():
            if instr.parent is not comp or not self._normalizable(instr):
                continue
            low_operands = [k for k, x in enumerate(instr.operands) if _is_low(x)]
            low_out = _is_low(instr)
            if not low_operands and not low_out:
                continue
            # InsertConvertBeforeOperand: one fresh convert per use (CSE merges them later, as in XLA)
            if low_operands:
                ops = list(instr.operands)
                for k in low_operands:
                    ops[k] = g.make(O.CONVERT, [ops[k]], ops[k].shape.with_element_type(HIGH), like=ops[k])
                g.set_operands(instr, ops)
            if low_out:
                self._change_output_then_convert_back(g, instr)
            changed = True
        if changed:
            g.finish()
        return changed

    @staticmethod
    def _normalizable(instr: HloInstruction) -> bool:
        op = instr.opcode
        if op in _UNTOUCHED or op in _LOW_PRECISION_OK or op in _CALLERS_KEPT or instr.called_computations:
            return False
        if op in (O.RNG, O.RNG_GET_AND_UPDATE_STATE, O.AFTER_ALL):  # side effects (HasSideEffectNoRecurse)
            return False
        return instr.shape.is_array and all(x.shape.is_array for x in instr.operands)

    def _change_output_then_convert_back(self, g: UseGraph, instr: HloInstruction) -> None:
        """ChangeOutputTypeThenInsertConvertBack: ``instr`` becomes f32; users read convert(instr) -> bf16,
        except (excess precision) converts to f32, which are replaced by ``instr`` itself."""
        comp = g.comp
        users = g.users(instr)
        was_root = comp.root is instr
        low_shape = instr.shape
        instr.shape = low_shape.with_element_type(HIGH)
        back = g.make(O.CONVERT, [instr], low_shape, like=instr)
        bypass = []
        for user in users:
            if self.allow_excess_precision and user.opcode is O.CONVERT and user.shape.element_type is HIGH \
                    and not A.is_complex_part(user):
                bypass.append(user)
            else:
                g.replace_operand(user, instr, back)
        for cv in bypass:
            g.replace_all_uses(cv, instr)
        if was_root:
            comp.root = back


def _computations_called_by_kept(module: HloModule) -> set[int]:
    """ids of the computations (transitively) called by instructions this pass leaves in bf16."""
    out: set[int] = set()
    stack = [c for comp in module.computations for i in comp.instructions if i.opcode in _CALLERS_KEPT
             for c in i.called_computations]
    while stack:
        c = stack.pop()
        if id(c) in out:
            continue
        out.add(id(c))
        stack.extend(cc for i in c.instructions for cc in i.called_computations)
    return out
