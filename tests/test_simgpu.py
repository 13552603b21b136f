"""The simulated GPUs (rocmcheck/simgpu): the device itself, built once per test session into the
cache (the build takes 30-130 s; a cached one loads in a few hundredths of a second)."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from conftest import run_ok_script
from rocmcheck import simgpu
from rocmcheck.cli import main
from rocmcheck.errors import UsageError

DEVICE_PATHS = textwrap.dedent('''
    import time
    import torch
    from rocmcheck import simgpu
    simgpu.enable(2)  # ROCMCHECK_SIMGPU_INIT_S=0.5: the first device use waits that long, once
    began = time.perf_counter(); torch.empty(0, device="simgpu:0"); first = time.perf_counter() - began
    began = time.perf_counter(); torch.empty(0, device="simgpu:1"); second = time.perf_counter() - began
    assert first >= 0.5 and second < 0.1, (first, second)
    host = torch.arange(1000, dtype=torch.float32)
    one = host.to("simgpu:1")
    assert one.device == torch.device("simgpu:1") and torch.equal(one.cpu(), host)
    assert torch.equal(one.to("simgpu:0").cpu(), host)  # device to device
    pinned = host.pin_memory()
    assert pinned.is_pinned() and not host.is_pinned()
    assert torch.equal(pinned.to("simgpu:0", non_blocking=True).cpu(), host)
    side = torch.Stream(device="simgpu:0")
    with side:
        assert torch.accelerator.current_stream(0) == side
    start, end = (torch.Event(device="simgpu:0", enable_timing=True) for _ in range(2))
    start.record(); x = torch.randn(64, 64, device="simgpu:0") @ torch.randn(64, 64, device="simgpu:0"); end.record()
    end.synchronize()
    assert start.elapsed_time(end) > 0
    start.record(); time.sleep(0.3); end.record()  # the device's clock counts its own work, not the host's time
    assert start.elapsed_time(end) < 100, start.elapsed_time(end)
    assert torch.accelerator.memory_allocated(1) >= 4000 and torch.accelerator.get_memory_info(0)[1] == 8 << 30
    with torch.autocast("simgpu", dtype=torch.bfloat16):
        assert (x @ x).dtype == torch.bfloat16
    conv = torch.nn.Conv2d(3, 4, 3).to("simgpu:1")
    out = conv(torch.randn(2, 3, 8, 8, device="simgpu:1"))
    out.sum().backward()
    assert conv.weight.grad.device == torch.device("simgpu:1")
    big, on_device = torch.ones(1 << 20), torch.empty(1 << 20, device="simgpu:0")

    def copy_ms():  # the least of 5, each timed by the device's events
        times = []
        for _ in range(5):
            start.record(); on_device.copy_(big); end.record()
            times.append(start.elapsed_time(end))
        return min(times)
    healthy = copy_ms()
    simgpu.set_fault("slow-copy", 4)
    slowed = copy_ms()
    assert slowed > 2.5 * healthy, (healthy, slowed)  # 4 times as long, the copies still right
    assert torch.equal(on_device.cpu(), big)
    simgpu.set_fault("slow-copy", 0)
    simgpu.set_fault("copy-tail", 4)
    assert torch.equal(host.to("simgpu:0").cpu(), host)  # a blocking copy is untouched
    faulty = pinned.to("simgpu:0", non_blocking=True).cpu()
    assert torch.equal(faulty[:750], host[:750]) and not faulty[750:].any()  # the last quarter zeroed
    print("ok", flush=True)
    import os; os._exit(0)  # as rocmcheck's children: torch's autograd device threads may take the GIL during teardown
''')


@pytest.fixture(scope="session")
def simgpu_built():
    """The device, built into the cache once per session (a file lock keeps xdist workers from building twice)."""
    simgpu.build()


@pytest.mark.children
def test_the_device_holds_data_streams_events_pinned_memory_a_slow_first_init_and_a_planted_fault(simgpu_built):
    run_ok_script(DEVICE_PATHS, timeout=120, env={**os.environ, simgpu.INIT_ENV: "0.5"})


@pytest.mark.children
def test_an_older_torch_is_a_one_line_error_before_any_build(monkeypatch, tmp_path):
    """torch 2.5.1 fails to compile the device with pages of C++ errors: say it in one line instead."""
    monkeypatch.setenv(simgpu.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(simgpu, "_ext", None)
    monkeypatch.setattr("torch.__version__", "2.5.1+cu124")
    with pytest.raises(UsageError, match=r"^simulated GPUs need torch 2.11 or newer; this is torch 2.5.1\+cu124"):
        simgpu.build()
    assert not list(tmp_path.iterdir())


@pytest.mark.children
def test_without_ninja_the_build_is_a_one_line_error(monkeypatch, tmp_path):
    monkeypatch.setenv(simgpu.CACHE_ENV, str(tmp_path))  # nothing cached: a build is needed
    monkeypatch.setattr(simgpu, "_ext", None)
    monkeypatch.setattr("torch.utils.cpp_extension.is_ninja_available", lambda: False)
    with pytest.raises(UsageError, match=r"^simulated GPUs need ninja \(pip install ninja\) to build"):
        simgpu.build()


def _statuses(verdicts):
    return {(v["variant"], v["device"]["name"]): v["status"] for v in verdicts}


def test_a_copy_that_zeroes_the_tail_of_non_blocking_copies_fails_exactly_those_variants(rocm_run, simgpu_built):
    verdicts = rocm_run(probe="transfer", keyword="isolated and not d2 and not tensor and not copy_ and not cuda",
                        device="simgpu:0", inject="simgpu:1,simgpu-copy-tail", profile="gate")
    assert _statuses(verdicts) == {("transfer[to-isolated]", "simgpu:0"): "pass",
                                   ("transfer[to-nonblocking-isolated]", "simgpu:0"): "fail",
                                   ("transfer[pinned-isolated]", "simgpu:0"): "fail",
                                   ("transfer[side-stream-isolated]", "simgpu:0"): "fail"}
    assert all("zeros" in v["message"] for v in verdicts if v["status"] == "fail")


def test_a_side_stream_that_returns_the_previous_buffer_is_caught(rocm_run, simgpu_built):
    (verdict,) = rocm_run(probe="transfer", keyword="side-stream-isolated", device="simgpu:0",
                          inject="simgpu:1,simgpu-stale-side-stream", profile="gate")
    assert verdict["status"] == "fail" and "32 of 32 copies wrong" in verdict["message"]


def test_one_gpu_of_two_that_computes_wrong_is_named(rocm_run, simgpu_built):
    verdicts = rocm_run(probe="*", keyword="gemm and fp32-default or device-smoke", device="all",
                        inject="simgpu:2,simgpu-wrong-device:1", profile="gate")
    assert _statuses(verdicts) == {("gemm[fp32-default]", "simgpu:0"): "pass",
                                   ("gemm[fp32-default]", "simgpu:1"): "fail",
                                   ("device-smoke", "simgpu:0"): "pass", ("device-smoke", "simgpu:1"): "fail"}
    wrong = next(v for v in verdicts if v["status"] == "fail" and v["probe"] == "gemm")
    assert wrong["device"]["index"] == 1 and wrong["device"]["uuid"] == "simgpu-1"


def test_a_simulated_gpus_child_computes_on_one_thread_as_the_cpus_does(rocm_run, simgpu_built, tmp_path):
    """Each simulated GPU's child computes on the host's cores beside the others': two OpenMP threads
    each made its 256^3 products 300x slower on a loaded 2-core machine (the speed probe's figures)."""
    (tmp_path / "threads_probe.py").write_text(textwrap.dedent('''
        import rocmcheck
        import torch

        @rocmcheck.probe("threads", title="t", targets="t")
        def threads(ctx):
            ctx.measure(threads=torch.get_num_threads(), device=ctx.device)
    '''))
    (verdict,) = rocm_run(probe="threads", probes_path=[str(tmp_path)], device="simgpu:1", inject="simgpu:2")
    assert (verdict["measurements"]["threads"], verdict["measurements"]["device"]) == (1, "simgpu:1")


@pytest.mark.children
def test_a_healthy_node_of_two_simulated_gpus_is_go(tmp_path, simgpu_built):
    """The gate's decision, its per-GPU verdicts and the skips naming the simulated device's limit, on
    the quicker probes; `make simgpu-test` runs the whole gate (GO, 24 s here: CI keeps the quicker third)."""
    report = tmp_path / "gate.json"
    requires = [arg for probe in ("gpu-visible", "device-smoke", "numerics", "config-lint", "allocator", "pcie-link")
                for arg in ("--require", probe)]
    assert main(["gate", "--inject", "simgpu:2", *requires, "--json", str(report), "--out-dir", str(tmp_path)]) == 0
    verdicts = json.loads(report.read_text())["verdicts"]
    assert {v["device"]["name"] for v in verdicts} == {"simgpu:0", "simgpu:1"}
    assert {v["status"] for v in verdicts} == {"pass", "skip"}
    skipped = {v["variant"]: v["message"] for v in verdicts if v["status"] == "skip"}
    assert {"allocator[default]", "pcie-link", "config-lint[arch-in-wheel]"} <= set(skipped)
    assert all("simulated GPU" in skipped[k] for k in ("allocator[default]", "pcie-link", "config-lint[arch-in-wheel]"))



def test_the_device_option_names_simulated_gpus():
    from rocmcheck.engine import options

    assert options.device("simgpu:1,0,1") == "simgpu:1,0"
    with pytest.raises(ValueError, match="not 'simgpu:x'"):
        options.device("simgpu:x")


@pytest.mark.children
def test_the_simulated_gate_pays_one_runtime_init(tmp_path, simgpu_built):
    """Issue 23, counted by the device itself: each process's runtime init appends its pid to
    ROCMCHECK_SIMGPU_INIT_LOG (a count from wall time flaked under load: issue 31). The device
    facts initialise the runtime (as torch.cuda.get_device_properties does) in the worker that
    then runs the GPU's probes: one init. One child per variant made it 35; a facts child of its
    own, 2; sdc in a fresh interpreter for CUBLAS_WORKSPACE_CONFIG, 2 (issue 39: every child now
    has it). (The whole gate adds allocator[default]'s own child, forked from the zygote: 2, timed by
    `benchmarks/bench_runtime_inits.py`.)"""
    inits = tmp_path / "inits"
    probes = ("device-smoke", "numerics", "config-lint", "gemm", "sdc")
    cmd = [sys.executable, "-m", "rocmcheck", "gate", "--inject", "simgpu:1", "--out-dir", str(tmp_path),
           *[arg for probe in probes for arg in ("--require", probe)]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, simgpu.INIT_LOG_ENV: str(inits)})
    assert proc.returncode == 0 and "GO" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len(inits.read_text().split()) == 1, inits.read_text()


