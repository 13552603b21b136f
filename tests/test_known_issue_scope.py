"""A known issue is shown only where its scope fits the run's failing variants (issue 31, item 3).

`side-stream-copy-wrong` ("copy on the default stream") explains a side-stream copy that fails
while the same pinned copy on the default stream passes; when every copy method returns zeros,
that advice would not help, and the gate, `rocmcheck report` and `rocmcheck matrix` say that no
known issue fits instead of showing it. The judging is `known_issues.judged`, over one run's
verdicts on one device; these tests hold every front-end to it.
"""
from __future__ import annotations

import fnmatch
import json
import re

import pytest

from rocmcheck import doctor, registry
from rocmcheck.cli import main
from rocmcheck.errors import UsageError
from rocmcheck.knowledge import known_issues
from rocmcheck.model import Status, Variant, Verdict
from rocmcheck.outputs import bugreport, matrix, matrix_html
from rocmcheck.outputs.render import known_issue_lines
from rocmcheck.outputs.storage import report_json
from rocmcheck.records import Report, RunInfo

GATE_METHODS = ("to", "cuda", "to-nonblocking", "pinned", "tensor", "as-tensor", "copy_", "side-stream", "d2h")
SIDE_STREAM = "A side-stream copy read wrong data"  # the start of side-stream-copy-wrong's title


def copy(method, status, gpu="cuda:0"):
    message = f"{method}: 32 of 32 copies wrong in a training context; first: float32 4 KiB: 1024 zeros" \
        if status == "fail" else "ok"
    return Verdict("transfer", f"transfer[{method}-training]", Status(status),
                   params={"method": method, "context": "training"}, message=message, device={"name": gpu})


def run(failing, gpu="cuda:0"):
    return [copy(m, "fail" if m in failing else "pass", gpu) for m in GATE_METHODS]


def side(verdicts):
    return next(v for v in verdicts if v.variant == "transfer[side-stream-training]")


def test_side_stream_issue_fits_only_when_the_default_stream_copy_passes():
    alone = side(known_issues.judged(run({"side-stream"}), {}))
    assert [i["id"] for i in alone.known_issues] == ["side-stream-copy-wrong"] and alone.unfit_issues == []

    every = side(known_issues.judged(run(GATE_METHODS), {}))
    assert every.known_issues == []
    (unfit,) = every.unfit_issues
    assert unfit["id"] == "side-stream-copy-wrong" and "transfer[pinned-training] failed too" in unfit["why"]


def test_the_scope_is_judged_per_device_and_a_control_that_did_not_run_contradicts_nothing():
    # GPU 1 fails every copy; on GPU 0 only the side stream fails: the issue fits GPU 0 alone
    both = known_issues.judged([*run({"side-stream"}, "cuda:0"), *run(GATE_METHODS, "cuda:1")], {})
    fits = {v.device["name"]: [i["id"] for i in v.known_issues] for v in both if "side-stream" in v.variant}
    assert fits == {"cuda:0": ["side-stream-copy-wrong"], "cuda:1": []}
    (only,) = known_issues.judged([copy("side-stream", "fail")], {})  # -k side-stream: no pinned verdict
    assert [i["id"] for i in only.known_issues] == ["side-stream-copy-wrong"]


def test_an_issue_recorded_by_an_older_rocmcheck_is_judged_again():
    stale = [*(v for v in run(GATE_METHODS) if "side-stream" not in v.variant),
             Verdict.from_dict({**copy("side-stream", "fail").to_dict(),
                                "known_issues": [{"id": "side-stream-copy-wrong", "title": SIDE_STREAM},
                                                 {"id": "site-only", "title": "from a file not loaded here"}]})]
    judged = side(known_issues.judged(stale, {}))
    assert [i["id"] for i in judged.known_issues] == ["site-only"]  # cannot be judged here: kept
    assert [u["id"] for u in judged.unfit_issues] == ["side-stream-copy-wrong"]


def test_none_fits_is_said_plainly():
    every = side(known_issues.judged(run(GATE_METHODS), {}))
    lines = known_issue_lines(every.known_issues, every.unfit_issues)
    assert lines[0] == "- known issue: none fits this failure"
    assert lines[1].startswith("  side-stream-copy-wrong does not: it explains a side-stream copy")
    assert not any(SIDE_STREAM in line for line in lines)


