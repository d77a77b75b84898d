"""64-bit indexing (issue 19): kernels for arrays of 2^31 elements or more must index with i64 everywhere. Each
module is optimized and emitted to LLVM IR (not compiled nor run: no memory is allocated), and the IR must
hold no 32-bit integer arithmetic at all (the modules use only float and 64-bit index types, so any i32 op
would be an index computation; the MXCSR save/restore is the one exception) and must name the large
extents as i64 constants. One real run over 2^31 + 5 int8 elements is a tfsweep test."""
from __future__ import annotations

import re

import numpy as np
import pytest

from tfxla_cluster.codegen import CodegenOptions
from tfxla_cluster.codegen.executable import emit_module
from tfxla_cluster.mxcsr import MXCSR_FTZ_DAZ
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.passes.pipeline import optimize

N = 2_200_000_000            # > 2^31 in one dimension
R = 50_000                   # R * R = 2.5e9 > 2^31 over two dimensions

MODULES = {
    "elementwise": f"""
  a = f32[{N}] parameter(0)
  b = f32[{N}] parameter(1)
  e = f32[{N}] negate(a)
  ROOT r = f32[{N}] add(e, b)""",
    "broadcast_2d": f"""
  a = f32[{R}] parameter(0)
  b = f32[{R},{R}] parameter(1)
  c = f32[{R},{R}] broadcast(a), dimensions={{1}}
  ROOT r = f32[{R},{R}] multiply(b, c)""",
    "transpose": f"""
  a = f32[{R},{R}] parameter(0)
  ROOT r = f32[{R},{R}] transpose(a), dimensions={{1,0}}""",
    "reduce_rows": f"""
  a = f32[{R},{R}] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[{R}] reduce(a, z), dimensions={{1}}, to_apply=add""",
    "reduce_all": f"""
  a = f32[{N}] parameter(0)
  z = f32[] constant(-inf)
  ROOT r = f32[] reduce(a, z), dimensions={{0}}, to_apply=max""",
    "slice_tail": f"""
  a = f32[{N}] parameter(0)
  ROOT r = f32[1000] slice(a), slice={{[{N - 1000}:{N}]}}""",
    "concatenate": f"""
  a = f32[{N // 2}] parameter(0)
  b = f32[{N // 2 + 7}] parameter(1)
  ROOT r = f32[{N + 7}] concatenate(a, b), dimensions={{0}}""",
    "pad": f"""
  a = f32[{N - 100}] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[{N}] pad(a, z), padding=50_50""",
    "reverse": f"""
  a = f32[{N}] parameter(0)
  ROOT r = f32[{N}] reverse(a), dimensions={{0}}""",
    "dynamic_slice": f"""
  a = f32[{N}] parameter(0)
  i = s64[] parameter(1)
  ROOT r = f32[16] dynamic-slice(a, i), dynamic_slice_sizes={{16}}""",
    "dynamic_update_slice": f"""
  a = f32[{N}] parameter(0)
  u = f32[16] parameter(1)
  i = s64[] parameter(2)
  ROOT r = f32[{N}] dynamic-update-slice(a, u, i)""",
    "gather": f"""
  a = f32[{N},2] parameter(0)
  i = s64[8,1] parameter(1)
  ROOT r = f32[8,2] gather(a, i), offset_dims={{1}}, collapsed_slice_dims={{0}}, start_index_map={{0}}, index_vector_dim=1, slice_sizes={{1,2}}""",
    "scatter": f"""
  a = f32[{N}] parameter(0)
  i = s64[8,1] parameter(1)
  u = f32[8] parameter(2)
  ROOT r = f32[{N}] scatter(a, i, u), update_window_dims={{}}, inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=add""",
    "iota": f"""
  ROOT r = s64[{N}] iota(), iota_dimension=0""",
    "dot": f"""
  a = f32[{R},{R}] parameter(0)
  b = f32[{R},4] parameter(1)
  ROOT r = f32[{R},4] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}""",
    "reduce_window": f"""
  a = f32[{N}] parameter(0)
  z = f32[] constant(-inf)
  ROOT r = f32[{N // 2}] reduce-window(a, z), window={{size=2 stride=2}}, to_apply=max""",
    "convert_select": f"""
  a = f32[{N}] parameter(0)
  z = f32[] constant(0)
  zb = f32[{N}] broadcast(z), dimensions={{}}
  p = pred[{N}] compare(a, zb), direction=GT
  s = f32[{N}] select(p, a, zb)
  ROOT r = f16[{N}] convert(s)""",
}

