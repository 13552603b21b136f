"""Starting isolated children: the common handle and the spawn launcher.

Every child gets an output pipe (drained by the parent, so never full) and a
lifeline pipe on its stdin, and leads its own session/process group. The task
itself travels as a JSON file whose path is the first line on the lifeline.
"""
from __future__ import annotations

import itertools
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Protocol, Sequence, Set

import psutil

from .. import torchapi
from .exitcodes import describe
from .proctree import TOKEN_ENV, kill_leftovers, signal_tree

WINDOWS = os.name == "nt"

CHILD_PATHS_ENV = "ROCMCHECK_CHILD_PROBES_PATHS"
CHILD_PRELOAD_ENV = "ROCMCHECK_CHILD_PRELOAD"


@dataclass
class ChildProcess:
    """A running child as the watchdog sees it."""

    pid: int
    out_fd: int  # read end of its stdout+stderr
    lifeline_fd: int  # write end of its stdin; closing it tells the child to die
    popen: Optional[subprocess.Popen[bytes]] = field(default=None, repr=False)
    zygote: Any = field(default=None, repr=False)
    job: Any = field(default=None, repr=False)  # Windows job object holding the tree
    handle: Optional[psutil.Process] = field(default=None, repr=False)  # a zygote child, to watch as an orphan
    lost: bool = False  # it ended, but its exit status died with the isolation server
    token: str = ""  # in its environment and its descendants' (TOKEN_ENV)
    before: Set[int] = field(default_factory=set, repr=False)  # the pids that existed before its task
    from_standby: bool = False  # a prestarted interpreter took the task (it may have been killed as it did)
    returncode: Optional[int] = None  # a zygote child's, once the server reported it

    def signal_tree(self, sig: int) -> None:
        """Signal the child and everything it started (process group, or job on Windows)."""
        if self.job is None:
            signal_tree(self.pid, sig)
        elif sig == signal.SIGTERM:
            assert self.popen is not None  # a job holds a spawned child
            self.popen.terminate()  # TerminateProcess of the child alone: Windows has no gentle TERM
        else:
            self.job.terminate()

    def kill_leftovers(self) -> List[str]:
        """After the child ended, kill what it left behind; returns what was killed."""
        if self.job is None:
            return kill_leftovers(self.pid, self.token, self.before)
        self.job.terminate()
        self.job.close()
        return []

    def wait(self, timeout: float) -> Optional[int]:
        """The return code (negative for a signal) once it ended, else None after `timeout` s."""
        if self.popen is not None:
            try:
                return self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                return None
        if self.returncode is None:  # the server reports an exit once: kept for the next ask
            self.returncode = self.zygote.wait_exit(self.pid, timeout)
        if self.returncode is None and self.zygote.dead:  # the server that would report the exit died
            self.lost = _ended(self.handle, timeout)
        return self.returncode

    def hand_over(self, task_path: str) -> bool:
        """Write a task's path on the lifeline (a spawned child's first task, a worker's next);
        False when the child is gone."""
        try:
            if self.popen is None or self.popen.poll() is None:
                os.write(self.lifeline_fd, task_path.encode() + b"\n")
                return True
        except OSError:  # BrokenPipeError: it died
            pass
        return False

    def close_lifeline(self) -> None:
        if self.lifeline_fd >= 0:
            os.close(self.lifeline_fd)
            self.lifeline_fd = -1


_TOKEN_PREFIX = f"{os.getpid()}-{secrets.token_hex(4)}"
_TOKEN_SERIAL = itertools.count(1)


def new_token() -> str:
    """A child's token: unique per parent process (pid and random part) and child (serial);
    all of one fixed length, so that a zygote child can write its own over the server's."""
    return f"{_TOKEN_PREFIX}-{next(_TOKEN_SERIAL):06d}"


def pids_now() -> Set[int]:
    return set(psutil.pids())


class Launcher(Protocol):
    """What starts a child for a task: `SpawnLauncher` (a fresh interpreter) or
    `rocmcheck.engine.zygote.ZygoteLauncher` (a fork of a server that imported torch)."""

    name: str
    dead: bool  # the server died (a zygote); a spawn launcher never is

    def launch(self, task_path: str, env: Dict[str, str]) -> ChildProcess: ...

    def close(self) -> None: ...


