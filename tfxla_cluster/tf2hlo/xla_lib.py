"""XLA client-library helpers the lowerings share (xla/client/lib and tf2xla/lib, in our words).

Stage: lowering helper. Everything takes the builder first and returns ``HloInstruction``s:

* numpy-style broadcasting made explicit (``broadcast_to``: drop the size-1 dims that expand with a
  ``reshape``, then one ``broadcast`` — the ``reshape→broadcast`` chains XlaBuilder emits), and
  binary/compare/select helpers that broadcast their operands and turn Python numbers into scalar
  constants of the other operand's type (XLA's ``ScalarLike``);
* constants: ``scalar``, ``full``, ``zeros_like``, type limits (``min_value``/``max_value`` as
  XLA's ``MinValue``/``MaxValue``: ±inf for floats);
* ``reduce`` with a scalar reducer computation built in the current node scope;
* the composite math functions tf2xla takes from xla/client/lib/math.cc (erfc, acos, asinh, ...),
  computed in f32 for f16/bf16 inputs where XLA's ``DoWithUpcastToF32`` does (asin, acos, asinh, acosh
  and atanh are not upcast: each op rounds to f16/bf16, as TF 2.21's tf2xla emits them). ``erfc``, asin,
  acos, asinh and acosh are TF 2.21's HLO op for op (bit-equal results); the others' numerics are ours:
  accurate to a few ulps of the type, not bit-identical to XLA's polynomials.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence, Union

import ml_dtypes
import numpy as np

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo.ir import HloComputation, HloInstruction
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as P, Shape

Operand = Union[HloInstruction, int, float, bool, np.ndarray]


# ---------------------------------------------------------------- constants
def np_scalar(value, et: P) -> np.ndarray:
    """``value`` as a 0-d array of ``et`` (bools and floats cast as C++ would)."""
    return np.asarray(value).astype(et.dtype)


def scalar(b, value, et: P) -> HloInstruction:
    return b.constant(np_scalar(value, et), et)


def full(b, value, et: P, dims: Sequence[int]) -> HloInstruction:
    """``Broadcast(ConstantR0(value), dims)``; a bare scalar constant for rank 0."""
    c = scalar(b, value, et)
    return b.broadcast(c, tuple(dims), ()) if len(dims) else c


def zeros_like(b, x: HloInstruction) -> HloInstruction:
    return full(b, 0, x.shape.element_type, x.shape.dimensions)


def ones_like(b, x: HloInstruction) -> HloInstruction:
    return full(b, 1, x.shape.element_type, x.shape.dimensions)


def min_value(et: P):
    """XLA's ``MinValue``: -inf for floats, the lowest integer, false."""
    if et.is_float:
        return -np.inf
    if et is P.PRED:
        return False
    return np.iinfo(et.dtype).min


def max_value(et: P):
    if et.is_float:
        return np.inf
    if et is P.PRED:
        return True
    return np.iinfo(et.dtype).max


def min_finite_value(et: P):
    if et.is_float:
        return ml_dtypes.finfo(et.dtype).min
    return min_value(et)


def max_finite_value(et: P):
    if et.is_float:
        return ml_dtypes.finfo(et.dtype).max
    return max_value(et)


def epsilon(et: P) -> float:
    return float(ml_dtypes.finfo(et.dtype).eps)


def sum_accumulation_type(et: P) -> P:
    """``XlaHelpers::SumAccumulationType``: half-precision floats accumulate in f32, 8/16-bit integers
    in 32 bits of their signedness (so a Mean of int8 does not wrap)."""
    if et in (P.F16, P.BF16):
        return P.F32
    if et in (P.S8, P.S16):
        return P.S32
    if et in (P.U8, P.U16):
        return P.U32
    return et


# ---------------------------------------------------------------- shapes and broadcasting
def _dims_text(dims) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def broadcast_shape(a: Sequence[int], c: Sequence[int]) -> tuple[int, ...]:
    """TF's ``BCast`` result shape, with its error for incompatible shapes."""
    a, c = tuple(a), tuple(c)
    n = max(len(a), len(c))
    pa, pc = (1,) * (n - len(a)) + a, (1,) * (n - len(c)) + c
    out = []
    for x, y in zip(pa, pc):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise InvalidArgumentError(f"Incompatible shapes: {_dims_text(a)} vs. {_dims_text(c)}")
    return tuple(out)