def _build_processes(cache: Path) -> dict:
    """The live processes working in `cache`, by name: ninja and the compilers of a build into it."""
    found = {}
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and Path(proc.cwd()).is_relative_to(cache):
                found[proc] = proc.name()
        except (OSError, psutil.Error):
            continue
    return found


@pytest.mark.children
def test_an_interrupted_first_build_leaves_no_compiler_running(tmp_path):
    """Issue 31: SIGTERM to the gate during the first build exited 2 but left c++ and cc1plus running
    (ninja gives each its own process group, and torch SIGKILLs ninja on an exception). The build
    says that it starts, and once interrupted, nothing of it may outlive the gate: orphaned, the
    compilers ran on for the rest of the build (20 s and more here), far past the 5 s allowed."""
    cache = tmp_path / "cache"
    env = {**os.environ, simgpu.CACHE_ENV: str(cache)}
    gate = subprocess.Popen([sys.executable, "-m", "rocmcheck", "gate", "--inject", "simgpu:2", "--out-dir",
                             str(tmp_path / "out")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not {"cc1plus", "c++", "g++", "clang++", "clang"} & set(_build_processes(cache).values()):
            assert gate.poll() is None, gate.communicate()
            assert time.monotonic() < deadline, "no compiler started in 300 s"
            time.sleep(0.1)
        gate.send_signal(signal.SIGTERM)  # the gate alone, as a scheduler's kill of its pid
        _, err = gate.communicate(timeout=60)
        gone_by = time.monotonic() + 5
        while _build_processes(cache) and time.monotonic() < gone_by:
            time.sleep(0.1)
        left = _build_processes(cache)
    finally:
        gate.kill()
        for proc in _build_processes(cache):
            with contextlib.suppress(psutil.Error):
                proc.kill()
    assert gate.returncode == 2, err
    assert "building the simulated GPU extension for torch" in err and "build was stopped" in err, err
    assert not left


@pytest.mark.children
@pytest.mark.parametrize("device, facts_process_runs_the_probe", [("simgpu:0", True), ("cpu", False)])
def test_the_device_facts_process_becomes_the_gpus_worker_but_never_a_cpu_runs(simgpu_built, device,
                                                                               facts_process_runs_the_probe):
    """On a GPU the facts' process runs the probes next (its runtime init is theirs); a CPU run on a
    host whose GPU the facts initialised gets a worker that never touched it."""
    from rocmcheck import registry
    from rocmcheck.engine.options import RunOptions
    from rocmcheck.engine.runner import Runner
    from rocmcheck.engine.selection import select

    fake = str(Path(__file__).parent / "fake_probes")
    variants = select(registry.load_all([fake]), ["fake-w-current-gpu"])
    opts = RunOptions(device=device, inject="simgpu:1", probes_paths=[fake], write_files=False)
    (verdict,) = Runner(opts).run(variants).to_dict()["verdicts"]
    assert verdict["status"] == "pass", verdict
    assert verdict["evidence"].get("worker_task") == (1 if facts_process_runs_the_probe else None)


@pytest.mark.children
def test_a_worker_makes_its_own_gpu_current_again(simgpu_built):
    """A probe that makes another GPU current (Accelerate's placement does) must not move the
    next task of its worker: the worker puts its GPU back, and says so."""
    from rocmcheck import registry
    from rocmcheck.engine.options import RunOptions
    from rocmcheck.engine.runner import Runner
    from rocmcheck.engine.selection import select

    fake = str(Path(__file__).parent / "fake_probes")
    specs = registry.load_all([fake])
    variants = [v for p in ("fake-w-current-gpu", "fake-w-other-gpu", "fake-w-current-gpu") for v in select(specs, [p])]
    opts = RunOptions(device="simgpu:0", inject="simgpu:2", probes_paths=[fake], write_files=False)
    first, other, after = Runner(opts).run(variants).to_dict()["verdicts"]
    assert first["measurements"]["pid"] == after["measurements"]["pid"]  # one worker
    assert first["measurements"]["current"] == after["measurements"]["current"] == 0
    assert "current_device" in other["evidence"]["state_put_back"]
