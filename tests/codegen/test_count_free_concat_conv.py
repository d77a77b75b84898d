"""Concatenations and in-place 1×1 convolutions of other sizes share one kernel (``KernelBuilder.count``).

An unfused concatenate whose operands have the output's layout copies runs of bytes (``kernels/concat.py``,
XLA's EmitFastConcatenate) whose lengths the kernel reads from its table; a 1×1 convolution that reads its input
as the GEMM's A (``conv.emit_blocked_conv``, no epilogue) reads its sizes likewise. Kernels that differ only in
those print the same IR and are compiled once; each call still runs with its own sizes, and the results equal
TF's (the copies bit for bit) and those of the same kernel with constant sizes."""
from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf
from llvmlite import ir

from tfxla_cluster.codegen import CodegenOptions, compile_module
from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.executable import emit_module
from tfxla_cluster.codegen.native_runtime import blas_available
from tfxla_cluster.codegen.program import ProgramEmitter, _constant_counts
from tfxla_cluster.hlo.parser import parse_module

RNG = np.random.RandomState(11)
_DTYPES = {"f32": np.float32, "bf16": tf.bfloat16.as_numpy_dtype, "s8": np.int8, "pred": np.bool_, "f64": np.float64}


def _kernel_defs(ir_text: str) -> list[str]:
    return re.findall(r'^define internal void @"(k_[^"]+)"', ir_text, flags=re.M)


def _layout(rank: int) -> str:
    return ",".join(str(k) for k in reversed(range(rank)))


def _concat_module(cases) -> str:
    """One concatenate per case (element type, operand dims, dimension); params numbered in order."""
    lines, roots, n = [], [], 0
    for c, (et, dims, dim) in enumerate(cases):
        names = []
        for d in dims:
            lines.append(f"  p{n} = {et}[{','.join(map(str, d))}]{{{_layout(len(d))}}} parameter({n})")
            names.append(f"p{n}")
            n += 1
        out = list(dims[0])
        out[dim] = sum(d[dim] for d in dims)
        shape = f"{et}[{','.join(map(str, out))}]{{{_layout(len(out))}}}"
        lines.append(f"  c{c} = {shape} concatenate({', '.join(names)}), dimensions={{{dim}}}")
        roots.append((f"c{c}", shape))
    return _with_root(lines, roots)


def _with_root(lines: list[str], roots: list[tuple[str, str]]) -> str:
    shapes, names = ", ".join(s for _, s in roots), ", ".join(n for n, _ in roots)
    return "HloModule m\n\nENTRY main {\n" + "\n".join(lines) + f"\n  ROOT r = ({shapes}) tuple({names})\n}}\n"


def _value(et: str, dims) -> np.ndarray:
    x = RNG.randn(*dims) * 100
    if et == "pred":
        return x > 0
    x = x.astype(_DTYPES[et])
    if et in ("f32", "bf16") and x.size >= 4:
        x.reshape(-1)[:4] = [np.nan, -0.0, np.inf, -np.inf]
    return x


def _check_concats(cases, threads: int = 1) -> str:
    hlo = _concat_module(cases)
    args = [_value(et, d) for et, dims, _ in cases for d in dims]
    prog, text = emit_module(parse_module(hlo), CodegenOptions(threads=threads))
    got = compile_module(parse_module(hlo), CodegenOptions(threads=threads))(*args)
    k = 0
    for (et, dims, dim), out in zip(cases, got):
        want = tf.concat([tf.constant(a) for a in args[k:k + len(dims)]], axis=dim).numpy()
        k += len(dims)
        assert out.dtype == want.dtype and out.shape == want.shape
        np.testing.assert_array_equal(np.asarray(out).view(np.uint8), want.view(np.uint8))
    return text


@pytest.mark.parametrize("threads", [1, 2])
def test_concatenations_of_other_sizes_and_types_share_one_kernel(threads):
    cases = [("f32", [(4, 3, 5), (4, 3, 7)], 2),        # DenseNet's channel concatenation
             ("f32", [(64, 96), (64, 32)], 1),
             ("f32", [(4, 3, 5), (4, 2, 5)], 1),        # runs of two dimensions
             ("f32", [(2, 3), (5, 3)], 0),              # one outer item: the operands one after the other
             ("bf16", [(3, 9), (3, 4)], 1),             # the runs are bytes: any element type
             ("s8", [(7, 2), (7, 30)], 1),
             ("pred", [(5, 6), (5, 1)], 1)]
    text = _check_concats(cases, threads)
    assert len(_kernel_defs(text)) == 1, _kernel_defs(text)
    assert "llvm.memcpy" in text


def test_concatenation_operand_counts_edges():
    cases = [("f32", [(3, 4), (3, 0), (3, 5), (3, 2)], 1),    # an empty operand copies nothing
             ("f64", [(6, 2), (6, 2), (6, 2)], 1),
             ("f32", [(1, 1), (1, 1)], 0)]
    text = _check_concats(cases)
    # one kernel per number of non-empty operands: the four operands with an empty one copy three runs, as f64's
    assert len(_kernel_defs(text)) == 2, _kernel_defs(text)


