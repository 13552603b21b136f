"""The run options, declared once for both front-ends (the `rocmcheck` command line and the
pytest plugin's `--rocm-*` options and `rocm_*` ini keys), and `RunOptions`, built from them.

`add_to_argparse` and `add_to_pytest` build each front-end's options from `OPTIONS`, as
pytest-benchmark reuses its option functions. Each front-end (the commands, the plugin,
`rocmcheck.gate()`) hands what it was given to `RunOptions.build` as a `Given`: the one place
that reads each value command line > environment > ini (as pytest-timeout does) and checks
every option before anything runs; a bad value is a UsageError naming where it came from
(`--rocm-timeout`, `ini option rocm_isolation`, `$ROCMCHECK_EXPECT_GPUS`). It imports almost
nothing: the pytest plugin loads it in every pytest run, `--rocm-matrix` or not.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Dict, List, Mapping, Optional, Tuple

from ..errors import UsageError
from ..model import LEVEL_BUDGETS_S
from .killpolicy import KillPolicy

ISOLATIONS = ("zygote", "spawn")
INJECT_ENV = "ROCMCHECK_INJECT"
# Against a baseline, a speed figure regresses when it takes more than this percent longer than the
# baseline's (rocmcheck.outputs.diff): its fastest sample, or on a simulated GPU the median of each
# sample's time over the host's same work timed beside it. Chosen from measured run-to-run noise by
# a rule (scripts/speed_noise.py, tolerance_holds): a quarter above the worst healthy slowdown
# seen, at most half of a 2x slowdown. Measured on a loaded 2-core machine, 63 pairs of healthy
# `rocmcheck run` of the probes with speed figures, kept in tests/data/speed_noise.json
# (tests/test_speed_baseline.py holds this to the rule and to no false alarm over them): 2026-11-25,
# 12 on the CPU and 12 on two simulated GPUs (worst 23.7%, p2p-1-0); 2026-11-28 with 7 other
# sessions' tests running (load average 10-16), 16 on the CPU, 3 beside a memory-copying process, 12
# on one simulated GPU and 8 beside that process. Judged so, the worst was 34.0% (the CPU's
# matmul-fp32 under that load; a simulated GPU's 26.3%, matmul-bf16), 0 false alarms; by the fastest
# samples alone one simulated GPU's figures slowed by up to 2.4x (matmul-bf16; h2d-strided 2x), 6
# false alarms at 50% (issue 40). The drills that slow a simulated GPU's copies, products or memory
# work 2x (`speed_noise.py --drills`) read 72% slower or more. A real GPU's figures, timed by its
# own events, vary by a few percent; a link at half its width is 100% slower.
SPEED_TOLERANCE_PCT = 50.0
FIRST_USE_LIMIT_S = 120.0  # bounds a probe's first call by default: a cold cache (MIOpen's first conv took 63 s)
DEVICE_HELP = ("auto (every visible GPU; inside a torchrun rank its LOCAL_RANK GPU; the CPU only on a host "
               "without GPU), all, cpu, or cuda:N[,M...] (ROCm GPUs use the cuda name too; simgpu:N for the "
               "simulated GPUs of --inject simgpu)")


def device(text: str) -> str:
    """auto, all, cpu, or cuda:N[,M...] (hip:N is accepted: ROCm builds use the cuda name; simgpu:N
    names the simulated GPUs, and the GPUs under test take the type torch reports, whichever is given)."""
    if text in ("auto", "all", "cpu"):
        return text
    head, _, indexes = text.partition(":")
    numbers = indexes.split(",")
    if head in ("cuda", "hip", "simgpu") and all(n.isdigit() for n in numbers):
        kind = "simgpu" if head == "simgpu" else "cuda"
        return f"{kind}:" + ",".join(str(n) for n in dict.fromkeys(int(n) for n in numbers))
    raise ValueError(f"must be auto, all, cpu or cuda:N[,M...], not '{text}'")  # simgpu:N: see DEVICE_HELP


def positive(text: str) -> float:
    """A finite positive number: `inf` or `1e309` would let a hung probe run forever."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"'{text}' is not a number") from None
    if not 0 < value < math.inf:
        raise ValueError(f"must be a finite positive number, not {text}")
    return value


def whole(text: str) -> int:
    if not str(text).isdigit():
        raise ValueError(f"must be a whole number, not '{text}'")
    return int(text)


MAX_DURATION_S = 7 * 24 * 3600.0  # a burn-in longer than a week is a typo
_DURATION = re.compile(r"([0-9]*\.?[0-9]+)([smh]?)")


