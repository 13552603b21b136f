"""`ProbeContext`: what a probe function receives as its first argument."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, NoReturn, Optional, Sequence, Tuple, Type

from . import torchapi
from .errors import Hang, Outcome, ProbeFailure, Skip
from .markers import TaskFiles
from .model import SPEED_MEASUREMENTS, SpeedFigure

TF32_OVERRIDE_ENV = "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"


def pin_fp32() -> Dict[str, Any]:
    """Full-precision fp32 matmuls and convolutions in this process; returns torch's flags read back.

    A TF32 product (relative error ~1e-3) fails fp32 tolerances (1e-5) on a healthy GPU.
    NVIDIA's PyTorch containers set TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1, which older torch
    lets win over every flag once it has read it, so it is dropped before the first read
    (https://docs.monai.io/en/stable/precision_accelerating.html). Checks that want TF32
    (gemm's TF32 report) enable it themselves, for their own product only.
    """
    import torch

    os.environ.pop(TF32_OVERRIDE_ENV, None)
    backends = torch.backends
    backends.cuda.matmul.allow_tf32 = False
    backends.cudnn.allow_tf32 = False
    flags: Dict[str, Any] = {}
    for name, owner in (("matmul", backends.cuda.matmul), ("cudnn", backends.cudnn)):
        if hasattr(owner, "fp32_precision"):  # torch >= 2.9 (older stubs do not know it)
            setattr(owner, "fp32_precision", "ieee")
            flags[f"{name}_fp32_precision"] = getattr(owner, "fp32_precision")
    flags.update(matmul_allow_tf32=backends.cuda.matmul.allow_tf32, cudnn_allow_tf32=backends.cudnn.allow_tf32)
    return flags


@dataclass(frozen=True)
class StartedProcess:
    """A process a probe started (`ProbeContext.start_process`)."""

    pid: int
    poll: Callable[[], Optional[int]]  # its exit code once it ended (negative: the signal), else None


def _run_forked(env: Mapping[str, str], target: Callable[[], int]) -> None:
    os.environ.update(env)
    sys.exit(target())


@dataclass
class ProbeContext:
    """The device and profile a probe runs with, and ways to report beyond pass/fail.

    `device` is "cpu", "cuda:N" (ROCm builds use the same "cuda" device string) or "simgpu:N"
    (a simulated GPU, `--inject simgpu`; rocmcheck.torchapi reaches any of them).
    `profile` is "gate" (quick, critical) or "full" (every size and repeat).
    `requested_device` is what `--device` asked for (auto, cpu or cuda:N): "cpu" on a GPU
    host means the GPU was left out on purpose. `device_facts` are the run's device facts,
    gathered once by the runner (torch build, arch list, devices, runtime versions).
    """

    device: str = "cpu"
    requested_device: str = "auto"
    profile: str = "full"
    params: Dict[str, Any] = field(default_factory=dict)
    timeout: float = 60.0
    measurements: Dict[str, Any] = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)
    device_facts: Dict[str, Any] = field(default_factory=dict)
    expect_gpus: Optional[int] = None  # the GPU count a node must show (`--expect-gpus`)
    files: Optional[TaskFiles] = None  # the task's files, whose markers the watchdog reads (None outside a child)
    baseline: Any = None  # what the probe's `baseline()` read before the run's first probe (a parent-run probe)
    started: float = field(default_factory=time.time)  # wall clock when the task started: deadlines run from here
    budget_s: Optional[float] = None  # a variant with a level: its seconds of work from `started` (`--level`,
    # `--duration`); None for the others
    level: int = 1  # the run's `--level`: 1 (the gate's, and `run`'s default) keeps every probe within seconds

    @property
    def heavy(self) -> bool:
        """Whether the probe runs its heavy profile (transfer's full sizes, the allocator's long cycles): a full
        run at `--level 2` or 3. Level 1, the gate and `run` by default, keeps to sizes that take seconds."""
        return self.full and self.level >= 2

    @property
    def on_gpu(self) -> bool:
        return self.device != "cpu"

    @property
    def simulated(self) -> bool:
        """A simulated GPU (`--inject simgpu`): the GPU code paths run, but its memory is host RAM
        and its kernels the CPU's."""
        return self.device.startswith(torchapi.SIMULATED + ":")

    @property
    def gpu_sized(self) -> bool:
        """Whether work is sized for a real GPU; a simulated one keeps the CPU's sizes (it runs on the CPU)."""
        return self.on_gpu and not self.simulated

    @property
    def full(self) -> bool:
        return self.profile == "full"

    def skip(self, reason: str) -> NoReturn:
        """End the probe as `skip` with `reason`."""
        raise Skip(reason)

    def fail(self, message: str) -> NoReturn:
        """End the probe as `fail`: its result is wrong (measurements recorded so far are kept).
        Unlike `assert`, it survives `python -O`, and no `except Exception` in the probe catches it."""
        raise ProbeFailure(message)

    def hang(self, message: str) -> NoReturn:
        """End the probe as `hang` with `message`: processes it started are stuck (a collective
        that never returns). The watchdog then kills the task's whole tree, those processes
        included, as it would at the deadline: a probe never kills them itself, nor waits for
        the deadline to pass."""
        raise Hang(message)

    def time_left(self, margin_s: float = 0.0) -> float:
        """Seconds from now to `margin_s` before the task's deadline (0 once past it): what the
        processes a probe starts have, so that they can report before the watchdog acts."""
        return max(self.timeout - margin_s - (time.time() - self.started), 0.0)

    def start_process(self, argv: Sequence[str], env: Mapping[str, str],
                      fork: Optional[Callable[[], int]] = None) -> StartedProcess:
        """Start a process for the probe (a collective's rank): `fork()` in a forked copy of this
        process when given (only before the GPU runtime is initialised here: forking after it
        is broken), else `argv` in a fresh interpreter; `env` is added to its environment. It
        stays in the probe's process group, so the watchdog's kill policy reaches it with the
        rest of the tree, and its output goes to the probe's."""
        if fork is not None:
            import multiprocessing

            forked = multiprocessing.get_context("fork").Process(target=_run_forked, args=(dict(env), fork))
            forked.start()
            assert forked.pid is not None  # start() has forked it
            return StartedProcess(forked.pid, lambda: forked.exitcode)
        popen = subprocess.Popen([sys.executable, *argv], env={**os.environ, **env})
        return StartedProcess(popen.pid, popen.poll)

    def wait_processes(self, processes: Sequence[StartedProcess], margin_s: float = 0.0) -> List[Optional[int]]:
        """The exit codes of processes the probe started, once all ended, or at `margin_s` before
        the task's deadline: None for one still running then, which is left running for the
        watchdog to kill (`hang` says so)."""
        deadline = time.monotonic() + self.time_left(margin_s)
        while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
            time.sleep(0.05)
        return [p.poll() for p in processes]

    def warn(self, message: str) -> None:
        """Record a known risk; a probe that then returns normally ends as `warn`."""
        self.warnings.append(message)

    def measure(self, **values: Any) -> None:
        """Record measurements (kept whatever the verdict, e.g. GB/s, max error)."""
        self.measurements.update(values)

    def measure_speed(self, name: str, unit: str, samples: Sequence[float], method: str = "",
                      host_samples: Sequence[float] = ()) -> SpeedFigure:
        """Record one rate (`SpeedFigure`: higher is better) under measurements["speed"][name], with
        the same work's rate on the host alone where it was measured beside it (`time_beside`); the
        runner and the outputs judge it, the probe only measures."""
        figure = SpeedFigure(name, unit, [float(s) for s in samples], method,
                             host_samples=[float(s) for s in host_samples])
        self.measurements.setdefault(SPEED_MEASUREMENTS, {})[name] = figure.to_dict()
        return figure

    def time_samples(self, work: Callable[[], Any], samples: int, warmup: int = 1,
                     budget_s: Optional[float] = None, least: int = 3) -> List[float]:
        """Seconds each of `samples` timed calls of `work` took, after `warmup` untimed ones (first
        use: kernel selection, code loading, clocks ramping up). On a GPU the clock is a pair of
        device events around the call (`torchapi.EventClock`), on the CPU the thread's CPU time. With
        `budget_s`, sampling stops once that many seconds were timed, after at least `least`
        samples: a slow device keeps the gate's budget and still gives a median."""
        return torchapi.time_samples(torchapi.clock(self.device), work, samples, warmup, budget_s, least)

    def time_beside(self, work: Callable[[], Any], on_host: Callable[[], Any], samples: int, warmup: int = 1,
                    budget_s: Optional[float] = None) -> Tuple[List[float], List[float]]:
        """As `time_samples`, and where the host does this device's work (a simulated GPU), `on_host`
        (the same work on host tensors) timed right after each sample by the same clock: the host's
        speed at that moment, what bounds the figure there (`SpeedFigure.host_samples`). Elsewhere
        (a real GPU's events time its own work; on the CPU the work is the host's) `on_host` is
        never called: (the seconds of `work`, those of `on_host` or [])."""
        beside = on_host if self.simulated else None
        return torchapi.time_beside(torchapi.clock(self.device), work, beside, samples, warmup, budget_s)

    def progress(self, text: str) -> None:
        """Say where the probe is: one line of the child's output, flushed at once, so the verdict
        of a probe that hangs shows in its output's last lines the step it never finished."""
        print(text, flush=True)

    @contextlib.contextmanager
    def first_use(self) -> Iterator[None]:
        """Wrap one first call that compiles or autotunes (a cold MIOpen cache took 63 s for
        resnet18 on an MI50), never a whole step: its time is measured as `first_use_s` and,
        by default, bounded by its own limit (--first-use-timeout, 120 s) instead of the
        probe's timeout; an explicit --timeout bounds it too."""
        began = time.time()
        if self.files:
            self.files.enter_first_use()
        try:
            yield
            self.synchronize()
        finally:
            spent = time.time() - began
            self.measurements["first_use_s"] = round(self.measurements.get("first_use_s", 0.0) + spent, 4)
            if self.files:
                self.files.leave_first_use(spent)

    def strict_fp32(self) -> None:
        """Pin full-precision fp32 (`pin_fp32`) for this probe; the flags read back are measured,
        and a TF32 setting that would not turn off is a warning (fp32 tolerances would fail)."""
        flags = pin_fp32()
        self.measure(fp32_flags=flags)
        if flags["matmul_allow_tf32"] or flags["cudnn_allow_tf32"]:
            self.warn(f"fp32 could not be pinned, TF32 stays on ({flags}): fp32 results may miss their tolerance")

    def synchronize(self) -> None:
        """Wait for queued GPU work so asynchronous errors surface inside the probe."""
        if self.on_gpu:
            torchapi.synchronize(self.device)

    def call(self, func: Callable[..., Any], catching: Type[BaseException] = BaseException,
             before: Callable[[], None] = lambda: None, in_child: bool = True) -> Optional[BaseException]:
        """Run probe function `func` with this context's params, after `before()` (faults that act
        as the probe's own code would). Returns what ended it (None: it returned), for
        `verdicts.outcome`: `ctx.skip`, `ctx.fail`, `ctx.hang` always, any other exception when it is a
        `catching`. One path for a child's probes, the parent's host ones and
        `rocmcheck.testing.run_inline`; only a child waits for the GPU's queued work (the parent
        never touches the runtime). A probe reports through `ctx`: a returned value is an error,
        so a measurement returned the old way is never silently lost."""
        try:
            before()
            returned = func(self, **self.params)
            if returned is not None:
                raise TypeError(f"the probe returned {type(returned).__name__}, not None: "
                                "record measurements with ctx.measure(**values)")
            if in_child:
                self.synchronize()
        except Outcome as exc:
            return exc
        except catching as exc:
            return exc
        return None
