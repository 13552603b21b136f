"""The data every part of rocmcheck exchanges: statuses, probe specs, variants, verdicts.

Plain dataclasses that round-trip through JSON, so the runner, the reports, the
pytest plugin and the loaders all speak the same shapes.
"""
from __future__ import annotations

import enum
import itertools
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union


class Status(str, enum.Enum):
    """Exactly one per probe variant (docs/design.md, "Verdicts").

    Declared worst first, and that one order is used everywhere: the worst status wins where
    a report holds a variant twice or a matrix cell several runs, counts and failing verdicts
    are listed in it. hang > crash > error > fail: the further a status is from a process that
    finished its work, the more it takes down with it (a hung or crashed GPU child takes the
    next job too, an exception stops one probe, a wrong result was at least computed); then
    warn > skip > pass (a known risk, then nothing learnt, then good news).
    """

    HANG = "hang"
    CRASH = "crash"
    ERROR = "error"
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"
    PASS = "pass"

    @property
    def is_bad(self) -> bool:
        """A status that makes a run (or the gate) fail."""
        return self in BAD_STATUSES

    @property
    def worked(self) -> bool:
        """pass or warn: the probe did its job (a fix for diff, a passing run for doctor)."""
        return self in (Status.PASS, Status.WARN)

    @property
    def is_notable(self) -> bool:
        """A status a reader must hear about (the bad ones and warn): it carries evidence, known issues."""
        return self not in (Status.PASS, Status.SKIP)

    @property
    def severity(self) -> int:
        """Larger is worse (pass is 0)."""
        return len(STATUS_ORDER) - 1 - STATUS_ORDER.index(self)

    @classmethod
    def worst(cls, statuses: Iterable[str]) -> "Status":
        return max(map(cls, statuses), key=lambda s: s.severity)


STATUS_ORDER: Tuple[Status, ...] = tuple(Status)  # worst first
STATUS_VALUES = frozenset(s.value for s in Status)
BAD_STATUSES = frozenset({Status.FAIL, Status.ERROR, Status.CRASH, Status.HANG})


EVIDENCE_TAILS = ("stack", "traceback", "output_tail")  # the long evidence texts, shown last and cut first


def is_bad(status: str) -> bool:
    """`Status(status).is_bad` for a status read from a report."""
    return Status(status).is_bad


def is_notable(status: str) -> bool:
    """`Status(status).is_notable` for a status read from a report."""
    return Status(status).is_notable


def count_statuses(statuses: Iterable[str]) -> Dict[str, int]:
    """Status -> how many, worst first (the order every counts line prints)."""
    seen = Counter(statuses)
    return {s.value: seen[s.value] for s in STATUS_ORDER if seen[s.value]}


class ExitCode(enum.IntEnum):
    """What the `rocmcheck` command exits with (docs/design.md, "Commands and exit codes");
    not to be confused with `exitcodes`, which decodes how a child process ended."""

    OK = 0  # success, GO
    FAILED = 1  # a probe failed, NO-GO, a regression
    USAGE = 2  # bad input or internal error: could not assess
    INTERRUPTED = 130


def node_status(exit_code: int) -> str:
    """The gate's word for an exit code: GO, NO-GO, or UNKNOWN (no verdict could be reached)."""
    words: Dict[int, str] = {ExitCode.OK: "GO", ExitCode.FAILED: "NO-GO"}
    return words.get(exit_code, "UNKNOWN")


SIMULATED_TYPE = "simgpu"  # torch's device type of the simulated GPUs (rocmcheck/simgpu registers it)


