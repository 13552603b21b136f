"""The probe's side of isolation: runs tasks and leaves a result file for each.

The same code runs in a child forked from the zygote and in a freshly spawned
interpreter (`python -m rocmcheck.engine.child`). Its stdin is a "lifeline" pipe whose
write end only the parent holds: when the parent dies, the child kills its own
process group, so no orphan survives. Each line on the lifeline is the path of a task
(`rocmcheck.engine.task.Task`). A child runs one task and exits, or, as a worker
(`Task.keep_alive`), initialises the GPU runtime once and runs its device's tasks one after
another, putting back what each probe changed in the process (`rocmcheck.engine.probe_state`).
The result is written atomically; a child that dies without one can never be taken for `pass`.
"""
from __future__ import annotations

import faulthandler
import importlib
import json
import os
import queue
import signal
import sys
import threading
import time
import traceback
from dataclasses import replace
from typing import Any, Callable, Dict, List, NoReturn, Optional, TextIO

from .. import faults, registry, torchapi
from ..context import ProbeContext
from ..errors import Hang
from ..jsonsafe import jsonsafe
from ..markers import TaskFiles
from ..model import Status
from .capture import TASK_END
from .launch import CHILD_PATHS_ENV, CHILD_PRELOAD_ENV
from .probe_state import ProcessState
from .task import Task, TaskResult
from .verdicts import harness_failed, outcome, probe_not_found, runtime_init_failed

_stack_file: Optional[TextIO] = None  # faulthandler needs the file kept open


def watch_lifeline(fd: int = 0, on_line: Optional[Callable[[str], None]] = None) -> None:
    """Kill our whole process group when the parent's end of the lifeline closes.

    Every line written on the lifeline (the path of a task) goes to `on_line`.
    """

    def wait_for_eof() -> None:
        buffer = b""
        try:
            while True:
                data = os.read(fd, 4096)
                if not data:
                    break
                buffer += data
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if on_line is not None:
                        on_line(line.decode())
        except OSError:
            pass
        if hasattr(os, "killpg"):
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os._exit(70)  # Windows: the job (kill-on-close) takes the rest with the parent

    threading.Thread(target=wait_for_eof, name="rocmcheck-lifeline", daemon=True).start()


def arm_stack_dumps(path: str, timeout: float) -> None:
    """Fatal signals and the parent's SIGUSR1 dump every thread's Python stack to `path` (the
    current task's: a worker re-arms them for each task)."""
    global _stack_file
    previous, _stack_file = _stack_file, open(path, "w")
    faulthandler.enable(file=_stack_file, all_threads=True)
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, file=_stack_file, all_threads=True, chain=False)
    else:  # Windows: no signal to ask with, so dump shortly before the watchdog fires
        faulthandler.dump_traceback_later(max(timeout - 0.5, 0.1), exit=False, file=_stack_file)
    if previous is not None:
        previous.close()


def runtime_init(device: str) -> None:
    """Initialise the GPU runtime in this child (never in the parent).

    On `--device cpu` a probe is a self-test of its own checks: torch runs on one
    intra-op thread, since spin-waiting OpenMP threads made probes 10-50x slower on a
    loaded 2-core machine (measured here). A simulated GPU computes on the CPU too, one
    child per GPU at once: the same holds (its 256^3 products took 96 ms on two threads
    beside the other GPU's child, 0.3 ms on one).
    """
    if device == "cpu" or device.startswith(torchapi.SIMULATED + ":"):
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(1)
    if device != "cpu":
        torchapi.init_device(device)


def await_hang_kill(files: TaskFiles, hang: Hang) -> NoReturn:
    """The probe declared a hang (`ctx.hang`): keep where it did so in the stack file, tell the
    watchdog, and wait for it to end this process and the ones the probe started, by its kill
    policy, as at a deadline (the lifeline ends them if the parent is gone). No result is
    written: the verdict is the watchdog's."""
    if _stack_file is not None:
        traceback.print_exception(type(hang), hang, hang.__traceback__, file=_stack_file)
        _stack_file.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    files.declare_hang(str(hang))
    while True:  # until the watchdog's kill
        threading.Event().wait()


class Worker:
    """This process's runtime and settings: initialised by the first task, kept for the next."""

    def __init__(self) -> None:
        self.device: Optional[str] = None  # the device whose runtime is up
        self.state: Optional[ProcessState] = None  # the settings as the first probe found them
        self.tasks = 0
        self.probes_paths: Optional[List[str]] = None  # loaded already


