"""`rocmcheck doctor`: find the workaround that makes a failing probe variant pass here.

For the variants that did not pass, doctor re-runs one representative per probe (the first
failing variant) as it is (`--repeats` N times) to measure its pass rate, then under each
candidate workaround that applies: environment variables (set before the child imports torch,
so a fresh interpreter) or parameter overrides (the same probe with another backend, dtype,
copy method...). Every attempt is an ordinary child under the watchdog, inside one total time
budget.

The variants of one probe that fail together mostly share a cause (one fault under every copy
method), and re-running each N times as it is, then every candidate on each, spent the budget
on runs that taught nothing new. So when the representative fails N of N (deterministic), the
other failing variants of its probe are not re-run as they are ("fails like" it; with
`--from`, one whose first re-run passed is not counted in), and only the candidates that fixed
the representative are tried on them, each with the representative's bar (N of N); a
candidate that did not fix it is "not tried" on them, saying so. A variant that no fix of the
representative fixes has a cause of its own: it is diagnosed the same way in the next round,
as the representative of what is left of its probe (its own N re-runs, every candidate not yet
tried on it). A representative that does not fail deterministically (flaky, not reproduced)
stands for nothing: the next variant of its probe is the next round's representative.

Candidates are data: the built-in `data/workarounds.json`, files given with `--workarounds`,
and the ids that a known issue fitting the failure (its scope judged against the run's other
verdicts) names in its "candidates" list. Those named by a known issue are tried first, then
the rest cheapest first.

When a candidate counts as a fix (the baseline is the N re-runs as it is):
- the baseline failed N of N: the candidate must pass N of N;
- the baseline passed k of N (flaky, 0 < k < N): the candidate must pass M runs in a row,
  M the smallest number >= N with (k/N)**M <= 5%: a change that does nothing passes M in a
  row at most once in 20 at the measured rate;
- the baseline passed N of N: not reproduced, nothing to judge against, no candidate tried.
A candidate stops at its first run that does not pass. `warn` counts as a pass (it worked),
`skip` means it does not apply on this machine; one that crashes or hangs is reported so and
is never a fix.

Budget: before each run doctor estimates it (the longest run of that variant so far, plus
what launching that kind of child has cost: a fresh interpreter imports torch) and starts it
only if the budget left covers it; the run's watchdog timeout is at most the budget left, and
a run stopped there is "cut", not a hang. In each round the representatives' baselines run
first, then their candidates rank by rank across probes, so a short budget reaches every
probe's first candidate, then the widening of their fixes; no new round starts once a run did
not fit. The first run of a fresh interpreter may overshoot the budget by one torch import,
which nothing has measured yet.
"""
from __future__ import annotations

import fnmatch
import json
import math
import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .errors import UsageError
from .knowledge import DATA, known_issues
from .model import DeviceInfo, RunsIn, Status, Variant, Verdict
from .outputs.render import DOCTOR_OUTCOME_TEXT
from .outputs.storage import parse_json, read_text
from .records import Report
from .wording import counted

if TYPE_CHECKING:
    from .engine.runner import Runner

SCHEMA = "rocmcheck-workarounds/1"
BUILTIN_FILE = DATA / "workarounds.json"
KINDS = ("env", "params")
FALSE_FIX_CHANCE = 0.05
DEFAULT_REPEATS = 3
DEFAULT_BUDGET_S = 600.0


# --- candidates (data) --------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One workaround to try: variables for the child, or parameters of the same probe."""

    id: str
    kind: str
    title: str
    cost: int
    probes: Tuple[str, ...]
    variants: Tuple[str, ...] = ("*",)
    env: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    backend: Optional[str] = None
    snippet: Tuple[str, ...] = ()
    links: Tuple[str, ...] = ()

    def matches(self, variant: Variant) -> bool:
        return (any(fnmatch.fnmatchcase(variant.spec.id, p) for p in self.probes)
                and any(fnmatch.fnmatchcase(variant.id, v) for v in self.variants))

    def unmet(self, variant: Variant, device: DeviceInfo, base_env: Mapping[str, str]) -> Optional[str]:
        """Why this candidate cannot change `variant` here, or None when it applies."""
        if self.backend and device.backend != self.backend and not (device.kind == "cpu" and self.backend == "rocm"):
            return f"for {self.backend} builds; this is {device.backend}"
        if self.kind == "env":
            current = {**base_env, **variant.env()}
            return "already in effect" if all(current.get(k, "") == v for k, v in self.env.items()) else None
        missing = [k for k in self.params if k not in variant.params]
        if missing:
            return f"the probe has no parameter {', '.join(missing)}"
        target = {**variant.params, **self.params}
        if target == variant.params:
            return "that is this variant"
        if target not in [dict(p) for p in variant.spec.variants]:
            return f"the probe has no variant {json.dumps(target)}"
        return None

    def target(self, variant: Variant) -> Variant:
        return Variant(variant.spec, {**variant.params, **self.params}) if self.kind == "params" else variant

    def paste(self) -> str:
        return "\n".join(self.snippet) if self.snippet else env_snippet(self.env)


