"""The pytest plugin, always in a pytest subprocess (`runpytest_subprocess`): outcomes,
summary lines, files written, junitxml, -k/-m/--deselect, baselines, xdist, usage errors.

Fake probes (one per verdict) are written into each pytester directory and loaded with
--rocm-probes-path; `-k fake` keeps the built-in probes out of the runs.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict

import pytest

from rocmcheck.outputs.storage import load_report
from rocmcheck.records import SCHEMA, SCHEMA_VERSION

FAKE_PROBES = '''
import os, signal, time
import rocmcheck

@rocmcheck.probe("fake-ok", title="ok", targets="-", variants={"n": [1, 2]}, gate=lambda p: p["n"] == 1)
def ok(ctx, n):
    ctx.measure(n=n)

@rocmcheck.probe("fake-fail", title="fail", targets="-")
def fail(ctx):
    ctx.measure(max_err=1.5)
    ctx.fail("3 of 8 elements differ")

@rocmcheck.probe("fake-crash", title="crash", targets="-")
def crash(ctx):
    os.kill(os.getpid(), signal.SIGSEGV)

@rocmcheck.probe("fake-hang", title="hang", targets="-", timeout=60)
def hang(ctx):
    time.sleep(600)

@rocmcheck.probe("fake-skip", title="skip", targets="-")
def skip(ctx):
    ctx.skip("needs a unicorn")

@rocmcheck.probe("fake-warn", title="warn", targets="-")
def warn(ctx):
    ctx.warn("bf16 only emulated")

@rocmcheck.probe("fake-error", title="error", targets="-")
def error(ctx):
    raise RuntimeError("HIP error: invalid device function")
'''

EXPECTED = {"fake-ok[1]": "pass", "fake-ok[2]": "pass", "fake-fail": "fail", "fake-crash": "crash",
            "fake-hang": "hang", "fake-skip": "skip", "fake-warn": "warn", "fake-error": "error"}
USER_TESTS = "def test_mine():\n    assert 1 + 1 == 2\n"
SUBPROCESS_TIMEOUT = 120


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project with its own test and the fake probes in fp/."""
    (pytester.path / "fp").mkdir()
    (pytester.path / "fp" / "fake.py").write_text(FAKE_PROBES)
    pytester.makepyfile(test_user=USER_TESTS)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=SUBPROCESS_TIMEOUT)


def statuses(verdicts) -> Dict[str, str]:
    return {v["variant"]: v["status"] for v in verdicts}


def only(directory: Path, pattern: str) -> Path:
    found = list(directory.glob(pattern))
    assert len(found) == 1, found
    return found[0]


@pytest.mark.children
def test_inert_without_the_flag(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inert="""
        import sys

        def test_inert(pytestconfig):
            plugins = [p for p in pytestconfig.pluginmanager.get_plugins()
                       if getattr(p, "__name__", "") == "rocmcheck.plugin"]
            assert len(plugins) == 1  # autoloaded once, by its entry point
            assert pytestconfig.pluginmanager.get_plugin("rocmcheck-matrix") is None
            assert "torch" not in sys.modules
            loaded = {m for m in sys.modules if m.startswith("rocmcheck")}  # in every pytest run: almost nothing
            assert loaded == {"rocmcheck", "rocmcheck.errors", "rocmcheck.plugin", "rocmcheck.engine",
                              "rocmcheck.engine.options", "rocmcheck.engine.killpolicy",
                              "rocmcheck.model"}, loaded  # the records, where the level budgets live (stdlib only)
    """)
    result = run(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["plugins:*rocmcheck-*"])
    result.stdout.no_fnmatch_line("rocmcheck:*")
    result.stdout.no_fnmatch_line("*rocmcheck matrix*")
    assert not (pytester.path / "reports").exists()


@pytest.mark.children
def test_p_no_rocmcheck_turns_it_off(pytester: pytest.Pytester) -> None:
    result = run(pytester, "-p", "no:rocmcheck", "--rocm-matrix")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unrecognized arguments: --rocm-matrix*"])


