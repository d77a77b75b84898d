"""``tfxla-cluster run-hlo`` (XLA's run_hlo_module): HLO text in, native results out.

Modules come from two printers: ours (a TF function lowered by tf2hlo, results compared with TF) and
real XLA's (jaxlib: unoptimized ``as_text(dialect="hlo")`` and optimized ``compile().as_text()`` with
fusions, layouts, metadata, backend_config and stack frame tables; results compared with jax). Bad
text and bad inputs exit 2 with ``file:line:column: what``; a difference from the evaluator exits 1.
"""
from __future__ import annotations

import numpy as np
import pytest

from tfxla_cluster import cli


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(["run-hlo", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


def _outputs(path) -> list[np.ndarray]:
    with np.load(path) as z:
        assert sorted(z.files) == [f"out{k}" for k in range(len(z.files))]
        return [z[f"out{k}"] for k in range(len(z.files))]


# ---------------------------------------------------------------------------------------- our printer
def test_our_printed_module_matches_tf(tmp_path, capsys):
    import tensorflow as tf

    from tfxla_cluster.tf2hlo.lower import lower_function

    @tf.function
    def f(x, w):
        h = tf.nn.relu(tf.matmul(x, w))
        return tf.nn.softmax(h), tf.reduce_max(h, axis=0), tf.cast(tf.argmax(h, axis=1), tf.int32)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    w = rng.standard_normal((7, 3)).astype(np.float32)
    lowered = lower_function(f, tf.constant(x), tf.constant(w))
    (tmp_path / "m.hlo").write_text(lowered.module.to_string())
    np.savez(tmp_path / "in.npz", arg0=x, arg1=w)
    code, out, err = _run(capsys, tmp_path / "m.hlo", "--inputs", tmp_path / "in.npz", "--output",
                          tmp_path / "out.npz", "--reference", "evaluator", "--iterations", "3")
    assert code == 0, err
    assert "median of 3 runs:" in out
    assert "evaluator: all 23 elements within" in out
    got = _outputs(tmp_path / "out.npz")
    want = [t.numpy() for t in f(tf.constant(x), tf.constant(w))]
    assert len(got) == 3
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
    assert got[2].dtype == np.int32
    np.testing.assert_array_equal(got[2], want[2])


def test_random_inputs_are_seeded_and_print_literals(tmp_path, capsys):
    (tmp_path / "m.hlo").write_text("""HloModule m

ENTRY e {
  p0 = f32[3] parameter(0)
  p1 = s32[3] parameter(1)
  c = f32[3] convert(p1)
  a = f32[3] add(p0, c)
  ROOT t = (f32[3], s32[3]) tuple(a, p1)
}
""")
    runs = []
    for seed in (5, 5, 6):
        code, out, _ = _run(capsys, tmp_path / "m.hlo", "--random-seed", seed, "--print-literals", "--output",
                            tmp_path / f"o{len(runs)}.npz")
        assert code == 0
        assert "arg0: f32[3] {" in out and "out1: s32[3] {" in out
        runs.append(_outputs(tmp_path / f"o{len(runs)}.npz"))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    assert not np.array_equal(runs[0][0], runs[2][0])
    # The tuple result is flattened: out0 = p0 + p1, out1 = p1 (an integer in [-8, 8)).
    assert runs[0][1].dtype == np.int32 and np.all((runs[0][1] >= -8) & (runs[0][1] < 8))


# ---------------------------------------------------------------------------------------- XLA's printer
def _jax_cases():
    import jax
    import jax.numpy as jnp
    from jax import lax

    rng = np.random.default_rng(1)

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    return jax, {
        "mlp_softmax": (lambda x, w, b: (jax.nn.softmax(jnp.tanh(x @ w + b), axis=-1), (x @ w).sum(0)),
                        (f32(4, 8), f32(8, 16), f32(16))),
        "conv_pool": (lambda x, k: lax.reduce_window(
            jax.nn.relu(lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))),
            -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"), (f32(1, 8, 8, 3), f32(3, 3, 3, 4))),
        "while_transpose": (lambda x: lax.fori_loop(0, 4, lambda i, v: jnp.sin(v) * 2.0 + i, x).T, (f32(3, 5),)),
        "gather_scatter_sort": (lambda x, i: (jnp.sort(x[i], axis=0), x.at[i].add(1.0), jnp.argsort(x[:, 0])),
                                (f32(10, 4), np.array([3, 1, 7, 3], np.int32))),
        "cond_select_int": (lambda p, x, n: (lax.cond(p > 0, lambda v: v * 2, lambda v: v - 1, x),
                                             jnp.where(n % 3 == 0, n // 3, -n), jnp.cumsum(x)),
                            (np.float32(-1.0), f32(6), np.arange(6, dtype=np.int32))),
        # unoptimized: the topk opcode; optimized: XLA:CPU's TopK custom call with a (value, index) comparator
        "top_k": (lambda x: lax.top_k(x, 3), (f32(4, 9),)),
    }


@pytest.mark.parametrize("optimized", [False, True], ids=["unoptimized", "optimized"])
def test_xla_printed_modules_match_jax(tmp_path, capsys, optimized):
    pytest.importorskip("jax")
    jax, cases = _jax_cases()
    for name, (fn, args) in cases.items():
        lowered = jax.jit(fn).lower(*args)
        text = lowered.compile().as_text() if optimized else lowered.as_text(dialect="hlo")
        if optimized and name != "top_k":
            assert "fusion(" in text, "XLA's optimized text should have fusions"
        path = tmp_path / f"{name}.hlo"
        path.write_text(text)
        np.savez(tmp_path / "in.npz", **{f"arg{k}": np.asarray(a) for k, a in enumerate(args)})
        code, _, err = _run(capsys, path, "--inputs", tmp_path / "in.npz", "--output", tmp_path / "out.npz",
                            "--reference", "evaluator")
        assert code == 0, f"{name}: {err}"
        got = _outputs(tmp_path / "out.npz")
        want = [np.asarray(w) for w in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]
        assert len(got) == len(want), name
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, name
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5, err_msg=name)


def test_xla_stack_frames_round_trip(tmp_path):
    pytest.importorskip("jax")
    from tfxla_cluster.hlo.parser import parse_module

    jax, cases = _jax_cases()
    fn, args = cases["mlp_softmax"]
    text = jax.jit(fn).lower(*args).compile().as_text()
    assert "StackFrames" in text
    module = parse_module(text)
    assert module.stack_frames.startswith("FileNames") and "StackFrames" in module.stack_frames
    printed = module.to_string()
    assert parse_module(printed).to_string() == printed


# ---------------------------------------------------------------------------------------- exit codes
_MODULE = """HloModule m

ENTRY %main (x: f32[4,3], n: s32[4]) -> (f32[4,3], f32[4,3]) {
  %x = f32[4,3]{1,0} parameter(0)
  %n = s32[4]{0} parameter(1)
  %c = f32[4]{0} convert(%n)
  %b = f32[4,3]{1,0} broadcast(%c), dimensions={0}
  %e = f32[4,3]{1,0} exponential(%x)
  %t = f32[4,3]{1,0} tanh(%x)
  %m = f32[4,3]{1,0} multiply(%e, %b)
  ROOT %r = (f32[4,3]{1,0}, f32[4,3]{1,0}) tuple(%m, %t)
}
"""


@pytest.mark.parametrize("arrays, where, message", [
    ({"arg0": np.zeros((4, 3), np.float32)}, "m.hlo:3:7:",
     ["ENTRY %main takes 2 parameters (arg0..arg1);", "in.npz has arg0"]),
    ({"arg0": np.zeros((4, 3), np.float32), "arg1": np.zeros(4, np.int32), "arg2": np.zeros(1)}, "m.hlo:3:7:",
     ["in.npz has arg0, arg1, arg2"]),
    ({"arg0": np.zeros((4, 3), np.float64), "arg1": np.zeros(4, np.int32)}, "m.hlo:4:3:",
     ["parameter 0 (%x) is f32[4,3];", "in.npz's arg0 is float64[4,3]"]),
    ({"arg0": np.zeros((4, 3), np.float32), "arg1": np.zeros(5, np.int32)}, "m.hlo:5:3:",
     ["parameter 1 (%n) is s32[4];", "in.npz's arg1 is int32[5] (dimensions differ)"]),
])
def test_bad_inputs_exit_2_at_the_parameter(tmp_path, capsys, arrays, where, message):
    (tmp_path / "m.hlo").write_text(_MODULE)
    np.savez(tmp_path / "in.npz", **arrays)
    code, out, err = _run(capsys, tmp_path / "m.hlo", "--inputs", tmp_path / "in.npz")
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert f"{tmp_path / where}" in err and all(m in err for m in message), err


@pytest.mark.parametrize("edit, where, message", [
    (("%n = s32[4]{0} parameter(1)", "%n = s32[4]{0} parameter(1), bogus=1"), "5:32:",
     "unexpected attribute bogus for parameter"),
    (("tanh(%x)", "tanh(%y)"), "9:27:", "instruction does not exist: y"),
    (("f32[4,3]{1,0} exponential", "f32[4,3]{1,0} exponentiate"), "8:21:", "unknown opcode: exponentiate"),
    (("%t = f32[4,3]{1,0} tanh", "%t = f32[4,2]{1,0} tanh"), "9:3:", "shape is f32[4,2]"),
])
def test_unparseable_hlo_exits_2_with_file_line_column(tmp_path, capsys, edit, where, message):
    (tmp_path / "m.hlo").write_text(_MODULE.replace(*edit))
    code, out, err = _run(capsys, tmp_path / "m.hlo")
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert f"{tmp_path / 'm.hlo'}:{where}" in err and message in err, err


def test_elided_constant_exits_2_at_the_constant(tmp_path, capsys):
    (tmp_path / "m.hlo").write_text(_MODULE.replace("  %c = f32[4]{0} convert(%n)\n",
                                                    "  %c = f32[4]{0} constant({...})\n"))
    code, out, err = _run(capsys, tmp_path / "m.hlo")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{tmp_path / 'm.hlo'}:6:3: constant %c was printed without its value" in err


def test_difference_beyond_bounds_exits_1_with_one_line(tmp_path, capsys):
    # Native exp/tanh are vectorised approximations, the evaluator's are numpy's: a few ulps apart on
    # 4096 random inputs — invisible at the default bounds, a failure at zero bounds.
    text = _MODULE.replace("4,3", "64,64").replace("[4]", "[64]").replace("s32[4]{0}", "s32[64]{0}") \
        .replace("f32[4]{0}", "f32[64]{0}")
    (tmp_path / "m.hlo").write_text(text)
    code, out, err = _run(capsys, tmp_path / "m.hlo", "--reference", "evaluator")
    assert code == 0 and "evaluator: all 8192 elements within" in out
    code, out, err = _run(capsys, tmp_path / "m.hlo", "--reference", "evaluator", "--abs-error-bound", "0",
                          "--rel-error-bound", "0")
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "elements differ; largest at out" in lines[0] and "native" in lines[0], err


def test_compare_follows_xla_error_spec():
    from tfxla_cluster.tools.run_hlo import compare

    a = [np.array([1.0, 2.0, np.nan, np.inf], np.float32)]
    assert compare(a, [a[0].copy()], 0, 0).ok                        # NaN == NaN, inf == inf
    r = compare(a, [np.array([1.0, 2.1, np.nan, np.inf], np.float32)], 0.01, 0.01)
    assert not r.ok and r.bad == 1 and r.index == (1,) and r.output == 0
    assert compare(a, [np.array([1.0, 2.1, np.nan, np.inf], np.float32)], 0.2, 0.0).ok   # within abs
    assert compare(a, [np.array([1.0, 2.1, np.nan, np.inf], np.float32)], 0.0, 0.05).ok  # within rel
    r = compare(a, [np.array([1.0, 2.0, 0.0, np.inf], np.float32)], 1.0, 1.0)
    assert not r.ok and r.index == (2,)                                # NaN vs number always differs


@pytest.mark.parametrize("sample", ["mlp.hlo", "mlp.optimized.hlo"])
def test_readme_sample_modules(tmp_path, capsys, sample):
    """The README's command on the committed XLA-printed samples; results equal the layer in numpy."""
    from pathlib import Path

    here = Path(__file__).resolve().parents[2] / "tools" / "examples" / "run_hlo"
    code, out, err = _run(capsys, here / sample, "--inputs", here / "mlp.inputs.npz", "--output",
                          tmp_path / "out.npz", "--reference", "evaluator", "--iterations", "2")
    assert code == 0, err
    with np.load(here / "mlp.inputs.npz") as z:
        x, w, b = (z[f"arg{k}"].astype(np.float64) for k in range(3))
    h = np.tanh(x @ w + b)
    e = np.exp(h - h.max(axis=-1, keepdims=True))
    probs, sums = _outputs(tmp_path / "out.npz")
    np.testing.assert_allclose(probs, e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sums, h.sum(axis=0), rtol=1e-5, atol=1e-5)


def test_help_has_a_runnable_example(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["run-hlo", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "tfxla-cluster run-hlo tools/examples/run_hlo/mlp.optimized.hlo --reference evaluator" in out
    assert "file:line:column" in out


@pytest.mark.parametrize("dump", ["convgrad.optimized_hlo.txt", "while.optimized_hlo.txt", "scatter.hlo.txt",
                                  "rng.optimized_hlo.txt"])
def test_tf_compiler_ir_dumps_agree_with_the_evaluator(capsys, dump):
    """TF 2.21's experimental_get_compiler_ir text (XLA's printer, via TF) runs and agrees."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "hlo" / "data" / "tf" / dump
    code, out, err = _run(capsys, path, "--reference", "evaluator", "--random-seed", 3)
    assert code == 0, err
    assert "evaluator: all" in out
