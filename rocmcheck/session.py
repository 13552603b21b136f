"""What the CLI, `rocmcheck.gate()` and the pytest plugin share: choose variants, run them."""
from __future__ import annotations

import fnmatch
from typing import Callable, Dict, Iterable, List, Optional

from . import registry
from .errors import UsageError
from .model import Variant, Verdict, preloads
from .runner import RunOptions, Runner
from .selection import select

DEVICE_HELP = ("auto (every visible GPU; inside a torchrun rank its LOCAL_RANK GPU; the CPU only on a host "
               "without GPU), all, cpu, or cuda:N[,M...] (ROCm GPUs use the cuda name too)")


def check_device(value: str) -> str:
    """auto, all, cpu, or cuda:N[,M...] (hip:N is accepted: ROCm builds use the cuda name)."""
    if value in ("auto", "all", "cpu"):
        return value
    head, _, indexes = value.partition(":")
    numbers = indexes.split(",")
    if head in ("cuda", "hip") and all(n.isdigit() for n in numbers):
        return "cuda:" + ",".join(str(n) for n in dict.fromkeys(int(n) for n in numbers))
    raise UsageError(f"--device must be auto, all, cpu or cuda:N[,M...], not '{value}'")


def check_timeout(value: Optional[float]) -> Optional[float]:
    if value is not None and not value > 0:
        raise UsageError(f"--timeout must be a positive number of seconds, not '{value}'")
    return value


def gate_variants(specs: Dict[str, registry.ProbeSpec], require: Iterable[str] = ()) -> List[Variant]:
    """The gate set; `require` replaces it with the named probes (their gate variants, or
    all their variants when they have none in the gate), which narrows or widens it."""
    patterns = list(require)
    if not patterns:
        return select(specs, gate_only=True)
    chosen: List[Variant] = []
    for pattern in patterns:
        for probe_variants in [select(specs, [pid]) for pid in sorted(specs) if fnmatch.fnmatchcase(pid, pattern)]:
            in_gate = [v for v in probe_variants if v.in_gate()]
            chosen.extend(in_gate or probe_variants)
        if not any(fnmatch.fnmatchcase(pid, pattern) for pid in specs):
            raise UsageError(f"unknown probe id '{pattern}' (see: rocmcheck list)")
    return list({v.id: v for v in chosen}.values())


def run_variants(options: RunOptions, variants: List[Variant],
                 on_verdict: Optional[Callable[[Verdict], None]] = None,
                 on_note: Optional[Callable[[str], None]] = None) -> Dict:
    options.device = check_device(options.device)
    check_timeout(options.timeout)
    options.preload = sorted(set(options.preload) | set(preloads(variants)))
    return Runner(options, on_verdict, on_note).run(variants)
