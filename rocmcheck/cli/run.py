"""`rocmcheck run` and `rocmcheck gate`."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, Iterator

from .. import registry
from ..engine.options import INJECT_ENV, add_to_argparse
from ..engine.selection import gate_variants, select
from ..errors import TorchMissing, UsageError
from ..model import NOT_RUN_DECIDED, ExitCode, node_status
from ..outputs.render import counts_line, failing_line, injected, known_issue_lines, on_gpu
from ..outputs.runtext import cost_lines, terminal_matrix
from ..outputs.storage import remove_stale_temps, report_json, write_atomic, write_problem, write_recorded
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
    p.add_argument("--verdict", type=Path, default=None, metavar="PATH",
                   help="write the node verdict (as --json - does) to PATH: first, before anything else, an UNKNOWN "
                        "record that says when the gate started, replaced atomically by the verdict, so a gate "
                        "killed outright (Slurm's PrologEpilogTimeout) still leaves a valid verdict; temporary files "
                        "of killed writers in PATH's folder and the --out-dir are removed")
    p.add_argument("--keep-going", action="store_true",
                   help="run every probe on every GPU: by default a GPU's queue stops at its first failing verdict "
                        "(its NO-GO is decided), the probes it did not run are skips that say so, and the other "
                        "GPUs finish")
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

            text = prom.unknown(str(exc), args.inject or os.environ.get(INJECT_ENV, ""), path)
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
    if args.verdict is not None:
        start_verdict(args.verdict, args.out_dir)
    with unknown_metrics(args):
        opts = run_options(args, "gate", profile="gate", keep_going=args.keep_going)
        specs = registry.load_all(opts.probes_paths)
        variants = gate_variants(specs, args.require, opts.level)
        if args.probe or args.keyword:
            chosen = {v.id for v in select(specs, args.probe, args.keyword, gate_only=None)}
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
    if json_to_stdout(args) or args.verdict is not None:
        written = {name: str(path) for name, path in files(report, opts).items()}
        text = json.dumps(node.verdict(report, code, written), indent=2, default=str)
        if args.verdict is not None:
            keep_verdict(args.verdict, text)
        if json_to_stdout(args):
            print(text, flush=True)
    if args.npd:
        print(node.npd_line(report, code), flush=True)
    return code


def start_verdict(path: Path, out_dir: Path) -> None:
    """`gate --verdict PATH`, first thing: the folders' stale temporary files (of writers killed
    half-way) removed, then PATH holds the UNKNOWN start record until the gate ends. A PATH that
    cannot be written is bad input: a verdict file is what the caller reads."""
    from ..outputs import node

    for folder in dict.fromkeys([path.parent, out_dir]):
        remove_stale_temps(folder)
    try:
        write_atomic(path, json.dumps(node.started(), indent=2) + "\n")
    except OSError as exc:
        raise UsageError(f"--verdict {path}: cannot write ({exc.strerror or exc})") from None


def keep_verdict(path: Path, text: str) -> None:
    """The verdict in place of the start record (atomically); where it cannot be written, one line:
    the exit code is the verdict, and the file still says UNKNOWN, never a stale GO."""
    unwritten: Dict[str, str] = {}
    if not write_recorded(unwritten, "verdict", path, lambda: text + "\n"):
        print(f"rocmcheck: {write_problem(unwritten)}", file=sys.stderr, flush=True)


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
    not_run = [v for v in report.verdicts if v.status.value == "skip" and v.message.startswith(NOT_RUN_DECIDED)]
    if not_run:
        lines.append(f"  not run, the NO-GO decided (gate --keep-going runs them): "
                     f"{', '.join(v.variant + on_gpu(v.device, full=False) for v in not_run)}")
    lines.extend(cost_lines(report))
    return "\n".join(lines)