def broadcast_to(b, x: HloInstruction, dims: Sequence[int]) -> HloInstruction:
    """``x`` broadcast numpy-style to ``dims`` (xla::BroadcastTo): reshape away the size-1 dims that
    expand, then broadcast the rest right-aligned."""
    dims = tuple(int(d) for d in dims)
    xd = x.shape.dimensions
    if xd == dims:
        return x
    diff = len(dims) - len(xd)
    if diff < 0:
        raise InvalidArgumentError(f"Unable to broadcast tensor of shape {_dims_text(xd)} to tensor of shape "
                                   f"{_dims_text(dims)}")
    kept, kept_sizes = [], []
    for i, d in enumerate(xd):
        j = i + diff
        if d == dims[j]:
            kept.append(j)
            kept_sizes.append(d)
        elif d != 1:
            raise InvalidArgumentError(f"Unable to broadcast tensor of shape {_dims_text(xd)} to tensor of "
                                       f"shape {_dims_text(dims)}")
    if len(kept) != len(xd):
        x = b.reshape(x, kept_sizes)
    return b.broadcast(x, dims, kept)


def _as_hlo(b, v: Operand, like: HloInstruction | None) -> HloInstruction:
    if isinstance(v, HloInstruction):
        return v
    et = like.shape.element_type if like is not None else None
    arr = np.asarray(v)
    if et is None:
        raise InvalidArgumentError("a binary op needs at least one HLO operand")
    if arr.ndim == 0:
        return scalar(b, arr, et)
    return b.constant(arr.astype(et.dtype), et)


def broadcast_pair(b, x: Operand, y: Operand) -> tuple[HloInstruction, HloInstruction]:
    """Both operands as HLO of one shape (scalars of the other's type for Python numbers)."""
    hx = _as_hlo(b, x, y if isinstance(y, HloInstruction) else None)
    hy = _as_hlo(b, y, hx)
    if hx.shape.dimensions != hy.shape.dimensions:
        out = broadcast_shape(hx.shape.dimensions, hy.shape.dimensions)
        hx, hy = broadcast_to(b, hx, out), broadcast_to(b, hy, out)
    return hx, hy


def _binary(opcode: O) -> Callable[..., HloInstruction]:
    def fn(b, x: Operand, y: Operand) -> HloInstruction:
        hx, hy = broadcast_pair(b, x, y)
        return b.binary(opcode, hx, hy)
    fn.__name__ = opcode.text.replace("-", "_")
    fn.__doc__ = f"Broadcasting ``{opcode.text}``."
    return fn


add = _binary(O.ADD)
sub = _binary(O.SUBTRACT)
mul = _binary(O.MULTIPLY)
div = _binary(O.DIVIDE)
rem = _binary(O.REMAINDER)
maximum = _binary(O.MAXIMUM)
minimum = _binary(O.MINIMUM)
pow_ = _binary(O.POWER)
atan2 = _binary(O.ATAN2)
and_ = _binary(O.AND)
or_ = _binary(O.OR)
xor = _binary(O.XOR)


def _compare(direction: str) -> Callable[..., HloInstruction]:
    def fn(b, x: Operand, y: Operand) -> HloInstruction:
        hx, hy = broadcast_pair(b, x, y)
        return b.compare(hx, hy, direction)
    fn.__name__ = direction.lower()
    return fn


eq, ne, lt, le, gt, ge = (_compare(d) for d in ("EQ", "NE", "LT", "LE", "GT", "GE"))


def select(b, pred: HloInstruction, on_true: Operand, on_false: Operand) -> HloInstruction:
    """Broadcasting select; Python numbers take the other branch's type."""
    like = on_true if isinstance(on_true, HloInstruction) else on_false
    t, f = _as_hlo(b, on_true, like), _as_hlo(b, on_false, like)
    dims = broadcast_shape(broadcast_shape(pred.shape.dimensions, t.shape.dimensions), f.shape.dimensions)
    return b.select(broadcast_to(b, pred, dims), broadcast_to(b, t, dims), broadcast_to(b, f, dims))


