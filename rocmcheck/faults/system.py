"""System faults: hangs and silent corruption in attention, collectives, the allocator and IPC.

Each one patches torch inside the probe's child, the way the reported failure shows
itself to Python: a backward that never returns under one SDPA backend, an SDPA case that
raises, NaN around fully masked attention rows, an all_reduce
that never returns or sums wrong, a live buffer that reads back zeros, a tensor shared over
IPC whose writes never reach the parent (reserved memory that grows every cycle and
expandable_segments silently ignored live beside their probe, in probes/allocator.py).
Faults that must act in processes the probe starts itself (DDP ranks) are also exported
through RANK_FAULTS_ENV; `install_exported()` installs them there.
"""
from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Callable, List, Optional

from . import fault, install, parse, patch

SDPA_BACKENDS = ("math", "flash", "efficient", "cudnn")
_SDPA_FLAGS = {"math": "math_sdp_enabled", "flash": "flash_sdp_enabled", "efficient": "mem_efficient_sdp_enabled",
               "cudnn": "cudnn_sdp_enabled"}
RANK_FAULTS_ENV = "ROCMCHECK_RANK_FAULTS"
CORRUPT_AFTER = 8  # large allocations before the oldest live one is zeroed
LARGE_BYTES = 1 << 20


def _block_forever() -> None:
    """A kernel or collective that never completes: block in a C-level wait."""
    threading.Event().wait()


def _export(name: str, arg: Optional[str]) -> None:
    """Make processes the probe starts (DDP ranks) install this fault too."""
    spec = name + (f":{arg}" if arg else "")
    current = [s for s in os.environ.get(RANK_FAULTS_ENV, "").split(",") if s]
    os.environ[RANK_FAULTS_ENV] = ",".join([*current, spec])


def install_exported(probe_id: str) -> List[str]:
    """In a rank process: install the faults its parent probe exported."""
    return install(parse(os.environ.get(RANK_FAULTS_ENV, "")), probe_id)


# --- attention ------------------------------------------------------------------------


def selected_sdpa_backend() -> Optional[str]:
    """The one backend `sdpa_kernel` left enabled, or None when several are."""
    import torch

    enabled = [name for name, flag in _SDPA_FLAGS.items() if getattr(torch.backends.cuda, flag, lambda: False)()]
    return enabled[0] if len(enabled) == 1 else None


def _wrap_sdpa(call: Callable[..., Any]) -> None:
    """Replace F.scaled_dot_product_attention (MultiheadAttention calls it too) with
    `call(original, query, key, value, attn_mask, *args, **kwargs)`."""
    import torch.nn.functional as F

    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def scaled_dot_product_attention(query, key, value, attn_mask=None, *args, **kwargs):
            return call(orig, query, key, value, attn_mask, *args, **kwargs)
        return scaled_dot_product_attention

    patch(F, "scaled_dot_product_attention", make)


def _patch_sdpa(arg: Optional[str], change: Callable[..., Any]) -> None:
    """`change(out, value)` on SDPA's output under backend `arg` (any backend when None)."""
    if arg and arg not in SDPA_BACKENDS:
        raise ValueError(f"SDPA backend must be one of {', '.join(SDPA_BACKENDS)}, not '{arg}'")

    def call(orig, query, key, value, *args, **kwargs):
        out = orig(query, key, value, *args, **kwargs)
        return change(out, value) if arg in (None, selected_sdpa_backend()) else out

    _wrap_sdpa(call)


@fault("sdpa-backward-hang", "attention backward never returns under one SDPA backend (pytorch #186174)",
       choices=SDPA_BACKENDS)
def _sdpa_backward_hang(arg: Optional[str]) -> None:
    import torch

    class AttentionBackwardNeverReturns(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, out: Any) -> Any:
            return out.clone()

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            _block_forever()

    _patch_sdpa(arg, lambda out, value: AttentionBackwardNeverReturns.apply(out))


@fault("sdpa-wrong", "one SDPA backend returns shifted outputs when V is not contiguous (ROCm/pytorch #3230)",
       choices=SDPA_BACKENDS)
def _sdpa_wrong(arg: Optional[str]) -> None:
    _patch_sdpa(arg, lambda out, value: out if value.is_contiguous() else out + 0.25)


def _raise_for_head_dim(arg: Optional[str], text: str) -> None:
    """SDPA raises RuntimeError(`text`) for queries of head dim ARG only; other calls run."""
    def call(orig, query, *args, **kwargs):
        if query.shape[-1] == int(arg or 0):
            raise RuntimeError(text)
        return orig(query, *args, **kwargs)

    _wrap_sdpa(call)


@fault("sdpa-case-error", "SDPA raises the cuDNN frontend's 'No execution plans support the graph' for one head dim "
                          "(not one of SDPA's 'no kernel' texts)", args="head dim")
def _sdpa_case_error(arg: Optional[str]) -> None:
    _raise_for_head_dim(arg, "cuDNN Frontend error: No execution plans support the graph.")


@fault("sdpa-no-kernel", "SDPA has no kernel for one head dim ('No available kernel. Aborting execution.')",
       args="head dim")
def _sdpa_no_kernel(arg: Optional[str]) -> None:
    _raise_for_head_dim(arg, "No available kernel. Aborting execution.")


@fault("sdpa-masked-nan", "with fully masked query rows (left padding), SDPA returns NaN in those rows and in the "
                          "dk/dv of keys no query sees (masked); leak: NaN also in every key's dk/dv of that batch "
                          "row (cuDNN)", choices=("masked", "leak"))
