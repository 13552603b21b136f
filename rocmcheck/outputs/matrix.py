"""`rocmcheck matrix FILE...`: one compatibility matrix from the reports of many machines.

Rows are probe variants, one probe's variants together (probes and variants in the order the
reports first list them); columns are
machines, labelled by their fingerprint summary (arch, backend and version, torch,
OS), the worst first; a report from several GPUs has a column per GPU. Reports with the
same label are one column. A folder stands for
the reports in it (a fleet's node reports gathered in one place). Where they disagree the worst
status wins (pass < skip < warn < fail < error < crash < hang) and the cell says
how many of the column's verdicts for that variant had it: `FAIL 1/3`. Files of the same run
(a report, its journal, `rocmcheck report`'s JSON twin) count once. A `*` marks a cell with a
known issue, listed under the table. Never imports torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..errors import UsageError
from ..host.fingerprint import summary
from ..knowledge import known_issues
from ..model import EVIDENCE_TAILS, STATUS_ORDER, Status, Verdict, count_statuses
from ..records import Report
from .diff import statuses
from .render import known_issue_lines, md_escape

GROUPING = ("reports with identical fingerprints share a column; the worst status wins, "
            "and 'FAIL 1/3' means 1 of the column's 3 verdicts for that variant")
MISSING = "-"
DETAIL_TAIL = 2000  # characters of each traceback, stack or output tail kept in a cell's details


@dataclass
class Machine:
    label: str
    fingerprint: Dict[str, Any]
    reports: List[str] = field(default_factory=list)
    verdicts: Dict[str, List[Verdict]] = field(default_factory=dict)  # variant -> its verdicts


def _detail(verdict: Verdict) -> Dict[str, Any]:
    """What a reader of a bad cell needs: the message and the evidence's short fields and tails."""
    ev = verdict.evidence
    evidence = {k: ev[k] for k in ("exit", "signatures", "faults_injected") if ev.get(k)}
    evidence.update({k: str(ev[k]).strip()[-DETAIL_TAIL:] for k in EVIDENCE_TAILS if ev.get(k)})
    return {"status": verdict.status.value, "message": verdict.message, "evidence": evidence}


def _cell(verdicts: Optional[List[Verdict]]) -> Optional[Dict[str, Any]]:
    """One machine's verdicts of one variant (their known issues judged per run by `build`)."""
    if not verdicts:
        return None
    counts = count_statuses(v.status.value for v in verdicts)
    issues = {i.get("id"): i for v in verdicts for i in v.known_issues}
    unfit = {i.get("id"): i for v in verdicts for i in v.unfit_issues if i.get("id") not in issues}
    return {"status": Status.worst(counts).value, "counts": counts, "known_issues": list(issues.values()),
            "unfit_issues": list(unfit.values()), "details": [_detail(v) for v in verdicts if v.status.is_notable]}


def _badness(machine: Machine) -> Tuple[int, ...]:
    """How bad a machine's verdicts are: counts per status, the most severe first."""
    counts = count_statuses(v.status.value for verdicts in machine.verdicts.values() for v in verdicts)
    return tuple(counts.get(status.value, 0) for status in STATUS_ORDER)


def one_per_run(loaded: List[Tuple[str, Report]]) -> List[Tuple[str, Report]]:
    """One (name, report) per run id: the run's own report over a bug report's JSON twin of it
    (which carries `bug_report`), else the first named; reports without a run id all stay."""
    chosen: Dict[Any, int] = {}  # run id -> index of the file kept
    for index, (_, report) in enumerate(loaded):
        run_id = report.run.id or ("no run id", index)
        kept = chosen.get(run_id)
        if kept is None or ("bug_report" in loaded[kept][1].sections and "bug_report" not in report.sections):
            chosen[run_id] = index
    return [loaded[index] for index in sorted(chosen.values())]


