"""The table of a run's output files: every front-end (the commands, the pytest plugin,
`rocmcheck.gate()`) offers and writes the outputs of this table, through `storage.write_outputs`,
with its one failure policy (recorded in the report's `unwritten`, said in one line, never the
verdict's business).

Adding an output format: its renderer (a function of the `Report`), a row here, a test, a row in
the README's table of outputs. The commands add the row's flag, the plugin `--rocm-` and the rest
of it, and the runner writes it.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Tuple

from ..records import Report
from .matrix import build
from .matrix_html import html_page
from .prom import textfile
from .runtext import markdown_report
from .storage import Output, report_json

RUN_COMMANDS = ("run", "gate", "report", "doctor")


def run_html(report: Report) -> str:
    """One run's matrix as an HTML page."""
    return html_page(build([(report.run.id, report)]))


OUTPUTS: Tuple[Output, ...] = (
    Output("json", "--json", report_json, (*RUN_COMMANDS, "pytest", "gate()"), "rocmcheck-{run_id}.json",
           "also write the JSON report here; '-' writes it (gate: the node verdict) to stdout, and everything "
           "else to stderr", stdout=("run", "gate")),
    Output("md", "--md", markdown_report, (*RUN_COMMANDS, "pytest", "gate()"), "rocmcheck-{run_id}.md",
           "also write the Markdown matrix here"),
    Output("html", "--html", run_html, ("pytest",), None,
           "with --rocm-matrix: also write the run's matrix as one self-contained HTML page to FILE"),
    Output("prom", "--prom", textfile, ("run", "gate"), None,
           "also write the run's metrics for node_exporter's textfile collector to this .prom file (replaced "
           "atomically): node status, each variant's and GPU's status, speed figures, a drill label",
           must_write=True, render_to=textfile),
)


def offered(front_end: str) -> List[Output]:
    """The outputs a command (run, gate, report, doctor), "pytest" or "gate()" offers."""
    return [o for o in OUTPUTS if front_end in o.offered_by]


def to_stdout(front_end: str) -> List[str]:
    """The flags whose `-` means stdout for a command (`run --json -`); any other `-` is refused."""
    return [o.flag for o in offered(front_end) if front_end in o.stdout]


def named(outputs: List[Output], given: Mapping[str, object]) -> Dict[str, object]:
    """Output name -> the file its option named, from `given` (option dest -> value); unnamed ones left out."""
    return {o.name: given[o.name] for o in outputs if given.get(o.name) is not None}
