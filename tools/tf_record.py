"""Record what real TensorFlow's XLA auto-clustering does to a tf.function.

Library + CLI. A *target* is ``<file.py or dotted.module>:<name>``; ``name`` is looked up in the
module's ``REGISTRY`` dict (builders registered by ``tools/corpus.py`` / ``tools/make_graphs.py``)
and then as a module attribute. A builder is a zero-argument callable returning a :class:`Sample`
(or a ``(fn, inputs)`` tuple); a bare ``tf.function`` with an ``input_signature`` is accepted too.

Every recording runs in a FRESH subprocess because TF parses ``TF_XLA_FLAGS`` once per process and
both the cluster sequence number (``cluster_<n>``) and ``--tf_xla_clustering_fuel`` are
process-global. The child runs with::

    TF_XLA_FLAGS="<flags> --tf_xla_clustering_debug"   TF_DUMP_GRAPH_PREFIX=<tmp>
    TF_DUMP_GRAPH_NAME_FILTER='*'                        (named per-function dumps, see below)
    TF_CPP_MIN_LOG_LEVEL=0  TF_CPP_VMODULE=mark_for_compilation_pass=3,compilability_check_util=3,...

and calls the function once on fixed inputs between two stderr markers.

How dumps are attributed (found by experiment with TF 2.21):

* MarkForCompilationPass runs once per *instantiated graph*: each distinct eager op (TF2 runs eager
  ops as single-op functions, e.g. the ``_EagerConst`` made when numpy inputs are converted), the
  user's function body (inlined, after Grappler, CloneConstants and ClusterScoping), and any
  function instantiated separately (``_noinline`` callees, py_function's eager ops, ...).
* A run only dumps (``before_mark_for_compilation[_k]``, ``mark_for_compilation[_k]``,
  ``mark_for_compilation_annotated[_k]``) when it has at least one compilation candidate; ``_k``
  is a per-file-name process-global counter, so the three names share ``k``.
* With ``TF_DUMP_GRAPH_NAME_FILTER='*'`` the function runtime also writes
  ``<fname>.<NNNN>.main.before_opt_group_post_rewrite_for_exec.pbtxt`` / ``after_...`` around the
  POST_REWRITE_FOR_EXEC pass group, on the same thread; a pass run in between belongs to ``fname``
  (e.g. ``__inference_f_55``). Runs outside such a bracket are eager single-op graphs.

The recording's ``meta.json`` lists every pass run in process order with its function, thread,
dumps, the cluster names it created and ``clusters_before`` (clusters created earlier in the same
process, which is where our cluster numbering must start).

CLI::

    python tools/tf_record.py tools/corpus.py:unique_split -o /tmp/rec \
        --flags "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

# --tf_xla_auto_jit=2 alone would leave CPU at kIfExplicitlyRequested; cpu_global_jit enables it.
DEFAULT_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
DEBUG_FLAG = "--tf_xla_clustering_debug"
VMODULE = "mark_for_compilation_pass=3,compilability_check_util=3,xla_cluster_util=3,device_util=3"
# VLOG_IS_ON(1) in these files is TF's trigger for the encapsulate_* and build_xla_ops dumps.
POST_CLUSTERING_VMODULE = "encapsulate_subgraphs_pass=1,build_xla_ops_pass=1"
POST_CLUSTERING_DUMPS = ("before_increase_dynamism_for_auto_jit_pass", "encapsulate_subgraphs_before",
                         "encapsulate_subgraphs_subgraph_", "encapsulate_fdef_graph_", "encapsulate_fdef_",
                         "encapsulate_subgraphs_after", "build_xla_ops")
MARKER = "@@TFREC"
# Source files whose log lines make up the reason log (everything else is start-up noise).
LOG_SOURCES = ("mark_for_compilation_pass.cc", "compilability_check_util.cc", "xla_cluster_util.cc",
               "device_util.cc", "dump_graph.cc", "deadness_analysis.cc", "flags.cc",
               "parse_flags_from_env.cc", "command_line_flags.cc")
MARK_DUMPS = ("before_mark_for_compilation", "mark_for_compilation",
              "mark_for_compilation_annotated")
POST_REWRITE_BEGIN = "main.before_opt_group_post_rewrite_for_exec"
POST_REWRITE_END = "main.after_opt_group_post_rewrite_for_exec"

_LOG_RE = re.compile(r"^([IWEF])\d{4} [\d:.]+\s+(\d+) ([\w.\-]+:\d+)\] ?(.*)$")
_DUMP_RE = re.compile(r"Dumped (?:Graph|GraphDef|FunctionDef) to (.*)$")


# ----------------------------------------------------------------------------- samples

@dataclasses.dataclass
class Sample:
    """A function plus the fixed inputs to call it with.

    ``fn`` is a plain Python function (wrapped with ``tf.function(input_signature=...)`` from the
    inputs) or an existing ``tf.function``. ``variables`` maps a name to a ``tf.Variable`` the
    function captures; builders create them with fixed initial values so every call of the builder
    starts from the same state.
    """

    fn: Callable[..., Any]
    inputs: list[np.ndarray]
    input_names: list[str] | None = None
    variables: dict[str, Any] = dataclasses.field(default_factory=dict)
    description: str = ""

    def names(self) -> list[str]:
        return self.input_names or [f"x{i}" for i in range(len(self.inputs))]


def as_sample(obj: Any) -> Sample:
    """Normalise what a builder returned (Sample, (fn, inputs) tuple, or tf.function)."""
    if hasattr(obj, "fn") and hasattr(obj, "inputs"):
        return obj  # duck-typed: the module may have imported its own copy of this file
    if isinstance(obj, tuple):
        return Sample(obj[0], list(obj[1]))
    sig = getattr(obj, "input_signature", None)
    if sig is not None:
        rng = np.random.default_rng(0)
        inputs = [_default_input(spec, rng) for spec in sig]
        return Sample(obj, inputs, [spec.name or f"x{i}" for i, spec in enumerate(sig)])
    raise TypeError(f"builder returned {type(obj).__name__}; expected Sample, (fn, inputs) or a "
                    "tf.function with an input_signature")


def _default_input(spec: Any, rng: np.random.Generator) -> np.ndarray:
    shape = [d if d is not None else 2 for d in spec.shape.as_list()]
    dt = spec.dtype.as_numpy_dtype
    if np.issubdtype(dt, np.floating):
        return rng.standard_normal(shape).astype(dt)
    if np.issubdtype(dt, np.integer):
        return rng.integers(0, 4, shape).astype(dt)
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    return np.full(shape, b"a", dtype=object)


def load_module(spec: str) -> Any:
    """Import ``path/to/file.py`` (by path; its directory goes on sys.path) or ``dotted.module``."""
    if spec.endswith(".py") or os.sep in spec:
        path = Path(spec).resolve()
        sys.path.insert(0, str(path.parent))
        name = f"_tfrec_{path.stem}"
        if name in sys.modules:
            return sys.modules[name]
        mod_spec = importlib.util.spec_from_file_location(name, path)
        assert mod_spec and mod_spec.loader, spec
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[name] = module
        mod_spec.loader.exec_module(module)
        return module
    return importlib.import_module(spec)


def load_target(target: str) -> Callable[[], Any]:
    """Resolve ``module:name`` to a builder (REGISTRY entry or module attribute)."""
    if ":" not in target:
        raise ValueError(f"target {target!r} must look like 'file.py:name' or 'module:name'")
    mod_name, _, name = target.rpartition(":")
    module = load_module(mod_name)
    registry = getattr(module, "REGISTRY", {})
    if name in registry:
        entry = registry[name]
        return getattr(entry, "build", entry)
    obj = getattr(module, name, None)
    if obj is None:
        raise KeyError(f"{name!r} is neither in {mod_name}'s REGISTRY nor a module attribute")
    if hasattr(obj, "get_concrete_function"):
        return lambda: obj  # a tf.function: as_sample() derives inputs from its signature
    return obj


def make_tf_function(sample: Sample, **kwargs: Any) -> Any:
    """The ``tf.function`` to record: input signature from the fixed inputs and their names."""
    import tensorflow as tf

    if hasattr(sample.fn, "get_concrete_function") and not kwargs:
        return sample.fn
    fn = getattr(sample.fn, "python_function", sample.fn)
    sig = [tf.TensorSpec(a.shape, tf.string if a.dtype.kind in "OSU" else tf.as_dtype(a.dtype),
                         name=n) for a, n in zip(sample.inputs, sample.names())]
    return tf.function(fn, input_signature=sig, **kwargs)


def to_tensors(inputs: Sequence[np.ndarray]) -> list[Any]:
    import tensorflow as tf

    return [tf.constant(a) for a in inputs]


def flatten_outputs(out: Any) -> list[np.ndarray]:
    import tensorflow as tf

    return [np.asarray(t.numpy() if hasattr(t, "numpy") else t) for t in tf.nest.flatten(out)]


# ----------------------------------------------------------------------------- child process

def _mark(tag: str) -> None:
    # TF's C++ logging writes straight to fd 2; flushing keeps our markers in order with it.
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(2, f"{MARKER} {tag}\n".encode())


def _record_target(target: str, suffix: str = "", outputs_path: str | None = None) -> dict[str, Any]:
    """Trace ``target``, then call it between the ``BEGIN<suffix>`` / ``END<suffix>`` markers; the record
    (function name, input names, outputs, errors). Tracing happens outside the markers, so the function
    name is known without running passes; a failed call keeps the clustering record."""
    result: dict[str, Any] = {"target": target}
    try:
        import tensorflow as tf

        result["tf_version"] = tf.__version__
        sample = as_sample(load_target(target)())
        fn = make_tf_function(sample)
        args = to_tensors(sample.inputs)
        concrete = fn.get_concrete_function(*args)
        result["function_name"] = concrete.name.decode() if isinstance(concrete.name, bytes) \
            else str(concrete.name)
        result["input_names"] = sample.names()
        _mark(f"BEGIN{suffix}")
        t0 = time.perf_counter()
        try:
            out = fn(*args)
            result["outputs"] = [{"dtype": str(a.dtype), "shape": list(a.shape)}
                                 for a in flatten_outputs(out)]
            if outputs_path:
                np.savez(outputs_path, *flatten_outputs(out))
        except Exception as e:  # keep the clustering record even if execution fails
            result["call_error"] = f"{type(e).__name__}: {e}"
        result["call_seconds"] = round(time.perf_counter() - t0, 3)
        _mark(f"END{suffix}")
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}"
    return result


def _exit_child() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip TF's slow (and occasionally noisy) interpreter teardown


def child_main(target: str, result_path: str, outputs_path: str | None) -> int:
    """Runs inside the recording subprocess (TF_XLA_FLAGS already in the environment)."""
    Path(result_path).write_text(json.dumps(_record_target(target, "", outputs_path), indent=1))
    _exit_child()
    return 0


def child_batch_main(result_path: str, targets: Sequence[str]) -> int:
    """Runs inside a batch recording subprocess: each target traced, then called between its own
    ``BEGIN <i>`` / ``END <i>`` markers. The result list is rewritten after every target, so a crash
    (TF aborts the process on some errors) keeps the targets recorded before it."""
    results: list[dict[str, Any]] = []
    for i, target in enumerate(targets):
        results.append(_record_target(target, f" {i}"))
        Path(result_path).write_text(json.dumps(results))
    _exit_child()
    return 0


# ----------------------------------------------------------------------------- log parsing

@dataclasses.dataclass
class LogLine:
    level: str
    tid: str
    source: str  # "file.cc:123"
    msg: str


def parse_stderr(text: str) -> list[LogLine | str]:
    """TF log lines (multi-line messages joined) and our ``@@TFREC`` markers, in order."""
    events: list[LogLine | str] = []
    for raw in text.splitlines():
        if raw.startswith(MARKER):
            events.append(raw[len(MARKER) + 1:].strip())
            continue
        m = _LOG_RE.match(raw)
        if m:
            events.append(LogLine(m.group(1), m.group(2), m.group(3), m.group(4)))
        elif events and isinstance(events[-1], LogLine) and raw and not raw.startswith("WARNING:"):
            events[-1].msg += "\n" + raw  # continuation of a multi-line message (cycle traces)
    return events


def _dump_stem(path: str) -> str:
    name = os.path.basename(path.strip())
    return name[:-len(".pbtxt")] if name.endswith(".pbtxt") else name


def _split_mark_dump(stem: str) -> tuple[str, int] | None:
    """``mark_for_compilation_annotated_3`` -> (``mark_for_compilation_annotated``, 3)."""
    kinds = "|".join(sorted(MARK_DUMPS, key=len, reverse=True))  # longest name first
    m = re.fullmatch(rf"({kinds})(?:_(\d+))?", stem)
    return (m.group(1), int(m.group(2) or 0)) if m else None


def cluster_names_in(graph_text: str) -> list[str]:
    """Distinct ``_XlaCluster`` values of a text GraphDef, in first-appearance order."""
    names = re.findall(r'key: "_XlaCluster"\s*value\s*\{\s*s: "([^"]*)"', graph_text)
    return list(dict.fromkeys(names))


def analyse(events: list[LogLine | str], dump_dir: Path) -> dict[str, Any]:
    """Turn the event stream into pass runs with function attribution and cluster bookkeeping."""
    threads: dict[str, str] = {}
    open_fn: dict[str, str] = {}   # tid -> function whose POST_REWRITE_FOR_EXEC group is running
    open_run: dict[str, dict] = {}  # tid -> current MarkForCompilation run
    runs: list[dict[str, Any]] = []
    named_dumps: dict[str, list[str]] = {}
    phase = "setup"
    last_run_by_tid: dict[str, dict] = {}

    target = 0   # the batch child's target index ("BEGIN <i>"); 0 for a single recording
    for ev in events:
        if isinstance(ev, str):
            tag, _, index = ev.partition(" ")
            phase = {"BEGIN": "call", "END": "after"}.get(tag, phase)
            if tag == "BEGIN":
                target = int(index or 0)
            continue
        t = threads.setdefault(ev.tid, f"t{len(threads)}")
        dm = _DUMP_RE.search(ev.msg) if ev.source.startswith("dump_graph.cc") else None
        stem = _dump_stem(dm.group(1)) if dm else ""
        if dm and ".main." in stem:
            fname = stem.split(".", 1)[0]
            named_dumps.setdefault(fname, []).append(stem)
            if stem.endswith(POST_REWRITE_BEGIN):
                open_fn[t] = fname
            elif stem.endswith(POST_REWRITE_END):
                open_fn.pop(t, None)
            continue
        src = ev.source.split(":")[0]
        # compilability_check_util also logs for jit_compile=True kernels, outside any pass run,
        # so only a mark_for_compilation_pass.cc line ("Starting fuel: ...") opens a run.
        if src == "mark_for_compilation_pass.cc" and t not in open_run:
            run = {"run": len(runs), "thread": t, "phase": phase, "target": target, "function": open_fn.get(t),
                   "starting_fuel": None, "candidates": 0, "dump_index": None, "dumps": {},
                   "other_dumps": [], "log": [], "assigned_clusters": []}
            runs.append(run)
            open_run[t] = run
            last_run_by_tid[t] = run
        run = open_run.get(t)
        if dm:
            split = _split_mark_dump(stem)
            target = run or last_run_by_tid.get(t)
            if split and target is not None:
                target["dumps"][split[0]] = stem + ".pbtxt"
                target["dump_index"] = split[1]
            elif target is not None:
                target["other_dumps"].append(stem + ".pbtxt")  # e.g. before_increase_dynamism_...
            continue
        if run is None:
            continue
        run["log"].append(f"{ev.source}] {ev.msg}")
        fm = re.match(r"Starting fuel: (\S+)", ev.msg)
        if fm:
            run["starting_fuel"] = fm.group(1)  # "infinity" or the process-global fuel left
        cm = re.match(r"compilation_candidates_.size\(\) = (\d+)", ev.msg)
        if cm:
            run["candidates"] = int(cm.group(1))
        am = re.match(r"Assigning node .* to cluster (\S+)$", ev.msg)
        if am and am.group(1) not in run["assigned_clusters"]:
            run["assigned_clusters"].append(am.group(1))
        if ev.msg.startswith("MarkForCompilationPassImpl::Run time"):
            del open_run[t]

    seen: list[str] = []
    for run in runs:
        names = list(run["assigned_clusters"])
        after = run["dumps"].get("mark_for_compilation")
        if after and (dump_dir / after).exists():
            names += [n for n in cluster_names_in((dump_dir / after).read_text(encoding="utf-8")) if n not in names]
        run["clusters"] = names
        run["clusters_before"] = len(seen)
        run["cluster_names_before"] = list(seen)
        seen += [n for n in names if n not in seen]
        run["no_candidates"] = any("No compilable candidates" in line for line in run["log"])
        del run["assigned_clusters"]
    return {"threads": threads, "runs": runs, "named_dumps": named_dumps}


def normalise_log(events: list[LogLine | str], threads: dict[str, str]) -> str:
    """The reason log: relevant TF lines without timestamps, thread ids as t0/t1, dump basenames."""
    out = []
    for ev in events:
        if isinstance(ev, str):
            out.append(f"{MARKER} {ev}")
            continue
        if not ev.source.split(":")[0] in LOG_SOURCES:
            continue
        msg = _DUMP_RE.sub(lambda m: "Dumped Graph to " + os.path.basename(m.group(1)), ev.msg)
        if ".main." in msg and msg.startswith("Dumped Graph"):
            continue  # the ~20 per-function debug dumps only serve attribution
        if msg.startswith("# iterations ="):
            continue  # per-frame fixpoint chatter from xla_cluster_util, no information
        # Timer lines ("... time: 1.57 ms (1571 us) (cumulative: ...)") vary run to run.
        msg = re.sub(r" time: .*$", " time: <elided>", msg)
        out.append(f"{ev.level} {threads.get(ev.tid, ev.tid)} {ev.source}] {msg}")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- parent API

def tf_env(flags: str, dump_dir: str, vmodule: str = VMODULE) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "TF_XLA_FLAGS": f"{flags} {DEBUG_FLAG}".strip(),
        "TF_DUMP_GRAPH_PREFIX": dump_dir,
        "TF_DUMP_GRAPH_NAME_FILTER": "*",
        "TF_CPP_MIN_LOG_LEVEL": "0",
        "TF_CPP_VMODULE": vmodule,
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONHASHSEED": "0",
    })
    # Not TF_DETERMINISTIC_OPS: users don't run with it, and it changes what TF's Python API traces
    # (e.g. softmax cross-entropy is decomposed into LogSoftmax, GatherV2, ...).
    env.pop("TF_DETERMINISTIC_OPS", None)
    env.pop("XLA_FLAGS", None)
    return env


def record(target: str, out_dir: str | Path, flags: str = DEFAULT_FLAGS, *, keep: str = "function",
           gz: bool = False, annotated: bool = True, outputs: bool = False,
           timeout: float = 600.0, extra_meta: dict[str, Any] | None = None,
           post_clustering: bool = False) -> dict[str, Any]:
    """Run ``target`` in a fresh TF process with ``flags`` and store TF's clustering dumps.

    ``keep``: "function" keeps the dumps of pass runs that belong to a named function and happen
    during the call (the user's graph and nested instantiations); "all" keeps every dump.
    ``gz`` gzips kept pbtxt files (loaders accept both). ``post_clustering`` also turns on TF's VLOG(1)
    in encapsulate_subgraphs_pass.cc / build_xla_ops_pass.cc and keeps, per kept run, the dumps of the
    passes after clustering (run["post_dumps"]: stem without _k → file). Returns the meta dict (also
    written to ``out_dir/meta.json``).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tfrec_") as tmp:
        dump_dir = Path(tmp) / "dump"
        dump_dir.mkdir()
        result_path = Path(tmp) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "_child", target, str(result_path)]
        if outputs:
            cmd.append(str(out / "outputs.npz"))
        t0 = time.perf_counter()
        vmodule = VMODULE + ("," + POST_CLUSTERING_VMODULE if post_clustering else "")
        proc = subprocess.run(cmd, env=tf_env(flags, str(dump_dir), vmodule), capture_output=True,
                              text=True, timeout=timeout, errors="replace")
        wall = time.perf_counter() - t0
        result = json.loads(result_path.read_text(encoding="utf-8")) if result_path.exists() else {}
        events = parse_stderr(proc.stderr)
        info = analyse(events, dump_dir)
        (out / "vlog.txt").write_text(normalise_log(events, info["threads"]))
        return _store(target, result, info["runs"], info["named_dumps"], dump_dir, out, flags,
                      proc.returncode, proc.stderr, wall, keep=keep, gz=gz, annotated=annotated,
                      post_clustering=post_clustering, extra_meta=extra_meta)


