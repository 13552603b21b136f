"""`rocmcheck matrix FILE...`: the command around `rocmcheck.outputs.matrix`."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict

from ..engine.options import check_outputs
from ..model import ExitCode
from ..outputs.matrix import build, markdown_text, report_files, terminal_text


def register(sub: Any) -> None:
    p = sub.add_parser("matrix",
                       help="one matrix from the reports of many machines (rows: variants, columns: machines); "
                            "exit 1 where a machine's deterministic-workload hashes disagree with its group's")
    p.add_argument("files", nargs="+", type=Path, metavar="FILE",
                   help="reports (.json) or journals (.jsonl), or folders of reports (a fleet's node reports)")
    p.add_argument("--md", type=Path, default=None, metavar="PATH", help="also write the matrix as Markdown here")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the matrix as JSON here")
    p.add_argument("--html", type=Path, default=None, metavar="PATH",
                   help="also write the matrix as one self-contained HTML page here")
    p.set_defaults(func=cmd_matrix)


def cmd_matrix(args: argparse.Namespace) -> int:
    from ..outputs.storage import load_report, write_problem, write_recorded

    check_outputs({}, {"--md": args.md, "--json": args.json, "--html": args.html})
    unique = list(dict.fromkeys(report_files(args.files)))  # the same file named twice counts once
    matrix = build([(str(path), load_report(path)) for path in unique])
    print(terminal_text(matrix))
    outputs = [(args.md, lambda: markdown_text(matrix)),
               (args.json, lambda: json.dumps(matrix, indent=2, default=str) + "\n"),
               (args.html, lambda: _html(matrix))]
    unwritten: Dict[str, str] = {}
    for path, text in outputs:
        if path is not None and write_recorded(unwritten, str(path), path, text):
            print(f"wrote {path}")
    if unwritten:
        print(f"rocmcheck: {write_problem(unwritten)}", file=sys.stderr)
    return ExitCode.FAILED if matrix["fleet"]["disagree"] else ExitCode.OK


def _html(matrix: Any) -> str:
    from ..outputs.matrix_html import html_page

    return html_page(matrix)
