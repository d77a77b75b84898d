"""Cross-checks against real XLA (jaxlib): its parser accepts everything we print and re-prints it
the same, and the evaluator agrees with XLA:CPU. Skipped when jax is not installed.

Known, deliberate differences from XLA:CPU (the evaluator follows HloEvaluator, the reference):
- XLA:CPU flushes denormals to zero; the evaluator does not (inputs here avoid denormals);
- XLA:CPU's maximum/minimum use "fast min/max" (NaN not propagated, -0/+0 ties differ);
- XLA:CPU's integer power only looks at the low 6 exponent bits and treats (-1)^-n specially;
- XLA:CPU computes exp/log/tanh/... with its own approximations (compared with a tolerance);
- XLA's lexer reads the literal ``-0`` as the integer 0, so ``-0.0`` constants lose their sign there.
"""
import itertools
import pathlib
import re

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("jax")

from tests.hlo.hlo_corpus import MODULES  # noqa: E402
from tests.hlo.xla_oracle import xla_reprint, xla_run  # noqa: E402

from tfxla_cluster.hlo.evaluator import evaluate  # noqa: E402
from tfxla_cluster.hlo.opcode import HloOpcode as O  # noqa: E402
from tfxla_cluster.hlo.parser import parse_module  # noqa: E402
from tfxla_cluster.hlo.verifier import verify_module  # noqa: E402

TF_DIR = pathlib.Path(__file__).parent / "data" / "tf"
_NEG_ZERO = re.compile(r"(?<![\w.])-0(?![\w.])")


def _lines(text: str) -> set[str]:
    return {_NEG_ZERO.sub("0", line.strip()) for line in text.splitlines() if line.strip()}


def _assert_xla_reprints_identically(text: str) -> None:
    ours = parse_module(text).to_string()
    theirs = xla_reprint(ours)
    assert _lines(ours) == _lines(theirs)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_xla_parses_and_reprints_corpus(name):
    _assert_xla_reprints_identically(MODULES[name])


@pytest.mark.parametrize("path", sorted(TF_DIR.glob("*.txt")), ids=lambda p: p.name)
def test_xla_parses_and_reprints_our_print_of_tf_dumps(path):
    _assert_xla_reprints_identically(path.read_text(encoding="utf-8"))


# ---------------------------------------------------------------- evaluator vs XLA:CPU
FLOATS = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
INTS = {"s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64, "u8": np.uint8, "u32": np.uint32,
        "u64": np.uint64}
APPROXIMATE = {O.EXP, O.EXPM1, O.LOG, O.LOG1P, O.RSQRT, O.CBRT, O.SIN, O.COS, O.TAN, O.TANH, O.LOGISTIC, O.ERF,
               O.POWER, O.ATAN2}
FLOAT_UNARY = [O.ABS, O.NEGATE, O.SIGN, O.SQRT, O.FLOOR, O.CEIL, O.ROUND_NEAREST_AFZ, O.ROUND_NEAREST_EVEN,
               O.IS_FINITE, O.COPY, O.EXP, O.EXPM1, O.LOG, O.LOG1P, O.RSQRT, O.CBRT, O.SIN, O.COS, O.TAN, O.TANH,
               O.LOGISTIC, O.ERF]
FLOAT_BINARY = [O.ADD, O.SUBTRACT, O.MULTIPLY, O.DIVIDE, O.REMAINDER, O.MAXIMUM, O.MINIMUM, O.POWER, O.ATAN2]
INT_UNARY = [O.NEGATE, O.NOT, O.POPCNT, O.CLZ, O.COPY]
INT_BINARY = [O.ADD, O.SUBTRACT, O.MULTIPLY, O.DIVIDE, O.REMAINDER, O.MAXIMUM, O.MINIMUM, O.AND, O.OR, O.XOR,
              O.SHIFT_LEFT, O.SHIFT_RIGHT_ARITHMETIC, O.SHIFT_RIGHT_LOGICAL]


def _values(ty: str) -> np.ndarray:
    if ty in FLOATS:
        v = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 2.5, 0.49999997, 3.0, -7.25, 1e-3, 100.0, -100.0, 1e30,
             -1e30, np.inf, -np.inf, np.nan, 2.0 ** 31, -(2.0 ** 31), 3e9, 65504.0, 70000.0]
        with np.errstate(over="ignore"):
            return np.array(v, np.float64).astype(np.float32).astype(FLOATS[ty])
    info = np.iinfo(INTS[ty])
    v = [0, 1, -1, 2, -2, 3, -7, 31, 32, 33, 63, 64, 100, info.min, info.max, info.min + 1, info.max - 1]
    return np.array([x for x in v if info.min <= x <= info.max], INTS[ty])


