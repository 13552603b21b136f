"""Every human-facing output names the GPU of a failure; a run's table has a column per GPU
(issue 31, item 1).

The reports are built in-process in the shape a two-GPU run writes (each verdict's `device` as
`engine.devices.label` makes it, the device facts with each GPU's UUID); the commands run
in-process through `rocmcheck.cli.main`, `execute` replaced by the made report.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional

from rocmcheck.cli import main
from rocmcheck.outputs.formats import OUTPUTS
from rocmcheck.outputs.storage import report_json
from rocmcheck.records import SCHEMA, SCHEMA_VERSION, Report

GPU1 = "simgpu:1 (simgpu, 0000:11:00.0)"


def gpu(index: int, host: str = "a") -> Dict[str, object]:
    return {"name": f"simgpu:{index}", "index": index, "arch": "simgpu", "model": f"simulated GPU {index}",
            "pci_address": f"0000:1{index}:00.0", "uuid": f"{host}-gpu-{index}"}


def two_gpu_report(run_id: str, bad_on: Optional[int] = 1, host: str = "a") -> dict:
    """A run on simgpu:0 and simgpu:1 whose device-smoke fails on GPU `bad_on` (None: nowhere)."""
    gpus = [gpu(0, host), gpu(1, host)]
    verdicts = []
    for variant in ("device-smoke", "gemm[fp32-default]"):
        for device in reversed(gpus):  # the per-GPU queues finish in any order
            bad = variant == "device-smoke" and device["index"] == bad_on
            verdicts.append({"probe": variant.split("[")[0], "variant": variant, "status": "fail" if bad else "pass",
                             "message": "mean of 65536 ones is 3.0, expected 1.0" if bad else "ok",
                             "duration_s": 0.1, "device": device})
    fingerprint = {"host": {"system": "Linux", "kernel": "6.8", "machine": "x86_64"},
                   "device": {"name": "simgpu:0", "backend": "simgpu", "count": 2, "arch": "simgpu",
                              "under_test": ["simgpu:0", "simgpu:1"]},
                   "device_facts": {"backend": "simgpu", "torch": "2.13.0+cpu",
                                    "devices": [{k: g[k] for k in ("index", "arch", "pci_address", "uuid")}
                                                for g in gpus]}}
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION,
            "run": {"id": run_id, "command": "gate", "device": "simgpu:0", "profile": "gate",
                    "inject": "simgpu:2,simgpu-wrong-device:1"},
            "fingerprint": fingerprint, "verdicts": verdicts}


def cpu_report(run_id: str, status: str = "pass") -> dict:
    verdicts = [{"probe": v.split("[")[0], "variant": v, "status": status, "message": status, "device": {"name": "cpu"}}
                for v in ("device-smoke", "gemm[fp32-default]")]
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "run": {"id": run_id, "device": "cpu"},
            "fingerprint": {"host": {"system": "Linux", "kernel": "6.8", "machine": "x86_64"},
                            "device": {"name": "cpu", "backend": "cpu", "count": 0, "under_test": ["cpu"]},
                            "device_facts": {"backend": "cpu", "torch": "2.13.0+cpu", "devices": []}},
            "verdicts": verdicts}


def save(path: Path, data: dict) -> str:
    path.write_text(report_json(Report.from_dict(data)))
    return str(path)


def run_command(monkeypatch, capsys, tmp_path: Path, command: str, data: dict) -> str:
    """`rocmcheck COMMAND` in-process with the run replaced by `data`: what it printed."""
    report = Report.from_dict(data)
    monkeypatch.setattr("rocmcheck.cli.run.execute", lambda opts, variants, stream=None: report)
    main([command, "--device", "cpu", "--out-dir", str(tmp_path)])
    return capsys.readouterr().out


def table_rows(text: str, variant: str) -> List[str]:
    return [line for line in text.splitlines() if re.match(rf"\W*`?{re.escape(variant)}\b", line.strip("| "))]


# --- item 1: the failing GPU is named ------------------------------------------------------------


def test_the_no_go_summary_names_the_failing_gpu(monkeypatch, capsys, tmp_path):
    out = run_command(monkeypatch, capsys, tmp_path, "gate", two_gpu_report("g"))
    failing = [line.strip() for line in out.split("NO-GO")[1].splitlines() if line.strip().startswith("FAIL")]
    assert failing == [f"FAIL device-smoke on {GPU1}: mean of 65536 ones is 3.0, expected 1.0"]


def test_the_runs_final_table_has_a_column_per_gpu(monkeypatch, capsys, tmp_path):
    out = run_command(monkeypatch, capsys, tmp_path, "run", two_gpu_report("r"))
    table = out.split("\n\n")[-2] if "\n\n" in out else out
    header = table.split("---")[0]
    assert header.index("simgpu:0") < header.index("simgpu:1") and "0000:11:00.0" in header
    rows = table_rows(table, "device-smoke")
    assert len(rows) == 1 and rows[0].split()[1:3] == ["PASS", "FAIL"]
    assert "simgpu:1" in rows[0].split("FAIL", 1)[1]  # the message says which GPU it is from


def test_the_runs_markdown_has_a_column_per_gpu_and_names_the_failing_one():
    md = next(o for o in OUTPUTS if o.name == "md").render(Report.from_dict(two_gpu_report("m")))
    assert f"## FAIL `device-smoke` on {GPU1}" in md
    assert "simgpu:0 (simgpu, 0000:10:00.0)" in md.split("\n\n")[1] and GPU1 in md.split("\n\n")[1]
    rows = table_rows(md.split("## Matrix")[1], "device-smoke")
    assert len(rows) == 1 and [c.strip() for c in rows[0].split("|")[2:4]] == ["PASS", "**FAIL**"]
    header = md.split("## Matrix")[1].strip().splitlines()[0]
    assert header.index("simgpu:0") < header.index("simgpu:1")


def test_the_bug_reports_failure_sections_name_the_gpu(tmp_path, capsys):
    source = save(tmp_path / "run.json", two_gpu_report("b"))
    assert main(["report", "--from", source, "-o", str(tmp_path / "bug.md")]) == 0
    md = (tmp_path / "bug.md").read_text()
    assert f"## FAIL `device-smoke` on {GPU1}" in md
    assert f"`device-smoke` on {GPU1} (fail)" in md.split("## Environment")[0]  # the summary paragraph
    assert len(table_rows(md.split("Full matrix")[1], "device-smoke")) == 1
