"""`rocmcheck run` and `rocmcheck gate`."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
from typing import Any, Iterator

from .. import registry
from ..engine.options import INJECT_ENV, add_to_argparse
from ..engine.selection import gate_variants, select
from ..errors import TorchMissing, UsageError
from ..model import ExitCode, node_status
from ..outputs.render import counts_line, failing_line, injected, known_issue_lines
from ..outputs.runtext import terminal_matrix
from ..outputs.storage import report_json, write_recorded
from ..records import Report
from .common import add_run_options, closing_line, execute, files, files_line, for_people, json_to_stdout, run_options


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="run probes; live line per verdict, then the matrix")
    add_run_options(p, "run")
    add_to_argparse(p, "gate_only", "level", "duration")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("gate", help="the quick critical set: GO (exit 0) or NO-GO (exit 1)")
    add_run_options(p, "gate")
    add_to_argparse(p, "level", "duration")
    p.add_argument("--require", action="append", default=[], metavar="ID",
                   help="make the gate these probes instead (glob, repeatable): narrows or widens it")
    p.add_argument("--npd", action="store_true",
                   help="a node-problem-detector custom plugin: exit 0 GO, 1 NO-GO, 2 UNKNOWN, and one line of at "
                        "most 80 bytes on stdout (the condition's message); everything else goes to stderr")
    p.set_defaults(func=cmd_gate)


@contextlib.contextmanager
def unknown_metrics(args: argparse.Namespace) -> Iterator[None]:
    """Where the command cannot assess before any probe runs (no torch, bad input), `--prom`'s
    file still says so (UNKNOWN), so that it never goes on saying the last run's GO. Best effort:
    the error is the command's, and an unwritable file was refused by name already."""
    try:
        yield
    except (UsageError, TorchMissing) as exc:
        path = getattr(args, "output_prom", None)
        if path is not None and path.parent.is_dir():  # a folder that is not there is not made (a typo)
            from ..outputs import prom

            text = prom.unknown(str(exc), args.inject or os.environ.get(INJECT_ENV, ""))
            write_recorded({}, "prom", path, lambda: text)
        raise


def cmd_run(args: argparse.Namespace) -> int:
    with unknown_metrics(args):
        opts = run_options(args, "run")
        variants = select(registry.load_all(opts.probes_paths), args.probe, args.keyword, gate_only=args.gate_only,
                          level=opts.level)
        human = for_people(args)
        report = execute(opts, variants, human)
    print("\n" + terminal_matrix(report), file=human)
    print(files_line(report, opts), file=human)
    closing = closing_line(report, "this run")
    if closing:
        print(closing, file=human)
    if json_to_stdout(args):
        print(report_json(report), end="", flush=True)
    return report.exit_code()


def cmd_gate(args: argparse.Namespace) -> int:
    from ..outputs import node

    if args.npd and json_to_stdout(args):
        raise UsageError("--npd and --json - both write to stdout; name a file for --json")
    with unknown_metrics(args):
        opts = run_options(args, "gate", profile="gate")
        specs = registry.load_all(opts.probes_paths)
        variants = gate_variants(specs, args.require, opts.level)
        if args.probe or args.keyword:
            chosen = {v.id for v in select(specs, args.probe, args.keyword)}
            variants = [v for v in variants if v.id in chosen]
        human = for_people(args)
        report = execute(opts, variants, human)
    code = report.exit_code()
    code = ExitCode.USAGE if code == ExitCode.INTERRUPTED else code  # no verdict was reached: UNKNOWN
    print("\n" + gate_screen(report, code), file=human)
    print(files_line(report, opts), file=human)
    closing = closing_line(report, f"this {node_status(code)}")
    if closing:
        print(closing, file=human)
    if json_to_stdout(args):
        written = {name: str(path) for name, path in files(report, opts).items()}
        print(json.dumps(node.verdict(report, code, written), indent=2, default=str), flush=True)
    if args.npd:
        print(node.npd_line(report, code), flush=True)
    return code


def gate_screen(report: Report, code: int) -> str:
    """GO or NO-GO (a drill's marked), then each failing variant with its evidence and known workaround."""
    drill, simulated = injected(report)
    mark = " (DRILL)" if drill else " (simulated)" if simulated else ""
    lines = [f"{node_status(code)}{mark} — {counts_line(report)}"]
    for v in report.verdicts:
        if not v.status.is_bad:
            continue
        lines.append("  " + failing_line(v, 200))
        ev = v.evidence
        if ev.get("signal") or ev.get("signatures"):
            lines.append(f"    evidence: {', '.join(filter(None, [ev.get('signal'), *ev.get('signatures', [])]))}")
        if ev.get("fix"):
            lines.append(f"    fix: {ev['fix']}")
        if ev.get("stack"):
            lines.append("    stack: " + " | ".join(ev["stack"].strip().splitlines()[-3:]))
        lines.extend("  " + line for line in known_issue_lines(v.known_issues, v.unfit_issues))
    for slow in (report.sections.get("speed") or {}).get("slow_gpus") or []:
        if slow.get("status") != "fail":  # a failing one is listed above
            lines.append(f"  slow GPU (warn): {slow.get('message')}")
    return "\n".join(lines)
