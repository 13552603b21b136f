"""Bounded capture of a child's output: head and tail kept, the cut marked.

Output arrives through a pipe drained by a thread, so a child printing a gigabyte
costs the parent at most `head + tail` bytes and can never block on a full pipe.
"""
from __future__ import annotations

import os
import select
import threading
from collections import deque

HEAD_BYTES = 32 * 1024
TAIL_BYTES = 32 * 1024


class OutputDrain:
    """Reads `fd` until EOF (or `stop()`), keeping the first and last bytes."""

    def __init__(self, fd: int, head: int = HEAD_BYTES, tail: int = TAIL_BYTES):
        self.fd = fd
        self.head_limit, self.tail_limit = head, tail
        self.head = bytearray()
        self.tail: deque = deque()
        self.tail_size = 0
        self.total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rocmcheck-drain", daemon=True)
        self._thread.start()

    def _feed(self, data: bytes) -> None:
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

    def finish(self, timeout: float = 1.0) -> None:
        """Wait for EOF at most `timeout` s (a runaway grandchild may hold the pipe), then close."""
        self._thread.join(timeout)
        self._stop.set()
        self._thread.join()
        os.close(self.fd)

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