LEVELS_TEXT = ", ".join(map(str, list(LEVEL_BUDGETS_S)[:-1])) + f" or {list(LEVEL_BUDGETS_S)[-1]}"  # "1, 2 or 3"


def level(text: str) -> int:
    if str(text) not in {str(n) for n in LEVEL_BUDGETS_S}:
        raise ValueError(f"must be {LEVELS_TEXT}, not '{text}'")
    return int(text)


def duration(text: str) -> float:
    """Seconds, or minutes and hours with a unit (90, 90s, 15m, 2h), from 1 s to a week."""
    found = _DURATION.fullmatch(str(text).strip())
    if not found:
        raise ValueError(f"must be seconds (or 15m, 2h), not '{text}'")
    seconds = float(found.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[found.group(2)]
    if not 1 <= seconds <= MAX_DURATION_S:
        raise ValueError(f"must be from 1 s to {MAX_DURATION_S / 86400:g} days, not '{text}'")
    return seconds


def isolation(text: str) -> str:
    if text not in ISOLATIONS:
        raise ValueError(f"must be one of {', '.join(ISOLATIONS)}, not '{text}'")
    return text


SLOW_GPU = ("warn", "nogo")


def slow_gpu(text: str) -> str:
    if text not in SLOW_GPU:
        raise ValueError(f"must be one of {', '.join(SLOW_GPU)}, not '{text}'")
    return text


def inject(text: str) -> str:
    from .. import faults

    faults.parse(text)  # its own one-line UsageError names the unknown fault
    return text


@dataclass(frozen=True)
class Option:
    """One option: `--NAME` on the command line, `--rocm-NAME` and `rocm_NAME` under pytest."""

    name: str
    help: str
    metavar: Optional[str] = None
    parse: Optional[Callable[[str], Any]] = None  # text -> value; ValueError when bad
    requirement: str = ""  # what a good value is, for the error message
    env: Optional[str] = None  # read below the command line, above the ini file
    choices: Tuple[str, ...] = ()
    action: Optional[str] = None  # "store_true" or "append"
    ini: Optional[str] = None  # the pytest ini type ("string", "paths", "bool"); None: no ini key
    at_parse: bool = False  # argparse checks it (its message, e.g. "must be positive"); else `check` at the run

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def help_text(self) -> str:
        """The one help text both front-ends show."""
        return self.help + (f" (also ${self.env})" if self.env else "")


OPTIONS: Dict[str, Option] = {o.name: o for o in (
    Option("device", DEVICE_HELP, "DEVICE", device, "auto, all, cpu or cuda:N[,M...]", ini="string"),
    Option("isolation", "zygote: fork from a server that imported torch (POSIX default); spawn: fresh interpreter",
           "MODE", isolation, " or ".join(ISOLATIONS), choices=ISOLATIONS, ini="string"),
    Option("timeout", "per-variant timeout in seconds (overrides each probe's own); it bounds everything the "
           "variant does after GPU runtime init, its first use included, unless --first-use-timeout is given",
           "S", positive, "a finite positive number of seconds", ini="string", at_parse=True),
    Option("first_use_timeout", f"limit in seconds for a probe's first call (compilation, kernel search), kept "
           f"apart from the timeout (default {FIRST_USE_LIMIT_S:g}, or the --timeout given)", "S", positive,
           "a finite positive number of seconds", ini="string", at_parse=True),
    Option("deadline", "bound the whole run to S seconds from the command's start: at S the running probes are "
           "killed and the run ends UNKNOWN (exit 2) with its verdict and reports written, about 2 s later; set it "
           "below the scheduler's own limit (Slurm's PrologEpilogTimeout), whose kill would leave no verdict",
           "S", positive, "a finite positive number of seconds", at_parse=True),
    Option("killed_after", "the seconds from the command's start after which its caller kills it (Slurm's "
           "PrologEpilogTimeout, NHC's TIMEOUT): the deadline is kept below it by a margin (10 s, or half the limit "
           "where that is less), --deadline lowered to it with a line on stderr where it was above; without "
           "--deadline it is the deadline; the verdict's notes say so", "S", positive,
           "a finite positive number of seconds", at_parse=True),
    Option("inject", "inject faults, NAME[:ARG][@PROBE_GLOB],... (see: rocmcheck list --faults)", "FAULT[,FAULT]",
           inject, env=INJECT_ENV),
    Option("probes_path", "also load probe modules from DIR (repeatable; also $ROCMCHECK_PROBES_PATH, which "
           "rocmcheck.registry reads)", "DIR",
           action="append", ini="paths"),
    Option("gate_only", "only variants in the gate (gate profile)", action="store_true", ini="bool"),
    Option("expect_gpus", "fail when torch sees fewer than N GPUs", "N", whole, "a whole number",
           env="ROCMCHECK_EXPECT_GPUS", at_parse=True),
    Option("slow_gpu", "what a GPU slower than the node's other GPUs of its model makes the run (a speed figure "
           "below 0.8 x their median): warn (the default) or nogo (fail: the gate says NO-GO)", "WHAT", slow_gpu,
           " or ".join(SLOW_GPU), env="ROCMCHECK_SLOW_GPU", choices=SLOW_GPU),
    Option("level", f"how long probes with levels (sdc; gpu-memory and sustained-load from level 2) work per GPU: 1 "
           f"({LEVEL_BUDGETS_S[1]:g} s, the gate's), 2 (about {LEVEL_BUDGETS_S[2] / 60:g} minutes of sustained work), "
           f"3 "
           f"(a burn-in of --duration, default "
           f"{LEVEL_BUDGETS_S[3] / 60:g} minutes); default 1", "N", level,
           LEVELS_TEXT, ini="string", at_parse=True),
    Option("duration", "the budget per GPU of --level 2 or 3: seconds, or 15m, 2h (1 s to 7 days)", "D", duration,
           "seconds from 1 to a week (or 15m, 2h)", ini="string", at_parse=True),
    Option("baseline", "report (.json) or journal (.jsonl) of an earlier run: only regressions against it fail",
           "FILE", ini="string"),
    Option("speed_tolerance", f"against a baseline, a speed figure regresses when the same work takes more than "
           f"PCT percent longer (its median rate below baseline/(1+PCT/100)); default {SPEED_TOLERANCE_PCT:g}, "
           "from the run-to-run noise measured on a loaded 2-core machine", "PCT", positive,
           "a finite positive number of percent", ini="string", at_parse=True),
)}


def check_outputs(folders: Dict[str, Optional[Path]], files: Dict[str, Optional[Path]],
                  stdout: Collection[str] = (), writable: Collection[str] = ()) -> None:
    """Where a command will write, by flag, checked before any probe runs or any file is read:
    the one check of every command's output paths. A folder (created when missing: the run's
    own --out-dir) must not be a file, nor lie under one; a file must not be a folder, and its
    folder must exist or be one of `folders` (rocmcheck creates no other: a typo in
    `--json /nonexistent/dir/run.json` would scatter reports). `-` is stdout for the flags in
    `stdout`; for any other it would be a file named `-`, or nothing at all, so it is refused.
    The files of the flags in `writable` (a deployment reads them: the Prometheus textfile) must
    be writable now: a file is made and removed beside each, as its atomic write will."""
    for flag, folder in folders.items():
        ancestor = folder
        while ancestor is not None and not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if ancestor is not None and ancestor.exists() and not ancestor.is_dir():
            raise UsageError(f"{flag} {folder}: {ancestor} is a file, not a folder")
    for flag, path in files.items():
        if path is not None and str(path) == "-" and flag not in stdout:
            who = f"only {' and '.join(sorted(stdout))} writes" if stdout else "this command writes nothing"
            raise UsageError(f"{flag} -: {who} to stdout ('-') here; name a file")
        if path is None or str(path) == "-":
            continue
        if path.is_dir():
            raise UsageError(f"{flag} {path} is a folder: name a file")
        made = {Path(os.path.abspath(f)) for f in folders.values() if f is not None}
        if not path.parent.is_dir() and Path(os.path.abspath(path.parent)) not in made:
            raise UsageError(f"{flag} {path}: the folder {path.parent} does not exist")
        if flag in writable and path.parent.is_dir():
            try:
                with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".check"):
                    pass
            except OSError as exc:
                raise UsageError(f"{flag} {path}: cannot write in {path.parent} ({exc.strerror or exc})") from None


