"""Benchmark: TF graph mode vs real XLA (jit_compile=True) vs ours, in one process run.

Stage: a measurement tool over the whole pipeline (``tfxla-cluster bench``, ``python tools/bench.py``).

For each workload: the median steady-state time of (a) ``tf.function`` without XLA, (b)
``tf.function(jit_compile=True)`` (real XLA:CPU), (c) ``tfxla_cluster.function(jit_compile=True)`` (our
lowering, passes and llvmlite code), over rounds that call the three in turn (a busy machine's load
changes hit all three alike); the first-call time (trace + compile) of real XLA and of ours;
the memory-bandwidth bound (minimum bytes moved ÷ copy bandwidth measured in the same run); and the
ratios. One-time process costs (imports, LLVM/XLA initialisation) are paid by a tiny warm-up function of
each compiler before anything is timed. Results agree with TF (checked every run). Prints a table, writes JSON.

TF graph mode is measured in both of TF's oneDNN modes, because which one is faster depends on the CPU:
this process runs in the mode its environment gives (see ``tfxla_cluster.hostinfo``), and a child
process (bounded in time) runs the graph-mode timings with ``TF_ENABLE_ONEDNN_OPTS`` flipped. The
comparison uses the faster mode per workload and says which. The header line names the CPU model,
its vector ISA and TF's oneDNN mode.

    tfxla-cluster bench                  # all workloads, full sizes (or: python tools/bench.py)
    tfxla-cluster bench --quick          # small sizes, few repeats (CI smoke)
    tfxla-cluster bench --only softmax,gelu --json out/bench.json
    tfxla-cluster bench --layers         # per-layer conv/GEMM table in GFLOP/s (bench_layers.py)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@dataclass
class Workload:
    name: str
    make: Callable[[bool], tuple[Callable, list, int]]  # quick -> (fn, args, min bytes moved)
    tol: float = 1e-4


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _workloads() -> list[Workload]:
    import tensorflow as tf

    def elementwise(quick):
        n = 1 << (18 if quick else 22)
        x = _rand(n)

        def f(x):
            y = x * 1.5 + 0.5
            y = tf.tanh(y) * y
            y = tf.maximum(y, 0.1) - x
            return tf.exp(-y * y) * 2.0
        return f, [x], 2 * 4 * n

    def reduce_sum(quick):
        n = 1 << (20 if quick else 24)
        x, y, z = _rand(n, seed=1), _rand(n, seed=2), _rand(n, seed=3)
        return (lambda x, y, z: tf.reduce_sum(x + y * z)), [x, y, z], 3 * 4 * n

    def layer_norm(quick):
        rows = 512 if quick else 4096
        x = _rand(rows, 1024)

        def f(x):
            mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
            return (x - mean) * tf.math.rsqrt(var + 1e-5)
        return f, [x], 2 * x.nbytes

    def softmax(quick):
        x = _rand(512 if quick else 4096, 1024)
        return tf.nn.softmax, [x], 2 * x.nbytes

    def gelu(quick):
        x = _rand(512 if quick else 4096, 1024)

        def f(x):
            return 0.5 * x * (1.0 + tf.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))
        return f, [x], 2 * x.nbytes

    def dense_relu(quick):
        x, w, b = _rand(256, 512), _rand(512, 512, seed=1), _rand(512, seed=2)
        return (lambda x, w, b: tf.nn.relu(tf.matmul(x, w) + b)), [x, w, b], x.nbytes + w.nbytes + 256 * 512 * 4

    def attention(quick):
        q, k, v = (_rand(8, 128, 64, seed=s) for s in range(3))

        def f(q, k, v):
            return tf.matmul(tf.nn.softmax(tf.matmul(q, k, transpose_b=True) / 8.0), v)
        return f, [q, k, v], 4 * q.nbytes

    def mlp_adam_step(quick):
        x, w1, w2, m1, m2 = _rand(256, 256), _rand(256, 512, seed=1), _rand(512, 10, seed=2), \
            np.zeros((256, 512), np.float32), np.zeros((512, 10), np.float32)

        def f(x, w1, w2, m1, m2):
            with tf.GradientTape() as tape:
                tape.watch([w1, w2])
                loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)))
            g1, g2 = tape.gradient(loss, [w1, w2])
            m1n, m2n = 0.9 * m1 + 0.1 * g1, 0.9 * m2 + 0.1 * g2
            return w1 - 0.01 * m1n / (tf.sqrt(tf.abs(m1n)) + 1e-8), w2 - 0.01 * m2n / (tf.sqrt(tf.abs(m2n)) + 1e-8), \
                m1n, m2n, loss
        return f, [x, w1, w2, m1, m2], 3 * (w1.nbytes + w2.nbytes) + x.nbytes

    def conv_block(quick):
        x, k = _rand(8, 32, 32, 16), _rand(3, 3, 16, 32, seed=1)

        def f(x, k):
            y = tf.nn.relu(tf.nn.conv2d(x, k, 1, "SAME") + 0.1)
            return tf.nn.max_pool2d(y, 2, 2, "VALID")
        return f, [x, k], x.nbytes + k.nbytes + 8 * 16 * 16 * 32 * 4

    return [Workload("elementwise_4M", elementwise), Workload("reduce_sum_16M", reduce_sum, 1e-2),
            Workload("layer_norm", layer_norm), Workload("softmax", softmax), Workload("gelu", gelu),
            Workload("dense_relu", dense_relu, 1e-3), Workload("attention", attention, 1e-3),
            Workload("mlp_adam_step", mlp_adam_step, 1e-3), Workload("conv_block", conv_block, 1e-3)]


# Launch-overhead rows (issue 15): what each cluster launch costs on top of its kernels. Times are per
# iteration of a 1000-step tf.while_loop (auto-clustering puts the body's clusters in the loop, one
# launch each per iteration), or per call of a tiny jit_compile=True function called from Python.
LOOP_STEPS = 1000
LAUNCH_ROWS = ("launch_empty_loop", "launch_rnn_loop", "launch_tiny_jit")
AUTO_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"


def _launch_cases(quick: bool) -> list[tuple[str, Callable, list, str]]:
    """(row, fn, args, how): ``how`` is "loop" (per iteration of LOOP_STEPS) or "call" (per call)."""
    import tensorflow as tf

    steps = 200 if quick else LOOP_STEPS

    def empty_loop(x):
        # Almost no work per launch: a scalar multiply-add per iteration.
        return tf.while_loop(lambda i, h: i < steps, lambda i, h: (i + 1, h * 0.5 + 1.0), (0, x))[1]

    def rnn_loop(x, w):
        # A small RNN-shaped cluster per iteration: matmul, add, tanh.
        return tf.while_loop(lambda i, h: i < steps, lambda i, h: (i + 1, tf.tanh(tf.matmul(h, w) + 0.5)),
                             (0, x))[1]

    def tiny(x):
        return x * 2.0 + 1.0
    return [("launch_empty_loop", empty_loop, [np.float32(0.5)], "loop"),
            ("launch_rnn_loop", rnn_loop, [_rand(4, 16), 0.1 * _rand(16, 16, seed=1)], "loop"),
            ("launch_tiny_jit", tiny, [_rand(16)], "call")]


def _launch_rows(names: list[str], quick: bool) -> list[dict]:
    """Per-iteration (or per-call) microseconds: TF graph, TF's XLA (jit_compile=True), ours with the
    native launch op, ours with the Python launch (``TFXLA_NATIVE_LAUNCH=0``); loops run auto-clustering,
    the tiny function jit_compile=True. ``launches`` counts our cluster launches per iteration."""
    import tensorflow as tf

    import tfxla_cluster as txc
    from tfxla_cluster.runtime import native

    repeats, min_s = (3, 0.05) if quick else (15, 0.5)
    steps = 200 if quick else LOOP_STEPS
    rows = []
    tf_auto, why = _tf_auto_times([n for n in names if n != "launch_tiny_jit"], quick)
    if why:
        print(f"TF's auto-clustering times: {why}", flush=True)
    for name, fn, arrays, how in _launch_cases(quick):
        if name not in names:
            continue
        tensors = [tf.constant(a) for a in arrays]
        per = steps if how == "loop" else 1
        graph = tf.function(fn)
        xla = tf.function(fn, jit_compile=True)
        jit = {"jit_compile": True} if how == "call" else {"flags": AUTO_FLAGS}
        ours = txc.function(fn, **jit)
        saved = os.environ.get("TFXLA_NATIVE_LAUNCH")
        os.environ["TFXLA_NATIVE_LAUNCH"] = "0"
        try:
            python_launch = txc.function(fn, **jit)
            python_launch(*tensors)     # traced (and bound) while the native launch is off
        finally:
            if saved is None:
                os.environ.pop("TFXLA_NATIVE_LAUNCH", None)
            else:
                os.environ["TFXLA_NATIVE_LAUNCH"] = saved
        ref = graph(*tensors)
        for f in (xla, ours):
            np.testing.assert_allclose(np.asarray(f(*tensors)), np.asarray(ref), rtol=1e-4, atol=1e-5)
        secs = _time_interleaved({k: (lambda f=f: f(*tensors)) for k, f in (
            ("graph", graph), ("xla", xla), ("ours", ours), ("python", python_launch))}, repeats, min_s)
        times = {k: 1e6 * v / per for k, v in secs.items()}
        compiled = ours.get_compiled(*tensors)
        launchers = compiled.launchers.values()
        before = sum(la.stats.executions for la in launchers)
        ours(*tensors)
        launches = (sum(la.stats.executions for la in launchers) - before) / per
        native_on = any(n.op == "TfxlaLaunch" for n in compiled.graph_def.node)
        rows.append(dict(row=name, per="iteration" if how == "loop" else "call", graph_us=times["graph"],
                         xla_us=times["xla"], xla_auto_us=tf_auto.get(name), ours_us=times["ours"],
                         python_launch_us=times["python"],
                         launches=launches, native=native_on or (how == "call" and compiled._direct is not None),
                         ours_vs_graph=times["ours"] / times["graph"], ours_vs_xla=times["ours"] / times["xla"],
                         overhead_per_launch_us=(times["ours"] - times["graph"]) / launches if launches else None))
    if rows and not native.available():
        print(f"native launch unavailable: {native.unavailable_reason()}", flush=True)
    return rows


def _tf_auto_loop_times(names: list[str], quick: bool) -> dict[str, float]:
    """The child's job: µs per iteration of each loop row under TF's own auto-clustering (this
    process's TF_XLA_FLAGS turn it on), as TF's XlaCompile/XlaRun launch each cluster per iteration."""
    import tensorflow as tf

    repeats, min_s = (3, 0.05) if quick else (15, 0.5)
    steps = 200 if quick else LOOP_STEPS
    out = {}
    for name, fn, arrays, how in _launch_cases(quick):
        if name in names and how == "loop":
            tensors = [tf.constant(a) for a in arrays]
            auto = tf.function(fn)
            auto(*tensors)
            out[name] = 1e6 * _time(lambda: auto(*tensors), repeats, min_s) / steps
    return out


def _child_json(cmd: list[str], env: dict, quick: bool) -> tuple[dict, str]:
    """Run a bench child process (bounded by OTHER_MODE_TIMEOUT); its last JSON line, or ({}, why not)."""
    import subprocess

    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=OTHER_MODE_TIMEOUT[quick])
    except subprocess.TimeoutExpired:
        return {}, f"timed out after {OTHER_MODE_TIMEOUT[quick]} s"
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return {}, f"child failed: {tail}"
    return json.loads(lines[-1]), ""


def _tf_auto_times(names: list[str], quick: bool) -> tuple[dict[str, float], str]:
    """Per-iteration µs of the loop rows under TF's auto-clustering, from a child process (TF reads
    ``TF_XLA_FLAGS`` once per process), and "" — or ({}, why not)."""
    if not names:
        return {}, ""
    cmd = [sys.executable, "-m", "tfxla_cluster.bench", "--tf-auto-child", "--only", ",".join(names)]
    cmd += ["--quick"] if quick else []
    env = {**os.environ, "TF_XLA_FLAGS": AUTO_FLAGS, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return _child_json(cmd, env, quick)


def _print_launch_rows(rows: list[dict]) -> None:
    print("\n| launch row | per | TF graph (µs) | TF XLA jit_compile (µs) | TF XLA auto-clustering (µs) | ours (µs) "
          "| ours, Python launch (µs) | launches | ours/graph | ours/XLA auto | (ours-graph)/launch (µs) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        over = f"{r['overhead_per_launch_us']:.1f}" if r["overhead_per_launch_us"] is not None else "-"
        auto = f"{r['xla_auto_us']:.2f}" if r["xla_auto_us"] is not None else "-"
        vs_auto = f"{r['ours_us'] / r['xla_auto_us']:.2f}" if r["xla_auto_us"] else "-"
        print(f"| {r['row']} | {r['per']} | {r['graph_us']:.2f} | {r['xla_us']:.2f} | {auto} | {r['ours_us']:.2f} | "
              f"{r['python_launch_us']:.2f} | {r['launches']:.0f} | {r['ours_vs_graph']:.2f} | {vs_auto} | {over} |")


# Timing: TF's eager runtime runs synchronously on CPU (and so do our launch ops), so a call returns when
# its outputs are computed. The outputs are not copied to numpy inside the timed region: that copy (2-3 ms
# for a 16 MB result) costs every framework the same and would hide their differences.
def _time(fn: Callable[[], Any], repeats: int, min_seconds: float) -> float:
    samples = []
    start = time.perf_counter()
    while len(samples) < repeats or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        if len(samples) >= 200:
            break
    return statistics.median(samples)


def _time_interleaved(fns: dict[str, Callable[[], Any]], repeats: int, min_seconds: float) -> dict[str, float]:
    """Median seconds of each function over rounds that call every one once, in turn: timed one after
    the other, a change of the machine's load between them would decide the ratio."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    start = time.perf_counter()
    rounds = 0
    while rounds < repeats or (time.perf_counter() - start < min_seconds * len(fns) and rounds < 200):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            samples[k].append(time.perf_counter() - t0)
        rounds += 1
    return {k: statistics.median(v) for k, v in samples.items()}


