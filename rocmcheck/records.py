"""The run report as a typed record: `Report` and its `RunInfo`, to and from the JSON on disk.

Every front-end gets a `Report` from the runner or the loader, and every output format takes
one, so no reader reaches into nested dicts or guards `report["run"]` with `or {}`. The JSON
is schema-versioned (`SCHEMA`, `SCHEMA_VERSION`): a new minor version may add fields, so
`from_dict` reads what it knows, gives a field an older file lacks its default, keeps fields
it does not know (`extra`, `sections`) to write them back, and replaces a value of a foreign
type with the default rather than fail later in a renderer. A new run's `to_dict` is the
report the runner always wrote, key for key and in the same order.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional

from .model import STATUS_VALUES, ExitCode, Verdict, count_statuses

SCHEMA = "rocmcheck-report"
SCHEMA_VERSION = "1.0"
SCHEMA_MAJOR = 1

# The types every reader (matrix, diff, report, doctor, the plugin's baseline) relies on.
VERDICT_TYPES = {"probe": str, "params": dict, "message": str, "duration_s": (int, float), "measurements": dict,
                 "evidence": dict, "known_issues": list, "env": dict, "device": dict, "unfit_issues": list,
                 "cost": dict}
EVIDENCE_TYPES = {**{key: str for key in ("stack", "traceback", "output_tail", "signal", "exit")},
                  "signatures": list, "faults_injected": list}
ISSUE_TYPES = {"id": str, "links": list, "title": str, "workaround": str, "why": str}
RUN_TYPES = {"id": str, "command": str, "argv": list, "started": (int, float), "device": str, "profile": str,
             "isolation": str, "isolation_requested": str, "inject": str, "env": dict, "notes": list,
             "finished": (int, float), "partial": bool, "interrupted": str, "counts": dict, "unwritten": dict}
FINGERPRINT_MAPPINGS = ("host", "device", "device_facts")


def _typed(mapping: Mapping[str, Any], types: Mapping[str, Any]) -> Dict[str, Any]:
    """`mapping` less the fields whose value is not of the type readers rely on."""
    return {k: v for k, v in mapping.items() if k not in types or isinstance(v, types[k])}


def _mapping(value: Any) -> Dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def verdict_from(record: Any) -> Optional[Verdict]:
    """A verdict read from a report, its fields of a foreign type dropped; None for a record that
    is not a verdict (no variant, or a status that is not one)."""
    if not isinstance(record, dict) or not isinstance(record.get("variant"), str) \
            or record.get("status") not in STATUS_VALUES:
        return None
    data = _typed(record, VERDICT_TYPES)
    data["evidence"] = _typed(data.get("evidence", {}), EVIDENCE_TYPES)
    for key in ("known_issues", "unfit_issues"):
        data[key] = [_typed(i, ISSUE_TYPES) for i in data.get(key, []) if isinstance(i, dict)]
    data.setdefault("probe", "")  # reports from before probe ids were recorded: readers derive it from the variant
    return Verdict.from_dict(data)


COST_SECTION = "cost"  # Report.sections[COST_SECTION]: RunCost.to_dict()


IMPORT_SHOWN_S = 0.1  # an import of the isolation server the time line names (every one is in the JSON)


@dataclass(frozen=True)
class RunCost:
    """A run's wall time against the sum of its variants' budgets (issue 39), the report's `cost` section.

    The GPUs' queues run at once, so the budget is per GPU: the largest sum of the budgets of the variants
    that one device ran (a node-wide probe counts on the first). `outside_s` is the wall time in no variant:
    the process's imports and start, the device facts, the zygote, the node's judgements, the report."""

    wall_s: float  # from the process's start (the commands; else the run's start) to the last verdict
    in_variants_s: float  # wall time inside at least one variant
    budget_s: float
    setup_s: float  # the variants' sums, over every device
    first_use_s: float
    work_s: float
    over: List[Dict[str, Any]] = field(default_factory=list)  # variant, device, total_s, budget_s
    # the part of the time outside any variant before the first began (imports, the zygote's `import torch`, the
    # device facts and their runtime init); the rest is `between_s`. None in reports written before issue 39
    before_first_s: Optional[float] = None
    # of that, the isolation server's imports before it was ready, seconds per module in order: torch, each module
    # a selected probe preloads (`@probe(preload=...)`), "probes" (the probe modules); empty under spawn isolation
    imports_s: Dict[str, float] = field(default_factory=dict)
    # of that too, the device facts: their child's wall time, the GPU runtime's init included on a GPU (the first
    # of the gate's two per GPU); None in reports written before it was kept
    facts_s: Optional[float] = None

    @property
    def outside_s(self) -> float:
        return round(max(self.wall_s - self.in_variants_s, 0.0), 3)

    @property
    def between_s(self) -> Optional[float]:
        """The time outside any variant in the gaps between variants (launching a child, collecting a result,
        the node's judgements)."""
        return None if self.before_first_s is None else round(max(self.outside_s - self.before_first_s, 0.0), 3)

    @classmethod
    def of(cls, verdicts: List[Verdict], wall_s: float, in_variants_s: float,
           before_first_s: Optional[float] = None, imports_s: Optional[Dict[str, float]] = None,
           facts_s: Optional[float] = None) -> "RunCost":
        per_device: Dict[str, float] = {}
        over = []
        for v in verdicts:
            if v.cost is None:
                continue
            where = str(v.device.get("name", "cpu"))
            per_device[where] = per_device.get(where, 0.0) + v.cost.budget_s
            if v.cost.over_budget:
                over.append({"variant": v.variant, "device": where, "total_s": v.cost.total_s,
                             "budget_s": v.cost.budget_s})
        costs = [v.cost for v in verdicts if v.cost is not None]
        setup, first_use, work = (round(sum(getattr(c, part) for c in costs), 3)
                                  for part in ("setup_s", "first_use_s", "work_s"))
        outside = max(wall_s - in_variants_s, 0.0)
        before = None if before_first_s is None else round(min(max(before_first_s, 0.0), outside), 3)
        return cls(round(wall_s, 3), round(in_variants_s, 3), round(max(per_device.values(), default=0.0), 3),
                   setup, first_use, work, over, before, {m: round(s, 3) for m, s in (imports_s or {}).items()},
                   None if facts_s is None else round(facts_s, 3))

    def to_dict(self) -> Dict[str, Any]:
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "outside_s": self.outside_s,
                "between_s": self.between_s}

    @classmethod
    def from_dict(cls, data: Any) -> Optional["RunCost"]:
        """None for a report without one (older versions, a foreign value)."""
        try:
            wall, inside, budget, setup, first_use, work = (float(data[name]) for name in (
                "wall_s", "in_variants_s", "budget_s", "setup_s", "first_use_s", "work_s"))
            over = [dict(o) for o in data.get("over") or [] if isinstance(o, dict)]
            before = data.get("before_first_s")
            imports = {str(m): float(s) for m, s in (data.get("imports_s") or {}).items()}
            facts = data.get("facts_s")
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        return cls(wall, inside, budget, setup, first_use, work, over,
                   float(before) if isinstance(before, (int, float)) else None, imports,
                   float(facts) if isinstance(facts, (int, float)) else None)

    def text(self) -> str:
        """One line for people: the wall time against the budget, where it went, and each variant over its own."""
        line = (f"time: {self.wall_s:.1f}s wall against a budget of {self.budget_s:.1f}s per GPU; in variants "
                f"{self.in_variants_s:.1f}s (setup {self.setup_s:.1f}s, first use {self.first_use_s:.1f}s, work "
                f"{self.work_s:.1f}s, summed over GPUs), outside any variant {self.outside_s:.1f}s")
        if self.before_first_s is not None:
            shown = [f"{m} {s:.1f}s" for m, s in self.imports_s.items() if s >= IMPORT_SHOWN_S]
            parts = [f"the isolation server's imports {', '.join(shown)}"] if shown else []
            if self.facts_s is not None:
                parts.append(f"the device facts {self.facts_s:.1f}s")
            of_first = f"; of the first, {', '.join(parts)}" if parts else ""
            line += f" (before the first {self.before_first_s:.1f}s, between variants {self.between_s:.1f}s{of_first})"
        if self.over:
            named = ", ".join(f"{o['variant']} on {o['device']} ({o['total_s']:.1f}s of {o['budget_s']:g}s)"
                              for o in self.over)
            line += f"\nover budget (not a failure): {named}"
        return line


