"""tfxla_cluster: TensorFlow's XLA auto-clustering and JIT path, re-implemented in Python.

Public API (everything else is internal and may change):

* :func:`load_graph` / :func:`load_graph_def` — import GraphDefs from tf.functions, files, SavedModels;
* :func:`mark_for_compilation` — TF 2.21's MarkForCompilationPass, with a reason for every node;
* :class:`Flags` — ``TF_XLA_FLAGS``/``XLA_FLAGS`` with TF's names, defaults and errors;
* :func:`function` — a ``tf.function`` drop-in whose XLA clusters run through our compiler;
* :func:`build_report` / :func:`write_report` — the HTML report with the performance advisor;
* :class:`NumericsChecker` / :func:`check_numerics` — compiled clusters compared with TF's kernels;
* the typed errors of :mod:`tfxla_cluster.errors`.

Names are resolved lazily, so ``import tfxla_cluster`` (and the CLI's ``--help``) does not pay for
importing TensorFlow until something needs it.
"""
from __future__ import annotations

from tfxla_cluster._lazy import lazy_attributes


__version__ = "0.1.0"

_LAZY = {
    **{name: "tfxla_cluster.errors" for name in ("DataLossError", "FailedPreconditionError", "FlagError",
                                                  "InternalError", "InvalidArgumentError", "NotFoundError",
                                                  "TfXlaError", "UnimplementedError", "UnknownError")},
    "Flags": "tfxla_cluster.flags",
    "Graph": "tfxla_cluster.graph",
    "load_graph": "tfxla_cluster.graph",
    "load_graph_def": "tfxla_cluster.graph",
    "MarkResult": "tfxla_cluster.jit.mark_for_compilation",
    "ProcessState": "tfxla_cluster.process_state",
    "mark_for_compilation": "tfxla_cluster.jit.mark_for_compilation",
    "function": "tfxla_cluster.runtime.function",
    "install": "tfxla_cluster.runtime.plugin",
    "uninstall": "tfxla_cluster.runtime.plugin",
    "build_report": "tfxla_cluster.report.api",
    "write_report": "tfxla_cluster.report.api",
    "NumericsChecker": "tfxla_cluster.runtime.numerics",
    "check_numerics": "tfxla_cluster.runtime.numerics",
}

__all__ = ["__version__", *_LAZY]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
