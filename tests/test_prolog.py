"""The Slurm prolog recipe (docs/recipes/slurm-prolog.sh) and the NHC check (docs/recipes/rocmcheck.nhc)
without a Slurm: `scontrol` is a stand-in that records what it was asked, and where the gate's own
outcome is not the point, so is `rocmcheck`. The prolog runs as slurmd starts it: SLURM_* variables
and its settings only, no PATH, no arguments. tests/test_slurm.py runs it in a real Slurm.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest

from rocmcheck.cli import main
from rocmcheck.outputs import node

RECIPES = Path(__file__).resolve().parent.parent / "docs" / "recipes"
PROLOG = RECIPES / "slurm-prolog.sh"
ROCMCHECK = Path(sys.executable).parent / "rocmcheck"  # the console script, as a venv has it
pytestmark = [pytest.mark.children,
              pytest.mark.skipif(sys.platform == "win32", reason="a POSIX shell script")]


def run_group(argv: List[str], env: Dict[str, str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    """`argv` in a process group of its own, the whole group killed if it outlives `timeout` (a
    failing test must not leave a gate with hung probes behind)."""
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{argv} ran over {timeout} s: {err[-2000:]}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


GO = {**node.unknown("-"), "status": "GO", "exit_code": 0, "reason": "rocmcheck GO"}


def fake_gate(tmp_path: Path, doc: dict, code: int, before: str = "") -> Path:
    """A `rocmcheck` that writes `doc` to its `--verdict` file as the gate does (indent 2), its
    arguments to `args`, and exits `code`."""
    text = json.dumps(doc, indent=2)
    return executable(tmp_path / "fake-rocmcheck",
                      f'#!/bin/sh\necho "$@" > {tmp_path}/args\n{before}\n'
                      'while [ $# -gt 0 ]; do [ "$1" = --verdict ] && out=$2; shift; done\n'
                      f"cat > \"$out\" <<'EOF'\n{text}\nEOF\nexit {code}\n")


class Prolog:
    """The recipe run as slurmd runs it, on node `n1`, with a recording scontrol."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.calls = tmp_path / "scontrol.calls"
        # `scontrol show config` answers as Slurm's does, with $FAKE_PROLOG_TIMEOUT (65534: no limit)
        self.scontrol = executable(tmp_path / "scontrol", f'#!/bin/sh\nprintf "%s|" "$@" >> {self.calls}\necho >> '
                                   f'{self.calls}\n[ "$1 $2" = "show config" ] && printf "%s\\n" '
                                   '"Prolog                  = /etc/slurm/prolog.d/*" '
                                   '"PrologEpilogTimeout     = ${FAKE_PROLOG_TIMEOUT:-65534}" '
                                   '"PrologFlags             = Alloc"\nexit 0\n')
        self.here = tmp_path / "fleet" / "verdicts" / "n1"

    def env(self, **settings: str) -> Dict[str, str]:
        return {"SLURMD_NODENAME": "n1", "SLURM_JOB_ID": "7", "SLURM_CONF": "/nonexistent/slurm.conf",
                "SCONTROL": str(self.scontrol), "ROCMCHECK_DIR": str(self.tmp / "fleet"), "ROCMCHECK": str(ROCMCHECK),
                "ROCMCHECK_ARGS": "--device cpu --probe device-smoke", **settings}

    def run(self, **settings: str) -> subprocess.CompletedProcess:
        return run_group(["/bin/sh", str(PROLOG)], self.env(**settings), self.tmp, timeout=300)

    def drains(self) -> List[List[str]]:
        calls = [line.rstrip("|").split("|") for line in self.calls.read_text().splitlines()] if self.calls.exists() \
            else []
        return [call for call in calls if call[0] == "update"]  # not `show config`

    def kept(self) -> Dict[str, dict]:
        """Every verdict kept, by name (a file that is not one JSON document fails here)."""
        return {p.name: json.loads(p.read_text()) for p in sorted(self.here.glob("2*.json"))}

    def log(self) -> str:
        return (self.here / "prolog.log").read_text()


@pytest.fixture
def prolog(tmp_path) -> Prolog:
    return Prolog(tmp_path)


