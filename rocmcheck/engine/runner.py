"""Run probe variants, one queue per device under test, and keep every verdict.

The runner never imports torch and never touches the GPU: device facts come from a
child, and each variant runs as a `Task` in its device's worker child or in a child of its
own (`rocmcheck.engine.isolation`); a bad verdict from a worker is confirmed alone. Each verdict
reaches the journal before the next probe starts. Ctrl-C or SIGTERM ends the run with a
partial report that names the interrupted probe.
"""
from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import psutil

from .. import __version__, agreement, faults, registry, torchapi
from ..context import ProbeContext
from ..errors import Interrupted, TorchMissing, UsageError, interrupts_taken
from ..host import fingerprint, hostgpu, kernellog
from ..knowledge import known_issues, speed
from ..knowledge.signatures import BY_MEANING, signatures
from ..model import (
    NOT_RUN_DECIDED,
    SPEED_MEASUREMENTS,
    DeviceInfo,
    RunsIn,
    Status,
    Variant,
    VariantCost,
    Verdict,
    preloads,
)
from ..outputs.storage import Journal, Output, journal_path, new_run_id, write_outputs
from ..records import BEFORE_FIRST, COST_SECTION, SCHEMA, SCHEMA_VERSION, Report, RunCost, RunInfo, interruption_note
from ..safetext import clean, clean_env, clean_tree
from . import devices
from .devices import GPU_VISIBLE
from .isolation import Isolation
from .options import FIRST_USE_LIMIT_S, RunOptions
from .task import Task, TaskResult
from .verdicts import assemble, confirmed, end_summary, not_run, outcome, read_text
from .watchdog import ChildEnd

NO_BINARY = next(m for m, sig in BY_MEANING.items() if sig.id == "hip-no-binary-for-gpu")
FACTS_TIMEOUT_S = 120.0
FACTS_CALL = "rocmcheck.host.fingerprint:device_facts"  # its function's name is the probe id its faults see


def check_fault_targets(inject: str, variants: Sequence[Variant]) -> None:
    """A fault aimed at no probe of the run is bad input, said before anything starts: else the
    run would be GO with nothing injected. What may run in every run counts too: the GPU check
    (first, selected or not, where the host needs it), the device canary and the device facts."""
    ids = sorted({v.spec.id for v in variants} | {GPU_VISIBLE, devices.CANARY_PROBE, FACTS_CALL.partition(":")[2]})
    missed = faults.unaimed(faults.parse(inject), ids)
    if missed:
        listed = ", ".join(ids[:8]) + (f" and {len(ids) - 8} more" if len(ids) > 8 else "")
        raise UsageError(f"fault '{missed[0]}' is aimed at no probe of this run: '{missed[0].scope}' matches "
                         f"none of {listed} (the glob after @ is matched against probe ids)")


