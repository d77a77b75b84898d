"""Stage: codegen rules for a call tagged ``xla_cpu_small_call`` (passes/small_while_loop_hoisting.py).

XLA:CPU emits such a call's computation (a small while loop, the conditionals in it included) as one kernel
with its legacy IrEmitter, not as a kernel per fusion with its MLIR fusion emitter. Ours still emits a kernel
per fusion, called from the entry's loop; what differs in TF's results is emitted by these rules while
``ModuleContext.legacy_emitter`` is set (``program._call``):

- the legacy elemental emitter keeps HLO operand order: a fused constant stays max/min's lhs (MLIR
  canonicalises it to the rhs) and a clamp is ``min(hi, max(lo, x))`` with ``lo`` first, so relu6 of -0 (or
  of a -denormal, under DAZ) is +0, where the fusion emitter's is -0;
- LLVM sees the whole loop: it vectorises an f32/f64 ``max``/``min`` with a broadcast constant (a relu)
  over a shape whose innermost dimension is 1 with masked lanes, a compare and blend that keeps a
  ±denormal's bits, for the loop lengths of ``_KEPT`` (measured in TF 2.21's results, fuzz seed 120000360);
  other lengths, and shapes with a longer innermost dimension, run x86 max/min, which flush under DAZ. The
  same holds, with other lengths, in an arm of a tf.cond inside the loop (fuzz seed 234001616).

A loop of a known trip count of 0 or 1 is no small call in TF's module: WhileLoopSimplifier
(passes/while_loop_simplifier.py, with XLA's one trip-count analysis) removes or inlines it in the
simplification fixed point, before SmallWhileLoopHoisting runs; a loop it keeps (side effects, an unknown
count) is a small call here as in TF.
"""
from __future__ import annotations

from tfxla_cluster.hlo.attrs import is_small_call
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape

# Leading elements of the vectorised loop whose ±denormal max/min keeps its bits, by element type and loop
# length M (the innermost dimension longer than 1 below a trailing 1), for M < 16: TF 2.21, relu of
# ±denormals in a 2- and 3-trip small while over [M,1], [1,M,1], [2,M,1], [3,M,1], [M,1,1], M = 1..20, the
# same on an AVX-512 host (Zen 4) and an AVX2 one (Zen 3): both vectorise at XLA's 256-bit preferred width,
# so the table is not keyed on the ISA. From 16 on ``_kept_from_16``. ``_KEPT_ARM``: the max/min in one arm of
# a select on a scalar predicate (a tf.cond in the loop body, which LLVM unswitches): full vectors of 4 and 8
# run x86 max/min there (measured on Zen 3, [M,1] of M = 2..41).
_KEPT = {T.F32: {3: 3, 4: 4, 5: 5, 6: 6, 7: 7, 8: 8}, T.F64: {3: 3, 4: 4, 8: 8, 12: 12}}
_KEPT_ARM = {T.F32: {3: 3, 5: 5, 6: 6, 7: 7}, T.F64: {3: 3, 8: 8, 12: 12}}
_MEASURED_UP_TO = 42


def _kept_from_16(et: T, m: int, arm: bool) -> int:
    """Kept elements of a loop of M ≥ 16 (TF 2.21 on Zen 3, M = 16..42): whole groups of 4, and of 8 from 33
    on for f32; an f64 arm of 38 or more is x86 max/min throughout."""
    if et is T.F32 and m > 32:
        return m - m % 8
    if et is T.F64 and arm and m >= 38:
        return 0
    return m - m % 4


def kept_minmax(et: T, shape: Shape, arm: bool = False) -> tuple[int, int] | None:
    """For an f32/f64 max/min with a broadcast constant that is its small-call fusion's root (``arm``: in an
    arm of a root select on a scalar predicate): (dimension, how many of its leading indices keep a
    ±denormal's bits), or None when the shape's innermost dimension is not 1 (the usual rules apply)."""
    if et not in _KEPT or shape.rank < 2 or shape.dimensions[shape.minor_to_major[0]] != 1:
        return None
    for d in shape.minor_to_major:
        m = shape.dimensions[d]
        if m > 1:
            if m > _MEASURED_UP_TO:
                return d, 0
            return d, ((_KEPT_ARM if arm else _KEPT)[et].get(m, 0) if m < 16 else _kept_from_16(et, m, arm))
    return shape.minor_to_major[-1], 0


def legacy_call(instr) -> bool:
    """Whether the call ``instr`` is emitted by the legacy rules: every small call (a loop of 0 or 1 trips
    never becomes one, see the module docstring)."""
    return is_small_call(instr)