@pytest.mark.children
def test_every_verdict_maps_to_an_outcome_with_reports_and_junitxml(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\nrocm_timeout = 2\n")  # the ini mirror: the hang is cut at 2 s, not 60
    result = run(project, "--rocm-matrix=out", "--rocm-probes-path=fp", "-k", "fake or test_mine", "-ra",
                 "--junitxml=junit.xml")
    result.assert_outcomes(passed=4, failed=4, skipped=1, warnings=1)  # passed: ok x2, warn, test_mine
    result.stdout.fnmatch_lines([
        "rocmcheck: device cpu (backend cpu), 8 probe variants, isolation zygote, profile full",
    ])
    result.stdout.fnmatch_lines([
        "CRASH fake-crash: crashed: SIGSEGV", "exit: SIGSEGV", "--- stack ---", "*Segmentation fault*",
    ])
    result.stdout.fnmatch_lines(["ERROR fake-error: HIP error: invalid device function", "*invalid device function*"])
    result.stdout.fnmatch_lines(["FAIL fake-fail: 3 of 8 elements differ", "measurements: max_err=1.5*"])
    result.stdout.fnmatch_lines(["HANG fake-hang: no verdict within 2s*", "--- stack ---", "*fake.py*in hang"])
    result.stdout.fnmatch_lines(["*RocmcheckWarning: fake-warn: bf16 only emulated*"])
    result.stdout.fnmatch_lines([
        "*= rocmcheck matrix =*", "fake-crash*CRASH*", "*: 1 hang, 1 crash, 1 error, 1 fail, 1 warn, 1 skip, 2 pass",
        "wrote *out*rocmcheck-*.json, *.md, *.jsonl",
    ])
    result.stdout.fnmatch_lines([
        "SKIPPED [[]1[]] fp/fake.py:*: needs a unicorn",
        "FAILED rocmcheck::fake-crash - Failed: CRASH fake-crash: crashed: SIGSEGV",
    ])

    out = project.path / "out"
    assert statuses(load_report(only(out, "*.json")).to_dict()["verdicts"]) == EXPECTED
    journal = load_report(only(out, "*.jsonl")).to_dict()  # the journal alone rebuilds the same verdicts
    assert statuses(journal["verdicts"]) == EXPECTED and not journal["run"]["partial"]
    assert "## CRASH `fake-crash`" in only(out, "*.md").read_text()

    cases = {case.get("name"): case for case in ET.parse(project.path / "junit.xml").getroot().iter("testcase")}
    assert not list(cases["test_mine"].iter("property"))
    for variant, status in EXPECTED.items():
        props = {p.get("name"): p.get("value") for p in cases[variant].iter("property")}
        verdict = json.loads(props["rocmcheck_verdict"])
        assert props["rocmcheck_status"] == status == verdict["status"] and verdict["variant"] == variant


@pytest.mark.children
@pytest.mark.parametrize("args, ini, expected", [
    (["-m", "rocm_gate", "-k", "fake"], "", ["rocmcheck::fake-ok[1]"]),
    (["-k", "fake-ok", "--deselect", "rocmcheck::fake-ok[2]"], "", ["rocmcheck::fake-ok[1]"]),
    (["-m", "not rocm_probe"], "", ["test_user.py::test_mine"]),
    (["-k", "fake or mine"], "rocm_gate_only = true", ["test_user.py::test_mine", "rocmcheck::fake-ok[1]"]),
], ids=["marker", "deselect", "user-tests-only", "ini-gate-only"])
def test_selection_understands_probe_items(project: pytest.Pytester, args, ini, expected) -> None:
    if ini:
        project.makeini(f"[pytest]\n{ini}\n")
    result = run(project, "--rocm-matrix", "--rocm-probes-path=fp", "--collect-only", "-q", *args)
    assert [line for line in result.stdout.lines if "::" in line] == expected


@pytest.mark.children
def test_selected_items_alone_run_and_injected_faults_fail_them(project: pytest.Pytester) -> None:
    result = run(project, "--rocm-matrix=out", "--rocm-probes-path=fp", "-k", "fake-ok",
                 "--deselect", "rocmcheck::fake-ok[2]", "--rocm-inject", "segv@fake-ok", "--rocm-html=out/m.html")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["CRASH fake-ok[[]1[]]: crashed: SIGSEGV", "--- stack ---", "*in _segv"])
    result.stdout.fnmatch_lines(["wrote *.json, *.md, *.jsonl, *out*m.html"])
    report = load_report(only(project.path / "out", "*.json"))
    assert statuses(report.to_dict()["verdicts"]) == {"fake-ok[1]": "crash"}
    # the session's server imported what the selected items need, not hf-training's transformers and peft
    assert set(report.sections["cost"]["imports_s"]) == {"torch", "probes"}, report.sections["cost"]
    page = (project.path / "out" / "m.html").read_text()  # the run's matrix: its one cell, expandable
    assert 'class="cell s-crash" data-variant="fake-ok[1]"' in page and "<summary>CRASH</summary>" in page
    assert "crashed: SIGSEGV" in page


