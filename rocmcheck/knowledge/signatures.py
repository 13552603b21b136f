"""The stderr signatures of known GPU runtime failures (data/signatures.json), matched over a crashed
or failed child's output and over a user's log, and the facts a log states (arch, versions)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Dict, List, Tuple

from . import DATA

SIGNATURES_FILE = DATA / "signatures.json"


@dataclass(frozen=True)
class Signature:
    id: str
    pattern: "re.Pattern[str]"
    meaning: str
    generic: bool  # names a family (any HIP error), not a cause


def _load() -> Tuple[List[Signature], Dict[str, List["re.Pattern[str]"]]]:
    data = json.loads(SIGNATURES_FILE.read_text(encoding="utf-8"))
    table = [Signature(s["id"], re.compile(s["pattern"], re.I if "i" in s.get("flags", "") else 0), s["meaning"],
                       bool(s.get("generic"))) for s in data["signatures"]]
    facts = {name: [re.compile(p) for p in patterns] for name, patterns in data["facts"].items()}
    return table, facts


# What known GPU runtime failures print (data/signatures.json), matched over a crashed or failed
# child's output and over a user's log; FACT_PATTERNS read what a log states (arch, versions).
SIGNATURES, FACT_PATTERNS = _load()
BY_MEANING = {s.meaning: s for s in SIGNATURES}


def signatures(text: str) -> List[str]:
    """The meanings of the known runtime-failure signatures found in `text`."""
    return [s.meaning for s in SIGNATURES if s.pattern.search(text)]
