"""The HLO opcode table (xla/hlo/ir/hlo_opcode.h) and the opcode property sets.

Every opcode is listed once, with its XLA text name and arity (``VARIADIC`` = -1). Properties that
passes ask about (elementwise? commutative? expensive to duplicate?) are sets next to the enum, so a
pass writes ``op in ELEMENTWISE`` instead of a ladder of comparisons.
"""
from __future__ import annotations

import enum

VARIADIC = -1


class HloOpcode(enum.Enum):
    """An HLO opcode. ``value``/``text`` is XLA's spelling; ``arity`` is -1 for variadic opcodes."""

    arity: int
    # Members are singletons: identity hashing (Enum's own hashes the name in Python, and opcodes are
    # set and dict keys in every pass).
    __hash__ = object.__hash__

    def __new__(cls, text: str, arity: int):
        obj = object.__new__(cls)
        obj._value_ = text
        obj.arity = arity
        return obj

    ABS = ("abs", 1)
    ADD = ("add", 2)
    AFTER_ALL = ("after-all", VARIADIC)
    AND = ("and", 2)
    ATAN2 = ("atan2", 2)
    BITCAST = ("bitcast", 1)
    BITCAST_CONVERT = ("bitcast-convert", 1)
    BROADCAST = ("broadcast", 1)
    CALL = ("call", VARIADIC)
    CBRT = ("cbrt", 1)
    CEIL = ("ceil", 1)
    CLAMP = ("clamp", 3)
    CLZ = ("count-leading-zeros", 1)
    COMPARE = ("compare", 2)
    COMPLEX = ("complex", 2)
    CONCATENATE = ("concatenate", VARIADIC)
    CONDITIONAL = ("conditional", VARIADIC)
    CONSTANT = ("constant", 0)
    CONVERT = ("convert", 1)
    CONVOLUTION = ("convolution", VARIADIC)
    COPY = ("copy", 1)
    COS = ("cosine", 1)
    CUSTOM_CALL = ("custom-call", VARIADIC)
    DIVIDE = ("divide", 2)
    DOT = ("dot", 2)
    DYNAMIC_SLICE = ("dynamic-slice", VARIADIC)
    DYNAMIC_UPDATE_SLICE = ("dynamic-update-slice", VARIADIC)
    ERF = ("erf", 1)
    EXP = ("exponential", 1)
    EXPM1 = ("exponential-minus-one", 1)
    FLOOR = ("floor", 1)
    FUSION = ("fusion", VARIADIC)
    GATHER = ("gather", 2)
    GET_DIMENSION_SIZE = ("get-dimension-size", 1)
    GET_TUPLE_ELEMENT = ("get-tuple-element", 1)
    IMAG = ("imag", 1)
    IOTA = ("iota", 0)
    IS_FINITE = ("is-finite", 1)
    LOG = ("log", 1)
    LOG1P = ("log-plus-one", 1)
    LOGISTIC = ("logistic", 1)
    MAP = ("map", VARIADIC)
    MAXIMUM = ("maximum", 2)
    MINIMUM = ("minimum", 2)
    MULTIPLY = ("multiply", 2)
    NEGATE = ("negate", 1)
    NOT = ("not", 1)
    OPTIMIZATION_BARRIER = ("opt-barrier", 1)
    OR = ("or", 2)
    PAD = ("pad", 2)
    PARAMETER = ("parameter", 0)
    PARTITION_ID = ("partition-id", 0)
    POPCNT = ("popcnt", 1)
    POWER = ("power", 2)
    REAL = ("real", 1)
    REDUCE = ("reduce", VARIADIC)
    REDUCE_PRECISION = ("reduce-precision", 1)
    REDUCE_WINDOW = ("reduce-window", VARIADIC)
    REMAINDER = ("remainder", 2)
    REPLICA_ID = ("replica-id", 0)
    RESHAPE = ("reshape", 1)
    REVERSE = ("reverse", 1)
    RNG = ("rng", VARIADIC)
    RNG_BIT_GENERATOR = ("rng-bit-generator", 1)
    RNG_GET_AND_UPDATE_STATE = ("rng-get-and-update-state", 0)
    ROUND_NEAREST_AFZ = ("round-nearest-afz", 1)
    ROUND_NEAREST_EVEN = ("round-nearest-even", 1)
    RSQRT = ("rsqrt", 1)
    SCATTER = ("scatter", VARIADIC)
    SELECT = ("select", 3)
    SELECT_AND_SCATTER = ("select-and-scatter", 3)
    SET_DIMENSION_SIZE = ("set-dimension-size", 2)
    SHIFT_LEFT = ("shift-left", 2)
    SHIFT_RIGHT_ARITHMETIC = ("shift-right-arithmetic", 2)
    SHIFT_RIGHT_LOGICAL = ("shift-right-logical", 2)
    SIGN = ("sign", 1)
    SIN = ("sine", 1)
    SLICE = ("slice", 1)
    SORT = ("sort", VARIADIC)
    SQRT = ("sqrt", 1)
    SUBTRACT = ("subtract", 2)
    TAN = ("tan", 1)
    TANH = ("tanh", 1)
    TOPK = ("topk", 1)
    TRANSPOSE = ("transpose", 1)
    TUPLE = ("tuple", VARIADIC)
    WHILE = ("while", 1)
    XOR = ("xor", 2)

    @property
    def text(self) -> str:
        return self.value

    @property
    def is_variadic(self) -> bool:
        return self.arity == VARIADIC

    @classmethod
    def from_text(cls, text: str) -> "HloOpcode":
        """The opcode spelled ``text``; raises ``ValueError`` for unknown names."""
        return cls(text)

    def __str__(self) -> str:
        return self.value