def test_same_operand_twice_and_other_layouts():
    hlo = """HloModule m

ENTRY main {
  x = f32[4,6]{1,0} parameter(0)
  y = f32[4,3]{0,1} parameter(1)
  z = f32[4,3]{1,0} parameter(2)
  twice = f32[4,12]{1,0} concatenate(x, x), dimensions={1}
  mixed = f32[4,9]{1,0} concatenate(x, y), dimensions={1}
  cols = f32[4,6]{0,1} concatenate(y, y), dimensions={1}
  ROOT r = (f32[4,12]{1,0}, f32[4,9]{1,0}, f32[4,6]{0,1}, f32[4,6]{1,0}) tuple(twice, mixed, cols, z)
}
"""
    x, y, z = (RNG.randn(*s).astype(np.float32) for s in [(4, 6), (4, 3), (4, 3)])
    got = compile_module(parse_module(hlo), CodegenOptions(threads=1))(x, y, z)
    want = [tf.concat([x, x], 1), tf.concat([x, y], 1), tf.concat([y, y], 1)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.numpy())


def test_a_concatenation_no_other_size_shares_reads_constant_runs():
    text = _check_concats([("f32", [(8, 20), (8, 12)], 1)])
    assert "load i64" not in text and "add i64 80, 0" in text and "add i64 48, 0" in text


def test_constant_counts_replace_the_recorded_loads_wherever_used():
    # ``_fix_counts`` replaces the loads ``KernelBuilder.count`` made (it records them), also where one is
    # printed by an instruction's own copy of its operands (a GEP's indices).
    module = parse_module(_concat_module([("f32", [(2, 3), (2, 3)], 1)]))
    prog = ProgramEmitter(module, CodegenOptions(threads=1))
    kb = prog.kernel("probe")
    first, second = kb.count(7), kb.count(9)
    ptr = kb.ptr(prog.plan.new("temp", module.entry.root.shape.tuple_shapes[0], name="t"))
    b = kb.builder
    b.store(t.float_constant(ir.FloatType(), 1.0), b.gep(ptr, [second], inbounds=True, source_etype=ir.FloatType()))
    b.store(t.float_constant(ir.FloatType(), 2.0), b.gep(ptr, [b.add(first, second)], source_etype=ir.FloatType()))
    fn = kb.finish()
    assert sorted(kb.count_loads) == [0, 1]
    _constant_counts(fn, kb.count_loads, {0: 7, 1: 9})
    text = str(fn)
    assert "load i64" not in text and "add i64 7, 0" in text and "add i64 9, 0" in text
    assert not any(name in text for name in ('%"count0"', '%"count1"'))


def _conv1x1_module(channels: list[int], spatial=(4, 4), out=32) -> str:
    lines, roots = [], []
    h, w = spatial
    for k, c in enumerate(channels):
        lines += [f"  x{k} = f32[2,{h},{w},{c}]{{3,2,1,0}} parameter({2 * k})",
                  f"  w{k} = f32[1,1,{c},{out}]{{3,2,1,0}} parameter({2 * k + 1})",
                  f"  c{k} = f32[2,{h},{w},{out}]{{3,2,1,0}} convolution(x{k}, w{k}), window={{size=1x1}}, "
                  f"dim_labels=b01f_01io->b01f"]
        roots.append((f"c{k}", f"f32[2,{h},{w},{out}]{{3,2,1,0}}"))
    return _with_root(lines, roots)


def _gemm_kernels(ir_text: str) -> list[str]:
    """The text of each function that calls the BLAS GEMM."""
    return [f for f in re.split(r"\n(?=define )", ir_text)[1:] if 'tfxla_cblas_sgemm"(i32' in f]


@pytest.mark.skipif(not blas_available(), reason="the blocked convolution calls OpenBLAS")
@pytest.mark.parametrize("threads", [1, 2])
def test_1x1_convolutions_of_other_input_features_share_one_kernel(threads):
    channels = [24, 40, 64, 96]
    hlo = _conv1x1_module(channels)
    options = CodegenOptions(threads=threads)
    _, text = emit_module(parse_module(hlo), options)
    assert len(_gemm_kernels(text)) == 1
    assert "load i64" in _gemm_kernels(text)[0]            # its sizes, read from its table
    args = []
    for c in channels:
        args += [RNG.randn(2, 4, 4, c).astype(np.float32), RNG.randn(1, 1, c, 32).astype(np.float32)]
    got = compile_module(parse_module(hlo), options)(*args)
    for k, c in enumerate(channels):
        # the same convolution alone: its kernel has constant sizes (no other shares it)
        alone_hlo = _conv1x1_module([c])
        _, alone_text = emit_module(parse_module(alone_hlo), options)
        assert "load i64" not in _gemm_kernels(alone_text)[0]
        (alone,) = compile_module(parse_module(alone_hlo), options)(*args[2 * k:2 * k + 2])
        np.testing.assert_array_equal(got[k], alone)
        want = tf.nn.conv2d(args[2 * k], args[2 * k + 1], 1, "VALID").numpy()
        np.testing.assert_allclose(got[k], want, rtol=1e-5, atol=1e-4)
