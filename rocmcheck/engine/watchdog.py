"""Supervise one child: wait for its end or its deadline, then kill the whole tree.

On timeout, or when the probe declared a hang (`ctx.hang`: helpers it started, a collective's
ranks, are stuck), the watchdog takes the steps of its `KillPolicy`: ask for every thread's
Python stack (SIGUSR1 -> faulthandler), TERM the process group, KILL it after a grace period,
then wait a bounded time for the tree to go (the policy's teardown: a GPU process killed
mid-kernel spends seconds in driver teardown). A child that still lives then is recorded as
unkillable (with its /proc state) and abandoned: the run goes on instead of hanging with it.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from ..markers import TaskFiles
from .capture import OutputDrain
from .killpolicy import SIGKILL, KillPolicy, KillStep
from .launch import ChildProcess
from .proctree import leftovers, process_state

FIRST_USE_PROGRESS_S = 15.0  # while a probe is in first use (a compile, a cold kernel search): say so this often
STARTUP_LIMIT_S = 120.0  # interpreter start, `import torch` and GPU runtime init (a cold start): not the timeout


@dataclass
class ChildEnd:
    """How a child ended, as the watchdog saw it."""

    returncode: Optional[int]
    elapsed_s: float
    timed_out: bool = False  # ended as hung: its deadline passed, or its probe declared a hang
    declared_hang: Optional[str] = None  # the probe's own words when it declared the hang (`ctx.hang`)
    never_started: bool = False  # timed out before the child began its task (stuck importing or initialising)
    in_first_use: bool = False  # timed out inside the probe's first call (`ctx.first_use()`)
    first_use_limit: Optional[float] = None  # the first-use limit that ran out (None: the timeout bounded it)
    unkillable: bool = False
    alive: bool = False  # a worker child that finished the task (its result is written) and waits for the next
    lost: bool = False  # it ended, but the isolation server that would report its exit status died
    output: str = ""
    output_bytes: int = 0
    output_cut: int = 0
    leftovers_killed: List[str] = field(default_factory=list)  # "pid command" of each
    state: Dict[str, str] = field(default_factory=dict)
    kill_steps: List[KillStep] = field(default_factory=list)
    teardown_s: float = 0.0  # from SIGKILL to the end (or to giving up)
    teardown_states: List[str] = field(default_factory=list)  # process states seen meanwhile


def _kill_hung(child: ChildProcess, end: ChildEnd, policy: KillPolicy) -> None:
    """Take the policy's steps in order until the child is gone; each step taken is recorded."""
    for step, wait in policy.steps:
        signum = step.signum
        if signum is None:  # the platform has no signal for this step (SIGUSR1 on Windows)
            continue
        if step is KillStep.STACK_DUMP:  # to the child alone: the processes it started may not handle SIGUSR1
            try:
                os.kill(child.pid, signum)
            except OSError:
                continue
            end.kill_steps.append(step)
            time.sleep(wait)
            continue
        child.signal_tree(signum)
        end.kill_steps.append(step)
        if step is KillStep.KILL:
            _wait_for_teardown(child, end, wait)
            return
        end.returncode = child.wait(wait)
        if end.returncode is not None or child.lost:
            return


def _wait_for_teardown(child: ChildProcess, end: ChildEnd, limit: float) -> None:
    """Wait up to `limit` s for a SIGKILLed child to go, re-reading its state: only one still
    there after that is unkillable. The states seen (D: in driver teardown) go to the evidence."""
    start = time.monotonic()
    while True:
        end.returncode = child.wait(min(0.25, max(limit - (time.monotonic() - start), 0)))
        if end.returncode is not None or child.lost:
            break
        state = process_state(child.pid)
        if state.get("status") and state["status"] not in end.teardown_states:
            end.teardown_states.append(state["status"])
        if time.monotonic() - start >= limit:
            end.unkillable, end.state = True, state
            break
    end.teardown_s = time.monotonic() - start


