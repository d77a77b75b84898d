"""Elemental emission: an ``index → value`` generator per HLO instruction (XLA's ElementalIrEmitter
and FusedIrEmitter).

``FusedEmitter(kctx, computation, params)`` turns every instruction of a (fused or scalar) computation
into a generator; ``params[i]`` is the generator of parameter *i* (a buffer read, a constant, or a
value). Generators are made by one table, ``GENERATORS``, keyed by opcode:

- elementwise ops, compare/select/clamp/convert/bitcast-convert/reduce-precision/map call
  ``scalar_ops`` on their operands' values at the same index;
- broadcast, transpose, reshape, bitcast, slice, reverse, pad, concatenate, iota, dynamic-slice,
  dynamic-update-slice and gather are index arithmetic on the way to the operand — no temporaries;
- reduce, reduce-window, dot and convolution emit their inner accumulation loops in place. Simple
  reductions (add, mul, max, min, and, or, xor) are emitted with reassociation allowed so the loop
  vectorises, and long float add/mul reductions sum blocks of 1024 elements then combine the block
  sums pairwise (a binary-counter cascade), which keeps the error of a 16M-element f32 sum near
  eps·(32 + log2(n/1024)) — better than TF's Eigen tree reduction.

Which order a reduce takes (``_reduce``; the order decides bits where a sum overflows or a product meets
0·inf, so each path is what TF's XLA does for the same reduce):

  =========================  ==========================================  ===================================
  path                       when                                        order
  =========================  ==========================================  ===================================
  generic                    variadic, or a reducer that is not simple   one loop, in layout order
  in order                   ``in_order_reduce``: float add/mul, every   one loop, unreassociated (XLA's
                             reduced dim ≤ TREE_WINDOW, ≤ 2048 elements  TreeReductionRewriter leaves it)
  row lanes                  in order, and ``row_lane_order`` (a [R, C]  TF's LLVM vector lanes
                             kernel parameter to one element, or any     (``row_lanes``)
                             reduce to a larger result over [..., R, C]
                             on AVX2; measured targets)
  cascade                    float add/mul over > 2048 elements          blocks of 1024, pairwise
  reassociable               everything else simple (ints, max/min, …)   vectorised; order-free results
  =========================  ==========================================  ===================================

A generated value is cached per (emitter, instruction, index) in the kernel's current scope, so an
instruction with several users inside one loop body is computed once. Tuple-shaped instructions
(variadic reduce, multi-output roots) generate Python tuples of values.
"""
from __future__ import annotations

import math
from math import prod

import numpy as np

from llvmlite import ir

from tfxla_cluster.codegen import complex_ops, dot_naive, irtypes as t
from tfxla_cluster.codegen.context import KernelContext
from tfxla_cluster.codegen.dot_exact import eigen_dot, emit_eigen_sum, emit_form_sum, sum_form
from tfxla_cluster.codegen.gemm import dot_dims, group_origin
from tfxla_cluster.codegen.loops import (Index, for_range, if_else_value, if_then, linearize, delinearize,
                                         major_to_minor, scalar_index)
from tfxla_cluster.codegen.row_lanes import AVX2, AVX512, MEASURED_TARGETS, host_target, SHORT_TRIPS, \
    row_lanes
from tfxla_cluster.codegen.scalar_ops import REASSOCIABLE, ScalarOps
from tfxla_cluster.codegen.small_call import kept_minmax
from tfxla_cluster.codegen.xla_llvm import flag_table
from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.hlo import opcode as ops
from tfxla_cluster.hlo.eval_compute import TREE_WINDOW, simple_reducer
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape
from tfxla_cluster.hlo.structural import known_literal, splat_value
from tfxla_cluster.mxcsr import kept_denormals

GENERATORS: dict = {}
CASCADE_BLOCK = 1024


def generates(*opcodes):
    def register(fn):
        for op in opcodes:
            GENERATORS[op] = fn
        return fn
    return register


class FusedEmitter:
    """Generators for the instructions of one computation, bound to parameter generators."""

    def __init__(self, kctx: KernelContext, comp, params, overrides=None, scalar_body: bool = False) -> None:
        """``scalar_body``: ``comp`` is a scalar computation another instruction applies per element (a reducer,
        comparator or map body, see :meth:`call`): its instructions' shapes say nothing of the loop's length."""
        self.kctx = kctx
        self.comp = comp
        self.scalar_body = scalar_body
        self.params = list(params)
        self.overrides = dict(overrides or {})
        self.ops = ScalarOps(kctx.builder, kctx.mctx)
        self._gens: dict[int, object] = {}
        self._orders: dict[int, list] = {}
        self._users: dict | None = None
        self._in_order = False
        self._loop_order = comp is not None and comp.is_fusion_computation and loop_emitted(comp)
        kctx.keepalive.append(self)  # ids in the value cache stay unique while the kernel is built

    def release(self) -> None:
        """Drop the generators (their closures and this emitter form cycles); the kernel is finished."""
        self._gens.clear()
        self._orders.clear()
        self._users = None
        self.params = []
        self.overrides.clear()

    @property
    def b(self) -> ir.IRBuilder:
        return self.kctx.builder

    def gen(self, instr):
        g = self._gens.get(id(instr))
        if g is None:
            g = self._gens[id(instr)] = self._cached(instr, self._make(instr))
        return g

    def _make(self, instr):
        if id(instr) in self.overrides:
            return self.overrides[id(instr)]
        if instr.opcode is O.PARAMETER:
            return self.params[instr.parameter_number]
        maker = GENERATORS.get(instr.opcode)
        if maker is None:
            raise UnimplementedError(f"no elemental code for {instr.opcode.text} (%{instr.name})")
        return maker(self, instr)

    def _cached(self, instr, raw):
        kctx = self.kctx
        elementwise = self._loop_order and instr.opcode in ops.ELEMENTWISE

        def g(index: Index):
            key = (id(self), id(instr), index.key())
            v = kctx.cached(key)
            if v is None:
                if elementwise and not self._in_order:
                    self._emit_in_xla_order(instr, index)
                v = raw(index)
                # (self and instr outlive the entry: the kernel's keepalive, the module)
                kctx.remember(key, v, pin=(index.dims and tuple(index.dims), index.linear))
            return v
        return g

    def users(self) -> dict:
        """The computation's users map (``HloComputation.users``), made once per emitter."""
        if self._users is None:
            self._users = self.comp.users()
        return self._users

    # ---- XLA's emission order
    def _separate(self, instr) -> bool:
        """Whether XLA's computation partitioner gives ``instr`` a subgraph of its own (emitted where a user
        needs it): it has several users, not all elementwise (a reverse or broadcast reads it at another
        index)."""
        users = self.users().get(instr, ())
        parts = [self.users().get(u, ()) for u in users if u.opcode in (O.REAL, O.IMAG)]
        if parts and instr.shape.element_type.is_complex:
            # a complex value ours also reads as its parts (tf2hlo's ``whole``): XLA's whole value has the
            # readers of its parts (one per pair of partwise twins: reverse(re), reverse(im)) as its own
            whole = [u for u in users if u.opcode not in (O.REAL, O.IMAG)]
            readers = whole + [u for p in parts for u in p]
            return len(whole) + max(map(len, parts)) > 1 and any(u.opcode not in ops.ELEMENTWISE for u in readers)
        return len(users) > 1 and any(u.opcode not in ops.ELEMENTWISE for u in users)

    def _xla_order(self, root) -> list:
        """XLA's SubgraphConverter::EmitElementwiseInstruction order below elementwise ``root``: breadth
        first from the root, each elementwise instruction's operands pushed last to first (others are
        leaves), emitted in reverse. It decides which loads come first, and so how LLVM's Reassociate
        ranks (and orders) the operands of an fadd of two fmuls: the first one is contracted into an FMA."""
        order = self._orders.get(id(root))
        if order is None:
            order, seen, i = [root], {id(root)}, 0
            while i < len(order):
                x = order[i]
                i += 1
                if x.opcode not in ops.ELEMENTWISE:
                    continue
                for op in reversed(x.operands):
                    if id(op) not in seen and not self._separate(op):
                        seen.add(id(op))
                        order.append(op)
            self._orders[id(root)] = order
        return order

    def _emit_in_xla_order(self, root, index: Index) -> None:
        """Generate ``root``'s same-index subgraph at ``index`` in XLA's order (the values are cached; the
        root's own generator then reuses them)."""
        order = self._xla_order(root)
        if len(order) < 3:
            return
        for x in reversed(order[1:]):
            nested = x.opcode in ops.ELEMENTWISE   # its operands are already generated
            self._in_order = nested
            try:
                self.gen(x)(index)
            finally:
                self._in_order = False

    # ---- scalar computations (reducers, comparators, map bodies)
    def call(self, comp, args):
        """Value of scalar computation ``comp`` on register values ``args`` (tuples come back as tuples)."""
        sub = FusedEmitter(self.kctx, comp, [(lambda idx, v=v: v) for v in args], scalar_body=True)
        with self.kctx.scope():
            return sub.gen(comp.root)(scalar_index(comp.root.shape if not comp.root.shape.is_tuple
                                                   else Shape.scalar(T.PRED)))


# What XLA:CPU's tiled fusion emitter (backends/cpu/codegen/tiled) takes: it emits a fusion's instructions in
# post order (our generators' operand-first order); every other loop fusion goes to the loop emitter, whose
# order FusedEmitter._xla_order follows.
_TILED_LEAVES = frozenset({O.CONVERT, O.BITCAST, O.IOTA, O.RESHAPE, O.TRANSPOSE, O.PARAMETER})
_NOT_TILED = frozenset({O.SIGN, O.ROUND_NEAREST_AFZ, O.ROUND_NEAREST_EVEN, O.SHIFT_LEFT, O.SHIFT_RIGHT_ARITHMETIC,
                        O.SHIFT_RIGHT_LOGICAL, O.CLZ, O.POPCNT, O.MAP})


def loop_emitted(comp) -> bool:
    """Whether XLA:CPU emits fused computation ``comp`` with its loop emitter, not the tiled one: a complex
    value (TF 2.21 tiles no complex multiply; ours are split into parts) or an instruction the tiled emitter
    does not take (broadcast, reverse, slice, pad, concatenate, reduce, a non-scalar constant, ...)."""
    for x in comp.instructions:
        if x.shape.is_tuple or x.shape.element_type.is_complex:
            return True
        if x.opcode in _TILED_LEAVES or (x.opcode is O.CONSTANT and x.shape.num_elements == 1):
            continue
        if not x.is_elementwise() or x.opcode in _NOT_TILED:
            return True
    return False


def index_in(instr_shape: Shape, dims) -> Index:
    return Index(dims, instr_shape)


# ---------------------------------------------------------------- leaves
@generates(O.CONSTANT)
def _constant(em, instr):
    lit = instr.literal
    if instr.literal_elided:
        raise UnimplementedError(f"constant %{instr.name} was printed as {{...}}; its value is unknown")
    if instr.shape.num_elements != 1 or isinstance(lit, tuple):
        raise UnimplementedError(f"non-scalar constant %{instr.name} must be bound to a buffer")
    v = lit.reshape(())
    et = instr.shape.element_type
    if et in (T.F32, T.BF16) and em.comp is not None and em.comp.is_fusion_computation and not em._loop_order:
        v = _flushed_scalar(v)
    value = t.constant(et, v)
    return lambda index: value


def _flushed_scalar(v):
    """A ±denormal f32/bf16 scalar as ±0, as XLA:CPU's tiled fusion emitter makes its scalar constants: the
    value passes through a double on TF's compile thread, whose DAZ flushes it (f64 constants keep their bits;
    the loop emitter keeps every constant's: a bf16 floormod of a denormal constant by a scalar, seed 89000357,
    is 0 in TF's XLA where the same op over [2] keeps it)."""
    # by the bits: code is emitted under DAZ, where a denormal compares equal to 0 (bf16 widens exactly)
    bits = int(np.asarray(v).astype(np.float32).view(np.uint32))
    if bits & 0x7F800000 or not bits & 0x007FFFFF:
        return v
    return np.float32(-0.0 if bits >> 31 else 0.0).astype(v.dtype)


@generates(O.IOTA)
def _iota(em, instr):
    et = instr.shape.element_type
    d = instr.iota_dimension

    def g(index):
        i = index.get_dims(em.b)[d]
        if et.is_float:
            return em.ops.convert(T.S64, et, i)
        if et is T.PRED:
            return em.b.icmp_unsigned("!=", i, t.i64(0))
        return em.ops.convert(T.S64, et, i)
    return g


# ---------------------------------------------------------------- elementwise
@generates(*(ops.ELEMENTWISE_UNARY - {O.REAL, O.IMAG}))
def _unary(em, instr):
    x = em.gen(instr.operands[0])
    et = instr.operands[0].shape.element_type
    op = instr.opcode
    if op is O.LOG1P and et.is_float and _log1p_of_negation_too(em.comp, instr):
        return lambda index: em.ops.log1p_paired(et, x(index))
    folded = _exp_of_nan_select(em, instr)
    if folded is not None:
        value = t.constant(et, folded)
        if _poison_arm_made_nan(em, instr):
            nan = t.constant(et, np.nan)   # SelectionDAG's NaN: +qNaN, whatever the select's NaN was
            return lambda index: em.b.select(em.ops.isnan(x(index)), nan, value)
        return lambda index: value
    tail = _glibc_logf_tail(em.comp, instr)
    if tail is not None:
        def g(index):
            v = x(index)
            in_tail = em.b.icmp_signed(">=", index.get_dims(em.b)[0], t.i64(tail))
            return em.b.select(in_tail, em.ops.call_libm("log", v), em.ops.unary(op, et, v))
        return g
    return lambda index: em.ops.unary(op, et, x(index))


def _exp_of_nan_select(em, instr) -> np.ndarray | None:
    """What TF's XLA computes for an f32/f16 ``exp(v)`` where ``v`` is a select whose arms are splat constants,
    one a NaN and the other a finite ``c`` — or such a select taken through ops LLVM folds into its arms
    (``_select_arms``): ``exp(c')`` in every element, whatever the predicate (else None).

    XLA:CPU emits that exp as ``llvm.exp`` of the select; LLVM folds the ops and the exp into both arms, and
    folds ``exp(NaN)`` to poison, so the select becomes its other arm — the host's double exp of ``c'``
    rounded to the element type, not flushed. Measured against TF's XLA (one_hot with a NaN on/off value,
    where/fill): f32 and f16, c from -110 to 100, either arm NaN, a scalar predicate too; bf16 (computed in
    f32 after a convert) and f64 (XLA's own exp) keep the NaN, as does an infinite ``c`` (fuzz seed 124001112),
    an arm taken through an op LLVM does not fold (sign, sqrt, a convert, a product with a non-constant) and a
    select (or folded op) with a second user. log_sigmoid is ``-softplus(-x)``: the exp is of a negated select
    whose other users are compares LLVM decides for both arms alike (fuzz seed 152001046)."""
    if instr.opcode is not O.EXP or instr.shape.element_type not in (T.F32, T.F16):
        return None
    # the users map only once a select of two constants is found (em.users: made once per emitter)
    users = em.users if em.comp is not None else None
    arms = _select_arms(instr.operands[0], instr, users, [])
    if arms is None or [bool(np.isnan(a)) for a in arms].count(True) != 1:
        return None
    c = float(next(a for a in arms if not np.isnan(a)))
    if not math.isfinite(c):
        return None
    # LLVM rounds the double to the element type keeping a denormal; code is emitted on TF's kernel threads,
    # whose FTZ would flush it in this conversion
    with kept_denormals(), np.errstate(over="ignore", under="ignore"):
        return np.asarray(math.exp(c) if c < 709.0 else math.inf).astype(instr.shape.element_type.dtype)


# Arithmetic LLVM folds into the exp's select (FoldOpIntoSelect: one arm constant suffices) and leaves on the
# poison arm, where SelectionDAG folds an fadd/fsub/fmul/fdiv of one undef operand to NaN.
_POISON_TO_NAN = frozenset({O.ADD, O.SUBTRACT, O.MULTIPLY, O.DIVIDE})


def _poison_arm_made_nan(em, instr) -> bool:
    """Whether the NaN arm of an exp ``_exp_of_nan_select`` folds stays NaN in TF's XLA: the exp's only user
    (through ops that only move elements) is an add, subtract, multiply or divide with a splat constant
    (``exp(s) + 1``, ``1 - exp(s)``, a logistic's ``1 / (1 + exp(-s))``).

    LLVM's O-pipeline folds the exp into the select's arms, but ``exp(NaN)`` does not constant-fold there
    (ConstantFolding folds finite arguments only), so the NaN arm stays a call and each single-use op after it
    with a constant operand is folded into the select too, cloned onto that arm. XLA then inlines its own exp,
    which makes ``exp(NaN)`` poison after the last simplification of its users (TF's ir-with-opt of a sigmoid
    of a NaN one_hot: ``select(p, fdiv(1, fadd(poison, 1)), 0.924)``); x86's SelectionDAG folds an fadd,
    fsub, fmul or fdiv with one undef operand to +qNaN, and a select of undef to its other arm (a bare exp,
    its negation). Measured against TF's XLA: f32 and f16 one_hots (axes 0, 1, -1) and tf.where selects,
    NaN on and off values, c in {2.5, -1.5, 0, -30}, sigmoid, sigmoid(-x), exp(s)+1, 1-exp(s), exp(s)*2,
    exp(s)/3 keep NaN; exp, -exp(s), exp(s)*exp(s), relu(exp(s)), softplus, log_sigmoid, exp(s)+x fold (fuzz
    seed 194000630)."""
    users_of = em.users()
    v = instr
    while True:
        users = users_of.get(v, ())
        if len(users) != 1 or v.parent is not None and v.parent.root is v:
            return False
        (u,) = users
        if u.opcode in _INDEX_ONLY and u.operands[0] is v:
            v = u
            continue
        if u.opcode not in _POISON_TO_NAN or u.shape.element_type is not instr.shape.element_type:
            return False
        other = [o for o in u.operands if o is not v]
        return len(other) == 1 and splat_value(other[0]) is not None


# Ops LLVM's InstCombine folds into a select of two constants, measured through an exp against TF's XLA
# (f32): negate, abs, floor, ceil, round, max/min (relu, clip), +, -, ×, ÷ with a splat constant or with the
# same select (x·x + x). Not folded: sign, sqrt, converts (f16 folded or not by the predicate's type).
_FOLDED_INTO_ARMS = frozenset({O.NEGATE, O.ABS, O.FLOOR, O.CEIL, O.ROUND_NEAREST_EVEN, O.ROUND_NEAREST_AFZ,
                               O.MAXIMUM, O.MINIMUM, O.ADD, O.SUBTRACT, O.MULTIPLY, O.DIVIDE, O.CLAMP})


