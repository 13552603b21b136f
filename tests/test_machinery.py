"""Issue 13: the run survives its own machinery, in both isolation modes.

The isolation server (zygote) or the standby interpreter killed at any moment, daemons
that leave the process group and the session, hostile text, SystemExit and
KeyboardInterrupt inside a probe, a GPU process slow to die after SIGKILL, and a device
that no longer computes: each ends in verdicts and a complete report, exit 0 or 1, with
no process of ours left behind (pids recorded by the fake probes).
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

from rocmcheck import registry
from rocmcheck.engine import devices
from rocmcheck.engine.killpolicy import KillPolicy
from rocmcheck.engine.launch import ChildProcess
from rocmcheck.engine.options import RunOptions
from rocmcheck.engine.runner import Runner
from rocmcheck.engine.selection import select
from rocmcheck.model import DeviceInfo, Verdict
from rocmcheck.outputs.formats import offered

FAKE = str(Path(__file__).parent / "fake_probes")

pytestmark = pytest.mark.own_zygote  # the isolation machinery itself: every run starts its own server


def survivors(piddir: Path, wait: float = 3.0) -> list:
    def alive(pid):
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    pids = [int(p.stem) for p in piddir.glob("*.pid")]
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def variants(*patterns):
    found = select(registry.load_all([FAKE]), list({p.split("[")[0] for p in patterns}))
    return [next(v for v in found if v.id == p) for p in patterns]


def cli_run(tmp_path: Path, isolation: str, *probes: str, env=None) -> tuple:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "rocmcheck", "run", "--device", "cpu", "--isolation", isolation,
           "--probes-path", FAKE, "--out-dir", str(out), *[a for p in probes for a in ("--probe", p)]]
    proc = subprocess.run(cmd, capture_output=True, timeout=300, env={**os.environ, **(env or {})})
    return proc, out


def complete_report(out: Path) -> dict:
    """The JSON and Markdown are there and whole; the journal ends with its end record."""
    (json_path,) = out.glob("*.json")
    report = json.loads(json_path.read_text(encoding="utf-8"))
    assert report["run"]["partial"] is False
    md = json_path.with_suffix(".md").read_text(encoding="utf-8")
    assert "## Matrix" in md and all(v["variant"] in md for v in report["verdicts"])
    assert json.loads(json_path.with_suffix(".jsonl").read_text().splitlines()[-1])["record"] == "end"
    return report


# --- 1. the isolation server dying -------------------------------------------------------------


def test_server_killed_mid_run_is_noted_and_the_run_goes_on(tmp_path, isolation, piddir):
    proc, out = cli_run(tmp_path, isolation, "fake-x-server", "fake-z-last")
    assert proc.returncode == 1, proc.stderr  # fake-x-server[exit] errs; never 2
    assert b"internal error" not in proc.stderr and b"Traceback" not in proc.stderr
    report = complete_report(out)
    v = {x["variant"]: x for x in report["verdicts"]}
    assert v["fake-x-server[pass]"]["status"] == "pass"  # its result file decides: no false hang
    assert v["fake-x-server[exit]"]["status"] == "error"  # exit 0 without a result (run by spawn by then)
    assert v["fake-z-last"]["status"] == "pass"
    notes = " ".join(report["run"]["notes"])
    if isolation == "zygote":
        assert "the isolation server died while fake-x-server ran" in notes and "SIGKILL" in notes
        assert report["run"]["isolation"] == "spawn"
    # the killed standby is found dead at its hand-over, or dies as it is handed its task (the kill and
    # the liveness check race: both were seen); either way it is noted and the task ran again
    assert "the standby interpreter" in notes
    assert "died before its task (SIGKILL)" in notes or "was killed (SIGKILL) as fake-z-last was handed to it" in notes
    assert survivors(piddir) == []


def test_server_dying_with_the_child_and_no_result_is_a_crash(tmp_path, isolation, piddir):
    opts = RunOptions(device="cpu", isolation=isolation, probes_paths=[FAKE], out_dir=tmp_path)
    report = Runner(opts, outputs=offered("run")).run(variants("fake-x-server[exit]", "fake-pass")).to_dict()
    first, second = report["verdicts"]
    if isolation == "zygote":  # in its worker: a crash; re-run alone (spawn by then), which counts: exit 0, no result
        in_worker = first["evidence"]["in_worker"]
        assert (in_worker["status"], in_worker["message"]) == (
            "crash", "the isolation server died, and the child ended without a result")
        assert first["status"] == "error" and "exit 0" in first["message"]
    else:  # the standby died; the child itself exited 0 without a result
        assert first["status"] == "error" and "exit 0" in first["message"]
    assert second["status"] == "pass"
    complete_report(tmp_path)
    assert survivors(piddir) == []


def _kill_server(runner: Runner) -> int:
    """The zygote, or under spawn the standby interpreter; returns its pid."""
    launcher = runner.isolation.launcher
    proc = launcher._server if runner.isolation.mode == "zygote" else launcher._standby.popen
    proc.kill()
    proc.wait()
    return proc.pid


def test_server_killed_before_the_first_probe_and_between_probes(tmp_path, isolation, piddir):
    runner = Runner(RunOptions(device="cpu", isolation=isolation, probes_paths=[FAKE], out_dir=tmp_path),
                    outputs=offered("run"))
    runner.start()
    if isolation == "spawn" and runner.isolation.launcher._standby is None:
        pytest.skip("one core: no standby interpreter to kill")
    first_kill = _kill_server(runner)
    first = runner.run_one(variants("fake-pass")[0])
    second_kill = _kill_server(runner)  # spawn from here on: its standby
    second = runner.run_one(variants("fake-warn")[0])
    report = runner.finish().to_dict()
    assert (first.status.value, second.status.value) == ("pass", "warn")
    notes = report["run"]["notes"]
    assert any(str(first_kill) in n and "died" in n for n in notes)
    if isolation == "zygote":
        assert any("the isolation server died before fake-pass" in n for n in notes)
    # the standby killed second is never handed a task: fake-pass's worker runs fake-warn
    assert not any(str(second_kill) in n for n in notes) and second.evidence["worker_task"] == 1
    complete_report(tmp_path)
    assert survivors(piddir) == []


@pytest.mark.children
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGSEGV"])
def test_standby_killed_as_its_task_is_handed_over_runs_the_task_again(tmp_path, monkeypatch, piddir, sig):
    """The OOM killer's SIGKILL can land between the standby's liveness check and its reading
    the task: the task never began, so it runs again in a fresh interpreter, noted, not a
    crash. A SIGSEGV there is a crash of the child's own (GPU runtime init), and stays one."""
    from rocmcheck.engine.launch import SpawnLauncher

    real, killed = SpawnLauncher._hand_over, []

    def hand_over_then_kill(child, task_path):  # the first hand-over after start() is to the standby
        if killed:
            return real(child, task_path)
        # stopped while the task is handed over, so the signal lands before it can read the task: a
        # standby that ran on and wrote its start marker first made this a (correct) crash under load
        os.kill(child.pid, signal.SIGSTOP)
        while psutil.Process(child.pid).status() != psutil.STATUS_STOPPED:
            time.sleep(0.001)
        handed = real(child, task_path)
        os.kill(child.pid, getattr(signal, sig))
        os.kill(child.pid, signal.SIGCONT)  # a pending SIGSEGV is delivered before it runs a line
        killed.append(child.pid)
        return handed

    runner = Runner(RunOptions(device="cpu", isolation="spawn", probes_paths=[FAKE], out_dir=tmp_path),
                    outputs=offered("run"))
    runner.start()
    if runner.isolation.launcher._standby is None:
        pytest.skip("one core: no standby interpreter")
    standby = runner.isolation.launcher._standby.pid
    monkeypatch.setattr(SpawnLauncher, "_hand_over", staticmethod(hand_over_then_kill))
    verdict = runner.run_one(variants("fake-pass")[0])
    report = runner.finish().to_dict()
    assert killed == [standby]
    rerun = [n for n in report["run"]["notes"] if "ran it again in a fresh interpreter" in n]
    if sig == "SIGKILL":
        assert killed and verdict.status.value == "pass", verdict
        assert len(rerun) == 1 and f"(pid {killed[0]}) was killed (SIGKILL) as fake-pass was handed to it" in rerun[0]
    else:  # a crash of the worker's own: the variant is re-run alone, and that verdict counts
        in_worker = verdict.evidence["in_worker"]
        assert killed and in_worker["status"] == "crash" and "SIGSEGV" in in_worker["message"], verdict
        assert verdict.status.value == "warn" and "pass alone: flaky" in verdict.message
        assert rerun == []
    complete_report(tmp_path)
    assert survivors(piddir) == []