def convert(b, x: HloInstruction, et: P) -> HloInstruction:
    """``ConvertElementType``, skipped when the type already matches."""
    return x if x.shape.element_type is et else b.convert(x, et)


def neg(b, x):
    return b.negate(x)


def square(b, x):
    return b.multiply(x, x)


# ---------------------------------------------------------------- reductions
def reducer(b, opcode: O, et: P, name: str) -> HloComputation:
    """A scalar ``(x, y) -> opcode(x, y)`` computation, in the current node scope."""
    r = b.sub_builder(name)
    s = Shape.scalar(et)
    x = r.parameter(0, s, "x")
    y = r.parameter(1, s, "y")
    r.binary(opcode, x, y)
    return r.build()


def reduce(b, x: HloInstruction, init, dims: Sequence[int], opcode: O, name: str) -> HloInstruction:
    """``reduce(x, init)`` over ``dims`` with an ``opcode`` reducer named ``name``."""
    et = x.shape.element_type
    init_h = init if isinstance(init, HloInstruction) else scalar(b, init, et)
    return b.reduce(x, init_h, tuple(dims), reducer(b, opcode, et, name))


# ---------------------------------------------------------------- math (xla/client/lib/math.cc)
def upcast_f32(fn: Callable) -> Callable:
    """Run ``fn`` in f32 for f16/bf16 inputs and convert back (XLA's ``DoWithUpcastToF32``)."""
    def wrapped(b, x: HloInstruction, *args) -> HloInstruction:
        et = x.shape.element_type
        if et in (P.F16, P.BF16):
            return b.convert(fn(b, b.convert(x, P.F32), *args), et)
        return fn(b, x, *args)
    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    return wrapped


def is_nan(b, x):
    return b.compare(x, x, "NE")


def is_inf(b, x):
    return eq(b, b.abs(x), np.inf)


def polynomial(b, x, coefficients: Sequence[float]):
    """Horner evaluation, coefficients in decreasing order."""
    p = full(b, coefficients[0], x.shape.element_type, x.shape.dimensions)
    for c in coefficients[1:]:
        p = add(b, b.multiply(p, x), c)
    return p


# Cephes ndtr.c rational approximations of erfc (descending coefficients).
_ERFC_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0,
           4.86371970985681366614e1, 1.96520832956077098242e2, 5.26445194995477358631e2,
           9.34528527171957607540e2, 1.02755188689515710272e3, 5.57535335369399327526e2)
_ERFC_Q = (1.0, 1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
           9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3,
           1.65666309194161350182e3, 5.57535340817727675546e2)
_ERFC_R = (5.64189583547755073984e-1, 1.27536670759978104416e0, 5.01905042251180477414e0,
           6.16021097993053585195e0, 7.40974269950448939160e0, 2.97886665372100240670e0)
_ERFC_S = (1.0, 2.26052863220117276590e0, 9.39603524938001434673e0, 1.20489539808096656605e1,
           1.70814450747565897222e1, 9.60896809063285878198e0, 3.36907645100081516050e0)


# XLA's ErfImpl64 (|x| <= 1): x·T(x²)/U(x²), U monic (descending coefficients).
_ERF_T = (9.60497373987051638749e0, 9.00260197203842689217e1, 2.23200534594684319226e3,
          7.00332514112805075473e3, 5.55923013010394962768e4)
_ERF_U = (1.0, 3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3,
          2.26290000613890934246e4, 4.92673942608635921086e4)
# XLA's f32 erfc (MLIR's chlo ErfcApproximationF32, as TF 2.21's tf2xla emits it): 1 + x·P(x²) for |x| <= 1;
# exp(-x²)·R(1/x²)/(min(|x|, 10.06)·S(1/x²)) beyond, reflected for x < 0 (descending coefficients).
_ERFC32_SMALL = (0.000561802299, -0.00491381669, 0.0267075151, -0.112800106, 0.376122952, -1.12837911)
_ERFC32_R = (0.102081165, 0.429206669, 0.323790789, 0.053971976)
_ERFC32_S = (0.0172516778, 0.391371638, 1.0, 0.621732414, 0.0956628621)


