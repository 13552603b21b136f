"""`Task`: what a child runs, written by the runner and read by the child as one typed record;
`TaskResult`: what the child says of it, written by the child and read by the parent.

A task travels as JSON in its `.task` file (`rocmcheck.markers.TaskFiles`), whose path is the
line on the child's lifeline. A probe task names `probe`; an internal task (device facts,
the device canary) names `call` as `module:function`. Its result travels back in the
`.result.json` beside it.
"""
from __future__ import annotations

import json
import traceback
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Optional, Tuple, Union

from ..markers import TaskFiles
from ..model import STATUS_VALUES, Status


@dataclass
class Task:
    prefix: str  # where its files are: TaskFiles(prefix)
    timeout: float  # seconds from the start marker (runtime init left out)
    probe: str = ""  # a probe's id ...
    call: str = ""  # ... or an internal task, `module:function` returning a dict
    variant: str = ""
    params: Dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    device_requested: str = "auto"  # what --device asked for
    device_facts: Dict[str, Any] = field(default_factory=dict)
    expect_gpus: Optional[int] = None
    budget_s: Optional[float] = None  # a variant with a level: its seconds of work (`--level`, `--duration`)
    level: int = 1  # the run's `--level`: probes size their work by it (heavy profiles at 2 and 3)
    profile: str = "full"
    first_use_limit: Optional[float] = None  # None: the timeout bounds first use too
    probes_paths: List[str] = field(default_factory=list)
    faults: str = ""  # the run's whole fault spec; the child installs what applies to `probe`
    keep_alive: bool = False  # a worker's task: after the result, wait on the lifeline for the next one

    @property
    def files(self) -> TaskFiles:
        return TaskFiles(self.prefix)

    @property
    def what(self) -> str:
        """What runs, for notes: the probe's id or the call."""
        return self.probe or self.call

    def write(self) -> str:
        """Write the task file; returns its path (the line for the lifeline)."""
        path = self.files.task
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(asdict(self), fh)
        return path

    @classmethod
    def load(cls, path: str) -> "Task":
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class ErrorInfo:
    """An exception the child caught (the probe's, GPU runtime init's, or rocmcheck's own)."""

    type: str = ""
    message: str = ""
    traceback: str = ""

    @classmethod
    def of(cls, exc: BaseException) -> "ErrorInfo":
        return cls(type(exc).__name__, str(exc),
                   "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))

    def to_dict(self) -> Dict[str, str]:
        return {"type": self.type, "message": self.message, "traceback": self.traceback}

    @classmethod
    def from_dict(cls, data: Any) -> Optional["ErrorInfo"]:
        """None for no exception (an empty or foreign value); a field that is not text becomes its text."""
        if not isinstance(data, dict) or not data:
            return None
        return cls(**{k: str(data[k]) for k in ("type", "message", "traceback") if k in data})


# The result file's keys in the order the child has always written them; a result has only
# some of them (its optional fields that are None are not written).
RESULT_KEYS = ("faults_installed", "worker_task", "runtime_init_s", "status", "message", "gpu_init_failed",
               "exception", "probe_s", "measurements", "warnings", "state_put_back", "retire", "data")


@dataclass
class TaskResult:
    """What a child says of its task, in its `.result.json`: written by the child
    (`engine.child`), read by the parent (`engine.verdicts`, the isolation, the device facts).

    A field left None is not in the file. `from_dict` checks the types once: a file that is not
    a result (torn by a child that died writing it, no `status` or one that is not a status) is
    None, the same as no file; a field of a foreign type (a probe that wrote the file itself) is
    dropped, as if the child had not written it; keys this version does not know are kept in
    `extra` and written back.
    """

    status: Status
    message: str = ""
    exception: Optional[ErrorInfo] = None  # the exception a fail or an error ended with
    gpu_init_failed: bool = False  # GPU runtime init raised: the isolation's cue to fall back to spawn
    faults_installed: Optional[List[str]] = None
    worker_task: Optional[int] = None  # how many tasks its process ran before this one
    runtime_init_s: Optional[float] = None  # the first task of a process only
    probe_s: Optional[float] = None
    measurements: Optional[Dict[str, Any]] = None  # the probe's own (`ctx.measure`)
    warnings: Optional[List[str]] = None
    state_put_back: Optional[List[str]] = None  # a worker: what the probe changed in the process, put back
    retire: Optional[str] = None  # a worker that cannot go on after this task: why
    data: Optional[Dict[str, Any]] = None  # an internal task's (`Task.call`) answer
    extra: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        """The result file's JSON object, key for key as the child has always written it."""
        out: Dict[str, Any] = {}
        for key in RESULT_KEYS:
            value = getattr(self, key)
            if key == "status":
                out[key] = self.status.value
            elif key == "message":
                out[key] = value
            elif key == "gpu_init_failed":
                if value:
                    out[key] = True
            elif key == "exception":
                if value is not None:
                    out[key] = value.to_dict()
            elif value is not None:
                out[key] = value
        return {**out, **self.extra}

    @classmethod
    def from_dict(cls, data: Any) -> Optional["TaskResult"]:
        """The result in `data` (a result file's JSON), or None when it is not one."""
        if not isinstance(data, dict) or data.get("status") not in STATUS_VALUES:
            return None

        def typed(key: str, kind: Union[type, Tuple[type, ...]]) -> Any:
            value = data.get(key)
            return value if isinstance(value, kind) else None

        def texts(key: str) -> Optional[List[str]]:
            value = typed(key, list)
            return None if value is None else [v for v in value if isinstance(v, str)]

        return cls(status=Status(data["status"]), message=typed("message", str) or "",
                   exception=ErrorInfo.from_dict(data.get("exception")),
                   gpu_init_failed=bool(data.get("gpu_init_failed")),
                   faults_installed=texts("faults_installed"), worker_task=typed("worker_task", int),
                   runtime_init_s=typed("runtime_init_s", (int, float)), probe_s=typed("probe_s", (int, float)),
                   measurements=typed("measurements", dict), warnings=texts("warnings"),
                   state_put_back=texts("state_put_back"), retire=typed("retire", str), data=typed("data", dict),
                   extra={k: v for k, v in data.items() if k not in RESULT_KEYS})

    @classmethod
    def read(cls, path: str) -> Optional["TaskResult"]:
        """The result file at `path`; None where there is none, or what is there is not a result."""
        try:
            with open(path, encoding="utf-8") as fh:
                return cls.from_dict(json.load(fh))
        except (OSError, ValueError):
            return None