# Ops that only change which element the loop reads: in the fusion's IR the select is computed at another index,
# so LLVM sees the same select of two constants under the exp (fuzz seed 182000908: a reversed one_hot).
_INDEX_ONLY = frozenset({O.REVERSE, O.TRANSPOSE, O.RESHAPE, O.BITCAST, O.SLICE, O.COPY, O.BROADCAST})


def _select_arms(v, user, users, selects: list) -> tuple[np.ndarray, np.ndarray] | None:
    """``v``'s two values as LLVM folds it into the arms of one f32/f16 select of splat constants (the
    select's own arms, or those taken through ``_FOLDED_INTO_ARMS`` ops whose other operands are splat
    constants or the same select), when ``user`` is its one user that counts (``_only_user``); None
    otherwise. ``selects`` collects the select seen (there must be one)."""
    from tfxla_cluster.hlo import eval_elementwise as ew

    if v.shape.element_type not in (T.F32, T.F16) or users is None:
        return None
    if v.opcode is O.SELECT:
        if selects and selects[0] is not v:
            return None
        arms = [splat_value(o) for o in v.operands[1:]]
        if any(a is None for a in arms):
            return None
        selects.append(v)
        result = arms[0], arms[1]
    elif v.opcode in _FOLDED_INTO_ARMS:
        per_operand = []
        for o in v.operands:
            const = splat_value(o)
            if const is not None:
                per_operand.append((const, const))
                continue
            inner = _select_arms(o, v, users, selects)
            if inner is None:
                return None
            per_operand.append(inner)
        if not selects:
            return None   # constants only: HLO's constant folding, not LLVM's
        if v.opcode is O.CLAMP:   # clamp(lo, x, hi) = min(max(x, lo), hi), NaN-propagating as XLA's
            fmax, fmin = ew.BINARY[O.MAXIMUM], ew.BINARY[O.MINIMUM]
            fn = lambda lo, x, hi: fmin(fmax(x, lo), hi)  # noqa: E731
        else:
            fn = ew.UNARY[v.opcode] if len(per_operand) == 1 else ew.BINARY[v.opcode]
        with kept_denormals(), np.errstate(all="ignore"):
            result = fn(*(a for a, _ in per_operand)), fn(*(b for _, b in per_operand))
    elif v.opcode in _INDEX_ONLY:
        result = _select_arms(v.operands[0], v, users, selects)
        if result is None:
            return None
    else:
        return None
    return result if _only_user(v, user, result, users) else None


def _only_user(v, user, arms, users) -> bool:
    """Whether ``user`` is ``v``'s only user once LLVM has simplified the others (InstCombine folds an op into
    a select only when the select has no other use): a compare with a splat constant that gives the same for
    both arms is a constant (InstSimplify threads it over the select), and a select on such a constant uses
    only the operand it picks (whose users then count for ``v``). ``users()``: the computation's users map."""
    users_of = users()

    def others(value, seen: set) -> bool:
        """Whether ``value`` (``v`` or a select that picks it) has a user besides ``user`` that stays."""
        if id(value) in seen:
            return False
        seen.add(id(value))
        if value.parent is not None and value.parent.root is value:
            return True   # stored
        for u in users_of.get(value, ()):
            if u is user:
                continue
            if u.opcode is O.COMPARE and value is v:
                decided = _decided_compare(u, v, arms)
                if decided is None:
                    return True
                for w in users_of.get(u, ()):   # selects on the constant compare
                    if w.opcode is not O.SELECT or w.operands[0] is not u:
                        return True
                    if w.operands[1 if decided else 2] is value and others(w, seen):
                        return True
                continue
            decided = _decided_compare(u.operands[0], v, arms) if u.opcode is O.SELECT and \
                u.operands[0] is not value else None
            if decided is not None:
                if u.operands[1 if decided else 2] is value and others(u, seen):
                    return True
                continue
            return True
        return False

    return not others(v, set())


def _decided_compare(cmp, v, arms) -> bool | None:
    """The one result of ``cmp`` when it compares ``v`` with a splat constant and gives the same for both of
    ``v``'s arms; else None."""
    from tfxla_cluster.hlo import eval_elementwise as ew

    if cmp.opcode is not O.COMPARE or v not in cmp.operands:
        return None
    other = cmp.operands[1] if cmp.operands[0] is v else cmp.operands[0]
    const = splat_value(other)
    if const is None or other is v:
        return None
    results = {bool(ew.compare(*((x, const) if cmp.operands[0] is v else (const, x)), cmp.comparison_direction,
                                cmp.comparison_type)) for x in arms}
    return results.pop() if len(results) == 1 else None


def _glibc_logf_tail(comp, instr) -> int | None:
    """Where TF's XLA computes a lone f32 log with glibc's ``logf``: the first index of that tail, else None.

    XLA:CPU emits a single-op ``wrapped_log`` fusion over a rank-1 f32[n], n < 16, as 8-lane vectors and one
    remainder vector of n mod 8 lanes; a remainder of 3, 5, 6 or 7 lanes is no width XLA's vector log
    handles, and LLVM splits it into calls to glibc's ``logf``. Under DAZ that gives -103.972 (log 2^-150:
    ``x·2^23`` is 0 where glibc normalises a denormal) for every positive denormal and NaN for a negative one,
    where XLA's own log gives -inf (recorded against TF's XLA for n = 1..41: seeds 74000330, 74000856)."""
    if instr.opcode is not O.LOG or instr.shape.element_type is not T.F32 or instr.shape.rank != 1:
        return None
    n = instr.shape.dimensions[0]
    if n >= 16 or n % 8 not in (3, 5, 6, 7):
        return None
    if comp is not None and comp.is_fusion_computation and \
            any(i is not instr and i.opcode is not O.PARAMETER for i in comp.instructions):
        return None  # fused with other ops, XLA's loop emitter runs its own log on every element
    return n - n % 8


def _log1p_of_negation_too(comp, instr) -> bool:
    """Whether ``comp`` also takes log1p of ``instr``'s operand negated (or of what it negates), as atanh's
    log1p(x) - log1p(-x): LLVM then merges the two expansions' x² products."""
    a = instr.operands[0]
    if comp is None:
        return False
    for other in comp.instructions:
        if other is instr or other.opcode is not O.LOG1P:
            continue
        p = other.operands[0]
        if (p.opcode is O.NEGATE and p.operands[0] is a) or (a.opcode is O.NEGATE and a.operands[0] is p):
            return True
    return False


def _minmax_identity_operand(op: O, lhs, rhs, whole_constants: bool = False):
    """The operand a fused float ``maximum``/``minimum`` is, as MLIR's arith folder makes it in XLA's loop
    fusion emitter: ``maximumf(x, x)``, ``maximumf(x, -inf)`` and ``minimumf(x, +inf)`` are ``x`` itself, bits
    kept (no x86 max to flush a denormal under DAZ; NaN stays). The constant is fused in (a scalar constant or
    its broadcast, an arith.constant there), on either side (the canonicalizer moves it to the rhs first).
    Else None. (max_pool with a 1×1 window is such a max with its -inf init: fuzz seed 141000705.)"""
    if lhs is rhs:
        return lhs
    identity = -np.inf if op is O.MAXIMUM else np.inf
    for keep, other in ((lhs, rhs), (rhs, lhs)):
        v = splat_value(other)
        if v is None and whole_constants:
            # In a small call's one kernel LLVM also sees a whole-array constant's elements.
            lit = known_literal(other)
            v = lit.flat[0] if lit is not None and lit.size and (lit == lit.flat[0]).all() else None
        if v is not None and v == identity:
            return keep
    return None


def _minmax_absorbed_operand(op: O, lhs, rhs):
    """``x`` for a fused ``minimum(maximum(x, y), x)`` or ``maximum(minimum(x, y), x)`` (absorption; any y,
    a NaN one too), as TF's XLA folds it: its kernel returns x's bits, a denormal kept where an x86 min/max
    would flush it under DAZ. Measured on TF 2.21 (f32, f64; y 0, 3, NaN or a parameter: fuzz seed
    246001571): only in this operand order, ``minimum(x, maximum(x, y))`` stays a min. Else None."""
    inner = {O.MINIMUM: O.MAXIMUM, O.MAXIMUM: O.MINIMUM}[op]
    if lhs.opcode is inner and lhs.operands[0] is rhs:
        return rhs
    return None


@generates(*(ops.ELEMENTWISE_BINARY - {O.COMPARE, O.COMPLEX}))
def _binary(em, instr):
    lhs, rhs = instr.operands
    legacy = em.kctx.mctx.legacy_emitter   # a small call's kernel: XLA's legacy emitter (small_call.py)
    if instr.opcode in (O.MAXIMUM, O.MINIMUM) and em.comp is not None and lhs.opcode is O.CONSTANT \
            and rhs.opcode is not O.CONSTANT and not legacy:
        # A scalar constant fused into the loop is an arith.constant, which MLIR canonicalizes to the rhs of
        # XLA's (lhs-first) max/min: clip_by_value's min(NaN constant, x) fused with its max is x. Unfused,
        # XLA wraps the op with the constant as a parameter and keeps it first (algsimp's
        # minmax_constant_to_rhs moves broadcast constants for both).
        lhs, rhs = rhs, lhs
    et = instr.operands[0].shape.element_type
    op = instr.opcode
    # A small call's kernel holds its unfused ops too: LLVM sees their constants and folds alike (TF 2.21:
    # [1,1] max(x, -inf) in a 2-trip while keeps a denormal).
    if op in (O.MAXIMUM, O.MINIMUM) and (em.comp is not None or legacy) and et.is_float and not et.is_complex:
        kept = _minmax_identity_operand(op, lhs, rhs, legacy)
        if kept is None and em.comp is not None:
            kept = _minmax_absorbed_operand(op, lhs, rhs)
        if kept is not None:
            return em.gen(kept)
    x, y = em.gen(lhs), em.gen(rhs)
    if op is O.MULTIPLY and et.is_complex:
        rhs_first = _load_order(em, instr.shape, rhs, instr) < _load_order(em, instr.shape, lhs, instr)
        seen = tuple(_constant_seen(em, o, instr) for o in (lhs, rhs))
        q_first = rhs_first
        if em._loop_order and not legacy:
            (ar, ai), (br, bi) = _part_ranks(em, instr)
            q_first = max(ar, bi) < max(ai, br)   # rank(ar·bi) < rank(ai·br): Reassociate puts it first
        return lambda index: complex_ops.multiply(em.ops, et, x(index), y(index), rhs_first, seen, q_first)
    if op in (O.MAXIMUM, O.MINIMUM) and et in (T.F32, T.F64) and _compare_of_negation(lhs, rhs):
        return lambda index: em.ops.minmax_keeping_bits(op, et, x(index), y(index))
    if op in (O.MAXIMUM, O.MINIMUM) and et in (T.F32, T.F64) and not em.scalar_body \
            and not any(_widened_bf16(o) for o in (lhs, rhs)):
        # TF's XLA returns an f32/f64 max/min's ±denormal as ±0 (its compare-and-select becomes an x86 max/min,
        # which under DAZ returns the flushed operand; with a constant operand on every shape measured on
        # AVX-512 (on AVX2 a constant over [N, 2..8] keeps rows: ``_avx2_scalar_arg_kept``), while
        # some of its interleaved vector loops over two reversed operands blend: not modelled). On a loop
        # shorter than one vector LLVM masks the lanes, a constant operand gets a poison lane, and the select is
        # no longer matched to vmaxps: a blend keeps the denormal's bits — ours on a flat loop under 16 elements
        # (relu of -denormal on f32[7]: seed 74000814) or a loop nest's rows under 16 (relu of a reversed
        # f64[5,3,3]: seed 91910275730041), which are flushed here. Not a bf16 max/min widened to f32: TF's keeps
        # or flushes those by its loops' vectorisation (below). Not a reducer's (or comparator's) max: its scalar
        # shape is no loop length, and a flush per window step doubled max pool's time (its x86 max already
        # flushes under DAZ, as TF's does).
        kept = _small_call_kept(em, instr, lhs, rhs) if legacy else None
        if kept is not None:
            dim, n = kept
            return lambda index: _minmax_kept_below(em, op, et, x(index), y(index), index, n, dim=dim)
        kept = _avx2_transposed_minmax_kept(em, instr, lhs, rhs)
        if kept is not None:
            n, rows = kept
            return lambda index: _minmax_kept_below(em, op, et, x(index), y(index), index, n, dim=0, cols=rows)
        kept_rows = _scalar_arg_minmax_kept(em, instr, lhs, rhs, legacy)
        if kept_rows is not None:
            rows, cols = kept_rows
            return lambda index: _minmax_kept_below(em, op, et, x(index), y(index), index, rows, dim=0, cols=cols)

        negated = _negated_minmax_of_constant(em, instr)

        def minmax(index):
            v = em.ops.binary(op, et, x(index), y(index))
            return em.ops.flush_denormal(et, v) if not negated and _masked_loop(em, instr.shape, index) else v
        return minmax
    if op in (O.MAXIMUM, O.MINIMUM) and et is T.F32 and not em.scalar_body and any(_widened_bf16(o) for o in (lhs, rhs)):
        kept = _bf16_minmax_kept(em, instr, (lhs, rhs))
        if kept is not None:
            return lambda index: _minmax_kept_below(em, op, et, x(index), y(index), index, kept)
    return lambda index: em.ops.binary(op, et, x(index), y(index))


def _negated_minmax_of_constant(em, instr) -> bool:
    """Whether ``instr`` is a max/min with a broadcast constant whose every use in its fusion is a negate: LLVM
    folds the negate into the compare-and-select (``x < c ? -c : -x``), whose arms are no longer the compare's
    operands, so it stays a blend that keeps a ±denormal's bits on every loop length (TF 2.21, f32 and f64
    ``-relu(x)``, ``-minimum(x, 0)`` over [3]-[40], [5,1], [3,2], [9,3], plain, in a tf.where or a small while)."""
    if em.comp is None or not em.comp.is_fusion_computation or not _minmax_of_constant(instr):
        return False
    if any(i is not instr and _minmax_of_constant(i) for i in em.comp.instructions):
        return False   # (a tf.cond's other arm with min(x, 0): TF's small while flushes -relu's [4,1] there)
    return _only_negated(em.comp, instr)


def _minmax_of_constant(i) -> bool:
    """A max/min with a broadcast constant operand."""
    return i.opcode in (O.MAXIMUM, O.MINIMUM) and any(
        o.opcode is O.BROADCAST and o.operands[0].opcode is O.CONSTANT for o in i.operands)


def _only_negated(comp, instr) -> bool:
    """Whether ``instr`` has users in ``comp``, every one a negate."""
    users = [i for i in comp.instructions if instr in i.operands]
    return bool(users) and all(u.opcode is O.NEGATE for u in users)


def _small_call_kept(em, instr, lhs, rhs) -> tuple[int, int] | None:
    """In a small call's kernel: (dimension, leading indices kept) of a max/min with a broadcast constant that
    is its fusion's root (or the root's negate), or in one arm of a root select on a scalar predicate (a
    tf.cond in the loop: LLVM unswitches the loop-invariant select and vectorises each arm's loop; fuzz
    seed 234001616) (``small_call.kept_minmax``), else None."""
    if em.comp is None or not em.comp.is_fusion_computation or not _minmax_of_constant(instr):
        return None
    root = em.comp.root
    arm = False
    if root is not instr and not (root.opcode is O.NEGATE and root.operands[0] is instr):
        how = _unswitched_arm(root, instr)
        if how is None:
            return None
        arm = how == "arm"
    if _only_negated(em.comp, instr):
        if _negated_minmax_of_constant(em, instr) and instr.shape.rank:
            return 0, instr.shape.dimensions[0]   # every element kept, any shape
        return None   # beside another max/min of a constant (a tf.cond's other arm): flushed as usual
    return kept_minmax(instr.shape.element_type, instr.shape, arm=arm)


def _unswitched_arm(root, instr) -> str | None:
    """How LLVM compiles ``instr``, a max/min with a broadcast constant, under ``root``: "arm" when ``root`` is a
    select on a broadcast scalar predicate whose arms ``instr`` feeds (not the predicate) and whose other arm
    has no max/min with a constant of its own (a max/min both arms share measures as one in an arm: relu and
    -relu); "root" when that other arm has one (relu and min(x, 0), relu and max(x, -1): TF keeps the root's
    lengths); else None."""
    if root.opcode is not O.SELECT or root.operands[0].opcode is not O.BROADCAST \
            or root.operands[0].operands[0].shape.dimensions:
        return None

    def reach(start) -> list:
        seen, stack, out = set(), [start], []
        while stack:
            i = stack.pop()
            if id(i) not in seen:
                seen.add(id(i))
                out.append(i)
                stack.extend(i.operands)
        return out
    if any(i is instr for i in reach(root.operands[0])):
        return None
    arms = [reach(a) for a in root.operands[1:]]
    fed = [any(i is instr for i in arm) for arm in arms]
    if not any(fed):
        return None
    for arm, f in zip(arms, fed):
        if not f and any(_minmax_of_constant(i) for i in arm):
            return "root"
    return "arm"


def _bf16_minmax_kept(em, instr, operands) -> int | None:
    """For an f32 max/min of widened bf16 operands (float normalization's form of a bf16 max/min): below which
    innermost index TF's XLA keeps a ±denormal result's bits (a vector compare and blend) and from which it
    runs scalar ``vmaxss``/``vminss``, which under DAZ return ±0; None: left as it is. Its loop emitter (a
    fusion with a broadcast operand) vectorises rows by 8 and runs the rest of a row scalar; a scalar
    broadcast operand or an innermost dimension of 1 is scalar throughout (TF 2.21's results, bf16 rows of
    1-33; not modelled: rows of 8, 12 and 16 under a row broadcast also flush their first element). On an AVX2
    target, with no broadcast operand, every element keeps its bits (TF 2.21 on Zen 3: [N] and [N, W] of N, W
    up to 40, rank-3 shapes; innermost dimensions of 1 flush)."""
    dims = instr.shape.dimensions
    if not dims or dims[-1] == 1 or any(o.opcode is O.BROADCAST and not o.operands[0].shape.dimensions
                                        for o in operands):
        return 0
    if host_target(em.kctx.options) == AVX2 and not any(_broadcast_of(o) for o in operands):
        return dims[-1]
    if em._loop_order:
        return dims[-1] - dims[-1] % 8
    return None


def _broadcast_of(instr) -> bool:
    """Whether ``instr`` is a broadcast, or a convert of one."""
    while instr.opcode is O.CONVERT:
        instr = instr.operands[0]
    return instr.opcode is O.BROADCAST