@upcast_f32
def erfc(b, x):
    """TF 2.21's Erfc as tf2xla lowers it, op for op: f64 is 1 - ErfImpl64(x) for |x| <= 1 and Cephes'
    rational forms of exp(-x²)·R(|x|) beyond (exp(-x²) below the smallest normal's log is 0, so erfc(±inf)
    is 0 / 2), reflected for x < 0; f32 (and f16/bf16 in f32) is MLIR's chlo polynomial in x² and 1/x²."""
    ax = b.abs(x)
    if x.shape.element_type is P.F32:
        x2 = b.multiply(x, x)
        e = b.exp(b.negate(x2))
        q = div(b, 1.0, x2)
        r = div(b, polynomial(b, q, _ERFC32_R), b.multiply(minimum(b, ax, 10.06), polynomial(b, q, _ERFC32_S)))
        big = b.multiply(e, r)
        big = select(b, lt(b, x, 0.0), sub(b, 2.0, big), big)
        small = add(b, b.multiply(x, polynomial(b, x2, _ERFC32_SMALL)), 1.0)
        return select(b, gt(b, ax, 1.0), big, small)
    nx2 = b.multiply(b.negate(x), x)
    z = b.exp(nx2)
    near = div(b, b.multiply(z, polynomial(b, ax, _ERFC_P)), polynomial(b, ax, _ERFC_Q))
    far = div(b, b.multiply(z, polynomial(b, ax, _ERFC_R)), polynomial(b, ax, _ERFC_S))
    tail = select(b, lt(b, ax, 8.0), near, far)
    tail = select(b, lt(b, nx2, -7.09782712893383996843e2), 0.0, tail)
    tail = select(b, lt(b, x, 0.0), sub(b, 2.0, tail), tail)
    x2 = b.multiply(x, x)
    small = sub(b, 1.0, div(b, b.multiply(x, polynomial(b, x2, _ERF_T)), polynomial(b, x2, _ERF_U)))
    return select(b, gt(b, ax, 1.0), tail, small)


def acos(b, x):
    """acos(x) = atan2(sqrt((1 - x)(1 + x)), x) (π at -1); f16/bf16 in their own type, each op rounded (TF 2.21's
    tf2xla does not upcast it)."""
    return b.atan2(b.sqrt(b.multiply(sub(b, 1.0, x), add(b, x, 1.0))), x)


def asin(b, x):
    """asin(x) = 2·atan2(x, 1 + sqrt((1 - x)(1 + x))), the doubling as atan2 + atan2; f16/bf16 in their own
    type, each op rounded (TF 2.21's tf2xla does not upcast it)."""
    r = b.atan2(x, add(b, b.sqrt(b.multiply(sub(b, 1.0, x), add(b, x, 1.0))), 1.0))
    return b.add(r, r)


@upcast_f32
def atan(b, x):
    return b.atan2(x, ones_like(b, x))


def acosh(b, x):
    """log1p(sqrt(x-1)·(sqrt(x+1) + sqrt(x-1))), log(x) + log(2) from half the type's max; NaN below 1 (sqrt of a
    negative). f16/bf16 in their own type, each op rounded (TF 2.21's tf2xla does not upcast it)."""
    et = x.shape.element_type
    big = float(ml_dtypes.finfo(et.dtype).max) / 2
    a = b.sqrt(sub(b, x, 1.0))
    direct = b.log1p(b.multiply(a, b.add(b.sqrt(add(b, x, 1.0)), a)))
    return select(b, ge(b, x, big), add(b, b.log(x), math.log(2.0)), direct)


def asinh(b, x):
    """sign(x)·log(|x| + sqrt(x² + 1)), via log1p for small |x| and log(2|x|) for huge |x|; f16/bf16 in their
    own type, each op rounded (TF 2.21's tf2xla does not upcast it)."""
    et = x.shape.element_type
    big = math.sqrt(float(ml_dtypes.finfo(et.dtype).max))
    ax = b.abs(x)
    # log1p(a + a²/(1 + sqrt(1 + a²))) keeps precision near 0.
    small = b.log1p(add(b, ax, div(b, b.multiply(ax, ax), add(b, b.sqrt(add(b, b.multiply(ax, ax), 1.0)), 1.0))))
    huge = add(b, b.log(ax), math.log(2.0))
    r = select(b, ge(b, ax, big), huge, small)
    return b.multiply(b.sign(x), r)


