"""`make hardware` (scripts/hardware.py): the full suite on every real GPU, kept under reports/hardware/,
and never a run without one. The GPU query is replaced where a test needs a GPU this host may lack."""
from __future__ import annotations

import datetime
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("hardware", ROOT / "scripts" / "hardware.py")
hardware = importlib.util.module_from_spec(spec)
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


def test_on_real_gpus_it_runs_the_full_suite_on_every_gpu_then_the_cuda_build_tests(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(hardware, "real_gpus", lambda: ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"])
    monkeypatch.delenv("ROCMCHECK_INJECT", raising=False)
    calls = []

    def call(argv, env=None):
        calls.append((argv, env))
        if "run" in argv:  # what rocmcheck run writes where it is told
            Path(argv[argv.index("--json") + 1]).write_text("{}")
            Path(argv[argv.index("--md") + 1]).write_text("# rocmcheck run\n")
            return subprocess.CompletedProcess(argv, 1, "1 fail, 80 pass\n")
        return subprocess.CompletedProcess(argv, 0, "....\n7 passed in 9.1s\n")

    monkeypatch.setattr(hardware, "call", call)
    assert hardware.main(["--out", str(tmp_path)]) == 1  # the run's own exit: a bad verdict
    stem = tmp_path / f"nvidia-h100-80gb-hbm3-{datetime.date.today().isoformat()}"
    (run, _), (tests, hidden) = calls
    assert run[:6] == [sys.executable, "-m", "rocmcheck", "run", "--device", "all"] and "--gate-only" not in run
    assert run[run.index("--json") + 1] == f"{stem}.json" and run[run.index("--md") + 1] == f"{stem}.md"
    assert Path(run[run.index("--out-dir") + 1]).parent != tmp_path  # the journal is not kept beside them
    assert tests[-1] == "tests/test_cuda_build.py" and hidden["CUDA_VISIBLE_DEVICES"] == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{stem.name}.json", f"{stem.name}.md"]
    assert (tmp_path / f"{stem.name}.md").read_text().endswith(
        "its GPUs hidden: 7 passed in 9.1s (exit 0).\n")
    assert capsys.readouterr().out.endswith(f"wrote {stem}.json and {stem}.md\n")


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
    assert 'pip install -q -e ".[test,hf]"' in dry.stdout  # pytest, for the CUDA-build tests
