"""The reliability cases of docs/isolation.md §12, as fake probes, in both isolation modes.

Each case asserts the verdict, its evidence, and that no process of the probe's tree
survives (pids recorded by the fake probes themselves).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

FAKE = str(Path(__file__).parent / "fake_probes")
TIMEOUT = 3.0

pytestmark = pytest.mark.own_zygote  # the isolation machinery itself: every run starts its own server


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def survivors(piddir: Path, wait: float = 2.0) -> list:
    pids = [int(p.stem) for p in piddir.glob("*.pid")]
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


BATCH = "fake-[a-o]*"  # with the three below: all but fake-skip and fake-sleep (interrupt tests)


@pytest.fixture(scope="module", params=["zygote", "spawn"])
def batch(request, tmp_path_factory):
    """All reliability cases in one run per isolation mode (one torch import, not twenty)."""
    from rocmcheck import registry
    from rocmcheck.engine.options import RunOptions
    from rocmcheck.engine.runner import Runner
    from rocmcheck.engine.selection import select

    folder = tmp_path_factory.mktemp(f"pids-{request.param}")
    old = os.environ.get("ROCMCHECK_TEST_PIDDIR")
    os.environ["ROCMCHECK_TEST_PIDDIR"] = str(folder)
    try:
        variants = select(registry.load_all([FAKE]), [BATCH, "fake-pass", "fake-warn", "fake-segv"])
        opts = RunOptions(device="cpu", isolation=request.param, timeout=TIMEOUT, probes_paths=[FAKE],
                          write_files=False)
        start = time.monotonic()
        report = Runner(opts).run(variants).to_dict()
        elapsed = time.monotonic() - start
    finally:
        if old is None:
            os.environ.pop("ROCMCHECK_TEST_PIDDIR")
        else:
            os.environ["ROCMCHECK_TEST_PIDDIR"] = old
    return {"verdicts": {v["probe"]: v for v in report["verdicts"]}, "order": [v["probe"] for v in report["verdicts"]],
            "piddir": folder, "elapsed": elapsed, "report": report}


@pytest.mark.children
def test_no_process_of_any_tree_survives(batch):
    assert len(list(batch["piddir"].glob("*.pid"))) >= 12
    assert survivors(batch["piddir"]) == []


@pytest.mark.children
def test_isolation_mode_is_the_one_asked_for(batch, request):
    assert batch["report"]["run"]["isolation"] == batch["report"]["run"]["isolation_requested"]


@pytest.mark.children
def test_plain_outcomes_map_to_verdicts(batch):
    v = batch["verdicts"]
    assert v["fake-pass"]["status"] == "pass" and v["fake-pass"]["measurements"]["answer"] == 42
    assert v["fake-fail"]["status"] == "fail" and v["fake-fail"]["measurements"]["zeros"] == 3
    assert "3 of 10" in v["fake-fail"]["message"]
    assert v["fake-error"]["status"] == "error"
    assert "no kernel for this GPU arch" in " ".join(v["fake-error"]["evidence"]["signatures"])
    assert v["fake-warn"]["status"] == "warn" and "emulated" in v["fake-warn"]["message"]


def test_skip_and_gpu_only_probe_skip_on_cpu(rocm_run):
    v = {x["probe"]: x for x in rocm_run(probe="fake-*skip*", probes_path=[FAKE]) +
         rocm_run(probe="fake-gpu-only", probes_path=[FAKE])}
    assert v["fake-skip"]["status"] == "skip" and v["fake-skip"]["message"] == "needs two GPUs"
    assert v["fake-gpu-only"]["status"] == "skip" and "needs a GPU" in v["fake-gpu-only"]["message"]


@pytest.mark.children
def test_abort_is_crash_with_sigabrt_and_the_next_probe_runs(batch):
    v = batch["verdicts"]
    assert v["fake-abort"]["status"] == "crash"
    assert v["fake-abort"]["evidence"]["signal"] == "SIGABRT"
    assert "GPU memory access fault (HSA abort)" in v["fake-abort"]["evidence"]["signatures"]
    assert batch["order"][0] == "fake-abort" and v["fake-error"]["status"] == "error"


@pytest.mark.children
def test_segv_is_crash_with_sigsegv_and_faulthandler_stack(batch):
    v = batch["verdicts"]["fake-segv"]
    assert v["status"] == "crash"
    assert v["evidence"]["signal"] == "SIGSEGV"
    assert "Segmentation fault" in v["evidence"]["stack"]
    assert "fake_segv" in v["evidence"]["stack"]


@pytest.mark.children
def test_hang_in_c_call_is_hang_with_all_thread_stacks(batch):
    v = batch["verdicts"]["fake-hang-c"]
    assert v["status"] == "hang"
    assert v["duration_s"] < TIMEOUT + 2.0  # design bar: within timeout + 2 s
    stack = v["evidence"]["stack"]
    assert "fake_hang_c" in stack and "_block_in_c" in stack
    assert stack.count("Thread 0x") + stack.count("Current thread") >= 2  # the helper thread too


@pytest.mark.children
def test_grandchild_holding_output_is_killed_and_parent_never_blocks(batch):
    v = batch["verdicts"]["fake-grandchild"]
    assert v["status"] == "hang"
    assert v["duration_s"] < TIMEOUT + 2.0
    assert "gc up" in v["evidence"]["output_tail"]
    assert "SIGTERM" in v["evidence"]["kill_steps"]  # to the whole group: the grandchild goes with it
    assert v["evidence"].get("leftover_processes_killed", 0) == len(v["evidence"].get("leftover_processes", []))


@pytest.mark.children
def test_child_ignoring_sigterm_is_killed_with_sigkill(batch):
    v = batch["verdicts"]["fake-ignore-term"]
    assert v["status"] == "hang"
    assert v["evidence"]["kill_steps"][-1] == "SIGKILL"
    assert v["evidence"]["returncode"] == -signal.SIGKILL


@pytest.mark.children
def test_a_declared_hang_kills_the_processes_the_probe_started_without_waiting_for_the_deadline(batch):
    """`ctx.hang`: the watchdog ends the task at once, by the same kill policy as at a deadline,
    and the helper the probe started goes with the tree (no survivor: the test above)."""
    v = batch["verdicts"]["fake-helper-stuck"]
    assert v["status"] == "hang"
    assert v["message"].startswith("the helper did not finish (exit code None); child killed with its processes (")
    assert v["duration_s"] < TIMEOUT  # declared after half a second: the deadline never came
    assert v["evidence"]["kill_steps"][:2] == ["SIGUSR1 (stack dump)", "SIGTERM"]
    assert "fake_helper_stuck" in v["evidence"]["stack"]  # where the probe declared it


@pytest.mark.children
def test_output_flood_is_capped_and_marked(batch):
    v = batch["verdicts"]["fake-flood"]
    assert v["status"] == "pass"
    ev = v["evidence"]
    assert ev["output_bytes"] >= 64 << 20
    assert ev["output_cut_bytes"] > 60 << 20
    assert "THE END" in ev["output_tail"]
    assert len(ev["output_tail"]) <= 4000


@pytest.mark.children
def test_exit_without_result_is_error_never_pass(batch):
    v = batch["verdicts"]["fake-no-result"]
    assert v["status"] == "error"
    assert "without a result" in v["message"]


@pytest.mark.children
def test_out_of_memory_is_told_apart(batch):
    v = batch["verdicts"]
    assert v["fake-oom-error"]["status"] == "error"
    assert v["fake-oom-error"]["message"].startswith("out of memory")
    assert v["fake-oom-kill"]["status"] == "crash"
    assert "OOM killer" in v["fake-oom-kill"]["message"]
    assert v["fake-hang-c"]["status"] == "hang"  # a kill the watchdog sent is a hang, not a crash


def _start_cli_run(tmp_path: Path, isolation: str, sigint: object = signal.SIG_DFL) -> subprocess.Popen:
    """`rocmcheck run` of fake-pass then fake-sleep, in a session of its own (a signal the test sends
    reaches it alone), started with SIGINT at `sigint`: at its default, as a terminal's foreground
    command has it, whatever the disposition this test run itself inherited (SIG_IGN, where
    `make test` is a background job of a non-interactive shell); SIG_IGN for that case itself."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "rocmcheck", "run", "--device", "cpu", "--isolation", isolation,
           "--probes-path", FAKE, "--probe", "fake-pass", "--probe", "fake-sleep", "--out-dir", str(out)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))  # type: ignore[arg-type]