def record_batch(targets: Sequence[str], out_dirs: Sequence[str | Path], flags: str = DEFAULT_FLAGS, *,
                 gz: bool = False, annotated: bool = True, timeout: float = 900.0,
                 named: Sequence[str] = ()) -> list[dict[str, Any]]:
    """:func:`record` for several targets in ONE TF process (a TF start-up costs seconds; a recording
    of a small function a fraction of that). Each target is traced and called in turn, between its own
    markers; its meta keeps only the pass runs of its own call (``keep="function"``) and goes to its
    ``out_dirs`` entry with its dumps. ``named``: function-runtime dumps of the user function to keep too
    (e.g. ``after_opt_group_pre_placement``: TF's graph after its PRE_PLACEMENT passes), listed in the
    meta's ``named_dumps`` (kind → file).

    What a shared process changes, and why it does not matter for the node → cluster map: TF's cluster
    numbers (``cluster_<n>``) and the dumps' ``_k`` suffixes are process-global, so a later target's
    clusters are numbered after the earlier targets' (``clusters_before`` counts them), and eager ops
    already instantiated by an earlier target are not re-instantiated. Node names inside a function's
    graph, and which nodes TF clusters together, do not depend on either (with TF's default unlimited
    ``--tf_xla_clustering_fuel``). A target whose process died before it was recorded (TF aborts the
    process on some errors) is recorded again on its own."""
    if len(targets) != len(out_dirs):
        raise ValueError("one output directory per target")
    metas: list[dict[str, Any] | None] = [None] * len(targets)
    with tempfile.TemporaryDirectory(prefix="tfrec_batch_") as tmp:
        dump_dir = Path(tmp) / "dump"
        dump_dir.mkdir()
        result_path = Path(tmp) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "_child_batch", str(result_path), *targets]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=tf_env(flags, str(dump_dir)), capture_output=True, text=True,
                              timeout=timeout, errors="replace")
        wall = time.perf_counter() - t0
        results = json.loads(result_path.read_text(encoding="utf-8")) if result_path.exists() else []
        events = parse_stderr(proc.stderr)
        info = analyse(events, dump_dir)
        for i, result in enumerate(results):
            if "function_name" not in result and "error" not in result:
                continue
            out = Path(out_dirs[i])
            out.mkdir(parents=True, exist_ok=True)
            runs = [r for r in info["runs"] if r["target"] == i]
            # Its result was written after its call: a later crash of the process is not its own.
            kept = {}
            for stem in info["named_dumps"].get(result.get("function_name") or "", []):
                kind = stem.rpartition(".main.")[2]
                if kind in named and kind not in kept:
                    _copy(dump_dir / f"{stem}.pbtxt", out / f"{stem}.pbtxt", gz)
                    kept[kind] = f"{stem}.pbtxt" + (".gz" if gz else "")
            metas[i] = _store(targets[i], result, runs, info["named_dumps"], dump_dir, out, flags, 0,
                              proc.stderr, wall, keep="function", gz=gz, annotated=annotated,
                              extra_meta={"batch": {"index": i, "targets": len(targets),
                                                    "returncode": proc.returncode}, "named_dumps": kept})
    for i, meta in enumerate(metas):
        if meta is None:
            metas[i] = record(targets[i], out_dirs[i], flags, gz=gz, annotated=annotated)
    return metas  # type: ignore[return-value]


