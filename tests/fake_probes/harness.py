"""Fake probes for the reliability cases of docs/isolation.md §12.

Each records the pids it creates in $ROCMCHECK_TEST_PIDDIR so tests can assert
that no process of the tree survives. No torch import: these test the harness.
"""
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

import rocmcheck


def _record(pid):
    folder = os.environ.get("ROCMCHECK_TEST_PIDDIR")
    if folder:
        with open(os.path.join(folder, f"{pid}.pid"), "w") as fh:
            fh.write(str(pid))


def _start():
    _record(os.getpid())


def _block_in_c():
    threading.Event().wait()


@rocmcheck.probe("fake-pass", title="passes", targets="nothing", timeout=30, gate=True)
def fake_pass(ctx):
    _start()
    return {"answer": 42}


@rocmcheck.probe("fake-fail", title="fails", targets="nothing", timeout=30)
def fake_fail(ctx):
    _start()
    raise rocmcheck.ProbeFailure("3 of 10 elements are zero", zeros=3)


@rocmcheck.probe("fake-error", title="raises", targets="nothing", timeout=30)
def fake_error(ctx):
    _start()
    raise RuntimeError("HIP error: invalid device function")


@rocmcheck.probe("fake-warn", title="warns", targets="nothing", timeout=30)
def fake_warn(ctx):
    _start()
    ctx.warn("bf16 is only emulated here")


@rocmcheck.probe("fake-skip", title="skips", targets="nothing", timeout=30)
def fake_skip(ctx):
    ctx.skip("needs two GPUs")


@rocmcheck.probe("fake-gpu-only", title="needs a GPU", targets="nothing", timeout=30, requires={"gpu": True})
def fake_gpu_only(ctx):
    raise AssertionError("must never run on the CPU")


@rocmcheck.probe("fake-abort", title="aborts", targets="HSA abort", timeout=30)
def fake_abort(ctx):
    _start()
    sys.stderr.write("Memory access fault by GPU node-1 (Agent handle: 0x55d) on address (nil). Reason: Unknown.\n")
    sys.stderr.flush()
    os.abort()


@rocmcheck.probe("fake-segv", title="segfaults", targets="access violation", timeout=30)
def fake_segv(ctx):
    _start()
    ctypes.string_at(0)


@rocmcheck.probe("fake-hang-c", title="hangs in a C call", targets="driver hang", timeout=30)
def fake_hang_c(ctx):
    _start()
    threading.Thread(target=_block_in_c, name="helper-thread", daemon=True).start()
    _block_in_c()


@rocmcheck.probe("fake-grandchild", title="grandchild holds the output", targets="pipe held", timeout=30)
def fake_grandchild(ctx):
    _start()
    child = subprocess.Popen([sys.executable, "-c", "import time; print('gc up', flush=True); time.sleep(600)"])
    _record(child.pid)
    _block_in_c()


@rocmcheck.probe("fake-ignore-term", title="ignores SIGTERM", targets="stuck process", timeout=30)
def fake_ignore_term(ctx):
    _start()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _block_in_c()


@rocmcheck.probe("fake-flood", title="floods output", targets="megabytes of output", timeout=60)
def fake_flood(ctx):
    _start()
    chunk = "y" * (1 << 20)
    for _ in range(64):
        sys.stdout.write(chunk)
    sys.stdout.write("\nTHE END\n")
    sys.stdout.flush()


@rocmcheck.probe("fake-no-result", title="exits 0 without a result", targets="silent exit", timeout=30)
def fake_no_result(ctx):
    _start()
    os._exit(0)


@rocmcheck.probe("fake-oom-error", title="framework OOM", targets="out of memory", timeout=30)
def fake_oom_error(ctx):
    _start()
    raise MemoryError("HIP out of memory. Tried to allocate 20.00 GiB")


@rocmcheck.probe("fake-oom-kill", title="killed by someone else", targets="OOM killer", timeout=30)
def fake_oom_kill(ctx):
    _start()
    os.kill(os.getpid(), signal.SIGKILL)


@rocmcheck.probe("fake-sleep", title="sleeps (for interrupting)", targets="interrupt", timeout=120)
def fake_sleep(ctx):
    _start()
    time.sleep(100)
