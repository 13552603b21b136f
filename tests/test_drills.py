"""A run with injected faults is a drill and says so in every output (issue 34): the node verdict,
the terminal's first and last lines (gate and run), the run's Markdown and HTML, the Prometheus
labels, `matrix` (a drill's columns apart, its failures not counted with the real runs') and
`diff` (a drill on either side said). Simulated GPUs alone (`--inject simgpu:N`) plant no fault:
such a run is said to be simulated, never a drill.

The reports are made in-process in the shape a two-GPU run writes; the commands run in-process
through `rocmcheck.cli.main` with the runner replaced by one that returns the made report, so
everything the command prints (its first line too) is its own.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rocmcheck.cli import main
from rocmcheck.faults import drill_split
from rocmcheck.outputs.formats import OUTPUTS, run_html
from rocmcheck.outputs.runtext import markdown_report
from rocmcheck.outputs.storage import report_json
from rocmcheck.records import SCHEMA, SCHEMA_VERSION, Report

DRILL = "simgpu:2,simgpu-wrong-device:1"
SIMULATED = "simgpu:2"


def gpu(index: int) -> Dict[str, object]:
    return {"name": f"simgpu:{index}", "index": index, "arch": "simgpu", "model": f"simulated GPU {index}",
            "pci_address": f"0000:1{index}:00.0", "uuid": f"a-gpu-{index}"}


def report(run_id: str, inject: str = "", bad_on: Optional[int] = None, host: str = "host-a") -> dict:
    """A gate on simgpu:0 and simgpu:1 whose device-smoke fails on GPU `bad_on` (None: nowhere)."""
    verdicts = []
    for variant in ("device-smoke", "gemm[fp32-default]"):
        for index in (0, 1):
            bad = variant == "device-smoke" and index == bad_on
            verdicts.append({"probe": variant.split("[")[0], "variant": variant, "status": "fail" if bad else "pass",
                             "message": "mean of 65536 ones is 3.0, expected 1.0" if bad else "ok",
                             "duration_s": 0.1, "device": gpu(index)})
    fingerprint = {"host": {"system": "Linux", "host_id": host},
                   "device": {"name": "simgpu:0", "backend": "simgpu", "count": 2, "arch": "simgpu",
                              "under_test": ["simgpu:0", "simgpu:1"]},
                   "device_facts": {"backend": "simgpu", "torch": "2.13.0+cpu", "devices": []}}
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION,
            "run": {"id": run_id, "command": "gate", "device": "simgpu:0", "profile": "gate", "inject": inject,
                    "started": 100.0, "finished": 103.5,
                    "counts": {"pass": 4} if bad_on is None else {"pass": 3, "fail": 1}},
            "fingerprint": fingerprint, "verdicts": verdicts}


def command(made_run, tmp_path: Path, data: dict, *argv: str) -> tuple:
    """`rocmcheck ARGV...` in-process, its run replaced by `data` (given the report's --inject)."""
    inject = ["--inject", data["run"]["inject"]] if data["run"]["inject"] else []
    return made_run(data, *argv, "--device", "cpu", "--out-dir", str(tmp_path), *inject)


# --- which faults make a drill --------------------------------------------------------------------


def test_simulated_gpus_are_no_drill_and_a_planted_or_unknown_fault_is():
    assert drill_split(["simgpu:2", "old-torch:2.2"]) == ([], ["simgpu:2", "old-torch:2.2"])
    assert drill_split(["simgpu:2", "simgpu-wrong-device:1", "copy-zeros@transfer"]) == \
        (["simgpu-wrong-device:1", "copy-zeros@transfer"], ["simgpu:2"])
    # a fault of another version or of a probe module not loaded here: a drill, never a real run
    assert drill_split(["a-fault-from-elsewhere", ""]) == (["a-fault-from-elsewhere"], [])


# --- the node verdict --------------------------------------------------------------------------------


@pytest.mark.parametrize("inject, drill, simulated", [
    (DRILL, ["simgpu-wrong-device:1"], ["simgpu:2"]), (SIMULATED, None, ["simgpu:2"]), ("", None, None)])
def test_the_node_verdict_names_a_drills_faults(made_run, tmp_path, inject, drill, simulated):
    code, out, _ = command(made_run, tmp_path, report("n", inject, bad_on=1), "gate", "--json", "-")
    verdict = json.loads(out)
    assert code == 1 and verdict["status"] == "NO-GO"
    assert verdict.get("drill") == drill and verdict.get("simulated") == simulated


def test_a_drill_is_known_from_its_verdicts_where_the_run_lost_its_spec(made_run, tmp_path):
    """A report whose run record has no --inject (a pytest run, an older report): the faults a
    child says it installed still make the drill."""
    data = report("v", "", bad_on=1)
    data["verdicts"][1]["evidence"] = {"faults_injected": ["simgpu:2", "simgpu-wrong-device:1"]}
    _, out, _ = command(made_run, tmp_path, data, "gate", "--json", "-")
    assert json.loads(out)["drill"] == ["simgpu-wrong-device:1"]


# --- the terminal: first and last lines ------------------------------------------------------------


@pytest.mark.parametrize("name", ["gate", "run"])
def test_the_terminals_first_and_last_lines_say_drill(made_run, tmp_path, name):
    _, out, _ = command(made_run, tmp_path, report("t", DRILL, bad_on=1), name)
    lines = out.strip().splitlines()
    assert lines[0].endswith("; DRILL: faults injected on purpose (simgpu-wrong-device:1)")
    subject = "this NO-GO" if name == "gate" else "this run"
    assert lines[-1] == f"rocmcheck: {subject} is a DRILL: faults injected on purpose (simgpu-wrong-device:1)"
    if name == "gate":
        assert "NO-GO (DRILL) — 1 fail, 3 pass" in lines


def test_a_simulated_run_says_simulated_and_not_drill(made_run, tmp_path):
    _, out, _ = command(made_run, tmp_path, report("s", SIMULATED), "gate")
    lines = out.strip().splitlines()
    assert lines[0].endswith("; simulated (simgpu:2), no fault injected")
    assert lines[-1] == "rocmcheck: this GO is simulated (simgpu:2), no fault injected"
    assert "DRILL" not in out


def test_a_real_run_keeps_its_lines(made_run, tmp_path):
    _, out, _ = command(made_run, tmp_path, report("r", "", bad_on=1), "gate")
    lines = out.strip().splitlines()
    assert lines[0].endswith("profile gate") and lines[-1].startswith("wrote ")
    assert "DRILL" not in out and "simulated" not in out


def test_the_npd_line_says_drill(made_run, tmp_path):
    code, out, _ = command(made_run, tmp_path, report("p", DRILL, bad_on=1), "gate", "--npd")
    assert code == 1
    assert out == "rocmcheck DRILL NO-GO (simgpu-wrong-device:1): device-smoke on simgpu:1\n"


# --- the run's Markdown and HTML ----------------------------------------------------------------


def test_the_markdown_says_drill_at_its_top():
    md = markdown_report(Report.from_dict(report("m", DRILL, bad_on=1)))
    head = md.split("## FAIL")[0]
    assert head.startswith("# rocmcheck gate (DRILL): ")
    assert "> **DRILL: faults injected on purpose (simgpu-wrong-device:1)**: the failures below are the drill's" in head
    simulated = markdown_report(Report.from_dict(report("m", SIMULATED)))
    assert "DRILL" not in simulated and "> **simulated (simgpu:2), no fault injected**" in simulated
    assert "DRILL" not in markdown_report(Report.from_dict(report("m", "", bad_on=1)))


def test_the_html_says_drill():
    page = run_html(Report.from_dict(report("h", DRILL, bad_on=1)))
    assert '<p class="drill"><b>DRILL columns: faults were injected on purpose' in page
    assert '<th class="drill"' in page and "DRILL: simgpu-wrong-device:1" in page
    assert "drill" not in run_html(Report.from_dict(report("h", "", bad_on=1))).split("</style>")[1]


# --- Prometheus ------------------------------------------------------------------------------------


@pytest.mark.parametrize("inject, label", [(DRILL, "true"), (SIMULATED, "false"), ("", "false")])
def test_every_prometheus_series_has_the_drill_label(inject, label):
    prom = next(o for o in OUTPUTS if o.name == "prom")
    families = list(text_string_to_metric_families(prom.render(Report.from_dict(report("p", inject, bad_on=1)))))
    samples = [s for family in families for s in family.samples]
    assert samples and {s.labels["drill"] for s in samples} == {label}
    info = next(s for s in samples if s.name == "rocmcheck_run_info")
    assert info.labels["faults_injected"] == ("simgpu-wrong-device:1" if label == "true" else "")
    assert info.labels["simulated"] == ("simgpu:2" if inject else "")


# --- matrix and diff ---------------------------------------------------------------------------------


def save(path: Path, data: dict) -> str:
    path.write_text(report_json(Report.from_dict(data)))
    return str(path)


def test_the_matrix_keeps_a_drill_apart_from_the_real_runs(tmp_path, capsys):
    """The same host's real run and its drill: the drill's columns are its own, marked, and its
    planted failure is not counted in the real columns' cells."""
    real = save(tmp_path / "real.json", report("real", SIMULATED))
    drill = save(tmp_path / "drill.json", report("drill", DRILL, bad_on=1))
    assert main(["matrix", real, drill, "--json", str(tmp_path / "m.json"), "--md", str(tmp_path / "m.md")]) == 0
    out = capsys.readouterr().out
    matrix = json.loads((tmp_path / "m.json").read_text())
    drilled = [m for m in matrix["machines"] if m["drill"]]
    assert [m["reports"] for m in drilled] == [[drill], [drill]]  # its two GPUs
    assert all(m["drill"] == ["simgpu-wrong-device:1"] and "DRILL: simgpu-wrong-device:1" in m["label"]
               for m in drilled)
    row = next(r for r in matrix["rows"] if r["variant"] == "device-smoke")
    real_cells = [c for m, c in zip(matrix["machines"], row["cells"]) if not m["drill"]]
    assert [c["counts"] for c in real_cells] == [{"pass": 1}, {"pass": 1}]  # no FAIL 1/2 from the drill
    assert matrix["counts"]["drill reports"] == 1 and matrix["counts"]["machines"] == 1
    assert "DRILL columns: faults were injected on purpose" in out
    assert "DRILL columns" in (tmp_path / "m.md").read_text()


def test_a_matrix_of_real_runs_says_no_drill(tmp_path, capsys):
    real = save(tmp_path / "real.json", report("real", "", bad_on=1))
    assert main(["matrix", real]) == 0
    assert "DRILL" not in capsys.readouterr().out


@pytest.mark.parametrize("drill_side", ["baseline", "current run"])
def test_the_diff_says_which_side_is_a_drill(tmp_path, capsys, drill_side):
    sides: List[str] = [save(tmp_path / "a.json", report("a", "")), save(tmp_path / "b.json", report("b", DRILL, 1))]
    if drill_side == "baseline":
        sides.reverse()
    main(["diff", *sides, "--json", str(tmp_path / "d.json")])
    out = capsys.readouterr().out
    assert (f"note: the {drill_side} is a DRILL: faults injected on purpose (simgpu-wrong-device:1): its "
            f"failures, and the regressions or fixes they make, are the drill's") in out
    data = json.loads((tmp_path / "d.json").read_text())
    key = "baseline" if drill_side == "baseline" else "current"
    assert data[key]["drill"] == ["simgpu-wrong-device:1"]
    assert data["current" if key == "baseline" else "baseline"]["drill"] == []


def test_a_diff_of_real_runs_says_no_drill(tmp_path, capsys):
    main(["diff", save(tmp_path / "a.json", report("a", "")), save(tmp_path / "b.json", report("b", "", 1))])
    assert "drill" not in capsys.readouterr().out.lower()