# --- 2. descendants that leave the process group or the session --------------------------------


def test_daemons_are_killed_when_their_probe_ends_and_named(tmp_path, isolation, piddir):
    proc, out = cli_run(tmp_path, isolation, "fake-x-daemon")
    assert proc.returncode == 0, proc.stderr
    (v,) = complete_report(out)["verdicts"]
    assert v["status"] == "pass"
    killed = {int(line.split()[0]) for line in v["evidence"]["leftover_processes"]}
    assert set(v["measurements"]["daemons"]) <= killed
    assert v["evidence"]["leftover_processes_killed"] == len(killed)
    assert survivors(piddir) == []


@pytest.mark.children
def test_only_processes_carrying_the_childs_token_are_matched():
    from rocmcheck.engine.launch import new_token, pids_now
    from rocmcheck.engine.proctree import TOKEN_ENV, leftovers

    ended = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    ended.wait()
    before = pids_now()
    ours, theirs = new_token(), new_token()
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    procs = {token: subprocess.Popen(sleep, start_new_session=True, env={**os.environ, TOKEN_ENV: token})
             for token in (ours, theirs, "unrelated-000001")}
    try:
        time.sleep(0.2)  # exec done: the environment is the child's own
        assert [p.pid for p in leftovers(ended.pid, ours, before)] == [procs[ours].pid]
        assert leftovers(ended.pid, ours, pids_now()) == []  # older than the child: never matched
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


