"""docs/recipes/prometheus-rules.yaml and the `--prom` file, checked with Prometheus's own promtool.

The binary comes from Debian's `prometheus` package (`.ci/run` installs it); without it the module
skips. Three checks:

- `promtool check rules` accepts the rule file.
- `promtool check metrics`, Prometheus's linter for the exposition format (naming, units, HELP and
  TYPE), finds nothing in the files of real gate runs: GO, NO-GO, UNKNOWN, drills among them. A
  control shows that the linter reads such a file: the same file without one HELP line is flagged.
- `promtool test rules`: each alert fires, with its labels and annotations, and does not fire on
  a healthy GO node or on a drill. The input series are those real gate runs wrote, read with
  prometheus_client's parser and laid on promtool's clock one file after another, each series with
  the `instance` and `job` a scrape adds and with `up`. A series that a later file no longer has
  gets a staleness marker at that step, as Prometheus writes one when a scraped series goes.

What is not as the runs wrote it, and why:
- `rocmcheck_run_timestamp_seconds` is the step at which its file appears on promtool's clock,
  which starts at 0. The real value is wall-clock time, and `time()` in a test is the test's clock.
- A real NO-GO needs a GPU that fails. Here a probe module written by the test (`one-bad-gpu`,
  loaded with --probes-path) fails on simulated GPU 1. No fault is injected, so the gate writes
  `drill="false"`, as it would for a real GPU's failure.
- The speed drop that fires comes from a drill, `simgpu-slow-matmul:1:10`, which really makes the
  matrix products of simulated GPU 1 ten times as slow. It is written `drill="true"`, which the
  alert rightly leaves out: the case that does not fire has it after another drill's figures. The
  case that fires takes those slowed series with `drill` set to "false", as a real slow GPU's would
  be, after the GO run's, and only them: the drill leaves the other figures at their speed, and two
  runs' figures differ by noise that this test does not judge.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

PROMTOOL = shutil.which("promtool")
RULES = Path(__file__).resolve().parent.parent / "docs" / "recipes" / "prometheus-rules.yaml"
FILE = "rocmcheck.prom"  # the gate's file, as the rules' `textfile` matchers name it
INSTANCE, JOB = "gpu-node-1:9100", "node"  # what a scrape of node_exporter adds
SIM = ["--inject", "simgpu:2", "--device", "all"]
ONE_BAD_GPU = '''import rocmcheck


@rocmcheck.probe("one-bad-gpu", title="fails on GPU 1", targets="a GPU that computes wrong", timeout=30)
def one_bad_gpu(ctx):
    if ctx.device.endswith(":1"):
        ctx.fail("mean of ones is 3.0")
'''
# name -> (the gate's arguments, its exit code): each a real gate run writing FILE in its own folder
RUNS = {
    "go": ([*SIM, "--require", "device-smoke", "--require", "speed"], 0),
    "no_go": ([*SIM, "--probes-path", "{probes}", "--require", "device-smoke", "--require", "one-bad-gpu"], 1),
    "gpu_drill": (["--inject", "simgpu:2,simgpu-wrong-device:1", "--device", "all", "--require", "device-smoke",
                   "--require", "speed", "--keep-going"], 1),  # GPU 1 fails, and the speed probe runs on it
    "slow_drill": (["--inject", "simgpu:2,simgpu-slow-matmul:1:10", "--device", "all", "--require", "device-smoke",
                    "--require", "speed"], 0),
    "unknown": (["--device", "simgpu:3"], 2),  # bad input: the gate cannot assess and writes UNKNOWN
    "unknown_drill": (["--inject", "copy-zeros", "--device", "simgpu:3"], 2),
}

pytestmark = [pytest.mark.children,
              pytest.mark.skipif(PROMTOOL is None, reason="no promtool: Debian's prometheus package is not installed "
                                                          "(.ci/run installs it)")]

Sample = Tuple[str, Dict[str, str], float]


@dataclass
class Run:
    path: Path
    samples: List[Sample]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Dict[str, Run]:
    """The real gate's files, one run each (about 30 s together), shared by every test here."""
    tmp = tmp_path_factory.mktemp("prom-rules")
    probes = tmp / "probes"
    probes.mkdir()
    (probes / "one_bad_gpu.py").write_text(ONE_BAD_GPU)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCHECK_")}
    found = {}
    for name, (args, code) in RUNS.items():
        target = tmp / name / FILE
        target.parent.mkdir()
        args = [a.replace("{probes}", str(probes)) for a in args]
        proc = subprocess.run([sys.executable, "-m", "rocmcheck", "gate", *args, "--out-dir", str(tmp / "reports"),
                               "--prom", str(target)], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == code, (name, proc.stderr[-2000:])
        found[name] = Run(target, [(s.name, dict(s.labels), s.value) for family in
                                   text_string_to_metric_families(target.read_text()) for s in family.samples])
    return found


def promtool(*args: str, stdin: Optional[str] = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(PROMTOOL), *args], input=stdin, capture_output=True, text=True, timeout=60)


