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
import re
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Optional, Tuple, Type

from .errors import Skip

OLDEST = "2.2"  # the oldest supported torch: below it every command that needs torch exits 2
SINCE: Dict[str, Tuple[str, str]] = {  # name -> (first torch that has it, what torchapi does without it)
    "torch.nn.attention.sdpa_kernel": ("2.3", "torch.backends.cuda.sdp_kernel flags (no cuDNN backend)"),
    "torch.nn.attention.SDPBackend": ("2.3", "torch.backends.cuda.sdp_kernel flags (no cuDNN backend)"),
    "torch.amp.GradScaler": ("2.3", "torch.cuda.amp.GradScaler on CUDA/ROCm; Skip elsewhere"),
    "torch.OutOfMemoryError": ("2.4", "torch.cuda.OutOfMemoryError (the same class)"),
    "torch.backends.cuda.preferred_blas_library": ("2.4", "Skip: the BLAS cannot be chosen"),
    "torch.distributed.fsdp.fully_shard": ("2.6", "torch.distributed._composable.fsdp.fully_shard"),
    "torch.distributed._composable.fsdp.fully_shard": ("2.3", "the FSDP check is skipped"),
}


def version_tuple(text: str) -> tuple:
    """(major, minor) of a torch version string such as '2.4.1+rocm6.0' or '2.6.0a0+git1234'."""
    parts = []
    for piece in text.split("+")[0].split(".")[:2]:
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

# SDPBackend member (torch >= 2.3) -> keyword of the older torch.backends.cuda.sdp_kernel
_SDP_FLAGS = {"MATH": "enable_math", "FLASH_ATTENTION": "enable_flash", "EFFICIENT_ATTENTION": "enable_mem_efficient",
              "CUDNN_ATTENTION": "enable_cudnn"}


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
    if any(n not in _SDP_FLAGS or (n == "CUDNN_ATTENTION") for n in names):
        raise Skip(f"torch {torch.__version__} cannot force SDPBackend.{names[0]} "
                   f"(torch.nn.attention.sdpa_kernel arrived in torch {since('torch.nn.attention.sdpa_kernel')})")
    flags = {flag: backend in names for backend, flag in _SDP_FLAGS.items() if backend != "CUDNN_ATTENTION"}
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


def fully_shard() -> Callable[..., Any]:
    """FSDP2's fully_shard: public from torch 2.6, under torch.distributed._composable.fsdp before it."""
    found = resolve("torch.distributed.fsdp.fully_shard")
    if found is None:  # 2.2-2.5: torch.distributed.fsdp has no such function
        found = resolve("torch.distributed._composable.fsdp.fully_shard")
    if found is None:
        raise missing("torch.distributed._composable.fsdp.fully_shard")
    return found