def env_snippet(env: Mapping[str, str], windows: bool = os.name == "nt") -> str:
    """Shell lines setting `env` (PowerShell on Windows); an empty value unsets the variable."""
    if windows:
        return "\n".join(f'$env:{k} = "{v}"' if v else f"Remove-Item Env:{k} -ErrorAction SilentlyContinue"
                         for k, v in env.items())
    return "\n".join(f"export {k}={shlex.quote(v)}" if v else f"unset {k}" for k, v in env.items())


def _strings(value: Any, what: str, allow_empty: bool = False) -> Tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value) or not (value or allow_empty):
        raise UsageError(f"{what} must be a list of strings")
    return tuple(value)


def parse_candidate(entry: Any, where: str) -> Candidate:
    """One entry of a workarounds file; anything malformed is a one-line UsageError."""
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), str) or not entry["id"]:
        raise UsageError(f"{where}: every candidate needs an \"id\" string")
    what = f"{where}: candidate '{entry['id']}'"
    kind, cost = entry.get("kind"), entry.get("cost", 3)
    if kind not in KINDS:
        raise UsageError(f"{what}: \"kind\" must be one of {', '.join(KINDS)}")
    if not isinstance(cost, int) or isinstance(cost, bool) or cost < 0:
        raise UsageError(f"{what}: \"cost\" must be a whole number >= 0")
    body = entry.get(kind)
    if not isinstance(body, dict) or not body or (kind == "env" and not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in body.items())):
        raise UsageError(f"{what}: \"{kind}\" must be a non-empty object" + (" of strings" if kind == "env" else ""))
    snippet = _strings(entry.get("snippet", []), f"{what}: \"snippet\"", allow_empty=kind == "env")
    return Candidate(id=entry["id"], kind=kind, title=str(entry.get("title") or entry["id"]), cost=cost,
                     probes=_strings(entry.get("probes"), f"{what}: \"probes\""),
                     variants=_strings(entry.get("variants", ["*"]), f"{what}: \"variants\""),
                     env=body if kind == "env" else {}, params=body if kind == "params" else {},
                     backend=entry.get("backend"), snippet=snippet,
                     links=_strings(entry.get("links", []), f"{what}: \"links\"", allow_empty=True))


def load_candidates(extra: Sequence[Path] = ()) -> Dict[str, Candidate]:
    """The built-in candidates, then each file of `extra` (a later id replaces an earlier one)."""
    out: Dict[str, Candidate] = {}
    for path in [BUILTIN_FILE, *map(Path, extra)]:
        data = parse_json(read_text(path), f"workarounds file '{path}'")
        if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("candidates"), list):
            raise UsageError(f"workarounds file '{path}': expected {{\"schema\": \"{SCHEMA}\", \"candidates\": [...]}}")
        for entry in data["candidates"]:
            candidate = parse_candidate(entry, f"workarounds file '{path}'")
            out[candidate.id] = candidate
    return out


def named_by_known_issues(verdict: Verdict, fellows: Sequence[Verdict],
                          fingerprint: Dict[str, Any]) -> Dict[str, List[str]]:
    """Candidate id -> ids of the known issues that fit `verdict` here, beside its run's `fellows`,
    and name it."""
    (judged,) = known_issues.judged([verdict], fingerprint, fellows)
    matched = {i["id"] for i in judged.known_issues}
    named: Dict[str, List[str]] = {}
    for entry in known_issues.entries():
        if entry["id"] in matched:
            for cid in entry.get("candidates") or []:
                named.setdefault(str(cid), []).append(entry["id"])
    return named


