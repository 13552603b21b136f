"""What rocmcheck knows about failures, kept as data: the known issues (`data/known_issues/`), the
signatures of GPU runtime failures in a child's output or a user's log (`data/signatures.json`),
the failure classes a log is put in (`data/failure_classes.json`), what a log's GPU names and archs
say (`data/gpus.json`), the workarounds doctor tries (`data/workarounds.json`), the devices' speed
figures (`data/speed_spec.json`), and `explain`, which reads a log with them.
"""
import json
from pathlib import Path
from typing import Any

from ..errors import UsageError

DATA = Path(__file__).with_name("data")


def read_data(path: Path, what: str) -> Any:
    """A data file's JSON (a BOM allowed); one that cannot be read or parsed is a one-line
    UsageError naming `what` and the file: bad data stops a run before any probe, never as a traceback."""
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except OSError as exc:
        raise UsageError(f"{what} '{path}': cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise UsageError(f"{what} '{path}': not valid JSON ({exc})") from None
