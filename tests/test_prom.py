"""`--prom FILE` on `gate` and `run`: the run in node_exporter's textfile format (issue 34).

Every file is read back with prometheus_client's own parser (`text_string_to_metric_families`),
the parser Prometheus's Python client ships for this format, so a line it would reject fails
here. The reports are made in-process in the shape a two-GPU run writes; one test runs the real
gate on two simulated GPUs with a fault planted in one.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rocmcheck.cli import main
from rocmcheck.outputs import prom
from rocmcheck.outputs.formats import OUTPUTS
from rocmcheck.outputs.storage import write_outputs
from rocmcheck.records import SCHEMA, SCHEMA_VERSION, Report

PROM = next(o for o in OUTPUTS if o.name == "prom")
TFLOPS = 61.5  # a made speed figure's median


def gpu(index: int) -> Dict[str, object]:
    return {"name": f"cuda:{index}", "index": index, "arch": "gfx942", "model": "AMD Instinct MI300X",
            "pci_address": f"0000:c{index}:00.0", "uuid": f"GPU-{index}"}


def two_gpu_report(bad_on=1, partial: bool = False) -> Report:
    """device-smoke and gemm on cuda:0 and cuda:1 (device-smoke fails on `bad_on`), gemm measuring
    a throughput, and a config check that runs once for the node."""
    verdicts = [{"probe": "config-lint", "variant": "config-lint[hsa-override]", "status": "pass", "message": "ok",
                 "duration_s": 0.04, "device": gpu(0)}]
    for index in (0, 1):
        verdicts.append({"probe": "device-smoke", "variant": "device-smoke", "duration_s": 0.25, "device": gpu(index),
                         "status": "fail" if index == bad_on else "pass",
                         "message": "mean of ones is 3.0" if index == bad_on else "ok"})
        verdicts.append({"probe": "gemm", "variant": "gemm[bf16-default]", "status": "pass", "message": "ok",
                         "duration_s": 1.5, "device": gpu(index),
                         "measurements": {"speed": {"matmul-bf16": {"unit": "TFLOPS", "samples": [60, TFLOPS, 70]},
                                                    "h2d-pinned": {"unit": "GB/s", "samples": [25.0]}}}})
    return Report.from_dict({
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
        "run": {"id": "r1", "command": "gate", "device": "cuda:0", "started": 1000.0, "finished": 1012.5,
                "partial": partial, "interrupted": "gemm[bf16-default]" if partial else None},
        "fingerprint": {"device_facts": {"backend": "rocm", "torch": "2.9.1+rocm6.4"}}, "verdicts": verdicts})


def parsed(text: str) -> Dict[str, List[Tuple[Dict[str, str], float]]]:
    """metric name -> [(labels, value)], through prometheus_client's parser."""
    found: Dict[str, List[Tuple[Dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge" and family.documentation
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def test_the_file_parses_and_holds_a_series_per_variant_and_per_gpu():
    metrics = parsed(prom.textfile(two_gpu_report()))
    assert all(name.startswith("rocmcheck_") for name in metrics)
    variants = {(labels["variant"], labels["device"]): (labels["status"], value)
                for labels, value in metrics["rocmcheck_variant_ok"]}
    assert variants == {("config-lint[hsa-override]", "cuda:0"): ("pass", 1.0),
                        ("device-smoke", "cuda:0"): ("pass", 1.0), ("device-smoke", "cuda:1"): ("fail", 0.0),
                        ("gemm[bf16-default]", "cuda:0"): ("pass", 1.0),
                        ("gemm[bf16-default]", "cuda:1"): ("pass", 1.0)}
    assert len(metrics["rocmcheck_variant_ok"]) == len(variants)  # one series each, no repeat
    gpus = {labels["device"]: (labels["status"], labels["pci_address"], labels["uuid"], value)
            for labels, value in metrics["rocmcheck_gpu_ok"]}
    assert gpus == {"cuda:0": ("pass", "0000:c0:00.0", "GPU-0", 1.0), "cuda:1": ("fail", "0000:c1:00.0", "GPU-1", 0.0)}


@pytest.mark.parametrize("bad_on, partial, status", [(None, False, "GO"), (1, False, "NO-GO"), (None, True, "UNKNOWN")])
def test_the_node_status_is_a_state_set(bad_on, partial, status):
    metrics = parsed(prom.textfile(two_gpu_report(bad_on, partial)))
    states = {labels["status"]: value for labels, value in metrics["rocmcheck_node_status"]}
    assert states == {state: float(state == status) for state in ("GO", "NO-GO", "UNKNOWN")}


def test_time_duration_and_speed_are_in_base_units():
    metrics = parsed(prom.textfile(two_gpu_report()))
    assert metrics["rocmcheck_run_timestamp_seconds"] == [({"drill": "false"}, 1012.5)]
    assert metrics["rocmcheck_run_duration_seconds"] == [({"drill": "false"}, 12.5)]
    flops = {labels["device"]: value for labels, value in metrics["rocmcheck_speed_flops_per_second"]
             if labels["figure"] == "matmul-bf16"}
    assert flops == {"cuda:0": TFLOPS * 1e12, "cuda:1": TFLOPS * 1e12}  # the samples' median, in FLOP/s
    assert {value for _, value in metrics["rocmcheck_speed_bytes_per_second"]} == {25e9}
    (info, one), = metrics["rocmcheck_run_info"]
    assert one == 1.0 and info["torch"] == "2.9.1+rocm6.4" and info["run_id"] == "r1" and info["command"] == "gate"


def test_label_values_are_escaped():
    report = two_gpu_report()
    report.verdicts[0].variant = 'odd["name"]\\with\nlines'
    labels = [labels for labels, _ in parsed(prom.textfile(report))["rocmcheck_variant_ok"]]
    assert 'odd["name"]\\with\nlines' in [label["variant"] for label in labels]


def test_the_file_is_written_whole_then_renamed_in_its_folder(tmp_path, monkeypatch):
    """node_exporter's textfile collector reads every *.prom file in its folder at any moment:
    the file is written under another name beside it and renamed, so it never reads half."""
    renames = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (renames.append((Path(src), Path(dst))),
                                                         real_replace(src, dst))[1])
    target = tmp_path / "rocmcheck.prom"
    target.write_text("# the last run's\n")
    report = two_gpu_report()
    write_outputs(report, [PROM], tmp_path / "reports", {"prom": target})
    (source, dest), = renames
    assert dest == target and source.parent == tmp_path and not source.name.endswith(".prom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rocmcheck.prom"]
    assert target.read_text() == prom.textfile(report, target) and not report.run.unwritten


def test_every_series_names_its_file(tmp_path):
    """node_exporter reads its one folder's *.prom files as one exposition: the `textfile` label
    (the file's name) keeps a gate's file and a run's from repeating each other's series, which
    node_exporter would drop (tests/test_prom_node_exporter.py runs the real one)."""
    target = tmp_path / "rocmcheck-gate.prom"
    write_outputs(two_gpu_report(), [PROM], tmp_path, {"prom": target})
    unknown = parsed(prom.unknown("no torch", path=tmp_path / "other.prom"))
    assert {s["textfile"] for series in parsed(target.read_text()).values() for s, _ in series} == {target.name}
    assert {s["textfile"] for series in unknown.values() for s, _ in series} == {"other.prom"}


def test_an_unwritable_prom_path_is_one_line_and_exit_2_before_the_run(monkeypatch, capsys, tmp_path):
    folder = Path("/proc")  # exists, and nobody, root included, can make a file in it
    monkeypatch.setattr("rocmcheck.cli.run.execute", lambda *a, **k: pytest.fail("the run started"))
    assert main(["gate", "--device", "cpu", "--out-dir", str(tmp_path), "--prom", str(folder / "r.prom")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"rocmcheck: error: --prom {folder}/r.prom: cannot write in {folder}")


def test_a_gate_that_cannot_assess_writes_unknown(monkeypatch, capsys, tmp_path):
    """No probe ran (here: bad input): the file says UNKNOWN and why, not the last run's GO."""
    target = tmp_path / "node.prom"
    target.write_text(prom.textfile(two_gpu_report(bad_on=None)))  # the last run's GO
    assert main(["gate", "--device", "simgpu:3", "--prom", str(target), "--out-dir", str(tmp_path)]) == 2
    metrics = parsed(target.read_text())
    assert {labels["status"]: value for labels, value in metrics["rocmcheck_node_status"]}["UNKNOWN"] == 1.0
    (info, _), = metrics["rocmcheck_run_info"]
    assert "names simulated GPUs" in info["error"] and "rocmcheck_variant_ok" not in metrics
    assert info["textfile"] == "node.prom"


def test_a_missing_folder_is_not_made_for_the_unknown_file(capsys, tmp_path):
    target = tmp_path / "no-such-folder" / "node.prom"
    assert main(["gate", "--device", "cpu", "--prom", str(target), "--out-dir", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err and not target.parent.exists()


@pytest.mark.children
def test_the_real_gate_on_two_simulated_gpus(tmp_path):
    target = tmp_path / "node.prom"
    proc = subprocess.run([sys.executable, "-m", "rocmcheck", "gate", "--inject", "simgpu:2,simgpu-wrong-device:1",
                           "--device", "all", "--require", "device-smoke", "--out-dir", str(tmp_path / "r"),
                           "--prom", str(target), "--json", "-"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["reports"]["prom"] == str(target)
    metrics = parsed(target.read_text())
    assert {(labels["device"], labels["status"], value) for labels, value in metrics["rocmcheck_variant_ok"]} == \
        {("simgpu:0", "pass", 1.0), ("simgpu:1", "fail", 0.0)}
    assert {labels["device"]: value for labels, value in metrics["rocmcheck_gpu_ok"]} == {"simgpu:0": 1.0,
                                                                                         "simgpu:1": 0.0}
    assert {s["drill"] for series in metrics.values() for s, _ in series} == {"true"}
    (info, _), = metrics["rocmcheck_run_info"]
    assert info["faults_injected"] == "simgpu-wrong-device:1" and info["simulated"] == "simgpu:2"
