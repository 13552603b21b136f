"""The Slurm prolog (docs/recipes/slurm-prolog.sh) in a real one-node Slurm on localhost.

`make slurm-test` installs Debian's slurm-wlm and munge and runs this module; elsewhere (`make
test`, CI, a host without them or without root) it skips. The cluster lives in a temporary
folder: its own munge key and socket, its own slurm.conf (PrologFlags=Alloc, a
PrologEpilogTimeout, the prolog, nohold_on_prolog_fail) and its daemons, started in the
foreground and stopped by their PIDs; no process of it is left.

slurmd starts a prolog with SLURM_* variables only, so the prolog here is a wrapper that reads
the case's settings and execs the recipe, as docs/recipes/slurm.md tells admins to do. Each case
prints its time and the states it saw; the gate is the CPU self-test, narrowed to device-smoke.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent
RECIPE = REPO / "docs" / "recipes" / "slurm-prolog.sh"
DOCS = REPO / "docs" / "recipes" / "slurm.md"
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "scontrol", "squeue", "sinfo", "scancel")
MISSING = [name for name in (*DAEMONS, *CLIENTS) if not shutil.which(name, path=os.pathsep.join(
    [os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin"]))]
PROLOG_TIMEOUT_S = 30  # PrologEpilogTimeout: a healthy gate of one probe takes 3-10 s on 2 loaded cores
DEADLINE_S = 20  # the recipe's ROCMCHECK_DEADLINE in the cases that end in time
NARROW = "--device cpu --probe device-smoke"
ROCMCHECK = Path(sys.executable).parent / "rocmcheck"  # the console script, as an admin's venv has it

ASKED = os.environ.get("ROCMCHECK_SLURM_TEST") == "1"  # set by make slurm-test: it starts root daemons

pytestmark = [pytest.mark.children,
              pytest.mark.skipif(not ASKED, reason="make slurm-test runs it (ROCMCHECK_SLURM_TEST=1)"),
              pytest.mark.skipif(bool(MISSING) or sys.platform != "linux" or os.geteuid() != 0,
                                 reason=f"needs root, slurm-wlm and munge (make slurm-test installs them); "
                                        f"missing: {', '.join(MISSING) or 'root'}")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """One node, `testnode`, on 127.0.0.1: munged, slurmctld and slurmd in the foreground."""

    NODE = "testnode"

    def __init__(self, root: Path):
        self.root = root
        self.conf = root / "slurm.conf"
        self.verdicts = root / "fleet" / "verdicts" / self.NODE
        self.env = {**os.environ, "SLURM_CONF": str(self.conf),
                    "PATH": os.pathsep.join([str(ROCMCHECK.parent), "/usr/sbin", "/usr/bin", "/bin"])}
        self.daemons: List[subprocess.Popen] = []
        self.cases: List[str] = []

    def write(self) -> None:
        munge = self.root / "munge"
        munge.mkdir(mode=0o700)
        (munge / "munge.key").write_bytes(os.urandom(1024))
        (munge / "munge.key").chmod(0o600)
        for folder in ("state", "spool", "jobs"):
            (self.root / folder).mkdir()
        prolog = self.root / "prolog"
        prolog.write_text(f'#!/bin/sh\n. {shlex.quote(str(self.root / "settings"))}\nexec {shlex.quote(str(RECIPE))}\n')
        prolog.chmod(0o755)
        self.settings()
        host = socket.gethostname().split(".")[0]
        r = self.root
        self.conf.write_text(f"""ClusterName=rocmchecktest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge}/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/slurmctld.log
