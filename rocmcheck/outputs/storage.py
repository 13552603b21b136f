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
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import psutil

from ..errors import UsageError
from ..jsonsafe import jsonsafe
from ..records import SCHEMA, SCHEMA_MAJOR, Report


def host_token() -> str:
    """This host's short name, safe in a file name (letters, digits, '-')."""
    return re.sub(r"[^A-Za-z0-9-]+", "-", socket.gethostname().split(".")[0]).strip("-")[:32] or "host"


def new_run_id() -> str:
    """Sortable by time, unique across hosts: date-time, host name, pid, a random part.
    Two containers whose entrypoint is PID 1, started in the same second on different
    nodes (or on the same one), still get different ids."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{host_token()}-{os.getpid()}-{secrets.token_hex(3)}"


def journal_path(out_dir: Path, run_id: str) -> Path:
    return Path(out_dir) / f"rocmcheck-{run_id}.jsonl"


@dataclass(frozen=True)
class Output:
    """One kind of output file of a run (`rocmcheck.outputs.formats.OUTPUTS` is the table): the
    option that names its file, its renderer, the front-ends that offer it, and its file name
    under the output folder (`{run_id}` filled in), or None where it is written only when named."""

    name: str  # its key in the report's `unwritten`
    flag: str  # the command's option (the plugin's is `--rocm-` and the rest)
    render: Callable[[Report], str]
    offered_by: Tuple[str, ...]  # commands (run, gate, report, doctor), "pytest", "gate()"
    default_name: Optional[str]
    help: str
    stdout: Tuple[str, ...] = ()  # the commands where `-` names stdout (the run's own file is still written)
    must_write: bool = False  # a file a deployment reads (the Prometheus textfile): a folder it cannot be
    # written in is bad input, refused before the run (`options.check_outputs`), not a note after it
    render_to: Optional[Callable[[Report, Path], str]] = None  # a renderer whose text names its own file
    # (prom: the `textfile` label), used in place of `render` where the file is known

    def text(self, report: Report, path: Path) -> str:
        """Its text for the file `path`."""
        return self.render_to(report, path) if self.render_to is not None else self.render(report)

    def path(self, out_dir: Path, run_id: str, named: Mapping[str, Path]) -> Optional[Path]:
        """Where it goes: the file its option named, else its default name under `out_dir`, else nowhere."""
        if self.name in named:
            return named[self.name]
        return Path(out_dir) / self.default_name.format(run_id=run_id) if self.default_name else None


def write_outputs(report: Report, outputs: Sequence[Output], out_dir: Path, named: Mapping[str, Path]) -> None:
    """Write each output of `report` that has a path. A run's own file names never replace a file,
    a path the user named is replaced. The one failure policy of every front-end: a file that
    cannot be written is recorded in `report.run.unwritten` (`unwritten_line` says it), never
    raised, so the verdict and the exit code never depend on it."""
    for output in outputs:
        path = output.path(out_dir, report.run.id, named)
        if path is not None:
            write_recorded(report.run.unwritten, output.name, path, partial(output.text, report, path),
                           replace=output.name in named)


def write_recorded(unwritten: Dict[str, str], name: str, path: Path, text: Callable[[], str],
                   replace: bool = True) -> bool:
    """`write_atomic(path, text())`; an OSError (a read-only folder, a full disk) is recorded in
    `unwritten` as "path: why" under `name` instead of raised. True when written."""
    try:
        write_atomic(path, text(), replace=replace)
    except OSError as exc:
        unwritten[name] = f"{path}: {exc.strerror or exc}"
        return False
    return True


def write_problem(unwritten: Mapping[str, str]) -> str:
    """The one line every front-end says about the files it could not write ("path: why" each)."""
    return f"could not write {'; '.join(unwritten.values())}; the verdict stands without them"


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
    run's own files never replace another run's. The temporary file is named by its writer
    (`.NAME.HOST-PID.RANDOM.tmp`), so one left by a writer killed half-way (SIGKILL) is known for
    stale once that process is gone (`remove_stale_temps`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{host_token()}-{os.getpid()}.{secrets.token_hex(4)}.tmp"
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


# a writer's temporary file: `write_atomic`'s, or the Slurm prolog recipe's (no random part)
_TEMP = re.compile(r"\..+\.(?P<host>[A-Za-z0-9-]+)-(?P<pid>[0-9]+)(\.[0-9a-f]+)?\.tmp")
STALE_TEMP_AGE_S = 3600.0  # a temporary file this old is stale whoever wrote it (another host's, a reused PID)


def remove_stale_temps(folder: Path) -> List[Path]:
    """Remove the temporary files in `folder` (not below it) that no writer will finish: this
    host's whose writer process is gone (a run killed half-way, as Slurm kills a prolog at its
    PrologEpilogTimeout), and any older than STALE_TEMP_AGE_S (a shared folder's other hosts, whose
    processes cannot be seen from here). Best effort: the removed files; a folder that is not
    there, or a file another cleaner removed first, is no error."""
    removed: List[Path] = []
    here = host_token()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        found = _TEMP.fullmatch(entry.name)
        if not found or not entry.is_file(follow_symlinks=False):
            continue
        try:
            old = time.time() - entry.stat(follow_symlinks=False).st_mtime > STALE_TEMP_AGE_S
            gone = found["host"] == here and not psutil.pid_exists(int(found["pid"]))
            if old or gone:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue
    return removed


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


def report_json(report: Report) -> str:
    """A report's JSON file (the schema fields first)."""
    return json.dumps(jsonsafe(report.to_dict()), allow_nan=False, indent=2) + "\n"


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


def journal_to_report(lines: List[str], what: str) -> Report:
    """Rebuild a (partial) report from a journal; a truncated last line is dropped. A later verdict
    record of a variant on the same device replaces the earlier one (the node check's judgement
    of a GPU, which comes once every GPU ran)."""
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
    assert header is not None  # check_schema refuses a missing header
    verdicts: List[Any] = []
    started: Optional[Any] = None
    end: Optional[Dict[str, Any]] = None
    for rec in records[1:]:
        kind = rec.get("record") if isinstance(rec, dict) else None
        if kind == "started":
            started = rec.get("variant")
        elif kind == "verdict":
            verdicts.append(rec.get("verdict"))
            started = None
        elif kind == "rejudged":  # a verdict judged again once every GPU ran (the node check)
            verdicts = _with(verdicts, rec.get("verdict"))
        elif kind == "end":
            end = rec
    run = dict(header["run"]) if isinstance(header.get("run"), dict) else {}
    if end is None:
        run.update(partial=True, interrupted=started)
    elif isinstance(end.get("run"), dict):
        run.update(end["run"])
    body = {k: v for k, v in header.items() if k not in ("record", "t")}
    return Report.from_dict({**body, "run": run, "verdicts": verdicts})


def _with(verdicts: List[Any], verdict: Any) -> List[Any]:
    """`verdicts` with `verdict` in place of an earlier record of its variant on its device, else added."""
    def same(earlier: Any) -> bool:
        return isinstance(earlier, dict) and isinstance(verdict, dict) and \
            (earlier.get("variant"), earlier.get("device")) == (verdict.get("variant"), verdict.get("device"))

    if any(same(v) for v in verdicts):
        return [verdict if same(v) else v for v in verdicts]
    return [*verdicts, verdict]


def load_report(path: Path) -> Report:
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
    return Report.from_dict(data)

