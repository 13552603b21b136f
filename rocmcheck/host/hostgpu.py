"""What GPUs the host has, read without torch, and which torch build can use them.

A GPU host whose torch cannot see its GPU (a CPU or CUDA wheel on an AMD machine, a
container started without its device nodes, a user outside the `render` group, a
`HIP_VISIBLE_DEVICES` that hides every card) must never pass as a CPU self-test. So the
host's own view comes from files, not from torch: PCI display and accelerator functions
by vendor, the KFD topology (`gfx_target_version` per GPU node), `/dev/kfd` and render
nodes, `/proc/driver/nvidia`, WSL's `/dev/dxg`. `diagnose` compares it with what
torch reported from a child; `torch_choice` names the build to install, for `make gate`,
for the no-torch message and for the NO-GO alike.

Every path is read under a root, `/` unless `ROCMCHECK_HOST_ROOT` names a fixture tree.
Run as `python -m rocmcheck.host.hostgpu` to print the pip arguments for this host's torch.
"""
from __future__ import annotations

import argparse
import os
import re
import stat
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

HOST_ROOT_ENV = "ROCMCHECK_HOST_ROOT"
TORCH_INDEX_ENV = "ROCMCHECK_TORCH_INDEX"  # an index URL that overrides the choice below
# PyTorch's own wheel index for ROCm builds (the ROCm release it was built against is in the name);
# https://pytorch.org/get-started/locally/ lists the current one.
ROCM_INDEX = "https://download.pytorch.org/whl/rocm6.4"
CUDA_WINDOWS_INDEX = "https://download.pytorch.org/whl/cu128"  # pip's default torch on Windows is a CPU build
CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # PyPI's Linux torch brings GBs of CUDA libraries a CPU never uses
VENDORS = {"0x1002": "amd", "0x10de": "nvidia", "0x8086": "intel"}
# PCI base classes of a GPU: 0x03 display (VGA 0x0300, 3D 0x0302, other 0x0380), 0x12 processing accelerator
GPU_CLASSES = ("0x03", "0x12")
USABLE_DRIVERS = {"amd": "amdgpu", "nvidia": "nvidia"}
BUILD_NAMES = {"rocm": "ROCm", "cuda": "CUDA", "cpu": "CPU", "override": "chosen"}
WANTS = {"amd": "rocm", "nvidia": "cuda"}  # the build that computes on each vendor's GPUs
VISIBLE_VARS = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")
GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}  # GT/s per lane -> PCIe generation
# Each lane's rate after line encoding, Mb/s per direction, as the kernel computes a link's bandwidth
# (drivers/pci/pci.h, PCIE_SPEED2MBS_ENC, after PCIe Base Spec 6.0.1 Table 1-1): 8b/10b through
# Gen2, 128b/130b from Gen3, Gen6's FLIT mode counted without encoding loss.
LANE_MBPS = {2.5: 2500 * 8 / 10, 5.0: 5000 * 8 / 10, 8.0: 8000 * 128 / 130, 16.0: 16000 * 128 / 130,
             32.0: 32000 * 128 / 130, 64.0: 64000.0}


def transfer_rate(speed: Optional[str]) -> Optional[float]:
    """16.0 from a link speed file's '16.0 GT/s PCIe'; None for 'Unknown' or an unreadable file."""
    match = re.match(r"\s*([\d.]+)\s*GT/s", speed or "")
    return float(match.group(1)) if match else None


def describe_link(rate: float, width: int) -> str:
    """'16.0 GT/s (Gen4) x16'."""
    gen = GENERATIONS.get(rate)
    return f"{rate:.1f} GT/s{f' (Gen{gen})' if gen else ''} x{width}"


def link_gbps(speed: Optional[str], width: Optional[int]) -> Optional[float]:
    """A link's theoretical rate in GB/s each way, from its speed file's text and its lane count
    (31.5 for '16.0 GT/s PCIe' x16); None when either is unknown."""
    lane = LANE_MBPS.get(transfer_rate(speed) or 0.0)
    return round(lane * width / 8000, 2) if lane and width else None


def host_root() -> Path:
    return Path(os.environ.get(HOST_ROOT_ENV) or "/")


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _int(text: Optional[str]) -> Optional[int]:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class PciGpu:
    """One PCI function of a GPU vendor in a GPU class, with its PCIe link."""

    address: str  # 0000:03:00.0
    vendor: str  # amd, nvidia, intel or the raw id
    device_id: Optional[str]
    pci_class: Optional[str]
    driver: Optional[str]  # amdgpu, nvidia, vfio-pci, or None when no driver is bound
    link_speed: Optional[str] = None  # "16.0 GT/s PCIe"
    link_width: Optional[int] = None
    max_link_speed: Optional[str] = None
    max_link_width: Optional[int] = None

    @property
    def usable_here(self) -> bool:
        """Bound to the vendor's compute driver (not vfio-pci for a VM, not unbound)."""
        return self.driver == USABLE_DRIVERS.get(self.vendor)


