"""The host's GPUs, read from fixture trees that stand in for `/sys`, `/dev` and `/proc`, held
against what torch reports: never GO on a GPU host whose torch cannot use its GPU."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import make_host
from rocmcheck.cli import main
from rocmcheck.host import hostgpu

CPU_TORCH = {"torch": "2.13.0+cpu", "hip": None, "cuda": None, "device_count": 0}
ROCM_TORCH = {"torch": "2.13.0+rocm6.4", "hip": "6.4.43482", "cuda": None, "device_count": 0}
CUDA_TORCH = {"torch": "2.13.0+cu128", "hip": None, "cuda": "12.8", "device_count": 0}
ROOT_ID = (0, [])


def problem_of(host, facts, expect_gpus=None):
    found = hostgpu.diagnose(host, facts, expect_gpus)
    return found and found.message
USER_ID = (1000, [1000])  # not root, not in the group that owns the nodes


def test_inventory_of_an_amd_host(tmp_path):
    host = hostgpu.read(make_host(tmp_path, amd=2), ROOT_ID, environ={})
    assert host.gpus("amd") == 2 and host.gpus("nvidia") == 0 and host.vendors == ["amd"]
    assert host.kfd_gfx_targets == [110000, 110000]  # the CPU node (0) is not a GPU
    assert host.dev_kfd.readable_writable and len(host.render_nodes) == 2
    gpu = host.pci[0]
    assert (gpu.address, gpu.vendor, gpu.driver, gpu.link_width, gpu.max_link_speed) == \
        ("0000:03:00.0", "amd", "amdgpu", 16, "16.0 GT/s PCIe")
    assert hostgpu.pci_device("03:00.0", tmp_path) == gpu


def test_inventory_of_an_nvidia_host(tmp_path):
    host = hostgpu.read(make_host(tmp_path, nvidia=1), ROOT_ID, environ={"CUDA_VISIBLE_DEVICES": "0"})
    assert host.gpus("nvidia") == 1 and host.vendors == ["nvidia"]
    assert host.nvidia_driver == "550.54.15" and host.nvidia_proc_gpus == ["0000:03:00.0"]
    assert host.visible_devices == {"CUDA_VISIBLE_DEVICES": "0"}
    assert json.loads(json.dumps(host.to_dict()))["gpus"] == {"amd": 0, "nvidia": 1}


def test_a_host_without_gpus_and_an_unreadable_tree_are_empty(tmp_path):
    assert hostgpu.read(make_host(tmp_path), ROOT_ID, environ={}).vendors == []
    assert hostgpu.read(tmp_path / "does-not-exist", ROOT_ID, environ={}).vendors == []


def test_a_gpu_passed_to_a_vm_or_without_driver_is_not_this_hosts(tmp_path):
    host = hostgpu.read(make_host(tmp_path / "a", amd=1, driver="vfio-pci"), ROOT_ID, environ={})
    assert host.pci[0].driver == "vfio-pci" and not host.pci[0].usable_here
    nvidia = hostgpu.read(make_host(tmp_path / "b", nvidia=1, driver="vfio-pci"), ROOT_ID, environ={})
    assert nvidia.pci[0].usable_here is False


@pytest.mark.parametrize("amd, nvidia, build, args", [
    (1, 0, "rocm", ("torch", "--index-url", hostgpu.ROCM_INDEX)),
    (0, 2, "cuda", ("torch",)),
    (1, 1, "cuda", ("torch",)),
    (0, 0, "cpu", ("torch==2.13.0", "--index-url", "https://download.pytorch.org/whl/cpu")),  # not GBs of CUDA
])
def test_torch_choice_fits_the_host(tmp_path, amd, nvidia, build, args):
    host = hostgpu.read(make_host(tmp_path, amd=amd, nvidia=nvidia), ROOT_ID, environ={})
    choice = hostgpu.torch_choice(host, no_gpu_requirement="torch==2.13.0", platform="linux")
    assert (choice.build, choice.pip_args) == (build, args)


def test_without_a_gpu_only_pytorchs_cpu_index_is_called_the_cpu_build(tmp_path):
    """Issue 31: `make gate` said "PyTorch's CPU build" while installing torch==2.13.0 from pip's
    configured index, which on PyPI for Linux is the CUDA wheel (GBs)."""
    host = hostgpu.read(make_host(tmp_path), ROOT_ID, environ={})
    configured = hostgpu.torch_choice(host, no_gpu_requirement="torch==2.13.0", no_gpu_index="")
    assert configured.pip_args == ("torch==2.13.0",)
    assert "CPU build" not in configured.reason and "torch==2.13.0 from pip's configured index" in configured.reason
    assert hostgpu.CPU_INDEX in configured.reason  # where the CPU-only wheels are
    other = hostgpu.torch_choice(host, no_gpu_index="https://example.invalid/whl")
    assert other.reason == "this host has no GPU: torch from https://example.invalid/whl"
    assert hostgpu.torch_choice(host).reason == "this host has no GPU: PyTorch's CPU build"


def test_torch_choice_overrides_always_win(tmp_path, monkeypatch):
    host = hostgpu.read(make_host(tmp_path, amd=1), ROOT_ID, environ={})
    assert hostgpu.torch_choice(host, requirement="torch==2.9.1").pip_args[0] == "torch==2.9.1"
    assert hostgpu.torch_choice(host, index="https://example.invalid/whl").pip_args == \
        ("torch", "--index-url", "https://example.invalid/whl")
    monkeypatch.setenv(hostgpu.TORCH_INDEX_ENV, "https://example.invalid/env")
    assert hostgpu.torch_choice(host).pip_args[-1] == "https://example.invalid/env"
    nvidia = hostgpu.read(make_host(tmp_path / "n", nvidia=1), ROOT_ID, environ={})
    monkeypatch.delenv(hostgpu.TORCH_INDEX_ENV)
    assert hostgpu.torch_choice(nvidia, platform="win32").pip_args[1:] == ("--index-url", hostgpu.CUDA_WINDOWS_INDEX)


def test_wrong_builds_are_named_with_the_build_to_install(tmp_path):
    amd = hostgpu.read(make_host(tmp_path / "a", amd=1), ROOT_ID, environ={})
    for facts in (CPU_TORCH, CUDA_TORCH):
        problem = problem_of(amd, facts)
        assert "1 AMD GPU" in problem and "install the ROCm build" in problem and hostgpu.ROCM_INDEX in problem
    nvidia = hostgpu.read(make_host(tmp_path / "n", nvidia=2), ROOT_ID, environ={})
    for facts in (CPU_TORCH, ROCM_TORCH):
        problem = problem_of(nvidia, facts)
        assert "2 NVIDIA GPUs" in problem and "install the CUDA build: python -m pip install torch" in problem


def test_right_build_or_no_gpu_is_no_problem(tmp_path):
    amd = hostgpu.read(make_host(tmp_path / "a", amd=1), ROOT_ID, environ={})
    assert problem_of(amd, {**ROCM_TORCH, "device_count": 1}) is None
    bare = hostgpu.read(make_host(tmp_path / "b"), ROOT_ID, environ={})
    assert problem_of(bare, CPU_TORCH) is None
    assert "could not be read: timed out" in problem_of(amd, {"error": "timed out"})


@pytest.mark.parametrize("build, identity, environ, hint", [
    ({"dev_nodes": False}, ROOT_ID, {}, "/dev/kfd is missing (a container needs --device=/dev/kfd"),
    ({"node_mode": 0o660}, USER_ID, {}, "add the user to the 'render' group"),
    ({}, ROOT_ID, {"HIP_VISIBLE_DEVICES": "-1"}, "HIP_VISIBLE_DEVICES='-1' is set and may hide every GPU"),
])
def test_right_build_that_sees_nothing_says_what_the_host_suggests(tmp_path, build, identity, environ, hint):
    host = hostgpu.read(make_host(tmp_path, amd=1, **build), identity, environ=environ)
    problem = problem_of(host, ROCM_TORCH)
    assert "torch 2.13.0+rocm6.4 is a ROCm build, but it sees no GPU" in problem and hint in problem


def test_a_user_outside_the_video_group_on_nvidia(tmp_path):
    host = hostgpu.read(make_host(tmp_path, nvidia=1, node_mode=0o660), USER_ID, environ={})
    assert "/dev/nvidia* nodes are not readable and writable" in problem_of(host, CUDA_TORCH)
    assert hostgpu.read(make_host(tmp_path / "o", nvidia=1, node_mode=0o666), USER_ID, environ={}).nvidia_nodes[0] \
        .readable_writable


@pytest.mark.children
def test_module_prints_the_pip_arguments_for_make(tmp_path):
    env = {"ROCMCHECK_HOST_ROOT": str(make_host(tmp_path, amd=1)), "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-m", "rocmcheck.host.hostgpu", "--no-gpu-requirement", "torch==2.13.0"],
                         capture_output=True, text=True, env=env, check=True)
    assert run.stdout.split() == ["torch", "--index-url", hostgpu.ROCM_INDEX]
    assert "installing torch, because this host has 1 AMD GPU: PyTorch's ROCm build" in run.stderr
    run = subprocess.run([sys.executable, "-m", "rocmcheck.host.hostgpu", "--requirement", "torch==2.9.1", "--index",
                          "https://example.invalid/rocm"], capture_output=True, text=True, env=env, check=True)
    assert run.stdout.split() == ["torch==2.9.1", "--index-url", "https://example.invalid/rocm"]


# --- through the real runner: the gate on a fake GPU host with this CPU build of torch ----------


@pytest.mark.children
def test_gate_on_an_amd_host_with_a_cpu_torch_is_no_go_and_names_the_rocm_build(fake_host, tmp_path, capsys):
    fake_host(amd=1)
    assert main(["gate", "--out-dir", str(tmp_path), "--json", str(tmp_path / "g.json")]) == 1
    out = capsys.readouterr()
    assert "NO-GO" in out.out and "FAIL gpu-visible" in out.out
    assert f"install the ROCm build: python -m pip install torch --index-url {hostgpu.ROCM_INDEX}" in out.out
    verdicts = {v["variant"]: v for v in json.loads((tmp_path / "g.json").read_text())["verdicts"]}
    assert verdicts["gpu-visible"]["status"] == "fail"
    others = [v for k, v in verdicts.items() if k != "gpu-visible"]
    assert others and all(v["status"] == "skip" and "torch cannot use this host's GPU" in v["message"] for v in others)


@pytest.mark.children
def test_explicit_cpu_on_a_gpu_host_still_runs_the_self_test(fake_host, tmp_path, capsys):
    fake_host(amd=1)
    assert main(["gate", "--device", "cpu", "--probe", "gpu-visible", "--probe", "device-smoke",
                 "--out-dir", str(tmp_path), "--json", str(tmp_path / "g.json")]) == 0
    data = json.loads((tmp_path / "g.json").read_text())
    verdicts = {v["variant"]: v for v in data["verdicts"]}
    assert verdicts["device-smoke"]["status"] == "pass"
    assert verdicts["gpu-visible"]["status"] == "skip" and "left out on purpose" in verdicts["gpu-visible"]["message"]
    assert any("left out on purpose" in n for n in data["run"]["notes"])
    assert "\nGO" in capsys.readouterr().out


@pytest.mark.children
def test_nvidia_host_with_a_cpu_torch_is_no_go_even_when_the_gate_is_narrowed(fake_host, tmp_path, capsys):
    fake_host(nvidia=1)
    assert main(["gate", "--require", "device-smoke", "--out-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL gpu-visible" in out and "install the CUDA build: python -m pip install torch" in out


def test_gpu_visible_passes_on_a_host_without_gpu(rocm_run):
    (verdict,) = rocm_run(probe="gpu-visible", device="auto")
    assert verdict["status"] == "pass" and verdict["measurements"]["host_amd_gpus"] == 0


@pytest.mark.children
def test_env_reports_the_host_inventory(fake_host, capsys):
    fake_host(amd=1)
    assert main(["env", "--json"]) == 0
    fp = json.loads(capsys.readouterr().out)
    assert fp["host"]["gpus"]["gpus"] == {"amd": 1, "nvidia": 0}
    assert fp["host"]["gpus"]["pci"][0]["address"] == "0000:03:00.0"