def run_probe(task: Task, worker: Worker) -> TaskResult:
    """Load, inject, initialise (the first task only) and run the task's probe; classify the outcome."""
    if worker.probes_paths != task.probes_paths:  # a worker's tasks share them: loaded once
        registry.load_all(task.probes_paths)
        worker.probes_paths = task.probes_paths
    spec = registry.get(task.probe)
    if spec is None:
        return probe_not_found(task.probe)
    requests = faults.parse(task.faults)
    installed: List[str] = []
    worker_task = worker.tasks
    runtime_init_s: Optional[float] = None
    if worker.device is None:  # faults that patch torch, then the runtime: once per process
        installed = faults.install(requests, spec.id, in_probe=False)
        init_start = time.perf_counter()
        try:
            runtime_init(task.device)
        except Exception as exc:
            return replace(runtime_init_failed(exc), faults_installed=installed, worker_task=worker_task)
        runtime_init_s = time.perf_counter() - init_start
        worker.device = task.device
        if task.keep_alive:
            worker.state = ProcessState()
    task.files.mark_started()  # the probe's timeout runs from here, runtime init left out
    ctx = ProbeContext(device=task.device, requested_device=task.device_requested, profile=task.profile,
                       params=dict(task.params), timeout=task.timeout, device_facts=dict(task.device_facts),
                       expect_gpus=task.expect_gpus, budget_s=task.budget_s, level=task.level,
                       files=task.files)
    start = time.perf_counter()
    # a hang or crash the probe meets is installed inside it; every exception is a verdict, not our crash
    ended = ctx.call(spec.func, before=lambda: installed.extend(faults.install(requests, spec.id, in_probe=True)))
    if isinstance(ended, Hang):
        await_hang_kill(task.files, ended)
    result = replace(outcome(ended, ctx.warnings), faults_installed=installed, worker_task=worker_task,
                     runtime_init_s=runtime_init_s, probe_s=time.perf_counter() - start,
                     measurements=ctx.measurements, warnings=ctx.warnings)
    if worker.state is not None:  # put back what the probe changed, before the next task
        try:
            result.state_put_back = worker.state.restore(task.device)
        except Exception as exc:  # noqa: BLE001 - the worker cannot go on; the parent ends it
            result.retire = f"{type(exc).__name__}: {exc}"
    return result


def run_call(task: Task) -> TaskResult:
    """Internal tasks (device facts for the fingerprint): `module:function` returning a dict."""
    module, _, name = task.call.partition(":")
    faults.install(faults.parse(task.faults), name, facts_only=True)
    data = getattr(importlib.import_module(module), name)(task)
    return TaskResult(Status.PASS, "ok", data=data)


def device_canary(task: Task) -> Dict[str, Any]:
    """A tiny kernel on the task's device after a hang: whether the device still computes."""
    faults.install(faults.parse(task.faults), task.probe)
    runtime_init(task.device)
    import torch

    got = (torch.arange(1024, dtype=torch.float32).to(task.device) * 2).sum().item()
    if task.device != "cpu":
        torchapi.synchronize(task.device)
    expected = 1023 * 1024.0
    problem = {} if got == expected else {"problem": f"2*sum(0..1023) = {got}, not {expected}"}
    return {"ok": got == expected, **problem}


def write_result(path: str, result: TaskResult) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(jsonsafe(result.to_dict()), fh, allow_nan=False)
    os.replace(tmp, path)  # atomic for the parent; no fsync: a scratch file outlives no power loss (5 ms a task)


def execute(task: Task, next_task: Callable[[], str]) -> None:
    """Everything a child does once it has its first task; never returns normally. A worker's
    task (`keep_alive`) is followed by the next path `next_task()` gives; any other task, or
    one after which the worker cannot go on, ends the process."""
    worker = Worker()
    while True:
        arm_stack_dumps(task.files.stack, task.timeout)
        if task.call:
            task.files.mark_started()  # internal tasks: the timeout runs from here (probes: after init)
        try:
            result = run_call(task) if task.call else run_probe(task, worker)
        except BaseException as exc:  # noqa: BLE001 - harness failure inside the child: still a result
            result = harness_failed(exc)
        worker.tasks += 1
        write_result(task.files.result, result)
        sys.stdout.flush()
        sys.stderr.flush()
        # a worker goes on after a probe that left its runtime up, or after the device facts (whose
        # process GPU 0's queue adopts: the runtime init they made is the one it uses)
        go_on = task.keep_alive and (worker.device is not None or bool(task.call)) and result.retire is None
        if not go_on:
            break
        try:
            os.write(1, TASK_END)  # after the result: the parent cuts this task's output here
        except OSError:  # the probe closed our output: no worker without one
            break
        task = Task.load(next_task())
    os._exit(0)  # skip interpreter teardown: a wedged runtime must not turn a verdict into a hang


def preload_from_env() -> Dict[str, float]:
    """Import torch, the modules the selected probes asked for and the probe modules ahead of
    the task (zygote and standby children), as the parent listed them in the environment.
    Returns the seconds each took ("probes": the probe modules and the faults), in that order."""
    took: Dict[str, float] = {}
    for module in ["torch", *json.loads(os.environ.get(CHILD_PRELOAD_ENV, "[]"))]:
        began = time.monotonic()
        try:
            importlib.import_module(module)
        except Exception:
            pass  # the probe that needs it reports the import error itself
        took[module] = round(time.monotonic() - began, 3)
    began = time.monotonic()
    registry.load_all(json.loads(os.environ.get(CHILD_PATHS_ENV, "[]")))
    faults.catalogue()
    took["probes"] = round(time.monotonic() - began, 3)
    return took


def main() -> None:
    """Spawned child: watch the lifeline from the first moment (a parent that dies while
    we import torch must not leave us behind), preload, then run the tasks it names."""
    paths: "queue.Queue[str]" = queue.Queue()
    watch_lifeline(0, on_line=lambda line: paths.put(line.strip()))
    preload_from_env()
    execute(Task.load(paths.get()), paths.get)


if __name__ == "__main__":
    main()
