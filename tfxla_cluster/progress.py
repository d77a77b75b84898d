"""Progress for long work: a rich progress bar on an interactive terminal, nothing otherwise.

Stage: user interface (the CLI's long commands: ``report``, ``bench``, ``hlo`` over many clusters, the
TF comparison tools). Guarantees: output goes to stderr only, and only when stderr is a terminal
(``TFXLA_CLUSTER_PROGRESS=0`` turns it off there too; ``=1`` forces it, e.g. for a pty-less CI log
viewer); when off, nothing is printed and nothing from ``rich`` is imported. The bar is redrawn only
when work advances (no refresh thread), so it takes no CPU from what ``bench`` times, and it is removed
when the work ends.

    for w in progress.track(workloads, "bench"):           # a known list
        ...
    with progress.task("report: running clusters") as t:    # work that reports as it goes
        ...                                                 # t.advance("cluster_3")

Work deep inside the library (a cluster compile) calls :func:`note` to advance whatever task the
command opened; without an open task it does nothing.
"""
from __future__ import annotations

import sys
import threading
from typing import IO, Iterable, Iterator, TypeVar

T = TypeVar("T")
# Open tasks, innermost last. Process-wide: compiles run on TF's executor threads, not the caller's.
_open: list["Task"] = []
_lock = threading.Lock()


def enabled(stream: IO[str] | None = None) -> bool:
    """Whether progress is shown on ``stream`` (default: stderr)."""
    from tfxla_cluster.flags import env_switch

    forced = env_switch("TFXLA_CLUSTER_PROGRESS")
    if forced in ("0", "1"):
        return forced == "1"
    return _isatty(stream if stream is not None else sys.stderr)


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a real stream
        return False


class Task:
    """One unit of long work with an optional known ``total``. Inactive (all no-ops) off a terminal."""

    def __init__(self, description: str, total: int | None = None, stream: IO[str] | None = None,
                 takes_notes: bool = True) -> None:
        self.description = description
        self.takes_notes = takes_notes  # a track() counts its items; notes only name the current work
        self.total = total
        self.done = 0
        self._progress = None
        self._id = None
        if enabled(stream):
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                                       TimeElapsedColumn)

            columns = [SpinnerColumn(), TextColumn("{task.description}")]
            if total is not None:
                columns += [BarColumn(), MofNCompleteColumn()]
            columns.append(TimeElapsedColumn())
            # stdout printed meanwhile goes above the bar, but only when it is the same terminal:
            # rich would otherwise send a piped stdout to our stream.
            to_tty = stream is None and _isatty(sys.stdout)
            self._progress = Progress(*columns, console=Console(file=stream if stream is not None else sys.stderr),
                                      auto_refresh=False, transient=True, redirect_stdout=to_tty,
                                      redirect_stderr=False)

    @property
    def active(self) -> bool:
        return self._progress is not None

    def __enter__(self) -> "Task":
        if self._progress is not None:
            self._progress.start()
            self._id = self._progress.add_task(self.description, total=self.total)
            self._progress.refresh()
        with _lock:
            _open.append(self)
        return self

    def __exit__(self, *exc) -> None:
        with _lock:
            _open.remove(self)
        if self._progress is not None:
            self._progress.stop()

    def advance(self, note: str = "", steps: int = 1) -> None:
        """Count ``steps`` more units done; ``note`` names what is being worked on now."""
        self.done += steps
        if self._progress is None:
            return
        text = self.description if not note else f"{self.description}: {note}"
        if self.total is None:
            text += f" ({self.done} done)"
        self._progress.update(self._id, advance=steps, description=text)
        self._progress.refresh()

    def show(self, note: str) -> None:
        """Say what is being worked on, without counting it done."""
        if self._progress is not None:
            self._progress.update(self._id, description=f"{self.description}: {note}")
            self._progress.refresh()


def task(description: str, total: int | None = None, stream: IO[str] | None = None) -> Task:
    """A context manager for long work; see the module docstring."""
    return Task(description, total, stream)


def track(items: Iterable[T], description: str, total: int | None = None, stream: IO[str] | None = None,
          label=None) -> Iterator[T]:
    """Yield ``items`` with a bar that counts them; ``label(item)`` names the current one."""
    items = list(items) if total is None and not hasattr(items, "__len__") else items
    total = total if total is not None else len(items)  # type: ignore[arg-type]
    with Task(description, total, stream, takes_notes=False) as t:
        for item in items:
            if label is not None:
                t.show(str(label(item)))
            yield item
            t.advance()


def busy() -> bool:
    """Whether some task is open (an inner piece of work then notes into it rather than opening its own)."""
    with _lock:
        return bool(_open)


def note(what: str) -> None:
    """Advance the innermost open task (e.g. "compiled cluster_3"), or for a ``track`` only show the
    note; no open task: nothing."""
    with _lock:
        current = _open[-1] if _open else None
    if current is None:
        return
    if current.takes_notes:
        current.advance(what)
    else:
        current.show(what)
