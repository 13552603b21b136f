"""The report loader (shared by `report`, `matrix` and `diff`) under hostile input: never a
traceback. Partial results where the data allows, a one-line UsageError where it does not."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmcheck.cli import main
from rocmcheck.errors import UsageError
from rocmcheck.model import Status, Verdict
from rocmcheck.outputs import bugreport
from rocmcheck.outputs.storage import load_report
from rocmcheck.records import SCHEMA

SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
           | st.text(max_size=20))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                                         max_size=4), max_leaves=15)
VERDICT = st.builds(lambda probe, status, message, tail: Verdict(
    probe, probe, Status(status), message=message, evidence={"output_tail": tail}).to_dict(),
    st.sampled_from(["device-smoke", "config-lint", "user-probe"]), st.sampled_from([s.value for s in Status]),
    st.text(max_size=30), st.text(max_size=60))


def envelope(verdicts, **fields):
    return {"schema": SCHEMA, "schema_version": "1.0", "tool": {"name": "rocmcheck", "version": "0.1.0"},
            "run": {"id": "fuzz", "device": "cpu", "profile": "full"},
            "fingerprint": {"host": {"env": {"HIP_VISIBLE_DEVICES": "0"}}}, "verdicts": verdicts, **fields}


def journal(report) -> str:
    header = {"record": "header", **{k: v for k, v in report.items() if k != "verdicts"}}
    lines = [header] + [{"record": "verdict", "verdict": v} for v in report["verdicts"]]
    return "\n".join(json.dumps(line) for line in lines) + "\n"


def dicts(report):
    return [v.to_dict() for v in report.verdicts]


def load_bytes(data: bytes, suffix: str = ".json"):
    """(report, None) or (None, UsageError); anything else escapes and fails the test."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"run{suffix}"
        path.write_bytes(data)
        try:
            return load_report(path), None
        except UsageError as exc:
            assert "\n" not in str(exc) and str(exc)
            return None, exc


def assert_usable(report) -> None:
    """What every consumer may rely on, and our own consumer: the bug report builds."""
    assert isinstance(report.run.notes, list) and isinstance(report.fingerprint, dict)
    assert all(isinstance(v.evidence, dict) for v in report.verdicts)
    bug = bugreport.build(report, stem="fuzz")
    assert len(bug.markdown) <= bugreport.GITHUB_BODY_LIMIT
    json.dumps(bug.data, allow_nan=False)


@given(st.binary(max_size=300), st.sampled_from([".json", ".jsonl"]))
def test_arbitrary_bytes(data, suffix):
    report, _ = load_bytes(data, suffix)
    if report is not None:
        assert_usable(report)


FIELDS = ("params", "message", "duration_s", "measurements", "evidence", "known_issues", "env")
ODD_VERDICT = st.builds(lambda v, fields: {**v, **fields}, VERDICT, st.fixed_dictionaries(
    {}, optional={**{k: JSON for k in FIELDS}, "evidence": st.dictionaries(st.sampled_from(
        ["stack", "signal", "signatures", "faults_injected", "returncode", "exit"]), JSON),
        "known_issues": st.lists(st.dictionaries(st.sampled_from(["id", "title", "links", "workaround"]), JSON))}))


FIELD_TYPES = {"params": dict, "message": str, "duration_s": (int, float), "measurements": dict,
               "evidence": dict, "known_issues": list, "env": dict}


def assert_conformed(got, given) -> None:
    """The loader keeps a verdict field only when its type is the documented one (else the
    field's default); nested evidence and known issues only lose entries, never gain or change them."""
    default = Verdict("p", "v", Status.PASS).to_dict()
    for key in FIELD_TYPES:
        kept = key in given and isinstance(given[key], FIELD_TYPES[key])
        if key not in ("evidence", "known_issues"):
            assert got[key] == (given[key] if kept else default[key])
    evidence = given.get("evidence") if isinstance(given.get("evidence"), dict) else {}
    assert got["evidence"].items() <= evidence.items()
    assert len(got["known_issues"]) <= len(given.get("known_issues", []))
    well_formed = all(isinstance(v, FIELD_TYPES[k]) for k, v in given.items() if k in FIELD_TYPES) \
        and all(isinstance(v, str) for v in given["evidence"].values()) and given["known_issues"] == []
    if well_formed:
        assert got == given  # what rocmcheck itself writes comes back unchanged


# 20 examples, not the profile's 60: each renders two bug reports whose reproducers embed a dozen modules, and
# redacting those scripts took 104 s of a loaded CI run at 60
@settings(max_examples=20)
@given(st.lists(VERDICT | ODD_VERDICT, max_size=4), JSON, JSON, st.lists(JSON, max_size=3))
def test_arbitrary_json_inside_a_valid_envelope(verdicts, run, fingerprint, junk):
    """Foreign values where a run, a fingerprint or a verdict belongs: loads, and renders."""
    facts = {key: fingerprint for key in ("devices", "arch_list", "torch", "rocm")}
    for data in (envelope(verdicts + junk, run=run, fingerprint=fingerprint),
                 envelope(verdicts, doctor=run, fingerprint={"host": {k: junk for k in ("env", "kernel_cmdline",
                                                                                       "packages", "kernel")},
                                                             "device_facts": facts, "device": junk})):
        for suffix, text in ((".json", json.dumps(data)), (".jsonl", journal(data))):
            report, error = load_bytes(text.encode(), suffix)
            assert error is None, error
            assert_usable(report)
            for got, original in zip((v.to_dict() for v in report.verdicts), verdicts):
                assert_conformed(got, original)


