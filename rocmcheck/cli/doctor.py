"""`rocmcheck doctor`: the command around `rocmcheck.doctor` (which re-runs, judges and budgets)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .. import registry
from ..doctor import DEFAULT_BUDGET_S, DEFAULT_REPEATS, Case, Doctor, failing_variants, load_candidates
from ..engine.options import argparse_type, positive
from ..engine.selection import gate_variants, select
from ..errors import UsageError
from ..model import ExitCode
from ..outputs.formats import offered
from ..outputs.render import doctor_text
from ..wording import counted
from .common import add_run_options, files_line, live, note, run_options


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {text}")
    return value


def register(sub: Any) -> None:
    p = sub.add_parser("doctor", help="re-run failing variants under candidate workarounds; say which one fixes them",
                       description="Run the gate (or --probe/-k, or take the failing variants of --from RUN.json), "
                                   "then re-run every variant that did not pass: as it is (--repeats times, to "
                                   "measure its pass rate) and under each candidate workaround that applies "
                                   "(environment variables, or parameters of the same probe), within --budget "
                                   "seconds. Exit 0 when every failing variant has a workaround, 1 when one has none.")
    add_run_options(p, "doctor")
    p.set_defaults(func=cmd_doctor)
    p.add_argument("--from", dest="from_path", type=Path, default=None, metavar="RUN.json",
                   help="diagnose the failing variants of an existing run (report .json or .jsonl journal)")
    p.add_argument("--repeats", type=_at_least_one, default=DEFAULT_REPEATS, metavar="N",
                   help=f"runs of the variant as it is, and passes a candidate needs (default {DEFAULT_REPEATS})")
    p.add_argument("--budget", type=argparse_type(positive), default=DEFAULT_BUDGET_S, metavar="SECONDS",
                   help=f"time for all re-runs together (default {DEFAULT_BUDGET_S:g})")
    p.add_argument("--workarounds", action="append", type=Path, default=[], metavar="FILE",
                   help="also try the candidates of this JSON file (format: rocmcheck/knowledge/data/workarounds.json)")


def cmd_doctor(args: argparse.Namespace) -> int:
    from ..engine.runner import Runner
    from ..outputs.storage import load_report

    specs = registry.load_all(args.probes_path)
    candidates = load_candidates(args.workarounds)
    if args.from_path is not None:
        source = load_report(args.from_path)
        chosen = ({v.id for v in select(specs, args.probe, args.keyword, gate_only=None)}  # a gate's report too
                  if args.probe or args.keyword else None)
        failing = failing_variants(source, specs, chosen, str(args.from_path))
        if not failing:
            among = " among the selection" if args.probe or args.keyword else ""
            print(f"doctor: nothing to diagnose: no variant of {args.from_path} failed{among}")
            return ExitCode.OK
        args.device = args.device or source.run.device  # checked as --device; neither: auto
        profile = source.run.profile if source.run.profile in ("gate", "full") else "full"
        first = [v for v, _ in failing]
    else:
        first = select(specs, args.probe, args.keyword) if args.probe or args.keyword else gate_variants(specs)
        if not first:
            raise UsageError("no probe variant matches the selection")
        profile = "full" if args.probe or args.keyword else "gate"
    opts = run_options(args, "doctor", profile)
    runner = Runner(opts, on_verdict=live, on_note=note, outputs=offered("doctor"))
    doctor = Doctor(runner, candidates, args.repeats, args.budget)

    def diagnose() -> None:
        if args.from_path is not None:  # this session's first run of each counts: it was not chosen by its outcome
            cases = [Case(v, old, old.duration_s) for v, old in failing]
            for case, verdict in zip(cases, runner.verdicts):
                case.baseline.add(verdict)
            fellows = source.verdicts
        else:
            by_id = {v.id: v for v in first}
            cases = [Case(by_id[v.variant], v, v.duration_s) for v in runner.verdicts if v.status.is_bad]
            fellows = runner.verdicts
        if cases:
            print(f"\ndoctor: {counted(len(cases), 'variant')} did not pass; re-running them (budget {args.budget:g}s)",
                  flush=True)
        doctor.examine(cases, fellows)

    print(f"rocmcheck doctor: {len(first)} variants, isolation {opts.isolation}, device {opts.device}", flush=True)
    report = runner.run(first, after=diagnose)
    results = report.sections.get("doctor", [])
    print(doctor_text(results))
    print(files_line(report, opts))
    if report.run.partial:
        return ExitCode.INTERRUPTED
    return ExitCode.OK if all(r["fixes"] for r in results) else ExitCode.FAILED
