"""Progress on long work: drawn on a terminal (stderr), nothing at all when stderr is not one."""
from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

from tfxla_cluster import progress

ROOT = Path(__file__).resolve().parent.parent


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch):
    # rich truncates the counter column on a narrow terminal; names grow with the process's counters
    # (cluster_1113, __inference_f_116726 late in the whole suite).
    monkeypatch.setenv("COLUMNS", "400")


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv("TFXLA_CLUSTER_PROGRESS", raising=False)


def test_not_a_terminal_prints_nothing():
    out = io.StringIO()
    assert list(progress.track([1, 2, 3], "work", stream=out)) == [1, 2, 3]
    with progress.task("more work", total=2, stream=out) as t:
        assert not t.active
        progress.note("compiled cluster_0")
        t.advance("cluster_1")
    assert t.done == 2 and out.getvalue() == ""


def test_terminal_shows_a_bar_that_counts():
    term = _Terminal()
    items = list(progress.track(["a", "b", "c"], "bench", stream=term, label=str))
    assert items == ["a", "b", "c"]
    text = term.getvalue()
    assert "bench: b" in text and "2/3" in text and "3/3" in text


def test_notes_advance_a_task_and_name_a_tracks_item():
    term = _Terminal()
    with progress.task("report: compiling and running clusters", total=2, stream=term) as t:
        assert t.active
        progress.note("compiled cluster_0")
        progress.note("compiled cluster_1")
    assert t.done == 2 and "compiled cluster_1" in term.getvalue() and "2/2" in term.getvalue()
    term = _Terminal()
    for _ in progress.track([1], "bench", stream=term):
        progress.note("compiled cluster_7")     # a compile inside a workload: shown, not counted
    assert "compiled cluster_7" in term.getvalue() and "1/1" in term.getvalue()


def test_env_switch(monkeypatch):
    monkeypatch.setenv("TFXLA_CLUSTER_PROGRESS", "0")
    assert not progress.enabled(_Terminal())
    monkeypatch.setenv("TFXLA_CLUSTER_PROGRESS", "1")
    assert progress.enabled(io.StringIO())


def _hlo(stderr_tty: bool) -> tuple[int, str, str]:
    """`tfxla-cluster hlo` on a sample with stderr on a pseudo-terminal or a pipe: (code, out, err)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_XLA_FLAGS", "TFXLA_CLUSTER_PROGRESS")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.setdefault("TERM", "xterm")
    cmd = [sys.executable, "-m", "tfxla_cluster", "hlo", "graphs/transformer_block.pbtxt", "--flags",
           "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"]
    if not stderr_tty:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
        return proc.returncode, proc.stdout, proc.stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, cwd=ROOT, env=env)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 300)
        if not ready:
            proc.kill()
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    out = proc.stdout.read().decode()
    code = proc.wait(timeout=300)
    os.close(master)
    return code, out, b"".join(chunks).decode(errors="replace")


def test_cli_shows_progress_only_on_a_terminal():
    code, out, err = _hlo(stderr_tty=True)
    assert code == 0 and "HloModule" in out
    assert "hlo: lowering clusters" in err
    assert "hlo: lowering clusters" not in out      # stdout (piped) stays clean
    code, out_piped, err = _hlo(stderr_tty=False)
    assert code == 0 and out_piped == out
    assert err == ""


def test_cluster_compiles_advance_the_open_task():
    """What `report` shows while it runs a graph: each cluster compile advances its task."""
    import tensorflow as tf

    import tfxla_cluster as txc

    term = _Terminal()
    f = txc.function(lambda x: tf.nn.relu(x * 3.0) + 1.0, jit_compile=True)
    with progress.task("report: compiling and running clusters", total=1, stream=term) as t:
        f(tf.ones([5]))
    assert t.done == 1 and "compiled cluster_0" in term.getvalue()


def test_first_call_of_a_function_with_several_clusters_counts_its_compiles(monkeypatch):
    import tensorflow as tf

    import tfxla_cluster as txc

    def f(x):
        y = tf.nn.relu(x * 2.0) + 1.0
        s = tf.strings.as_string(y)               # TF's kernels between two clusters
        z = tf.strings.to_number(s)
        return tf.tanh(z * 3.0) - 1.0

    g = txc.function(f, flags="--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1")
    x = tf.ones([4])
    assert len(g.get_compiled(x).launchers) == 2
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    np_out = g(x).numpy()
    text = term.getvalue()
    assert "compiling the clusters of" in text and "2/2" in text, text
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    g(x)                                          # compiled: no bar again
    assert term.getvalue() == ""
    monkeypatch.undo()
    assert (abs(np_out - tf.function(f)(x).numpy()) < 1e-6).all()
