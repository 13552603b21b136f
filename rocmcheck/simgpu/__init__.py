"""Simulated GPUs: the `simgpu` device, a PrivateUse1 backend of our own (simgpu.cpp) whose memory
is host RAM, so the GPU half of every probe (device allocator, copies between devices, streams,
events, pinned memory, per-GPU queues) runs through torch's real dispatcher without a GPU.

It is compiled on first use with `torch.utils.cpp_extension` into a cache keyed by the torch
version and the source's hash ($ROCMCHECK_SIMGPU_CACHE, default ~/.cache/rocmcheck/simgpu), under
a file lock so that concurrent processes build it once. It needs a C++ compiler and ninja. The
build runs in a child interpreter leading a session of its own, so that an interrupt ends every
process of it (see `_compile`).
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import time
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
INIT_LOG_ENV = "ROCMCHECK_SIMGPU_INIT_LOG"  # a file each process's device initialisation appends its pid to
# planted in the device (simgpu.cpp's set_fault, and set_bitflip)
FAULTS = ("copy-tail", "stale-side-stream", "wrong-device", "slow-matmul", "slow-matmul-factor", "slow-copy", "bitflip",
          "stuck-bit", "sag")
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
                (folder / "lock").unlink(missing_ok=True)  # torch's own lock, left by a build that was killed
                _compile(folder, torch.__version__)
    _ext = _import(built)
    return _ext


_BUILD = ("import sys; from torch.utils.cpp_extension import load; "
          "load(sys.argv[1], [sys.argv[2]], build_directory=sys.argv[3], extra_cflags=['-O1'], verbose=False)")


def _compile(folder: Path, torch_version: str) -> None:
    """Build the extension into `folder`, saying so on stderr (it takes 30-150 s and prints nothing).

    The build runs in a child interpreter that leads a session of its own, and whatever stops the
    wait (Ctrl-C, SIGTERM's Interrupted, any exception) ends every process of that session: ninja
    gives each compiler a process group of its own, and torch's build SIGKILLs ninja when an
    exception reaches it, so a build interrupted in this process left c++ and cc1plus running,
    orphaned, until they finished. The session also keeps a terminal's Ctrl-C and `timeout`'s
    signal to our group from reaching the build behind this process's back."""
    log = folder / "build.log"
    print(f"rocmcheck: building the simulated GPU extension for torch {torch_version} (first use, ~30-150 s)...",
          file=sys.stderr, flush=True)
    began = time.monotonic()
    with open(log, "wb") as out:
        child = subprocess.Popen([sys.executable, "-c", _BUILD, f"{NAME}_ext", str(SOURCE), str(folder)],
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = child.wait()
        except BaseException:
            _end_build(child)
            print("rocmcheck: the simulated GPU build was stopped (no compiler of it is left running)",
                  file=sys.stderr, flush=True)
            raise
    if code != 0:
        raise UsageError(f"the simulated GPU extension did not build (exit {code}); its output is in {log}")
    print(f"rocmcheck: built the simulated GPU extension in {time.monotonic() - began:.0f} s", file=sys.stderr,
          flush=True)


def _end_build(child: "subprocess.Popen[bytes]") -> None:
    """SIGKILL every process of the build until none is left (ninja may start a compiler while the
    others are killed), then reap the child. On POSIX the build is the child's session, which
    finds a compiler whose parent is already gone; elsewhere it is the child's tree."""
    import psutil

    def members() -> list:
        if not hasattr(os, "getsid"):
            try:
                return [psutil.Process(child.pid), *psutil.Process(child.pid).children(recursive=True)]
            except psutil.Error:
                return []
        found = []
        for proc in psutil.process_iter():
            try:
                if os.getsid(proc.pid) == child.pid and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except (OSError, psutil.Error):
                continue
        return found

    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        alive = members()
        if not alive:
            break
        for proc in alive:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=1.0)
    child.wait()


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
        """What a CUDA device reports, made up for simulated GPU `device` (its PCI bus is 0x10 + index;
        every one has the same name, as GPUs of one model do, so the node compares their speed).
        It initialises the runtime first, as `torch.cuda.get_device_properties` does (its `_lazy_init`),
        so the device-facts child pays the init a real GPU makes it pay."""
        import torch

        self._lazy_init()
        index = device if isinstance(device, int) else (torch.device(device).index or 0)
        total = torch.accelerator.get_memory_info(index)[1]
        return SimpleNamespace(name="simulated GPU", major=0, minor=0, total_memory=total,
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
    ext.set_init_log(os.environ.get(INIT_LOG_ENV, ""))  # how tests count inits without timing them
    if not hasattr(torch, NAME):
        torch.utils.rename_privateuse1_backend(NAME)
        torch._register_device_module(NAME, _DeviceModule(f"torch.{NAME}"))
        torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
    return ext


def set_fault(name: str, value: int = 1) -> None:
    """Plant a fault in the device, below torch (see FAULTS); value 0 (-1 for wrong-device and slow-matmul)
    removes it."""
    build().set_fault(name, value)


def set_bitflip(index: int, rate: float = 1.0) -> None:
    """Make simulated GPU `index` flip the lowest mantissa bit of one element of a matrix product's
    result, in each product with probability `rate` (-1 as index removes it)."""
    build().set_bitflip(index, rate)


def set_stuck_bit(index: int, address: int, bit: int = 0, value: int = 1) -> None:
    """Make bit `bit` of the byte at device address `address` of simulated GPU `index` read `value`
    whatever is written there (-1 as index removes it). A device address is the simulated GPU's own:
    its allocator places each block first-fit in its memory, from 0."""
    build().set_stuck_bit(index, address, bit, value)


def set_sag(index: int, after_s: float, factor: int = 3) -> None:
    """Make simulated GPU `index`'s matrix products take `factor` times as long once they have run
    back to back for `after_s` seconds (a GPU that heats up under load and clocks down; a pause of a
    second lets it cool); -1 as index removes it."""
    build().set_sag(index, after_s, factor)
