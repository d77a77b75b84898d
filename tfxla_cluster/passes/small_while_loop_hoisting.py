"""XLA:CPU's ``SmallWhileLoopHoistingPass`` (xla/service/cpu/small_while_loop_hoisting_pass.cc).

The last HLO pass of XLA:CPU's pipeline (after copy insertion, before the final DCE). A ``while`` whose
one-iteration cost, HloCostAnalysis's ``bytes_accessed`` with CPU shape sizes (``bytes_accessed`` below),
is below the threshold (the backend extra option ``xla_cpu_small_while_loop_byte_threshold``, default
1024 bytes) and that calls nothing the call thunk emitter cannot emit (custom-call, infeed, outfeed,
scatter, sort, fft, partition-id, replica-id, collectives, custom fusions — at any depth) is outlined:

    %call = call(operands), to_apply=%<while>_computation, frontend_attributes={xla_cpu_small_call="true"}

where the callee holds a parameter per operand and the cloned while. XLA:CPU's thunk emitter then emits
the callee as one kernel with its legacy IrEmitter, loop and conditionals included, so LLVM optimises the
whole loop at once (what it vectorises and what it folds there can differ from a kernel per op: a relu of a
-denormal keeps its bits in a masked vector blend, fuzz seed 120000360). The attribute is the reason, and
shows in our dumps as in TF's; codegen emits the call inline as before (one LLVM function per small call
is not modelled yet).

Guarantee: only the module's structure changes (a call around the while); its values are the same.
"""
from __future__ import annotations

from tfxla_cluster.hlo.attrs import SMALL_CALL_ATTRIBUTE, FusionKind, is_small_call
from tfxla_cluster.hlo.ir import HloComputation, HloInstruction, HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import Shape
from tfxla_cluster.passes.pass_ import HloPass
from tfxla_cluster.passes.util import UseGraph, new_instruction

THRESHOLD_OPTION = "xla_cpu_small_while_loop_byte_threshold"
DEFAULT_THRESHOLD = 1024   # options::SmallWhileLoopByteThreshold's default

# InstructionIsUnavailable: what the call thunk emitter (legacy IrEmitter in a thunk) cannot emit.
# Collectives (IsCollective) count too; those of the names our opcode table lacks cannot occur.
_UNAVAILABLE = frozenset(o for o in O if o.name in (
    "CUSTOM_CALL", "INFEED", "OUTFEED", "SCATTER", "SORT", "FFT", "PARTITION_ID", "REPLICA_ID") or
    o.name.startswith(("ALL_GATHER", "ALL_REDUCE", "ALL_TO_ALL", "COLLECTIVE_", "REDUCE_SCATTER")))


def threshold(flags) -> int:
    """``options::SmallWhileLoopByteThreshold``: ``xla_cpu_small_while_loop_byte_threshold=N`` among the
    backend extra options (comma-separated ``key[=value]``), else 1024."""
    try:
        extra = str(flags["xla_backend_extra_options"] or "")
    except (KeyError, TypeError):
        return DEFAULT_THRESHOLD
    for item in extra.split(","):
        key, _, value = item.strip().partition("=")
        if key == THRESHOLD_OPTION:
            try:
                return int(value)
            except ValueError:
                from tfxla_cluster.errors import InvalidArgumentError
                raise InvalidArgumentError(f"Failed to parse value for: {THRESHOLD_OPTION}.") from None
    return DEFAULT_THRESHOLD


# ---------------------------------------------------------------- HloCostAnalysis's bytes accessed
def shape_size(shape: Shape) -> int:
    """``CpuExecutable::ShapeSizeBytes``: an array's bytes (a bounded dynamic one plus an s32 per
    dimension), a tuple's pointer table, 0 for a token."""
    size = shape.byte_size()
    if shape.is_array and shape.is_dynamic:
        size += 4 * shape.rank
    return size


def _computation_bytes(comp: HloComputation) -> float:
    """``ProcessSubcomputation``'s bytes accessed: the sum over every instruction of ``comp``."""
    return sum(bytes_accessed(i) for i in comp.instructions)


def _fusion_parameter_read_bytes(param: HloInstruction, users: dict) -> float:
    """``HloCostAnalysis::FusionParameterReadBytes`` (``users``: the fused computation's use lists)."""
    size = 0.0
    seen_trivial_user = False
    for user in users.get(id(param), ()):
        op = user.opcode
        if op is O.FUSION:
            inner = user.fused_computation
            inner_users = _users(inner)
            for k, o in enumerate(user.operands):
                if o is param:
                    size += _fusion_parameter_read_bytes(inner.parameter(k), inner_users)
        elif op is O.SLICE:
            size += shape_size(user.shape)
        elif op is O.DYNAMIC_SLICE and user.operands[0] is param:
            size += shape_size(user.shape)
        elif op is O.DYNAMIC_UPDATE_SLICE and user.operands[0] is param:
            pass   # operand 0 is aliased to the output
        elif op in (O.BROADCAST, O.RESHAPE):
            size += shape_size(param.shape)
        elif not seen_trivial_user:
            seen_trivial_user = True
            size += shape_size(param.shape)
    return size


def _users(comp: HloComputation) -> dict[int, list[HloInstruction]]:
    users: dict[int, list[HloInstruction]] = {}
    for i in comp.instructions:
        for o in dict.fromkeys(i.operands):   # (XLA's users() lists a user once)
            users.setdefault(id(o), []).append(i)
    return users


