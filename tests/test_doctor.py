"""`rocmcheck doctor` through the real runner: injected faults that the real workaround removes,
candidates that crash or hang, flaky variants, the budget, --from, and bad input.

Each doctor run starts children (env candidates: a fresh interpreter each), so the cases are
batched: one run proves two faults, fake probes (no torch work) cover the rest.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from rocmcheck import doctor, registry
from rocmcheck.cli import main
from rocmcheck.knowledge import known_issues
from rocmcheck.model import DeviceInfo, Status, Verdict
from rocmcheck.outputs.storage import load_report

FAKES = '''
import os
import time

import rocmcheck


@rocmcheck.probe("doc-env", title="broken unless fixed", targets="doctor's tests", timeout=30,
                 variants={"mode": ["broken", "hang", "fixed"]})
def doc_env(ctx, mode):
    if os.environ.get("DOC_CRASH") == "1":
        os.abort()
    if mode == "hang":
        time.sleep(3600)
    assert mode == "fixed", "broken"


@rocmcheck.probe("doc-flaky", title="fails every other run", targets="doctor's tests", timeout=30,
                 variants={"mode": ["one", "two"]}, runs_in="own-child")  # one run per child: no worker's re-run alone
def doc_flaky(ctx, mode):
    path = os.environ["DOC_COUNTER"]
    count = (int(open(path).read()) if os.path.exists(path) else 0) + 1
    with open(path, "w") as fh:
        fh.write(str(count))
    assert count % 2 == 0, f"odd run {count}"


@rocmcheck.probe("doc-slow", title="slow and broken", targets="doctor's tests", timeout=30,
                 variants={"mode": ["one", "two"]})
def doc_slow(ctx, mode):
    time.sleep(1.5)
    raise AssertionError("slow and broken")
'''

SHARED = '''
import rocmcheck


@rocmcheck.probe("doc-shared", title="one fault every method shares, and one of its own", targets="doctor's tests",
                 timeout=30, variants={"method": ["a", "b", "c", "odd"], "fix": ["none", "nothing", "shared", "odd"]})
def doc_shared(ctx, method, fix):
    assert fix == ("odd" if method == "odd" else "shared"), f"{method} broken"
'''

CANDIDATES = [
    {"id": "crash-one", "kind": "env", "env": {"DOC_CRASH": "1"}, "probes": ["doc-env"], "cost": 1},
    {"id": "hang-one", "kind": "params", "params": {"mode": "hang"}, "probes": ["doc-env"], "cost": 2,
     "snippet": ["hang()"]},
    {"id": "fix-one", "kind": "params", "params": {"mode": "fixed"}, "probes": ["doc-env"], "cost": 3,
     "snippet": ["fix()"]},
    {"id": "no-such-param", "kind": "params", "params": {"speed": "fast"}, "probes": ["doc-*"], "snippet": ["x"]},
    {"id": "flaky-two", "kind": "params", "params": {"mode": "two"}, "probes": ["doc-flaky", "doc-slow"],
     "snippet": ["two()"]},
    {"id": "fix-nothing", "kind": "params", "params": {"fix": "nothing"}, "probes": ["doc-shared"], "cost": 1,
     "snippet": ["nothing()"]},
    {"id": "fix-shared", "kind": "params", "params": {"fix": "shared"}, "probes": ["doc-shared"], "cost": 2,
     "snippet": ["shared()"]},
    {"id": "fix-odd", "kind": "params", "params": {"fix": "odd"}, "probes": ["doc-shared"], "cost": 3,
     "snippet": ["odd()"]},
]


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    """Fake probe folder, a workarounds file for it, and a counter file for the flaky probe."""
    probes = tmp_path / "probes"
    probes.mkdir()
    (probes / "doc_fakes.py").write_text(FAKES)
    (probes / "doc_shared.py").write_text(SHARED)
    workarounds = tmp_path / "workarounds.json"
    workarounds.write_text(json.dumps({"schema": doctor.SCHEMA, "candidates": CANDIDATES}))
    monkeypatch.setenv("DOC_COUNTER", str(tmp_path / "counter"))
    return ["--probes-path", str(probes), "--workarounds", str(workarounds), "--device", "cpu",
            "--out-dir", str(tmp_path / "reports")]


def rows(result):
    return {c["id"]: c for c in result["candidates"]}


@pytest.mark.children
def test_copy_zeros_and_matmul_nan_each_fixed_by_exactly_their_workaround(tmp_path, capsys):
    out = tmp_path / "doctor.json"
    code = main(["doctor", "--probe", "device-smoke", "--probe", "gemm", "-k", "device-smoke or fp32-default",
                 "--device", "cpu", "--inject", "copy-zeros@device-smoke,matmul-nan@gemm", "--repeats", "2",
                 "--out-dir", str(tmp_path), "--json", str(out), "--md", str(tmp_path / "doctor.md")])
    text = capsys.readouterr().out
    assert code == 0, text
    report = load_report(out).to_dict()
    results = {r["variant"]: r for r in report["doctor"]}
    assert set(results) == {"device-smoke", "gemm[fp32-default]"}
    smoke, gemm = results["device-smoke"], results["gemm[fp32-default]"]
    for result in (smoke, gemm):
        assert result["state"] == "fails" and result["pass_rate"] == "0/2" and result["required_passes"] == 2
    # copy-zeros models the DMA-engine fault: only HSA_ENABLE_SDMA=0 removes it
    assert smoke["fixes"] == ["hsa-sdma-off"]
    assert rows(smoke)["hsa-sdma-off"]["statuses"] == ["pass", "pass"]
    assert rows(smoke)["serialize-kernels"]["outcome"] == "no-fix"
    assert smoke["snippet"] == "export HSA_ENABLE_SDMA=0"
    # matmul-nan lives in the default BLAS library: only TORCH_BLAS_PREFER_HIPBLASLT=0 removes it here
    assert gemm["fixes"] == ["blas-hipblas"]
    assert rows(gemm)["serialize-kernels"]["outcome"] == "no-fix"
    assert rows(gemm)["blas-cublas"]["outcome"] == "skip"  # the CPU has one BLAS: that variant skips
    assert {"id": "float32", "why": "that is this variant"} in gemm["not_applicable"]
    assert gemm["snippet"] == "export TORCH_BLAS_PREFER_HIPBLASLT=0"
    # the report's verdicts are the gate-like first run; doctor's attempts do not add verdicts
    assert sorted(v["variant"] for v in report["verdicts"]) == ["device-smoke", "gemm[fp32-default]"]
    assert "paste this (hsa-sdma-off):" in text and "2 of 2 failing variants have a workaround" in text
    # `rocmcheck report` renders the section: table, outcome, snippet
    md_path = tmp_path / "attach.md"
    assert main(["report", "--from", str(out), "-o", str(md_path)]) == 0
    md = md_path.read_text()
    section = md[md.index("## Doctor"):]
    assert "| `hsa-sdma-off` | env | **fix** | 2/2 |" in section
    assert "| `blas-cublas` | params | skip | 0/1 |" in section
    assert "export TORCH_BLAS_PREFER_HIPBLASLT=0" in section
    run_md = (tmp_path / "doctor.md").read_text()  # the run's own Markdown has it too
    assert "## Doctor" in run_md and "export HSA_ENABLE_SDMA=0" in run_md


@pytest.mark.children
def test_corrupt_worker_batches_are_fixed_by_loading_in_the_main_process_only(tmp_path, capsys):
    out = tmp_path / "doctor.json"
    code = main(["doctor", "--probe", "workers-dataloader", "-k", "workers-dataloader[2]", "--device", "cpu",
                 "--inject", "loader-corrupt", "--repeats", "2", "--out-dir", str(tmp_path), "--json", str(out)])
    assert code == 0, capsys.readouterr().out
    (result,) = load_report(out).sections["doctor"]
    assert result["variant"] == "workers-dataloader[2]" and result["state"] == "fails"
    assert result["fixes"] == ["loader-in-process"]
    assert rows(result)["serialize-kernels"]["outcome"] == "no-fix"
    assert "num_workers=0" in result["snippet"]


@pytest.mark.children
def test_candidates_that_crash_or_hang_are_reported_and_doctor_goes_on(fakes, tmp_path, monkeypatch, capsys):
    issues = tmp_path / "issues.json"
    issues.write_text(json.dumps({"issues": [{"id": "doc-known", "probe": "doc-env", "title": "known",
                                              "workaround": "use the fixed mode", "candidates": ["fix-one"]}]}))
    monkeypatch.setenv(known_issues.KNOWN_ISSUES_ENV, str(issues))
    out = tmp_path / "d.json"
    code = main(["doctor", *fakes, "--probe", "doc-env", "-k", "broken", "--repeats", "2", "--timeout", "2",
                 "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    [result] = load_report(out).sections["doctor"]
    assert result["variant"] == "doc-env[broken]" and result["state"] == "fails"
    # the known issue's candidate first, then the cheapest; a crash and a hang do not stop doctor
    assert [c["id"] for c in result["candidates"]] == ["fix-one", "crash-one", "hang-one"]
    assert rows(result)["fix-one"]["known_issues"] == ["doc-known"]
    outcomes = {c["id"]: (c["outcome"], c["statuses"]) for c in result["candidates"]}
    assert outcomes == {"fix-one": ("fix", ["pass", "pass"]), "crash-one": ("crash", ["crash"]),
                        "hang-one": ("hang", ["hang"])}
    assert result["fixes"] == ["fix-one"] and result["snippet"] == "fix()"
    assert {"id": "no-such-param", "why": "the probe has no parameter speed"} in result["not_applicable"]
    assert "crashed" in text and "hung" in text


@pytest.mark.children
def test_flaky_variant_from_a_saved_run_gets_its_pass_rate_and_no_false_fix(fakes, tmp_path, capsys):
    run = tmp_path / "run.json"
    assert main(["run", *fakes[:2], *fakes[4:], "--probe", "doc-flaky", "-k", "one", "--json", str(run)]) == 1
    out = tmp_path / "d.json"
    code = main(["doctor", *fakes, "--from", str(run), "--repeats", "3", "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 1, text
    report = load_report(out).to_dict()
    [result] = report["doctor"]
    # run 1 failed (the saved run); doctor's runs 2, 3, 4: pass, fail, pass
    assert result["original"]["status"] == "fail" and result["baseline"] == ["pass", "fail", "pass"]
    assert result["state"] == "flaky" and result["pass_rate"] == "2/3"
    assert result["required_passes"] == 8  # (2/3)**8 < 5%: no lucky streak passes for a fix
    assert rows(result)["flaky-two"]["outcome"] == "no-fix" and result["fixes"] == []
    assert [v["variant"] for v in report["verdicts"]] == ["doc-flaky[one]"]  # this session's first re-run
    assert "flaky: passes 2/3 re-runs as it is; a fix must pass 8 in a row" in text


@pytest.mark.children
def test_a_fault_the_variants_share_is_measured_and_fixed_on_one_and_the_fix_widened(fakes, tmp_path, capsys):
    """Issue 31 item 11: one representative per probe is re-run as it is and gets every candidate;
    only what fixed it is tried on the others; a variant that fix does not fix is diagnosed on its own."""
    out = tmp_path / "d.json"
    code = main(["doctor", *fakes, "--probe", "doc-shared", "-k", "none", "--repeats", "2", "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    results = {r["variant"]: r for r in load_report(out).sections["doctor"]}
    rep, odd = results["doc-shared[a-none]"], results["doc-shared[odd-none]"]
    # determinism: the representative twice, the variant the shared fix left failing twice; b and c never
    assert rep["baseline"] == ["fail", "fail"] and rep["baseline_from"] == "" and rep["state"] == "fails"
    assert {c["id"]: c["outcome"] for c in rep["candidates"]} == {"fix-nothing": "no-fix", "fix-shared": "fix",
                                                                 "fix-odd": "no-fix"}
    for member in ("doc-shared[b-none]", "doc-shared[c-none]"):
        result = results[member]
        assert result["baseline"] == [] and result["baseline_from"] == "doc-shared[a-none]", member
        assert result["state"] == "fails" and result["required_passes"] == 2 and result["fixes"] == ["fix-shared"]
        rows_ = rows(result)
        assert rows_["fix-shared"]["statuses"] == ["pass", "pass"]
        assert (rows_["fix-nothing"]["outcome"], rows_["fix-nothing"]["runs"]) == ("not-tried", 0)
        assert rows_["fix-nothing"]["why"] == "no fix on doc-shared[a-none]"
        assert (rows_["fix-odd"]["outcome"], rows_["fix-odd"]["runs"]) == ("not-tried", 0)
    # odd is not fixed by the shared fix: it gets its own baseline and the candidates not yet tried on it
    assert odd["baseline"] == ["fail", "fail"] and odd["baseline_from"] == "" and odd["fixes"] == ["fix-odd"]
    assert {c["id"]: (c["outcome"], c["runs"]) for c in odd["candidates"]} == {
        "fix-nothing": ("no-fix", 1), "fix-shared": ("no-fix", 1), "fix-odd": ("fix", 2)}
    assert text.count(" as it is (run ") == 4  # was 8: each of the four variants twice
    # baselines (a, odd), a's three candidates, the fix on b, c and odd, odd's two left: 16 runs (were 24)
    assert text.count("  doctor ") == 4 + (1 + 2 + 1) + (2 + 2 + 1) + (1 + 2)
    assert "doc-shared[a-none] failed 2/2 as it is: its fixes are tried on 3 more variants" in text
    assert "not tried  fix-nothing" in text and "no fix on doc-shared[a-none]" in text


@pytest.mark.children
def test_tiny_budget_stops_before_any_attempt_and_lists_untried_candidates(fakes, tmp_path, capsys):
    out = tmp_path / "d.json"
    code = main(["doctor", *fakes, "--probe", "doc-slow", "-k", "one", "--budget", "1", "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 1, text
    [result] = load_report(out).sections["doctor"]
    assert result["state"] == "unmeasured" and result["baseline"] == []
    assert result["untried"] == ["flaky-two"] and rows(result)["flaky-two"]["runs"] == 0
    assert "not tried for lack of budget" in text


def test_nothing_failed_in_a_saved_run_is_exit_0(tmp_path, capsys):
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"schema": "rocmcheck-report", "schema_version": "1.0", "run": {},
                               "verdicts": [Verdict("device-smoke", "device-smoke", Status.PASS).to_dict()]}))
    assert main(["doctor", "--from", str(run)]) == 0
    assert "nothing to diagnose" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--repeats", "0"], "--repeats"),
    (["--budget", "-5"], "--budget"),
    (["--budget", "soon"], "--budget"),
    (["--probe", "no-such-probe"], "unknown probe id"),
    (["--from", "{missing}"], "cannot read"),
    (["--from", "{foreign}"], "not a rocmcheck report"),
    (["--from", "{unloaded}"], "is not loaded"),
    (["--workarounds", "{foreign}"], "expected {\"schema\""),
    (["--workarounds", "{badkind}"], "\"kind\" must be one of env, params"),
    (["--workarounds", "{notjson}"], "not valid JSON"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    paths = {"missing": tmp_path / "missing.json", "foreign": tmp_path / "foreign.json",
             "unloaded": tmp_path / "unloaded.json", "badkind": tmp_path / "badkind.json",
             "notjson": tmp_path / "notjson.json"}
    paths["notjson"].write_text("{candidates: [")
    paths["foreign"].write_text('{"hello": 1}')
    paths["unloaded"].write_text(json.dumps({"schema": "rocmcheck-report", "schema_version": "1.0", "run": {},
                                             "verdicts": [Verdict("gone", "gone", Status.FAIL).to_dict()]}))
    paths["badkind"].write_text(json.dumps({"schema": doctor.SCHEMA, "candidates": [{"id": "x", "kind": "magic"}]}))
    assert main(["doctor", *[a.format(**paths) for a in args]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rocmcheck: error:") and err.count("\n") == 1 and message in err


@pytest.mark.children
def test_help_and_bad_input_do_not_import_torch(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        from rocmcheck.cli import main
        assert main(['doctor', '--from', {str(tmp_path / 'missing.json')!r}]) == 2
        try:
            main(['doctor', '--help'])
        except SystemExit:
            pass
        assert 'torch' not in sys.modules, 'torch imported'
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "--budget SECONDS" in proc.stdout


# --- the rules and the data, without children ---------------------------------------------------


@pytest.mark.parametrize("passes, runs, needed", [(0, 3, 3), (0, 1, 1), (1, 3, 3), (2, 3, 8), (1, 2, 5),
                                                  (9, 10, 29)])
def test_a_fix_must_beat_the_baseline_by_chance_at_most_one_time_in_20(passes, runs, needed):
    assert doctor.required_passes(passes, runs) == needed
    if passes:
        assert (passes / runs) ** needed <= doctor.FALSE_FIX_CHANCE < (passes / runs) ** (needed - 1) or needed == runs


def test_env_snippets_for_shells():
    env = {"HSA_ENABLE_SDMA": "0", "PYTORCH_ALLOC_CONF": "", "X": "a b"}
    assert doctor.env_snippet(env, windows=False) == \
        "export HSA_ENABLE_SDMA=0\nunset PYTORCH_ALLOC_CONF\nexport X='a b'"
    assert doctor.env_snippet(env, windows=True).splitlines() == [
        '$env:HSA_ENABLE_SDMA = "0"', "Remove-Item Env:PYTORCH_ALLOC_CONF -ErrorAction SilentlyContinue",
        '$env:X = "a b"']


def test_every_builtin_candidate_applies_somewhere_and_known_issues_name_real_ones():
    candidates = doctor.load_candidates()
    specs = registry.load_all()
    variants = [v for spec in specs.values() for v in spec.expand()]
    gpus = {"rocm": DeviceInfo("cuda:0", "rocm", 2, "gfx1100"), "cuda": DeviceInfo("cuda:0", "cuda", 2, "sm_90")}
    for c in candidates.values():
        device, user_env = gpus[c.backend or "rocm"], {k: "the user's value" for k in c.env}
        usable = [v for v in variants if c.matches(v) and c.unmet(v, device, user_env) is None]
        assert usable, f"candidate {c.id} applies to no built-in variant"
        if c.kind == "params":
            assert c.snippet, c.id
            assert all(c.target(v).id in {x.id for x in variants} for v in usable)
    named = {cid for e in known_issues.entries() for cid in e.get("candidates") or []}
    assert named and named <= set(candidates)


def test_env_candidate_already_in_effect_and_other_backend_do_not_apply():
    specs = registry.load_all()
    smoke = specs["device-smoke"].expand()[0]
    c = doctor.load_candidates()["hsa-sdma-off"]
    rocm, cuda, cpu = DeviceInfo("cuda:0", "rocm", 1), DeviceInfo("cuda:0", "cuda", 1), DeviceInfo()
    assert c.unmet(smoke, rocm, {}) is None and c.unmet(smoke, cpu, {}) is None
    assert c.unmet(smoke, rocm, {"HSA_ENABLE_SDMA": "0"}) == "already in effect"
    assert c.unmet(smoke, cuda, {}) == "for rocm builds; this is cuda"
    nccl = [v for v in specs["multigpu-nccl"].expand() if v.params["p2p"] == "disabled"][0]
    assert doctor.load_candidates()["nccl-p2p-off"].unmet(nccl, rocm, {}) == "already in effect"


def test_the_attempt_running_stays_named_when_an_interrupt_ends_it():
    """Doctor names each attempt through `Runner.running`: the report of an interrupted run says which."""
    import shutil

    from rocmcheck.engine.options import RunOptions
    from rocmcheck.engine.runner import Runner

    runner = Runner(RunOptions(write_files=False))
    try:
        with runner.running("doc-flaky[one] + retry"):
            assert runner.current == "doc-flaky[one] + retry"
        assert runner.current is None
        with pytest.raises(KeyboardInterrupt), runner.running("doc-flaky[one] as it is"):
            raise KeyboardInterrupt
        assert runner.current == "doc-flaky[one] as it is"
        runner.add_section("doctor", [{"variant": "doc-flaky[one]"}])
        report = runner.report(partial=True, interrupted=runner.current)
        assert report.sections["doctor"] == [{"variant": "doc-flaky[one]"}]
    finally:
        shutil.rmtree(runner.tmp)
