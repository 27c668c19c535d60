"""Progress bars (rich, on stderr) for the steps that take more than a couple of seconds.

    with steps("synthesis", total=3) as step:      # a bar of known steps
        step("yosys synth_ecp5"); ...                # names the step starting now, advances after it
    with work("quant-search") as bar:               # a bar whose total grows as work is queued
        bar.queued(14); bar.done("minmax/per-channel")
    with waiting("RTL simulation"):                 # no progress known: a pulsing bar and the time

They draw nothing when stderr is not a terminal (CI, pipes, tests), unless `enabled=True`.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager


def _enabled(enabled: bool | None) -> bool:
    return sys.stderr.isatty() if enabled is None else enabled


def _bar(known_total: bool):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    cols = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn()]
    if known_total:
        cols.append(MofNCompleteColumn())
    cols.append(TimeElapsedColumn())
    return Progress(*cols, console=Console(stderr=True), transient=True)


@contextmanager
def steps(label: str, total: int, enabled: bool | None = None):
    """A bar of `total` named steps; call the yielded function with each step's name as it starts."""
    if not _enabled(enabled):
        yield lambda name: None
        return
    with _bar(True) as bar:
        task = bar.add_task(label, total=total)
        started = [0]

        def step(name: str) -> None:
            if started[0]:
                bar.advance(task)
            started[0] += 1
            bar.update(task, description=f"{label}: {name}")

        yield step
        bar.update(task, completed=total)


class _Work:
    def __init__(self, bar, task, label):
        self.bar, self.task, self.label = bar, task, label
        self.total = 0

    def queued(self, n: int) -> None:
        self.total += n
        if self.bar is not None:
            self.bar.update(self.task, total=self.total)

    def done(self, what: str = "") -> None:
        if self.bar is not None:
            self.bar.advance(self.task)
            if what:
                self.bar.update(self.task, description=f"{self.label} (last: {what})")


@contextmanager
def work(label: str, enabled: bool | None = None):
    """A bar whose total grows as work is queued (`.queued(n)`), advanced by `.done(what)`."""
    if not _enabled(enabled):
        yield _Work(None, None, label)
        return
    with _bar(True) as bar:
        yield _Work(bar, bar.add_task(label, total=None), label)


@contextmanager
def waiting(label: str, enabled: bool | None = None):
    """A pulsing bar with the elapsed time, for a step whose progress cannot be observed."""
    if not _enabled(enabled):
        yield
        return
    with _bar(False) as bar:
        bar.add_task(label, total=None)
        yield