_COMPUTATIONS = """
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

max {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] maximum(x, y)
}
"""


def _ir(body: str) -> str:
    module = parse_module(f"HloModule big\n{_COMPUTATIONS}\nENTRY e {{{body}\n}}\n")
    module, _ = optimize(module)
    _, ir = emit_module(module, CodegenOptions(threads=2))
    return ir


def _narrow_ops(ir: str) -> list[str]:
    """Lines with 32-bit integer values: float constants written as ``bitcast (i32 ...)``, the MXCSR
    save/restore, the BLAS call's enum arguments (its sizes are i64: ILP64) and metadata nodes (streaming
    stores' ``!nontemporal !{i32 1}``) are not index arithmetic."""
    out = []
    for line in ir.splitlines():
        if line.startswith("!"):
            continue
        line = re.sub(r"bitcast \(i32 -?\d+ to float\)", "F", line)
        if not re.search(r"\bi32\b", line) or "mxcsr" in line or "tfxla_blas_threads_local" in line:
            continue
        if line.rstrip().endswith(f", {MXCSR_FTZ_DAZ}"):
            continue
        if "tfxla_cblas_" in line:
            line = re.sub(r"^(.*?\()i32 [^,]+, i32 [^,]+, i32 [^,]+,", r"\1", line)  # order, transA, transB
            if not re.search(r"\bi32\b", line):
                continue
        out.append(line.strip())
    return out


@pytest.mark.parametrize("name", sorted(MODULES))
def test_index_arithmetic_is_64_bit(name):
    ir = _ir(MODULES[name])
    narrow = _narrow_ops(ir)
    assert not narrow, "32-bit integer ops in a kernel over >= 2^31 elements:\n" + "\n".join(narrow[:20])
    if str(N) in MODULES[name] or str(N // 2) in MODULES[name]:
        # some extent or bound past 2^31 appears in i64 arithmetic (an i32 one would have been truncated)
        big = [int(v) for line in ir.splitlines() if " i64 " in line for v in re.findall(r"\b(\d{10,})\b", line)]
        assert any(v >= 1 << 31 for v in big), f"no i64 extent in {name}"


@pytest.mark.parametrize("op", ["dynamic-slice", "dynamic-update-slice", "gather"])
def test_s32_indices_are_widened_before_use(op):
    """TF's indices are s32: they are loaded as i32 and sign-extended, and every clamp or offset is i64."""
    body = {
        "dynamic-slice": f"""
  a = f32[{N}] parameter(0)
  i = s32[] parameter(1)
  ROOT r = f32[16] dynamic-slice(a, i), dynamic_slice_sizes={{16}}""",
        "dynamic-update-slice": f"""
  a = f32[{N}] parameter(0)
  u = f32[16] parameter(1)
  i = s32[] parameter(2)
  ROOT r = f32[{N}] dynamic-update-slice(a, u, i)""",
        "gather": f"""
  a = f32[{N},2] parameter(0)
  i = s32[8,1] parameter(1)
  ROOT r = f32[8,2] gather(a, i), offset_dims={{1}}, collapsed_slice_dims={{0}}, start_index_map={{0}}, index_vector_dim=1, slice_sizes={{1,2}}""",
    }[op]
    narrow = [line for line in _narrow_ops(_ir(body))
              if not re.match(r"%\S+ = (load i32, ptr|sext i32 \S+ to i64|getelementptr inbounds i32, ptr \S+ i64 )",
                              line)]
    assert not narrow, "32-bit index arithmetic:\n" + "\n".join(narrow[:20])


@pytest.mark.tfsweep
def test_run_over_2_pow_31_elements():
    """A real kernel over 2^31 + 5 int8 elements (2 GiB): the last elements are read and written correctly
    and a full reduction sees every element (TF's eager kernels give the expected values)."""
    import tensorflow as tf

    import tfxla_cluster as txc

    n = (1 << 31) + 5
    try:
        x = np.zeros(n, np.int8)
    except MemoryError:
        pytest.skip("not enough memory for a 2 GiB array")
    x[-3:] = [5, -7, 9]
    x[1 << 31] = 11  # the first element past 2^31

    def f(x):
        return tf.reduce_max(x), tf.reduce_min(x), x[-8:] + 1, tf.argmax(x, output_type=tf.int64)

    got = txc.function(f, jit_compile=True)(x)
    want = f(tf.constant(x))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
