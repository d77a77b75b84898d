"""A program's entry of PLAIN_ENTRY_INSTRUCTIONS or more is left unoptimised by LLVM (``optnone``): results
still equal the evaluator (control flow, row groups, pool kernels in the entry), the kernels' optimised IR
is the one an optimised entry gives, and a small program keeps an optimised entry."""
from __future__ import annotations

import re

import numpy as np
import pytest

from tests.codegen.cg_helpers import CHECKED, check, parsed, softmax_text
from tests.codegen.test_control_flow import CONDITIONAL, WHILE
from tfxla_cluster.codegen import CodegenOptions, compile_module
from tfxla_cluster.codegen import program
from tfxla_cluster.codegen.executable import emit_module
from tfxla_cluster.codegen.program import ENTRY_NAME

FAST = CodegenOptions(threads=2)


def _entry_line(text: str) -> str:
    return next(line for line in text.split("\n") if line.startswith("define") and f'@"{ENTRY_NAME}"' in line)


def _kernels(optimized: str) -> dict[str, str]:
    """Optimised functions other than the entry, by name (attribute-group numbers dropped)."""
    out = {}
    for fn in re.split(r"\n(?=define )", optimized)[1:]:
        name = re.search(r'@"?([^"( ]+)', fn).group(1)
        if name != ENTRY_NAME:
            out[name] = re.sub(r"#\d+", "#", fn.split("\n}\n")[0])
    return out


@pytest.fixture
def plain(monkeypatch):
    monkeypatch.setattr(program, "PLAIN_ENTRY_INSTRUCTIONS", 0)


def test_small_program_keeps_an_optimised_entry():
    _, text = emit_module(parsed(softmax_text(8, 16)), FAST)
    assert "optnone" not in _entry_line(text)


@pytest.mark.parametrize("text", [WHILE, softmax_text(67, 37)], ids=["while", "softmax"])
def test_plain_entry_equals_the_evaluator(plain, text):
    x = np.random.default_rng(3).standard_normal((67, 37)).astype(np.float32)
    args = (np.ones(4, np.float32), np.arange(4, dtype=np.float32)) if text is WHILE else (x,)
    # softmax's sums run in the vector order, not the evaluator's: its own test's tolerance
    tol = {} if text is WHILE else {"rtol": 1e-6, "atol": 1e-7}
    exe, _ = check(parsed(text), *args, **tol)
    assert "optnone" in _entry_line(exe.ir)


def test_plain_entry_conditional(plain):
    x = np.array([1.5, -2.0, 3.25], np.float32)
    for s in (0, 1, 7):
        check(parsed(CONDITIONAL), np.int32(s), np.bool_(s == 1), x)


def test_kernels_optimise_alike_and_results_are_bit_identical(monkeypatch):
    """Pool kernels (a big elementwise op split across threads) and a row group: same kernel code, same bits."""
    text = softmax_text(3001, 37)
    x = np.random.default_rng(5).standard_normal((3001, 37)).astype(np.float32)
    optimised = compile_module(parsed(text), FAST)
    monkeypatch.setattr(program, "PLAIN_ENTRY_INSTRUCTIONS", 0)
    plain_exe = compile_module(parsed(text), FAST)
    assert "optnone" in _entry_line(plain_exe.ir) and "optnone" not in _entry_line(optimised.ir)
    assert _kernels(plain_exe.optimized_ir) == _kernels(optimised.optimized_ir)
    for a, b in zip(optimised(x), plain_exe(x)):
        assert np.array_equal(np.asarray(a), np.asarray(b))
