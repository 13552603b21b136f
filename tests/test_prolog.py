"""The Slurm prolog recipe (docs/recipes/slurm-prolog.sh) and the NHC check (docs/recipes/rocmcheck.nhc)
without a Slurm: `scontrol` is a stand-in that records what it was asked, and where the gate's own
outcome is not the point, so is `rocmcheck`. The prolog runs as slurmd starts it: SLURM_* variables
and its settings only, no PATH, no arguments. tests/test_slurm.py runs it in a real Slurm.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import psutil
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


SCHEMA_FILE = RECIPES.parent / "schema" / "node-verdict.schema.json"
STUCK = "import time\ntime.sleep(600)  # a probe module whose import never ends (a stalled NFS, a wedged driver)\n"


def valid(verdict: dict) -> dict:
    """`verdict`, checked against the published node-verdict schema."""
    import jsonschema

    jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text())).validate(verdict)
    return verdict


# A writer that is gone: above Linux's largest pid_max (2**22), so no process has it (the PID of a
# process that ended could be reused at once on a busy machine)
DEAD_PID = 2 ** 22 + 1


def test_a_prolog_killed_by_slurm_leaves_a_valid_unknown_verdict_naming_its_job(prolog):
    """As slurmd ends a prolog at PrologEpilogTimeout: SIGTERM to its process group, SIGKILL 10 ms
    later. The gate is stuck where its --deadline cannot reach (importing a probe module), so only
    the kill ends it: the start record is what stays, valid and naming the job; the earlier
    verdicts and latest.json are untouched, and the next run leaves no temporary file."""
    assert prolog.run(ROCMCHECK=str(fake_gate(prolog.tmp, GO, 0))).returncode == 0
    earlier, latest = prolog.kept(), os.readlink(prolog.here / "latest.json")
    stuck = prolog.tmp / "stuck"
    stuck.mkdir()
    (stuck / "stuck_probe.py").write_text(STUCK)
    proc = subprocess.Popen(["/bin/sh", str(PROLOG)], start_new_session=True, env=prolog.env(
        SLURM_JOB_ID="8", ROCMCHECK_ARGS=f"--device cpu --probe device-smoke --probes-path {stuck}"))
    end = time.monotonic() + 60
    while not any(str(stuck) in (p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])):
        assert time.monotonic() < end and proc.poll() is None  # the gate runs (and will hang)
        time.sleep(0.1)
    time.sleep(3)  # the gate is past its start, loading the probes
    os.killpg(proc.pid, signal.SIGTERM)
    time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    kept = prolog.kept()
    (new,) = [v for k, v in kept.items() if k not in earlier]
    assert valid(new)["status"] == "UNKNOWN" and new["job_id"] == "8", json.dumps(new)
    # the start record, where SIGKILL came first; or the gate's own word, where its handler ran in the 10 ms between
    started = new["error"].endswith("not finished: killed or still running") and new["error"].startswith("started at 2")
    assert (started and new["partial"] is True) or new["error"] == "interrupted by SIGTERM", json.dumps(new)
    assert {k: kept[k] for k in earlier} == earlier and os.readlink(prolog.here / "latest.json") == latest
    # a temporary file as a writer killed mid-write leaves one (Slurm's SIGKILL during the gate's
    # SIGTERM ending), one of a writer still running, and one of another host's writer
    host = subprocess.run(["uname", "-n"], capture_output=True, text=True).stdout.split(".")[0].strip()
    killed = prolog.here / f".{sorted(kept)[-1]}.{host}-{DEAD_PID}.0a1b2c3d.tmp"
    running = prolog.here / f".x.json.{host}-{os.getpid()}.0a1b2c3d.tmp"
    elsewhere = prolog.here / f".x.json.otherhost-{DEAD_PID}.0a1b2c3d.tmp"
    for temp in (killed, running, elsewhere):
        temp.write_text('{"half')
    assert prolog.run(SLURM_JOB_ID="9").returncode == 0, prolog.log()
    assert sorted(prolog.here.glob(".*.tmp")) == sorted([running, elsewhere])
    assert prolog.kept()[os.readlink(prolog.here / "latest.json")]["job_id"] == "9"


def test_the_gates_own_start_record_stands_where_it_is_killed(tmp_path):
    """`gate --verdict FILE` alone (no recipe): SIGKILL while it is stuck leaves FILE a valid
    UNKNOWN verdict, so any caller (a K8s init container, a by-hand run) gets one."""
    stuck = tmp_path / "stuck"
    stuck.mkdir()
    (stuck / "stuck_probe.py").write_text(STUCK)
    verdict = tmp_path / "v" / "verdict.json"
    env = {**os.environ, "SLURM_JOB_ID": "41"}
    proc = subprocess.Popen([str(ROCMCHECK), "gate", "--device", "cpu", "--probe", "device-smoke", "--probes-path",
                             str(stuck), "--out-dir", str(tmp_path / "r"), "--verdict", str(verdict)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    end = time.monotonic() + 60
    while not verdict.exists():
        assert time.monotonic() < end and proc.poll() is None
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    left = valid(json.loads(verdict.read_text()))
    assert left["status"] == "UNKNOWN" and left["job_id"] == "41" and "killed or still running" in left["reason"]
    assert list(verdict.parent.iterdir()) == [verdict]


@pytest.mark.parametrize("deadline, killed_after, expected, said", [
    (None, None, None, ""),
    (110.0, None, 110.0, ""),
    (None, 120.0, 110.0, "deadline 110s: killed after 120s (--killed-after) less a 10s margin"),
    (110.0, 20.0, 10.0, "--deadline 110s lowered to 10s: killed after 20s (--killed-after) less a 10s margin"),
    (8.0, 20.0, 8.0, ""),  # already below: as given
    (None, 5.0, 2.5, "deadline 2.5s: killed after 5s (--killed-after) less a 2.5s margin"),  # half a short limit
])
def test_the_deadline_is_kept_below_the_callers_kill(deadline, killed_after, expected, said):
    from rocmcheck.engine.options import bounded_deadline

    assert bounded_deadline(deadline, killed_after) == {"deadline": expected, "deadline_why": said}


def test_the_recipe_keeps_the_deadline_below_prologepilogtimeout_and_lowers_an_explicit_one(prolog):
    """PrologEpilogTimeout 20 (scontrol show config) and ROCMCHECK_DEADLINE=110, which Slurm's kill
    would cut short: the gate is told it is killed after what is left of the 20 s, its deadline is
    lowered with a line in the log, and the UNKNOWN verdict (a planted hang) says so in its notes."""
    done = prolog.run(FAKE_PROLOG_TIMEOUT="20", ROCMCHECK_DEADLINE="110", ROCMCHECK_INJECT="hang@device-smoke",
                      ROCMCHECK_ARGS="--device cpu --probe device-smoke --timeout 120")
    (verdict,) = prolog.kept().values()
    lowered = re.search(r"rocmcheck: --deadline 110s lowered to ([0-9.]+)s: killed after (1[89])s \(--killed-after\) "
                        r"less a ([0-9.]+)s margin", prolog.log())
    assert lowered, prolog.log()
    bound, left, margin = (float(x) for x in lowered.groups())
    assert bound == left - margin and margin == min(10, left / 2)
    assert done.returncode == 2 and valid(verdict)["status"] == "UNKNOWN" and verdict["job_id"] == "7"
    assert lowered.group(0).split(": ", 1)[1] in verdict["notes"]
    assert f"the --deadline of {bound:g}s" in verdict["reason"]
    assert ["show", "config"] in [line.rstrip("|").split("|") for line in prolog.calls.read_text().splitlines()]


@pytest.mark.parametrize("settings, passed", [
    ({}, "--deadline 110 --verdict"),  # Slurm's 65534: no limit, the default deadline
    ({"FAKE_PROLOG_TIMEOUT": "300"}, "--killed-after 29"),  # 300 less the second or so spent: 298 or 299
    ({"FAKE_PROLOG_TIMEOUT": "300", "ROCMCHECK_DEADLINE": "60"}, "--deadline 60 --killed-after 29"),
    ({"FAKE_PROLOG_TIMEOUT": "300", "ROCMCHECK_TIME_LIMIT": "40"}, "--killed-after 3"),  # the setting first: 38, 39
])
def test_the_recipe_passes_the_time_limit_it_read(prolog, settings, passed):
    assert prolog.run(ROCMCHECK=str(fake_gate(prolog.tmp, GO, 0)), **settings).returncode == 0
    args = (prolog.tmp / "args").read_text()
    assert args.startswith(f"gate {passed}"), args
    asked = "show|config|" in prolog.calls.read_text() if prolog.calls.exists() else False
    assert asked == ("ROCMCHECK_TIME_LIMIT" not in settings)


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


def test_a_gate_that_cannot_start_its_run_still_replaces_the_start_record(tmp_path, capsys):
    """Bad input (here an option argparse refuses, before the gate could write anything) still
    leaves `--verdict`'s file a valid UNKNOWN verdict saying why, in one line on stderr."""
    verdict = tmp_path / "v" / "verdict.json"
    verdict.parent.mkdir()
    verdict.write_text(json.dumps(node.started()))
    assert main(["gate", "--bogus", "--verdict", str(verdict)]) == 2
    written = valid(json.loads(verdict.read_text()))
    assert written["status"] == "UNKNOWN" and written["error"] == "error: unrecognized arguments: --bogus"
    assert capsys.readouterr().err == "rocmcheck: error: unrecognized arguments: --bogus\n"
