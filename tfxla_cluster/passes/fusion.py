"""Instruction fusion with XLA:CPU's policy (xla/service/instruction_fusion.cc + cpu/cpu_instruction_fusion.cc).

Mechanism (InstructionFusion::Run), per non-fusion computation:
- consumers are dequeued in reverse post order; each one's operands are tried in queue order (later in
  the post order first, so a producer is never cloned twice into one fusion); the first operand that
  may be fused is cloned into the consumer — which becomes a ``fusion`` instruction first if it is not
  one — and the fusion is queued again, to absorb its new operands;
- a producer left without users is deleted; one with other users stays (it was duplicated);
- before the walk, producers whose duplication would read more memory than they write
  ("globally unfusible": not effectively unary, operands larger than the result, and not fusible into
  every consumer along every path) are marked so they are fused only into a sole consumer.
Policy (``should_fuse``, CpuInstructionFusion::ShouldFuse) — every answer is a ``FusionDecision`` with
XLA's reason, recorded in ``decisions`` for dumps and tests:
- never fuse non-scalar constants, a root, a fusion, a producer that is not loop-fusible (elementwise,
  bitcast, broadcast, concatenate, dynamic-(update-)slice, gather, iota, pad, reduce, reshape, reverse,
  slice, transpose), concatenates with more than 8 operands or large minor-dimension concatenates;
- never duplicate an expensive producer, nor fuse one into a consumer that reuses its elements;
- no reduce into a fusion that already holds more than 5 (kMaxReductionsInFusion); no two-instruction
  fusions of a constant and one op;
- no fusion whose emitted code would repeat an instruction more than 15 times, or repeat one that
  opens basic blocks (FusionNodeIndexingEvaluation);
- ``add(dot, x)`` with a single-use matrix-vector dot (result rank <= 1) becomes a kOutput fusion;
  small matrix-vector dots may absorb their matrix operand; other dots are GEMM calls and stay apart.
"""
from __future__ import annotations

from bisect import insort
from dataclasses import dataclass
from operator import itemgetter
from typing import NamedTuple

from tfxla_cluster.hlo import attrs as A
from tfxla_cluster.hlo.ir import HloComputation, HloInstruction, HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.passes.fusion_ir import FusedIndex, create_fusion, fuse_instruction
from tfxla_cluster.passes.pass_ import HloPass
from tfxla_cluster.passes.util import UseGraph, has_side_effect, is_effective_scalar, non_fusion_computations

MAX_CONCATENATE_ARGUMENTS = 8
MAX_REDUCTIONS_IN_FUSION = 5
FUSION_THRESHOLD_BYTES = 16 * 1024
ALLOWED_CODE_DUPLICATION = 15

# CanBeLoopFused: ops with an efficient elemental (index -> value) emitter, besides elementwise ones.
LOOP_FUSIBLE = frozenset({
    O.BITCAST, O.BROADCAST, O.CONCATENATE, O.DYNAMIC_SLICE, O.DYNAMIC_UPDATE_SLICE, O.GATHER, O.IOTA, O.PAD,
    O.REDUCE, O.RESHAPE, O.REVERSE, O.SLICE, O.TRANSPOSE,
})
# CpuInstructionFusion::IsExpensive: the cheap opcodes; abs/sign/cos/sin/tan only cost for complex
# numbers; convert f32->bf16, and float (or non-constant) divide/remainder are special cases below.
CPU_CHEAP = frozenset({
    O.ADD, O.AND, O.BITCAST, O.BITCAST_CONVERT, O.BROADCAST, O.CEIL, O.CLAMP, O.CLZ, O.COMPARE, O.COMPLEX,
    O.CONCATENATE, O.CONSTANT, O.COPY, O.DYNAMIC_SLICE, O.DYNAMIC_UPDATE_SLICE, O.FLOOR, O.GET_TUPLE_ELEMENT,
    O.IMAG, O.IOTA, O.IS_FINITE, O.MAXIMUM, O.MINIMUM, O.MULTIPLY, O.NEGATE, O.NOT, O.OPTIMIZATION_BARRIER,
    O.OR, O.PAD, O.PARTITION_ID, O.POPCNT, O.REAL, O.REDUCE_PRECISION, O.REPLICA_ID, O.RESHAPE, O.REVERSE,
    O.ROUND_NEAREST_AFZ, O.ROUND_NEAREST_EVEN, O.SELECT, O.SHIFT_LEFT, O.SHIFT_RIGHT_ARITHMETIC,
    O.SHIFT_RIGHT_LOGICAL, O.SLICE, O.SUBTRACT, O.TRANSPOSE, O.TUPLE, O.XOR,
})
CPU_EXPENSIVE_IF_COMPLEX = frozenset({O.ABS, O.SIGN, O.COS, O.SIN, O.TAN})
# ElementalIrEmitter::OpInvalidatesCache: ops whose emitted code opens new basic blocks.
OPENS_BASIC_BLOCKS = frozenset({O.CONCATENATE, O.DOT, O.DYNAMIC_UPDATE_SLICE, O.PAD, O.REDUCE, O.REDUCE_WINDOW})
# HloInstruction::IsFusible: never fusible, whatever the policy.
NEVER_FUSIBLE = frozenset({O.PARAMETER, O.WHILE, O.CONDITIONAL, O.CALL})


