"""rocmcheck: isolated probes, a pre-training gate and a compatibility matrix for
PyTorch on AMD ROCm (and CUDA) GPUs.

Importing rocmcheck never imports torch. Public API:
    probe         decorator registering a probe function
    fault         decorator registering an injectable fault
    ProbeContext  what a probe receives
    ProbeFailure  raise from a probe when the result is wrong
    Skip          what ctx.skip raises when a probe does not apply (older probes raise it)
    gate          run the gate from Python; raises GateFailed on NO-GO, TorchMissing
                  where torch cannot be imported
"""
from __future__ import annotations

__version__ = "0.1.0"

from .errors import GateFailed, ProbeFailure, RocmcheckError, Skip, TorchMissing, UsageError

_LAZY = {"ProbeContext": "context", "fault": "faults", "probe": "registry"}  # loaded at first use: the
# pytest plugin imports this package in every pytest run, and without --rocm-matrix needs none of them


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'rocmcheck' has no attribute '{name}'")
    import importlib

    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


def gate(*args, **kwargs):
    """Run the gate probes in isolated children; see `rocmcheck.gate_api.gate`."""
    from .gate_api import gate as _gate

    return _gate(*args, **kwargs)


__all__ = ["GateFailed", "ProbeContext", "ProbeFailure", "RocmcheckError", "Skip", "TorchMissing", "UsageError",
           "__version__", "fault", "gate", "probe"]
