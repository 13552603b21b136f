"""Known issues: match verdicts against documented failures and attach the workaround.

Entries live in data files (JSON), not code: the built-in `data/known_issues/*.json`
(one file per probe family) plus any files named in ROCMCHECK_KNOWN_ISSUES
(os.pathsep-separated). An entry
matches on probe id (glob), variant (glob), statuses, device arch (glob), OS and
version ranges of torch/HIP/ROCm/CUDA; every field it names must match.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .errors import UsageError
from .model import Status, Verdict

NOTABLE = [s.value for s in Status if s.is_notable]  # the statuses an entry matches unless it names its own

KNOWN_ISSUES_ENV = "ROCMCHECK_KNOWN_ISSUES"
BUILTIN_DIR = Path(__file__).parent / "data" / "known_issues"
VERSION_KEYS = ("torch", "hip", "rocm", "cuda", "python")
_RANGE_RE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*([0-9][0-9a-zA-Z.+-]*)\s*$")


def parse_version(text: Optional[str]) -> Tuple[int, ...]:
    """'2.13.0+rocm7.2' -> (2, 13, 0); leading numeric parts only."""
    parts = []
    for piece in re.split(r"[.+-]", str(text or "")):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def in_range(version: Optional[str], spec: str) -> bool:
    """Whether `version` satisfies every clause of `spec` (e.g. '>=2.9,<2.12')."""
    if not version:
        return False
    have = parse_version(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        match = _RANGE_RE.match(clause)
        if not match:
            raise UsageError(f"known-issue version range '{spec}' is not valid")
        op, want = match.group(1), parse_version(match.group(2))
        width = max(len(have), len(want))
        a, b = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
        if not {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[op]:
            return False
    return True


def _load_file(path: Path) -> List[Dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except OSError as exc:
        raise UsageError(f"known-issues file '{path}': cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise UsageError(f"known-issues file '{path}': not valid JSON ({exc})") from None
    entries = data.get("issues") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and e.get("id") and e.get("probe")
                                                  for e in entries):
        raise UsageError(f"known-issues file '{path}': expected {{\"issues\": [{{\"id\":..., \"probe\":...}}]}}")
    for entry in entries:
        problem = _problem(entry)
        if problem:
            raise UsageError(f"known-issues file '{path}': entry '{str(entry['id'])[:60]}': {problem}")
    return entries


def _problem(entry: Dict[str, Any]) -> Optional[str]:
    """What makes an entry unusable, found when the file is loaded (at the start of a run), not
    when the first failing verdict is matched against it."""
    for key in ("id", "probe", "variant", "backend", "message", "title", "workaround", *VERSION_KEYS):
        if key in entry and not isinstance(entry[key], str):
            return f"'{key}' must be a string"
    for key in ("status", "arch", "os", "links"):
        if key in entry and not (isinstance(entry[key], list) and all(isinstance(v, str) for v in entry[key])):
            return f"'{key}' must be a list of strings"
    unknown = sorted(set(entry.get("status", [])) - {s.value for s in Status})
    if unknown:
        return f"unknown status '{unknown[0]}'"
    for key in VERSION_KEYS:
        if key in entry and not all(_RANGE_RE.match(c) for c in filter(None, map(str.strip, entry[key].split(",")))):
            return f"version range {key} '{entry[key][:40]}' is not valid (e.g. '>=2.9,<2.12')"
    try:
        re.compile(entry.get("message", ""))
    except re.error as exc:
        return f"'message' is not a valid regular expression ({exc})"
    return None


@lru_cache(maxsize=None)
def _entries(extra: str) -> Tuple[Dict[str, Any], ...]:
    paths = [*sorted(BUILTIN_DIR.glob("*.json")), *(Path(p) for p in extra.split(os.pathsep) if p)]
    return tuple(e for path in paths for e in _load_file(path))


def entries() -> Tuple[Dict[str, Any], ...]:
    """Every entry, built in and from $ROCMCHECK_KNOWN_ISSUES, checked (a UsageError otherwise):
    called before a run starts, so a broken file is bad input, not an error at the first failure."""
    return _entries(os.environ.get(KNOWN_ISSUES_ENV, ""))


def _facts(fingerprint: Dict[str, Any]) -> Dict[str, Any]:
    dfacts = fingerprint.get("device_facts") or {}
    host = fingerprint.get("host") or {}
    return {"arch": (fingerprint.get("device") or {}).get("arch") or "",
            "os": (host.get("system") or "").lower() + (" wsl" if host.get("wsl") else ""),
            "torch": dfacts.get("torch"), "hip": dfacts.get("hip"), "rocm": dfacts.get("rocm"),
            "cuda": dfacts.get("cuda"), "python": host.get("python"), "backend": dfacts.get("backend")}


def matches(entry: Dict[str, Any], verdict: Verdict, facts: Dict[str, Any]) -> bool:
    if not fnmatch.fnmatchcase(verdict.probe, entry["probe"]):
        return False
    if "variant" in entry and not fnmatch.fnmatchcase(verdict.variant, entry["variant"]):
        return False
    if verdict.status.value not in entry.get("status", NOTABLE):
        return False
    if "arch" in entry and not any(fnmatch.fnmatchcase(facts["arch"], a) for a in entry["arch"]):
        return False
    if "os" in entry and not any(o in facts["os"] for o in entry["os"]):
        return False
    if "backend" in entry and facts.get("backend") != entry["backend"]:
        return False
    if "message" in entry and not re.search(entry["message"], verdict.message + " " + str(verdict.evidence), re.I):
        return False
    return all(in_range(facts.get(key), entry[key]) for key in VERSION_KEYS if key in entry)


def match(verdict: Verdict, fingerprint: Dict[str, Any]) -> List[Dict[str, Any]]:
    facts = _facts(fingerprint)
    return [{k: e[k] for k in ("id", "title", "workaround", "links") if k in e}
            for e in entries() if matches(e, verdict, facts)]


def annotate(verdict: Verdict, fingerprint: Dict[str, Any]) -> None:
    """Attach matching known issues to a verdict that did not pass."""
    if verdict.status.is_notable:
        verdict.known_issues = match(verdict, fingerprint)