def build(loaded: List[Tuple[str, Report]]) -> Dict[str, Any]:
    """The matrix (JSON-able) from (name, report) pairs, each run counted once."""
    machines: Dict[str, Machine] = {}
    probes: Dict[str, str] = {}  # variant -> probe id, in first-seen order
    for name, report in one_per_run(loaded):
        statuses(report, name)  # rejects malformed verdicts with a one-line error
        fingerprint = report.fingerprint
        several = len(report.device.get("under_test") or []) > 1
        # the issues stored with each verdict, judged again by the current data over its own run
        for verdict in known_issues.judged(report.verdicts, fingerprint):
            label = summary(fingerprint)
            gpu = verdict.device.get("name")
            if several and gpu:  # a node's GPUs each get a column
                label = f"{label} / {gpu}"
            machine = machines.setdefault(label, Machine(label, fingerprint))
            if name not in machine.reports:
                machine.reports.append(name)
            probes.setdefault(verdict.variant, verdict.probe)
            machine.verdicts.setdefault(verdict.variant, []).append(verdict)
    ordered = sorted(machines.values(), key=_badness, reverse=True)  # the worst machines first (stable)
    machines = {m.label: m for m in ordered}
    first_seen: Dict[str, int] = {}
    for variant, probe in probes.items():
        first_seen.setdefault(_probe_of(variant, probe), len(first_seen))
    grouped = sorted(probes.items(), key=lambda item: first_seen[_probe_of(*item)])  # stable: variants keep order
    rows = [{"variant": variant, "probe": probe,
             "cells": [_cell(m.verdicts.get(variant)) for m in machines.values()]}
            for variant, probe in grouped]
    return {"schema": "rocmcheck-matrix", "schema_version": "1.0", "grouping": GROUPING,
            "machines": [{"label": m.label, "reports": m.reports, "fingerprint": m.fingerprint}
                         for m in machines.values()],
            "rows": rows}


def _probe_of(variant: str, probe: str) -> str:
    return probe or variant.split("[")[0]


def cell_text(cell: Optional[Dict[str, Any]]) -> str:
    if cell is None:
        return MISSING
    counts = cell["counts"]
    text = cell["status"].upper()
    if len(counts) > 1:
        text += f" {counts[cell['status']]}/{sum(counts.values())}"
    return text + ("*" if cell["known_issues"] else "")


def _header(machine: Dict[str, Any], newline: str) -> str:
    count = len(machine["reports"])
    return newline.join([*machine["label"].split(" / "), f"({count} report{'s' if count != 1 else ''})"])


def _table(matrix: Dict[str, Any], fmt: str, newline: str, variant_fmt: str = "{}") -> str:
    from tabulate import tabulate

    headers = ["probe variant", *(_header(m, newline) for m in matrix["machines"])]
    rows = [[variant_fmt.format(row["variant"]), *map(cell_text, row["cells"])] for row in matrix["rows"]]
    return tabulate(rows, headers=headers, tablefmt=fmt)


def _issue_lines(matrix: Dict[str, Any], bullet: str) -> List[str]:
    lines = []
    for row in matrix["rows"]:
        for machine, cell in zip(matrix["machines"], row["cells"]):
            if cell and (cell["known_issues"] or cell["unfit_issues"]):
                lines.append(f"{bullet}{row['variant']} on {machine['label']}:")
                lines += ["  " + line for line in known_issue_lines(cell["known_issues"], cell["unfit_issues"])]
    return lines


def counts_line(matrix: Dict[str, Any]) -> str:
    counts = (len(matrix["rows"]), len(matrix["machines"]), sum(len(m["reports"]) for m in matrix["machines"]))
    return ", ".join(f"{n} {word}{'s' if n != 1 else ''}" for n, word in zip(counts, ("variant", "machine", "report")))


def terminal_text(matrix: Dict[str, Any]) -> str:
    lines = [_table(matrix, "simple", "\n"), "", f"{counts_line(matrix)}; {GROUPING}"]
    issues = _issue_lines(matrix, "")
    if issues:
        lines += ["", "known issues (*):", *issues]
    return "\n".join(lines)


def markdown_text(matrix: Dict[str, Any]) -> str:
    lines = ["# rocmcheck matrix", "", f"{counts_line(matrix)}. Cells: {GROUPING}.", "",
             _table(matrix, "github", "<br>", "`{}`"), ""]
    lines += ["Reports per machine:", ""]
    lines += [f"- {m['label']}: " + ", ".join(f"`{md_escape(r)}`" for r in m["reports"]) for m in matrix["machines"]]
    issues = _issue_lines(matrix, "- ")
    if issues:
        lines += ["", "## Known issues (*)", "", *issues]
    return "\n".join(lines) + "\n"


# --- input ---------------------------------------------------------------------------------


def report_files(paths: List[Path]) -> List[Path]:
    """Files as given; a folder stands for the reports in it (`*.json`, else the journals)."""
    found: List[Path] = []
    for path in paths:
        if not path.is_dir():
            found.append(path)
            continue
        inside = sorted(path.glob("*.json")) or sorted(path.glob("*.jsonl"))
        if not inside:
            raise UsageError(f"no report (.json or .jsonl) in the folder '{path}'")
        found.extend(inside)
    return found
