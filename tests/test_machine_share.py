"""The suite's lock for tests that time work (conftest.MachineShare): a test marked `alone` waits for the tests running
beside it to end, no test starts beside it, and one waiting goes before the tests that start after it. Each share
stands for one pytest-xdist worker: its own open lock files, as each worker process opens them."""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import MachineShare

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="no flock: under xdist on Windows tests run beside")


class Worker:
    """One worker's test in a thread: holds the share, alone or not, until told to end; says when it started."""

    def __init__(self, folder: Path, alone: bool, events: list, name: str):
        self.share, self.alone, self.events, self.name = MachineShare(folder), alone, events, name
        self.end = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        with self.share.hold(alone=self.alone):
            self.events.append(f"{self.name} started")
            self.end.wait(10)
            self.events.append(f"{self.name} ended")  # before it lets go

    def finish(self) -> None:
        self.end.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


def settle() -> None:
    time.sleep(0.3)  # long enough for a thread that could take the lock to have taken it


def until(happened) -> bool:
    """Whether `happened()` came true within 10 s (a loaded machine may schedule a thread late)."""
    deadline = time.monotonic() + 10
    while not happened() and time.monotonic() < deadline:
        time.sleep(0.02)
    return happened()


def test_tests_run_beside_each_other_but_an_alone_test_waits_for_them_and_goes_before_later_ones(tmp_path):
    events: list = []
    first, second = Worker(tmp_path, False, events, "a"), Worker(tmp_path, False, events, "b")
    assert until(lambda: sorted(events) == ["a started", "b started"])  # ordinary tests share the machine
    quiet = Worker(tmp_path, True, events, "quiet")
    settle()
    assert "quiet started" not in events  # two tests are running
    later = Worker(tmp_path, False, events, "later")  # starts while the alone test waits
    settle()
    assert "later started" not in events  # it waits behind the alone test, not beside it
    first.finish()
    settle()
    assert "quiet started" not in events  # one is still running
    second.finish()
    assert until(lambda: "quiet started" in events)
    settle()
    assert events[-1] == "quiet started" and "later started" not in events  # alone: nothing beside it
    quiet.finish()
    assert until(lambda: "later started" in events)
    assert events[-2:] == ["quiet ended", "later started"]
    later.finish()


def test_without_xdist_there_is_no_lock():
    share = MachineShare(None)
    with share.hold(alone=True), share.hold(alone=True):  # would wait on itself with a lock
        pass