class Runner:
    """One run: a launcher, a journal, the device facts and the verdicts so far."""

    def __init__(self, options: RunOptions, on_verdict: Optional[Callable[[Verdict], None]] = None,
                 on_note: Optional[Callable[[str], None]] = None,
                 outputs: Sequence[Output] = ()):
        self.opts = options
        self.outputs = outputs  # the files to write at the end, with their renderers: the runner renders nothing
        self.on_verdict = on_verdict or (lambda v: None)
        self.on_note = on_note or (lambda s: None)
        faults.prepare(faults.parse(options.inject))  # what the faults need done once in the parent (a build)
        self.run_id = new_run_id()
        self.tmp = scratch_dir()
        # removed when the run closes, and failing that when the runner goes or the interpreter exits
        # (bad input after the start, a test that skips half-way): no rocmcheck-* folder is left behind
        self._remove_tmp = weakref.finalize(self, shutil.rmtree, self.tmp, ignore_errors=True)
        self.notes: List[str] = []
        self.verdicts: List[Verdict] = []
        self.isolation = Isolation(options.isolation, options.probes_paths, options.env, options.inject,
                                   options.kill_policy, self.note)
        self.device = DeviceInfo()  # the first (or only) device under test
        self.devices: List[DeviceInfo] = [self.device]  # every device under test, one queue each
        self.facts: Dict[str, Any] = {}
        self.facts_s: Optional[float] = None  # the device facts' child, wall time (`resolve_device`)
        self.wedged: Dict[str, str] = {}  # device -> the variant after which its canary failed
        self.gpu_problem: Optional[str] = None  # the host has GPUs that this torch cannot use
        self._arch_fix: Optional[str] = None  # computed once, for children that die with no code object
        self.journal: Optional[Journal] = None
        self.unwritten: Dict[str, str] = {}  # output (jsonl, json, md, ...) -> "path: why" it could not be written
        self.sections: Dict[str, Any] = {}  # extra report sections (doctor's results), written with the report
        self.current: Optional[str] = None  # what runs now, named in the report if interrupted
        self.baselines: Dict[str, Any] = {}  # probe id -> what its baseline() read before the first probe
        self._seq = 0
        self._lock = threading.Lock()  # per-device queues share the journal and the counters
        self.started_at = time.time()
        # where the run's wall time is counted from: the process's start for the commands (their imports count
        # against the budget as a user's wait does), else this runner's (a library call in a long-lived process)
        self.clock_from = time.monotonic() - (process_age() if options.timed_from_process_start else 0.0)
        self.spans: List[Tuple[float, float]] = []  # (start, end) of every variant that ran, monotonic
        self.decided: Dict[str, Verdict] = {}  # device -> the bad verdict that decided its NO-GO (the gate stops it)

    # --- files -------------------------------------------------------------------------

    def paths(self) -> Dict[str, Path]:
        """Where the journal and each output with a path go."""
        found = {o.name: o.path(self.opts.out_dir, self.run_id, self.opts.named_files) for o in self.outputs}
        return {"jsonl": journal_path(self.opts.out_dir, self.run_id),
                **{name: path for name, path in found.items() if path is not None}}

    def note(self, text: str, say: bool = True) -> None:
        text = clean(text)
        self.notes.append(text)
        if say:
            self.on_note(text)

    def _cannot_write(self, kind: str, path: Path, exc: OSError) -> str:
        """Remember a file that could not be written (a read-only folder, a full disk): the
        verdicts stand without it, and the caller says so in one line."""
        why = self.unwritten[kind] = f"{path}: {exc.strerror or exc}"
        return why

    # --- tasks ---------------------------------------------------------------------------

    def _task(self, **fields: Any) -> Task:
        with self._lock:
            self._seq += 1
            prefix = str(self.tmp / f"{self._seq:04d}")
        return Task(prefix=prefix, probes_paths=[str(p) for p in self.opts.probes_paths], faults=self.opts.inject,
                    **fields)

    def _first_use_note(self, task: Task) -> Callable[[float], None]:
        """What the user hears while a probe compiles or searches kernels for long."""
        limit = task.first_use_limit  # None: the timeout bounds it
        bound = f"its limit {limit:g}s" if limit is not None else f"the timeout {task.timeout:g}s"
        where = f" on {task.device}" if task.device != "cpu" else ""
        return lambda s: self.on_note(f"{task.variant}{where}: in first use (compiling or searching kernels) "
                                      f"for {s:.0f}s, within {bound}")

    # --- device ------------------------------------------------------------------------

    def check_torch_version(self) -> None:
        """A torch below the supported range: could not assess (exit 2), before any child starts."""
        found = torchapi.installed_version()
        if self.opts.needs_torch and found and not torchapi.supported(found):
            choice = hostgpu.torch_choice(hostgpu.read())
            raise TorchMissing(f"torch {found} is older than rocmcheck supports (torch {torchapi.OLDEST} through the "
                               f"newest), so nothing can be assessed; {choice.reason}: "
                               f"{choice.command(sys.executable)}")

    def resolve_device(self) -> None:
        """Ask a child for device facts; `devices.resolve` holds them against the host's own GPU
        inventory and `--device`. A torch that cannot be imported stops the run here."""
        # faults: in_facts only
        task = self._task(call=FACTS_CALL, timeout=FACTS_TIMEOUT_S)
        key = self.isolation.facts_worker_key() if self.opts.device != "cpu" else None  # a CPU run: no GPU init to keep
        started = time.monotonic()
        end = self.isolation.run_in_worker(task, key)[0] if key else self.isolation.run(task, {}, fresh=False)
        self.facts_s = time.monotonic() - started
        result = TaskResult.read(task.files.result)
        self.facts = clean_tree((result.data if result else None) or {"error": end_summary(end)})
        if result is None and NO_BINARY in signatures(end.output):
            fix = self.arch_fix()
            self.facts.update(error=f"{end_summary(end)}: hipErrorNoBinaryForGpu at the first HIP call: {fix}",
                              action=fix)
        if self.facts.get("torch_error") and self.opts.needs_torch:
            choice = hostgpu.torch_choice(hostgpu.read())
            raise TorchMissing(f"torch cannot be imported here ({self.facts['torch_error']}), so nothing can be "
                               f"assessed; {choice.reason}: {choice.command(sys.executable)}")
        chosen = devices.resolve(self.opts.device, self.facts, hostgpu.read())
        for text in chosen.notes:
            self.note(text)
        self.gpu_problem = chosen.gpu_problem
        self.devices = chosen.devices
        self.device = self.devices[0]
        self.isolation.adopt_facts_worker(devices.facts_worker_device(self.devices))

    def arch_fix(self) -> str:
        """Which wheel or override makes torch run on this host's GPUs, for a child that died with
        hipErrorNoBinaryForGpu: the cards' archs from the KFD topology, the wheel's arch list from a
        child that reads it without initialising the GPU, the override in effect."""
        if self._arch_fix is None:
            host = hostgpu.read()
            arch_list = self.facts.get("arch_list") if self.facts.get("device_count") else None
            if arch_list is None:
                task = self._task(call="rocmcheck.host.fingerprint:wheel_facts", timeout=FACTS_TIMEOUT_S)
                self.isolation.run(task, {}, fresh=False)
                wheel = TaskResult.read(task.files.result)
                arch_list = ((wheel.data if wheel else None) or {}).get("arch_list")
            override = {**os.environ, **self.opts.env}.get("HSA_OVERRIDE_GFX_VERSION")
            install = hostgpu.torch_choice(host).command()
            cards = dict.fromkeys(hostgpu.gfx_from_kfd(t) for t in host.kfd_gfx_targets)
            self._arch_fix = clean("; ".join(f"{card}: {hostgpu.arch_advice(card, arch_list, override, install)}"
                                             for card in cards)
                                   or f"install a torch wheel built for this GPU's arch (rocminfo names it): {install}")
        return self._arch_fix

    def with_gpu_check(self, variants: List[Variant]) -> List[Variant]:
        """Where torch cannot use the host's GPUs, or a GPU count is expected, the check that says so
        runs first, selected or not."""
        wanted = self.gpu_problem or self.opts.expect_gpus is not None
        if not wanted or any(v.spec.id == GPU_VISIBLE for v in variants):
            return variants
        from .selection import select

        return select(registry.load_all(self.opts.probes_paths), [GPU_VISIBLE]) + variants

    def fingerprint(self) -> Dict[str, Any]:
        dev = self.device
        return {"host": clean_tree(fingerprint.host_facts()), "device_facts": self.facts,
                "device": {"name": dev.name, "backend": dev.backend, "count": dev.count, "arch": dev.arch,
                           "under_test": [d.name for d in self.devices]}}

    # --- one variant -------------------------------------------------------------------

    def run_variant(self, variant: Variant, env: Optional[Dict[str, str]] = None,
                    timeout: Optional[float] = None, device: Optional[DeviceInfo] = None,
                    alone: bool = False) -> Verdict:
        """Run one variant on `device` (default: the first under test); `env` adds variables set
        before the child imports torch (a fresh interpreter then), `timeout` replaces the
        variant's own, and `alone` keeps it out of the device's worker (doctor's attempts: each
        one observation, never re-run to confirm)."""
        device = device or self.device
        verdict = self._run_variant(variant, env, timeout, device, alone)
        verdict.device = devices.label(device, self.facts)
        return verdict

    def _run_variant(self, variant: Variant, env: Optional[Dict[str, str]], timeout: Optional[float],
                     device: DeviceInfo, alone: bool) -> Verdict:
        spec = variant.spec
        reason = spec.requires.unmet(device, sys.platform)
        if self.gpu_problem and spec.id != GPU_VISIBLE:
            reason = f"not run: torch cannot use this host's GPU (see {GPU_VISIBLE})"
        if reason is None and self.wedged.get(device.name) and device.kind == "gpu":
            reason = f"skipped: device unusable after {self.wedged[device.name]}"
        if reason:
            return not_run(variant, reason)
        started = time.monotonic()
        verdict = self._run_in_parent(variant, device) if spec.runs_in is RunsIn.PARENT else \
            self._run_in_child(variant, env, timeout, device, alone)
        ended = time.monotonic()
        with self._lock:
            self.spans.append((started, ended))
        verdict.cost = self.cost_of(variant, verdict, ended - started)
        return verdict

    def cost_of(self, variant: Variant, verdict: Verdict, wall_s: float) -> VariantCost:
        """What the variant cost, split (`VariantCost`): its verdict's duration runs from the child's start
        marker (runtime init left out), so the rest of its wall time is setup; first use is the probe's own
        measure of it."""
        first_use = float(verdict.measurements.get("first_use_s") or 0.0)
        return VariantCost(setup_s=round(max(wall_s - verdict.duration_s, 0.0), 4), first_use_s=first_use,
                           work_s=round(max(verdict.duration_s - first_use, 0.0), 4),
                           budget_s=variant.spec.cost_budget(variant.params, self.opts.level, self.opts.duration))

    def _run_in_child(self, variant: Variant, env: Optional[Dict[str, str]], timeout: Optional[float],
                      device: DeviceInfo, alone: bool) -> Verdict:
        spec = variant.spec
        # a variant with a level works for its budget, beyond the timeout that bounds the rest
        budget = spec.work_budget(variant.params, self.opts.duration) or 0.0
        timeout = (timeout or self.opts.timeout or spec.timeout) + budget
        variant_env = {**variant.env(), **(env or {})}
        log_since = kernellog.now()
        verdict = self._run_task(variant, device, timeout, variant_env, alone)
        if NO_BINARY in verdict.evidence.get("signatures", ()):
            verdict.message = clean(f"{verdict.message}: hipErrorNoBinaryForGpu: torch has no code object for "
                                    "this GPU")
            verdict.evidence["fix"] = self.arch_fix()
        if device.kind == "gpu" and verdict.status.is_bad:
            verdict.evidence.update(kernellog.evidence(log_since))
        verdict.env = clean_env({**self.opts.env, **variant_env})
        if verdict.status is Status.HANG and device.kind == "gpu":
            verdict.evidence["device_canary"] = self.device_canary(variant.id, device)
        return verdict

    def _variant_task(self, variant: Variant, device: DeviceInfo, timeout: float) -> Task:
        return self._task(probe=variant.spec.id, variant=variant.id, params=variant.params, device=device.name,
                          device_requested=self.opts.device, device_facts=self.facts,
                          expect_gpus=self.opts.expect_gpus,
                          budget_s=variant.spec.work_budget(variant.params, self.opts.duration),
                          level=self.opts.level, profile=self.opts.profile, timeout=timeout,
                          first_use_limit=self.first_use_limit())

    def _run_task(self, variant: Variant, device: DeviceInfo, timeout: float, env: Dict[str, str],
                  alone: bool) -> Verdict:
        """The variant in its device's worker where it may share one, else in a child of its own.
        A fail, error or crash in a worker is re-run alone in a fresh child, and that verdict
        counts (`verdicts.confirmed`): one task's leftovers never fail the next."""
        task = self._variant_task(variant, device, timeout)
        key = None if alone else self.isolation.worker_key(task, env, variant.spec)
        if key is not None:
            end, after = self.isolation.run_in_worker(task, key, self._first_use_note(task))
            verdict = self._assemble(variant, task, end, timeout)
            if verdict.status not in (Status.FAIL, Status.ERROR, Status.CRASH):
                return verdict
            single = self._variant_task(variant, device, timeout)
            end = self.isolation.run(single, env, fresh=False, on_first_use=self._first_use_note(single))
            return confirmed(verdict, self._assemble(variant, single, end, timeout), after)
        end = self.isolation.run(task, env, variant.spec.runs_in is RunsIn.FRESH_INTERPRETER,
                                 self._first_use_note(task))
        return self._assemble(variant, task, end, timeout)

    @staticmethod
    def _assemble(variant: Variant, task: Task, end: ChildEnd, timeout: float) -> Verdict:
        """The verdict; where the child wrote no result (a hang or crash, perhaps the fault's own),
        the faults meant for this probe are its evidence, so an injected hang never reads as a real one."""
        result = TaskResult.read(task.files.result)
        verdict = assemble(variant, end, result, read_text(task.files.stack), timeout)
        meant = [str(r) for r in faults.parse(task.faults) if r.applies_to(variant.spec.id)] if task.faults else []
        if result is None and meant:
            verdict.evidence["faults_injected"] = meant
        return verdict

    def _run_in_parent(self, variant: Variant, device: DeviceInfo) -> Verdict:
        """A probe that only reads host files (node-health): run here, no child, no GPU runtime,
        with the baseline read before the run's first probe."""
        spec = variant.spec
        ctx = ProbeContext(device=device.name, requested_device=self.opts.device, profile=self.opts.profile,
                           params=dict(variant.params), device_facts=self.facts, expect_gpus=self.opts.expect_gpus,
                           baseline=self.baselines.get(spec.id))
        start = time.perf_counter()
        ended = ctx.call(spec.func, catching=Exception, in_child=False)  # Ctrl-C stays the run's
        result = outcome(ended, ctx.warnings)
        return Verdict(spec.id, variant.id, result.status, dict(variant.params), clean(result.message),
                       round(time.perf_counter() - start, 4), clean_tree(ctx.measurements),
                       clean_tree({"traceback": result.exception.traceback} if result.exception else {}))

    def with_baselines(self, variants: List[Variant]) -> List[Variant]:
        """Read each selected probe's baseline now, before the first probe, and move those probes
        last, so they compare the counters from before the run with after it."""
        on_gpu = any(d.kind == "gpu" for d in self.devices)  # on the CPU such probes skip: read nothing
        for spec in {v.spec.id: v.spec for v in variants if on_gpu}.values():
            if spec.baseline is not None:
                self.baselines[spec.id] = spec.baseline()
        return sorted(variants, key=lambda v: v.spec.baseline is not None)  # stable: the others keep their order

    def first_use_limit(self) -> Optional[float]:
        """What bounds a probe's `ctx.first_use()`: --first-use-timeout when given; else an explicit
        --timeout bounds it as part of the variant (None); else the default limit."""
        if self.opts.first_use_timeout is not None:
            return self.opts.first_use_timeout
        return None if self.opts.timeout is not None else FIRST_USE_LIMIT_S

    def device_canary(self, after: str, device: DeviceInfo) -> Dict[str, Any]:
        """After a hang on the GPU: does a tiny kernel in a fresh child still run? If not, the
        remaining GPU probes are skipped ("device unusable after <variant>")."""
        task = self._task(call=devices.CANARY_CALL, probe=devices.CANARY_PROBE, device=device.name,
                          timeout=devices.CANARY_TIMEOUT_S)
        end = self.isolation.run(task, {}, fresh=False)
        outcome = devices.canary_outcome(end, TaskResult.read(task.files.result))
        usable, why = outcome["usable"], outcome.get("problem")
        if usable:
            self.note(f"device canary after the hang of {after}: a kernel ran in {end.elapsed_s:.2f}s; "
                      f"the remaining GPU probes run")
        else:
            self.wedged[device.name] = after
            self.note(f"device canary after the hang of {after} failed on {device.name} ({why}); "
                      f"the remaining probes on that GPU are skipped")
        cleaned: Dict[str, Any] = clean_tree(outcome)
        return cleaned

    # --- the whole run -----------------------------------------------------------------

    def start(self, variants: Sequence[Variant] = ()) -> None:
        """Start the launcher (its zygote preloads what `variants` declare), resolve the device
        and open the journal (once per run)."""
        check_fault_targets(self.opts.inject, variants)
        self.opts = replace(self.opts, preload=sorted(set(self.opts.preload) | set(preloads(variants))))
        self.check_torch_version()
        self.isolation.start(self.opts.preload)
        self.resolve_device()
        if self.opts.write_files:
            path = journal_path(self.opts.out_dir, self.run_id)
            try:
                self.journal = Journal(path)
            except OSError as exc:
                why = self._cannot_write("jsonl", path, exc)
                self.note(f"no journal ({why}): the verdicts are kept for the report", say=False)
            self._journal({"record": "header", "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
                           "tool": self._tool(), "run": self._run_info().header(),
                           "fingerprint": self.fingerprint_cache})

    def run_one(self, variant: Variant, device: Optional[DeviceInfo] = None) -> Verdict:
        """Run one variant after `start()`: journal, verdict, known issues, callback."""
        device = device or self.device
        with self._lock:
            self._journal({"record": "started", "variant": variant.id, "device": device.name})
        decided = self.decided.get(device.name) if variant.spec.per_device else None
        if decided is not None:
            verdict = not_run(variant, f"{NOT_RUN_DECIDED} {device.name} was decided by {decided.variant} "
                                       f"({decided.status.value}); gate --keep-going runs every probe")
            verdict.device = devices.label(device, self.facts)
        else:
            verdict = self.judged(self.run_variant(variant, device=device))
        if verdict.status.is_bad and variant.spec.per_device and not self.opts.keep_going \
                and device.name not in self.decided:
            self.decided[device.name] = verdict
            self.note(f"{device.name}: NO-GO decided by {variant.id} ({verdict.status.value}); the gate runs no more "
                      "of its probes (they are skips that say so; gate --keep-going runs them)")
        with self._lock:
            self.verdicts.append(verdict)
            self._journal({"record": "verdict", "verdict": verdict.to_dict()})
            self.on_verdict(verdict)
        return verdict

    def judged(self, verdict: Verdict) -> Verdict:
        """The verdict with its speed figures held against the device's spec and the known issues
        that fit it, judged against the run's verdicts so far (`report` judges again against the
        whole run)."""
        speed.judge_spec(verdict)
        with self._lock:
            (verdict,) = known_issues.judged([verdict], self.fingerprint_cache, [*self.verdicts, verdict])
        return verdict

    def run_queues(self, variants: List[Variant]) -> None:
        """Run `variants` on every device under test: one queue per device, the queues at once,
        one probe at a time per device. A hang on one device never holds up another. Probes
        that are per node (host checks, multi-GPU probes with their own devices) run first, once."""
        once = [v for v in variants if not v.spec.per_device or len(self.devices) == 1]
        for variant in once:
            self.current = variant.id
            self.run_one(variant)
            self.current = None
        spread = [v for v in variants if v.spec.per_device and len(self.devices) > 1]
        if not spread:
            return
        stop = threading.Event()
        errors: List[BaseException] = []

        def queue(device: DeviceInfo) -> None:
            try:
                for variant in spread:
                    if stop.is_set():
                        return
                    self.run_one(variant, device)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
                errors.append(exc)
                stop.set()

        workers = [threading.Thread(target=queue, args=(d,), name=f"rocmcheck-{d.name}", daemon=True)
                   for d in self.devices]
        for worker in workers:
            worker.start()
        try:
            alive = workers
            while alive:  # joined in slices so Ctrl-C and SIGTERM reach this thread
                alive[0].join(0.1)
                alive = [w for w in workers if w.is_alive()]
        except BaseException:
            stop.set()
            self.current = self.isolation.kill_running() or None
            for worker in workers:
                worker.join(5.0)
            raise
        if errors:
            raise errors[0]
        self.check_agreement()

    def check_agreement(self) -> None:
        """Once every GPU ran: the node check of the deterministic workload's hashes
        (`agreement.node_check`). A GPU it names gets its verdict again, now failing, in the
        journal (a `rejudged` record, which replaces the earlier one of its variant on its GPU) and the report; a
        live line where its status changed, else a note."""
        changed, notes = agreement.node_check(self.verdicts)
        for text in notes:
            self.note(text)
        for verdict in changed:
            (verdict,) = known_issues.judged([verdict], self.fingerprint_cache, self.verdicts)
            before = next(v for v in self.verdicts if (v.variant, v.device) == (verdict.variant, verdict.device))
            self.verdicts[self.verdicts.index(before)] = verdict
            self._journal({"record": "rejudged", "verdict": verdict.to_dict()})
            if verdict.status is before.status:
                added = verdict.message[len(before.message):].lstrip("; ")
                self.note(f"{verdict.variant} on {verdict.device.get('name')}: {added}")
            else:
                self.on_verdict(verdict)

    def judge_node(self, variants: Sequence[Variant]) -> None:
        """Once every GPU ran: a GPU slower than the node's others of its model (`speed.slow_figures`)
        is measured again, its variant on each GPU of that model one at a time (`confirm_speed`); a
        figure slow both times is named in a note and the report's `speed` section, its verdict
        `warn`, or `fail` with `--slow-gpu nogo`. Noise on a shared host makes one measurement slow,
        rarely the same figure of the same GPU twice; a variant of level 2 or 3 (sustained-load) is not
        measured again, its figure being many windows of its whole budget. The journal keeps each verdict
        as it first ran; the report has the judged ones."""
        first = {slow.key for slow in speed.slow_figures(self.verdicts)}
        for variant in (v for v in variants if v.id in {key[0] for key in first}):
            if (variant.params.get("level") or 1) == 1:  # a level 2/3 variant spent its budget: not again
                self.confirm_speed(variant)
        slow = speed.judge_node(self.verdicts, nogo=self.opts.slow_gpu == "nogo", among=first)
        for finding in slow:
            self.note(finding["message"])
        if slow:
            self.add_section("speed", {"slow_gpus": slow, "fraction": speed.NODE_FRACTION})

    def confirm_speed(self, variant: Variant) -> None:
        """Measure `variant` again on every GPU that ran it, one GPU at a time, each in a child of its
        own: while every GPU's queue ran at once they shared the host (its cores, and the whole of
        a simulated GPU); alone, a GPU that is slow is slow again and one that met noise is not. The
        new verdict replaces the first, which stays in its evidence (`speed_while_every_gpu_ran`)."""
        for i, first in enumerate(self.verdicts):
            device = next((d for d in self.devices if d.name == (first.device or {}).get("name")), None)
            if first.variant != variant.id or device is None or device.kind != "gpu":
                continue
            with self.running(variant.id):
                again = self.judged(self.run_variant(variant, device=device, alone=True))
            again.evidence["speed_while_every_gpu_ran"] = first.measurements.get(SPEED_MEASUREMENTS)
            self.verdicts[i] = again
        self.note(f"{variant.id}: a GPU was slower than its peers while every GPU ran; measured again one GPU at "
                  "a time to confirm it")

    @contextlib.contextmanager
    def running(self, what: str) -> Iterator[None]:
        """Name `what` as running now (e.g. a doctor attempt). An interrupt inside leaves it named,
        on purpose: the report says what was interrupted."""
        self.current = what
        yield
        self.current = None

    def add_section(self, name: str, data: Any) -> None:
        """A section of the report beside the verdicts (doctor's results), replaced when added again."""
        self.sections[name] = data

    def close_launcher(self) -> None:
        """Stop the launcher and remove the children's scratch folder: every end of a run comes here
        (finish, an error out of `run` such as a device that is not there, the plugin's abort)."""
        self.isolation.close()
        self._remove_tmp()

    def finish(self, interrupted: Optional[str] = None) -> Report:
        """End the run: stop the launcher, close the journal, write and return the report. A file
        that could not be written is in `report.run.unwritten` (the journal's failures too)."""
        self.close_launcher()  # and the task and result files with it: on /dev/shm they hold memory
        report = self.report(partial=interrupted is not None, interrupted=interrupted)
        self._journal({"record": "end", "run": report.run.to_dict()})
        if self.journal:
            self.journal.close()
        if self.opts.write_files:
            write_outputs(report, self.outputs, self.opts.out_dir, self.opts.named_files)
        report.run.unwritten = {**self.unwritten, **report.run.unwritten}  # after: the files never carry it
        return report

    def run(self, variants: List[Variant], after: Optional[Callable[[], None]] = None) -> Report:
        """Run `variants`, then `after()` (more children under the same run, e.g. doctor's
        attempts); returns the report (also written to disk unless write_files is off)."""
        in_main = threading.current_thread() is threading.main_thread()
        interrupted: Optional[str] = None
        try:
            with interrupts_taken(sigint=False), self.deadline(in_main):  # SIGINT: the caller's (the command takes it)
                self.start(variants)
                self.run_queues(self.with_baselines(self.with_gpu_check(variants)))
                self.judge_node(variants)
                if after is not None:
                    after()
        except (KeyboardInterrupt, Interrupted) as exc:
            interrupted = self.current or BEFORE_FIRST
            self.note(interruption_note(exc.args[0] if exc.args else "Ctrl-C", interrupted))
        finally:
            self.close_launcher()
        return self.finish(interrupted)

    @contextlib.contextmanager
    def deadline(self, in_main: bool) -> Iterator[None]:
        """`--deadline S`: at S seconds from the process's start (imports and probe loading count:
        a scheduler's limit counts them too) the run is interrupted as by SIGTERM, so the running
        children are killed and the verdict and reports are still written before a scheduler's
        own kill, which leaves nothing. A real signal (SIGALRM), because only a signal wakes a
        main thread blocked in a wait; the timer is off again before the outputs are written."""
        budget = self.opts.deadline
        if self.opts.deadline_why:  # set or lowered by --killed-after: said now, and kept in the verdict's notes
            self.note(self.opts.deadline_why)
        if budget is None or not in_main:  # the commands run in the main thread; signals reach only it
            yield
            return
        cause = f"the --deadline of {budget:g}s"

        def expired(signum: int, frame: Any) -> None:
            raise Interrupted(cause)

        previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, max(budget - process_age(), 0.001))
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    @functools.cached_property
    def fingerprint_cache(self) -> Dict[str, Any]:
        """The fingerprint, taken once the device is resolved (host facts cost a few ms)."""
        return self.fingerprint()

    def _journal(self, record: Dict[str, Any]) -> None:
        """Best effort: a journal write that fails (the disk filled) stops the journal, never the run."""
        if not self.journal:
            return
        try:
            self.journal.append(record)
        except OSError as exc:
            journal, self.journal = self.journal, None
            why = self._cannot_write("jsonl", journal.path, exc)
            try:
                journal.close()
            except OSError:
                pass
            where = record.get("variant") or f"its {record.get('record')} record"
            self.note(f"the journal stopped at {where} ({why}): the verdicts are kept for the report", say=False)

    def _tool(self) -> Dict[str, Any]:
        return {"name": "rocmcheck", "version": __version__}

    def _run_info(self) -> RunInfo:
        return RunInfo(id=self.run_id, command=self.opts.command, argv=clean_tree(sys.argv[1:]),
                       started=self.started_at, device=self.device.name, profile=self.opts.profile,
                       isolation=self.isolation.mode, isolation_requested=self.opts.isolation,
                       inject=self.opts.inject, env=clean_env(self.opts.env), notes=self.notes)

    def report(self, partial: bool, interrupted: Optional[str]) -> Report:
        counts: Dict[str, int] = {}  # in the order first seen, as reports always wrote them
        for v in self.verdicts:
            counts[v.status.value] = counts.get(v.status.value, 0) + 1
        run = replace(self._run_info(), finished=time.time(), partial=partial, interrupted=interrupted, counts=counts)
        # a known issue's scope is judged against the whole run: a control may have run after the verdict
        verdicts = known_issues.judged(self.verdicts, self.fingerprint_cache)
        first = min((start for start, _ in self.spans), default=None)
        cost = RunCost.of(verdicts, time.monotonic() - self.clock_from, covered(self.spans),
                          None if first is None else first - self.clock_from, self.isolation.imports_s, self.facts_s)
        return Report(run=run, verdicts=verdicts, fingerprint=self.fingerprint_cache, tool=self._tool(),
                      sections={**self.sections, COST_SECTION: cost.to_dict()})


