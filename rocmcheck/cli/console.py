"""The command's console streams: writing output never costs the verdict.

A reader that went away (`rocmcheck list | head -1`), a full device (`> /dev/full`) or an
encoding that cannot show a character (`PYTHONIOENCODING=ascii`, `LC_ALL=POSIX`) must not
turn a verdict into an internal error, nor stop the run before its files are written. As
the Python documentation advises for SIGPIPE, a stream whose reader is gone is pointed at
os.devnull (so that later writes and the interpreter's last flush are quiet) and the command
goes on; SIGPIPE keeps Python's default (ignored), so a closed socket never kills a run. A
stream lost for another reason (ENOSPC, EIO) is said once on stderr. Characters the stream's
encoding lacks are written as backslash escapes.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable, List, Optional, TextIO


class Console:
    """A text stream whose write and flush never raise OSError: the first one makes the
    stream point at os.devnull, and `lost` keeps why."""

    def __init__(self, stream: TextIO, say: Callable[[str], None]):
        self._stream = stream
        self._say = say
        self.lost: Optional[OSError] = None

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            self._lose(exc)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            self._lose(exc)

    def _lose(self, exc: OSError) -> None:
        if self.lost is not None:
            return
        self.lost = exc
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
            self._stream.flush()  # what was buffered goes to os.devnull, not into an error at exit
        except (OSError, ValueError):  # no file descriptor (an in-memory stream): nothing more to do
            pass
        if not isinstance(exc, BrokenPipeError):  # a reader that went away is the user's choice
            self._say(f"rocmcheck: could not write to {getattr(self._stream, 'name', 'the console')} "
                      f"({exc.strerror or exc}); the exit code still gives the verdict")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def install() -> Callable[[], None]:
    """Make sys.stdout and sys.stderr safe for one command; returns what puts them back
    (after flushing, so that no error is left for the interpreter's exit)."""
    originals = (sys.stdout, sys.stderr)
    errors: List[Any] = []
    for stream in originals:
        errors.append(getattr(stream, "errors", None))
        if stream is not None and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    sys.stderr = Console(originals[1], lambda text: None) if originals[1] is not None else None
    sys.stdout = Console(originals[0], lambda text: print(text, file=sys.stderr)) \
        if originals[0] is not None else None

    def restore() -> None:
        for safe in (sys.stdout, sys.stderr):
            if safe is not None:
                safe.flush()
        sys.stdout, sys.stderr = originals
        for stream, old in zip(originals, errors):
            if stream is not None and old and hasattr(stream, "reconfigure"):
                stream.reconfigure(errors=old)

    return restore