@given(st.lists(VERDICT, min_size=1, max_size=4), st.data())
def test_truncated_files(verdicts, data):
    full = journal(envelope(verdicts))
    cut = data.draw(st.integers(min_value=1, max_value=len(full) - 1))
    report, error = load_bytes(full[:cut].encode(), ".jsonl")
    header_end = full.index("\n")
    if cut <= header_end:
        assert report is None and error is not None  # without its header a journal says nothing
        return
    assert error is None, error
    assert dicts(report) == verdicts[:len(report.verdicts)]  # a prefix: partial, never invented
    assert_usable(report)
    text = json.dumps(envelope(verdicts))
    cut = data.draw(st.integers(min_value=1, max_value=len(text) - 1))
    assert load_bytes(text[:cut].encode())[1] is not None


@given(st.lists(VERDICT, max_size=3), st.integers(min_value=1, max_value=9), st.integers(0, 99),
       st.sampled_from([".json", ".jsonl"]))
def test_schema_versions_newer_minor_loads_other_major_is_rejected(verdicts, major, minor, suffix):
    data = envelope(verdicts, schema_version=f"{major}.{minor}", field_from_the_future={"x": [1]})
    text = json.dumps(data) if suffix == ".json" else journal(data)
    report, error = load_bytes(text.encode(), suffix)
    if major == 1:
        assert error is None and dicts(report) == verdicts
    else:
        assert report is None and f"schema version {major}.{minor} is not supported" in str(error)


@given(st.lists(VERDICT, max_size=3), st.sampled_from([".json", ".jsonl"]), st.data())
def test_bom_and_invalid_utf8(verdicts, suffix, data):
    raw = (json.dumps(envelope(verdicts)) if suffix == ".json" else journal(envelope(verdicts))).encode()
    report, error = load_bytes(b"\xef\xbb\xbf" + raw, suffix)
    assert error is None and dicts(report) == verdicts
    at = data.draw(st.integers(0, len(raw)))
    report, error = load_bytes(raw[:at] + data.draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"])) + raw[at:],
                               suffix)
    assert report is None and "not UTF-8" in str(error)


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
@pytest.mark.parametrize("insert,message", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("1" * 5000, "not valid JSON"),  # over Python's int-string limit
    ("NaN", "not valid JSON"),  # Python writes it, JSON forbids it; rocmcheck writes "nan"
    ("-Infinity", "not valid JSON"),
], ids=["deep-nesting", "huge-integer", "NaN", "-Infinity"])
def test_deep_nesting_huge_integers_and_nan_are_one_line_errors(suffix, insert, message):
    data = envelope([Verdict("p", "p", Status.FAIL).to_dict()])
    text = json.dumps(data) if suffix == ".json" else journal(data)
    text = text.replace('"measurements": {}', f'"measurements": {{"x": {insert}}}')
    report, error = load_bytes(text.encode(), suffix)
    if suffix == ".jsonl":  # only the verdict's line is damaged: the run loads, partial, without it
        assert error is None and report.verdicts == [] and report.run.partial is True
    else:
        assert report is None and message in str(error)


@given(st.text(max_size=8))
def test_any_schema_version_string(version):
    report, error = load_bytes(json.dumps(envelope([], schema_version=version)).encode())
    major = version.split(".")[0]
    assert (error is None) == (major.isascii() and major.isdigit() and int(major) == 1), error


# Inputs on which the loader used to raise TypeError/ValueError/AttributeError (fixed in storage.py).
@pytest.mark.parametrize("suffix,text", [
    (".jsonl", '{"record":"header","schema":"rocmcheck-report","schema_version":"1.0","run":[1,2]}\n'),
    (".jsonl", '{"record":"header","schema":"rocmcheck-report","schema_version":"1.0"}\n{"record":"end","run":[1]}\n'),
    (".json", '{"schema":"rocmcheck-report","schema_version":"\u00b2.0","verdicts":[]}'),
    (".json", '{"schema":"rocmcheck-report","schema_version":"1.0","verdicts":[],"fingerprint":{"device":[1]}}'),
], ids=["journal-run-list", "journal-end-run-list", "superscript-major", "fingerprint-device-list"])
def test_loader_regressions_found_by_fuzzing(suffix, text):
    report, error = load_bytes(text.encode(), suffix)
    if report is not None:
        assert_usable(report)
        from rocmcheck.host.fingerprint import summary
        summary(report.fingerprint)
    else:
        assert "schema version" in str(error)


def test_moderate_nesting_loads_and_renders():
    deep = "[" * 900 + "]" * 900  # parses, but would overflow a naive recursive walk
    text = json.dumps(envelope([Verdict("p", "p", Status.FAIL).to_dict()], doctor={})).replace(
        '"doctor": {}', f'"doctor": {deep}')
    report, error = load_bytes(text.encode())
    assert error is None
    assert_usable(report)


@given(st.binary(max_size=200) | JSON.map(lambda v: json.dumps(envelope([], run=v)).encode()))
def test_cli_report_from_fuzzed_file_exits_0_or_2_without_traceback(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.json"
        path.write_bytes(data)
        import contextlib
        import io

        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["report", "--from", str(path), "-o", str(Path(folder) / "out.md")])
        assert code in (0, 2)
        assert "Traceback" not in err.getvalue() and "internal error" not in err.getvalue()
        assert (code == 2) == (err.getvalue().count("\n") == 1)