def _store(target: str, result: dict[str, Any], runs: list[dict[str, Any]], named_dumps: dict[str, list[str]],
           dump_dir: Path, out: Path, flags: str, returncode: int, stderr: str, wall: float, *, keep: str,
           gz: bool, annotated: bool, post_clustering: bool = False,
           extra_meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Mark the user's runs, copy the kept dumps from ``dump_dir`` to ``out`` and write ``meta.json``."""
    user_fn = result.get("function_name")
    for run in runs:
        run["is_user_function"] = bool(user_fn) and run["function"] == user_fn
        interesting = keep == "all" or (run["function"] and run["phase"] == "call")
        run["kept"] = bool(interesting)
        names = [f for k, f in run["dumps"].items()
                 if annotated or k != "mark_for_compilation_annotated"]
        names += run["other_dumps"] if keep == "all" else []
        if post_clustering and interesting:
            run["post_dumps"] = {_post_dump_key(d): d + (".gz" if gz else "") for d in run["other_dumps"]
                                 if _post_dump_key(d)}
            names += [d for d in run["other_dumps"] if _post_dump_key(d)]
        if interesting and run["function"] and not run["dumps"]:
            # No candidates => no mark dumps; keep the graph that entered the pass group.
            pre = [s for s in named_dumps.get(run["function"], []) if s.endswith(POST_REWRITE_BEGIN)]
            if pre:
                run["input_dump"] = pre[0] + ".pbtxt"
                names.append(run["input_dump"])
        if not interesting:
            continue
        for name in names:
            src = dump_dir / name
            if src.exists():
                _copy(src, out / name, gz)
        run["dumps"] = {k: v + (".gz" if gz else "") for k, v in run["dumps"].items()
                        if annotated or k != "mark_for_compilation_annotated"}
        if "input_dump" in run and gz:
            run["input_dump"] += ".gz"
    # The full log stays in vlog.txt; per-run copies would only duplicate it.
    for run in runs:
        run["log_lines"] = len(run.pop("log", []))
        if keep != "all":
            run.pop("other_dumps", None)

    meta: dict[str, Any] = {
        "target": target,
        "function_name": user_fn,
        "flags": flags,
        "tf_xla_flags": f"{flags} {DEBUG_FLAG}".strip(),
        "tf_cpp_vmodule": VMODULE + ("," + POST_CLUSTERING_VMODULE if post_clustering else ""),
        "tf_version": result.get("tf_version"),
        "returncode": returncode,
        "wall_seconds": round(wall, 2),
        "runs": runs,
        "user_runs": [r["run"] for r in runs if r.get("is_user_function")],
        "dump_order": [d for r in runs if r["kept"] for d in r["dumps"].values()],
    }
    for key in ("input_names", "outputs", "call_error", "error", "call_seconds"):
        if key in result:
            meta[key] = result[key]
    if returncode != 0 or "error" in result:
        meta["stderr_tail"] = stderr[-4000:]
    if extra_meta:
        meta.update(extra_meta)
    (out / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=False) + "\n")
    return meta


