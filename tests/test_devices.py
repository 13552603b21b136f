"""Which devices a run tests (`rocmcheck.engine.devices`): `--device` against made-up device facts and
host inventories, no child and no torch."""
from __future__ import annotations

import pytest

from rocmcheck.engine import devices
from rocmcheck.errors import UsageError
from rocmcheck.host.hostgpu import HostGpus
from rocmcheck.model import DeviceInfo

NO_GPU = HostGpus()
TWO_AMD = HostGpus(kfd_gfx_targets=[110000, 110000])
CPU_TORCH = {"torch": "2.13.0+cpu", "device_count": 0, "backend": "cpu"}
ROCM_TORCH = {"torch": "2.13.0+rocm6.4", "hip": "6.4", "device_count": 2, "backend": "rocm",
              "devices": [{"arch": "gfx1100", "name": "Radeon RX 7900 XTX", "pci_address": "0000:03:00.0",
                           "uuid": "GPU-0"}, {"arch": "gfx1100"}]}


def test_auto_on_a_host_without_gpu_runs_on_the_cpu_and_says_so():
    chosen = devices.resolve("auto", CPU_TORCH, NO_GPU)
    assert chosen.devices == [DeviceInfo("cpu", "cpu", 0, None)] and chosen.gpu_problem is None
    assert chosen.notes == ["no GPU on this host: running on the CPU; GPU-only probes are skipped"]


def test_a_host_gpu_torch_cannot_see_is_a_gpu_problem_never_a_cpu_self_test():
    chosen = devices.resolve("auto", CPU_TORCH, HostGpus(kfd_gfx_targets=[110000]))
    assert chosen.devices[0].name == "cpu"  # nothing else can run, but the run is a NO-GO
    assert chosen.gpu_problem.startswith("this host has 1 AMD GPU but torch 2.13.0+cpu is a CPU build")
    assert chosen.notes == [f"NO-GO: {chosen.gpu_problem}"]


def test_device_cpu_leaves_the_hosts_gpus_out_on_purpose():
    chosen = devices.resolve("cpu", CPU_TORCH, HostGpus(kfd_gfx_targets=[110000]))
    assert chosen.devices[0].name == "cpu" and chosen.gpu_problem is None
    assert chosen.notes[0].startswith("the host's GPUs are left out on purpose (--device cpu)")


def test_a_list_of_gpus_is_one_device_each_with_its_label():
    chosen = devices.resolve("cuda:0,1", ROCM_TORCH, TWO_AMD)
    assert chosen.devices == [DeviceInfo("cuda:0", "rocm", 2, "gfx1100"), DeviceInfo("cuda:1", "rocm", 2, "gfx1100")]
    assert chosen.notes == [] and chosen.gpu_problem is None
    assert devices.label(chosen.devices[0], ROCM_TORCH) == {
        "name": "cuda:0", "index": 0, "arch": "gfx1100", "model": "Radeon RX 7900 XTX",
        "pci_address": "0000:03:00.0", "uuid": "GPU-0"}
    assert devices.label(chosen.devices[1], ROCM_TORCH)["pci_address"] is None  # the facts child did not say
    assert devices.label(DeviceInfo(), ROCM_TORCH) == {"name": "cpu"}


def test_simulated_gpus_take_the_type_torch_reports():
    chosen = devices.resolve("all", {**ROCM_TORCH, "device_type": "simgpu"}, TWO_AMD)
    assert [d.name for d in chosen.devices] == ["simgpu:0", "simgpu:1"]


def test_a_gpu_torch_does_not_see_is_a_usage_error():
    with pytest.raises(UsageError, match=r"^device cuda:3 is not present \(2 GPUs visible\)$"):
        devices.resolve("cuda:0,3", ROCM_TORCH, TWO_AMD)


def test_inside_a_rank_auto_is_the_ranks_own_gpu(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert [d.name for d in devices.resolve("auto", ROCM_TORCH, TWO_AMD).devices] == ["cuda:1"]
    assert [d.name for d in devices.resolve("all", ROCM_TORCH, TWO_AMD).devices] == ["cuda:0", "cuda:1"]
    monkeypatch.setenv("LOCAL_RANK", "x")
    with pytest.raises(UsageError, match="^LOCAL_RANK must be a whole number, not 'x'$"):
        devices.resolve("auto", ROCM_TORCH, TWO_AMD)


@pytest.mark.parametrize("under_test, adopter", [
    (["cuda:0"], "cuda:0"), (["cuda:0", "cuda:1"], "cuda:0"), (["simgpu:0"], "simgpu:0"),
    (["cuda:1"], None),  # the facts' process keeps a context on GPU 0: not for a whole run that tests GPU 1
    (["cpu"], None),  # no runtime init to keep, and CPU probes never share a process that touched a GPU
])
def test_the_first_gpu_adopts_the_device_facts_worker(under_test, adopter):
    assert devices.facts_worker_device([DeviceInfo(name) for name in under_test]) == adopter