@dataclass(frozen=True)
class NodeAccess:
    path: str
    readable_writable: bool


@dataclass
class HostGpus:
    pci: List[PciGpu] = field(default_factory=list)
    kfd_gfx_targets: List[int] = field(default_factory=list)  # 110000 = gfx1100
    amdgpu_version: Optional[str] = None  # the amdgpu/KFD module's version (DKMS builds have one)
    nvidia_driver: Optional[str] = None  # from /proc/driver/nvidia/version
    nvidia_proc_gpus: List[str] = field(default_factory=list)  # bus ids under /proc/driver/nvidia/gpus
    dev_kfd: Optional[NodeAccess] = None
    render_nodes: List[NodeAccess] = field(default_factory=list)
    nvidia_nodes: List[NodeAccess] = field(default_factory=list)  # /dev/nvidia0..N
    wsl_dxg: bool = False
    wsl_vendor: Optional[str] = None  # nvidia when WSL's libcuda is there
    visible_devices: Dict[str, str] = field(default_factory=dict)

    def gpus(self, vendor: str) -> int:
        """How many GPUs of `vendor` this host could compute on (PCI, KFD or WSL)."""
        pci = sum(1 for g in self.pci if g.vendor == vendor and g.usable_here)
        if vendor == "amd":
            pci = max(pci, len(self.kfd_gfx_targets))
        if vendor == "nvidia":
            pci = max(pci, len(self.nvidia_proc_gpus))
        if self.wsl_dxg and self.wsl_vendor == vendor:
            pci = max(pci, 1)
        return pci

    @property
    def vendors(self) -> List[str]:
        return [v for v in ("amd", "nvidia") if self.gpus(v)]

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["gpus"] = {v: self.gpus(v) for v in ("amd", "nvidia")}
        return data


def read_pci(root: Path) -> List[PciGpu]:
    found = []
    for dev in sorted((root / "sys/bus/pci/devices").glob("*")):
        vendor_id, pci_class = _read(dev / "vendor"), _read(dev / "class")
        if vendor_id not in VENDORS or not (pci_class or "").startswith(GPU_CLASSES):
            continue
        driver = dev / "driver"
        found.append(PciGpu(
            address=dev.name, vendor=VENDORS[vendor_id], device_id=_read(dev / "device"), pci_class=pci_class,
            driver=os.path.basename(os.readlink(driver)) if driver.is_symlink() else None,
            link_speed=_read(dev / "current_link_speed"), link_width=_int(_read(dev / "current_link_width")),
            max_link_speed=_read(dev / "max_link_speed"), max_link_width=_int(_read(dev / "max_link_width"))))
    return found


def pci_device(address: str, root: Optional[Path] = None) -> Optional[PciGpu]:
    """The GPU function at `address` (any case, with or without the domain), if the host has it."""
    want = address.lower() if address.count(":") == 2 else f"0000:{address.lower()}"
    return next((g for g in read_pci(root or host_root()) if g.address.lower() == want), None)


def read_kfd_targets(root: Path) -> List[int]:
    targets = []
    for props in sorted((root / "sys/class/kfd/kfd/topology/nodes").glob("*/properties")):
        match = re.search(r"^gfx_target_version (\d+)", _read(props) or "", re.M)
        if match and int(match.group(1)):  # CPU nodes have 0
            targets.append(int(match.group(1)))
    return targets


def node_access(path: Path, uid: int, gids: Sequence[int]) -> NodeAccess:
    """Can this identity open the node for reading and writing? (From its mode, so a test can
    ask for a user outside the `render` group even when the suite runs as root.)"""
    try:
        st = path.stat()
    except OSError:
        return NodeAccess(str(path), False)
    mode = st.st_mode
    if uid == 0:
        ok = True
    elif st.st_uid == uid:
        ok = mode & (stat.S_IRUSR | stat.S_IWUSR) == (stat.S_IRUSR | stat.S_IWUSR)
    elif st.st_gid in gids:
        ok = mode & (stat.S_IRGRP | stat.S_IWGRP) == (stat.S_IRGRP | stat.S_IWGRP)
    else:
        ok = mode & (stat.S_IROTH | stat.S_IWOTH) == (stat.S_IROTH | stat.S_IWOTH)
    return NodeAccess(str(path), ok)