def covered(spans: Sequence[Tuple[float, float]]) -> float:
    """The time inside at least one of `spans` (the GPUs' queues overlap)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def process_age() -> float:
    """Seconds since this process started: to the clock tick on Linux, from /proc (psutil's start
    time there rests on the boot time, which /proc/stat gives to the second), else psutil's."""
    try:
        with open("/proc/self/stat") as stat:
            started = int(stat.read().rpartition(")")[2].split()[19])  # field 22, starttime, in clock ticks
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started / os.sysconf("SC_CLK_TCK")
    except (OSError, AttributeError, ValueError, IndexError):  # no /proc, no CLOCK_BOOTTIME (macOS)
        return time.time() - psutil.Process().create_time()


def scratch_dir() -> Path:
    """A private folder for the children's task and result files: the temporary folder (Python
    tries TMPDIR, /tmp, /var/tmp and the working folder, each by writing a file), else /dev/shm:
    a read-only root file system or a full disk must not stop the probes."""
    try:
        return Path(tempfile.mkdtemp(prefix="rocmcheck-"))
    except OSError as exc:  # FileNotFoundError: "No usable temporary directory found"
        try:
            return Path(tempfile.mkdtemp(prefix="rocmcheck-", dir="/dev/shm"))
        except OSError:
            raise UsageError(f"no writable temporary folder for the probes' files ({exc}); set TMPDIR") from None
