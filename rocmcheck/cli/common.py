"""What the commands that run probes share: their options, the live lines, the exit code."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, TextIO

from .. import __version__
from ..engine.options import OPTIONS, Given, RunOptions, add_to_argparse
from ..errors import UsageError
from ..faults import drill_split
from ..model import Variant, Verdict
from ..outputs.formats import OUTPUTS, offered, to_stdout
from ..outputs.render import injected, injection_text, verdict_line
from ..outputs.storage import write_problem
from ..records import Report


def add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--probe", action="append", default=[], metavar="ID",
                   help="probe id or glob (repeatable)")
    p.add_argument("-k", dest="keyword", default="", metavar="EXPR",
                   help="keyword expression over variant ids, as pytest -k")
    add_to_argparse(p, "probes_path")


def add_run_options(p: argparse.ArgumentParser, command: str) -> None:
    """The options of every command that runs probes (run, gate, report, doctor), with the flag of
    each output `command` offers."""
    add_selection(p)
    add_to_argparse(p, "device", "isolation", "timeout", "first_use_timeout", "deadline", "killed_after", "inject")
    p.add_argument("--out-dir", type=Path, default=Path("reports"), metavar="DIR",
                   help="where the journal, JSON and Markdown go (default: reports/)")
    add_to_argparse(p, "expect_gpus", "slow_gpu")
    for output in offered(command):
        p.add_argument(output.flag, dest=f"output_{output.name}", type=Path, default=None, metavar="PATH",
                       help=output.help)


def output_files(args: argparse.Namespace) -> Dict[str, Optional[Path]]:
    """Flag -> the file a run's output option named (None: not named), for `check_outputs`."""
    return {o.flag: getattr(args, f"output_{o.name}", None) for o in OUTPUTS}  # the flags its parser added


def run_options(args: argparse.Namespace, command: str, profile: Optional[str] = None, **fixed: Any) -> RunOptions:
    """The runner's options from the command line (over the environment); bad values fail here,
    before anything runs. `profile`: the command's own (gate), else --gate-only's; `fixed`: fields no
    option of the table sets (the gate's --keep-going). A command's wall time counts from the process's start."""
    named = {o.name: getattr(args, f"output_{o.name}", None) for o in OUTPUTS}
    return RunOptions.build(Given({name: getattr(args, name) for name in OPTIONS if hasattr(args, name)}),
                            folders={"--out-dir": args.out_dir}, files=output_files(args),
                            stdout=to_stdout(command), writable=[o.flag for o in OUTPUTS if o.must_write],
                            profile=profile, command=command, out_dir=args.out_dir, timed_from_process_start=True,
                            named_files={name: path for name, path in named.items()
                                         if path is not None and path != Path("-")}, **fixed)


def json_to_stdout(args: argparse.Namespace) -> bool:
    """`run --json -`, `gate --json -`: stdout carries exactly one JSON document (the report, the
    node verdict), and every line for people goes to stderr."""
    return getattr(args, "output_json", None) == Path("-")


def for_people(args: argparse.Namespace) -> TextIO:
    """Where the lines for people go: stderr where stdout is a machine's (`--json -`, `gate --npd`)."""
    return sys.stderr if json_to_stdout(args) or getattr(args, "npd", False) else sys.stdout


def live(verdict: Verdict, stream: Optional[TextIO] = None) -> None:
    print(verdict_line(verdict), file=stream or sys.stdout, flush=True)


def note(text: str) -> None:
    print(f"rocmcheck: {text}", file=sys.stderr, flush=True)


def execute(opts: RunOptions, variants: List[Variant], stream: Optional[TextIO] = None) -> Report:
    """Run `variants` with a live line each; the report (the command's outputs written)."""
    from ..engine.runner import Runner, check_fault_targets

    if not variants:
        raise UsageError("no probe variant matches the selection")
    check_fault_targets(opts.inject, variants)  # the runner checks too, but here it comes before the first line
    said = injection_text(*drill_split([part.strip() for part in opts.inject.split(",")]))
    print(f"rocmcheck {__version__}: {len(variants)} variants, isolation {opts.isolation}, "
          f"device {opts.device}, profile {opts.profile}" + (f"; {said}" if said else ""),
          file=stream or sys.stdout, flush=True)
    return Runner(opts, lambda v: live(v, stream), note, offered(opts.command)).run(variants)


def files(report: Report, opts: RunOptions) -> Dict[str, Path]:
    """The output files the command wrote (those that could not be written left out)."""
    found = {o.name: o.path(opts.out_dir, report.run.id, opts.named_files) for o in offered(opts.command)}
    return {name: path for name, path in found.items() if path is not None and name not in report.run.unwritten}


def files_line(report: Report, opts: RunOptions) -> str:
    """One line: the files written, or which could not be and why (the verdict stands without them)."""
    unwritten = report.run.unwritten
    if set(unwritten) - {"jsonl"}:
        return f"rocmcheck: {write_problem(unwritten)}"
    journal = f" (the journal is incomplete: {unwritten['jsonl']})" if "jsonl" in unwritten else ""
    written = [str(path) for path in files(report, opts).values()]
    return f"wrote {' and '.join(written)}{journal}"


def closing_line(report: Report, subject: str) -> str:
    """The command's last line where faults were injected ("rocmcheck: this NO-GO is a DRILL:
    faults injected on purpose (copy-zeros)") or GPUs simulated ("rocmcheck: this GO is simulated
    (simgpu:2), no fault injected"), so that a drill's result is never read, or pasted, as a real
    one; "" for a real run."""
    drill, simulated = injected(report)
    said = injection_text(drill, simulated)
    return f"rocmcheck: {subject} is {'a ' if drill else ''}{said}" if said else ""
