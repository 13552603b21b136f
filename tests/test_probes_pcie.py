"""`pcie-link`: bandwidth timing and the link decision, proven on the CPU.

The link decision is fed fixture trees standing in for /sys (conftest.make_host) and device
facts naming the GPU's PCI address; the timing helper is pure over the clock it is given.
"""
from __future__ import annotations

import textwrap
import time

import pytest

import rocmcheck
from conftest import probe_module
from rocmcheck.model import Verdict, speed_figures

GEN4, GEN3 = "16.0 GT/s PCIe", "8.0 GT/s PCIe"
FACTS = {"devices": [{"index": 0, "pci_address": "0000:03:00.0"}]}  # make_host's first GPU


def test_bandwidth_on_the_cpu_is_measured_host_to_host_then_skips(rocm_run):
    (v,) = rocm_run(probe="pcie-link", profile="gate")
    assert v["status"] == "skip" and "no PCIe link to read on the CPU" in v["message"]
    m = v["measurements"]
    assert not [k for k in m if k.endswith("_gbps")]  # the figures are the record, with no copy beside them
    figures = speed_figures(Verdict.from_dict(v))
    assert set(figures) == {"h2d-pageable", "d2h-pageable"}  # no pinned memory on the CPU
    for name, figure in figures.items():
        assert figure.unit == "GB/s" and len(figure.samples) == 40 and min(figure.samples) > 0, (name, figure)
        assert figure.method.startswith("thread CPU time") and "4 MiB" in figure.method
        assert figure.host_samples == []  # the CPU's copies are the host's: nothing to time beside them
        assert "40 samples" in figure.method
    assert m["bandwidth_bytes"] == 4 << 20


def test_samples_are_timed_by_the_clock_given_after_an_untimed_warm_up():
    class Scripted:
        """A clock whose copies take the listed seconds."""

        def __init__(self, durations):
            self.durations = list(durations)

        def seconds(self, copy):
            copy()
            return self.durations.pop(0)

    from rocmcheck import torchapi

    calls = []
    clock = Scripted([0.004, 0.001, 0.002, 0.008, 0.002])
    seconds = torchapi.time_samples(clock, lambda: calls.append(1), 5)
    assert probe_module("pcie").gbps(8_000_000, seconds) == [2.0, 8.0, 4.0, 1.0, 4.0]  # every sample, in order
    assert len(calls) == 6 and clock.durations == []  # warm-up + 5 samples, each sample timed once


def test_the_host_work_beside_is_timed_right_after_each_sample_by_the_same_clock():
    from rocmcheck import torchapi

    class Recording:
        """A clock that says which work it timed: 1 s for the device's, 2 s for the host's."""

        def seconds(self, work):
            return work()

    calls = []
    device, host = (lambda: calls.append("device") or 1.0), (lambda: calls.append("host") or 2.0)
    assert torchapi.time_beside(Recording(), device, host, 3, warmup=1) == ([1.0] * 3, [2.0] * 3)
    assert calls == ["device", "host"] * 4  # a warm-up of each, then each sample followed by the host's
    calls.clear()
    assert torchapi.time_beside(Recording(), device, None, 2, warmup=0) == ([1.0, 1.0], [])
    assert calls == ["device", "device"]


def test_device_events_time_gpu_copies_and_the_threads_cpu_time_cpu_ones():
    from rocmcheck import torchapi

    assert isinstance(torchapi.clock("cuda:1"), torchapi.EventClock)
    cpu = torchapi.clock("cpu")
    assert isinstance(cpu, torchapi.ThreadClock) and cpu.seconds(lambda: sum(range(100000))) > 0
    assert cpu.seconds(lambda: time.sleep(0.2)) < 0.1  # the thread's work, not the time it waited
    assert isinstance(torchapi.clock("cpu", waits=True), torchapi.WallClock)  # a collective waits on other ranks


@pytest.mark.children
@pytest.mark.parametrize("link, ok, words", [
    ((GEN4, 16, GEN4, 16), True, "PCIe link 16.0 GT/s (Gen4) x16 at its maximum"),
    ((GEN3, 16, GEN4, 16), False, "8.0 GT/s (Gen3) x16 on a 16.0 GT/s (Gen4) x16 link (a lower generation;"),
    ((GEN4, 4, GEN4, 16), False, "16.0 GT/s (Gen4) x4 on a 16.0 GT/s (Gen4) x16 link (fewer lanes;"),
    (("2.5 GT/s PCIe", 8, GEN4, 16), False, "(a lower generation and fewer lanes;"),
])
def test_link_verdict_compares_speed_and_width_with_the_maximum(tmp_path, link, ok, words):
    from conftest import make_host
    from rocmcheck.host import hostgpu

    root = make_host(tmp_path, nvidia=1, link=link)
    got, message = probe_module("pcie").link_verdict(hostgpu.pci_device("03:00.0", root))
    assert got is ok and words in message


@pytest.mark.children
def test_missing_link_files_skip_with_the_reason(fake_host):
    root = fake_host(amd=1)
    (root / "sys/bus/pci/devices/0000:03:00.0/current_link_speed").unlink()
    ctx = rocmcheck.ProbeContext(device="cpu", device_facts=FACTS)
    with pytest.raises(rocmcheck.Skip, match=r"the PCIe link of 0000:03:00.0 cannot be read \(current None x16"):
        probe_module("pcie").check_link(ctx, 0)
    with pytest.raises(rocmcheck.Skip, match="no GPU function at 0000:04:00.0"):
        facts = {"devices": [{"index": 0, "pci_address": "0000:04:00.0"}]}
        probe_module("pcie").check_link(rocmcheck.ProbeContext(device_facts=facts), 0)
    with pytest.raises(rocmcheck.Skip, match="PCI address of device 1 is unknown"):
        probe_module("pcie").check_link(ctx, 1)


def test_a_gen3_link_on_a_gen4_slot_warns_through_the_runner(rocm_run, tmp_path, fake_host):
    """In the child, the probe's link check is driven with device facts naming the fake host's GPU."""
    fake_host(amd=1, link=(GEN3, 16, GEN4, 16))
    (tmp_path / "probes").mkdir()
    (tmp_path / "probes" / "pcie_facts_probe.py").write_text(textwrap.dedent(f'''
        import sys
        import rocmcheck

        @rocmcheck.probe("pcie-facts", title="t", targets="t")
        def pcie_facts(ctx):
            ctx.device_facts = {FACTS!r}
            sys.modules["rocmcheck.probes.pcie"].check_link(ctx, 0)
    '''))
    (v,) = rocm_run(probe="pcie-facts", probes_path=[str(tmp_path / "probes")])
    assert v["status"] == "warn", v["message"]
    assert v["message"].startswith("PCIe link degraded: 8.0 GT/s (Gen3) x16 on a 16.0 GT/s (Gen4) x16 link")
    m = v["measurements"]
    assert (m["pci_address"], m["link_speed"], m["max_link_width"]) == ("0000:03:00.0", GEN3, 16)
