"""Killing a child's whole process tree, and telling an unkillable child apart."""
from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Dict, List

import psutil


def group_alive(pgid: int) -> bool:
    """Whether any process is left in process group `pgid` (zombies included)."""
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def descendants(pid: int) -> List[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def session_members(sid: int) -> List[psutil.Process]:
    """Processes still in session `sid` (grandchildren that left the process group)."""
    members = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getsid(proc.pid) == sid and proc.pid != os.getpid():
                members.append(proc)
        except (OSError, psutil.Error):
            continue
    return members


def signal_tree(pid: int, sig: int, extra: List[psutil.Process] = ()) -> None:
    """Send `sig` to the child's process group (it leads its own session) and to any
    known descendant or session member that moved elsewhere."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for proc in [*descendants(pid), *extra]:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass


def kill_leftovers(pid: int, thorough: bool = False) -> int:
    """After the child ended: SIGKILL whatever is left of its group (and, when
    `thorough`, of its session: a scan of every process, kept for abnormal ends)."""
    if not thorough and not group_alive(pid):
        return 0
    left = session_members(pid)
    signal_tree(pid, signal.SIGKILL, left)
    return len(left)


def process_state(pid: int) -> Dict[str, str]:
    """`/proc` facts about a process that will not die (state D = stuck in the kernel)."""
    facts: Dict[str, str] = {}
    try:
        proc = psutil.Process(pid)
        facts["status"] = proc.status()
    except psutil.Error:
        return facts
    for name in ("wchan", "stat"):
        try:
            facts[name] = Path(f"/proc/{pid}/{name}").read_text().strip()
        except OSError:
            pass
    return facts
