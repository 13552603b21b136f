"""Process-level faults: what a broken driver or runtime does to the probe's process."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from typing import Callable, Optional

from .. import torchapi
from . import fault, patch


def _block_forever() -> None:
    """Block in a C-level wait (like a stuck driver call), not in Python bytecode."""
    threading.Event().wait()


@fault("segv", "the probe's process dereferences NULL (SIGSEGV, like a GPU access violation)", in_probe=True)
def _segv(arg: Optional[str]) -> None:
    ctypes.string_at(0)


@fault("abort", "the probe's process calls abort() (SIGABRT, like an HSA 'Memory access fault')", in_probe=True)
def _abort(arg: Optional[str]) -> None:
    sys.stderr.write("Memory access fault by GPU node-1 (Agent handle: 0x0) on address (nil). Reason: Unknown.\n")
    sys.stderr.flush()
    os.abort()


NO_BINARY_TEXT = "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"


@fault("no-binary-for-gpu", "the first GPU runtime call prints hipErrorNoBinaryForGpu and aborts, as HIP does "
       "when the wheel has no code object for the GPU's arch (device-facts child included)", in_facts=True)
def _no_binary_for_gpu(arg: Optional[str]) -> None:
    import torch

    def first_hip_call(*args: object, **kwargs: object) -> None:
        sys.stderr.write(NO_BINARY_TEXT + "\n")
        sys.stderr.flush()
        os.abort()

    for name in ("init", "_lazy_init", "is_available", "device_count"):  # compile-time facts stay readable
        patch(torch.cuda, name, lambda original: first_hip_call)


@fault("exit-no-result", "the probe's process exits with status ARG (default 0) before writing a result",
       args="exit status", in_probe=True)
def _exit_no_result(arg: Optional[str]) -> None:
    sys.stdout.flush()
    os._exit(int(arg or 0))


@fault("hang", "the probe blocks forever in a C call", in_probe=True)
def _hang(arg: Optional[str]) -> None:
    _block_forever()


@fault("ignore-sigterm", "the probe ignores SIGTERM, then blocks forever", in_probe=True)
def _ignore_sigterm(arg: Optional[str]) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _block_forever()


@fault("grandchild-hang", "the probe starts a grandchild that holds its output open, then both block forever",
       in_probe=True)
def _grandchild_hang(arg: Optional[str]) -> None:
    code = "import sys,time; print('grandchild', flush=True); time.sleep(10**6)"
    grandchild = subprocess.Popen([sys.executable, "-c", code])  # inherits stdout/stderr
    print(f"grandchild pid {grandchild.pid}", flush=True)
    _block_forever()


@fault("output-flood", "the probe writes ARG MiB (default 8) without newlines to stdout and stderr, then goes on",
       args="MiB", in_probe=True)
def _output_flood(arg: Optional[str]) -> None:
    chunk = "x" * (1 << 20)
    for _ in range(int(arg or 8)):
        sys.stdout.write(chunk)
        sys.stderr.write(chunk)
    sys.stdout.flush()
    sys.stderr.flush()


@fault("killed", "the probe's process is SIGKILLed by someone else (as the kernel's OOM killer does)", in_probe=True)
def _killed(arg: Optional[str]) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@fault("oom", "the first torch allocation raises torch.OutOfMemoryError")
def _oom(arg: Optional[str]) -> None:
    import torch

    def out_of_memory(*args, **kwargs):
        raise torchapi.out_of_memory_error()("HIP out of memory. Tried to allocate 2.00 GiB (injected)")

    for name in ("empty", "zeros", "ones", "randn", "rand", "full", "arange", "tensor"):
        patch(torch, name, lambda original: out_of_memory)


@fault("gpu-init-fork-error", "GPU runtime init fails in a child forked from the zygote (as HIP does when "
       "initialised before the fork); spawned children are unaffected")
def _gpu_init_fork_error(arg: Optional[str]) -> None:
    from ..engine import child

    def make(original: Callable[[str], None]) -> Callable[[str], None]:
        def runtime_init(device: str) -> None:
            if os.environ.get("ROCMCHECK_ISOLATION") == "zygote":
                raise RuntimeError("Cannot re-initialize CUDA in forked subprocess (injected)")
            original(device)
        return runtime_init

    patch(child, "runtime_init", make)
