"""The typed report (`rocmcheck.records`) and the one home of output files (`rocmcheck.outputs.formats`).

The report's JSON round-trips through `Report` unchanged; an older report file, without the
fields added since, still loads into every reader; and a file that cannot be written is
recorded in `unwritten`, said in one line and never changes the exit code, whichever
front-end wrote it (the commands, the pytest plugin, `rocmcheck.gate()`).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rocmcheck
from rocmcheck.cli import main
from rocmcheck.model import Status, Verdict
from rocmcheck.outputs import bugreport, diff, formats, matrix, node, render, runtext
from rocmcheck.outputs.storage import load_report, report_json
from rocmcheck.records import SCHEMA, Report, RunInfo

FAKE = str(Path(__file__).parent / "fake_probes")
UNWRITABLE = Path("/proc/rocmcheck-cannot-write-here")  # its folder exists; nobody, root included, creates a file

TEXT = st.text(max_size=12)
SMALL = st.dictionaries(st.text(max_size=6), st.integers() | TEXT, max_size=3)
VERDICTS = st.builds(Verdict, probe=TEXT, variant=TEXT, status=st.sampled_from(list(Status)), params=SMALL,
                     message=TEXT, duration_s=st.floats(0, 1e4), measurements=SMALL,
                     evidence=st.dictionaries(st.sampled_from(["stack", "exit", "signal"]), TEXT, max_size=2),
                     known_issues=st.lists(st.fixed_dictionaries({"id": TEXT, "title": TEXT}), max_size=2),
                     env=st.dictionaries(TEXT, TEXT, max_size=2), device=st.fixed_dictionaries({"name": TEXT}))
RUNS = st.builds(RunInfo, id=TEXT, command=st.sampled_from(["run", "gate", "pytest"]), argv=st.lists(TEXT, max_size=3),
                 started=st.floats(0, 2e9), device=TEXT, notes=st.lists(TEXT, max_size=2),
                 finished=st.none() | st.floats(0, 2e9), partial=st.booleans(), interrupted=st.none() | TEXT,
                 counts=st.dictionaries(st.sampled_from([s.value for s in Status]), st.integers(0, 9)),
                 unwritten=st.dictionaries(st.sampled_from(["json", "md", "jsonl"]), TEXT, max_size=2),
                 extra=st.dictionaries(st.sampled_from(["from_a_newer_minor", "other"]), SMALL, max_size=1))
REPORTS = st.builds(Report, run=RUNS, verdicts=st.lists(VERDICTS, max_size=4),
                    fingerprint=st.fixed_dictionaries({"host": SMALL, "device": SMALL}),
                    tool=st.just({"name": "rocmcheck", "version": "0.1.0"}),
                    sections=st.dictionaries(st.sampled_from(["doctor", "bug_report"]), SMALL, max_size=1))


@given(REPORTS)
def test_a_report_round_trips_through_its_json(report):
    data = json.loads(report_json(report))
    again = Report.from_dict(data)
    assert again == report
    assert again.to_dict() == data  # and the JSON again, key for key


def test_a_new_runs_json_keeps_the_layout_reports_always_had():
    """Readers (and people's scripts) rely on the keys; a new run's file is what runners wrote before."""
    run = RunInfo(id="r", finished=1.0, counts={"pass": 1})
    data = Report(run=run, verdicts=[Verdict("p", "p", Status.PASS)], tool={"name": "rocmcheck"}).to_dict()
    assert list(data) == ["schema", "schema_version", "tool", "run", "fingerprint", "verdicts"]
    assert list(data["run"]) == ["id", "command", "argv", "started", "device", "profile", "isolation",
                                 "isolation_requested", "inject", "env", "notes", "finished", "partial",
                                 "interrupted", "counts"]  # `unwritten` only when a file failed: never in the file
    assert list(run.header()) == list(data["run"])[:11]  # the journal's header: what is known at the start


# A report as rocmcheck 1.0 wrote it before probe ids, GPU labels, per-variant environments,
# known issues and the requested isolation were recorded.
OLD_REPORT = {
    "schema": SCHEMA, "schema_version": "1.0", "tool": {"name": "rocmcheck", "version": "0.0.9"},
    "run": {"id": "20240101-000000-old-1", "command": "run", "started": 1704067200.0, "device": "cuda:0",
            "profile": "full", "isolation": "zygote", "finished": 1704067260.0, "partial": False,
            "interrupted": None, "counts": {"pass": 1, "fail": 1}},
    "fingerprint": {"host": {"system": "Linux"}, "device": {"name": "cuda:0", "backend": "rocm", "count": 1},
                    "device_facts": {"backend": "rocm", "torch": "2.4.0"}},
    "verdicts": [{"variant": "transfer[to-float32]", "status": "fail", "message": "3 of 8 elements are zero",
                  "duration_s": 0.5, "evidence": {"exit": "0"}},
                 {"variant": "device-smoke", "status": "pass", "message": "ok"}],
}


@pytest.mark.children
def test_an_old_report_without_the_newer_fields_loads_into_every_reader(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps(OLD_REPORT))
    report = load_report(path)
    assert report.run.isolation_requested == "" and report.run.notes == [] and report.run.unwritten == {}
    fail, ok = report.verdicts
    assert (fail.probe, fail.status, fail.env, fail.device, fail.known_issues) == ("", Status.FAIL, {}, {}, [])
    assert "FAIL `transfer[to-float32]`" in runtext.markdown_report(report)
    assert render.counts_line(report) == "1 fail, 1 pass"
    assert [c.kind for c in diff.compare(report, report, speed_tolerance_pct=45).changes] == []
    grid = matrix.build([(str(path), report)])
    assert [row["probe"] for row in grid["rows"]] == ["", ""] and grid["rows"][0]["cells"][0]["status"] == "fail"
    assert node.verdict(report, 1)["failing"][0]["check"] == "transfer[to-float32]"
    assert "transfer[to-float32]" in bugreport.build(report, stem="old").markdown
    assert main(["diff", str(path), str(path)]) == 0


def test_a_known_issue_id_of_a_foreign_type_is_dropped_so_the_matrix_builds():
    """A foreign report's known issue with a list for its id made `matrix.build` (and now a run's
    table, which is the matrix of one run) fail on an unhashable key."""
    verdict = {"variant": "a", "status": "fail", "known_issues": [{"id": ["x"], "title": "t"}, {"id": "y"}]}
    report = Report.from_dict({"schema": SCHEMA, "schema_version": "1.0", "run": {"id": "r"}, "verdicts": [verdict]})
    assert report.verdicts[0].known_issues == [{"title": "t"}, {"id": "y"}]
    assert matrix.build([("r", report)])["rows"][0]["cells"][0]["status"] == "fail"


def test_each_output_is_one_table_row_the_front_ends_offer():
    """What adding a format takes: a renderer of the Report and a row; the commands add its flag."""
    for output in formats.OUTPUTS:
        assert output.flag.startswith("--") and output.offered_by and output.help
        assert callable(output.render)
    assert [o.name for o in formats.offered("gate()")] == ["json", "md"]
    from rocmcheck.cli import build_parser

    for command in formats.RUN_COMMANDS:
        flags = {a for action in build_parser()._subparsers._group_actions[0].choices[command]._actions
                 for a in action.option_strings}
        assert {o.flag for o in formats.offered(command)} <= flags, command


# --- a file that cannot be written: recorded, said in one line, the exit code unchanged ---------


def _said(text: str) -> list:
    return [line for line in text.splitlines() if "could not write" in line]


@pytest.mark.children
@pytest.mark.parametrize("probe,code", [("fake-pass", 0), ("fake-fail", 1)])
def test_the_command_records_a_write_failure_and_keeps_its_exit_code(tmp_path, capsys, probe, code):
    args = ["gate", "--device", "cpu", "--probes-path", FAKE, "--require", probe, "--out-dir", str(tmp_path)]
    assert main([*args, "--md", str(UNWRITABLE)]) == code
    out = capsys.readouterr()
    (line,) = _said(out.out + out.err)
    assert str(UNWRITABLE) in line
    assert len(list(tmp_path.glob("*.json"))) == 1  # the outputs that could be written are


@pytest.mark.children
def test_the_node_verdict_carries_the_unwritten_file(tmp_path, capsys):
    args = ["gate", "--device", "cpu", "--probes-path", FAKE, "--require", "fake-pass", "--out-dir",
            str(UNWRITABLE / "reports"), "--json", "-"]
    assert main(args) == 0
    out = capsys.readouterr()
    verdict = json.loads(out.out)
    assert verdict["status"] == "GO" and set(verdict["unwritten"]) == {"jsonl", "json", "md"}
    assert len(_said(out.err)) == 1


@pytest.mark.children
def test_matrix_and_diff_say_a_write_failure_in_one_line_and_keep_their_exit_code(tmp_path, capsys):
    path = tmp_path / "old.json"
    path.write_text(json.dumps(OLD_REPORT))
    assert main(["matrix", str(path), "--md", str(UNWRITABLE)]) == 0
    assert len(_said(capsys.readouterr().err)) == 1
    assert main(["diff", str(path), str(path), "--json", str(UNWRITABLE)]) == 0
    assert len(_said(capsys.readouterr().err)) == 1


@pytest.mark.children
def test_gate_api_records_a_write_failure_and_still_returns_go(capsys):
    verdicts = rocmcheck.gate(device="cpu", require=["fake-pass"], probes_path=[FAKE], verbose=False,
                              out_dir=str(UNWRITABLE / "reports"))
    assert [v.status for v in verdicts] == [Status.PASS]
    (line,) = _said(capsys.readouterr().err)
    assert "rocmcheck-" in line


@pytest.mark.children
def test_gate_api_write_failure_never_hides_a_no_go():
    with pytest.raises(rocmcheck.GateFailed):
        rocmcheck.gate(device="cpu", require=["fake-fail"], probes_path=[FAKE], verbose=False,
                       out_dir=str(UNWRITABLE / "reports"))


@pytest.mark.children
def test_the_plugin_records_a_write_failure_and_keeps_the_outcomes(pytester: pytest.Pytester):
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--rocm-matrix=out", f"--rocm-probes-path={FAKE}",
                                           "-k", "fake-pass or test_nothing", f"--rocm-html={UNWRITABLE}",
                                           timeout=300)
    result.assert_outcomes(passed=2)
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"could not write {UNWRITABLE}: *; the verdict stands without them"])
    assert len(_said(result.stdout.str())) == 1


def test_a_speed_figure_round_trips_and_its_value_is_the_median_of_its_samples() -> None:
    from rocmcheck.context import ProbeContext
    from rocmcheck.model import SpeedFigure, Status, Verdict, speed_figures

    ctx = ProbeContext(device="cpu")
    ctx.measure_speed("h2d-pinned", "GB/s", [10, 30, 20, 1000], method="wall clock, 4 samples after 1 warm-up")
    verdict = Verdict.from_dict(json.loads(json.dumps(
        Verdict("pcie-link", "pcie-link", Status.PASS, measurements=ctx.measurements).to_dict())))
    figure = speed_figures(verdict)["h2d-pinned"]
    assert figure == SpeedFigure("h2d-pinned", "GB/s", [10.0, 30.0, 20.0, 1000.0],
                                 "wall clock, 4 samples after 1 warm-up")
    assert figure.value == 25.0 and verdict.measurements["speed"]["h2d-pinned"]["value"] == 25.0
    assert speed_figures(Verdict("x", "x", Status.PASS, measurements={"speed": "garbage"})) == {}


def test_workload_hashes_round_trip_and_a_malformed_record_is_none() -> None:
    from rocmcheck.model import SDC_MEASUREMENTS, Status, Verdict, WorkloadHashes, workload_hashes

    hashes = WorkloadHashes("sdc-1", {"arch": "gfx942", "torch": "2.9.1"}, {"matmul-fp32": "ab12"},
                            {"conv-bf16": "not deterministic on this library"}, {"repeats": 2})
    verdict = Verdict.from_dict(json.loads(json.dumps(
        Verdict("sdc", "sdc", Status.PASS, measurements={SDC_MEASUREMENTS: hashes.to_dict()}).to_dict())))
    assert workload_hashes(verdict) == hashes
    assert workload_hashes(Verdict("sdc", "sdc", Status.PASS, measurements={SDC_MEASUREMENTS: {"key": 1}})) is None
    assert workload_hashes(Verdict("x", "x", Status.PASS)) is None
