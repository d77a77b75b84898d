"""``build_report``: from a graph or a script to a :class:`~.model.Report`; ``write_report`` to HTML.

Stage: report. The straight line:

    source ──load/mark──▶ static clustering ──run (observers on)──▶ launches recorded
           ──measure──▶ compiled vs TF's kernels ──advise──▶ Report ──render──▶ one HTML page

The static part (flags, clustering, reasons, picture) is always there; when nothing can run (unknown
input shapes, resource inputs, ``run=False``, a failing run) ``Report.dynamic_missing`` says why and
the page shows the rest. Timings are medians of a few runs on the inputs the clusters really saw.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from tfxla_cluster import progress
from tfxla_cluster.report.collect import Recorder, cluster_report, measure
from tfxla_cluster.report.model import FunctionReport, Report


def _flags(flags: Any) -> Any:
    from tfxla_cluster import flags as flags_mod

    return flags_mod.Flags.resolve(flags)


def _function_name(fn: Any, compiled: Any) -> str:
    name = getattr(fn.python_function, "__name__", "function")
    concrete = compiled.concrete.name
    concrete = concrete.decode() if isinstance(concrete, bytes) else str(concrete)
    return f"{name} [{concrete}]"


def _function_reports(functions: list, recorder: Recorder) -> list[FunctionReport]:
    """One FunctionReport per traced signature of each ``tfxla_cluster.function`` in ``functions``."""
    out = []
    for fn in functions:
        for compiled in list(fn._compiled.values()):
            name = _function_name(fn, compiled)
            fr = FunctionReport(name, compiled.mark_result, compiled.graph)
            if compiled.mark_result is None:   # only jit_compile=True skips MarkForCompilation
                fr.note = "jit_compile=True: the whole function is one must-compile cluster"
            for cname, members in compiled.clusters.items():
                launcher = compiled.launchers.get(cname)
                fr.clusters[cname] = cluster_report(cname, members, compiled.graph, function=name, launcher=launcher,
                                                    runs=recorder.runs.get(id(launcher)) if launcher else None)
            out.append(fr)
    return out


def _run_saved_model(report: Report, path: str, signature: str, flags: Any, recorder: Recorder, checker: Any,
                     **options: Any) -> bool:
    """Graph mode for a SavedModel: run its signature function (variables included) through our runtime;
    on success the report's functions are the runtime's. False (with the reason) when it can't run."""
    from tfxla_cluster.report.run import NotRunnable, run_saved_model

    recorder.install()
    if checker:
        checker.install()
    try:
        fn, loaded, report.inputs = run_saved_model(path, signature, flags, **options)
    except NotRunnable as e:
        report.dynamic_missing = str(e)
        return False
    except Exception as e:   # the program's failure is shown on the page; the static report stands
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        report.dynamic_missing = f"running the SavedModel failed: {type(e).__name__}: {first}"
        return False
    finally:
        recorder.uninstall()
        if checker:
            checker.uninstall()
    report.functions = _function_reports([fn], recorder)
    report.keep_alive = (fn, loaded)   # the variables live as long as the report
    report.dynamic = bool(recorder.launchers)
    return True


