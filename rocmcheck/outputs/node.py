"""The node verdict: one JSON document a scheduler's prolog reads from `rocmcheck gate --json -`.

Shaped like the node-readiness gates platform teams already run (one verdict per node, a
fixed exit-code contract, a recommended action per failing check): status GO (exit 0, the
node may take the job), NO-GO (exit 1, drain it) or UNKNOWN (exit 2, no verdict could be
reached: no torch, bad input, an internal error). Never imports torch.
"""
from __future__ import annotations

import os
import socket
import time
from typing import Any, Dict, List, Optional

from ..model import ExitCode, Status, Verdict, node_status
from ..records import Report
from ..safetext import clean
from .render import on_gpu

SCHEMA = "rocmcheck-node-verdict"
SCHEMA_VERSION = "1.0"
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
    error = run.interruption() if run.partial else ""
    interrupted = {"error": error} if error else {}
    unwritten = {"unwritten": dict(run.unwritten)} if run.unwritten else {}
    said = (drain_reason(node_status(exit_code), error, inject=run.inject) if error or not bad else
            drain_reason(node_status(exit_code), bad[0].variant + on_gpu(bad[0].device), len(bad) - 1,
                         bad[0].message, run.inject))
    return {**_head(exit_code, said), **interrupted, "device": run.device, "backend": report.device.get("backend"),
            "gpus_seen": report.device.get("count"), "counts": run.counts, "failing": failing,
            "warnings": warnings,
            "notes": run.notes, "partial": run.partial, "reports": files or {},
            **unwritten}


def unknown(error: str) -> Dict[str, Any]:
    """No verdict could be reached (exit 2): say why, in the same shape."""
    return {**_head(ExitCode.USAGE, drain_reason("UNKNOWN", error)), "error": error, "failing": []}


def drain_reason(status: str, what: str = "", others: int = 0, message: str = "", inject: str = "") -> str:
    """The verdict in one line a scheduler keeps as a node's reason: "rocmcheck NO-GO: device-smoke
    on cuda:1 (gfx942, 0000:c1:00.0), +3 more: <its message>", "rocmcheck UNKNOWN: <why>",
    "rocmcheck GO"; "rocmcheck DRILL NO-GO (injected: copy-zeros): ..." where faults were injected,
    so a drill never reads as a real failure, even cut short. At most REASON_LIMIT characters of
    printable ASCII without quotes, backslash or `$`: the Slurm prolog reads it from the
    document's own line, and NHC passes it through `eval` in single quotes."""
    head = f"rocmcheck {'DRILL ' if inject else ''}{status}" + (f" (injected: {inject})" if inject else "")
    detail = what + (f", +{others} more" if others else "") + (f": {message}" if message else "")
    text = " ".join(f"{head}: {detail}".split()) if detail else head
    text = "".join(c if " " <= c <= "~" and c not in "'\"\\`$" else "?" for c in text)
    return text if len(text) <= REASON_LIMIT else text[:REASON_LIMIT - 3] + "..."


def _head(exit_code: int, reason: str) -> Dict[str, Any]:
    """The fields every node verdict starts with; `job_id` is the scheduler's job that ran the gate
    (Slurm's prolog and job steps set $SLURM_JOB_ID), so each job's verdict names its job."""
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "node": socket.gethostname(),
            "job_id": clean(os.environ.get("SLURM_JOB_ID", "")) or None,
            "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "status": node_status(exit_code), "exit_code": int(exit_code), "reason": reason}
