"""`rocmcheck diff BASELINE CURRENT`: the command around `rocmcheck.outputs.diff`; exit 1 on a regression."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict

from ..engine.options import check_outputs
from ..model import ExitCode
from ..outputs.diff import KINDS, compare, side, text


def register(sub: Any) -> None:
    p = sub.add_parser("diff", help="regressions and fixes between two runs; exit 1 on any regression")
    p.add_argument("baseline", type=Path, metavar="BASELINE", help="report (.json) or journal (.jsonl)")
    p.add_argument("current", type=Path, metavar="CURRENT", help="report (.json) or journal (.jsonl)")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the diff as JSON here")
    p.set_defaults(func=cmd_diff)


def cmd_diff(args: argparse.Namespace) -> int:
    from ..outputs.storage import load_report, write_problem, write_recorded

    check_outputs({}, {"--json": args.json})
    reports = [load_report(args.baseline), load_report(args.current)]
    result = compare(reports[0], reports[1], names=(str(args.baseline), str(args.current)))
    sides = [side(args.baseline, reports[0]), side(args.current, reports[1])]
    print(text(sides, result))
    if args.json:
        data = {"baseline": sides[0], "current": sides[1], "unchanged": result.unchanged,
                **{kind: [c.__dict__ for c in result.of(kind)] for kind in KINDS}}
        unwritten: Dict[str, str] = {}
        if not write_recorded(unwritten, "json", args.json, lambda: json.dumps(data, indent=2) + "\n"):
            print(f"rocmcheck: {write_problem(unwritten)}", file=sys.stderr)
    return ExitCode.FAILED if result.regressions else ExitCode.OK
