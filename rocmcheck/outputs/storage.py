"""Results that survive: the JSON Lines journal, atomic report files, and the loader.

Every record reaches disk (flush + fsync) as it happens, with a `started` record
before each probe so a frozen machine still shows the culprit after a reboot. The
final report is written to a temporary file and published under its name at once.
A run's own files (named by its run id, which carries host, pid and a random part)
are created exclusively, so no run can replace or interleave with another's in a
shared folder. Every file is created 0666 less the umask (0644 under the usual
022), the journal and the reports alike. The loader accepts a report or a journal,
tolerates a truncated last line, and rejects an unknown schema major with a
one-line error.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import socket
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..errors import UsageError
from ..jsonsafe import jsonsafe

SCHEMA = "rocmcheck-report"
SCHEMA_VERSION = "1.0"
SCHEMA_MAJOR = 1


def new_run_id() -> str:
    """Sortable by time, unique across hosts: date-time, host name, pid, a random part.
    Two containers whose entrypoint is PID 1, started in the same second on different
    nodes (or on the same one), still get different ids."""
    host = re.sub(r"[^A-Za-z0-9-]+", "-", socket.gethostname().split(".")[0]).strip("-")[:32] or "host"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{host}-{os.getpid()}-{secrets.token_hex(3)}"


def report_paths(out_dir: Path, run_id: str, json_path: Optional[Path] = None,
                 md_path: Optional[Path] = None) -> Dict[str, Path]:
    """Where a run's journal, JSON and Markdown go: `--json`/`--md` where given, else OUT_DIR."""
    base = Path(out_dir) / f"rocmcheck-{run_id}"
    return {"jsonl": base.with_suffix(".jsonl"), "json": json_path or base.with_suffix(".json"),
            "md": md_path or base.with_suffix(".md")}


def dumps(data: Any) -> str:
    return json.dumps(jsonsafe(data), allow_nan=False, indent=None, separators=(",", ":"))


class Journal:
    """Append-only JSON Lines file, each record flushed and fsynced; created exclusively
    (FileExistsError rather than two runs appending to one file)."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(path, "x", encoding="utf-8")

    def append(self, record: Dict[str, Any]) -> None:
        record = {"t": round(time.time(), 3), **record}
        self._fh.write(dumps(record) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


def write_atomic(path: Path, text: str, replace: bool = True) -> None:
    """Write `text` to `path` so that readers see the old file (or none) or the whole new one.
    `replace=False` publishes only if no file has the name (FileExistsError otherwise): a
    run's own files never replace another run's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask decides, as for any tool
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if replace:
            _replace(tmp, path)
        else:
            _publish_new(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    if hasattr(os, "O_DIRECTORY"):
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _replace(tmp: Path, path: Path) -> None:
    for attempt in range(10):  # Windows: a virus scanner may hold the target briefly
        try:
            os.replace(tmp, path)
            return
        except PermissionError:
            if attempt == 9:
                raise
            time.sleep(0.1)


def _publish_new(tmp: Path, path: Path) -> None:
    """Give the written file its name unless the name exists: a hard link fails on an existing
    name (atomic, whole file); where links are not supported, an exclusive create and copy."""
    try:
        os.link(tmp, path)
        return
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links (some FUSE, SMB and FAT mounts)
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as out, open(tmp, "rb") as src:
            out.write(src.read())
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        os.unlink(path)  # ours, and cut short: no half file under the run's name
        raise


def report_json(report: Dict[str, Any]) -> str:
    """Serialise a report with the schema fields first."""
    ordered = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION}
    ordered.update({k: v for k, v in report.items() if k not in ordered})
    return json.dumps(jsonsafe(ordered), allow_nan=False, indent=2) + "\n"


# --- loading ---------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-JSON constant {name}")