def _post_dump_key(file_name: str) -> str | None:
    """``encapsulate_subgraphs_after_3.pbtxt`` → ``encapsulate_subgraphs_after`` (per-cluster names keep
    the cluster: ``encapsulate_fdef_cluster_0``); None for other dumps."""
    stem = file_name.removesuffix(".pbtxt")
    for name in POST_CLUSTERING_DUMPS:
        if stem.startswith(name):
            return stem if name.endswith("_") else re.sub(r"_\d+$", "", stem)
    return None


def _copy(src: Path, dst: Path, gz: bool) -> None:
    if gz:
        # mtime=0 keeps the .gz bytes deterministic across re-recordings.
        with open(src, "rb") as f, open(str(dst) + ".gz", "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as g:
                g.write(f.read())
    else:
        shutil.copyfile(src, dst)


# ----------------------------------------------------------------------------- loaders

def read_text(path: str | Path) -> str:
    """Read a (possibly ``.gz``) text file; ``x.pbtxt`` also finds ``x.pbtxt.gz``."""
    p = Path(path)
    if not p.exists() and Path(str(p) + ".gz").exists():
        p = Path(str(p) + ".gz")
    if p.suffix == ".gz":
        with gzip.open(p, "rt") as f:
            return f.read()
    return p.read_text(encoding="utf-8")


def load_graph_def(path: str | Path) -> Any:
    """Parse a text (optionally gzipped) or binary GraphDef file into ``tf.compat.v1.GraphDef``."""
    import tensorflow as tf
    from google.protobuf import text_format

    p = Path(path)
    gd = tf.compat.v1.GraphDef()
    if p.suffix == ".pb":
        gd.ParseFromString(p.read_bytes())
    else:
        text_format.Parse(read_text(p), gd)
    return gd


def clusters_of(graph_def: Any) -> dict[str, list[str]]:
    """``_XlaCluster`` name -> node names (GraphDef order) of a marked GraphDef."""
    out: dict[str, list[str]] = {}
    for node in graph_def.node:
        if "_XlaCluster" in node.attr:
            out.setdefault(node.attr["_XlaCluster"].s.decode(), []).append(node.name)
    return out


def memory_optimizer_probe() -> Any:
    """A function whose optimized graph shows grappler's memory optimizer: a 64 MiB ``AddN`` that the
    optimizer rewrites into a ``TemporaryVariable``/``AssignAdd`` chain unless it is off (TF leaves it out
    when auto-clustering is on for every graph, grappler's ``IsXlaGlobalJitOn``)."""
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec((4096, 4096), tf.float32)])
    def big_add_n(x):
        return tf.add_n([tf.sin(x), tf.cos(x), tf.exp(x)])

    return big_add_n