def _identity() -> Tuple[int, List[int]]:
    if not hasattr(os, "geteuid"):
        return 0, []
    return os.geteuid(), sorted({os.getegid(), *os.getgroups()})


def read(root: Optional[Path] = None, identity: Optional[Tuple[int, Sequence[int]]] = None,
         environ: Optional[Mapping[str, str]] = None) -> HostGpus:
    """The host's GPUs. Never raises: what cannot be read is simply absent."""
    root = root or host_root()
    uid, gids = identity or _identity()
    environ = os.environ if environ is None else environ
    dev = root / "dev"
    nvidia_version = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)",
                               _read(root / "proc/driver/nvidia/version") or "")
    wsl_lib = root / "usr/lib/wsl/lib"
    host = HostGpus(
        pci=_guard(lambda: read_pci(root), []),
        kfd_gfx_targets=_guard(lambda: read_kfd_targets(root), []),
        amdgpu_version=_read(root / "sys/module/amdgpu/version"),
        nvidia_driver=nvidia_version.group(1) if nvidia_version else None,
        nvidia_proc_gpus=sorted(p.name for p in _guard(lambda: list((root / "proc/driver/nvidia/gpus").iterdir()), [])),
        dev_kfd=node_access(dev / "kfd", uid, gids) if (dev / "kfd").exists() else None,
        render_nodes=[node_access(p, uid, gids)
                      for p in sorted(_guard(lambda: list((dev / "dri").glob("renderD*")), []))],
        nvidia_nodes=[node_access(p, uid, gids) for p in sorted(dev.glob("nvidia[0-9]*"))] if dev.is_dir() else [],
        wsl_dxg=(dev / "dxg").exists(),
        wsl_vendor="nvidia" if any(wsl_lib.glob("libcuda.so*")) else None,
        visible_devices={k: environ[k] for k in VISIBLE_VARS if k in environ},
    )
    return host


def _guard(fn: Any, default: Any) -> Any:
    try:
        return fn()
    except OSError:
        return default


# --- GPU arch names ------------------------------------------------------------------------------

# Cards whose ISA matches a sibling's closely enough to run its code objects under
# HSA_OVERRIDE_GFX_VERSION (the common workaround for consumer RDNA2/RDNA3 and Vega APUs, e.g.
# ROCm/ROCm#2061: an RX 6600, gfx1032, runs with 10.3.0). Outside these families an override is a guess.
OVERRIDE_FAMILIES = {"gfx1030": ("gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"),
                     "gfx1100": ("gfx1101", "gfx1102", "gfx1103"),
                     "gfx900": ("gfx902", "gfx909", "gfx90c")}


def gfx_from_override(value: Optional[str]) -> Optional[str]:
    """'11.0.0' -> 'gfx1100', '9.0.10' -> 'gfx90a'; None when malformed."""
    match = re.fullmatch(r"\s*(\d+)\.(\d+)\.(\d+)\s*", value or "")
    if not match:
        return None
    major, minor, step = (int(g) for g in match.groups())
    return f"gfx{major}{minor}{step:x}"


def override_of(arch: str) -> str:
    """'gfx1030' -> '10.3.0', 'gfx90a' -> '9.0.10': the HSA_OVERRIDE_GFX_VERSION that names `arch`."""
    major, minor, step = gfx_version(arch) or (0, 0, 0)
    return f"{major}.{minor}.{step}"


def gfx_from_kfd(target: int) -> str:
    """KFD `gfx_target_version` 110501 -> 'gfx1151', 90010 -> 'gfx90a'."""
    return f"gfx{target // 10000}{(target // 100) % 100}{target % 100:x}"


def gfx_version(arch: Optional[str]) -> Optional[Tuple[int, int, int]]:
    """'gfx90a' -> (9, 0, 10), 'gfx1201' -> (12, 0, 1): gfx + major digits + minor and stepping
    (one hex digit each); None for anything else ('gfx11-generic', 'sm_90')."""
    match = re.fullmatch(r"gfx(\d+)([0-9a-f])([0-9a-f])", arch or "")
    return (int(match.group(1)), int(match.group(2), 16), int(match.group(3), 16)) if match else None


def gfx_major(arch: Optional[str]) -> Optional[int]:
    version = gfx_version(arch)
    return version[0] if version else None