@pytest.mark.children
def test_with_a_baseline_only_regressions_fail(project: pytest.Pytester) -> None:
    baseline = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "run": {}, "fingerprint": {},
                "verdicts": [{"probe": "fake-fail", "variant": "fake-fail", "status": "fail"},
                             {"probe": "fake-crash", "variant": "fake-crash", "status": "pass"}]}
    (project.path / "base.json").write_text(json.dumps(baseline))
    result = run(project, "--rocm-matrix=out", "--rocm-probes-path=fp", "--rocm-baseline=base.json", "-ra",
                 "-k", "fake-fail or fake-crash or fake-error or fake-ok")
    # fail as before: xfailed; pass -> crash: regression; error, absent before: fails; ok, absent before: new
    result.assert_outcomes(passed=2, failed=2, xfailed=1)
    result.stdout.fnmatch_lines(["CRASH fake-crash: crashed: SIGSEGV",
                                 "regression against the baseline: pass -> crash"])
    result.stdout.fnmatch_lines(["ERROR fake-error: *", "regression against the baseline: absent -> error"])
    result.stdout.fnmatch_lines([
        "against the baseline *base.json: 2 regressions, 0 fixes, 0 changed, 2 new, 0 missing, 1 unchanged",
        "  REGRESSION fake-crash: pass -> crash",
    ])
    result.stdout.fnmatch_lines(["XFAIL rocmcheck::fake-fail - fail now, fail in the baseline: not a regression"])


SPEED_PROBE = """
import rocmcheck

@rocmcheck.probe("fake-speed", title="speed", targets="-")
def speed(ctx):
    ctx.measure_speed("copy", "GB/s", [10.0, 11.0, 9.0], method="three copies")
"""


@pytest.mark.children
def test_with_a_baseline_a_speed_figure_slower_beyond_the_tolerance_fails_its_item(pytester: pytest.Pytester) -> None:
    (pytester.path / "sp").mkdir()
    (pytester.path / "sp" / "speed.py").write_text(SPEED_PROBE)
    figure = {"unit": "GB/s", "samples": [100.0]}
    baseline = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "run": {}, "fingerprint": {},
                "verdicts": [{"probe": "fake-speed", "variant": "fake-speed", "status": "pass",
                              "device": {"name": "cpu"}, "measurements": {"speed": {"copy": figure}}}]}
    (pytester.path / "base.json").write_text(json.dumps(baseline))
    args = ("-p", "no:cacheprovider", "--rocm-matrix=out", "--rocm-probes-path=sp", "--rocm-baseline=base.json",
            "-k", "fake-speed")
    run = pytester.runpytest_inprocess  # the baseline's judgement and where its tolerance comes from, not a process
    result = run(*args)
    result.assert_outcomes(failed=1)  # it passed, and copies 10 times slower than in the baseline
    result.stdout.fnmatch_lines(["PASS fake-speed: *", "speed regression against the baseline, beyond 50% slower: "
                                 "fake-speed copy: 100 -> 10 GB/s, best sample 100 -> 11 (9.1x slower)"])
    result.stdout.fnmatch_lines([
        "against the baseline *base.json: 0 regressions, 0 fixes, 0 changed, 0 new, 0 missing, 1 unchanged",
        "  SPEED REGRESSION fake-speed copy: 100 -> 10 GB/s, best sample 100 -> 11 (9.1x slower)",
        "  speed: compared 1 figure present in both runs; 1 regression beyond 50% slower"])
    run(*args, "--rocm-speed-tolerance=1000").assert_outcomes(passed=1)  # 9.1x: 809% slower
    pytester.makeini("[pytest]\nrocm_speed_tolerance = 1000\n")
    run(*args).assert_outcomes(passed=1)


