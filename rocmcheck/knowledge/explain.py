"""`rocmcheck explain`: name what a user's own log shows.

Users arrive holding a log (a traceback, a watchdog line, dmesg, collect_env). The runtime
signatures of data/signatures.json and the kernel log's (host/kernellog.py's patterns) are found
in it with their lines; the facts the log states are read (logfacts: GPUs, archs, versions, OS,
container, ZLUDA); the failure classes they point to are ranked and refined by those facts
(classes: what the class means, what the text cannot tell, what to collect next); the known
issues are ranked (`known_issues.match_log`), confident only where the log's facts fit the
issue's scope and its class is the one the log leads with; and the facts are held against each
other and, where this machine can be read without touching the GPU, against its GPUs and its
torch wheel. Every pass over the text is a regex scan or a bisect (facts are read from a bounded
part of a big log), so a megabyte of training output costs milliseconds, and the result is
redacted before anyone sees it.
"""
from __future__ import annotations

import bisect
import codecs
import json
import os
import re
import subprocess
import sys
from typing import Any, Dict, List, Optional, Sequence

from ..errors import UsageError
from ..host import hostgpu
from ..redact import Redactor
from . import classes, known_issues, logfacts
from .signatures import KERNEL_SIGNATURES, SIGNATURES, could_match, text_bigrams

LINES_SHOWN = 3  # lines quoted per signature; the rest are counted
LINE_CHARS = 240  # a quoted line is cut around its match (one-line megabyte logs exist)
WHEEL_TIMEOUT_S = 60.0
# signatures whose fix depends on the GPU's arch: worth reading the wheel's arch list for
ARCH_SIGNATURES = {"hip-no-binary-for-gpu", "invalid-device-function", "cuda-no-kernel-image",
                   "tensile-library-missing", "null-address-fault", "cuda-arch-not-compatible", "kernel-image-invalid"}
# signatures after which the fix for an AMD arch (the wheel, the family override) is named
NO_CODE_SIGNATURES = {"hip-no-binary-for-gpu", "invalid-device-function", "tensile-library-missing",
                      "kernel-image-invalid"}
TEXT_HEAD = 8192  # characters looked at to tell a log from binary data
TEXT_CONTROLS = frozenset("\t\n\r\f\v\b\a\x1b")  # what logs print (colours, progress bars); other controls are binary
NOT_TEXT_SHARE = 0.05


def read_log(path: str) -> str:
    """The text of FILE, or of stdin for '-' (UTF-8 or UTF-16, see `decode`). Bad input: UsageError."""
    try:
        data = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()  # noqa: SIM115 - read at once
    except OSError as exc:
        raise UsageError(f"cannot read the log '{path}' ({exc.strerror or exc})") from None
    text = decode(data)
    if text is None:
        raise UsageError(f"'{path}' is not a text log (binary data)")
    if not text.strip():
        raise UsageError(f"the log '{path}' is empty" if path != "-" else "no log on stdin (pipe one in, or name FILE)")
    return text


def decode(data: bytes) -> Optional[str]:
    """The text of a log as users hand it over, or None for binary data. UTF-16 is what Windows
    PowerShell's `>` writes (with a BOM; without one it is told by a NUL in every other byte);
    anything else is read as UTF-8 with its NUL bytes dropped, since a log written up to a hard
    reset comes back padded with blocks of NULs. What is left must look like text: in its first
    TEXT_HEAD characters, undecodable bytes and control characters no log prints stay under
    NOT_TEXT_SHARE."""
    order = "utf-16" if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else _utf16_without_bom(data)
    if order:
        text = data.decode(order, errors="replace").replace("\0", "")
    else:
        text = data.replace(b"\0", b"").decode("utf-8-sig", errors="replace")
    head = text[:TEXT_HEAD]
    not_text = sum(1 for c in head if c == "\ufffd" or ((c < " " or c == "\x7f") and c not in TEXT_CONTROLS))
    return None if not_text > NOT_TEXT_SHARE * len(head) else text


