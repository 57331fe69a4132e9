"""Progress of the long commands (`infer compile`, `infer run`, quantization) on stderr, on rich.

    with ConsoleProgress(enabled=not args.quiet) as say:
        say.expect(10)          # optional: the number of steps, for a bar
        say("pass graph-to-tile")

Every message is a line stamped with the seconds since the start (`[  1.23 s] msg`), as
before, so logs and pipes read the same. On a terminal a live line below them shows the step
that is running, with a spinner, the steps done out of those expected and its elapsed time, so
a ten-second pass does not look like a hang; it disappears when the command ends. `enabled`
False (the commands' `--quiet`) prints nothing.
"""

from __future__ import annotations

import atexit
import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)


class ConsoleProgress:
    """A progress callback (`say(msg)`) on stderr; see the module docstring."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.start = time.perf_counter()
        self.console = Console(stderr=True, highlight=False, emoji=False) if enabled else None
        self.live: Progress | None = None
        self.task: TaskID | None = None
        self.total: int | None = None
        self.steps = 0

    def expect(self, steps: int) -> None:
        """The number of messages still to come (the bar's total)."""
        self.total = self.steps + steps
        if self.live is not None and self.task is not None:
            self.live.update(self.task, total=self.total)

    def __call__(self, message: str) -> None:
        if self.console is None:
            return
        self.console.print(f"[{time.perf_counter() - self.start:6.2f} s] {message}", markup=False,
                           soft_wrap=True)
        if not self.console.is_terminal:
            return
        if self.live is None:
            self.live = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=self.console,
                                 transient=True, refresh_per_second=4)
            self.live.start()
            atexit.register(self.close)  # (a caller that never closes it)
            self.task = self.live.add_task(message, total=self.total)
        else:
            assert self.task is not None
            self.live.update(self.task, description=message, advance=1)
        self.steps += 1

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def __enter__(self) -> ConsoleProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
