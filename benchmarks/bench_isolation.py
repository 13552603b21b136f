"""Isolation overhead per trivial probe (zygote, spawn; in a worker or in a child of its own;
in-process) and a run of 20 trivial probes as a whole process against `python -c "import torch"`.

Run: python -m pytest benchmarks/bench_isolation.py --benchmark-columns=min,median,max,rounds
Bars (docs/design.md, "Performance bars"): zygote <= 50 ms median per probe and >= 20x cheaper than spawn.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rocmcheck import registry
from rocmcheck.engine.options import RunOptions
from rocmcheck.engine.runner import Runner
from rocmcheck.engine.selection import select

FAKE = str(Path(__file__).resolve().parent.parent / "tests" / "fake_probes")


def _runner(isolation: str) -> Runner:
    runner = Runner(RunOptions(device="cpu", isolation=isolation, probes_paths=[FAKE], write_files=False))
    runner.start()
    return runner


@pytest.fixture(scope="module")
def trivial():
    (variant,) = select(registry.load_all([FAKE]), ["fake-pass"])
    return variant


@pytest.mark.parametrize("alone", [False, True], ids=["worker", "own-child"])
@pytest.mark.parametrize("isolation", ["zygote", "spawn"])
def test_isolation_overhead_per_trivial_probe(benchmark, trivial, isolation, alone):
    runner = _runner(isolation)
    rounds = 5 if isolation == "spawn" and alone else 30
    try:
        verdict = benchmark.pedantic(runner.run_variant, args=(trivial,), kwargs={"alone": alone}, rounds=rounds,
                                     warmup_rounds=1)
    finally:
        runner.finish()
    assert verdict.status.value == "pass"
    assert ("worker_task" in verdict.evidence) is not alone


def test_in_process_trivial_probe(benchmark, trivial):
    from rocmcheck.engine import child
    from rocmcheck.engine.task import Task

    folder = tempfile.mkdtemp()
    task = Task(prefix=f"{folder}/t", timeout=30, probe=trivial.spec.id, probes_paths=[FAKE])
    result = benchmark(child.run_probe, task, child.Worker())
    assert result["status"] == "pass"


def _whole(cmd):
    return lambda: subprocess.run(cmd, check=True, capture_output=True)


def test_import_torch_process(benchmark):
    benchmark.pedantic(_whole([sys.executable, "-c", "import torch"]), rounds=5, warmup_rounds=1)


def test_run_of_20_trivial_probes_process(benchmark, tmp_path):
    cmd = [sys.executable, "-m", "rocmcheck", "run", "--device", "cpu", "--probes-path", str(_twenty(tmp_path)),
           "--probe", "twenty-*", "--out-dir", str(tmp_path / "out")]
    benchmark.pedantic(_whole(cmd), rounds=5, warmup_rounds=1)


def _twenty(tmp_path: Path) -> Path:
    folder = tmp_path / "twenty"
    folder.mkdir(exist_ok=True)
    (folder / "twenty.py").write_text(
        "import rocmcheck\n"
        "@rocmcheck.probe('twenty-trivial', title='t', targets='t', variants={'n': list(range(20))})\n"
        "def trivial(ctx, n):\n    return {'n': n}\n")
    return folder
