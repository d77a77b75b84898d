"""tfxla_cluster: TensorFlow's XLA auto-clustering and JIT path, re-implemented in Python.

Public API (everything else is internal and may change):

* :func:`load_graph` / :func:`load_graph_def` — import GraphDefs from tf.functions, files, SavedModels;
* :func:`mark_for_compilation` — TF 2.21's MarkForCompilationPass, with a reason for every node;
* :class:`Flags` — ``TF_XLA_FLAGS``/``XLA_FLAGS`` with TF's names, defaults and errors;
* the typed errors of :mod:`tfxla_cluster.errors`.
"""
from tfxla_cluster.errors import (DataLossError, FailedPreconditionError, FlagError, InternalError,
                                  InvalidArgumentError, NotFoundError, TfXlaError, UnimplementedError)
from tfxla_cluster.flags import Flags
from tfxla_cluster.graph import Graph, load_graph, load_graph_def
from tfxla_cluster.jit.mark_for_compilation import MarkResult, ProcessState, mark_for_compilation

__version__ = "0.1.0"

__all__ = ["DataLossError", "FailedPreconditionError", "FlagError", "Flags", "Graph", "InternalError",
           "InvalidArgumentError", "MarkResult", "NotFoundError", "ProcessState", "TfXlaError",
           "UnimplementedError", "load_graph", "load_graph_def", "mark_for_compilation", "__version__"]
