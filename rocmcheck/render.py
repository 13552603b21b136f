"""Tables for people: the live line per verdict, the terminal matrix and the Markdown report."""
from __future__ import annotations

from typing import Any, Dict, Iterable, List

from tabulate import tabulate

from .fingerprint import summary

STATUS_ORDER = ("fail", "crash", "hang", "error", "warn", "skip", "pass")
MESSAGE_WIDTH = 90


def short(text: str, width: int = MESSAGE_WIDTH) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def verdict_line(v: Dict[str, Any]) -> str:
    """`  PASS  transfer[to-float32]  0.12s  ok`, with ` on cuda:N` for a verdict from a GPU."""
    device = v.get("device") if isinstance(v.get("device"), dict) else {}
    where = f" on {device['name']}" if device.get("name", "cpu") != "cpu" else ""
    return (f"{v['status'].upper():>5}  {v['variant']}{where}  {v.get('duration_s', 0):.2f}s  "
            f"{short(v.get('message', ''))}")


def counts_line(report: Dict[str, Any]) -> str:
    counts = report["run"].get("counts") or {}
    parts = [f"{counts[s]} {s}" for s in STATUS_ORDER if counts.get(s)]
    partial = " (PARTIAL: interrupted during {})".format(report["run"].get("interrupted")) if report["run"].get("partial") else ""
    return (", ".join(parts) or "no probes run") + partial


def _rows(verdicts: Iterable[Dict[str, Any]]) -> List[List[str]]:
    return [[v["variant"], v["status"].upper(), f"{v.get('duration_s', 0):.2f}", short(v.get("message", ""), 70)]
            for v in verdicts]


def terminal_matrix(report: Dict[str, Any]) -> str:
    table = tabulate(_rows(report["verdicts"]), headers=["probe variant", "verdict", "s", "message"],
                     tablefmt="simple")
    return f"{table}\n\n{summary(report.get('fingerprint') or {})}: {counts_line(report)}"


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_matrix(verdicts: List[Dict[str, Any]]) -> str:
    rows = [[f"`{_md_escape(r[0])}`", f"**{r[1]}**" if r[1].lower() in STATUS_ORDER[:4] else r[1], r[2],
             _md_escape(r[3])] for r in _rows(verdicts)]
    return tabulate(rows, headers=["probe variant", "verdict", "s", "message"], tablefmt="github")


def known_issue_lines(v: Dict[str, Any]) -> List[str]:
    lines = []
    for issue in v.get("known_issues") or []:
        lines.append(f"- known issue: {issue.get('title', issue.get('id'))}")
        if issue.get("workaround"):
            lines.append(f"  workaround: {issue['workaround']}")
        lines.extend(f"  {link}" for link in issue.get("links", []))
    return lines


def markdown_report(report: Dict[str, Any]) -> str:
    """The run's Markdown matrix: summary line, failing variants with evidence, the table."""
    run = report["run"]
    fp = report.get("fingerprint") or {}
    out = [f"# rocmcheck {run.get('command', 'run')}: {summary(fp)}", "",
           f"{counts_line(report)}. Device `{run.get('device')}`, isolation {run.get('isolation')}, "
           f"profile {run.get('profile')}, run `{run.get('id')}`.", ""]
    out += [f"> {note}" for note in run.get("notes") or []]
    bad = [v for v in report["verdicts"] if v["status"] not in ("pass", "skip")]
    for v in bad:
        out += ["", f"## {v['status'].upper()} `{v['variant']}`", "", short(v.get("message", ""), 400)]
        out += known_issue_lines(v)
        ev = v.get("evidence") or {}
        for key in ("stack", "traceback", "output_tail"):
            if ev.get(key):
                out += ["", f"<details><summary>{key}</summary>", "", "```", ev[key].strip()[-3000:], "```",
                        "", "</details>"]
    if report.get("doctor"):
        from .doctor import markdown_lines

        out += ["", "## Doctor", "", *(markdown_lines(report["doctor"]) or [])]
    out += ["", "## Matrix", "", markdown_matrix(report["verdicts"]), ""]
    return "\n".join(out)