def atanh(b, x):
    """0.5·(log1p(x) - log1p(-x)); NaN outside [-1, 1]."""
    r = mul(b, sub(b, b.log1p(x), b.log1p(b.negate(x))), 0.5)
    return select(b, gt(b, b.abs(x), 1.0), np.nan, r)


@upcast_f32
def cosh(b, x):
    """exp(x - log 2) + exp(-x - log 2), which does not overflow before cosh does; at least 1."""
    log_half = math.log(0.5)
    r = b.add(b.exp(add(b, x, log_half)), b.exp(add(b, b.negate(x), log_half)))
    return maximum(b, r, 1.0)


@upcast_f32
def sinh(b, x):
    """For |x| < 1: (e + e/(e + 1))/2 with e = expm1(x) (exact near 0); else the exp form."""
    log_half = math.log(0.5)
    large = b.subtract(b.exp(add(b, x, log_half)), b.exp(add(b, b.negate(x), log_half)))
    e = b.expm1(x)
    small = mul(b, b.add(e, div(b, e, add(b, e, 1.0))), 0.5)
    return select(b, lt(b, b.abs(x), 1.0), small, large)


def round_to_even(b, x):
    """Banker's rounding (``round-nearest-even``). Like TF 2.21's XLA, integer inputs are rejected."""
    if not x.shape.element_type.is_float:
        raise InvalidArgumentError(f"Operands to RoundToEven must be real-valued floating-point, but got "
                                   f"{x.shape.element_type.value.upper()}")
    return b.round_nearest_even(x)


def softplus(b, x):
    """log(1 + exp(x)) without overflow (tf2xla's Softplus): x above -log(eps)-2, exp(x) below
    log(eps)+2, log1p(exp(x)) in between."""
    et = x.shape.element_type
    # tf2xla builds log(eps) + 2 from constants of the type itself (folded with a rounding after each op, the
    # log of a 16-bit float through f32), so bf16's threshold is -2.84375, not the -2.859375 nearest -2.852
    wide = np.float32 if et in (P.F16, P.BF16) else et.dtype.type
    log_eps = np_scalar(wide(math.log(epsilon(et))), et)
    threshold = float(np_scalar(wide(float(log_eps) + 2.0), et))
    too_large = gt(b, x, -threshold)
    too_small = lt(b, x, threshold)
    ex = b.exp(x)
    return b.select(too_large, x, b.select(too_small, ex, b.log1p(ex)))


# Giles' single-precision erfinv (XLA's ErfInv32), coefficients in Horner order.
_ERFINV_LT5 = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
               -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_GE5 = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
               0.00943887047, 1.00167406, 2.83297682)


# Giles' double-precision erfinv (XLA's ErfInv64), coefficients in Horner order, for w < 6.25 (in w - 3.125),
# w < 16 (in sqrt(w) - 3.25) and beyond (in sqrt(w) - 5).
_ERFINV64_LT625 = (
    -3.6444120640178196996e-21, -1.685059138182016589e-19, 1.2858480715256400167e-18, 1.115787767802518096e-17,
    -1.333171662854620906e-16, 2.0972767875968561637e-17, 6.6376381343583238325e-15, -4.0545662729752068639e-14,
    -8.1519341976054721522e-14, 2.6335093153082322977e-12, -1.2975133253453532498e-11, -5.4154120542946279317e-11,
    1.051212273321532285e-09, -4.1126339803469836976e-09, -2.9070369957882005086e-08, 4.2347877827932403518e-07,
    -1.3654692000834678645e-06, -1.3882523362786468719e-05, 0.0001867342080340571352, -0.00074070253416626697512,
    -0.0060336708714301490533, 0.24015818242558961693, 1.6536545626831027356)