def test_a_good_node_runs_the_job_and_a_bad_one_is_drained_naming_what_failed(prolog):
    good = prolog.run()
    (name, verdict), = prolog.kept().items()
    assert good.returncode == 0 and verdict["status"] == "GO" and verdict["job_id"] == "7", good.stderr
    assert name.endswith(f"-job7-{name.split('-')[-1]}") and os.readlink(prolog.here / "latest.json") == name
    assert prolog.drains() == [] and "GO: " in prolog.log()
    bad = prolog.run(SLURM_JOB_ID="8", ROCMCHECK_INJECT="copy-zeros",
                     ROCMCHECK_ARGS="--device cpu --probe device-smoke --probe transfer -k device-smoke")
    assert bad.returncode == 1, prolog.log()
    kept = prolog.kept()
    latest = kept[os.readlink(prolog.here / "latest.json")]
    assert len(kept) == 2 and kept[name] == verdict  # the first verdict as it was
    assert latest["status"] == "NO-GO" and latest["job_id"] == "8"
    (drain,) = prolog.drains()
    assert drain == ["update", "nodename=n1", "state=drain", f"reason={latest['reason']}"]
    assert latest["reason"].startswith("rocmcheck DRILL NO-GO (copy-zeros): device-smoke: ")
    assert bad.stdout.strip() == latest["reason"]  # for NHC's check
    assert prolog.run(SLURM_JOB_ID="9", ROCMCHECK_EXPECT_GPUS="8").returncode == 1
    assert "expected 8 GPUs" in prolog.drains()[-1][-1]
    assert main(["matrix", str(prolog.tmp / "fleet" / "reports")]) == 0  # the fleet's reports, one matrix


@pytest.mark.parametrize("settings, why", [
    ({"ROCMCHECK": "rocmcheck"}, "ROCMCHECK=rocmcheck is not an absolute path (slurmd starts a prolog with no PATH)"),
    ({"ROCMCHECK": "/nonexistent/bin/rocmcheck"}, "ROCMCHECK=/nonexistent/bin/rocmcheck is not an executable file"),
    ({"ROCMCHECK_ON_UNKNOWN": "maybe"}, "ROCMCHECK_ON_UNKNOWN=maybe must be drain or run"),
], ids=["relative", "missing", "policy"])
def test_bad_settings_are_could_not_assess_in_one_line_and_keep_earlier_verdicts(prolog, settings, why):
    assert prolog.run(ROCMCHECK=str(fake_gate(prolog.tmp, GO, 0))).returncode == 0
    earlier = prolog.kept()
    done = prolog.run(SLURM_JOB_ID="8", **settings)
    assert done.returncode == 2 and done.stdout.strip() == f"rocmcheck UNKNOWN: {why}"
    assert [line for line in prolog.log().splitlines() if "job8: could not assess" in line][0].endswith(why)
    (drain,) = prolog.drains()
    assert drain[-1] == f"reason=rocmcheck UNKNOWN: {why}"
    kept = prolog.kept()
    (new,) = [v for k, v in kept.items() if k not in earlier]
    assert new["status"] == "UNKNOWN" and new["exit_code"] == 2 and new["error"] == why and new["job_id"] == "8"
    assert {k: kept[k] for k in earlier} == earlier and "Traceback" not in done.stderr + prolog.log()


def test_under_on_unknown_run_the_job_runs_and_the_unknown_verdict_is_kept(prolog):
    done = prolog.run(ROCMCHECK="rocmcheck", ROCMCHECK_ON_UNKNOWN="run")
    (verdict,) = prolog.kept().values()
    assert done.returncode == 0 and done.stdout == "" and prolog.drains() == []
    assert verdict["status"] == "UNKNOWN" and "UNKNOWN, the job runs (ROCMCHECK_ON_UNKNOWN=run)" in prolog.log()


@pytest.mark.parametrize("script, code", [
    ("#!/nonexistent/python\n", 127),  # its interpreter is gone: the shell's 'not found'
    ("#!/bin/sh\nprintf '{\\n  \"status\": \"GO\",\\n'\nkill -SEGV $$\n", 139),  # half a document, then a crash
], ids=["exit-127", "crash"])
def test_a_gate_that_gives_no_verdict_is_unknown_and_the_earlier_verdict_stays(prolog, script, code):
    assert prolog.run(ROCMCHECK=str(fake_gate(prolog.tmp, GO, 0))).returncode == 0
    earlier = prolog.kept()
    broken = executable(prolog.tmp / "broken", script)
    done = prolog.run(SLURM_JOB_ID="8", ROCMCHECK=str(broken))
    assert done.returncode == 2
    (new,) = [v for k, v in prolog.kept().items() if k not in earlier]
    assert new["status"] == "UNKNOWN" and new["error"] == f"rocmcheck exited {code} without a verdict"
    assert prolog.drains()[0][-1] == f"reason=rocmcheck UNKNOWN: rocmcheck exited {code} without a verdict"
    assert {k: v for k, v in prolog.kept().items() if k in earlier} == earlier


def test_an_unwritable_verdict_folder_is_one_line_and_drains(prolog):
    blocker = prolog.tmp / "afile"
    blocker.write_text("not a folder")
    done = prolog.run(ROCMCHECK_DIR=str(blocker / "rocmcheck"))
    why = f"cannot write verdicts to {blocker}/rocmcheck/verdicts/n1"
    said = [line.split(" ", 1)[1] for line in done.stderr.splitlines()]  # no log to write to: stderr, timed
    assert done.returncode == 2 and said == [f"rocmcheck-prolog job7: could not assess: {why}",
                                             f"rocmcheck-prolog job7: drained n1: rocmcheck UNKNOWN: {why}"]
    assert prolog.drains()[0][-1] == f"reason=rocmcheck UNKNOWN: {why}"


