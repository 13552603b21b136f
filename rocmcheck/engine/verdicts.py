"""Where every status comes from: one module, one hop from the runner.

| status | decided by | where |
|---|---|---|
| pass, warn | the probe returned; warn when it called `ctx.warn` | `outcome` (in the child) |
| skip | the probe called `ctx.skip` (or torchapi raised `Skip`); or the runner never started it | `outcome`; |
| | (unmet `requires`, torch cannot use the host's GPU, the device's canary failed) | `not_run` |
| fail | the probe called `ctx.fail`, or a check in it raised `AssertionError` | `outcome` |
| error | any other exception, `sys.exit()` or `KeyboardInterrupt` inside the probe; | `outcome`; `no_result` |
| | a child that exited 0 without a result; | |
| | the probe missing in the child, GPU runtime init raising, rocmcheck's own code | `probe_not_found`, |
| | failing in the child | `runtime_init_failed`, `harness_failed` |
| crash | the child died by a signal, or exited non-zero without a result, | `no_result`, `assemble` |
| | or with the isolation server | |
| hang | the watchdog's deadline passed (probe timeout, startup or first-use limit), or the probe | `assemble` |
| | declared one (`ctx.hang`: processes it started are stuck); the watchdog killed the tree | |
| any | a fail, error or crash in a worker is re-run alone in a fresh child: that verdict counts | `confirmed` |
| warn | ... and where it passes alone: flaky, or state left by an earlier task | `confirmed` |

The child writes `outcome`'s status into its result file (a `task.TaskResult`); `assemble` (in the parent) turns
what the watchdog saw and that file into exactly one `Verdict`, cleaned of text no output
format accepts. After that the runner only adds where it ran (`env`, `device`) and
the known issues that fit it (`known_issues.judged`); the status changes again only where its speed
falls below the device's spec or the node's other GPUs (`knowledge.speed`: pass becomes warn, or fail with
`--slow-gpu nogo`).
"""
from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..errors import Hang, ProbeFailure, Skip
from ..knowledge.signatures import signatures
from ..model import Status, Variant, Verdict
from ..safetext import clean, clean_tree
from .exitcodes import describe, signal_of
from .killpolicy import KillStep, step_texts
from .task import ErrorInfo, TaskResult
from .watchdog import ChildEnd

EVIDENCE_TAIL_CHARS = 4000


# --- in the child: how the probe ended ---------------------------------------------------------


def outcome(ended: Optional[BaseException], warnings: List[str]) -> TaskResult:
    """Status and message (and the exception) of a probe that returned (`ended` None) or raised
    `ended`."""
    if ended is None:
        return TaskResult(Status.WARN if warnings else Status.PASS, "; ".join(warnings) or "ok")
    if isinstance(ended, Skip):
        return TaskResult(Status.SKIP, str(ended))
    if isinstance(ended, Hang):  # in a child the watchdog ends it first (child.await_hang_kill); in-process, here
        return TaskResult(Status.HANG, str(ended))
    if isinstance(ended, (ProbeFailure, AssertionError)):  # a library's check (assert_close) fails too
        status, message = Status.FAIL, first_line(ended)
    elif isinstance(ended, SystemExit):
        status, message = Status.ERROR, f"the probe called sys.exit({ended.code!r}) before returning a result"
    elif isinstance(ended, KeyboardInterrupt):
        status, message = Status.ERROR, ("the probe raised KeyboardInterrupt itself (not a Ctrl-C: probes run in "
                                         "their own session)")
    else:
        status, message = Status.ERROR, first_line(ended)
        if "OutOfMemoryError" in type(ended).__name__ or "out of memory" in str(ended).lower():
            message = f"out of memory: {message}"
    return TaskResult(status, message, exception=ErrorInfo.of(ended))


def probe_not_found(probe_id: str) -> TaskResult:
    """The child's registry lacks the probe the parent selected (a module that failed to load there)."""
    return TaskResult(Status.ERROR, f"probe '{probe_id}' not found in the child")


def runtime_init_failed(exc: BaseException) -> TaskResult:
    """GPU runtime init raised in the child: an error, and the runner's cue to fall back to spawn
    when the child was forked."""
    return TaskResult(Status.ERROR, f"GPU runtime init failed: {first_line(exc)}", gpu_init_failed=True,
                      exception=ErrorInfo.of(exc))


def harness_failed(exc: BaseException) -> TaskResult:
    """rocmcheck's own code failed inside the child (not the probe's): still a result, never a pass."""
    return TaskResult(Status.ERROR, f"rocmcheck child failed: {first_line(exc)}", exception=ErrorInfo.of(exc))


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --- in the parent: one verdict from the child's end and its result file ---------------------


def read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def end_summary(end: ChildEnd) -> str:
    return "timed out" if end.timed_out else f"child ended with {describe(end.returncode)} without a result"


