"""Exceptions users and probes see. The exception tree:

    RocmcheckError
    ├── UsageError        bad input from the user: one-line message, exit code 2
    ├── TorchMissing      torch cannot be imported: nothing can be assessed, exit code 2
    └── GateFailed        rocmcheck.gate() found NO-GO
    Outcome (BaseException)        how a probe ends other than by returning or by its own error
    ├── ProbeFailure               `ctx.fail`: the probe's result was wrong -> verdict `fail`
    ├── Skip                       `ctx.skip`: the probe does not apply here -> verdict `skip`
    └── Hang                       `ctx.hang`: processes a probe started are stuck -> verdict `hang`
    Interrupted (BaseException)    SIGTERM: ends a run like Ctrl-C (never a verdict)

The outcomes derive from BaseException, as pytest's `OutcomeException` does, so a probe's own
`except Exception` (around a library call that may raise anything) cannot swallow a skip, a
fail or a hang and turn it into a pass.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Callable, Dict, Iterator, List


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


class Outcome(BaseException):
    """A probe's verdict, raised through its own code to the caller of the probe (`ProbeContext.call`)."""


class ProbeFailure(Outcome):
    """What `ctx.fail` raises: the probe's result is wrong (its measurements go through `ctx.measure`)."""


class Skip(Outcome):
    """What `ctx.skip` raises: the probe does not apply on this machine (torchapi raises it too, for a
    torch or device that lacks an API)."""


class Hang(Outcome):
    """What `ctx.hang` raises: processes the probe started (a collective's ranks) are stuck. In a
    child, the watchdog then ends the task as at its deadline, killing the whole tree by its kill
    policy, so the verdict is `hang` without the probe blocking until the deadline."""


class Interrupted(BaseException):
    """SIGTERM received: the run ends like Ctrl-C, with a partial report and no verdict."""


def raise_interrupted(signum: int, frame: Any) -> None:
    """The SIGTERM handler: a scheduler's timeout becomes an exception the run can end on."""
    raise Interrupted(signal.Signals(signum).name)


@contextlib.contextmanager
def interrupts_taken(sigterm: bool = True, sigint: bool = True) -> Iterator[None]:
    """While a run holds GPUs and children: SIGTERM (where `sigterm`) raises `Interrupted`, and
    Ctrl-C (SIGINT, where `sigint`) raises KeyboardInterrupt even where the process inherited it
    ignored or at its default; both so the run ends with its partial report and kills its children.

    Python turns SIGINT into KeyboardInterrupt only where its parent left it handled; a background
    job of a non-interactive shell (`make test &`, a CI step's `cmd &`, a job script) inherits it
    ignored, and every process it starts after that too. Such a run would go on after its SIGINT,
    for as long as its probes' timeouts, holding the GPU (issue 40: the three SIGINT tests of a
    `make test` started that way all failed so). A SIGINT sent to a run (`kill -INT`, `timeout -s
    INT`, a CI's cancel, a terminal's Ctrl-C reaching the job) is meant to stop it, so it is taken
    back for the run's duration by the command and the plugin (a program calling the engine
    itself keeps its own choice). A handler of the program's own is kept; only the main thread
    can set one (elsewhere nothing changes). Each is restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wanted: Dict[int, Callable[[int, Any], Any]] = {signal.SIGTERM: raise_interrupted} if sigterm else {}
    if sigint and signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
        wanted[signal.SIGINT] = signal.default_int_handler
    previous = {signum: signal.signal(signum, handler) for signum, handler in wanted.items()}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
