"""Bounded capture of a child's output: head and tail kept, the cut marked.

Output arrives through a pipe drained by a thread, so a child printing a gigabyte
costs the parent at most `head + tail` bytes and can never block on a full pipe.
A worker child runs many tasks over one pipe: after each task it writes `TASK_END`,
and the drain closes the task's segment there, so each verdict gets its own output.
"""
from __future__ import annotations

import os
import select
import threading
from collections import deque
from typing import Deque, List, Optional

HEAD_BYTES = 32 * 1024
TAIL_BYTES = 32 * 1024
TASK_END = b"\n\x1erocmcheck-task-end\x1e\n"  # a record separator no probe's text carries


class Segment:
    """One task's output: the first `head` and last `tail` bytes, and how much was cut."""

    def __init__(self, head: int, tail: int):
        self.head_limit, self.tail_limit = head, tail
        self.head = bytearray()
        self.tail: Deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail.append(data)
            self.tail_size += len(data)
            while self.tail_size - len(self.tail[0]) >= self.tail_limit:
                self.tail_size -= len(self.tail.popleft())

    @property
    def truncated(self) -> int:
        kept = len(self.head) + min(self.tail_size, self.tail_limit)
        return max(self.total - kept, 0)

    def text(self) -> str:
        tail = b"".join(self.tail)[-self.tail_limit:] if self.tail else b""
        out = bytes(self.head).decode("utf-8", "replace")
        if self.truncated:
            out += f"\n[... {self.truncated} bytes cut by rocmcheck ...]\n"
        return out + tail.decode("utf-8", "replace")


def _held_back(data: bytes) -> int:
    """How many trailing bytes of `data` could begin a TASK_END split across two reads."""
    for size in range(min(len(TASK_END) - 1, len(data)), 0, -1):
        if TASK_END.startswith(data[-size:]):
            return size
    return 0


class OutputDrain:
    """Reads `fd` until EOF (or `stop()`), keeping the first and last bytes of each task's output."""

    def __init__(self, fd: int, head: int = HEAD_BYTES, tail: int = TAIL_BYTES):
        self.fd = fd
        self.head_limit, self.tail_limit = head, tail
        self.segment = Segment(head, tail)
        self.ended: List[Segment] = []  # segments closed by TASK_END, not yet taken
        self._pending = b""
        self._eof = False
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rocmcheck-drain", daemon=True)
        self._thread.start()

    def _feed(self, data: bytes) -> None:
        with self._cond:
            data = self._pending + data
            while True:
                at = data.find(TASK_END)
                if at < 0:
                    break
                self.segment.feed(data[:at])
                self.ended.append(self.segment)
                self.segment = Segment(self.head_limit, self.tail_limit)
                data = data[at + len(TASK_END):]
                self._cond.notify_all()
            keep = _held_back(data)
            self._pending = data[len(data) - keep:] if keep else b""
            if len(data) > keep:
                self.segment.feed(data[:len(data) - keep])

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if os.name == "nt" or select.select([self.fd], [], [], 0.1)[0]:  # Windows: no select on pipes;
                    data = os.read(self.fd, 1 << 16)  # the job kill closes every writer there
                    if not data:
                        break
                    self._feed(data)
        except (OSError, ValueError):
            pass
        with self._cond:
            self.segment.feed(self._pending)
            self._pending = b""
            self._eof = True
            self._cond.notify_all()

    @property
    def open(self) -> bool:
        """Whether the output may still bring something (no EOF yet)."""
        return not self._eof

    def wait_for_task_end(self, timeout: float) -> bool:
        """Wait up to `timeout` s for a worker's task to end (or the output to close)."""
        with self._cond:
            return self._cond.wait_for(lambda: bool(self.ended) or self._eof, timeout)

    def take_task_output(self, timeout: float) -> Optional[Segment]:
        """The output of the task that just ended in a worker: the segment its TASK_END closed
        (waiting up to `timeout` s for the drain to read that far), or None if none came."""
        with self._cond:
            self._cond.wait_for(lambda: self.ended or self._eof, timeout)
            return self.ended.pop(0) if self.ended else None

    def finish(self, timeout: float = 1.0) -> Segment:
        """Wait for EOF at most `timeout` s (a runaway grandchild may hold the pipe), then close;
        returns the output since the last task's end."""
        self._thread.join(timeout)
        self._stop.set()
        self._thread.join()
        os.close(self.fd)
        return self.segment