def copy_bandwidth() -> float:
    """Bytes/s of a large memcpy (read + write counted), the practical bound for streaming kernels."""
    a = np.ones(1 << 25, np.float32)
    b = np.empty_like(a)
    best = min(_time(lambda: np.copyto(b, a), 5, 0.2) for _ in range(3))
    return 2 * a.nbytes / best


def _warm_up(tf, txc) -> None:
    """Pay one-time process costs before any first call is timed, for both compilers alike: imports
    (our package's modules are compiled from source when bytecode caching is off), TF's kernel registry,
    LLVM's and XLA's initialisation. First-call times then measure trace + compile of the workload."""
    x = tf.constant(np.ones((4, 4), np.float32))
    for fn in (tf.function(lambda x: tf.nn.relu(x @ x) + 1.0, jit_compile=True),
               txc.function(lambda x: tf.nn.relu(x @ x) + 1.0, jit_compile=True)):
        fn(x)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The benchmark's options (shared by ``tools/bench.py`` and ``tfxla-cluster bench``)."""
    ap.add_argument("--quick", action="store_true", help="small sizes and few repeats (CI smoke)")
    ap.add_argument("--only", default="", help="comma-separated workload names (with --layers: words that "
                                                "select layers by label, e.g. resnet50,dw)")
    ap.add_argument("--layers", action="store_true",
                    help="per-layer table instead: conv/GEMM layer shapes of ResNet50, MobileNetV2, "
                         "EfficientNetB0, InceptionV3, BERT in GFLOP/s (ours, TF graph, TF's XLA, numpy sgemm)")
    ap.add_argument("--json", default="", help="write results here")
    ap.add_argument("--graph-modes", choices=("both", "current"), default="both",
                    help="time TF graph mode in both oneDNN modes and compare with the faster (default), or "
                         "only in this process's mode")
    ap.add_argument("--profile", action="store_true",
                    help="print each workload's first-call compile profile (stages per cluster); the JSON "
                         "always carries the per-stage totals")
    ap.add_argument("--graph-only-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tf-auto-child", action="store_true", help=argparse.SUPPRESS)