def _minmax_kept_below(em, op, et, x, y, index, kept: int, dim: int = -1, cols: int | None = None):
    """max/min of ``x``, ``y`` whose ±denormal result keeps its bits below index ``kept`` of dimension ``dim``
    (the innermost by default; ``cols``: and below that index of the innermost dimension, or if negative in
    its last -``cols`` columns) and is flushed to ±0 elsewhere (see ``_bf16_minmax_kept``)."""
    if not kept or cols == 0:
        return em.ops.flush_denormal(et, em.ops.binary(op, et, x, y))
    blended = em.ops.minmax_keeping_bits(op, et, x, y)
    b = em.b
    dims = index.get_dims(b)
    inside = b.icmp_signed("<", dims[dim], t.i64(kept))
    width = index.shape.dimensions[-1]
    if cols is not None and cols < 0:
        inside = b.and_(inside, b.icmp_signed(">=", dims[-1], t.i64(width + cols)))
    elif cols is not None and cols < width:
        inside = b.and_(inside, b.icmp_signed("<", dims[-1], t.i64(cols)))
    return b.select(inside, blended, em.ops.flush_denormal(et, blended))


def _scalar_arg_minmax_kept(em, instr, lhs, rhs, legacy: bool = False) -> tuple[int, int] | None:
    """(rows, columns): the leading rows of an f32/f64 ``max``/``min(x, broadcast(s))`` over [N, 2..8], and the
    leading columns in them, that TF's XLA returns with a ±denormal's bits kept, when ``s`` is a scalar (on
    AVX-512: no constant) and the op is its fusion's whole loop; None: not that loop. LLVM unrolls the short rows and
    vectorises across them (interleave groups of the row's columns): a group's compare and blend keeps the
    bits, a group that becomes a vector ``vmaxps`` and the rows its vector loop leaves to a scalar remainder
    (``vmaxss``) return ±0 under DAZ. Which rows and columns depends on the target's ISA
    (``_avx2_scalar_arg_kept``, ``_avx512_scalar_arg_kept_rows``). Swapped (``max(broadcast(s), x)``), with a
    constant (AVX-512), or after a reverse (AVX-512) or transpose (AVX2: ``_avx2_transposed_minmax_kept``), TF's
    flushes every row (the short-row flush of ``_masked_loop``)."""
    dims = instr.shape.dimensions
    if len(dims) != 2 or not 2 <= dims[1] <= 8 or instr.shape.minor_to_major != (1, 0) \
            or em.comp is None or not em.comp.is_fusion_computation:
        return None
    if rhs.opcode is not O.BROADCAST or rhs.operands[0].shape.dimensions:
        return None
    et = instr.shape.element_type
    constant = rhs.operands[0].opcode is O.CONSTANT
    arm = False
    if em.comp.root is not instr:
        # an arm of a tf.cond's select (a small call's kernel or not): LLVM unswitches it (``_unswitched_arm``)
        how = _unswitched_arm(em.comp.root, instr) if constant else None
        if how is None or host_target(em.kctx.options) != AVX2:
            return None
        arm = how == "arm"
    if host_target(em.kctx.options) == AVX2:
        rows_reversed = lhs.opcode is O.REVERSE and tuple(lhs.dimensions) == (0,) \
            and lhs.operands[0].opcode is O.PARAMETER
        if lhs.opcode is O.PARAMETER or rows_reversed:
            return _avx2_scalar_arg_kept(et, *dims, rows_reversed, constant, small_call=legacy and constant,
                                         arm=arm)
        return None
    if lhs.opcode is not O.PARAMETER or constant:
        return None
    return _avx512_scalar_arg_kept_rows(et, *dims), dims[1]


def _avx512_scalar_arg_kept_rows(et: T, n: int, w: int) -> int:
    """The kept rows of ``_scalar_arg_minmax_kept`` on an AVX-512 target (every column of them), by N (TF 2.21,
    N of 1-70; f32 W of 2-8, f64 W of 2, 3, 5, 8): a multiple of 4 (f64: also all of N = 8 or 12, and 18 of
    N = 18, 19 for W ≥ 7), f32 a multiple of 8 from the N of ``_F32_BY_8_FROM`` on; none for N < 16."""
    if et is T.F64:
        if w >= 7 and n in (18, 19):
            return 18   # measured so (W of 7, 8)
        return n if n in (8, 12) else 0 if n < 16 else n - n % 4
    if n < 16:
        return 0
    return n - n % (8 if n >= _F32_BY_8_FROM.get(w, n + 1) else 4)


# Row length → the N from which TF's f32 loop above leaves rows in multiples of 8 on AVX-512 (below: of 4;
# rows of 7 and 8 in multiples of 4 up to N = 70 at least).
_F32_BY_8_FROM = {2: 32, 3: 40, 4: 48, 5: 32, 6: 32}


def _avx2_scalar_arg_kept(et: T, n: int, w: int, rows_reversed: bool = False, constant: bool = False,
                          small_call: bool = False, arm: bool = False) -> tuple[int, int]:
    """The kept (rows, columns) of ``_scalar_arg_minmax_kept`` on an AVX2 target (TF 2.21 on Zen 3: N of 1-70,
    W of 1-17, f32 and f64, max and min alike, of ``x`` and of ``reverse(x, [0])``). LLVM's vector loop runs
    rows by VF lanes: f64 by 4 (all of N = 8 or 12; none of other N < 16); f32 by 4 for N = 4 (not for rows
    of 2 or 4 columns unless reversed) and from N = 16 on by 8, or by 4 where 8 would leave 4-7 rows to the
    scalar remainder and N is under the ``_AVX2_F32_BY_8_FROM`` of the row length. In those rows the leading
    columns of ``_AVX2_KEPT_COLUMNS`` blend (the interleave groups that stay 256-bit selects after LLVM's
    SLP vectoriser) and the rest are ``vmaxps``. A reversed [2, W] keeps the columns of f32's 4 lanes in
    both rows. Other rows flush. With a ``constant`` scalar (relu: measured for N of 1-40) the same, except
    that N = 4 runs by 4 lanes (f32: whatever W), f32 N = 8 by 8, and f32's 4 lanes keep rows of 4 only. A
    constant over reversed rows (relu(reverse(x, [0])): measured for N of 1-40, W of 1-17) keeps nothing on 4
    f32 lanes and nothing of N = 2 but f32's [2, 6], whose last two columns keep (returned as the negative
    count of trailing columns). In a small while's kernel (``small_call``) f32's 4 lanes keep rows of 2 columns
    too; in an arm of a tf.cond's select (``arm``) the same as the root but for [4, 2] and f32 [8, 3], f64
    [4, 3] (flushed) (TF 2.21 on Zen 3, relu in a while of 2 trips, N of 1-40, W of 2-8; not modelled: inside
    a while body that is no small call, f32 rows of 5 and 7 run by 8 lanes from N = 28, and an arm's rows of 3
    from N = 36)."""
    if arm and w == 3 and (et is T.F64 and n == 4 or et is T.F32 and n == 8):
        return 0, 0   # measured so in a tf.cond's arm (the root keeps them)
    if rows_reversed and n == 2:
        if constant:
            return (2, -2) if et is T.F32 and w == 6 else (0, 0)
        return 2, _AVX2_KEPT_COLUMNS[T.F32, 4, False][w - 2]
    if et is T.F64:
        lanes = 4
        rows = n if n in (8, 12) or constant and n == 4 else 0 if n < 16 else n - n % 4
    elif constant and n == 8:
        lanes, rows = 8, 8
    elif n < 16:
        lanes = 4
        rows = 4 if n == 4 and (rows_reversed or constant or w not in (2, 4)) and not (arm and w == 2) else 0
    else:
        lanes = 4 if n % 8 >= 4 and n < _AVX2_F32_BY_8_FROM[rows_reversed][w - 2] else 8
        rows = n - n % lanes
    if constant and et is T.F32 and lanes == 4:
        return rows, w if (w == 4 or small_call and w == 2) and not rows_reversed else 0
    return rows, _AVX2_KEPT_COLUMNS[et, lanes, rows_reversed][w - 2]


def _avx2_transposed_minmax_kept(em, instr, lhs, rhs) -> tuple[int, int] | None:
    """On an AVX2 target, for ``max``/``min(x, broadcast(constant))`` over x [W, N] whose fusion's root is its
    ``transpose`` (XLA's form of ``min(transpose(x), 0)``: algsimp sinks the transpose below the elementwise op):
    (leading indices of W, leading indices of N) that keep a ±denormal's bits, else None (TF 2.21 on Zen 3:
    min(transpose(x), 0) of x [1-40, 1-17], f32 and f64 alike; AVX-512 and other targets not measured). LLVM
    vectorises the transposed [N, W] loop's N rows by VF lanes (8 f32, 4 f64) only when N is a multiple of VF up
    to 16, or 17 (its first 16 rows; the 17th is the scalar remainder); other N keep nothing. In those rows the
    leading columns of the f32 4-lane loop of ``_AVX2_KEPT_COLUMNS`` keep, for rows of 3-8 columns (W) — the
    interleave groups that stay 256-bit blends; the rest become ``vminps`` and flush (TF's ir-with-opt.ll of x
    f32 [3, 8]: x's rows 0-1 one <16 x float> fcmp+select, row 2 an <8 x float> one, i.e. vminps). Not modelled: f32
    x [6, 2] (TF keeps x's rows 4 and 5)."""
    comp = em.comp
    dims = instr.shape.dimensions
    if host_target(em.kctx.options) != AVX2 or comp is None or not comp.is_fusion_computation \
            or comp.root.opcode is not O.TRANSPOSE or comp.root.operands[0] is not instr \
            or tuple(comp.root.dimensions) != (1, 0) or len(dims) != 2 or instr.shape.minor_to_major != (1, 0) \
            or lhs.opcode is not O.PARAMETER or rhs.opcode is not O.BROADCAST \
            or rhs.operands[0].opcode is not O.CONSTANT or rhs.operands[0].shape.dimensions:
        return None
    w, n = dims
    lanes = 8 if instr.shape.element_type is T.F32 else 4
    rows = n if n % lanes == 0 and n <= 16 else 16 if n == 17 else 0
    return (_AVX2_KEPT_COLUMNS[T.F32, 4, False][w - 2] if 3 <= w <= 8 else 0), rows


# Reversed rows? → by row length W = 2..8: the N from which TF's f32 loop above runs by 8 lanes on AVX2 (below:
# by 4 where N % 8 >= 4).
_AVX2_F32_BY_8_FROM = {False: (40, 40, 48, 32, 64, 40, 16), True: (16, 32, 48, 24, 48, 24, 16)}
# (element type, lanes, reversed rows?) → by row length W = 2..8: the leading columns that keep a ±denormal.
_AVX2_KEPT_COLUMNS = {
    (T.F32, 4, False): (2, 2, 4, 4, 4, 6, 8), (T.F32, 8, False): (2, 3, 4, 4, 6, 6, 8),
    (T.F64, 4, False): (2, 3, 4, 4, 6, 6, 8),
    (T.F32, 4, True): (0, 2, 4, 4, 4, 6, 8), (T.F32, 8, True): (0, 0, 0, 4, 0, 6, 0),
    (T.F64, 4, True): (0, 0, 0, 4, 0, 6, 8),
}


def _compare_of_negation(lhs, rhs) -> bool:
    """Whether a max/min is of a negation and a splat constant: LLVM folds the fneg into XLA's compare
    (``-x >= c`` becomes ``x <= -c``), so the select of ``-x`` is no x86 max/min but a blend, which keeps a
    ±denormal's bits at every length, where a max/min of the value itself flushes in short loops and scalar
    code (relu(-x), -abs(x): fuzz seed 176000602, a sort's negations; measured on AVX2 against TF 2.21, f32/f64,
    flat loops of 1-40, rows under 16, constant 0 on either side)."""
    for value, other in ((lhs, rhs), (rhs, lhs)):
        one_element = other.opcode is O.CONSTANT and other.shape.num_elements == 1   # [1] after a reshape
        if value.opcode is O.NEGATE and (splat_value(other) is not None or one_element):
            return True
    return False


# Loops shorter than this many elements may run as one masked vector (f32: 8 lanes, f64: 4 at 256 bits).
_MASKED_TAIL_BELOW = 16


def _masked_loop(em, shape: Shape, index: Index) -> bool:
    """Whether LLVM may run the loop that computes ``shape`` at ``index`` as masked vectors: a flat loop (linear
    index only) over fewer than ``_MASKED_TAIL_BELOW`` elements, or a loop nest whose rows (the innermost
    physical dimension of the value or of the fusion's result, whose loop nest it is: a transpose between
    them changes the rows) are that short."""
    if shape.num_elements < _MASKED_TAIL_BELOW:
        return True
    if index.dims is None:
        return False
    root = em.comp.root.shape if em.comp is not None and em.comp.is_fusion_computation else shape
    return any(s.rank and s.dimensions[s.minor_to_major[0]] < _MASKED_TAIL_BELOW
               for s in (shape, *(root.leaves() if root.is_tuple else [root])))


def _widened_bf16(instr) -> bool:
    """``convert(bf16 → f32)``: an operand of a bf16 op that float normalization runs in f32."""
    return instr.opcode is O.CONVERT and instr.operands[0].shape.element_type is T.BF16


def _constant_seen(em, operand, user) -> bool:
    """Whether TF's LLVM sees the values of ``operand`` of ``user`` if it is a constant: one fused into the
    loop (a broadcast scalar, or a one-element constant in a fusion of more). XLA:CPU fuses no constant into a
    lone consumer ("insufficient non-constant nodes"), which then loads it, where ours (the parts lowering's
    real/imag/complex around it make a fusion) may read it as an immediate."""
    if operand.opcode is O.BROADCAST:
        return operand.operands[0].opcode is O.CONSTANT
    comp = em.comp
    return operand.opcode is O.CONSTANT and comp is not None and \
        any(i is not user and i.opcode not in (O.PARAMETER, O.CONSTANT, O.REAL, O.IMAG, O.COMPLEX)
            for i in comp.instructions)


def _loop_depth(shape: Shape, operand) -> int:
    """How deep in TF's XLA loop nest over ``shape`` (a loop per dimension, major to minor) ``operand``'s value
    is, as its MLIR loop emitter leaves it: a broadcast operand that varies only with outer dimensions is
    hoisted out of the inner loops."""
    if operand.opcode is O.BROADCAST:
        src = operand.operands[0].shape.dimensions
        varying = {d for i, d in enumerate(operand.dimensions) if src[i] > 1}
    else:
        varying = {d for d, n in enumerate(shape.dimensions) if n > 1}
    order = major_to_minor(shape)
    return max((order.index(d) + 1 for d in varying), default=0)


def _part_leaf(x) -> tuple[object, int | None]:
    """(identity, part) of a leaf (a non-elementwise instruction): a chain of index moves down to
    ``real(q)`` or ``imag(q)`` of a complex ``q`` is one complex load in TF's XLA (it moves whole complex
    values; ours moves parts: tf2hlo.complex_ops), its part 0 or 1; another leaf is itself (part None)."""
    chain, y = [], x
    while y.opcode in (O.BROADCAST, O.BITCAST, O.RESHAPE, O.REVERSE, O.TRANSPOSE, O.SLICE):
        chain.append((y.opcode, tuple(y.shape.dimensions), tuple(getattr(y, "dimensions", None) or ())))
        y = y.operands[0]
    if chain and y.opcode in (O.REAL, O.IMAG) and y.operands[0].shape.element_type.is_complex:
        return (tuple(chain), id(y.operands[0])), int(y.opcode is O.IMAG)
    return id(x), None


def _part_ranks(em, instr) -> tuple[tuple[int, int], ...]:
    """LLVM Reassociate's ranks of the (real, imaginary) parts of ``instr``'s operands in TF's XLA kernel of a
    loop fusion (it canonicalises every commutative op, fast-math or not: the lower-ranked operand first).
    Each load ranks on its own, in XLA's emission order within its loop's block, an outer loop's block
    below an inner one (``BBRank << 16``; :func:`_loop_depth`); a complex load is split into its real then
    imaginary part's. A constant LLVM sees ranks 0; a computed part one above its highest operand, an fneg
    as its operand. The order is :meth:`FusedEmitter._xla_order`'s on XLA's HLO, which moves complex values
    whole where ours has their parts: complex/real/imag add no level (their operands are pushed in their
    place) and a leaf's two parts are one load (:func:`_part_leaf`). Measured on TF 2.21's dumps of
    ``y * (x + z)`` (x, z, y loaded in that order) and ``x * y``."""
    shape = instr.shape
    plumbing = (O.COMPLEX, O.REAL, O.IMAG)

    def order_from(root) -> list:
        order, seen, i = [], set(), 0

        def push(x) -> None:
            if x.opcode in plumbing and (x.opcode is O.COMPLEX or x.operands[0].shape.element_type.is_complex):
                if x.opcode is not O.COMPLEX and x is not root and em._separate(x):
                    return   # a part another op reads at another index: the whole value is a subgraph of its own
                for o in reversed(x.operands):
                    push(o)
                return
            key = _part_leaf(x)[0] if x.opcode not in ops.ELEMENTWISE else id(x)
            if key not in seen and (x is root or not em._separate(x)):
                seen.add(key)
                order.append(x)
        push(root)
        while i < len(order):
            x = order[i]
            i += 1
            if x.opcode in ops.ELEMENTWISE:
                for op in reversed(x.operands):
                    push(op)
        return order

    order = order_from(em.comp.root)
    if not any(x is instr for x in order):
        order = order_from(instr)
    ranks: dict[int, tuple[int, int]] = {}
    loaded: dict[object, tuple[int, int]] = {}
    loads = 0

    def load(x) -> tuple[int, int]:
        nonlocal loads
        if x.opcode in (O.CONSTANT, O.BROADCAST) and _constant_seen(em, x, instr):
            return 0, 0
        key, part = _part_leaf(x)
        if key not in loaded:
            base = _loop_depth(shape, x) << 16
            n = 2 if part is not None or x.shape.element_type.is_complex else 1
            loads += n
            loaded[key] = (base + loads - n + 1, base + loads)
        r = loaded[key]
        return r if part is None else (r[part],) * 2

    def computed(x) -> tuple[int, int]:
        p = [ranks[id(o)] for o in x.operands]
        op, cplx = x.opcode, x.shape.element_type.is_complex
        if op in (O.NEGATE, O.COPY):
            return p[0]
        if op in (O.REAL, O.IMAG):
            k = 0 if op is O.REAL else 1
            return (p[0][k],) * 2 if x.operands[0].shape.element_type.is_complex or k == 0 else (0, 0)
        if op is O.COMPLEX:
            return p[0][0], p[1][0]
        if cplx and op in (O.ADD, O.SUBTRACT):
            return 1 + max(p[0][0], p[1][0]), 1 + max(p[0][1], p[1][1])
        top = max(r for q in p for r in q) + (2 if cplx and op is O.MULTIPLY else 1)   # products, then their sum
        return top, top

    def visit(x) -> None:
        if id(x) in ranks:
            return
        if x.opcode in ops.ELEMENTWISE:
            for o in x.operands:
                visit(o)
            ranks[id(x)] = computed(x)
        else:
            ranks[id(x)] = load(x)

    for x in reversed(order):
        visit(x)
    for o in instr.operands:
        visit(o)
    return tuple(ranks[id(o)] for o in instr.operands)