def _utf16_without_bom(data: bytes) -> Optional[str]:
    """'utf-16-le' or 'utf-16-be' where the first TEXT_HEAD bytes have a NUL in nearly every odd
    (or even) byte and almost none in the others, as UTF-16 text of mostly ASCII has; else None.
    A run of NUL padding has NULs at both and is not mistaken for it."""
    head = data[:TEXT_HEAD]
    pairs = len(head) // 2
    if pairs < 8:
        return None
    even, odd = head[0:2 * pairs:2].count(0), head[1:2 * pairs:2].count(0)
    if odd >= 0.9 * pairs and even <= 0.1 * pairs:
        return "utf-16-le"
    if even >= 0.9 * pairs and odd <= 0.1 * pairs:
        return "utf-16-be"
    return None


def _quote(text: str, start: int, end: int) -> str:
    """The line holding text[start:end], cut to LINE_CHARS around the match."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    if line_end - line_start <= LINE_CHARS:
        return text[line_start:line_end].strip()
    left = max(line_start, start - LINE_CHARS // 3)
    return ("…" if left > line_start else "") + text[left:left + LINE_CHARS].strip() + "…"


def recognise(text: str) -> List[Dict[str, Any]]:
    """Each signature found in `text`: id, meaning, its failure class, how often, its first lines
    (1-based) and where it was first seen (`at`, an offset)."""
    newlines = [m.start() for m in re.finditer("\n", text)]
    lowered = text.lower()
    bigrams = text_bigrams(lowered)
    found = []
    for sig in [*SIGNATURES, *KERNEL_SIGNATURES]:
        if not could_match(sig.needles, lowered, bigrams):
            continue
        lines: List[Dict[str, Any]] = []
        count, last_line, first = 0, -1, -1
        for m in sig.pattern.finditer(text):
            number = bisect.bisect_left(newlines, m.start()) + 1
            if number == last_line:
                continue
            count, last_line = count + 1, number
            first = m.start() if first < 0 else first
            if len(lines) < LINES_SHOWN:
                lines.append({"line": number, "text": _quote(text, m.start(), m.end())})
        if count:
            found.append({"id": sig.id, "meaning": sig.meaning, "generic": sig.generic, "class": sig.klass,
                          "benign": sig.benign, "count": count, "lines": lines, "at": first})
    return found


def stated_facts(text: str, found_ids: List[str], at: Sequence[int] = ()) -> Dict[str, Any]:
    """What the log states (logfacts.read): GPUs and archs, versions, the override, the OS, a
    container and, from those and the signatures, the backend."""
    return logfacts.read(text, found_ids, at)


def wheel_facts() -> Optional[Dict[str, Any]]:
    """The installed torch's version and arch list, from a child that never initialises the GPU."""
    code = "import json; from rocmcheck.host.fingerprint import wheel_facts; print(json.dumps(wheel_facts()))"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=WHEEL_TIMEOUT_S, check=False)
        return json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def local_facts(read_wheel: bool) -> Dict[str, Any]:
    """This machine, read without touching the GPU: its cards' archs (KFD topology), the override
    in this environment and, when asked, the installed torch wheel."""
    host = hostgpu.read()
    return {"cards": [hostgpu.gfx_from_kfd(t) for t in host.kfd_gfx_targets],
            "override": os.environ.get("HSA_OVERRIDE_GFX_VERSION"),
            "wheel": wheel_facts() if read_wheel else None}


