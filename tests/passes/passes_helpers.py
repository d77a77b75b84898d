"""Helpers for the pass tests: a tiny FileCheck, the module corpora, random inputs, value comparison,
and the kernel count used against XLA's optimized HLO."""
from __future__ import annotations

import pathlib
import re

import ml_dtypes
import numpy as np

from tfxla_cluster.hlo.evaluator import evaluate
from tfxla_cluster.hlo.ir import HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.hlo.verifier import verify_module

REPO = pathlib.Path(__file__).resolve().parents[2]
TF_GRAPHS = REPO / "graphs" / "tf"
TF_GOLDENS = REPO / "tests" / "hlo" / "data" / "tf"


# ---------------------------------------------------------------- FileCheck
class FileCheckError(AssertionError):
    pass


def _pattern(text: str) -> re.Pattern:
    """A CHECK pattern: literal text with ``{{regex}}`` pieces."""
    out, pos = [], 0
    for m in re.finditer(r"\{\{(.*?)\}\}", text):
        out.append(re.escape(text[pos:m.start()]))
        out.append(f"(?:{m[1]})")
        pos = m.end()
    out.append(re.escape(text[pos:]))
    return re.compile("".join(out))


def filecheck(output: str, checks: str) -> None:
    """LLVM FileCheck, the parts XLA's pass tests use: ``CHECK:`` (in order), ``CHECK-NEXT:`` (the
    next line), ``CHECK-SAME:`` (the same line, later), ``CHECK-NOT:`` (absent between the previous
    match and the next one, or to the end). Lines without a directive are ignored."""
    lines = output.splitlines()
    directives = []
    for raw in checks.splitlines():
        m = re.match(r"\s*(?://\s*)?(CHECK(?:-NEXT|-SAME|-NOT)?):\s?(.*)$", raw)
        if m:
            directives.append((m[1], m[2].rstrip()))
    line, col = 0, 0           # position after the last match
    pending_not: list[str] = []

    def fail(msg: str) -> None:
        raise FileCheckError(f"{msg}\n--- output ---\n{output}")

    def check_nots(start: int, end: int, end_col: int | None = None) -> None:
        for pat in pending_not:
            rx = _pattern(pat)
            for k in range(start, min(end + 1, len(lines))):
                text = lines[k] if end_col is None or k != end else lines[k][:end_col]
                if rx.search(text):
                    fail(f"CHECK-NOT: '{pat}' found on line {k + 1}: {lines[k]}")
        pending_not.clear()

    for kind, pat in directives:
        rx = _pattern(pat)
        if kind == "CHECK-NOT":
            pending_not.append(pat)
            continue
        if kind == "CHECK":
            for k in range(line, len(lines)):
                m = rx.search(lines[k], col if k == line else 0)
                if m:
                    check_nots(line, k, m.start())
                    line, col = k, m.end()
                    break
            else:
                fail(f"CHECK: '{pat}' not found after line {line + 1}")
        elif kind == "CHECK-NEXT":
            k = line + 1
            m = rx.search(lines[k]) if k < len(lines) else None
            if not m:
                fail(f"CHECK-NEXT: '{pat}' not on line {k + 1}: {lines[k] if k < len(lines) else '<eof>'}")
            check_nots(line, k, m.start())
            line, col = k, m.end()
        elif kind == "CHECK-SAME":
            m = rx.search(lines[line], col) if line < len(lines) else None
            if not m:
                fail(f"CHECK-SAME: '{pat}' not later on line {line + 1}: {lines[line]}")
            col = m.end()
    check_nots(line, len(lines) - 1)


# ---------------------------------------------------------------- modules and values
def module_text(module: HloModule) -> str:
    """Module text without metadata (what goldens compare)."""
    return module.to_string(metadata=False)


def fill_elided_constants(module: HloModule, seed: int = 0) -> None:
    """Give ``constant({...})`` (XLA's elided dumps) deterministic random values of their shape."""
    rng = np.random.default_rng(seed)
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.opcode is O.CONSTANT and instr.literal_elided:
                instr.literal = random_value(instr.shape, rng)
                instr.literal_elided = False