# --- 5. SystemExit and KeyboardInterrupt inside a probe; other ways to end oddly ---------------


def test_exits_closed_output_and_corrupt_results_are_plain_verdicts(tmp_path, isolation, piddir):
    proc, out = cli_run(tmp_path, isolation, "fake-x-exit", "fake-x-output", "fake-x-result")
    assert proc.returncode == 1, proc.stderr
    v = {x["variant"]: x for x in complete_report(out)["verdicts"]}
    assert v["fake-x-exit[sys.exit-0]"]["status"] == "error"
    assert v["fake-x-exit[sys.exit-0]"]["message"] == "the probe called sys.exit(0) before returning a result"
    assert v["fake-x-exit[sys.exit-3]"]["message"] == "the probe called sys.exit(3) before returning a result"
    assert v["fake-x-exit[keyboard]"]["status"] == "error"
    assert v["fake-x-exit[keyboard]"]["message"].startswith("the probe raised KeyboardInterrupt itself")
    assert v["fake-x-output"]["status"] == "pass" and v["fake-x-output"]["measurements"]["closed"] is True
    assert v["fake-x-result[torn]"]["status"] == "error" and "without a result" in v["fake-x-result[torn]"]["message"]
    foreign = v["fake-x-result[foreign]"]
    assert (foreign["status"], foreign["message"], foreign["measurements"]) == ("pass", "", {})
    assert survivors(piddir) == []


