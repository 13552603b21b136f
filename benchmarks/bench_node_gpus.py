"""Gate wall time as the node's GPU count grows (docs/design.md, "Performance bars").

Run: python -m pytest benchmarks/bench_node_gpus.py --benchmark-columns=min,median,max

`rocmcheck gate` as a whole process on 1, 2, 4 and 8 GPUs that torch is made to report (the
`simgpu` fault: simulated GPUs, rocmcheck/simgpu), with a fixed per-probe cost: 4 variants
that each sleep 0.5 s. One queue per GPU and the queues at once, so the bar is
8 GPUs <= 1.3 x 1 GPU; `test_eight_gpus_within_the_bar` checks the medians.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

PROBE = '''
import time
import rocmcheck

@rocmcheck.probe("node-work", title="fixed work", targets="-", timeout=30, gate=True, variants={"n": [1, 2, 3, 4]})
def node_work(ctx, n):
    time.sleep(0.5)
'''
ROUNDS = 5
MEDIANS: Dict[int, float] = {}


@pytest.fixture(scope="module")
def probes(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("probes")
    (folder / "node_work.py").write_text(PROBE)
    return folder


def _gate(argv, cwd) -> None:
    done = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.benchmark(group="node-gpus")
@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_gate_on_n_gpus(benchmark, probes: Path, tmp_path: Path, gpus: int) -> None:
    argv = [sys.executable, "-m", "rocmcheck", "gate", "--require", "node-work", "--probes-path", str(probes),
            "--inject", f"simgpu:{gpus}", "--device", "all", "--out-dir", str(tmp_path)]
    benchmark.pedantic(_gate, args=(argv, tmp_path), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    MEDIANS[gpus] = benchmark.stats.stats.median
    benchmark.extra_info["gpus"] = gpus


def test_eight_gpus_within_the_bar() -> None:
    if not {1, 8} <= set(MEDIANS):
        pytest.skip("needs the 1- and 8-GPU benchmarks of this run")
    assert MEDIANS[8] <= 1.3 * MEDIANS[1], MEDIANS
