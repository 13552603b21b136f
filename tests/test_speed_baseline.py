"""Speed against a baseline: no false alarm over healthy runs, and every figure slowed 2x caught.

The default tolerance comes from run-to-run noise measured on a loaded 2-core machine: the pairs of
healthy runs in tests/data/speed_noise.json (written by `scripts/speed_noise.py --record`: the CPU,
two simulated GPUs, one simulated GPU as issue 40 ran it, alone and beside a memory-copying load)
hold it to its rule and to no false alarm; the slow tier measures fresh pairs, with no other test
beside them (`alone`). The faults that slow a simulated GPU's copies, products and memory work 2x are
the regressions `rocmcheck diff` must name, each with both figures.
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
COPIES = speed_noise.COPIES
ON_THE_CPU = {"h2d-pageable", "d2h-pageable", "matmul-fp32", "device-memory-copy", "device-memory-triad"}
ON_A_SIMULATED_GPU = COPIES | ON_THE_CPU | {"matmul-bf16"}  # bf16 is left out on the CPU itself (probes/speed.py)


def test_the_measured_pairs_cover_the_cpu_and_simulated_gpus_idle_and_under_load_with_every_figure():
    pairs = TABLE["pairs"]
    assert {"cpu", "simgpu", "simgpu1", "simgpu1+load"} <= set(pairs) and all(len(p) >= 3 for p in pairs.values())
    assert sum(len(p) for p in pairs.values()) >= 50
    assert all({row["figure"] for row in pair} == ON_THE_CPU for where in pairs if where.startswith("cpu")
               for pair in pairs[where])
    on_each_gpu = {(g, f) for g in (0, 1) for f in ON_A_SIMULATED_GPU} | {(0, "p2p-0-1"), (0, "p2p-1-0")}
    assert all({(row["gpu"], row["figure"]) for row in pair} == on_each_gpu for pair in pairs["simgpu"])
    one_gpu = [pair for where in ("simgpu1", "simgpu1+load") for pair in pairs[where]]
    assert all({(row["gpu"], row["figure"]) for row in pair} == {(0, f) for f in ON_A_SIMULATED_GPU}
               for pair in one_gpu)
    assert all(len(row[f"{side}_host"]) == len(row[side]) for pair in one_gpu for row in pair
               for side in ("baseline", "current"))  # the host's same work, one sample beside each
    assert all(len(row["baseline"]) >= 3 and len(row["current"]) >= 3 for p in pairs.values() for pair in p
               for row in pair)  # the samples, as the runs recorded them


def test_the_default_tolerance_gives_no_false_alarm_over_the_measured_pairs():
    for where, pairs in TABLE["pairs"].items():
        assert speed_noise.false_alarms(pairs, SPEED_TOLERANCE_PCT) == [], where


def test_the_default_tolerance_holds_to_the_rule_over_the_measured_noise():
    """A quarter above the worst healthy slowdown seen, at most half of a 2x slowdown: re-recording
    the table checks the default against it."""
    worst = max(speed_noise.worst_slowdown(pairs) for pairs in TABLE["pairs"].values())
    assert speed_noise.tolerance_holds(SPEED_TOLERANCE_PCT, worst), worst
    assert any(speed_noise.false_alarms(pairs, worst * 0.99) for pairs in TABLE["pairs"].values())  # and it counts


def test_the_rule_wants_a_quarter_above_the_worst_and_at_most_half_of_2x():
    assert speed_noise.tolerance_holds(50, 34.0) and speed_noise.tolerance_holds(50, 40.0)
    assert not speed_noise.tolerance_holds(50, 40.1) and not speed_noise.tolerance_holds(55, 10)


def healthy_pair(where: str, folder: Path) -> list:
    """Two healthy runs back to back, as `scripts/speed_noise.py` records them, but in this process: each run's
    figures are measured in children forked for it, and the second skips the first's imports (the recorder's
    runs are processes of their own). Their JSON reports."""
    runs = [folder / f"{name}.json" for name in ("a", "b")]
    for report in runs:
        main(speed_noise.run_args(where, folder, report))
    return runs


@pytest.fixture(scope="module")
def simgpu1_pair(tmp_path_factory) -> list:
    """A healthy pair on one simulated GPU, as issue 40 ran it: the fresh pair's, and the first run the 2x
    faults' baseline."""
    return healthy_pair("simgpu1", tmp_path_factory.mktemp("simgpu1"))


@pytest.mark.slow
@pytest.mark.children
@pytest.mark.alone
@pytest.mark.parametrize("where", ["cpu", "simgpu1"])
def test_a_fresh_pair_of_healthy_runs_is_no_regression(where, request, tmp_path):
    runs = request.getfixturevalue("simgpu1_pair") if where == "simgpu1" else healthy_pair(where, tmp_path)
    pair = speed_noise.pair_figures(*runs)
    assert {row["figure"] for row in pair} >= (ON_A_SIMULATED_GPU if where == "simgpu1" else ON_THE_CPU)
    assert speed_noise.false_alarms([pair], SPEED_TOLERANCE_PCT) == []