@pytest.mark.children
@pytest.mark.parametrize("sigint", [signal.SIG_DFL, signal.SIG_IGN], ids=["SIGINT", "SIGINT-inherited-ignored"])
def test_ctrl_c_leaves_a_partial_report_naming_the_running_probe(project: pytest.Pytester, sigint) -> None:
    """pytest started with SIGINT at its default (a terminal's), and inherited ignored (a background
    job of a non-interactive shell, issue 40: there the session ran on to fake-hang's 60 s timeout
    and exited 1). The waits are for states the run announces, bounded far above a loaded machine's."""
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rocm-matrix=out", "--rocm-probes-path=fp",
            "-k", "fake-hang"]
    proc = subprocess.Popen(argv, cwd=project.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))
    deadline = time.monotonic() + 5 * SUBPROCESS_TIMEOUT
    while not any('"started","variant":"fake-hang"' in j.read_text() for j in (project.path / "out").glob("*.jsonl")):
        assert time.monotonic() < deadline and proc.poll() is None, "fake-hang never started"
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=SUBPROCESS_TIMEOUT)[0]
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output
    assert "PARTIAL: interrupted during fake-hang" in output
    report = load_report(only(project.path / "out", "*.json")).to_dict()
    assert report["run"]["partial"] and report["run"]["interrupted"] == "fake-hang" and report["verdicts"] == []


SLOW_PROBES = """
import os, time
import rocmcheck

@rocmcheck.probe("slow", title="slow", targets="-", variants={"n": [1, 2, 3, 4]})
def slow(ctx, n):
    start = time.time()
    time.sleep(0.3)
    with open(os.environ["ROCMCHECK_TEST_INTERVALS"], "a") as fh:
        fh.write(f"{start} {time.time()}\\n")
"""


@pytest.mark.children
def test_xdist_runs_the_probes_one_at_a_time(project: pytest.Pytester, monkeypatch) -> None:
    """With loadgroup working they share one worker; where it silently does not (pytest 9.2 with
    pytest-xdist 3.8, pytest-dev/pytest-xdist#1386) the workers' shared lock keeps them serial."""
    pytest.importorskip("xdist")
    (project.path / "sp").mkdir()
    (project.path / "sp" / "slow.py").write_text(SLOW_PROBES)
    intervals = project.path / "intervals.txt"
    monkeypatch.setenv("ROCMCHECK_TEST_INTERVALS", str(intervals))
    project.makepyfile(test_more="def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    result = run(project, "-p", "xdist", "-n", "2", "--dist", "loadgroup", "-v", "--rocm-matrix=out",
                 "--rocm-probes-path=sp", "-k", "slow or test_")
    result.assert_outcomes(passed=7)
    spans = sorted(tuple(map(float, line.split())) for line in intervals.read_text().splitlines())
    assert len(spans) == 4
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:])), spans  # never overlapping
    result.stdout.fnmatch_lines(["rocmcheck: * probe variants, run one at a time*"])
    result.stdout.fnmatch_lines(["*= rocmcheck matrix =*", "slow[[]4[]]*PASS*", "wrote *out*rocmcheck-*.json*"])
    report = load_report(only(project.path / "out", "*.json"))
    assert sorted(v.variant for v in report.verdicts) == [f"slow[{n}]" for n in (1, 2, 3, 4)]


SPLIT_GROUPS = """
import pytest

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    # what pytest-xdist#1386 does by itself at times: the probe items lose their group, so
    # loadgroup spreads them over the workers
    for item in items:
        item._nodeid = item._nodeid.split("@")[0]
"""


