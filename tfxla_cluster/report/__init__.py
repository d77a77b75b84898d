"""The clustering report: one HTML page with clusters, reasons, HLO, costs and a performance advisor.

Stage: report — reads the results of every earlier stage and of real runs; changes none of them.

    model.py    the report's data: Report → FunctionReport → ClusterReport → SignatureRun, Kernel, Advice
    collect.py  Recorder (a launch observer), cluster facts (kernels, structure), timings on captured inputs
    run.py      run a GraphDef on generated inputs, or a script under the plugin
    advisor.py  the performance advisor's rules (tiny cluster, lost parallelism, recompilation, fallback,
                splitters)
    html.py     the self-contained page (reuses the viz picture)
    api.py      build_report(...) → Report; write_report(report, path)

The numerics checker it can include lives in :mod:`tfxla_cluster.runtime.numerics`.
"""
from __future__ import annotations

from tfxla_cluster._lazy import lazy_attributes


_LAZY = {
    "build_report": "tfxla_cluster.report.api",
    "write_report": "tfxla_cluster.report.api",
    "Report": "tfxla_cluster.report.model",
    "Advice": "tfxla_cluster.report.model",
    "Recorder": "tfxla_cluster.report.collect",
    "to_html": "tfxla_cluster.report.html",
}

__all__ = list(_LAZY)

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