O = HloOpcode

ELEMENTWISE_UNARY = frozenset({
    O.ABS, O.CBRT, O.CEIL, O.CLZ, O.COPY, O.COS, O.ERF, O.EXP, O.EXPM1, O.FLOOR, O.IMAG, O.IS_FINITE,
    O.LOG, O.LOG1P, O.LOGISTIC, O.NEGATE, O.NOT, O.POPCNT, O.REAL, O.ROUND_NEAREST_AFZ,
    O.ROUND_NEAREST_EVEN, O.RSQRT, O.SIGN, O.SIN, O.SQRT, O.TAN, O.TANH,
})

ELEMENTWISE_BINARY = frozenset({
    O.ADD, O.AND, O.ATAN2, O.COMPARE, O.COMPLEX, O.DIVIDE, O.MAXIMUM, O.MINIMUM, O.MULTIPLY, O.OR,
    O.POWER, O.REMAINDER, O.SHIFT_LEFT, O.SHIFT_RIGHT_ARITHMETIC, O.SHIFT_RIGHT_LOGICAL, O.SUBTRACT,
    O.XOR,
})

# XLA's HloInstruction::IsElementwise (bitcast-convert only when bit widths match; see ir).
ELEMENTWISE = ELEMENTWISE_UNARY | ELEMENTWISE_BINARY | frozenset({
    O.CLAMP, O.CONVERT, O.MAP, O.REDUCE_PRECISION, O.SELECT,
})

# Unary ops whose result element type is the operand's (others: is-finite -> pred, real/imag -> real).
SAME_TYPE_UNARY = ELEMENTWISE_UNARY - {O.IS_FINITE, O.REAL, O.IMAG}

# Binary ops whose operands must be integral or pred (bitwise) / integral (shifts).
BITWISE_BINARY = frozenset({O.AND, O.OR, O.XOR})
SHIFTS = frozenset({O.SHIFT_LEFT, O.SHIFT_RIGHT_ARITHMETIC, O.SHIFT_RIGHT_LOGICAL})

# HloOpcodeIsBinaryCommutative.
COMMUTATIVE = frozenset({O.ADD, O.MULTIPLY, O.MAXIMUM, O.MINIMUM, O.AND, O.OR, O.XOR})

# HloInstruction::HasSideEffectNoRecurse (custom-call only with custom_call_has_side_effect).
SIDE_EFFECTING = frozenset({O.RNG, O.RNG_GET_AND_UPDATE_STATE, O.AFTER_ALL})

# Opcodes that call other computations (XLA's called_computations()).
CALLS_COMPUTATIONS = frozenset({
    O.CALL, O.CONDITIONAL, O.CUSTOM_CALL, O.FUSION, O.MAP, O.REDUCE, O.REDUCE_WINDOW, O.SCATTER,
    O.SELECT_AND_SCATTER, O.SORT, O.WHILE,
})

# Ops with no data movement beyond their operands' buffers (layout-preserving views in XLA:CPU).
SHAPE_ONLY = frozenset({O.BITCAST, O.RESHAPE, O.GET_TUPLE_ELEMENT, O.TUPLE})

# InstructionFusion::IsExpensive (xla/service/instruction_fusion.cc), split into the always-expensive
# opcodes and the ones that are cheap for real types but expensive for complex; divide and remainder
# are expensive unless integral by a constant (handled in ``is_expensive``).
EXPENSIVE = frozenset({
    O.AFTER_ALL, O.ATAN2, O.CALL, O.CONDITIONAL, O.CONVOLUTION, O.CUSTOM_CALL, O.DOT, O.ERF, O.EXP,
    O.EXPM1, O.FUSION, O.GATHER, O.LOG, O.LOG1P, O.LOGISTIC, O.MAP, O.PARAMETER, O.POWER, O.REDUCE,
    O.REDUCE_WINDOW, O.RNG, O.RNG_BIT_GENERATOR, O.RNG_GET_AND_UPDATE_STATE, O.RSQRT, O.SCATTER, O.SELECT_AND_SCATTER, O.SORT, O.TOPK,
    O.SQRT, O.CBRT, O.TANH, O.WHILE, O.GET_DIMENSION_SIZE, O.SET_DIMENSION_SIZE,
})
EXPENSIVE_IF_COMPLEX = frozenset({O.ABS, O.COS, O.SIGN, O.SIN, O.TAN})


def is_expensive(instr) -> bool:
    """XLA's ``InstructionFusion::IsExpensive`` for an ``HloInstruction``.

    Integer divide/remainder by a constant (or broadcast constant) is cheap because LLVM turns it into
    multiplies and shifts; every other divide/remainder is expensive.
    """
    op = instr.opcode
    if op in EXPENSIVE:
        return True
    if op in EXPENSIVE_IF_COMPLEX:
        return instr.shape.element_type.is_complex
    if op in (O.DIVIDE, O.REMAINDER):
        if not instr.shape.element_type.is_integral:
            return True
        divisor = instr.operands[1]
        if divisor.opcode is O.BROADCAST:
            divisor = divisor.operands[0]
        return not (divisor.opcode is O.CONSTANT and divisor.shape.num_elements == 1)
    return False
