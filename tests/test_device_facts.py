"""Device facts as a real GPU host gives them, fed to the fingerprint's code: torch's device
properties on ROCm and CUDA, `_show_config()` of a ROCm build, the driver from /proc."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from conftest import make_host
from rocmcheck.cli import main
from rocmcheck.cli.env import inventory_rows
from rocmcheck.host import fingerprint, hostgpu

# the runtime lines of torch._C._show_config() on a ROCm 6.4 build (the rest of the text elided)
ROCM_SHOW_CONFIG = """PyTorch built with:
  - GCC 13.3
  - HIP Runtime 6.4.43482
  - MIOpen 3.4.0
  - Magma 2.7.2
  - Build settings: BLAS_INFO=open, USE_ROCM=ON, USE_ROCM_KERNEL_ASSERT=OFF,
"""


def fake_torch(hip=None, cuda=None, **props):
    base = dict(name="GPU", major=9, minor=0, total_memory=64 << 30, multi_processor_count=104,
                gcnArchName="gfx942:sramecc+:xnack-", pci_bus_id=0x65, pci_device_id=0, pci_domain_id=0,
                uuid="58d2c6b1-6cd2-4a8b-8f0e-000000000001")
    base.update(props)
    return SimpleNamespace(version=SimpleNamespace(hip=hip, cuda=cuda),
                           cuda=SimpleNamespace(get_device_properties=lambda i: SimpleNamespace(**base)))


def test_rocm_device_keeps_its_gcn_arch_and_pci_address():
    dev = fingerprint._device(fake_torch(hip="6.4.43482"), 0)
    assert (dev["arch"], dev["gcn_arch_name"], dev["pci_address"]) == \
        ("gfx942", "gfx942:sramecc+:xnack-", "0000:65:00.0")
    assert dev["uuid"].startswith("58d2c6b1")


def test_cuda_device_has_no_gcn_arch_name():
    # torch aliases gcnArchName to the product name on CUDA: it is not an arch there
    dev = fingerprint._device(fake_torch(cuda="12.8", major=9, minor=0, gcnArchName="NVIDIA H100 80GB HBM3"), 0)
    assert dev["arch"] == "sm_90" and dev["gcn_arch_name"] is None


def test_a_torch_without_pci_properties_gives_none():
    torch = fake_torch(cuda="12.1")
    props = torch.cuda.get_device_properties(0)
    del props.pci_bus_id
    torch.cuda.get_device_properties = lambda i: props
    assert fingerprint._device(torch, 0)["pci_address"] is None


def test_runtime_versions_from_show_config():
    assert fingerprint.show_config_versions(ROCM_SHOW_CONFIG) == \
        {"hip_runtime": "6.4.43482", "miopen_runtime": "3.4.0", "hipblaslt": None}


@pytest.mark.children
def test_nvidia_driver_comes_from_proc_without_nvidia_smi(fake_host, capsys):
    fake_host(nvidia=1)
    assert main(["env", "--json"]) == 0
    fp = json.loads(capsys.readouterr().out)
    assert fp["device_facts"]["nvidia_driver"] == "550.54.15"
    assert fp["host"]["gpus"]["nvidia_driver"] == "550.54.15"


def test_dnn_versions_read_as_releases():
    """torch.backends.cudnn.version() is a number: cuDNN 9.24.0 showed as 92400 in `rocmcheck env`."""
    assert [fingerprint.dnn_version(n, rocm=False) for n in (92400, 91000, 8907, 7605)] == \
        ["9.24.0", "9.10.0", "8.9.7", "7.6.5"]
    assert fingerprint.dnn_version(3004000, rocm=True) == "3.4.0"  # MIOpen: MAJOR*1000000 + MINOR*1000 + PATCH
    assert fingerprint.dnn_version(None, rocm=False) is None


def test_a_cuda_build_on_a_host_without_gpu_says_so():
    fp = {"device": {"name": "cpu"}, "host": {"system": "Linux"},
          "device_facts": {"backend": "cpu", "cuda": "13.0", "torch": "2.14.1+cu130", "device_count": 0}}
    assert fingerprint.summary(fp) == "cpu / CUDA 13.0 build, no GPU visible / torch 2.14.1+cu130 / Linux"
    fp["device_facts"] = {"backend": "cpu", "torch": "2.13.0+cpu"}
    assert fingerprint.summary(fp) == "cpu / cpu / torch 2.13.0+cpu / Linux"


@pytest.mark.children
def test_env_text_shows_the_hosts_gpu_inventory(tmp_path):
    """The README promises `rocmcheck env` shows the host's inventory: it showed torch's view only."""
    gpus = hostgpu.read(make_host(tmp_path, amd=2), (0, []), environ={"HIP_VISIBLE_DEVICES": "1"}).to_dict()
    rows = dict((k, str(v)) for k, v in inventory_rows(gpus))
    assert rows["host GPUs"] == "2 AMD"
    assert rows["PCI 0000:03:00.0"] == "amd 0x744c, driver amdgpu, link 16.0 GT/s PCIe x16 (max 16.0 GT/s PCIe x16)"
    assert "/dev/kfd (rw)" in rows["device nodes"] and "renderD128 (rw)" in rows["device nodes"]
    assert rows["HIP_VISIBLE_DEVICES"] == "1"
    assert inventory_rows(hostgpu.read(tmp_path / "none", (0, []), environ={}).to_dict()) == \
        [["host GPUs", "none (PCI, KFD topology, /dev, /proc/driver/nvidia, WSL)"]]