# --- promtool check rules, check metrics ---------------------------------------------------------


def test_promtool_checks_the_rule_file():
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in checked.stdout


@pytest.mark.parametrize("name", RUNS)
def test_promtools_linter_finds_nothing_in_a_real_gates_file(runs, name):
    text = runs[name].path.read_text()
    linted = promtool("check", "metrics", stdin=text)
    assert linted.returncode == 0 and linted.stdout + linted.stderr == "", linted.stdout + linted.stderr


def test_promtools_linter_flags_such_a_file_without_its_help(runs):
    """The control: the GO file less its first HELP line is flagged, so the linter reads these files."""
    lines = runs["go"].path.read_text().splitlines(keepends=True)
    first_help = next(i for i, line in enumerate(lines) if line.startswith("# HELP "))
    name = lines[first_help].split()[2]
    linted = promtool("check", "metrics", stdin="".join(lines[:first_help] + lines[first_help + 1:]))
    assert linted.returncode != 0 and f"{name} no help text" in linted.stdout + linted.stderr, linted


# --- promtool test rules -------------------------------------------------------------------------


@dataclass
class Segment:
    """`minutes` of scrapes serving `samples` (None: no rocmcheck file); `up` 0 where node_exporter is down."""
    samples: Optional[Sequence[Sample]]
    minutes: int
    up: bool = True


def selector(name: str, labels: Dict[str, str]) -> str:
    return name + "{" + ",".join(f"{key}={json.dumps(value)}" for key, value in labels.items()) + "}"


def input_series(segments: Sequence[Segment], instance: str = INSTANCE) -> List[Dict[str, str]]:
    """promtool's `input_series`, one value a minute: each segment's series with the labels a scrape
    adds, `up`, and a staleness marker where a series is gone; the run's timestamp is the minute its
    file appears."""
    steps: List[Dict[str, float]] = []
    for segment in segments:
        scrape = {"instance": instance, "job": JOB}
        present = {selector("up", scrape): float(segment.up)}
        for name, labels, value in segment.samples or ():
            if name == "rocmcheck_run_timestamp_seconds":
                value = len(steps) * 60.0
            present[selector(name, {**labels, **scrape})] = value
        steps += [present] * segment.minutes
    keys = list(dict.fromkeys(key for step in steps for key in step))
    series = []
    for key in keys:
        tokens = [repr(step[key]) if key in step else "stale" if i and key in steps[i - 1] else "_"
                  for i, step in enumerate(steps)]
        values = []
        i = 0
        while i < len(tokens):
            n = 1
            while i + n < len(tokens) and tokens[i + n] == tokens[i] and tokens[i] != "stale":
                n += 1
            values.append(tokens[i] if n == 1 else f"_x{n}" if tokens[i] == "_" else f"{tokens[i]}x{n - 1}")
            i += n
        series.append({"series": key, "values": " ".join(values)})
    return series


def alerts() -> List[str]:
    return re.findall(r"^\s*- alert: (\w+)$", RULES.read_text(), re.M)


def fired(labels: Dict[str, str], annotations: Dict[str, str]) -> Dict[str, Dict[str, str]]:
    return {"exp_labels": {**labels, "instance": INSTANCE, "job": JOB}, "exp_annotations": annotations}


def group(name: str, series: List[Dict[str, str]], alertname: str,
          checks: Sequence[Tuple[str, List[Dict[str, Dict[str, str]]]]]) -> dict:
    return {"name": name, "interval": "1m", "input_series": series,
            "alert_rule_test": [{"eval_time": at, "alertname": alertname, "exp_alerts": expected}
                                for at, expected in checks]}