@dataclass(frozen=True, slots=True)
class FusionDecision:
    """Whether to fuse, and why (XLA's FusionDecision)."""

    ok: bool
    reason: str

    def __bool__(self) -> bool:
        return self.ok

    @staticmethod
    def allow(reason: str) -> "FusionDecision":
        return FusionDecision(True, reason)

    @staticmethod
    def forbid(reason: str) -> "FusionDecision":
        return FusionDecision(False, reason)


class FusionRecord(NamedTuple):
    """One considered (producer -> consumer) edge and what was decided. Instructions are kept, not
    names, so a log printed after fusion naming shows the final fusion names. (A tuple: a large
    module's fusion pass records about a million of them.)"""

    computation: str
    consumer_instr: HloInstruction
    producer_instr: HloInstruction
    decision: FusionDecision
    fusion: HloInstruction | None = None

    @property
    def consumer(self) -> str:
        return self.consumer_instr.name

    @property
    def producer(self) -> str:
        return self.producer_instr.name

    @property
    def fusion_name(self) -> str | None:
        return self.fusion.name if self.fusion is not None else None

    def __str__(self) -> str:
        verdict = f"fused into %{self.fusion_name}" if self.fusion is not None else "not fused"
        return (f"%{self.producer} -> %{self.consumer} in %{self.computation}: {verdict} "
                f"({self.decision.reason})")


_first = itemgetter(0)
_new_record = tuple.__new__   # FusionRecord(...) without its Python-level __new__ (the walk makes ~1e6)

# Refusals that hold for as long as the producer stays an operand of the same fusion consumer: they
# depend on the producer alone, or on the consumer's reused operands (a set that only grows) or the
# globally unfusible set (which only shrinks by instructions that leave the computation). The walk
# remembers them while a fusion is dequeued again and again (a wide fusion's operands are otherwise
# all re-scored after every producer it absorbs).
CANNOT_DUPLICATE = FusionDecision.forbid("operand can not be duplicated")
NON_SCALAR_CONSTANT = FusionDecision.forbid("Don't fuse non-scalar constants.")
NOT_LOOP_FUSIBLE = FusionDecision.forbid("Producer is not loop-fusible.")
CONCATENATE_INEFFICIENT = FusionDecision.forbid("Concatenate fusion is inefficient.")
NOT_PROFITABLE = FusionDecision.forbid("Fusion is not profitable.")
_STABLE_FOR_FUSION = frozenset(map(id, (CANNOT_DUPLICATE, NON_SCALAR_CONSTANT, NOT_LOOP_FUSIBLE,
                                        CONCATENATE_INEFFICIENT, NOT_PROFITABLE)))


# ---------------------------------------------------------------- instruction properties
def is_fusible(instr: HloInstruction, g: UseGraph) -> bool:
    """HloInstruction::IsFusible."""
    if instr.opcode in NEVER_FUSIBLE:
        return False
    if instr.opcode in (O.FUSION, O.MAP, O.REDUCE, O.REDUCE_WINDOW):
        return True
    if instr.opcode is O.RNG:
        return g.user_count(instr) <= 1
    return not has_side_effect(instr)


