"""Data faults at the torch API level: wrong results that raise no error.

They patch torch inside the probe's child only. Probes compute their references with
numpy or float64 on an independent path, which these patches never touch.

Transfer faults (`copy-zeros`, `copy-flip`, `copy-stale`) take as ARG a glob over the kind
of copy, so one method can be broken while the others work:
    to              blocking `Tensor.to(device)`
    to-nonblocking  `Tensor.to(device, non_blocking=True)` from pageable memory
    pinned          `Tensor.to(device, non_blocking=True)` from pinned memory
    side-stream     any copy issued while a non-default CUDA/HIP stream is current
    cuda            `Tensor.cuda()`
    tensor, as_tensor  `torch.tensor(..., device=)`, `torch.as_tensor(..., device=)`
    copy_           `dst.copy_(src)` across devices (every `copy_` on a CPU-only run)
    d2h             device-to-host: `Tensor.cpu()`, `.to("cpu")` or `copy_` from a device tensor; on a
                    CPU-only run every `Tensor.cpu()` (which would return the tensor itself: the
                    fault returns a damaged copy instead)
    d2d             device-to-device: `Tensor.clone()` of a device tensor, `.to()`/`copy_` between
                    device tensors; on a CPU-only run every `Tensor.clone()`
`to*` matches every `Tensor.to` kind; no ARG matches every host-to-device kind (d2h and d2d
only when ARG names them).
"""
from __future__ import annotations

import fnmatch
import os
import threading
from typing import Any, Callable, Dict, Optional

from .. import torchapi
from . import fault, patch

H2D_KINDS = ("to", "to-nonblocking", "pinned", "side-stream", "cuda", "tensor", "as_tensor", "copy_")
TRANSFER_KINDS = H2D_KINDS + ("d2h", "d2d")
_KIND_HELP = "glob over " + "|".join(TRANSFER_KINDS)


def _has_device_arg(args: tuple, kwargs: dict) -> bool:
    import torch

    if "device" in kwargs or kwargs.get("copy"):
        return True
    return any(isinstance(a, (str, torch.device)) for a in args)


def _side_stream_active() -> bool:
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return False
    return torch.cuda.current_stream() != torch.cuda.default_stream()


def _direction(src: Any, dst: Any) -> Optional[str]:
    """'d2h' or 'd2d' for a copy out of device memory, None for one out of host memory."""
    if src.device.type == "cpu":
        return None
    return "d2h" if dst.device.type == "cpu" else "d2d"


def _to_kind(tensor: Any, out: Any, args: tuple, kwargs: dict) -> str:
    direction = _direction(tensor, out)
    if direction:
        return direction
    if _side_stream_active():
        return "side-stream"
    if kwargs.get("non_blocking") or any(a is True for a in args):
        return "pinned" if tensor.is_pinned() else "to-nonblocking"
    return "to"


