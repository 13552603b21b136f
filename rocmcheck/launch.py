"""Starting isolated children: the common handle and the spawn launcher.

Every child gets an output pipe (drained by the parent, so never full) and a
lifeline pipe on its stdin, and leads its own session/process group. The task
itself travels as a JSON file whose path is the first line on the lifeline.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional

from .proctree import kill_leftovers, signal_tree

WINDOWS = os.name == "nt"

CHILD_PATHS_ENV = "ROCMCHECK_CHILD_PROBES_PATHS"
CHILD_PRELOAD_ENV = "ROCMCHECK_CHILD_PRELOAD"


@dataclass
class ChildProcess:
    """A running child as the watchdog sees it."""

    pid: int
    out_fd: int  # read end of its stdout+stderr
    lifeline_fd: int  # write end of its stdin; closing it tells the child to die
    popen: Optional[subprocess.Popen] = field(default=None, repr=False)
    zygote: Any = field(default=None, repr=False)
    job: Any = field(default=None, repr=False)  # Windows job object holding the tree

    def signal_tree(self, sig: int) -> None:
        """Signal the child and everything it started (process group, or job on Windows)."""
        if self.job is None:
            signal_tree(self.pid, sig)
        elif sig == signal.SIGTERM:
            self.popen.terminate()  # TerminateProcess of the child alone: Windows has no gentle TERM
        else:
            self.job.terminate()

    def kill_leftovers(self, thorough: bool) -> int:
        """After the child ended, kill what it left behind; returns how many were found."""
        if self.job is None:
            return kill_leftovers(self.pid, thorough)
        self.job.terminate()
        self.job.close()
        return 0

    def wait(self, timeout: float) -> Optional[int]:
        """The return code (negative for a signal) once it ended, else None after `timeout` s."""
        if self.popen is not None:
            try:
                return self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                return None
        return self.zygote.wait_exit(self.pid, timeout)

    def close_lifeline(self) -> None:
        if self.lifeline_fd >= 0:
            os.close(self.lifeline_fd)
            self.lifeline_fd = -1


def child_env(extra: Dict[str, str], probes_paths: Iterable[str], preload: Iterable[str] = ()) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    env[CHILD_PATHS_ENV] = json.dumps([str(p) for p in probes_paths])
    env[CHILD_PRELOAD_ENV] = json.dumps(list(preload))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class SpawnLauncher:
    """A fresh interpreter per task; while one runs, the next is already importing torch."""

    name = "spawn"

    def __init__(self, probes_paths: List[str], prestart: bool = (os.cpu_count() or 1) > 1,
                 preload: List[str] = ()):
        self.probes_paths = probes_paths
        self.preload = list(preload)
        self.prestart = prestart
        self._standby: Optional[ChildProcess] = None

    def _start(self, env: Dict[str, str]) -> ChildProcess:
        out_r, out_w = os.pipe()
        life_r, life_w = os.pipe()
        flags = subprocess.CREATE_NEW_PROCESS_GROUP if WINDOWS else 0  # type: ignore[attr-defined]
        try:
            popen = subprocess.Popen(
                [sys.executable, "-m", "rocmcheck.child"], stdin=life_r, stdout=out_w, stderr=out_w,
                env=child_env(env, self.probes_paths, self.preload), start_new_session=not WINDOWS, close_fds=True,
                creationflags=flags,
            )
        finally:
            os.close(out_w)
            os.close(life_r)
        child = ChildProcess(popen.pid, out_r, life_w, popen=popen)
        if WINDOWS:  # assigned before the task is sent, so no probe code runs outside the job
            from .winjob import Job

            child.job = Job()
            child.job.assign(popen._handle)  # type: ignore[attr-defined]
        return child

    def launch(self, task_path: str, env: Dict[str, str]) -> ChildProcess:
        """Hand the task to the standby child (same base environment) or a new one."""
        child = self._standby if (self._standby and not env) else None
        self._standby = None
        if child is None or child.popen.poll() is not None:
            child = self._start(env)
        os.write(child.lifeline_fd, task_path.encode() + b"\n")
        if self.prestart:
            self._standby = self._start({})
        return child

    def close(self) -> None:
        """Retire the standby child; it has run nothing, so it is simply killed."""
        if self._standby is not None:
            self._standby.signal_tree(signal.SIGKILL)
            self._standby.popen.wait()
            self._standby.close_lifeline()
            os.close(self._standby.out_fd)
            self._standby = None
