"""LLVM's loop pipeline is chosen per kernel (issue 17): GEMM and convolution kernels
(``kernel_builder.HOT_LOOP_KINDS``) of at least ``HOT_LOOP_MIN_COST`` keep O3's unrolling and interleaving;
the plain loops of every other kernel (small GEMMs and convolutions too) are marked not to be unrolled or interleaved (``loops.light_loops``), reduction loops are left alone.
Results equal TF's XLA, and are bit-identical to the code compiled with every loop at O3."""
from __future__ import annotations

import re

import llvmlite.ir as ir
import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.codegen import CodegenOptions, compile_module, kernel_builder, loops, program
from tfxla_cluster.codegen.executable import emit_module
from tfxla_cluster.codegen.kernel_builder import HOT_LOOP_KINDS
from tfxla_cluster.codegen.conv_exact import SPECIAL_CHECK_KIND
from tfxla_cluster.codegen.native_runtime import blas_available
from tfxla_cluster.hlo.parser import parse_module

RNG = np.random.RandomState(3)
X = RNG.randn(64, 64).astype(np.float32)
W = (RNG.randn(64, 96) * 0.2).astype(np.float32)     # 786k flops: a hot GEMM
IMG = RNG.randn(2, 12, 12, 8).astype(np.float32)
FILT = (RNG.randn(3, 3, 8, 16) * 0.2).astype(np.float32)


def _dense(x, w):
    # a GEMM (hot), an elementwise chain (light), a row sum (its reduction loop keeps O3), a softmax
    y = tf.tanh(tf.matmul(x, w) * 0.5 + 1.0)
    return y, tf.reduce_sum(y, axis=1), tf.nn.softmax(y, axis=-1)


def _conv(img, filt):
    y = tf.nn.relu(tf.nn.conv2d(img, filt, strides=1, padding="SAME") + 0.1)
    return y * tf.reduce_mean(y, axis=[1, 2], keepdims=True)


CASES = {"dense": (_dense, (X, W)), "conv": (_conv, (IMG, FILT)),
         # 64×40×48 (246k flops): below HOT_LOOP_MIN_COST, so its GEMM's loops are light too
         "small_dense": (_dense, (X[:, :40], W[:40, :48]))}


def _module(name):
    fn, args = CASES[name]
    return parse_module(txc.function(fn, jit_compile=True).experimental_get_compiler_ir(*args)(stage="optimized_hlo"))


def _bodies(ir_text: str) -> dict[str, str]:
    return {m.group(1): m.group(0)
            for m in re.finditer(r'^define internal void @"([^"]+)".*?^}$', ir_text, flags=re.M | re.S)}


def _light_ids(ir_text: str) -> set[str]:
    """The metadata numbers of loop IDs carrying LIGHT_LOOP_HINTS."""
    hints = {name: re.search(rf'^(!\d+) = !{{ !"{name}"', ir_text, flags=re.M) for name, *_ in loops.LIGHT_LOOP_HINTS}
    if not all(hints.values()):
        return set()
    a, b = (m.group(1) for m in hints.values())
    return set(re.findall(rf"^(!\d+) = !{{ \1, {a}, {b} }}", ir_text, flags=re.M))


@pytest.mark.parametrize("name", ["conv", "dense"])
def test_hot_kernels_keep_o3_loops_and_the_others_are_light(name):
    prog, text = emit_module(_module(name), CodegenOptions())
    light = _light_ids(text)
    bodies = _bodies(text)
    kinds = {k.name: k.kind for k in prog.kernels}
    assert any(k in HOT_LOOP_KINDS for k in kinds.values()), kinds
    assert any(k not in HOT_LOOP_KINDS for k in kinds.values()), kinds
    for fn_name, kind in kinds.items():
        ids = set(re.findall(r"!llvm\.loop (!\d+)", bodies[fn_name]))
        if kind in HOT_LOOP_KINDS:
            assert not ids & light, f"hot kernel {fn_name} ({kind}) has light loops"
        elif kind != SPECIAL_CHECK_KIND and "br label" in bodies[fn_name] and ".header" in bodies[fn_name]:
            # (conv_exact's check kernel has one loop, an or-reduction: reduction loops are never light)
            assert ids & light, f"kernel {fn_name} ({kind}) has no light loop"


def test_small_gemm_is_light():
    """A GEMM whose estimated cost is below ``HOT_LOOP_MIN_COST`` is not unrolled: unrolling would save it
    microseconds per call and cost milliseconds of LLVM time once."""
    prog, text = emit_module(_module("small_dense"), CodegenOptions())
    light, bodies = _light_ids(text), _bodies(text)
    gemms = [k.name for k in prog.kernels if k.kind == "gemm"]
    assert gemms
    for fn_name in gemms:
        assert set(re.findall(r"!llvm\.loop (!\d+)", bodies[fn_name])) & light, fn_name


