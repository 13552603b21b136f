"""The false-alarm rate of the speed judgement against a baseline, measured on this machine.

    python scripts/speed_noise.py                  10 pairs of healthy runs on the CPU and 10 on two
                                                   simulated GPUs: each figure's pair ratios, the worst
                                                   slowdown, the false alarms at the default tolerance
    python scripts/speed_noise.py --pairs 20 --where simgpu --tolerance 30
    python scripts/speed_noise.py --record         also write the figures measured to
                                                   tests/data/speed_noise.json, which the tests hold the
                                                   default tolerance to (tests/test_speed_baseline.py)

A pair is two healthy runs back to back, each a fresh `rocmcheck run` process as CI starts them,
of the probes that record speed figures (`PROBES`: `pcie-link`'s copies, `speed`'s matrix products
and memory bandwidth, `multigpu-speed`'s peer copies on the simulated GPUs); every figure of
the second run is judged against the same figure of the first with the judgement `rocmcheck diff`
and `pytest --rocm-baseline` use (`rocmcheck.outputs.diff.compare_speed`). A false alarm is a
healthy figure judged a regression. The ratios are summarised with pytest-benchmark's `Stats`.

The judgement compares each figure's fastest sample (the module doc of `rocmcheck.outputs.diff`
says why); the medians are shown beside it. The rule for the default tolerance
(`rocmcheck.engine.options.SPEED_TOLERANCE_PCT`, see `tolerance_from`): twice the worst slowdown
of a fastest sample seen in any healthy pair, rounded up to a multiple of 5 percent (5 at least).
Twice, because the pairs measured are a sample of the machine's noise, not its worst,
and a slowdown worth catching (a link at half its width, a copy path that lost pinned memory) is
a factor of 2 or more.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "tests" / "data" / "speed_noise.json"
PROBES = ("pcie-link", "speed", "multigpu-speed")  # every probe that records speed figures
WHERE = {"cpu": ["--device", "cpu"], "simgpu": ["--inject", "simgpu:2", "--device", "all"]}


def tolerance_from(worst_slower_pct: float) -> float:
    """The default tolerance for the worst slowdown (in percent) seen over healthy pairs: twice it,
    rounded up to a multiple of 5 (5 at least)."""
    return float(max(5, 5 * math.ceil(2 * worst_slower_pct / 5)))


def run_once(where: str, folder: Path, name: str) -> Path:
    """One healthy run in a process of its own; the path of its JSON report."""
    report = folder / f"{name}.json"
    probes = [arg for probe in PROBES for arg in ("--probe", probe)]
    done = subprocess.run([sys.executable, "-m", "rocmcheck", "run", *probes, *WHERE[where],
                           "--out-dir", str(folder), "--json", str(report)], capture_output=True, text=True, cwd=ROOT)
    if not report.exists():
        raise SystemExit(f"speed_noise: the {where} run wrote no report (exit {done.returncode}):\n"
                         f"{done.stderr[-2000:]}")
    return report


def pair_figures(baseline: Path, current: Path) -> List[Dict[str, Any]]:
    """Every figure both runs hold (matched as `rocmcheck diff` matches them): variant, GPU, name,
    unit and both runs' samples, to 4 significant digits (what the table keeps)."""
    from rocmcheck.outputs.diff import figures_of
    from rocmcheck.outputs.storage import load_report

    before, now = (figures_of(load_report(path).verdicts) for path in (baseline, current))
    return [{"variant": variant, "gpu": gpu, "figure": name, "unit": now[key][0].unit,
             "baseline": [float(f"{x:.4g}") for x in before[key][0].samples],
             "current": [float(f"{x:.4g}") for x in now[key][0].samples]}
            for key in sorted(set(before) & set(now), key=str) for variant, gpu, name in [key]]


def measure(where: str, pairs: int, folder: Path) -> List[List[Dict[str, Any]]]:
    measured = []
    for i in range(pairs):
        first, second = run_once(where, folder, f"{where}-{i}-a"), run_once(where, folder, f"{where}-{i}-b")
        measured.append(pair_figures(first, second))
        print(f"{where} pair {i + 1}/{pairs}: {len(measured[-1])} figures", file=sys.stderr, flush=True)
    return measured


def verdicts_of(pair: List[Dict[str, Any]]) -> Tuple[list, list]:
    """The two runs of one table pair as verdicts carrying their figures' samples."""
    from rocmcheck.model import Status, Verdict

    def side(key: str) -> list:
        made: Dict[Any, Any] = {}
        for row in pair:
            device = {} if row["gpu"] is None else {"index": row["gpu"]}
            fresh = Verdict(row["variant"].split("[")[0], row["variant"], Status.PASS, device=device)
            verdict = made.setdefault((row["variant"], row["gpu"]), fresh)
            verdict.measurements.setdefault("speed", {})[row["figure"]] = {"unit": row["unit"], "samples": row[key]}
        return list(made.values())

    return side("baseline"), side("current")


