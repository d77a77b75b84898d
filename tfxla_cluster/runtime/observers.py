"""Launch observers: callbacks that see every cluster launch in this process.

Stage: runtime. An observer is called as ``fn(launcher, compiled, arrays, outputs, seconds)`` after each
launch: ``compiled`` is the :class:`~tfxla_cluster.runtime.launcher.CompiledCluster` that ran (None when
the cluster ran on TF's kernels), ``arrays`` the inputs as the cluster saw them (variables as read before
the run), ``outputs`` the value outputs and ``seconds`` the run's wall time. The report and the numerics
checker hang off this.

The list lives here, below both the launcher (which calls the observers) and the native launch op (which
must send every launch through Python while anyone observes): a change is announced to the hooks
registered with :func:`on_change`, so neither of the two imports the other for it.
"""
from __future__ import annotations

from typing import Callable

OBSERVERS: list[Callable[..., None]] = []
_hooks: list[Callable[[bool], None]] = []


def add(fn: Callable[..., None]) -> None:
    """Call ``fn`` after every cluster launch in this process."""
    if fn not in OBSERVERS:
        OBSERVERS.append(fn)
    _changed()


def remove(fn: Callable[..., None]) -> None:
    if fn in OBSERVERS:
        OBSERVERS.remove(fn)
    _changed()


def on_change(hook: Callable[[bool], None]) -> None:
    """``hook(anyone_observing)`` runs whenever an observer is added or removed."""
    if hook not in _hooks:
        _hooks.append(hook)


def _changed() -> None:
    for hook in list(_hooks):
        hook(bool(OBSERVERS))