# Seconds the child that times TF graph mode in the other oneDNN mode may take.
OTHER_MODE_TIMEOUT = {True: 300, False: 1800}


def _graph_times(workloads: list[Workload], quick: bool) -> dict[str, float]:
    """Median graph-mode seconds per workload in this process (the child's job)."""
    import tensorflow as tf

    repeats, min_s = (3, 0.05) if quick else (10, 0.5)
    out = {}
    for w in workloads:
        fn, arrays, _ = w.make(quick)
        tensors = [tf.constant(a) for a in arrays]
        graph = tf.function(fn)
        graph(*tensors)   # trace
        out[w.name] = _time(lambda: graph(*tensors), repeats, min_s)
    return out


def _other_mode_graph_times(names: list[str], quick: bool, onednn: bool) -> tuple[dict[str, float], str]:
    """Graph-mode seconds per workload from a child with oneDNN set to ``onednn``, and "" — or ({}, why
    not) when the child fails or runs out of time."""
    from tfxla_cluster.hostinfo import ONEDNN_ENV

    cmd = [sys.executable, "-m", "tfxla_cluster.bench", "--graph-only-child", "--only", ",".join(names)]
    cmd += ["--quick"] if quick else []
    env = {**os.environ, ONEDNN_ENV: "1" if onednn else "0", "TF_CPP_MIN_LOG_LEVEL": "2"}
    data, why = _child_json(cmd, env, quick)
    if why:
        return {}, why
    if data["onednn"] != onednn:
        return {}, f"the child's TF ignored {ONEDNN_ENV}={int(onednn)}"
    return data["seconds"], ""


