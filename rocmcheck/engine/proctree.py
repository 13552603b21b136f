"""Killing a child's whole process tree, and telling an unkillable child apart."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Set

import psutil

TOKEN_ENV = "ROCMCHECK_CHILD_TOKEN"  # unique per child: how its descendants are found wherever they moved


def descendants(pid: int) -> List[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def signal_tree(pid: int, sig: int) -> None:
    """Send `sig` to the child's process group (it leads its own session) and to any
    descendant still attached to it that moved to another group."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for proc in descendants(pid):
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass


def leftovers(pid: int, token: str, before: Set[int]) -> List[psutil.Process]:
    """What is left of an ended child's tree: the processes started since `before` (a pid
    snapshot taken at launch) that are in its process group or session, or carry its
    `token` in their environment (a daemon that left both). Nothing else is ever matched."""
    found = []
    for new in set(psutil.pids()) - before - {pid, os.getpid()}:
        try:
            proc = psutil.Process(new)
            if pid in (os.getpgid(new), os.getsid(new)) or proc.environ().get(TOKEN_ENV) == token:
                found.append(proc)
        except (OSError, psutil.Error):
            continue
    return found


def kill_leftovers(pid: int, token: str, before: Set[int]) -> List[str]:
    """SIGKILL what is left of an ended child's tree; returns what was killed, by pid and command."""
    killed = []
    for proc in leftovers(pid, token, before):
        try:
            what = " ".join(proc.cmdline()) or proc.name()
            proc.kill()
        except psutil.Error:
            continue
        killed.append(f"{proc.pid} {what[:200]}")
    return killed


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
