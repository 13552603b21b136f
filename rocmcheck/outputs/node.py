"""The node verdict: one JSON document a scheduler's prolog reads from `rocmcheck gate --json -`.

Shaped like the node-readiness gates platform teams already run (one verdict per node, a
fixed exit-code contract, a recommended action per failing check): status GO (exit 0, the
node may take the job), NO-GO (exit 1, drain it) or UNKNOWN (exit 2, no verdict could be
reached: no torch, bad input, an internal error). A drill (a fault injected on purpose) says
so in `drill`, a simulation in `simulated`. docs/schema/node-verdict.schema.json publishes the
shape (its `$id` names SCHEMA_VERSION): a new minor version only adds fields. Its one-line form,
`npd_line`, is a node-problem-detector custom plugin's output (`rocmcheck gate --npd`).
Never imports torch.
"""
from __future__ import annotations

import os
import socket
import time
from typing import Any, Dict, List, Optional

from ..faults import drill_split
from ..model import NOT_RUN_DECIDED, ExitCode, Status, Verdict, node_status
from ..records import Report
from ..safetext import clean
from .render import counts_line, injected, on_gpu

SCHEMA = "rocmcheck-node-verdict"
SCHEMA_VERSION = "1.2"  # 1.1: `drill` and `simulated`; 1.2: `job_id` and `reason`
# node-problem-detector keeps at most this many bytes of a custom plugin's stdout as the condition's
# message: `max_output_length`, default 80 (pkg/custompluginmonitor/types/config.go,
# defaultMaxOutputLength; plugin.go cuts the output there)
NPD_OUTPUT_LIMIT = 80
# Slurm keeps any length in the controller, but slurmdbd records a node's reason in its event
# table's TINYTEXT column (255 bytes); NHC puts "NHC: " before ours, so 250 fits both
REASON_LIMIT = 250


def action(verdict: Verdict, on_gpu: bool) -> str:
    """The honest next step for one failing verdict."""
    fix = verdict.evidence.get("fix")
    if fix:
        return f"fix: {fix}"
    issues = verdict.known_issues
    workaround = next((i.get("workaround") for i in issues if i.get("workaround")), None)
    if workaround:
        return f"apply the known workaround ({issues[0].get('id')}): {workaround}"
    measured = verdict.measurements.get("action")
    if measured:  # the probe knows the step: gpu-visible's install command, node-health's "drain; reset or replace"
        return str(measured)
    if verdict.status in (Status.CRASH, Status.HANG) and on_gpu:
        return "drain the node and reset the GPU: a GPU that crashes or hangs a probe takes the next job down too"
    if on_gpu:
        return "drain the node: this GPU and software stack compute wrong results; attach `rocmcheck report` upstream"
    return "fix this before training: see the verdict's message and `rocmcheck report`"