# --- judging ------------------------------------------------------------------------------


def required_passes(passes: int, runs: int) -> int:
    """Passes in a row a candidate needs against a baseline that passed `passes` of `runs`."""
    if passes <= 0:
        return runs
    rate = passes / runs
    return max(runs, math.ceil(math.log(FALSE_FIX_CHANCE) / math.log(rate)))


@dataclass
class Tally:
    """The runs of one thing: the variant as it is, or under one candidate."""

    statuses: List[str] = field(default_factory=list)
    message: str = ""  # the first run that did not pass
    stopped: str = ""  # "budget" or "cut" when the budget ended it early

    @property
    def runs(self) -> int:
        return len(self.statuses)

    @property
    def passes(self) -> int:
        return sum(Status(s).worked for s in self.statuses)

    def add(self, verdict: Verdict) -> bool:
        """Record one run; True when it passed."""
        self.statuses.append(verdict.status.value)
        ok = verdict.status.worked
        if not ok and not self.message:
            self.message = f"{verdict.status.value}: {verdict.message}"
        return ok


@dataclass
class Case:
    """One failing variant under diagnosis."""

    variant: Variant
    original: Verdict
    longest: float  # the longest run of this variant so far (s): the next run's estimate
    baseline: Tally = field(default_factory=Tally)
    queue: List[Tuple[Candidate, List[str]]] = field(default_factory=list)  # (candidate, known issues naming it)
    tried: Dict[str, Tally] = field(default_factory=dict)
    not_applicable: List[Dict[str, str]] = field(default_factory=list)
    like: Optional["Case"] = None  # the representative whose deterministic failure stands for this one's

    def state(self, repeats: int) -> str:
        b = self.baseline
        if Status.SKIP.value in b.statuses:
            return "skipped"
        if self.like is not None:
            return "fails"
        if b.runs < repeats:
            return "unmeasured"
        return "fails" if b.passes == 0 else "not-reproduced" if b.passes == b.runs else "flaky"

    def required(self) -> int:
        """Passes in a row a candidate needs here: against the representative's baseline when it stands in."""
        b = (self.like or self).baseline
        if b.runs and b.passes == b.runs:  # every re-run passed (so far): nothing to judge a candidate against
            return 0
        return required_passes(b.passes, b.runs)

    def outcome(self, candidate: Candidate, needed: int) -> str:
        tally = self.tried.get(candidate.id)
        if tally is None or (not tally.runs and tally.stopped == "budget"):
            return "untried"
        bad = [Status(s) for s in tally.statuses if not Status(s).worked]
        if bad:
            return {Status.CRASH: "crash", Status.HANG: "hang", Status.SKIP: "skip"}.get(bad[0], "no-fix")
        return "fix" if tally.passes >= needed else "cut"

    def fixes(self) -> List[Candidate]:
        needed = self.required()
        return [c for c, _ in self.queue if self.outcome(c, needed) == "fix"]

    def not_tried(self, candidate: Candidate, fixed_by: List[str]) -> str:
        """Why a variant that its representative stands for was not run under `candidate`, or ""
        when nothing but the budget kept it from running."""
        if self.like is None or candidate.id in self.tried:
            return ""
        there = self.like.outcome(candidate, self.like.required())
        if there not in ("untried", "fix", "cut"):
            return f"{DOCTOR_OUTCOME_TEXT[there]} on {self.like.variant.id}"
        return f"not needed: {fixed_by[0]} fixes it" if fixed_by else ""

    def to_dict(self, repeats: int) -> Dict[str, Any]:
        b, state = self.baseline, self.state(repeats)
        needed = self.required() if state in ("fails", "flaky") else 0
        judged = state in ("fails", "flaky", "unmeasured")  # the others have nothing a candidate could change
        fixed_by = [c.id for c, _ in self.queue if self.outcome(c, needed) == "fix"] if judged else []
        rows = [self._row(c, named, needed, fixed_by) for c, named in self.queue] if judged else []
        fixes = [r for r in rows if r["outcome"] == "fix"]
        return {"variant": self.variant.id, "probe": self.variant.spec.id, "params": dict(self.variant.params),
                "original": {"status": self.original.status.value, "message": self.original.message},
                "state": state, "pass_rate": f"{b.passes}/{b.runs}", "baseline": b.statuses,
                "baseline_message": b.message, "baseline_from": self.like.variant.id if self.like else "",
                "required_passes": needed, "candidates": rows,
                "fixes": [r["id"] for r in fixes], "snippet": fixes[0]["snippet"] if fixes else "",
                "untried": [r["id"] for r in rows if r["outcome"] == "untried"],
                "not_applicable": self.not_applicable}

    def _row(self, candidate: Candidate, named: List[str], needed: int, fixed_by: List[str]) -> Dict[str, Any]:
        tally = self.tried.get(candidate.id, Tally())
        why = self.not_tried(candidate, fixed_by)
        row = {"id": candidate.id, "kind": candidate.kind, "title": candidate.title, "cost": candidate.cost,
               candidate.kind: dict(candidate.env or candidate.params),
               "outcome": "not-tried" if why else self.outcome(candidate, needed),
               "runs": tally.runs, "passes": tally.passes, "statuses": tally.statuses, "message": tally.message,
               "snippet": candidate.paste(), "links": list(candidate.links)}
        if why:
            row["why"] = why
        if named:
            row["known_issues"] = named
        return row


