"""Name how a child ended: POSIX signals, shell-style 128+N, Windows NTSTATUS codes,
and the stderr signatures of known GPU runtime failures."""
from __future__ import annotations

import re
import signal
from typing import List, Optional

NTSTATUS = {
    0xC0000005: "STATUS_ACCESS_VIOLATION",
    0xC00000FD: "STATUS_STACK_OVERFLOW",
    0xC0000135: "STATUS_DLL_NOT_FOUND",
    0xC0000139: "STATUS_ENTRYPOINT_NOT_FOUND",
    0xC000001D: "STATUS_ILLEGAL_INSTRUCTION",
    0xC0000374: "STATUS_HEAP_CORRUPTION",
    0xC0000409: "STATUS_STACK_BUFFER_OVERRUN (fail-fast)",
    0xC000013A: "STATUS_CONTROL_C_EXIT",
    0xC0000017: "STATUS_NO_MEMORY",
}

# (pattern, what it means) — matched over a crashed or failed child's output.
SIGNATURES = [
    (re.compile(r"Memory access fault by GPU node-\d+"), "GPU memory access fault (HSA abort)"),
    (re.compile(r"on address \(nil\)"), "GPU fault on a NULL address: often a wrong HSA_OVERRIDE_GFX_VERSION"),
    (re.compile(r"invalid device function", re.I),
     "no kernel for this GPU arch in the wheel (invalid device function)"),
    (re.compile(r"HSA_STATUS_ERROR\w*"), "HSA runtime error"),
    (re.compile(r"hipError\w+|HIP error"), "HIP runtime error"),
    (re.compile(r"CUDA error"), "CUDA runtime error"),
    (re.compile(r"Cannot re-initialize CUDA in forked subprocess"), "GPU runtime used after fork"),
    (re.compile(r"out of memory", re.I), "out of memory"),
    (re.compile(r"reserved by PyTorch but unallocated"),
     "out of memory with much memory reserved but unallocated: allocator fragmentation"),
    (re.compile(r"HIPBLAS(?:LT)?_STATUS_\w+"), "hipBLAS/hipBLASLt error"),
    (re.compile(r"ROCBLAS_STATUS_\w+|rocblas_status_\w+"), "rocBLAS error"),
    (re.compile(r"CUBLAS_STATUS_\w+"), "cuBLAS error"),
    (re.compile(r"CUDNN_STATUS_\w+|cuDNN error"), "cuDNN error"),
    (re.compile(r"miopenStatus\w+|MIOpen(?: Error|\(HIP\): Error)"), "MIOpen error"),
    (re.compile(r"Page not present or supervisor privilege"), "GPU page fault"),
]


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe(returncode: Optional[int], windows: bool = False) -> str:
    """A human name for a process's end: 'SIGSEGV', 'exit 3', 'STATUS_ACCESS_VIOLATION'."""
    if returncode is None:
        return "unknown"
    if windows:
        code = returncode & 0xFFFFFFFF
        if code in NTSTATUS:
            return f"{NTSTATUS[code]} (0x{code:08X})"
        if code == 3:
            return "abort() (exit 3)"
        return f"exit {code}" if code < 0x80000000 else f"NTSTATUS 0x{code:08X}"
    if returncode < 0:
        return signal_name(-returncode)
    if 128 < returncode < 128 + 65:
        return f"exit {returncode} ({signal_name(returncode - 128)} through a shell?)"
    return f"exit {returncode}"


def signal_of(returncode: Optional[int]) -> Optional[int]:
    """The POSIX signal that ended a process, if one did."""
    return -returncode if returncode is not None and returncode < 0 else None


def signatures(text: str) -> List[str]:
    """Known runtime-failure signatures found in `text`."""
    return [meaning for pattern, meaning in SIGNATURES if pattern.search(text)]