def verdict(report: Report, exit_code: int, files: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """The node's verdict from a finished (gate) run."""
    run = report.run
    bad = [v for v in report.verdicts if v.status.is_bad]
    failing: List[Dict[str, Any]] = [
        {"check": v.variant, "status": v.status.value, "message": v.message, "device": v.device or run.device,
         "action": action(v, run.device != "cpu"), "known_issues": [i.get("id") for i in v.known_issues]}
        for v in bad]
    # a GO node can still be one to watch (correctable errors rising, a GPU throttled at idle)
    warnings = [{"check": v.variant, "message": v.message, "device": v.device or run.device}
                for v in report.verdicts if v.status is Status.WARN]
    # a GPU slower than the node's others of its model: named whether it warned or failed (--slow-gpu nogo)
    slow = [{k: g.get(k) for k in ("gpu", "device", "pci_address", "model", "figure", "value", "reference", "unit",
                                     "basis", "status", "message")}
            for g in (report.sections.get("speed") or {}).get("slow_gpus") or []]
    error = run.interruption() if run.partial else ""
    interrupted = {"error": error} if error else {}
    unwritten = {"unwritten": dict(run.unwritten)} if run.unwritten else {}
    drill, simulated = injected(report)
    injections = {**({"drill": drill} if drill else {}), **({"simulated": simulated} if simulated else {})}
    status = node_status(exit_code)
    said = (drain_reason(status, error, drill=drill) if error or not bad else
            drain_reason(status, bad[0].variant + on_gpu(bad[0].device), len(bad) - 1, bad[0].message, drill))
    return {**_head(exit_code, said), **interrupted, **injections, "device": run.device,
            "backend": report.device.get("backend"), "gpus_seen": report.device.get("count"), "counts": run.counts,
            "failing": failing, "warnings": warnings, "slow_gpus": slow,
            "not_run": [{"check": v.variant, "device": v.device.get("name", run.device)} for v in report.verdicts
                        if v.status.value == "skip" and v.message.startswith(NOT_RUN_DECIDED)],
            "notes": run.notes, "partial": run.partial, "reports": files or {},
            **unwritten}


def unknown(error: str) -> Dict[str, Any]:
    """No verdict could be reached (exit 2): say why, in the same shape."""
    return {**_head(ExitCode.USAGE, drain_reason("UNKNOWN", error)), "error": error, "failing": []}


def started() -> Dict[str, Any]:
    """The record `gate --verdict FILE` writes before anything else (UNKNOWN, partial): replaced
    atomically by the verdict when the gate ends, so a gate killed before it could write one (Slurm
    sends SIGKILL 10 ms after SIGTERM at PrologEpilogTimeout; the OOM killer) still leaves a valid
    verdict that names its job and when it started."""
    error = f"started at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, not finished: killed or still running"
    return {**unknown(error), "partial": True}


def drain_reason(status: str, what: str = "", others: int = 0, message: str = "",
                 drill: Optional[List[str]] = None) -> str:
    """The verdict in one line a scheduler keeps as a node's reason (`one_line`, at most
    REASON_LIMIT characters): "rocmcheck NO-GO: device-smoke on cuda:1 (gfx942, 0000:c1:00.0),
    +3 more: <its message>", "rocmcheck UNKNOWN: <why>", "rocmcheck GO"; `drill`: the faults a
    drill injected (a simulation, `--inject simgpu:N` alone, is none)."""
    detail = what + (f", +{others} more" if others else "") + (f": {message}" if message else "")
    return one_line(status, detail, drill or [], REASON_LIMIT)


def _head(exit_code: int, reason: str) -> Dict[str, Any]:
    """The fields every node verdict starts with; `job_id` is the scheduler's job that ran the gate
    (Slurm's prolog and job steps set $SLURM_JOB_ID), so each job's verdict names its job."""
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "node": socket.gethostname(),
            "job_id": clean(os.environ.get("SLURM_JOB_ID", "")) or None,
            "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "status": node_status(exit_code), "exit_code": int(exit_code), "reason": reason}


def npd_line(report: Report, exit_code: int) -> str:
    """The verdict as node-problem-detector's custom plugin protocol wants it on stdout, with the
    exit code (0 OK, 1 NonOK, else Unknown) as the status: "rocmcheck NO-GO: device-smoke on
    cuda:1, +3 more", "rocmcheck GO: 36 pass", "rocmcheck UNKNOWN:
    interrupted during gemm[fp32-default]"; "rocmcheck DRILL NO-GO (copy-zeros): ..."
    in a drill. The status comes first, so a shorter `max_output_length` still keeps it."""
    status = node_status(exit_code)
    bad = [v for v in report.verdicts if v.status.is_bad]
    if report.run.partial:
        detail = report.run.interruption()
    elif bad:
        # the GPU by its torch name: its arch and PCI address would push the rest past 80 bytes
        more = f", +{len(bad) - 1} more" if len(bad) > 1 else ""
        detail = bad[0].variant + on_gpu(bad[0].device, full=False) + more
    else:
        detail = counts_line(report)
    return one_line(status, detail, injected(report)[0])


def npd_unknown(error: str, inject: str = "") -> str:
    """`npd_line` where no run was made (no torch, bad input): UNKNOWN and why."""
    return one_line(node_status(ExitCode.USAGE), error, drill_split([p.strip() for p in inject.split(",")])[0])


def one_line(status: str, detail: str, drill: List[str], limit: int = NPD_OUTPUT_LIMIT) -> str:
    """"rocmcheck STATUS: detail" ("rocmcheck DRILL STATUS (FAULTS): ..." in a drill, so a
    drill never reads as a real failure, even cut short) as one line of printable ASCII without
    quotes, backslash or `$` (the Slurm prolog reads it from the document's own line, NHC passes it
    through `eval` in single quotes), at most `limit` characters: a node condition's message
    (`npd_line`) or a scheduler's reason (`drain_reason`)."""
    head = f"rocmcheck {'DRILL ' if drill else ''}{status}" + (f" ({','.join(drill)})" if drill else "")
    text = " ".join(f"{head}: {detail}".split()) if detail else head
    text = "".join(c if " " <= c <= "~" and c not in "'\"\\`$" else "?" for c in text)
    return text if len(text) <= limit else text[:limit - 3] + "..."
