"""What the CLI, `rocmcheck.gate()` and the pytest plugin share: choose variants, run them."""
from __future__ import annotations

import fnmatch
from typing import Callable, Dict, Iterable, List, Optional

from . import known_issues, registry
from .errors import UsageError
from .model import Variant, Verdict, preloads
from .options import check
from .runner import Runner, RunOptions
from .selection import select


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
                 on_note: Optional[Callable[[str], None]] = None,
                 markdown: Optional[Callable[[Dict], str]] = None) -> Dict:
    """Check the options, run `variants`; `markdown` renders the report's Markdown file."""
    options.device = check("device", options.device, "--device")
    known_issues.entries()  # a broken $ROCMCHECK_KNOWN_ISSUES file is bad input now, not at the first failure
    for name in ("timeout", "first_use_timeout"):
        if getattr(options, name) is not None:
            check(name, getattr(options, name), f"--{name.replace('_', '-')}")
    options.preload = sorted(set(options.preload) | set(preloads(variants)))
    return Runner(options, on_verdict, on_note, markdown).run(variants)