def test_reduction_loops_are_not_light():
    prog, text = emit_module(_module("dense"), CodegenOptions())
    light = _light_ids(text)
    # the row sum's loop over a row ("r1") and its row loop: only the latter is light
    for fn_name, body in _bodies(text).items():
        for header, md in re.findall(r'br label %"([^"]+)\.header", !llvm\.loop (!\d+)', body):
            if re.fullmatch(r"r\d+", header):
                assert md not in light, f"reduction loop {header} of {fn_name} is light"


@pytest.mark.parametrize("name", sorted(CASES))
def test_results_equal_tf_xla(name):
    fn, args = CASES[name]
    want = tf.function(fn, jit_compile=True)(*args)
    got = txc.function(fn, jit_compile=True)(*args)
    for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_light_loops_change_no_bits(monkeypatch, name):
    """The same module with no light loops (every loop at O3) gives bit-identical results."""
    _, args = CASES[name]
    module = _module(name)
    marked = compile_module(module, CodegenOptions())
    got = marked(*args)
    monkeypatch.setattr(kernel_builder, "light_loops", lambda fn: 0)
    exe = compile_module(module, CodegenOptions())
    assert _light_ids(marked.ir) and not _light_ids(exe.ir)
    want = exe(*args)
    for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
        assert np.asarray(g).tobytes() == np.asarray(w).tobytes()



@pytest.mark.skipif(not blas_available(), reason="Winograd's GEMMs call OpenBLAS")
def test_winograd_kernels_are_light_and_change_no_bits(monkeypatch):
    """Winograd's kernels (vector transforms around OpenBLAS GEMMs) are not hot loops: their loops are light,
    the result is bit-identical to every loop at O3 and equals TF's XLA up to the transforms' rounding."""
    x = RNG.randn(2, 9, 7, 20).astype(np.float32)
    k = (RNG.randn(3, 3, 20, 17) * 0.2).astype(np.float32)

    def fn(x, k):
        return tf.nn.relu(tf.nn.conv2d(x, k, strides=1, padding="SAME") + 0.1)
    module = parse_module(txc.function(fn, jit_compile=True).experimental_get_compiler_ir(x, k)(stage="optimized_hlo"))
    prog, text = emit_module(module, CodegenOptions())
    kinds = {kk.name: kk.kind for kk in prog.kernels}
    wino = [name for name, kind in kinds.items() if kind.startswith("conv-winograd")]
    assert len(wino) == 2, kinds
    light, bodies = _light_ids(text), _bodies(text)
    for name in wino:
        assert set(re.findall(r"!llvm\.loop (!\d+)", bodies[name])) & light, name
    got = compile_module(module, CodegenOptions())(x, k)
    monkeypatch.setattr(kernel_builder, "light_loops", lambda fn: 0)
    want = compile_module(module, CodegenOptions())(x, k)
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
    xla = tf.function(fn, jit_compile=True)(x, k).numpy()
    np.testing.assert_allclose(np.asarray(tf.nest.flatten(got)[0]), xla, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(xla).max()))

def test_light_loops_marks_plain_loops_once_and_unsettled_loops_stay_plain():
    m = ir.Module()
    fns = []
    for name in ("light", "hot"):
        fn = ir.Function(m, ir.FunctionType(ir.VoidType(), []), name)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        with loops.for_range(b, 0, 100, "o"):
            with loops.for_range(b, 0, 64, "r", reduction=True):
                pass
        with loops.for_range(b, 0, 7, "s", reduction=True):   # small: its own no-vectorise hint
            pass
        b.ret_void()
        fns.append(fn)
    str(m)   # llvmlite caches instruction text: marking must still show
    assert loops.light_loops(fns[0]) == 1
    assert loops.light_loops(fns[0]) == 0
    text = str(m)
    assert text.count('"llvm.loop.unroll.disable"') == 1
    assert '!"llvm.loop.interleave.count", i32 1' in text
    light, hot = (str(f) for f in fns)
    assert re.search(r'br label %"o\.header", !llvm\.loop', light)
    assert not re.search(r'br label %"r\.header", !llvm\.loop', light)
    assert "!llvm.loop" in hot and not re.search(r'br label %"o\.header", !llvm\.loop', hot)


@pytest.mark.parametrize("name", ["conv", "dense"])
def test_module_text_is_llvmlites_printer(monkeypatch, name):
    """``program._module_text`` reuses kernels' printed text instead of printing the module again; it must
    give exactly what llvmlite's own ``str(module)`` gives (it follows llvmlite's ``Module.__repr__``)."""
    seen = []
    real = program._module_text

    def check(module, printed):
        text = real(module, printed)
        seen.append((text, str(module), real(module, {}), len(printed)))
        return text

    monkeypatch.setattr(program, "_module_text", check)
    compile_module(_module(name), CodegenOptions())
    assert seen
    for reused, printer, fresh, n_printed in seen:
        assert n_printed > 0   # some kernel text was reused
        assert reused == printer == fresh