@dataclass(frozen=True)
class Requires:
    """What a probe needs to be applicable; unmet needs become `skip` with the reason."""

    gpu: bool = False
    gpus: int = 0
    backend: Optional[str] = None  # "rocm", "cuda" or None for any
    platforms: Tuple[str, ...] = ()  # sys.platform prefixes; empty means any
    # torch.cuda itself (its caching allocator and settings), which a simulated GPU does not have: the runner
    # skips such a variant there without starting its child (a fresh interpreter, where it sets variables)
    cuda_runtime: bool = False

    def unmet(self, device: "DeviceInfo", platform: str) -> Optional[str]:
        """The reason this requirement is not met on `device`, or None."""
        if self.platforms and not any(platform.startswith(p) for p in self.platforms):
            return f"needs platform {'/'.join(self.platforms)}; this is {platform}"
        if (self.gpu or self.gpus or self.cuda_runtime) and device.kind == "cpu":
            return "needs a GPU; running on the CPU"
        if self.cuda_runtime and device.simulated:
            return f"needs torch.cuda itself (CUDA or ROCm); {device.name} is a simulated GPU without it"
        if self.gpus > 1 and device.count < self.gpus:
            return f"needs {self.gpus} GPUs; {device.count} visible"
        if self.backend and device.backend != self.backend:
            return f"needs the {self.backend} backend; this build is {device.backend}"
        return None


@dataclass(frozen=True)
class DeviceInfo:
    """The device a run targets, as resolved from `--device` and the fingerprint."""

    name: str = "cpu"  # "cpu" or "cuda:N"
    backend: str = "cpu"  # "cpu", "rocm" or "cuda"
    count: int = 0  # GPUs visible to the build
    arch: Optional[str] = None

    @property
    def kind(self) -> str:
        return "cpu" if self.name == "cpu" else "gpu"

    @property
    def simulated(self) -> bool:
        """A simulated GPU (`--inject simgpu`): its name's device type is SIMULATED_TYPE."""
        return self.name.partition(":")[0] == SIMULATED_TYPE


ProbeFn = Callable[..., None]

# Levels, as DCGM's diagnostics (seconds, about two minutes, a burn-in): the seconds of sustained work per GPU
# of a variant whose parameters hold `level` (`--level N` chooses them; the gate runs level 1); `--duration`
# replaces the budget of levels 2 and 3. The runner gives a variant its budget (`ctx.budget_s`) beyond its timeout,
# and its cost budget (`ProbeSpec.cost_budget`) is that work plus what its probe declares beyond it.
# At levels 2 and 3 the probes with levels share it (each takes its module's LEVEL_SHARE: sdc 0.35, gpu-memory
# 0.25, sustained-load 0.4), so a GPU's levelled work ends within it: 135 s at level 2 leaves 15 s of DCGM r2's
# 2.5 minutes for the children's setup and first use (docs/levels.md has the measured times).
LEVEL_BUDGETS_S: Dict[int, float] = {1: 2.0, 2: 135.0, 3: 900.0}

# What one variant of a probe that declares no `budget=` may cost per GPU, at every level, host setup included
# (seconds). On one H100 and one H200 (reports/hardware/ 2026-11-25, shared/measurements 2026-11-28) the variants
# of such probes took 0.003-2.1 s each from their start marker (config lint, numerics, attention-model, training,
# hf-training, pcie-link, conv, device smoke), the GPU runtime init that a worker's first variant pays besides
# 0.3-4 s; 2 s holds a typical one, and a probe that needs more (or more at level 2 and 3) declares it.
DEFAULT_BUDGET_S = 2.0

# `@rocmcheck.probe(budget=...)`: seconds per GPU for every level, or {level: seconds} (a level left out takes the
# nearest lower one's, then the default), or a function of a variant's parameters that returns either.
Budget = Union[float, Mapping[int, float], Callable[[Mapping[str, Any]], Union[float, Mapping[int, float]]]]


def budget_at(declared: Optional[Budget], params: Mapping[str, Any], level: int) -> float:
    """The seconds `declared` gives a variant with `params` at `level`: its own value, else the nearest lower
    level's, else `DEFAULT_BUDGET_S`."""
    given = declared(params) if callable(declared) else declared
    if given is None:
        return DEFAULT_BUDGET_S
    if not isinstance(given, Mapping):
        return float(given)
    lower = [n for n in given if n <= level]
    return float(given[max(lower)]) if lower else DEFAULT_BUDGET_S


