"""What a probe may change in its process, read when a worker starts and put back after each
task, so that the next task in a worker starts as it would in a fresh child.

Each entry is a process-wide setting with a getter and a setter: precision flags (TF32, the
fp32 precision mode, reduced-precision reductions), the default dtype, the SDPA backends,
deterministic mode, cuDNN flags, grad and anomaly mode, the intra-op thread count, the
environment, the working folder and the warning filters. The RNGs are reseeded with the
process's initial seed (the CPU's put back exactly), the worker's GPU made current again and
its caching allocator emptied. A setting this torch lacks is left out. What had to be put back
is returned, for the verdict's evidence.
"""
from __future__ import annotations

import copy
import gc
import os
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

from .. import torchapi

Setting = Tuple[Callable[[], Any], Callable[[Any], object]]  # a getter; a setter, what it returns unused


def _attr(owner: Any, name: str) -> Optional[Setting]:
    if owner is None or not hasattr(owner, name):
        return None
    return (lambda: getattr(owner, name)), (lambda value: setattr(owner, name, value))


def _environment() -> Setting:
    def put_back(saved: Dict[str, str]) -> None:
        for name in set(os.environ) - set(saved):
            del os.environ[name]
        os.environ.update(saved)

    return (lambda: dict(os.environ)), put_back


def _warning_filters() -> Setting:
    def put_back(saved: List[Any]) -> None:
        # in place: the C module shares this list (typeshed declares it a read-only Sequence)
        warnings.filters[:] = saved  # type: ignore[index]
        # what warnings.simplefilter calls, so cached "already warned" decisions are dropped (renamed in 3.13)
        mutated = getattr(warnings, "_filters_mutated", None) or getattr(warnings, "_filters_mutated_lock_held", None)
        if mutated is not None:
            mutated()

    return (lambda: list(warnings.filters)), put_back


def settings() -> Dict[str, Setting]:
    """Every process-wide setting to keep, by name."""
    import torch

    backends = torch.backends
    table: Dict[str, Optional[Setting]] = {
        "environment": _environment(),
        "cwd": (os.getcwd, os.chdir),
        "warning_filters": _warning_filters(),
        "default_dtype": (torch.get_default_dtype, torch.set_default_dtype),
        "float32_matmul_precision": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        "deterministic_algorithms": (lambda: (torch.are_deterministic_algorithms_enabled(),
                                              torch.is_deterministic_algorithms_warn_only_enabled()),
                                     lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1])),
        "grad_enabled": (torch.is_grad_enabled, torch.set_grad_enabled),
        "anomaly_detection": (torch.is_anomaly_enabled, torch.set_anomaly_enabled),
        "num_threads": (torch.get_num_threads, torch.set_num_threads),
    }
    matmul = getattr(getattr(backends, "cuda", None), "matmul", None)
    for name in ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction",
                 "fp32_precision"):
        table[f"cuda.matmul.{name}"] = _attr(matmul, name)
    for name in ("allow_tf32", "benchmark", "deterministic", "enabled", "fp32_precision"):
        table[f"cudnn.{name}"] = _attr(backends.cudnn, name)
    for backend in ("flash", "mem_efficient", "math", "cudnn"):
        getter = getattr(backends.cuda, f"{backend}_sdp_enabled", None)
        setter = getattr(backends.cuda, f"enable_{backend}_sdp", None)
        table[f"sdpa.{backend}"] = (getter, setter) if getter and setter else None
    return {name: setting for name, setting in table.items() if setting is not None}


class ProcessState:
    """The settings as a worker found them, and the means to put them back."""

    def __init__(self) -> None:
        import torch

        self.settings = settings()
        self.saved = {name: copy.copy(get()) for name, (get, _) in self.settings.items()}
        self.seed = torch.initial_seed()
        self.cpu_rng = torch.get_rng_state()  # as the first task found it (the zygote's imports may have drawn)
        gc.freeze()  # what exists now (torch, the probe modules) stays: a collection after each task scans only its own

    def restore(self, device: str) -> List[str]:
        """Put every setting back; reseed; free what the last task left cached. Returns the
        names of the settings that had changed."""
        import torch

        changed = []
        for name, (get, put) in self.settings.items():
            try:
                if get() != self.saved[name]:
                    put(self.saved[name])
                    changed.append(name)
            except Exception as exc:  # noqa: BLE001 - a setting that cannot be put back ends the worker
                raise RuntimeError(f"could not put back {name} after the last task: {exc}") from exc
        if torch.is_autocast_enabled():  # left open without a `with`: no setter works on every torch
            raise RuntimeError("the last task left autocast enabled")
        torch.manual_seed(self.seed)  # every device's generator, as in a fresh process
        torch.set_rng_state(self.cpu_rng)
        gc.collect()
        if device != "cpu":
            module, index = torchapi.device_module(device), torch.device(device).index or 0
            if module.current_device() != index:  # a probe that made another GPU current (Accelerate does)
                module.set_device(index)
                changed.append("current_device")
            torchapi.empty_cache(device)
        return changed
