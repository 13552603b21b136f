"""Exceptions users and probes see. The exception tree:

    RocmcheckError
    ├── UsageError        bad input from the user: one-line message, exit code 2
    ├── TorchMissing      torch cannot be imported: nothing can be assessed, exit code 2
    └── GateFailed        rocmcheck.gate() found NO-GO
    ProbeFailure (AssertionError)  a probe's result was wrong -> verdict `fail`
    Skip (Exception)               a probe does not apply here -> verdict `skip`
    Hang (Exception)               processes a probe started are stuck -> verdict `hang`
    Interrupted (BaseException)    SIGTERM: ends a run like Ctrl-C (never a verdict)
"""
from __future__ import annotations

import signal
from typing import Any, List


class RocmcheckError(Exception):
    """Base of rocmcheck's own errors."""


class UsageError(RocmcheckError):
    """Bad input (unknown probe id, bad option value, unreadable path, malformed JSON)."""


class TorchMissing(RocmcheckError):
    """torch is not installed (or does not import) where the probes would run; the message
    names the command that installs the build for this host's GPU."""


class GateFailed(RocmcheckError):
    """Raised by `rocmcheck.gate()` on NO-GO; `.verdicts` holds every verdict of the gate."""

    def __init__(self, message: str, verdicts: List[Any]):
        super().__init__(message)
        self.verdicts = verdicts


class ProbeFailure(AssertionError):
    """Raise from a probe when the result is wrong. Measurements given here are kept for older
    probes; `ctx.measure` records them whatever the verdict."""

    def __init__(self, message: str, **measurements: Any):
        super().__init__(message)
        self.measurements = measurements


class Skip(Exception):
    """What `ctx.skip` raises when a probe does not apply on this machine (raising it directly still works)."""


class Hang(Exception):
    """What `ctx.hang` raises: processes the probe started (a collective's ranks) are stuck. In a
    child, the watchdog then ends the task as at its deadline, killing the whole tree by its kill
    policy, so the verdict is `hang` without the probe blocking until the deadline."""


class Interrupted(BaseException):
    """SIGTERM received: the run ends like Ctrl-C, with a partial report and no verdict."""


def raise_interrupted(signum: int, frame: Any) -> None:
    """The SIGTERM handler: a scheduler's timeout becomes an exception the run can end on."""
    raise Interrupted(signal.Signals(signum).name)
