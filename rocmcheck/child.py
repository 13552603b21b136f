"""The probe's side of isolation: runs one task and leaves a result file.

The same code runs in a child forked from the zygote and in a freshly spawned
interpreter (`python -m rocmcheck.child`). Its stdin is a "lifeline" pipe whose
write end only the parent holds: when the parent dies, the child kills its own
process group, so no orphan survives. The result is written atomically; a child
that dies without one can never be taken for `pass`.
"""
from __future__ import annotations

import faulthandler
import importlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, TextIO

from . import faults, registry, torchapi
from .context import ProbeContext
from .jsonsafe import jsonsafe
from .launch import CHILD_PATHS_ENV, CHILD_PRELOAD_ENV
from .model import Status
from .verdicts import error_fields, first_line, outcome

_stack_file: Optional[TextIO] = None  # faulthandler needs the file kept open


def watch_lifeline(fd: int = 0, on_line: Optional[Callable[[str], None]] = None) -> None:
    """Kill our whole process group when the parent's end of the lifeline closes.

    The first line written on the lifeline (a spawned child's task path) goes to `on_line`.
    """

    def wait_for_eof() -> None:
        buffer = b""
        try:
            while True:
                data = os.read(fd, 4096)
                if not data:
                    break
                if on_line is not None and b"\n" not in buffer:
                    buffer += data
                    if b"\n" in buffer:
                        on_line(buffer.split(b"\n", 1)[0].decode())
        except OSError:
            pass
        if hasattr(os, "killpg"):
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os._exit(70)  # Windows: the job (kill-on-close) takes the rest with the parent

    threading.Thread(target=wait_for_eof, name="rocmcheck-lifeline", daemon=True).start()


def arm_stack_dumps(path: str, timeout: float) -> None:
    """Fatal signals and the parent's SIGUSR1 dump every thread's Python stack to `path`."""
    global _stack_file
    _stack_file = open(path, "w")
    faulthandler.enable(file=_stack_file, all_threads=True)
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, file=_stack_file, all_threads=True, chain=False)
    else:  # Windows: no signal to ask with, so dump shortly before the watchdog fires
        faulthandler.dump_traceback_later(max(timeout - 0.5, 0.1), exit=False, file=_stack_file)


def runtime_init(device: str) -> None:
    """Initialise the GPU runtime in this child (never in the parent).

    On `--device cpu` a probe is a self-test of its own checks: torch runs on one
    intra-op thread, since spin-waiting OpenMP threads made probes 10-50x slower on a
    loaded 2-core machine (measured here).
    """
    if device == "cpu":
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(1)
        return
    torchapi.init_device(device)


def run_probe(task: Dict[str, Any]) -> Dict[str, Any]:
    """Load, inject, initialise and run the task's probe; classify the outcome."""
    registry.load_all(task.get("probes_paths", []))
    spec = registry.get(task["probe"])
    if spec is None:
        return {"status": Status.ERROR.value, "message": f"probe '{task['probe']}' not found in the child"}
    requests = faults.parse(task.get("faults", ""))
    installed = faults.install(requests, spec.id, in_probe=False)
    init_start = time.perf_counter()
    try:
        runtime_init(task["device"])
    except Exception as exc:
        return {"status": Status.ERROR.value, "message": f"GPU runtime init failed: {first_line(exc)}",
                "gpu_init_failed": True, "exception": error_fields(exc)}
    runtime_init_s = time.perf_counter() - init_start
    Path(task["started_path"]).touch()  # the probe's timeout runs from here, runtime init left out
    ctx = ProbeContext(device=task["device"], requested_device=task.get("device_requested", "auto"),
                       profile=task.get("profile", "full"),
                       params=dict(task.get("params", {})), timeout=float(task.get("timeout", 60)),
                       device_facts=dict(task.get("device_facts") or {}), expect_gpus=task.get("expect_gpus"),
                       started_path=task["started_path"])
    result: Dict[str, Any] = {"faults_installed": installed, "runtime_init_s": runtime_init_s}
    start = time.perf_counter()
    ended: Optional[BaseException] = None
    try:
        installed += faults.install(requests, spec.id, in_probe=True)  # a hang or crash the probe meets
        returned = spec.func(ctx, **ctx.params)
        ctx.synchronize()
        if isinstance(returned, dict):
            ctx.measurements.update(returned)
    except BaseException as exc:  # noqa: BLE001 - every exception is a verdict, not our crash
        ended = exc
        ctx.measurements.update(getattr(exc, "measurements", {}) if isinstance(exc, AssertionError) else {})
    result.update(outcome(ended, ctx.warnings))
    result["probe_s"] = time.perf_counter() - start
    result["measurements"] = ctx.measurements
    result["warnings"] = ctx.warnings
    return result


def run_call(task: Dict[str, Any]) -> Dict[str, Any]:
    """Internal tasks (device facts for the fingerprint): `module:function` returning a dict."""
    module, _, name = task["call"].partition(":")
    faults.install(faults.parse(task.get("faults", "")), name, facts_only=True)
    data = getattr(importlib.import_module(module), name)(task)
    return {"status": Status.PASS.value, "message": "ok", "data": data}


def device_canary(task: Dict[str, Any]) -> Dict[str, Any]:
    """A tiny kernel on the task's device after a hang: whether the device still computes."""
    faults.install(faults.parse(task.get("faults", "")), task["probe"])
    runtime_init(task["device"])
    import torch

    got = (torch.arange(1024, dtype=torch.float32).to(task["device"]) * 2).sum().item()
    if task["device"] != "cpu":
        torchapi.synchronize(task["device"])
    expected = 1023 * 1024.0
    problem = {} if got == expected else {"problem": f"2*sum(0..1023) = {got}, not {expected}"}
    return {"ok": got == expected, **problem}


def write_result(path: str, result: Dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(jsonsafe(result), fh, allow_nan=False)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def execute(task: Dict[str, Any]) -> None:
    """Everything a child does once it has its task; never returns normally."""
    os.environ.update(task.get("env", {}))
    arm_stack_dumps(task["stack_path"], float(task.get("timeout", 60)))
    if task.get("call"):
        Path(task["started_path"]).touch()  # internal tasks: the timeout runs from here (probes: after init)
    try:
        result = run_call(task) if task.get("call") else run_probe(task)
    except BaseException as exc:  # noqa: BLE001 - harness failure inside the child: still a result
        result = {"status": Status.ERROR.value, "message": f"rocmcheck child failed: {first_line(exc)}",
                  "exception": error_fields(exc)}
    write_result(task["result_path"], result)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: a wedged runtime must not turn a verdict into a hang


def preload_from_env() -> None:
    """Import torch, the modules the selected probes asked for and the probe modules ahead of
    the task (zygote and standby children), as the parent listed them in the environment."""
    for module in ["torch", *json.loads(os.environ.get(CHILD_PRELOAD_ENV, "[]"))]:
        try:
            importlib.import_module(module)
        except Exception:
            pass  # the probe that needs it reports the import error itself
    registry.load_all(json.loads(os.environ.get(CHILD_PATHS_ENV, "[]")))
    faults.catalogue()


def main() -> None:
    """Spawned child: watch the lifeline from the first moment (a parent that dies while
    we import torch must not leave us behind), preload, then run the task it names."""
    task_path: List[str] = []
    got_task = threading.Event()
    watch_lifeline(0, on_line=lambda line: (task_path.append(line.strip()), got_task.set()))
    preload_from_env()
    got_task.wait()
    with open(task_path[0], encoding="utf-8") as fh:
        execute(json.load(fh))


if __name__ == "__main__":
    main()
