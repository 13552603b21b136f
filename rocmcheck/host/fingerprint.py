"""The environment fingerprint: what a bug report and a cross-machine matrix need.

Host facts (OS, kernel, Python, allow-listed environment, package versions) are read
in the parent without importing torch. Device facts come from a child task
(`device_facts`), so the parent never initialises the GPU runtime; there we reuse
`torch.utils.collect_env` for the OS, driver and runtime versions. Every field is
guarded: a field that cannot be read is None, never an exception.
"""
from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from .. import torchapi
from ..redact import gpu_env_name
from . import hostgpu

RELATED_PACKAGES = ("torch", "numpy", "transformers", "peft", "accelerate", "torchao", "torchtune",
                    "bitsandbytes", "flash-attn", "flash_attn", "triton", "pytorch-triton-rocm", "deepspeed",
                    "xformers", "diffusers", "lightning", "pytorch-lightning")
CMD_TIMEOUT_S = 5.0


def guarded(fn: Callable[[], Any]) -> Any:
    """Run one fact-gathering step; a failure yields None."""
    try:
        return fn()
    except Exception:
        return None


def run_cmd(command: str) -> Tuple[int, str, str]:
    """collect_env-compatible runner with a time limit (collect_env's own has none)."""
    try:
        proc = subprocess.run(command, shell=True, capture_output=True, timeout=CMD_TIMEOUT_S, text=True)
        return proc.returncode, proc.stdout.strip(), proc.stderr.strip()
    except (subprocess.TimeoutExpired, OSError) as exc:
        return 127, "", str(exc)


