"""Simulated GPUs: the `simgpu` device, a PrivateUse1 backend of our own (simgpu.cpp) whose memory
is host RAM, so the GPU half of every probe (device allocator, copies between devices, streams,
events, pinned memory, per-GPU queues) runs through torch's real dispatcher without a GPU.

It is compiled on first use with `torch.utils.cpp_extension` into a cache keyed by the torch
version and the source's hash ($ROCMCHECK_SIMGPU_CACHE, default ~/.cache/rocmcheck/simgpu), under
a file lock so that concurrent processes build it once. It needs a C++ compiler and ninja.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Iterator, Optional

from .. import torchapi
from ..errors import UsageError

NAME = "simgpu"
# The device is written against torch's current C++ API (c10::DeviceAllocator, the generic
# torch.accelerator streams): built and run on 2.11, 2.13 and 2.14; 2.5 fails to compile it.
MIN_TORCH = (2, 11)
SOURCE = Path(__file__).with_name("simgpu.cpp")
CACHE_ENV = "ROCMCHECK_SIMGPU_CACHE"
INIT_ENV = "ROCMCHECK_SIMGPU_INIT_S"  # seconds each process's first device initialisation costs
FAULTS = ("copy-tail", "stale-side-stream", "wrong-device")  # planted in the device (simgpu.cpp set_fault)
_ext: Optional[ModuleType] = None


def cache_dir() -> Path:
    """Where this torch's build of this source lives: rebuilt for each torch version and source."""
    import torch

    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "rocmcheck" / NAME)
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    tag = f"torch{torch.__version__}-py{sys.version_info[0]}{sys.version_info[1]}-{digest}".replace("+", "_")
    return root / tag


def missing_tools() -> Optional[str]:
    """What the build lacks (a C++ compiler, ninja), or None."""
    from torch.utils.cpp_extension import is_ninja_available

    if not shutil.which(os.environ.get("CXX", "c++")):
        return "a C++ compiler (c++ on PATH, or $CXX)"
    if not is_ninja_available():
        return "ninja (pip install ninja)"
    return None


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on `folder` (released by the OS if the holder dies)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "build.lock", "w") as handle:
        try:
            import fcntl
        except ImportError:  # Windows: no lock, torch's own lock file still guards the build
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _import(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(f"{NAME}_ext", str(path))
    spec = importlib.util.spec_from_file_location(f"{NAME}_ext", path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def build() -> ModuleType:
    """The compiled extension, built into the cache the first time (UsageError without the tools)."""
    global _ext
    if _ext is not None:
        return _ext
    import torch  # (the extension links against the loaded torch)

    if torchapi.version_tuple(torch.__version__) < MIN_TORCH:
        raise UsageError(f"simulated GPUs need torch {'.'.join(map(str, MIN_TORCH))} or newer; this is torch "
                         f"{torch.__version__} (the GPU half of the probes still runs on a real GPU here)")
    folder = cache_dir()
    built = folder / f"{NAME}_ext.so"
    if not built.exists():
        with _locked(folder):
            if not built.exists():
                lacking = missing_tools()
                if lacking:
                    raise UsageError(f"simulated GPUs need {lacking} to build the simgpu device")
                from torch.utils.cpp_extension import load

                (folder / "lock").unlink(missing_ok=True)  # torch's own lock, left by a build that was killed
                load(f"{NAME}_ext", [str(SOURCE)], build_directory=str(folder), extra_cflags=["-O1"],
                     verbose=False)
    _ext = _import(built)
    return _ext


class _DeviceModule(ModuleType):
    """`torch.simgpu`: what torch asks of a PrivateUse1 backend's Python module."""

    def is_available(self) -> bool:
        return build().device_count() > 0

    def device_count(self) -> int:
        return int(build().device_count())

    def current_device(self) -> int:
        return int(build().current_device())

    def set_device(self, device: Any) -> None:
        import torch

        build().set_device(torch.device(NAME, device).index if not isinstance(device, int) else device)

    def get_device_properties(self, device: Any = None) -> SimpleNamespace:
        """What a CUDA device reports, made up for simulated GPU `device` (its PCI bus is 0x10 + index).
        It initialises the runtime first, as `torch.cuda.get_device_properties` does (its `_lazy_init`),
        so the device-facts child pays the init a real GPU makes it pay."""
        import torch

        self._lazy_init()
        index = device if isinstance(device, int) else (torch.device(device).index or 0)
        total = torch.accelerator.get_memory_info(index)[1]
        return SimpleNamespace(name=f"simulated GPU {index}", major=0, minor=0, total_memory=total,
                               multi_processor_count=1, pci_domain_id=0, pci_bus_id=0x10 + index, pci_device_id=0,
                               uuid=f"simgpu-{index}")

    def _device(self, device: Any = None) -> Any:
        import torch

        index = self.current_device() if device is None else device
        return torch.device(NAME, index) if isinstance(index, int) else torch.device(index)

    def Stream(self, device: Any = None, priority: int = 0) -> Any:  # noqa: N802 (torch.cuda's names)
        import torch

        return torch.Stream(device=self._device(device), priority=priority)

    def Event(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> Any:  # noqa: N802
        import torch

        return torch.Event(device=self._device(), enable_timing=enable_timing)

    def current_stream(self, device: Any = None) -> Any:
        return torchapi.current_stream(self._device(device))

    def stream(self, stream: Any) -> Any:
        return torchapi.use_stream(stream)

    def synchronize(self, device: Any = None) -> None:
        """Work on the simulated device is done when it is queued."""

    def is_initialized(self) -> bool:
        return True

    def _lazy_init(self) -> None:
        build().init()

    def _is_in_bad_fork(self) -> bool:
        return False

    def get_amp_supported_dtype(self) -> list:
        import torch

        return [torch.float16, torch.bfloat16]

    def manual_seed(self, seed: int) -> None:
        """Random numbers come from the CPU generator (the fallback runs there), which torch.manual_seed seeds."""

    manual_seed_all = manual_seed

    def get_rng_state(self, device: Any = None) -> Any:
        import torch

        return torch.get_rng_state()

    def set_rng_state(self, state: Any, device: Any = None) -> None:
        import torch

        torch.set_rng_state(state)


def enable(count: int = 2, init_seconds: Optional[float] = None) -> ModuleType:
    """Make `count` simulated GPUs present in this process, as torch device `simgpu`; once per process."""
    import torch

    ext = build()
    ext.set_device_count(count)
    seconds = init_seconds if init_seconds is not None else float(os.environ.get(INIT_ENV) or 0)
    ext.set_init_seconds(seconds)
    if not hasattr(torch, NAME):
        torch.utils.rename_privateuse1_backend(NAME)
        torch._register_device_module(NAME, _DeviceModule(f"torch.{NAME}"))
        torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
    return ext


def set_fault(name: str, value: int = 1) -> None:
    """Plant a fault in the device, below torch (see FAULTS); value 0 (-1 for wrong-device) removes it."""
    build().set_fault(name, value)
