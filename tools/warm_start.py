"""A second process with the persistent compile cache against a cold one (issue 17).

Stage: a measurement tool over the whole pipeline (``python tools/warm_start.py``).

For each zoo function and mode, each round runs two child processes on a fresh cache directory: a *cold*
one (the directory empty: it compiles everything and fills the cache) and then a *warm* one (the same
directory: every cluster, clustering and grappler result is a hit). Each child times one first call (wall
and CPU: ``time.process_time``), the part of it that is TF's own tracing of the Python function (timed on
its own just before the call, which then finds the function traced: TF's first call pays it too), its compile-profile events, and a digest of its
outputs. Rounds alternate cold and warm in the same shell, so load changes hit both alike.

    python tools/warm_start.py small_cnn_infer:auto resnet50_infer:jit --rounds 3
    python tools/warm_start.py --child <function> auto|jit <cache dir> [PROF]   # one child (JSON on stdout)

The ratio is warm/cold of the medians; ``excl. trace`` subtracts each side's trace time first.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_TOOLS = Path(__file__).resolve().parent
REPLY = "@@WARM "


def child(function: str, mode: str, cache_dir: str, prof: str | None) -> None:
    """One first call of ``function`` in this process, with the persistent cache in ``cache_dir``."""
    os.environ["TFXLA_COMPILE_CACHE"] = cache_dir
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, str(_TOOLS))
    import numpy as np
    import tensorflow as tf

    import zoo

    model, kind = zoo.split_name(function)
    mf = zoo.build(model)[kind]
    args = [tf.constant(a) for a in mf.inputs]
    t_imp = time.perf_counter()
    import tfxla_cluster
    imported = time.perf_counter() - t_imp
    f = (tfxla_cluster.function(mf.fn, jit_compile=True) if mode == "jit"
         else tfxla_cluster.function(mf.fn, flags=zoo.AUTO_FLAGS))
    # TF's tracing of the Python function, timed on its own (the call then finds the concrete function
    # traced): TF's own first call pays it too.
    t0, c0 = time.perf_counter(), time.process_time()
    f._tf_function.get_concrete_function(*args)
    trace_wall, trace_cpu = time.perf_counter() - t0, time.process_time() - c0
    if prof:
        import cProfile
        pr = cProfile.Profile(time.thread_time)   # CPU of this thread (wall is inflated by load)
        pr.enable()
    t0, c0 = time.perf_counter(), time.process_time()
    out = [np.asarray(t) for t in tf.nest.flatten(tf.nest.map_structure(lambda t: t.numpy(), f(*args)))]
    wall, cpu = time.perf_counter() - t0 + trace_wall, time.process_time() - c0 + trace_cpu
    if prof:
        pr.disable()
        pr.dump_stats(prof)
    stats = f.compile_stats().as_dict()
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in out)).hexdigest()[:16]
    print(REPLY + json.dumps({"wall": wall, "cpu": cpu, "trace_wall": trace_wall, "trace_cpu": trace_cpu,
                              "import_tfxla": imported, "events": stats.get("events", {}),
                              "stages": stats["stages"], "digest": digest,
                              "llvmlite_binding": "llvmlite.binding" in sys.modules}), flush=True)


def run_child(function: str, mode: str, cache_dir: str, prof: str | None = None) -> dict:
    cmd = [sys.executable, __file__, "--child", function, mode, cache_dir] + ([prof] if prof else [])
    p = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8")
    for line in p.stdout.splitlines():
        if line.startswith(REPLY):
            return json.loads(line[len(REPLY):])
    raise RuntimeError(f"child failed ({p.returncode}): {p.stderr[-2000:]}")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(function: str, mode: str, rounds: int, prof: str | None) -> dict:
    cold, warm = [], []
    for r in range(rounds):
        d = tempfile.mkdtemp(prefix="tfxla-warm-")
        try:
            load = _load()
            cold.append(run_child(function, mode, d))
            warm.append(run_child(function, mode, d, prof if r == rounds - 1 else None))
            print(f"  round {r}: load {load}: cold wall {cold[-1]['wall']:.3f} cpu {cold[-1]['cpu']:.3f} | "
                  f"warm wall {warm[-1]['wall']:.3f} cpu {warm[-1]['cpu']:.3f} trace {warm[-1]['trace_cpu']:.3f} "
                  f"events {warm[-1]['events']} same outputs: {cold[-1]['digest'] == warm[-1]['digest']}",
                  file=sys.stderr, flush=True)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    med = lambda runs, k: statistics.median(x[k] for x in runs)  # noqa: E731
    out = {"function": function, "mode": mode, "load": _load()}
    for k in ("wall", "cpu"):
        c, w = med(cold, k), med(warm, k)
        c_excl = statistics.median(x[k] - x[f"trace_{k}"] for x in cold)
        w_excl = statistics.median(x[k] - x[f"trace_{k}"] for x in warm)
        out[k] = {"cold": c, "warm": w, "ratio": w / c, "cold_excl_trace": c_excl, "warm_excl_trace": w_excl,
                  "ratio_excl_trace": w_excl / max(c_excl, 1e-9)}
    out["trace_cpu"] = {"cold": med(cold, "trace_cpu"), "warm": med(warm, "trace_cpu")}
    out["warm_stages"] = warm[-1]["stages"]
    out["same_outputs"] = all(c["digest"] == w["digest"] for c, w in zip(cold, warm))
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        child(argv[1], argv[2], argv[3], argv[4] if len(argv) > 4 else None)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("functions", nargs="+", help="zoo function:mode, mode auto or jit (default auto)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prof", help="cProfile (CPU time of the calling thread) of the last warm child's first call to this file")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    results = []
    for spec in a.functions:
        function, _, mode = spec.partition(":")
        r = measure(function, mode or "auto", a.rounds, a.prof)
        results.append(r)
        print(f"{function} {mode or 'auto'} (load {r['load']}): "
              + "; ".join(f"{k} cold {r[k]['cold']:.3f} warm {r[k]['warm']:.3f} ratio {r[k]['ratio']:.2f} "
                          f"(excl. trace {r[k]['ratio_excl_trace']:.2f})" for k in ("cpu", "wall"))
              + f"; trace cpu cold {r['trace_cpu']['cold']:.3f} warm {r['trace_cpu']['warm']:.3f}; same outputs {r['same_outputs']}",
              flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
