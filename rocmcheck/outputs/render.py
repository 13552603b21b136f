"""Text for people: the live line per verdict, the terminal matrix, the Markdown report and
doctor's results. Renders `Report`s and `Verdict`s only, so every command and the plugin share
it and it imports nothing above the engine.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional

from tabulate import tabulate

from ..host.fingerprint import summary
from ..model import EVIDENCE_TAILS, STATUS_ORDER, Verdict, is_bad
from ..records import Report

MESSAGE_WIDTH = 90


def short(text: str, width: int = MESSAGE_WIDTH) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def verdict_line(v: Verdict) -> str:
    """`  PASS  transfer[to-float32]  0.12s  ok`, with ` on cuda:N` for a verdict from a GPU."""
    where = f" on {v.device['name']}" if v.device.get("name", "cpu") != "cpu" else ""
    return f"{v.status.value.upper():>5}  {v.variant}{where}  {v.duration_s:.2f}s  {short(v.message)}"


def counts_line(report: Report) -> str:
    run = report.run
    parts = [f"{run.counts[s.value]} {s.value}" for s in STATUS_ORDER if run.counts.get(s.value)]
    partial = f" (PARTIAL: interrupted during {run.interrupted})" if run.partial else ""
    return (", ".join(parts) or "no probes run") + partial


def _rows(verdicts: Iterable[Verdict]) -> List[List[str]]:
    return [[v.variant, v.status.value.upper(), f"{v.duration_s:.2f}", short(v.message, 70)] for v in verdicts]


def terminal_matrix(report: Report) -> str:
    table = tabulate(_rows(report.verdicts), headers=["probe variant", "verdict", "s", "message"],
                     tablefmt="simple")
    return f"{table}\n\n{summary(report.fingerprint)}: {counts_line(report)}"


def failing_line(v: Verdict, width: Optional[int] = None) -> str:
    """`FAIL transfer[to-float32]: the message` (the message cut to `width`)."""
    return f"{v.status.value.upper()} {v.variant}: {short(v.message, width) if width else v.message}"


def md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_matrix(verdicts: List[Verdict]) -> str:
    rows = [[f"`{md_escape(r[0])}`", f"**{r[1]}**" if is_bad(r[1].lower()) else r[1], r[2],
             md_escape(r[3])] for r in _rows(verdicts)]
    return tabulate(rows, headers=["probe variant", "verdict", "s", "message"], tablefmt="github")


def unfit_issue_lines(unfit: Iterable[Mapping[str, Any]], others_fit: bool) -> List[str]:
    """The known issues that match a failure but whose scope the run rules out (`unfit_issues`,
    from `known_issues.judged`), each with why; "none fits" first when no other one does, so the
    reader is not left with an entry whose advice would not help, nor to guess why none is shown."""
    lines = [f"  {u.get('id')} does not: {u.get('why')}" for u in unfit]
    return ["- known issue: none fits this failure", *lines] if lines and not others_fit else lines


def known_issue_lines(issues: Iterable[Mapping[str, Any]], unfit: Iterable[Mapping[str, Any]] = ()) -> List[str]:
    """A verdict's (or a matrix cell's) known issues: title, workaround, links; then the unfit ones."""
    issues = list(issues)
    lines = []
    for issue in issues:
        lines.append(f"- known issue: {issue.get('title', issue.get('id'))}")
        if issue.get("workaround"):
            lines.append(f"  workaround: {issue['workaround']}")
        lines.extend(f"  {link}" for link in issue.get("links", []))
    return lines + unfit_issue_lines(unfit, bool(issues))


def markdown_report(report: Report) -> str:
    """The run's Markdown matrix: summary line, failing variants with evidence, the table."""
    run = report.run
    out = [f"# rocmcheck {run.command}: {summary(report.fingerprint)}", "",
           f"{counts_line(report)}. Device `{run.device}`, isolation {run.isolation}, "
           f"profile {run.profile}, run `{run.id}`.", ""]
    out += [f"> {note}" for note in run.notes]
    for v in report.verdicts:
        if not v.status.is_notable:
            continue
        out += ["", f"## {v.status.value.upper()} `{v.variant}`", "", short(v.message, 400)]
        out += known_issue_lines(v.known_issues, v.unfit_issues)
        for key in EVIDENCE_TAILS:
            if v.evidence.get(key):
                out += ["", f"<details><summary>{key}</summary>", "", "```", v.evidence[key].strip()[-3000:], "```",
                        "", "</details>"]
    if report.sections.get("doctor"):
        out += ["", "## Doctor", "", *(doctor_markdown(report.sections["doctor"]) or [])]
    out += ["", "## Matrix", "", markdown_matrix(report.verdicts), ""]
    return "\n".join(out)