def env_vars(environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """Allow-listed GPU-relevant variables, minus any whose name looks secret."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in sorted(environ.items()) if gpu_env_name(k)}


def package_versions() -> Dict[str, str]:
    found = {}
    for name in RELATED_PACKAGES:
        version = guarded(lambda: metadata.version(name))
        if version:
            found[name] = version
    return found


def is_wsl() -> bool:
    release = platform.release().lower()
    return "microsoft" in release or "wsl" in release or Path("/proc/sys/fs/binfmt_misc/WSLInterop").exists()


GPU_CMDLINE_RE = re.compile(r"^(iommu|amd_iommu|intel_iommu|amdgpu\.|radeon\.|pci=|pcie_|nvidia)")


def kernel_cmdline() -> Optional[List[str]]:
    """The kernel command-line options that matter to GPUs (iommu=pt, amdgpu.*), nothing else."""
    text = guarded(lambda: Path("/proc/cmdline").read_text())
    return None if text is None else [t for t in text.split() if GPU_CMDLINE_RE.match(t)]


def kfd_gfx_targets() -> List[int]:
    """`gfx_target_version` of each GPU node in the KFD topology (110501 = gfx1151)."""
    return hostgpu.read_kfd_targets(hostgpu.host_root())


# The CPU's vector and matrix instruction sets, as /proc/cpuinfo's `flags` line names them
# (arch/x86/include/asm/cpufeatures.h): what decides which CPU kernel torch and oneDNN pick, and so
# what a known issue of one CPU kernel is scoped by (see known_issues, `cpu_flags`).
CPU_FLAG_PREFIXES = ("avx", "amx", "fma", "f16c")


def cpu_flags(root: Optional[Path] = None) -> Optional[List[str]]:
    """The CPU's SIMD and AMX flags from `<host root>/proc/cpuinfo` (its first `flags` line);
    None where there is no such file (Windows, macOS) or no x86 `flags` line."""
    text = guarded(lambda: ((root or hostgpu.host_root()) / "proc/cpuinfo").read_text(errors="replace"))
    line = next((ln for ln in (text or "").splitlines() if ln.split(":", 1)[0].strip() == "flags"), None)
    if line is None:
        return None
    return sorted({f for f in line.split(":", 1)[1].split() if f.startswith(CPU_FLAG_PREFIXES)})


MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))


def host_id(files: Tuple[Path, ...] = MACHINE_ID_FILES) -> Optional[str]:
    """An opaque, stable name for this host: the machine ID (machine-id(5)) hashed with a key of
    our own, as systemd's sd_id128_get_machine_app_specific(3) advises, so reports tell machines
    apart (`machine_identity`) without carrying the ID itself or the host name. None where no ID
    is readable (some containers, Windows)."""
    for path in files:
        try:
            raw = path.read_text().strip()
        except OSError:
            continue
        if re.fullmatch(r"[0-9a-f]{32}", raw):
            return hashlib.sha256(b"rocmcheck host id\0" + raw.encode()).hexdigest()[:16]
    return None


def host_facts() -> Dict[str, Any]:
    """Facts readable without torch or a GPU."""
    return {
        "host_id": host_id(),
        "os": guarded(platform.platform),
        "system": platform.system(),
        "kernel": guarded(platform.release),
        "wsl": guarded(is_wsl),
        "machine": platform.machine(),
        "cpu_flags": cpu_flags(),
        "python": sys.version.split()[0],
        "python_impl": platform.python_implementation(),
        "kernel_cmdline": kernel_cmdline(),
        "gpus": guarded(lambda: hostgpu.read().to_dict()),  # what the host has, whatever torch sees
        "env": env_vars(),
        "packages": package_versions(),
    }


def bare_arch(gcn_arch: Optional[str]) -> Optional[str]:
    """'gfx942:sramecc+:xnack-' -> 'gfx942'."""
    return gcn_arch.split(":")[0] if gcn_arch else None


def pci_address(props: Any) -> Optional[str]:
    """'0000:03:00.0' from torch's device properties (absent on older torch)."""
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return None
    return f"{getattr(props, 'pci_domain_id', 0) or 0:04x}:{bus:02x}:{getattr(props, 'pci_device_id', 0) or 0:02x}.0"


def _device(torch: Any, index: int, kind: str = "cuda") -> Dict[str, Any]:
    props = getattr(torch, kind).get_device_properties(index)  # torch.cuda, or torch.simgpu
    rocm = bool(torch.version.hip) and kind == "cuda"
    gcn = getattr(props, "gcnArchName", None) if rocm else None  # on CUDA torch aliases it to the product name
    arch = bare_arch(gcn) if rocm else (f"sm_{props.major}{props.minor}" if kind == "cuda" else kind)
    return {
        "index": index, "name": props.name, "arch": arch,
        "gcn_arch_name": gcn, "compute_capability": f"{props.major}.{props.minor}",
        "memory_bytes": int(props.total_memory),
        "multiprocessors": getattr(props, "multi_processor_count", None),
        "pci_address": guarded(lambda: pci_address(props)),
        "uuid": guarded(lambda: str(props.uuid) if getattr(props, "uuid", None) else None),
    }


def show_config_versions(config: str) -> Dict[str, Optional[str]]:
    """Runtime library versions from `torch._C._show_config()` (what collect_env reads for HIP and
    MIOpen), without collect_env's `get_env_info`, which runs pip and conda with no time limit."""
    found: Dict[str, Optional[str]] = {}
    for key, label in (("hip_runtime", "HIP Runtime"), ("miopen_runtime", "MIOpen"), ("hipblaslt", "hipBLASLt")):
        line = next((ln for ln in config.splitlines() if ln.strip().startswith(f"- {label}")), None)
        found[key] = line.rsplit(None, 1)[-1] if line else None
    return found


def dnn_version(number: Any, rocm: bool) -> Any:
    """`torch.backends.cudnn.version()` as text: MIOpen's MAJOR*1000000 + MINOR*1000 + PATCH on
    ROCm (3004000 = 3.4.0), cuDNN 9's MAJOR*10000 + MINOR*100 + PATCH (92400 = 9.24.0), cuDNN 8's
    and older MAJOR*1000 + MINOR*100 + PATCH (8907 = 8.9.7)."""
    if not isinstance(number, int) or isinstance(number, bool) or number <= 0:
        return number
    major, rest = divmod(number, 1_000_000 if rocm else 10_000 if number >= 90_000 else 1_000)
    minor, patch = divmod(rest, 1_000 if rocm else 100)
    return f"{major}.{minor}.{patch}"


def _library_facts(torch: Any) -> Dict[str, Any]:
    """Driver and library versions: each one bounded in time and guarded."""
    from torch.utils import collect_env

    host = hostgpu.read()
    nccl = guarded(lambda: torch.cuda.nccl.version())
    facts = {
        "os_collect_env": guarded(lambda: collect_env.get_os(run_cmd)),
        "libc": guarded(collect_env.get_libc_version),
        # /proc/driver/nvidia/version is instant; nvidia-smi (5 s limit) only where it is absent (WSL)
        "nvidia_driver": host.nvidia_driver or (guarded(lambda: collect_env.get_nvidia_driver_version(run_cmd))
                                                if torch.version.cuda else None),
        "amdgpu_driver": host.amdgpu_version,
        "cudnn": dnn_version(guarded(torch.backends.cudnn.version), bool(torch.version.hip)),  # MIOpen's on ROCm
        "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl,  # RCCL's on ROCm builds
    }
    if torch.version.hip:
        facts.update(guarded(lambda: show_config_versions(torch._C._show_config())) or {})
    return facts


def device_facts(task: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Run in a child: torch build, devices and runtime versions. Initialises the GPU."""
    try:
        import torch
    except Exception as exc:
        return {"torch_error": f"{type(exc).__name__}: {exc}", "device_count": 0, "backend": "cpu"}
    hip = getattr(torch.version, "hip", None)
    cuda = getattr(torch.version, "cuda", None)
    facts: Dict[str, Any] = {
        "torch": torch.__version__,
        "hip": hip,
        "rocm": getattr(torch.version, "rocm", None),
        "cuda": cuda,
        "git": getattr(torch.version, "git_version", None),
        "debug": getattr(torch.version, "debug", None),
        "has_int1": hasattr(torch, "int1"),
        # get_arch_list() is [] where no GPU is visible; the build's own flags still say what it was compiled for
        "arch_list": guarded(torch.cuda.get_arch_list) or compiled_arch_list(torch) or [],
    }
    kind = guarded(torchapi.device_type) or "cuda"  # simgpu under --inject simgpu
    count = guarded(lambda: torchapi.device_count(kind)) or 0
    facts["device_count"] = count
    facts["device_type"] = kind
    facts["backend"] = kind if kind == torchapi.SIMULATED else "rocm" if hip else ("cuda" if cuda and count else "cpu")
    facts["devices"] = [guarded(functools.partial(_device, torch, i, kind)) for i in range(count)]
    facts.update(guarded(lambda: _library_facts(torch)) or {})
    return facts


def summary(fingerprint: Dict[str, Any]) -> str:
    """A one-line label for a machine: arch, backend and version, torch, OS."""
    dev = fingerprint.get("device") or {}
    dfacts = fingerprint.get("device_facts") or {}
    host = fingerprint.get("host") or {}
    backend = dfacts.get("backend") or "cpu"
    version = dfacts.get("rocm") or dfacts.get("hip") if backend == "rocm" else dfacts.get("cuda")
    build = f"{backend} {version}" if version else backend
    if backend == "cpu" and version:  # a CUDA build that sees no GPU (backend cpu): not "cpu 13.0"
        build = f"CUDA {version} build, no GPU visible"
    parts = [dev.get("arch") or dev.get("name") or "cpu", build,
             f"torch {dfacts.get('torch', '?')}", host.get("system") or "?"]
    return " / ".join(str(p) for p in parts)


def machine_identity(fingerprint: Dict[str, Any]) -> str:
    """Which machine a report is from, as far as its fingerprint tells (a report names no host):
    its `host_id` (the hashed machine ID), so every run on one host is that host whatever it
    tested (its GPUs, the CPU, simulated GPUs); in reports without one, the UUIDs of the GPUs
    torch saw, one per board, so two nodes of one kind are two machines; without either (a torch
    too old to read them) the machine's label (`summary`), so identical such hosts count as one."""
    found = (fingerprint.get("host") or {}).get("host_id")
    if isinstance(found, str) and found:
        return "host " + found
    devices = (fingerprint.get("device_facts") or {}).get("devices")
    uuids = sorted({str(d["uuid"]) for d in devices if isinstance(d, dict) and d.get("uuid")}) \
        if isinstance(devices, list) else []
    return "GPUs " + " ".join(uuids) if uuids else summary(fingerprint)


def compiled_arch_list(torch: Any) -> Optional[List[str]]:
    """The archs this torch was compiled for, from its build flags: no GPU runtime needed (None if unreadable)."""
    flags = getattr(torch._C, "_cuda_getArchFlags", None)  # compile-time; torch.cuda.get_arch_list() initialises
    found = guarded(flags) if flags else None
    return found.split() if isinstance(found, str) else None


def wheel_facts(task: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Run in a child: torch's version, build and compiled arch list, read without initialising
    the GPU runtime, so it works where HIP aborts at its first call (hipErrorNoBinaryForGpu)."""
    import torch

    hip, cuda = getattr(torch.version, "hip", None), getattr(torch.version, "cuda", None)
    arch_list = compiled_arch_list(torch)
    return {"torch": torch.__version__, "hip": hip, "cuda": cuda, "rocm": getattr(torch.version, "rocm", None),
            "arch_list": arch_list if arch_list is not None else ([] if not (hip or cuda) else None)}
