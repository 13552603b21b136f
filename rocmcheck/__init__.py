"""rocmcheck: isolated probes, a pre-training gate and a compatibility matrix for
PyTorch on AMD ROCm (and CUDA) GPUs.

Importing rocmcheck never imports torch. Public API:
    probe         decorator registering a probe function
    fault         decorator registering an injectable fault
    ProbeContext  what a probe receives
    ProbeFailure  raise from a probe when the result is wrong
    Skip          raise from a probe when it does not apply
    gate          run the gate from Python; raises GateFailed on NO-GO, TorchMissing
                  where torch cannot be imported
"""
from __future__ import annotations

__version__ = "0.1.0"

from .context import ProbeContext
from .errors import GateFailed, ProbeFailure, RocmcheckError, Skip, TorchMissing, UsageError
from .faults import fault
from .registry import probe


def gate(*args, **kwargs):
    """Run the gate probes in isolated children; see `rocmcheck.gate_api.gate`."""
    from .gate_api import gate as _gate

    return _gate(*args, **kwargs)


__all__ = ["GateFailed", "ProbeContext", "ProbeFailure", "RocmcheckError", "Skip", "TorchMissing", "UsageError",
           "__version__", "fault", "gate", "probe"]