def build_report(source: Any = None, *, script: str | None = None, script_args: list[str] | None = None,
                 flags: Any = None, result: Any = None, title: str | None = None, run: bool = True,
                 input_shapes: dict | None = None, calls: int = 3, repeats: int = 5,
                 check_numerics: bool = False, backend: str = "llvm", grappler: bool = False,
                 signature: str = "serving_default", measure_timings: bool = True,
                 measure_budget: float = 20.0) -> Report:
    """Build the report of a graph (``source``: a path, GraphDef or Graph; or ``result``: a
    MarkResult) or of a program (``script`` with ``script_args``, run under the plugin).

    ``run=False`` renders only the static parts. Timings (``repeats`` runs each, median) stop after
    ``measure_budget`` seconds, costliest clusters first; the rest say so. ``check_numerics`` also runs
    every launch on TF's kernels and compares (see :mod:`tfxla_cluster.runtime.numerics`). A SavedModel
    directory runs through its ``signature`` function, with its variables."""
    t_start = time.perf_counter()
    seconds: dict[str, float] = {}
    recorder = Recorder()
    checker = None
    if check_numerics:
        from tfxla_cluster.runtime.numerics import NumericsChecker

        checker = NumericsChecker()
    if script is not None:
        report = Report(title or os.path.basename(script), f"python {script} {' '.join(script_args or [])}".strip(),
                        _flags(flags))
        from tfxla_cluster.report.run import run_script

        recorder.install()
        if checker:
            checker.install()
        try:
            with progress.task("report: running the script, compiling clusters"):
                functions, code, summary = run_script(script, list(script_args or []), backend=backend)
        finally:
            recorder.uninstall()
            if checker:
                checker.uninstall()
        seconds["run"] = time.perf_counter() - t_start
        report.run_output = summary + (f"\n(script exited with code {code})" if code else "")
        from tfxla_cluster.runtime import plugin

        report.profile = plugin.profile()
        report.functions = _function_reports(functions, recorder)
        report.functions.sort(key=lambda f: f.name)   # deterministic: the plugin tracks functions in a set
        report.dynamic = bool(recorder.launchers)
        if not report.dynamic:
            report.dynamic_missing = ("no cluster was launched: the program traced no tf.function with clusters "
                                      "(is TF_XLA_FLAGS=--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit set, or "
                                      "jit_compile=True used?)")
    else:
        from tfxla_cluster.jit.mark_for_compilation import ProcessState, mark_for_compilation

        flags = _flags(flags)
        missing = ""
        is_saved_model = isinstance(source, (str, os.PathLike)) and Path(source).is_dir()
        if is_saved_model and run and result is None:
            report = Report(title or os.path.basename(os.path.normpath(str(source))), str(source), flags)
            t0 = time.perf_counter()
            with progress.task("report: running the SavedModel, compiling clusters"):
                ran = _run_saved_model(report, str(source), signature, flags, recorder, checker,
                                       input_shapes=input_shapes, calls=calls, backend=backend)
            seconds["run"] = time.perf_counter() - t0
            if ran:
                return _finish(report, recorder, checker, seconds, t_start, measure_timings, repeats,
                               measure_budget)
            missing = report.dynamic_missing
            run = False
        if result is None:
            from tfxla_cluster.graph import Graph, load_graph

            graph = source if isinstance(source, Graph) else load_graph(source, signature=signature,
                                                                        grappler=grappler, flags=flags)
            result = mark_for_compilation(graph, flags, state=ProcessState())
        seconds["mark"] = time.perf_counter() - t_start
        default_title = os.path.basename(os.path.normpath(str(source))) if isinstance(source, (str, os.PathLike)) \
            else "graph"
        report = Report(title or default_title, str(source) if isinstance(source, (str, os.PathLike)) else "graph",
                        flags)
        fr = FunctionReport(report.title, result, result.graph)
        report.functions.append(fr)
        launchers: dict[str, Any] = {}
        if not run:
            report.dynamic_missing = missing if is_saved_model and missing else "not run (static report requested)"
        elif not result.clusters:
            report.dynamic_missing = "no clusters were formed, so nothing was compiled or timed"
        else:
            from tfxla_cluster.report.run import NotRunnable, run_graph

            t0 = time.perf_counter()
            recorder.install()
            if checker:
                checker.install()
            try:
                with progress.task("report: compiling and running clusters", total=len(result.clusters)):
                    from tfxla_cluster.compile_profile import CompileProfile

                    report.profile = CompileProfile()
                    launchers, report.inputs = run_graph(result, flags, input_shapes=input_shapes, calls=calls,
                                                         backend=backend, profile=report.profile)
                report.dynamic = True
            except NotRunnable as e:
                report.dynamic_missing = str(e)
            except Exception as e:   # the static report is still worth having
                first = str(e).strip().splitlines()[0] if str(e).strip() else ""
                report.dynamic_missing = f"running the graph failed: {type(e).__name__}: {first}"
            finally:
                recorder.uninstall()
                if checker:
                    checker.uninstall()
            seconds["run"] = time.perf_counter() - t0
        for cname, members in result.clusters.items():
            launcher = launchers.get(cname)
            fr.clusters[cname] = cluster_report(cname, members, result.graph, function=fr.name, launcher=launcher,
                                                runs=recorder.runs.get(id(launcher)) if launcher else None)
    return _finish(report, recorder, checker, seconds, t_start, measure_timings, repeats, measure_budget)


def _finish(report: Report, recorder: Recorder, checker: Any, seconds: dict, t_start: float,
            measure_timings: bool, repeats: int, measure_budget: float) -> Report:
    """Timings, numerics results and advice: the steps after the run, whatever the source."""
    from tfxla_cluster.report.advisor import advise

    if measure_timings and report.dynamic:
        t0 = time.perf_counter()
        # Costliest clusters first (by observed launch time), within a time budget: on graphs with
        # hundreds of clusters the report stays quick and the clusters that matter are measured.
        work = [(c, run_) for fr in report.functions for c in fr.clusters.values() if c.launcher is not None
                for run_ in c.signatures[:3]]     # the first few signatures tell the story
        work.sort(key=lambda cr: -sum(cr[1].launch_seconds))
        for c, run_ in progress.track(work, "report: timing clusters against TF's kernels",
                                      label=lambda cr: cr[0].name):
            if time.perf_counter() - t0 > measure_budget:
                run_.measure_error = f"not measured: the report's {measure_budget:g} s timing budget was spent"
                continue
            measure(c.launcher, run_, repeats)
        seconds["measure"] = time.perf_counter() - t0
    if checker is not None:
        report.numerics = checker
        by_launcher = {id(launcher): res for launcher, res in
                       ((lz, checker.results.get(id(lz))) for lz in checker._keep)}
        for fr in report.functions:
            for c in fr.clusters.values():
                if c.launcher is not None and by_launcher.get(id(c.launcher)) is not None:
                    c.numerics = by_launcher[id(c.launcher)]
                    c.numerics.function = fr.name
    advise(report.functions)
    seconds["total"] = time.perf_counter() - t_start
    report.seconds = seconds
    return report


def write_report(report: Report, path: str | Path, **picture: Any) -> Path:
    """Render ``report`` as one self-contained HTML page at ``path`` (see :mod:`.html`).
    ``picture`` options: ``around``/``depth`` (focus), ``collapse`` (None: automatic for big graphs)."""
    from tfxla_cluster.report.html import to_html

    path = Path(path)
    t0 = time.perf_counter()
    text = to_html(report, **picture)
    report.seconds["render"] = time.perf_counter() - t0
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