def _checks(facts: Dict[str, Any], found_ids: List[str], local: Optional[Dict[str, Any]],
            leading: Optional[str] = None) -> List[str]:
    """Where the stated facts disagree with each other or with this machine, and the fix for the
    arch the log shows when the build has no code for it (`leading`: the log's failure class)."""
    notes = []
    arch, override = facts.get("arch"), facts.get("hsa_override")
    if arch and override and hostgpu.gfx_version(arch):
        wanted = hostgpu.gfx_from_override(override)
        if hostgpu.gfx_major(wanted) != hostgpu.gfx_major(arch):
            notes.append(f"the log sets HSA_OVERRIDE_GFX_VERSION={override} ({wanted}) on a {arch}: a different "
                         "generation, whose code cannot run there: unset it")
    card, arch_list = arch, None
    if local:
        cards, wheel = local["cards"], local.get("wheel") or {}
        here = bool(cards) and (not arch or arch in cards)  # the log's GPU is this machine's
        if arch and arch.startswith("gfx") and cards and arch not in cards:
            notes.append(f"the log names {arch}; this machine's GPU{'s are' if len(cards) > 1 else ' is'} "
                         f"{', '.join(cards)}: the log comes from another machine, or an override is in effect")
        if local.get("override") and cards:
            wanted = hostgpu.gfx_from_override(local["override"])
            wrong = [c for c in cards if hostgpu.gfx_major(c) != hostgpu.gfx_major(wanted)]
            if wrong:
                notes.append(f"this machine sets HSA_OVERRIDE_GFX_VERSION={local['override']} ({wanted}) on "
                             f"{', '.join(wrong)}: a different generation: unset it")
        if wheel.get("torch"):
            listed = " ".join(wheel["arch_list"]) if wheel.get("arch_list") is not None else "unreadable"
            notes.append(f"this machine's torch {wheel['torch']} lists: {listed or 'no GPU arch (a CPU build)'}")
        if here:
            card, arch_list = card or cards[0], wheel.get("arch_list")
            override = override or local.get("override")
    if leading not in (None, "arch-not-in-build", "app-arch-list"):
        return notes  # a refined class (the iGPU picked, an arch dropped) says the fix itself
    if card and card.startswith("gfx") and NO_CODE_SIGNATURES & set(found_ids):
        notes.append(f"fix for {card}: " + hostgpu.arch_advice(card, arch_list, override))
    elif card and card.startswith("gfx") and leading == "app-arch-list" and classes.family_override(card):
        notes.append(f"fix for {card}: the app's libraries leave it out; on Linux its family's code runs under "
                     f"HSA_OVERRIDE_GFX_VERSION={classes.family_override(card)} set for the app's server, or use a "
                     f"build of the app for {card}")
    elif card and card.startswith("sm_") and leading == "arch-not-in-build":
        built = facts.get("wheel_archs")
        carried = logfacts.GPUS["cuda_arch_notes"].get(card)
        notes.append(f"fix for {card}: " + (f"the build lists {' '.join(built)}: " if built else "")
                     + _cuda_build_reading(card, built)
                     + f"install a torch whose arch list has {card}" + (f" ({carried})" if carried else ""))
    return notes


def _cuda_build_reading(card: str, built: Optional[List[str]]) -> str:
    """What an arch list says about the CUDA the build was made with, held against what the card
    needs: a list ending at sm_75 is a CUDA 10 build, and an sm_86 card needs CUDA 11.1 or newer."""
    newest = max((int(a[3:]) for a in built or () if a[3:].isdigit()), default=0)
    build = next((what for top, what in logfacts.GPUS["cuda_build_by_newest_arch"] if newest <= top), None)
    needs = logfacts.GPUS["cuda_min"].get(card)
    if not (newest and build and needs):
        return ""
    return f"its list ends at sm_{newest}, {build}; {card} needs CUDA {needs} or newer: "


def _undecided(issue: Dict[str, Any]) -> Dict[str, Any]:
    """An arch-not-in-build issue for a log that cannot tell it from a card too old for the build
    (a class marked `undecided` by `classes.classify`): possible, not confident, with what decides."""
    if issue.get("class") != "arch-not-in-build":
        return issue
    decide = [*issue["decide"], "the card's compute capability against the build's torch.cuda.get_arch_list() "
              "(below the oldest listed: the card is too old for the build, gpu-too-old)"]
    return {**issue, "confident": False, "decide": decide}


def _not_told(facts: Dict[str, Any], issues: List[Dict[str, Any]], found: List[Dict[str, Any]],
              leading: Optional[Dict[str, Any]]) -> List[str]:
    """What the text alone cannot settle, and what to collect next to settle it."""
    unknown = sorted({k for issue in issues for k in issue["unknown"]})
    notes = [f"{known_issues.LIMIT_NAMES.get(k, k)}: the log does not state it, and the known issues above "
             f"depend on it" for k in unknown]
    if leading:
        notes += [f"{c}: the text cannot tell" for c in leading["cannot_tell"]]
        notes += [f"collect next: {c}" for c in leading["collect"]]
    if found and not leading and not any(issue["confident"] for issue in issues):
        notes.append("which cause is behind the recognised errors: no known issue is named with confidence")
    if not facts.get("arch") and found and (not leading or any("arch" in c for c in leading["cannot_tell"])):
        notes.append("the GPU arch is not in the log (rocminfo or `rocmcheck env` shows it)")
    return list(dict.fromkeys(notes))


