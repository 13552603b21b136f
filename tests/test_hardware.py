"""`make hardware` (scripts/hardware.py): the full suite on every real GPU, kept under reports/hardware/,
and never a run without one. The GPU query is replaced where a test needs a GPU this host may lack."""
from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("hardware", ROOT / "scripts" / "hardware.py")
hardware = importlib.util.module_from_spec(spec)
sys.modules["hardware"] = hardware  # its dataclasses look their module up there
spec.loader.exec_module(hardware)


@pytest.mark.parametrize("gpus, inject, why", [
    ([], "", "make hardware: torch sees no GPU here: reports/hardware/ keeps only what ran on a real GPU"),
    (["NVIDIA H100 80GB HBM3"], "simgpu:2", "make hardware: faults are injected ($ROCMCHECK_INJECT=simgpu:2): "
     "reports/hardware/ keeps only healthy runs on real GPUs, never a simulated GPU's"),
], ids=["no-gpu", "injected"])
def test_a_host_without_a_real_gpu_is_refused_in_one_line_and_nothing_is_written(
        monkeypatch, tmp_path, capsys, gpus, inject, why):
    monkeypatch.setattr(hardware, "real_gpus", lambda: gpus)
    monkeypatch.setenv("ROCMCHECK_INJECT", inject)
    monkeypatch.setattr(hardware, "call", lambda *a, **k: pytest.fail("nothing may run"))
    assert hardware.main(["--out", str(tmp_path)]) == 2
    out = capsys.readouterr()
    assert out.err.splitlines() == [why] and out.out == "" and not list(tmp_path.iterdir())


