"""`rocmcheck gate --npd` keeps node-problem-detector's custom plugin protocol, and the recipes
(docs/recipes/npd-rocmcheck.json, k8s-npd-daemonset.yaml, k8s-npd-taint.yaml) keep NPD's
configuration rules (issue 34).

The protocol, as NPD's own documentation and source state it (kubernetes/node-problem-detector,
tag v0.8.19, the release its deployment/node-problem-detector.yaml runs):

- its custom plugin monitor documentation: "`max_output_length`: The maximum standard output size from
  custom plugins that NPD will be cut and use for condition status message." Its default is 80
  (pkg/custompluginmonitor/types/config.go: `defaultMaxOutputLength = 80`); plugin.go:
  `output = strings.TrimSpace(output)` then `if len(output) > MaxOutputLength { output =
  output[:MaxOutputLength] }` (bytes, not characters), having read at most
  `maxCustomPluginBufferBytes = 1024 * 4` bytes of stdout; stderr is only logged.
- plugin.go: `switch exitCode { case 0: return cpmtypes.OK ...; case 1: return cpmtypes.NonOK
  ...; default: return cpmtypes.Unknown ...}`; a plugin past its timeout is killed
  (`syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)`, its process group) and is Unknown.
- custom_plugin_monitor.go, `toConditionStatus`: OK -> condition False, NonOK -> True, else
  Unknown; a permanent rule sets its condition's reason to the rule's and the message to the
  plugin's output ("during unhealthy time message comes from stdout of the check", the same
  documentation).
- types/config.go, `Validate`: the plugin is "custom"; "plugin timeout is greater than global
  timeout" is an error; "rule path %q does not exist"; "Permanent problem %s does not have
  preset default condition"; durations are Go's (`time.ParseDuration`).

https://github.com/kubernetes/node-problem-detector/blob/v0.8.19/pkg/custompluginmonitor/plugin/plugin.go
https://github.com/kubernetes/node-problem-detector/blob/v0.8.19/pkg/custompluginmonitor/types/config.go
https://github.com/kubernetes/node-problem-detector/blob/v0.8.19/docs (custom_plugin_monitor.md)

NPD itself is not in the package registries this project uses (no PyPI or Debian package), so
these tests run the command as NPD's plugin runner does and read its output by NPD's rules. The
real NPD v0.8.19, built from its source, runs the recipe in tests/test_npd_real.py
(`ROCMCHECK_NPD=... make npd-test`).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional, Tuple

import pytest

from rocmcheck.cli import build_parser
from rocmcheck.outputs.node import NPD_OUTPUT_LIMIT
from rocmcheck.records import SCHEMA, SCHEMA_VERSION

RECIPES = Path(__file__).resolve().parent.parent / "docs" / "recipes"
FAKE = str(Path(__file__).parent / "fake_probes")
NPD_STDOUT_READ = 4096  # maxCustomPluginBufferBytes
CONDITION = {0: "False", 1: "True"}  # toConditionStatus; any other exit status: "Unknown"


def npd_reads(exit_code: int, stdout: bytes, max_output_length: int = 80) -> Tuple[str, str]:
    """What NPD makes of a plugin run: (condition status, message), by plugin.go's rules."""
    output = stdout[:NPD_STDOUT_READ].decode("utf-8", "replace").strip()  # strings.TrimSpace
    message = output.encode()[:max_output_length].decode("utf-8", "replace")
    return CONDITION.get(exit_code, "Unknown"), message


def gate_report(bad: bool = False, partial: bool = False, inject: str = "") -> dict:
    """device-smoke and gemm on cuda:0 and cuda:1; with `bad`, device-smoke fails on cuda:1."""
    verdicts = [{"probe": p, "variant": p, "status": "fail" if bad and (p, i) == ("device-smoke", 1) else "pass",
                 "message": "ok", "device": {"name": f"cuda:{i}", "index": i, "arch": "gfx942"}}
                for p in ("device-smoke", "gemm") for i in (0, 1)]
    run = {"id": "n", "command": "gate", "device": "cuda:0", "inject": inject, "partial": partial,
           "interrupted": "gemm" if partial else None, "counts": {"pass": 3, "fail": 1} if bad else {"pass": 4}}
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "run": run, "verdicts": verdicts}


