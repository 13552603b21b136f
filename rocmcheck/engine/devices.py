"""Which devices a run tests: `--device` held against what torch sees (the device-facts child's
facts) and what the host has (its own GPU inventory, `hostgpu`).

Pure decisions over facts already gathered: no child, no torch, so every case is testable with
made-up facts. The runner launches the facts child and the device canary, and hands their
answers here.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..errors import UsageError
from ..host import hostgpu
from ..model import DeviceInfo
from ..wording import counted
from .task import TaskResult
from .verdicts import end_summary
from .watchdog import ChildEnd

GPU_VISIBLE = "gpu-visible"  # the probe that fails when the host has GPUs that torch cannot use
CANARY_TIMEOUT_S = 20.0  # runtime init and one tiny kernel; a device that needs longer is not usable
CANARY_CALL = "rocmcheck.engine.child:device_canary"
CANARY_PROBE = "device-canary"  # the name faults are injected under: --inject hang@device-canary


def local_rank() -> int:
    """Inside a torchrun (or Slurm) rank, `auto` means this rank's own GPU."""
    raw = os.environ.get("LOCAL_RANK", "0")
    if not raw.isdigit():
        raise UsageError(f"LOCAL_RANK must be a whole number, not '{raw}'")
    return int(raw)


def device_indexes(wanted: str, count: int) -> List[int]:
    """The GPUs `--device` names: auto = every visible GPU (inside a torchrun rank, LOCAL_RANK's
    own), all = every visible GPU, TYPE:N[,M...] = those (TYPE: cuda, or simgpu for simulated GPUs)."""
    if wanted == "auto":
        return [local_rank()] if "LOCAL_RANK" in os.environ else list(range(count))
    if wanted == "all":
        return list(range(count))
    return [int(i) for i in wanted.split(":", 1)[1].split(",")]


@dataclass
class UnderTest:
    """The devices a run tests (one queue each), what to tell the user about the choice, and the
    host's GPUs that torch cannot use (then the run is a NO-GO, whatever the probes say)."""

    devices: List[DeviceInfo]
    notes: List[str] = field(default_factory=list)
    gpu_problem: Optional[str] = None


def resolve(wanted: str, facts: Mapping[str, Any], host: hostgpu.HostGpus) -> UnderTest:
    """`--device` (already checked by `options`) into the devices under test. `auto` falls back
    to the CPU only on a host without GPUs; a GPU host whose torch sees none is a gpu problem,
    never a CPU self-test, unless `--device cpu` leaves its GPUs out on purpose. A GPU index
    torch does not see is a UsageError."""
    count = int(facts.get("device_count") or 0)
    found = hostgpu.diagnose(host, dict(facts))
    problem = found.message if found else None
    notes: List[str] = []
    if problem and wanted == "cpu":
        notes.append(f"the host's GPUs are left out on purpose (--device cpu): CPU self-test only ({problem})")
        problem = None
    elif problem:
        notes.append(f"NO-GO: {problem}")
        wanted = "cpu"
    elif wanted in ("auto", "all") and not count:
        wanted = "cpu"
        notes.append("no GPU on this host: running on the CPU; GPU-only probes are skipped")
    if wanted == "cpu":
        return UnderTest([DeviceInfo("cpu", "cpu", count, None)], notes, problem)
    indexes = device_indexes(wanted, count)
    kind = facts.get("device_type") or "cuda"  # torch's device type: cuda (ROCm too) or simgpu
    missing = [i for i in indexes if i >= count]
    if missing:
        raise UsageError(f"device {kind}:{missing[0]} is not present ({counted(count, 'GPU')} visible)")
    backend = facts.get("backend") or "cpu"
    return UnderTest([DeviceInfo(f"{kind}:{i}", backend, count, _gpu_facts(facts, i).get("arch")) for i in indexes],
                     notes)


def facts_worker_device(under_test: Sequence[DeviceInfo]) -> Optional[str]:
    """The device whose queue adopts the worker that gathered the device facts, so its runtime
    init is the one that GPU's probes use: GPU 0 when it is under test (the facts made it
    current). None for a CPU run (no init to keep; CPU probes never share a process that
    touched a GPU) and for a run on other GPUs only, whose worker would keep a context on a GPU
    0 the run does not test (another job's, maybe) for the whole run."""
    return next((d.name for d in under_test if d.kind == "gpu" and d.name.endswith(":0")), None)


def label(device: DeviceInfo, facts: Mapping[str, Any]) -> Dict[str, Any]:
    """What names a GPU in a verdict: its torch name and index, arch, PCI address, UUID."""
    if device.kind == "cpu":
        return {"name": "cpu"}
    index = int(device.name.split(":")[1])
    gpu = _gpu_facts(facts, index)
    return {"name": device.name, "index": index, "arch": device.arch, "model": gpu.get("name"),
            "pci_address": gpu.get("pci_address"), "uuid": gpu.get("uuid")}


def _gpu_facts(facts: Mapping[str, Any], index: int) -> Dict[str, Any]:
    """The facts child's entry for GPU `index` ({} where it has none)."""
    gpus = facts.get("devices") or []
    return (gpus[index] if index < len(gpus) else None) or {}


def canary_outcome(end: ChildEnd, result: Optional[TaskResult]) -> Dict[str, Any]:
    """Whether the device still computes after a hang, from the canary child's end and result:
    `usable`, its time, and else the `problem` (no answer in time, a wrong sum, how it died)."""
    data = (result.data if result else None) or {}
    usable = not end.timed_out and bool(data.get("ok"))
    why = (f"no answer within {CANARY_TIMEOUT_S:g}s" if end.timed_out else
           data.get("problem") or (result.message if result else None) or end_summary(end))
    return {"usable": usable, "elapsed_s": round(end.elapsed_s, 3), **({} if usable else {"problem": why})}
