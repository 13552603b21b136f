"""The files a child answers its task through, and the timing their marker files carry.

One task, one prefix in the run's scratch folder:

- `.task`: the task itself (`rocmcheck.engine.task.Task`, JSON), written by the parent.
- `.started`: touched by the child once its interpreter, `import torch` and GPU runtime are
  up; the task's timeout runs from its mtime.
- `.started.first-use`: exists while the probe is inside `ctx.first_use()`; that time is
  bounded by the first-use limit, not the timeout, and on leaving, `.started`'s mtime moves
  forward by the time spent.
- `.hang`: the probe declared a hang (`ctx.hang`: processes it started are stuck); holds its
  message. The watchdog ends the task as it would at its deadline, without waiting for it.
- `.stack`: every thread's Python stack, from the child's faulthandler (a fatal signal, or
  the parent's SIGUSR1 on timeout).
- `.result.json`: the outcome, written atomically and last; in a worker child it ends the
  task, and a child that exits without one crashed.

The watchdog reads the timing through `started_at`, `first_use_since` and `declared_hang`, the
child writes it through `mark_started`, `enter_first_use`, `leave_first_use` and `declare_hang`:
nobody else touches these files.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

FIRST_USE_SUFFIX = ".first-use"


def _monotonic_mtime(path: str) -> Optional[float]:
    """A file's mtime on the monotonic clock (None when it does not exist)."""
    try:
        return time.monotonic() - max(time.time() - os.stat(path).st_mtime, 0.0)
    except OSError:
        return None


@dataclass(frozen=True)
class TaskFiles:
    """The paths of one task's files, all named from one prefix."""

    prefix: str

    @property
    def task(self) -> str:
        return f"{self.prefix}.task"

    @property
    def result(self) -> str:
        return f"{self.prefix}.result.json"

    @property
    def stack(self) -> str:
        return f"{self.prefix}.stack"

    @property
    def started(self) -> str:
        return f"{self.prefix}.started"

    @property
    def first_use(self) -> str:
        return self.started + FIRST_USE_SUFFIX

    @property
    def hang(self) -> str:
        return f"{self.prefix}.hang"

    # --- the child's side -----------------------------------------------------------------

    def mark_started(self) -> None:
        """The task begins: its timeout runs from now (interpreter start and runtime init left out)."""
        Path(self.started).touch()

    def enter_first_use(self) -> None:
        open(self.first_use, "w").close()

    def leave_first_use(self, spent: float) -> None:
        """Move the start forward by the first use's `spent` seconds, then leave first use: the
        timeout bounds the rest of the task, not the compile."""
        mark = os.stat(self.started).st_mtime + spent
        os.utime(self.started, (mark, mark))
        os.unlink(self.first_use)

    def declare_hang(self, message: str) -> None:
        """The probe says its task hung: written whole (a temporary file, then a rename), so the
        watchdog never reads half a message."""
        with open(f"{self.hang}.tmp", "w", encoding="utf-8") as fh:
            fh.write(message)
        os.replace(f"{self.hang}.tmp", self.hang)

    # --- the parent's side ----------------------------------------------------------------

    def started_at(self) -> Optional[float]:
        """When the task began, moved forward by finished first uses (monotonic clock), or None."""
        return _monotonic_mtime(self.started)

    def first_use_since(self) -> Optional[float]:
        """When the first use in progress began (monotonic clock), or None outside first use."""
        return _monotonic_mtime(self.first_use)

    def declared_hang(self) -> Optional[str]:
        """The message of a hang the probe declared, or None."""
        try:
            with open(self.hang, encoding="utf-8", errors="replace") as fh:
                return fh.read()
        except OSError:
            return None

    def has_result(self) -> bool:
        return os.path.exists(self.result)

    def clear(self) -> None:
        """Remove what a try of the task left (before it runs again)."""
        for path in (self.result, self.stack, self.started, self.first_use, self.hang):
            try:
                os.unlink(path)
            except OSError:
                pass
