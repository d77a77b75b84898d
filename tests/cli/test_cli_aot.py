"""``tfxla-cluster aot`` (tfcompile): object + header, linked by the system C compiler, compared with TF.

The example in tools/examples/aot is built with its own Makefile and run on inputs written here; a
second graph exercises what the example does not (a variable the graph reads and assigns, kernels
split over the linked-in thread pool, a bool feed). Bad graphs and configs exit 2 with one line.
"""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfxla_cluster import cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tools" / "examples" / "aot"


def _cc() -> str:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler (cc, gcc or clang) on PATH: the AOT object cannot be linked here")
    return cc


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _tf_run(graph_def, feeds: dict, fetches: list[str], setup=None, after: list[str] = ()):
    """Run ``graph_def`` with TF's own kernels (a v1 session); ``after`` is fetched in a second run."""
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=g) as sess:
        if setup:
            setup(sess)
        values = sess.run(fetches, {f"{k}:0": v for k, v in feeds.items()})
        return values + (sess.run(list(after)) if after else [])


def _elf_header(path: Path) -> tuple[int, int]:
    """(e_type, e_machine) of an ELF64 file: 1 = relocatable, 62 = x86-64."""
    data = path.read_bytes()[:20]
    assert data[:4] == b"\x7fELF" and data[4] == 2, "not an ELF64 file"
    return struct.unpack_from("<HH", data, 16)


@pytest.mark.parametrize("aotflags", ["", "--target-cpu=x86-64"], ids=["host", "baseline-x86-64"])
def test_example_makefile_builds_and_matches_tf(tmp_path, aotflags):
    cc = _cc()
    if not shutil.which("make"):
        pytest.skip("no make on PATH")
    build = tmp_path / "build"
    proc = subprocess.run(["make", "-C", str(EXAMPLE), "all", f"BUILD={build}", f"CC={cc}", f"AOTFLAGS={aotflags}",
                           f"TFXLA={sys.executable} -m tfxla_cluster"], env=_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _elf_header(build / "mlp.o") == (1, 62)
    header = (build / "mlp.h").read_text(encoding="utf-8")
    if aotflags:
        assert "cpu x86-64;" in header
    for line in ("#define mlp_NUM_ARGS 1", "#define mlp_NUM_RESULTS 2",
                 "extern const int64_t mlp_arg_bytes[mlp_NUM_ARGS];",
                 "extern const int64_t mlp_result_bytes[mlp_NUM_RESULTS];",
                 "int mlp_run(const void* const* args, void* const* results);  /* 0 on success */",
                 '//   arg 0: "x" (feed x:0) DT_FLOAT [2,8], 64 bytes',
                 '//   result 0: "probs" (fetch probs:0) DT_FLOAT [2,4], 32 bytes',
                 '//   result 1: "label" (fetch label:0) DT_INT64 [2], 16 bytes'):
        assert line in header, line

    # The built-in input: the program prints a label and probabilities summing to one per row.
    demo = subprocess.run([str(build / "mlp")], capture_output=True, text=True, check=True).stdout
    assert demo.count("label") == 2

    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    x.tofile(tmp_path / "in" / "arg0.bin")
    subprocess.run([str(build / "mlp"), str(tmp_path / "in"), str(tmp_path / "out")], check=True)
    probs = np.fromfile(tmp_path / "out" / "result0.bin", np.float32).reshape(2, 4)
    label = np.fromfile(tmp_path / "out" / "result1.bin", np.int64)

    from tfxla_cluster.graph import read_graph_def

    want_probs, want_label = _tf_run(read_graph_def(EXAMPLE / "model.pbtxt"), {"x": x}, ["probs:0", "label:0"])
    np.testing.assert_allclose(probs, want_probs, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(label, want_label)


# A graph with a variable (read, then assigned), a bool feed, and a 128x256x256 matmul big enough to be
# split across threads.
def _variable_graph():
    rng = np.random.default_rng(7)
    w = rng.standard_normal((256, 256)).astype(np.float32) * 0.1
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 256], name="x")
        mask = tf.compat.v1.placeholder(tf.bool, [128], name="mask")
        v = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[256], shared_name="v", name="v")
        r = tf.raw_ops.ReadVariableOp(resource=v, dtype=tf.float32, name="read")
        y = tf.nn.tanh(tf.matmul(x, tf.constant(w)) + r, name="y")
        picked = tf.where(mask[:, None], y, -y)
        with tf.control_dependencies([y]):
            upd = tf.raw_ops.AssignAddVariableOp(resource=v, value=tf.reduce_sum(x, 0), name="update")
        with tf.control_dependencies([upd]):
            tf.identity(picked, name="out")
        init_value = tf.compat.v1.placeholder(tf.float32, [256], name="init_value")
        tf.raw_ops.AssignVariableOp(resource=v, value=init_value, name="init")
        tf.raw_ops.ReadVariableOp(resource=v, dtype=tf.float32, name="read_after")
    return g.as_graph_def()


