"""The suite's shared zygote servers (conftest.SharedZygote): kept between in-process runs that would start the same
server, never shared with a run whose environment differs, replaced once killed, and not used by `own_zygote`
tests."""
from __future__ import annotations

import pytest

from rocmcheck import registry
from rocmcheck.engine.options import RunOptions
from rocmcheck.engine.runner import Runner
from rocmcheck.engine.selection import select


def server_of_a_run():
    """The zygote server of a run of device-smoke on the CPU, and its verdict."""
    runner, seen = Runner(RunOptions(device="cpu", isolation="zygote", write_files=False)), []
    (verdict,) = runner.run(select(registry.load_all(), ["device-smoke"]),
                            after=lambda: seen.append(runner.isolation.launcher)).verdicts  # before it is closed
    return seen[0], verdict.status.value


@pytest.mark.children
def test_runs_alike_share_a_server_and_a_run_in_another_environment_or_after_a_kill_does_not(monkeypatch):
    first, status = server_of_a_run()
    again, status_again = server_of_a_run()
    assert again is first and (status, status_again) == ("pass", "pass")
    first._server.kill()
    first._server.wait()
    replaced, _ = server_of_a_run()
    assert replaced is not first and replaced._server.poll() is None
    monkeypatch.setenv("ROCMCHECK_SHARED_ZYGOTE_TEST", "another")  # its children would inherit it: another server
    other, _ = server_of_a_run()
    assert other is not replaced and other.probes_paths == replaced.probes_paths


@pytest.mark.children
@pytest.mark.own_zygote
def test_an_own_zygote_test_starts_a_server_per_run_and_closes_it():
    first, _ = server_of_a_run()
    second, _ = server_of_a_run()
    assert second is not first and first._server.poll() is not None  # closed at the end of its run