def test_the_plan_fits_eight_minutes_and_prints_every_step_with_its_deadline(capsys):
    steps = hardware.plan()
    assert sum(s.deadline_s for s in steps) <= hardware.PLAN_LIMIT_S == 480
    assert [s.name for s in steps] == ["gate", "gate-again", "drill-bitflip", "drill-slow", "drill-copy-zeros", "run",
                                       "cuda-build-tests"]
    for step in steps[:6]:  # every rocmcheck step is bounded by its own --deadline, and writes its report
        argv = step.command(Path("/r/nvidia-h100-2026-11-28"), "/tmp/j")
        assert argv[argv.index("--deadline") + 1] == str(step.deadline_s)
        assert argv[argv.index("--json") + 1] == f"/r/nvidia-h100-2026-11-28-{step.name}.json"
    assert steps[0].argv == steps[1].argv and "--inject" not in steps[0].argv  # the healthy gate, twice
    assert "--level" not in steps[5].argv  # the level-1 run
    assert hardware.main(["--plan"]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[-1] == " 480s  in all (at most 480s)"
    assert "  35s  drill-bitflip" in printed and "--inject gpu-bitflip:0 --probe sdc" in printed


@pytest.mark.parametrize("missed", [None, "drill-bitflip"])
def test_on_real_gpus_every_step_runs_under_its_deadline_and_the_summary_says_how_each_came_out(
        monkeypatch, tmp_path, capsys, missed):
    """The drills must be NO-GO (or slow) on GPU 0; a drill that the machine passes is a step not as expected."""
    monkeypatch.setattr(hardware, "real_gpus", lambda: ["NVIDIA H100 80GB HBM3"])
    monkeypatch.delenv("ROCMCHECK_INJECT", raising=False)
    calls = []

    def call(argv, env=None, timeout=None):
        calls.append((argv, env, timeout))
        if "--json" in argv:  # what rocmcheck writes where it is told: a drill fails on GPU 0, unless missed
            path = Path(argv[argv.index("--json") + 1])
            caught = "--inject" in argv and not path.name.endswith(f"{missed}.json")
            path.write_text(json.dumps({"verdicts": [{"status": "fail" if caught else "pass",
                                                      "device": {"name": "cuda:0"}}]}))
            return subprocess.CompletedProcess(argv, 1 if caught else 0, "NO-GO\n" if caught else "GO\n")
        return subprocess.CompletedProcess(argv, 0, "....\n7 passed in 9.1s\n")

    monkeypatch.setattr(hardware, "call", call)
    assert hardware.main(["--out", str(tmp_path)]) == (1 if missed else 0)
    stem = tmp_path / f"nvidia-h100-80gb-hbm3-{datetime.date.today().isoformat()}"
    assert [timeout for _, _, timeout in calls] == [s.deadline_s + hardware.STOP_MARGIN_S for s in hardware.plan()]
    assert calls[-1][0][-1] == "tests/test_cuda_build.py" and calls[-1][1]["CUDA_VISIBLE_DEVICES"] == ""
    table = Path(f"{stem}-summary.md").read_text()
    assert table.count("| yes |") == (6 if missed else 7) and "steps ran" not in table
    if missed:
        assert f"| {missed} | 35 |" in table and "| **no** |" in table
    said = f" (not: {missed})" if missed else ""
    expected = f"{6 if missed else 7} of 7 steps as expected{said}; wrote {stem}-summary.md\n"
    assert capsys.readouterr().out.endswith(expected)


def test_a_plan_stopped_midway_leaves_a_summary_of_the_steps_that_ran(monkeypatch, tmp_path):
    """The lent machine's time can end in the middle of the plan (the device call's `timeout` stops the script
    with no chance to write anything more): the summary of every step that ended is already there."""
    monkeypatch.setattr(hardware, "real_gpus", lambda: ["NVIDIA H200"])
    monkeypatch.delenv("ROCMCHECK_INJECT", raising=False)
    ran = []

    def call(argv, env=None, timeout=None):
        if len(ran) == 2:
            raise KeyboardInterrupt  # the script is stopped during the third step
        ran.append(argv)
        return subprocess.CompletedProcess(argv, 0, "GO\n")

    monkeypatch.setattr(hardware, "call", call)
    with pytest.raises(KeyboardInterrupt):
        hardware.main(["--out", str(tmp_path)])
    table = (tmp_path / f"nvidia-h200-{datetime.date.today().isoformat()}-summary.md").read_text()
    assert "Only 2 of the 7 steps ran" in table
    assert "| gate | 60 |" in table and "| gate-again | 30 |" in table and "drill-bitflip" not in table


@pytest.mark.children  # a real process, killed at its deadline
def test_a_step_past_its_deadline_is_killed_and_counts_as_not_expected(monkeypatch, tmp_path):
    step = hardware.Step("sleeper", [sys.executable, "-c", "import time; time.sleep(30)"], 1, (0,), "sleeps",
                         reports=False)
    monkeypatch.setattr(hardware, "STOP_MARGIN_S", 1)
    result = hardware.run_step(step, tmp_path / "x", str(tmp_path), hardware.call)
    assert result["exit"] == 124 and result["as_expected"] is False and float(result["wall_s"]) < 10


@pytest.mark.children
@pytest.mark.parametrize("name", ["drill-bitflip", "drill-slow", "drill-copy-zeros"])
def test_each_drill_is_caught_on_gpu_0_with_the_faults_that_work_on_a_real_device(tmp_path, name):
    """The drills' faults (gpu-bitflip, slow-matmul, copy-zeros) patch torch's calls, so they act on a real
    device as on these two simulated GPUs: each drill's step comes out as expected, named on GPU 0."""
    (step,) = [s for s in hardware.plan(simulated="simgpu:2") if s.name == name]
    step = dataclasses.replace(step, deadline_s=150)  # its deadline is a real GPU's; this host is shared and slow
    result = hardware.run_step(step, tmp_path / "sim", str(tmp_path), hardware.call)
    assert result["as_expected"], result


def test_device_names_become_the_file_names_of_reports_hardware():
    assert hardware.slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"  # as the files already there
    assert hardware.slug("AMD Instinct MI300X") == "amd-instinct-mi300x"
    assert hardware.slug("AMD Radeon RX 7900 XTX (gfx1100)") == "amd-radeon-rx-7900-xtx-gfx1100"
    assert any(p.name.startswith("nvidia-h100-80gb-hbm3-") for p in (ROOT / "reports" / "hardware").iterdir())


@pytest.mark.children
def test_the_gpus_are_the_ones_torch_sees(tmp_path):
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    seen = [torch.cuda.get_device_name(i) for i in range(count)]
    assert hardware.real_gpus() == seen


@pytest.mark.children
def test_make_hardware_runs_the_script_on_a_full_install():
    dry = subprocess.run(["make", "-n", "hardware", "VENV=/nonexistent-venv"], cwd=ROOT, capture_output=True, text=True)
    assert "/nonexistent-venv/bin/python scripts/hardware.py" in dry.stdout
    assert 'pip install -q --no-compile -e ".[test,hf]"' in dry.stdout  # pytest, for the CUDA-build tests