def _fusion_bytes(fusion: HloInstruction) -> float:
    """``HloCostAnalysis::HandleFusion``: outputs written (a dynamic-update-slice root writes its update),
    constants of more than one element read, and each parameter's reads."""
    comp = fusion.fused_computation
    root = comp.root
    total = 0.0
    outputs = [(fusion.shape, root)] if not fusion.shape.is_tuple else \
        [(s, root.operands[k] if root.opcode is O.TUPLE else None) for k, s in enumerate(fusion.shape.tuple_shapes)]
    for s, r in outputs:
        if not s.is_array:
            continue   # (a nested tuple's leaves: not produced by our fusions)
        total += shape_size(r.operands[1].shape) if r is not None and r.opcode is O.DYNAMIC_UPDATE_SLICE \
            else shape_size(s)
    total += sum(shape_size(i.shape) for i in comp.instructions
                 if i.opcode is O.CONSTANT and i.shape.is_array and i.shape.num_elements > 1)
    users = _users(comp)
    for p in comp.parameters:
        total += _fusion_parameter_read_bytes(p, users)
    return total


_NO_BYTES = frozenset(o for o in O if o.name in (
    "PARAMETER", "CONSTANT", "GET_TUPLE_ELEMENT", "BITCAST", "AFTER_ALL", "ADD_DEPENDENCY", "DOMAIN"))


def bytes_accessed(instr: HloInstruction) -> float:
    """HloCostAnalysis's ``bytes_accessed`` of ``instr`` with CPU shape sizes (a while: one iteration)."""
    op = instr.opcode
    if op in _NO_BYTES:
        return 0.0
    if op is O.TUPLE:
        return float(shape_size(instr.shape))
    if op is O.WHILE:
        return _computation_bytes(instr.while_body) + _computation_bytes(instr.while_condition)
    if op is O.CONDITIONAL:
        return max(_computation_bytes(c) for c in instr.branch_computations)
    if op is O.CALL:
        return _computation_bytes(instr.to_apply)
    if op is O.FUSION:
        return _fusion_bytes(instr)
    if op is O.CUSTOM_CALL:
        return -1.0
    if op is O.SLICE:
        return 2.0 * shape_size(instr.shape)
    if op in (O.DYNAMIC_SLICE, O.GATHER):
        return 2.0 * shape_size(instr.shape) + shape_size(instr.operands[1].shape)
    if op is O.DYNAMIC_UPDATE_SLICE:
        return 2.0 * shape_size(instr.operands[1].shape) + shape_size(instr.operands[2].shape)
    # Preprocess's default: the output and every operand.
    return float(shape_size(instr.shape) + sum(shape_size(o.shape) for o in instr.operands))


# ---------------------------------------------------------------- the pass
def _unavailable(instr: HloInstruction, memo: dict[int, bool]) -> bool:
    """``ContainsUnavailableInstruction``: ``instr`` or anything its computations hold, at any depth."""
    known = memo.get(id(instr))
    if known is not None:
        return known
    bad = instr.opcode in _UNAVAILABLE or (instr.opcode is O.FUSION and instr.fusion_kind is FusionKind.CUSTOM) or \
        any(_unavailable(i, memo) for c in instr.called_computations for i in c.instructions)
    memo[id(instr)] = bad
    return bad


def small_call_reason(instr: HloInstruction, limit: int, memo: dict[int, bool] | None = None) -> str | None:
    """Why the while ``instr`` is outlined as a small call (None: it is not)."""
    if _unavailable(instr, {} if memo is None else memo):
        return None
    size = int(bytes_accessed(instr))
    if size >= limit:
        return None
    return f"{size} bytes accessed per iteration < {limit}"


class SmallWhileLoopHoisting(HloPass):
    """Outline each small while into a ``call`` tagged ``xla_cpu_small_call`` (module docstring)."""

    name = "small-while-loop-hoisting"

    def __init__(self, limit: int = DEFAULT_THRESHOLD) -> None:
        self.limit = limit
        self.decisions: list[str] = []   # "<while>: <reason>" per outlined loop

    def run_on_module(self, module: HloModule) -> bool:
        # (a while a small call already holds stays: a second run of the pipeline changes nothing)
        held = {id(callee.root) for c in module.computations for i in c.instructions if is_small_call(i)
                for callee in i.called_computations}
        whiles = [i for c in module.computation_post_order() if not c.is_fusion_computation
                  for i in c.instructions if i.opcode is O.WHILE and id(i) not in held]
        memo: dict[int, bool] = {}
        changed = False
        for w in whiles:
            reason = small_call_reason(w, self.limit, memo)
            if reason is None:
                continue
            self._outline(module, w)
            self.decisions.append(f"{w.name}: {reason}")
            changed = True
        return changed

    @staticmethod
    def _outline(module: HloModule, w: HloInstruction) -> None:
        comp = w.parent
        callee = HloComputation(f"{w.name}_computation")
        params = []
        for k, o in enumerate(w.operands):
            params.append(callee.add_instruction(
                new_instruction(O.PARAMETER, (), o.shape, name=o.name, parameter_number=k)))
        inner = callee.add_instruction(w.clone(params))
        inner.metadata = w.metadata
        callee.set_root(inner)
        module.add_computation(callee)
        call = new_instruction(O.CALL, list(w.operands), w.shape, name="call", called_computations=[callee])
        call.raw_attributes["frontend_attributes"] = f'{{{SMALL_CALL_ATTRIBUTE}="true"}}'
        call.metadata = w.metadata
        g = UseGraph(comp)
        g.add(call)
        # The call takes the while's place in the instruction order (the order the dump prints).
        comp.instructions.remove(call)
        comp.instructions.insert(comp.instructions.index(w), call)
        g.replace(w, call)
        g.finish()