class IsolationServerDied(RuntimeError):
    """The zygote server died before it could fork the child asked for."""


def _ended(proc: Optional[psutil.Process], timeout: float) -> bool:
    """Whether an orphaned child ends within `timeout` s (gone, or a zombie nobody reaps)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if proc is None or not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(0.05, max(deadline - time.monotonic(), 0)))


def child_env(extra: Dict[str, str], probes_paths: Iterable[str], preload: Iterable[str] = ()) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(torchapi.child_cublas_env(env))  # so that sdc shares its GPU's worker
    env.update(extra)
    env[CHILD_PATHS_ENV] = json.dumps([str(p) for p in probes_paths])
    env[CHILD_PRELOAD_ENV] = json.dumps(list(preload))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _popen(child: ChildProcess) -> subprocess.Popen[bytes]:
    """A spawned child's process handle (`SpawnLauncher._start` gives every one of them)."""
    assert child.popen is not None
    return child.popen


class SpawnLauncher:
    """A fresh interpreter per task; while one runs, the next is already importing torch."""

    name = "spawn"
    dead = False  # no server to lose

    def __init__(self, probes_paths: List[str], prestart: bool = (os.cpu_count() or 1) > 1,
                 preload: Sequence[str] = (), on_note: Callable[[str], None] = lambda text: None):
        self.probes_paths = probes_paths
        self.preload = list(preload)
        self.prestart = prestart
        self.on_note = on_note
        self._standby: Optional[ChildProcess] = None

    def _start(self, env: Dict[str, str]) -> ChildProcess:
        out_r, out_w = os.pipe()
        life_r, life_w = os.pipe()
        flags = subprocess.CREATE_NEW_PROCESS_GROUP if WINDOWS else 0  # type: ignore[attr-defined]
        token = new_token()
        try:
            popen = subprocess.Popen(
                [sys.executable, "-m", "rocmcheck.engine.child"], stdin=life_r, stdout=out_w, stderr=out_w,
                env=child_env({**env, TOKEN_ENV: token}, self.probes_paths, self.preload),
                start_new_session=not WINDOWS, close_fds=True, creationflags=flags,
            )
        finally:
            os.close(out_w)
            os.close(life_r)
        child = ChildProcess(popen.pid, out_r, life_w, popen=popen, token=token)
        if WINDOWS:  # assigned before the task is sent, so no probe code runs outside the job
            from .winjob import Job

            child.job = Job()
            child.job.assign(popen._handle)  # type: ignore[attr-defined]
        return child

    def launch(self, task_path: str, env: Dict[str, str], fresh: bool = False) -> ChildProcess:
        """Hand the task to the standby child (same base environment) or, with `env` or
        `fresh`, a new one; a standby that died waiting (killed by the OOM killer, say) is
        noted and replaced."""
        child = self._standby if (self._standby and not env and not fresh) else None
        if self._standby is not None and child is None:
            self._retire(self._standby)
        self._standby = None
        if child is not None and not self._hand_over(child, task_path):
            self.on_note(f"the standby interpreter (pid {child.pid}) died before its task "
                         f"({describe(_popen(child).wait(), WINDOWS)}); started a fresh one")
            self._retire(child)
            child = None
        if child is None:
            child = self._start(env)
            self._hand_over(child, task_path)  # one that dies at once is a crash the watchdog reports
        else:
            child.from_standby = True
        if self.prestart:
            self._standby = self._start({})
        return child

    @staticmethod
    def _hand_over(child: ChildProcess, task_path: str) -> bool:
        """Give the child its first task; False if the child is dead."""
        child.before = pids_now()
        return child.hand_over(task_path)

    @staticmethod
    def _retire(child: ChildProcess) -> None:
        """Kill a child that has run nothing (or died) and close its pipes."""
        child.signal_tree(signal.SIGKILL)
        _popen(child).wait()
        child.close_lifeline()
        os.close(child.out_fd)

    def close(self) -> None:
        """Retire the standby child; it has run nothing, so it is simply killed."""
        if self._standby is not None:
            self._retire(self._standby)
            self._standby = None