def arch_advice(card: str, arch_list: Optional[Sequence[str]], override: Optional[str],
                install: str = f"python -m pip install torch --index-url {ROCM_INDEX}") -> str:
    """What makes a wheel run on GPU `card` when it has no code object for it (hipErrorNoBinaryForGpu):
    the override that is wrong (another generation), the family override that applies, or the
    wheel to install (`install`). `arch_list`: the wheel's, None when it could not be read."""
    listed = {a.split(":")[0] for a in arch_list or ()}
    wanted = gfx_from_override(override) if override else None
    wheel = f"install a ROCm torch built for {card} ({install}; `rocmcheck env` shows a wheel's arch list)"
    if override and gfx_major(wanted) != gfx_major(card):
        return (f"HSA_OVERRIDE_GFX_VERSION={override} makes the {card} report as {wanted or 'nothing valid'}, "
                f"a different generation whose code cannot run on it: unset it, then {wheel}")
    if arch_list is not None and card in listed and not override:
        return f"the wheel lists {card}: the missing code object is in another library or extension"
    base = next((b for b, members in OVERRIDE_FAMILIES.items() if card in members), None)
    family = ""
    if base and (arch_list is None or base in listed):
        family = f"HSA_OVERRIDE_GFX_VERSION={override_of(base)} (the {card} runs {base} code objects)"
        if override == override_of(base):
            return f"HSA_OVERRIDE_GFX_VERSION={override} is already set, yet code is missing: {wheel}"
    missing = f"the wheel has no code object for {card}" + (
        f" (it lists {' '.join(sorted(listed)) or 'nothing'})" if arch_list is not None else "")
    return f"{missing}: {wheel}" + (f", or set {family}" if family else "")


# --- which torch -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TorchChoice:
    build: str  # rocm, cuda, cpu or override
    pip_args: Tuple[str, ...]  # after `pip install`
    reason: str

    def command(self, python: str = "python") -> str:
        return f"{python} -m pip install " + " ".join(self.pip_args)


def torch_choice(host: HostGpus, requirement: Optional[str] = None, index: Optional[str] = None,
                 no_gpu_requirement: str = "torch", platform: str = sys.platform,
                 no_gpu_index: str = CPU_INDEX) -> TorchChoice:
    """The torch build that fits this host. `requirement` (a version spec) and `index` (or
    $ROCMCHECK_TORCH_INDEX) always win; a host without GPUs gets `no_gpu_requirement` from
    `no_gpu_index` (PyTorch's CPU wheels; '' for pip's own configured index)."""
    index = index or os.environ.get(TORCH_INDEX_ENV) or None
    amd, nvidia = host.gpus("amd"), host.gpus("nvidia")
    if index:
        return TorchChoice("override", (requirement or "torch", "--index-url", index),
                           f"the index {index} was asked for")
    if amd and not nvidia:
        return TorchChoice("rocm", (requirement or "torch", "--index-url", ROCM_INDEX),
                           f"this host has {amd} AMD GPU{'s' * (amd > 1)}: PyTorch's ROCm build")
    if nvidia:
        also = f" (and {amd} AMD)" if amd else ""
        extra = ("--index-url", CUDA_WINDOWS_INDEX) if platform == "win32" else ()
        return TorchChoice("cuda", (requirement or "torch", *extra),
                           f"this host has {nvidia} NVIDIA GPU{'s' * (nvidia > 1)}{also}: PyTorch's CUDA build")
    wanted = requirement or no_gpu_requirement
    if no_gpu_index == CPU_INDEX:
        return TorchChoice("cpu", (wanted, "--index-url", CPU_INDEX), "this host has no GPU: PyTorch's CPU build")
    # another index serves whichever build it holds: say where torch comes from, not which build it is
    where = f"from {no_gpu_index}" if no_gpu_index else (
        f"from pip's configured index (PyPI's Linux torch is the CUDA build, GBs of libraries a host without GPU "
        f"never uses; PyTorch's CPU-only wheels are at {CPU_INDEX})")
    return TorchChoice("override", (wanted, *(("--index-url", no_gpu_index) if no_gpu_index else ())),
                       f"this host has no GPU: {wanted} {where}")


@dataclass(frozen=True)
class Diagnosis:
    """Why torch cannot use this host's GPUs, and the next step a scheduler or a person takes."""

    message: str
    action: str


