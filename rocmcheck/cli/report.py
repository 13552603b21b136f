"""`rocmcheck report`: run (or load) a run and write `rocmcheck.bugreport`'s files."""
from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any, Dict

from .. import registry
from ..bugreport import build, write
from ..errors import UsageError
from ..model import ExitCode
from ..options import add_to_argparse, check_outputs
from ..selection import select
from ..storage import load_report
from .common import add_run_options, execute, run_options


def register(sub: Any) -> None:
    p = sub.add_parser("report", help="the bug-report attachment: Markdown + JSON twin, redacted, with reproducers",
                       description="Run the probes (or use --from RUN.json) and write a Markdown bug report that "
                                   "fits a GitHub issue, its JSON twin and a standalone reproducer per failing "
                                   "variant. Secrets are redacted. Exit 0 when the files are written.")
    add_run_options(p)
    add_to_argparse(p, "gate_only")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                   help="the Markdown file (default: OUT_DIR/rocmcheck-report-RUNID.md); the JSON twin "
                        "(.json) and reproducers (FILE-repro-*.py) go beside it")
    p.add_argument("--from", dest="from_path", type=Path, default=None, metavar="RUN.json",
                   help="build the report from an existing run (report .json or .jsonl journal)")
    p.add_argument("--anonymize", action="store_true",
                   help="also replace the home directory, user name, host name and IP addresses")
    p.set_defaults(func=cmd_report)


def _run_or_load(args: argparse.Namespace) -> Dict[str, Any]:
    if args.from_path is not None:
        if args.probe or args.keyword or args.gate_only:
            raise UsageError("--from builds the report from an existing run: drop --probe, -k and --gate-only")
        return load_report(args.from_path)
    variants = select(registry.load_all(args.probes_path), args.probe, args.keyword, gate_only=args.gate_only)
    return execute(run_options(args, "gate" if args.gate_only else "full", "report"), variants)


def cmd_report(args: argparse.Namespace) -> int:
    if args.output is not None and args.output.suffix == ".json":
        raise UsageError("-o names the Markdown file; its JSON twin is written beside it")
    check_outputs({"--out-dir": args.out_dir}, {"-o": args.output})
    report = _run_or_load(args)
    run_id = re.sub(r"[^A-Za-z0-9_.-]+", "-", str((report.get("run") or {}).get("id") or "unknown"))
    md_path = args.output or args.out_dir / f"rocmcheck-report-{run_id}.md"
    bug = build(report, anonymize=args.anonymize, stem=md_path.stem,
                source=str(args.from_path) if args.from_path else "", probes_paths=args.probes_path)
    paths = write(bug, md_path)
    extra = f" and {len(bug.reproducers)} reproducer(s)" if bug.reproducers else ""
    print(f"wrote {paths[0]} ({len(bug.markdown):,} characters), {paths[1]}{extra}")
    for path in paths[2:]:
        print(f"  {path}")
    info = bug.data["bug_report"]
    print(info["redaction_summary"])
    if info["markdown_cut"]:
        print(f"trimmed to fit a GitHub issue: {'; '.join(info['markdown_cut'])}")
    partial = bool((report.get("run") or {}).get("partial"))
    return ExitCode.INTERRUPTED if partial and args.from_path is None else ExitCode.OK