_VARIABLE_CONFIG = """
feed { id { node_name: "x" } shape { dim { size: 128 } dim { size: 256 } } name: "x" }
feed { id { node_name: "mask" } shape { dim { size: 128 } } name: "mask" }
fetch { id { node_name: "out" } name: "out" }
variable { node_name: "v" shape { dim { size: 256 } } type: DT_FLOAT name: "v" }
"""

_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "NAME.h"
static void* slurp(const char* path, long n) {
  void* p = malloc(n); FILE* f = fopen(path, "rb");
  if (!f || fread(p, 1, n, f) != (size_t)n) { perror(path); exit(3); }
  fclose(f); return p;
}
int main(int argc, char** argv) {
  (void)argc;
  const void* args[NAME_NUM_ARGS]; void* results[NAME_NUM_RESULTS]; char path[4096];
  for (int k = 0; k < NAME_NUM_ARGS; ++k) {
    snprintf(path, sizeof path, "%s/arg%d.bin", argv[1], k); args[k] = slurp(path, NAME_arg_bytes[k]);
  }
  for (int k = 0; k < NAME_NUM_RESULTS; ++k) results[k] = malloc(NAME_result_bytes[k]);
  int rc = NAME_run(args, results);
  for (int k = 0; k < NAME_NUM_RESULTS; ++k) {
    snprintf(path, sizeof path, "%s/result%d.bin", argv[1], k);
    FILE* f = fopen(path, "wb"); fwrite(results[k], 1, NAME_result_bytes[k], f); fclose(f);
  }
  return rc;
}
"""


@pytest.mark.parametrize("threads", [1, 4])
def test_variable_bool_feed_and_threads_match_tf(tmp_path, capsys, threads):
    cc = _cc()
    gd = _variable_graph()
    (tmp_path / "g.pb").write_bytes(gd.SerializeToString())
    (tmp_path / "c.pbtxt").write_text(_VARIABLE_CONFIG)
    assert cli.main(["aot", "--graph", str(tmp_path / "g.pb"), "--config", str(tmp_path / "c.pbtxt"),
                     "--name", "vmodel", "--out-dir", str(tmp_path), "--threads", str(threads)]) == 0
    printed = capsys.readouterr().out
    assert "result 1: v (updated variable v) DT_FLOAT [256] 1024 bytes" in printed
    header = (tmp_path / "vmodel.h").read_text(encoding="utf-8")
    assert '//   arg 2: "v" (variable v) DT_FLOAT [256], 1024 bytes' in header
    assert '//   arg 1: "mask" (feed mask:0) DT_BOOL [128], 128 bytes' in header
    undefined = subprocess.run(["nm", "-u", str(tmp_path / "vmodel.o")], capture_output=True, text=True).stdout \
        if shutil.which("nm") else ""
    if threads > 1 and undefined:
        assert "pthread_create" in undefined  # the pool is linked in only when kernels are split
    elif undefined:
        assert "pthread" not in undefined
    (tmp_path / "driver.c").write_text(_DRIVER.replace("NAME", "vmodel"))
    subprocess.run([cc, "-O1", "-I", str(tmp_path), str(tmp_path / "driver.c"), str(tmp_path / "vmodel.o"),
                    "-lm", "-lpthread", "-o", str(tmp_path / "driver")], check=True)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((128, 256)).astype(np.float32)
    mask = rng.integers(0, 2, 128).astype(bool)
    v0 = rng.standard_normal(256).astype(np.float32)
    x.tofile(tmp_path / "arg0.bin")
    mask.tofile(tmp_path / "arg1.bin")
    v0.tofile(tmp_path / "arg2.bin")
    subprocess.run([str(tmp_path / "driver"), str(tmp_path)], check=True)
    out = np.fromfile(tmp_path / "result0.bin", np.float32).reshape(128, 256)
    v1 = np.fromfile(tmp_path / "result1.bin", np.float32)

    def init(sess):
        sess.run("init", {"init_value:0": v0})

    want_out, want_v1 = _tf_run(gd, {"x": x, "mask": mask}, ["out:0"], setup=init,
                               after=["read_after:0"])
    np.testing.assert_allclose(out, want_out, rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(v1, want_v1, rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------------------- bad input
_GOOD_FEED = 'feed { id { node_name: "x" } shape { dim { size: 2 } dim { size: 8 } } }\n'
_GOOD_FETCH = 'fetch { id { node_name: "probs" } }\n'


@pytest.mark.parametrize("config, message", [
    ('feed { id { node_name: "nope" } shape { dim { size: 2 } } }\n' + _GOOD_FETCH,
     "feed 0 (nope:0): the graph has no node named 'nope'"),
    (_GOOD_FEED + 'fetch { id { node_name: "probs" output_index: 3 } }\n',
     "fetch 0 (probs:3): output index 3 is out of range; node 'probs' (Softmax) has 1 outputs"),
    ('feed { id { node_name: "x" } shape { dim { size: 2 } dim { size: 5 } } }\n' + _GOOD_FETCH,
     "feed 0 (x:0): config shape [2,5] disagrees with the graph's [?,8]"),
    ('feed { id { node_name: "x" } shape { dim { size: 2 } dim { size: 8 } } type: DT_INT32 }\n' + _GOOD_FETCH,
     "feed 0 (x:0): config type DT_INT32 disagrees with the graph's DT_FLOAT"),
    (_GOOD_FETCH, "the fetches need placeholder 'x', which the config does not feed"),
    (_GOOD_FEED + "fetch { id { node_name: ",
     "not a tf2xla.Config"),
    (_GOOD_FEED, "the config has no fetch"),
    (_GOOD_FEED + _GOOD_FETCH + 'variable { node_name: "w1" shape { } type: DT_FLOAT }\n',
     "variable 0: node 'w1' is a Const, not a VarHandleOp"),
])
def test_bad_config_exits_2_with_one_line(tmp_path, capsys, config, message):
    (tmp_path / "c.pbtxt").write_text(config)
    code = cli.main(["aot", "--graph", str(EXAMPLE / "model.pbtxt"), "--config", str(tmp_path / "c.pbtxt"),
                     "--name", "m", "--out-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert message in err
    assert not (tmp_path / "out" / "m.o").exists()


@pytest.mark.parametrize("config, message", [
    (_VARIABLE_CONFIG.replace('name: "v" }', 'name: "v" readonly: true }'),
     'Variable "v" is marked as readonly, but is modified by the computation.'),
    (_VARIABLE_CONFIG.replace('node_name: "out"', 'node_name: "y"'),   # y does not need the update
     'Variable "v" is marked as not readonly, but is not modified by the computation.'),
    (_VARIABLE_CONFIG + 'fetch { id { node_name: "init_value" } }\n'.replace("init_value", "Const"),
     "resulted in 1 constant results.  The configuration of the output args (i.e. fetch ids) is probably wrong."),
])
def test_tf2xla_result_checks_exit_2(tmp_path, capsys, config, message):
    """tf2xla.cc's checks after lowering, with its messages: readonly bits, constant results."""
    (tmp_path / "g.pb").write_bytes(_variable_graph().SerializeToString())
    (tmp_path / "c.pbtxt").write_text(config)
    assert cli.main(["aot", "--graph", str(tmp_path / "g.pb"), "--config", str(tmp_path / "c.pbtxt"),
                     "--name", "m", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_bad_graph_and_name_exit_2(tmp_path, capsys):
    (tmp_path / "c.pbtxt").write_text(_GOOD_FEED + _GOOD_FETCH)
    (tmp_path / "g.pbtxt").write_text("node { name: ")
    assert cli.main(["aot", "--graph", str(tmp_path / "g.pbtxt"), "--config", str(tmp_path / "c.pbtxt"),
                     "--name", "m", "--out-dir", str(tmp_path)]) == 2
    assert "g.pbtxt" in capsys.readouterr().err
    assert cli.main(["aot", "--graph", str(EXAMPLE / "model.pbtxt"), "--config", str(tmp_path / "c.pbtxt"),
                     "--name", "my-model", "--out-dir", str(tmp_path)]) == 2
    assert "--name 'my-model' is not a C identifier" in capsys.readouterr().err
    assert cli.main(["aot", "--graph", str(EXAMPLE / "model.pbtxt"), "--config", str(tmp_path / "c.pbtxt"),
                     "--name", "m", "--out-dir", str(tmp_path), "--target-cpu", "no-such-cpu"]) == 2
    err = capsys.readouterr().err
    assert "'no-such-cpu' is not a recognized processor" in err and len(err.strip().splitlines()) == 1


def test_unused_feed_stays_an_argument_and_shape_feeds_are_refused(tmp_path, capsys):
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4], name="x")
        s = tf.compat.v1.placeholder(tf.int32, [2], name="s")
        tf.compat.v1.placeholder(tf.float32, [3], name="unused")
        tf.reshape(x, s, name="r")
        tf.identity(x * 2, name="y")
    (tmp_path / "g.pbtxt").write_text(str(g.as_graph_def()))
    (tmp_path / "c.pbtxt").write_text('feed { id { node_name: "x" } shape { dim { size: 4 } } }\n'
                                      'feed { id { node_name: "unused" } shape { dim { size: 3 } } }\n'
                                      'fetch { id { node_name: "y" } }\n')
    argv = ["aot", "--graph", str(tmp_path / "g.pbtxt"), "--config", str(tmp_path / "c.pbtxt"), "--name", "m",
            "--out-dir", str(tmp_path)]
    assert cli.main(argv) == 0
    header = (tmp_path / "m.h").read_text(encoding="utf-8")
    assert "#define m_NUM_ARGS 2" in header and '//   arg 1: "unused" (feed unused:0) DT_FLOAT [3], 12 bytes' in header
    capsys.readouterr()
    (tmp_path / "c.pbtxt").write_text('feed { id { node_name: "x" } shape { dim { size: 4 } } }\n'
                                      'feed { id { node_name: "s" } shape { dim { size: 2 } } }\n'
                                      'fetch { id { node_name: "r" } }\n')
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "feed 1 (s:0) reaches input 1 of node 'r' (Reshape), which must be a compile-time constant" in err


