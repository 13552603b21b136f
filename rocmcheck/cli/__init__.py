"""The `rocmcheck` command: the parser and `main`. `--help`, `list` and `env --help` never import torch.

`main` takes SIGTERM and Ctrl-C (`errors.interrupts_taken`: even where SIGINT was inherited ignored)
and makes the console safe (`cli.console`) before any command module is imported, so a scheduler's
early SIGTERM, a closed pipe or an ASCII terminal still gets one line and the verdict's exit code.

Each command is a module of this package with `register(sub)`, which adds its parser and sets
`func=<handler(args) -> exit code>`; the work is done by the feature modules below
(`rocmcheck.outputs.render`, `diff`, `matrix`, `bugreport`, `doctor`). Exit codes: `rocmcheck.model.ExitCode`.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path
from typing import List, Optional

from .. import __version__
from ..errors import Interrupted, TorchMissing, UsageError, interrupts_taken
from ..model import ExitCode
from ..safetext import clean
from . import console

COMMAND_MODULES = ("listing", "run", "env", "matrix", "diff", "report", "doctor", "explain")  # in `--help` order


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="rocmcheck", description="Probes, gate and matrix for PyTorch on ROCm/CUDA GPUs.")
    parser.add_argument("--version", action="version", version=f"rocmcheck {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run one command; the exit code as a plain int (scripts and `sys.exit` see numbers)."""
    restore = console.install()
    try:
        with interrupts_taken():
            return _main(sys.argv[1:] if argv is None else list(argv))
    finally:
        restore()


def _main(argv: List[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except UsageError as exc:
        return _could_not_assess(argv, f"error: {exc}")
    except TorchMissing as exc:
        return _could_not_assess(argv, str(exc))
    except (KeyboardInterrupt, Interrupted) as exc:  # before a run began, or after it ended
        message = f"interrupted by {exc.args[0] if exc.args else 'Ctrl-C'}"
        return _could_not_assess(argv, message) if argv[:1] == ["gate"] else _interrupted(message)
    except Exception as exc:  # an internal error is still one line and exit 2 (ROCMCHECK_DEBUG=1: traceback)
        if os.environ.get("ROCMCHECK_DEBUG"):
            raise
        from ..outputs.render import short

        return _could_not_assess(argv, f"internal error: {type(exc).__name__}: {short(str(exc), 300)}")


def _interrupted(message: str) -> int:
    print(f"rocmcheck: {message}", file=sys.stderr)
    return int(ExitCode.INTERRUPTED)


def _could_not_assess(argv: List[str], message: str) -> int:
    """Exit 2 with one line on stderr; under `gate --json -` also the UNKNOWN node verdict on
    stdout, under `gate --npd` its one line (read from argv: the error may be that argv itself
    does not parse). The message may quote anything (an option's value, an exception's text):
    it is made safe first."""
    message = clean(message)
    print(f"rocmcheck: {message}", file=sys.stderr)
    gate = argv[:1] == ["gate"]
    wants_document = gate and _value(argv, "--json") == "-"
    verdict_file = _value(argv, "--verdict") if gate else None
    if wants_document or verdict_file or (gate and "--npd" in argv):
        from ..engine.options import INJECT_ENV
        from ..outputs import node

        document = json.dumps(node.unknown(message), indent=2)
        if verdict_file:  # in place of the start record, or where the error came before it was written
            from ..outputs.storage import write_atomic

            try:
                write_atomic(Path(verdict_file), document + "\n")
            except OSError as exc:
                if f"--verdict {verdict_file}: cannot write" not in message:  # said once, whichever came first
                    print(f"rocmcheck: --verdict {verdict_file}: cannot write ({exc.strerror or exc})",
                          file=sys.stderr)
        if wants_document:
            print(document, flush=True)
        elif "--npd" in argv:
            print(node.npd_unknown(message, os.environ.get(INJECT_ENV, "")), flush=True)
    return int(ExitCode.USAGE)


def _value(argv: List[str], flag: str) -> Optional[str]:
    """The last value of `flag` (`--flag V` or `--flag=V`) in an argv that may not parse."""
    found = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith(flag + "="):
            found = arg[len(flag) + 1:]
    return found