def only(run: Run, **keep: str) -> List[Sample]:
    """The speed series of `run` whose labels match `keep` (regular expressions)."""
    return [s for s in run.samples if s[0].startswith("rocmcheck_speed_")
            and all(re.fullmatch(pattern, s[1][key]) for key, pattern in keep.items())]


def as_real(samples: Sequence[Sample]) -> List[Sample]:
    return [(name, {**labels, "drill": "false"}, value) for name, labels, value in samples]


def cases(runs: Dict[str, Run], alert: str) -> List[dict]:
    """Each alert's promtool groups: the first fires, the others do not."""
    go, no_go, gpu_drill = runs["go"].samples, runs["no_go"].samples, runs["gpu_drill"].samples
    unknown, unknown_drill = runs["unknown"].samples, runs["unknown_drill"].samples

    def healthy(minutes: int, *at: str) -> dict:
        return group("a healthy GO node", input_series([Segment(go, minutes)]), alert, [(t, []) for t in at])

    common = {"drill": "false", "textfile": FILE}
    if alert == "RocmcheckNodeNoGo":
        return [
            group("GO, then a real NO-GO", input_series([Segment(go, 30), Segment(no_go, 60)]), alert, [
                ("29m", []),
                ("31m", [fired({"status": "NO-GO", **common, "severity": "critical"}, {
                    "summary": f"rocmcheck: {INSTANCE} is NO-GO",
                    "description": f"The last rocmcheck run on {INSTANCE} ({FILE}) found a failure, so the node "
                                   "should not take training work. rocmcheck_variant_ok == 0 names each failing "
                                   "probe and device; the run's JSON report has the messages."})])]),
            healthy(90, "45m", "89m"),
            group("GO, then a drill's NO-GO", input_series([Segment(go, 30), Segment(gpu_drill, 60)]), alert,
                  [("45m", [])])]
    if alert == "RocmcheckGPUFailing":
        gpu = {"device": "simgpu:1", "pci_address": "0000:11:00.0", "uuid": "simgpu-1", "arch": "simgpu",
               "model": "simulated GPU", "status": "fail"}
        return [
            group("GO, then GPU 1 fails", input_series([Segment(go, 30), Segment(no_go, 60)]), alert, [
                ("29m", []),
                ("45m", [fired({**gpu, **common, "severity": "warning"}, {
                    "summary": f"rocmcheck: GPU simgpu:1 (simulated GPU) on {INSTANCE} failed",
                    "description": f"simgpu:1 on {INSTANCE}, a simulated GPU (simgpu) at PCI 0000:11:00.0, UUID "
                                   f"simgpu-1, has a probe verdict of fail in {FILE}."})])]),
            healthy(90, "45m"),
            group("GO, then a drill fails GPU 1", input_series([Segment(go, 30), Segment(gpu_drill, 60)]), alert,
                  [("45m", [])])]
    if alert == "RocmcheckNodeUnknown":
        (error,) = [labels["error"] for name, labels, _ in unknown if name == "rocmcheck_run_info"]
        return [
            group("GO, then UNKNOWN for 2 h", input_series([Segment(go, 30), Segment(unknown, 120)]), alert, [
                ("85m", []),  # UNKNOWN for 55 minutes: pending
                ("95m", [fired({"status": "UNKNOWN", **common, "severity": "warning"}, {
                    "summary": f"rocmcheck could not assess {INSTANCE} for an hour",
                    "description": f"{FILE} on {INSTANCE} has said UNKNOWN for an hour: the gate was interrupted "
                                   f"or could not start. Its error: {error}"})])]),
            healthy(150, "95m", "149m"),
            group("one UNKNOWN run, then GO", input_series([Segment(go, 30), Segment(unknown, 30), Segment(go, 60)]),
                  alert, [("59m", []), ("100m", [])]),
            group("GO, then a drill's UNKNOWN for 2 h",
                  input_series([Segment(go, 30), Segment(unknown_drill, 120)]), alert, [("95m", []), ("149m", [])])]
    if alert == "RocmcheckGateNotRunning":
        every_30_minutes = [Segment(run, 30) for run in (go, gpu_drill, go, no_go, go, unknown_drill, go, go, go, go)]
        return [
            group("GO, a drill, then no run", input_series([Segment(go, 30), Segment(gpu_drill, 240)]), alert, [
                ("200m", []),  # the drill's file is 2 h 50 min old
                ("225m", [fired({"textfile": FILE, "severity": "warning"}, {
                    "summary": f"rocmcheck's gate has not run on {INSTANCE} for 3h 15m 0s",
                    "description": f"{FILE} on {INSTANCE} was last written 3h 15m 0s ago, so its verdict is old. "
                                   "Check the gate's schedule (node-problem-detector, cron, the prolog)."})])]),
            group("a run every 30 minutes, drills among them", input_series(every_30_minutes), alert,
                  [("225m", []), ("299m", [])])]
    if alert == "RocmcheckGateFileGone":
        gone = input_series([Segment(go, 60), Segment(None, 120)])
        kept = input_series([Segment(go, 180)], instance="gpu-node-2:9100")  # another node keeps its file
        never = input_series([Segment(None, 180)], instance="cpu-node-3:9100")  # node_exporter, no gate
        return [
            group("the file goes, node_exporter answers", gone + kept + never, alert, [
                ("70m", []),  # gone for 10 minutes: pending
                ("80m", [fired({"severity": "warning"}, {
                    "summary": f"rocmcheck's gate file is gone from {INSTANCE}",
                    "description": f"node_exporter on {INSTANCE} served rocmcheck.prom during the last day and "
                                   "serves it no more. The node has no rocmcheck verdict."})])]),
            healthy(180, "100m"),
            group("node_exporter down", input_series([Segment(go, 60), Segment(None, 120, up=False)]), alert,
                  [("100m", [])]),
            group("a drill rewrites the file", input_series([Segment(go, 60), Segment(gpu_drill, 120)]), alert,
                  [("100m", [])])]
    if alert == "RocmcheckSpeedDrop":
        slowed = dict(device="simgpu:1", figure="matmul-.*")
        before, after = only(runs["go"], **slowed), as_real(only(runs["slow_drill"], **slowed))
        assert before and {s[1]["figure"] for s in before} == {s[1]["figure"] for s in after}
        was = {labels["figure"]: value for _, labels, value in before}
        drops = []
        for _, labels, value in after:
            share = "%.4g%%" % (value / was[labels["figure"]] * 100)  # Prometheus's humanizePercentage
            drops.append(fired({**labels, "severity": "warning"}, {
                "summary": f"rocmcheck: {labels['figure']} on {INSTANCE} simgpu:1 dropped",
                "description": f"{labels['figure']} (speed) on simgpu:1 of {INSTANCE} is {share} of its median "
                               "over the last day."}))
        return [
            group("GPU 1's products ten times as slow", input_series([Segment(before, 180), Segment(after, 120)]),
                  alert, [("230m", []), ("250m", drops)]),  # slow for 50 minutes (pending), then 70
            healthy(300, "250m", "299m"),
            group("a drill, then the slowing drill as written",
                  input_series([Segment(gpu_drill, 180), Segment(runs["slow_drill"].samples, 120)]), alert,
                  [("250m", []), ("299m", [])])]
    raise AssertionError(f"no test cases for {alert}")


def test_every_alert_has_a_case_that_fires_and_one_that_does_not(runs):
    names = alerts()
    assert names == ["RocmcheckNodeNoGo", "RocmcheckGPUFailing", "RocmcheckNodeUnknown", "RocmcheckGateNotRunning",
                     "RocmcheckGateFileGone", "RocmcheckSpeedDrop"]
    for name in names:
        expected = [[bool(t["exp_alerts"]) for t in g["alert_rule_test"]] for g in cases(runs, name)]
        assert any(expected[0]) and all(not any(e) for e in expected[1:]), (name, expected)


@pytest.mark.parametrize("alert", alerts())
def test_promtool_unit_tests_the_alert(runs, alert, tmp_path):
    """promtool fails the run where an alert fires that is not expected, or does not fire with the
    expected labels and annotations, at any `eval_time` of its groups."""
    unit = tmp_path / f"{alert}.test.json"  # JSON is YAML
    unit.write_text(json.dumps({"rule_files": [str(RULES)], "evaluation_interval": "1m",
                                "tests": cases(runs, alert)}, indent=1))
    tested = promtool("test", "rules", str(unit))
    assert tested.returncode == 0, tested.stdout[-6000:] + tested.stderr[-2000:]
    assert "SUCCESS" in tested.stdout