def _mode_note(row: dict) -> str:
    """Which oneDNN mode the graph time is from, and the other mode's time if measured."""
    mode = "on" if row["tf_graph_onednn"] else "off"
    other = row["tf_graph_onednn_off_ms" if row["tf_graph_onednn"] else "tf_graph_onednn_on_ms"]
    return f"{mode}" + (f", {'off' if mode == 'on' else 'on'} {other:.2f} ms" if other is not None else "")


def workload_names() -> list[str]:
    return [w.name for w in _workloads()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    return run(ap.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Run the selected workloads, print the table, write the JSON; 0 on success."""
    import os

    from tfxla_cluster.errors import InvalidArgumentError

    # First calls are compared with real XLA's, which has no persistent cache unless asked: ours stays
    # cold too (set TFXLA_COMPILE_CACHE to a directory to time a warm one).
    os.environ.setdefault("TFXLA_COMPILE_CACHE", "off")
    if getattr(args, "layers", False):
        from tfxla_cluster import bench_layers
        return bench_layers.run(args)
    known = workload_names() + list(LAUNCH_ROWS)
    wanted = [n for n in args.only.split(",") if n] if args.only else known
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise InvalidArgumentError(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(known)}")

    selected = [w for w in _workloads() if w.name in wanted]
    if getattr(args, "tf_auto_child", False):
        print(json.dumps(_tf_auto_loop_times(wanted, args.quick)), flush=True)
        return 0
    if getattr(args, "graph_only_child", False):
        from tfxla_cluster.hostinfo import onednn_enabled
        seconds = _graph_times(selected, args.quick)
        print(json.dumps({"onednn": onednn_enabled(), "seconds": seconds}), flush=True)
        return 0

    import tensorflow as tf

    import tfxla_cluster as txc
    from tfxla_cluster.hostinfo import host_dict, host_summary, onednn_enabled

    here = onednn_enabled()     # TF is imported: this is TF's own answer
    print(f"host: {host_summary()}", flush=True)
    other: dict[str, float] = {}
    other_note = "not measured (--graph-modes current)"
    if getattr(args, "graph_modes", "both") == "both" and selected:
        other, why = _other_mode_graph_times([w.name for w in selected], args.quick, not here)
        other_note = why or "measured in a child process"
    print(f"TF graph mode: oneDNN {'on' if here else 'off'} in this process; oneDNN {'off' if here else 'on'}: "
          f"{other_note}", flush=True)

    bw = copy_bandwidth()
    _warm_up(tf, txc)
    repeats, min_s = (3, 0.05) if args.quick else (10, 0.5)
    rows = []
    from tfxla_cluster import progress

    for w in progress.track(selected, "bench", label=lambda w: w.name):
        fn, arrays, min_bytes = w.make(args.quick)
        tensors = [tf.constant(a) for a in arrays]
        graph = tf.function(fn)
        xla = tf.function(fn, jit_compile=True)
        ours = txc.function(fn, jit_compile=True)
        ref = graph(*tensors)
        t0 = time.perf_counter()
        got_xla = xla(*tensors)
        first_xla = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = ours(*tensors)
        first_ours = time.perf_counter() - t0
        if getattr(args, "profile", False):
            print(f"{w.name}: first call {first_ours:.3f} s; " + ours.compile_stats().table(), flush=True)
        for g, r in zip(tf.nest.flatten(got), tf.nest.flatten(ref)):
            np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=w.tol, atol=w.tol)
        del got_xla
        secs = _time_interleaved({"graph": lambda: graph(*tensors), "xla": lambda: xla(*tensors),
                                  "ours": lambda: ours(*tensors)}, repeats, min_s)
        t_here, t_xla, t_ours = secs["graph"], secs["xla"], secs["ours"]
        by_mode = {here: t_here}
        if w.name in other:
            by_mode[not here] = other[w.name]
        fastest = min(by_mode, key=by_mode.get)
        t_graph = by_mode[fastest]
        row = dict(workload=w.name, tf_graph_ms=1e3 * t_graph, tf_graph_onednn=fastest,
                   tf_graph_onednn_on_ms=1e3 * by_mode[True] if True in by_mode else None,
                   tf_graph_onednn_off_ms=1e3 * by_mode[False] if False in by_mode else None,
                   xla_ms=1e3 * t_xla, ours_ms=1e3 * t_ours,
                   first_call_xla_s=first_xla, first_call_ours_s=first_ours,
                   first_call_ours_stages=ours.compile_stats().totals(),
                   bandwidth_bound_ms=1e3 * min_bytes / bw, ours_vs_graph=t_ours / t_graph,
                   ours_vs_xla=t_ours / t_xla, bandwidth_fraction=(min_bytes / bw) / t_ours)
        rows.append(row)
        print(f"{w.name:16s} graph {row['tf_graph_ms']:8.2f} ms ({_mode_note(row)})  xla {row['xla_ms']:8.2f} ms  "
              f"ours {row['ours_ms']:8.2f} ms  ours/graph {row['ours_vs_graph']:5.2f}  "
              f"ours/xla {row['ours_vs_xla']:5.2f}  first xla {first_xla:5.2f}s ours {first_ours:5.2f}s  "
              f"bw {100 * row['bandwidth_fraction']:4.0f}%",
              flush=True)

    launch_rows = _launch_rows([n for n in wanted if n in LAUNCH_ROWS], args.quick)

    def geomean(key: str) -> float:
        return math.exp(sum(math.log(r[key]) for r in rows) / len(rows)) if rows else float("nan")

    host = host_dict()
    summary = {"machine": f"{host['cpu_model']}, {host['vector_isa']}, {os.cpu_count()} cores", "host": host,
               "tf_onednn_in_process": here, "tf_graph_other_mode": other_note,
               "copy_bandwidth_GBps": bw / 1e9, "geomean_ours_vs_graph": geomean("ours_vs_graph"),
               "geomean_ours_vs_xla": geomean("ours_vs_xla"), "quick": args.quick, "rows": rows,
               "launch_rows": launch_rows}
    if rows:
        print("\n| workload | TF graph (ms) | TF oneDNN | real XLA (ms) | ours (ms) | ours/graph | ours/XLA "
              "| first call XLA (s) | first call ours (s) | % of copy bandwidth |")
        print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['workload']} | {r['tf_graph_ms']:.2f} | {_mode_note(r)} | {r['xla_ms']:.2f} | "
              f"{r['ours_ms']:.2f} | {r['ours_vs_graph']:.2f} | {r['ours_vs_xla']:.2f} | "
              f"{r['first_call_xla_s']:.2f} | {r['first_call_ours_s']:.2f} | {100 * r['bandwidth_fraction']:.0f}% |")
    if launch_rows:
        _print_launch_rows(launch_rows)
    if rows:
        print(f"\ngeomean ours/graph {summary['geomean_ours_vs_graph']:.2f}, "
              f"ours/XLA {summary['geomean_ours_vs_xla']:.2f}; copy bandwidth {summary['copy_bandwidth_GBps']:.1f} "
              f"GB/s; {summary['machine']}; TF graph mode in the faster oneDNN mode per workload")
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
