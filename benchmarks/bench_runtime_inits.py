"""How many GPU runtime inits the gate pays on one GPU (issue 23), measured from the outside.

Run: python -m pytest benchmarks/bench_runtime_inits.py --benchmark-columns=min,median,max

The simulated GPU (`--inject simgpu:1`, rocmcheck/simgpu) sleeps ROCMCHECK_SIMGPU_INIT_S in each
process's first device use, as a real runtime's init costs 0.3-4 s (a HIP context, rocBLAS's
first GEMM, librccl). The whole default gate runs at 0 s and at 2 s; (median at 2 s - median
at 0 s) / 2 is the number of inits on the gate's path. Bar: at most 2 on a healthy node (the
worker that gathered the device facts and then runs the GPU's probes, and allocator[default]'s
own child, forked from the zygote). With one child per variant it was 34.9 (84.4 s against 14.7 s); with a facts
child of its own, 3 on a real GPU (the simulated one counted 2.15 until its device properties
initialised it, as torch.cuda's do). The count itself, without timing, is a test:
tests/test_simgpu.py reads the device's own record of each init (ROCMCHECK_SIMGPU_INIT_LOG).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

from rocmcheck import simgpu

ROUNDS = 3
MEDIANS: Dict[float, float] = {}


def _gate(argv, cwd, env) -> None:
    done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.benchmark(group="runtime-inits")
@pytest.mark.parametrize("init_s", [0.0, 2.0])
def test_gate_on_one_simulated_gpu(benchmark, tmp_path: Path, init_s: float) -> None:
    simgpu.build()
    argv = [sys.executable, "-m", "rocmcheck", "gate", "--inject", "simgpu:1", "--out-dir", str(tmp_path)]
    env = {**os.environ, simgpu.INIT_ENV: str(init_s)}
    benchmark.pedantic(_gate, args=(argv, tmp_path, env), rounds=ROUNDS, iterations=1, warmup_rounds=0)
    MEDIANS[init_s] = benchmark.stats.stats.median
    benchmark.extra_info["init_s"] = init_s


def test_at_most_two_inits_on_the_gates_path() -> None:
    if set(MEDIANS) != {0.0, 2.0}:
        pytest.skip("run with the benchmarks above")
    inits = (MEDIANS[2.0] - MEDIANS[0.0]) / 2.0
    print(f"runtime inits on the gate's path: {inits:.2f}")
    assert inits <= 2.5
