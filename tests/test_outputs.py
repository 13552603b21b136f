"""Writing output never costs the verdict (issue 21, sections 2 to 5, and report modes).

A read-only folder, a disk that fills mid-run, a reader that goes away, a full device, an
ASCII console, a scheduler's SIGTERM, and nodes that share one report folder: each is met
the way a user meets it, through the real CLI in a subprocess (fake probes, `--device cpu`),
under a real condition where the machine allows one: a read-only or tiny tmpfs mounted in a
private mount namespace (`unshare`), /dev/full, PID namespaces, an unprivileged user. The
deciding functions (run id, exclusive publish, modes) are also tested in-process.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from rocmcheck.outputs.storage import Journal, load_report, write_atomic

FAKE = str(Path(__file__).parent / "fake_probes")
GATE = ["gate", "--device", "cpu", "--probes-path", FAKE]
ROCMCHECK = [sys.executable, "-m", "rocmcheck"]


def cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*ROCMCHECK, *args], capture_output=True, text=True, timeout=120, **kwargs)


def clean(stderr: str) -> bool:
    return not any(word in stderr for word in ("Traceback", "internal error", "Exception ignored"))


@functools.lru_cache(maxsize=None)
def unshare_works(*flags: str) -> bool:
    """Whether this machine lets us make a private mount (and PID) namespace, unprivileged or as root."""
    if not shutil.which("unshare"):
        return False
    with tempfile.TemporaryDirectory() as folder:
        probe = ["unshare", *flags, "sh", "-c", 'mount -t tmpfs -o size=64k tmpfs "$0"', folder]
        return subprocess.run(probe, capture_output=True).returncode == 0


needs_mount = pytest.mark.skipif(not unshare_works("-rm"), reason="no private mount namespace (unshare -rm)")


def in_mount_namespace(setup: str, args, **env: str) -> subprocess.CompletedProcess:
    """Run rocmcheck after the shell commands `setup` in a private mount namespace: its mounts
    are seen by rocmcheck alone and go away with it."""
    script = f'{setup} || exit 99; "$@"; rc=$?; [ -z "$KEEP" ] || cp -r reports "$KEEP" 2>/dev/null; exit $rc'
    return subprocess.run(["unshare", "-rm", "sh", "-c", script, "--", *ROCMCHECK, *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "KEEP": "", "TMPDIR": "/tmp", **env})


# --- the verdict does not depend on writing the report -----------------------------------


# A checkout and its venv may live under /tmp (a CI clone): a mount over /tmp must leave them visible.
KEPT = sorted({str(Path(*Path(p).resolve().parts[:depth])) for p in (sys.prefix, Path(__file__).parent.parent)
               for base, depth in (("/tmp", 3), ("/var/tmp", 4)) if str(Path(p).resolve()).startswith(base + "/")})


def over_temp(mode: str) -> str:
    """Shell commands: a small tmpfs over /tmp and /var/tmp, read-only ("ro") or full ("full"), with what
    KEPT holds under them bound back in place (from the shell's cwd: mount -c takes /proc/self/cwd as is)."""
    steps = []
    for base in ("/tmp", "/var/tmp"):
        kept = [k for k in KEPT if k.startswith(base + "/")]
        steps.append(f"cd {kept[0]}" if kept else "cd /")
        steps.append(f"mount -t tmpfs -o size=64k tmpfs {base}")
        steps += [f"mkdir -p {k} && mount -c --bind /proc/self/cwd {k}" for k in kept[:1]]
        steps.append(f"mount -o remount,ro {base}" if mode == "ro" else
                     f"{{ cat /dev/zero > {base}/fill 2>/dev/null; true; }}")
    return " && ".join(steps)


@pytest.mark.children
@needs_mount
@pytest.mark.parametrize("setup,why", [(over_temp("ro"), "Read-only file system"),
                                       (over_temp("full"), "No space left on device")], ids=["read-only", "full"])
def test_gate_decides_in_a_read_only_folder_or_on_a_full_disk(setup, why):
    """Kubernetes' readOnlyRootFilesystem, or a full disk: the working folder and every temporary
    folder (the probes' scratch files then go to /dev/shm)."""
    shm = set(Path("/dev/shm").glob("rocmcheck-*"))
    out = in_mount_namespace(f"{setup} && cd /tmp", [*GATE, "--require", "fake-pass"])
    assert set(Path("/dev/shm").glob("rocmcheck-*")) == shm  # the scratch folder went with the run
    assert out.returncode == 0, out.stderr
    assert "GO — 1 pass" in out.stdout
    said = [line for line in (out.stdout + out.stderr).splitlines() if "could not write" in line]
    assert len(said) == 1 and why in said[0], out.stdout + out.stderr
    assert clean(out.stderr), out.stderr


@pytest.mark.children
@needs_mount
def test_gate_decides_when_the_disk_fills_mid_run(tmp_path):
    """A probe fills the disk the reports go to: the journal stops there, the gate still says
    NO-GO for the failure after it, and says in one line that the report could not be written."""
    folder, kept = tmp_path / "disk", tmp_path / "kept"
    folder.mkdir()
    args = [*GATE, "--require", "fake-pass", "--require", "outputs-fill-disk", "--require", "fake-fail", "--json", "-"]
    out = in_mount_namespace(f"mount -t tmpfs -o size=512k tmpfs {folder} && cd {folder}", args, KEEP=str(kept),
                             ROCMCHECK_TEST_FILL=str(folder))
    assert out.returncode == 1, out.stderr
    node = json.loads(out.stdout)
    assert node["status"] == "NO-GO" and [f["check"] for f in node["failing"]] == ["fake-fail"]
    assert "No space left on device" in node["unwritten"]["json"] and node["reports"] == {}
    said = [line for line in out.stderr.splitlines() if "could not write" in line]
    assert len(said) == 1 and "No space left on device" in said[0], out.stderr
    assert clean(out.stderr), out.stderr
    (journal,) = kept.glob("*.jsonl")
    assert not list(kept.glob("*.json"))
    kept_verdicts = [v["variant"] for v in load_report(journal).to_dict()["verdicts"]]  # as far as the disk took it
    assert kept_verdicts[0] == "fake-pass"


# --- a scheduler's SIGTERM is UNKNOWN, never NO-GO, and leaves no process -----------------


def wait_for(condition, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def ours(proc: subprocess.Popen) -> list:
    try:
        return psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # ended in the meantime
        return ""


@pytest.mark.children
def test_sigterm_during_the_gate_is_unknown_never_no_go(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen([*ROCMCHECK, *GATE, "--require", "fake-pass", "--require", "fake-sleep",
                             "--out-dir", str(out), "--json", "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    wait_for(lambda: any('"variant":"fake-sleep"' in j.read_text() for j in out.glob("*.jsonl")), proc,
             "fake-sleep never started")
    tree = ours(proc)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 2, stderr
    node = json.loads(stdout)
    assert node["status"] == "UNKNOWN" and node["exit_code"] == 2 and node["failing"] == []
    assert node["partial"] is True and "fake-sleep" in node["error"]
    assert "UNKNOWN" in stderr and "NO-GO" not in stderr and clean(stderr), stderr
    (report,) = out.glob("*.json")
    assert json.loads(report.read_text())["run"]["interrupted"] == "fake-sleep"
    assert psutil.wait_procs(tree, timeout=2)[1] == []


@pytest.mark.children
def test_the_deadline_ends_a_hung_gate_unknown_with_its_verdict_and_no_process(tmp_path):
    """--deadline: the gate's whole budget from the process's start; at it the run ends as at a
    SIGTERM (UNKNOWN, verdict and report written), before a scheduler's own kill would leave nothing."""
    out = tmp_path / "out"
    started = time.monotonic()
    proc = subprocess.Popen([*ROCMCHECK, *GATE, "--require", "fake-pass", "--require", "fake-sleep", "--deadline", "12",
                             "--out-dir", str(out), "--json", "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    tree: list = []
    while proc.poll() is None:  # every process of the run, seen while it runs
        tree.extend(p for p in ours(proc) if p not in tree)
        time.sleep(0.2)
    stdout, stderr = proc.communicate(timeout=30)
    elapsed = time.monotonic() - started
    assert proc.returncode == 2, stderr
    node = json.loads(stdout)
    assert node["status"] == "UNKNOWN" and node["failing"] == [] and node["partial"] is True
    assert node["error"] == "interrupted by the --deadline of 12s during fake-sleep", stderr
    assert node["reason"] == f"rocmcheck UNKNOWN: {node['error']}"
    assert 12 <= elapsed < 12 + 2, elapsed  # its verdict within 2 s of the deadline (a Slurm kill: 10 ms)
    (report,) = out.glob("*.json")
    assert json.loads(report.read_text())["run"]["interrupted"] == "fake-sleep"
    assert tree and psutil.wait_procs(tree, timeout=2)[1] == []


@pytest.mark.children
def test_sigterm_while_the_isolation_server_starts_leaves_no_process(tmp_path):
    """device-smoke makes the server import torch before it is ready: SIGTERM lands in that second."""
    out = tmp_path / "out"
    proc = subprocess.Popen([*ROCMCHECK, "gate", "--device", "cpu", "--probe", "device-smoke", "--out-dir", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    server = []

    def server_started() -> bool:
        server.extend(p for p in ours(proc) if "rocmcheck.engine.zygote" in cmdline(p))
        return bool(server)

    wait_for(server_started, proc, "the isolation server never started")
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 2, stderr
    assert "interrupted by SIGTERM" in stderr and clean(stderr), stderr
    assert psutil.wait_procs(server, timeout=0.5)[1] == []  # gone with the command, not seconds later
    (report,) = out.glob("*.json")
    assert json.loads(report.read_text())["run"]["partial"] is True


@pytest.mark.children
def test_sigterm_in_the_first_second_is_one_line_and_unknown(tmp_path):
    """SIGTERM while the probe modules load (here a user's probe module that takes its time)."""
    probes, loading = tmp_path / "probes", tmp_path / "loading"
    probes.mkdir()
    (probes / "slow.py").write_text(f"import pathlib, time\npathlib.Path({str(loading)!r}).touch()\ntime.sleep(60)\n")
    proc = subprocess.Popen([*ROCMCHECK, "gate", "--device", "cpu", "--probes-path", str(probes), "--json", "-"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    wait_for(loading.exists, proc, "the probe module never loaded")
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 2, stderr
    assert stderr.strip() == "rocmcheck: interrupted by SIGTERM"
    node = json.loads(stdout)
    assert node["status"] == "UNKNOWN" and "SIGTERM" in node["error"]


# --- writing output never costs the verdict ----------------------------------------------


@pytest.mark.children
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_node_verdict_to_a_full_device_keeps_the_verdict(tmp_path):
    out = tmp_path / "out"
    with open("/dev/full", "w") as full:
        proc = subprocess.run([*ROCMCHECK, *GATE, "--require", "fake-pass", "--out-dir", str(out), "--json", "-"],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "could not write" in line]
    assert said == ["rocmcheck: could not write to <stdout> (No space left on device); "
                    "the exit code still gives the verdict"], proc.stderr
    assert clean(proc.stderr), proc.stderr
    assert len(list(out.glob("*.json"))) == 1


@pytest.mark.children
@pytest.mark.parametrize("args", [["list"], ["env"], [*GATE, "--require", "fake-pass"]], ids=["list", "env", "gate"])
def test_a_reader_that_goes_away_costs_nothing(tmp_path, args):
    """`rocmcheck list | head -1`: here the reader is gone before the first line."""
    proc = subprocess.Popen([*ROCMCHECK, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, stderr
    assert clean(stderr) and "BrokenPipe" not in stderr, stderr
    if args[0] == "gate":
        assert len(list((tmp_path / "reports").glob("*.json"))) == 1
        assert len(list((tmp_path / "reports").glob("*.md"))) == 1


@pytest.mark.children
def test_an_ascii_console_gets_the_verdict(tmp_path):
    out = cli(*GATE, "--require", "fake-pass", cwd=tmp_path, env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert out.returncode == 0, out.stderr
    assert "GO \\u2014 1 pass" in out.stdout and clean(out.stderr), out.stderr
    assert len(list((tmp_path / "reports").glob("*.json"))) == 1


@pytest.mark.children
def test_a_posix_locale_lists_the_probes():
    """Python's UTF-8 mode would hide the ASCII locale: PYTHONUTF8=0 is what a strict image sets."""
    out = cli("list", env={**os.environ, "LC_ALL": "POSIX", "PYTHONUTF8": "0"})
    assert out.returncode == 0 and clean(out.stderr), out.stderr
    assert "\\u2026" in out.stdout  # the ellipsis of a shortened target, escaped


# --- many nodes, one shared folder ---------------------------------------------


def test_run_ids_differ_for_the_same_pid_and_second(monkeypatch):
    """Two containers whose entrypoint is PID 1, started in the same second."""
    from rocmcheck.engine.options import RunOptions
    from rocmcheck.engine.runner import Runner

    monkeypatch.setattr(os, "getpid", lambda: 1)
    monkeypatch.setattr(time, "strftime", lambda fmt, *args: "20261124-120000")
    first, second = Runner(RunOptions()).run_id, Runner(RunOptions()).run_id
    assert first != second
    monkeypatch.setattr(time, "strftime", lambda fmt, *args: "20261124-120001")
    later = Runner(RunOptions()).run_id
    assert sorted([later, first, second])[-1] == later  # still sorted by time


@pytest.mark.children
def test_a_run_never_replaces_or_joins_another_runs_file(tmp_path, monkeypatch):
    path = tmp_path / "rocmcheck-run.json"
    write_atomic(path, "first", replace=False)
    with pytest.raises(FileExistsError):
        write_atomic(path, "second", replace=False)
    monkeypatch.setattr(os, "link", lambda *a: (_ for _ in ()).throw(PermissionError("no hard links here")))
    with pytest.raises(FileExistsError):  # a file system without hard links: exclusive create instead
        write_atomic(path, "third", replace=False)
    write_atomic(tmp_path / "new.json", "fourth", replace=False)
    assert path.read_text() == "first" and (tmp_path / "new.json").read_text() == "fourth"
    write_atomic(path, "named by the user", replace=True)  # --json PATH: the user's own file is replaced
    assert path.read_text() == "named by the user"
    Journal(tmp_path / "run.jsonl").close()
    with pytest.raises(FileExistsError):  # never two runs appending to one journal
        Journal(tmp_path / "run.jsonl")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.json", "rocmcheck-run.json", "run.jsonl"]


@pytest.mark.children
@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600)])
def test_reports_and_journal_get_one_mode_from_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        write_atomic(tmp_path / "r.json", "{}")
        Journal(tmp_path / "r.jsonl").close()
    finally:
        os.umask(old)
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()} == {"r.json": mode, "r.jsonl": mode}


@pytest.mark.children
@pytest.mark.skipif(not unshare_works("-rfp", "--mount-proc"), reason="no PID namespaces (unshare -rfp)")
def test_two_nodes_with_pid_1_in_the_same_second_keep_both_reports(tmp_path):
    """Two containers, each rocmcheck as PID 1, start in the same second and write to one shared
    folder as root with umask 022; a user then runs `rocmcheck matrix` over it."""
    shared = Path(tempfile.mkdtemp(prefix="rocmcheck-shared-"))
    try:
        shared.chmod(0o755)
        while time.time() % 1 > 0.3:  # start just after a second boundary
            time.sleep(0.01)
        procs = [subprocess.Popen(["unshare", "-rfp", "--mount-proc", *ROCMCHECK, *GATE, "--require", "fake-pass",
                                   "--out-dir", str(shared)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, umask=0o022) for _ in range(2)]
        for proc in procs:
            assert proc.wait(timeout=120) == 0, proc.communicate()
        reports = [json.loads(p.read_text()) for p in shared.glob("*.json")]
        assert len(reports) == 2 and all("-1-" in r["run"]["id"] for r in reports)  # both ran as PID 1
        for journal in shared.glob("*.jsonl"):
            assert journal.read_text().count('"record":"header"') == 1  # never interleaved
        modes = [stat.S_IMODE(p.stat().st_mode) for p in shared.iterdir()]
        assert modes == [0o644] * 6  # journal, JSON and Markdown of each run, readable by every user
        try:  # as root here (a prolog's user): read as an unprivileged user, where it can run this Python
            matrix = cli("matrix", str(shared), user=65534, group=65534, extra_groups=[])
        except PermissionError:
            matrix = cli("matrix", str(shared))  # the interpreter is out of its reach: the modes above say it
        assert matrix.returncode == 0, matrix.stderr
        assert "2 reports" in matrix.stdout
    finally:
        shutil.rmtree(shared)


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="POSIX signals")
@pytest.mark.parametrize("signum", ["SIGTERM", "SIGALRM"])
def test_an_interrupt_while_a_process_starts_waits_until_its_handle_is_kept(signum):
    """A SIGTERM or the --deadline's SIGALRM in the middle of starting a child would orphan it: they are
    held back while a process of ours starts, then delivered."""
    from rocmcheck.engine.isolation import interrupts_deferred

    seen: list = []
    previous = signal.signal(getattr(signal, signum), lambda s, f: seen.append(s))
    try:
        with interrupts_deferred():
            signal.raise_signal(getattr(signal, signum))
            assert seen == []  # not yet
        assert seen == [getattr(signal, signum)]
    finally:
        signal.signal(getattr(signal, signum), previous)
