"""Known issues: match verdicts against documented failures and attach the workaround.

Entries live in data files (JSON), not code: the built-in `data/known_issues/*.json`
(one file per probe family) plus any files named in ROCMCHECK_KNOWN_ISSUES
(os.pathsep-separated). An entry
matches on probe id (glob), variant (glob), statuses, device arch (glob), OS (and `not_os`: an OS
it never applies to, such as WSL for a bare-metal driver issue), version
ranges of torch/HIP/ROCm/CUDA and CPU flags (`cpu_flags`: every flag listed must be in the host's
/proc/cpuinfo, for a CPU kernel that misbehaves only on some instruction sets); every field it
names must match.

`message` and `signatures` match what the verdict says about the failure (its message,
its exception's last line, the runtime signatures recognised in its output), never the
probe's own progress lines: a case named "v-strided" that passed must not name the
non-contiguous-V issue. `match_log` holds the same entries against a user's log
(`rocmcheck explain`): there an entry is found by its `signatures` (ids in
data/signatures.json), its `message` is matched on the lines they were seen on, and a
limit the log does not state leaves the match unconfirmed, and so does an entry of another failure
`class` than the one the log leads with (an arch-not-in-build remedy for a log whose iGPU was
picked first is possible, not confident).

`scope` says which pattern of failures across a run an entry explains, where its probe and
variant alone would claim too much: `side-stream-copy-wrong` explains a side-stream copy that
fails while the same pinned copy on the default stream passes; when every copy method fails,
"copy on the default stream" would not help. Its `passing` lists parameter changes, each naming
a control: the failing variant with those parameters, on the same device of the same run. An
entry whose control failed too does not fit: the verdict gets it in `unfit_issues` (with why)
instead of `known_issues`, and the outputs say that no known issue fits. A control that did not
run contradicts nothing. `judged` is that judgement, the one every front-end uses (the runner at
the end of a run, `report`, `matrix`, doctor), so none shows an entry its own scope rules out.
"""
from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ..errors import UsageError
from ..model import Status, Verdict
from . import DATA, read_data
from .signatures import signatures

NOTABLE = [s.value for s in Status if s.is_notable]  # the statuses an entry matches unless it names its own

KNOWN_ISSUES_ENV = "ROCMCHECK_KNOWN_ISSUES"
BUILTIN_DIR = DATA / "known_issues"
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
    data = read_data(path, "known-issues file")
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
    for key in ("id", "probe", "variant", "backend", "message", "title", "workaround", "class", *VERSION_KEYS):
        if key in entry and not isinstance(entry[key], str):
            return f"'{key}' must be a string"
    for key in ("status", "arch", "os", "not_os", "cpu_flags", "links", "signatures"):
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
    return _scope_problem(entry["scope"]) if "scope" in entry else None


def _scope_problem(scope: Any) -> Optional[str]:
    if not isinstance(scope, dict):
        return "'scope' must be an object with 'explains' and 'passing'"
    if not isinstance(scope.get("explains"), str) or not scope["explains"]:
        return "'scope' needs 'explains': the pattern of failures the entry explains, in words"
    passing = scope.get("passing")
    if not isinstance(passing, list) or not passing or not all(isinstance(p, dict) and p for p in passing):
        return "'scope' needs 'passing': a non-empty list of parameter changes, e.g. [{\"method\": \"pinned\"}]"
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
            "cuda": dfacts.get("cuda"), "python": host.get("python"), "backend": dfacts.get("backend"),
            "cpu_flags": host.get("cpu_flags")}


def failure_text(verdict: Verdict) -> str:
    """What a verdict says about its failure: its message, the last line of its exception and
    the meanings of the runtime signatures in its output (not the output itself: a probe's
    progress lines name its cases, failing or not)."""
    evidence = verdict.evidence or {}
    lines = [ln for ln in str(evidence.get("traceback") or "").splitlines() if ln.strip()]
    output = "\n".join(str(evidence.get(k) or "") for k in ("output_tail", "stack", "traceback"))
    meanings = dict.fromkeys([*map(str, evidence.get("signatures") or []), *signatures(output)])
    return "\n".join([verdict.message, *lines[-1:], *meanings])


def _limit(entry: Dict[str, Any], facts: Dict[str, Any]) -> Dict[str, Optional[bool]]:
    """Each limit the entry names (arch, os, backend, versions): True/False against the facts,
    None where the facts do not say."""
    found: Dict[str, Optional[bool]] = {}
    if "arch" in entry:
        found["arch"] = any(fnmatch.fnmatchcase(facts["arch"], a) for a in entry["arch"]) if facts.get("arch") else None
    if "os" in entry:
        found["os"] = any(o in facts["os"] for o in entry["os"]) if facts.get("os") else None
    if "not_os" in entry:
        found["not_os"] = not any(o in facts["os"] for o in entry["not_os"]) if facts.get("os") else None
    if "backend" in entry:
        found["backend"] = facts["backend"] == entry["backend"] if facts.get("backend") else None
    if "cpu_flags" in entry:
        have = facts.get("cpu_flags")
        found["cpu_flags"] = set(entry["cpu_flags"]) <= set(map(str, have)) if isinstance(have, list) else None
    for key in VERSION_KEYS:
        if key in entry:
            found[key] = in_range(facts[key], entry[key]) if facts.get(key) else None
    return found