def test_odd_job_ids_and_node_names_make_safe_file_names_and_a_long_reason_is_cut(prolog):
    odd = '9;$(touch pwned) "a/../b\'\n'
    done = prolog.run(SLURM_JOB_ID=odd, SLURMD_NODENAME="n1/../x", ROCMCHECK="relative/" + "r" * 400)
    assert done.returncode == 2 and not (prolog.tmp / "pwned").exists()
    (folder,) = (prolog.tmp / "fleet" / "verdicts").iterdir()
    (verdict_file,) = folder.glob("2*.json")
    assert folder.name == "n1_.._x" and "-job9___touch_pwned___a_.._b__-" in verdict_file.name
    assert json.loads(verdict_file.read_text())["job_id"] == "9___touch_pwned___a_.._b__"
    (drain,) = prolog.drains()
    assert drain[1] == "nodename=n1/../x" and len(drain[-1]) == len("reason=") + node.REASON_LIMIT


def test_a_prolog_killed_half_way_keeps_every_earlier_verdict(prolog):
    """As slurmd ends a prolog at PrologEpilogTimeout: SIGTERM to its process group, SIGKILL 10 ms later."""
    assert prolog.run(ROCMCHECK=str(fake_gate(prolog.tmp, GO, 0))).returncode == 0
    earlier, latest = prolog.kept(), os.readlink(prolog.here / "latest.json")
    slow = fake_gate(prolog.tmp, node.unknown("never"), 0, before="printf '{\\n  \"status\": '; sleep 60")
    proc = subprocess.Popen(["/bin/sh", str(PROLOG)], env=prolog.env(SLURM_JOB_ID="8", ROCMCHECK=str(slow)),
                            start_new_session=True)
    deadline = time.monotonic() + 30
    while not any(p.stat().st_size for p in prolog.here.glob(".*.tmp")):  # the gate is writing its verdict
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert prolog.kept() == earlier and os.readlink(prolog.here / "latest.json") == latest
    assert list(prolog.here.glob(".*.tmp"))  # the half-written one stays hidden; a later prolog removes it after 1 h


def test_two_prologs_at_once_leave_two_valid_verdicts(prolog):
    gate = fake_gate(prolog.tmp, GO, 0, before="sleep 0.5")
    procs = [subprocess.Popen(["/bin/sh", str(PROLOG)], env=prolog.env(SLURM_JOB_ID=job, ROCMCHECK=str(gate)))
             for job in ("11", "12")]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    kept = prolog.kept()
    assert len(kept) == 2 and all(v["status"] == "GO" for v in kept.values())
    assert sorted(name.split("-")[1] for name in kept) == ["job11", "job12"]
    assert os.readlink(prolog.here / "latest.json") in kept


NHC_DIE = """
# NHC's `die` as its README defines it for checks: log the message, mark the node offline
# with it (NHC's helper prefixes "NHC: "), exit with the return code
function die() { echo "NHC: ${*:2}" > "$OFFLINED"; exit "$1"; }
"""


@pytest.mark.skipif(not shutil.which("bash"), reason="NHC checks are bash")
@pytest.mark.parametrize("inject, deadline, unknown, code, offlined", [
    ("", 60, "drain", 0, None),
    ("copy-zeros", 60, "drain", 1, "NHC: rocmcheck DRILL NO-GO (copy-zeros): device-smoke: "),
    ("hang", 6, "drain", 1, "NHC: rocmcheck DRILL UNKNOWN (hang): interrupted by the --deadline of 6s"),
    ("hang", 6, "run", 0, None),
], ids=["go", "no-go", "unknown-drain", "unknown-run"])
def test_the_nhc_check_fails_by_nhcs_conventions_and_never_drains_itself(prolog, inject, deadline, unknown, code,
                                                                         offlined):
    offline = prolog.tmp / "offlined"
    script = (f"{NHC_DIE}\nsource {RECIPES / 'rocmcheck.nhc'}\n"
              f"check_rocmcheck_gate -t {deadline} -u {unknown} {PROLOG} --device cpu --probe device-smoke\n"
              "exit $?\n")
    env = {**prolog.env(ROCMCHECK_INJECT=inject), "OFFLINED": str(offline), "PATH": os.environ["PATH"]}
    env.pop("SLURM_JOB_ID")  # NHC runs outside any job
    done = run_group(["bash", "-c", script], env, prolog.tmp, timeout=120)
    assert done.returncode == code, prolog.log()
    said = offline.read_text().strip() if offline.exists() else None
    assert (said or "").startswith(offlined or "") and (said is None) == (offlined is None)
    assert prolog.drains() == []  # NHC drains, not the recipe
    (verdict,) = prolog.kept().values()
    assert verdict["job_id"] is None and "-nojob-" in os.readlink(prolog.here / "latest.json")
