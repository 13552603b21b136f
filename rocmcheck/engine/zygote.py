"""Zygote isolation: one server imports torch once, then forks a fresh child per task.

The server asserts the GPU runtime is still uninitialised (forking after GPU init is
broken), forks on request, puts each child in its own session, and reports exit
statuses back over a Unix socket. File descriptors for each child's output and
lifeline travel with the request (SCM_RIGHTS), so the parent owns both pipes.
When the parent goes away the server kills every live child and exits.
"""
from __future__ import annotations

import itertools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from typing import Any, Dict, List, Optional, Sequence, Set

import psutil

from .exitcodes import describe
from .launch import ChildProcess, IsolationServerDied, child_env, new_token, pids_now
from .proctree import TOKEN_ENV

ZYGOTE_ENV = "ROCMCHECK_ISOLATION"


def _send(sock: socket.socket, message: Dict[str, Any], fds: Sequence[int] = ()) -> None:
    data = json.dumps(message).encode() + b"\n"
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.sendall(data)


class ZygoteLauncher:
    """The parent's side: starts the server, forks children through it, collects exits."""

    name = "zygote"

    def __init__(self, probes_paths: List[str], preload: Sequence[str] = ()) -> None:
        self.probes_paths = probes_paths
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server = subprocess.Popen(
            [sys.executable, "-m", "rocmcheck.engine.zygote", str(theirs.fileno())],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, env=child_env({TOKEN_ENV: new_token()}, probes_paths, preload),
            start_new_session=True,
        )
        theirs.close()
        self._cond = threading.Condition()
        self._exits: Dict[int, int] = {}
        self._replies: List[Dict[str, Any]] = []
        self.info: Optional[Dict[str, Any]] = None
        self.dead = False
        threading.Thread(target=self._read, name="rocmcheck-zygote", daemon=True).start()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = self._sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                self._dispatch(json.loads(line))
        with self._cond:
            self.dead = True
            self._cond.notify_all()

    def _dispatch(self, msg: Dict[str, Any]) -> None:
        with self._cond:
            if msg["op"] == "exit":
                self._exits[msg["pid"]] = msg["returncode"]
            elif msg["op"] == "ready":
                self.info = msg
            else:
                self._replies.append(msg)
            self._cond.notify_all()

    def wait_ready(self, timeout: float = 300.0) -> Dict[str, Any]:
        """Block until the server preloaded torch; its report says whether it is usable."""
        with self._cond:
            self._cond.wait_for(lambda: self.info is not None or self.dead, timeout)
        if self.info is None:
            assert self._server.stderr is not None  # started with stderr=PIPE
            err = self._server.stderr.read().decode(errors="replace")[-500:] if self.dead else "timed out"
            return {"ok": False, "reason": f"zygote failed to start: {err.strip() or 'no output'}"}
        return self.info

    def launch(self, task_path: str, env: Dict[str, str]) -> ChildProcess:
        """Fork a child through the server; IsolationServerDied if the server is gone."""
        out_r, out_w = os.pipe()
        life_r, life_w = os.pipe()
        token, before = new_token(), pids_now()
        try:
            with self._cond:
                try:
                    _send(self._sock, {"op": "fork", "task": task_path, "env": env, "token": token}, [out_w, life_r])
                except OSError:  # the reader thread sees the end of the socket in a moment
                    self._cond.wait_for(lambda: self.dead, 5)
                self._cond.wait_for(lambda: self._replies or self.dead, 30)
                reply = self._replies.pop(0) if self._replies else None
        finally:
            os.close(out_w)
            os.close(life_r)
        if reply is None or reply["op"] != "forked":
            os.close(out_r)
            os.close(life_w)
            if reply is None:
                raise IsolationServerDied(self.death())
            raise RuntimeError(reply.get("reason", "zygote could not fork"))
        try:
            handle: Optional[psutil.Process] = psutil.Process(reply["pid"])
        except psutil.NoSuchProcess:  # already ended and reaped: its exit message is on the way
            handle = None
        return ChildProcess(reply["pid"], out_r, life_w, zygote=self, handle=handle, token=token, before=before)

    def death(self) -> str:
        """How the server ended, for the report (it is our child: its status is ours to read)."""
        try:
            return f"pid {self._server.pid}, {describe(self._server.wait(1))}"
        except subprocess.TimeoutExpired:
            return f"pid {self._server.pid}, its socket closed"

    def wait_exit(self, pid: int, timeout: float) -> Optional[int]:
        with self._cond:
            self._cond.wait_for(lambda: pid in self._exits or self.dead, timeout)
            return self._exits.pop(pid, None)

    def close(self) -> None:
        """Closing our socket end makes the server kill its children and exit. A server still
        importing torch (an interrupt during start-up) would notice only when the import is
        done: it has forked nothing yet, so it is killed with its group now."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        if self.info is None:
            try:
                os.killpg(self._server.pid, signal.SIGKILL)  # its own session: the group is its own
            except OSError:
                pass
        try:
            self._server.wait(5)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()
        assert self._server.stderr is not None  # started with stderr=PIPE
        self._server.stderr.close()


# --- the server ---------------------------------------------------------------------


def _fork_child(sock: socket.socket, wake_r: int, wake_w: int, msg: Dict[str, Any], fds: List[int]) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:  # the child: never returns into the server loop
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock.close()
        os.close(wake_r)
        os.close(wake_w)
        os.setsid()
        out_w, life_r = fds
        os.dup2(life_r, 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.close(out_w)
        os.close(life_r)
        _stamp_token(msg["token"])
        os.environ.update({**(msg.get("env") or {}), TOKEN_ENV: msg["token"]})
        import queue

        from . import child
        from .task import Task

        paths: "queue.Queue[str]" = queue.Queue()  # a worker's next tasks come on the lifeline
        child.watch_lifeline(0, on_line=lambda line: paths.put(line.strip()))
        child.execute(Task.load(msg["task"]), paths.get)
    finally:
        os._exit(72)


def _stamp_token(token: str) -> None:
    """Write the child's token over the server's, in place, in the environment block that
    /proc/<pid>/environ shows: descendants forked without exec (a daemon's double fork)
    carry that block, not os.environ. Both tokens have the same length."""
    import ctypes

    environ = ctypes.POINTER(ctypes.c_char_p).in_dll(ctypes.CDLL(None), "environ")
    key = f"{TOKEN_ENV}=".encode()
    for i in itertools.count():
        entry = environ[i]
        if entry is None:
            return
        if entry.startswith(key) and len(entry) == len(key) + len(token):
            address = ctypes.cast(environ, ctypes.POINTER(ctypes.c_void_p))[i]
            ctypes.memmove(address + len(key), token.encode(), len(token))
            return


def _reap(sock: socket.socket, live: Set[int]) -> None:
    while live:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        live.discard(pid)
        _send(sock, {"op": "exit", "pid": pid, "returncode": os.waitstatus_to_exitcode(status)})


def serve(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    os.environ[ZYGOTE_ENV] = "zygote"
    from . import child

    imports = child.preload_from_env()
    ready = {"op": "ready", "ok": True, "torch": None, "imports_s": imports}
    if "torch" in sys.modules:
        import torch

        ready["torch"] = torch.__version__
        if torch.cuda.is_initialized():  # something initialised the GPU at import: forks would be broken
            ready.update(ok=False, reason="the GPU runtime was initialised at import time")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    live: Set[int] = set()
    _send(sock, ready)
    while True:
        readable, _, _ = select.select([sock.fileno(), wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
            _reap(sock, live)
        if sock.fileno() in readable:
            data, fds, _, _ = socket.recv_fds(sock, 65536, 2)
            if not data:
                break
            msg = json.loads(data)
            try:
                pid = _fork_child(sock, wake_r, wake_w, msg, fds)
                live.add(pid)
                _send(sock, {"op": "forked", "pid": pid})
            except OSError as exc:
                _send(sock, {"op": "error", "reason": f"fork failed: {exc}"})
            finally:
                for f in fds:
                    os.close(f)
    for pid in live:  # the parent is gone: take every child tree with us
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(0)  # nothing to flush; torch's interpreter teardown would cost ~0.4 s


if __name__ == "__main__":
    serve(int(sys.argv[1]))