def matches(entry: Dict[str, Any], verdict: Verdict, facts: Dict[str, Any]) -> bool:
    if not fnmatch.fnmatchcase(verdict.probe, entry["probe"]):
        return False
    if "variant" in entry and not fnmatch.fnmatchcase(verdict.variant, entry["variant"]):
        return False
    if verdict.status.value not in entry.get("status", NOTABLE):
        return False
    if "message" in entry and not re.search(entry["message"], failure_text(verdict), re.I):
        return False
    limits = _limit(entry, facts)
    if limits.get("not_os") is None:  # a host that does not say its OS is not one the entry rules out
        limits.pop("not_os", None)
    return all(limits.values())


def _public(entry: Dict[str, Any]) -> Dict[str, Any]:
    return {k: entry[k] for k in ("id", "title", "workaround", "links", "class") if k in entry}


def _probe(verdict: Verdict) -> str:
    return verdict.probe or verdict.variant.split("[")[0]  # reports from before probe ids were recorded


def _contradicted(entry: Dict[str, Any], verdict: Verdict, fellows: Sequence[Verdict]) -> List[str]:
    """The controls of `entry`'s scope that failed beside `verdict` (same probe, same device)."""
    gpu = verdict.device.get("name")
    controls = [{**verdict.params, **change} for change in entry.get("scope", {}).get("passing", [])]
    return [f.variant for f in fellows
            if f.status.is_bad and f.params in controls and f.params != verdict.params
            and _probe(f) == _probe(verdict) and f.device.get("name") == gpu]


def judged(verdicts: Sequence[Verdict], fingerprint: Dict[str, Any],
           fellows: Optional[Sequence[Verdict]] = None) -> List[Verdict]:
    """`verdicts` with the known issues that fit each notable one, judged against `fellows` (the
    run's verdicts; default `verdicts`): `known_issues` the entries that match and whose scope
    fits, `unfit_issues` those whose scope a failed control rules out, with why. An issue
    recorded by a data file not loaded here cannot be judged again and is kept."""
    fellows = verdicts if fellows is None else fellows
    facts = _facts(fingerprint)
    current = {e["id"] for e in entries()}
    out = []
    for verdict in verdicts:
        if not verdict.status.is_notable:
            out.append(verdict)
            continue
        kept = [i for i in verdict.known_issues if str(i.get("id")) not in current]
        fits, unfit = [], []
        probed = replace(verdict, probe=_probe(verdict))
        for entry in entries():
            if not matches(entry, probed, facts):
                continue
            failed = _contradicted(entry, verdict, fellows)
            if failed:
                unfit.append({"id": entry["id"], "title": entry.get("title", entry["id"]),
                              "why": f"it explains {entry['scope']['explains']}, but {', '.join(failed)} "
                                     f"failed too"})
            else:
                fits.append(_public(entry))
        out.append(replace(verdict, known_issues=[*kept, *fits], unfit_issues=unfit))
    return out


def match(verdict: Verdict, fingerprint: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The known issues of `verdict` judged on its own: no other verdict to rule a scope out."""
    return judged([verdict], fingerprint)[0].known_issues


def match_log(found: Dict[str, List[str]], facts: Dict[str, Any], specific: Iterable[str],
              leading: Optional[str] = None) -> List[Dict[str, Any]]:
    """Known issues for the signatures recognised in a log (`found`: id -> the lines it was seen
    on), best first. An entry needs one of its `signatures` and, if it has a `message`, that
    pattern on one of those lines; a limit the `facts` contradict rules it out. It is
    `confident` when a `specific` (not generic) signature named it, every limit is stated and
    met, and its `class` (if any) is `leading`, the failure class the log leads with; `unknown`
    lists the limits the log does not state, `decide` what would settle a possible one."""
    specific = set(specific)
    ranked = []
    for entry in entries():
        hits = [sid for sid in entry.get("signatures", ()) if sid in found]
        lines = [line for sid in hits for line in found[sid]]
        if not hits or ("message" in entry and not any(re.search(entry["message"], ln, re.I) for ln in lines)):
            continue
        limits = _limit(entry, facts)
        if False in limits.values():
            continue
        unknown = sorted(k for k, ok in limits.items() if ok is None)
        fits_class = leading is None or entry.get("class", leading) == leading
        confident = bool(specific & set(hits)) and not unknown and fits_class
        decide = [f"{LIMIT_NAMES.get(k, k)} ({', '.join(_scope(entry, k))})" for k in unknown]
        if not fits_class:
            decide.append(f"whether the failure is {entry['class']} (the log leads with {leading})")
        score = (confident, fits_class, len(specific & set(hits)), len(limits) - len(unknown), "message" in entry)
        ranked.append((score, {**_public(entry), "confident": confident, "unknown": unknown, "decide": decide,
                               "signatures": hits, "confirm": entry.get("confirm") or _confirm(entry)}))
    ranked.sort(key=lambda pair: pair[0], reverse=True)
    return [item for _, item in ranked]


LIMIT_NAMES = {"arch": "the GPU arch", "os": "the operating system", "not_os": "the operating system",
               "backend": "whether it is a ROCm or CUDA build", "torch": "the torch version",
               "rocm": "the ROCm version", "hip": "the HIP version", "cuda": "the CUDA version",
               "python": "the Python version", "cpu_flags": "the CPU's instruction sets"}


def _scope(entry: Dict[str, Any], key: str) -> List[str]:
    """The values of limit `key` an entry applies to, in words."""
    value = entry[key]
    if key == "not_os":
        return [f"not {v}" for v in value]
    return list(value) if isinstance(value, list) else [value]


def _confirm(entry: Dict[str, Any]) -> List[str]:
    """The probes that would confirm an entry on this machine: its own, unless it is any probe."""
    return [] if entry["probe"] == "*" else [entry["probe"]]