@pytest.mark.parametrize("data, exit_code, condition, message", [
    (gate_report(), 0, "False", "rocmcheck GO: 4 pass"),
    (gate_report(bad=True), 1, "True", "rocmcheck NO-GO: device-smoke on cuda:1"),
    (gate_report(partial=True), 2, "Unknown", "rocmcheck UNKNOWN: interrupted during gemm"),
    (gate_report(bad=True, inject="copy-zeros"), 1, "True",
     "rocmcheck DRILL NO-GO (copy-zeros): device-smoke on cuda:1"),
])
def test_the_gate_speaks_npds_protocol(made_run, tmp_path, data, exit_code, condition, message):
    inject = ["--inject", data["run"]["inject"]] if data["run"]["inject"] else []
    code, out, err = made_run(data, "gate", "--npd", "--device", "cpu", "--out-dir", str(tmp_path), *inject)
    assert code == exit_code
    assert out.count("\n") == 1 and len(out.encode()) <= NPD_OUTPUT_LIMIT + 1  # one line, whole under the cut
    assert re.fullmatch(r"[ -~]+\n", out)  # printable ASCII: a cut can never split a character
    assert npd_reads(code, out.encode()) == (condition, message)
    assert "variants, isolation" in err  # the lines for people went to stderr


def test_a_long_verdict_is_cut_by_us_and_keeps_its_status(made_run, tmp_path):
    data = gate_report(bad=True)
    for v in data["verdicts"]:
        v.update(variant="a-very-long-probe-name[" + "x" * 120 + "]", status="fail")
    code, out, _ = made_run(data, "gate", "--npd", "--device", "cpu", "--out-dir", str(tmp_path))
    status, message = npd_reads(code, out.encode(), max_output_length=40)  # an admin's shorter cut
    assert len(out.rstrip("\n")) == NPD_OUTPUT_LIMIT and out.rstrip().endswith("...")
    assert status == "True" and message.startswith("rocmcheck NO-GO: a-very-long-probe-name")


def test_bad_input_is_unknown_with_why(capsys):
    from rocmcheck.cli import main

    code = main(["gate", "--npd", "--device", "simgpu:3"])
    out = capsys.readouterr().out
    status, message = npd_reads(code, out.encode())
    assert (code, status) == (2, "Unknown") and out.count("\n") == 1
    assert message.startswith("rocmcheck UNKNOWN: error: --device simgpu:3 names simulated GPUs")


def test_npd_and_a_json_document_cannot_share_stdout(capsys):
    from rocmcheck.cli import main

    assert main(["gate", "--npd", "--json", "-", "--device", "cpu"]) == 2
    out, err = capsys.readouterr()
    assert "--npd and --json - both write to stdout" in err


@pytest.mark.children
@pytest.mark.parametrize("extra, exit_code, condition", [
    (["--require", "fake-pass"], 0, "False"), (["--require", "fake-fail"], 1, "True")])
def test_npd_runs_the_gate_as_its_plugin_runner_does(tmp_path, extra, exit_code, condition):
    """As plugin.go: the path and args, a process group of its own, stdout and stderr piped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCHECK_")}
    proc = subprocess.run([sys.executable, "-m", "rocmcheck", "gate", "--npd", "--device", "cpu", "--probes-path", FAKE,
                           "--out-dir", str(tmp_path), *extra], capture_output=True, start_new_session=True,
                          env=env, timeout=120)
    status, message = npd_reads(proc.returncode, proc.stdout)
    assert (proc.returncode, status) == (exit_code, condition), proc.stderr.decode()[-2000:]
    assert proc.stdout.count(b"\n") == 1 and message == proc.stdout.decode().strip()
    assert message.startswith("rocmcheck GO" if exit_code == 0 else "rocmcheck NO-GO: fake-fail")


# --- the recipes keep NPD's configuration rules ---------------------------------------------------


def go_duration(text: str) -> float:
    """Seconds of a Go duration ("30s", "5m", "1h30m"), as time.ParseDuration reads the units used here."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|m|s|ms)", text)
    assert parts and "".join(n + u for n, u in parts) == text, f"not a Go duration: {text}"
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[u] for n, u in parts)


