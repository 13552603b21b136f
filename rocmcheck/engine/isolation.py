"""How tasks reach children: the launcher, its fall-back, and one worker child per GPU.

- **The launcher** (`rocmcheck.engine.launch.Launcher`): a zygote server that imported torch once and
  forks a child per task (POSIX default), or a fresh interpreter per task (spawn). A zygote
  that cannot start, dies (the OOM killer picks by size), or whose forked child cannot
  initialise the GPU is replaced by spawn for the rest of the run, with a note.
- **The fresh-interpreter rule**: a task with environment variables to set before
  `import torch` (the probe's `env`, doctor's attempts, the run's own) or a probe that asks
  for one (`runs_in="fresh-interpreter"`) gets a new interpreter, whatever the launcher.
- **Workers**: GPU runtime init costs seconds on a real GPU (a context, rocBLAS's first GEMM,
  librccl), so the variants of one device run one after another in one worker child that
  initialised the runtime once. Each keeps its own deadline, start marker, stack file and
  result (`rocmcheck.engine.task.Task`); between tasks the child puts back what a probe may change
  (`rocmcheck.engine.probe_state`). A crash or hang ends the worker with the verdict of the task in
  flight; so does a fail or error, and the runner re-runs that variant alone before its
  verdict counts. The next task starts a fresh worker. A task with its own environment, a
  probe that runs in a child of its own or a fresh interpreter (`runs_in`), and a fault that
  patches one probe's process never share a worker. The device facts run first in a worker that GPU 0's queue adopts, so
  on a real GPU the facts' runtime init is the one its probes use.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple

from .. import faults
from ..model import ProbeSpec, RunsIn, Status
from .capture import OutputDrain
from .killpolicy import SIGKILL, KillPolicy
from .launch import ChildProcess, IsolationServerDied, Launcher, SpawnLauncher
from .task import Task, TaskResult
from .watchdog import ChildEnd, supervise
from .zygote import ZygoteLauncher

WORKER_REAP_S = 5.0  # a worker told to go (its lifeline closed) kills its own group at once
GOOD = {Status.PASS.value, Status.WARN.value, Status.SKIP.value}  # after these, a worker runs its next task

WorkerKey = Tuple[str, FrozenSet[str]]  # the device, and the whole-run faults its process has
FACTS_WORKER = "(device facts)"  # the device of a worker key before the device is known


@dataclass
class Worker:
    """A child that initialised one device's runtime and runs that device's tasks in turn."""

    child: ChildProcess
    drain: OutputDrain  # one pipe for all its tasks, cut at each task's end
    last: Optional[str] = None  # the variant it ran last


class Isolation:
    """The run's launcher and workers; every child of a run starts here."""

    def __init__(self, mode: str, probes_paths: Sequence[str], run_env: Dict[str, str], inject: str,
                 kill_policy: KillPolicy, note: Callable[[str], None]):
        self.mode = mode  # zygote or spawn: what the run uses now (zygote may fall back)
        self.probes_paths = [str(p) for p in probes_paths]
        self.preload: List[str] = []  # modules the zygote and standby interpreters import ahead of tasks
        self.run_env = dict(run_env)  # set in every child
        self.faults = faults.parse(inject)
        self.kill_policy = kill_policy  # how the watchdog ends a hung child
        self.note = note
        self.launcher: Optional[Launcher] = None
        self.imports_s: Dict[str, float] = {}  # the zygote's imports before it was ready, seconds per module
        self.workers: Dict[WorkerKey, Worker] = {}
        self.running: Dict[str, Tuple[str, ChildProcess]] = {}  # device -> (what, child) while a task runs there
        self.lock = threading.Lock()  # the queues of several devices share the launcher and the workers

    # --- the launcher ----------------------------------------------------------------------

    def start(self, preload: Sequence[str] = ()) -> None:
        """The zygote server (torch and `preload` imported once), or spawn where it is unusable."""
        self.preload = list(preload)
        if self.mode == "zygote":
            with interrupts_deferred():  # once started, the server is ours to close, whenever SIGTERM comes
                self.launcher = zygote = ZygoteLauncher(self.probes_paths, self.preload)
            info = zygote.wait_ready()
            if info.get("ok"):
                self.imports_s = dict(info.get("imports_s") or {})
                return
            zygote.close()
            self.mode = "spawn"
            self.note(f"zygote unusable ({info.get('reason')}); using spawn isolation")
        self.launcher = self._spawn_launcher()

    def _started(self) -> Launcher:
        """The launcher `start` made (a task before `start` or after `close` is a bug of the caller's)."""
        assert self.launcher is not None
        return self.launcher

    def _spawn_launcher(self, prestart: Optional[bool] = None) -> SpawnLauncher:
        kwargs = {} if prestart is None else {"prestart": prestart}
        return SpawnLauncher(self.probes_paths, preload=self.preload, on_note=self.note, **kwargs)

    def fall_back_to_spawn(self, why: str) -> None:
        """A forked child could not initialise the GPU, or the zygote died: fresh interpreters from now on."""
        self._retire_all()  # forked workers: their replacements are spawned
        self._started().close()
        self.mode = "spawn"
        self.launcher = self._spawn_launcher()
        self.note(f"fell back to spawn isolation: {why}")

    def _check_server(self, when: str) -> None:
        """The zygote died: say so, go on with spawn."""
        with self.lock:  # several queues may see the death at once: one fallback
            launcher = self._started()
            if isinstance(launcher, ZygoteLauncher) and launcher.dead:  # the launcher of zygote mode
                self.fall_back_to_spawn(f"the isolation server died {when} ({launcher.death()})")

    def fresh_interpreter(self, env: Dict[str, str], fresh: bool) -> bool:
        """Whether a task run alone gets a new interpreter (it pays for `import torch`): always
        under spawn; under the zygote, when variables must be set before `import torch` or asked for."""
        return self.mode == "spawn" or fresh or bool({**self.run_env, **env})

    def _launch(self, path: str, env: Dict[str, str], fresh: bool, what: str) -> ChildProcess:
        env = {**self.run_env, **env}
        self._check_server(f"before {what}")
        launcher = self._started()
        if self.mode == "zygote" and self.fresh_interpreter(env, fresh):
            launcher = self._spawn_launcher(prestart=False)  # env before `import torch`
        try:
            with self.lock:  # the zygote's socket and the spawn launcher's standby serve one launch at a time
                return launcher.launch(path, env)
        except IsolationServerDied:
            self._check_server(f"as {what} was starting")
            with self.lock:
                return self._started().launch(path, env)

    def _supervise(self, child: ChildProcess, task: Task, on_first_use: Optional[Callable[[float], None]],
                   drain: Optional[OutputDrain] = None) -> ChildEnd:
        self.running[task.device] = (task.variant or task.what, child)
        try:
            return supervise(child, task.timeout, task.files, first_use_limit=task.first_use_limit,
                             policy=self.kill_policy, on_first_use=on_first_use, drain=drain)
        finally:
            self.running.pop(task.device, None)

    @staticmethod
    def _standby_killed_at_hand_over(child: ChildProcess, end: ChildEnd, task: Task) -> bool:
        """A SIGKILL (the OOM killer's, say) that lands on the standby between its liveness check
        and the hand-over ends it before it began the task: the task never ran, so it is no
        verdict of the probe's. A crash of the task's own (SIGSEGV or SIGABRT in GPU runtime
        init) is not this, and stays a crash."""
        return (child.from_standby and end.returncode == -SIGKILL and not end.timed_out
                and task.files.started_at() is None and not task.files.has_result())

    def _start_child(self, task: Task, env: Dict[str, str], fresh: bool,
                     on_first_use: Optional[Callable[[float], None]],
                     drain_for: Optional[Callable[[ChildProcess], OutputDrain]] = None
                     ) -> Tuple[ChildProcess, Optional[OutputDrain], ChildEnd]:
        """Launch a child for `task` and supervise it; a standby killed as the task was handed
        to it is replaced once, by a fresh interpreter."""
        path = task.write()
        child = self._launch(path, env, fresh, task.what)
        drain = drain_for(child) if drain_for else None
        end = self._supervise(child, task, on_first_use, drain)
        if self._standby_killed_at_hand_over(child, end, task):
            self.note(f"the standby interpreter (pid {child.pid}) was killed (SIGKILL) as {task.what} was handed "
                      f"to it, before the task began; ran it again in a fresh interpreter")
            with self.lock:
                launcher = self._started()
                assert isinstance(launcher, SpawnLauncher)  # only spawn has a standby
                child = launcher.launch(path, {**self.run_env, **env}, fresh=True)
            drain = drain_for(child) if drain_for else None
            end = self._supervise(child, task, on_first_use, drain)
        return child, drain, end

    def _gpu_init_failed_in_fork(self, task: Task) -> bool:
        """A forked child could not initialise the GPU runtime (HIP/CUDA initialised before the
        fork, say): fall back to spawn and clear the task's files for its second try."""
        result = TaskResult.read(task.files.result)
        if not (result and result.gpu_init_failed):
            return False
        with self.lock:
            if self.mode == "zygote":  # another queue may have fallen back already
                self.fall_back_to_spawn(result.message or "GPU init failed in a forked child")
        task.files.clear()
        return True

    # --- one task in a child of its own ---------------------------------------------------

    def run(self, task: Task, env: Dict[str, str], fresh: bool,
            on_first_use: Optional[Callable[[float], None]] = None) -> ChildEnd:
        """Run `task` in a child of its own; returns how it ended (its result is in its files)."""
        _, _, end = self._start_child(task, env, fresh, on_first_use)
        self._check_server(f"while {task.what} ran")
        if self.mode == "zygote" and self._gpu_init_failed_in_fork(task):
            return self.run(task, env, fresh, on_first_use)
        return end

    # --- tasks in a worker ----------------------------------------------------------------

    def worker_key(self, task: Task, env: Dict[str, str], spec: ProbeSpec) -> Optional[WorkerKey]:
        """The worker `task` may run in, or None when it needs a child of its own."""
        whole_run = faults.worker_faults(self.faults, spec.id)
        if env or spec.runs_in is not RunsIn.WORKER or whole_run is None:
            return None
        return task.device, whole_run

    def facts_worker_key(self) -> Optional[WorkerKey]:
        """Where the device-facts task runs: a worker that GPU 0's queue then adopts
        (`adopt_facts_worker`), so the runtime init the facts make is the one that GPU's tasks
        use; None (a child of its own) when a fault meets only some probes or patches a probe's
        process, since no probe's worker would then have the facts process's faults."""
        whole_run = faults.run_wide(self.faults)
        return None if whole_run is None else (FACTS_WORKER, whole_run)

    def adopt_facts_worker(self, device: Optional[str]) -> None:
        """Hand the device-facts worker to `device`'s queue, or end it (`device` None; the choice
        is `devices.facts_worker_device`'s)."""
        unwanted = []
        with self.lock:
            found = [(key, self.workers.pop(key)) for key in list(self.workers) if key[0] == FACTS_WORKER]
            for (_, whole_run), worker in found:
                if device is not None and (device, whole_run) not in self.workers:
                    self.workers[(device, whole_run)] = worker
                else:
                    unwanted.append(worker)
        for worker in unwanted:
            self._retire(worker)

    def run_in_worker(self, task: Task, key: WorkerKey,
                      on_first_use: Optional[Callable[[float], None]] = None) -> Tuple[ChildEnd, Optional[str]]:
        """Run `task` in the worker of `key` (started for it when there is none); returns how it
        ended and the variant the worker ran before it (None: the worker's first task)."""
        task.keep_alive = True
        self._check_server(f"before {task.what}")  # forked workers go with a dead server: spawned ones replace them
        with self.lock:
            worker = self.workers.pop(key, None)
        after = worker.last if worker else None
        if worker is not None and worker.child.hand_over(task.write()):
            end = self._supervise(worker.child, task, on_first_use, worker.drain)
        else:
            if worker is not None:  # it died between tasks
                self._retire(worker)
                after = None
            child, drain, end = self._start_child(task, {}, False, on_first_use,
                                                  drain_for=lambda c: OutputDrain(c.out_fd))
            assert drain is not None  # drain_for was given
            worker = Worker(child, drain)
            self._check_server(f"while {task.what} ran")
            if self.mode == "zygote" and self._gpu_init_failed_in_fork(task):
                self._end(worker, end)
                return self.run_in_worker(task, key, on_first_use)
        worker.last = task.variant
        result = TaskResult.read(task.files.result)
        if end.alive and result is not None and result.status.value in GOOD and not result.retire:
            with self.lock:
                self.workers[key] = worker
        else:
            self._end(worker, end)
        return end, after

    def _end(self, worker: Worker, end: ChildEnd) -> None:
        """After a task that leaves the worker unfit to go on: retire it, or reap it if it ended."""
        if end.alive:
            self._retire(worker)
        else:  # the watchdog has swept its tree and closed its output
            self._reap(worker.child)

    @staticmethod
    def _reap(child: ChildProcess) -> None:
        """Collect a worker that is ending by itself (its lifeline closed, or its last task done)."""
        if child.wait(WORKER_REAP_S) is None and not child.lost:
            child.signal_tree(SIGKILL)
            child.wait(WORKER_REAP_S)

    def _retire(self, worker: Worker) -> None:
        """End a worker between tasks: closing its lifeline makes it kill its own group."""
        worker.child.close_lifeline()
        self._reap(worker.child)
        worker.child.kill_leftovers()
        worker.drain.finish(timeout=0.5)

    def _retire_all(self) -> None:
        workers, self.workers = list(self.workers.values()), {}
        for worker in workers:
            self._retire(worker)

    def kill_running(self) -> str:
        """After an interrupt: SIGKILL every child running a task; returns what ran, for the report."""
        running = list(self.running.items())
        for _, (_, child) in running:
            child.signal_tree(SIGKILL)
        return ", ".join(f"{what} on {device}" for device, (what, _) in running)

    def close(self) -> None:
        """End the workers and the launcher (idempotent)."""
        self._retire_all()
        if self.launcher is not None:
            self.launcher.close()
            self.launcher = None


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold SIGTERM, Ctrl-C and the --deadline's SIGALRM back while a process of ours starts (until
    its handle is kept), then deliver them: an interrupt in the middle of Popen would orphan the
    new process."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: List[int] = []
    wanted = (signal.SIGTERM, signal.SIGINT, *([signal.SIGALRM] if hasattr(signal, "SIGALRM") else []))
    previous = {signum: signal.signal(signum, lambda signum, frame: pending.append(signum)) for signum in wanted}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if pending:
            signal.raise_signal(pending[0])
