"""Name how a child ended: POSIX signals, shell-style 128+N, Windows NTSTATUS codes.
(What its output says, the stderr signatures of known GPU runtime failures, is knowledge/signatures.py.)"""
from __future__ import annotations

import signal
from typing import Optional

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
