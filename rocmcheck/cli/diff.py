"""`rocmcheck diff BASELINE CURRENT`: the command around `rocmcheck.outputs.diff`; exit 1 on a regression
(a status, or a speed figure slower beyond --speed-tolerance)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict

from ..engine.options import SPEED_TOLERANCE_PCT, add_to_argparse, check_outputs
from ..jsonsafe import jsonsafe
from ..model import ExitCode
from ..outputs.diff import KINDS, compare, side, text


def register(sub: Any) -> None:
    p = sub.add_parser("diff", help="regressions (statuses, speed figures) and fixes between two runs; exit 1 on any "
                                     "regression")
    p.add_argument("baseline", type=Path, metavar="BASELINE", help="report (.json) or journal (.jsonl)")
    p.add_argument("current", type=Path, metavar="CURRENT", help="report (.json) or journal (.jsonl)")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the diff as JSON here")
    add_to_argparse(p, "speed_tolerance")
    p.set_defaults(func=cmd_diff)


def cmd_diff(args: argparse.Namespace) -> int:
    from ..outputs.storage import load_report, write_problem, write_recorded

    check_outputs({}, {"--json": args.json})
    reports = [load_report(args.baseline), load_report(args.current)]
    tolerance = SPEED_TOLERANCE_PCT if args.speed_tolerance is None else args.speed_tolerance
    result = compare(reports[0], reports[1], names=(str(args.baseline), str(args.current)),
                     speed_tolerance_pct=tolerance)
    sides = [side(args.baseline, reports[0]), side(args.current, reports[1])]
    print(text(sides, result))
    if args.json:
        data = {"baseline": sides[0], "current": sides[1], "unchanged": result.unchanged,
                **{kind: [c.__dict__ for c in result.of(kind)] for kind in KINDS}, "speed": result.speed.to_dict()}
        unwritten: Dict[str, str] = {}
        if not write_recorded(unwritten, "json", args.json, lambda: json.dumps(jsonsafe(data), indent=2) + "\n"):
            print(f"rocmcheck: {write_problem(unwritten)}", file=sys.stderr)
    return ExitCode.FAILED if result.failed else ExitCode.OK
