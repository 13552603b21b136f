"""The published node-verdict schema (docs/schema/node-verdict.schema.json) holds for every node
verdict the gate writes: GO, NO-GO, UNKNOWN (interrupted, bad input), a drill, simulated GPUs,
warnings and files that could not be written (issue 34). Schedulers depend on it, so the
verdicts are checked with the `jsonschema` package, not by hand, and the schema is shown to
reject what the gate must never write.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from rocmcheck.cli import main
from rocmcheck.outputs import node
from rocmcheck.records import SCHEMA, SCHEMA_VERSION

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "docs" / "schema" / "node-verdict.schema.json"
FAKE = str(Path(__file__).parent / "fake_probes")


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def test_the_schema_is_published_for_the_version_the_gate_writes():
    schema = json.loads(SCHEMA_FILE.read_text())
    assert schema["$id"].endswith(f":{node.SCHEMA_VERSION}")  # a new field bumps both
    assert schema["properties"]["schema"]["const"] == node.SCHEMA


def report(status: str = "pass", inject: str = "", partial: bool = False, gpus: int = 2, **run) -> dict:
    verdicts = [{"probe": p, "variant": p, "status": status if (p, i) == ("device-smoke", gpus - 1) else "pass",
                 "message": "counted", "duration_s": 0.1,
                 "device": {"name": f"simgpu:{i}", "index": i, "arch": "simgpu", "pci_address": f"0000:1{i}:00.0",
                            "uuid": f"simgpu-{i}", "model": f"simulated GPU {i}"}}
                for p in ("device-smoke", "gemm") for i in range(gpus)]
    counts = {}
    for v in verdicts:
        counts[v["status"]] = counts.get(v["status"], 0) + 1
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "verdicts": verdicts,
            "fingerprint": {"device": {"name": "simgpu:0", "backend": "simgpu", "count": gpus}},
            "run": {"id": "s", "command": "gate", "device": "simgpu:0", "inject": inject, "partial": partial,
                    "interrupted": "gemm" if partial else None, "counts": counts, **run}}


@pytest.mark.parametrize("data, status", [
    (report(), "GO"),
    (report("warn"), "GO"),
    (report("fail"), "NO-GO"),
    (report("hang", gpus=1), "NO-GO"),
    (report(partial=True, notes=["interrupted by SIGTERM during gemm"]), "UNKNOWN"),
    (report("fail", inject="simgpu:2,simgpu-wrong-device:1"), "NO-GO"),  # a drill on two simulated GPUs
    (report(inject="simgpu:2"), "GO"),  # simulated, no drill
    (report(unwritten={"md": "/full/disk.md: No space left on device"}), "GO"),
])
def test_every_verdict_of_the_gate_fits_the_schema(made_run, tmp_path, validator, data, status):
    inject = ["--inject", data["run"]["inject"]] if data["run"]["inject"] else []
    _, out, _ = made_run(data, "gate", "--json", "-", "--device", "cpu", "--out-dir", str(tmp_path), *inject)
    verdict = json.loads(out)
    assert verdict["status"] == status
    validator.validate(verdict)


def test_the_unknown_verdict_of_bad_input_fits_the_schema(capsys, validator):
    assert main(["gate", "--json", "-", "--device", "simgpu:3"]) == 2
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["status"] == "UNKNOWN" and "simulated GPUs" in verdict["error"]
    validator.validate(verdict)


@pytest.mark.parametrize("change, drop", [
    ({"exit_code": 1}, ()),  # UNKNOWN with NO-GO's exit code
    ({}, ("error",)),  # UNKNOWN without its error
    ({"status": "NO-GO", "exit_code": 1}, ()),  # NO-GO without a failure
    ({"drill": []}, ()),  # a drill names its faults
    ({"schema_version": "2.0"}, ()),
])
def test_the_schema_rejects_what_the_gate_never_writes(validator, change, drop):
    good = node.unknown("no torch")
    validator.validate(good)
    bad = {k: v for k, v in {**good, **change}.items() if k not in drop}
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(bad)


@pytest.mark.children
@pytest.mark.parametrize("args, status", [
    (["--device", "cpu", "--probes-path", FAKE, "--require", "fake-pass", "--require", "fake-warn"], "GO"),
    (["--device", "cpu", "--probes-path", FAKE, "--require", "fake-pass", "--inject", "abort@fake-pass"], "NO-GO"),
    (["--inject", "simgpu:2", "--device", "all", "--require", "device-smoke"], "GO"),
    (["--inject", "simgpu:2,simgpu-wrong-device:1", "--device", "all", "--require", "device-smoke"], "NO-GO"),
])
def test_the_real_gate_writes_verdicts_that_fit(tmp_path, validator, args, status):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCHECK_")}
    proc = subprocess.run([sys.executable, "-m", "rocmcheck", "gate", "--json", "-", "--out-dir", str(tmp_path), *args],
                          capture_output=True, text=True, env=env, timeout=300)
    verdict = json.loads(proc.stdout)
    assert verdict["status"] == status, proc.stderr[-2000:]
    validator.validate(verdict)