@pytest.mark.children
def test_probes_split_over_xdist_workers_are_still_one_run_file(project: pytest.Pytester, monkeypatch) -> None:
    """Where the grouping fails, each worker kept a run file of its own (33 + 1 verdicts) and
    `rocmcheck report` took the newest, the fragment; the controller now writes one run file from
    the merged report, and the workers' lock file goes with the run."""
    pytest.importorskip("xdist")
    from rocmcheck.cli.report import newest_complete_run

    (project.path / "sp").mkdir()
    (project.path / "sp" / "slow.py").write_text(SLOW_PROBES)
    monkeypatch.setenv("ROCMCHECK_TEST_INTERVALS", str(project.path / "intervals.txt"))
    tmp = project.path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    project.makeconftest(SPLIT_GROUPS)
    result = run(project, "-p", "xdist", "-n", "2", "--dist", "loadgroup", "-v", "--rocm-matrix=out",
                 "--rocm-probes-path=sp", "-k", "slow")
    result.assert_outcomes(passed=4)
    workers = {line.split("]")[0] for line in result.stdout.lines if line.startswith("[gw") and "slow[" in line}
    assert len(workers) == 2, result.stdout.str()  # the probes really ran on both workers
    out = project.path / "out"
    report = load_report(only(out, "rocmcheck-*.json"))
    assert sorted(v.variant for v in report.verdicts) == [f"slow[{n}]" for n in (1, 2, 3, 4)]
    assert len(list(out.glob("rocmcheck-*.md"))) == 1
    found = newest_complete_run(out)
    assert found is not None and len(found[1].verdicts) == 4
    assert not [p for p in tmp.rglob("*") if "rocmcheck-xdist" in str(p)]


@pytest.mark.children
def test_xdist_mode_that_could_run_probes_concurrently_is_refused(project: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    result = run(project, "-p", "xdist", "-n", "2", "--rocm-matrix", "--rocm-probes-path=fp")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: rocmcheck: probes share one GPU*--dist load cannot promise*loadgroup*"])


@pytest.mark.children
@pytest.mark.parametrize("args, ini, message", [
    (["--rocm-device", "gpu7"], "", "--rocm-device must be auto, all, cpu or cuda:N[,M...], not 'gpu7'"),
    ([], "rocm_isolation = fork", "ini option rocm_isolation must be zygote or spawn, not 'fork'"),
    (["--rocm-timeout", "0"], "", "--rocm-timeout must be a finite positive number of seconds, not '0'"),
    (["--rocm-matrix=conftest.py"], "", "--rocm-matrix *conftest.py: *conftest.py is a file, not a folder"),
    (["--rocm-html=/"], "", "--rocm-html / is a folder: name a file"),
    (["--rocm-baseline", "missing.json"], "", "*missing.json: cannot read*"),
    (["--rocm-inject", "bogus"], "", "unknown fault 'bogus'*"),
    (["-k", "device-smoke", "--rocm-inject", "copy-zeros@transfer"], "",  # as `rocmcheck run --probe device-smoke`
     "fault 'copy-zeros@transfer' is aimed at no probe of this run: 'transfer' matches none of *device-smoke*"),
    (["--rocm-probes-path", "nowhere"], "", "probes path '*nowhere' is not a readable directory"),
    ([], "rocm_speed_tolerance = 0", "ini option rocm_speed_tolerance must be a finite positive number of percent, "
                                     "not '0'"),
], ids=["device", "ini-isolation", "timeout", "matrix-on-a-file", "html-on-a-folder", "baseline",
        "fault", "fault-at-a-deselected-probe", "probes-path", "ini-speed-tolerance"])
def test_bad_settings_are_one_line_usage_errors(pytester: pytest.Pytester, args, ini, message) -> None:
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makeconftest("")
    result = run(pytester, *(["--rocm-matrix"] if "--rocm-matrix=" not in "".join(args) else []), *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: rocmcheck: {message}"])
    assert "Traceback" not in result.stderr.str()