def diagnose(host: HostGpus, facts: Dict[str, Any], expect_gpus: Optional[int] = None) -> Optional[Diagnosis]:
    """What is wrong between the host's GPUs and torch (as a child saw it), or None.

    A host with GPUs and a torch that sees none of them is always wrong; fewer GPUs than the
    host has is wrong only against `expect_gpus` (a fleet's expected count per node).
    """
    seen = int(facts.get("device_count") or 0)
    vendors = host.vendors
    names = " and ".join(f"{host.gpus(v)} {v.upper() if v == 'amd' else 'NVIDIA'} GPU{'s' * (host.gpus(v) > 1)}"
                         for v in vendors)
    if vendors and not seen:
        why = facts.get("error") or facts.get("torch_error")
        if not facts.get("torch"):
            return Diagnosis(f"this host has {names} but torch's view of them could not be read: {why or 'no facts'}",
                             facts.get("action") or "check that torch imports and initialises the GPU (rocmcheck env)")
        build = _build_of(facts)
        if build not in (WANTS[v] for v in vendors):
            choice = torch_choice(host)
            them = "them" if sum(map(host.gpus, vendors)) > 1 else "it"
            return Diagnosis(f"this host has {names} but torch {facts['torch']} is a {BUILD_NAMES[build]} build that "
                             f"cannot use {them}; install the {BUILD_NAMES[choice.build]} build: {choice.command()}",
                             f"reinstall torch for this GPU: {choice.command()}")
        hints = access_hints(host, vendors)
        detail = f" ({why})" if why else ""
        return Diagnosis(f"this host has {names} and torch {facts['torch']} is a {BUILD_NAMES[build]} build, but it "
                         f"sees no GPU{detail}" + (": " + "; ".join(hints) if hints else ""),
                         "give this process its GPUs: " + ("; ".join(hints) if hints else "check the driver (dmesg)"))
    if expect_gpus is not None and seen < expect_gpus:
        hints = access_hints(host, vendors) if vendors else []
        on_host = f" (the host shows {names})" if vendors else " (the host shows no GPU)"
        return Diagnosis(f"expected {expect_gpus} GPU{'s' * (expect_gpus > 1)}, torch sees {seen}{on_host}"
                         + (": " + "; ".join(hints) if hints else ""),
                         "drain the node: a GPU is missing (check the driver, dmesg and the PCI bus)")
    return None


def _build_of(facts: Dict[str, Any]) -> str:
    if facts.get("hip"):
        return "rocm"
    return "cuda" if facts.get("cuda") else "cpu"


def access_hints(host: HostGpus, vendors: Sequence[str]) -> List[str]:
    """What the inventory suggests when the right build sees nothing."""
    hints = []
    for name, value in host.visible_devices.items():
        hints.append(f"{name}={value!r} is set and may hide every GPU")
    unbound = [g for g in host.pci if g.vendor in vendors and not g.usable_here]
    for g in unbound:
        hints.append(f"the GPU at {g.address} is bound to {g.driver or 'no driver'}, not "
                     f"{USABLE_DRIVERS.get(g.vendor, 'its compute driver')}")
    if "amd" in vendors:
        if host.dev_kfd is None:
            hints.append("/dev/kfd is missing (a container needs --device=/dev/kfd --device=/dev/dri)")
        elif not host.dev_kfd.readable_writable:
            hints.append("/dev/kfd is not readable and writable by this user (add the user to the 'render' group)")
        if not host.render_nodes:
            hints.append("no /dev/dri/renderD* node (a container needs --device=/dev/dri)")
        elif not any(n.readable_writable for n in host.render_nodes):
            hints.append("no render node is readable and writable by this user "
                         "(add the user to the 'render' and 'video' groups)")
    if "nvidia" in vendors and not host.wsl_dxg:
        if not host.nvidia_nodes:
            hints.append("no /dev/nvidia* device node (a container needs --gpus all)")
        elif not any(n.readable_writable for n in host.nvidia_nodes):
            hints.append("the /dev/nvidia* nodes are not readable and writable by this user")
    return hints


def main(argv: Optional[List[str]] = None) -> int:
    """Print the pip arguments that install the torch build for this host (stdout) and why
    (stderr): the torch step of `make gate`."""
    parser = argparse.ArgumentParser(prog="python -m rocmcheck.host.hostgpu", description=main.__doc__)
    parser.add_argument("--requirement", default=None, help="torch requirement for any host (overrides the choice)")
    parser.add_argument("--index", default=None, help="wheel index URL (overrides the choice)")
    parser.add_argument("--no-gpu-requirement", default="torch", help="torch requirement on a host without GPU")
    parser.add_argument("--no-gpu-index", default=CPU_INDEX,
                        help="wheel index on a host without GPU ('' for pip's configured index)")
    args = parser.parse_args(argv)
    choice = torch_choice(read(), args.requirement, args.index, args.no_gpu_requirement,
                          no_gpu_index=args.no_gpu_index)
    print(f"rocmcheck: installing torch, because {choice.reason}", file=sys.stderr)
    print(" ".join(choice.pip_args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