class RunsIn(str, enum.Enum):
    """Where a probe's variants run (`@rocmcheck.probe(runs_in=...)`), cheapest first; docs/isolation.md §13.

    A variant with environment variables (`env=`) runs in a fresh interpreter whatever this says:
    they must be set before `import torch`.
    """

    WORKER = "worker"  # its GPU's worker child, which puts back what a probe may change (the default)
    OWN_CHILD = "own-child"  # a child per variant: it changes what a worker cannot put back (a process
    # group, a compile cache, threads it leaves running)
    FRESH_INTERPRETER = "fresh-interpreter"  # a new interpreter per variant, even without variables: it
    # reads torch's settings as a fresh `import torch` makes them (the allocator's default)
    PARENT = "parent"  # the parent itself, no child and no GPU runtime: it only reads host files (node-health)


@dataclass(frozen=True)
class ProbeSpec:
    """A registered probe: the function plus everything `@rocmcheck.probe` declared."""

    id: str
    title: str
    targets: str
    func: ProbeFn = field(repr=False, compare=False)
    module: str = ""
    links: Tuple[str, ...] = ()
    timeout: float = 60.0
    gate: Union[bool, Callable[[Mapping[str, Any]], bool]] = field(default=False, compare=False)
    requires: Requires = Requires()
    variants: Tuple[Mapping[str, Any], ...] = ({},)
    # variants only the gate runs, each standing for several of `variants` at less cost (`transfer` sends by every
    # method in one): `run` runs the variants they stand for instead
    gate_variants: Tuple[Mapping[str, Any], ...] = ()
    runs_in: RunsIn = RunsIn.WORKER
    env: Optional[Callable[[Mapping[str, Any]], Mapping[str, str]]] = field(default=None, compare=False)
    preload: Tuple[str, ...] = ()  # modules worth importing once in the zygote (e.g. torch._dynamo)
    per_device: bool = True  # run once on every GPU under test; False: once per node (own device set)
    # read once in the parent before the run's first probe; the probe gets it as `ctx.baseline`
    # and runs after every other probe of its device, so it can compare before with after
    baseline: Optional[Callable[[], Any]] = field(default=None, compare=False)
    budget: Optional[Budget] = field(default=None, compare=False)  # cost per GPU per variant: `budget_at`
    # at levels 2 and 3 the probes with levels share each GPU's LEVEL_BUDGETS_S (or --duration): this probe's part
    # of it (level 1's work is the probe's alone)
    level_share: float = 1.0

    def work_budget(self, params: Mapping[str, Any], duration: Optional[float] = None) -> Optional[float]:
        """The seconds of work a variant with `params` is given (`ctx.budget_s`; None: it has no level): its
        level's budget, at levels 2 and 3 this probe's share of it."""
        work = level_budget(params, duration)
        if work is None:
            return None
        return round(work * (self.level_share if params.get("level", 1) > 1 else 1.0), 3)

    def cost_budget(self, params: Mapping[str, Any], level: int, duration: Optional[float] = None) -> float:
        """What one variant with `params` may cost per GPU at run level `level`, host setup included: the
        declared budget, plus the seconds of work a variant with a level is given (`work_budget`)."""
        return round(budget_at(self.budget, params, level) + (self.work_budget(params, duration) or 0.0), 3)

    def expand(self) -> List["Variant"]:
        """Every variant: `variants`, then the gate's own (`gate_variants`)."""
        return [Variant(self, dict(p)) for p in (*self.variants, *self.gate_variants)]


def level_budget(params: Mapping[str, Any], duration: Optional[float] = None) -> Optional[float]:
    """The seconds of work a variant with parameters `params` is given (None: it has no level)."""
    level = params.get("level")
    if level is None:
        return None
    return duration if duration is not None and level > 1 else LEVEL_BUDGETS_S[level]


def variant_id(probe_id: str, params: Mapping[str, Any]) -> str:
    """pytest-style id: `probe[v1-v2]`; stable, shell-friendly, usable with -k."""
    if not params:
        return probe_id
    return f"{probe_id}[{'-'.join(_param_str(v) for v in params.values())}]"