def post_optimization_graph(fn: Any, *args: Any) -> Any:
    """TF's own optimized GraphDef (RunMetadata ``post_optimization_graph``, grappler's output in this
    process, under its flags and ``set_jit`` state) of the function graph that ``fn(*args)`` runs: the last
    one with arguments (the caller's wrapper graph has none)."""
    from tensorflow.python.eager import context

    context.enable_run_metadata()
    try:
        fn(*args)
        metadata = context.export_run_metadata()
    finally:
        context.disable_run_metadata()
    return [g.post_optimization_graph for g in metadata.function_graphs
            if any(n.op == "_Arg" for n in g.post_optimization_graph.node)][-1]


def node_tuples(graph_def: Any) -> list[tuple[str, str, tuple[str, ...]]]:
    """(name, op, inputs) of every node, in order: what two graphs must share to be the same graph."""
    return [(n.name, n.op, tuple(n.input)) for n in graph_def.node]


# ----------------------------------------------------------------------------- CLI

def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_child"]:
        return child_main(argv[1], argv[2], argv[3] if len(argv) > 3 else None)
    if argv[:1] == ["_child_batch"]:
        return child_batch_main(argv[1], argv[2:])
    ap = argparse.ArgumentParser(
        prog="tf_record.py",
        description="Run a tf.function in a fresh TensorFlow process with XLA auto-clustering on and "
                    "store TF's mark_for_compilation dumps, the VLOG reason log and meta.json.")
    ap.add_argument("target", help="'path/to/file.py:name' or 'dotted.module:name' (REGISTRY key, "
                                   "builder function or tf.function with an input_signature)")
    ap.add_argument("-o", "--out", required=True, help="output directory")
    ap.add_argument("--flags", default=DEFAULT_FLAGS,
                    help=f"TF_XLA_FLAGS (without {DEBUG_FLAG}, which is always added); "
                         f"default: {DEFAULT_FLAGS!r}")
    ap.add_argument("--keep", choices=("function", "all"), default="function",
                    help="keep dumps of the function's pass runs only (default) or every dump")
    ap.add_argument("--gz", action="store_true", help="gzip the kept .pbtxt dumps")
    ap.add_argument("--outputs", action="store_true", help="also save the call's outputs.npz")
    args = ap.parse_args(argv)
    meta = record(args.target, args.out, args.flags, keep=args.keep, gz=args.gz,
                  outputs=args.outputs)
    for run in meta["runs"]:
        tag = "USER" if run.get("is_user_function") else ("kept" if run["kept"] else "    ")
        print(f"run {run['run']:2d} [{tag}] {run['phase']:6s} {run['thread']} "
              f"fn={run['function'] or '(eager op)'} dump_index={run['dump_index']} "
              f"clusters_before={run['clusters_before']} clusters={run['clusters']}")
    if "error" in meta or meta["returncode"] != 0:
        print(meta.get("error") or meta.get("stderr_tail", "")[-2000:], file=sys.stderr)
        return 1
    print(f"wrote {args.out} in {meta['wall_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
