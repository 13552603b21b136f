"""`rocmcheck diff BASELINE CURRENT`: what got worse, what got fixed, what appeared or vanished.

Statuses fall into two classes: good (pass, warn, skip) and bad (fail, error, crash,
hang). A *regression* is a variant that is bad now and was good in the baseline, or
absent from it (nothing excuses a new failure); a *fix* is one that was bad and now
passes or warns. Every other change (pass -> warn, pass -> skip, fail -> crash,
bad -> skip) is listed as *changed* and does not fail the diff. The pytest plugin's
`--rocm-baseline` uses the same rule, so CI and the command agree.

Speed figures (`model.SpeedFigure`: a copy's GB/s, a matrix product's TFLOPS) are matched by
(variant, GPU index, figure name) and compared where both runs hold one on the same GPU model
(an H100's figures say nothing about an MI300X's). A figure *regresses* when its fastest sample
takes more than the tolerance longer than the baseline's fastest: pytest-benchmark's
`--benchmark-compare-fail=min:PCT%` over the time per byte or per operation (a rate's
reciprocal), its statistics and its check doing the judging. The fastest sample, as
pytest-benchmark advises for its comparisons: on a shared machine the others are slowed by
whatever else ran, and a run's median moved by up to 2.8x there while its fastest sample held
(`speed`'s fp32 products on the CPU: samples alternating between 0.11 and 0.03 TFLOPS within one
run); a GPU that really got slower is slow in every sample.

Beside the host: a simulated GPU's work is the host's (its copies are host memcpys and gathers,
its products and STREAM kernels run on the host's cores), so the host's speed of the moment bounds
its figures, and a busy host slows a whole run, its fastest sample too: two healthy runs on a
loaded 2-core machine gave h2d-strided 7.28 then 4.19 GB/s (issue 40). Its probes therefore time
the same work done by the host alone right after each sample (`SpeedFigure.host_samples`), and
where both runs hold those, the figure is compared by its time over the host's same work
(`judged_time`: the median of each sample's time over the host's right after it): a busier host
divides out, a device path twice as slow doubles it (the faults `simgpu-slow-copy`,
`-slow-matmul`, `-slow-memory` at 2 read 72% slower or more: `scripts/speed_noise.py --drills`),
and a 2x slowdown that a faster host had hidden (the raw figure 35% slower) is caught. A real
GPU's events time its own work and the CPU's figures are the host's: both are judged by their
fastest samples alone. A speed regression fails the diff as a status regression does; the
front-ends' default tolerance, `engine.options.SPEED_TOLERANCE_PCT`, comes from the run-to-run
noise measured on a loaded machine (its comment gives the numbers).

Exit 0 without regressions, 1 with any, 2 for unreadable or foreign input.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ..errors import UsageError
from ..host.fingerprint import summary
from ..model import SpeedFigure, Status, Verdict, is_bad, speed_figures
from ..records import Report, where_interrupted
from ..wording import counted
from .render import injected, injection_text, short

KINDS = ("regression", "fix", "changed", "new", "missing")


def statuses(report: Report, what: str) -> Dict[str, str]:
    """variant id -> status (the worst, if the report holds the variant more than once); a
    loaded record that was no verdict is a one-line UsageError naming `what`."""
    if report.malformed:
        raise UsageError(f"{what}: verdict {report.malformed[0]} has no valid variant and status")
    seen: Dict[str, List[str]] = {}
    for verdict in report.verdicts:
        seen.setdefault(verdict.variant, []).append(verdict.status.value)
    return {variant: Status.worst(found).value for variant, found in seen.items()}


def classify(base: Optional[str], current: str) -> str:
    """'regression', 'fix', 'changed', 'same' or 'new' for one variant (base None: absent)."""
    bad_now = is_bad(current)
    if base is None:
        return "regression" if bad_now else "new"
    if base == current:
        return "same"
    bad_before = is_bad(base)
    if bad_now and not bad_before:
        return "regression"
    if bad_before and Status(current).worked:
        return "fix"
    return "changed"


@dataclass
class Change:
    variant: str
    kind: str
    baseline: Optional[str]
    current: Optional[str]
    message: str = ""


# --- speed figures --------------------------------------------------------------------------


FigureKey = Tuple[str, Optional[int], str]  # (variant, GPU index or None on the CPU, figure name)


@dataclass(frozen=True)
class SpeedChange:
    """One speed figure held by both runs, on the same GPU model: both figures (their medians), their
    fastest samples, how much slower as judged, and the verdict."""

    variant: str
    gpu: Optional[int]
    figure: str
    unit: str
    baseline: float  # the figure's value: its median
    current: float
    baseline_best: float  # its fastest sample: what is judged where no host work was timed beside it
    current_best: float
    slower_pct: float  # how much longer the fastest sample takes now (negative: faster), pytest-benchmark's;
    # beside the host where both runs timed the host's own work: how much longer its median sample takes
    # relative to the host's same work (`judged_time`: what is judged)
    regression: bool
    host_slower_pct: Optional[float] = None  # how much longer the host's fastest same work took now, or None

    def text(self) -> str:
        """'pcie-link GPU 1 h2d-pinned: 60.8 -> 11.2 GB/s, best sample 62.1 -> 11.9 (5.2x slower)';
        slower as the tolerance counts it, the same work taking that much longer."""
        where = self.variant if self.gpu is None else f"{self.variant} GPU {self.gpu}"
        how = slower_text(self.slower_pct)
        if self.host_slower_pct is not None:
            how = f"{how} beside the host's same work, itself {slower_text(self.host_slower_pct)}"
        return (f"{where} {self.figure}: {self.baseline:.4g} -> {self.current:.4g} {self.unit}, best sample "
                f"{self.baseline_best:.4g} -> {self.current_best:.4g} ({how})")


def slower_text(pct: float) -> str:
    """'5.2x slower', '12% slower', '3% faster', 'none measured now' for a slowdown in percent."""
    if not math.isfinite(pct):
        return "none measured now"
    if pct >= 100:
        return f"{pct / 100 + 1:.2g}x slower"
    return f"{abs(pct):.0f}% {'slower' if pct >= 0 else 'faster'}"


@dataclass
class SpeedComparison:
    """Every speed figure of two runs, matched, and what could not be compared, for the one line
    that says what was compared."""

    tolerance_pct: float
    changes: List[SpeedChange] = field(default_factory=list)  # the figures in both runs, same GPU model
    only_baseline: int = 0
    only_current: int = 0
    other_model: Dict[str, int] = field(default_factory=dict)  # "model -> model" -> figures not compared

    @property
    def regressions(self) -> List[SpeedChange]:
        return [c for c in self.changes if c.regression]

    def line(self) -> str:
        """One line: what was compared and what was not, and the regressions beyond the tolerance
        ("" when neither run holds a speed figure)."""
        if not (self.changes or self.only_baseline or self.only_current or self.other_model):
            return ""
        held = len(self.changes) + sum(self.other_model.values())
        if not held and not self.only_baseline:
            return f"speed: the baseline has no speed figures (this run has {self.only_current}): none compared"
        if not held and not self.only_current:
            return f"speed: this run has no speed figures (the baseline has {self.only_baseline}): none compared"
        compared = f"compared {counted(len(self.changes), 'figure')} present in both runs"
        if self.other_model:
            compared = (f"compared {len(self.changes)} of the {counted(held, 'figure')} present in both runs "
                        f"(not compared: " + ", ".join(f"{n} on another GPU model, {models}"
                                                       for models, n in self.other_model.items()) + ")")
        parts = [compared] + [f"{n} only in {which}" for n, which in ((self.only_baseline, "the baseline"),
                                                                       (self.only_current, "this run")) if n]
        slower = counted(len(self.regressions), "regression")
        return f"speed: {', '.join(parts)}; {slower} beyond {self.tolerance_pct:g}% slower"

    def to_dict(self) -> Dict[str, Any]:
        return {"tolerance_pct": self.tolerance_pct, "note": self.line(), "compared": len(self.changes),
                "only_baseline": self.only_baseline, "only_current": self.only_current,
                "other_model": dict(self.other_model), "regressions": [asdict(c) for c in self.regressions]}


def figures_of(verdicts: Iterable[Verdict]) -> Dict[FigureKey, Tuple[SpeedFigure, Optional[str]]]:
    """(variant, GPU index, figure name) -> the figure and its GPU model; where a report holds one
    twice, the slower (as `statuses` keeps the worse status)."""
    found: Dict[FigureKey, Tuple[SpeedFigure, Optional[str]]] = {}
    for verdict in verdicts:
        gpu, model = verdict.device.get("index"), verdict.device.get("model")
        for name, figure in speed_figures(verdict).items():
            key = (verdict.variant, gpu if isinstance(gpu, int) else None, name)
            if key not in found or figure.value < found[key][0].value:
                found[key] = (figure, model)
    return found


def times(samples: List[float]) -> Any:
    """Rate samples as pytest-benchmark's statistics of the time per unit (a rate's reciprocal: the
    seconds per GB or per TFLOP), so that its comparison reads them as it reads benchmark times."""
    from pytest_benchmark.stats import Stats

    stats = Stats()
    for rate in samples:
        stats.update(1 / rate if rate > 0 else math.inf)
    return stats


def beside_the_host(figure: SpeedFigure) -> Any:
    """pytest-benchmark's statistics of each sample's time over that of the host's same work timed
    right after it (how many times the host's own time the device's path took, at that moment: the
    host's speed of the moment divided out)."""
    from pytest_benchmark.stats import Stats

    stats = Stats()
    for rate, host_rate in zip(figure.samples, figure.host_samples):
        stats.update(host_rate / rate if rate > 0 else math.inf)
    return stats


def judged_time(base: SpeedFigure, cur: SpeedFigure) -> Tuple[str, float, float]:
    """What is compared, as (pytest-benchmark's statistic, its value now, in the baseline). Without
    the host's samples: the fastest sample's time per unit. Where both runs timed the host's same
    work beside each sample: the median of each sample's time over the host's right after it
    (`beside_the_host`), each sample's own moment of the host divided out. Not the fastest sample
    over the host's fastest, which was judged too until a CI run missed a 2x slowdown by it: those
    two come from different moments, so the host's noise is back in their ratio. On a 2-core
    machine (2026-11-28, 12 healthy pairs of one simulated GPU, 16 pairs of each 2x fault) h2d-strided
    read up to 55% slower healthy and as little as 42% under `simgpu-slow-copy:2` by it, against
    1.8% and 92% by the median; over tests/data/speed_noise.json's healthy pairs the median's worst
    is 26% (matmul-bf16)."""
    if not (base.host_samples and cur.host_samples):
        return "min", times(cur.samples).min, times(base.samples).min
    return "median", beside_the_host(cur).median, beside_the_host(base).median


def compare_speed(baseline: Iterable[Verdict], current: Iterable[Verdict], tolerance_pct: float) -> SpeedComparison:
    """Judge every speed figure of `current` against the same one in `baseline` (the module's doc)."""
    from pytest_benchmark.utils import PercentageRegressionCheck

    before, now = figures_of(baseline), figures_of(current)
    result = SpeedComparison(tolerance_pct, only_baseline=sum(key not in now for key in before),
                             only_current=sum(key not in before for key in now))
    for key in sorted(set(before) & set(now), key=lambda k: (k[0], -1 if k[1] is None else k[1], k[2])):
        (base, base_model), (cur, cur_model) = before[key], now[key]
        if base_model != cur_model:
            models = f"{base_model or 'an unknown model'} -> {cur_model or 'an unknown model'}"
            result.other_model[models] = result.other_model.get(models, 0) + 1
            continue
        statistic, now_time, base_time = judged_time(base, cur)
        check = PercentageRegressionCheck(statistic, tolerance_pct)
        timed = {statistic: now_time}, {statistic: base_time}  # (current, compared), as the check reads them
        slower, regression = check.compute(*timed), bool(check.fails(*timed))
        host = None
        if base.host_samples and cur.host_samples:  # beside the host: how much longer its fastest same work took
            host = PercentageRegressionCheck("min", 0).compute({"min": times(cur.host_samples).min},
                                                              {"min": times(base.host_samples).min})
        result.changes.append(SpeedChange(key[0], key[1], key[2], cur.unit, base.value, cur.value, max(base.samples),
                                          max(cur.samples), slower, regression, host))
    return result


@dataclass
class Diff:
    speed: SpeedComparison
    changes: List[Change] = field(default_factory=list)
    unchanged: int = 0

    def of(self, kind: str) -> List[Change]:
        return [c for c in self.changes if c.kind == kind]

    @property
    def regressions(self) -> List[Change]:
        return self.of("regression")

    @property
    def failed(self) -> bool:
        """A status regression or a speed figure slower beyond the tolerance: exit 1."""
        return bool(self.regressions or self.speed.regressions)

    def counts_line(self) -> str:
        plural = {"regression": "regressions", "fix": "fixes"}
        parts = [f"{n} {plural.get(kind, kind) if n != 1 else kind}" for kind in KINDS for n in [len(self.of(kind))]]
        return ", ".join(parts) + f", {self.unchanged} unchanged"


def compare(baseline: Report, current: Report, names: tuple = ("baseline", "current"), *,
            speed_tolerance_pct: float) -> Diff:
    """Classify every variant of both reports and judge their speed figures; `names` label them in
    error messages."""
    before, now = statuses(baseline, names[0]), statuses(current, names[1])
    messages = {v.variant: v.message for v in current.verdicts}
    result = Diff(speed=compare_speed(baseline.verdicts, current.verdicts, speed_tolerance_pct))
    for variant, status in now.items():
        kind = classify(before.get(variant), status)
        if kind == "same":
            result.unchanged += 1
        else:
            result.changes.append(Change(variant, kind, before.get(variant), status, messages.get(variant, "")))
    result.changes += [Change(v, "missing", s, None) for v, s in before.items() if v not in now]
    result.changes.sort(key=lambda c: KINDS.index(c.kind))
    return result


# --- for people --------------------------------------------------------------------------------


def side(path: Path, report: Report) -> Dict[str, Any]:
    """One side of a diff: its file, machine, run and whether it is partial."""
    run = report.run
    drill, simulated = injected(report)
    return {"file": str(path), "machine": summary(report.fingerprint), "run": run.id or None,
            "partial": run.partial, "interrupted": run.interrupted, "drill": drill, "simulated": simulated}


def text(sides: List[Dict[str, Any]], result: Diff) -> str:
    """The diff for the terminal: both sides, the changes, the counts."""
    from tabulate import tabulate

    lines = [f"{name}: {s['file']} ({s['machine']}, run {s['run']})"
             for name, s in zip(("baseline", "current "), sides)]
    if sides[0]["machine"] != sides[1]["machine"]:
        lines.append("note: the two runs come from different machines")
    lines += [f"note: {s['file']} is partial (interrupted {where_interrupted(s['interrupted'])})"
              for s in sides if s["partial"]]
    lines += [f"note: the {name} is a {injection_text(s['drill'])}: its failures, and the regressions or fixes "
              f"they make, are the drill's, not the machine's"
              for name, s in zip(("baseline", "current run"), sides) if s["drill"]]
    rows = [[c.kind.upper(), c.variant, c.baseline or "-", c.current or "-", short(c.message, 70)]
            for c in result.changes]
    if rows:
        lines += ["", tabulate(rows, headers=["change", "variant", "baseline", "current", "message"],
                               tablefmt="simple")]
    lines += ["", result.counts_line()]
    lines += [f"SPEED REGRESSION {c.text()}" for c in result.speed.regressions]
    lines += [line for line in [result.speed.line()] if line]
    return "\n".join(lines)
