"""`ProbeContext`: what a probe function receives as its first argument."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, NoReturn

from .errors import Skip


@dataclass
class ProbeContext:
    """The device and profile a probe runs with, and ways to report beyond pass/fail.

    `device` is "cpu" or "cuda:N" (ROCm builds use the same "cuda" device string).
    `profile` is "gate" (quick, critical) or "full" (every size and repeat).
    `requested_device` is what `--device` asked for (auto, cpu or cuda:N): "cpu" on a GPU
    host means the GPU was left out on purpose.
    """

    device: str = "cpu"
    requested_device: str = "auto"
    profile: str = "full"
    params: Dict[str, Any] = field(default_factory=dict)
    timeout: float = 60.0
    measurements: Dict[str, Any] = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)

    @property
    def on_gpu(self) -> bool:
        return self.device != "cpu"

    @property
    def full(self) -> bool:
        return self.profile == "full"

    def skip(self, reason: str) -> NoReturn:
        """End the probe as `skip` with `reason`."""
        raise Skip(reason)

    def warn(self, message: str) -> None:
        """Record a known risk; a probe that then returns normally ends as `warn`."""
        self.warnings.append(message)

    def measure(self, **values: Any) -> None:
        """Record measurements (kept whatever the verdict, e.g. GB/s, max error)."""
        self.measurements.update(values)

    def synchronize(self) -> None:
        """Wait for queued GPU work so asynchronous errors surface inside the probe."""
        if self.on_gpu:
            import torch

            torch.cuda.synchronize(self.device)
