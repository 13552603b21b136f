"""The node verdict: one JSON document a scheduler's prolog reads from `rocmcheck gate --json -`.

Shaped like the node-readiness gates platform teams already run (one verdict per node, a
fixed exit-code contract, a recommended action per failing check): status GO (exit 0, the
node may take the job), NO-GO (exit 1, drain it) or UNKNOWN (exit 2, no verdict could be
reached: no torch, bad input, an internal error). Never imports torch.
"""
from __future__ import annotations

import socket
import time
from typing import Any, Dict, List, Optional

from ..model import ExitCode, Status, is_bad, node_status

SCHEMA = "rocmcheck-node-verdict"
SCHEMA_VERSION = "1.0"


def action(verdict: Dict[str, Any], on_gpu: bool) -> str:
    """The honest next step for one failing verdict."""
    fix = (verdict.get("evidence") or {}).get("fix")
    if fix:
        return f"fix: {fix}"
    issues = verdict.get("known_issues") or []
    workaround = next((i.get("workaround") for i in issues if i.get("workaround")), None)
    if workaround:
        return f"apply the known workaround ({issues[0].get('id')}): {workaround}"
    measured = (verdict.get("measurements") or {}).get("action")
    if measured:  # the probe knows the step: gpu-visible's install command, node-health's "drain; reset or replace"
        return str(measured)
    if Status(verdict["status"]) in (Status.CRASH, Status.HANG) and on_gpu:
        return "drain the node and reset the GPU: a GPU that crashes or hangs a probe takes the next job down too"
    if on_gpu:
        return "drain the node: this GPU and software stack compute wrong results; attach `rocmcheck report` upstream"
    return "fix this before training: see the verdict's message and `rocmcheck report`"


def verdict(report: Dict[str, Any], exit_code: int, files: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """The node's verdict from a finished (gate) run."""
    run = report.get("run") or {}
    on_gpu = str(run.get("device", "cpu")) != "cpu"
    failing: List[Dict[str, Any]] = []
    for v in report.get("verdicts") or []:
        if is_bad(v["status"]):
            failing.append({"check": v["variant"], "status": v["status"], "message": v.get("message", ""),
                            "device": v.get("device") or run.get("device"), "action": action(v, on_gpu),
                            "known_issues": [i.get("id") for i in v.get("known_issues") or []]})
    # a GO node can still be one to watch (correctable errors rising, a GPU throttled at idle)
    warnings = [{"check": v["variant"], "message": v.get("message", ""), "device": v.get("device") or run.get("device")}
                for v in report.get("verdicts") or [] if v["status"] == Status.WARN.value]
    device = (report.get("fingerprint") or {}).get("device") or {}
    interrupted = {"error": f"interrupted during {run.get('interrupted')}"} if run.get("partial") else {}
    unwritten = {"unwritten": run["unwritten"]} if run.get("unwritten") else {}
    return {**_head(exit_code), **interrupted, "device": run.get("device"), "backend": device.get("backend"),
            "gpus_seen": device.get("count"), "counts": run.get("counts") or {}, "failing": failing,
            "warnings": warnings,
            "notes": run.get("notes") or [], "partial": bool(run.get("partial")), "reports": files or {},
            **unwritten}


def unknown(error: str) -> Dict[str, Any]:
    """No verdict could be reached (exit 2): say why, in the same shape."""
    return {**_head(ExitCode.USAGE), "error": error, "failing": []}


def _head(exit_code: int) -> Dict[str, Any]:
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "node": socket.gethostname(),
            "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "status": node_status(exit_code), "exit_code": int(exit_code)}