def test_help_has_a_runnable_example(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["aot", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "tfxla-cluster aot --graph tools/examples/aot/model.pbtxt" in out
    assert "int NAME_run(const void* const* args, void* const* results);" in out


def test_half_types_on_the_baseline_cpu_match_tf(tmp_path, capsys):
    """f16 in, bf16 and f16 out, for plain x86-64 (no F16C: conversions go through the C compiler's
    runtime, which every C compiler links)."""
    cc = _cc()
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float16, [8], name="x")
        tf.cast(tf.exp(tf.cast(x, tf.float32)) * 2, tf.bfloat16, name="y")
        tf.identity(x * x - 1, name="z")
    (tmp_path / "g.pbtxt").write_text(str(g.as_graph_def()))
    (tmp_path / "c.pbtxt").write_text('feed { id { node_name: "x" } shape { dim { size: 8 } } }\n'
                                      'fetch { id { node_name: "y" } }\nfetch { id { node_name: "z" } }\n')
    assert cli.main(["aot", "--graph", str(tmp_path / "g.pbtxt"), "--config", str(tmp_path / "c.pbtxt"),
                     "--name", "half", "--out-dir", str(tmp_path), "--target-cpu", "x86-64"]) == 0
    assert "DT_BFLOAT16 [8], 16 bytes" in (tmp_path / "half.h").read_text(encoding="utf-8")
    (tmp_path / "driver.c").write_text(_DRIVER.replace("NAME", "half"))
    subprocess.run([cc, "-I", str(tmp_path), str(tmp_path / "driver.c"), str(tmp_path / "half.o"), "-lm",
                    "-o", str(tmp_path / "driver")], check=True)
    x = np.linspace(-2, 3, 8).astype(np.float16)
    x.tofile(tmp_path / "arg0.bin")
    subprocess.run([str(tmp_path / "driver"), str(tmp_path)], check=True)
    y = np.fromfile(tmp_path / "result0.bin", tf.bfloat16.as_numpy_dtype)
    z = np.fromfile(tmp_path / "result1.bin", np.float16)
    want_y, want_z = _tf_run(g.as_graph_def(), {"x": x}, ["y:0", "z:0"])
    np.testing.assert_allclose(y.astype(np.float32), want_y.astype(np.float32), rtol=1e-2)
    np.testing.assert_array_equal(z, want_z)