def stale_report(failing):
    """A report whose every failing copy carries side-stream-copy-wrong, as the runner used to
    attach it verdict by verdict."""
    verdicts = run(failing)
    for v in verdicts:
        if v.status is Status.FAIL and "side-stream" in v.variant:
            v.known_issues = [{"id": "side-stream-copy-wrong", "title": SIDE_STREAM + " (as recorded)"}]
    return Report(run=RunInfo(id=f"r-{len(failing)}", command="gate", device="cuda:0"), verdicts=verdicts,
                  fingerprint={"device": {"arch": "gfx1100"}})


def test_matrix_and_bug_report_show_no_issue_whose_scope_does_not_fit(tmp_path, capsys):
    every = tmp_path / "every.json"
    every.write_text(report_json(stale_report(GATE_METHODS)))
    assert main(["matrix", str(every)]) == 0
    text = capsys.readouterr().out
    assert SIDE_STREAM not in text and "none fits this failure" in text
    built = matrix.build([("every", stale_report(GATE_METHODS))])
    cell = built["rows"][7]["cells"][0]
    assert cell["known_issues"] == [] and [u["id"] for u in cell["unfit_issues"]] == ["side-stream-copy-wrong"]
    page = matrix_html.html_page(built)
    assert SIDE_STREAM not in page and "none fits this failure" in page

    md = bugreport.build(stale_report(GATE_METHODS)).markdown
    assert SIDE_STREAM not in md and "none fits this failure" in md and "No known issue matches." in md
    fits = bugreport.build(stale_report({"side-stream"})).markdown
    assert SIDE_STREAM in fits and "none fits" not in fits


def test_doctor_puts_first_only_the_candidates_of_issues_that_fit():
    every, alone = run(GATE_METHODS), run({"side-stream"})
    assert doctor.named_by_known_issues(side(every), every, {}) == {}
    assert doctor.named_by_known_issues(side(alone), alone, {}) == {"transfer-blocking": ["side-stream-copy-wrong"]}


@pytest.mark.children
def test_the_gate_on_a_fault_every_copy_method_shares_shows_no_side_stream_issue(tmp_path, capsys):
    """The gate runs `transfer[every-training]`, one variant for every method: its failure names all nine, and no
    known issue of one method's row (the side stream's) is shown for it."""
    out = tmp_path / "gate.json"
    code = main(["gate", "--keep-going", "--require", "transfer", "--device", "cpu", "--inject", "copy-zeros",
                 "--out-dir", str(tmp_path), "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 1, text
    assert SIDE_STREAM not in text
    saved = json.loads(out.read_text())
    (every,) = saved["verdicts"]
    assert every["variant"] == "transfer[every-training]" and every["message"].startswith("9 of 9 methods wrong")
    assert all(f"{m} 32 of 32 copies" in every["message"] for m in GATE_METHODS), every["message"]
    assert not any(v["known_issues"] for v in saved["verdicts"])
    assert SIDE_STREAM not in next(tmp_path.glob("rocmcheck-*.md")).read_text()


def test_every_scope_names_variants_its_probe_has():
    """A scope whose control variant does not exist would never rule its entry out."""
    specs = registry.load_all()
    scoped = [e for e in known_issues.entries() if "scope" in e]
    assert {e["id"] for e in scoped} >= {"side-stream-copy-wrong", "pinned-memory-race"}
    for entry in scoped:
        variants = [v for v in specs[entry["probe"]].expand()
                    if fnmatch.fnmatchcase(v.id, entry.get("variant", "*"))]
        assert variants, entry["id"]
        ids = {v.id for v in specs[entry["probe"]].expand()}
        for variant in variants:
            for change in entry["scope"]["passing"]:
                control = Variant(variant.spec, {**variant.params, **change})
                assert control.id in ids and control.id != variant.id, (entry["id"], variant.id, change)


@pytest.mark.parametrize("scope, problem", [
    ("pinned", "'scope' must be an object"),
    ({"passing": [{"method": "to"}]}, "'scope' needs 'explains'"),
    ({"explains": "x", "passing": []}, "'scope' needs 'passing'"),
    ({"explains": "x", "passing": ["to"]}, "'scope' needs 'passing'"),
])
def test_a_malformed_scope_is_bad_input(tmp_path, monkeypatch, scope, problem):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"issues": [{"id": "mine", "probe": "transfer", "scope": scope}]}))
    monkeypatch.setenv(known_issues.KNOWN_ISSUES_ENV, str(path))
    with pytest.raises(UsageError, match=f"entry 'mine': {re.escape(problem)}"):
        known_issues.entries()  # what every front-end calls before a run starts