_ERFINV64_LT16 = (
    2.2137376921775787049e-09, 9.0756561938885390979e-08, -2.7517406297064545428e-07, 1.8239629214389227755e-08,
    1.5027403968909827627e-06, -4.013867526981545969e-06, 2.9234449089955446044e-06, 1.2475304481671778723e-05,
    -4.7318229009055733981e-05, 6.8284851459573175448e-05, 2.4031110387097893999e-05, -0.0003550375203628474796,
    0.00095328937973738049703, -0.0016882755560235047313, 0.0024914420961078508066, -0.0037512085075692412107,
    0.005370914553590063617, 1.0052589676941592334, 3.0838856104922207635)
_ERFINV64_GE16 = (
    -2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09, -3.7894654401267369937e-09,
    7.6157012080783393804e-09, -1.4960026627149240478e-08, 2.9147953450901080826e-08, -6.7711997758452339498e-08,
    2.2900482228026654717e-07, -9.9298272942317002539e-07, 4.5260625972231537039e-06, -1.9681778105531670567e-05,
    7.5995277030017761139e-05, -0.00021503011930044477347, -0.00013871931833623122026, 1.0103004648645343977,
    4.8499064014085844221)


def _erfinv64(b, x, w):
    """XLA's f64 erfinv: the three polynomials share the Horner steps of their common (highest) degrees,
    each range's selected coefficient entering at its own step; the longer ones run the extra steps."""
    dims = x.shape.dimensions
    lt625, lt16 = lt(b, w, 6.25), lt(b, w, 16.0)
    u = b.select(lt625, sub(b, w, 3.125), b.subtract(b.sqrt(w), b.select(lt16, full(b, 3.25, P.F64, dims),
                                                                          full(b, 5.0, P.F64, dims))))

    def coefficient(i: int):
        c = full(b, _ERFINV64_LT625[i], P.F64, dims)
        if i < len(_ERFINV64_LT16):
            c = b.select(lt625, c, full(b, _ERFINV64_LT16[i], P.F64, dims))
        if i < len(_ERFINV64_GE16):
            c = b.select(lt16, c, full(b, _ERFINV64_GE16[i], P.F64, dims))
        return c
    p = coefficient(0)
    for i in range(1, len(_ERFINV64_GE16)):
        p = b.add(coefficient(i), b.multiply(p, u))
    for i in range(len(_ERFINV64_GE16), len(_ERFINV64_LT16)):
        p = b.select(lt16, b.add(coefficient(i), b.multiply(p, u)), p)
    for i in range(len(_ERFINV64_LT16), len(_ERFINV64_LT625)):
        p = b.select(lt625, b.add(coefficient(i), b.multiply(p, u)), p)
    return b.multiply(p, x)


@upcast_f32
def erfinv(b, x):
    """w = -log1p(-x²); f32: a degree-8 polynomial in w - 2.5 (w < 5) or sqrt(w) - 3, times x; f64: XLA's
    ErfInv64 (:func:`_erfinv64`); ±1 → ±inf."""
    et = x.shape.element_type
    dims = x.shape.dimensions
    w = b.negate(b.log1p(b.negate(b.multiply(x, x))))
    if et is P.F64:
        return b.select(eq(b, b.abs(x), 1.0), mul(b, x, max_value(et)), _erfinv64(b, x, w))
    small = lt(b, w, 5.0)
    w = b.select(small, sub(b, w, 2.5), sub(b, b.sqrt(w), 3.0))
    p = None
    for c_lt, c_ge in zip(_ERFINV_LT5, _ERFINV_GE5):
        coef = b.select(small, full(b, c_lt, et, dims), full(b, c_ge, et, dims))
        p = coef if p is None else b.add(coef, b.multiply(p, w))
    result = b.multiply(p, x)
    return b.select(eq(b, b.abs(x), 1.0), mul(b, x, max_value(et)), result)


# Lanczos approximation (g = 7, n = 9), as XLA's Lgamma/Digamma (the base coefficient rounds to 1 in f32).
_LANCZOS_G = 7.0
_LANCZOS_BASE = 0.99999999999980993227684700473478
_LANCZOS = (676.520368121885098567009190444019, -1259.13921672240287047156078755283,
            771.3234287776530788486528258894, -176.61502916214059906584551354, 12.507343278686904814458936853,
            -0.13857109526572011689554707, 9.984369578019570859563e-6, 1.50563273514931155834e-7)


