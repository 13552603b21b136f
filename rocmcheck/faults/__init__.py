"""Fault injection: make a probe meet a known fault, on any machine.

A fault is installed inside the probe's child process, right before the probe runs,
at the torch API level (a patched `Tensor.to`, `torch.matmul`, `autograd.backward`...)
or at the process level (a signal, an abort, a flood of output). The probe's own
detection logic then has to catch it, which is how the project's tests prove every
detector on a machine without a GPU, and how users prove their gate and CI fail.

Spec syntax (`--inject` or ROCMCHECK_INJECT, read by `rocmcheck.engine.options`): `NAME[:ARG][@PROBE_GLOB]`,
comma-separated.
ARG narrows the fault (e.g. one copy API); PROBE_GLOB limits it to matching probe ids.
"""
from __future__ import annotations

import contextlib
import fnmatch
import importlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple

from ..errors import UsageError

_BUILTIN_MODULES = ("process", "data", "system", "device")

_FAULTS: Dict[str, "Fault"] = {}
_ABSENT = object()
_PATCHED: List[Tuple[Any, str, Any]] = []  # (owner, name, what owner's own namespace held), for `reverting`


def patch(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
    """Replace `owner.name` with `make(original)`: how every fault changes torch (or rocmcheck), so
    that `reverting` can put it back."""
    _PATCHED.append((owner, name, vars(owner).get(name, _ABSENT)))
    setattr(owner, name, make(getattr(owner, name)))


@contextlib.contextmanager
def reverting() -> Iterator[None]:
    """Put back on leaving what the faults installed inside changed (their patches, the environment):
    a child ends instead, but `rocmcheck.testing.run_inline` runs a probe in its caller's process."""
    mark, environ = len(_PATCHED), dict(os.environ)
    try:
        yield
    finally:
        while len(_PATCHED) > mark:
            owner, name, held = _PATCHED.pop()
            if held is _ABSENT:
                delattr(owner, name)  # it was inherited (a torch.Tensor method from its C base)
            else:
                setattr(owner, name, held)
        os.environ.clear()
        os.environ.update(environ)


@dataclass(frozen=True)
class Fault:
    name: str
    help: str
    install: Callable[[Optional[str]], None]
    args: str = ""  # what ARG may be, for the catalogue
    choices: Tuple[str, ...] = ()
    in_facts: bool = False  # also installed in the device-facts child (what torch reports about devices)
    in_probe: bool = False  # acts at once, as the probe's own code would (a hang, a crash): installed after
    # runtime init, once the probe's timeout runs; the others patch torch before runtime init
    prepare: Optional[Callable[[Optional[str]], None]] = None  # run once in the parent before any child
    needs: Optional[str] = None  # another fault that must be in the same spec
    whole_run: bool = False  # the same for every probe (the simulated device, an older torch's API): a worker
    # installs it once; a task that meets any other fault before its probe starts runs in a child of its own
    parse_arg: Optional[Callable[[str], Any]] = None  # ARG -> its value, ValueError when bad (in place of a number)
    simulates: bool = False  # it simulates a machine or stack (GPUs, an older torch) and plants no fault: a run
    # with only such faults is a simulation, not a drill (`drill_split`)

    def check_arg(self, arg: Optional[str]) -> None:
        """ARG must match one of `choices` (globs allowed); with none, what `parse_arg` accepts, else
        `args` names a whole number; a fault without `args` takes no ARG. Raises UsageError."""
        if arg is None:
            return
        if self.parse_arg is not None:
            try:
                self.parse_arg(arg)
            except ValueError:
                raise UsageError(f"fault '{self.name}' takes {self.args}, not '{arg}'") from None
        elif self.choices:
            if not any(fnmatch.fnmatchcase(c, arg) for c in self.choices):
                raise UsageError(f"fault '{self.name}' takes {'|'.join(self.choices)}, not '{arg}'")
        elif not self.args:
            raise UsageError(f"fault '{self.name}' takes no argument (got '{arg}')")
        elif not arg.isdigit():
            raise UsageError(f"fault '{self.name}' takes a whole number ({self.args}), not '{arg}'")


def fault(name: str, help: str, args: str = "", choices: Sequence[str] = (), in_facts: bool = False,
          in_probe: bool = False, prepare: Optional[Callable[[Optional[str]], None]] = None,
          needs: Optional[str] = None, whole_run: bool = False,
          parse_arg: Optional[Callable[[str], Any]] = None, simulates: bool = False) -> Callable[
        [Callable[[Optional[str]], None]], Callable[[Optional[str]], None]]:
    """Register `install(arg)` as fault `name`; it runs in the child before the probe.

    `choices` lists what ARG may name (a glob over them is accepted); without choices,
    `args` describes a whole-number ARG; a fault with neither takes no ARG. `in_facts`: the
    fault changes what torch reports about devices, so the device-facts child gets it too.
    `in_probe`: the fault acts at once (blocks, crashes, exits), so it is installed where the
    probe would meet it, after runtime init, and its hang is bounded by the probe's timeout.
    `prepare(arg)` runs in the parent before any child (a build, say); `needs` names a fault
    the spec must also hold. `whole_run`: the fault sets up the whole run alike for every probe,
    so probes meeting it may share a worker child. `parse_arg(ARG)` checks an ARG that is neither
    a choice nor a whole number (a rate, `IDX:RATE`), raising ValueError when it is bad.
    `simulates`: it plants no fault, it only simulates what the run is on (its verdicts are true
    of the simulation), so it alone makes no drill.
    """

    def register(install: Callable[[Optional[str]], None]) -> Callable[[Optional[str]], None]:
        _FAULTS[name] = Fault(name, help, install, args or "|".join(choices), tuple(choices), in_facts, in_probe,
                              prepare, needs, whole_run, parse_arg, simulates)
        return install

    return register


def _loaded() -> Dict[str, Fault]:
    """The faults of rocmcheck.faults' own modules and of every probe module loaded so far."""
    for mod in _BUILTIN_MODULES:
        importlib.import_module(f"{__name__}.{mod}")
    return _FAULTS


def catalogue() -> Dict[str, Fault]:
    """Every known fault: the built-in ones (here, and beside the probe each proves in the built-in
    library) plus those registered by the users' probe modules loaded so far."""
    from .. import registry

    for mod in registry.builtin_modules():
        importlib.import_module(mod)
    return dict(sorted(_loaded().items()))


@dataclass(frozen=True)
class FaultRequest:
    name: str
    arg: Optional[str] = None
    scope: str = "*"

    def applies_to(self, probe_id: str) -> bool:
        return fnmatch.fnmatchcase(probe_id, self.scope)

    def __str__(self) -> str:
        text = self.name + (f":{self.arg}" if self.arg else "")
        return text + (f"@{self.scope}" if self.scope != "*" else "")


def parse(spec: str) -> List[FaultRequest]:
    """Parse and validate an injection spec; unknown names are a UsageError."""
    known = _loaded()
    requests = []
    parts = [p.strip() for p in spec.split(",")] if spec.strip() else []
    for part in parts:
        name, arg, at, scope = _parts(part)
        if not part or (at and not scope):
            raise UsageError(f"fault spec '{spec}' has an empty {'fault' if not part else 'probe glob after @'}: "
                             "write NAME[:ARG][@PROBE_GLOB][,...]")
        if name not in known:  # beside a probe: only now is the library loaded (a rank program runs a
            known = catalogue()  # probe module as __main__, which must not be loaded a second time)
        if name not in known:
            raise UsageError(f"unknown fault '{name}' (see: rocmcheck list --faults)")
        known[name].check_arg(arg or None)
        requests.append(FaultRequest(name, arg or None, scope or "*"))
    for req in requests:
        needs = known[req.name].needs
        if needs and not any(r.name == needs for r in requests):
            raise UsageError(f"fault '{req.name}' needs '{needs}' in the same spec (e.g. --inject {needs},{req.name})")
    return requests


def _parts(part: str) -> Tuple[str, str, str, str]:
    """One `NAME[:ARG][@PROBE_GLOB]` as (name, arg, "@" or "", glob)."""
    body, at, scope = part.partition("@")
    name, _, arg = body.partition(":")
    return name, arg, at, scope


def drill_split(injected: Sequence[str]) -> Tuple[List[str], List[str]]:
    """(planted, simulated): the faults of `injected` (each `NAME[:ARG][@PROBE_GLOB]`, as a spec's
    parts or a report's `faults_injected` name them) that plant a fault, which make the run a
    drill, and those that only simulate what it runs on (`simulates`: simulated GPUs, an older
    torch's API). Read from a report, so never raises: a name this rocmcheck does not know
    (another version's, a probe module's not loaded here) counts as planted, so that a drill is
    never taken for a real run. Each once, in order."""
    known = _loaded()
    planted: List[str] = []
    simulated: List[str] = []
    for text in dict.fromkeys(str(t).strip() for t in injected):
        if text:
            fault = known.get(_parts(text)[0])
            (simulated if fault is not None and fault.simulates else planted).append(text)
    return planted, simulated


def unaimed(requests: List[FaultRequest], probe_ids: Sequence[str]) -> List[FaultRequest]:
    """The requests whose @PROBE_GLOB matches none of `probe_ids`: they would inject nothing
    (a typo, or a variant id where the glob is matched against probe ids)."""
    return [r for r in requests if r.scope != "*" and not any(r.applies_to(p) for p in probe_ids)]


def prepare(requests: List[FaultRequest]) -> None:
    """In the parent, before any child: what the requested faults need done once (UsageError if it cannot be)."""
    known = _loaded()
    for req in requests:
        setup = known[req.name].prepare
        if setup:
            setup(req.arg)


def worker_faults(requests: List[FaultRequest], probe_id: str) -> Optional[FrozenSet[str]]:
    """The whole-run faults `probe_id` meets before it starts (a worker installs them once, so
    probes share a worker only with the same set), or None when another fault patches its
    process first and it needs a child of its own. Faults that act inside the probe (a crash,
    a hang) end or leave the worker as the probe's own failure would."""
    known = _loaded()
    applying = [r for r in requests if r.applies_to(probe_id) and not known[r.name].in_probe]
    if not all(known[r.name].whole_run for r in applying):
        return None
    return frozenset(str(r) for r in applying)


def run_wide(requests: List[FaultRequest]) -> Optional[FrozenSet[str]]:
    """The faults every probe's worker has, when each request is whole-run and meets every probe
    (then the device-facts child's process is fit to become a worker: `worker_faults` gives every
    probe this same set); None when some fault meets only some probes or patches a probe's process."""
    known = _loaded()
    if not all(known[r.name].whole_run and not known[r.name].in_probe and r.scope == "*" for r in requests):
        return None
    return frozenset(str(r) for r in requests)


def install(requests: List[FaultRequest], probe_id: str, facts_only: bool = False,
            in_probe: Optional[bool] = None) -> List[str]:
    """Install the requests that apply to `probe_id` (in the device-facts child: only the faults
    that change what torch reports about devices; with `in_probe` given, only the faults whose
    `in_probe` it equals); returns what was installed."""
    known = _loaded()
    installed = []
    for req in requests:
        wanted = in_probe is None or known[req.name].in_probe == in_probe
        if req.applies_to(probe_id) and wanted and (known[req.name].in_facts or not facts_only):
            known[req.name].install(req.arg)
            installed.append(str(req))
    return installed
