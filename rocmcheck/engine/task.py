"""`Task`: what a child runs, written by the runner and read by the child as one typed record.

It travels as JSON in its `.task` file (`rocmcheck.markers.TaskFiles`), whose path is the
line on the child's lifeline. A probe task names `probe`; an internal task (device facts,
the device canary) names `call` as `module:function`.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Optional

from ..markers import TaskFiles


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
