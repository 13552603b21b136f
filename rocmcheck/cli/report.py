"""`rocmcheck report`: run (or load) a run and write `rocmcheck.outputs.bugreport`'s files."""
from __future__ import annotations

import argparse
import re
import sys
from functools import partial
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from .. import registry
from ..engine.options import add_to_argparse, check_outputs
from ..engine.selection import select
from ..errors import UsageError
from ..knowledge.explain import read_log
from ..model import ExitCode
from ..outputs.bugreport import build, write
from ..outputs.formats import offered
from ..outputs.storage import load_report, write_problem, write_recorded
from ..records import Report
from ..wording import counted
from .common import add_run_options, execute, note, output_files, run_options


def register(sub: Any) -> None:
    p = sub.add_parser("report", help="the bug-report attachment: Markdown + JSON twin, redacted, with reproducers",
                       description="Run the probes (or use --from RUN.json) and write a Markdown bug report that "
                                   "fits a GitHub issue, its JSON twin and a standalone reproducer per failing "
                                   "variant. Secrets are redacted. Exit 0 when the files are written.")
    add_run_options(p, "report")
    add_to_argparse(p, "gate_only")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                   help="the Markdown file (default: OUT_DIR/rocmcheck-report-RUNID.md); the JSON twin "
                        "(.json) and reproducers (FILE-repro-*.py) go beside it")
    p.add_argument("--from", dest="from_path", type=Path, default=None, metavar="RUN.json",
                   help="build the report from an existing run (report .json or .jsonl journal)")
    p.add_argument("--log", default=None, metavar="FILE",
                   help="your own log (traceback, dmesg, training output; - for stdin): its recognised "
                        "excerpt and known issues (rocmcheck explain) go in the attachment")
    p.add_argument("--anonymize", action="store_true",
                   help="also replace the home directory, user name, host name and IP addresses")
    p.set_defaults(func=cmd_report)


def newest_complete_run(out_dir: Path) -> Optional[Tuple[Path, Report]]:
    """The newest report in OUT_DIR of a run that finished (not partial, not a bug report's JSON
    twin), with its path; None when there is none."""
    def modified(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except OSError:
            return 0.0

    for path in sorted(out_dir.glob("rocmcheck-*.json"), key=modified, reverse=True):
        try:
            report = load_report(path)
        except UsageError:
            continue
        if "bug_report" not in report.sections and not report.run.partial:
            return path, report
    return None


def _run_or_load(args: argparse.Namespace) -> Report:
    """The run to report: --from, else the newest complete run in OUT_DIR (said), else a run
    now (said first: the full profile takes minutes); --probe, -k or --gate-only run anew."""
    selected = bool(args.probe or args.keyword or args.gate_only)
    if args.from_path is not None:
        if selected:
            raise UsageError("--from builds the report from an existing run: drop --probe, -k and --gate-only")
        return load_report(args.from_path)
    found = None if selected else newest_complete_run(args.out_dir)
    if found is not None:
        args.from_path, report = found
        note(f"reporting the newest complete run in {args.out_dir}: {args.from_path} "
             f"({counted(len(report.verdicts), 'verdict')}); --from FILE picks another, "
             "--probe/-k/--gate-only run anew")
        return report
    opts = run_options(args, "report")
    variants = select(registry.load_all(opts.probes_paths), args.probe, args.keyword, gate_only=args.gate_only)
    if not selected:
        note(f"no complete run in {args.out_dir}: running the {opts.profile} profile first ({len(variants)} variants, "
             "a few minutes; a line per verdict); --from RUN.json reports an earlier run")
    return execute(opts, variants)


def _write_run_files(args: argparse.Namespace, report: Report) -> None:
    """The files --json and --md name, written from a loaded run as a run would have written them;
    one that cannot be written is said in one line (the attachment is written all the same)."""
    unwritten: Dict[str, str] = {}
    for output in offered("report"):
        path = getattr(args, f"output_{output.name}", None)
        if path is not None and write_recorded(unwritten, output.name, path, partial(output.text, report, path)):
            print(f"wrote {path} ({output.name} of {args.from_path})")
    if unwritten:
        print(f"rocmcheck: {write_problem(unwritten)}", file=sys.stderr)


def cmd_report(args: argparse.Namespace) -> int:
    if args.output is not None and args.output.suffix == ".json":
        raise UsageError("-o names the Markdown file; its JSON twin is written beside it")
    check_outputs({"--out-dir": args.out_dir}, {**output_files(args), "-o": args.output})
    log = (args.log, read_log(args.log)) if args.log else None  # bad input before any probe runs
    report = _run_or_load(args)
    if args.from_path is not None:  # nothing ran: the run's files named by --json and --md come from the one loaded
        _write_run_files(args, report)
    run_id = re.sub(r"[^A-Za-z0-9_.-]+", "-", report.run.id or "unknown")
    md_path = args.output or args.out_dir / f"rocmcheck-report-{run_id}.md"
    bug = build(report, anonymize=args.anonymize, stem=md_path.stem,
                source=str(args.from_path) if args.from_path else "", probes_paths=args.probes_path, log=log)
    paths = write(bug, md_path)
    extra = f" and {counted(len(bug.reproducers), 'reproducer')}" if bug.reproducers else ""
    print(f"wrote {paths[0]} ({len(bug.markdown):,} characters), {paths[1]}{extra}")
    for path in paths[2:]:
        print(f"  {path}")
    info = bug.data["bug_report"]
    print(info["redaction_summary"])
    if info["markdown_cut"]:
        print(f"trimmed to fit a GitHub issue: {'; '.join(info['markdown_cut'])}")
    return ExitCode.INTERRUPTED if report.run.partial and args.from_path is None else ExitCode.OK
