"""The matrix as one self-contained HTML page: no network, no script (the failing-rows filter is
a CSS checkbox), every text from a report HTML-escaped (probe messages are untrusted).

It renders `matrix.build()`'s data, the same rows, columns and `cell_text` as the Markdown;
columns are ordered and grouped by arch, then backend and version, then torch (the parts of
the machine label), the CPU's last as in the table, and a bad cell opens (`<details>`) to its
messages, evidence and workarounds. Under the table, the fleet's deterministic-workload hashes
(`fleet.lines`, as the terminal and the Markdown say them), a flagged GPU in red.
"""
from __future__ import annotations

from html import escape
from itertools import groupby
from typing import Any, Dict, List, Optional

from ..model import is_bad, is_notable
from . import fleet
from .matrix import GROUPING, cell_text, counts_line, drill_lines
from .render import unfit_issue_lines

COLOURS = {"pass": "#c8efc8", "skip": "#e4e4e4", "warn": "#ffe9a8", "fail": "#ffb3b3", "error": "#ffc48a",
           "crash": "#e08cd8", "hang": "#b9a6ff"}
GROUP_LEVELS = ("arch", "backend", "torch")  # the label's first three parts; the fourth (OS) heads each column

STYLE = """
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; }
th, td { border: 1px solid #999; padding: 3px 6px; vertical-align: top; }
th { background: #f3f3f3; }
td.variant { font-family: monospace; white-space: nowrap; }
td.cell { min-width: 7em; }
details > div { max-width: 40em; white-space: pre-wrap; font-size: 12px; }
pre { white-space: pre-wrap; max-height: 20em; overflow: auto; background: #fff8; margin: 2px 0; }
#only-bad:checked ~ table tr.good { display: none; }
p.fleet-1 { margin: 2px 0 2px 1.5em; }
p.fleet-2 { margin: 2px 0 2px 3em; background: #ffb3b3; }
th.drill, p.drill { background: repeating-linear-gradient(45deg, #fff3b0, #fff3b0 6px, #fff 6px, #fff 12px); }
""" + "".join(f"td.s-{s} {{ background: {c}; }}\n" for s, c in COLOURS.items())


def _parts(machine: Dict[str, Any]) -> List[str]:
    parts = machine["label"].split(" / ")
    return parts + [""] * (len(GROUP_LEVELS) + 1 - len(parts))


def _details(cell: Dict[str, Any]) -> str:
    out = []
    for detail in cell.get("details") or []:
        out.append(f"<b>{escape(detail['status'].upper())}</b> {escape(detail['message'])}")
        for key, value in detail["evidence"].items():
            text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
            out.append(f"{escape(key)}:<pre>{escape(text)}</pre>" if "\n" in text else f"{escape(key)}: {escape(text)}")
    for issue in cell["known_issues"]:
        out.append(f"known issue: {escape(str(issue.get('title', issue.get('id'))))}")
        if issue.get("workaround"):
            out.append(f"workaround: {escape(str(issue['workaround']))}")
        out += [f'<a href="{escape(str(link))}">{escape(str(link))}</a>' for link in issue.get("links") or []]
    out += [escape(line.strip()) for line in unfit_issue_lines(cell["unfit_issues"], bool(cell["known_issues"]))]
    return "\n".join(out)


def _td(cell: Optional[Dict[str, Any]], variant: str, column: int) -> str:
    attrs = f'data-variant="{escape(variant)}" data-column="{column}"'
    if cell is None:
        return f'<td class="cell missing" {attrs}>{escape(cell_text(cell))}</td>'
    text = escape(cell_text(cell))
    body = _details(cell) if is_notable(cell["status"]) or cell["known_issues"] else ""
    inner = f"<details><summary>{text}</summary><div>{body}</div></details>" if body else text
    return f'<td class="cell s-{escape(cell["status"])}" {attrs}>{inner}</td>'


def html_page(matrix: Dict[str, Any]) -> str:
    machines = matrix["machines"]
    # stable, so a machine's GPU columns keep `build`'s order (by index); the CPU's columns last, as in the table
    order = sorted(range(len(machines)), key=lambda i: (_parts(machines[i])[0] == "cpu",
                                                        _parts(machines[i])[:len(GROUP_LEVELS)]))
    head = []
    for level in range(len(GROUP_LEVELS)):
        cells = [f'<th rowspan="{len(GROUP_LEVELS) + 1}">probe variant</th>'] if level == 0 else []
        for key, group in groupby(order, key=lambda i: tuple(_parts(machines[i])[:level + 1])):
            cells.append(f'<th colspan="{len(list(group))}">{escape(key[-1])}</th>')
        head.append(f"<tr>{''.join(cells)}</tr>")
    last = []
    for i in order:
        count = len(machines[i]["reports"])
        reports = escape(", ".join(machines[i]["reports"]))
        drill = ' class="drill"' if machines[i].get("drill") else ""
        last.append(f'<th{drill} title="{reports}">{escape(" / ".join(_parts(machines[i])[len(GROUP_LEVELS):]))}<br>'
                    f"({count} report{'s' if count != 1 else ''})</th>")
    head.append(f"<tr>{''.join(last)}</tr>")
    body = []
    for row in matrix["rows"]:
        bad = any(c and is_bad(c["status"]) for c in row["cells"])
        tds = "".join(_td(row["cells"][i], row["variant"], i) for i in order)
        body.append(f'<tr class="{"bad" if bad else "good"}">'
                    f'<td class="variant">{escape(row["variant"])}</td>{tds}</tr>')
    legend = " ".join(f'<span style="background:{c};padding:0 4px">{s.upper()}</span>' for s, c in COLOURS.items())
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'">',
        "<title>rocmcheck matrix</title>", f"<style>{STYLE}</style></head><body>",
        "<h1>rocmcheck matrix</h1>",
        f"<p>{escape(counts_line(matrix))}. Cells: {escape(GROUPING)}. A failing cell opens to its evidence.</p>",
        *(f'<p class="drill"><b>{escape(note)}</b>.</p>' for note in drill_lines(matrix)),
        f"<p>{legend}</p>",
        '<input type="checkbox" id="only-bad"> <label for="only-bad">only failing rows</label>',
        f"<table><thead>{''.join(head)}</thead><tbody>", *body, "</tbody></table>", *_fleet(matrix["fleet"]),
        "</body></html>", ""])


def _fleet(found: Dict[str, Any]) -> List[str]:
    """The fleet's deterministic-workload hashes under the table: `fleet.lines`, a finding (depth 2) in red."""
    lines = fleet.lines(found)
    return ["<h2>Deterministic-workload hashes</h2>", *(f'<p class="fleet-{depth}">{escape(text)}</p>'
                                                        for depth, text in lines)] if lines else []
