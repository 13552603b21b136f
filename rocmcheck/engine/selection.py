"""Choosing variants: `--probe ID` globs, `-k` keyword expressions, gate membership, the gate set."""
from __future__ import annotations

import fnmatch
import re
from typing import Callable, Dict, Iterable, List, Optional

from ..errors import UsageError
from ..model import ProbeSpec, Variant

_TOKEN_RE = re.compile(r"\s*(\(|\)|\bnot\b|\band\b|\bor\b|[^\s()]+)")


def keyword_matcher(expr: str) -> Callable[[str], bool]:
    """pytest-style `-k`: case-insensitive substrings combined with and/or/not/()."""
    tokens: List[str] = [t for t in _TOKEN_RE.findall(expr) if t.strip()]
    pos = 0

    def peek() -> Optional[str]:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        if pos >= len(tokens):
            raise UsageError(f"-k expression '{expr}' ends too early")
        pos += 1
        return tokens[pos - 1]

    def parse_or() -> Callable[[str], bool]:
        terms = [parse_and()]
        while peek() == "or":
            take()
            terms.append(parse_and())
        return lambda s: any(term(s) for term in terms)

    def parse_and() -> Callable[[str], bool]:
        factors = [parse_not()]
        while peek() == "and":
            take()
            factors.append(parse_not())
        return lambda s: all(factor(s) for factor in factors)

    def parse_not() -> Callable[[str], bool]:
        if peek() == "not":
            take()
            inner = parse_not()
            return lambda s: not inner(s)
        token = take()
        if token == "(":
            inner = parse_or()
            if take() != ")":
                raise UsageError(f"-k expression '{expr}': missing ')'")
            return inner
        if token in (")", "and", "or"):
            raise UsageError(f"-k expression '{expr}': unexpected '{token}'")
        word = token.lower()
        return lambda s: word in s.lower()

    if not tokens:
        raise UsageError("-k expression is empty")
    matcher = parse_or()
    if pos != len(tokens):
        raise UsageError(f"-k expression '{expr}': unexpected '{tokens[pos]}'")
    return matcher


def select(registry: Dict[str, ProbeSpec], probes: Iterable[str] = (), keyword: str = "",
           gate_only: Optional[bool] = False, level: Optional[int] = 1) -> List[Variant]:
    """The variants to run, in registry order; an id glob that matches nothing is an error. `gate_only`: the
    gate's variants (True), `run`'s (False: not a probe's `gate_variants`, which stand for some of them) or
    every one (None, as `rocmcheck list` shows them). Of a probe with levels (a `level` parameter) only the
    variants of `level` run (`--level`; None: every level)."""
    patterns = list(probes)
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(pid, pattern) for pid in registry):
            raise UsageError(f"unknown probe id '{pattern}' (see: rocmcheck list)")
    match_kw = keyword_matcher(keyword) if keyword else (lambda s: True)
    chosen = []
    for pid in sorted(registry):
        if patterns and not any(fnmatch.fnmatchcase(pid, p) for p in patterns):
            continue
        for variant in registry[pid].expand():
            if (gate_only and not variant.in_gate()) or (gate_only is False and variant.gate_only):
                continue
            if level is not None and variant.params.get("level", level) != level:
                continue
            if match_kw(variant.id):
                chosen.append(variant)
    return chosen


def gate_variants(specs: Dict[str, ProbeSpec], require: Iterable[str] = (), level: int = 1) -> List[Variant]:
    """The gate set; `require` replaces it with the named probes (their gate variants, or
    all their variants when they have none in the gate), which narrows or widens it. With
    `level` 2 or 3 (`gate --level`), the variants of probes with levels are those of that level,
    every probe with a variant of it included (gpu-memory, sustained-load): a node's level-2
    check gets the node verdict, the drain reason and the metrics the gate gives."""
    patterns = list(require)
    if not patterns:
        chosen = select(specs, gate_only=True)
        if level == 1:
            return chosen
        levelled = [v for v in select(specs, level=level) if "level" in v.params]
        return [v for v in chosen if "level" not in v.params] + levelled
    chosen = []
    for pattern in patterns:
        for probe_variants in [select(specs, [pid], gate_only=None, level=level) for pid in sorted(specs)
                               if fnmatch.fnmatchcase(pid, pattern)]:
            in_gate = [v for v in probe_variants if v.in_gate()]
            chosen.extend(in_gate or probe_variants)
        if not any(fnmatch.fnmatchcase(pid, pattern) for pid in specs):
            raise UsageError(f"unknown probe id '{pattern}' (see: rocmcheck list)")
    return list({v.id: v for v in chosen}.values())