def evidence_of(end: ChildEnd, stack: str) -> Dict[str, Any]:
    evidence: Dict[str, Any] = {"exit": describe(end.returncode, os.name == "nt"), "returncode": end.returncode,
                                "elapsed_s": round(end.elapsed_s, 3)}
    if end.lost:
        evidence["exit"] = "unknown: the isolation server that would report it died"
    if end.alive:
        evidence["exit"] = "none: its worker child went on to the next task"
    if signal_of(end.returncode):
        evidence["signal"] = describe(end.returncode)
    if end.output:
        evidence["output_tail"] = end.output[-EVIDENCE_TAIL_CHARS:]
        evidence["output_bytes"] = end.output_bytes
        if end.output_cut:
            evidence["output_cut_bytes"] = end.output_cut
    if stack.strip():
        evidence["stack"] = stack.strip()
    found = signatures(end.output + "\n" + stack)
    if found:
        evidence["signatures"] = found
    if end.kill_steps:
        evidence["kill_steps"] = step_texts(end.kill_steps)
    if end.leftovers_killed:
        evidence["leftover_processes_killed"] = len(end.leftovers_killed)
        evidence["leftover_processes"] = end.leftovers_killed
    if KillStep.KILL in end.kill_steps:
        evidence["teardown"] = {"waited_s": round(end.teardown_s, 3), "states_seen": end.teardown_states}
    if end.unkillable:
        evidence["unkillable"] = end.state
    return evidence


def no_result(end: ChildEnd) -> Tuple[Status, str]:
    sig = signal_of(end.returncode)
    if sig == signal.SIGKILL:
        return Status.CRASH, "killed by SIGKILL, not by rocmcheck: possibly the kernel's OOM killer"
    if sig:
        return Status.CRASH, f"crashed: {describe(end.returncode)}"
    if end.returncode != 0:
        return Status.CRASH, f"exited with {describe(end.returncode, os.name == 'nt')} without a result"
    return Status.ERROR, "exited without a result (exit 0): no verdict was reported"


def assemble(variant: Variant, end: ChildEnd, result: Optional[TaskResult], stack: str,
             timeout: float) -> Verdict:
    """Turn what the watchdog saw and what the child wrote into exactly one verdict."""
    evidence = evidence_of(end, stack)
    measurements: Dict[str, Any] = {}
    if end.timed_out:
        status = Status.HANG
        steps = ", ".join(step_texts(end.kill_steps))
        message = f"no verdict within {timeout:g}s; child killed ({steps})"
        if end.never_started:
            message = f"the child never started its task (stuck starting Python, importing torch or " \
                      f"initialising the GPU runtime); killed ({steps})"
        if end.declared_hang is not None:
            message = f"{end.declared_hang}; child killed with its processes ({steps})"
        elif end.in_first_use and end.first_use_limit is not None:
            message = f"first use (compilation, kernel search) ran past its {end.first_use_limit:g}s limit; " \
                      f"child killed ({steps})"
        elif end.in_first_use:
            message = f"no verdict within {timeout:g}s (first use included); child killed ({steps})"
        if end.unkillable:
            message = f"no verdict within {timeout:g}s and the child could not be killed " \
                      f"(state {end.state.get('status', '?')} {end.teardown_s:.0f}s after SIGKILL)"
    elif result is None and end.lost:
        status, message = Status.CRASH, "the isolation server died, and the child ended without a result"
    elif result is None:
        status, message = no_result(end)
    else:
        status, message = result.status, result.message
        measurements = dict(result.measurements or {})
        if result.exception is not None and status in (Status.FAIL, Status.ERROR):
            evidence["traceback"] = result.exception.traceback[-EVIDENCE_TAIL_CHARS:]
            found = signatures(message + "\n" + evidence["traceback"])
            if found:
                evidence["signatures"] = sorted(set(evidence.get("signatures", [])) | set(found))
        if result.faults_installed:
            evidence["faults_injected"] = result.faults_installed
        if result.worker_task:  # not the first task of its process: the runtime was already up
            evidence["worker_task"] = result.worker_task
        if result.state_put_back:
            evidence["state_put_back"] = result.state_put_back
        if result.retire:
            evidence["worker_ended"] = f"the worker could not go on after this task: {result.retire}"
        for timing, seconds in (("probe_s", result.probe_s), ("runtime_init_s", result.runtime_init_s)):
            if seconds is not None:  # after the probe's own measurements
                measurements.setdefault(timing, round(seconds, 4))
    return Verdict(variant.spec.id, variant.id, status, dict(variant.params), clean(message),
                   round(end.elapsed_s, 4), clean_tree(measurements), clean_tree(evidence))


def not_run(variant: Variant, reason: str) -> Verdict:
    """A variant the runner never started: unmet `requires`, a GPU torch cannot use, a wedged device."""
    return Verdict(variant.spec.id, variant.id, Status.SKIP, dict(variant.params), clean(reason))


def confirmed(in_worker: Verdict, alone: Verdict, after: Optional[str]) -> Verdict:
    """A variant that went bad in a worker, re-run alone in a fresh child: the fresh child's
    verdict counts (a previous task's leftovers must never fail the next), and says both. A
    pass alone is a warn, never a silent pass: the failure was flaky, or left by `after`."""
    evidence = in_worker.evidence
    kept: Dict[str, Any] = {k: evidence[k] for k in ("signal", "stack", "traceback") if k in evidence}
    first: Dict[str, Any] = {"status": in_worker.status.value, "message": in_worker.message, "after": after, **kept}
    alone.evidence["in_worker"] = clean_tree(first)
    if alone.status is in_worker.status:
        alone.evidence["confirmed_alone"] = True
        return alone
    alone.message = clean(f"{in_worker.status.value} in a shared worker after {after or 'its start'} "
                          f"({in_worker.message}), {alone.status.value} alone: flaky, or state left by an earlier "
                          f"task{'' if alone.message in ('', 'ok') else f'; {alone.message}'}")
    if alone.status is Status.PASS:
        alone.status = Status.WARN
    return alone
