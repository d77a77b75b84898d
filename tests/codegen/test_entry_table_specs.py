"""The entry fills each kernel's table with one call from a constant spec array (``ProgramEmitter._table_spec``).

Each kernel reads its buffers (and size-generic kernels their sizes) from a table of its own. The entry used to
store every entry of it inline (a load and a store per buffer, a store per size); it now calls
``tfxla_fill_table`` with an offset into one constant slot of the program's buffer table, and every call uses
the same stack table, which LLVM keeps out of line (inlined, each call's constant count was unrolled and
vectorised: twice the optimisation time of a small module). Results equal TF's, bit for bit (concatenation and
negation are exact)."""
from __future__ import annotations

import re

import numpy as np
import tensorflow as tf

from tfxla_cluster.codegen import compile_module
from tfxla_cluster.codegen.executable import emit_module
from tfxla_cluster.codegen import CodegenOptions
from tfxla_cluster.hlo.parser import parse_module

# Concatenations of three sizes (one size-generic kernel, called with three sets of sizes), and a negation.
HLO = """HloModule m

ENTRY main {
  p0 = f32[3,5]{1,0} parameter(0)
  p1 = f32[3,7]{1,0} parameter(1)
  c0 = f32[3,12]{1,0} concatenate(p0, p1), dimensions={1}
  p2 = f32[4,2]{1,0} parameter(2)
  p3 = f32[4,9]{1,0} parameter(3)
  c1 = f32[4,11]{1,0} concatenate(p2, p3), dimensions={1}
  p4 = f32[2,6]{1,0} parameter(4)
  p5 = f32[2,1]{1,0} parameter(5)
  c2 = f32[2,7]{1,0} concatenate(p4, p5), dimensions={1}
  n0 = f32[3,12]{1,0} negate(c0)
  ROOT r = (f32[3,12]{1,0}, f32[4,11]{1,0}, f32[2,7]{1,0}, f32[3,12]{1,0}) tuple(c0, c1, c2, n0)
}
"""
DIMS = [(3, 5), (3, 7), (4, 2), (4, 9), (2, 6), (2, 1)]


def _entry(text: str) -> str:
    return re.search(r'^define void @"tfxla_entry".*?^}$', text, flags=re.M | re.S).group(0)


def test_entry_fills_kernel_tables_from_specs() -> None:
    module = parse_module(HLO)
    prog, text = emit_module(module, CodegenOptions())
    entry = _entry(text)
    calls = re.findall(r'call void @"(k_[^"]+)"\(ptr %"ktable"', entry)
    assert len(calls) == 4 and len(re.findall(r'call void @"tfxla_fill_table"', entry)) == 4
    assert entry.count("alloca ptr") == 1
    # No table entry is stored in the entry any more (the stores left set the MXCSR).
    assert not re.search(r"store (ptr|i64) ", entry)
    specs = [s for s in prog.plan.of_kind("const") if s.name == "kernel_table_specs"]
    assert len(specs) == 1 and specs[0].value.dtype == np.int64 and specs[0].nbytes == specs[0].value.nbytes
    # The size-generic concatenation kernel is one function, called with each call's sizes.
    assert len(set(calls)) == 2


def test_fill_table_stays_a_call_after_optimisation() -> None:
    exe = compile_module(parse_module(HLO), CodegenOptions())
    optimized = exe.optimized_ir
    assert len(re.findall(r'call [^\n]*@tfxla_fill_table\(', _entry_opt(optimized))) == 4


def _entry_opt(text: str) -> str:
    return re.search(r'^define [^\n]*@tfxla_entry\(.*?^}$', text, flags=re.M | re.S).group(0)


def test_results_equal_tf() -> None:
    rng = np.random.RandomState(3)
    args = [rng.randn(*d).astype(np.float32) for d in DIMS]
    got = compile_module(parse_module(HLO), CodegenOptions())(*args)
    c0 = tf.concat([args[0], args[1]], 1).numpy()
    want = [c0, tf.concat([args[2], args[3]], 1).numpy(), tf.concat([args[4], args[5]], 1).numpy(),
            tf.negative(c0).numpy()]
    for g, w in zip(got, want):
        assert np.asarray(g).tobytes() == w.tobytes()