def _load_order(em, shape: Shape, operand, user) -> tuple[int, bool]:
    """Where TF's XLA loads an elementwise operand of ``shape`` relative to the other (the lower first): how
    deep in its loop nest over ``shape`` (a loop per dimension, major to minor) the value is, as its MLIR loop
    emitter leaves it (a broadcast operand that varies only with outer dimensions is hoisted out of the inner
    loops), then whether XLA's breadth-first order emits it after the other: a subgraph of its own
    (``FusedEmitter._separate``: ``z`` of ``z * reverse(z)``) or a value another op of the fusion also reads
    (``z`` of ``z * w + z``, reached from the add first). A complex(real(p), imag(p)) of the parts lowering
    stands for ``p``, and so do ``p``'s real(p)/imag(p) users."""
    depth = _loop_depth(shape, operand)
    same = [operand]
    re, im = operand.operands if operand.opcode is O.COMPLEX else (None, None)
    if re is not None and re.opcode is O.REAL and im.opcode is O.IMAG and re.operands[0] is im.operands[0]:
        same += [re, im, re.operands[0]]
    if em.comp is None:
        return depth, False
    if operand.opcode is not O.COMPLEX and operand.shape.element_type.is_complex:
        # a complex value the lowering also split into its parts (tf2hlo's ``whole``): their users read it too
        same += [u for u in em.users().get(operand, ()) if u.opcode in (O.REAL, O.IMAG)]
    group = {id(x) for x in same}
    outside = [u for x in same for u in em.users().get(x, ()) if id(u) not in group]
    reused = any(u is not user for u in outside)
    return depth, reused or any(em._separate(x) for x in same)


@generates(O.REAL, O.IMAG)
def _real_imag(em, instr):
    """A part of a complex value; of a real value, itself (real) or zero (imag), as XLA allows."""
    x = em.gen(instr.operands[0])
    et = instr.operands[0].shape.element_type
    if et.is_complex:
        return lambda index: em.ops.unary(instr.opcode, et, x(index))
    if instr.opcode is O.REAL:
        return x
    zero = t.constant(et, 0)
    return lambda index: zero


@generates(O.COMPLEX)
def _complex(em, instr):
    re, im = (em.gen(o) for o in instr.operands)
    return lambda index: complex_ops.complex_of(em.ops, re(index), im(index))


@generates(O.COMPARE)
def _compare(em, instr):
    x, y = (em.gen(o) for o in instr.operands)
    et = instr.operands[0].shape.element_type
    return lambda index: em.ops.compare(instr.comparison_direction, instr.comparison_type, et, x(index), y(index))


def _select_arms_llvm_knows(instr):
    """(true arm, false arm, whether the false arm is flushed) of an f32/f64 ``select(compare(x, c), a, b)`` as
    TF's LLVM compiles it knowing the predicate in each arm (a tf.cond of a scalar or a tf.where becomes one
    loop fusion of that select), else None:

    - ``x != c`` (``x == c``): in the arm where x equals c, ``max``/``min(x, c)`` is ``x`` (InstCombine's
      select value equivalence; TF's ir-with-opt: ``select(fcmp une x, 0; x*x; x)``). Under DAZ a ±denormal
      equals 0, so relu(x) there returns x with its bits (fuzz seed 129001341).
    - ``x > 0`` with ``max(x, 0)`` (or ``x``) in the true arm and ``-x`` in the false one: the true arm is
      ``x``, and x86 codegen makes ``select(x > 0, x, -x)`` one ``vmaxss(x, -x)``, which under DAZ returns
      -x flushed (a +denormal gives -0: fuzz seed 156001380).

    Measured against TF 2.21 (f32 and f64, scalar conds and rank-1 tf.where, on ±denormals, ±0, NaN, ±1.5);
    the other pairs of relu/neg/square/abs under ``x > 0``, ``x < 0`` and ``x != 0`` agree with a plain
    select."""
    pred, a, b = instr.operands
    if pred.opcode is not O.COMPARE or instr.shape.element_type not in (T.F32, T.F64):
        return None
    x, c = pred.operands
    d = pred.comparison_direction.value
    if splat_value(c) is None:
        x, c = c, x
        d = {"GT": "LT", "LT": "GT", "GE": "LE", "LE": "GE"}.get(d, d)
    cv = splat_value(c)
    if cv is None or x.shape != instr.shape:   # x at the select's index (not a scalar predicate's)
        return None

    def minmax_of_x_c(arm, ops_=(O.MAXIMUM, O.MINIMUM)) -> bool:
        if arm.opcode not in ops_:
            return False
        u, v = arm.operands
        for p_, q in ((u, v), (v, u)):
            qv = splat_value(q)
            if p_ is x and qv is not None and qv == cv and np.signbit(qv) == np.signbit(cv):
                return True
        return False
    if d == "NE" and minmax_of_x_c(b):
        return a, x, False
    if d == "EQ" and minmax_of_x_c(a):
        return x, b, False
    if d == "GT" and cv == 0 and (a is x or minmax_of_x_c(a, (O.MAXIMUM,))) and \
            b.opcode is O.NEGATE and b.operands[0] is x:
        return x, b, True
    return None


@generates(O.SELECT)
def _select(em, instr):
    arms = _select_arms_llvm_knows(instr)
    on_true, on_false, flush = arms if arms is not None else (*instr.operands[1:], False)
    p, x, y = (em.gen(o) for o in (instr.operands[0], on_true, on_false))
    scalar_pred = instr.operands[0].shape.rank == 0 and instr.shape.rank > 0
    et = instr.shape.element_type

    def g(index):
        pv = p(scalar_index(instr.operands[0].shape)) if scalar_pred else p(index)
        yv = em.ops.flush_denormal(et, y(index)) if flush else y(index)
        return em.b.select(pv, x(index), yv)
    return g


@generates(O.CLAMP)
def _clamp(em, instr):
    lo, x, hi = (em.gen(o) for o in instr.operands)
    et = instr.shape.element_type
    shapes = [o.shape for o in instr.operands]

    def at(gen, shape, index):
        return gen(scalar_index(shape)) if shape.rank == 0 and instr.shape.rank > 0 else gen(index)
    # A constant lo fused into the loop (a broadcast constant, or a scalar constant inside a fusion: bf16
    # relu6's clamp fused with its converts) is an arith.constant in XLA's fused loop, which MLIR
    # canonicalizes to max's rhs; a parameter or an unfused scalar constant (a lone clamp: XLA wraps it
    # with its constants as parameters) stays max's lhs.
    lo_instr = instr.operands[0]
    # XLA's legacy emitter (a small call's kernel) keeps lo first: min(hi, max(lo, x)).
    lo_first = em.kctx.mctx.legacy_emitter or \
        not (lo_instr.opcode is O.BROADCAST and lo_instr.operands[0].opcode is O.CONSTANT
             or lo_instr.opcode is O.CONSTANT and em.comp is not None)
    return lambda index: em.ops.clamp(et, at(lo, shapes[0], index), x(index), at(hi, shapes[2], index),
                                      lo_first)


@generates(O.CONVERT)
def _convert(em, instr):
    x = em.gen(instr.operands[0])
    src, dst = instr.operands[0].shape.element_type, instr.shape.element_type
    return lambda index: em.ops.convert(src, dst, x(index))


@generates(O.REDUCE_PRECISION)
def _reduce_precision(em, instr):
    x = em.gen(instr.operands[0])
    et = instr.shape.element_type
    return lambda index: em.ops.reduce_precision(et, x(index), instr.exponent_bits, instr.mantissa_bits)


