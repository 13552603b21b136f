"""The real node-problem-detector runs `rocmcheck gate --npd` as docs/recipes/npd-rocmcheck.json
configures it (issue 34).

It runs where ROCMCHECK_NPD names an NPD binary (`ROCMCHECK_NPD=... make npd-test`;
docs/deployment.md says how to build v0.8.19 from its source). Elsewhere (`make test`, CI) it
skips: NPD is in no package registry this project uses. NPD runs standalone, without Kubernetes
(`--enable-k8s-exporter=false`), with its Prometheus endpoint on a loopback port. The condition it
derives is read from its log: its `New status generated` line holds the node condition that
the Kubernetes exporter would write into the node's status. Its `problem_gauge` and
`problem_counter` come from /metrics.

One NPD runs the recipe's rule with the recipe's arguments. Its folders are moved under a
temporary folder, `--killed-after` is set to the test's timeout (the recipe keeps them equal), and
`--device cpu --probe device-smoke` is added (the CPU self-test, one probe). The rule's path is a
wrapper that reads the case from a file and execs this checkout's rocmcheck with that case's extra
arguments. So the condition changes under one NPD as it would on a node: GO, a drill's NO-GO, bad
input (exit 2), GO, a hang no deadline reaches (NPD's timeout), a hang the gate's own deadline
reaches, and GO again. Each case prints what NPD said. A second test runs the committed
recipe unchanged, in a private mount namespace that holds its /opt and /var/lib paths (root only).
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parent.parent
RECIPE = REPO / "docs" / "recipes" / "npd-rocmcheck.json"
NPD = os.environ.get("ROCMCHECK_NPD", "")
TIMEOUT_S = 30  # NPD's plugin timeout here (the recipe's 5 minutes), and so the gate's --killed-after
NARROW = ["--device", "cpu", "--probe", "device-smoke"]
WAIT_S = TIMEOUT_S + 90  # the longest wait for one result: a run before it, then its own
TAG = "NPD_TEST_TOKEN"  # in NPD's environment, so in every plugin process: found and killed at the end
RUN = "NPD_TEST_RUN"  # the wrapper's pid, in each run's processes: which run a process belongs to
STUCK = ("import signal, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
         "time.sleep(600)\n")  # a probe module whose import never ends: no deadline of the gate reaches it

pytestmark = [pytest.mark.children,
              pytest.mark.skipif(not NPD, reason="ROCMCHECK_NPD names no node-problem-detector binary "
                                                 "(ROCMCHECK_NPD=... make npd-test; docs/deployment.md says how "
                                                 "to build one)"),
              pytest.mark.skipif(sys.platform != "linux", reason="NPD's custom plugins run on Linux here")]

RECEIVED = re.compile(r"Receive new plugin result for .*?: \{Rule:0x[0-9a-f]+ ExitStatus:(\d+) Message:(.*)\}$")
STATUS = re.compile(r"New status generated: &\{.* Conditions:\[\{Type:(\w+) Status:(\w+) Transition:.*? "
                    r"Reason:(\w+) Message:(.*)\}\]\}$")
DURATION = re.compile(r"Rule: .* Duration: (\S+)$")


class Result:
    """One plugin run as NPD's log tells it: exit status, message, how long, and the condition after it."""

    def __init__(self, exit_status: int, message: str):
        self.exit_status, self.message = exit_status, message
        self.condition: Optional[Tuple[str, str, str, str]] = None  # type, status, reason, message
        self.duration_s: Optional[float] = None


