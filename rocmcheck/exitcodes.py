"""Name how a child ended: POSIX signals, shell-style 128+N, Windows NTSTATUS codes,
and the stderr signatures of known GPU runtime failures."""
from __future__ import annotations

import json
import re
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

NTSTATUS = {
    0xC0000005: "STATUS_ACCESS_VIOLATION",
    0xC00000FD: "STATUS_STACK_OVERFLOW",
    0xC0000135: "STATUS_DLL_NOT_FOUND",
    0xC0000139: "STATUS_ENTRYPOINT_NOT_FOUND",
    0xC000001D: "STATUS_ILLEGAL_INSTRUCTION",
    0xC0000374: "STATUS_HEAP_CORRUPTION",
    0xC0000409: "STATUS_STACK_BUFFER_OVERRUN (fail-fast)",
    0xC000013A: "STATUS_CONTROL_C_EXIT",
    0xC0000017: "STATUS_NO_MEMORY",
}

SIGNATURES_FILE = Path(__file__).parent / "data" / "signatures.json"


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


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe(returncode: Optional[int], windows: bool = False) -> str:
    """A human name for a process's end: 'SIGSEGV', 'exit 3', 'STATUS_ACCESS_VIOLATION'."""
    if returncode is None:
        return "unknown"
    if windows:
        code = returncode & 0xFFFFFFFF
        if code in NTSTATUS:
            return f"{NTSTATUS[code]} (0x{code:08X})"
        if code == 3:
            return "abort() (exit 3)"
        return f"exit {code}" if code < 0x80000000 else f"NTSTATUS 0x{code:08X}"
    if returncode < 0:
        return signal_name(-returncode)
    if 128 < returncode < 128 + 65:
        return f"exit {returncode} ({signal_name(returncode - 128)} through a shell?)"
    return f"exit {returncode}"


def signal_of(returncode: Optional[int]) -> Optional[int]:
    """The POSIX signal that ended a process, if one did."""
    return -returncode if returncode is not None and returncode < 0 else None


def signatures(text: str) -> List[str]:
    """The meanings of the known runtime-failure signatures found in `text`."""
    return [s.meaning for s in SIGNATURES if s.pattern.search(text)]


def signature_ids(meanings: Iterable[str]) -> List[str]:
    """The ids of signatures recorded by their meanings (a verdict's evidence keeps meanings)."""
    return [BY_MEANING[m].id for m in meanings if m in BY_MEANING]
