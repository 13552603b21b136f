"""Windows job objects: the Windows counterpart of a POSIX process group.

A child is assigned to its own job with JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE, so that
terminating the job ends the child and every process it started, and so that the
whole tree dies with rocmcheck if rocmcheck itself is killed (its job handle closes).
`CREATE_NEW_PROCESS_GROUP` alone does not kill trees (docs/isolation.md §8).
"""
from __future__ import annotations

import ctypes
from ctypes import wintypes
from typing import Any

JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS = 9
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x2000


class _IoCounters(ctypes.Structure):
    _fields_ = [(name, ctypes.c_ulonglong) for name in (
        "ReadOperationCount", "WriteOperationCount", "OtherOperationCount",
        "ReadTransferCount", "WriteTransferCount", "OtherTransferCount")]


class _BasicLimits(ctypes.Structure):
    _fields_ = [("PerProcessUserTimeLimit", ctypes.c_int64), ("PerJobUserTimeLimit", ctypes.c_int64),
                ("LimitFlags", wintypes.DWORD), ("MinimumWorkingSetSize", ctypes.c_size_t),
                ("MaximumWorkingSetSize", ctypes.c_size_t), ("ActiveProcessLimit", wintypes.DWORD),
                ("Affinity", ctypes.c_size_t), ("PriorityClass", wintypes.DWORD),
                ("SchedulingClass", wintypes.DWORD)]


class _ExtendedLimits(ctypes.Structure):
    _fields_ = [("BasicLimitInformation", _BasicLimits), ("IoInfo", _IoCounters),
                ("ProcessMemoryLimit", ctypes.c_size_t), ("JobMemoryLimit", ctypes.c_size_t),
                ("PeakProcessMemoryUsed", ctypes.c_size_t), ("PeakJobMemoryUsed", ctypes.c_size_t)]


class Job:
    """One job object holding one child's tree."""

    def __init__(self) -> None:
        self._k32: Any = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
        self._k32.CreateJobObjectW.restype = wintypes.HANDLE
        self.handle = self._k32.CreateJobObjectW(None, None)
        if not self.handle:
            raise ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined]
        info = _ExtendedLimits()
        info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
        ok = self._k32.SetInformationJobObject(self.handle, JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS,
                                               ctypes.byref(info), ctypes.sizeof(info))
        if not ok:
            raise ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined]

    def assign(self, process_handle: int) -> None:
        """Put a process in the job (before it runs probe code, so it cannot escape)."""
        if not self._k32.AssignProcessToJobObject(self.handle, wintypes.HANDLE(int(process_handle))):
            raise ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined]

    def terminate(self, exit_code: int = 1) -> None:
        """End every process in the job."""
        if self.handle:
            self._k32.TerminateJobObject(self.handle, exit_code)

    def close(self) -> None:
        if self.handle:
            self._k32.CloseHandle(self.handle)
            self.handle = None