def test_the_plugin_config_is_valid_for_npd():
    config = json.loads((RECIPES / "npd-rocmcheck.json").read_text())
    assert config["plugin"] == "custom"
    global_timeout = go_duration(config["pluginConfig"]["timeout"])
    assert go_duration(config["pluginConfig"]["invoke_interval"]) > 0
    assert config["pluginConfig"]["max_output_length"] >= NPD_OUTPUT_LIMIT  # our whole line is kept
    conditions = {c["type"]: c for c in config["conditions"]}
    (rule,) = config["rules"]
    assert rule["type"] == "permanent" and rule["condition"] in conditions  # "preset default condition"
    assert go_duration(rule["timeout"]) <= global_timeout  # else: "plugin timeout is greater than global timeout"
    assert os.path.isabs(rule["path"]) and Path(rule["path"]).name == "rocmcheck"
    args = build_parser().parse_args(rule["args"])
    assert args.command == "gate" and args.npd and args.output_prom is not None
    # NPD kills the plugin's process group with SIGKILL at the timeout (plugin.go): the gate ends itself
    # before that, with its own UNKNOWN line, verdict and --prom file (the real NPD: tests/test_npd_real.py)
    assert args.killed_after == go_duration(rule["timeout"])


def test_the_daemonset_mounts_what_the_config_names():
    config = json.loads((RECIPES / "npd-rocmcheck.json").read_text())
    (rule,) = config["rules"]
    daemonset = (RECIPES / "k8s-npd-daemonset.yaml").read_text()
    assert "--config.custom-plugin-monitor=/config/npd-rocmcheck.json" in daemonset
    assert "create configmap rocmcheck-npd-config --from-file=docs/recipes/npd-rocmcheck.json" in daemonset
    assert "configMap: {name: rocmcheck-npd-config}" in daemonset
    args = build_parser().parse_args(rule["args"])
    for folder in (args.output_prom.parent, args.out_dir):  # --prom's folder must exist: a volume of its own
        assert f"mountPath: {folder}}}" in daemonset
    venv = Path(rule["path"]).parent.parent  # the image installs rocmcheck where the rule runs it
    assert f"venv --system-site-packages {venv} && {venv}/bin/pip install" in \
        (RECIPES / "npd-rocmcheck.Dockerfile").read_text()


def taint_script() -> str:
    """The shell script of k8s-npd-taint.yaml's CronJob (the block under `- |`)."""
    lines = (RECIPES / "k8s-npd-taint.yaml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "- |") + 1
    indent = len(lines[start]) - len(lines[start].lstrip())
    return "\n".join(line[indent:] for line in lines[start:] if line.strip()) + "\n"


@pytest.mark.children
@pytest.mark.parametrize("on_unknown, tainted", [("keep", {"bad": "NO-GO"}),
                                                 ("taint", {"bad": "NO-GO", "odd": "UNKNOWN"})])
def test_the_taint_follows_the_condition(tmp_path, on_unknown, tainted):
    """The CronJob's script with a kubectl that reports four nodes (True, False, Unknown, no
    condition) and records each taint it is asked for."""
    config = json.loads((RECIPES / "npd-rocmcheck.json").read_text())
    calls = tmp_path / "calls"
    kubectl = tmp_path / "kubectl"
    kubectl.write_text('#!/bin/sh\nif [ "$1" = get ]; then\n  case "$*" in *"@.type==\'$EXPECT\'"*) ;; '
                       '*) echo "wrong condition: $*" >&2; exit 3;; esac\n'
                       '  printf "bad True\\ngood False\\nodd Unknown\\nnew \\n"\nelse\n  echo "$*" >> "$CALLS"\nfi\n')
    kubectl.chmod(0o755)
    condition = config["conditions"][0]["type"]
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "CALLS": str(calls), "EXPECT": condition,
           "CONDITION": condition, "TAINT": "rocmcheck.io/gpu-not-ready", "ON_UNKNOWN": on_unknown}
    proc = subprocess.run(["sh", "-c", taint_script()], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    said = calls.read_text().splitlines()
    added: Dict[str, Optional[str]] = {}
    for line in said:
        _, _, node, taint, *rest = line.split()
        if taint.endswith("-"):
            assert node == "good" and taint == "rocmcheck.io/gpu-not-ready:NoSchedule-"
        else:
            key, _, value = taint.partition("=")
            assert key == "rocmcheck.io/gpu-not-ready" and value.endswith(":NoSchedule") and rest == ["--overwrite"]
            added[node] = value.split(":")[0]
    assert added == tainted and any(line.split()[2] == "good" for line in said)
    assert "CONDITION, value: RocmcheckGPUNotReady" in (RECIPES / "k8s-npd-taint.yaml").read_text()
