"""`rocmcheck matrix` over many machines' reports compares their deterministic-workload hashes
by workload version and key and names the machine and GPU whose hashes disagree with the
majority of its group, then exits 1 (issue 33, check 4).

The reports are built in-process in the shape an `sdc` run writes (each verdict's `device` as
`engine.devices.label` makes it, the `WorkloadHashes` record under `measurements["sdc"]`, the
fingerprint's hashed host ID naming the machine); the command runs in-process through
`rocmcheck.cli.main`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from rocmcheck.cli import main
from rocmcheck.model import SDC_MEASUREMENTS, WorkloadHashes
from rocmcheck.outputs.storage import report_json
from rocmcheck.records import SCHEMA, SCHEMA_VERSION, Report

KEY = {"arch": "gfx942", "device": "AMD Instinct MI300X", "torch": "2.7.0+rocm6.4", "rocm": "6.4.1",
       "blas": "hipblaslt 0.12"}
HASHES = {"matmul-fp32": "a1" * 32, "conv2d": "b2" * 32, "attention": "c3" * 32}
ODD = "0f" * 32  # a hash one bit flip away from the rest, as far as the matrix can tell


def record(hashes: Optional[Dict[str, str]] = None, workload: str = "1", key: Optional[Dict[str, str]] = None,
           left_out: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    return WorkloadHashes(workload, dict(key or KEY), {**HASHES, **(hashes or {})}, left_out or {},
                          {"repeats": 2}).to_dict()


def node(host: str, *records: Any, torch: str = "2.7.0+rocm6.4") -> Dict[str, Any]:
    """A one-run report of machine `host` whose GPU i gave records[i] (a record, or anything a
    malformed report might hold there)."""
    gpus = [{"name": f"cuda:{i}", "index": i, "arch": "gfx942", "pci_address": f"0000:{i + 1}1:00.0"}
            for i in range(len(records))]
    verdicts = [{"probe": "sdc", "variant": "sdc[level-1]", "status": "pass", "message": "agree", "duration_s": 2.0,
                 "device": device, "measurements": {SDC_MEASUREMENTS: found}} for device, found in zip(gpus, records)]
    verdicts.append({"probe": "device-smoke", "variant": "device-smoke", "status": "pass", "message": "ok",
                     "device": gpus[0]})
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION,
            "run": {"id": f"run-{host}", "command": "gate", "device": "auto"},
            "fingerprint": {"host": {"system": "Linux", "host_id": f"{host:0>16}"},
                            "device": {"name": "cuda:0", "backend": "rocm", "arch": "gfx942",
                                       "under_test": [g["name"] for g in gpus]},
                            "device_facts": {"backend": "rocm", "rocm": "6.4.1", "torch": torch}},
            "verdicts": verdicts}


def matrix(tmp_path: Path, capsys, reports: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """`rocmcheck matrix` over the reports (file name -> report) with every output: its exit code,
    terminal text, Markdown, HTML and JSON."""
    folder = tmp_path / "fleet"
    folder.mkdir()
    for name, data in reports.items():
        (folder / name).write_text(report_json(Report.from_dict(data)))
    outs = {kind: tmp_path / f"m.{kind}" for kind in ("md", "json", "html")}
    code = main(["matrix", str(folder), *(f"--{kind}={path}" for kind, path in outs.items())])
    found = {kind: path.read_text() for kind, path in outs.items()}
    return {"code": code, "out": capsys.readouterr().out, **found, "fleet": json.loads(found["json"])["fleet"]}


def findings(text: str) -> List[str]:
    return [line.strip() for line in text.splitlines() if "DISAGREES" in line or "cannot decide" in line]


def five(odd: Optional[Dict[str, str]] = None) -> Dict[str, Dict[str, Any]]:
    """Five machines of one kind; the third gave `odd` hashes, where given."""
    return {f"m{i}.json": node(f"{i}", record(odd if i == 3 and odd else None)) for i in range(1, 6)}


def test_the_odd_machine_out_of_five_is_named_in_every_output_and_the_matrix_exits_1(tmp_path, capsys):
    found = matrix(tmp_path, capsys, five(odd={"matmul-fp32": ODD}))
    assert found["code"] == 1
    [line] = findings(found["out"])
    assert line.startswith("DISAGREES ") and "m3.json (gfx942 / rocm 6.4.1 / torch 2.7.0+rocm6.4 / Linux)" in line
    assert "on cuda:0 (gfx942, 0000:11:00.0)" in line
    assert f"matmul-fp32 gave {ODD[:12]} where 4 of 5 GPUs gave {HASHES['matmul-fp32'][:12]}" in line
    assert "conv2d" not in line and "m1.json" not in line
    for kind in ("md", "html"):
        [said] = findings(found[kind])
        assert "m3.json" in said and "cuda:0 (gfx942, 0000:11:00.0)" in said and "matmul-fp32" in said, kind
    assert '<p class="fleet-2">DISAGREES' in found["html"]
    [group] = found["fleet"]["groups"]
    assert group["status"] == "disagree" and group["machines"] == 5
    [flagged] = group["flagged"]
    assert flagged["reports"][0].endswith("m3.json") and flagged["gpu"] == "cuda:0 (gfx942, 0000:11:00.0)"
    assert list(flagged["ops"]) == ["matmul-fp32"] and flagged["ops"]["matmul-fp32"]["majority"] == "a1" * 32
    assert json.loads(found["json"])["schema_version"] == "1.3"


def test_five_agreeing_machines_exit_0_and_say_so(tmp_path, capsys):
    found = matrix(tmp_path, capsys, five())
    assert found["code"] == 0
    assert findings(found["out"]) == [] and findings(found["md"]) == []
    assert "5 machines, 5 GPUs, 3 ops: all agree bit for bit" in found["out"]
    assert [g["status"] for g in found["fleet"]["groups"]] == ["agree"]


def test_the_odd_gpu_of_a_two_gpu_node_is_the_one_named(tmp_path, capsys):
    reports = {"a.json": node("a", record(), record({"conv2d": ODD})), "b.json": node("b", record()),
               "c.json": node("c", record())}
    found = matrix(tmp_path, capsys, reports)
    assert found["code"] == 1
    [line] = findings(found["out"])
    assert "a.json" in line and "on cuda:1 (gfx942, 0000:21:00.0)" in line and "conv2d gave" in line
    assert "3 of 4 GPUs" in line


def test_a_tie_of_two_machines_cannot_decide_and_names_both(tmp_path, capsys):
    found = matrix(tmp_path, capsys, {"x.json": node("x", record()), "y.json": node("y", record({"attention": ODD}))})
    assert found["code"] == 1
    [line] = findings(found["out"])
    assert line.startswith("cannot decide on attention: 1 vs 1: ") and "x.json" in line and "y.json" in line
    assert "2 machines, 2 GPUs, 3 ops: they disagree and no strict majority says which is wrong" in found["out"]
    [group] = found["fleet"]["groups"]
    [tie] = group["undecided"]
    assert group["flagged"] == [] and [len(side["gpus"]) for side in tie["sides"]] == [1, 1]
    assert sorted(side["hashes"]["attention"] for side in tie["sides"]) == sorted([ODD, HASHES["attention"]])


def test_one_machine_alone_has_no_peer_and_exits_0(tmp_path, capsys):
    found = matrix(tmp_path, capsys, {"solo.json": node("s", record(), record({"conv2d": ODD}))})
    assert found["code"] == 0
    assert "1 machine, 2 GPUs, 3 ops: no peer to compare" in found["out"] and findings(found["out"]) == []


def test_reports_of_another_workload_version_are_never_compared(tmp_path, capsys):
    """Two machines on workload 1 and one on workload 2 whose hashes all differ from theirs: compared,
    the third would be the odd one out; it is in a group of its own, said plainly."""
    reports = {"old1.json": node("1", record()), "old2.json": node("2", record()),
               "new.json": node("3", record({op: ODD for op in HASHES}, workload="2"))}
    found = matrix(tmp_path, capsys, reports)
    assert found["code"] == 0 and findings(found["out"]) == []
    assert ("2 groups by workload version and key; reports of different workload versions or keys are never "
            "compared with each other.") in found["out"]
    heads = [line.strip() for line in found["out"].splitlines() if line.strip().startswith("workload ")]
    assert [h.split(",")[0] for h in heads] == ["workload 1", "workload 2"]
    assert heads[0].endswith("2 machines, 2 GPUs, 3 ops: all agree bit for bit")
    assert heads[1].endswith("1 machine, 1 GPU, 3 ops: no peer to compare")


def test_another_torch_is_another_group(tmp_path, capsys):
    other = dict(KEY, torch="2.8.0+rocm6.4")
    reports = {f"m{i}.json": node(f"{i}", record()) for i in range(1, 4)}
    reports.update({f"t{i}.json": node(f"t{i}", record({"matmul-fp32": ODD}, key=other), torch="2.8.0+rocm6.4")
                    for i in range(1, 3)})
    found = matrix(tmp_path, capsys, reports)
    assert found["code"] == 0 and findings(found["out"]) == []
    groups = found["fleet"]["groups"]
    assert sorted((g["key"]["torch"], g["machines"], g["status"]) for g in groups) == [
        ("2.7.0+rocm6.4", 3, "agree"), ("2.8.0+rocm6.4", 2, "agree")]


def test_an_op_a_record_left_out_is_not_compared_for_it(tmp_path, capsys):
    reports = five()
    reports["m3.json"] = node("3", record({"conv2d": ODD}, left_out={"conv2d": "not deterministic on gfx942"}))
    found = matrix(tmp_path, capsys, reports)
    assert found["code"] == 0 and findings(found["out"]) == []


def test_a_gpu_whose_own_reports_disagree_is_flagged(tmp_path, capsys):
    reports = five()
    again = node("3", record({"conv2d": ODD}))
    again["run"]["id"] = "run-3-again"
    reports["m3-again.json"] = again
    found = matrix(tmp_path, capsys, reports)
    assert found["code"] == 1
    [line] = findings(found["out"])
    named, said = line.split(": ", 1)
    assert "m3.json" in named and "m3-again.json" in named and said.startswith("conv2d gave 2 hashes across its own")



CHAIN = "c4" * 32


def nights(count: int, odd: Dict[int, str]) -> Dict[str, Dict[str, Any]]:
    """One machine checked `count` nights: its GPU's chain-fp32 hash the same every night but for
    the nights in `odd` (night -> the hash it gave that night)."""
    reports = {}
    for night in range(1, count + 1):
        report = node("n", record({"chain-fp32": odd.get(night, CHAIN)}))
        report["run"]["id"] = f"run-night-{night}"
        reports[f"night{night}.json"] = report
    return reports


def named_findings(tmp_path: Path, text: str) -> List[str]:
    """`findings`, the reports named by file name (the matrix names them by path)."""
    return findings(text.replace(f"{tmp_path / 'fleet'}/", ""))


def test_one_machine_whose_answer_changed_one_night_is_flagged_naming_the_odd_report(tmp_path, capsys):
    """Issue 40: five nightly reports of one single-GPU machine, the fourth with another chain-fp32
    hash; before, a group of one machine had "no peer" and the matrix exited 0."""
    found = matrix(tmp_path, capsys, nights(5, {4: ODD}))
    assert found["code"] == 1
    assert "1 machine, 1 GPU, 4 ops: 1 GPU flagged" in found["out"]
    [line] = named_findings(tmp_path, found["out"])
    named, said = line.split(": ", 1)
    assert named.startswith("DISAGREES ") and all(f"night{n}.json" in named for n in range(1, 6))
    assert said == (f"chain-fp32 gave 2 hashes across its own reports: {CHAIN[:12]} in 4 of 5 "
                    f"(night1.json, night2.json, night3.json, night5.json); the odd one out: {ODD[:12]} (night4.json)")
    for kind in ("md", "html"):
        [said_there] = named_findings(tmp_path, found[kind])
        assert "the odd one out: " in said_there and "(night4.json)" in said_there, kind
    [group] = found["fleet"]["groups"]
    assert group["status"] == "disagree" and group["machines"] == 1 and group["undecided"] == []
    [flagged] = group["flagged"]
    assert list(flagged["ops"]) == ["chain-fp32"]
    chain = flagged["ops"]["chain-fp32"]
    assert chain["own_majority"] == CHAIN and chain["hashes"][ODD] == [str(tmp_path / "fleet" / "night4.json")]


def test_one_machine_whose_reports_tie_names_both_sides_and_exits_1(tmp_path, capsys):
    found = matrix(tmp_path, capsys, nights(4, {2: ODD, 4: ODD}))
    assert found["code"] == 1
    [line] = named_findings(tmp_path, found["out"])
    assert line.endswith(f"chain-fp32 gave 2 hashes across its own reports, no strict majority of them: "
                         f"{CHAIN[:12]} (night1.json, night3.json) vs {ODD[:12]} (night2.json, night4.json)")
    [group] = found["fleet"]["groups"]
    [flagged] = group["flagged"]
    assert group["status"] == "disagree" and flagged["ops"]["chain-fp32"]["own_majority"] is None


def test_one_machine_whose_nightly_reports_agree_has_no_peer_and_exits_0(tmp_path, capsys):
    found = matrix(tmp_path, capsys, nights(3, {}))
    assert found["code"] == 0 and findings(found["out"]) == []
    assert "1 machine, 1 GPU, 4 ops: no peer to compare" in found["out"]


def test_a_machine_of_five_whose_own_reports_changed_is_named_with_the_odd_report(tmp_path, capsys):
    """The same rule with peers: the machine checked twice more is flagged for its own change (and
    does not vote); the other four agree."""
    reports = five()
    for again in ("m3-b.json", "m3-c.json"):
        reports[again] = node("3", record({"attention": ODD} if again == "m3-c.json" else None))
        reports[again]["run"]["id"] = again
    found = matrix(tmp_path, capsys, reports)
    assert found["code"] == 1
    [line] = named_findings(tmp_path, found["out"])
    assert "5 machines, 5 GPUs, 3 ops: 1 GPU flagged" in found["out"]
    assert line.endswith(f"attention gave 2 hashes across its own reports: {HASHES['attention'][:12]} in 2 of 3 "
                         f"(m3-b.json, m3.json); the odd one out: {ODD[:12]} (m3-c.json)")

def test_a_malformed_sdc_record_is_left_out_with_a_note(tmp_path, capsys):
    reports = five()
    reports["m5.json"] = node("5", {"workload": "1", "hashes": HASHES})  # no key
    reports["m6.json"] = node("6", "not a record", {"workload": "1", "key": 7, "hashes": HASHES})
    found = matrix(tmp_path, capsys, reports)
    assert found["code"] == 0 and "Traceback" not in found["out"]
    assert "4 machines, 4 GPUs, 3 ops: all agree bit for bit" in found["out"]
    [note] = [line for line in found["out"].splitlines() if line.startswith("3 malformed sdc records left out")]
    assert "m5.json (sdc[level-1] on cuda:0 (gfx942, 0000:11:00.0))" in note
    assert "m6.json (sdc[level-1] on cuda:1 (gfx942, 0000:21:00.0))" in note
    assert found["fleet"]["notes"] == [note]