def judged(pair: List[Dict[str, Any]], tolerance_pct: float) -> Any:
    """The pair as `rocmcheck diff` judges it (`rocmcheck.outputs.diff.compare_speed`)."""
    from rocmcheck.outputs.diff import compare_speed

    return compare_speed(*verdicts_of(pair), tolerance_pct)


def false_alarms(pairs: List[List[Dict[str, Any]]], tolerance_pct: float) -> List[str]:
    """The healthy figures the judgement calls regressions at `tolerance_pct`, as `rocmcheck diff` says them."""
    return [c.text() for pair in pairs for c in judged(pair, tolerance_pct).regressions]


def worst_slowdown(pairs: List[List[Dict[str, Any]]]) -> float:
    """The most, in percent, that a figure's fastest sample took longer in the second run of a pair."""
    return max(c.slower_pct for pair in pairs for c in judged(pair, 0.0).changes)


def summary(table: Dict[str, List[List[Dict[str, Any]]]], tolerance_pct: float) -> List[str]:
    """Per place and figure: the pair ratios (second run / first) of the fastest samples, which are
    judged, and of the medians, and the worst slowdown; then the rule's tolerance and the false
    alarms at `tolerance_pct`."""
    from pytest_benchmark.stats import Stats

    lines = []
    for where, pairs in table.items():
        by_figure: Dict[str, List[Any]] = {}
        for pair in pairs:
            for c in judged(pair, 0.0).changes:
                by_figure.setdefault(c.figure + ("" if c.gpu is None else f" GPU {c.gpu}"), []).append(c)
        for figure, changes in sorted(by_figure.items()):
            best, median = Stats(), Stats()
            for c in changes:
                best.update(c.current_best / c.baseline_best)
                median.update(c.current / c.baseline)
            lines.append(f"{where:7} {figure:26} {len(changes):3} pairs  best ratio {best.min:.3f}-{best.max:.3f} "
                         f"(median {best.median:.3f}, IQR {best.iqr:.3f}), median ratio {median.min:.3f}-"
                         f"{median.max:.3f}; worst slowdown {max(c.slower_pct for c in changes):+.1f}%")
    worst = max(worst_slowdown(pairs) for pairs in table.values())
    alarms = [a for pairs in table.values() for a in false_alarms(pairs, tolerance_pct)]
    lines += [f"worst slowdown over all pairs: {worst:.1f}%; the rule (twice it, rounded up to 5%) gives "
              f"{tolerance_from(worst):g}%",
              f"false alarms at {tolerance_pct:g}%: {len(alarms)} over {sum(len(p) for p in table.values())} pairs",
              *alarms]
    return lines


def write_table(table: Dict[str, List[List[Dict[str, Any]]]], measured: str) -> None:
    """The table, one figure of one pair a line."""
    places = []
    for where, pairs in table.items():
        rendered = ["   [\n" + ",\n".join(f"    {json.dumps(row)}" for row in pair) + "\n   ]" for pair in pairs]
        places.append(f'  "{where}": [\n' + ",\n".join(rendered) + "\n  ]")
    head = json.dumps({"probes": list(PROBES), "measured": measured,
                       "command": "python scripts/speed_noise.py --record"})
    TABLE.write_text(head[:-1] + ',\n "pairs": {\n' + ",\n".join(places) + "\n }\n}\n")


def main(argv: List[str]) -> int:
    from rocmcheck.engine.options import SPEED_TOLERANCE_PCT

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10, help="pairs of runs per place (default 10)")
    parser.add_argument("--where", choices=[*WHERE, "both"], default="both",
                        help="the CPU, two simulated GPUs, or both")
    parser.add_argument("--tolerance", type=float, default=SPEED_TOLERANCE_PCT,
                        help=f"count false alarms at this tolerance (default {SPEED_TOLERANCE_PCT:g}, rocmcheck's)")
    parser.add_argument("--record", action="store_true", help=f"write the figures to {TABLE.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    places = list(WHERE) if args.where == "both" else [args.where]
    with tempfile.TemporaryDirectory(prefix="rocmcheck-speed-noise-") as folder:
        table = {where: measure(where, args.pairs, Path(folder)) for where in places}
    print("\n".join(summary(table, args.tolerance)))
    if args.record:
        write_table(table, datetime.date.today().isoformat())
        print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
