"""The `rocmcheck` command as users meet it: exit codes, one-line errors, files written."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FAKE = str(Path(__file__).parent / "fake_probes")


def cli(*args: str, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rocmcheck", *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)


@pytest.mark.children
@pytest.mark.parametrize("args,message", [
    (["run", "--probe", "no-such-probe"], "unknown probe id 'no-such-probe'"),
    (["run", "--device", "gpu7"], "--device must be auto, all, cpu or cuda:N[,M...]"),
    (["run", "--timeout", "-1"], "must be a finite positive number"),
    (["run", "--timeout", "soon"], "is not a number"),
    (["run", "--inject", "melt"], "unknown fault 'melt'"),
    (["run", "--probes-path", "/no/such/dir"], "is not a readable directory"),
    (["run", "-k", "to and"], "-k expression"),
    (["run", "--isolation", "thread"], "invalid choice"),
    (["list", "--probe", "nope*"], "unknown probe id"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    out = cli(*args)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rocmcheck: error:") and message in lines[0], out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.children
def test_help_and_list_do_not_import_torch():
    code = ("import sys, contextlib, io; from rocmcheck import cli\n"
            "for argv in (['--help'], ['env', '--help'], ['list'], ['list', '--faults']):\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        try: cli.main(argv)\n"
            "        except SystemExit: pass\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.children
def test_list_shows_variants_timeouts_and_gate_membership():
    out = cli("list", "--probes-path", FAKE, "--probe", "fake-p*")
    assert out.returncode == 0
    assert "fake-pass" in out.stdout and "gate" in out.stdout and "30s" in out.stdout
    faults = cli("list", "--faults")
    for name in ("copy-zeros", "bf16-zeros", "matmul-nan", "backward-hang", "segv", "abort", "exit-no-result",
                 "ignore-sigterm", "grandchild-hang", "output-flood"):
        assert name in faults.stdout


@pytest.mark.children
def test_run_exit_codes_and_files(tmp_path):
    ok = cli("run", "--device", "cpu", "--probes-path", FAKE, "--probe", "fake-pass", "--probe", "fake-skip",
             "--out-dir", str(tmp_path / "a"))
    assert ok.returncode == 0, ok.stderr
    assert " PASS  fake-pass" in ok.stdout and "1 skip, 1 pass" in ok.stdout
    files = sorted(p.suffix for p in (tmp_path / "a").iterdir())
    assert files == [".json", ".jsonl", ".md"]
    bad = cli("run", "--device", "cpu", "--probes-path", FAKE, "--probe", "fake-pass", "--probe", "fake-fail",
              "--json", str(tmp_path / "r.json"), "--md", str(tmp_path / "r.md"), "--out-dir", str(tmp_path / "b"))
    assert bad.returncode == 1
    report = json.loads((tmp_path / "r.json").read_text())
    assert {v["variant"]: v["status"] for v in report["verdicts"]} == {"fake-pass": "pass", "fake-fail": "fail"}
    assert "FAIL `fake-fail`" in (tmp_path / "r.md").read_text()


@pytest.mark.children
def test_gate_go_and_no_go(tmp_path):
    go = cli("gate", "--device", "cpu", "--probes-path", FAKE, "--require", "fake-pass", "--out-dir", str(tmp_path))
    assert go.returncode == 0, go.stderr
    assert "\nGO — 1 pass" in go.stdout
    nogo = cli("gate", "--device", "cpu", "--probes-path", FAKE, "--require", "fake-pass", "--require", "fake-abort",
               "--out-dir", str(tmp_path))
    assert nogo.returncode == 1
    assert "NO-GO" in nogo.stdout and "CRASH fake-abort" in nogo.stdout and "SIGABRT" in nogo.stdout


@pytest.mark.children
def test_gate_fails_when_a_fault_is_injected(tmp_path):
    out = cli("gate", "--device", "cpu", "--require", "device-smoke", "--inject", "copy-zeros",
              "--out-dir", str(tmp_path))
    assert out.returncode == 1 and "FAIL device-smoke" in out.stdout


@pytest.mark.children
def test_env_reports_torch_and_host_facts(tmp_path):
    mi250x = Path(__file__).parent / "fixtures" / "nodehealth" / "mi250x"  # a card with a page pending retirement
    host = {**__import__("os").environ, "ROCMCHECK_HOST_ROOT": str(mi250x)}
    out = cli("env", "--json", env={**host, "HSA_OVERRIDE_GFX_VERSION": "11.0.0",
                                    "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyzabcdefgh"})
    assert out.returncode == 0, out.stderr
    fp = json.loads(out.stdout)
    assert fp["device_facts"]["torch"].startswith("2.")
    assert fp["host"]["env"]["HSA_OVERRIDE_GFX_VERSION"] == "11.0.0"
    assert fp["node_health"]["0000:c1:00.0"]["pages"] == {"retired": 1, "pending": 1, "failed": 0}
    assert "HF_TOKEN" not in out.stdout
    text = cli("env", env=host)
    assert "torch" in text.stdout and "Python" in text.stdout and "host GPUs" in text.stdout
    assert "health 0000:c1:00.0  amdgpu sysfs; uncorrectable 0; correctable 0; bad pages 1 retired, 1 pending, " \
           "0 failed; PCIe replays 0; junction 41 C (critical 110)" in text.stdout


@pytest.mark.children
def test_runs_from_any_directory(tmp_path):
    out = cli("run", "--device", "cpu", "--probe", "device-smoke", "--out-dir", "out", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert list((tmp_path / "out").glob("*.json"))


def _long_schema(path: Path) -> str:
    path.write_text(json.dumps({"schema": "rocmcheck-report", "schema_version": "1" * 5000 + ".0", "verdicts": []}))
    return str(path)


BAD_KNOWN_ISSUES = '{"issues": [{"id": "mine", "probe": "fake-*", "message": "(unclosed"}]}'


@pytest.mark.parametrize("make_args, message", [
    (lambda d: ["run", "--out-dir", str(d / "a-file")], "a-file is a file, not a folder"),
    (lambda d: ["gate", "--out-dir", str(d / "a-file" / "sub")], "a-file is a file, not a folder"),
    (lambda d: ["run", "--md", str(d / "a-folder")], "--md * is a folder: name a file"),
    (lambda d: ["run", "--json", str(d / "missing" / "r.json")], "the folder * does not exist"),
    (lambda d: ["matrix", str(d / "good.json"), "--html", str(d / "a-folder")], "--html * is a folder"),
    (lambda d: ["report", "--from", str(d / "good.json"), "-o", str(d / "a-folder")], "-o * is a folder"),
    (lambda d: ["run", "--timeout", "inf"], "must be a finite positive number, not inf"),
    (lambda d: ["run", "--timeout", "1e309"], "must be a finite positive number, not 1e309"),
    (lambda d: ["run", "--timeout", "nan"], "must be a finite positive number, not nan"),
    (lambda d: ["run", "--timeout", "-1"], "must be a finite positive number, not -1"),
    (lambda d: ["run", "--first-use-timeout", "0"], "must be a finite positive number, not 0"),
    (lambda d: ["run", "--inject", ","], "fault spec ',' has an empty fault"),
    (lambda d: ["run", "--inject", "segv@"], "fault spec 'segv@' has an empty probe glob after @"),
    (lambda d: ["matrix", _long_schema(d / "long.json")], "schema version 11111111111111111111… is not supported"),
    (lambda d: ["diff", _long_schema(d / "long.json"), str(d / "good.json")], "schema version 1111*… is not supported"),
    (lambda d: ["report", "--from", _long_schema(d / "long.json")], "schema version 1111*… is not supported"),
    (lambda d: ["run", "--probes-path", FAKE, "--probe", "fake-pass"],
     "*known.json': entry 'mine': 'message' is not a valid regular expression*"),
    # issue 31 item 7: every command's output paths, one check: no folder is made for a named file
    (lambda d: ["report", "--from", str(d / "good.json"), "-o", str(d / "nodir" / "r.md")],
     "-o */nodir/r.md: the folder */nodir does not exist"),
    (lambda d: ["report", "--from", str(d / "good.json"), "--json", str(d / "nodir" / "r.json")],
     "--json */nodir/r.json: the folder */nodir does not exist"),
    (lambda d: ["diff", str(d / "good.json"), str(d / "good.json"), "--json", str(d / "nodir" / "d.json")],
     "--json */nodir/d.json: the folder */nodir does not exist"),
    (lambda d: ["diff", str(d / "good.json"), str(d / "good.json"), "--json", str(d / "a-folder")],
     "--json * is a folder: name a file"),
    (lambda d: ["matrix", str(d / "good.json"), "--md", str(d / "nodir" / "m.md")],
     "the folder */nodir does not exist"),
    # issue 31 item 8: '-' is stdout only where a command writes a document there
    (lambda d: ["run", "--md", "-"], "--md -: only --json writes to stdout ('-') here; name a file"),
    (lambda d: ["gate", "--md", "-"], "--md -: only --json writes to stdout ('-') here; name a file"),
    (lambda d: ["report", "--from", str(d / "good.json"), "--json", "-"],
     "--json -: this command writes nothing to stdout ('-') here; name a file"),
    (lambda d: ["matrix", str(d / "good.json"), "--html", "-"], "--html -: this command writes nothing to stdout*"),
    (lambda d: ["diff", str(d / "good.json"), str(d / "good.json"), "--json", "-"],
     "--json -: this command writes nothing to stdout*"),
], ids=["out-dir-file", "out-dir-under-file", "md-folder", "json-missing-folder", "html-folder", "o-folder",
        "timeout-inf", "timeout-1e309", "timeout-nan", "timeout-negative", "first-use-zero", "inject-comma",
        "inject-empty-glob", "matrix-long-schema", "diff-long-schema", "report-long-schema", "known-issues",
        "report-o-missing-folder", "report-json-missing-folder", "diff-json-missing-folder", "diff-json-folder",
        "matrix-md-missing-folder", "run-md-stdout", "gate-md-stdout", "report-json-stdout", "matrix-html-stdout",
        "diff-json-stdout"])
def test_bad_input_fails_in_one_line_before_any_probe_runs(tmp_path, monkeypatch, capsys, make_args, message):
    """Issue 21, section 7: each is a one-line error and exit 2, before a runner exists, leaving no file."""
    from fnmatch import fnmatch

    from rocmcheck import cli
    from rocmcheck.engine import runner

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("mine\n")
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "known.json").write_text(BAD_KNOWN_ISSUES)
    (tmp_path / "good.json").write_text(json.dumps({"schema": "rocmcheck-report", "schema_version": "1.0",
                                                    "verdicts": []}))
    monkeypatch.setenv("ROCMCHECK_KNOWN_ISSUES", str(tmp_path / "known.json"))
    args = make_args(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    started = []
    monkeypatch.setattr(runner.Runner, "__init__", lambda self, *a, **k: started.append(a) or 1 / 0)
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and fnmatch(lines[0], f"rocmcheck: error: *{message}*"), err
    assert started == [] and sorted(tmp_path.rglob("*")) == before  # no probe ran, nothing written or created


def test_a_file_may_go_in_the_out_dir_the_run_creates(tmp_path):
    from rocmcheck.engine.options import check_outputs

    new = tmp_path / "reports"
    check_outputs({"--out-dir": new}, {"--json": new / "run.json", "-o": new / "bug.md"})
    assert not new.exists()  # checked, nothing created


# --- issue 31 item 8: options that were silently ignored -------------------------------------


@pytest.mark.children
def test_run_json_dash_writes_the_report_to_stdout_and_the_rest_to_stderr(tmp_path, capfd):
    """`run --json -` wrote JSON nowhere and exited 0; now stdout is the JSON report, alone."""
    from rocmcheck.cli import main

    code = main(["run", "--device", "cpu", "--probes-path", FAKE, "--probe", "fake-pass", "--probe", "fake-fail",
                 "--out-dir", str(tmp_path), "--json", "-"])
    out, err = capfd.readouterr()
    assert code == 1, err
    report = json.loads(out)  # the whole of stdout is one document
    assert report["schema"] == "rocmcheck-report"
    assert {v["variant"]: v["status"] for v in report["verdicts"]} == {"fake-pass": "pass", "fake-fail": "fail"}
    assert "fake-fail" in err and "wrote" in err  # the live lines, the matrix and the files line
    assert list(tmp_path.glob("rocmcheck-*.json"))  # the run's own file as well


def test_report_from_a_run_writes_the_files_json_and_md_name(tmp_path, capsys):
    """`report --from R.json --json x --md y` wrote neither; now both, from the loaded run."""
    from rocmcheck.cli import main
    from rocmcheck.outputs.storage import load_report

    saved = {"schema": "rocmcheck-report", "schema_version": "1.3", "run": {"id": "saved", "device": "cpu"},
             "verdicts": [{"probe": "fake-fail", "variant": "fake-fail", "status": "fail", "message": "boom",
                           "params": {}, "evidence": {}, "known_issues": [], "env": {}, "duration_s": 0.1}]}
    (tmp_path / "R.json").write_text(json.dumps(saved))
    x, y = tmp_path / "x.json", tmp_path / "y.md"
    assert main(["report", "--from", str(tmp_path / "R.json"), "--json", str(x), "--md", str(y),
                 "-o", str(tmp_path / "bug.md")]) == 0
    assert [v.variant for v in load_report(x).verdicts] == ["fake-fail"] and load_report(x).run.id == "saved"
    assert "fake-fail" in y.read_text() and "FAIL" in y.read_text()
    out = capsys.readouterr().out
    assert f"wrote {x}" in out and f"wrote {y}" in out and (tmp_path / "bug.md").is_file()


@pytest.mark.parametrize("inject", ["segv@nosuchprobe", "segv@fake-pass[1]", "simgpu:1,segv@fake-pas"])
def test_a_fault_aimed_at_no_selected_probe_is_refused_before_the_run(tmp_path, monkeypatch, capsys, inject):
    """`gate --inject segv@nosuchprobe` was GO with no word that the fault met no probe."""
    from rocmcheck.cli import main
    from rocmcheck.engine import runner

    started = []
    monkeypatch.setattr(runner.Runner, "__init__", lambda self, *a, **k: started.append(a) or 1 / 0)
    argv = ["gate", "--device", "cpu", "--probes-path", FAKE, "--require", "fake-pass", "--out-dir", str(tmp_path)]
    assert main([*argv, "--inject", inject]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "is aimed at no probe of this run" in lines[0] and "fake-pass" in lines[0], lines
    assert captured.out == "" and started == [] and list(tmp_path.iterdir()) == []


def test_a_fault_aimed_at_a_selected_probe_or_the_canary_passes_the_check():
    from rocmcheck import registry
    from rocmcheck.engine.runner import check_fault_targets
    from rocmcheck.engine.selection import select

    variants = select(registry.load_all([FAKE]), ["fake-pass"], "")
    for inject in ("segv@fake-pass", "segv@fake-*", "segv", "hang@device-canary", "simgpu:1,segv@fake-pass"):
        check_fault_targets(inject, variants)  # no UsageError