def check(name: str, value: Any, where: str) -> Any:
    """`value` through option `name`'s parser; a bad one is a UsageError naming `where`."""
    option = OPTIONS[name]
    try:
        return option.parse(str(value)) if option.parse else value
    except ValueError:
        raise UsageError(f"{where} must be {option.requirement}, not '{value}'") from None


@dataclass(frozen=True)
class Given:
    """What one front-end was given for the table's options: its command line (option name ->
    value, None or empty where not given, for every option it offers: one it does not offer is
    not read from the environment either), under pytest its ini file, and how it names an
    option in an error (`named`, a format of the option's `name` or `dashed` name)."""

    command_line: Mapping[str, Any]
    named: str = "--{dashed}"
    ini: Mapping[str, Any] = field(default_factory=dict)

    def flag(self, name: str) -> str:
        """How this front-end names option `name` (`--level`, `--rocm-level`, `rocmcheck.gate(level=...)`)."""
        return self.named.format(name=name, dashed=name.replace("_", "-"))

    def value(self, name: str) -> Any:
        """Option `name`: the command line over the environment over the ini file, checked
        (None when none of them sets it; an empty environment variable does not)."""
        if name not in self.command_line:
            return None
        option = OPTIONS[name]
        flag = self.flag(name)
        from_env = os.environ.get(option.env, "") if option.env else ""
        for value, where in ((self.command_line.get(name), flag), (from_env, f"${option.env}"),
                             (self.ini.get(name), f"ini option rocm_{name}")):
            if value is not None and value not in ("", []):
                return check(name, value, where)
        return None