def supervise(child: ChildProcess, timeout: float, files: Optional[TaskFiles] = None,
              startup_limit: float = STARTUP_LIMIT_S, first_use_limit: Optional[float] = None,
              policy: KillPolicy = KillPolicy(),
              on_first_use: Optional[Callable[[float], None]] = None,
              drain: Optional[OutputDrain] = None) -> ChildEnd:
    """Wait for `child`; always returns, always leaves no tree behind (save an unkillable
    process). The child marks `files.started` once its interpreter, `import torch` and the GPU
    runtime are up (all within `startup_limit`); `timeout` runs from there. With a
    `first_use_limit`, time inside `ctx.first_use()` is bounded by it instead and left out of
    the timeout (the child moves the marker forward by it); with None, the timeout bounds
    everything after the marker, first use included. `elapsed_s` is wall time from the marker.
    `on_first_use(seconds)` hears every FIRST_USE_PROGRESS_S of one first use (minutes of
    compiling must not look like a hang). A child past its deadline, or whose probe declared a
    hang (`files.declared_hang`), is ended by `policy`'s steps. An interrupt (Ctrl-C, SIGTERM)
    SIGKILLs the tree, waits the policy's `interrupt_wait_s` for it, and re-raises.

    With `drain` (the output drain of a worker child, which outlives its tasks), the task also
    ends when its result file appears: the child is left running (`alive`), with this task's
    output cut from the drain, unless the task left a process behind; then the worker is
    ended here, so that the sweep names this task."""
    own_drain = drain is None
    drain = drain or OutputDrain(child.out_fd)
    taken = None  # a worker task's output, cut at its end
    start = time.monotonic()
    began = None if files else start  # first sight of the marker: where the wall time runs from
    end = ChildEnd(returncode=None, elapsed_s=0.0)
    said: Tuple[Optional[float], int] = (None, 0)  # (when the current first use began, progress lines said about it)
    try:
        while end.returncode is None and not child.lost:
            shifted = files.started_at() if files else None  # moved forward by first use
            began = began if began is not None else shifted
            warming = files.first_use_since() if began is not None and files else None
            if not own_drain and files is not None and files.has_result():
                taken = drain.take_task_output(timeout=2.0)  # None: no task end came, the worker is exiting
                end.alive = taken is not None and not leftovers(child.pid, child.token, child.before)
                break
            if began is None:
                deadline = start + startup_limit
            elif warming is not None and first_use_limit is not None:
                deadline = warming + first_use_limit
            else:
                deadline = (began if first_use_limit is None else shifted or began) + timeout
            if warming is None:
                said = (None, 0)
            elif on_first_use is not None:
                since, count = said
                if since is None:  # as first seen: re-reads jitter
                    since, count = warming, 0
                if time.monotonic() - since >= (count + 1) * FIRST_USE_PROGRESS_S:
                    on_first_use(time.monotonic() - since)
                    count += 1
                said = (since, count)
            left = deadline - time.monotonic()
            end.declared_hang = files.declared_hang() if began is not None and files else None
            if left <= 0 or end.declared_hang is not None:
                end.timed_out = True
                end.never_started = began is None
                end.in_first_use = warming is not None
                end.first_use_limit = first_use_limit if warming is not None else None
                _kill_hung(child, end, policy)
                break
            if own_drain or not drain.open or drain.ended:
                end.returncode = child.wait(min(left, 0.25 if began is not None else 0.02))
            else:  # a worker's tasks take milliseconds: wake at the task's end, or its output closing
                drain.wait_for_task_end(min(left, 0.25))
                end.returncode = child.wait(0)
    except BaseException:
        child.signal_tree(SIGKILL)
        child.wait(policy.interrupt_wait_s)
        raise
    finally:
        end.elapsed_s = time.monotonic() - (began if began is not None else start)
        output = taken
        if not end.alive:  # the child ended, or a worker is ended because its task left a process behind
            end.lost = child.lost
            if not end.unkillable:
                end.leftovers_killed = child.kill_leftovers()
            child.close_lifeline()
            rest = drain.finish(timeout=0.5 if end.timed_out else 2.0)
            output = output or rest
        if output is not None:
            end.output, end.output_bytes, end.output_cut = output.text(), output.total, output.truncated
    return end
