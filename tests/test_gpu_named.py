"""Every human-facing output names the GPU of a failure; a run's table has a column per GPU; the
matrix counts machines and runs, not columns, and orders its columns (issue 31, items 1 and 2).

The reports are built in-process in the shape a two-GPU run writes (each verdict's `device` as
`engine.devices.label` makes it, the device facts with each GPU's UUID); the commands run
in-process through `rocmcheck.cli.main`, `execute` replaced by the made report.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict, List, Optional

import pytest

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
                    "inject": "simgpu:2"},  # a drill (simgpu-wrong-device) would get columns of its own
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
    summary = next(p for p in md.split("\n\n") if ". Devices " in p)  # after the simulation's mark
    assert "simgpu:0 (simgpu, 0000:10:00.0)" in summary and GPU1 in summary
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


# --- item 2: the matrix counts machines and runs, and orders its columns ---------------------------


def matrix_of(tmp_path: Path, capsys, *reports: dict) -> dict:
    folder = tmp_path / "reports"
    folder.mkdir()
    for data in reports:
        save(folder / f"{data['run']['id']}.json", data)
    assert main(["matrix", str(folder), "--json", str(tmp_path / "m.json")]) == 0
    return {"out": capsys.readouterr().out, **json.loads((tmp_path / "m.json").read_text())}


def test_one_two_gpu_report_is_one_machine_one_report(tmp_path, capsys):
    matrix = matrix_of(tmp_path, capsys, two_gpu_report("one"))
    assert "2 variants, 1 machine, 1 report;" in matrix["out"]
    assert len(matrix["machines"]) == 2  # still a column per GPU


def test_a_folder_of_runs_counts_machines_and_runs_and_keeps_a_machines_gpus_together(tmp_path, capsys):
    runs = [two_gpu_report(f"r{i}", bad_on=1 if i == 0 else None) for i in range(4)]
    runs.append(two_gpu_report("other-node", bad_on=None, host="b"))  # an identical node: its own GPUs
    matrix = matrix_of(tmp_path, capsys, *runs, cpu_report("cpu", status="fail"))  # the worst column: the CPU's
    assert "2 variants, 3 machines, 6 reports;" in matrix["out"]
    labels = [m["label"] for m in matrix["machines"]]
    assert [label.split(" / ")[-1] for label in labels] == [
        "simgpu:0 (simgpu, 0000:10:00.0)", GPU1, "Linux"]  # GPUs by index, the CPU last
    header = matrix["out"].split("---")[0].splitlines()  # a line per part of the label
    gpus = next(line for line in header if "simgpu:1" in line)
    assert gpus.index("simgpu:0") < gpus.index("simgpu:1") < header[0].index("cpu")


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0)])
def test_the_matrix_column_order_does_not_depend_on_the_order_of_the_files(tmp_path, capsys, order):
    made = [two_gpu_report("x", bad_on=None), two_gpu_report("y", bad_on=0), cpu_report("z", status="fail")]
    folder = tmp_path / "reports"
    folder.mkdir()
    files = [save(folder / f"{i}.json", made[i]) for i in order]
    assert main(["matrix", *files, "--json", str(tmp_path / "m.json")]) == 0
    capsys.readouterr()
    labels = [m["label"].split(" / ")[-1] for m in json.loads((tmp_path / "m.json").read_text())["machines"]]
    assert labels == ["simgpu:0 (simgpu, 0000:10:00.0)", GPU1, "Linux"]


def test_runs_of_one_host_on_its_gpus_and_on_its_cpu_are_one_machine(tmp_path, capsys):
    """The hashed machine ID names the host: its simulated-GPU runs and its CPU run are one machine,
    another host with the same kind of node is another."""
    def on(host_id: Optional[str], data: dict) -> dict:
        data["fingerprint"]["host"]["host_id"] = host_id
        return data

    here = "0123456789abcdef"
    runs = [on(here, two_gpu_report("g1")), on(here, two_gpu_report("g2")), on(here, cpu_report("c1")),
            on("fedcba9876543210", two_gpu_report("other", host="b"))]
    assert "2 variants, 2 machines, 4 reports;" in matrix_of(tmp_path, capsys, *runs)["out"]


def test_the_host_id_is_the_machine_id_hashed_never_the_id_itself(tmp_path):
    from rocmcheck.host.fingerprint import host_id

    machine_id = "4c4c4544004a3510805ab3c04f4d3132"
    (tmp_path / "machine-id").write_text(machine_id + "\n")
    found = host_id((tmp_path / "missing", tmp_path / "machine-id"))
    assert found and len(found) == 16 and found not in machine_id and machine_id not in found
    assert found == host_id((tmp_path / "machine-id",))  # stable
    (tmp_path / "bad").write_text("uninitialized\n")  # machine-id(5): a first boot's placeholder
    assert host_id((tmp_path / "bad",)) is None and host_id((tmp_path / "missing",)) is None