def _module(ty: str, n: int, lines: list[tuple[str, str]]) -> str:
    """Entry (a, b: ty[n]) returning a tuple of the given (result type, expression) lines."""
    body = [f"  %a = {ty}[{n}]{{0}} parameter(0)", f"  %b = {ty}[{n}]{{0}} parameter(1)"]
    names = []
    for k, (rtype, expr) in enumerate(lines):
        body.append(f"  %r{k} = {rtype}[{n}]{{0}} {expr}")
        names.append(f"%r{k}")
    shapes = ", ".join(f"{rt}[{n}]{{0}}" for rt, _ in lines)
    body.append(f"  ROOT %out = ({shapes}) tuple({', '.join(names)})")
    sig = ", ".join(f"{rt}[{n}]" for rt, _ in lines)
    return f"HloModule ew_{ty}\n\nENTRY %main (a: {ty}[{n}], b: {ty}[{n}]) -> ({sig}) {{\n" + "\n".join(body) + "\n}\n"


def _same(x, y, approximate: bool, mask=None) -> bool:
    if mask is not None:
        x, y = x[mask], y[mask]
    if x.dtype.kind in "iub":
        return np.array_equal(x, y)
    a, b = x.astype(np.float64), y.astype(np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return False
    a, b = np.where(np.isnan(a), 0, a), np.where(np.isnan(b), 0, b)
    if approximate:
        rtol = {np.dtype(np.float64): 1e-14, np.dtype(np.float32): 3e-6}.get(x.dtype, 1e-2)
        return np.allclose(a, b, rtol=rtol, atol=1e-30)
    return np.array_equal(a, b) and np.array_equal(np.signbit(a), np.signbit(b))


@pytest.mark.parametrize("ty", sorted(FLOATS) + sorted(INTS))
def test_elementwise_agrees_with_xla_cpu(ty):
    v = _values(ty)
    a, b = (np.array(col, dtype=v.dtype) for col in zip(*itertools.product(v, v)))
    n = len(a)
    is_float = ty in FLOATS
    unary, binary = (FLOAT_UNARY, FLOAT_BINARY) if is_float else (INT_UNARY, INT_BINARY)
    if ty != "f32":  # XLA's approximations only need checking once; this keeps compiles short
        unary = [op for op in unary if op not in APPROXIMATE]
        binary = [op for op in binary if op not in APPROXIMATE]
    lines, kinds = [], []
    for op in unary:
        lines.append(("pred" if op is O.IS_FINITE else ty, f"{op.text}(%a)"))
        kinds.append(op)
    for op in binary:
        lines.append((ty, f"{op.text}(%a, %b)"))
        kinds.append(op)
    types = [None, "TOTALORDER"] if is_float else [None]
    for direction, ctype in itertools.product(["EQ", "NE", "LT", "LE", "GT", "GE"], types):
        lines.append(("pred", f"compare(%a, %b), direction={direction}" + (f", type={ctype}" if ctype else "")))
        kinds.append(O.COMPARE)
    for dst in sorted(FLOATS) + sorted(INTS) + ["pred"]:
        if dst != ty:
            lines.append((dst, "convert(%a)"))
            kinds.append(O.CONVERT)
    text = _module(ty, n, lines)
    theirs = xla_run(text, a, b)
    ours = evaluate(parse_module(text), a, b)
    a64 = a.astype(np.float64) if is_float else None
    b64 = b.astype(np.float64) if is_float else None
    mismatches = []
    for k, (op, x, y) in enumerate(zip(kinds, theirs, ours)):
        mask = None
        if op in (O.MAXIMUM, O.MINIMUM) and is_float:
            mask = ~(np.isnan(a64) | np.isnan(b64) | ((a64 == 0) & (b64 == 0)))
        if not _same(x, y, op in APPROXIMATE, mask):
            mismatches.append(lines[k][1])
    assert not mismatches, mismatches


def test_integer_power_agrees_for_small_exponents():
    base = np.array([-3, -1, 0, 1, 2, 7, 2 ** 31 - 1], np.int32)
    exps = np.arange(0, 40, dtype=np.int32)
    a, b = (np.array(c, np.int32) for c in zip(*itertools.product(base, exps)))
    text = _module("s32", len(a), [("s32", "power(%a, %b)")])
    np.testing.assert_array_equal(xla_run(text, a, b)[0], evaluate(parse_module(text), a, b)[0])


STRUCTURED = r"""HloModule structured

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

%max (x.1: f32[], y.1: f32[]) -> f32[] {
  %x.1 = f32[] parameter(0)
  %y.1 = f32[] parameter(1)
  ROOT %m = f32[] maximum(%x.1, %y.1)
}

%ge (p: f32[], q: f32[]) -> pred[] {
  %p = f32[] parameter(0)
  %q = f32[] parameter(1)
  ROOT %c = pred[] compare(%p, %q), direction=GE
}

%lt (k0: f32[], k1: f32[], v0: s32[], v1: s32[]) -> pred[] {
  %k0 = f32[] parameter(0)
  %k1 = f32[] parameter(1)
  %v0 = s32[] parameter(2)
  %v1 = s32[] parameter(3)
  ROOT %c.1 = pred[] compare(%k0, %k1), direction=LT, type=TOTALORDER
}

ENTRY %main (x: f32[4,6], img: f32[2,7,7,4], ker: f32[3,3,2,6], idx: s32[5,1], s: s32[], st: u64[3], ker2: f32[3,3,5,4]) -> (f32[4,6], f32[5,6], f32[4,6], f32[2,3], f32[4,4], f32[2,3,2,6], f32[4,6], f32[4,6], s32[4,6], f32[4,12], f32[2,3], (u64[3], u32[5,3]), f32[2,6,6,5], f32[4,2,3]) {
  %x = f32[4,6]{1,0} parameter(0)
  %img = f32[2,7,7,4]{3,2,1,0} parameter(1)
  %ker = f32[3,3,2,6]{3,2,1,0} parameter(2)
  %idx = s32[5,1]{1,0} parameter(3)
  %s = s32[] parameter(4)
  %st = u64[3]{0} parameter(5)
  %ker2 = f32[3,3,5,4]{3,2,1,0} parameter(6)
  %zero = f32[] constant(0)
  %ninf = f32[] constant(-inf)
  %cumsum = f32[4,6]{1,0} reduce-window(%x, %zero), window={size=1x6 pad=0_0x5_0}, to_apply=%add
  %gather = f32[5,6]{1,0} gather(%x, %idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,6}
  %scatter = f32[4,6]{1,0} scatter(%x, %idx, %gather), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
  %ds = f32[2,3]{1,0} dynamic-slice(%x, %s, %s), dynamic_slice_sizes={2,3}
  %pad = f32[4,4]{1,0} pad(%ds, %zero), padding=1_-1_2x2_-1_0
  %conv = f32[2,3,2,6]{3,2,1,0} convolution(%img, %ker), window={size=3x3 stride=2x2 pad=1_0x0_1 rhs_dilate=1x2}, dim_labels=b01f_01io->b01f, feature_group_count=2
  %pool = f32[4,6]{1,0} reduce-window(%x, %ninf), window={size=2x3 stride=1x1 pad=1_0x1_1 lhs_dilate=1x1}, to_apply=%max
  %sas = f32[4,6]{1,0} select-and-scatter(%x, %pool, %zero), window={size=2x3 pad=1_0x1_1}, select=%ge, scatter=%add
  %iota = s32[4,6]{1,0} iota(), iota_dimension=1
  %sort = (f32[4,6]{1,0}, s32[4,6]{1,0}) sort(%x, %iota), dimensions={1}, is_stable=true, to_apply=%lt
  %sorted = f32[4,6]{1,0} get-tuple-element(%sort), index=0
  %perm = s32[4,6]{1,0} get-tuple-element(%sort), index=1
  %cat = f32[4,12]{1,0} concatenate(%x, %sorted), dimensions={1}
  %dus = f32[2,3]{1,0} dynamic-update-slice(%ds, %ds, %s, %s)
  %rbg = (u64[3]{0}, u32[5,3]{1,0}) rng-bit-generator(%st), algorithm=rng_philox
  %dconv = f32[2,6,6,5]{3,2,1,0} convolution(%img, %ker2), window={size=3x3 stride=2x2 lhs_dilate=2x2}, dim_labels=b01f_01oi->b01f, feature_group_count=1, batch_group_count=1
  %bcast = f32[4,2,3]{2,1,0} broadcast(%ds), dimensions={1,2}
  ROOT %out = (f32[4,6]{1,0}, f32[5,6]{1,0}, f32[4,6]{1,0}, f32[2,3]{1,0}, f32[4,4]{1,0}, f32[2,3,2,6]{3,2,1,0}, f32[4,6]{1,0}, f32[4,6]{1,0}, s32[4,6]{1,0}, f32[4,12]{1,0}, f32[2,3]{1,0}, (u64[3]{0}, u32[5,3]{1,0}), f32[2,6,6,5]{3,2,1,0}, f32[4,2,3]{2,1,0}) tuple(%cumsum, %gather, %scatter, %ds, %pad, %conv, %pool, %sas, %perm, %cat, %dus, %rbg, %dconv, %bcast)
}
"""


@pytest.mark.parametrize("start", [0, 2, -3, 9])
def test_structured_ops_agree_with_xla_cpu(start):
    rs = np.random.RandomState(start & 0xFF)
    x = rs.randn(4, 6).astype(np.float32)
    x[1, 2] = x[1, 4]  # a tie for the stable sort and select-and-scatter
    args = [x, rs.randn(2, 7, 7, 4).astype(np.float32), rs.randn(3, 3, 2, 6).astype(np.float32),
            np.array([[3], [0], [7], [-2], [3]], np.int32), np.int32(start),
            np.array([5, 2 ** 64 - 2, 1], np.uint64), rs.randn(3, 3, 5, 4).astype(np.float32)]
    module = parse_module(STRUCTURED)
    verify_module(module)
    theirs = xla_run(STRUCTURED, *args)
    ours = evaluate(module, *args)
    flat = []
    for v in ours:
        flat.extend(v if isinstance(v, tuple) else [v])
    assert len(flat) == len(theirs)
    for k, (a, b) in enumerate(zip(theirs, flat)):
        assert a.dtype == b.dtype and a.shape == b.shape, k
        if a.dtype.kind in "iu":
            np.testing.assert_array_equal(a, b, err_msg=f"output {k}")
        else:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=f"output {k}")
