"""Kernel log lines that explain a GPU failure: NVIDIA Xid, amdgpu page faults and resets.

After a GPU variant ends badly the runner reads the kernel log (`/dev/kmsg`, non-blocking,
else `dmesg` with a short timeout) for records written since the variant started. The driver
often says what the probe could not (a page fault address, a ring timeout, an Xid code).
Reading the log never changes the verdict: an unreadable log (containers, `dmesg_restrict`)
is recorded as `kernel_log_unreadable` with the reason.

Formats matched (upstream documentation):
- NVIDIA Xid: `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.`
  https://docs.nvidia.com/deploy/xid-errors/index.html
- amdgpu page faults: `amdgpu 0000:c2:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:8 pasid:32780)`,
  `[gfxhub0] no-retry page fault ...`, `GCVM_L2_PROTECTION_FAULT_STATUS:0x00801031`:
  https://github.com/ROCm/TheRock/issues/1271, https://github.com/ROCm/amdgpu/issues/172
- amdgpu resets: `amdgpu 0000:03:00.0: amdgpu: ring comp_1.1.0 timeout, signaled seq=7, emitted seq=9`,
  `amdgpu 0000:c5:00.0: amdgpu: GPU reset begin!`: https://github.com/ROCm/legacy-rocm-build/issues/6127,
  https://github.com/ROCm/legacy-rocm-build/issues/6273

The time base is the kernel's printk clock (seconds since boot), which `time.monotonic()`
follows on Linux; `SLACK_S` absorbs the drift between them.
"""
from __future__ import annotations

import errno
import os
import re
import subprocess
import time
from typing import Iterable, List, Optional, Tuple

LOG_ENV = "ROCMCHECK_KERNEL_LOG"  # a file in /dev/kmsg record format, standing in for the kernel log
KMSG = "/dev/kmsg"
SLACK_S = 2.0
MAX_MATCHES = 20
DMESG_TIMEOUT_S = 3.0

PATTERNS = (
    ("nvidia-xid", re.compile(r"NVRM: Xid\b")),
    ("amdgpu-page-fault", re.compile(r"amdgpu.*page fault|\[[a-z]+hub\d*\].*page fault|VM_L2_PROTECTION_FAULT")),
    ("amdgpu-reset", re.compile(r"amdgpu.*GPU reset|ring \S+ timeout")),
)
# /dev/kmsg: "PRI,SEQ,USEC,FLAGS[,...];MESSAGE"; dmesg: "[ SECONDS] MESSAGE"
_KMSG = re.compile(r"^\d+,\d+,(\d+),[^;]*;(.*)$")
_DMESG = re.compile(r"^\[\s*(\d+\.\d+)\]\s?(.*)$")


def parse(line: str) -> Tuple[Optional[float], str]:
    """(seconds since boot or None, message) of one kmsg record or dmesg line."""
    m = _KMSG.match(line)
    if m:
        return int(m.group(1)) / 1e6, m.group(2)
    m = _DMESG.match(line)
    if m:
        return float(m.group(1)), m.group(2)
    return None, line


def matches(lines: Iterable[str], since: Optional[float] = None) -> List[str]:
    """Messages of `lines` written at or after `since` (seconds since boot) that name a GPU fault,
    each prefixed with its kind: 'amdgpu-reset: amdgpu 0000:03:00.0: amdgpu: GPU reset begin!'."""
    found = []
    for line in lines:
        stamp, message = parse(line.rstrip("\n"))
        if since is not None and stamp is not None and stamp < since - SLACK_S:
            continue
        for kind, pattern in PATTERNS:
            if pattern.search(message):
                found.append(f"{kind}: {message.strip()}")
                break
    return found[-MAX_MATCHES:]


def _read_kmsg(path: str) -> List[str]:
    """Every record /dev/kmsg still holds, without blocking (one record per read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    lines = []
    try:
        while True:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:  # a record was overwritten while reading: go on
                    continue
                raise
            if not chunk:
                break
            lines.extend(chunk.decode("utf-8", "replace").splitlines())
    finally:
        os.close(fd)
    return lines


def read_lines() -> List[str]:
    """The kernel log's lines, or OSError saying why it cannot be read."""
    fixture = os.environ.get(LOG_ENV)
    if fixture:
        with open(fixture, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    try:
        return _read_kmsg(KMSG)
    except OSError as kmsg_error:
        try:
            out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=DMESG_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise OSError(f"{KMSG}: {kmsg_error.strerror or kmsg_error}; dmesg: {e}") from None
        if out.returncode != 0:
            raise OSError(f"{KMSG}: {kmsg_error.strerror or kmsg_error}; dmesg: "
                          f"{(out.stderr.strip() or f'exit {out.returncode}')[:200]}") from None
        return out.stdout.splitlines()


def now() -> float:
    """The current time on the kernel log's clock (seconds since boot)."""
    return time.monotonic()


def evidence(since: float) -> dict:
    """What the kernel log says since `since`: {'kernel_log': [...]} when something matched,
    {'kernel_log_unreadable': why} when it cannot be read, {} when it holds nothing relevant."""
    try:
        lines = read_lines()
    except OSError as e:
        return {"kernel_log_unreadable": str(e)}
    found = matches(lines, since)
    return {"kernel_log": found} if found else {}