def random_value(shape, rng):
    if shape.is_tuple:
        return tuple(random_value(s, rng) for s in shape.tuple_shapes)
    et = shape.element_type
    if et.is_float:
        return rng.standard_normal(shape.dimensions).astype(shape.dtype)
    if et.value == "pred":
        return rng.integers(0, 2, shape.dimensions).astype(bool)
    if et.is_complex:
        return (rng.standard_normal(shape.dimensions) + 1j * rng.standard_normal(shape.dimensions)).astype(shape.dtype)
    return rng.integers(0, 7, shape.dimensions).astype(shape.dtype)


def random_args(module: HloModule, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [random_value(p.shape, rng) for p in module.entry.parameters]


def _leaves(value) -> list:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [np.asarray(value)]


def assert_same_values(got, want, rtol: float = 1e-4, atol: float = 1e-5, context: str = "") -> None:
    got, want = _leaves(got), _leaves(want)
    assert len(got) == len(want), context
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{context} output {k}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        if w.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w, err_msg=f"{context} output {k}")
        else:
            wide = np.complex128 if w.dtype.kind == "c" else np.float64
            g64 = g.astype(np.float32 if g.dtype == ml_dtypes.bfloat16 else g.dtype).astype(wide)
            w64 = w.astype(np.float32 if w.dtype == ml_dtypes.bfloat16 else w.dtype).astype(wide)
            np.testing.assert_allclose(g64, w64, rtol=rtol, atol=atol, equal_nan=True, err_msg=f"{context} output {k}")


def tf_graph_modules() -> dict[str, pathlib.Path]:
    """graphs/tf/<name>/hlo.txt that our parser reads (unique_in_middle has dynamic shapes)."""
    out = {}
    for path in sorted(TF_GRAPHS.glob("*/hlo.txt")):
        try:
            parse_module(path.read_text(encoding="utf-8"))
        except Exception:
            continue
        out[path.parent.name] = path
    return out


def tf_golden_modules() -> dict[str, pathlib.Path]:
    return {p.name[:-len(".hlo.txt")]: p for p in sorted(TF_GOLDENS.glob("*.hlo.txt"))}


def load_tf_golden(name: str) -> tuple[HloModule, list]:
    module = parse_module((TF_GOLDENS / f"{name}.hlo.txt").read_text(encoding="utf-8"))
    data = np.load(TF_GOLDENS / f"{name}.npz")
    args = [data[f"arg{i}"] for i in range(sum(k.startswith("arg") for k in data.files))]
    return module, args


def load_tf_graph(name: str) -> tuple[HloModule, list]:
    module = parse_module((TF_GRAPHS / name / "hlo.txt").read_text(encoding="utf-8"))
    fill_elided_constants(module)
    return module, random_args(module)


# ---------------------------------------------------------------- kernels
TRIVIAL = frozenset({O.PARAMETER, O.CONSTANT, O.TUPLE, O.GET_TUPLE_ELEMENT, O.BITCAST})


def kernel_count(module: HloModule) -> int:
    """Fusions plus unfused non-trivial instructions in the computations that run as code (the entry
    and what it runs through while/conditional/call); parameters, constants, tuples,
    get-tuple-elements and bitcasts are not kernels."""
    seen, stack, count = set(), [module.entry], 0
    while stack:
        comp = stack.pop()
        if id(comp) in seen:
            continue
        seen.add(id(comp))
        for instr in comp.instructions:
            if instr.opcode in (O.WHILE, O.CONDITIONAL, O.CALL):
                stack.extend(instr.called_computations)
            if instr.opcode not in TRIVIAL:
                count += 1
    return count


def run_and_verify(p, module: HloModule) -> bool:
    changed = p.run(module)
    verify_module(module)
    return changed


def evaluate_module(module: HloModule, args):
    return evaluate(module, *args)
