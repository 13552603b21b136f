"""CUDA-build facts, proven on a real CUDA build of torch without a GPU: `make cuda-build-test`.

PyPI's Linux torch is a CUDA build. It runs here on the CPU, and what it says about its own build
(CUDA, cuDNN and NCCL versions, the archs it was compiled for, which allocator variable it reads,
the BLAS and SDPA switches) needs no GPU. Each fact rocmcheck reports or relies on is held against
torch's own answer. CI's torch is a CPU build, so this module skips there.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import probe_module

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.version.cuda, reason="needs a CUDA build of torch: make cuda-build-test")


def test_build_facts_are_torchs_own():
    from rocmcheck.host import fingerprint

    facts = fingerprint.device_facts()
    assert facts["cuda"] == torch.version.cuda and facts["backend"] == "cpu" and facts["device_count"] == 0
    major, minor, patch = (torch.backends.cudnn.version() // 10000, torch.backends.cudnn.version() // 100 % 100,
                           torch.backends.cudnn.version() % 100)
    assert facts["cudnn"] == f"{major}.{minor}.{patch}"  # 91900 is cuDNN 9.19.0
    assert facts["nccl"] == ".".join(map(str, torch.cuda.nccl.version()))
    # without a GPU torch.cuda.get_arch_list() is empty; the wheel was still compiled for these
    assert facts["arch_list"] == torch._C._cuda_getArchFlags().split() and any(a.startswith("sm_") for a in
                                                                              facts["arch_list"])


def test_env_names_a_cuda_build_without_a_gpu(tmp_path):
    out = subprocess.run([sys.executable, "-m", "rocmcheck", "env"], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"CUDA {torch.version.cuda} build, no GPU visible" in out.stdout


ALLOC_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")


@pytest.mark.parametrize("name", ALLOC_VARS)
def test_config_lint_says_which_allocator_variable_this_build_ignores(name):
    """config-lint warns that a variable is ignored exactly when this build's own parser ignores it
    (backend:cudaMallocAsync set through that variable alone, read back without a GPU)."""
    config = probe_module("config")

    env = {k: v for k, v in os.environ.items() if k not in ALLOC_VARS}
    read = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.get_allocator_backend())"],
                          capture_output=True, text=True, timeout=120, check=True,
                          env={**env, name: "backend:cudaMallocAsync"}).stdout.strip()
    _, problems = config.check_alloc_conf({"env": {name: "backend:cudaMallocAsync"}, "torch": torch.__version__,
                                           "backend": "cuda"})
    said_ignored = any(name in p and "ignored" in p for p in problems)
    assert said_ignored == (read == "native"), (read, problems)


def test_blas_library_is_chosen_and_read_back():
    from rocmcheck import torchapi

    preferred = torchapi.preferred_blas_library()
    before = preferred()
    try:
        assert preferred("cublaslt").name.lower() == "cublaslt" and preferred().name.lower() == "cublaslt"
    finally:
        preferred(before)


def test_sdpa_backends_are_forced_one_at_a_time():
    from rocmcheck import torchapi

    flags = {"MATH": "math_sdp_enabled", "FLASH_ATTENTION": "flash_sdp_enabled",
             "EFFICIENT_ATTENTION": "mem_efficient_sdp_enabled", "CUDNN_ATTENTION": "cudnn_sdp_enabled"}
    for backend, flag in flags.items():
        with torchapi.sdpa_kernel([backend]):
            assert {f for f in flags.values() if getattr(torch.backends.cuda, f)()} == {flag}
    assert all(getattr(torch.backends.cuda, f)() for f in flags.values() if f != "cudnn_sdp_enabled")
