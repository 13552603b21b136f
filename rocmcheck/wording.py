"""How counts are written for people: "1 verdict", "10 variants of 1 probe".

One helper, so that no output says "(1 verdicts)" or "1 probes", and none hedges with "(s)".
"""
from __future__ import annotations

from typing import Optional


def counted(n: int, noun: str, plural: Optional[str] = None) -> str:
    """`n` and the noun in the number it takes: counted(1, "probe") -> "1 probe", counted(0, "probe")
    -> "0 probes"; `plural` for a noun whose plural is not noun + "s" (counted(2, "entry", "entries"))."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"