def _param_str(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


@dataclass(frozen=True)
class Variant:
    """One probe run with one set of parameters: the unit that gets a child and a verdict."""

    spec: ProbeSpec
    params: Dict[str, Any]

    @property
    def id(self) -> str:
        return variant_id(self.spec.id, self.params)

    def env(self) -> Dict[str, str]:
        """Variables this variant's child gets before it starts (`@probe(env=fn(params))`)."""
        return {k: str(v) for k, v in self.spec.env(self.params).items()} if self.spec.env else {}

    @property
    def gate_only(self) -> bool:
        """One of the probe's `gate_variants`: the gate runs it, `run` the variants it stands for."""
        return self.params in self.spec.gate_variants

    def in_gate(self) -> bool:
        gate = self.spec.gate
        return self.gate_only or (bool(gate(self.params)) if callable(gate) else bool(gate))


def expand_variants(variants: Union[None, Mapping[str, Sequence[Any]], Sequence[Mapping[str, Any]]]
                    ) -> Tuple[Dict[str, Any], ...]:
    """Accept a list of parameter dicts, or a dict of lists (its cartesian product)."""
    if variants is None:
        return ({},)
    if isinstance(variants, Mapping):
        keys = list(variants)
        return tuple(dict(zip(keys, combo)) for combo in itertools.product(*(variants[k] for k in keys)))
    out = tuple(dict(v) for v in variants)
    return out or ({},)


# How a gate's skip begins where it did not run a variant because the GPU's NO-GO was already decided (a failing
# verdict on that GPU; `gate --keep-going` runs everything)
NOT_RUN_DECIDED = "not run: the gate's NO-GO on"


@dataclass(frozen=True)
class VariantCost:
    """What one variant cost per GPU against its budget (issue 39: budgets by design), split where the time
    went: `setup_s` is its wall time outside the probe's own call (a child's start, imports, GPU runtime init,
    collecting the result, and a re-run alone that confirms a bad verdict), `first_use_s` the probe's first
    call (`ctx.first_use()`: compilation, kernel search), `work_s` the rest of the probe's call. A variant
    over its budget is named in every report, and is not a failure: it says where a gate's seconds go."""

    setup_s: float
    first_use_s: float
    work_s: float
    budget_s: float

    @property
    def total_s(self) -> float:
        return round(self.setup_s + self.first_use_s + self.work_s, 4)

    @property
    def over_budget(self) -> bool:
        return self.total_s > self.budget_s

    def to_dict(self) -> Dict[str, float]:
        return {**asdict(self), "total_s": self.total_s}

    @classmethod
    def from_dict(cls, data: Any) -> Optional["VariantCost"]:
        """None for anything that is not a cost record (older reports have none)."""
        try:
            return cls(*(float(data[key]) for key in ("setup_s", "first_use_s", "work_s", "budget_s")))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass
class Verdict:
    """The outcome of one variant, with the evidence a maintainer needs."""

    probe: str
    variant: str
    status: Status
    params: Dict[str, Any] = field(default_factory=dict)
    message: str = ""
    duration_s: float = 0.0
    measurements: Dict[str, Any] = field(default_factory=dict)
    evidence: Dict[str, Any] = field(default_factory=dict)
    known_issues: List[Dict[str, Any]] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)  # variables set for this variant only
    device: Dict[str, Any] = field(default_factory=dict)  # the GPU it ran on: name, index, PCI address, UUID
    # entries that match this verdict but whose scope the run's other verdicts rule out: id, title, why
    unfit_issues: List[Dict[str, Any]] = field(default_factory=list)
    cost: Optional[VariantCost] = None  # what it cost against its budget (None: not run, or an older report)

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        data.pop("cost")
        if self.cost is not None:
            data["cost"] = self.cost.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Verdict":
        known = {f for f in cls.__dataclass_fields__}  # newer minor versions may add fields
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["status"] = Status(data["status"])
        kwargs["cost"] = VariantCost.from_dict(data.get("cost"))
        return cls(**kwargs)


SPEED_MEASUREMENTS = "speed"  # Verdict.measurements[SPEED_MEASUREMENTS]: figure name -> SpeedFigure.to_dict()


