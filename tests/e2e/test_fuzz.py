"""The differential fuzzer (``tools/fuzz.py``) in CI: a bounded run on fixed seeds, and every program it
once found failing (``tests/data/fuzz_regressions/*.json``, shrunk) replayed. Each program runs under
TF's XLA (``jit_compile=True``, the oracle), ours with ``jit_compile=True`` and ours auto-clustered;
results must match TF's XLA (ints/bools exactly, floats within per-op ulp budgets, NaN positions and
signed zeros compared)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
import fuzz  # tools/ is on sys.path (setup.cfg pythonpath)

REGRESSIONS = sorted((ROOT / "tests" / "data" / "fuzz_regressions").glob("*.json"))


def _report(fails, prog) -> str:
    return "\n".join(f"{f.runner} {f.category}: {f.detail}" for f in fails) + "\n" + prog.text()


@pytest.mark.parametrize("path", REGRESSIONS, ids=lambda p: p.stem)
def test_regression(path):
    spec = json.loads(path.read_text(encoding="utf-8"))
    prog = fuzz.Program.from_json(spec["program"])
    # "runners": a case whose auto-clustered result is TF's own auto-clustering's, not TF's XLA's, is
    # replayed under jit only (checking auto would start a TF child process: tools/fuzz.py's tf_auto)
    status, fails, _ = fuzz.check(prog, runners=tuple(spec.get("runners", ("jit", "auto"))), eager=False)
    assert status == "ok", "TF's XLA must accept the program"
    assert not fails, _report(fails, prog)


def test_bounded_fuzz():
    """75 programs (fixed seeds), auto-clustering on every third: no failure (tools/fuzz.py runs more)."""
    bad = []
    for k in range(75):
        prog = fuzz.generate(19_000 + k)
        runners = ("jit", "auto") if k % 3 == 0 else ("jit",)
        status, fails, _ = fuzz.check(prog, runners=runners, eager=False)
        if fails:
            bad.append(f"seed {19_000 + k}: " + _report(fails, prog))
    assert not bad, "\n\n".join(bad)


def test_generator_covers_dtypes_shapes_and_specials():
    progs = [fuzz.generate(s) for s in range(300)]
    dtypes = {x.dtype for p in progs for x in p.inputs}
    assert set(fuzz.ALL) <= dtypes
    shapes = [x.shape for p in progs for x in p.inputs]
    assert any(0 in s for s in shapes) and any(1 in s for s in shapes) and any(len(s) == 0 for s in shapes)
    vals = [v for p in progs for x in p.inputs if x.dtype == "float32" for v in x.values]
    assert any(np.isnan(v) for v in vals) and np.inf in vals and -np.inf in vals
    assert any(0 < abs(v) < np.finfo(np.float32).tiny for v in vals)  # denormals
    ops = {n.op for p in progs for n in p.nodes}
    assert {"cond", "while", "assign_add", "gather", "concat", "reduce_max"} <= ops
    kinds = {x.kind for p in progs for x in p.inputs}
    assert kinds == {"arg", "const", "var", "vararg", "np", "list"}
    assert set(fuzz.COMPLEX) <= dtypes
    assert {"while2", "case", "conv2d", "strided_slice", "sort", "segment_sum", "complex"} <= ops
    # the third table: complex division and casts, f16/bf16/f64 dots and convolutions, depthwise
    # convolutions, variables of every dtype and updated inside control flow, a cond inside a while
    assert {"cdiv", "ccast", "matmul_more", "conv2d_more", "depthwise_conv2d", "assign_more", "cond_assign",
            "while_assign", "while_cond", "where_bcast"} <= ops
    var_dtypes = {d for op in fuzz.OPS.values() if op.kind in fuzz.ASSIGN_KINDS for d in op.dtypes}
    assert set(fuzz.ALL) | set(fuzz.COMPLEX) <= var_dtypes


def test_compare_rules():
    f32 = np.float32
    assert fuzz.compare(np.array([0.0], f32), np.array([-0.0], f32), "float32", 0, 0)  # signed zero
    assert fuzz.compare(np.array([np.nan], f32), np.array([1.0], f32), "float32", 4, 1)  # NaN position
    assert not fuzz.compare(np.array([1.0], f32), np.array([np.nextafter(f32(1), f32(2))], f32), "float32", 1, 1)
    assert fuzz.compare(np.array([1.0], f32), np.array([1.001], f32), "float32", 4, 1)
    assert fuzz.compare(np.array([3], np.int8), np.array([4], np.int8), "int8", 0, 0)
    assert not fuzz.compare(np.array([3], np.int8), np.array([4], np.int8), "int8", fuzz.UNCHECKED, 0)


def test_merge_and_prune_keep_semantics():
    a, b = fuzz.generate(5), fuzz.generate(6)
    m = fuzz.merge([a, b])
    assert len(m.outputs) == len(a.outputs) + len(b.outputs)
    ra, rb, rm = fuzz.run(a, "xla"), fuzz.run(b, "xla"), fuzz.run(m, "xla")
    assert ra.ok and rb.ok and rm.ok
    outs = len(a.outputs)
    for x, y in zip(ra.values[:outs] + rb.values[:len(b.outputs)], rm.values):
        np.testing.assert_array_equal(x, y)
    pruned = fuzz._prune(m, [m.outputs[-1]])
    rp = fuzz.run(pruned, "xla")
    np.testing.assert_array_equal(rp.values[0], rm.values[len(m.outputs) - 1])
