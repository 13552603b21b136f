"""What the commands that run probes share: their options, the live lines, the exit code."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, TextIO

from .. import __version__
from ..engine.options import OPTIONS, Given, RunOptions, add_to_argparse
from ..errors import UsageError
from ..model import ExitCode, Variant, Verdict, is_bad
from ..outputs.render import verdict_line
from ..outputs.storage import report_paths


def add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--probe", action="append", default=[], metavar="ID",
                   help="probe id or glob (repeatable)")
    p.add_argument("-k", dest="keyword", default="", metavar="EXPR",
                   help="keyword expression over variant ids, as pytest -k")
    add_to_argparse(p, "probes_path")


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The options of every command that runs probes (run, gate, report, doctor)."""
    add_selection(p)
    add_to_argparse(p, "device", "isolation", "timeout", "first_use_timeout", "inject")
    p.add_argument("--out-dir", type=Path, default=Path("reports"), metavar="DIR",
                   help="where the journal, JSON and Markdown go (default: reports/)")
    p.add_argument("--json", type=Path, default=None, metavar="PATH",
                   help="also write the JSON report here (gate: '-' writes the node verdict to stdout, "
                        "everything else to stderr)")
    add_to_argparse(p, "expect_gpus")
    p.add_argument("--md", type=Path, default=None, metavar="PATH", help="also write the Markdown matrix here")


def run_options(args: argparse.Namespace, command: str, profile: Optional[str] = None) -> RunOptions:
    """The runner's options from the command line (over the environment); bad values fail here,
    before anything runs. `profile`: the command's own (gate), else --gate-only's."""
    return RunOptions.build(Given({name: getattr(args, name) for name in OPTIONS if hasattr(args, name)}),
                            folders={"--out-dir": args.out_dir}, files={"--json": args.json, "--md": args.md},
                            profile=profile, command=command, out_dir=args.out_dir,
                            json_path=None if to_stdout(args) else args.json, md_path=args.md)


def to_stdout(args: argparse.Namespace) -> bool:
    """`gate --json -`: stdout carries exactly one JSON document (the node verdict)."""
    return getattr(args, "json", None) == Path("-")


def live(verdict: Verdict, stream: Optional[TextIO] = None) -> None:
    print(verdict_line(verdict.to_dict()), file=stream or sys.stdout, flush=True)


def note(text: str) -> None:
    print(f"rocmcheck: {text}", file=sys.stderr, flush=True)


def execute(opts: RunOptions, variants: List[Variant], stream: Optional[TextIO] = None) -> Dict[str, Any]:
    """Run `variants` with a live line each; the report (JSON and Markdown written)."""
    from ..engine.runner import Runner
    from ..outputs.render import markdown_report

    if not variants:
        raise UsageError("no probe variant matches the selection")
    print(f"rocmcheck {__version__}: {len(variants)} variants, isolation {opts.isolation}, "
          f"device {opts.device}, profile {opts.profile}", file=stream or sys.stdout, flush=True)
    return Runner(opts, lambda v: live(v, stream), note, markdown_report).run(variants)


def files(report: Dict[str, Any], opts: RunOptions) -> Dict[str, Path]:
    return report_paths(opts.out_dir, report["run"]["id"], opts.json_path, opts.md_path)


def files_line(report: Dict[str, Any], opts: RunOptions) -> str:
    """One line: the files written, or which could not be and why (the verdict stands without them)."""
    paths = files(report, opts)
    unwritten = report["run"].get("unwritten") or {}
    failed = [unwritten[kind] for kind in ("json", "md") if kind in unwritten]
    if failed:
        return f"rocmcheck: could not write the report ({failed[0]}); the verdict above stands"
    journal = f" (the journal is incomplete: {unwritten['jsonl']})" if "jsonl" in unwritten else ""
    return f"wrote {paths['json']} and {paths['md']}{journal}"


def exit_for(report: Dict[str, Any]) -> int:
    if report["run"]["partial"]:
        return ExitCode.INTERRUPTED
    return ExitCode.FAILED if any(is_bad(v["status"]) for v in report["verdicts"]) else ExitCode.OK