@dataclass(frozen=True)
class SpeedFigure:
    """One measured rate (higher is better): a throughput or a bandwidth, with its samples and how
    it was taken, so that it can be judged against the device's spec, the node's other GPUs and a
    baseline run (issue: speed is a verdict). `value` is the samples' median: robust to the one
    slow sample a shared machine gives, and the figure every judgement compares."""

    name: str  # what was measured, stable across runs: "matmul-bf16", "h2d-pinned", "device-memory-triad", ...
    unit: str  # "TFLOPS" or "GB/s"
    samples: List[float]  # one rate per timed repetition, after warm-up
    method: str = ""  # the clock (device events or wall clock), warm-up, sizes: what a reader needs to trust it
    expected: Optional[float] = None  # the reference it was judged against (spec, node median), in `unit`
    reference: str = ""  # where `expected` comes from: the spec row's source link, "node median", ...
    # The same work done by the host alone (host memory to host memory, a product of host tensors),
    # timed by the same clock right after each sample, in `unit`: where the host does the device's
    # work (a simulated GPU), the host's speed bounds the figure, and a baseline judges the figure
    # against this, its bound, measured beside it (rocmcheck.outputs.diff). Empty elsewhere.
    host_samples: List[float] = field(default_factory=list)

    @property
    def value(self) -> float:
        ordered = sorted(self.samples)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2

    def to_dict(self) -> Dict[str, Any]:
        """Its fields and value; `host_samples` only where measured."""
        data = {**asdict(self), "value": self.value}
        if not self.host_samples:
            del data["host_samples"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SpeedFigure":
        samples = [float(s) for s in data.get("samples") or [data["value"]]]
        return cls(str(data["name"]), str(data["unit"]), samples, str(data.get("method", "")),
                   None if data.get("expected") is None else float(data["expected"]), str(data.get("reference", "")),
                   [float(s) for s in data.get("host_samples") or []])


def speed_figures(verdict: "Verdict") -> Dict[str, SpeedFigure]:
    """The speed figures a verdict carries (none for most probes), by name."""
    found = verdict.measurements.get(SPEED_MEASUREMENTS)
    return {name: SpeedFigure.from_dict({"name": name, **fig}) for name, fig in found.items()} \
        if isinstance(found, dict) else {}


SDC_MEASUREMENTS = "sdc"  # Verdict.measurements[SDC_MEASUREMENTS]: WorkloadHashes.to_dict()
# Verdict.measurements[SDC_EXACT]: {"ops": the ops with an exact answer, "wrong": those this GPU got wrong}; where
# two GPUs disagree with no majority, the one with a wrong exact answer is the faulty one (rocmcheck.agreement)
SDC_EXACT = "sdc_exact"


@dataclass(frozen=True)
class WorkloadHashes:
    """What a deterministic workload produced on one GPU, as hashes of its outputs' bits, with the
    key under which the same hashes are expected anywhere (silent data corruption is caught by
    bitwise agreement: across repeats, across a node's GPUs, across a fleet). Two WorkloadHashes
    are comparable only when their `workload` and `key` are equal."""

    workload: str  # the workload's version: a changed workload never compares with an older one
    key: Dict[str, str]  # what the bits depend on: arch, device name, torch, ROCm/CUDA, BLAS library versions
    hashes: Dict[str, str]  # op -> hex digest of its outputs' bytes
    left_out: Dict[str, str] = field(default_factory=dict)  # op -> why (not deterministic on this device/library)
    compared: Dict[str, int] = field(default_factory=dict)  # how much work was compared: repeats, bytes, seconds

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "WorkloadHashes":
        return cls(str(data["workload"]), {str(k): str(v) for k, v in dict(data["key"]).items()},
                   {str(k): str(v) for k, v in dict(data["hashes"]).items()},
                   {str(k): str(v) for k, v in dict(data.get("left_out") or {}).items()},
                   {str(k): int(v) for k, v in dict(data.get("compared") or {}).items()})


def workload_hashes(verdict: "Verdict") -> Optional[WorkloadHashes]:
    """The deterministic workload's hashes a verdict carries, or None (most probes; a malformed record)."""
    found = verdict.measurements.get(SDC_MEASUREMENTS)
    try:
        return WorkloadHashes.from_dict(found) if isinstance(found, dict) else None
    except (KeyError, TypeError, ValueError):
        return None


def preloads(variants: Sequence["Variant"]) -> List[str]:
    """The modules the selected variants' probes ask the zygote to import once."""
    return sorted({module for v in variants for module in v.spec.preload})