STARTED_S = 300  # a run's start, probe loading and fake-pass on a loaded machine: seconds; only a real hang takes this
ENDED_S = 60  # after its interrupt the run ends in well under a second, loaded or not; a lost signal runs on to
# fake-sleep's 120 s timeout (or its 100 s sleep), and so fails this bound


def _wait_for_started(out: Path, variant: str, proc: subprocess.Popen, piddir: Path) -> Path:
    """The run's journal once it says fake-sleep started and the probe has said it is sleeping:
    states the run announces, not a sleep sized for an idle machine."""
    deadline = time.monotonic() + STARTED_S
    while time.monotonic() < deadline:
        journals = [j for j in out.glob("*.jsonl") if f'"variant":"{variant}"' in j.read_text()]
        if journals and (piddir / f"{variant}.sleeping").exists():
            return journals[0]
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"{variant} never started")


@pytest.mark.parametrize("how, sigint", [("SIGINT", signal.SIG_DFL), ("SIGINT", signal.SIG_IGN),
                                         ("SIGTERM", signal.SIG_DFL)],
                         ids=["SIGINT", "SIGINT-inherited-ignored", "SIGTERM"])
def test_interrupt_writes_partial_report_and_kills_the_tree(tmp_path, isolation, piddir, how, sigint):
    """Issue 40: a run that inherited SIGINT ignored (a background job of a non-interactive shell)
    ran on after its Ctrl-C until its probe's timeout; every SIGINT now ends the run."""
    from rocmcheck.outputs.storage import load_report

    proc = _start_cli_run(tmp_path, isolation, sigint)
    journal = _wait_for_started(tmp_path / "out", "fake-sleep", proc, piddir)
    proc.send_signal(getattr(signal, how))
    stdout, stderr = proc.communicate(timeout=ENDED_S)
    assert proc.returncode == 130, stderr
    assert b"Traceback" not in stderr
    report = json.loads(journal.with_suffix(".json").read_text())
    assert report["schema_version"].startswith("1.")
    assert report["run"]["partial"] is True
    assert report["run"]["interrupted"] == "fake-sleep"
    assert [v["variant"] for v in report["verdicts"]] == ["fake-pass"]
    assert journal.with_suffix(".md").read_text().count("PARTIAL") == 1
    assert load_report(journal).to_dict()["run"]["partial"] is True
    assert survivors(piddir) == []


def test_parent_sigkill_leaves_a_readable_journal_and_no_orphans(tmp_path, isolation, piddir):
    from rocmcheck.outputs.storage import load_report

    proc = _start_cli_run(tmp_path, isolation)
    journal = _wait_for_started(tmp_path / "out", "fake-sleep", proc, piddir)
    tree = psutil.Process(proc.pid).children(recursive=True)
    proc.kill()
    proc.communicate(timeout=10)
    report = load_report(journal).to_dict()
    assert report["run"]["partial"] is True
    assert report["run"]["interrupted"] == "fake-sleep"
    assert [v["status"] for v in report["verdicts"]] == ["pass"]
    assert survivors(piddir, wait=5) == []
    gone, left = psutil.wait_procs(tree, timeout=5)
    assert [p for p in left if p.status() != psutil.STATUS_ZOMBIE] == []