@generates(O.BITCAST_CONVERT)
def _bitcast_convert(em, instr):
    operand = instr.operands[0]
    x = em.gen(operand)
    src, dst = operand.shape.element_type, instr.shape.element_type
    sw, dw = src.bit_width, dst.bit_width
    if sw == dw:
        return lambda index: em.ops.bitcast_value(src, dst, x(index))
    b = em.b
    if dw < sw:  # out has an extra minor dimension of sw/dw pieces (little-endian)
        wide = ir.IntType(sw)

        def g(index):
            dims = index.get_dims(b)
            v = t.to_storage(b, src, x(Index(dims[:-1], operand.shape)))
            raw = v if isinstance(v.type, ir.IntType) else b.bitcast(v, wide)
            k = dims[-1] if sw == 64 else b.trunc(dims[-1], wide)
            piece = b.trunc(b.lshr(raw, b.mul(k, ir.Constant(wide, dw))), ir.IntType(dw))
            if dst in (T.F16, T.F32, T.F64):
                piece = b.bitcast(piece, t.storage_type(dst))
            return t.from_storage(b, dst, piece)
        return g

    def g2(index):
        dims = index.get_dims(b)
        acc = ir.Constant(ir.IntType(dw), 0)
        for k in range(dw // sw):
            v = t.to_storage(b, src, x(Index(list(dims) + [t.i64(k)], operand.shape)))
            raw = v if isinstance(v.type, ir.IntType) else b.bitcast(v, ir.IntType(sw))
            acc = b.or_(acc, b.shl(b.zext(raw, ir.IntType(dw)), ir.Constant(ir.IntType(dw), k * sw)))
        if dst in (T.F16, T.F32, T.F64):
            acc = b.bitcast(acc, t.storage_type(dst))
        return t.from_storage(b, dst, acc)
    return g2


@generates(O.MAP)
def _map(em, instr):
    xs = [em.gen(o) for o in instr.operands]
    return lambda index: em.call(instr.to_apply, [x(index) for x in xs])


@generates(O.FUSION, O.CALL)
def _nested(em, instr):
    """A fusion or call inside an elemental computation (e.g. in a sort comparator): its computation's
    parameters are the operands' generators."""
    sub = FusedEmitter(em.kctx, instr.to_apply, [em.gen(o) for o in instr.operands], scalar_body=em.scalar_body)
    return sub.gen(instr.to_apply.root)


@generates(O.PARTITION_ID, O.REPLICA_ID)
def _zero_id(em, instr):
    return lambda index: ir.Constant(t.I32, 0)


@generates(O.GET_DIMENSION_SIZE)
def _dimension_size(em, instr):
    value = ir.Constant(t.I32, instr.operands[0].shape.dimensions[instr.dimensions[0]])
    return lambda index: value


@generates(O.COPY, O.OPTIMIZATION_BARRIER, O.SET_DIMENSION_SIZE)
def _identity(em, instr):
    return em.gen(instr.operands[0])


# ---------------------------------------------------------------- data movement
@generates(O.BROADCAST)
def _broadcast(em, instr):
    operand = instr.operands[0]
    x = em.gen(operand)
    dims = tuple(instr.dimensions)
    if operand.shape.dimensions == instr.shape.dimensions and dims == tuple(range(instr.shape.rank)) and \
            operand.shape.minor_to_major == instr.shape.minor_to_major:
        return x
    if operand.shape.rank == 0:
        if _bf16_splat_flushed(em, instr):
            return lambda index: em.ops.flush_denormal(T.BF16, x(scalar_index(operand.shape)))
        return lambda index: x(scalar_index(operand.shape))
    return lambda index: x(Index([index.get_dims(em.b)[d] for d in dims], operand.shape))


def _bf16_splat_flushed(em, instr) -> bool:
    """Whether TF's XLA stores a bf16 scalar broadcast to ``instr``'s shape with a ±denormal flushed to ±0,
    where the broadcast of a buffer is its kernel's whole loop (XLA's ``wrapped_broadcast``; a pad of an empty
    operand becomes one: fuzz seed 138001308). LLVM loads the scalar once before the loop nest; where the stores
    stay scalar in the loop (rows of 2+ elements its vectoriser does not take), x86 codegen holds the bfloat in
    an f32 register across the blocks and narrows it at each store with VCVTNEPS2BF16, which always flushes;
    vector stores of the splat, a rank-1 loop (vectorised) or a nest folded into one block copy the bits.
    Measured against TF 2.21 on an AVX-512 host with AVX512_BF16 (``row_lanes.AVX512``) on [R, W] (the last two
    non-degenerate dims; outer dims alike): kept for R = 2 with W <= 4, R = 4, 8, 16 with W <= 8; flushed for
    other R <= 16 and for W >= 9. Rows past 16 with W <= 8 are not modelled (kept): LLVM's cost model keeps
    the first rows by a multiple of its vector width, e.g. 16 of 17-19 with W = 2, and flushes the rest, with
    no simple rule in R and W. Without VCVTNEPS2BF16 (an AVX2 host, Zen 3, or AVX-512 without BF16: the
    target probe's ``bf16``) LLVM narrows with integer rounding: every shape keeps the bits (measured: tests/e2e/test_bf16_splat_denormal.py)."""
    operand = instr.operands[0]
    if instr.shape.element_type is not T.BF16 or not instr.shape.is_default_layout:
        return False
    whole = em.comp.root is instr and operand.opcode is O.PARAMETER if em.comp is not None \
        else id(operand) in em.overrides
    options = em.kctx.options
    if not whole or host_target(options) != AVX512 or not options.cpu_target.info.bf16:
        return False
    dims = [n for n in instr.shape.dimensions if n != 1]
    if len(dims) < 2:
        return False
    rows, width = dims[-2:]
    if width >= 9:
        return True
    return rows <= 16 and width > {2: 4, 4: 8, 8: 8, 16: 8}.get(rows, 1)


def common_factors(a, b) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Groups ((i0, i1), (j0, j1)) with prod(a[i0:i1]) == prod(b[j0:j1]) (XLA's CommonFactors)."""
    if prod(a) == 0 or prod(b) == 0:
        return [((0, len(a)), (0, len(b)))]
    groups, i, j = [], 0, 0
    while i < len(a) or j < len(b):
        i0, j0, pa, pb = i, j, 1, 1
        if i < len(a):
            pa *= a[i]
            i += 1
        if j < len(b):
            pb *= b[j]
            j += 1
        while pa != pb:
            if pa < pb and i < len(a):
                pa *= a[i]
                i += 1
            elif j < len(b):
                pb *= b[j]
                j += 1
            else:
                pa *= a[i]
                i += 1
        # Trailing size-1 dims join the current group.
        while i < len(a) and a[i] == 1 and (j >= len(b) or b[j] != 1):
            i += 1
        while j < len(b) and b[j] == 1 and (i >= len(a) or a[i] != 1):
            j += 1
        groups.append(((i0, i), (j0, j)))
    return groups


def reshape_index(b, index: Index, out_shape: Shape, in_shape: Shape) -> Index:
    """The operand index of a row-major reshape, keeping integer division to the dims that need it."""
    if out_shape.is_default_layout and in_shape.is_default_layout and index.dims is None:
        return Index(None, in_shape, index.linear)
    od = index.get_dims(b)
    a, c = list(in_shape.dimensions), list(out_shape.dimensions)
    idx = [t.i64(0)] * len(a)
    for (i0, i1), (j0, j1) in common_factors(a, c):
        ins = [k for k in range(i0, i1) if a[k] != 1]
        outs = [k for k in range(j0, j1) if c[k] != 1]
        if not ins:
            continue
        if len(ins) == 1 and len(outs) == 1:
            idx[ins[0]] = od[outs[0]]
            continue
        lin = None
        for k in outs:
            lin = od[k] if lin is None else b.add(b.mul(lin, t.i64(c[k])), od[k])
        lin = lin if lin is not None else t.i64(0)
        for pos in range(len(ins) - 1, -1, -1):
            k = ins[pos]
            if pos == 0:
                idx[k] = lin
            else:
                idx[k] = b.urem(lin, t.i64(a[k]))
                lin = b.udiv(lin, t.i64(a[k]))
    linear = None
    if out_shape.is_default_layout and in_shape.is_default_layout and index.linear is not None \
            and index.shape.dimensions == out_shape.dimensions and index.shape.minor_to_major == out_shape.minor_to_major:
        linear = index.linear
    return Index(idx, in_shape, linear)


@generates(O.RESHAPE)
def _reshape(em, instr):
    operand = instr.operands[0]
    x = em.gen(operand)
    if not (instr.shape.is_default_layout and operand.shape.is_default_layout):
        # A reshape is defined on logical (row-major) element order whatever the layouts.
        out_rm = Shape(instr.shape.element_type, instr.shape.dimensions)
        in_rm = Shape(operand.shape.element_type, operand.shape.dimensions)
        return lambda index: x(Index(reshape_index(em.b, Index(index.get_dims(em.b), out_rm), out_rm, in_rm)
                                     .get_dims(em.b), operand.shape))
    return lambda index: x(reshape_index(em.b, index, instr.shape, operand.shape))


@generates(O.BITCAST)
def _bitcast(em, instr):
    operand = instr.operands[0]
    x = em.gen(operand)
    src_et, dst_et = operand.shape.element_type, instr.shape.element_type
    conv = (lambda v: v) if src_et is dst_et else (lambda v: em.ops.bitcast_value(src_et, dst_et, v))
    if instr.shape.is_default_layout and operand.shape.is_default_layout:
        return lambda index: conv(x(reshape_index(em.b, index, instr.shape, operand.shape)))

    def g(index):
        lin = index.linear_for(instr.shape)
        if lin is None:
            lin = linearize(em.b, index.get_dims(em.b), instr.shape)
        return conv(x(Index(delinearize(em.b, lin, operand.shape), operand.shape, lin)))
    return g


@generates(O.TRANSPOSE)
def _transpose(em, instr):
    operand = instr.operands[0]
    x = em.gen(operand)
    perm = instr.dimensions

    def g(index):
        od = index.get_dims(em.b)
        idx = [None] * len(perm)
        for i, p in enumerate(perm):
            idx[p] = od[i]
        return x(Index(idx, operand.shape))
    return g


@generates(O.SLICE)
def _slice(em, instr):
    operand = instr.operands[0]
    x = em.gen(operand)
    b = em.b

    def g(index):
        od = index.get_dims(b)
        idx = []
        for d, r in enumerate(instr.slices):
            v = od[d] if r.stride == 1 else b.mul(od[d], t.i64(r.stride))
            idx.append(v if r.start == 0 else b.add(v, t.i64(r.start)))
        return x(Index(idx, operand.shape))
    return g


@generates(O.REVERSE)
def _reverse(em, instr):
    operand = instr.operands[0]
    x = em.gen(operand)
    rev = set(instr.dimensions)
    b = em.b

    def g(index):
        od = index.get_dims(b)
        idx = [b.sub(t.i64(operand.shape.dimensions[d] - 1), v) if d in rev else v for d, v in enumerate(od)]
        return x(Index(idx, operand.shape))
    return g


@generates(O.PAD)
def _pad(em, instr):
    operand, value = instr.operands
    x, pv = em.gen(operand), em.gen(value)
    b = em.b
    cfg = instr.padding_config.dimensions
    if operand.shape.num_elements == 0:
        return lambda index: pv(scalar_index(value.shape))

    def g(index):
        od = index.get_dims(b)
        valid = ir.Constant(t.I1, 1)
        idx = []
        for d, p in enumerate(cfg):
            n = operand.shape.dimensions[d]
            q = od[d] if p.low == 0 else b.sub(od[d], t.i64(p.low))
            if p.interior:
                step = t.i64(p.interior + 1)
                nonneg = b.icmp_signed(">=", q, t.i64(0))
                aligned = b.icmp_signed("==", b.srem(q, step), t.i64(0))
                q = b.sdiv(q, step)
                valid = b.and_(valid, b.and_(nonneg, aligned))
            valid = b.and_(valid, b.icmp_unsigned("<", q, t.i64(n)))
            # Clamp so the (discarded) read of a padding position stays in bounds.
            q = b.select(b.icmp_signed("<", q, t.i64(0)), t.i64(0), q)
            q = b.select(b.icmp_signed(">", q, t.i64(n - 1)), t.i64(n - 1), q)
            idx.append(q)
        return b.select(valid, x(Index(idx, operand.shape)), pv(scalar_index(value.shape)))
    return g


@generates(O.CONCATENATE)
def _concatenate(em, instr):
    dim = instr.dimensions[0]
    parts, offset = [], 0
    for o in instr.operands:
        n = o.shape.dimensions[dim]
        if n:
            parts.append((offset, n, o, em.gen(o)))
        offset += n
    ty = t.value_type(instr.shape.element_type)
    b = em.b
    if not parts:  # the result has no elements
        return lambda index: ir.Constant(ty, None)

    def at(part, od):
        off, n, o, x = part
        idx = list(od)
        idx[dim] = b.sub(od[dim], t.i64(off)) if off else od[dim]
        return x(Index(idx, o.shape))

    def g(index):
        od = index.get_dims(b)

        def chain(k):
            if k == len(parts) - 1:
                return at(parts[k], od)
            off, n, _, _ = parts[k]
            return if_else_value(em.kctx, b.icmp_signed("<", od[dim], t.i64(off + n)),
                                 lambda: at(parts[k], od), lambda: chain(k + 1), ty)
        return chain(0)
    return g


def _start_index(em, gen, operand, limit: int):
    """A dynamic start index read as i64 and clamped to [0, limit] (XLA clamps out-of-range starts)."""
    b = em.b
    et = operand.shape.element_type
    v = gen(scalar_index(operand.shape))
    v = em.ops.convert(et, T.S64, v) if et is not T.U64 else v
    v = b.select(b.icmp_signed("<", v, t.i64(0)), t.i64(0), v)
    return b.select(b.icmp_signed(">", v, t.i64(max(limit, 0))), t.i64(max(limit, 0)), v)


@generates(O.DYNAMIC_SLICE)
def _dynamic_slice(em, instr):
    operand = instr.operands[0]
    x = em.gen(operand)
    starts = [(em.gen(o), o) for o in instr.operands[1:]]
    sizes = instr.dynamic_slice_sizes
    b = em.b

    def g(index):
        od = index.get_dims(b)
        idx = []
        for d, (sg, so) in enumerate(starts):
            s = _start_index(em, sg, so, operand.shape.dimensions[d] - sizes[d])
            idx.append(b.add(s, od[d]))
        return x(Index(idx, operand.shape))
    return g


@generates(O.DYNAMIC_UPDATE_SLICE)
def _dynamic_update_slice(em, instr):
    operand, update = instr.operands[0], instr.operands[1]
    x, u = em.gen(operand), em.gen(update)
    starts = [(em.gen(o), o) for o in instr.operands[2:]]
    ty = t.value_type(instr.shape.element_type)
    b = em.b
    if update.shape.num_elements == 0:
        return x

    def g(index):
        od = index.get_dims(b)
        inside = ir.Constant(t.I1, 1)
        uidx = []
        for d, (sg, so) in enumerate(starts):
            s = _start_index(em, sg, so, operand.shape.dimensions[d] - update.shape.dimensions[d])
            rel = b.sub(od[d], s)
            inside = b.and_(inside, b.icmp_unsigned("<", rel, t.i64(update.shape.dimensions[d])))
            uidx.append(rel)
        return if_else_value(em.kctx, inside, lambda: u(Index(uidx, update.shape)), lambda: x(index), ty)
    return g


@generates(O.GATHER)
def _gather(em, instr):
    operand, indices = instr.operands
    x, ix = em.gen(operand), em.gen(indices)
    dn, sizes = instr.gather_dimension_numbers, instr.gather_slice_sizes
    b = em.b
    op_rank, idx_rank = operand.shape.rank, indices.shape.rank
    batch_out = [d for d in range(instr.shape.rank) if d not in dn.offset_dims]
    idx_batch = [d for d in range(idx_rank) if d != dn.index_vector_dim]
    removed = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    kept = [d for d in range(op_rank) if d not in removed]
    iet = indices.shape.element_type

    def g(index):
        od = index.get_dims(b)
        bvals = [od[d] for d in batch_out]
        start = [t.i64(0)] * op_rank
        for k, opd in enumerate(dn.start_index_map):
            ii = [None] * idx_rank
            for j, d in enumerate(idx_batch):
                ii[d] = bvals[j]
            if dn.index_vector_dim < idx_rank:
                ii[dn.index_vector_dim] = t.i64(k)
            v = ix(Index(ii, indices.shape))
            start[opd] = em.ops.convert(iet, T.S64, v) if iet is not T.U64 else v
        for opd, idim in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
            start[opd] = bvals[idx_batch.index(idim)]
        idx = []
        for d in range(op_rank):
            s = start[d]
            if not isinstance(s, ir.Constant):
                hi = t.i64(max(operand.shape.dimensions[d] - sizes[d], 0))
                s = b.select(b.icmp_signed("<", s, t.i64(0)), t.i64(0), s)
                s = b.select(b.icmp_signed(">", s, hi), hi, s)
            idx.append(s)
        for j, d in enumerate(kept):
            idx[d] = b.add(idx[d], od[dn.offset_dims[j]])
        return x(Index(idx, operand.shape))
    return g


# ---------------------------------------------------------------- reductions
def _reduce_loops(em, shape: Shape, dims, body, prefix="r", starts=None, hints: tuple = ()):
    """Nested loops over ``dims`` of ``shape`` in physical order; body(dict dim -> index value). ``starts``
    (dim -> first index) starts some loops later than 0; ``hints``: each loop's ``loop_hints``."""
    b = em.b
    order = [d for d in major_to_minor(shape) if d in dims]
    vals = {}

    def rec(k):
        if k == len(order):
            body(vals)
            return
        d = order[k]
        start = (starts or {}).get(d, 0)
        with for_range(b, start, shape.dimensions[d], f"{prefix}{d}", reduction=True, hints=hints) as i:
            vals[d] = i
            with em.kctx.scope():
                rec(k + 1)
    rec(0)


class _Accumulator:
    """Register-like accumulators held in entry-block allocas (mem2reg turns them into phis)."""

    def __init__(self, em, types, initial) -> None:
        self.slots = [em.kctx.alloca(ty) for ty in types]
        self.em = em
        for s, v in zip(self.slots, initial):
            em.b.store(v, s)

    def get(self):
        return [self.em.b.load(s) for s in self.slots]

    def set(self, values) -> None:
        for s, v in zip(self.slots, values):
            self.em.b.store(v, s)


def _identity(op: O, et: T, ty):
    """The identity of a reassociable reducer in the accumulation type ``ty`` (None if it has none)."""
    if op is O.ADD:
        return t.float_constant(ty, -0.0) if et.is_float else ir.Constant(ty, 0)
    if op is O.MULTIPLY:
        return t.float_constant(ty, 1.0) if et.is_float else ir.Constant(ty, 1)
    if op in (O.MAXIMUM, O.MINIMUM):
        low = op is O.MAXIMUM
        if et.is_float:
            return t.float_constant(ty, -math.inf if low else math.inf)
        if et is T.PRED or not et.is_signed_int:
            return ir.Constant(ty, 0 if low else (1 << ty.width) - 1)
        half = 1 << (ty.width - 1)
        return ir.Constant(ty, -half if low else half - 1)
    if op is O.AND:
        return ir.Constant(ty, (1 << ty.width) - 1)
    if op in (O.OR, O.XOR):
        return ir.Constant(ty, 0)
    return None


def _simple_combine(em, op: O, et: T, acc, x, reassoc: bool):
    """acc ⊕ x in the accumulation type (floats: f32 for f16/bf16), vectorisable."""
    b = em.b
    if et.is_float:
        flags = em.kctx.options.reduction_flags if reassoc else em.ops.flags
        if op is O.ADD:
            return b.fadd(acc, x, flags=flags)
        if op is O.MULTIPLY:
            return b.fmul(acc, x, flags=flags)
        if op in (O.MAXIMUM, O.MINIMUM):
            # fast min/max: a NaN element never wins over the accumulator (maxnum, vectorisable)
            fast = em.kctx.options.fast_min_max
            name = ("maxnum" if fast else "maximum") if op is O.MAXIMUM else ("minnum" if fast else "minimum")
            return em.ops.call_intrinsic(name, acc, x)
    return em.ops.binary(op, et, acc, x)


def in_order_reduce(instr) -> bool:
    """Whether ``instr`` is a single-input float add/mul reduce summed in layout order, unreassociated.

    XLA:CPU's TreeReductionRewriter leaves a reduce whose reduced dims are all <= TREE_WINDOW alone and
    emits it as one loop in layout order that LLVM does not vectorise: the same order here, so where the
    order decides (0 * inf once a product overflowed, inf - inf once a sum did) the result is XLA's. (Where
    LLVM does vectorise XLA's row loop of a full reduction of an input [R, C], ``row_lanes`` gives its lanes.)"""
    if len(instr.operands) != 2:
        return False
    et = instr.shape.element_type
    in_shape = instr.operands[0].shape
    return (et.is_float and not et.is_complex and simple_reducer(instr.to_apply) in (O.ADD, O.MULTIPLY)
            and prod(in_shape.dimensions[d] for d in instr.dimensions) <= 2 * CASCADE_BLOCK
            and all(in_shape.dimensions[d] <= TREE_WINDOW for d in instr.dimensions))


@generates(O.REDUCE)
def _reduce(em, instr):
    k = len(instr.operands) // 2
    inputs = [em.gen(o) for o in instr.operands[:k]]
    inits = [(em.gen(o), o) for o in instr.operands[k:]]
    in_shape = instr.operands[0].shape
    rdims = set(instr.dimensions)
    keep = [d for d in range(in_shape.rank) if d not in rdims]
    ets = [o.shape.element_type for o in instr.operands[:k]]
    comp = instr.to_apply
    simple = simple_reducer(comp) if k == 1 else None
    if simple is not None and (simple not in REASSOCIABLE or instr.shape.element_type.is_complex):
        simple = None
    b = em.b
    total = prod(in_shape.dimensions[d] for d in rdims)

    def full_index(od, rvals):
        idx = [None] * in_shape.rank
        for j, d in enumerate(keep):
            idx[d] = od[j]
        for d, v in rvals.items():
            idx[d] = v
        return Index(idx, in_shape)

    def g_generic(index):
        od = index.get_dims(b)
        init_vals = [ig(scalar_index(o.shape)) for ig, o in inits]
        if total == 0:
            return init_vals[0] if k == 1 else tuple(init_vals)
        acc = _Accumulator(em, [v.type for v in init_vals], init_vals)

        def body(rvals):
            fi = full_index(od, rvals)
            vals = [x(fi) for x in inputs]
            new = em.call(comp, acc.get() + vals)
            acc.set(list(new) if isinstance(new, tuple) else [new])
        _reduce_loops(em, in_shape, rdims, body)
        res = acc.get()
        return res[0] if k == 1 else tuple(res)

    if simple is None:
        return g_generic
    et = ets[0]
    cty = t.compute_float_type(et) if et.is_float else t.value_type(et)
    cascade = et.is_float and simple in (O.ADD, O.MULTIPLY) and total > 2 * CASCADE_BLOCK
    in_order = in_order_reduce(instr)
    lanes = in_order and _row_lanes(em, instr)

    def g_simple(index):
        od = index.get_dims(b)
        init = inits[0][0](scalar_index(inits[0][1].shape))
        x = inputs[0]
        if total == 0:
            return init
        load = (lambda fi: em.ops.to_compute(et, x(fi))) if et.is_float else x
        if not cascade:
            init = em.ops.to_compute(et, init) if et.is_float else init
            if in_order and simple is O.ADD:
                # XLA's loop keeps its first `init + x0` (LLVM does not fold +0 + x0*x0 there), so a product
                # x0*x0 contracts into it and x1*x1 into the second add; hidden behind a fence, LLVM here
                # cannot fold it either (and would then contract x0*x0 into the second add).
                init = em.ops.call_intrinsic("arithmetic.fence", init)
            if lanes:
                one = instr.shape.num_elements == 1
                factors = _fused_factors(em, instr) if simple is O.ADD else None
                tail_factors = None
                if factors is not None and host_target(em.kctx.options) == AVX512:
                    # per element on AVX-512, TF's products of rows of up to 4 columns are FMAs into the lanes'
                    # adds (the backend contracts them through the lanes' shuffles); of longer rows, LLVM multiplies
                    # whole vectors first and each product rounds (x·y, x·x, x·3 over [3, R, C], R 4-16, C 2-8,
                    # f32/f64, against TF 2.21 on Zen 4) — only where both factors are loads (x·3 multiplies the
                    # shuffled loads by the splat, and (x - μ)² its computed lanes: both contracted)
                    # (measured over the input's two minor dims; with a kept dim inside, e.g. f32 [2, 8, 5, 4]
                    # x·x, the products stay FMAs)
                    xs = instr.operands[0].shape
                    whole = _over_minor_dims(xs, lanes[1:3]) and lanes[4] > 4 or _interleaved_rows(xs, lanes[1:3],
                                                                                                *lanes[3:5])
                    if whole and all(_load_operand(o) for o in instr.operands[0].operands):
                        unfenced, tail_factors, factors = load, factors, None
                        load = lambda fi: em.ops.call_intrinsic("arithmetic.fence", unfenced(fi))  # noqa: E731
                elif not one:
                    factors = None
                res = _row_lane_fold(em, simple, et, cty, init, load, lambda rvals: full_index(od, rvals), in_shape,
                                     *lanes, looped=not one, factors=factors, tail_factors=tail_factors)
                return em.ops.from_compute(et, res)
            acc = _Accumulator(em, [cty], [init])
            factors = _fused_factors(em, instr) if in_order and simple is O.ADD else None
            vector_outputs = _outputs_vectorised(em, instr) if factors is not None else 0
            rounded = None
            if vector_outputs:
                out_dim = next(d for d, n in enumerate(instr.shape.dimensions) if n != 1)
                rounded = b.icmp_signed("<", od[out_dim], t.i64(vector_outputs))

            def body(rvals):
                if factors is not None:
                    # XLA's backend contracts each product into the running sum (one FMA per element); LLVM's
                    # SLP vectoriser may pack our unrolled products first (rounded: max·3 - inf is NaN, not
                    # TF's -inf: conv_to_multiply's reduce), so the FMA is explicit; the outputs TF's loop
                    # vectorises add rounded products (_outputs_vectorised)
                    fi = full_index(od, rvals)
                    a, c, s_ = factors[0](fi), factors[1](fi), acc.get()[0]
                    v = em.ops.mul_add(a, c, s_)
                    if rounded is not None:
                        p_ = em.ops.call_intrinsic("arithmetic.fence", b.fmul(a, c))
                        v = b.select(rounded, b.fadd(s_, p_), v)
                    acc.set([v])
                    return
                acc.set([_simple_combine(em, simple, et, acc.get()[0], load(full_index(od, rvals)),
                                         not in_order)])
            _reduce_loops(em, in_shape, rdims, body)
            res = acc.get()[0]
            return em.ops.from_compute(et, res) if et.is_float else res
        return em.ops.from_compute(et, _cascade_reduce(em, in_shape, rdims, simple, et, cty, init, load,
                                                       lambda rvals: full_index(od, rvals)))
    return g_simple


def _through_moves(o):
    """``o`` behind bitcasts, copies and reshapes."""
    while o.opcode in (O.BITCAST, O.COPY, O.RESHAPE):
        o = o.operands[0]
    return o


def _load_operand(o) -> bool:
    """A parameter of the kernel read in place (behind bitcasts, reshapes and copies)."""
    return _through_moves(o).opcode is O.PARAMETER


def _over_minor_dims(shape: Shape, dims) -> bool:
    """Whether ``dims`` are ``shape``'s two minor-most non-degenerate dims (layout order)."""
    return [d for d in major_to_minor(shape) if shape.dimensions[d] != 1][-2:] == list(dims)


def _fused_factors(em, instr) -> tuple | None:
    """The generators of the two factors when ``instr``'s (a reduce's) input is an F32/F64 multiply fused
    into the same kernel with the reduce its only user, else None."""
    x = instr.operands[0]
    if em.comp is None or x.opcode is not O.MULTIPLY or id(x) in em.overrides \
            or x.shape.element_type not in (T.F32, T.F64) or len(em.users().get(x, ())) != 1:
        return None
    return em.gen(x.operands[0]), em.gen(x.operands[1])


# (element type, row length) -> (widest, narrowest vector factor) of the output loop TF's XLA vectorises over
# an in-order sum of a fused product along one innermost reduced row (_outputs_vectorised).
_OUTPUT_VECTOR_FACTORS = {(T.F32, 6): (8, 4), (T.F32, 8): (8, 8), (T.F64, 6): (4, 4)}


def _outputs_vectorised(em, instr) -> int:
    """How many leading outputs of a fused in-order sum of a fused product (:func:`_fused_factors`) TF's XLA
    computes in its vectorised output loop, where each adds the rounded product (no FMA); the rest are its
    scalar epilogue's FMAs. On AVX2, for one innermost reduced row of C and one non-degenerate output dim of
    B: LLVM takes VF = min(widest, power of two ≤ B) lanes when VF ≥ the narrowest and, under 16 outputs,
    VF divides B (no epilogue on a tiny trip count), from 16 on with a vector epilogue of the narrowest factor.
    Measured against TF 2.21 on Zen 3 (reduce_sum(a·b, axis=1) over [B, C], B 1-40 and 400-403, C 2-16, f32
    and f64; l2_normalize's sum of squares over rows of 8): rounded only at those C; elsewhere every output is
    one FMA chain. Not modelled: f64 [18, 6], whose last two outputs are rounded too (B 17, 20, 21, 28, 36
    and 403 agree)."""
    if host_target(em.kctx.options) not in (AVX2, AVX512):
        return 0
    x = instr.operands[0]
    shape = x.shape
    rdims = [d for d in instr.dimensions if shape.dimensions[d] != 1]
    kept = [n for n in instr.shape.dimensions if n != 1]
    if len(rdims) != 1 or len(kept) != 1 or major_to_minor(shape)[-1] != rdims[0]:
        return 0
    factors = _OUTPUT_VECTOR_FACTORS.get((instr.shape.element_type, shape.dimensions[rdims[0]]))
    if factors is None:
        return 0
    widest, narrowest = factors
    B = kept[0]
    vf = min(widest, 1 << (B.bit_length() - 1))
    if vf < narrowest or B < 16 and B % vf:
        return 0
    # from 16 outputs on, a remainder of at least the narrowest factor is a vector epilogue (f32 [20, 6]: all 20)
    return B - B % narrowest if B >= 16 else B


def row_lane_order(instr, options, input_is_buffer: bool = True) -> tuple | None:
    """(outer dims, row dim, column dim, rows, columns, lanes, rows in lanes) where TF's XLA computes an in-order
    float sum or product in vector lanes (``row_lanes``), else None: over its last two non-degenerate reduced
    dims [R, C] (layout order), the outer reduced dims in order around them. To one element: two or more such
    dims and its input a buffer of the kernel (``input_is_buffer``) or a fused product of loads; to more
    (``row_lanes``' per_element): any input, two or more such dims (on AVX-512 with kept dims inside [R, C]
    only some inputs, some rows after the lanes: :func:`_avx512_kept_inside`, :func:`_avx512_inner_kept_lanes`).
    Only on the targets it was measured on.

    A fused product of loads (:func:`_product_loads`) is vectorised like a buffer (AVX2 and AVX-512), but for two rows of
    a product of two loads, which stay in order (measured against TF 2.21 on Zen 3: reduce_sum(a·b),
    a·3 and a·broadcast(row) over [R, C], [B, R, C] and [R, C, K] with B 1-3, R 2, 4, 8, C 2, 3, 5, K 1, 2,
    8, to one element and per element; a whole-window convolution's multiply + reduce)."""
    if not in_order_reduce(instr):
        return None
    x = instr.operands[0]
    dims = [d for d in major_to_minor(x.shape) if d in instr.dimensions and x.shape.dimensions[d] != 1]
    per_element = instr.shape.num_elements != 1
    target = host_target(options)
    fused = x.parent is not None and x.parent.is_fusion_computation
    loads = _product_loads(x, dims[-2]) if target in (AVX2, AVX512) and fused and len(dims) >= 2 else None
    if len(dims) < 2 or not per_element and not (input_is_buffer or loads):
        return None
    if target not in MEASURED_TARGETS:
        return None
    rows, cols = (x.shape.dimensions[d] for d in dims[-2:])
    # LLVM costs the square of a computed value (a batch norm's (x - μ)²) as a product of one load
    square = fused and loads is None and x.opcode is O.MULTIPLY and x.operands[0] is x.operands[1]
    cost_loads = 1 if square else loads
    if per_element and target == AVX512 and not _over_minor_dims(x.shape, dims[-2:]):
        kept = _avx512_kept_inside(x, tuple(dims[-2:]), fused, cost_loads, rows, cols, len(dims) > 2, square)
        if kept is not None:
            return (tuple(dims[:-2]), *dims[-2:], rows, cols, *kept) if kept[0] else None
        if not _avx512_inner_kept_lanes(x, fused, loads, rows, cols, outer=len(dims) > 2):
            return None
    lanes = row_lanes(instr.shape.element_type, rows, cols, target, per_element, cost_loads)
    if loads == 2 and rows == 2:
        lanes = 0
    return (tuple(dims[:-2]), *dims[-2:], rows, cols, lanes, rows - rows % lanes) if lanes else None


# LLVM's largest interleave group (-max-interleave-group-factor): a row of at most this many elements, kept ones
# among them, is read as one wide vector per block of rows, and its trailing gap needs a scalar epilogue.
_MAX_INTERLEAVE_FACTOR = 8


def _avx512_kept_inside(x, rc: tuple, fused: bool, loads: int | None, rows: int, cols: int, outer: bool,
                        square: bool) -> tuple | None:
    """(lanes, rows in lanes) of TF's XLA on AVX-512 for a per-element reduce whose last two reduced dims
    [R, C] are adjacent with only kept dims K inside ([..., R, C, K]: a pool's or a batch norm's channels) and
    whose row loop is vectorised (R from ``SHORT_TRIPS`` on); lanes 0: in order; None: not measured here
    (:func:`_avx512_inner_kept_lanes`). Read from TF 2.21's ``ir-with-opt`` on Zen 4 ([2, R, C, K] over
    (1, 2), R 16-32, C and K 2-4, f32/f64, sums of a parameter, x·x, x·3, x·y and (x - μ)², which ``loads``
    counts as one load (``square``); the bits then agree):
    a row of C·K ≤ 8 elements is an interleave group whose gap (the other kept elements) needs a scalar
    epilogue, so the lanes take R - (R mod L, or L) rows and the rest follow in order, in ``row_lanes``' L
    (a product of two loads over 4 columns: f32 4, f64 2); longer rows are gathers: of up to 4 columns only a
    product of one load is vectorised (f32 8 lanes, f64 4, with no epilogue; f64 x·x over [4, 3] not, (x - μ)²
    is)."""
    et = x.shape.element_type
    inside = _kept_inside(x.shape, rc)
    if inside is None or et not in (T.F32, T.F64):
        return None
    buffer = not fused or x.opcode is O.PARAMETER
    if rows < SHORT_TRIPS:
        # fewer rows (R 4-12, no outer reduced dim): a buffer in lanes only over 2 columns with a power of two
        # of kept elements (2-16 measured), f64 only over 4 rows; f64 x·x over [4, 3] from 8 rows in order
        if outer:
            return None
        if buffer and not (cols == 2 and inside & (inside - 1) == 0 and (et is T.F32 or rows <= 4)) \
                or loads == 1 and not square and et is T.F64 and (cols, inside) == (4, 3) and rows >= 8:
            return 0, 0
        return None
    if cols * inside <= _MAX_INTERLEAVE_FACTOR:
        if not (buffer or loads in (1, 2)):
            return None
        lanes = row_lanes(et, rows, cols, AVX512, True)
        if loads == 2 and cols >= 4:
            lanes = 4 if et is T.F32 else 2
        return lanes, rows - (rows % lanes or lanes)
    if buffer or loads == 2 or loads == 1 and not square and et is T.F64 and (cols, inside) == (4, 3):
        return 0, 0
    if loads != 1 or cols > 4:
        return None
    lanes = 8 if et is T.F32 else 4
    return lanes, rows - rows % lanes


def _kept_inside(shape: Shape, rc: tuple) -> int | None:
    """How many elements the kept dims inside the adjacent reduced dims ``rc`` = (R, C) of ``shape`` hold (the
    rest of a row of C), or None where R and C are not adjacent (layout order, size-1 dims aside)."""
    order = [d for d in major_to_minor(shape) if shape.dimensions[d] != 1]
    i = order.index(rc[1])
    return prod(shape.dimensions[d] for d in order[i + 1:]) if i and order[i - 1] == rc[0] else None


def _interleaved_rows(shape: Shape, rc: tuple, rows: int, cols: int) -> bool:
    """Whether LLVM reads the rows of a per-element reduce over ``rc`` with kept dims inside as one interleave
    group (rows of at most ``_MAX_INTERLEAVE_FACTOR`` elements, a vectorised row loop): on AVX-512 its
    products of two loads are then whole-vector multiplies, each rounded before its shuffle into the lanes."""
    inside = _kept_inside(shape, rc)
    return rows >= SHORT_TRIPS and inside is not None and 1 < inside and 4 < cols * inside <= _MAX_INTERLEAVE_FACTOR


def _avx512_inner_kept_lanes(x, fused: bool, loads: int | None, rows: int, cols: int, outer: bool) -> bool:
    """Whether TF's XLA on AVX-512 sums a reduce per element in row lanes when a kept dimension lies inside its
    last two reduced ones [R, C] (a pool's or a batch norm's channels; over the input's two minor-most dims it
    always does, as to one element). Measured against TF 2.21 on Zen 4 ([2, R, C, K] over (1, 2) and (0, 1, 2),
    R 2-16, C 2-8, K 4 and 8, f32 and f64): a fused product of one load (x·x, x·3) over rows of at most 4
    columns (f32 [8, 5] too); a buffer over rows of 2 columns (f64 with 8 rows and an outer reduced dim: in
    order); the square of a computed value (a batch norm's (x - μ)²) always; a product of two values (x·y,
    dy·(x - μ)) or any other fused value never."""
    if not fused or x.opcode is O.PARAMETER:
        return cols == 2 and not (outer and rows >= 8 and x.shape.element_type is T.F64)
    if x.opcode is not O.MULTIPLY:
        return False
    if loads == 1:
        return cols <= 4 or cols == 5 and rows == 8 and x.shape.element_type is T.F32
    return loads is None and x.operands[0] is x.operands[1]


def _product_loads(x, row: int) -> int | None:
    """How many distinct values a fused ``multiply`` ``x`` loads along dimension ``row`` (its operands
    parameters, behind bitcasts, copies, reshapes and broadcasts that keep ``row``; constants and
    broadcasts along ``row``, invariant there, are no loads), None for anything else."""
    if x.opcode is not O.MULTIPLY:
        return None
    loads = set()
    for o in x.operands:
        if o.opcode is O.BROADCAST:
            if row not in o.dimensions:
                continue
            o = o.operands[0]
        o = _through_moves(o)
        if o.opcode is O.PARAMETER:
            loads.add(id(o))
        elif o.opcode is not O.CONSTANT:
            return None
    return len(loads)


def _row_lanes(em, instr) -> tuple | None:
    """``row_lane_order`` of a reduce in ``em``'s computation (its input a buffer: a parameter of the fusion,
    or an operand of an unfused reduce)."""
    x = instr.operands[0]
    return row_lane_order(instr, em.kctx.options, x.opcode is O.PARAMETER or em.comp is None and id(x) in em.overrides)


def _row_lane_fold(em, op: O, et: T, cty, init, load, full_index, shape: Shape, outer: tuple, rdim: int, cdim: int,
                   rows: int, cols: int, lanes: int, lane_rows: int | None = None, looped: bool = False, factors=None,
                   tail_factors=None):
    """TF's XLA's vectorised order for x[..., rows, cols] (``row_lanes``): for each position of the ``outer``
    reduced dims (loops, in order), lane j (the running value in lane 0, the identity in the others) combines
    rows j, j+lanes, ... each in column order; the lanes meet halves first; then the remaining rows in order
    (``lane_rows``: the rows in lanes, a multiple of ``lanes``; default all but the last ``rows`` mod ``lanes``).
    Unreassociated, so LLVM keeps this order (it may still pack the lanes into vectors); each step flushes as
    TF's does under FTZ/DAZ. ``looped``: to more than one element, the lanes in loops (straight-line only to one
    element). ``factors``: the generators of a fused product's two factors (a sum to one element), each
    product then an explicit FMA into its lane, as TF's vector FMAs (straight-line, LLVM's SLP vectoriser may
    otherwise pack our products and round them: fuzz-like probe [1, 2, 3]·broadcast(row), max·1.25 kept).
    ``tail_factors``: the same for the rows after the lanes alone (TF's scalar epilogue contracts its products
    where the lanes' whole-vector products round)."""
    if outer:
        acc = _Accumulator(em, [cty], [init])

        def body(rvals):
            acc.set([_row_lane_fold(em, op, et, cty, acc.get()[0], load, lambda rc: full_index({**rvals, **rc}),
                                    shape, (), rdim, cdim, rows, cols, lanes, lane_rows, True, factors,
                                    tail_factors)])
        # Not unrolled (XLA's outer reduced loops are unroll.disable): fully unrolled, the last pass's fold
        # would share a block with the consumer, and a product's last step contract into its add (TF's does not).
        _reduce_loops(em, shape, outer, body, hints=(("llvm.loop.unroll.disable",),))
        return acc.get()[0]

    def step(acc_, r, c, factors=factors):
        """acc_ ⊕ x[r, c] (``r``, ``c``: ints or index values)."""
        fi = full_index({rdim: t.i64(r) if isinstance(r, int) else r, cdim: t.i64(c) if isinstance(c, int) else c})
        if factors is None:
            return _simple_combine(em, op, et, acc_, load(fi), False)
        return em.ops.mul_add(factors[0](fi), factors[1](fi), acc_)
    body = rows - rows % lanes if lane_rows is None else lane_rows
    ident = _identity(op, et, cty)
    if op is O.ADD:
        # TF's vector lanes start from -0 in an FMA (x*y + -0, the product rounded once) and contract the next
        # product into the next add; folded away here, -0 + x0*y0 would leave two products in one add, and the
        # backend may contract the wrong one (measured: reduce_sum(a * b) per element).
        ident = em.ops.call_intrinsic("arithmetic.fence", ident)
    acc = [init] + [ident] * (lanes - 1)
    if body and looped:
        # Loops over the blocks of `lanes` rows and their columns, not unrolled: each lane still combines its
        # rows in column order (straight-line, a [32, 24] reduce per element took seconds to compile, and
        # straight-line up to 256 elements, BERT-tiny's training step's LLVM optimisation + machine code took
        # 2.9 s against 1.6 s looped, at load 4; looped, the steady state is still TF's or better: a mean of
        # [8, 8, 8, 256] over (1, 2) 0.35 ms, 0.22 straight-line, TF's 0.43).
        lane_acc = _Accumulator(em, [cty] * lanes, acc)
        off = (("llvm.loop.unroll.disable",),)
        with for_range(em.b, 0, body // lanes, "lane_rows", hints=off) as q:
            r0 = em.b.mul(q, t.i64(lanes))
            with for_range(em.b, 0, cols, "lane_cols", hints=off) as c:
                with em.kctx.scope():
                    vals = lane_acc.get()
                    for j in range(lanes):
                        vals[j] = step(vals[j], em.b.add(r0, t.i64(j)), c)
                    lane_acc.set(vals)
        acc = lane_acc.get()
    else:
        for r in range(body):
            for c in range(cols):
                acc[r % lanes] = step(acc[r % lanes], r, c)
    while len(acc) > 1:
        half = len(acc) // 2
        if half == 1 and looped:
            # TF's last step is the scalar end of its vector.reduce, which the backend contracts into a
            # consumer's add (vfmadd213ss: reduce_sum + reduce_prod per element). Unfenced, LLVM's
            # VectorCombine makes ours a <2 x float> op on the SLP-packed lanes and an extract, which it
            # does not contract (vmulss + vaddss).
            acc = [em.ops.call_intrinsic("arithmetic.fence", v) for v in acc]
        acc = [_simple_combine(em, op, et, acc[j], acc[j + half], False) for j in range(half)]
    total = acc[0]
    for r in range(body, rows):
        for c in range(cols):
            total = step(total, r, c, tail_factors or factors)
    if body < rows and op is O.MULTIPLY:
        # TF's remaining rows run in a scalar loop of their own block, so the backend cannot contract its last
        # product into a consumer's add (with no remaining rows the lanes' last product shares the consumer's
        # block and is contracted, as here): measured with reduce_sum(x) + reduce_prod(x).
        total = em.ops.call_intrinsic("arithmetic.fence", total)
    return total


class Cascade:
    """Pairwise combination of block results by a binary counter: level l holds the combination of 2^l
    blocks, so n blocks cost O(n) combines and the rounding error grows like log2(n)."""

    def __init__(self, em, op: O, et: T, cty) -> None:
        self.em, self.op, self.et, self.cty = em, op, et, cty
        kctx, b = em.kctx, em.b
        self.ident = _identity(op, et, cty)
        self.levels = kctx.alloca(cty, "levels", count=64)
        self.count = kctx.alloca(t.I64, "count")
        self.cur = kctx.alloca(cty, "carry")
        self.kk = kctx.alloca(t.I64, "kk")
        self.lv = kctx.alloca(t.I64, "lv")
        b.store(t.i64(0), self.count)

    def reset(self) -> None:
        self.em.b.store(t.i64(0), self.count)

    def push(self, value) -> None:
        em, b = self.em, self.em.b
        fn = b.block.function
        k0 = b.load(self.count)
        b.store(b.add(k0, t.i64(1)), self.count)
        b.store(value, self.cur)
        b.store(k0, self.kk)
        b.store(t.i64(0), self.lv)
        head = fn.append_basic_block("carry.head")
        body = fn.append_basic_block("carry.body")
        done = fn.append_basic_block("carry.done")
        b.branch(head)
        b.position_at_end(head)
        b.cbranch(b.trunc(b.load(self.kk), t.I1), body, done)
        b.position_at_end(body)
        lvl = b.load(self.lv)
        slot = b.gep(self.levels, [lvl], source_etype=self.cty)
        b.store(_simple_combine(em, self.op, self.et, b.load(slot), b.load(self.cur), False), self.cur)
        b.store(b.lshr(b.load(self.kk), t.i64(1)), self.kk)
        b.store(b.add(lvl, t.i64(1)), self.lv)
        b.branch(head)
        b.position_at_end(done)
        b.store(b.load(self.cur), b.gep(self.levels, [b.load(self.lv)], source_etype=self.cty))

    def total(self):
        """The combination of everything pushed (identity if nothing), lowest level first."""
        em, b, kctx = self.em, self.em.b, self.em.kctx
        total = kctx.alloca(self.cty, "total")
        b.store(self.ident, total)
        cnt = b.load(self.count)
        with for_range(b, 0, 64, "lvl") as lvl:
            with if_then(kctx, b.trunc(b.lshr(cnt, lvl), t.I1)):
                level = b.load(b.gep(self.levels, [lvl], source_etype=self.cty))
                b.store(_simple_combine(em, self.op, self.et, b.load(total), level, False), total)
        return b.load(total)

    def block(self, start, stop, element) -> None:
        """Push the combination of element(j) for j in [start, stop), CASCADE_BLOCK at a time."""
        em, b, kctx = self.em, self.em.b, self.em.kctx
        acc = kctx.alloca(self.cty, "block")
        span = b.sub(stop, start)
        nblocks = b.udiv(b.add(span, t.i64(CASCADE_BLOCK - 1)), t.i64(CASCADE_BLOCK))
        with for_range(b, 0, nblocks, "blk") as blk:
            s0 = b.add(start, b.mul(blk, t.i64(CASCADE_BLOCK)))
            s1 = b.add(s0, t.i64(CASCADE_BLOCK))
            s1 = b.select(b.icmp_signed(">", s1, stop), stop, s1)
            b.store(self.ident, acc)
            with for_range(b, s0, s1, "e", reduction=True) as j:
                with kctx.scope():
                    b.store(_simple_combine(em, self.op, self.et, b.load(acc), element(j), True), acc)
            self.push(b.load(acc))


def _cascade_reduce(em, in_shape, rdims, op, et, cty, init, load, full_index):
    """Block sums of CASCADE_BLOCK elements (vectorised) combined pairwise by a binary counter."""
    b = em.b
    order = [d for d in major_to_minor(in_shape) if d in rdims]
    inner = order[-1]
    n = in_shape.dimensions[inner]
    cascade = Cascade(em, op, et, cty)

    def outer_body(rvals):
        def element(j):
            rv = dict(rvals)
            rv[inner] = j
            return load(full_index(rv))
        cascade.block(t.i64(0), t.i64(n), element)

    _reduce_loops(em, in_shape, set(order[:-1]), outer_body, prefix="ro")
    init_c = em.ops.to_compute(et, init)
    return _simple_combine(em, op, et, init_c, cascade.total(), False)


def window_peel_dimension(window, in_dims, out_dims) -> int | None:
    """The window dimension whose last position XLA:CPU's loop emitter visits after all the others, or None
    (row-major order). XLA's EmitLoopNest (xla/codegen/emitters/elemental_hlo_to_mlir.cc) walks the window's
    loops from the minor-most while their trip counts multiply to under 64; the first whose bounds check
    ("constrained": the input position ``o * stride + s * dilation - pad_low`` can leave [0, in - 1]) goes
    away when its last position is left out is peeled: the loop nest runs without that position, then over it.
    The order decides which of equal values (-0 and +0, DAZ-equal denormals) and which NaN a max/min keeps.
    Base-dilated windows are not peeled here."""
    if any(w.base_dilation != 1 for w in window):
        return None

    trips = 1
    for d in reversed(range(len(window))):
        if trips >= 64:
            break
        w = window[d]
        trips *= w.size
        if w.size == 1 or _window_in_bounds(w, out_dims[d], in_dims[d], w.size):
            continue
        if _window_in_bounds(w, out_dims[d], in_dims[d], w.size - 1):
            return d
    return None


def _window_in_bounds(w, out_count: int, in_count: int, size: int) -> bool:
    """Whether ``size`` window positions of ``w`` stay inside the input for every output position."""
    hi = (out_count - 1) * w.stride + (size - 1) * w.window_dilation - w.padding_low
    return w.padding_low <= 0 and hi <= in_count - 1 and w.base_dilation == 1


# Channels C → how many leading channels TF's XLA vectorises in the max pool of ``_pool_last_step_kept``
# (LLVM's interleave groups over the channels; none of 1 or of 9 and more).
_POOL_KEPT_CHANNELS = {2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 6, 8: 8}


def _pool_last_step_kept(instr) -> int:
    """On an AVX2 target: how many leading channels of an f32/f64 max pool [N, H, W, C] TF's XLA returns with the
    last window step's ±denormal bits kept (0: none). For a window of 2 along W with SAME padding (0, 1) and a
    stride of 1-3, the only window dimension with more than one position in bounds, LLVM vectorises the outputs
    of two positions across the leading channels: the first step is an x86 max (under DAZ: ±0), the peeled last
    one a compare and a blend of interleaved vectors, which keeps x[w + 1]'s bits when ``acc < x[w + 1]`` (fuzz
    seeds 183001446, 234001375) — when there are 2 such outputs (W = 3, 5, 7 at strides 1, 2, 3), or 4 of
    them for f32 with C ≥ 3. Measured on AVX2 against TF 2.21's XLA: strides 1-3, W of 2-25, C of 1-9, N of 1-4,
    H of 1-3 (kh 1; kh 2, 3 over H = 1, also at stride 2); other counts, VALID padding and H windows of two
    positions flush every output."""
    et = instr.shape.element_type
    window = instr.window.dimensions
    dims = instr.operands[0].shape.dimensions
    out = instr.shape.dimensions
    if len(instr.operands) != 2 or et not in (T.F32, T.F64) or len(dims) != 4 or \
            simple_reducer(instr.to_apply) is not O.MAXIMUM or (out[0], out[3]) != (dims[0], dims[3]):
        return 0
    n, h, w, c = dims
    if any(d.window_dilation != 1 or d.base_dilation != 1 for d in window) or \
            any(window[d].size != 1 or window[d].stride != 1 for d in (0, 3)) or \
            window[2].size != 2 or window[2].stride not in (1, 2, 3) or \
            (window[2].padding_low, window[2].padding_high) != (0, 1):
        return 0
    if (window[1].size != 1 or window[1].stride != 1) and h != 1:   # every output's H window: one position in bounds
        return 0
    pairs = out[2] - 1   # outputs with two positions in bounds (the last one has one)
    if not (pairs == 2 or (et is T.F32 and pairs == 4 and c >= 3)):
        return 0
    return _POOL_KEPT_CHANNELS.get(c, 0)


def _pool_one_position_kept_rows(instr) -> int:
    """On an AVX2 target: how many leading output rows (H) of an f32/f64 max pool [N, H, 1, 1] with a window of
    one in-bounds position (1 along H with a stride of 2 or more; 1 along W, or 2 with SAME padding (0, 1) over
    W = 1) TF's XLA returns with a ±denormal's bits kept (0: none). LLVM unrolls the output rows and
    vectorises across the N images (N of 2; f32 also N of 4 over 3 or more rows), a compare and blend in the interleave
    groups of ``_POOL_KEPT_CHANNELS`` (by output rows) and an x86 max, which flushes under DAZ, elsewhere
    (fuzz seed 195001490; measured against TF 2.21's XLA: N of 1-5, H of 2-20, H strides 2 and 3, SAME and
    VALID)."""
    et = instr.shape.element_type
    window = instr.window.dimensions
    dims = instr.operands[0].shape.dimensions
    if len(instr.operands) != 2 or et not in (T.F32, T.F64) or len(dims) != 4 or \
            simple_reducer(instr.to_apply) is not O.MAXIMUM or dims[2:] != (1, 1):
        return 0
    if any(d.window_dilation != 1 or d.base_dilation != 1 for d in window) or window[0].size != 1 or \
            window[0].stride != 1 or window[3].size != 1 or window[3].stride != 1 or window[1].size != 1 or \
            window[1].stride < 2 or window[1].padding_low or window[1].padding_high or window[2].padding_low or \
            not (window[2].size == 1 and not window[2].padding_high or window[2].size == 2 and window[2].padding_high == 1):
        return 0
    n, rows = instr.shape.dimensions[:2]
    if not (n == 2 or n == 4 and et is T.F32 and rows > 2):
        return 0
    return _POOL_KEPT_CHANNELS.get(rows, 0)


# Innermost loop length → how many leading indices LLVM's interleave groups cover where the two innermost
# output loops read contiguous input (``_pool_strided_point_kept``; _POOL_KEPT_CHANNELS where they leave gaps).
_POOL_KEPT_CONTIGUOUS = {2: 2, 3: 3, 4: 4, 5: 4, 6: 6, 7: 6, 8: 8}


def _one_static_position(w, out_count: int, in_count: int) -> int | None:
    """The window offset of ``w`` in bounds for every output when no other offset is in bounds for any (the
    loop emitter's bounds checks fold away: a 1×1 window, or 2 along W = 1 with SAME padding), else None."""
    def in_bounds(j: int, every: bool) -> bool:
        first = j * w.window_dilation - w.padding_low            # the input position of output 0
        if every:
            return first >= 0 and first + (out_count - 1) * w.stride < in_count
        o = -(first // w.stride) if first < 0 else 0             # the first output at or past position 0
        return o < out_count and first + o * w.stride < in_count
    offsets = [j for j in range(w.size) if in_bounds(j, False)]
    return offsets[0] if len(offsets) == 1 and in_bounds(offsets[0], True) else None


def _pool_strided_point_kept(instr) -> tuple[int, int] | None:
    """On an AVX2 target: (output dimension, count) such that TF's XLA returns the outputs whose index in that
    dimension is below count with a ±denormal's bits kept, for an f32/f64 max pool [N, H, W, C] with a 1×1
    window and a stride over H or W, or a larger window with one static position (2 or 3 along a dimension of
    1, SAME padding; also at stride 1, which XLA does not simplify away) (None: every output flushed, as
    elsewhere). XLA keeps that reduce-window
    (one step, init -inf read from a buffer; its loops run over the output dimensions longer than 1); LLVM
    vectorises the second-innermost loop and unrolls the innermost into interleave groups: a compare and a
    blend there, an x86 max (flushes under DAZ) for the rest. Where the two loops read the input with gaps
    (a stride), it does so for 2 trips, or 4 with an innermost loop of 3 or more (f64: inside a third loop),
    in the groups of ``_POOL_KEPT_CHANNELS``; where they read it contiguously, for 4 trips (f32: an innermost
    loop of 3, 5-8, or inside a third loop; f64: inside a third loop) and 8 (inside a third loop, or f64), in
    those of ``_POOL_KEPT_CONTIGUOUS`` (f32 4 trips: ``_POOL_KEPT_CHANNELS``). Measured against TF 2.21's XLA
    with inputs all ±denormal, every configuration fitting: f32/f64, N 1-2, H 1-4, W 1-9, C 1-9, 12, 16,
    strides (1, 2), (2, 1), (2, 2), (1, 3) (6,336), and the fuzzer's pool domain (N 1-2, H and W 1, 2, 3, 5,
    C 1-3, stride 2; fuzz seeds 221000928, 221000953, 222001043). Also fit: 792 random configurations with N 1-3,
    H 1-5, W 1-7 and strides (3, 3), (3, 1), (2, 3) too, and 250 stride-1 windows (1, 2), (2, 1), (2, 2), (3, 1),
    (1, 3) over N 1-3, H or W 1-7, C 1-9 (f32 [3, 4, 1, 4] of a (1, 2) window keeps all of its C)."""
    et = instr.shape.element_type
    window = instr.window.dimensions
    in_shape = instr.operands[0].shape
    dims, out = in_shape.dimensions, instr.shape.dimensions
    if len(instr.operands) != 2 or et not in (T.F32, T.F64) or len(dims) != 4 or \
            simple_reducer(instr.to_apply) is not O.MAXIMUM or tuple(major_to_minor(in_shape)) != (0, 1, 2, 3):
        return None
    if any(w.base_dilation != 1 or _one_static_position(w, o, i) is None for w, o, i in zip(window, out, dims)) \
            or all(w.stride == 1 and w.size == 1 for w in window) or window[3].stride != 1:
        return None
    loops = [d for d, n in enumerate(out) if n > 1]
    if len(loops) < 2:
        return None
    (da, db), deep, f32 = loops[-2:], len(loops) >= 3, et is T.F32
    inner, outer = out[db], out[da]
    elem_stride = [prod(dims[d + 1:]) * window[d].stride for d in range(4)]   # input elements per loop step
    if elem_stride[db] != 1 or elem_stride[da] != inner:   # gaps between the reads
        fits = outer == 2 or outer == 4 and inner >= 3 and (f32 or deep)
        table = _POOL_KEPT_CHANNELS
    elif f32 and outer == 4:
        fits, table = inner >= 3 and inner != 4 or deep, _POOL_KEPT_CHANNELS
    else:
        fits, table = outer == 4 and deep or outer == 8 and (deep or not f32), _POOL_KEPT_CONTIGUOUS
    kept = table.get(inner, 0) if fits else 0
    return (db, kept) if kept else None


@generates(O.REDUCE_WINDOW)
def _reduce_window(em, instr):
    k = len(instr.operands) // 2
    inputs = [em.gen(o) for o in instr.operands[:k]]
    inits = [(em.gen(o), o) for o in instr.operands[k:]]
    in_shape = instr.operands[0].shape
    window = instr.window.dimensions
    comp = instr.to_apply
    b = em.b
    et = instr.shape.element_type
    # TF's XLA returns a max/min reduce-window's ±denormal result as ±0: XLA:CPU's step ``acc < x ? x : acc``
    # becomes an x86 max/min instruction, which under DAZ returns the flushed operand. (Where LLVM vectorises
    # a loop whose window bounds check varies along it, the checked steps become predicated selects that keep
    # the bits: an f64 1x3 SAME max_pool along rows of 5 with one channel keeps some; f32 and rows of 4 flush.
    # Measured against TF 2.21's XLA, f32/f64/bf16 max_pool.)
    flush = k == 1 and simple_reducer(comp) in (O.MAXIMUM, O.MINIMUM)
    lanes = _window_lanes(em, instr)
    if lanes is not None:
        return _window_lane_generator(em, instr, inputs[0], inits[0][0], lanes)
    avx2_pool = flush and not em.scalar_body and host_target(em.kctx.options) == AVX2
    kept_channels = _pool_last_step_kept(instr) if avx2_pool else 0
    kept_rows = _pool_one_position_kept_rows(instr) if avx2_pool else 0
    kept_point = _pool_strided_point_kept(instr) if avx2_pool else None
    kept_below = (3, kept_channels) if kept_channels else (1, kept_rows) if kept_rows else kept_point

    def g(index):
        od = index.get_dims(b)
        init_vals = [ig(scalar_index(o.shape)) for ig, o in inits]
        if k == 1 and et.is_float and not et.is_complex:
            # XLA:CPU's reduce-window kernel reads its init from a buffer, so LLVM cannot fold the first step
            # (1 * x of a cumprod: a denormal x flushes to 0 under DAZ); a constant init here would fold.
            # (through the compute type: bf16 values are i16 here, and a fence takes floats only)
            fenced = em.ops.call_intrinsic("arithmetic.fence", em.ops.to_compute(et, init_vals[0]))
            init_vals = [em.ops.from_compute(et, fenced)]
        acc = _Accumulator(em, [v.type for v in init_vals], init_vals)
        wshape = Shape(T.S32, tuple(w.size for w in window))
        blend_step = False

        def body(wvals):
            valid = ir.Constant(t.I1, 1)
            idx = []
            for d, w in enumerate(window):
                p = b.mul(od[d], t.i64(w.stride)) if w.stride != 1 else od[d]
                wi = wvals[d] if w.window_dilation == 1 else b.mul(wvals[d], t.i64(w.window_dilation))
                p = b.add(p, wi)
                if w.padding_low:
                    p = b.sub(p, t.i64(w.padding_low))
                if w.base_dilation != 1:
                    valid = b.and_(valid, b.icmp_signed(">=", p, t.i64(0)))
                    valid = b.and_(valid, b.icmp_signed("==", b.srem(p, t.i64(w.base_dilation)), t.i64(0)))
                    p = b.sdiv(p, t.i64(w.base_dilation))
                valid = b.and_(valid, b.icmp_unsigned("<", p, t.i64(in_shape.dimensions[d])))
                idx.append(p)
            with if_then(em.kctx, valid):
                fi = Index(idx, in_shape)
                if blend_step or kept_rows or kept_point:   # a compare and a blend (kept bits)
                    new = em.ops.minmax_keeping_bits(O.MAXIMUM, et, acc.get()[0], inputs[0](fi))
                else:
                    new = em.call(comp, acc.get() + [x(fi) for x in inputs])
                acc.set(list(new) if isinstance(new, tuple) else [new])
        if wshape.num_elements:
            peel = window_peel_dimension(window, in_shape.dimensions, instr.shape.dimensions)
            if peel is None:
                _reduce_loops(em, wshape, set(range(len(window))), body, prefix="w")
            else:   # the window's positions before its last one in dimension ``peel``, then that last one
                last = window[peel].size - 1
                head = Shape(T.S32, tuple(last if d == peel else w.size for d, w in enumerate(window)))
                _reduce_loops(em, head, set(range(len(window))), body, prefix="w")
                if kept_channels:   # the head's x86 max flushes; the peeled step blends
                    acc.set([em.ops.flush_denormal(et, acc.get()[0])])
                    blend_step = True
                _reduce_loops(em, wshape, set(range(len(window))), body, prefix="w", starts={peel: last})
                blend_step = False
        res = acc.get()
        if flush and kept_below:   # the leading outputs along one dimension keep their bits
            kept = b.icmp_signed("<", od[kept_below[0]], t.i64(kept_below[1]))
            res = [b.select(kept, res[0], em.ops.flush_denormal(et, res[0]))]
        elif flush:
            res = [em.ops.flush_denormal(et, res[0])]
        return res[0] if k == 1 else tuple(res)
    return g


def _window_lanes(em, instr) -> tuple[int, int, int, int, int] | None:
    """(row dim, column dim, lanes, leading rows, leading columns) of a float sum reduce-window that TF's XLA
    computes in vector lanes or out of window order, else None (in window order). XLA:CPU's reduce-window kernel
    is a loop nest over the window like a reduce's (``row_lanes``): LLVM fully unrolls the window's minor loop
    and vectorises the next one out, so a window of [R, C] positions (its other dims 1) sums its rows in
    ``row_lanes(..., per_element=True)`` lanes; an f64 [2, 2] avg_pool is ``(init + x00 + x01) + (x10 + x11)``
    (fuzz seed 185001291: max - max - max overflows there).

    A window padded (high only) in one of the two dims: the leading rows and columns in bounds for every output
    (``_leading_in_bounds``) form a block [R', C'] summed so (in order where ``row_lanes`` gives 0), then the
    window's other positions in row-major order, each if in bounds (the conditional steps leave LLVM's vector
    loop). Measured on AVX2 for avg_pool (f32, f64; windows 2-5 by 2-5, strides 2 and 3, 270 shapes padded in
    one dim); padded in both dims, or low, a window stays in order, as do dilated windows and other targets
    (unmeasured) and products over 2-D windows (not measured)."""
    if len(instr.operands) != 2 or simple_reducer(instr.to_apply) is not O.ADD:
        return None
    et = instr.shape.element_type
    window = instr.window.dimensions
    if et not in (T.F32, T.F64) or any(w.window_dilation != 1 or w.base_dilation != 1 for w in window):
        return None
    in_shape = instr.operands[0].shape
    dims = [d for d in major_to_minor(in_shape) if window[d].size != 1]
    padded = [d for d, w in enumerate(window) if w.padding_low or w.padding_high]
    if len(dims) != 2 or len(padded) > 1 or padded and (padded[0] not in dims or window[padded[0]].padding_low):
        return None   # (padded low, no offset is in bounds for the first output: in order)
    rdim, cdim = dims
    target = host_target(em.kctx.options)
    if target != AVX2:
        # measured on AVX2 only; TF's AVX-512 code sums these windows in window order (Zen 4: avg_pool2d of
        # [2, 4-8, 4-8, 3], windows 2-4, strides 1-2, VALID/SAME, f32/f64: 0 of 216 differ in order, 78 in lanes)
        return None
    rows, cols = (_leading_in_bounds(window[d], in_shape.dimensions[d], instr.shape.dimensions[d])
                  for d in (rdim, cdim))
    lanes = row_lanes(et, rows, cols, target, per_element=True)
    if not lanes and (not padded or rows < 2 or cols == window[cdim].size):
        return None   # in window order anyway
    return rdim, cdim, lanes, rows, cols


def _leading_in_bounds(w, n: int, outputs: int) -> int:
    """How many leading window offsets along one dim read in bounds for every one of ``outputs`` positions."""
    k = 0
    while k < w.size and all(0 <= o * w.stride + k - w.padding_low < n for o in range(outputs)):
        k += 1
    return k


def _window_lane_generator(em, instr, x, init_gen, lanes: tuple[int, int, int, int, int]):
    """``_reduce_window``'s generator in ``_window_lanes``' order (``_row_lane_fold`` over the leading block,
    then the window's other positions in row-major order where in bounds)."""
    rdim, cdim, n, rows, cols = lanes
    et = instr.shape.element_type
    op = simple_reducer(instr.to_apply)
    window = instr.window.dimensions
    in_shape = instr.operands[0].shape
    cty = t.compute_float_type(et)
    b = em.b

    def g(index):
        od = index.get_dims(b)
        # (the init read from a buffer, as _reduce_window's)
        init = em.ops.call_intrinsic("arithmetic.fence", em.ops.to_compute(et, init_gen(scalar_index(instr.operands[1].shape))))

        def full_index(rc):   # (a padded dim pads high only: offsets count from the window's first position)
            idx = []
            for d, w in enumerate(window):
                p = b.mul(od[d], t.i64(w.stride)) if w.stride != 1 else od[d]
                idx.append(b.add(p, rc[d]) if d in rc else p)
            return Index(idx, in_shape)

        def load(fi):
            return em.ops.to_compute(et, x(fi))
        if n:
            res = _row_lane_fold(em, op, et, cty, init, load, full_index, in_shape, (), rdim, cdim, rows, cols, n,
                                 looped=True)
        else:
            res = init
            for r in range(rows):
                for c in range(cols):
                    res = _simple_combine(em, op, et, res, load(full_index({rdim: t.i64(r), cdim: t.i64(c)})), False)
        acc = _Accumulator(em, [cty], [res])
        for r in range(window[rdim].size):
            for c in range(window[cdim].size):
                if r < rows and c < cols:
                    continue
                fi = full_index({rdim: t.i64(r), cdim: t.i64(c)})
                dims = fi.get_dims(b)
                ok = b.and_(b.icmp_unsigned("<", dims[rdim], t.i64(in_shape.dimensions[rdim])),
                            b.icmp_unsigned("<", dims[cdim], t.i64(in_shape.dimensions[cdim])))
                with if_then(em.kctx, ok):
                    acc.set([_simple_combine(em, op, et, acc.get()[0], load(fi), False)])
        return em.ops.from_compute(et, acc.get()[0])
    return g


# ---------------------------------------------------------------- contractions (loop forms)
def _accumulate_type(et: T):
    if et.is_complex:
        return t.value_type(et)
    if et.is_float:
        return t.compute_float_type(et)
    return t.I64


def _to_acc(em, from_et: T, out_et: T, v):
    """Operand value → result type (as the evaluator converts first) → accumulation type."""
    v = em.ops.convert(from_et, out_et, v)
    if out_et.is_complex:
        return v
    if out_et.is_float:
        return em.ops.to_compute(out_et, v)
    if out_et is T.PRED:
        return em.b.zext(v, t.I64)
    return em.ops.convert(out_et, T.S64 if out_et.is_signed_int else T.U64, v)


def _from_acc(em, out_et: T, acc):
    if out_et.is_complex:
        return acc
    if out_et.is_float:
        return em.ops.from_compute(out_et, acc)
    if out_et is T.PRED:
        return em.b.icmp_unsigned("!=", acc, t.i64(0))
    return em.b.trunc(acc, t.value_type(out_et)) if out_et.bit_width < 64 else acc


def _mac(em, out_et, acc, a, c, separate: bool = False, chain: bool = False):
    """acc + a·c; ``separate``: rounded product, then the add, in order (dot_exact.eigen_dot); ``chain``: one
    FMA (``_dot_fma_chain``)."""
    b = em.b
    if out_et.is_complex:   # XLA's complex multiply and add, in the loop order
        return em.ops.binary(O.ADD, out_et, acc, em.ops.binary(O.MULTIPLY, out_et, a, c))
    if out_et.is_float:
        flags = em.kctx.options.reduction_flags
        if chain:
            return em.ops.mul_add(a, c, acc)
        if separate:
            flags = tuple(f for f in flags if f not in ("contract", "reassoc")) if not em.kctx.options.fast_math \
                else flags
        return b.fadd(acc, b.fmul(a, c, flags=flags), flags=flags)
    return b.add(acc, b.mul(a, c))


def _dot_fma_chain(em, instr) -> bool:
    """Whether TF's XLA sums the float dot ``instr`` (no library form: ``dot_exact``) as one FMA chain from +0 in k
    order, emitted here as explicit FMAs: LLVM's SLP vectorizer would otherwise pair our products into vector
    multiplies, rounded apart (a K = 5 f32 vector dot product max·(-87) + max·(-1.17): TF inf, ours was NaN;
    fuzz seed 226001188). A dot inside a fusion (XLA's elemental emitter: a vector · vector dot, a batch of one)
    on every target; a standalone one on AVX2 (XLA's DotOpEmitter) of K ≤ 2, or a matrix · column (N = 1, M ≥ 2)
    shorter than a vector register (K < 8 f32, < 4 f64), on AVX-512 XLA's naive loop (but for the products
    ``_naive_rounded`` rounds; other layouts: K ≤ 3 with N ≤ 2 or N ≥ 9, f64 N = 4 too, and M ≥ 2); its other
    small sums: ``_loop_dot_form`` (measured
    with the probes of ``dot_exact``, B 0-3, M and N 1-3, K 2-9, 11, 16, 17, f32 and f64)."""
    et = instr.shape.element_type
    if et not in (T.F32, T.F64) or em.kctx.options.fast_math:
        return False   # (``ops.mul_add`` rounds twice on a target without FMA, as XLA's backend does)
    if _in_fusion(instr):
        return True   # XLA's elemental emitter: fmul and fadd per k, contracted by its backend
    d = dot_dims(instr)
    if d.B == 1 and d.M == 1 and d.N == 1:
        return True
    if host_target(em.kctx.options) == AVX512:
        if dot_naive.canonical(instr):
            return True   # XLA's naive loop: one FMA chain but for dot_naive's rounded products (_naive_rounded)
        # other layouts of it, for K ≤ 3 (measured on Zen 4 with tf.matmul, B 1, M 2-40, K 2-3): one FMA chain
        # per output for N ≤ 2, N ≥ 9 and f64 N = 4
        return d.B == 1 and d.M >= 2 and d.K <= 3 and (d.N <= 2 or d.N >= 9 or et is T.F64 and d.N == 4)
    if host_target(em.kctx.options) != AVX2:
        return False
    return d.K <= 2 or d.N == 1 and d.M >= 2 and d.K < (8 if et is T.F32 else 4)


def _naive_rounded(em, instr) -> np.ndarray | None:
    """[M, N, K]: the products TF's XLA adds rounded in its naive loop (``dot_naive``) for a standalone F32/F64
    dot of ``dot_naive.canonical`` form on AVX-512 (fuzz seed 312001589), None when there are none or the dot
    is not that (the AVX2 forms: ``_dot_fma_chain``, ``_loop_dot_form``)."""
    if em.kctx.options.fast_math or _in_fusion(instr) or host_target(em.kctx.options) != AVX512:
        return None
    dims = dot_naive.canonical(instr)
    return None if dims is None else dot_naive.rounded_products(*dims, instr.shape.element_type)


def _in_fusion(instr) -> bool:
    """Whether ``instr`` is inside a fusion computation (XLA emits it elementally) rather than standalone."""
    return instr.parent is not None and instr.parent.is_fusion_computation


# The deepest loop-form dot summed in one of ``_loop_dot_form``'s forms (measured to K = 17; unrolled here).
_LOOP_DOT_FORM_MAX_K = 32


def _loop_dot_form(em, instr) -> str | None:
    """On an AVX2 target, how TF's XLA sums a standalone f32/f64 loop-form dot of K = 3..32 that is not one FMA
    chain (``_dot_fma_chain``), measured with ``dot_exact``'s probes (B 0-3, M, N 1-3, K 2-9, 11, 16, 17, f32 and f64):
    ``"lanes"``, a matrix · column (N = 1, M ≥ 2) of K ≥ 8 (f64: 4): k mod 8 (f64: 4) in vector lanes, each an
    FMA chain, over the first multiple of the lanes, the lanes added, then the tail's own FMA chain from +0
    added; ``"head"``, a batched vector dot (B ≥ 2, M = N = 1): the first 8 products rounded apart
    and added, the rest one FMA chain; ``"row2"``, a row (M = 1) times two columns: the
    first column ``"head"``, the second one FMA chain (three or more columns: one chain each). The order in
    which rounded products and lanes are added was not measured (only which products fuse and which meet
    apart: the probes' infinities and NaNs); None elsewhere."""
    et = instr.shape.element_type
    if et not in (T.F32, T.F64) or em.kctx.options.fast_math or host_target(em.kctx.options) != AVX2 or \
            _in_fusion(instr):
        return None
    d = dot_dims(instr)
    if not 3 <= d.K <= _LOOP_DOT_FORM_MAX_K:
        return None
    if d.N == 1 and d.M >= 2 and d.K >= (8 if et is T.F32 else 4):
        return "lanes"
    if d.M == 1 and d.N == 1 and d.B >= 2:
        return "head"
    if d.M == 1 and d.N == 2:
        return "row2"
    return None


def _emit_loop_dot_form(em, form: str, et: T, K: int, product):
    """The sum over k < K of ``product(k)`` (a Python int k to the factors (x, y)) in ``form``
    (``_loop_dot_form``; ``"chain"``: one FMA chain)."""
    b = em.b
    zero = t.float_constant(t.storage_type(et), 0.0)

    def rounded(acc, k):
        return b.fadd(acc, b.fmul(*product(k)))

    def fused(acc, k):
        return em.ops.mul_add(*product(k), acc)
    if form == "lanes":
        width = 8 if et is T.F32 else 4
        main = K - K % width
        lanes = [zero] * width
        for k in range(main):
            lanes[k % width] = fused(lanes[k % width], k)
        while len(lanes) > 1:   # a vector reduction's halving tree
            half = len(lanes) // 2
            lanes = [b.fadd(lanes[j], lanes[j + half]) for j in range(half)]
        if main == K:
            return lanes[0]
        tail = zero
        for k in range(main, K):
            tail = fused(tail, k)
        return b.fadd(lanes[0], tail)
    acc = zero
    for k in range(K):
        acc = rounded(acc, k) if form == "head" and k < 8 else fused(acc, k)
    return acc


@generates(O.DOT)
def _dot(em, instr):
    lhs, rhs = instr.operands
    lg, rg = em.gen(lhs), em.gen(rhs)
    dn = instr.dot_dimension_numbers
    lb, lc = list(dn.lhs_batch_dimensions), list(dn.lhs_contracting_dimensions)
    rb, rc = list(dn.rhs_batch_dimensions), list(dn.rhs_contracting_dimensions)
    lf = [d for d in range(lhs.shape.rank) if d not in lb + lc]
    rf = [d for d in range(rhs.shape.rank) if d not in rb + rc]
    out_et = instr.shape.element_type
    let, ret_ = lhs.shape.element_type, rhs.shape.element_type
    acc_ty = _accumulate_type(out_et)
    kshape = Shape(T.S32, tuple(lhs.shape.dimensions[d] for d in lc))
    separate = eigen_dot(instr)
    forms = sum_form(instr)
    naive = None if separate or forms else _naive_rounded(em, instr)
    chain = not separate and (naive is not None or _dot_fma_chain(em, instr))
    loop_form = None if separate or chain or forms else _loop_dot_form(em, instr)
    b = em.b

    def g(index):
        od = index.get_dims(b)
        nb, nl = len(lb), len(lf)
        zero = complex_ops.zero(out_et) if out_et.is_complex else \
            t.float_constant(acc_ty, 0.0) if out_et.is_float else t.i64(0)

        def operands(kv):
            li, ri = [None] * lhs.shape.rank, [None] * rhs.shape.rank
            for i, d in enumerate(lb):
                li[d] = od[i]
            for i, d in enumerate(rb):
                ri[d] = od[i]
            for i, d in enumerate(lf):
                li[d] = od[nb + i]
            for i, d in enumerate(rf):
                ri[d] = od[nb + nl + i]
            for i, (dl, dr) in enumerate(zip(lc, rc)):
                li[dl] = ri[dr] = kv[i]
            return (_to_acc(em, let, out_et, lg(Index(li, lhs.shape))),
                    _to_acc(em, ret_, out_et, rg(Index(ri, rhs.shape))))
        if separate and not em.kctx.options.fast_math:   # Eigen's order (dot_exact.emit_eigen_sum)
            d = dot_dims(instr)
            m = linearize(b, od[nb:nb + nl], Shape(T.S32, tuple(lhs.shape.dimensions[x] for x in lf)))
            n = linearize(b, od[nb + nl:], Shape(T.S32, tuple(rhs.shape.dimensions[x] for x in rf)))
            return emit_eigen_sum(em.kctx, d.M, d.N, d.K, m, n,
                                  lambda k: b.fmul(*operands(delinearize(b, k, kshape))))
        if loop_form:   # TF's AVX2 loop sums (_loop_dot_form)
            def product(k):
                return operands(delinearize(b, t.i64(k), kshape))
            K = kshape.num_elements
            if loop_form != "row2":
                return _from_acc(em, out_et, _emit_loop_dot_form(em, loop_form, out_et, K, product))
            n = linearize(b, od[nb + nl:], Shape(T.S32, tuple(rhs.shape.dimensions[x] for x in rf)))
            head = _emit_loop_dot_form(em, "head", out_et, K, product)
            chain_sum = _emit_loop_dot_form(em, "chain", out_et, K, product)
            return _from_acc(em, out_et, b.select(b.icmp_unsigned("==", n, t.i64(0)), head, chain_sum))
        if forms and not em.kctx.options.fast_math:   # TF's AVX2 library order (dot_exact.sum_form)
            d = dot_dims(instr)
            m = linearize(b, od[nb:nb + nl], Shape(T.S32, tuple(lhs.shape.dimensions[x] for x in lf)))
            return _from_acc(em, out_et, emit_form_sum(em.kctx, forms, d.K, d.M, m,
                                                       lambda k: operands(delinearize(b, k, kshape))))
        acc = _Accumulator(em, [acc_ty], [zero])
        if naive is not None:   # XLA's naive loop: the products LLVM leaves unfused added rounded (dot_naive)
            rounded = flag_table(em.kctx.mctx, naive, "rounded_" + instr.name)
            n_dim = naive.shape[1] * naive.shape[2]
            base = b.add(b.mul(od[0], t.i64(n_dim)), b.mul(od[1], t.i64(naive.shape[2])))

        def body(kv):
            if naive is None:
                return acc.set([_mac(em, out_et, acc.get()[0], *operands(kv), separate, chain)])
            a, c = operands(kv)
            s = acc.get()[0]
            flag = b.load(b.gep(rounded, [t.i64(0), b.add(base, kv[0])], inbounds=True), typ=t.I8)
            acc.set([b.select(b.icmp_unsigned("!=", flag, ir.Constant(t.I8, 0)),
                              b.fadd(s, b.fmul(a, c, flags=()), flags=()), em.ops.mul_add(a, c, s))])
        if kshape.num_elements:
            _reduce_loops(em, kshape, set(range(len(lc))), body, prefix="k")
        res = _from_acc(em, out_et, acc.get()[0])
        return complex_ops.scale_by_one(em.ops, out_et, res) if eigen_gemm else res
    # XLA:CPU runs complex matrix-matrix dots (both free sizes > 1) on Eigen's GEMM, which scales the sum
    # by alpha = 1 + 0i (an infinite part becomes NaN); matrix-vector and vector dots are loops as here.
    eigen_gemm = out_et.is_complex and prod(lhs.shape.dimensions[d] for d in lf) > 1 \
        and prod(rhs.shape.dimensions[d] for d in rf) > 1
    return g


@generates(O.CONVOLUTION)
def _convolution(em, instr):
    lhs, rhs = instr.operands
    lg, rg = em.gen(lhs), em.gen(rhs)
    dn, window = instr.convolution_dimension_numbers, instr.window.dimensions
    out_et = instr.shape.element_type
    acc_ty = _accumulate_type(out_et)
    let, ret_ = lhs.shape.element_type, rhs.shape.element_type
    kin = rhs.shape.dimensions[dn.kernel_input_feature_dimension]
    in_sp = [lhs.shape.dimensions[d] for d in dn.input_spatial_dimensions]
    b = em.b

    def g(index):
        od = index.get_dims(b)
        o, sp, n_in, c_base = group_origin(b, instr, lhs.shape, od)
        zero = complex_ops.zero(out_et) if out_et.is_complex else \
            t.float_constant(acc_ty, 0.0) if out_et.is_float else t.i64(0)
        acc = _Accumulator(em, [acc_ty], [zero])
        loop_shape = Shape(T.S32, (kin,) + tuple(w.size for w in window))

        def body(v):
            c = v[0]
            valid = ir.Constant(t.I1, 1)
            li, ri = [None] * lhs.shape.rank, [None] * rhs.shape.rank
            li[dn.input_batch_dimension] = n_in
            li[dn.input_feature_dimension] = b.add(c_base, c)
            ri[dn.kernel_input_feature_dimension] = c
            ri[dn.kernel_output_feature_dimension] = o
            for i, w in enumerate(window):
                wi = v[i + 1]
                p = b.mul(sp[i], t.i64(w.stride)) if w.stride != 1 else sp[i]
                p = b.add(p, b.mul(wi, t.i64(w.window_dilation)) if w.window_dilation != 1 else wi)
                if w.padding_low:
                    p = b.sub(p, t.i64(w.padding_low))
                if w.base_dilation != 1:
                    valid = b.and_(valid, b.icmp_signed(">=", p, t.i64(0)))
                    valid = b.and_(valid, b.icmp_signed("==", b.srem(p, t.i64(w.base_dilation)), t.i64(0)))
                    p = b.sdiv(p, t.i64(w.base_dilation))
                valid = b.and_(valid, b.icmp_unsigned("<", p, t.i64(in_sp[i])))
                li[dn.input_spatial_dimensions[i]] = p
                ri[dn.kernel_spatial_dimensions[i]] = b.sub(t.i64(w.size - 1), wi) if w.window_reversal else wi
            with if_then(em.kctx, valid):
                a = _to_acc(em, let, out_et, lg(Index(li, lhs.shape)))
                cc = _to_acc(em, ret_, out_et, rg(Index(ri, rhs.shape)))
                acc.set([_mac(em, out_et, acc.get()[0], a, cc)])
        if loop_shape.num_elements:
            _reduce_loops(em, loop_shape, set(range(loop_shape.rank)), body, prefix="c")
        return _from_acc(em, out_et, acc.get()[0])
    return g


# ---------------------------------------------------------------- tuples
@generates(O.TUPLE)
def _tuple(em, instr):
    gens = [em.gen(o) for o in instr.operands]

    def at(index, o):
        if o.shape == index.shape:
            return index
        return Index(index.get_dims(em.b), o.shape)
    return lambda index: tuple(x(at(index, o)) for x, o in zip(gens, instr.operands))


@generates(O.GET_TUPLE_ELEMENT)
def _gte(em, instr):
    x = em.gen(instr.operands[0])
    return lambda index: x(index)[instr.tuple_index]
