"""`rocmcheck matrix FILE...`: the command around `rocmcheck.matrix`."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..matrix import build, markdown_text, report_files, terminal_text
from ..model import ExitCode
from ..options import check_outputs


def register(sub: Any) -> None:
    p = sub.add_parser("matrix",
                       help="one matrix from the reports of many machines (rows: variants, columns: machines)")
    p.add_argument("files", nargs="+", type=Path, metavar="FILE",
                   help="reports (.json) or journals (.jsonl), or folders of reports (a fleet's node reports)")
    p.add_argument("--md", type=Path, default=None, metavar="PATH", help="also write the matrix as Markdown here")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the matrix as JSON here")
    p.add_argument("--html", type=Path, default=None, metavar="PATH",
                   help="also write the matrix as one self-contained HTML page here")
    p.set_defaults(func=cmd_matrix)


def cmd_matrix(args: argparse.Namespace) -> int:
    from ..storage import load_report, write_atomic

    check_outputs({}, {"--md": args.md, "--json": args.json, "--html": args.html})
    unique = list(dict.fromkeys(report_files(args.files)))  # the same file named twice counts once
    matrix = build([(str(path), load_report(path)) for path in unique])
    print(terminal_text(matrix))
    if args.md:
        write_atomic(args.md, markdown_text(matrix))
    if args.json:
        write_atomic(args.json, json.dumps(matrix, indent=2, default=str) + "\n")
    if args.html:
        from ..matrix_html import html_page

        write_atomic(args.html, html_page(matrix))
    return ExitCode.OK