def _patch_transfers(arg: Optional[str], corrupt: Callable[[Any, str], None]) -> None:
    """Wrap every copy API; `corrupt(out, kind)` damages matching results in place."""
    import torch

    busy = threading.local()  # `corrupt` may copy too (copy-stale clones): those copies are left alone
    cpu_only = not torch.cuda.is_available()

    def hits(kind: str) -> bool:
        return not getattr(busy, "on", False) and (
            fnmatch.fnmatchcase(kind, arg) if arg else kind in H2D_KINDS)

    def damage(out: Any, kind: str) -> Any:
        if isinstance(out, torch.Tensor) and hits(kind):
            busy.on = True
            try:
                with torch.no_grad():
                    corrupt(out, kind)
            finally:
                busy.on = False
        return out

    def to(orig: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(self, *args, **kwargs):
            out = orig(self, *args, **kwargs)
            if out is self or not _has_device_arg(args, kwargs):
                return out
            return damage(out, _to_kind(self, out, args, kwargs))
        return wrapped

    def cpu(orig: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(self, *args, **kwargs):
            out = orig(self, *args, **kwargs)
            if out is self and cpu_only and hits("d2h"):
                out = self.clone()  # a CPU-only run has no read-back to damage: damage a copy, not the source
            return out if out is self else damage(out, "d2h")
        return wrapped

    def clone(orig: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(self, *args, **kwargs):
            out = orig(self, *args, **kwargs)
            return damage(out, "d2d") if cpu_only or self.device.type != "cpu" else out
        return wrapped

    def cuda(orig: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(self, *args, **kwargs):
            return damage(orig(self, *args, **kwargs), "side-stream" if _side_stream_active() else "cuda")
        return wrapped

    def copy_(orig: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(self, src, *args, **kwargs):
            out = orig(self, src, *args, **kwargs)
            if isinstance(src, torch.Tensor) and (src.device != self.device or self.device.type == "cpu"):
                damage(out, _direction(src, self) or ("side-stream" if _side_stream_active() else "copy_"))
            return out
        return wrapped

    def factory(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def make(orig: Callable[..., Any]) -> Callable[..., Any]:
            def build(*args, **kwargs):
                out = orig(*args, **kwargs)
                return damage(out, name) if kwargs.get("device") is not None else out
            return build
        return make

    patch(torch.Tensor, "to", to)
    patch(torch.Tensor, "cuda", cuda)
    patch(torch.Tensor, "copy_", copy_)
    patch(torch.Tensor, "cpu", cpu)
    patch(torch.Tensor, "clone", clone)
    for name in ("tensor", "as_tensor"):
        patch(torch, name, factory(name))


def _zero_(out: Any, kind: str = "") -> None:
    out.zero_()


def _flipping(when: Callable[[Any], bool]) -> Callable[[Any], Any]:
    """A product's post-step for `_patch_products`: its output with one bit flipped (`_flip_one`) where `when`."""
    def flip(out: Any) -> Any:
        if when(out):
            import torch

            with torch.no_grad():
                _flip_one(out)
        return out

    return flip


def _flip_one(out: Any, kind: str = "") -> None:
    """Flip the lowest bit of the middle element: a one-ulp error that only a bitwise check sees."""
    import torch

    if out.numel() == 0 or out.dtype == torch.bool or out.is_complex():
        return
    ints = out.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[out.element_size()])
    index, rest = [], out.numel() // 2
    for dim in reversed(out.shape):
        rest, i = divmod(rest, dim)
        index.append(i)
    ints[tuple(reversed(index))].bitwise_xor_(1)


@fault("copy-zeros", "host-to-device copies come back as zeros (HIP #3874, TheRock #8379); ARG limits it to "
                     "some kinds of copy or names d2h/d2d; off with HSA_ENABLE_SDMA=0, which moves copies off "
                     "the DMA engines "
                     "(https://github.com/ROCm/legacy-rocm-build/issues/2781)", args=_KIND_HELP, choices=TRANSFER_KINDS)
def _copy_zeros(arg: Optional[str]) -> None:
    if os.environ.get("HSA_ENABLE_SDMA") != "0":  # the workaround `rocmcheck doctor` must find
        _patch_transfers(arg, _zero_)


@fault("copy-flip", "host-to-device copies (ARG: some kinds, or d2h/d2d) come back with one bit flipped in one "
                    "element", args=_KIND_HELP, choices=TRANSFER_KINDS)
def _copy_flip(arg: Optional[str]) -> None:
    _patch_transfers(arg, _flip_one)


@fault("copy-stale", "host-to-device copies (ARG: some kinds, or d2h/d2d) return the data of the previous copy "
                     "of the same shape "
                     "(a missed wait, pinned-memory races, CuPy #4923)", args=_KIND_HELP, choices=TRANSFER_KINDS)
def _copy_stale(arg: Optional[str]) -> None:
    previous: Dict[tuple, Any] = {}

    def stale(out: Any, kind: str) -> None:
        key = (kind, tuple(out.shape), out.dtype, str(out.device))
        earlier, previous[key] = previous.get(key), out.clone()
        if earlier is not None:
            out[...] = earlier

    _patch_transfers(arg, stale)


@fault("bf16-zeros", "casts to bfloat16 return zeros (bf16 silently broken on the device)")
def _bf16_zeros(arg: Optional[str]) -> None:
    import torch

    def cast(orig: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(self, *args, **kwargs):
            out = orig(self, *args, **kwargs)
            if isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and out is not self:
                with torch.no_grad():
                    out.zero_()
            return out
        return wrapped

    for name in ("to", "bfloat16", "type"):
        patch(torch.Tensor, name, cast)


def _patch_products(poison: Callable[[Any], Any], again: Callable[[Any], int] = lambda out: 0) -> None:
    """Pass the result of every matrix-product API through `poison`, after computing it `again(out)` more
    times (the same call, so the same work on the same device: a slower GPU whose answers stay right)."""
    import torch

    def wrap(orig: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args, **kwargs):
            out = orig(*args, **kwargs)
            if isinstance(out, torch.Tensor) and out.is_floating_point() and out.numel():
                for _ in range(again(out)):
                    out = orig(*args, **kwargs)
                out = poison(out)
            return out
        return wrapped

    for owner, name in ((torch, "matmul"), (torch, "mm"), (torch, "bmm"), (torch, "addmm"),
                        (torch.Tensor, "matmul"), (torch.Tensor, "__matmul__"), (torch.Tensor, "mm"),
                        (torch.nn.functional, "linear")):
        patch(owner, name, wrap)


def _on_gpu(out: Any, index: int) -> bool:
    """Whether `out` lives on GPU `index` (cuda:N, a ROCm GPU's cuda:N, simgpu:N); never the CPU."""
    return out.device.type != "cpu" and (out.device.index or 0) == index


def _gpu_factor(text: str) -> "tuple":
    """IDX[:FACTOR] -> (GPU index, slow-down factor of at least 2); ValueError when either is bad."""
    index, _, factor = text.partition(":")
    if not index.isdigit() or not (factor or "4").isdigit() or int(factor or "4") < 2:
        raise ValueError(f"IDX[:FACTOR] with FACTOR at least 2, not {text}")
    return int(index), int(factor or "4")


def _gpu_index(text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"a GPU index, not {text}")
    return int(text)


@fault("gpu-bitflip", "matrix products (torch.matmul, @, mm, bmm, addmm, F.linear) on GPU ARG (default 0) come back "
                      "with the lowest mantissa bit of one element flipped: bitflip aimed at one real GPU of a node, "
                      "so a drill on real hardware (make hardware) proves the NO-GO names that GPU", args="GPU index",
       parse_arg=_gpu_index)
def _gpu_bitflip(arg: Optional[str]) -> None:
    index = _gpu_index(arg or "0")
    _patch_products(_flipping(lambda out: _on_gpu(out, index)))


@fault("slow-matmul", "matrix products (torch.matmul, @, mm, bmm, addmm, F.linear) on GPU IDX (default 0) are "
                      "computed FACTOR times (default 4), so that GPU's product throughput drops to 1/FACTOR while its "
                      "answers stay right: a GPU at a fraction of its clocks, on real hardware (simgpu-slow-matmul "
                      "is the simulated GPU's)", args="IDX[:FACTOR]", parse_arg=_gpu_factor)
def _slow_matmul(arg: Optional[str]) -> None:
    index, factor = _gpu_factor(arg or "0")
    _patch_products(lambda out: out, lambda out: factor - 1 if _on_gpu(out, index) else 0)


def _preferred_blas() -> Any:
    """The GPU BLAS library GEMMs go to now; None on the CPU (one BLAS) and on torch < 2.4 (unnamed)."""
    import torch

    preferred = torchapi.preferred_blas_library()
    return preferred() if preferred is not None and torch.cuda.is_available() else None


def per_call_rate(text: str) -> float:
    """A probability per call, 0 < RATE <= 1 (ValueError otherwise)."""
    value = float(text)
    if not 0 < value <= 1:
        raise ValueError(f"a rate per call must be above 0 and at most 1, not {text}")
    return value


@fault("bitflip", "matrix products (torch.matmul, @, mm, bmm, addmm, F.linear) come back with the lowest mantissa "
                  "bit of one element flipped, in every call or with probability ARG per call: a one-ulp silent "
                  "error no tolerance sees (the CPU's form of simgpu-bitflip; products inside torch's own kernels, "
                  "attention and backward, are not reached)", args="rate per call, above 0 and at most 1 (default 1)",
       parse_arg=per_call_rate)
def _bitflip(arg: Optional[str]) -> None:
    import random

    chance = per_call_rate(arg) if arg else 1.0
    draw = random.Random()  # seeded from the OS in this child: every run meets other calls
    _patch_products(_flipping(lambda out: chance >= 1 or draw.random() < chance))


@fault("matmul-nan", "matrix products return one NaN element (split-K NaN, rocm-libraries #9055); it lives in the "
                     "default BLAS library: off with TORCH_BLAS_PREFER_HIPBLASLT=0 or another "
                     "preferred_blas_library (https://github.com/pytorch/pytorch/pull/128753)")
def _matmul_nan(arg: Optional[str]) -> None:
    import torch

    if os.environ.get("TORCH_BLAS_PREFER_HIPBLASLT") == "0":  # the workaround `rocmcheck doctor` must find
        return
    default = _preferred_blas()

    def nan(out: Any) -> Any:
        if _preferred_blas() != default:  # e.g. gemm[*-cublas]: routed to another library
            return out
        mask = torch.zeros_like(out).view(-1)
        mask[0] = float("nan")
        return out + mask.view(out.shape)

    _patch_products(nan)


@fault("matmul-zeros", "matrix products return zeros in the second half of the output "
                       "(silent zeros on tall-skinny shapes, rocm-libraries #5706)")
def _matmul_zeros(arg: Optional[str]) -> None:
    import torch

    def zeros(out: Any) -> Any:
        keep = torch.ones(out.numel(), dtype=out.dtype, device=out.device)
        keep[out.numel() // 2:] = 0
        return out * keep.view(out.shape)

    _patch_products(zeros)


@fault("fp16-ftz", "float16 matrix products flush subnormal inputs to zero in backward "
                   "(hipBLASLt without fp16_alt_impl on gfx90a, pytorch #182952)")
def _fp16_ftz(arg: Optional[str]) -> None:
    import torch

    tiny = torch.finfo(torch.float16).tiny

    def flush(t: Any) -> Any:
        return torch.where(t.abs() < tiny, torch.zeros_like(t), t)

    def wrap(orig: Callable[..., Any]) -> Callable[..., Any]:
        class FlushingProduct(torch.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                ctx.save_for_backward(a, b)
                return orig(a, b)

            @staticmethod
            def backward(ctx, grad):
                a, b = (flush(t) for t in ctx.saved_tensors)
                return orig(grad, b.t()), orig(a.t(), grad)

        def product(a, b, *args, **kwargs):
            plain_2d = not args and not kwargs and a.dim() == 2 and b.dim() == 2
            if plain_2d and a.dtype == b.dtype == torch.float16 and (a.requires_grad or b.requires_grad):
                return FlushingProduct.apply(a, b)
            return orig(a, b, *args, **kwargs)
        return product

    for owner, name in ((torch, "matmul"), (torch, "mm"), (torch.Tensor, "matmul"), (torch.Tensor, "__matmul__"),
                        (torch.Tensor, "mm")):
        patch(owner, name, wrap)


@fault("grad-zeros", "the backward pass after an autocast forward produces all-zero gradients")
def _grad_zeros(arg: Optional[str]) -> None:
    import torch
    from torch.amp.autocast_mode import autocast

    pending = threading.local()

    def enter(orig: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(self, *args, **kwargs):
            if self._enabled:  # checkpointing re-enters disabled autocast contexts: not an autocast forward
                pending.autocast = True
            return orig(self, *args, **kwargs)
        return wrapped

    def backward(orig: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(self, gradient=None, *args, **kwargs):
            if getattr(pending, "autocast", False):
                pending.autocast = False
                gradient = torch.zeros_like(self)  # zero upstream gradient: every leaf gradient is zero
            return orig(self, gradient, *args, **kwargs)
        return wrapped

    patch(autocast, "__enter__", enter)
    patch(torch.Tensor, "backward", backward)


def _blocking_backward(*args: Any, **kwargs: Any) -> None:
    """Stands in for an attention backward kernel that never completes."""
    threading.Event().wait()


@fault("backward-hang", "loss.backward() blocks forever (the attention backward hang users report on ROCm)")
def _backward_hang(arg: Optional[str]) -> None:
    import torch.autograd

    patch(torch.autograd, "backward", lambda original: _blocking_backward)


@fault("conv-wrong", "convolutions return output channel 0 scaled by 1.5 (forward, the default) or gradients scaled by "
                     "1.5 (backward), with no error (MIOpen's order-dependent convolution ~30% off)",
       choices=("forward", "backward"))
def _conv_wrong(arg: Optional[str]) -> None:
    import torch
    import torch.nn.functional as F

    class WrongBackward(torch.autograd.Function):
        """The identity forward; the gradient flowing into the convolution scaled by 1.5."""

        @staticmethod
        def forward(ctx: Any, out: Any) -> Any:
            return out.view_as(out)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad * 1.5

    def wrap(orig: Callable[..., Any]) -> Callable[..., Any]:
        def conv2d(*args: Any, **kwargs: Any) -> Any:
            out = orig(*args, **kwargs)
            if arg == "backward":
                return WrongBackward.apply(out)
            scale = torch.ones(out.shape[1], 1, 1, dtype=out.dtype, device=out.device)
            scale[0] = 1.5
            return out * scale
        return conv2d

    patch(F, "conv2d", wrap)


@fault("compile-wrong", "torch.compile returns a model whose outputs are 1% off (a miscompiled kernel; gradients "
                        "follow)")
def _compile_wrong(arg: Optional[str]) -> None:
    import torch

    def wrap(orig: Callable[..., Any]) -> Callable[..., Any]:
        def compile(model: Any, *args: Any, **kwargs: Any) -> Any:
            compiled = orig(model, *args, **kwargs)
            return lambda *a, **k: compiled(*a, **k) * 1.01
        return compile

    patch(torch, "compile", wrap)


@fault("old-torch", "torch API newer than ARG (default: the oldest supported torch) is absent, as on that torch: every "
                    "fallback in rocmcheck.torchapi runs on the torch installed here",
       choices=("2.2", "2.3", "2.4", "2.5"), whole_run=True, simulates=True)
def _old_torch(arg: Optional[str]) -> None:
    pretend = torchapi.version_tuple(arg or torchapi.OLDEST)

    def make(real: Callable[[str], Any]) -> Callable[[str], Any]:
        def lookup(name: str) -> Any:
            first = torchapi.since(name)
            return (False, None) if first and torchapi.version_tuple(first) > pretend else real(name)
        return lookup

    patch(torchapi, "lookup", make)