# --- 4. a GPU in driver teardown, and a device canary ------------------------------------------


DYING_S = 2.0


class SlowTeardown(ChildProcess):
    """A child whose end shows only DYING_S after SIGKILL, as a GPU process in driver teardown
    (state D) does; a negative DYING_S never shows it (unkillable)."""

    def signal_tree(self, sig):
        if sig == signal.SIGKILL:
            self.__dict__.setdefault("killed_at", time.monotonic())
        super().signal_tree(sig)

    def wait(self, timeout):
        if "code" not in self.__dict__:
            code = super().wait(timeout)
            if code is None:
                return None
            self.code = code
        killed = self.__dict__.get("killed_at")
        if killed is not None and (DYING_S < 0 or time.monotonic() - killed < DYING_S):
            time.sleep(min(timeout, 0.05))
            return None
        return self.code


@pytest.fixture
def fake_gpu(monkeypatch):
    """The runner believes it drives cuda:0; its children run on the CPU; killed children die slowly."""
    from rocmcheck.engine import isolation as isolation_mod

    real_task, real_supervise = Runner._task, isolation_mod.supervise
    monkeypatch.setattr(Runner, "resolve_device", lambda self: setattr(self, "device", DeviceInfo("cuda:0", "rocm", 1)))
    monkeypatch.setattr(Runner, "_task",
                        lambda self, **f: real_task(self, **{**f, **({"device": "cpu"} if "device" in f else {})}))

    def supervise(child, *args, **kwargs):
        child.__class__ = SlowTeardown
        return real_supervise(child, *args, **kwargs)

    monkeypatch.setattr(isolation_mod, "supervise", supervise)
    return monkeypatch


def _gpu_run(tmp_path, isolation, inject="", teardown_wait=30.0):
    opts = RunOptions(device="cuda:0", isolation=isolation, timeout=1.0, inject=inject, probes_paths=[FAKE],
                      out_dir=tmp_path, kill_policy=KillPolicy().with_waits(kill=teardown_wait))
    start = time.monotonic()
    report = Runner(opts, outputs=offered("run")).run(variants("fake-ignore-term", "fake-pass")).to_dict()
    return report, time.monotonic() - start


def test_a_child_slow_to_die_is_waited_for_and_the_canary_lets_the_run_go_on(tmp_path, isolation, fake_gpu, piddir):
    report, _ = _gpu_run(tmp_path, isolation)
    hang, after = report["verdicts"]
    assert hang["status"] == "hang" and "could not be killed" not in hang["message"]
    assert DYING_S - 0.1 <= hang["evidence"]["teardown"]["waited_s"] < 30  # slack: the wait starts after the kill call
    assert "unkillable" not in hang["evidence"]
    assert hang["evidence"]["device_canary"]["usable"] is True
    assert after["status"] == "pass"
    assert any("device canary after the hang of fake-ignore-term: a kernel ran" in n for n in report["run"]["notes"])
    complete_report(tmp_path)
    assert survivors(piddir) == []


def test_unkillable_only_after_the_teardown_wait(tmp_path, isolation, fake_gpu, piddir):
    fake_gpu.setattr(sys.modules[__name__], "DYING_S", -1)
    report, elapsed = _gpu_run(tmp_path, isolation, teardown_wait=1.5)
    hang, after = report["verdicts"]
    assert "could not be killed" in hang["message"] and hang["evidence"]["teardown"]["waited_s"] >= 1.5
    assert after["status"] == "pass"  # the device still computes: the canary says so
    complete_report(tmp_path)