def explain(text: str, local: Optional[Dict[str, Any]] = None, redactor: Optional[Redactor] = None) -> Dict[str, Any]:
    """The whole answer for one log, redacted: signatures, failure classes (the leading one first,
    with what it means and what to collect), known issues (best first), stated facts, their
    checks against each other and `local` (this machine; None: not compared), what the text
    cannot tell, and the probes that would confirm it here."""
    everything = recognise(text)
    found = [f for f in everything if not f["benign"]]  # benign warnings are named, never diagnosed
    ids = [f["id"] for f in found]
    facts = stated_facts(text, ids, [f["at"] for f in found])
    failure_classes = classes.classify(found, facts)
    leading = failure_classes[0] if failure_classes else None
    lines = {f["id"]: [ln["text"] for ln in f["lines"]] for f in found}
    issues = known_issues.match_log(lines, facts, [f["id"] for f in found if not f["generic"]],
                                    leading["id"] if leading else None)
    if leading and leading.get("undecided"):
        issues = [_undecided(issue) for issue in issues]
    probes = list(dict.fromkeys([*(p for issue in issues if issue["confident"] for p in issue["confirm"]),
                                 *(leading["confirm"] if leading else ()),
                                 *(p for issue in issues for p in issue["confirm"])]))
    result = {"signatures": [{k: v for k, v in f.items() if k not in ("at", "benign")} for f in found],
              "benign": [{k: v for k, v in f.items() if k not in ("at", "benign")} for f in everything if f["benign"]],
              "classes": failure_classes, "known_issues": issues, "facts": facts,
              "checks": _checks(facts, ids, local, leading["id"] if leading else None),
              "not_told": _not_told(facts, issues, found, leading),
              "confirm": f"rocmcheck run {' '.join('--probe ' + p for p in probes)}" if probes else None,
              "lines": text.count("\n") + (1 if text and not text.endswith("\n") else 0)}
    redactor = redactor or Redactor()
    return {**redactor.data(result), "redaction": redactor.summary()}


def render(result: Dict[str, Any], source: str) -> str:
    """The answer as text for a terminal."""
    out = [f"rocmcheck explain: {source} ({result['lines']:,} lines)"]
    if not result["signatures"]:
        out.append("Nothing recognised: no known GPU runtime or library failure appears in this text.")
    else:
        out.append("Recognised:")
        for sig in result["signatures"]:
            more = f" (seen on {sig['count']} lines)" if sig["count"] > len(sig["lines"]) else ""
            out.append(f"  {sig['id']}: {sig['meaning']}{more}")
            out += [f"    line {ln['line']}: {ln['text']}" for ln in sig["lines"]]
    if result["benign"]:
        out.append("Benign (no GPU failure; nothing to fix):")
        out += [f"  {sig['id']}: {sig['meaning']} (line {sig['lines'][0]['line']})" for sig in result["benign"]]
    if result["classes"]:
        lead, *others = result["classes"]
        out.append(f"Failure class: {lead['title']} ({lead['id']})")
        out += [f"  why: {w}" for w in lead["why"]]
        out.append(f"  what to do: {lead['advice']}")
        if others:
            out.append("  also recognised: " + ", ".join(c["id"] for c in others))
    if result["known_issues"]:
        out.append("Known issues, best first:")
        for n, issue in enumerate(result["known_issues"], 1):
            tag = "matches" if issue["confident"] else "possible"
            out.append(f"  {n}. [{tag}] {issue['id']}: {issue.get('title', '')}")
            if issue["decide"]:
                out.append(f"     decided by: {'; '.join(issue['decide'])}")
            if issue.get("workaround"):
                out.append(f"     workaround: {issue['workaround']}")
            out += [f"     {link}" for link in issue.get("links", [])]
    stated = ", ".join(f"{k} {' '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in result["facts"].items())
    out.append(f"Stated in the log: {stated or 'no arch, version or OS'}")
    out += [f"  {note}" for note in result["checks"]]
    if result["not_told"]:
        out.append("Not told by the text:")
        out += [f"  {note}" for note in result["not_told"]]
    if result["confirm"]:
        out.append(f"Confirm on this machine: {result['confirm']}")
    out.append(result["redaction"])
    return "\n".join(out)