def _lanczos_log_t(b, z):
    """log(z + g + 1/2) as log(g + 1/2) + log1p(z / (g + 1/2)) (XLA: a precise log near 1)."""
    return add(b, b.log1p(div(b, z, _LANCZOS_G + 0.5)), math.log(_LANCZOS_G + 0.5))


@upcast_f32
def lgamma(b, x):
    """TF 2.21's Lgamma op for op: Lanczos on z = x - 1 (z = -x with the reflection formula below 0.5),
    ``log_y = ((z + 1/2 - t/log t)·log t + log sqrt(2π)) + log A(z)`` (no overflow of z·log t), the
    reflection's ``log|sin(πx)|`` from the fractional part of |x| folded to [0, 1/2]; ±inf → +inf."""
    et, dims = x.shape.element_type, x.shape.dimensions
    need_reflect = lt(b, x, 0.5)
    z = b.select(need_reflect, b.negate(x), sub(b, x, 1.0))
    acc = add(b, div(b, _LANCZOS[0], add(b, z, 1.0)), _LANCZOS_BASE)
    for i, c in enumerate(_LANCZOS[1:], start=2):
        acc = b.add(acc, div(b, c, add(b, z, float(i))))
    t = add(b, z, _LANCZOS_G + 0.5)
    log_t = _lanczos_log_t(b, z)
    head = b.multiply(b.subtract(add(b, z, 0.5), b.divide(t, log_t)), log_t)
    log_y = b.add(add(b, head, (math.log(2.0) + math.log(math.pi)) / 2), b.log(acc))
    ax = b.abs(x)
    frac = b.subtract(ax, b.floor(ax))
    frac = b.select(lt(b, 0.5, frac), sub(b, 1.0, frac), frac)
    reflection_denom = b.log(b.sin(mul(b, frac, math.pi)))
    reflection = b.select(b.is_finite(reflection_denom),
                          b.subtract(sub(b, math.log(math.pi), reflection_denom), log_y),
                          b.negate(reflection_denom))
    result = b.select(need_reflect, reflection, log_y)
    return b.select(is_inf(b, x), full(b, np.inf, et, dims), result)


@upcast_f32
def digamma(b, x):
    """TF 2.21's Digamma op for op: ``log t + A'(z)/A(z) - g/t`` by Lanczos (each ``z + i + 1`` formed as
    ``(z + i) + 1``), reflection ``ψ(1-x) - π·cos(πr)/sin(πr)`` below 0.5 with ``r = x + |floor(x + 1/2)|``;
    NaN at zero and the negative integers."""
    et, dims = x.shape.element_type, x.shape.dimensions
    at_pole = b.and_(le(b, x, 0.0), eq(b, x, b.floor(x)))
    need_reflect = lt(b, x, 0.5)
    z = b.select(need_reflect, b.negate(x), sub(b, x, 1.0))
    log_t = _lanczos_log_t(b, z)

    def z_plus(i: int):
        return add(b, z, 1.0) if i == 0 else add(b, add(b, z, float(i)), 1.0)
    num = full(b, 0.0, et, dims)
    for i, c in enumerate(_LANCZOS):
        num = b.subtract(num, div(b, c, b.multiply(z_plus(i), z_plus(i))))
    denom = full(b, _LANCZOS_BASE, et, dims)
    for i, c in enumerate(_LANCZOS):
        denom = b.add(denom, div(b, c, z_plus(i)))
    t = add(b, z, _LANCZOS_G + 0.5)
    y = b.subtract(b.add(log_t, b.divide(num, denom)), div(b, _LANCZOS_G, t))
    reduced = b.add(x, b.abs(b.floor(add(b, x, 0.5))))
    cot = b.divide(mul(b, b.cos(mul(b, reduced, math.pi)), math.pi), b.sin(mul(b, reduced, math.pi)))
    result = b.select(need_reflect, b.subtract(y, cot), y)
    return b.select(at_pole, full(b, np.nan, et, dims), result)
