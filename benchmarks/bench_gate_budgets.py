"""The CPU gate's time outside its declared work budgets against `import torch, torch._dynamo` (issue 39's bar:
at most twice that import).

Run: python -m pytest benchmarks/bench_gate_budgets.py --benchmark-columns=min,median,max
(not collected by the default `pytest`, whose testpaths are tests/).

- `test_import_torch_and_dynamo`: the floor, a fresh interpreter that imports both (every optimizer step of
  the gate's probes imports torch._dynamo).
- `test_cpu_gate`: `rocmcheck gate --device cpu` whole, with its report's `cost` section in extra_info:
  `outside_s` (wall time in no variant), and `beyond_budgeted_work_s`, the wall time less each variant's
  probe time (first use and work) up to its budget: what the gate costs beyond the work its probes declare.
  The bar holds where `beyond_budgeted_work_s` is at most twice the import's median.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rocmcheck.records import COST_SECTION, Report, RunCost

ROUNDS = 3


def _run(argv: list, cwd: Path) -> None:
    done = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.benchmark(group="gate-budgets")
def test_import_torch_and_dynamo(benchmark, tmp_path: Path) -> None:
    benchmark.pedantic(_run, args=([sys.executable, "-c", "import torch, torch._dynamo"], tmp_path),
                       rounds=ROUNDS, iterations=1, warmup_rounds=1)


@pytest.mark.benchmark(group="gate-budgets")
def test_cpu_gate(benchmark, tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "rocmcheck", "gate", "--device", "cpu", "--out-dir", str(out)]
    benchmark.pedantic(_run, args=(argv, tmp_path), rounds=ROUNDS, iterations=1, warmup_rounds=0)
    last = Report.from_dict(json.loads(max(out.glob("rocmcheck-*.json"), key=lambda p: p.stat().st_mtime)
                                       .read_text()))
    cost = RunCost.from_dict(last.sections[COST_SECTION])
    assert cost is not None
    budgeted = sum(min(v.cost.first_use_s + v.cost.work_s, v.cost.budget_s) for v in last.verdicts if v.cost)
    benchmark.extra_info.update(wall_s=cost.wall_s, outside_s=cost.outside_s, budget_s=cost.budget_s,
                                beyond_budgeted_work_s=round(cost.wall_s - budgeted, 3),
                                over=[o["variant"] for o in cost.over])
