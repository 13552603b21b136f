"""A run's text for people: its final table in the terminal (`rocmcheck run`, the plugin's
summary) and its Markdown file. The table is the run's own matrix (`matrix.run_table`: a column
per device), so a two-GPU run shows one row per variant, not one per GPU, and every failure is
named by its GPU as the matrix and the gate's summary name it (`render.gpu_text`).
"""
from __future__ import annotations

from typing import List

from ..host.fingerprint import summary
from ..model import EVIDENCE_TAILS
from ..records import COST_SECTION, Report, RunCost
from .matrix import devices_tested, run_table
from .render import counts_line, doctor_markdown, injected, injection_text, known_issue_lines, on_gpu, short


def terminal_matrix(report: Report) -> str:
    return f"{run_table(report)}\n\n{summary(report.fingerprint)}: {counts_line(report)}" + \
        "".join(f"\n{line}" for line in cost_lines(report))


def cost_lines(report: Report) -> List[str]:
    """The run's time against its budgets and the variants over their own (`records.RunCost.text`); none
    for a report without them (older versions)."""
    cost = RunCost.from_dict(report.sections.get(COST_SECTION))
    return cost.text().splitlines() if cost is not None else []


def markdown_report(report: Report) -> str:
    """The run's Markdown: a drill's or simulation's mark, summary line, the not-passing verdicts
    (each named by its GPU) with evidence, the table."""
    run = report.run
    tested = devices_tested(report)
    drill, simulated = injected(report)
    out = [f"# rocmcheck {run.command}{' (DRILL)' if drill else ''}: {summary(report.fingerprint)}", ""]
    if drill or simulated:
        whose = "the failures below are the drill's, not the machine's" if drill else \
            "its verdicts hold for what was simulated"
        out += [f"> **{injection_text(drill, simulated)}**: {whose}.", ""]
    out += [f"{counts_line(report)}. Device{'s' if len(tested) > 1 else ''} {', '.join(tested)}, "
            f"isolation {run.isolation}, profile {run.profile}, run `{run.id}`.", ""]
    out += [f"> {note}" for note in run.notes]
    for v in report.verdicts:
        if not v.status.is_notable:
            continue
        out += ["", f"## {v.status.value.upper()} `{v.variant}`{on_gpu(v.device)}", "", short(v.message, 400)]
        out += known_issue_lines(v.known_issues, v.unfit_issues)
        for key in EVIDENCE_TAILS:
            if v.evidence.get(key):
                out += ["", f"<details><summary>{key}</summary>", "", "```", v.evidence[key].strip()[-3000:], "```",
                        "", "</details>"]
    spent = cost_lines(report)
    if spent:
        out += ["", "## Time against budgets", "", *(f"- {line}" for line in spent)]
    if report.sections.get("doctor"):
        out += ["", "## Doctor", "", *(doctor_markdown(report.sections["doctor"]) or [])]
    out += ["", "## Matrix", "", run_table(report, markdown=True), ""]
    return "\n".join(out)
