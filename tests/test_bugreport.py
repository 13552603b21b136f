"""`rocmcheck report`: the redacted bug-report attachment (Markdown + JSON twin + reproducers)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rocmcheck.cli import main
from rocmcheck.outputs import bugreport
from rocmcheck.outputs.storage import SCHEMA, load_report

HF = "hf_" + "abcdefghij" * 3 + "WXYZ"


def _files(md: Path):
    return md.read_text(), md.with_suffix(".json").read_text(), sorted(md.parent.glob(f"{md.stem}-repro-*.py"))


def _verdict(variant, status, message, **evidence):
    return {"probe": variant.split("[")[0], "variant": variant, "status": status, "params": {}, "message": message,
            "duration_s": 0.5, "measurements": {}, "evidence": evidence, "known_issues": [], "env": {}}


def _saved_report(tmp_path: Path, verdicts, **extra) -> Path:
    report = {"schema": SCHEMA, "schema_version": "1.3", "tool": {"name": "rocmcheck", "version": "0.0.9"},
              "run": {"id": "old-run", "device": "cuda:0", "profile": "full", "isolation": "zygote",
                      "argv": ["gate", "--token", "tok-in-old-argv"], "started": 1.7e9, "inject": ""},
              "fingerprint": {"host": {"system": "Linux", "python": "3.11.7",
                                       "env": {"HF_TOKEN": HF, "ROCR_VISIBLE_DEVICES": "0", "HOME": "/home/alice",
                                               "HIP_API_KEY": "hip-key-value"}},
                              "device_facts": {"torch": "2.9.1+rocm6.4", "rocm": "6.4", "backend": "rocm",
                                               "devices": [{"index": 0, "name": "Radeon RX 7900 XTX",
                                                            "arch": "gfx1100", "memory_bytes": 25753026560}]},
                              "device": {"name": "cuda:0", "backend": "rocm", "arch": "gfx1100"}},
              "verdicts": verdicts, **extra}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(report))
    return path


@pytest.mark.children
def test_from_a_saved_run_failing_first_with_evidence_known_issues_matrix_doctor(tmp_path, capsys):
    hang_stack = 'Thread 0x7f (most recent call first):\n  File "/home/alice/probes/attention.py", line 40 in backward'
    verdicts = [
        _verdict("config-lint[alloc-conf]", "pass", "ok"),
        _verdict("config-lint[python-version]", "warn", "Python 3.14 is newer than torch 2.9 supports"),
        _verdict("device-smoke", "crash", "crashed: SIGABRT", signal="SIGABRT", exit="SIGABRT", returncode=-6,
                 output_tail="Memory access fault by GPU node-1 (Agent handle: 0x5) on address (nil). "
                             "Reason: Unknown. host node7.example.org 10.20.30.40"),
        _verdict("attention-model[math]", "hang", "no verdict within 120s; child killed", stack=hang_stack),
        {"status": "fail"},  # damaged record: left out, counted
    ]
    doctor = {"checks": [{"name": "amdgpu loaded", "ok": True}, {"name": "render group", "ok": False,
                                                                   "fix": "sudo usermod -aG render $USER"}]}
    source = _saved_report(tmp_path, verdicts, doctor=doctor)
    out = tmp_path / "out" / "attach.md"
    out.parent.mkdir()  # a named file's folder is never made for it
    assert main(["report", "--from", str(source), "-o", str(out), "--anonymize"]) == 0
    md, twin, scripts = _files(out)
    for gone in (HF, "tok-in-old-argv", "/home/alice", "10.20.30.40", "hip-key-value"):
        assert gone not in md and gone not in twin
    assert "Redacted 2 values: 1 secret option, 1 secret-named variable." in md and "`HIP_API_KEY=[REDACTED]`" in md
    assert "ROCR_VISIBLE_DEVICES" in md and "gfx1100" in md and "Radeon RX 7900 XTX" in md
    # failing verdicts first, worst first (hang before crash: rocmcheck.model.Status), then warnings,
    # known issues, the matrix, the doctor
    order = [md.index(s) for s in ("## HANG `attention-model[math]`", "## CRASH `device-smoke`", "## Warnings",
                                   "## Known issues", "<details><summary>Full matrix (4 variants)", "## Doctor")]
    assert order == sorted(order)
    assert "- signal: SIGABRT" in md and "Memory access fault by GPU node-1" in md
    assert "line 40 in backward" in md  # the hung child's stack
    assert "memory-access-fault-nil" in md and "https://github.com/ROCm/legacy-rocm-build/issues/5238" in md
    assert "sudo usermod -aG render" in md and "**fix**" in md
    assert "1 malformed verdict record in the source was left out" in md
    assert "Anonymized: home directory, IP address" in md
    assert {p.name for p in scripts} == {"attach-repro-device-smoke.py", "attach-repro-attention-model-math.py"}
    assert "'device': 'cuda:0'" in scripts[1].read_text()  # the recorded device, not this machine's
    assert json.loads(twin)["doctor"]["checks"][1]["ok"] is False
    assert "wrote" in capsys.readouterr().out


@pytest.mark.children
def test_markdown_fits_a_github_issue_and_says_what_was_cut(tmp_path):
    tail = "\n".join(f"line {i} " + "x" * 70 for i in range(60))
    verdicts = [_verdict(f"device-smoke[case{i}]", "fail", f"wrong {i}", output_tail=tail) for i in range(60)]
    verdicts += [_verdict(f"config-lint[c{i}]", "pass", "ok") for i in range(200)]
    report = load_report(_saved_report(tmp_path, verdicts))
    bug = bugreport.build(report, stem="big")
    assert len(bug.markdown) <= bugreport.GITHUB_BODY_LIMIT
    cuts = bug.data["bug_report"]["markdown_cut"]
    assert cuts[:3] == [bugreport.TRIM_STEPS[0][0], "evidence tails beyond 1,500 characters",
                        "passing and skipped rows of the matrix"]
    assert "Trimmed to fit a GitHub issue" in bug.markdown and "`big.json` has everything" in bug.markdown
    assert bug.data["verdicts"][0]["evidence"]["output_tail"] == tail  # the twin keeps everything
    small = bugreport.build(load_report(_saved_report(tmp_path, verdicts[:2])), stem="small")
    # two failures with their evidence fit; only the generic helper modules of the reproducer code go first
    assert small.data["bug_report"]["markdown_cut"] == [bugreport.TRIM_STEPS[0][0]]
    assert "(its rocmcheck helper modules: in the file)" in small.markdown
    assert "def device_smoke" in small.markdown and "in the .py file" in small.markdown
    assert tail.splitlines()[-1] in small.markdown and "characters cut; the JSON twin has them" in small.markdown
    assert len(bug.reproducers) == 60 and "big-repro-device-smoke-case0.py" in bug.markdown


@pytest.mark.children
def test_thousands_of_verdicts_and_a_huge_fingerprint_still_fit(tmp_path):
    verdicts = [_verdict(f"gone-probe[{i}]", "crash", f"Memory access fault {i}") for i in range(1500)]
    verdicts += [_verdict(f"config-lint[w{i}]", "warn", "risky " * 20) for i in range(300)]
    bug = bugreport.build(load_report(_saved_report(tmp_path, verdicts)), stem="many")
    assert len(bug.markdown) <= bugreport.GITHUB_BODY_LIMIT
    assert bug.data["bug_report"]["markdown_cut"][-2:] == ["failing verdicts beyond the first 20", "the matrix"]
    assert "and 1430 more" in bug.markdown and "- and 250 more (see the matrix)" in bug.markdown
    assert bug.data["bug_report"]["no_reproducer"]["gone-probe[0]"].startswith("probe 'gone-probe' is not known")
    report = load_report(_saved_report(tmp_path, verdicts[:3]))
    report.fingerprint["host"]["packages"] = {f"pkg{i}": "1.0" * 10 for i in range(3000)}
    huge = bugreport.build(report, stem="huge")
    assert len(huge.markdown) <= bugreport.GITHUB_BODY_LIMIT
    assert huge.markdown.rstrip().endswith("[cut at 65,536 characters: see the JSON twin `huge.json`]**")
    assert huge.data["bug_report"]["markdown_cut"][-1] == "everything past the GitHub issue limit"


@pytest.mark.children
def test_partial_journal_is_reported_as_partial(tmp_path):
    journal = tmp_path / "run.jsonl"
    lines = [{"record": "header", "schema": SCHEMA, "schema_version": "1.0", "run": {"id": "j"}, "fingerprint": {}},
             {"record": "started", "variant": "device-smoke"},
             {"record": "verdict", "verdict": _verdict("device-smoke", "fail", "zeros")},
             {"record": "started", "variant": "attention-model[math]"}]
    journal.write_text("\n".join(json.dumps(r) for r in lines) + '\n{"record": "verd')
    out = tmp_path / "j.md"
    assert main(["report", "--from", str(journal), "-o", str(out)]) == 0
    assert "PARTIAL: interrupted during attention-model[math]" in out.read_text()


@pytest.mark.children
@pytest.mark.parametrize("args,message", [
    (["--probe", "no-such-probe", "--device", "cpu"], "unknown probe id 'no-such-probe'"),
    (["--from", "{missing}"], "cannot read"),
    (["--from", "{dir}"], "cannot read"),
    (["--from", "{garbage}"], "not valid JSON"),
    (["--from", "{binary}"], "not UTF-8"),
    (["--from", "{foreign}"], "not a rocmcheck report"),
    (["--from", "{garbage}", "--probe", "device-smoke"], "drop --probe"),
    (["-o", "{dir}/x.json"], "-o names the Markdown file"),
    (["--from", "{garbage}", "--anonymize", "--bogus"], "unrecognized arguments"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    (tmp_path / "garbage.json").write_text('{"schema": "rocmcheck-report", "verd')
    (tmp_path / "binary.json").write_bytes(b'{"schema": "rocmcheck-report", "verd\xff"}')
    (tmp_path / "foreign.json").write_text('{"name": "not ours"}')
    paths = {"missing": tmp_path / "missing.json", "dir": tmp_path, "garbage": tmp_path / "garbage.json",
             "binary": tmp_path / "binary.json",
             "foreign": tmp_path / "foreign.json"}
    assert main(["report", *[a.format(**paths) for a in args]]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert list(tmp_path.glob("*.md")) == []


@pytest.mark.children
def test_help_and_from_do_not_import_torch(tmp_path):
    import subprocess

    source = _saved_report(tmp_path, [_verdict("device-smoke", "fail", "zeros")])
    code = ("import sys, contextlib, io\nfrom rocmcheck.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    assert main(['report', '--from', {str(source)!r}, '-o', {str(tmp_path / 'r.md')!r}]) == 0\n"
            "    try:\n        main(['report', '--help'])\n    except SystemExit:\n        pass\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
    assert (tmp_path / "r-repro-device-smoke.py").is_file()


@pytest.mark.children
def test_without_from_it_reports_the_newest_complete_run_and_says_so(tmp_path, monkeypatch, capsys):
    """Issue 21, section 8: `report` alone re-ran the whole full profile (about 4 minutes) without a
    word. The newest complete run in the out-dir is used and named; a partial run, an older run
    and the bug report's own JSON twin are not."""
    import os

    from rocmcheck.engine import runner

    out = tmp_path / "reports"
    out.mkdir()
    runs = {}
    for age, name, extra in ((300, "older", {}), (200, "newest", {}), (100, "partial", {"partial": True})):
        path = _saved_report(tmp_path, [_verdict("device-smoke", "fail", f"zeros in the {name} run")])
        data = json.loads(path.read_text())
        data["run"].update(id=name, **extra)
        runs[name] = out / f"rocmcheck-{name}.json"
        runs[name].write_text(json.dumps(data))
        os.utime(runs[name], (1.7e9 - age, 1.7e9 - age))
    monkeypatch.setattr(runner.Runner, "__init__", lambda *a, **k: 1 / 0)  # nothing may run
    for _ in range(2):  # the second time, the first report's JSON twin is the newest file there
        assert main(["report", "--out-dir", str(out)]) == 0
        captured = capsys.readouterr()
        assert f"reporting the newest complete run in {out}: {runs['newest']} (1 verdict)" in captured.err
    assert "zeros in the newest run" in (out / "rocmcheck-report-newest.md").read_text()
