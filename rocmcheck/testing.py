"""Run one probe variant in this process, in milliseconds: for probe authors and for tests.

`rocmcheck run` gives every variant a child under a watchdog, which a probe's own test does not
need: `run_inline` calls the probe the way a worker child does (`ProbeContext.call`, then
`verdicts.outcome` for its status), with no child, no watchdog and no report. So a crash or a
hang in the probe is the caller's, and faults that act that way (`segv`, `hang`...) are refused;
the faults it installs are put back when it returns.

    from rocmcheck.testing import run_inline

    result = run_inline("device-smoke")
    assert result.status is Status.PASS, result.message
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from . import faults, registry, torchapi
from .context import ProbeContext
from .engine.verdicts import outcome
from .errors import UsageError
from .lazy import torch
from .model import DeviceInfo, Status

__all__ = ["InlineResult", "Status", "run_inline"]  # Status too: what a test compares a result with


@dataclass(frozen=True)
class InlineResult:
    """How one variant ended: what `rocmcheck run` would put in its verdict, less the evidence
    only a child gives (exit code, output, stack)."""

    status: Status
    message: str
    measurements: Dict[str, Any]
    warnings: Tuple[str, ...]
    faults_installed: Tuple[str, ...] = ()
    traceback: str = ""  # of the exception that ended it, for fail and error


def run_inline(probe_id: str, device: str = "cpu", inject: Optional[str] = None, duration: Optional[float] = None,
               profile: str = "full", **params: Any) -> InlineResult:
    """Run probe `probe_id` once on `device` in this process and return how it ended.

    `params` choose the variant: given ones override the probe's first variant's. `inject` is a
    fault spec as for `--inject`; `duration` the budget of a level 2 or 3 variant, as `--duration`;
    `profile` "gate" runs the sizes the gate does, "full" (the default) those of `rocmcheck run`.
    The probe's `requires` are checked as the runner checks them. The probe library and the
    folders in ROCMCHECK_PROBES_PATH are loaded first; an unknown probe or fault is a UsageError.
    """
    registry.load_all()
    spec = registry.get(probe_id)
    if spec is None:
        raise UsageError(f"unknown probe '{probe_id}' (see: rocmcheck list)")
    requests = faults.parse(inject or "")
    known = faults.catalogue()
    acting = [str(r) for r in requests if r.applies_to(probe_id) and known[r.name].in_probe]
    if acting:
        raise UsageError(f"fault '{acting[0]}' crashes, hangs or ends the process that runs the probe: "
                         "inject it with `rocmcheck run --inject`, where the probe has a child of its own")
    reason = spec.requires.unmet(_device_info(device), sys.platform)
    if reason:
        return InlineResult(Status.SKIP, reason, {}, ())
    chosen = {**spec.variants[0], **params}
    ctx = ProbeContext(device=device, requested_device=device, profile=profile, params=chosen, timeout=spec.timeout,
                       budget_s=spec.work_budget(chosen, duration))
    with faults.reverting():
        installed = faults.install(requests, probe_id)
        ended = ctx.call(spec.func, catching=Exception)  # Ctrl-C and sys.exit stay the caller's
    result = outcome(ended, ctx.warnings)
    return InlineResult(result.status, result.message, dict(ctx.measurements), tuple(ctx.warnings),
                        tuple(installed), result.exception.traceback if result.exception else "")


def _device_info(device: str) -> DeviceInfo:
    """What the runner's device facts would say about `device`, for the probe's `requires`."""
    if device == "cpu":
        return DeviceInfo()
    kind = device.split(":")[0]
    return DeviceInfo(device, "rocm" if kind == "cuda" and torch.version.hip else kind, torchapi.device_count(kind))
