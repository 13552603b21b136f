"""Data faults at the torch API level: wrong results that raise no error.

They patch torch inside the probe's child only. Probes compute their references with
numpy or float64 on an independent path, which these patches never touch.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from . import fault

COPY_APIS = ("to", "cuda", "copy_", "tensor", "as_tensor")


def patch(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace `owner.name` with `make(original)`."""
    setattr(owner, name, make(getattr(owner, name)))


def _has_device_arg(args: tuple, kwargs: dict) -> bool:
    import torch

    if "device" in kwargs or kwargs.get("copy"):
        return True
    return any(isinstance(a, (str, torch.device)) for a in args)


def _zero_(out: Any) -> Any:
    import torch

    if isinstance(out, torch.Tensor):
        with torch.no_grad():
            out.zero_()
    return out


@fault("copy-zeros", "host-to-device copies come back as zeros (HIP #3874, TheRock #8379); ARG limits it to one API",
       args="|".join(COPY_APIS))
def _copy_zeros(arg: Optional[str]) -> None:
    import torch

    apis = {arg} if arg else set(COPY_APIS)

    def transfer(orig: Callable[..., Any]) -> Callable[..., Any]:
        def to(self, *args, **kwargs):
            out = orig(self, *args, **kwargs)
            return _zero_(out) if out is not self and _has_device_arg(args, kwargs) else out
        return to

    def always(orig: Callable[..., Any]) -> Callable[..., Any]:
        def zeroed(*args, **kwargs):
            return _zero_(orig(*args, **kwargs))
        return zeroed

    def factory(orig: Callable[..., Any]) -> Callable[..., Any]:
        def build(*args, **kwargs):
            out = orig(*args, **kwargs)
            return _zero_(out) if kwargs.get("device") is not None else out
        return build

    if "to" in apis:
        patch(torch.Tensor, "to", transfer)
    if "cuda" in apis:
        patch(torch.Tensor, "cuda", always)
    if "copy_" in apis:
        patch(torch.Tensor, "copy_", always)
    for name in {"tensor", "as_tensor"} & apis:
        patch(torch, name, factory)


@fault("bf16-zeros", "casts to bfloat16 return zeros (bf16 silently broken on the device)")
def _bf16_zeros(arg: Optional[str]) -> None:
    import torch

    def cast(orig: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(self, *args, **kwargs):
            out = orig(self, *args, **kwargs)
            if isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and out is not self:
                _zero_(out)
            return out
        return wrapped

    for name in ("to", "bfloat16", "type"):
        patch(torch.Tensor, name, cast)


@fault("matmul-nan", "matrix products return one NaN element (split-K NaN, rocm-libraries #9055)")
def _matmul_nan(arg: Optional[str]) -> None:
    import torch

    def poison(out: Any) -> Any:
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.numel():
            mask = torch.zeros_like(out).view(-1)
            mask[0] = float("nan")
            out = out + mask.view(out.shape)
        return out

    def nan(orig: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args, **kwargs):
            return poison(orig(*args, **kwargs))
        return wrapped

    for owner, name in ((torch, "matmul"), (torch, "mm"), (torch, "bmm"), (torch, "addmm"),
                        (torch.Tensor, "matmul"), (torch.Tensor, "__matmul__"), (torch.Tensor, "mm"),
                        (torch.nn.functional, "linear")):
        patch(owner, name, nan)


def _blocking_backward(*args: Any, **kwargs: Any) -> None:
    """Stands in for an attention backward kernel that never completes."""
    threading.Event().wait()


@fault("backward-hang", "loss.backward() blocks forever (the seeds' attention backward hang)")
def _backward_hang(arg: Optional[str]) -> None:
    import torch.autograd

    torch.autograd.backward = _blocking_backward
