"""`rocmcheck explain [FILE|-]`: the failures a user's log shows; exit 0 recognised, 1 nothing, 2 bad input."""
from __future__ import annotations

import argparse
import json
from typing import Any

from ..model import ExitCode


def register(sub: Any) -> None:
    p = sub.add_parser("explain", help="name what a pasted log shows: signatures, known issues, fixes",
                       description="Read a log (traceback, watchdog message, dmesg, collect_env; any size) and print "
                                   "the recognised failure signatures with their lines, the known issues they point "
                                   "to with workarounds and links, what the text cannot tell, and the probes that "
                                   "would confirm it here. Exit 0 when something is recognised, 1 when nothing is, "
                                   "2 on bad input.")
    p.add_argument("file", nargs="?", default="-", metavar="FILE|-", help="the log (default: stdin)")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    p.add_argument("--elsewhere", action="store_true",
                   help="the log comes from another machine: do not compare it with this one's GPUs and torch")
    p.set_defaults(func=cmd_explain)


def cmd_explain(args: argparse.Namespace) -> int:
    from ..knowledge.explain import ARCH_SIGNATURES, explain, local_facts, read_log, recognise, render

    text = read_log(args.file)
    local = None
    if not args.elsewhere:
        local = local_facts(read_wheel=bool(ARCH_SIGNATURES & {s["id"] for s in recognise(text)}))
    result = explain(text, local)
    print(json.dumps(result, indent=2) if args.json else render(result, "stdin" if args.file == "-" else args.file))
    return ExitCode.OK if result["signatures"] else ExitCode.FAILED
