"""How often each level of the `sdc` probe catches a low-rate one-bit flip, and how well it keeps its budget.

Run: python -m pytest benchmarks/bench_sdc.py -s            (level 1, and level 2 scaled: a few minutes)
     SDC_BENCH_FULL=1 python -m pytest benchmarks/bench_sdc.py -s   (level 2 at its 120 s budget: ~25 min)

One simulated GPU (`--inject simgpu:1`) runs `rocmcheck run --probe sdc --level N` with
`simgpu-bitflip-rate:0:RATE`: each matrix product (26 a round: mm, bmm, addmm inside the chains,
exact products, attention forward and backward, the optimizer step) flips its middle element's
lowest bit with probability RATE. A flip is caught once it reaches a compared output, so what
decides detection is the expected number of flips in the budget, lambda = RATE x products per
second x budget, and P(caught) ~ 1 - exp(-lambda). The scaled run keeps lambda: a tenth of the
budget at ten times the rate. Level 1 (the gate) runs its own budget at the base rate.

Measured here (2 cores shared with other work, load 4-10): level 1 caught 2 of 20 (84 rounds a
second: lambda ~ 0.09 in 2 s); level 2 scaled caught 10 of 10; level 2 caught 10 of 10, after
6-106 s (median 24 s: lambda ~ 3 in 120 s); two healthy level-2 runs kept 120 s within 0.1%.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from rocmcheck import simgpu
from rocmcheck.cli import main
from rocmcheck.engine.options import LEVEL_BUDGETS_S

RATE = 2e-5  # per matrix product; ~1400 products a second on one simulated GPU here: lambda ~ 3.4 in 120 s
CASES = {  # name -> (level, --duration, rate (None: no fault), runs)
    "level-1": (1, None, RATE, 20),
    "level-2-scaled": (2, 12.0, RATE * 10, 10),
    "level-2": (2, None, RATE, 10),
    "level-2-healthy": (2, None, None, 2),  # the budget kept by a run that finds nothing (a caught one stops early)
}
FULL = ("level-2", "level-2-healthy")
RESULTS: Dict[str, Dict[str, float]] = {}


def _runs(tmp: Path, level: int, duration: Optional[float], rate: Optional[float], runs: int) -> List[dict]:
    verdicts = []
    for n in range(runs):
        report = tmp / f"run{n}.json"
        inject = "simgpu:1" + (f",simgpu-bitflip-rate:0:{rate:g}" if rate else "")
        argv = ["run", "--probe", "sdc", "--level", str(level), "--device", "simgpu:0", "--inject", inject,
                "--out-dir", str(tmp), "--json", str(report)]
        main(argv + (["--duration", f"{duration:g}"] if duration else []))
        (verdict,) = json.loads(report.read_text())["verdicts"]
        verdicts.append(verdict)
    return verdicts


@pytest.mark.parametrize("case", list(CASES))
def test_detection(case: str, tmp_path: Path) -> None:
    level, duration, rate, runs = CASES[case]
    if case in FULL and not os.environ.get("SDC_BENCH_FULL"):
        pytest.skip("the full level 2 takes ~25 min: SDC_BENCH_FULL=1")
    simgpu.build()
    verdicts = _runs(tmp_path, level, duration, rate, runs)
    budget = duration or LEVEL_BUDGETS_S[level]
    caught = [v for v in verdicts if v["status"] == "fail"]
    kept = [v["measurements"]["elapsed_s"] for v in verdicts if v["status"] == "pass"]
    rounds = [v["measurements"]["sdc"]["compared"]["rounds"] for v in verdicts if v["status"] == "pass"]
    RESULTS[case] = {"caught": len(caught), "runs": runs, "budget_s": budget,
                     "worst_budget_error": max((abs(k - budget) / budget for k in kept), default=0.0),
                     "rounds_per_s": sum(rounds) / max(sum(kept), 1e-9)}
    print(f"\n{case}: caught {len(caught)} of {runs} (rate {rate or 0:g} per product, budget {budget:g} s); "
          f"passing runs kept the budget within {RESULTS[case]['worst_budget_error']:.1%} "
          f"({RESULTS[case]['rounds_per_s']:.0f} rounds/s, 26 products a round)")
    assert all(v["status"] in ("pass", "fail") for v in verdicts), [v["message"] for v in verdicts]
    if rate is None:
        assert not caught and RESULTS[case]["worst_budget_error"] <= 0.1, RESULTS[case]
    elif level == 2:
        assert len(caught) >= 9, RESULTS[case]
