"""The node verdict: one JSON document a scheduler's prolog reads from `rocmcheck gate --json -`.

Shaped like the node-readiness gates platform teams already run (one verdict per node, a
fixed exit-code contract, a recommended action per failing check): status GO (exit 0, the
node may take the job), NO-GO (exit 1, drain it) or UNKNOWN (exit 2, no verdict could be
reached: no torch, bad input, an internal error). A drill (a fault injected on purpose) says
so in `drill`, a simulation in `simulated`. Never imports torch.
"""
from __future__ import annotations

import socket
import time
from typing import Any, Dict, List, Optional

from ..model import ExitCode, Status, Verdict, node_status
from ..records import Report
from .render import injected

SCHEMA = "rocmcheck-node-verdict"
SCHEMA_VERSION = "1.1"  # 1.1: `drill` and `simulated`


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
    on_gpu = run.device != "cpu"
    failing: List[Dict[str, Any]] = []
    for v in report.verdicts:
        if v.status.is_bad:
            failing.append({"check": v.variant, "status": v.status.value, "message": v.message,
                            "device": v.device or run.device, "action": action(v, on_gpu),
                            "known_issues": [i.get("id") for i in v.known_issues]})
    # a GO node can still be one to watch (correctable errors rising, a GPU throttled at idle)
    warnings = [{"check": v.variant, "message": v.message, "device": v.device or run.device}
                for v in report.verdicts if v.status is Status.WARN]
    interrupted = {"error": f"interrupted {run.where_interrupted()}"} if run.partial else {}
    unwritten = {"unwritten": dict(run.unwritten)} if run.unwritten else {}
    drill, simulated = injected(report)
    injections = {**({"drill": drill} if drill else {}), **({"simulated": simulated} if simulated else {})}
    return {**_head(exit_code), **interrupted, **injections, "device": run.device,
            "backend": report.device.get("backend"), "gpus_seen": report.device.get("count"), "counts": run.counts,
            "failing": failing, "warnings": warnings,
            "notes": run.notes, "partial": run.partial, "reports": files or {},
            **unwritten}


def unknown(error: str) -> Dict[str, Any]:
    """No verdict could be reached (exit 2): say why, in the same shape."""
    return {**_head(ExitCode.USAGE), "error": error, "failing": []}


def _head(exit_code: int) -> Dict[str, Any]:
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "node": socket.gethostname(),
            "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "status": node_status(exit_code), "exit_code": int(exit_code)}