def default_isolation() -> str:
    return "zygote" if os.name == "posix" and hasattr(os, "fork") else "spawn"


@dataclass(frozen=True)
class RunOptions:
    """One run's options. `build` makes them from a front-end's input and checks them all there,
    once: nothing downstream checks again. Made directly (tests, benchmarks), they are trusted."""

    device: str = "auto"
    isolation: str = field(default_factory=default_isolation)
    timeout: Optional[float] = None  # overrides every probe's own timeout, and bounds first use too
    first_use_timeout: Optional[float] = None  # bounds `ctx.first_use()` apart from the timeout (default: 120 s)
    inject: str = ""  # fault spec, see rocmcheck.faults
    profile: str = "full"
    probes_paths: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)  # set in every child
    preload: List[str] = field(default_factory=list)  # modules imported once by the zygote
    out_dir: Path = Path("reports")
    named_files: Dict[str, Path] = field(default_factory=dict)  # output (json, md, ...) -> the file its option named
    write_files: bool = True
    command: str = "run"
    kill_policy: KillPolicy = KillPolicy()  # how a hung child is ended, and how long its tree may take to go
    needs_torch: bool = True  # False for `rocmcheck env`, which reports a missing torch as a fact
    expect_gpus: Optional[int] = None  # fewer GPUs seen fails gpu-visible (a fleet's node check)
    slow_gpu: str = "warn"  # what a GPU slower than its peers makes the run: warn, or nogo (its verdict fails)
    level: int = 1  # which variants of probes with levels run (`--level`), and so their budget
    duration: Optional[float] = None  # `--duration`: the budget per GPU of level 2 or 3 in place of its default
    deadline: Optional[float] = None  # the whole run's budget in seconds from the process's start (POSIX)
    deadline_why: str = ""  # how --killed-after set or lowered the deadline: a note of the run, and its cause's text
    keep_going: bool = True  # False (the gate's default): a GPU with a bad verdict runs no more of its queue
    timed_from_process_start: bool = False  # the run's wall time counts the process's start (the commands)

    @classmethod
    def build(cls, given: Given, folders: Optional[Mapping[str, Optional[Path]]] = None,
              files: Optional[Mapping[str, Optional[Path]]] = None, profile: Optional[str] = None,
              stdout: Collection[str] = (), writable: Collection[str] = (), **fixed: Any) -> "RunOptions":
        """The options of one run from what a front-end was given, each checked now, before any
        probe runs: where it will write (`folders`, `files`, `stdout`, `writable` by flag: `check_outputs`), the
        probes paths (their modules load, so the faults they declare are known to the fault spec),
        every option of the table, then $ROCMCHECK_KNOWN_ISSUES. `profile`: gate under
        --gate-only, else full, unless the command fixes it; `fixed`: the fields no option sets."""
        from .. import registry
        from ..knowledge import known_issues, speed

        check_outputs(dict(folders or {}), dict(files or {}), stdout, writable)
        probes_paths = [str(p) for p in given.value("probes_path") or []]
        registry.load_all(probes_paths)
        options = cls(device=given.value("device") or "auto", isolation=given.value("isolation") or default_isolation(),
                      timeout=given.value("timeout"), first_use_timeout=given.value("first_use_timeout"),
                      inject=given.value("inject") or "", probes_paths=probes_paths,
                      expect_gpus=given.value("expect_gpus"), slow_gpu=given.value("slow_gpu") or "warn",
                      level=given.value("level") or 1, duration=given.value("duration"),
                      **bounded_deadline(given.value("deadline"), given.value("killed_after"),
                                         given.flag("deadline"), given.flag("killed_after")),
                      profile=profile or ("gate" if given.value("gate_only") else "full"), **fixed)
        if options.duration is not None and options.level < 2:
            raise UsageError(f"{given.flag('duration')} is the budget of level 2 or 3: add {given.flag('level')} 2 "
                             f"or 3 (level 1, the gate's, works {LEVEL_BUDGETS_S[1]:g} s per GPU)")
        known_issues.entries()  # a broken file is bad input now, not at the first failure
        speed.rows()  # and a broken speed spec table too
        if options.deadline is not None and not hasattr(signal, "setitimer"):  # the runner's timer (Windows has none)
            raise UsageError("--deadline needs a POSIX interval timer (setitimer), which this platform lacks")
        if options.device.startswith("simgpu:"):  # else the run would look for cuda:N and say it is not present
            from .. import faults

            if not any(r.name == "simgpu" for r in faults.parse(options.inject)):
                last = max(int(n) for n in options.device.partition(":")[2].split(","))
                raise UsageError(f"--device {options.device} names simulated GPUs, which exist only with "
                                 f"--inject simgpu:N (N at least {last + 1})")
        return options


