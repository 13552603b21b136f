"""Device facts as a real GPU host gives them, fed to the fingerprint's code: torch's device
properties on ROCm and CUDA, `_show_config()` of a ROCm build, the driver from /proc."""
from __future__ import annotations

import json
from types import SimpleNamespace

from rocmcheck import fingerprint
from rocmcheck.cli import main

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


def test_nvidia_driver_comes_from_proc_without_nvidia_smi(fake_host, capsys):
    fake_host(nvidia=1)
    assert main(["env", "--json"]) == 0
    fp = json.loads(capsys.readouterr().out)
    assert fp["device_facts"]["nvidia_driver"] == "550.54.15"
    assert fp["host"]["gpus"]["nvidia_driver"] == "550.54.15"