@pytest.mark.parametrize("canary", ["hang", "abort", "exit-no-result"])
def test_a_wedged_device_skips_the_remaining_gpu_probes(tmp_path, isolation, fake_gpu, piddir, canary):
    fake_gpu.setattr(sys.modules[__name__], "DYING_S", 0)
    fake_gpu.setattr(devices, "CANARY_TIMEOUT_S", 4.0)  # the hung canary's wait, shortened from 20 s
    report, _ = _gpu_run(tmp_path, isolation, inject=f"{canary}@device-canary")
    hang, after = report["verdicts"]
    assert hang["status"] == "hang" and hang["evidence"]["device_canary"]["usable"] is False
    assert (after["status"], after["message"]) == ("skip", "skipped: device unusable after fake-ignore-term")
    assert any("device canary after the hang of fake-ignore-term failed" in n for n in report["run"]["notes"])
    complete_report(tmp_path)
    assert survivors(piddir) == []


# --- 3. text, at one boundary ------------------------------------------------------------------

from hypothesis import Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

HOSTILE = st.text(st.characters(codec=None, exclude_categories=()), max_size=40) | st.sampled_from(
    ["\x1b[2J\x1b[31mred", "\x1b]0;title\x07", "\x00nul", "\ud800lone", "\x9b31m", "a\rb", "\ufffe\uffff"])


def assert_safe(text: str, where: str) -> None:
    import re

    text.encode("utf-8")  # no lone surrogate
    bad = re.findall(r"[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]", text)
    assert not bad, (where, bad[:5])


@given(st.text(st.characters(codec=None, exclude_categories=())) | st.binary())
def test_clean_text_is_safe_and_stable(value):
    from rocmcheck.safetext import clean

    once = clean(value)
    assert_safe(once.replace("\r", ""), "clean")
    assert "\r" not in once and clean(once) == once


@pytest.mark.children
@settings(max_examples=3, phases=[Phase.explicit, Phase.reuse, Phase.generate])  # each example is a pytest run
@given(st.lists(st.tuples(HOSTILE, st.binary(max_size=40)), min_size=4, max_size=4))
def test_hostile_text_reaches_every_output_safe(tmp_path_factory, payloads):
    """A probe's message, output, traceback and measurements, through the pytest plugin:
    the JSON, Markdown, journal, terminal and junit XML all parse and hold nothing raw."""
    import xml.etree.ElementTree as ET

    from rocmcheck.outputs.render import verdict_line

    tmp = tmp_path_factory.mktemp("text")
    for kind, (text, raw) in zip(("fail", "warn", "error", "pass"), payloads):
        (tmp / f"{kind}.json").write_text(json.dumps({"text": text, "raw": raw.hex()}))
    (tmp / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--rocm-matrix={tmp / 'out'}",
           "--rocm-device=cpu", f"--rocm-probes-path={FAKE}", "-k", "fake-x-text or test_nothing",
           f"--junitxml={tmp / 'junit.xml'}", str(tmp / "test_nothing.py")]
    proc = subprocess.run(cmd, capture_output=True, timeout=300, cwd=tmp,
                          env={**os.environ, "ROCMCHECK_TEST_TEXT": str(tmp)})
    assert proc.returncode == 1, proc.stdout.decode(errors="replace")[-3000:]
    assert_safe(proc.stdout.decode("utf-8").replace("\r", ""), "terminal")
    report = complete_report(tmp / "out")
    assert sorted(v["status"] for v in report["verdicts"]) == ["error", "fail", "pass", "warn"]
    for path in (tmp / "out").iterdir():
        text = path.read_bytes().decode("utf-8")
        if path.suffix in (".json", ".jsonl"):  # what the escapes decode to, too
            docs = text.splitlines() if path.suffix == ".jsonl" else [text]
            text = "\n".join(json.dumps(json.loads(doc), ensure_ascii=False) for doc in docs if doc.strip())
        assert_safe(text, path.name)
    for v in report["verdicts"]:
        assert_safe(verdict_line(Verdict.from_dict(v)), "verdict line")
    junit = (tmp / "junit.xml").read_bytes()
    ET.fromstring(junit)
    assert_safe(junit.decode("utf-8").replace("\r", ""), "junit")
