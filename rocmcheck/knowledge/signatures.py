"""The stderr signatures of known GPU runtime failures (data/signatures.json), matched over a crashed
or failed child's output and over a user's log, and the facts a log states (versions, the override)."""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..host import kernellog
from . import DATA

if sys.version_info >= (3, 11):
    from re import _parser as sre_parse
else:  # pragma: no cover - older Python
    import sre_parse

SIGNATURES_FILE = DATA / "signatures.json"


@dataclass(frozen=True)
class Signature:
    id: str
    pattern: "re.Pattern[str]"
    meaning: str
    generic: bool  # names a family (any HIP error), not a cause
    klass: Optional[str] = None  # the failure class it points to (data/failure_classes.json)
    logs_only: bool = False  # matched over a user's log only: its words also appear in a probe's progress lines
    benign: bool = False  # a warning that names no failure (a library's fallback notice): said so, never diagnosed
    needles: Tuple[str, ...] = field(default=(), compare=False)  # see literals()

    def __post_init__(self) -> None:
        object.__setattr__(self, "needles", literals(self.pattern))


def _required(seq: Sequence[Any]) -> Optional[List[str]]:
    """Strings one of which every match of the parsed sequence `seq` contains, the most selective
    set found (None: none known)."""
    candidates: List[List[str]] = []
    run: List[str] = []
    for op, arg in seq:
        name = str(op)
        if name == "LITERAL":
            run.append(chr(arg))
            continue
        if run:
            candidates.append(["".join(run)])
            run = []
        sub: Optional[List[str]] = None
        if name == "SUBPATTERN":
            sub = _required(arg[-1])
        elif name == "BRANCH":
            alternatives = [_required(branch) for branch in arg[1]]
            sub = [s for alt in alternatives for s in alt] if all(alternatives) else None  # type: ignore[union-attr]
        elif name in ("MAX_REPEAT", "MIN_REPEAT") and arg[0] >= 1:
            sub = _required(arg[2])
        if sub:
            candidates.append(sub)
    if run:
        candidates.append(["".join(run)])
    if not candidates:
        return None
    # the most selective: the longest shortest string, then the fewest strings, then the last
    best = max(enumerate(candidates), key=lambda nc: (min(map(len, nc[1])), -len({s.lower() for s in nc[1]}), nc[0]))
    return best[1]


def literals(pattern: "re.Pattern[str]") -> Tuple[str, ...]:
    """Lower-cased strings one of which every match of `pattern` contains: a log whose lower-cased
    text holds none of them cannot match, so the regex is not run (a `in` test is a memchr, a
    regex with an alternation or the i flag is 5-10x a literal scan). () when none are known."""
    found = _required(sre_parse.parse(pattern.pattern, pattern.flags).data)
    return tuple(dict.fromkeys(s.lower() for s in found)) if found and min(map(len, found)) >= 2 else ()


# a text at least this long is first reduced to the table of byte pairs it holds: one vectorised pass
# (numpy, ~7 ms a MiB) lets most needles be ruled out without a scan (~0.4 ms a MiB each, ~190 needles)
BIGRAM_GATE = 1 << 20


def text_bigrams(lowered: str) -> Optional[bytes]:
    """Which byte pairs occur in `lowered` (a 65536-byte table, non-zero where pair a,b occurs at
    a * 256 + b), for a text long enough that building it costs less than the scans it saves;
    None for a shorter one (numpy's import alone costs more than a small log's scans)."""
    if len(lowered) < BIGRAM_GATE:
        return None
    import numpy as np  # noqa: PLC0415 - big logs only

    data = np.frombuffer(lowered.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    table = np.zeros(1 << 16, dtype=np.uint8)
    table[(data[:-1].astype(np.uint16) << 8) | data[1:]] = 1
    return table.tobytes()


def could_match(needles: Tuple[str, ...], lowered: str, bigrams: Optional[bytes] = None) -> bool:
    """Whether a text whose lower-cased form is `lowered` may match a pattern with these `needles`
    (`bigrams`: its text_bigrams, which rule a needle out without a scan when one of its byte pairs
    never occurs)."""
    return not needles or any(_pairs_occur(n, bigrams) and n in lowered for n in needles)


def _pairs_occur(needle: str, bigrams: Optional[bytes]) -> bool:
    if bigrams is None:
        return True
    raw = needle.encode("utf-8", "surrogatepass")
    return all(bigrams[(a << 8) | b] for a, b in zip(raw, raw[1:]))


def _load() -> Tuple[List[Signature], List[Signature], Dict[str, List["re.Pattern[str]"]]]:
    data = json.loads(SIGNATURES_FILE.read_text(encoding="utf-8"))
    table = [Signature(s["id"], re.compile(s["pattern"], re.I if "i" in s.get("flags", "") else 0), s["meaning"],
                       bool(s.get("generic")), s.get("class"), bool(s.get("logs_only")), bool(s.get("benign")))
             for s in data["signatures"]]
    # the kernel log's kinds are kernellog's patterns, so a dmesg line reads the same in a run and in a log
    kernel = [Signature(data["kernel"][kind]["id"], pattern, data["kernel"][kind]["meaning"], False,
                        data["kernel"][kind]["class"], True) for kind, pattern in kernellog.PATTERNS]
    facts = {name: [re.compile(p) for p in patterns] for name, patterns in data["facts"].items()}
    return table, kernel, facts


# What known GPU runtime failures print (data/signatures.json), matched over a crashed or failed
# child's output and over a user's log; KERNEL_SIGNATURES are the kernel log's (explain only);
# FACT_PATTERNS read what a log states (versions, the override).
SIGNATURES, KERNEL_SIGNATURES, FACT_PATTERNS = _load()
BY_MEANING = {s.meaning: s for s in SIGNATURES}


def signatures(text: str) -> List[str]:
    """The meanings of the known runtime-failure signatures found in `text` (a child's output)."""
    return [s.meaning for s in SIGNATURES if not s.logs_only and s.pattern.search(text)]
