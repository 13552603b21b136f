"""Speed against a baseline: no false alarm over healthy runs, and a planted copy slowdown caught.

The default tolerance comes from run-to-run noise measured on a loaded 2-core machine: the pairs of
healthy runs in tests/data/speed_noise.json (written by `scripts/speed_noise.py --record`) hold it
to its rule and to no false alarm; the slow tier measures fresh pairs. The slow-copy fault on two
simulated GPUs is the regression `rocmcheck diff` must name, with both figures.
"""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from rocmcheck.cli import main
from rocmcheck.engine.options import SPEED_TOLERANCE_PCT

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("speed_noise", ROOT / "scripts" / "speed_noise.py")
speed_noise = importlib.util.module_from_spec(spec)
spec.loader.exec_module(speed_noise)
TABLE = json.loads(speed_noise.TABLE.read_text())
COPIES = {"h2d-pageable", "d2h-pageable", "h2d-pinned", "d2h-pinned", "h2d-strided"}
ON_THE_CPU = {"h2d-pageable", "d2h-pageable", "matmul-fp32", "matmul-bf16", "device-memory-copy", "device-memory-triad"}


def test_the_measured_pairs_are_at_least_ten_on_the_cpu_and_on_simulated_gpus_with_every_figure():
    pairs = TABLE["pairs"]
    assert set(pairs) == {"cpu", "simgpu"} and all(len(p) >= 10 for p in pairs.values())
    assert all({row["figure"] for row in pair} == ON_THE_CPU for pair in pairs["cpu"])
    on_each_gpu = {(g, f) for g in (0, 1) for f in COPIES | ON_THE_CPU} | {(0, "p2p-0-1"), (0, "p2p-1-0")}
    assert all({(row["gpu"], row["figure"]) for row in pair} == on_each_gpu for pair in pairs["simgpu"])
    assert all(len(row["baseline"]) >= 3 and len(row["current"]) >= 3 for p in pairs.values() for pair in p
               for row in pair)  # the samples, as the runs recorded them


def test_the_default_tolerance_gives_no_false_alarm_over_the_measured_pairs():
    for where, pairs in TABLE["pairs"].items():
        assert speed_noise.false_alarms(pairs, SPEED_TOLERANCE_PCT) == [], where


def test_the_default_tolerance_is_the_rule_over_the_measured_noise():
    """Twice the worst slowdown seen, rounded up to 5%: re-recording the table moves the default with it."""
    worst = max(speed_noise.worst_slowdown(pairs) for pairs in TABLE["pairs"].values())
    assert SPEED_TOLERANCE_PCT == speed_noise.tolerance_from(worst)
    assert any(speed_noise.false_alarms(pairs, worst * 0.99) for pairs in TABLE["pairs"].values())  # and it counts


def test_the_rule_doubles_the_worst_slowdown_and_rounds_up_to_five():
    assert [speed_noise.tolerance_from(w) for w in (-3, 0, 0.1, 17.3, 20, 82.2)] == [5, 5, 5, 35, 40, 165]


@pytest.mark.slow
@pytest.mark.children
@pytest.mark.parametrize("where", ["cpu", "simgpu"])
def test_a_fresh_pair_of_healthy_runs_is_no_regression(where, tmp_path):
    runs = [speed_noise.run_once(where, tmp_path, name) for name in ("a", "b")]
    pair = speed_noise.pair_figures(*runs)
    assert {row["figure"] for row in pair} >= ON_THE_CPU
    assert speed_noise.false_alarms([pair], SPEED_TOLERANCE_PCT) == []


@pytest.mark.children
def test_a_slow_copy_on_simulated_gpus_is_a_regression_in_diff_naming_each_figure_with_both_values(tmp_path, capsys):
    def run(name, inject):
        main(["run", "--probe", "pcie-link", "--inject", inject, "--device", "all", "--out-dir", str(tmp_path),
              "--json", str(tmp_path / name)])
        return str(tmp_path / name)

    base, again, slow = run("base.json", "simgpu:2"), run("again.json", "simgpu:2"), \
        run("slow.json", "simgpu:2,simgpu-slow-copy")
    capsys.readouterr()
    assert main(["diff", base, again]) == 0
    assert "speed: compared 10 figures present in both runs; 0 regressions beyond" in capsys.readouterr().out
    assert main(["diff", base, slow, "--json", str(tmp_path / "diff.json")]) == 1
    out = capsys.readouterr().out
    named = re.findall(r"^SPEED REGRESSION pcie-link GPU (\d) ([a-z2-]+): ([\d.]+) -> ([\d.]+) GB/s, "
                       r"best sample ([\d.]+) -> ([\d.]+) \((\d\.?\d*)x slower\)$", out, re.M)
    assert {(int(g), f) for g, f, *_ in named} == {(g, f) for g in (0, 1) for f in COPIES}, out
    assert all(float(b) > 2 * float(c) and float(bb) > 2 * float(cb) for _, _, b, c, bb, cb, _ in named)  # 4x as long
    assert "0 regressions, 0 fixes" in out and "; 10 regressions beyond" in out  # the statuses did not change
    speed = json.loads((tmp_path / "diff.json").read_text())["speed"]
    assert len(speed["regressions"]) == 10 and speed["tolerance_pct"] == SPEED_TOLERANCE_PCT
    first = speed["regressions"][0]
    assert first["baseline"] > first["current"] > 0 and first["unit"] == "GB/s" and first["regression"] is True
