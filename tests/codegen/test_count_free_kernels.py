"""Loop kernels that differ only in their sizes share one function (``kernels/loop.py`` ``_count_free``).

A flat elementwise loop of at least ``COUNT_FREE_MIN`` elements takes its element count from its call, and a
row loop nest of loop-free ops (a bias + ReLU over rows) its rows' count and length (``KernelBuilder.count``:
the length is an entry of the kernel's table, stored by the caller). The same computation on buffers of other
sizes then prints the same IR, and LLVM optimises and compiles it once; every call still runs with its own
sizes (a kernel that no other size shares reads its counts as constants again). Shorter loops keep constant counts (LLVM runs them as masked vectors, which the elemental code models).
Results equal TF's XLA's, bit for bit."""
from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

from tfxla_cluster.codegen import CodegenOptions, compile_module
from tfxla_cluster.codegen.executable import emit_module
from tfxla_cluster.codegen.kernels.loop import COUNT_FREE_MIN
from tfxla_cluster.hlo.parser import parse_module

RNG = np.random.RandomState(5)


def _kernel_defs(ir_text: str) -> list[str]:
    return re.findall(r'^define internal void @"(k_[^"]+)"', ir_text, flags=re.M)


def _module(body: str, params: list[str], results: list[str]) -> str:
    """An HloModule of one fused computation ``body`` (on p0, p1, ...) applied to each shape set in
    ``params`` (one fusion per set; ``results``: its shapes)."""
    comps, entry = [], []
    for n, (shapes, result) in enumerate(zip(params, results)):
        decls = "".join(f"  p{k}.{n} = {s} parameter({k})\n" for k, s in enumerate(shapes.split(";")))
        comps.append(f"fused_{n} {{\n{decls}" + body.format(n=n, s=result, **{f"s{k}": s for k, s in
                                                                             enumerate(shapes.split(";"))}) + "}\n")
        base = sum(len(p.split(";")) for p in params[:n])
        for k, s in enumerate(shapes.split(";")):
            entry.append(f"  x{base + k} = {s} parameter({base + k})\n")
        args = ", ".join(f"x{base + k}" for k in range(len(shapes.split(";"))))
        entry.append(f"  f{n} = {result} fusion({args}), kind=kLoop, calls=fused_{n}\n")
    root = ", ".join(results)
    return "HloModule m\n\n" + "".join(comps) + "\nENTRY main {\n" + "".join(entry) + \
        f"  ROOT r = ({root}) tuple({', '.join(f'f{n}' for n in range(len(params)))})\n}}\n"


# x * 0.5 + y: flat elementwise (an FMA's contraction, the same in every kernel)
AXPY = """  c.{n} = f32[] constant(0.5)
  b.{n} = {s} broadcast(c.{n}), dimensions={{}}
  m.{n} = {s} multiply(p0.{n}, b.{n})
  ROOT a.{n} = {s} add(m.{n}, p1.{n})
"""
# relu(x + bias) over rows: a row loop nest reading the bias at the row's inner index
BIAS_RELU = """  b.{n} = {s} broadcast(p1.{n}), dimensions={{1}}
  a.{n} = {s} add(p0.{n}, b.{n})
  z.{n} = f32[] constant(0)
  zb.{n} = {s} broadcast(z.{n}), dimensions={{}}
  ROOT r.{n} = {s} maximum(a.{n}, zb.{n})
"""


def _axpy(dims: list[str]):
    shapes = [f"f32[{d}]{{{','.join(str(k) for k in reversed(range(d.count(',') + 1)))}}}" for d in dims]
    return _module(AXPY, [f"{s};{s}" for s in shapes], shapes)


def _bias_relu(rows_cols: list[tuple[int, int]]):
    shapes = [f"f32[{r},{c}]{{1,0}}" for r, c in rows_cols]
    return _module(BIAS_RELU, [f"{s};f32[{c}]{{0}}" for s, (_, c) in zip(shapes, rows_cols)], shapes)


def _run(hlo: str, args):
    exe = compile_module(parse_module(hlo))
    return [np.asarray(r) for r in exe(*args)]


def test_flat_fusions_of_other_sizes_share_one_kernel():
    hlo = _axpy(["64,48", "40,3", "3,7,5"])
    prog, text = emit_module(parse_module(hlo), CodegenOptions(threads=1))
    assert len(prog.kernels) == 3                        # every fusion is still called
    assert len(_kernel_defs(text)) == 1, _kernel_defs(text)
    assert prog.reused_kernels == 2
    args = [RNG.randn(*s).astype(np.float32) for s in [(64, 48)] * 2 + [(40, 3)] * 2 + [(3, 7, 5)] * 2]
    want = tf.function(lambda *a: [a[k] * 0.5 + a[k + 1] for k in (0, 2, 4)], jit_compile=True)(*args)
    for got, w in zip(_run(hlo, args), want):
        np.testing.assert_array_equal(got, w.numpy())


def test_short_flat_loops_keep_their_counts():
    assert COUNT_FREE_MIN == 16
    # (rank 2: a rank-1 loop's items are rows, which take their range from the call anyway)
    prog, text = emit_module(parse_module(_axpy(["2,4", "3,4", "4,4", "4,5"])), CodegenOptions(threads=1))
    defs = _kernel_defs(text)
    assert len(defs) == 3, defs                          # 8 and 12 elements each their own; 16 and 20 one
    assert [k.name for k in prog.kernels][2] == [k.name for k in prog.kernels][3]


@pytest.mark.parametrize("threads", [1, 2])
def test_row_loops_of_other_lengths_share_one_kernel(threads):
    sizes = [(8, 32), (6, 48), (17, 100), (64, 16)]
    hlo = _bias_relu(sizes)
    prog, text = emit_module(parse_module(hlo), CodegenOptions(threads=threads))
    assert len(_kernel_defs(text)) == 1, _kernel_defs(text)
    assert re.search(r'load i64, ptr %"[^"]+"(, align 8)?\n', text)   # the row length, read from its table
    args = []
    for r, c in sizes:
        x = RNG.randn(r, c).astype(np.float32)
        x[0, :4] = [np.nan, -0.0, np.inf, -np.inf]
        args += [x, RNG.randn(c).astype(np.float32)]
    want = tf.function(lambda *a: [tf.nn.relu(a[k] + a[k + 1]) for k in range(0, len(a), 2)], jit_compile=True)(*args)
    for got, w in zip(_run(hlo, args), want):
        np.testing.assert_array_equal(got, w.numpy())


def test_a_kernel_no_other_size_shares_reads_its_counts_as_constants():
    # Run-time counts cost remainder loops and checks: a kernel every call runs with the same counts gets
    # them back as constants (its calls still store them).
    _, text = emit_module(parse_module(_axpy(["20,3"]) + ""), CodegenOptions(threads=1))
    assert "add i64 60, 0" in text and "load i64" not in text
    _, text = emit_module(parse_module(_axpy(["20,3", "4,5"])), CodegenOptions(threads=1))
    assert "load i64" in text and "add i64 60, 0" not in text


def test_short_rows_keep_their_length():
    prog, text = emit_module(parse_module(_bias_relu([(8, 8), (8, 12), (8, 32)])), CodegenOptions(threads=1))
    assert len(_kernel_defs(text)) == 3


def test_bounds_check_mode_reads_constants():
    # Kernels reading the program's table (bounds checks) have no table of their own: counts stay constants.
    prog, text = emit_module(parse_module(_axpy(["64,48", "40"])), CodegenOptions(bounds_checks=True))
    assert len(_kernel_defs(text)) == 2
