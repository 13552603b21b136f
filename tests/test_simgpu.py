"""The simulated GPUs (rocmcheck/simgpu): the device itself, built once per test session into the
cache (the build takes 30-130 s; a cached one loads in a few hundredths of a second)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from rocmcheck import simgpu
from rocmcheck.errors import UsageError

DEVICE_PATHS = textwrap.dedent('''
    import torch
    from rocmcheck import simgpu
    simgpu.enable(2)
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
    assert torch.accelerator.memory_allocated(1) >= 4000 and torch.accelerator.get_memory_info(0)[1] == 8 << 30
    with torch.autocast("simgpu", dtype=torch.bfloat16):
        assert (x @ x).dtype == torch.bfloat16
    conv = torch.nn.Conv2d(3, 4, 3).to("simgpu:1")
    out = conv(torch.randn(2, 3, 8, 8, device="simgpu:1"))
    out.sum().backward()
    assert conv.weight.grad.device == torch.device("simgpu:1")
    simgpu.set_fault("copy-tail", 4)
    assert torch.equal(host.to("simgpu:0").cpu(), host)  # a blocking copy is untouched
    faulty = pinned.to("simgpu:0", non_blocking=True).cpu()
    assert torch.equal(faulty[:750], host[:750]) and not faulty[750:].any()  # the last quarter zeroed
    print("ok")
''')


@pytest.fixture(scope="session")
def simgpu_built():
    """The device, built into the cache once per session (a file lock keeps xdist workers from building twice)."""
    simgpu.build()


def test_the_device_holds_data_streams_events_pinned_memory_and_a_planted_fault(simgpu_built):
    run = subprocess.run([sys.executable, "-c", DEVICE_PATHS], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


def test_without_ninja_the_build_is_a_one_line_error(monkeypatch, tmp_path):
    monkeypatch.setenv(simgpu.CACHE_ENV, str(tmp_path))  # nothing cached: a build is needed
    monkeypatch.setattr(simgpu, "_ext", None)
    monkeypatch.setattr("torch.utils.cpp_extension.is_ninja_available", lambda: False)
    with pytest.raises(UsageError, match=r"^simulated GPUs need ninja \(pip install ninja\) to build"):
        simgpu.build()
