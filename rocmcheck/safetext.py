"""Text from a child made safe once, where a verdict is built, for every output downstream.

A probe's message, output, traceback and measurements may hold anything: invalid UTF-8,
lone surrogates (text decoded with surrogateescape), NUL, terminal escape sequences that
would rewrite the user's terminal, secrets, megabytes. Encoding such text to UTF-8 fails (a
lost report), control characters are not allowed in XML (the junit report), and a secret
must not reach a file or a terminal. After `clean` a string encodes to UTF-8, holds no
control character but newline and tab, no escape sequence, no secret that `redact` knows,
and at most TEXT_LIMIT_CHARS characters (head and tail kept, the cut marked).
"""
from __future__ import annotations

import re
from typing import Any, Dict, Mapping

from .redact import Redactor

# CSI (ESC [ ... final, or the 8-bit CSI), OSC / DCS / APC / PM / SOS strings up to their
# terminator (BEL or ESC \), and two-character ESC sequences.
_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d-\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
)
# C0 controls but tab and newline, DEL, C1 controls, and the two XML non-characters.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffe\uffff]")
REPLACEMENT = "\ufffd"
# A probe's message, a measurement, a fact: the first and last half of this many characters
# are kept (the captured output is bounded the same way, in bytes, by `capture`).
TEXT_LIMIT_CHARS = 16 * 1024


def printable(text: Any) -> str:
    """`text` (str or bytes) as printable text: undecodable bytes and lone surrogates become
    U+FFFD, CR line ends become newlines, escape sequences go, other controls become U+FFFD."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    elif not isinstance(text, str):
        text = str(text)
    text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROLS.sub(REPLACEMENT, _ESCAPES.sub("", text))


def bounded(text: str, limit: int = TEXT_LIMIT_CHARS) -> str:
    """`text` cut to `limit` characters: its head and tail, the cut marked between them."""
    if len(text) <= limit:
        return text
    mark = f"\n[... {len(text)} characters, cut to {limit} by rocmcheck ...]\n"
    head = (limit - len(mark)) // 2
    return text[:head] + mark + text[len(text) - (limit - len(mark) - head):]


class _Boundary(Redactor):
    """Every string printable, redacted, then bounded; environment blocks keep every name."""

    def __init__(self) -> None:
        super().__init__(allow_list=False)

    def text(self, text: Any) -> str:
        return bounded(super().text(printable(text)))

    def data(self, value: Any) -> Any:
        return self.text(value) if isinstance(value, (bytes, bytearray)) else super().data(value)


def clean(text: Any) -> str:
    """`text` as safe text (see the module's docstring)."""
    return _Boundary().text(text)


def clean_tree(value: Any) -> Any:
    """`value` with every string in it (mapping keys included) cleaned, the values of an "env"
    mapping's secret-named variables and the value after a secret option in a list redacted;
    other leaves kept."""
    return _Boundary().data(value)


def clean_env(env: Mapping[str, Any]) -> Dict[str, Any]:
    """An environment block as a run report keeps it: every name, secret-named values redacted."""
    return _Boundary().env(env)
