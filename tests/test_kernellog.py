"""Kernel log scan after a failed GPU variant: the matcher over real message formats, the
unreadable log, and the hook through the real runner with a fixture log standing in for /dev/kmsg."""
from __future__ import annotations

import time

import pytest

from conftest import FAKE_PROBES as FAKE
from rocmcheck import registry
from rocmcheck.engine.isolation import Isolation
from rocmcheck.engine.launch import SpawnLauncher
from rocmcheck.engine.selection import select
from rocmcheck.host import kernellog
from rocmcheck.model import DeviceInfo

# Real formats: NVIDIA's Xid catalogue (https://docs.nvidia.com/deploy/xid-errors/index.html),
# amdgpu page faults (https://github.com/ROCm/TheRock/issues/1271, https://github.com/ROCm/amdgpu/issues/172),
# ring timeouts and resets (https://github.com/ROCm/legacy-rocm-build/issues/6127,
# https://github.com/ROCm/legacy-rocm-build/issues/6273, https://github.com/yshui/picom/issues/1390).
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2412, name=python, GPU has fallen off the bus."
PAGE_FAULT = "amdgpu 0000:c2:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:8 pasid:32780)"
NO_RETRY = ("amdgpu 0000:c6:00.0: amdgpu: [gfxhub0] no-retry page fault (src_id:0 ring:24 vmid:3 pasid:32769)")
L2_STATUS = "amdgpu 0000:c2:00.0: amdgpu: GCVM_L2_PROTECTION_FAULT_STATUS:0x00801031"
RING = "amdgpu 0000:03:00.0: amdgpu: ring comp_1.1.0 timeout, signaled seq=7, emitted seq=9"
DRM_RING = ("[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled seq=5235351, "
            "emitted seq=5235353")
RESET = "amdgpu 0000:c5:00.0: amdgpu: GPU reset begin!"
HARMLESS = ("amdgpu 0000:c5:00.0: amdgpu: SMU is resumed successfully!",
            "NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
            "[drm] PCIE GART of 512M enabled (table at 0x0000008000300000).")


def kmsg(seconds: float, message: str) -> str:
    """A /dev/kmsg record: PRI,SEQ,USEC,FLAGS;MESSAGE."""
    return f"3,{int(seconds * 1000)},{int(seconds * 1e6)},-;{message}"


def test_matcher_finds_xid_page_faults_and_resets_and_nothing_else():
    lines = [f"[ 7741.93407{i}] {m}" for i, m in enumerate((XID, PAGE_FAULT, *HARMLESS, NO_RETRY, L2_STATUS))]
    lines += [kmsg(7742.0, RING), kmsg(7742.1, DRM_RING), kmsg(7742.2, RESET)]
    assert kernellog.matches(lines) == [
        f"nvidia-xid: {XID}", f"amdgpu-page-fault: {PAGE_FAULT}", f"amdgpu-page-fault: {NO_RETRY}",
        f"amdgpu-page-fault: {L2_STATUS}", f"amdgpu-reset: {RING}", f"amdgpu-reset: {DRM_RING}",
        f"amdgpu-reset: {RESET}"]
    assert kernellog.matches([f"[ 1.0] {m}" for m in HARMLESS]) == []


def test_matcher_keeps_only_lines_since_the_variant_started():
    lines = [kmsg(100.0, XID), f"[  200.500000] {RESET}", kmsg(300.0, PAGE_FAULT)]
    assert kernellog.matches(lines, since=250.0) == [f"amdgpu-page-fault: {PAGE_FAULT}"]
    assert len(kernellog.matches(lines, since=201.0)) == 2  # within the clock slack
    assert kernellog.parse(kmsg(12.5, RESET)) == (12.5, RESET)


@pytest.mark.children
def test_unreadable_log_is_said_in_the_evidence(monkeypatch, tmp_path):
    monkeypatch.setenv(kernellog.LOG_ENV, str(tmp_path / "missing"))
    evidence = kernellog.evidence(0.0)
    assert list(evidence) == ["kernel_log_unreadable"] and "No such file" in evidence["kernel_log_unreadable"]


def _run_on_a_gpu(monkeypatch, probes):
    from rocmcheck.engine.options import RunOptions
    from rocmcheck.engine.runner import Runner

    monkeypatch.setattr(Runner, "resolve_device",
                        lambda self: setattr(self, "device", DeviceInfo("cuda:0", "rocm", 1, "gfx1100")))
    monkeypatch.setattr(Isolation, "start",
                        lambda self, preload: setattr(self, "launcher", SpawnLauncher([FAKE], prestart=False)))
    variants = select(registry.load_all([FAKE]), probes)
    opts = RunOptions(device="cuda:0", isolation="spawn", probes_paths=[FAKE], write_files=False)
    return {v["probe"]: v for v in Runner(opts).run(variants).to_dict()["verdicts"]}


def test_runner_puts_new_kernel_log_lines_in_a_bad_gpu_verdict(monkeypatch, tmp_path, rocm_run):
    log = tmp_path / "kmsg"
    now = time.monotonic()
    log.write_text("\n".join([kmsg(now - 600, XID), kmsg(now + 30, PAGE_FAULT), kmsg(now + 31, HARMLESS[0])]) + "\n")
    monkeypatch.setenv(kernellog.LOG_ENV, str(log))
    (on_cpu,) = rocm_run(probe="fake-fail", probes_path=[FAKE])
    assert on_cpu["status"] == "fail" and "kernel_log" not in on_cpu["evidence"]  # CPU verdicts are not explained
    bad = _run_on_a_gpu(monkeypatch, ["fake-fail"])["fake-fail"]
    # this machine's torch cannot start a GPU runtime: a real ERROR, kept as it is
    assert bad["status"] == "error" and "GPU runtime init failed" in bad["message"]
    assert bad["evidence"]["kernel_log"] == [f"amdgpu-page-fault: {PAGE_FAULT}"]  # the old Xid is not this run's


@pytest.mark.children
def test_runner_says_when_the_kernel_log_cannot_be_read(monkeypatch, tmp_path):
    monkeypatch.setenv(kernellog.LOG_ENV, str(tmp_path / "no-such-log"))
    bad = _run_on_a_gpu(monkeypatch, ["fake-fail"])["fake-fail"]
    assert bad["status"] == "error" and "no-such-log" in bad["evidence"]["kernel_log_unreadable"]
