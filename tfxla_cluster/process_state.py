"""Process state: what TF and XLA keep once per process, as one explicit object.

Stage: shared by every stage (it imports nothing of the package, so any layer may use it). TF numbers
some things per process, and the numbers show in names users see:

* clustering — the fuel (``--tf_xla_clustering_fuel``, taken from the flag on the first graph, then
  spent across graphs) and the cluster sequence numbers (one counter per graph fingerprint, the ``N``
  of ``cluster_N``): mark_for_compilation_pass.cc's statics;
* dump file names — how often each name was dumped (dump_graph.cc's per-name counter: ``name``,
  ``name_1``, ...);
* HLO module ids — XLA's module unique ids, the ``NNNN`` of ``--xla_dump_to``'s ``module_NNNN.*`` files.

:data:`PROCESS` is the process's own. A fresh :class:`ProcessState` gives a caller its own clustering
counters (the report marks a graph without advancing the program's cluster numbers; tests start from
TF's fresh-process state); dumps and module ids always use :data:`PROCESS`, as TF's do.
"""
from __future__ import annotations

import collections
import itertools
import threading


class ProcessState:
    """The counters listed in the module docstring; every method is thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fuel: int | None = None
        self.sequence: dict[int, int] = collections.defaultdict(int)
        self.dump_names: collections.Counter = collections.Counter()
        self._module_ids = itertools.count()

    # ---- clustering
    def next_sequence(self, fingerprint: int) -> int:
        """The next cluster sequence number for a graph with ``fingerprint`` (0 when names are not
        deterministic)."""
        with self.lock:
            n = self.sequence[fingerprint]
            self.sequence[fingerprint] = n + 1
            return n

    def reset(self) -> None:
        """Fuel and cluster sequence numbers as in a fresh process."""
        with self.lock:
            self.fuel = None
            self.sequence.clear()

    # ---- dumps
    def next_dump_count(self, name: str) -> int:
        """How many times ``name`` was dumped before (and count this time)."""
        with self.lock:
            count = self.dump_names[name]
            self.dump_names[name] += 1
            return count

    def reset_dump_names(self) -> None:
        with self.lock:
            self.dump_names.clear()

    def next_module_id(self) -> int:
        """XLA's next HLO module unique id."""
        with self.lock:
            return next(self._module_ids)


#: The process's state (TF's statics).
PROCESS = ProcessState()