def worst_pair_alone():
    """(place, pair, change): the measured healthy pair whose figure slowed most judged by the fastest
    samples alone, as rocmcheck judged every figure before it timed the host beside a simulated GPU."""
    found = [(where, pair, c) for where, pairs in TABLE["pairs"].items() for pair in pairs
             for c in speed_noise.judged(pair, 0.0, beside_host=False).changes]
    return max(found, key=lambda each: each[2].slower_pct)


def test_the_healthy_pair_at_the_worst_measured_spread_is_no_regression_beside_the_host():
    """Issue 40: two healthy `rocmcheck run --inject simgpu:1` back to back, one figure's fastest sample
    far slower in the second because the host was; judged beside the host's same work, it is not."""
    where, pair, alone = worst_pair_alone()
    assert where.startswith("simgpu") and alone.slower_pct > SPEED_TOLERANCE_PCT, alone.text()  # flagged alone
    assert speed_noise.false_alarms([pair], SPEED_TOLERANCE_PCT) == []
    judged = next(c for c in speed_noise.judged(pair, 0.0).changes if c.figure == alone.figure and c.gpu == alone.gpu)
    assert judged.host_slower_pct is not None and judged.host_slower_pct > SPEED_TOLERANCE_PCT  # the host was slower


def test_beside_the_host_there_are_fewer_false_alarms_than_by_the_figures_alone_over_the_measured_pairs():
    for tolerance in (20, 30, 40):
        beside = sum(len(speed_noise.false_alarms(pairs, tolerance)) for pairs in TABLE["pairs"].values())
        alone = sum(len(speed_noise.false_alarms(pairs, tolerance, beside_host=False))
                    for pairs in TABLE["pairs"].values())
        assert beside < alone, tolerance


def judged_by_statistic(baseline: str, current: str, figures: set) -> list:
    """How each of `figures` was judged, with the judged statistic's slowdown and, for a figure with the host's
    samples, the fastest sample's over the host's fastest: what a missed regression fell short by, or what a
    figure the fault does not slow read as."""
    from rocmcheck.outputs.diff import compare_speed, figures_of, judged_time, times
    from rocmcheck.outputs.storage import load_report

    def readings(base, now):
        statistic, now_time, base_time = judged_time(base, now)
        read = [f"{statistic} {now_time / base_time - 1:+.0%}"]
        if base.host_samples and now.host_samples:
            fastest = [times(f.samples).min / times(f.host_samples).min for f in (now, base)]
            read.append(f"fastest over the host's fastest {fastest[0] / fastest[1] - 1:+.0%}")
        return read

    base, now = load_report(baseline).verdicts, load_report(current).verdicts
    before, after = figures_of(base), figures_of(now)
    return [(change.text(), readings(before[key][0], after[key][0]))
            for change in compare_speed(base, now, SPEED_TOLERANCE_PCT).changes if change.figure in figures
            for key in [(change.variant, change.gpu, change.figure)]]


@pytest.mark.children
@pytest.mark.alone
def test_a_2x_slowdown_of_each_figure_on_a_simulated_gpu_is_a_regression_and_only_its_own(tmp_path, capsys,
                                                                                         simgpu1_pair):
    """Each fault that slows figures twice (host copies, products, memory work) against a healthy
    baseline: `rocmcheck diff` names every figure it slows 2x, each about 2x beside the host, and none it
    does not slow (`scripts/speed_noise.py --drills` measures the same many times). The baseline is the healthy
    pair's first run."""
    base = str(simgpu1_pair[0])
    for faults, (figures, in_part) in speed_noise.DRILLS.items():
        now = str(tmp_path / f"{faults[1:]}.json")
        main(speed_noise.run_args("simgpu1", tmp_path, Path(now), faults))
        capsys.readouterr()
        assert main(["diff", base, now, "--json", str(tmp_path / "diff.json")]) == 1
        regressions = json.loads((tmp_path / "diff.json").read_text())["speed"]["regressions"]
        named = {r["figure"] for r in regressions}
        misjudged = (figures - named) | (named - figures - in_part)
        assert not misjudged, (faults, judged_by_statistic(base, now, misjudged))
        # caught beside the host: over 12 rounds of `speed_noise.py --drills` on a 2-core machine (4 beside two
        # memory-copying processes) the weakest 2x reading was 72%, the strongest of a figure not slowed 20%
        assert all(r["slower_pct"] > SPEED_TOLERANCE_PCT and r["host_slower_pct"] is not None
                   for r in regressions), regressions


@pytest.mark.children
@pytest.mark.alone
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
                       r"best sample ([\d.]+) -> ([\d.]+) \((\d\.?\d*)x slower beside the host's", out, re.M)
    assert {(int(g), f) for g, f, *_ in named} == {(g, f) for g in (0, 1) for f in COPIES}, out
    assert all(float(b) > 2 * float(c) and float(bb) > 2 * float(cb) for _, _, b, c, bb, cb, _ in named)  # 4x as long
    assert "0 regressions, 0 fixes" in out and "; 10 regressions beyond" in out  # the statuses did not change
    speed = json.loads((tmp_path / "diff.json").read_text())["speed"]
    assert len(speed["regressions"]) == 10 and speed["tolerance_pct"] == SPEED_TOLERANCE_PCT
    first = speed["regressions"][0]
    assert first["baseline"] > first["current"] > 0 and first["unit"] == "GB/s" and first["regression"] is True
