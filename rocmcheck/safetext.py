"""Text from a child made safe once, where a verdict is built, for every output downstream.

A probe's message, output, traceback and measurements may hold anything: invalid UTF-8,
lone surrogates (text decoded with surrogateescape), NUL, terminal escape sequences that
would rewrite the user's terminal. Encoding such text to UTF-8 fails (a lost report), and
control characters are not allowed in XML (the junit report). After `clean` a string
encodes to UTF-8, holds no control character but newline and tab, and no escape sequence.
"""
from __future__ import annotations

import re
from typing import Any

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


def clean(text: Any) -> str:
    """`text` (str or bytes) as safe text: undecodable bytes and lone surrogates become
    U+FFFD, CR line ends become newlines, escape sequences go, other controls become U+FFFD."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    elif not isinstance(text, str):
        text = str(text)
    text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROLS.sub(REPLACEMENT, _ESCAPES.sub("", text))


def clean_tree(value: Any) -> Any:
    """`value` with every string in it (mapping keys included) cleaned; other leaves kept."""
    if isinstance(value, (str, bytes, bytearray)):
        return clean(value)
    if isinstance(value, dict):
        return {clean(k) if isinstance(k, str) else k: clean_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_tree(v) for v in value]
    return value
