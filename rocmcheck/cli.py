"""The `rocmcheck` command. `--help`, `list` and `env --help` never import torch.

Exit codes: 0 success / GO, 1 a probe failed / NO-GO / a regression, 2 bad input or
internal error, 130 interrupted (the partial report is still written).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, TextIO

from . import __version__, faults, registry
from .errors import TorchMissing, UsageError
from .model import Variant, Verdict
from .render import counts_line, known_issue_lines, short, terminal_matrix, verdict_line
from .selection import select

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return value


def _whole(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number, not '{text}'")
    return int(text)


EXPECT_GPUS_ENV = "ROCMCHECK_EXPECT_GPUS"


def _expect_gpus_env() -> Optional[int]:
    raw = os.environ.get(EXPECT_GPUS_ENV)
    if raw is None or raw == "":
        return None
    if not raw.isdigit():
        raise UsageError(f"${EXPECT_GPUS_ENV} must be a whole number, not '{raw}'")
    return int(raw)


def _add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--probe", action="append", default=[], metavar="ID",
                   help="probe id or glob (repeatable)")
    p.add_argument("-k", dest="keyword", default="", metavar="EXPR",
                   help="keyword expression over variant ids, as pytest -k")
    p.add_argument("--probes-path", action="append", default=[], metavar="DIR",
                   help=f"also load probe modules from DIR (also ${registry.PROBES_PATH_ENV})")


def _add_run_options(p: argparse.ArgumentParser) -> None:
    from .session import DEVICE_HELP

    _add_selection(p)
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--isolation", choices=["zygote", "spawn"], default=None,
                   help="zygote: fork from a server that imported torch (POSIX default); spawn: fresh interpreter")
    p.add_argument("--timeout", type=_positive_float, default=None, metavar="S",
                   help="per-variant timeout in seconds (overrides each probe's own)")
    p.add_argument("--inject", default=os.environ.get(faults.INJECT_ENV, ""), metavar="FAULT[,FAULT]",
                   help=f"inject faults (see: rocmcheck list --faults; also ${faults.INJECT_ENV})")
    p.add_argument("--out-dir", type=Path, default=Path("reports"), metavar="DIR",
                   help="where the journal, JSON and Markdown go (default: reports/)")
    p.add_argument("--json", type=Path, default=None, metavar="PATH",
                   help="also write the JSON report here (gate: '-' writes the node verdict to stdout, "
                        "everything else to stderr)")
    p.add_argument("--expect-gpus", type=_whole, default=None, metavar="N",
                   help=f"fail when torch sees fewer than N GPUs (also ${EXPECT_GPUS_ENV})")
    p.add_argument("--md", type=Path, default=None, metavar="PATH", help="also write the Markdown matrix here")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="rocmcheck", description="Probes, gate and matrix for PyTorch on ROCm/CUDA GPUs.")
    parser.add_argument("--version", action="version", version=f"rocmcheck {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    sub.required = True
    p = sub.add_parser("list", help="probes and variants, their targets, timeouts and gate membership")
    _add_selection(p)
    p.add_argument("--faults", action="store_true", help="list the injectable faults instead")
    p.add_argument("--gate-only", action="store_true", help="only variants in the gate")
    p = sub.add_parser("run", help="run probes; live line per verdict, then the matrix")
    _add_run_options(p)
    p.add_argument("--gate-only", action="store_true", help="only variants in the gate (gate profile)")
    p = sub.add_parser("gate", help="the quick critical set: GO (exit 0) or NO-GO (exit 1)")
    _add_run_options(p)
    p.add_argument("--require", action="append", default=[], metavar="ID",
                   help="make the gate these probes instead (glob, repeatable): narrows or widens it")
    p = sub.add_parser("env", help="the environment fingerprint (device facts from a child process)")
    p.add_argument("--device", default="auto")
    p.add_argument("--json", action="store_true", help="print JSON")
    for name in COMMAND_MODULES:
        importlib.import_module(f"rocmcheck.{name}").register(sub)
    return parser


# --- list --------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    specs = registry.load_all(args.probes_path)
    if args.faults:
        rows = [[f.name, f.args or "", f.help] for f in faults.catalogue().values()]
        print(tabulate(rows, headers=["fault", "ARG", "what the probe meets"], tablefmt="simple"))
        print("\nInject with --inject NAME[:ARG][@PROBE_GLOB][,...] or $" + faults.INJECT_ENV)
        return EXIT_OK
    variants = select(specs, args.probe, args.keyword, gate_only=args.gate_only)
    rows = [[v.id, "gate" if v.in_gate() else "full", f"{v.spec.timeout:g}s", _needs(v), short(v.spec.targets, 60)]
            for v in variants]
    print(tabulate(rows, headers=["variant", "profile", "timeout", "needs", "targets"], tablefmt="simple"))
    print(f"\n{len(variants)} variants of {len({v.spec.id for v in variants})} probes")
    return EXIT_OK


def _needs(v: Variant) -> str:
    req = v.spec.requires
    parts = [f"{req.gpus} GPUs" if req.gpus > 1 else ("GPU" if req.gpu or req.gpus else "")]
    parts += [req.backend or "", "/".join(req.platforms)]
    return " ".join(p for p in parts if p) or "-"


# --- run and gate --------------------------------------------------------------------------


def _options(args: argparse.Namespace, profile: str, command: str):
    from .runner import RunOptions

    faults.parse(args.inject)  # a bad fault spec is a usage error before anything runs
    opts = RunOptions(device=args.device, timeout=args.timeout, inject=args.inject, profile=profile,
                      probes_paths=args.probes_path, out_dir=args.out_dir,
                      json_path=None if _to_stdout(args) else args.json, md_path=args.md, command=command,
                      expect_gpus=_expect_gpus_env() if args.expect_gpus is None else args.expect_gpus)
    if args.isolation:
        opts.isolation = args.isolation
    return opts


def _to_stdout(args: argparse.Namespace) -> bool:
    """`gate --json -`: stdout carries exactly one JSON document (the node verdict)."""
    return getattr(args, "json", None) == Path("-")


def _live(verdict: Verdict, stream: Optional[TextIO] = None) -> None:
    print(verdict_line(verdict.to_dict()), file=stream or sys.stdout, flush=True)


def _note(text: str) -> None:
    print(f"rocmcheck: {text}", file=sys.stderr, flush=True)


def _execute(opts, variants: List[Variant], stream: Optional[TextIO] = None) -> Dict[str, Any]:
    from .session import run_variants

    if not variants:
        raise UsageError("no probe variant matches the selection")
    print(f"rocmcheck {__version__}: {len(variants)} variants, isolation {opts.isolation}, "
          f"device {opts.device}, profile {opts.profile}", file=stream or sys.stdout, flush=True)
    return run_variants(opts, variants, on_verdict=lambda v: _live(v, stream), on_note=_note)


def _files_line(report: Dict[str, Any], opts) -> str:
    base = opts.out_dir / f"rocmcheck-{report['run']['id']}"
    return f"wrote {opts.json_path or base.with_suffix('.json')} and {opts.md_path or base.with_suffix('.md')}"


def cmd_run(args: argparse.Namespace) -> int:
    specs = registry.load_all(args.probes_path)
    variants = select(specs, args.probe, args.keyword, gate_only=args.gate_only)
    opts = _options(args, "gate" if args.gate_only else "full", "run")
    report = _execute(opts, variants)
    print("\n" + terminal_matrix(report))
    print(_files_line(report, opts))
    return _exit_for(report)


def _exit_for(report: Dict[str, Any]) -> int:
    if report["run"]["partial"]:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if any(Verdict.from_dict(v).status.is_bad for v in report["verdicts"]) else EXIT_OK


def cmd_gate(args: argparse.Namespace) -> int:
    from .session import gate_variants

    specs = registry.load_all(args.probes_path)
    variants = gate_variants(specs, args.require)
    if args.probe or args.keyword:
        chosen = {v.id for v in select(specs, args.probe, args.keyword)}
        variants = [v for v in variants if v.id in chosen]
    opts = _options(args, "gate", "gate")
    human = sys.stderr if _to_stdout(args) else sys.stdout
    report = _execute(opts, variants, human)
    code = _exit_for(report)
    code = EXIT_FAILED if code == EXIT_INTERRUPTED else code
    print("\n" + gate_screen(report, code), file=human)
    print(_files_line(report, opts), file=human)
    if _to_stdout(args):
        from . import node

        base = opts.out_dir / f"rocmcheck-{report['run']['id']}"
        files = {"json": str(base.with_suffix(".json")), "md": str(opts.md_path or base.with_suffix(".md"))}
        print(json.dumps(node.verdict(report, code, files), indent=2, default=str), flush=True)
    return code


def gate_screen(report: Dict[str, Any], code: int) -> str:
    """GO or NO-GO, then each failing variant with its evidence and known workaround."""
    bad = [v for v in report["verdicts"] if Verdict.from_dict(v).status.is_bad]
    lines = [("GO" if code == EXIT_OK else "NO-GO") + f" — {counts_line(report)}"]
    for v in bad:
        lines.append(f"  {v['status'].upper()} {v['variant']}: {short(v.get('message', ''), 200)}")
        ev = v.get("evidence") or {}
        if ev.get("signal") or ev.get("signatures"):
            lines.append(f"    evidence: {', '.join(filter(None, [ev.get('signal'), *ev.get('signatures', [])]))}")
        if ev.get("stack"):
            lines.append("    stack: " + " | ".join(ev["stack"].strip().splitlines()[-3:]))
        lines.extend("  " + line for line in known_issue_lines(v))
    return "\n".join(lines)


# --- env -------------------------------------------------------------------------------------


def cmd_env(args: argparse.Namespace) -> int:
    from .fingerprint import summary
    from .runner import RunOptions
    from .session import run_variants

    report = run_variants(RunOptions(device=args.device, write_files=False, command="env", needs_torch=False), [])
    fp = report["fingerprint"]
    if args.json:
        print(json.dumps(fp, indent=2, default=str))
        return EXIT_OK
    print(summary(fp))
    print(_env_text(fp))
    return EXIT_OK


def _env_text(fp: Dict[str, Any]) -> str:
    from tabulate import tabulate

    d, h = fp.get("device_facts") or {}, fp.get("host") or {}
    rows = [["torch", d.get("torch")], ["HIP", d.get("hip")], ["ROCm", d.get("rocm")], ["CUDA", d.get("cuda")],
            ["wheel arch list", " ".join(d.get("arch_list") or []) or None],
            ["driver", d.get("nvidia_driver") or d.get("amdgpu_driver")], ["HIP runtime", d.get("hip_runtime")],
            ["cuDNN / MIOpen", d.get("cudnn")], ["NCCL / RCCL", d.get("nccl")], ["hipBLASLt", d.get("hipblaslt")],
            ["OS", h.get("os")],
            ["kernel", h.get("kernel")], ["WSL", h.get("wsl")], ["Python", h.get("python")],
            ["GPU kernel options", " ".join(h.get("kernel_cmdline") or []) or None]]
    rows += [[f"GPU {g.get('index')}", f"{g.get('name')} ({g.get('arch')}, {g.get('memory_bytes', 0) / 2**30:.1f} GiB)"]
             for g in d.get("devices") or [] if g]
    rows += [[k, v] for k, v in (h.get("env") or {}).items()]
    rows += [[f"pkg {k}", v] for k, v in (h.get("packages") or {}).items()]
    return tabulate([[k, "Could not collect" if v is None else v] for k, v in rows], tablefmt="plain")


COMMANDS = {"list": cmd_list, "run": cmd_run, "gate": cmd_gate, "env": cmd_env}
# Modules adding a command: each has `register(sub)`, which adds a parser whose
# defaults set `func=<handler(args) -> exit code>`. They must not import torch.
COMMAND_MODULES: tuple = ("matrix", "diff", "bugreport", "doctor")


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser().parse_args(argv)
        handler = getattr(args, "func", None) or COMMANDS[args.command]
        return handler(args)
    except UsageError as exc:
        return _could_not_assess(argv, f"error: {exc}")
    except TorchMissing as exc:
        return _could_not_assess(argv, str(exc))
    except KeyboardInterrupt:
        print("rocmcheck: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # an internal error is still one line and exit 2 (ROCMCHECK_DEBUG=1: traceback)
        if os.environ.get("ROCMCHECK_DEBUG"):
            raise
        return _could_not_assess(argv, f"internal error: {type(exc).__name__}: {short(str(exc), 300)}")


def _could_not_assess(argv: List[str], message: str) -> int:
    """Exit 2 with one line on stderr; under `gate --json -` also the UNKNOWN node verdict on
    stdout (read from argv: the error may be that argv itself does not parse)."""
    print(f"rocmcheck: {message}", file=sys.stderr)
    wants_document = argv[:1] == ["gate"] and any(
        a == "--json=-" or (a == "--json" and argv[i + 1:i + 2] == ["-"]) for i, a in enumerate(argv))
    if wants_document:
        from . import node

        print(json.dumps(node.unknown(message), indent=2), flush=True)
    return EXIT_USAGE
