"""The one place for torch API that depends on the torch version.

rocmcheck supports torch 2.2 through the newest release (docs/design.md, "Truthful on the torch
users pin"). A name that arrived after the oldest supported torch is reached only through this
module, which falls back to the older spelling or raises `Skip` naming the version that has it.
`SINCE` below records, for each such name, the first torch that has it (in code, so a reproducer's
embedded copy of this module needs no data file); tests/test_torch_api.py holds every `torch.` name
used anywhere in the package against that table and against the names the oldest supported torch
really has (tests/data/torch_names_in_oldest.json), so a new use cannot drift in.
torch is imported inside the functions: importing this module never imports torch.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Type

from .errors import Skip
from .model import SIMULATED_TYPE

OLDEST = "2.2"  # the oldest supported torch: below it every command that needs torch exits 2
SINCE: Dict[str, Tuple[str, str]] = {  # name -> (first torch that has it, what torchapi does without it)
    "torch.nn.attention.sdpa_kernel": ("2.3", "torch.backends.cuda.sdp_kernel flags (no cuDNN backend)"),
    "torch.nn.attention.SDPBackend": ("2.3", "torch.backends.cuda.sdp_kernel flags (no cuDNN backend)"),
    "torch.amp.GradScaler": ("2.3", "torch.cuda.amp.GradScaler on CUDA/ROCm; Skip elsewhere"),
    "torch.OutOfMemoryError": ("2.4", "torch.cuda.OutOfMemoryError (the same class)"),
    "torch.backends.cuda.preferred_blas_library": ("2.4", "Skip: the BLAS cannot be chosen"),
    "torch.distributed.fsdp.fully_shard": ("2.6", "torch.distributed._composable.fsdp.fully_shard"),
    "torch.distributed._composable.fsdp.fully_shard": ("2.3", "the FSDP check is skipped"),
    # the device layer below: generic device API where torch has it, torch.cuda before it
    "torch.Event": ("2.4", "torch.cuda.Event"),
    "torch.accelerator": ("2.6", "torch.cuda"),
    "torch.accelerator.current_stream": ("2.6", "torch.cuda.current_stream"),
    "torch.accelerator.set_stream": ("2.6", "torch.cuda.stream"),
    "torch.accelerator.get_memory_info": ("2.6", "torch.cuda.mem_get_info"),
}


def version_tuple(text: Optional[str]) -> tuple:
    """(major, minor) of a version string such as '2.4.1+rocm6.0', '2.6.0a0+git1234' or Python's '3.11.7'."""
    parts = []
    for piece in str(text or "").split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit()) or "0"
        parts.append(int(digits))
    return tuple(parts)


def supported(torch_version: str) -> bool:
    return version_tuple(torch_version) >= version_tuple(OLDEST)


