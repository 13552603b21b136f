"""`rocmcheck matrix FILE...`: one compatibility matrix from the reports of many machines, and
the table of one run (`run_table`: the run's own matrix, a column per device it tested).

Rows are probe variants, one probe's variants together (probes and variants in the order the
reports first list them); columns are machines, labelled by their fingerprint summary (arch,
backend and version, torch, OS); a report from several GPUs has a column per GPU, named as every
output names a GPU (`render.gpu_text`: index, arch, PCI address). Reports with the same label
are one column. Machines come worst first, those that tested only the CPU last, ties by label,
and a machine's GPU columns stay together by index, whatever the order of the files. A folder
stands for the reports in it (a fleet's node reports gathered in one place). Where they disagree
the worst status wins (pass < skip < warn < fail < error < crash < hang) and the cell says how
many of the column's verdicts for that variant had it: `FAIL 1/3`. Files of the same run (a
report, its journal, `rocmcheck report`'s JSON twin) count once; the counts say how many runs
and how many machines (`fingerprint.machine_identity`) the columns hold. A `*` marks a cell
with a known issue, listed under the table. Under it too, the fleet's deterministic-workload
hashes (`fleet.compare`): a GPU whose hashes disagree with its group's majority is named there,
and the command exits 1. A drill's report (faults injected on purpose: `render.injected`) has
columns of its own, headed DRILL with its faults, ranked apart from the machine's real runs and
left out of the fleet's hashes: a planted failure is never counted as the machine's. Never
imports torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from tabulate import tabulate

from ..errors import UsageError
from ..host.fingerprint import machine_identity, summary
from ..knowledge import known_issues
from ..model import EVIDENCE_TAILS, STATUS_ORDER, Status, Verdict, count_statuses, is_bad
from ..records import Report
from . import fleet
from .diff import statuses
from .render import device_order, gpu_parts, gpu_text, injected, known_issue_lines, md_escape, short

GROUPING = ("reports with identical fingerprints share a column; the worst status wins, "
            "and 'FAIL 1/3' means 1 of the column's 3 verdicts for that variant")
MISSING = "-"
DETAIL_TAIL = 2000  # characters of each traceback, stack or output tail kept in a cell's details
KNOWN_ISSUE_MARK = "* a known issue matches"
DRILL_NOTE = ("DRILL columns: faults were injected on purpose; their failures are the drill's, kept apart from "
              "the real runs and left out of the deterministic-workload hashes")


@dataclass
class Column:
    """One column: a machine (its label), one of its GPUs where its reports tested several."""

    label: str
    machine: str  # the fingerprint's summary; a drill's: with " / DRILL: <faults>", so it ranks apart
    gpu: str  # `render.gpu_text` of the column's device; "" for a machine's one column
    fingerprint: Dict[str, Any]
    order: Tuple[bool, int, str]  # `render.device_order` of its device: GPUs by index, the CPU last
    reports: List[str] = field(default_factory=list)
    verdicts: Dict[str, List[Verdict]] = field(default_factory=dict)  # variant -> its verdicts


def device_columns(report: Report, per_gpu: bool = False) -> Dict[str, List[Verdict]]:
    """A report's verdicts by column, in column order: a column per device (keyed by
    `render.gpu_text`), GPUs by index and the CPU last, where the report tested several devices
    or `per_gpu` asks (a run's own table); else one column (""), so that single-GPU nodes of one
    kind share their machine's column."""
    several = per_gpu or len(report.device.get("under_test") or []) > 1
    found: Dict[str, List[Verdict]] = {}
    for verdict in sorted(report.verdicts, key=lambda v: device_order(v.device or report.device)):  # stable
        found.setdefault(gpu_text(verdict.device) if several else "", []).append(verdict)
    return found


def devices_tested(report: Report) -> List[str]:
    """The devices that gave a run's verdicts, in its table's order, each as `render.gpu_text`
    names it; the run's `--device` where none did."""
    return [name for name in device_columns(report, per_gpu=True) if name] or [report.run.device]


def variant_order(verdicts: Iterable[Verdict]) -> List[Tuple[str, str]]:
    """(variant, probe id) once each, one probe's variants together: probes in the order they first
    appear, each probe's variants in theirs (a multi-GPU run interleaves them)."""
    probes: Dict[str, str] = {}  # variant -> probe id, in first-seen order
    for verdict in verdicts:
        probes.setdefault(verdict.variant, verdict.probe)
    first_seen: Dict[str, int] = {}
    for variant, probe in probes.items():
        first_seen.setdefault(_probe_of(variant, probe), len(first_seen))
    return sorted(probes.items(), key=lambda item: first_seen[_probe_of(*item)])  # stable: variants keep order


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


def _badness(columns: List[Column]) -> Tuple[int, ...]:
    """How bad a machine's verdicts are: counts per status, the most severe first."""
    counts = count_statuses(v.status.value for c in columns for verdicts in c.verdicts.values() for v in verdicts)
    return tuple(counts.get(status.value, 0) for status in STATUS_ORDER)


def _column_order(columns: Iterable[Column]) -> List[Column]:
    """Machines worst first, those that tested only the CPU last, ties by label (so the order of
    the files does not matter); a machine's columns together, its GPUs by index."""
    machines: Dict[str, List[Column]] = {}
    for column in columns:
        machines.setdefault(column.machine, []).append(column)
    ranked = sorted(machines)
    ranked.sort(key=lambda m: _badness(machines[m]), reverse=True)  # stable: ties stay by label
    ranked.sort(key=lambda m: all(c.order[0] for c in machines[m]))  # the CPU-only machines last
    return [c for m in ranked for c in sorted(machines[m], key=lambda c: c.order)]


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
    runs = one_per_run(loaded)
    columns: Dict[str, Column] = {}
    drills: Dict[str, List[str]] = {}  # report name -> the faults its run injected on purpose
    for name, report in runs:
        statuses(report, name)  # rejects malformed verdicts with a one-line error
        # the issues stored with each verdict, judged again by the current data over its own run
        report = replace(report, verdicts=known_issues.judged(report.verdicts, report.fingerprint))
        drill = injected(report)[0]
        if drill:
            drills[name] = drill
        machine = summary(report.fingerprint) + (f" / DRILL: {', '.join(drill)}" if drill else "")
        for gpu, verdicts in device_columns(report).items():
            label = f"{machine} / {gpu}" if gpu else machine
            column = columns.setdefault(label, Column(label, machine, gpu, report.fingerprint,
                                                      device_order(verdicts[0].device or report.device)))
            column.reports.append(name)
            for verdict in verdicts:
                column.verdicts.setdefault(verdict.variant, []).append(verdict)
    ordered = _column_order(columns.values())
    rows = [{"variant": variant, "probe": probe,
             "cells": [_cell(c.verdicts.get(variant)) for c in ordered]}
            for variant, probe in variant_order(v for _, report in runs for v in report.verdicts)]
    counts = {"variants": len(rows), "machines": len({machine_identity(r.fingerprint) for _, r in runs}),
              "reports": len(runs), **({"drill reports": len(drills)} if drills else {})}
    return {"schema": "rocmcheck-matrix", "schema_version": "1.3", "grouping": GROUPING, "counts": counts,
            "machines": [{"label": c.label, "machine": c.machine, "gpu": c.gpu or None, "reports": c.reports,
                          "drill": sorted({f for r in c.reports for f in drills.get(r, [])}),
                          "fingerprint": c.fingerprint} for c in ordered],
            "rows": rows, "fleet": fleet.compare([(name, r) for name, r in runs if name not in drills])}


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
    """`4 variants, 2 machines, 5 reports`: runs and machines, not columns (a two-GPU report is
    one machine, one report)."""
    return ", ".join(f"{n} {word[:-1] if n == 1 else word}" for word, n in matrix["counts"].items())


def drill_lines(matrix: Dict[str, Any]) -> List[str]:
    """`DRILL_NOTE` where the matrix holds a drill's columns."""
    return [DRILL_NOTE] if any(m.get("drill") for m in matrix["machines"]) else []


def terminal_text(matrix: Dict[str, Any]) -> str:
    lines = [_table(matrix, "simple", "\n"), "", f"{counts_line(matrix)}; {GROUPING}", *drill_lines(matrix)]
    issues = _issue_lines(matrix, "")
    if issues:
        lines += ["", "known issues (*):", *issues]
    hashes = fleet.lines(matrix["fleet"])
    if hashes:
        lines += ["", *("  " * depth + text for depth, text in hashes)]
    return "\n".join(lines)


# --- one run's table -----------------------------------------------------------------------------


def _messages(verdicts: List[Verdict], several: bool) -> str:
    """A row's messages, the worst first, each named by its device where the row has several that differ."""
    said: Dict[str, List[str]] = {}
    for verdict in sorted(verdicts, key=lambda v: -v.status.severity):
        said.setdefault(verdict.message, []).append(str(verdict.device.get("name", "?")))
    if len(said) == 1 or not several:
        return next(iter(said), "")
    return "; ".join(f"{', '.join(names)}: {message}" for message, names in said.items())


def run_table(report: Report, markdown: bool = False, variants: Optional[Iterable[str]] = None) -> str:
    """One run's table: a row per variant (only `variants`, where given), a column per device it
    tested (`device_columns`, cells as the matrix's) headed by its name, arch and PCI address,
    then the slowest duration and the messages, each named by its GPU. For the terminal, or Markdown."""
    columns = list(device_columns(report, per_gpu=True).values())
    by_column: List[Dict[str, List[Verdict]]] = [{} for _ in columns]
    for found, verdicts in zip(by_column, columns):
        for verdict in verdicts:
            found.setdefault(verdict.variant, []).append(verdict)
    chosen = None if variants is None else set(variants)
    rows, marked = [], False
    for variant, _ in variant_order(report.verdicts):
        if chosen is not None and variant not in chosen:
            continue
        cells = [_cell(found.get(variant)) for found in by_column]
        marked = marked or any(cell and cell["known_issues"] for cell in cells)
        texts = [f"**{cell_text(c)}**" if markdown and c and is_bad(c["status"]) else cell_text(c) for c in cells]
        verdicts = [v for found in by_column for v in found.get(variant, [])]
        message = short(_messages(verdicts, len(columns) > 1), 400 if markdown else 70)
        rows.append([f"`{md_escape(variant)}`" if markdown else variant, *texts,
                     f"{max(v.duration_s for v in verdicts):.2f}", md_escape(message) if markdown else message])
    newline = "<br>" if markdown else "\n"
    devices = [gpu_parts(verdicts[0].device) or [report.run.device] for verdicts in columns]
    headers = ["probe variant", *(newline.join(map(md_escape, parts)) for parts in devices), "s", "message"]
    table = tabulate(rows, headers=headers, tablefmt="github" if markdown else "simple", disable_numparse=True)
    return table + (f"\n\n{KNOWN_ISSUE_MARK}" if marked else "")


def markdown_text(matrix: Dict[str, Any]) -> str:
    lines = ["# rocmcheck matrix", "", f"{counts_line(matrix)}. Cells: {GROUPING}.", "",
             *(f"> **{note}**.\n" for note in drill_lines(matrix)), _table(matrix, "github", "<br>", "`{}`"), ""]
    lines += ["Reports per machine:", ""]
    lines += [f"- {m['label']}: " + ", ".join(f"`{md_escape(r)}`" for r in m["reports"]) for m in matrix["machines"]]
    issues = _issue_lines(matrix, "- ")
    if issues:
        lines += ["", "## Known issues (*)", "", *issues]
    hashes = fleet.lines(matrix["fleet"])
    if hashes:
        lines += ["", "## Deterministic-workload hashes"]  # paragraphs (depth 0) around the nested list
        lines += [f"\n{md_escape(text)}\n" if depth == 0 else "  " * (depth - 1) + "- " + md_escape(text)
                  for depth, text in hashes]
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