SlurmdLogFile={r}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
Prolog={prolog}
PrologFlags=Alloc
PrologEpilogTimeout={PROLOG_TIMEOUT_S}
SchedulerParameters=nohold_on_prolog_fail
NodeName={self.NODE} NodeAddr=127.0.0.1 NodeHostname={host} CPUs=4 State=UNKNOWN
PartitionName=debug Nodes={self.NODE} Default=YES MaxTime=INFINITE State=UP
""")

    def prolog_timeout(self, seconds: int) -> None:
        """PrologEpilogTimeout from now on: slurm.conf rewritten, `scontrol reconfigure`, and
        waited for until `scontrol show config` (what the recipe reads) says it."""
        text = self.conf.read_text()
        self.conf.write_text(re.sub(r"PrologEpilogTimeout=\d+", f"PrologEpilogTimeout={seconds}", text))
        self.run("scontrol", "reconfigure")
        self._wait(lambda: re.search(rf"^PrologEpilogTimeout\s*=\s*{seconds}$",
                                     self.run("scontrol", "show", "config").stdout, re.M), "the new timeout")
        time.sleep(2)  # slurmd reconfigures after slurmctld

    def settings(self, **values: str) -> None:
        """The prolog's settings for the next jobs (the wrapper sources them)."""
        chosen = {"ROCMCHECK": str(ROCMCHECK), "ROCMCHECK_DIR": str(self.root / "fleet"),
                  "ROCMCHECK_DEADLINE": str(DEADLINE_S), "ROCMCHECK_ARGS": NARROW, **values}
        (self.root / "settings").write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in chosen.items()))

    def start(self) -> None:
        munge = self.root / "munge"
        self.daemons.append(self._daemon(["munged", "-F", "-f", f"--socket={munge}/munge.socket",
                                          f"--key-file={munge}/munge.key", f"--pid-file={munge}/munged.pid",
                                          f"--seed-file={munge}/munged.seed"], "munged"))
        self._wait(lambda: (munge / "munge.socket").exists(), "munged's socket")
        self.daemons.append(self._daemon(["slurmctld", "-D", "-i"], "slurmctld"))
        self._wait(lambda: self.run("scontrol", "ping", check=False).returncode == 0, "slurmctld")
        self.daemons.append(self._daemon(["slurmd", "-D", "-N", self.NODE], "slurmd"))
        self._wait(lambda: self.node_state() == "IDLE", "the node to be idle")

    def _daemon(self, argv: List[str], name: str) -> subprocess.Popen:
        out = open(self.root / f"{name}.out", "wb")  # noqa: SIM115 - the daemon keeps it
        return subprocess.Popen(argv, env=self.env, cwd=self.root, stdout=out, stderr=subprocess.STDOUT)

    def _wait(self, condition, what: str, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while not condition():
            dead = [p.args[0] for p in self.daemons if p.poll() is not None]
            assert not dead and time.monotonic() < end, f"waiting for {what}: {dead or 'timed out'}\n{self.logs()}"
            time.sleep(0.2)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(self.root.glob("*.out")) + sorted(self.root.glob("*.log")))

    def run(self, *argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        done = subprocess.run(argv, env=self.env, cwd=self.root, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0 or not check, f"{argv}: {done.stderr}"
        return done

    def node(self) -> Dict[str, str]:
        text = self.run("scontrol", "show", "node", self.NODE, "--oneliner", check=False).stdout
        return dict(re.findall(r"(\w+)=(.*?)(?= [\w/:]+=|$)", text.strip()))

    def node_state(self) -> str:
        return self.node().get("State", "")

    def submit(self, *argv: str) -> str:
        out = self.run("sbatch", "--parsable", f"--output={self.root}/jobs/%j.out", *argv).stdout
        return out.strip().split(";")[0]

    def job(self, job_id: str) -> Dict[str, str]:
        text = self.run("scontrol", "show", "job", job_id, "--oneliner", check=False).stdout
        return dict(re.findall(r"(\w+)=(.*?)(?= [\w/:]+=|$)", text.strip()))

    def wait_job(self, job_id: str, timeout: float = 120) -> Dict[str, str]:
        """The job once it ended, or once the node drained instead (its job then waits, requeued)."""
        self._wait(lambda: self.job(job_id).get("JobState") in ("COMPLETED", "FAILED", "CANCELLED")
                   or "DRAIN" in self.node_state(), f"job {job_id} to end", timeout)
        return self.job(job_id)

    def resume(self) -> None:
        self.run("scontrol", "update", f"nodename={self.NODE}", "state=resume")
        self._wait(lambda: self.node_state() == "IDLE", "the node to be idle again")

    def kept(self) -> Dict[str, dict]:
        """Every verdict the prolog kept, by file name (a file that is not valid JSON fails here)."""
        return {p.name: json.loads(p.read_text()) for p in sorted(self.verdicts.glob("2*.json"))}

    def ours(self) -> List[psutil.Process]:
        """Processes of this cluster other than the daemons: those started with its SLURM_CONF
        (slurmd gives it to every prolog and step)."""
        mine = []
        daemons = {p.pid for p in self.daemons}
        for process in psutil.process_iter():
            try:
                if process.pid not in daemons and process.environ().get("SLURM_CONF") == str(self.conf):
                    mine.append(process)
            except psutil.Error:
                continue
        return mine

    def stop(self) -> None:
        for process in reversed(self.daemons):
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    def say(self, case: str, started: float, states: str) -> None:
        line = f"slurm case {case}: {time.monotonic() - started:.1f} s; {states}"
        self.cases.append(line)
        print(line, flush=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("slurm"))
    c.write()
    started = time.monotonic()
    try:
        c.start()
        c.say("cluster up", started, f"node {c.node_state()}")
        yield c
    finally:
        c.stop()
        left = c.ours()
        for process in left:  # a test that failed half-way; reported below
            process.kill()
        print("\n".join(["", *c.cases]), flush=True)
        assert not left, f"processes of the cluster left running: {[p.pid for p in left]}"
        assert all(p.poll() is not None for p in c.daemons)


def test_a_healthy_node_runs_the_job_and_keeps_a_go_verdict(cluster):
    cluster.settings()
    started = time.monotonic()
    job = cluster.submit("--wrap", "echo ran")
    end = cluster.wait_job(job)
    (name, verdict), = cluster.kept().items()
    cluster.say("healthy", started, f"job {end['JobState']} exit {end['ExitCode']}, node {cluster.node_state()}, "
                f"verdict {verdict['status']}")
    assert end["JobState"] == "COMPLETED" and (cluster.root / "jobs" / f"{job}.out").read_text() == "ran\n"
    assert verdict["status"] == "GO" and verdict["job_id"] == job and f"-job{job}-" in name
    assert os.readlink(cluster.verdicts / "latest.json") == name
    assert cluster.node_state() == "IDLE"


def test_a_planted_fault_drains_the_node_naming_the_probe_and_the_drill(cluster):
    before = cluster.kept()
    cluster.settings(ROCMCHECK_INJECT="segv@device-smoke")
    started = time.monotonic()
    step = cluster.run("srun", "echo", "ran", check=False)  # an interactive job: cancelled
    cluster.say("planted fault, srun", started, f"srun exit {step.returncode}, {step.stderr.splitlines()[0]!r}, "
                f"node {cluster.node_state()}")
    assert step.returncode != 0 and "Prolog failure" in step.stderr and "ran" not in step.stdout
    assert not cluster.run("squeue", "--noheader").stdout.strip()  # nothing left queued
    cluster.resume()
    started = time.monotonic()
    job = cluster.submit("--wrap", "echo ran")
    cluster._wait(lambda: "DRAIN" in cluster.node_state(), "the node to drain")
    # the prolog drains the node before it exits; slurmctld requeues the job once slurmd reports it
    cluster._wait(lambda: cluster.job(job).get("JobState") != "RUNNING", "the job to be requeued")
    node, state = cluster.node(), cluster.job(job)
    new = {k: v for k, v in cluster.kept().items() if k not in before}
    cluster.say("planted fault", started, f"job {state['JobState']} ({state['Reason']}, requeued "
                f"{state['Restarts']} time), node {node['State']}, reason '{node.get('Reason')}'")
    assert len(new) == 2 and all(v["status"] == "NO-GO" for v in new.values())  # srun's and the batch job's
    verdict = next(v for v in new.values() if v["job_id"] == job)
    assert node["Reason"].startswith("rocmcheck DRILL NO-GO (segv@device-smoke): device-smoke")
    assert node["Reason"].split(" [")[0] == verdict["reason"]  # scontrol adds [user@time]
    assert not (cluster.root / "jobs" / f"{job}.out").exists() or "ran" not in (
        cluster.root / "jobs" / f"{job}.out").read_text()  # the job never ran on the bad node
    # requeued, not held (nohold_on_prolog_fail): it waits for its requeue delay ("BeginTime")
    assert state["JobState"] == "PENDING" and state["Restarts"] == "1" and "held" not in state["Reason"].lower()
    assert cluster.kept().items() >= before.items()  # the earlier verdicts are as they were
    cluster.run("scancel", job)
    cluster.resume()


def test_could_not_assess_drains_by_default_and_runs_the_job_when_set_to(cluster):
    # 15 s: on 2 cores loaded by parallel work the gate's start alone has taken 8 s
    cluster.settings(ROCMCHECK_INJECT="hang@device-smoke", ROCMCHECK_DEADLINE="15",
                     ROCMCHECK_ARGS=f"{NARROW} --timeout 120")
    started = time.monotonic()
    job = cluster.submit("--wrap", "echo ran")
    cluster._wait(lambda: "DRAIN" in cluster.node_state(), "the node to drain")
    reason = cluster.node().get("Reason", "")
    latest = json.loads((cluster.verdicts / "latest.json").read_text())
    cluster.say("could not assess, ROCMCHECK_ON_UNKNOWN=drain", started,
                f"node {cluster.node_state()}, reason '{reason}'")
    assert latest["status"] == "UNKNOWN" and latest["job_id"] == job
    assert reason.startswith("rocmcheck DRILL UNKNOWN") and "--deadline of 15s during device-smoke" in reason
    cluster.run("scancel", job)
    cluster.resume()

    cluster.settings(ROCMCHECK="rocmcheck", ROCMCHECK_ON_UNKNOWN="run")  # relative: could not assess
    started = time.monotonic()
    job = cluster.submit("--wrap", "echo ran")
    end = cluster.wait_job(job)
    latest = json.loads((cluster.verdicts / "latest.json").read_text())
    cluster.say("could not assess, ROCMCHECK_ON_UNKNOWN=run", started,
                f"job {end['JobState']}, node {cluster.node_state()}, verdict {latest['status']}")
    assert end["JobState"] == "COMPLETED" and cluster.node_state() == "IDLE"
    assert latest["status"] == "UNKNOWN" and latest["job_id"] == job and "not an absolute path" in latest["error"]


SCHEMA = json.loads((REPO / "docs" / "schema" / "node-verdict.schema.json").read_text())
# A probe module whose import never ends, in a way no signal but SIGKILL ends: SIGTERM held, as a
# call into a wedged driver never returns to run Python's handler, and before the --deadline's timer
STUCK = ("import signal, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
         "time.sleep(600)\n")


@pytest.mark.parametrize("timeout_s", [5, 20])
def test_under_a_short_prologepilogtimeout_every_job_keeps_a_valid_unknown_verdict(cluster, timeout_s):
    """The recipe's default deadline under PrologEpilogTimeout of 5 s and 20 s (the recipe's old fixed
    110 s was above both). A planted hang the deadline reaches (hang@device-smoke): the gate ends
    itself below the timeout where it can, and drains with its own reason; one it cannot reach (a
    probe module whose import never ends): slurmd kills the prolog (SIGTERM, SIGKILL 10 ms later)
    and the start record stands. Either way the job's verdict is a valid UNKNOWN naming it, no
    temporary file is left, no process of the prolog lives 8 s after it ended, and the earlier
    verdicts are as they were."""
    stuck = cluster.root / "stuck"
    stuck.mkdir(exist_ok=True)
    (stuck / "stuck_probe.py").write_text(STUCK)
    cluster.prolog_timeout(timeout_s)
    try:
        for hang, args in (("deadline", f"{NARROW} --timeout 300"), ("import", f"{NARROW} --probes-path {stuck}")):
            before = cluster.kept()
            cluster.settings(ROCMCHECK_DEADLINE="", ROCMCHECK_ARGS=args,
                             **({"ROCMCHECK_INJECT": "hang@device-smoke"} if hang == "deadline" else {}))
            started = time.monotonic()
            job = cluster.submit("--wrap", "echo ran")
            try:
                check_case(cluster, job, before, hang, timeout_s, started)
            finally:
                cluster.run("scancel", job)
                cluster.resume()
    finally:
        cluster.prolog_timeout(PROLOG_TIMEOUT_S)


def check_case(cluster: Cluster, job: str, before: Dict[str, dict], hang: str, timeout_s: int,
               started: float) -> None:
    """One case of the test above, once its job is submitted."""
    import jsonschema

    cluster._wait(lambda: "DRAIN" in cluster.node_state(), "the node to drain", timeout=timeout_s + 60)
    ended = time.monotonic()
    cluster._wait(lambda: not cluster.ours(), "the prolog's processes to go", timeout=8)
    gone = time.monotonic() - ended
    node = cluster.node()
    kept = cluster.kept()
    new = {k: v for k, v in kept.items() if v["job_id"] == job}
    (verdict,) = new.values()
    jsonschema.Draft202012Validator(SCHEMA).validate(verdict)
    killed = verdict["error"].endswith("not finished: killed or still running")
    cluster.say(f"PrologEpilogTimeout {timeout_s} s, default deadline, hang in the {hang}", started,
                f"node drained after {ended - started:.1f} s, reason '{node.get('Reason')}'; "
                f"{'killed by slurmd' if killed else 'the gate ended itself'}: verdict "
                f"{verdict['status']} '{verdict['reason']}'; notes {verdict.get('notes', [])[:1]}; "
                f"processes gone {gone:.1f} s after the drain; temp files "
                f"{[p.name for p in cluster.verdicts.glob('.*.tmp')]}")
    assert verdict["status"] == "UNKNOWN" and verdict["exit_code"] == 2
    assert {k: kept[k] for k in before} == before  # the earlier verdicts as they were
    assert not list(cluster.verdicts.glob(".*.tmp"))
    if hang == "import":
        assert killed and node["Reason"].startswith("Prolog error")
    else:  # the deadline came from PrologEpilogTimeout, and the verdict says so
        assert any("(--killed-after) less a" in n for n in verdict.get("notes", [])) or killed
        assert killed or node["Reason"].startswith("rocmcheck DRILL UNKNOWN (hang@device-smoke): ")
    if timeout_s == 20 and hang == "deadline":  # 10 s of margin: the gate ends in time, even loaded
        assert not killed and "interrupted by the --deadline of " in verdict["reason"]


def test_two_jobs_at_once_leave_two_valid_verdicts(cluster):
    before = cluster.kept()
    cluster.settings()
    started = time.monotonic()
    jobs = [cluster.submit("--wrap", "echo ran") for _ in range(2)]
    ends = [cluster.wait_job(job) for job in jobs]
    new = {k: v for k, v in cluster.kept().items() if k not in before}
    cluster.say("two jobs at once", started, f"jobs {[e['JobState'] for e in ends]}, node {cluster.node_state()}, "
                f"verdicts {sorted(v['status'] for v in new.values())}")
    assert [e["JobState"] for e in ends] == ["COMPLETED", "COMPLETED"]
    assert sorted(v["job_id"] for v in new.values()) == sorted(jobs)
    assert all(v["status"] == "GO" for v in new.values())
    assert os.readlink(cluster.verdicts / "latest.json") in new
    assert not list(cluster.verdicts.glob(".*.tmp"))  # none of a killed prolog's either


def doc_commands(text: str) -> List[str]:
    """The Slurm commands of the docs' shell blocks (each line that starts with one)."""
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()
            if line.split(" ")[0] in CLIENTS]


def test_every_slurm_command_of_the_docs_runs_as_written(cluster, tmp_path):
    """docs/recipes/slurm.md's commands, each as written, with $NODE the test node; the job-step
    form's JSON must be one valid document (its stderr goes to the --error file)."""
    commands = doc_commands(DOCS.read_text())
    assert any(c.startswith("srun") and "--error=" in c for c in commands)
    (tmp_path / "verdicts").mkdir()
    started = time.monotonic()
    said = {}
    for command in commands:
        done = subprocess.run(["sh", "-c", command], env={**cluster.env, "NODE": cluster.NODE}, cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{command}: {done.stderr}"
        said[command.split(" ")[0]] = said.get(command.split(" ")[0], "") + done.stdout
    assert "rocmcheck: by hand" in said["sinfo"] and "rocmcheck: by hand" in said["scontrol"]  # whole reasons
    (out,) = (tmp_path / "verdicts").glob("*.json")
    verdict = json.loads(out.read_text())  # one document: the gate's lines went to --error's file
    (lines,) = [p.read_text() for p in (tmp_path / "verdicts").glob("*.log")]  # %N: the node's host name
    cluster._wait(lambda: cluster.node_state() == "IDLE", "the node to be idle after the job step")
    cluster.say("the docs' commands", started, f"{len(commands)} commands, job step verdict {verdict['status']}, "
                f"node {cluster.node_state()}")
    assert verdict["status"] == "GO" and verdict["job_id"] and "GO" in lines



NHC_SOURCE = os.environ.get("ROCMCHECK_NHC_SOURCE", "")  # a checkout of github.com/mej/nhc: Debian has no package


NEEDS_NHC = pytest.mark.skipif(not (Path(NHC_SOURCE) / "nhc").is_file(),
                               reason="set ROCMCHECK_NHC_SOURCE to a checkout of NHC (nhc, scripts/, helpers/)")


def nhc_runner(cluster: Cluster, check: str, nhc_timeout_s: int) -> Callable[..., subprocess.CompletedProcess]:
    """NHC itself, from a checkout, run as slurmd's HealthCheckProgram would run it with one line of
    nhc.conf (`* || CHECK`) and its TIMEOUT (`-t`, its watchdog), the check of docs/recipes/rocmcheck.nhc
    beside NHC's own common.nhc. The helpers that mark the node are installed executable, as NHC's
    Makefile.am installs them (`dist_helper_SCRIPTS`): a checkout's are mode 644, and NHC then cannot
    drain ("node-mark-offline: Permission denied")."""
    scripts, helpers = cluster.root / "nhc-scripts", cluster.root / "nhc-helpers"
    for folder in (scripts, helpers):
        folder.mkdir(exist_ok=True)
    shutil.copy(Path(NHC_SOURCE) / "scripts" / "common.nhc", scripts)
    shutil.copy(REPO / "docs" / "recipes" / "rocmcheck.nhc", scripts)
    for helper in ("node-mark-offline", "node-mark-online"):
        shutil.copy(Path(NHC_SOURCE) / "helpers" / helper, helpers)
        (helpers / helper).chmod(0o755)
    conf = cluster.root / "nhc.conf"
    conf.write_text(f"* || {check}\n")

    def nhc(**env: str) -> subprocess.CompletedProcess:
        argv = ["bash", str(Path(NHC_SOURCE) / "nhc"), "-c", str(conf), "-l", str(cluster.root / "nhc.log"),
                "-t", str(nhc_timeout_s), f"INCDIR={scripts}", f"HELPERDIR={helpers}", "NHC_RM=slurm",
                f"HOSTNAME={cluster.NODE}", f"RESULTFILE={cluster.root}/nhc.status"]
        return subprocess.run(argv, env={**cluster.env, "SLURMD_NODENAME": cluster.NODE, "ROCMCHECK": str(ROCMCHECK),
                                         "ROCMCHECK_DIR": str(cluster.root / "fleet"), **env},
                              capture_output=True, text=True, timeout=nhc_timeout_s + 60)
    return nhc


@NEEDS_NHC
def test_nhc_drains_with_the_gates_reason_and_resumes_after_a_passing_run(cluster):
    nhc = nhc_runner(cluster, f"check_rocmcheck_gate -t {DEADLINE_S} {RECIPE} {NARROW}", DEADLINE_S + 10)
    started = time.monotonic()
    failed = nhc(ROCMCHECK_INJECT="segv@device-smoke")
    reason = cluster.node().get("Reason", "")
    passed = nhc()
    cluster._wait(lambda: cluster.node_state() == "IDLE", "NHC to resume the node")
    cluster.say("NHC", started, f"exit {failed.returncode} then {passed.returncode}; drained with '{reason}', "
                f"then {cluster.node_state()}")
    assert failed.returncode == 1 and passed.returncode == 0
    assert reason.startswith("NHC: rocmcheck DRILL NO-GO (segv@device-smoke): device-smoke")


@NEEDS_NHC
def test_under_nhcs_watchdog_a_hang_ends_as_the_gates_unknown_and_u_run_lets_the_node_be(cluster):
    """A hang with a -t above what NHC's TIMEOUT leaves: the recipe lowers the gate's deadline below
    NHC's watchdog, so the gate ends itself and the drain reason is its UNKNOWN, not NHC's "Script
    timed out" (which names nothing). With -u run the same hang passes the check and the node stays
    up; the verdict is kept either way."""
    nhc_timeout_s = 25  # NHC's -t: its watchdog signals NHC this long after it started
    for on_unknown, code in (("drain", 1), ("run", 0)):
        nhc = nhc_runner(cluster, f"check_rocmcheck_gate -t 60 -u {on_unknown} {RECIPE} {NARROW} --timeout 120",
                         nhc_timeout_s)
        started = time.monotonic()
        done = nhc(ROCMCHECK_INJECT="hang@device-smoke")
        took = time.monotonic() - started
        reason = cluster.node().get("Reason", "")
        latest = json.loads((cluster.verdicts / "latest.json").read_text())
        cluster.say(f"NHC, a hang, -u {on_unknown}", started, f"exit {done.returncode} after {took:.1f} s; node "
                    f"{cluster.node_state()}, reason '{reason}', verdict {latest['status']}")
        assert done.returncode == code and took < nhc_timeout_s, (done.stdout, done.stderr)
        assert latest["status"] == "UNKNOWN" and "deadline" in latest["error"]
        if on_unknown == "drain":
            assert reason.startswith("NHC: rocmcheck DRILL UNKNOWN") and "timed out" not in reason
            cluster.resume()
        else:
            assert "DRAIN" not in cluster.node_state()