BEFORE_FIRST = "before the first probe"  # RunInfo.interrupted where no probe had started
BETWEEN = "between probe variants"  # ... where one had ended and the next had not started


def where_interrupted(interrupted: Optional[str]) -> str:
    """The words after "interrupted": "during <variant>", or where no probe ran. Reports of
    earlier versions wrote the two markers in parentheses; a journal that ends with no probe
    in progress has none."""
    marker = (interrupted or BETWEEN).strip("()")
    return marker if marker in (BEFORE_FIRST, BETWEEN) else f"during {marker}"


INTERRUPTED_BY = "interrupted by "


def interruption_note(cause: str, interrupted: Optional[str]) -> str:
    """The note a run keeps when something stops it ("interrupted by SIGTERM during device-smoke");
    `RunInfo.interruption` reads it back, so the cause is said without a field of its own."""
    return f"{INTERRUPTED_BY}{cause} {where_interrupted(interrupted)}"


@dataclass
class RunInfo:
    """The report's `run`: what ran, how, and how it ended. The fields up to `notes` are known when
    the run starts (the journal's header carries them); the rest when it ends."""

    id: str = ""
    command: str = "run"
    argv: List[str] = field(default_factory=list)
    started: Optional[float] = None
    device: str = "cpu"
    profile: str = "full"
    isolation: str = ""
    isolation_requested: str = ""
    inject: str = ""
    env: Dict[str, str] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    finished: Optional[float] = None
    partial: bool = False
    interrupted: Optional[str] = None  # what ran when the run was interrupted (a variant, or BEFORE_FIRST, BETWEEN)
    counts: Dict[str, int] = field(default_factory=dict)
    # output kind (jsonl, json, md, ...) -> "path: why" it could not be written; not in the files themselves
    unwritten: Dict[str, str] = field(default_factory=dict)
    extra: Dict[str, Any] = field(default_factory=dict)  # fields this version does not know, written back

    HEADER_FIELDS = ("id", "command", "argv", "started", "device", "profile", "isolation", "isolation_requested",
                     "inject", "env", "notes")

    def where_interrupted(self) -> str:
        """Where the run stopped, as the words after "interrupted" (`where_interrupted`)."""
        return where_interrupted(self.interrupted)

    def interruption(self) -> str:
        """What stopped this partial run and where: its `interruption_note`, or (a report that
        kept none) "interrupted during <variant>"."""
        said = [note for note in self.notes if note.startswith(INTERRUPTED_BY)]
        return said[-1] if said else f"interrupted {self.where_interrupted()}"

    def header(self) -> Dict[str, Any]:
        """What the journal's header says of the run: the fields known at its start."""
        return {name: getattr(self, name) for name in self.HEADER_FIELDS}

    def to_dict(self) -> Dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("unwritten", "extra")}
        return {**data, **({"unwritten": dict(self.unwritten)} if self.unwritten else {}), **self.extra}

    @classmethod
    def from_dict(cls, data: Any) -> "RunInfo":
        data = _typed(_mapping(data), RUN_TYPES)
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in data.items() if k in known},
                   extra={k: v for k, v in data.items() if k not in known})


