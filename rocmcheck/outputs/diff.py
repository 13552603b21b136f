"""`rocmcheck diff BASELINE CURRENT`: what got worse, what got fixed, what appeared or vanished.

Statuses fall into two classes: good (pass, warn, skip) and bad (fail, error, crash,
hang). A *regression* is a variant that is bad now and was good in the baseline, or
absent from it (nothing excuses a new failure); a *fix* is one that was bad and now
passes or warns. Every other change (pass -> warn, pass -> skip, fail -> crash,
bad -> skip) is listed as *changed* and does not fail the diff. The pytest plugin's
`--rocm-baseline` uses the same rule, so CI and the command agree.

Exit 0 without regressions, 1 with any, 2 for unreadable or foreign input.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..errors import UsageError
from ..host.fingerprint import summary
from ..model import Status, is_bad
from ..records import Report, where_interrupted
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


@dataclass
class Diff:
    changes: List[Change] = field(default_factory=list)
    unchanged: int = 0

    def of(self, kind: str) -> List[Change]:
        return [c for c in self.changes if c.kind == kind]

    @property
    def regressions(self) -> List[Change]:
        return self.of("regression")

    def counts_line(self) -> str:
        plural = {"regression": "regressions", "fix": "fixes"}
        parts = [f"{n} {plural.get(kind, kind) if n != 1 else kind}" for kind in KINDS for n in [len(self.of(kind))]]
        return ", ".join(parts) + f", {self.unchanged} unchanged"


def compare(baseline: Report, current: Report, names: tuple = ("baseline", "current")) -> Diff:
    """Classify every variant of both reports; `names` label them in error messages."""
    before, now = statuses(baseline, names[0]), statuses(current, names[1])
    messages = {v.variant: v.message for v in current.verdicts}
    result = Diff()
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
    return "\n".join(lines)