# What a run needs between its deadline and its caller's kill (--killed-after): to end its children, write
# its reports and verdict and exit, and the caller (the Slurm prolog recipe) to keep the verdict and drain.
# Measured on a 2-core machine: the gate exits 0.06 s after its deadline idle; the recipe's rename and
# `scontrol update` take about 0.1 s more. 10 s leaves room for a loaded node (the recipe's old advice).
KILL_MARGIN_S = 10.0


def bounded_deadline(deadline: Optional[float], killed_after: Optional[float], deadline_flag: str = "--deadline",
                     killed_flag: str = "--killed-after") -> Dict[str, Any]:
    """The run's deadline under its caller's kill: `killed_after` less a margin (KILL_MARGIN_S, or
    half of `killed_after` where that is less, so a short limit still leaves the gate some time),
    `deadline` where that is already below, as RunOptions fields (`deadline`, `deadline_why`)."""
    if killed_after is None:
        return {"deadline": deadline, "deadline_why": ""}
    margin = min(KILL_MARGIN_S, killed_after / 2)
    bound = killed_after - margin
    why = f"killed after {killed_after:g}s ({killed_flag}) less a {margin:g}s margin"
    if deadline is not None and deadline <= bound:
        return {"deadline": deadline, "deadline_why": ""}
    if deadline is None:
        return {"deadline": bound, "deadline_why": f"deadline {bound:g}s: {why}"}
    return {"deadline": bound, "deadline_why": f"{deadline_flag} {deadline:g}s lowered to {bound:g}s: {why}"}


def argparse_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """`parse` as an argparse `type`: its ValueError becomes argparse's one-line error."""
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return convert


def add_to_argparse(parser: argparse.ArgumentParser, *names: str) -> None:
    """`--NAME` for each option (the environment and checks other than `at_parse` come in `RunOptions.build`)."""
    for name in names:
        o = OPTIONS[name]
        help_text = o.help_text
        if o.action == "store_true":
            parser.add_argument(o.flag, action="store_true", help=help_text)
        elif o.action == "append":
            parser.add_argument(o.flag, action="append", default=[], metavar=o.metavar, help=help_text)
        elif o.choices:
            parser.add_argument(o.flag, choices=o.choices, default=None, help=help_text)
        else:
            parser.add_argument(o.flag, type=argparse_type(o.parse) if o.at_parse and o.parse else str,
                                default=None, metavar=o.metavar, help=help_text)


def add_to_pytest(group: Any, parser: Any, *names: str) -> None:
    """`--rocm-NAME` (all in the `rocmcheck` group) and, where the option has one, the ini key `rocm_NAME`."""
    for name in names:
        o = OPTIONS[name]
        kwargs: Dict[str, Any] = {"action": o.action} if o.action else {}
        if o.action != "store_true":
            kwargs["metavar"] = o.metavar
        group.addoption(f"--rocm-{o.flag[2:]}", dest=f"rocm_{name}", default=None, help=o.help_text, **kwargs)
        if o.ini:
            default = {"paths": [], "bool": False}.get(o.ini, "")
            parser.addini(f"rocm_{name}", o.help_text, type=None if o.ini == "string" else o.ini, default=default)