def is_elementwise(instr: HloInstruction) -> bool:
    """HloInstruction::IsElementwise, where a constant counts as elementwise (as in XLA)."""
    return instr.opcode is O.CONSTANT or instr.is_elementwise()


def can_be_loop_fused(instr: HloInstruction) -> bool:
    return is_elementwise(instr) or instr.opcode in LOOP_FUSIBLE


def cpu_is_expensive(instr: HloInstruction) -> bool:
    op = instr.opcode
    if op in CPU_CHEAP:
        return False
    if op in CPU_EXPENSIVE_IF_COMPLEX:
        return instr.shape.element_type.is_complex
    if op is O.CONVERT:
        return instr.shape.element_type.value == "bf16" and instr.operands[0].shape.element_type.value == "f32"
    if op in (O.DIVIDE, O.REMAINDER):
        if not instr.shape.element_type.is_integral:
            return True
        d = instr.operands[1]
        d = d.operands[0] if d.opcode is O.BROADCAST else d
        return not (d.opcode is O.CONSTANT and is_effective_scalar(d.shape))
    return True


# UseKind, ordered so that ``min`` composes uses along a path (xla HloInstruction::UseKind).
NO_USE, REUSE, USE_PERMUTING, USE = 0, 1, 2, 3
_PERMUTING = frozenset({O.BITCAST, O.CONCATENATE, O.RESHAPE, O.REVERSE, O.SLICE, O.TRANSPOSE})


def _plus(a: int, b: int) -> int:
    if a == NO_USE:
        return b
    if b == NO_USE:
        return a
    if a == USE and b == USE:
        return USE
    return REUSE  # a permuting use plus any other use reads some elements twice


def operand_element_use(instr: HloInstruction, i: int) -> int:
    """HloInstruction::OperandElementUse: how ``instr`` reads the elements of operand ``i``."""
    op = instr.opcode
    if op in _PERMUTING:
        return USE_PERMUTING
    if op is O.PAD:
        return USE_PERMUTING if i == 0 else REUSE
    if op is O.REDUCE:
        return USE_PERMUTING if i < len(instr.operands) // 2 else REUSE
    if op is O.FUSION:
        return fusion_parameter_use(instr, i)
    if op is O.DOT:
        lhs, rhs = instr.operands
        if instr.shape.rank <= 1 and ((i == 0 and rhs.shape.rank <= 1) or (i == 1 and lhs.shape.rank <= 1)):
            return USE
        return REUSE
    if op is O.DYNAMIC_UPDATE_SLICE:
        return USE if i < 2 else REUSE
    return USE if instr.is_elementwise() else REUSE


def fusion_parameter_use(fusion: HloInstruction, i: int) -> int:
    """FusionReusesParamElements: how the fused expression reads parameter ``i``."""
    fused = fusion.fused_computation
    return _parameter_use(fused.root, fused.parameter(i), {})


def _parameter_use(h: HloInstruction, param: HloInstruction, cache: dict[int, int]) -> int:
    """How ``h`` reads ``param`` (``fusion_parameter_use``); a module-level function, not a recursive
    closure, which would leave a reference cycle per call for the cyclic collector."""
    if h is param:
        return USE
    if id(h) in cache:
        return cache[id(h)]
    cache[id(h)] = NO_USE
    value = NO_USE
    for j, op in enumerate(h.operands):
        value = _plus(value, min(operand_element_use(h, j), _parameter_use(op, param, cache)))
    cache[id(h)] = value
    return value


def effectively_at_most_unary(instr: HloInstruction) -> bool:
    """At most one operand is 'large': broadcasts, iotas, scalar constants and lower-rank operands
    do not count (InstructionFusion::EffectivelyAtMostUnary, with TrueRank = non-1 dims)."""
    def true_rank(shape) -> int:
        return sum(1 for d in shape.dimensions if d != 1)

    leaves = instr.shape.leaves()
    out_rank = max((true_rank(s) for s in leaves if s.is_array and not s.is_token), default=0)
    big = 0
    for op in instr.operands:
        if op.opcode in (O.BROADCAST, O.IOTA):
            continue
        if op.opcode is O.CONSTANT and is_effective_scalar(op.shape):
            continue
        if op.shape.is_array and true_rank(op.shape) >= out_rank:
            big += 1
    return big <= 1


