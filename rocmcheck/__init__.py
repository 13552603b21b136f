"""rocmcheck: isolated probes, a pre-training gate and a compatibility matrix for
PyTorch on AMD ROCm (and CUDA) GPUs.

Importing rocmcheck never imports torch. Public API:
    probe         decorator registering a probe function
    fault         decorator registering an injectable fault
    ProbeContext  what a probe receives
    ProbeFailure  what ctx.fail raises when the result is wrong (a BaseException: catch it only to re-raise)
    Skip          what ctx.skip raises when a probe does not apply (likewise)
    gate          run the gate from Python; raises GateFailed on NO-GO, TorchMissing
                  where torch cannot be imported

The package, from the top down (a module imports only from its own layer or below; the contracts
are in pyproject.toml, the picture in docs/architecture.md):
    cli/, plugin, gate_api, testing
                             the front-ends: the commands, `pytest --rocm-matrix`, `rocmcheck.gate()`,
                             `rocmcheck.testing.run_inline` (one probe in-process, for its author's tests)
    doctor                   the workaround search the `doctor` command runs
    engine/                  one run: options, selection, devices, the runner, isolation, verdicts
    outputs/                 report files and every text made from a report (never imports the engine)
    knowledge/               known issues, failure signatures, workarounds (data/), and `explain`
    host/                    host facts read from files and the driver: GPUs, fingerprint, node health
    registry, context, markers, faults/, simgpu/, torchapi, numeric, lazy
                             the probe API: what a probe (probes/, shipped as rocmcheck.probes) uses
    model, errors, jsonsafe, redact, safetext, agreement
                             the core: the vocabulary (statuses, verdicts, exit codes), redaction,
                             bitwise agreement of deterministic work between a node's GPUs
"""
from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING

from .errors import GateFailed, ProbeFailure, RocmcheckError, Skip, TorchMissing, UsageError

if TYPE_CHECKING:  # what __getattr__ loads at first use, for type checkers
    from .context import ProbeContext
    from .faults import fault
    from .registry import probe

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
