"""The one place for torch API that depends on the torch version.

torch is imported inside the functions: importing this module never imports torch.
"""
from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Optional, Tuple

from .errors import Skip

# --- device layer (simulated GPU issue) ---
# The probes name a device "TYPE:N": "cuda:N" on CUDA and ROCm (ROCm builds use the cuda name),
# "simgpu:N" on the simulated GPUs (rocmcheck/simgpu). These helpers reach the device through
# torch's generic accelerator API (torch.accelerator, torch.Stream, torch.Event: torch >= 2.6,
# memory statistics >= 2.8) where the installed torch has it, and through torch.cuda otherwise,
# so the same probe code runs on all three. CUDA-only facts skip on other devices (`cuda_only`).

SIMULATED = "simgpu"


def _torch() -> Any:
    import torch

    return torch


def _accelerator(name: str) -> Optional[Any]:
    """torch.accelerator.NAME where this torch has it."""
    return getattr(getattr(_torch(), "accelerator", None), name, None)


def device_type() -> Optional[str]:
    """The accelerator torch computes on here: "cuda" (ROCm too), "simgpu", or None (CPU only)."""
    torch = _torch()
    if hasattr(torch, SIMULATED):  # asked for (`--inject simgpu`): it wins over a real GPU
        return SIMULATED
    if torch.cuda.is_available():
        return "cuda"
    current = _accelerator("current_accelerator")
    found = current() if current else None
    return found.type if found is not None and found.type != "cpu" else None


def device_module(device: Any) -> Any:
    """torch.cuda for a CUDA/ROCm device, torch.simgpu for a simulated one."""
    return getattr(_torch(), _torch().device(device).type)


def device_count(kind: Optional[str] = None) -> int:
    """GPUs of `kind` (default: the accelerator torch computes on) that torch sees."""
    kind = kind or device_type()
    return int(getattr(_torch(), kind).device_count()) if kind else 0


def is_cuda(device: Any) -> bool:
    """Whether CUDA/ROCm facts (arch, allocator backend, BLAS, NCCL) apply to `device`."""
    return _torch().device(device).type == "cuda"


def cuda_only(device: Any, what: str) -> None:
    """Skip, naming the simulated device's limit, where `what` exists only on CUDA/ROCm devices
    (on the CPU the probe's own CPU path decides)."""
    kind = _torch().device(device).type
    if kind not in ("cuda", "cpu"):
        raise Skip(f"{what} exists only on CUDA/ROCm GPUs; {kind} is a simulated GPU without it")


def init_device(device: str) -> None:
    """Initialise the runtime and make `device` current in this process."""
    torch = _torch()
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.init()
        torch.cuda.set_device(dev)
        return
    torch.empty(0, device=dev)  # a PrivateUse1 runtime initialises on first use
    device_module(dev).set_device(dev.index or 0)


def synchronize(device: Any = None) -> None:
    """Wait for the work queued on `device` (default: the current accelerator)."""
    torch = _torch()
    sync = _accelerator("synchronize")
    if sync:
        sync(None if device is None else torch.device(device).index)
    else:
        torch.cuda.synchronize(device)


def _generic(*names: str) -> bool:
    """Whether this torch has the generic API: torch.Stream/torch.Event and torch.accelerator.NAMES."""
    torch = _torch()
    return hasattr(torch, "Stream") and hasattr(torch, "Event") and all(_accelerator(n) for n in names)


def new_stream(device: Any) -> Any:
    """A new stream on `device`."""
    torch = _torch()
    if _generic("set_stream", "current_stream") or not is_cuda(device):
        return torch.Stream(device=torch.device(device))
    return torch.cuda.Stream(device)


def current_stream(device: Any) -> Any:
    torch = _torch()
    if _generic("set_stream", "current_stream") or not is_cuda(device):
        return torch.accelerator.current_stream(torch.device(device).index)
    return torch.cuda.current_stream(device)


@contextlib.contextmanager
def use_stream(stream: Any) -> Iterator[None]:
    """Make `stream` current inside the block (torch.accelerator.set_stream, or torch.cuda.stream)."""
    torch = _torch()
    if not _generic("set_stream", "current_stream"):
        with torch.cuda.stream(stream):
            yield
        return
    before = torch.accelerator.current_stream(stream.device_index)
    torch.accelerator.set_stream(stream)
    try:
        yield
    finally:
        torch.accelerator.set_stream(before)


def timing_event(device: Any) -> Any:
    """An event that records a timestamp (elapsed_time between two of them, in ms)."""
    torch = _torch()
    if _generic() or not is_cuda(device):
        return torch.Event(device=torch.device(device), enable_timing=True)
    return torch.cuda.Event(enable_timing=True)


def memory_info(device: Any) -> Tuple[int, int]:
    """(free, total) bytes of `device`."""
    torch = _torch()
    if _accelerator("get_memory_info"):
        return tuple(torch.accelerator.get_memory_info(torch.device(device).index))
    return torch.cuda.mem_get_info(torch.device(device))


def memory_counters(device: Any) -> Dict[str, int]:
    """The allocator's allocated and reserved bytes on `device`."""
    torch = _torch()
    index = torch.device(device).index
    source = torch.accelerator if _accelerator("memory_allocated") else torch.cuda
    return {"allocated": int(source.memory_allocated(index)), "reserved": int(source.memory_reserved(index))}


def device_properties(device: Any) -> Any:
    """The device's properties (name, total_memory, major/minor, PCI ids where torch reports them)."""
    return device_module(device).get_device_properties(_torch().device(device).index or 0)