def _elements(shape) -> int:
    return sum(s.num_elements for s in shape.leaves() if s.is_array and not s.is_token)


class Reachability:
    """HloReachabilityMap over one computation: ``reaches(a, b)`` iff a == b or a path a -> b exists."""

    def __init__(self, comp: HloComputation) -> None:
        order = self.order = comp.post_order()
        self.index = {id(i): k for k, i in enumerate(order)}
        self.ancestors: dict[int, int] = {}
        for k, instr in enumerate(order):
            bits = 1 << k
            for op in instr.operands + instr.control_predecessors:
                bits |= self.ancestors[id(op)]
            self.ancestors[id(instr)] = bits

    def reaches(self, a: HloInstruction, b: HloInstruction) -> bool:
        ka, kb = self.index.get(id(a)), self.ancestors.get(id(b))
        return ka is not None and kb is not None and (kb >> ka) & 1 == 1


class _IndexingEvaluation:
    """FusionNodeIndexingEvaluation of a fusion: how often each fused value is emitted per output
    element. Kept up to date as producers are fused in (``remove_fusion_operand`` then ``update``)."""

    def __init__(self, fusion: HloInstruction) -> None:
        self.fusion = fusion
        fused = fusion.fused_computation
        self.users: dict[HloInstruction, set[HloInstruction]] = {fused.root: {fusion}}
        self.count: dict[HloInstruction, int] = {fusion: 1}
        for instr in reversed(fused.post_order()):
            if instr.opcode is not O.PARAMETER:
                self._add(instr)

    def _add(self, instr: HloInstruction) -> None:
        self.count[instr] = sum(self.count[u] for u in self.users.get(instr, ()))
        for op in instr.operands:
            key = self.fusion.operands[op.parameter_number] if op.opcode is O.PARAMETER else op
            # shape-preserving ops (and transposes, which permute the index) reuse their user's index
            if instr.opcode is O.TRANSPOSE or (op.shape.dimensions == instr.shape.dimensions
                                               and op.shape.minor_to_major == instr.shape.minor_to_major):
                self.users.setdefault(key, set()).update(self.users.get(instr, ()))
            else:
                self.users.setdefault(key, set()).add(instr)

    def emitted(self, producer: HloInstruction) -> int:
        return sum(self.count[u] for u in self.users.get(producer, ()))

    def remove_fusion_operand(self, producer: HloInstruction) -> set[HloInstruction]:
        return self.users.pop(producer, set())

    def update(self, clone: HloInstruction, users: set[HloInstruction]) -> None:
        self.users[clone] = users
        self._add(clone)


def _real_user_count(g: UseGraph, producer: HloInstruction) -> int:
    count = 0
    for user in g.users(producer):
        if user.opcode is O.FUSION:
            fused = user.fused_computation
            param = fused.parameter(user.operands.index(producer))
            count += len(fused.users().get(param, ()))
        else:
            count += 1
    return count


def is_matrix_vector_dot(instr: HloInstruction) -> bool:
    """IsNonComplexNonBatchedMatrixVectorDot."""
    return (instr.opcode is O.DOT and not instr.shape.element_type.is_complex and instr.shape.rank <= 1
            and not instr.dot_dimension_numbers.lhs_batch_dimensions)


def _has_exactly_one_use(g: UseGraph, instr: HloInstruction) -> bool:
    users = g.users(instr)
    return len(users) == 1 and users[0].operands.count(instr) == 1


def can_be_output_fused(g: UseGraph, producer: HloInstruction, consumer: HloInstruction) -> bool:
    return consumer.opcode is O.ADD and is_matrix_vector_dot(producer) and _has_exactly_one_use(g, producer)


def _is_minor_dim_concatenate(c: HloInstruction) -> bool:
    if c.shape.rank <= 1:
        return False
    dim = c.dimensions[0]
    bytes_per = c.shape.element_type.bit_width // 8
    return (dim == c.shape.minor_to_major[0] and c.shape.dimensions[dim] * bytes_per >= 64
            and c.shape.num_elements * bytes_per >= 2048)