@dataclass
class Report:
    """One run's report: the tool, the run, the machine's fingerprint, the verdicts, and the
    sections beside them (doctor's results, a bug report's `bug_report`, anything newer)."""

    run: RunInfo = field(default_factory=RunInfo)
    verdicts: List[Verdict] = field(default_factory=list)
    fingerprint: Dict[str, Any] = field(default_factory=dict)
    tool: Dict[str, Any] = field(default_factory=dict)
    sections: Dict[str, Any] = field(default_factory=dict)
    schema_version: str = SCHEMA_VERSION
    malformed: List[int] = field(default_factory=list)  # indices of loaded records that were not verdicts

    @property
    def device(self) -> Dict[str, Any]:
        """The fingerprint's device under test: name, backend, count, arch, under_test."""
        return self.fingerprint.get("device") or {}

    def counts(self) -> Dict[str, int]:
        """Status -> how many of the verdicts, worst first."""
        return count_statuses(v.status.value for v in self.verdicts)

    def exit_code(self) -> int:
        """What `rocmcheck run` exits with for this report: interrupted (no verdict), else 1 for
        any bad verdict, else 0; `model.node_status` makes it the node's GO, NO-GO or UNKNOWN,
        which the commands and every output that states it (the Prometheus file) share."""
        if self.run.partial:
            return ExitCode.INTERRUPTED
        return ExitCode.FAILED if any(v.status.is_bad for v in self.verdicts) else ExitCode.OK

    def to_dict(self) -> Dict[str, Any]:
        return {"schema": SCHEMA, "schema_version": self.schema_version, "tool": self.tool,
                "run": self.run.to_dict(), "fingerprint": self.fingerprint,
                "verdicts": [v.to_dict() for v in self.verdicts], **self.sections}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Report":
        """A report from its JSON (the schema already checked by the loader): a record that is
        not a verdict is left out and its index kept in `malformed`, for the reader to reject
        (diff, matrix) or count (the bug report)."""
        fingerprint = _mapping(data.get("fingerprint"))
        for name in FINGERPRINT_MAPPINGS:
            if name in fingerprint and not isinstance(fingerprint[name], dict):
                fingerprint[name] = {}
        given = data.get("verdicts")
        records = given if isinstance(given, list) else []
        verdicts = [verdict_from(r) for r in records]
        top = ("schema", "schema_version", "tool", "run", "fingerprint", "verdicts")
        return cls(run=RunInfo.from_dict(data.get("run")), verdicts=[v for v in verdicts if v is not None],
                   fingerprint=fingerprint, tool=_mapping(data.get("tool")),
                   sections={k: v for k, v in data.items() if k not in top},
                   schema_version=str(data.get("schema_version", SCHEMA_VERSION)),
                   malformed=[i for i, v in enumerate(verdicts) if v is None])