# --- the session --------------------------------------------------------------------------


class Doctor:
    """Baselines, then candidates, every run through the one Runner of this doctor session."""

    def __init__(self, runner: "Runner", candidates: Dict[str, Candidate], repeats: int, budget_s: float,
                 say: Callable[[str], None] = lambda line: print(line, flush=True)):
        self.runner = runner
        self.candidates = candidates
        self.repeats = repeats
        self.budget_s = budget_s
        self.say = say
        self.deadline = 0.0
        self.cases: List[Case] = []
        self.out_of_budget = False  # a run did not fit: no new round starts
        self.overhead: Dict[bool, float] = {False: 0.0, True: 0.0}  # launch cost by fresh interpreter or not

    def examine(self, cases: List[Case], fellows: Sequence[Verdict]) -> None:
        """Diagnose `cases` (after runner.start()), the failures of the run whose verdicts are
        `fellows` (against which a known issue's scope is judged); results go to the report's
        "doctor" section. Round by round (the module's docstring says why): per probe a
        representative, measured and given every candidate; its fixes widened to the variants
        it stands for; the variants they leave failing make the next round."""
        self.cases = cases
        self.deadline = time.monotonic() + self.budget_s
        self.out_of_budget = False
        for case in cases:
            self._plan(case, fellows)
        self._publish()
        pending = list(cases)
        while pending and not self.out_of_budget:
            groups: Dict[str, List[Case]] = {}
            for case in pending:
                groups.setdefault(case.variant.spec.id, []).append(case)
            reps = [group[0] for group in groups.values()]
            for rep in reps:
                rep.like = None  # in a round after the first, it stands for itself
                self._baseline(rep)
            for group in groups.values():
                self._stand_in(group)
            for rank in range(max(len(rep.queue) for rep in reps)):
                for rep in reps:
                    if rank < len(rep.queue) and rep.state(self.repeats) in ("fails", "flaky"):
                        self._try(rep, rep.queue[rank][0])
            for group in groups.values():
                self._widen(group)
            pending = [c for group in groups.values() for c in group[1:] if not c.fixes()]

    def _stand_in(self, group: List[Case]) -> None:
        """Let a representative that failed every re-run stand for the rest of its probe's failing
        variants (those whose own unbiased runs, `--from`'s first re-run, all failed too)."""
        rep, others = group[0], group[1:]
        if rep.state(self.repeats) != "fails":
            return
        for case in others:
            if case.baseline.passes == 0 and Status.SKIP.value not in case.baseline.statuses:
                case.like = rep
        standing = [c for c in others if c.like is rep]
        if standing:
            self.say(f"  doctor: {rep.variant.id} failed {rep.baseline.runs}/{rep.baseline.runs} as it is: its fixes "
                     f"are tried on {counted(len(standing), 'more variant')} of {rep.variant.spec.id}, "
                     "not re-run as they are")
        self._publish()

    def _widen(self, group: List[Case]) -> None:
        """The representative's fixes, each on the variants it stands for (one fix across them all
        before the next: a short budget reaches every variant). A variant that every one of them
        has been judged on without a fix has a cause of its own: the representative no longer
        stands for it."""
        rep = group[0]
        fixes = rep.fixes()
        for candidate in fixes:
            for case in group[1:]:
                if case.like is rep and any(c.id == candidate.id for c, _ in case.queue):
                    self._try(case, candidate)
        for case in group[1:]:
            if case.like is rep and not case.fixes() and all(
                    case.outcome(c, case.required()) != "untried" for c, _ in case.queue if c in fixes):
                case.like = None

    def _plan(self, case: Case, fellows: Sequence[Verdict]) -> None:
        """The candidates that apply to this variant, documented (known-issue) ones first, then by cost."""
        named = named_by_known_issues(case.original, fellows, self.runner.fingerprint_cache)
        base_env = {**os.environ, **self.runner.opts.env}
        for cid in sorted(set(named) - set(self.candidates)):
            self.runner.note(f"known issue {', '.join(named[cid])} names unknown workaround candidate '{cid}'")
        for candidate in self.candidates.values():
            if not (candidate.matches(case.variant) or candidate.id in named):
                continue
            why = candidate.unmet(case.variant, self.runner.device, base_env)
            if why:
                case.not_applicable.append({"id": candidate.id, "why": why})
            else:
                case.queue.append((candidate, named.get(candidate.id, [])))
        case.queue.sort(key=lambda item: (not item[1], item[0].cost, item[0].id))

    def _baseline(self, case: Case) -> None:
        while case.baseline.runs < self.repeats:
            verdict = self._attempt(case, case.variant, {}, f"{case.variant.id} as it is", case.baseline)
            if verdict is None:
                return
            case.baseline.add(verdict)
            self._publish()
            if verdict.status is Status.SKIP:  # does not run here: nothing to measure
                return

    def _try(self, case: Case, candidate: Candidate) -> None:
        tally = case.tried.setdefault(candidate.id, Tally())
        if tally.runs > tally.passes:  # judged already (a widened fix that did not fix this one)
            return
        needed = case.required()
        while tally.runs < needed:
            verdict = self._attempt(case, candidate.target(case.variant), dict(candidate.env),
                                    f"{case.variant.id} + {candidate.id}", tally)
            if verdict is None or not tally.add(verdict):
                break
        self._publish()

    def _attempt(self, case: Case, variant: Variant, env: Dict[str, str], label: str,
                 tally: Tally) -> Optional[Verdict]:
        """One run within the budget; None (and `tally.stopped`) when the budget does not cover it."""
        fresh = self.runner.isolation.fresh_interpreter({**variant.env(), **env},
                                                         variant.spec.runs_in is RunsIn.FRESH_INTERPRETER)
        left = self.deadline - time.monotonic()
        if left < case.longest + self.overhead[fresh]:
            tally.stopped = "budget"
            self.out_of_budget = True
            return None
        full = self.runner.opts.timeout or variant.spec.timeout
        timeout = min(full, left)
        began = time.monotonic()
        with self.runner.running(label):
            verdict = self.runner.run_variant(variant, env, timeout, alone=True)
        self.overhead[fresh] = max(self.overhead[fresh], time.monotonic() - began - verdict.duration_s)
        case.longest = max(case.longest, verdict.duration_s)
        self.say(f"  doctor {verdict.status.value.upper():>5}  {label} (run {tally.runs + 1})  "
                 f"{verdict.duration_s:.2f}s")
        if verdict.status is Status.HANG and timeout < full:
            tally.stopped = "cut"
            return None
        return verdict

    def _publish(self) -> None:
        self.runner.add_section("doctor", [case.to_dict(self.repeats) for case in self.cases])


def failing_variants(source: Report, specs: Mapping[str, Any], chosen: Optional[set],
                     what: str) -> List[Tuple[Variant, Verdict]]:
    """The failing variants of a saved run (those in `chosen`, when given), resolved against the
    loaded probes; a probe or variant this rocmcheck lacks is a UsageError naming `what`."""
    failing = []
    for verdict in source.verdicts:
        if not verdict.status.is_bad or (chosen is not None and verdict.variant not in chosen):
            continue
        spec = specs.get(verdict.probe)
        if spec is None:
            raise UsageError(f"{what}: probe '{verdict.probe}' is not loaded (add its --probes-path)")
        variant = Variant(spec, dict(verdict.params))
        if variant.id != verdict.variant:
            raise UsageError(f"{what}: variant '{verdict.variant}' does not exist in this rocmcheck")
        failing.append((variant, verdict))
    return failing