class CpuInstructionFusion(HloPass):
    """XLA:CPU instruction fusion (see the module docstring). ``decisions`` keeps every decision."""

    name = "fusion"

    def __init__(self, may_duplicate: bool = True) -> None:
        self.may_duplicate = may_duplicate
        self.decisions: list[FusionRecord] = []
        self._reused: dict[HloInstruction, set[HloInstruction]] = {}
        self._indexing: dict[HloInstruction, _IndexingEvaluation] = {}  # per fusion, until it changes
        self._g: UseGraph | None = None

    # ---------------------------------------------------------------- policy
    def reuses_operand_elements(self, consumer: HloInstruction, i: int) -> bool:
        """InstructionFusion::ReusesOperandElements, with XLA's per-fusion cache of reused operands."""
        return consumer.operands[i] in self._reused_operands_of(consumer)

    def _reused_operands_of(self, instr: HloInstruction) -> set[HloInstruction]:
        cached = self._reused.get(instr)
        if cached is None:
            cached = {op for k, op in enumerate(instr.operands) if operand_element_use(instr, k) == REUSE}
            self._reused[instr] = cached
        return cached

    def _update_reused_for_fusion(self, producer: HloInstruction, fusion: HloInstruction) -> None:
        reused = self._reused_operands_of(fusion)
        if producer in reused:
            reused.discard(producer)
            reused.update(producer.operands)
        else:
            reused.update(self._reused_operands_of(producer))

    def base_should_fuse(self, consumer: HloInstruction, i: int) -> FusionDecision:
        """InstructionFusion::ShouldFuse."""
        g = self._g
        producer = consumer.operands[i]
        if producer is g.comp.root:
            return FusionDecision.forbid("not fusing into the output of the root instruction")
        users = g.users(producer)
        would_duplicate = not (len(users) == 1 and users[0] is consumer)
        always_duplicable = producer.opcode is O.BROADCAST or (
            producer.opcode is O.CONVERT and producer.operands[0].shape.byte_size() < producer.shape.byte_size())
        if would_duplicate and (not self.may_duplicate or cpu_is_expensive(producer)) and not always_duplicable:
            return FusionDecision.forbid("expensive producer would be duplicated" if self.may_duplicate
                                         else "fusion pass cannot duplicate")
        return self._in_place_check(producer, consumer)

    @staticmethod
    def _in_place_check(producer: HloInstruction, consumer: HloInstruction) -> FusionDecision:
        """ShouldFuseInPlaceOp, for dynamic-update-slice (operand 0 is updated in place)."""
        target = consumer
        if consumer.opcode is O.FUSION:
            root = consumer.fused_computation.root
            if root.opcode is not O.DYNAMIC_UPDATE_SLICE or root.operands[0].opcode is not O.PARAMETER:
                return FusionDecision.allow("")
            buffer = consumer.operands[root.operands[0].parameter_number]
        elif target.opcode is O.DYNAMIC_UPDATE_SLICE:
            buffer = consumer.operands[0]
        else:
            return FusionDecision.allow("")
        if consumer.operands.count(buffer) > 1:
            return FusionDecision.forbid("The consumer is an in-place operation that has an additional operand "
                                         "that has the same value as the in-place buffer")
        if not producer.is_elementwise() and buffer in producer.operands:
            return FusionDecision.forbid("producer reads the buffer the consumer updates in place")
        return FusionDecision.allow("")

    def should_fuse(self, consumer: HloInstruction, i: int) -> FusionDecision:
        """CpuInstructionFusion::ShouldFuse."""
        g = self._g
        producer = consumer.operands[i]
        if producer.opcode is O.CONSTANT and not is_effective_scalar(producer.shape):
            return NON_SCALAR_CONSTANT
        if can_be_output_fused(g, producer, consumer):
            return FusionDecision.allow("Can create output fusion.")
        if producer.opcode is O.ADD and any(can_be_output_fused(g, o, producer) for o in producer.operands):
            return FusionDecision.forbid("Bailing because producer can be output-fused into some operand.")
        if not can_be_loop_fused(producer):
            return NOT_LOOP_FUSIBLE
        for c in (producer, consumer):
            if c.opcode is O.CONCATENATE and (len(c.operands) > MAX_CONCATENATE_ARGUMENTS
                                              or _is_minor_dim_concatenate(c)):
                return CONCATENATE_INEFFICIENT
        if producer.opcode is not O.FUSION and cpu_is_expensive(producer) and \
                self.reuses_operand_elements(consumer, i):
            return NOT_PROFITABLE
        base = self.base_should_fuse(consumer, i)
        if not base:
            return base
        if consumer.opcode is O.FUSION and producer.opcode is O.REDUCE:
            reduces = sum(1 for x in consumer.fused_computation.instructions if x.opcode is O.REDUCE)
            if reduces > MAX_REDUCTIONS_IN_FUSION:
                return FusionDecision.forbid("Too many reductions inside single fusion.")
        if producer.opcode is O.CONSTANT and consumer.opcode is not O.FUSION:
            return FusionDecision.forbid("Not fusing: insufficient non-constant nodes.")
        if producer.opcode is O.FUSION:
            return FusionDecision.forbid("Not fusing: producer is itself a fusion node.")
        if self.may_duplicate and consumer.opcode is O.FUSION and producer.opcode is not O.BROADCAST:
            ev = self._indexing.get(consumer)
            if ev is None:
                ev = self._indexing[consumer] = _IndexingEvaluation(consumer)
            emitted = ev.emitted(producer)
            if emitted > ALLOWED_CODE_DUPLICATION or (
                    producer.opcode in OPENS_BASIC_BLOCKS and (emitted > 1 or _real_user_count(g, producer) > 1)):
                return FusionDecision.forbid("Code duplication too high")
        if consumer.opcode is O.DOT and consumer.shape.rank <= 1:
            lhs, rhs = consumer.operands
            if lhs.shape.rank == 1 and i == 1 and lhs.shape.byte_size() < FUSION_THRESHOLD_BYTES:
                return FusionDecision.allow("Fusing small matrix-vector product.")
            if rhs.shape.rank == 1 and i == 0 and rhs.shape.byte_size() < FUSION_THRESHOLD_BYTES:
                return FusionDecision.allow("Fusing small matrix-vector product.")
        if consumer.opcode is O.FUSION and consumer.fusion_kind is A.FusionKind.LOOP:
            return FusionDecision.allow("Fusing: consumer is a fusion node.")
        if can_be_loop_fused(consumer):
            return FusionDecision.allow("Fusing: consumer is elementwise or fusible.")
        return FusionDecision.forbid("Not fusing: not found a fusible case")

    def choose_kind(self, producer: HloInstruction, consumer: HloInstruction) -> A.FusionKind:
        return A.FusionKind.OUTPUT if can_be_output_fused(self._g, producer, consumer) else A.FusionKind.LOOP

    # ---------------------------------------------------------------- global analysis
    def _can_fuse_on_all_paths(self, producer, consumer, do_not_fuse, reach: Reachability, cache) -> bool:
        if consumer is producer:
            return True
        if not is_fusible(consumer, self._g):
            return False
        key = (id(producer), id(consumer))
        if key in cache:
            return cache[key]
        result = True
        for i, operand in enumerate(consumer.operands):
            if not reach.reaches(producer, operand):
                continue
            if operand in do_not_fuse or not self.should_fuse(consumer, i):
                result = False
                break
            if not self._can_fuse_on_all_paths(producer, operand, do_not_fuse, reach, cache):
                result = False
                break
        cache[key] = result
        return result

    def globally_unfusible(self, comp: HloComputation, reach: Reachability) -> set[HloInstruction]:
        """InstructionFusion::ComputeGloballyUnfusible."""
        do_not_duplicate: set[HloInstruction] = set()
        cache: dict = {}
        for producer in reversed(comp.post_order()):
            if effectively_at_most_unary(producer):
                continue
            operands_size = sum(_elements(o.shape) for o in dict.fromkeys(producer.operands))
            if operands_size <= _elements(producer.shape):
                continue
            if is_fusible(producer, self._g) and all(
                    self._can_fuse_on_all_paths(producer, c, do_not_duplicate, reach, cache)
                    for c in self._g.users(producer)):
                continue
            do_not_duplicate.add(producer)
        return do_not_duplicate

    # ---------------------------------------------------------------- the walk
    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in non_fusion_computations(module):
            changed |= self._run_on_computation(comp)
        return changed

    def _run_on_computation(self, comp: HloComputation) -> bool:
        g = self._g = UseGraph(comp)
        reach = Reachability(comp)
        do_not_duplicate = self.globally_unfusible(comp, reach) if self.may_duplicate else set()
        queue: list[HloInstruction | None] = comp.post_order()
        index: dict[HloInstruction, int] = {x: k for k, x in enumerate(queue)}
        in_queue = index.get
        fusible: dict[HloInstruction, bool] = {}   # is_fusible, fixed for all but rng (its user count)
        fused_index: dict[HloInstruction, FusedIndex] = {}
        record, name = self.decisions.append, comp.name
        # A fusion is dequeued again right after it absorbed a producer: for it, the walk keeps its stable
        # refusals (producer -> the refusal's record) and its queued operands, later in the post order
        # first, as (-position, operand, operand number or None) — updated, not rebuilt and sorted.
        stable_for: HloInstruction | None = None
        stable: dict[HloInstruction, FusionRecord] = {}
        pending: list[tuple[int, HloInstruction, int | None]] | None = None
        changed = False
        while True:
            while queue and queue[-1] is None:
                queue.pop()
            if not queue:
                break
            instr = queue.pop()
            index.pop(instr, None)
            if instr.parent is not comp:
                continue
            if not is_fusible(instr, g) and instr.opcode is not O.FUSION:
                continue
            if instr is not stable_for:
                stable_for, stable, pending = instr, {}, None
            cache_stable = instr.opcode is O.FUSION
            operands = instr.operands
            if pending is None:   # a stable sort on -position (an operand read twice keeps both numbers)
                keyed = [(-k, i) for i, k in enumerate(map(in_queue, operands)) if k is not None]
                keyed.sort()
                # (a fusion's operand numbers shift as it absorbs producers: looked up when needed)
                pending = [(k, operands[i], None if cache_stable else i) for k, i in keyed]
            for at, (_, operand, i) in enumerate(pending):
                refusal = stable.get(operand)
                if refusal is not None:   # (recorded again, as XLA's walk decides it again)
                    record(refusal)
                    continue
                ok = fusible.get(operand)
                if ok is None:
                    ok = is_fusible(operand, g)
                    if operand.opcode is not O.RNG:
                        fusible[operand] = ok
                if not ok:
                    continue
                if i is None:
                    i = operands.index(operand)   # (a fusion reads each operand once)
                decision = CANNOT_DUPLICATE if operand in do_not_duplicate else self.should_fuse(instr, i)
                if not decision:
                    refusal = _new_record(FusionRecord, (name, instr, operand, decision, None))
                    record(refusal)
                    if cache_stable and id(decision) in _STABLE_FOR_FUSION and operand.opcode is not O.RNG:
                        stable[operand] = refusal
                    continue
                n_operands = len(operands)
                fusion = instr
                if instr.opcode is not O.FUSION:
                    fusion = create_fusion(g, instr, self.choose_kind(operand, instr))
                else:
                    kind = self.choose_kind(operand, instr)
                    if kind is not fusion.fusion_kind:
                        fusion.fusion_kind = kind
                self._update_reused_for_fusion(operand, fusion)
                ev = self._indexing.get(fusion)
                users = ev.remove_fusion_operand(operand) if ev is not None else None
                fi = fused_index.get(fusion)
                if fi is None:
                    fi = fused_index[fusion] = FusedIndex(fusion.fused_computation)
                clone = fuse_instruction(g, fusion, operand, fi)
                if ev is not None:
                    ev.update(clone, users)
                record(_new_record(FusionRecord, (name, instr, operand, decision, fusion)))
                queue.append(fusion)
                index[fusion] = len(queue) - 1
                changed = True
                if g.user_count(operand) == 0:
                    do_not_duplicate.discard(operand)
                    k = index.pop(operand, None)
                    if k is not None:
                        queue[k] = None
                    g.remove(operand)
                if fusion is not instr:
                    do_not_duplicate.discard(instr)
                    pending = None
                else:   # its next candidates: without the producer, with the operands it brought in
                    del pending[at]
                    for op in fusion.operands[n_operands - 1:]:
                        k = in_queue(op)
                        if k is not None:
                            insort(pending, (-k, op, None), key=_first)
                break
        g.finish()
        self._g = None
        return changed

    def decision_log(self) -> str:
        """Every decision, one line each (what the fusion dump shows)."""
        return "\n".join(str(d) for d in self.decisions) + ("\n" if self.decisions else "")
