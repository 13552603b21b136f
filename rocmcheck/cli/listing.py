"""`rocmcheck list`: probes and variants (or the injectable faults)."""
from __future__ import annotations

import argparse
from typing import Any

from .. import faults, registry
from ..engine.options import INJECT_ENV, add_to_argparse
from ..engine.selection import select
from ..model import ExitCode, Variant
from ..outputs.render import short
from ..wording import counted
from .common import add_selection

FAULT_ARG_WIDTH, FAULT_HELP_WIDTH = 28, 64  # `list --faults` fits 120 columns


def register(sub: Any) -> None:
    p = sub.add_parser("list", help="probes and variants, their targets, timeouts and gate membership")
    add_selection(p)
    p.add_argument("--faults", action="store_true", help="list the injectable faults instead")
    add_to_argparse(p, "gate_only")
    p.set_defaults(func=cmd_list)


def cmd_list(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    specs = registry.load_all(args.probes_path)
    if args.faults:
        rows = [[f.name, f.args or "", f.help] for f in faults.catalogue().values()]
        # wrapped, so a row fits a terminal (the longest descriptions and argument forms ran to 370 columns)
        print(tabulate(rows, headers=["fault", "ARG", "what the probe meets"], tablefmt="simple",
                       maxcolwidths=[None, FAULT_ARG_WIDTH, FAULT_HELP_WIDTH]))
        print("\nInject with --inject NAME[:ARG][@PROBE_GLOB][,...] or $" + INJECT_ENV)
        return ExitCode.OK
    variants = select(specs, args.probe, args.keyword, gate_only=args.gate_only or None, level=None)
    rows = [[v.id, profile(v), f"{v.spec.timeout:g}s", needs(v), short(v.spec.targets, 60)] for v in variants]
    print(tabulate(rows, headers=["variant", "profile", "timeout", "needs", "targets"], tablefmt="simple"))
    print(f"\n{counted(len(variants), 'variant')} of {counted(len({v.spec.id for v in variants}), 'probe')}")
    return ExitCode.OK


def profile(v: Variant) -> str:
    """Where a variant runs: "gate" (the gate and `run`), "gate-only" (one of a probe's `gate_variants`, standing
    for variants `run` runs one by one) or "full" (`run` only)."""
    return "gate-only" if v.gate_only else "gate" if v.in_gate() else "full"


def needs(v: Variant) -> str:
    """What a variant needs to run (GPUs, backend, platforms), "-" where any machine will do."""
    req = v.spec.requires
    parts = [f"{req.gpus} GPUs" if req.gpus > 1 else ("GPU" if req.gpu or req.gpus else "")]
    parts += [req.backend or "", "/".join(req.platforms)]
    return " ".join(p for p in parts if p) or "-"