def parse_json(text: str, what: str) -> Any:
    """JSON text (no NaN or Infinity) or a one-line UsageError naming `what`."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise UsageError(f"{what}: nested too deeply to be a rocmcheck report") from None
    except ValueError as exc:  # JSONDecodeError, huge integers, NaN
        raise UsageError(f"{what}: not valid JSON ({str(exc).splitlines()[0]})") from None


def check_schema(data: Any, what: str) -> None:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UsageError(f"{what}: not a rocmcheck report")
    version = str(data.get("schema_version", ""))
    major = version.split(".")[0]
    shown = version if len(version) <= 20 else version[:20] + "…"
    if not re.fullmatch(r"[0-9]+", major):  # str.isdigit() accepts '²', which int() rejects
        raise UsageError(f"{what}: schema version {shown!r} is not valid")
    if (major.lstrip("0") or "0") != str(SCHEMA_MAJOR):  # as text: int() refuses 4,300 digits and more
        raise UsageError(f"{what}: schema version {shown} is not supported (this rocmcheck reads {SCHEMA_MAJOR}.x)")


def read_text(path: Path) -> str:
    """A UTF-8 file's text, or a one-line UsageError (unreadable, empty, not UTF-8)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not raw.strip():
        raise UsageError(f"{path}: empty file")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None


def journal_to_report(lines: List[str], what: str) -> Dict[str, Any]:
    """Rebuild a (partial) report from a journal; a truncated last line is dropped."""
    records = []
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(parse_json(line, what))
        except UsageError:
            if number == len(lines) - 1:
                break  # the write that was cut off by a crash
            raise
    header = records[0] if records else None
    check_schema(header, what)
    verdicts, started, end = [], None, None
    for rec in records[1:]:
        kind = rec.get("record") if isinstance(rec, dict) else None
        if kind == "started":
            started = rec.get("variant")
        elif kind == "verdict":
            verdicts.append(rec.get("verdict"))
            started = None
        elif kind == "end":
            end = rec
    report = _conform({**{k: v for k, v in header.items() if k not in ("record", "t")}, "verdicts": verdicts})
    run = report["run"]
    if end is None:
        run["partial"] = True
        run["interrupted"] = started
    elif isinstance(end.get("run"), dict):
        run.update(end["run"])
    return report


# Parts every consumer reads as mappings; a foreign value there would be a traceback later.
_MAPPINGS = {"run": (), "tool": (), "fingerprint": ("host", "device", "device_facts")}


# The types every reader (matrix, diff, report, doctor, the plugin's baseline) relies on.
VERDICT_TYPES = {"params": dict, "message": str, "duration_s": (int, float), "measurements": dict,
                 "evidence": dict, "known_issues": list, "env": dict}
EVIDENCE_TYPES = {**{key: str for key in ("stack", "traceback", "output_tail", "signal", "exit")},
                  "signatures": list, "faults_injected": list}
ISSUE_TYPES = {"links": list, "title": str, "workaround": str}


def _typed(mapping: Dict[str, Any], types: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in mapping.items() if k not in types or isinstance(v, types[k])}


def _conform_verdict(verdict: Any) -> Any:
    """Drop the fields of a verdict whose type is foreign; a record that is not a mapping is
    left for the reader to reject or skip (diff rejects it, report leaves it out)."""
    if not isinstance(verdict, dict):
        return verdict
    verdict = _typed(verdict, VERDICT_TYPES)
    verdict["evidence"] = _typed(verdict.get("evidence", {}), EVIDENCE_TYPES)
    verdict["known_issues"] = [_typed(i, ISSUE_TYPES) for i in verdict.get("known_issues", []) if isinstance(i, dict)]
    return verdict


def _conform(report: Dict[str, Any]) -> Dict[str, Any]:
    """Replace a non-mapping where a mapping belongs (in a foreign or damaged report) with {},
    and drop verdict fields of a foreign type, so that readers can render without checks."""
    for key, inner in _MAPPINGS.items():
        part = report[key] = dict(report[key]) if isinstance(report.get(key), dict) else {}
        for name in inner:
            if not isinstance(part.get(name, {}), dict):
                part[name] = {}
    report["verdicts"] = [_conform_verdict(v) for v in report["verdicts"]]
    return report


def load_report(path: Path) -> Dict[str, Any]:
    """Load a report (.json) or a journal (.jsonl); one-line UsageError on anything else."""
    path = Path(path)
    what = str(path)
    text = read_text(path)
    if path.suffix == ".jsonl" or '"record":"header"' in text.split("\n", 1)[0]:
        return journal_to_report(text.splitlines(), what)
    data = parse_json(text, what)
    check_schema(data, what)
    if not isinstance(data.get("verdicts"), list):
        raise UsageError(f"{what}: report has no verdict list")
    return _conform(data)