def go_seconds(text: str) -> float:
    """Go's Duration.String ("2.7s", "597.3ms", "1m0.5s") in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)(ms|µs|us|ns|h|m|s)", text))


def read_log(log: Path) -> List[Result]:
    """Every plugin result in NPD's log, in order, each with the condition NPD made of it."""
    results: List[Result] = []
    durations: List[float] = []
    for line in log.read_text(errors="replace").splitlines():
        if (found := RECEIVED.search(line)) is not None:
            results.append(Result(int(found.group(1)), found.group(2)))
        elif (found := STATUS.search(line)) is not None and results:
            results[-1].condition = (found.group(1), found.group(2), found.group(3), found.group(4))
        elif (found := DURATION.search(line)) is not None:
            durations.append(go_seconds(found.group(1)))
    for result, seconds in zip(results, durations):  # one "Rule: ... Duration" line per run, in the same order
        result.duration_s = seconds
    return results


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tagged(token: str, run: Optional[int] = None) -> List[psutil.Process]:
    """The live processes NPD's plugin runs started (all, or those of the run whose wrapper had pid `run`)."""
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if env.get(TAG) == token and (run is None or env.get(RUN) == str(run)) and \
                    proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def npd_env(token: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCHECK_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env[TAG] = token
    return env


class Npd:
    """NPD with one custom plugin config, standalone, its Prometheus endpoint on 127.0.0.1."""

    def __init__(self, config: Path, log: Path, prefix: Tuple[str, ...] = ()):
        self.log, self.port, self.token = log, free_port(), secrets.token_hex(6)
        self.started = time.monotonic()
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([*prefix, NPD, "--enable-k8s-exporter=false",
                                          "--hostname-override=rocmcheck-test-node",
                                          f"--config.custom-plugin-monitor={config}", "--prometheus-address=127.0.0.1",
                                          f"--prometheus-port={self.port}", "--port=0", "--logtostderr", "--v=3"],
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=npd_env(self.token), start_new_session=True)

    def results(self) -> List[Result]:
        return read_log(self.log)

    def wait_for(self, index: int, limit_s: float = WAIT_S) -> Result:
        """The `index`-th plugin result (from 0), once NPD has made its condition."""
        end = time.monotonic() + limit_s
        while time.monotonic() < end:
            assert self.proc.poll() is None, f"NPD exited {self.proc.returncode}: {self.log.read_text()[-3000:]}"
            results = self.results()
            if len(results) > index and results[index].condition is not None:
                return results[index]
            time.sleep(0.2)
        raise AssertionError(f"no plugin result {index} from NPD in {limit_s:.0f} s: {self.log.read_text()[-3000:]}")

    def metrics(self) -> Dict[str, Dict[Tuple[Tuple[str, str], ...], float]]:
        """problem_gauge and problem_counter: metric -> {sorted labels: value}."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        found: Dict[str, Dict[Tuple[Tuple[str, str], ...], float]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.startswith(("problem_gauge", "problem_counter")):
                    name = "problem_counter" if sample.name.startswith("problem_counter") else "problem_gauge"
                    found.setdefault(name, {})[tuple(sorted(sample.labels.items()))] = sample.value
        return found

    def stop(self) -> None:
        """NPD, then every plugin process it left (NPD does not end a running plugin when it stops)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for proc in tagged(self.token):
            try:
                os.killpg(proc.pid, signal.SIGKILL) if os.getpgid(proc.pid) == proc.pid else proc.kill()
            except (ProcessLookupError, psutil.NoSuchProcess):
                pass


def recipe_config(path: Path, folder: Path) -> dict:
    """The committed recipe for this test: its rule runs `path`, its folders under `folder`, NPD's
    timeout TIMEOUT_S (and --killed-after with it), a run every second, on the CPU with one probe."""
    config = json.loads(RECIPE.read_text())
    (rule,) = config["rules"]
    args = [a.replace("/var/lib/rocmcheck", str(folder)) for a in rule["args"]]
    args[args.index("--killed-after") + 1] = str(TIMEOUT_S)
    rule.update(path=str(path), args=[*args, *NARROW], timeout=f"{TIMEOUT_S}s")
    config["pluginConfig"].update(invoke_interval="1s", timeout=f"{TIMEOUT_S}s")
    return config


def prom_status(path: Path) -> Tuple[str, Dict[str, str]]:
    """The node status a --prom file says, and its run_info labels."""
    status, info = "", {}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            if sample.name == "rocmcheck_node_status" and sample.value == 1:
                status = sample.labels["status"]
            elif sample.name == "rocmcheck_run_info":
                info = dict(sample.labels)
    return status, info


@pytest.fixture
def npd_binary() -> str:
    if not (os.path.isfile(NPD) and os.access(NPD, os.X_OK)):
        pytest.fail(f"ROCMCHECK_NPD={NPD} is not an executable file")
    return NPD


@pytest.fixture
def node(tmp_path, npd_binary) -> Iterator[Tuple[Npd, Path]]:
    """NPD over the recipe, its rule a wrapper that execs this checkout's rocmcheck with the case's
    extra arguments (the file `case`), each run's case and pid appended to `runs`."""
    for folder in ("reports", "textfile", "stuck"):
        (tmp_path / folder).mkdir()
    (tmp_path / "stuck" / "stuck_probe.py").write_text(STUCK)
    wrapper = tmp_path / "rocmcheck"
    wrapper.write_text(f'#!/bin/sh\n. "{tmp_path}/case"\necho "$CASE $$" >> "{tmp_path}/runs"\n{RUN}=$$; export {RUN}\n'
                       f'exec {shlex.quote(sys.executable)} -m rocmcheck "$@"\n')
    wrapper.chmod(0o755)
    set_case(tmp_path, "go")
    config = tmp_path / "npd-rocmcheck.json"
    config.write_text(json.dumps(recipe_config(wrapper, tmp_path), indent=2))
    npd = Npd(config, tmp_path / "npd.log")
    try:
        yield npd, tmp_path
    finally:
        npd.stop()


def set_case(folder: Path, case: str, *extra: str) -> None:
    """The case the next plugin runs take: its name and extra arguments (written whole, then renamed)."""
    text = f"CASE={case}\nset -- \"$@\" {' '.join(shlex.quote(a) for a in extra)}\n"
    (folder / "case.tmp").write_text(text)
    os.replace(folder / "case.tmp", folder / "case")


def first_run(folder: Path, case: str, limit_s: float = WAIT_S) -> Tuple[int, int]:
    """(index, pid) of the first plugin run that took `case` (NPD runs one at a time, in order)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        runs = (folder / "runs").read_text().split("\n") if (folder / "runs").exists() else []
        for index, line in enumerate(r for r in runs if r):
            name, pid = line.split()
            if name == case:
                return index, int(pid)
        time.sleep(0.2)
    raise AssertionError(f"NPD started no run of case {case} in {limit_s:.0f} s")


def gauge(metrics, reason: str) -> float:
    return metrics["problem_gauge"][(("reason", reason), ("type", "RocmcheckGPUNotReady"))]


def test_npd_derives_the_condition_from_each_outcome(node):
    npd, folder = node
    config = json.loads(RECIPE.read_text())
    default = config["conditions"][0]
    (rule,) = config["rules"]
    ctype, go_reason, go_message, nogo_reason = default["type"], default["reason"], default["message"], rule["reason"]
    prom = folder / "textfile" / "rocmcheck.prom"
    at_start: Dict[str, str] = {}  # the --prom file when each case's run started

    def case(name: str, *extra: str, then: Tuple[str, ...] = ()) -> Tuple[Result, dict, int]:
        """The first run of case `name`; `then`: the case the runs after it take (NPD starts the
        next run at once, and a second run of a hang would cost another timeout)."""
        set_case(folder, name, *extra)
        index, pid = first_run(folder, name)
        at_start[name] = prom.read_text() if prom.exists() else ""  # one plugin at a time: no other writes it now
        if then:
            set_case(folder, *then)
        result = npd.wait_for(index)
        metrics = npd.metrics()
        print(f"\nNPD, case {name}: plugin exit {result.exit_status} after {result.duration_s:.1f} s, message "
              f"{result.message!r}; condition {result.condition}; "
              f"problem_gauge NoGo {gauge(metrics, nogo_reason):g}, GO {gauge(metrics, go_reason):g}; "
              f"problem_counter {metrics['problem_counter']}")
        return result, metrics, pid

    result, metrics, _ = case("go")
    assert (result.exit_status, result.message) == (0, "rocmcheck GO: 1 pass")
    assert result.condition == (ctype, "False", go_reason, go_message)
    assert gauge(metrics, nogo_reason) == 0 and prom_status(prom)[0] == "GO"

    result, metrics, _ = case("no-go", "--inject", "copy-zeros")
    message = "rocmcheck DRILL NO-GO (copy-zeros): device-smoke"
    assert (result.exit_status, result.message) == (1, message)
    assert result.condition == (ctype, "True", nogo_reason, message)
    assert gauge(metrics, nogo_reason) == 1 and metrics["problem_counter"][(("reason", nogo_reason),)] == 1
    assert prom_status(prom)[0] == "NO-GO" and prom_status(prom)[1]["drill"] == "true"

    result, metrics, _ = case("bad-input", "--device", "simgpu:3")
    assert result.exit_status == 2 and result.message.startswith("rocmcheck UNKNOWN: error: --device simgpu:3 names")
    assert len(result.message) == 80  # NPD's max_output_length: the line as the gate cut it
    # Unknown keeps the default condition's reason (custom_plugin_monitor.go); the message says UNKNOWN
    assert result.condition == (ctype, "Unknown", go_reason, result.message)
    assert gauge(metrics, nogo_reason) == 0 and gauge(metrics, go_reason) == 0  # Unknown is no problem to NPD
    assert prom_status(prom)[0] == "UNKNOWN" and "names simulated GPUs" in prom_status(prom)[1]["error"]
    assert "rocmcheck: error: --device simgpu:3 names simulated GPUs" in npd.log.read_text()  # stderr: logged

    result, _, _ = case("go-again")
    assert result.condition == (ctype, "False", go_reason, go_message)

    hang = ("hang-deadline", "--inject", "hang@device-smoke", "--timeout", "300")
    result, metrics, pid = case("hang-in-import", "--probes-path", str(folder / "stuck"), then=hang)
    assert result.exit_status == 2  # NPD's Unknown
    said = f'Timeout when running plugin "{folder / "rocmcheck"}": state - signal: killed. output - ""'
    assert result.message == said[:80]  # NPD's own line, cut at max_output_length too
    assert result.condition == (ctype, "Unknown", go_reason, result.message)
    assert result.duration_s is not None and TIMEOUT_S <= result.duration_s < TIMEOUT_S + 5
    end = time.monotonic() + 10
    while (left := tagged(npd.token, pid)) and time.monotonic() < end:
        time.sleep(0.2)
    assert prom.read_text() == at_start["hang-in-import"] and prom_status(prom)[0] == "GO"  # the last GO stands

    timed_out = result.message
    result, metrics, _ = case(*hang)
    assert result.exit_status == 2
    assert result.message.startswith("rocmcheck DRILL UNKNOWN (hang@device-smoke): interrupted by the --deadline")
    # Unknown after Unknown changes nothing: NPD updates a condition's message while its status stays
    # only where it is True (enable_message_change_based_condition_update), so the timeout's message stays
    assert result.condition == (ctype, "Unknown", go_reason, timed_out)
    assert result.duration_s is not None and result.duration_s < TIMEOUT_S  # before NPD's kill
    assert prom_status(prom)[0] == "UNKNOWN" and prom_status(prom)[1]["drill"] == "true"

    result, metrics, _ = case("go-at-last")
    assert result.condition == (ctype, "False", go_reason, go_message) and gauge(metrics, nogo_reason) == 0
    assert metrics["problem_counter"][(("reason", nogo_reason),)] == 1  # counted when the condition became True
    assert not left, f"processes of the timed-out plugin run outlived NPD's kill: {left}"
    print(f"\nNPD: {len(npd.results())} plugin runs in {time.monotonic() - npd.started:.0f} s")


def test_the_committed_recipe_passes_npds_validation_and_runs(tmp_path, npd_binary):
    """NPD refuses a config it cannot run at its start (here: a rule timeout above the global
    one). The recipe as committed is taken, and its first run is a verdict. Its rule's path
    and folders live in a private mount namespace (tmpfs on /opt and /var/lib), so this test
    needs root and unshare."""
    config = json.loads(RECIPE.read_text())
    (rule,) = config["rules"]
    bad = json.loads(RECIPE.read_text())
    bad["rules"][0].update(path=sys.executable, timeout="6m")
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    refused = subprocess.run([npd_binary, "--enable-k8s-exporter=false", "--hostname-override=n", "--port=0",
                              "--prometheus-port=0", f"--config.custom-plugin-monitor={tmp_path / 'bad.json'}"],
                             capture_output=True, text=True, timeout=30, env=npd_env("refused"))
    assert refused.returncode != 0 and "plugin timeout is greater than global timeout" in refused.stderr

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("the committed recipe's paths need root and unshare (a private mount namespace)")
    path, out_dir, textfile = Path(rule["path"]), Path(rule["args"][rule["args"].index("--out-dir") + 1]), \
        Path(rule["args"][rule["args"].index("--prom") + 1])
    wrapper = tmp_path / "rocmcheck"  # this checkout's rocmcheck; the textfile copied out of the namespace
    wrapper.write_text(f'#!/bin/sh\n{shlex.quote(sys.executable)} -m rocmcheck "$@"\nrc=$?\n'
                       f'cp {shlex.quote(str(textfile))} {shlex.quote(str(tmp_path))}/ 2>/dev/null\nexit $rc\n')
    wrapper.chmod(0o755)
    setup = (f"mount -t tmpfs tmpfs /opt && mount -t tmpfs tmpfs /var/lib && mkdir -p {path.parent} {out_dir} "
             f"{textfile.parent} && cp {shlex.quote(str(wrapper))} {path} && exec \"$@\"")
    npd = Npd(RECIPE, tmp_path / "npd.log", prefix=("unshare", "-m", "--propagation", "private", "sh", "-c", setup,
                                                   "sh"))
    try:
        result = npd.wait_for(0, limit_s=go_seconds(rule["timeout"]) + 60)
    finally:
        npd.stop()
    log = npd.log.read_text()
    assert "Finish parsing custom plugin monitor config file" in log  # past Validate
    print(f"\nNPD, the committed recipe: plugin exit {result.exit_status} after {result.duration_s:.1f} s, "
          f"message {result.message!r}; condition {result.condition}")
    assert result.message.startswith("rocmcheck GO: " if result.exit_status == 0 else "rocmcheck NO-GO: ")
    assert result.condition is not None and result.condition[1] == {0: "False", 1: "True"}[result.exit_status]
    assert prom_status(tmp_path / textfile.name)[0] == {0: "GO", 1: "NO-GO"}[result.exit_status]