# --- doctor's results (`rocmcheck.doctor`'s `Case.to_dict` shape) ---------------------------

DOCTOR_STATE_TEXT = {
    "fails": "fails: passed {rate} re-runs as it is", "flaky": "flaky: passes {rate} re-runs as it is",
    "not-reproduced": "passed {rate} re-runs as it is: not reproduced, nothing to fix",
    "unmeasured": "not measured: the budget ran out ({rate} re-runs)",
    "skipped": "does not run here (skipped): nothing to diagnose"}
DOCTOR_OUTCOME_TEXT = {"fix": "FIX", "no-fix": "no fix", "crash": "crashed", "hang": "hung", "skip": "n/a here",
                       "cut": "cut", "untried": "untried", "not-tried": "not tried"}


def _state_line(result: Mapping[str, Any]) -> str:
    if result.get("baseline_from"):  # a representative's deterministic failure stands for this one's
        return (f"fails like {result['baseline_from']}, which failed every re-run as it is (not re-run itself); "
                f"a fix must pass {result.get('required_passes')} in a row")
    line = DOCTOR_STATE_TEXT.get(str(result.get("state")), "{rate}").format(rate=result.get("pass_rate", "?"))
    if result.get("state") == "flaky":
        line += f"; a fix must pass {result.get('required_passes')} in a row"
    return line


def _candidate_note(row: Mapping[str, Any]) -> str:
    if row.get("outcome") == "untried":
        return "not tried: the budget ran out"
    if row.get("outcome") == "cut":
        return "stopped by the budget before enough runs"
    if row.get("outcome") == "not-tried":
        return str(row.get("why", ""))
    return row.get("message") or row.get("title", "")


def doctor_text(results: List[Dict[str, Any]]) -> str:
    """Doctor's results for the terminal: per variant its state, the candidates tried, the snippet."""
    if not results:
        return "doctor: nothing to diagnose: no variant failed"
    out = []
    for r in results:
        out += ["", f"{r['variant']}: {_state_line(r)} (originally {r['original']['status']}: "
                    f"{short(r['original']['message'], 100)})"]
        rows = [[DOCTOR_OUTCOME_TEXT[c["outcome"]], c["id"], f"{c['passes']}/{c['runs']}",
                 short(_candidate_note(c), 80)] for c in r["candidates"]]
        if rows:
            out.append(tabulate(rows, headers=["outcome", "candidate", "passed", "note"], tablefmt="simple"))
        elif r["state"] in ("fails", "flaky"):
            out.append("  no candidate workaround applies to this variant")
        if r["snippet"]:
            out += [f"  paste this ({r['fixes'][0]}):", *("    " + line for line in r["snippet"].splitlines())]
    fixed = sum(1 for r in results if r["fixes"])
    out += ["", f"doctor: {fixed} of {len(results)} failing variant(s) have a workaround"]
    if any(r["untried"] or r["state"] == "unmeasured" for r in results):
        out.append("doctor: some candidates were not tried for lack of budget: raise --budget, or lower --timeout "
                   "(a hanging run costs its whole timeout)")
    return "\n".join(out)


def doctor_markdown(results: Any) -> Optional[List[str]]:
    """The doctor section as Markdown; None when `results` is not doctor's shape (a foreign report)."""
    if not isinstance(results, list) or not all(isinstance(r, dict) and isinstance(r.get("variant"), str)
                                                 and isinstance(r.get("candidates"), list) for r in results):
        return None
    out: List[str] = []
    for r in results:
        original = r.get("original") if isinstance(r.get("original"), dict) else {}
        out += [f"### `{r['variant']}`: {_state_line(r)}", "",
                f"Originally {original.get('status', '?')}: {short(original.get('message', ''), 300)}", ""]
        rows = [c for c in r["candidates"] if isinstance(c, dict)]
        if rows:
            out += ["| candidate | kind | outcome | passed | note |", "|---|---|---|---|---|"]
            out += [f"| `{c.get('id')}` | {c.get('kind')} | "
                    f"{'**fix**' if c.get('outcome') == 'fix' else c.get('outcome')} | {c.get('passes')}/"
                    f"{c.get('runs')} | {md_escape(short(_candidate_note(c), 200))} |" for c in rows]
        fixes = [c for c in rows if c.get("outcome") == "fix"]
        for c in fixes[:1]:
            out += ["", f"Workaround (`{c.get('id')}`: {c.get('title')}):", "", "```", str(c.get("snippet")), "```"]
        out.append("")
    return out
