"""Supervise one child: wait for its end or its deadline, then kill the whole tree.

On timeout: ask for every thread's Python stack (SIGUSR1 -> faulthandler), TERM the
process group, KILL it after a grace period, then wait a bounded time. A child that
still lives is recorded as unkillable (with its /proc state) and abandoned: the run
goes on instead of hanging with it.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from typing import Dict, Optional

from .capture import OutputDrain
from .launch import ChildProcess
from .proctree import kill_leftovers, process_state, signal_tree

STACK_WAIT_S = 0.3
TERM_GRACE_S = 0.5
KILL_WAIT_S = 1.0


@dataclass
class ChildEnd:
    """How a child ended, as the watchdog saw it."""

    returncode: Optional[int]
    elapsed_s: float
    timed_out: bool = False
    unkillable: bool = False
    output: str = ""
    output_bytes: int = 0
    output_cut: int = 0
    leftovers_killed: int = 0
    state: Dict[str, str] = field(default_factory=dict)
    kill_steps: list = field(default_factory=list)


def _kill_after_timeout(child: ChildProcess, end: ChildEnd) -> None:
    if hasattr(signal, "SIGUSR1"):
        try:
            os.kill(child.pid, signal.SIGUSR1)
            end.kill_steps.append("SIGUSR1 (stack dump)")
        except OSError:
            pass
        time.sleep(STACK_WAIT_S)
    for sig, wait in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, KILL_WAIT_S)):
        signal_tree(child.pid, sig)
        end.kill_steps.append(signal.Signals(sig).name)
        end.returncode = child.wait(wait)
        if end.returncode is not None:
            return
    end.unkillable = True
    end.state = process_state(child.pid)


def supervise(child: ChildProcess, timeout: float) -> ChildEnd:
    """Wait for `child` at most `timeout` s; always returns, always leaves no tree behind
    (save an unkillable process). An interrupt (Ctrl-C, SIGTERM) kills the tree and re-raises."""
    drain = OutputDrain(child.out_fd)
    start = time.monotonic()
    deadline = start + timeout
    end = ChildEnd(returncode=None, elapsed_s=0.0)
    try:
        while end.returncode is None:
            left = deadline - time.monotonic()
            if left <= 0:
                end.timed_out = True
                _kill_after_timeout(child, end)
                break
            end.returncode = child.wait(min(left, 0.25))
    except BaseException:
        signal_tree(child.pid, signal.SIGKILL)
        child.wait(KILL_WAIT_S)
        raise
    finally:
        end.elapsed_s = time.monotonic() - start
        if not end.unkillable:
            end.leftovers_killed = kill_leftovers(child.pid, thorough=end.timed_out)
        child.close_lifeline()
        drain.finish(timeout=0.5 if end.timed_out else 2.0)
        end.output, end.output_bytes, end.output_cut = drain.text(), drain.total, drain.truncated
    return end