def installed_version() -> Optional[str]:
    """The installed torch's version, read from torch/version.py without importing torch (the parent
    process never imports it); None where torch is absent or unreadable (the device-facts child says why)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    for folder in (spec and spec.submodule_search_locations) or ():
        try:
            text = (Path(folder) / "version.py").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M)
        if found:
            return found.group(1)
    return None


def since(name: str) -> Optional[str]:
    """The first torch version that has `name`, for names newer than the oldest supported torch."""
    return SINCE[name][0] if name in SINCE else None


def lookup(name: str) -> Tuple[bool, Any]:
    """(whether this torch has the dotted `torch.…` name, the object).

    Resolved as `from a.b import c` does: an attribute first, then a submodule. So
    `torch.distributed._composable.fsdp.fully_shard` is the function the package exports, not the
    module of the same name beside it (torch 2.3-2.5)."""
    parts = name.split(".")
    try:
        obj: Any = importlib.import_module(parts[0])
    except Exception:  # noqa: BLE001 - torch absent or broken: every name is absent
        return False, None
    for index, attribute in enumerate(parts[1:], start=2):
        if not hasattr(obj, attribute):
            try:
                importlib.import_module(".".join(parts[:index]))
            except Exception:  # noqa: BLE001 - no such submodule, or one that fails to import on this build
                return False, None
            if not hasattr(obj, attribute):
                return False, None
        obj = getattr(obj, attribute)
    return True, obj


def resolve(name: str) -> Any:
    """The object a dotted `torch.…` name denotes, or None where this torch lacks it."""
    return lookup(name)[1]


def missing(name: str) -> Skip:
    """The Skip for a name this torch lacks, saying which torch has it."""
    import torch

    first = since(name)
    return Skip(f"torch {torch.__version__} has no {name}" + (f" (it arrived in torch {first})" if first else ""))


def require(name: str) -> Any:
    """`resolve(name)`, or Skip naming the torch version that has it."""
    found = resolve(name)
    if found is None:
        raise missing(name)
    return found


# --- scaled dot-product attention ---------------------------------------------------------------

# SDPBackend member -> keyword of torch.backends.cuda.sdp_kernel, which has no cuDNN backend
_SDP_FLAGS = {"MATH": "enable_math", "FLASH_ATTENTION": "enable_flash", "EFFICIENT_ATTENTION": "enable_mem_efficient"}


def sdpa_kernel(backends: Iterable[str]) -> contextlib.AbstractContextManager:
    """A context that allows only the named SDPA backends (SDPBackend member names).

    `torch.nn.attention.sdpa_kernel` from torch 2.3; before it `torch.backends.cuda.sdp_kernel`, which
    sets the same global flags (and governs the CPU's fused kernel too). Skip when a backend is
    unknown to this torch.
    """
    import torch

    names = list(backends)
    kernel = resolve("torch.nn.attention.sdpa_kernel")
    if kernel is not None:
        from torch.nn.attention import SDPBackend

        absent = [n for n in names if not hasattr(SDPBackend, n)]
        if absent:
            raise Skip(f"torch {torch.__version__} has no SDPBackend.{absent[0]}")
        return kernel([getattr(SDPBackend, n) for n in names])
    legacy = require("torch.backends.cuda.sdp_kernel")
    unknown = [n for n in names if n not in _SDP_FLAGS]
    if unknown:
        raise Skip(f"torch {torch.__version__} cannot force SDPBackend.{unknown[0]} "
                   f"(torch.nn.attention.sdpa_kernel arrived in torch {since('torch.nn.attention.sdpa_kernel')})")
    flags = {flag: backend in names for backend, flag in _SDP_FLAGS.items()}
    return legacy(**flags)


# --- training -----------------------------------------------------------------------------------


def grad_scaler(device_type: str, **kwargs: Any) -> Any:
    """A GradScaler for `device_type`: torch.amp.GradScaler from torch 2.3, before it CUDA's only."""
    import torch

    scaler = resolve("torch.amp.GradScaler")
    if scaler is not None:
        return scaler(device_type, **kwargs)
    if device_type == "cuda":
        return torch.cuda.amp.GradScaler(**kwargs)
    raise Skip(f"torch {torch.__version__} has no GradScaler for {device_type} "
               f"(torch.amp.GradScaler arrived in torch {since('torch.amp.GradScaler')})")


def out_of_memory_error() -> Type[BaseException]:
    """The exception a failed device allocation raises: torch.OutOfMemoryError, or its CUDA-named
    original on torch < 2.4 (the same class, re-exported)."""
    import torch

    return resolve("torch.OutOfMemoryError") or torch.cuda.OutOfMemoryError


def preferred_blas_library() -> Optional[Callable[..., Any]]:
    """torch.backends.cuda.preferred_blas_library (torch >= 2.4), or None: the BLAS cannot be chosen."""
    return resolve("torch.backends.cuda.preferred_blas_library")


CUBLAS_WORKSPACE_ENV = "CUBLAS_WORKSPACE_CONFIG"
# the values under which cuBLAS is deterministic (torch's reproducibility notes); the first is every child's
DETERMINISTIC_CUBLAS_WORKSPACES = (":4096:8", ":16:8")


def child_cublas_env(environ: Dict[str, str]) -> Dict[str, str]:
    """What every child of a run gets: CUBLAS_WORKSPACE_CONFIG=:4096:8 unless the user set one.

    cuBLAS reads it when torch creates its first handle, so a probe that needs determinism
    (sdc) could only set it in a fresh interpreter, paying a second GPU runtime init in the
    gate (issue 39). Eight 4 MiB buffers are torch's own default on Hopper and more than its
    default elsewhere (:4096:2:16:8): no probe's work is the worse for it. ROCm ignores it."""
    return {} if CUBLAS_WORKSPACE_ENV in environ else {CUBLAS_WORKSPACE_ENV: DETERMINISTIC_CUBLAS_WORKSPACES[0]}


def own_cublas_env() -> Dict[str, str]:
    """A deterministic CUBLAS_WORKSPACE_CONFIG for a variant's own interpreter, or nothing when
    the one every child inherits (`child_cublas_env` of this process's environment) already is."""
    ours = DETERMINISTIC_CUBLAS_WORKSPACES[0]
    return {} if os.environ.get(CUBLAS_WORKSPACE_ENV, ours) in DETERMINISTIC_CUBLAS_WORKSPACES else \
        {CUBLAS_WORKSPACE_ENV: ours}


def fully_shard() -> Callable[..., Any]:
    """FSDP2's fully_shard: public from torch 2.6, under torch.distributed._composable.fsdp before it."""
    found = resolve("torch.distributed.fsdp.fully_shard")
    if found is None:  # 2.2-2.5: torch.distributed.fsdp has no such function
        found = resolve("torch.distributed._composable.fsdp.fully_shard")
    if found is None:
        raise missing("torch.distributed._composable.fsdp.fully_shard")
    return found


# --- device layer (simulated GPU issue) ---
# The probes name a device "TYPE:N": "cuda:N" on CUDA and ROCm (ROCm builds use the cuda name),
# "simgpu:N" on the simulated GPUs (rocmcheck/simgpu). These helpers reach the device through
# torch's generic accelerator API (torch.accelerator, torch.Stream, torch.Event: torch >= 2.6,
# memory statistics >= 2.8) where the installed torch has it, and through torch.cuda otherwise,
# so the same probe code runs on all three. CUDA-only facts skip on other devices (`cuda_only`).

SIMULATED = SIMULATED_TYPE  # the simulated GPUs' device type (rocmcheck.model, where the runner reads it too)


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
        raise Skip(f"{what}: only on CUDA/ROCm GPUs; {kind} is a simulated GPU without them")


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


class WallClock:
    """`time.perf_counter` around the work: the CPU's clock, where work is done when the call returns."""

    def seconds(self, work: Callable[[], Any]) -> float:
        start = time.perf_counter()
        work()
        return time.perf_counter() - start


class ThreadClock:
    """`time.thread_time` around the work: the CPU time this thread spent on it, where work is done
    by the calling thread when the call returns (a CPU child computes on one intra-op thread). Like a
    GPU's events, it times the work and not the host's scheduling: with the wall clock, the CPU's
    speed figures of two healthy runs back to back differed by up to 2.6x on a loaded 2-core
    machine (an fp32 product's median; STREAM copy's fastest sample by 1.9x), with this clock by 23%
    (scripts/speed_noise.py). A wait for another process is no work of this thread: time a
    collective with the wall clock (`clock(device, waits=True)`)."""

    def seconds(self, work: Callable[[], Any]) -> float:
        start = time.thread_time()
        work()
        return time.thread_time() - start


class EventClock:
    """Device events recorded on `device`'s current stream around the work: the device's own time,
    without launch overhead or host scheduling."""

    def __init__(self, device: Any):
        self.device = device

    def seconds(self, work: Callable[[], Any]) -> float:
        start, end = timing_event(self.device), timing_event(self.device)
        start.record()
        work()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3  # milliseconds


def clock(device: Any, waits: bool = False) -> Any:
    """How to time work on `device`: its events on a GPU (a simulated one too), on the CPU this
    thread's CPU time, or the wall clock for work that `waits` on other processes (a collective)."""
    if str(device) == "cpu":
        return WallClock() if waits else ThreadClock()
    return EventClock(device)


def time_samples(timer: Any, work: Callable[[], Any], samples: int, warmup: int = 1,
                 budget_s: Optional[float] = None, least: int = 3) -> List[float]:
    """Seconds each of `samples` calls of `work` took by `timer` (a clock above), after `warmup`
    untimed calls; with `budget_s`, sampling stops once that many seconds were timed, after at
    least `least` samples."""
    return time_beside(timer, work, None, samples, warmup, budget_s, least)[0]


def time_beside(timer: Any, work: Callable[[], Any], beside: Optional[Callable[[], Any]], samples: int,
                warmup: int = 1, budget_s: Optional[float] = None, least: int = 3) -> Tuple[List[float], List[float]]:
    """As `time_samples`, and with `beside` (the same work done elsewhere: by the host alone), that
    timed by the same clock right after each call of `work`, so both see the same moment of a
    shared machine: (the seconds of `work`, those of `beside`, [] without it)."""
    for _ in range(warmup):
        work()
        if beside is not None:
            beside()
    taken: List[float] = []
    taken_beside: List[float] = []
    while len(taken) < samples and (budget_s is None or len(taken) < least or sum(taken) < budget_s):
        taken.append(timer.seconds(work))
        if beside is not None:
            taken_beside.append(timer.seconds(beside))
    return taken, taken_beside


def memory_info(device: Any) -> Tuple[int, int]:
    """(free, total) bytes of `device`."""
    torch = _torch()
    if _accelerator("get_memory_info"):
        return tuple(torch.accelerator.get_memory_info(torch.device(device).index))
    return torch.cuda.mem_get_info(torch.device(device))


def device_properties(device: Any) -> Any:
    """The device's properties (name, total_memory, major/minor, PCI ids where torch reports them)."""
    return device_module(device).get_device_properties(_torch().device(device).index or 0)


def empty_cache(device: Any) -> None:
    """Return the caching allocator's unused blocks on `device` to the runtime (between a worker's tasks)."""
    empty = _accelerator("empty_cache")
    if empty and not is_cuda(device):
        empty()
    elif is_cuda(device):
        _torch().cuda.empty_cache()
    else:
        getattr(device_module(device), "empty_cache", lambda: None)()
