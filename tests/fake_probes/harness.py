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

import psutil

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
    ctx.measure(answer=42)


@rocmcheck.probe("fake-fail", title="fails", targets="nothing", timeout=30)
def fake_fail(ctx):
    _start()
    ctx.measure(zeros=3)
    ctx.fail("3 of 10 elements are zero")


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


@rocmcheck.probe("fake-helper-stuck", title="declares its helper process stuck", targets="a collective's stuck rank",
                 timeout=30)
def fake_helper_stuck(ctx):
    _start()
    helper = ctx.start_process(["-c", "import time; time.sleep(600)"], {})
    _record(helper.pid)
    codes = ctx.wait_processes([helper], margin_s=ctx.timeout - 0.5)  # it gets half a second
    ctx.hang(f"the helper did not finish (exit code {codes[0]})")


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
    folder = os.environ.get("ROCMCHECK_TEST_PIDDIR")
    if folder:  # announced, so a test interrupts the sleep itself, not a guess at when it began
        with open(os.path.join(folder, "fake-sleep.sleeping"), "w") as fh:
            fh.write(str(os.getpid()))
    time.sleep(100)


# --- the run surviving its own machinery (issue 13) -------------------------------------------


def _wait_for(predicate, limit=10.0):
    deadline = time.monotonic() + limit
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)


def _gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _isolation_servers():
    """The zygote that forked us, or under spawn the standby interpreter started beside us."""
    if os.environ.get("ROCMCHECK_ISOLATION") == "zygote":
        return [os.getppid()]
    found = []

    def standby():
        found[:] = [p.pid for p in psutil.Process(os.getppid()).children()
                    if p.pid != os.getpid() and "rocmcheck.engine.child" in " ".join(p.cmdline())]
        return found

    _wait_for(standby)
    return found


@rocmcheck.probe("fake-x-server", title="kills the isolation server", targets="OOM killer picks the zygote",
                 timeout=30, variants=[{"then": "pass"}, {"then": "exit"}])
def fake_x_server(ctx, then):
    _start()
    for pid in _isolation_servers():
        os.kill(pid, signal.SIGKILL)
        _wait_for(lambda: _gone(pid))
    if then == "exit":
        os._exit(0)


@rocmcheck.probe("fake-x-daemon", title="leaves daemons", targets="double fork, new session", timeout=30)
def fake_x_daemon(ctx):
    _start()
    exec_daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _record(exec_daemon.pid)
    read, write = os.pipe()
    if os.fork() == 0:  # the classic double fork, no exec
        os.setsid()
        if os.fork() == 0:
            os.write(write, f"{os.getpid()}\n".encode())
            time.sleep(600)
        os._exit(0)
    forked_daemon = int(os.read(read, 64).decode())
    _record(forked_daemon)
    regrouped = subprocess.Popen([sys.executable, "-c", "import os, time; os.setpgid(0, 0); time.sleep(600)"])
    _record(regrouped.pid)
    _wait_for(lambda: os.getpgid(regrouped.pid) == regrouped.pid)
    ctx.measure(daemons=[exec_daemon.pid, forked_daemon, regrouped.pid])


@rocmcheck.probe("fake-x-exit", title="exits or is interrupted inside", targets="SystemExit, KeyboardInterrupt",
                 timeout=30, variants=[{"how": "sys.exit-0"}, {"how": "sys.exit-3"}, {"how": "keyboard"}])
def fake_x_exit(ctx, how):
    _start()
    if how == "keyboard":
        raise KeyboardInterrupt
    sys.exit(int(how[-1]))


@rocmcheck.probe("fake-x-output", title="closes its output", targets="stdout and stderr closed", timeout=30)
def fake_x_output(ctx):
    _start()
    print("before closing", flush=True)
    os.close(1)
    os.close(2)
    ctx.measure(closed=True)


@rocmcheck.probe("fake-x-result", title="corrupts its result file", targets="torn or foreign result",
                 timeout=30, variants=[{"result": "torn"}, {"result": "foreign"}])
def fake_x_result(ctx, result):
    _start()
    from rocmcheck.engine import child

    content = '{"status": "pass", "mess' if result == "torn" else \
        '{"status": "pass", "message": 5, "measurements": "x", "exception": [], "probe_s": "slow"}'

    def write_result(path, _result):
        with open(path, "w") as fh:
            fh.write(content)

    for module in (child, sys.modules["__main__"]):  # spawned: the child runs as __main__
        if hasattr(module, "write_result"):
            module.write_result = write_result


@rocmcheck.probe("fake-x-text", title="says anything", targets="hostile text", timeout=30,
                 variants=[{"kind": k} for k in ("fail", "warn", "error", "pass")])
def fake_x_text(ctx, kind):
    """Reads {"text": str, "raw": hex} from $ROCMCHECK_TEST_TEXT/<kind>.json."""
    import json

    with open(os.path.join(os.environ["ROCMCHECK_TEST_TEXT"], f"{kind}.json")) as fh:
        payload = json.load(fh)
    raw = bytes.fromhex(payload["raw"])
    text = payload["text"] + raw.decode("utf-8", "surrogateescape")
    os.write(1, raw + b"\n" + text.encode("utf-8", "surrogatepass"))
    os.write(2, text.encode("utf-8", "surrogatepass"))
    if kind == "fail":
        ctx.fail(text)
    if kind == "warn":
        ctx.warn(text)
    if kind == "error":
        raise RuntimeError(text)
    ctx.measure(**{"said": text, text: 1})


@rocmcheck.probe("fake-z-last", title="passes, last", targets="nothing", timeout=30)
def fake_z_last(ctx):
    _start()