def _sdpa_masked_nan(arg: Optional[str]) -> None:
    import torch

    class NaNInGradient(torch.autograd.Function):
        """Identity forward; NaN where `where` is true in the gradient it passes back."""

        @staticmethod
        def forward(ctx: Any, t: Any, where: Any) -> Any:
            ctx.where = where
            return t.clone()

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad.masked_fill(ctx.where, float("nan")), None

    def call(orig, query, key, value, attn_mask, *args, **kwargs):
        if attn_mask is None or attn_mask.dtype != torch.bool or attn_mask.any(-1).all():
            return orig(query, key, value, attn_mask, *args, **kwargs)
        dead_rows = ~attn_mask.any(-1, keepdim=True)  # (..., queries, 1)
        keys = ~attn_mask.any(-2).unsqueeze(-1)  # (..., keys, 1): keys no query sees
        if arg == "leak":
            keys = keys | dead_rows.any(-2, keepdim=True)
        query = NaNInGradient.apply(query, dead_rows)
        key, value = NaNInGradient.apply(key, keys), NaNInGradient.apply(value, keys)
        return orig(query, key, value, attn_mask, *args, **kwargs).masked_fill(dead_rows, float("nan"))

    _wrap_sdpa(call)


# --- collectives and DataParallel ----------------------------------------------------------


@fault("all_reduce-hang", "torch.distributed.all_reduce never returns (RCCL hangs: rccl #1129, rocm-systems #11348); "
                          "off with NCCL_P2P_DISABLE=1 (https://github.com/ROCm/rocm-systems/issues/11348)")
def _all_reduce_hang(arg: Optional[str]) -> None:
    import torch.distributed as dist

    if os.environ.get("NCCL_P2P_DISABLE") == "1":  # the workaround `rocmcheck doctor` must find (ranks inherit it)
        return

    def all_reduce_never_returns(*args: Any, **kwargs: Any) -> None:
        _block_forever()

    patch(dist, "all_reduce", lambda original: all_reduce_never_returns)
    _export("all_reduce-hang", arg)


@fault("all_reduce-wrong", "torch.distributed.all_reduce returns the sum plus one (silent P2P corruption)")
def _all_reduce_wrong(arg: Optional[str]) -> None:
    import torch.distributed as dist

    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def all_reduce(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            work = orig(tensor, *args, **kwargs)
            tensor.add_(1)
            return work
        return all_reduce

    patch(dist, "all_reduce", make)
    _export("all_reduce-wrong", arg)


@fault("dataparallel-hang", "nn.DataParallel forward never returns (the DataParallel deadlock users report on ROCm)")
def _dataparallel_hang(arg: Optional[str]) -> None:
    import torch

    def forward_never_returns(self: Any, *args: Any, **kwargs: Any) -> None:
        _block_forever()

    patch(torch.nn.DataParallel, "forward", lambda original: forward_never_returns)


# --- allocator: the canary (its other faults live beside the probe, probes/allocator.py) ----------


@fault("canary-corrupt", "a live buffer reads back zeros after a few large allocations (legacy-rocm-build #6603)")
def _canary_corrupt(arg: Optional[str]) -> None:
    import torch

    live: List[Any] = []
    count = [0]

    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def empty(*args: Any, **kwargs: Any) -> Any:
            out = orig(*args, **kwargs)
            if out.numel() * out.element_size() >= LARGE_BYTES:
                count[0] += 1
                live.append(weakref.ref(out))
                if count[0] == CORRUPT_AFTER:
                    oldest = next((t for t in (r() for r in live) if t is not None and t is not out), None)
                    if oldest is not None:
                        oldest.zero_()
            return out
        return empty

    patch(torch, "empty", make)


# --- workers and IPC ------------------------------------------------------------------------


@fault("ipc-corrupt", "a tensor shared with a child process is a private copy: the child's writes never reach "
                      "the parent (pytorch #143728)")
def _ipc_corrupt(arg: Optional[str]) -> None:
    from multiprocessing.reduction import ForkingPickler

    import torch
    from torch.multiprocessing.reductions import reduce_tensor

    copies: List[Any] = []  # kept alive until the receiver has mapped them

    def reduce_a_copy(tensor: Any) -> Any:
        copies.append(tensor.detach().clone())
        return reduce_tensor(copies[-1])

    ForkingPickler.register(torch.Tensor, reduce_a_copy)


def _corrupt_batches(applies: Callable[[Any], bool]) -> None:
    """Change one element of the first tensor of every batch from the loaders `applies` picks."""
    import torch
    from torch.utils.data import DataLoader

    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def __iter__(self: Any) -> Any:
            for batch in orig(self):
                first = batch[0] if isinstance(batch, (list, tuple)) else batch
                if applies(self) and isinstance(first, torch.Tensor) and first.numel():
                    first.view(-1)[0] += 1
                yield batch
        return __iter__

    patch(DataLoader, "__iter__", make)


@fault("loader-corrupt", "batches from DataLoader worker processes arrive with one element changed")
def _loader_corrupt(arg: Optional[str]) -> None:
    _corrupt_batches(lambda loader: loader.num_workers > 0)


@fault("batch-corrupt", "every DataLoader batch (Accelerate's prepared loader too) reaches the model with one element "
                        "changed: a batch corrupted on its way to the device (as users report with Accelerate's "
                        "device placement)")
def _batch_corrupt(arg: Optional[str]) -> None:
    _corrupt_batches(lambda loader: True)
