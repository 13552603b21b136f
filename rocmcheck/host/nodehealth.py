"""The GPU's own health, read from the driver without torch: error counters, retired pages,
PCIe replays, temperatures and power, judged per GPU.

A GPU can compute right today and be failing: uncorrectable memory errors since boot, pages
waiting to be retired, correctable errors or PCIe replays climbing while it works, clocks held
down at idle. The checks platform teams run first (DCGM's level-1 diag, `amd-smi metric --ecc`,
`rocm-smi --showrasinfo`) read these counters; so does the gate, from files and libraries only,
so the GPU runtime is never initialised for them.

AMD, under the GPU's PCI function (`/sys/bus/pci/devices/<address>`, which
`/sys/class/drm/cardN/device` points at; https://docs.kernel.org/gpu/amdgpu/ras.html):
- `ras/<block>_err_count`: `ue: N` and `ce: N` lines (and `de: N`, deferred, on newer kernels);
  the driver writes `Query currently inaccessible` while it cannot ask the firmware;
- `ras/gpu_vram_bad_pages`: one `pfn : size : flag` line per bad page, flag R (retired),
  P (pending retirement) or F (could not be retired);
- `ras/features`: `feature mask: 0x...`, the blocks RAS is enabled on;
- `pcie_replay_count` (a stub that reads 0 on Navi/RDNA cards, so a rise shows on Instinct
  parts only); `hwmon/hwmon*/temp*_input` against `temp*_crit` (millidegrees C),
  `power1_average` (or `power1_input`) against `power1_cap` (microwatts).
A consumer card has no `ras/` folder: its error counters are not exposed, and the verdict says so.

NVIDIA: NVML through the `nvidia-ml-py` bindings (`pip install 'rocmcheck[nvidia]'`) when they
import, else `nvidia-smi -q -x`; every reading names its source. Besides the ECC counters the driver
keeps yes/no flags, judged as NVIDIA's "GPU Memory Error Management" note says
(https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/, pages "Error Recovery and Response
Flags", "Row Remapping" and "RMA Policy"):
- `remapped_row_pending`: a row remap waits for the next GPU reset; `remapped_row_failure`: a remap
  failed, the DRAM memory RMA policy's replacement criterion (nvmlDeviceGetRemappedRows);
- `sram_threshold_exceeded`: SRAM uncorrectable errors past the L2 memory RMA policy's threshold,
  its replacement criterion (nvmlDeviceGetSramEccErrorStatus, which needs root);
- `pending_retirement` (pre-Ampere page retirement): one status that nvidia-smi prints twice, also
  as `pending_blacklist` (NVML has one call, nvmlDeviceGetRetiredPagesPendingStatus, one boolean);
  applied by a GPU reset or a driver reload;
- `gpu_recovery_action` (None, Reset, Reboot, Drain P2P, Drain and Reset), the action the driver asks
  for after an uncorrectable error (NVML field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION), and the older
  `reset_required` / `drain_and_reset_recommended` it supersedes (fields NVML_FI_DEV_RESET_STATUS and
  NVML_FI_DEV_DRAIN_AND_RESET_STATUS; drivers from 575 print "Requested functionality has been
  deprecated" there, which is no answer);
- `channel_repair_pending` / `tpc_repair_pending` (newest drivers, nvmlDeviceGetRepairStatus): an HBM
  channel or TPC repair is pending. NVIDIA's note describes channel repair (a spare HBM channel on
  Blackwell, "recovered and ready to use" once done) but states no action for the pending flag; it is
  judged like a pending row remap, which a GPU reset applies. Every path is read under
`hostgpu.host_root()`; `ROCMCHECK_NVIDIA_SMI_XML` names a captured document that stands in for
the command. Nothing here raises on a missing, unreadable or garbage file: the file is named
(`not_exposed`, `unreadable`) and the verdict says so.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import threading
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from . import hostgpu

SMI_XML_ENV = "ROCMCHECK_NVIDIA_SMI_XML"
SMI_TIMEOUT_S = 10.0  # nvidia-smi can hang on a GPU that fell off the bus
NVML_TIMEOUT_S = 10.0  # and so can NVML
POWER_AT_CAP = 0.95  # at idle, power this close to its cap means the firmware is holding the clocks down
AMD_SOURCE, NVML_SOURCE, SMI_SOURCE = "amdgpu sysfs", "NVML (nvidia-ml-py)", "nvidia-smi -q -x"
# NVML clock event (throttle) reasons that hold clocks down for a reason other than load or settings
# (nvml.h: nvmlClocksEventReason*); nvidia-smi names the same ones in <clocks_event_reasons>.
THROTTLE_BITS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal_slowdown",
                 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown"}
_COUNT_LINE = re.compile(r"^(ue|ce|de):\s*(\d+)$")
_PAGE_LINE = re.compile(r"^0x[0-9a-fA-F]+\s*:\s*0x[0-9a-fA-F]+\s*:\s*([RPF])$")
PAGE_FLAGS = {"R": "retired", "P": "pending", "F": "failed"}
RESET_FLAGS = {"reset_required", "drain_and_reset_recommended"}  # NVIDIA flags that are no memory error counter


@dataclass
class GpuHealth:
    """One GPU's counters as read now. `ue`/`ce`/`de` are per block (AMD) or per memory kind
    (NVIDIA); `pages` counts retired, pending and failed pages (AMD) or retired pages (NVIDIA before
    Ampere); `rows` and `flags` are NVIDIA's row remapper and yes/no flags (see the module)."""

    address: str
    vendor: str
    source: str
    ue: Dict[str, int] = field(default_factory=dict)
    ce: Dict[str, int] = field(default_factory=dict)
    de: Dict[str, int] = field(default_factory=dict)
    pages: Dict[str, int] = field(default_factory=dict)
    ras_features: Optional[str] = None
    pcie_replays: Optional[int] = None
    temperatures: List[Dict[str, Any]] = field(default_factory=list)  # {"sensor", "celsius", "critical"}
    power_w: Optional[float] = None
    power_cap_w: Optional[float] = None
    throttle: List[str] = field(default_factory=list)  # active throttle reasons (NVIDIA)
    clock_mhz: Optional[float] = None  # the shader/SM clock now, and the highest it may run at
    clock_max_mhz: Optional[float] = None
    rows: Dict[str, int] = field(default_factory=dict)  # NVIDIA rows remapped for correctable/uncorrectable errors
    flags: Dict[str, bool] = field(default_factory=dict)  # NVIDIA's yes/no flags that were stated, by nvidia-smi name
    recovery_action: Optional[str] = None  # NVIDIA's gpu_recovery_action, as nvidia-smi words it
    not_exposed: List[str] = field(default_factory=list)  # counters the driver does not expose: file or library
    unreadable: List[str] = field(default_factory=list)  # files there but unreadable or garbage, with why

    @property
    def has_error_counters(self) -> bool:
        return bool(self.ue or self.ce or self.pages or self.rows or set(self.flags) - RESET_FLAGS)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def canonical_address(address: str) -> str:
    """'0000:3b:00.0' from '00000000:3B:00.0' (nvidia-smi, NVML), '3b:00.0' or '0000:3B:00.0'."""
    parts = address.strip().lower().split(":")
    if len(parts) == 2:
        parts.insert(0, "0000")
    return f"{parts[0][-4:]:0>4}:{parts[1]}:{parts[2]}"


# --- AMD: amdgpu sysfs -------------------------------------------------------------------------


def _text(path: Path) -> Tuple[Optional[str], Optional[str]]:
    """(text, None), (None, 'missing') or (None, why it cannot be read)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace"), None
    except FileNotFoundError:
        return None, "missing"
    except OSError as exc:
        return None, exc.strerror or str(exc)


def parse_err_count(text: str) -> Optional[Dict[str, int]]:
    """{'ue': 0, 'ce': 1} from 'ue: 0\\nce: 1\\n' (and 'de'); None for anything else, such as
    'Query currently inaccessible'."""
    found: Dict[str, int] = {}
    for line in filter(None, (raw.strip() for raw in text.splitlines())):
        m = _COUNT_LINE.match(line)
        if not m:
            return None
        found[m.group(1)] = int(m.group(2))
    return found if {"ue", "ce"} <= set(found) else None


def parse_bad_pages(text: str) -> Optional[Dict[str, int]]:
    """{'retired': n, 'pending': n, 'failed': n} from gpu_vram_bad_pages; None if a line is garbage."""
    pages = dict.fromkeys(PAGE_FLAGS.values(), 0)
    for line in filter(None, (raw.strip() for raw in text.splitlines())):
        m = _PAGE_LINE.match(line)
        if not m:
            return None
        pages[PAGE_FLAGS[m.group(1)]] += 1
    return pages


def _number(health: GpuHealth, path: Path, scale: float = 1.0, sensor: bool = False) -> Optional[float]:
    """The number in `path`, divided by `scale`. A counter that cannot be read is `unreadable`
    (a warning); a hwmon sensor that cannot (amdgpu answers EINVAL or ENODATA where the
    firmware does not report it) is only not exposed."""
    text, why = _text(path)
    if text is None:
        if why != "missing":
            (health.not_exposed if sensor else health.unreadable).append(f"{path}: {why}")
        return None
    try:
        return int(text.strip()) / scale
    except ValueError:
        health.unreadable.append(f"{path}: not a number ({text.strip()[:40]!r})")
        return None


def _read_ras(health: GpuHealth, ras: Path) -> None:
    if not ras.is_dir():
        health.not_exposed.append(f"{ras}/ (the driver exposes no RAS error counters on this GPU)")
        return
    counts = sorted(ras.glob("*_err_count"))
    if not counts:
        health.not_exposed.append(f"{ras}/*_err_count")
    for path in counts:
        text, why = _text(path)
        parsed = parse_err_count(text) if text is not None else None
        if parsed is None:
            health.unreadable.append(f"{path}: {why if text is None else repr(text.strip()[:40])}")
            continue
        block = path.name[:-len("_err_count")]
        for kind, n in parsed.items():
            getattr(health, kind)[block] = n
    text, why = _text(ras / "gpu_vram_bad_pages")
    pages = parse_bad_pages(text) if text is not None else None
    if pages is not None:
        health.pages = pages
    elif why == "missing":
        health.not_exposed.append(str(ras / "gpu_vram_bad_pages"))
    else:
        health.unreadable.append(f"{ras / 'gpu_vram_bad_pages'}: {why or 'not in the pfn : size : flag format'}")
    features, _ = _text(ras / "features")
    health.ras_features = features.strip() if features else None


def _read_hwmon(health: GpuHealth, device: Path) -> None:
    folders = sorted((device / "hwmon").glob("hwmon*"))
    if not folders:
        health.not_exposed.append(f"{device / 'hwmon'}/ (temperatures and power)")
        return
    hwmon = folders[0]
    for path in sorted(hwmon.glob("temp*_input")):
        name = path.name[:-len("_input")]
        celsius = _number(health, path, 1000.0, sensor=True)
        if celsius is None:
            continue
        label, _ = _text(hwmon / f"{name}_label")
        health.temperatures.append({"sensor": (label or name).strip(), "celsius": celsius,
                                    "critical": _number(health, hwmon / f"{name}_crit", 1000.0, sensor=True)})
    watts = [_number(health, p, 1e6, sensor=True) for p in (hwmon / "power1_average", hwmon / "power1_input")
             if p.exists()]  # newer parts (MI300) report power1_input only
    health.power_w = next((w for w in watts if w is not None), None)
    health.power_cap_w = _number(health, hwmon / "power1_cap", 1e6, sensor=True)
    health.clock_mhz = _number(health, hwmon / "freq1_input", 1e6, sensor=True) if (hwmon / "freq1_input").exists() \
        else None  # sclk in Hz
    levels, _ = _text(device / "pp_dpm_sclk")  # "0: 500Mhz\n1: 1700Mhz *": the DPM levels, the current one starred
    mhz = [float(m) for m in re.findall(r"^\s*\d+:\s*(\d+)\s*Mhz", levels or "", re.MULTILINE | re.IGNORECASE)]
    health.clock_max_mhz = max(mhz) if mhz else None


def read_amd(device: Path) -> GpuHealth:
    """The counters of the amdgpu function at `device` (a /sys/bus/pci/devices/<address> folder)."""
    health = GpuHealth(device.name, "amd", AMD_SOURCE)
    _read_ras(health, device / "ras")
    replays = _number(health, device / "pcie_replay_count")
    if replays is None and not (device / "pcie_replay_count").exists():
        health.not_exposed.append(str(device / "pcie_replay_count"))
    health.pcie_replays = None if replays is None else int(replays)
    _read_hwmon(health, device)
    return health


# --- NVIDIA: nvidia-smi -q -x and NVML ---------------------------------------------------------


def _int_of(text: Optional[str]) -> Optional[int]:
    try:
        return int((text or "").strip())
    except ValueError:
        return None  # N/A, absent


def _float_of(text: Optional[str]) -> Optional[float]:
    m = re.match(r"\s*(-?[\d.]+)", text or "")
    return float(m.group(1)) if m else None


# nvidia-smi's yes/no flags, each by the tags it is printed under (the retirement status twice).
SMI_FLAGS = {"pending_retirement": ("pending_retirement", "pending_blacklist"),
             **{name: (name,) for name in ("remapped_row_pending", "remapped_row_failure", "sram_threshold_exceeded",
                                           "channel_repair_pending", "tpc_repair_pending", "reset_required",
                                           "drain_and_reset_recommended")}}
# What a GPU reports when the driver asks for nothing, or cannot say.
NO_ACTION = ("none", "n/a", "")


def _smi_flags(gpu: ET.Element) -> Dict[str, bool]:
    """Each flag that says Yes or No (not N/A, not "Requested functionality has been deprecated");
    a flag printed under two names is one status, Yes if either says so."""
    found = {}
    for name, tags in SMI_FLAGS.items():
        said = [(node.text or "").strip().lower() for tag in tags for node in gpu.iter(tag)]
        said = [v for v in said if v in ("yes", "no")]
        if said:
            found[name] = "yes" in said
    return found


def _smi_gpu(gpu: ET.Element) -> GpuHealth:
    health = GpuHealth(canonical_address(gpu.get("id") or gpu.findtext("pci/pci_bus_id") or "0:0:0.0"),
                       "nvidia", SMI_SOURCE)
    volatile = gpu.find("ecc_errors/volatile")
    for node in list(volatile) if volatile is not None else []:
        if len(node):  # pre-Ampere layout: <single_bit>/<double_bit> with a <total>
            counters = {"single_bit": health.ce, "double_bit": health.ue}.get(node.tag)
            total = _int_of(node.findtext("total"))
            if counters is not None and total is not None:
                counters[node.tag] = total
            continue
        n = _int_of(node.text)
        if n is not None and "correctable" in node.tag:
            (health.ue if "uncorrectable" in node.tag else health.ce)[node.tag] = n
    retired = [n for n in (_int_of(gpu.findtext(f"retired_pages/{kind}/retired_count"))
                           for kind in ("multiple_single_bit_retirement", "double_bit_retirement")) if n is not None]
    if retired:
        health.pages = {"retired": sum(retired)}
    for kind, tag in (("correctable", "remapped_row_corr"), ("uncorrectable", "remapped_row_unc")):
        n = _int_of(gpu.findtext(f"remapped_rows/{tag}"))
        if n is not None:
            health.rows[kind] = n
    health.flags = _smi_flags(gpu)
    action = (gpu.findtext("gpu_recovery_action") or "").strip()
    health.recovery_action = action if action.lower() not in NO_ACTION else None
    if not health.has_error_counters:
        health.not_exposed.append("ECC counters (nvidia-smi shows ECC off or not supported)")
    reasons = gpu.find("clocks_event_reasons")
    reasons = reasons if reasons is not None else gpu.find("clocks_throttle_reasons")
    for node in list(reasons) if reasons is not None else []:
        name = re.sub(r"^clocks_(event|throttle)_reason_", "", node.tag)
        if name in THROTTLE_BITS.values() and (node.text or "").strip() == "Active":
            health.throttle.append(name)
    health.pcie_replays = _int_of(gpu.findtext("pci/replay_counter"))
    health.clock_mhz = _float_of(gpu.findtext("clocks/sm_clock"))
    health.clock_max_mhz = _float_of(gpu.findtext("max_clocks/sm_clock"))
    temp = _float_of(gpu.findtext("temperature/gpu_temp"))
    if temp is not None:
        health.temperatures.append({"sensor": "gpu", "celsius": temp,
                                    "critical": _float_of(gpu.findtext("temperature/gpu_temp_slow_threshold"))})
    power = next((p for p in (gpu.find("gpu_power_readings"), gpu.find("power_readings")) if p is not None), None)
    if power is not None:
        health.power_w = _float_of(power.findtext("power_draw") or power.findtext("instant_power_draw"))
        health.power_cap_w = _float_of(power.findtext("current_power_limit") or power.findtext("power_limit"))
    return health


def parse_nvidia_smi(text: str) -> Dict[str, GpuHealth]:
    """Each GPU of an `nvidia-smi -q -x` document by PCI address; ValueError if it is not one."""
    try:
        root = ET.fromstring(re.sub(r"<!DOCTYPE[^>]*>", "", text))
    except ET.ParseError as exc:
        raise ValueError(f"not an nvidia-smi XML document: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"not an nvidia-smi XML document: the root is <{root.tag}>")
    found = {}
    for gpu in root.findall("gpu"):
        health = _smi_gpu(gpu)
        found[health.address] = health
    return found


def _nvml_call(nvml: Any, health: GpuHealth, name: str, *args: Any) -> Any:
    """One NVML query; a query this GPU or driver does not support is named, not raised."""
    try:
        return getattr(nvml, name)(*args)
    except (nvml.NVMLError, AttributeError) as exc:
        health.not_exposed.append(f"NVML {name} ({exc})")
        return None


# nvmlGpuRecoveryAction_t, worded as nvidia-smi prints it (the last three by nvml.h's comments).
RECOVERY_ACTIONS = {1: "Reset", 2: "Reboot", 3: "Drain P2P", 4: "Drain and Reset", 5: "Recover IMEX Domain",
                    6: "Bus Reset", 7: "System Reboot"}
FI_RESET_STATUS, FI_DRAIN_AND_RESET_STATUS, FI_GPU_RECOVERY_ACTION = 226, 227, 230  # nvml.h NVML_FI_DEV_*


def _nvml_flags(nvml: Any, health: GpuHealth, handle: Any) -> None:
    """The flags nvidia-smi prints, from the NVML calls behind them (see the module)."""
    pending = _nvml_call(nvml, health, "nvmlDeviceGetRetiredPagesPendingStatus", handle)
    if pending is not None:
        health.flags["pending_retirement"] = bool(pending)
    rows = _nvml_call(nvml, health, "nvmlDeviceGetRemappedRows", handle)  # (corr, unc, pending, failure)
    if rows is not None:
        health.rows = {"correctable": int(rows[0]), "uncorrectable": int(rows[1])}
        health.flags.update(remapped_row_pending=bool(rows[2]), remapped_row_failure=bool(rows[3]))
    status_type = getattr(nvml, "c_nvmlEccSramErrorStatus_v1_t", None)
    status = status_type() if status_type is not None else None
    if status is not None and _nvml_call(nvml, health, "nvmlDeviceGetSramEccErrorStatus", handle,
                                         ctypes.byref(status)) is not None:
        health.flags["sram_threshold_exceeded"] = bool(status.bThresholdExceeded)
    repair = _nvml_call(nvml, health, "nvmlDeviceGetRepairStatus", handle)  # (channel, tpc)
    if repair is not None:
        health.flags.update(channel_repair_pending=bool(repair[0]), tpc_repair_pending=bool(repair[1]))
    fields = _nvml_call(nvml, health, "nvmlDeviceGetFieldValues", handle,
                        [FI_GPU_RECOVERY_ACTION, FI_RESET_STATUS, FI_DRAIN_AND_RESET_STATUS])
    for value in fields or []:
        if value.nvmlReturn != 0:  # this driver does not know the field (or deprecated it)
            health.not_exposed.append(f"NVML field {value.fieldId} (return {value.nvmlReturn})")
        elif value.fieldId == FI_GPU_RECOVERY_ACTION:
            code = value.value.uiVal
            health.recovery_action = RECOVERY_ACTIONS.get(code, f"recovery action {code}") if code else None
        else:
            name = "reset_required" if value.fieldId == FI_RESET_STATUS else "drain_and_reset_recommended"
            health.flags[name] = bool(value.value.uiVal)


def read_nvml(nvml: Any) -> Dict[str, GpuHealth]:
    """Each GPU NVML sees, by PCI address (`nvml` is the `pynvml` module of nvidia-ml-py)."""
    nvml.nvmlInit()
    try:
        found = {}
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            bus = nvml.nvmlDeviceGetPciInfo(handle).busId
            bus = bus.decode() if isinstance(bus, bytes) else bus
            health = GpuHealth(canonical_address(bus), "nvidia", NVML_SOURCE)
            for kind, target in ((nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, health.ue),
                                 (nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, health.ce)):
                n = _nvml_call(nvml, health, "nvmlDeviceGetTotalEccErrors", handle, kind, nvml.NVML_VOLATILE_ECC)
                if n is not None:
                    target["volatile_total"] = int(n)
            _nvml_flags(nvml, health, handle)
            event = hasattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons")  # ThrottleReasons before driver 535
            named = "nvmlDeviceGetCurrentClocks" + ("EventReasons" if event else "ThrottleReasons")
            reasons = _nvml_call(nvml, health, named, handle)
            health.throttle = [name for bit, name in THROTTLE_BITS.items() if reasons and reasons & bit]
            health.pcie_replays = _nvml_call(nvml, health, "nvmlDeviceGetPcieReplayCounter", handle)
            sm = getattr(nvml, "NVML_CLOCK_SM", 1)
            health.clock_mhz = _nvml_call(nvml, health, "nvmlDeviceGetClockInfo", handle, sm)
            health.clock_max_mhz = _nvml_call(nvml, health, "nvmlDeviceGetMaxClockInfo", handle, sm)
            temp = _nvml_call(nvml, health, "nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU)
            if temp is not None:
                health.temperatures.append({"sensor": "gpu", "celsius": float(temp), "critical": None})
            power = _nvml_call(nvml, health, "nvmlDeviceGetPowerUsage", handle)
            cap = _nvml_call(nvml, health, "nvmlDeviceGetEnforcedPowerLimit", handle)
            health.power_w = None if power is None else power / 1e3  # milliwatts
            health.power_cap_w = None if cap is None else cap / 1e3
            found[health.address] = health
        return found
    finally:
        nvml.nvmlShutdown()


def _nvml_within(nvml: Any, seconds: float, why: List[str]) -> Optional[Dict[str, GpuHealth]]:
    """`read_nvml` in a daemon thread: NVML runs in the gate's own process, with no watchdog
    around it, and a GPU that fell off the bus can hang it. Past `seconds` the gate goes on."""
    box: Dict[str, Any] = {}

    def run() -> None:
        try:
            box["found"] = read_nvml(nvml)
        except Exception as exc:  # noqa: BLE001 - pynvml.NVMLError and friends: fall back to nvidia-smi
            box["error"] = exc

    worker = threading.Thread(target=run, name="rocmcheck-nvml", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        why.append(f"NVML did not answer within {seconds:g}s")
    elif "error" in box:
        why.append(f"NVML failed: {box['error']}")
    return box.get("found")


def read_nvidia(addresses: List[str], nvml: Any = None) -> Dict[str, GpuHealth]:
    """The NVIDIA GPUs at `addresses`: NVML (`nvml`, else nvidia-ml-py's `pynvml` if it
    imports), else nvidia-smi, else each GPU says that neither answered."""
    fixture = os.environ.get(SMI_XML_ENV)
    why: List[str] = []
    if not fixture:
        if nvml is None:
            try:
                import pynvml  # nvidia-ml-py, the optional `nvidia` extra
            except ImportError:
                why.append("nvidia-ml-py is not installed (pip install 'rocmcheck[nvidia]')")
            else:
                nvml = pynvml
        found = _nvml_within(nvml, NVML_TIMEOUT_S, why) if nvml is not None else None
        if found is not None:
            return found
    try:
        if fixture:
            return parse_nvidia_smi(Path(fixture).read_text(encoding="utf-8", errors="replace"))
        smi = shutil.which("nvidia-smi")
        if smi is None:
            why.append("nvidia-smi is not on PATH")
        else:
            out = subprocess.run([smi, "-q", "-x"], capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
            return parse_nvidia_smi(out.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        why.append(f"nvidia-smi -q -x: {str(exc)[:200]}")
    return {a: GpuHealth(a, "nvidia", "none", not_exposed=list(why)) for a in addresses}


def snapshot(root: Optional[Path] = None, only: Optional[str] = None) -> Dict[str, GpuHealth]:
    """Every GPU of the host bound to its compute driver (or only the one at address `only`),
    by PCI address. Never raises."""
    root = root or hostgpu.host_root()
    try:
        gpus = [g for g in hostgpu.read_pci(root) if g.usable_here and only in (None, g.address)]
    except OSError:
        return {}
    found = {g.address: read_amd(root / "sys/bus/pci/devices" / g.address) for g in gpus if g.vendor == "amd"}
    nvidia = [g.address for g in gpus if g.vendor == "nvidia"]
    if nvidia:
        read = read_nvidia(nvidia)
        found.update({a: read.get(a) or GpuHealth(a, "nvidia", "none", not_exposed=["this GPU is not in NVML's or "
                                                                                  "nvidia-smi's list"])
                      for a in nvidia})
    return found


def describe(health: GpuHealth) -> str:
    """One line of counters for `rocmcheck env`."""
    parts = [health.source]
    for name, counts in (("uncorrectable", health.ue), ("correctable", health.ce), ("deferred", health.de)):
        if counts:
            parts.append(f"{name} {sum(counts.values())}" + (f" ({_named(counts)})" if _named(counts) else ""))
    if health.pages:
        parts.append("bad pages " + ", ".join(f"{n} {kind}" for kind, n in health.pages.items()))
    if health.rows:
        parts.append("remapped rows " + ", ".join(f"{n} {kind}" for kind, n in health.rows.items()))
    parts += [name for name, on in health.flags.items() if on]
    if health.recovery_action:
        parts.append(f"recovery action {health.recovery_action}")
    if health.pcie_replays is not None:
        parts.append(f"PCIe replays {health.pcie_replays}")
    parts += [f"{t['sensor']} {t['celsius']:g} C" + (f" (critical {t['critical']:g})" if t.get("critical") else "")
              for t in health.temperatures]
    if health.power_w is not None:
        parts.append(f"power {health.power_w:g} W" + (f" of {health.power_cap_w:g} W" if health.power_cap_w else ""))
    parts += [f"throttle {r}" for r in health.throttle]
    parts += [f"not exposed: {what}" for what in health.not_exposed]
    parts += [f"unreadable: {what}" for what in health.unreadable]
    return "; ".join(parts)


# --- the verdict -------------------------------------------------------------------------------


@dataclass
class Finding:
    """What the counters of one GPU mean: a status (pass, warn, fail, skip), why, and for a
    failure the action a scheduler takes."""

    status: str
    message: str
    action: Optional[str] = None
    measurements: Dict[str, Any] = field(default_factory=dict)


def _named(counts: Dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if v)


def rises(before: Dict[str, int], now: Dict[str, int]) -> Dict[str, Tuple[int, int]]:
    return {k: (before[k], n) for k, n in now.items() if k in before and n > before[k]}


def throttled(health: GpuHealth) -> List[str]:
    """Why this GPU's clocks are held down, read at idle: throttle reasons, a temperature at its
    critical limit, power at its cap."""
    found = [f"throttle reason {r} active" for r in health.throttle]
    for t in health.temperatures:
        if t.get("critical") and t["celsius"] >= t["critical"]:
            found.append(f"{t['sensor']} {t['celsius']:g} C at or above its critical {t['critical']:g} C")
    if health.power_w is not None and health.power_cap_w and health.power_w >= POWER_AT_CAP * health.power_cap_w:
        found.append(f"power {health.power_w:g} W at its cap {health.power_cap_w:g} W")
    return found


# NVIDIA's flags that make a GPU NO-GO: what each says, and what is done about it (DRAIN_P2P, RESET,
# REBOOT, REPLACE, ranked: a failure asks for the strongest action of its reasons).
DRAIN_P2P, RESET, REBOOT, REPLACE = 1, 2, 3, 4
FLAG_FINDINGS = {
    "pending_retirement": ("a page retirement is pending (pending_retirement): it takes effect at the next GPU "
                           "reset or driver reload", RESET),
    "remapped_row_pending": ("a row remap is pending (remapped_row_pending): it takes effect at the next GPU "
                             "reset", RESET),
    "channel_repair_pending": ("an HBM channel repair is pending (channel_repair_pending)", RESET),
    "tpc_repair_pending": ("a TPC repair is pending (tpc_repair_pending)", RESET),
    "reset_required": ("the driver says the GPU needs a reset (reset_required)", RESET),
    "drain_and_reset_recommended": ("the driver recommends draining the GPU and resetting it "
                                    "(drain_and_reset_recommended)", RESET),
    "remapped_row_failure": ("a row remap failed (remapped_row_failure): NVIDIA's DRAM memory RMA policy "
                             "criterion for replacing the GPU is met", REPLACE),
    "sram_threshold_exceeded": ("SRAM uncorrectable errors passed NVIDIA's threshold (sram_threshold_exceeded): "
                                "the L2 memory RMA policy criterion for replacing the GPU is met", REPLACE),
}
RECOVERY_RANKS = {"drain p2p": DRAIN_P2P, "reboot": REBOOT, "system reboot": REBOOT}


def _action(rank: int, index: int, address: str) -> str:
    gpu = f"GPU {index} ({address})"
    return {0: f"drain the node; reset or replace {gpu}",
            DRAIN_P2P: f"drain the node; end the jobs that use peer-to-peer traffic with {gpu}, then read its "
                       "recovery action again",
            RESET: f"drain the node; reset {gpu} (nvidia-smi -r) once its jobs have ended",
            REBOOT: "drain the node; reboot it",
            REPLACE: f"drain the node; replace {gpu} (NVIDIA's field diagnostic confirms an RMA)"}[rank]


def judge(before: Optional[GpuHealth], now: GpuHealth, index: int) -> Finding:
    """The verdict on GPU `index` from its counters `now` and, when read, at the start of the run
    (`before`): NO-GO (fail) on uncorrectable errors since boot, pages pending or failing
    retirement, or an NVIDIA flag or recovery action that asks for a reset, a reboot or a
    replacement (the action names the strongest); warn on correctable errors or PCIe replays that
    rose during the run, throttling at idle (judged on `before`, the idle reading) or a counter
    file that cannot be read; skip when the driver exposes no error counter at all."""
    idle = before or now
    m: Dict[str, Any] = {"source": now.source, "pci_address": now.address, "uncorrectable": now.ue,
                         "correctable": now.ce, "deferred": now.de, "bad_pages": now.pages,
                         "remapped_rows": now.rows, "flags": now.flags, "recovery_action": now.recovery_action,
                         "pcie_replays": now.pcie_replays, "temperatures": idle.temperatures, "power_w": idle.power_w,
                         "power_cap_w": idle.power_cap_w, "throttle": idle.throttle, "ras_features": now.ras_features}
    if before is not None:
        m.update(correctable_before=before.ce, pcie_replays_before=before.pcie_replays)
    m.update({k: v for k, v in (("not_exposed", now.not_exposed), ("unreadable", now.unreadable)) if v})
    where = f"GPU {index} ({now.address}, from {now.source})"
    bad: List[Tuple[str, int]] = []
    if sum(now.ue.values()):
        bad.append((f"{sum(now.ue.values())} uncorrectable errors since boot ({_named(now.ue)})", 0))
    for kind, words in (("pending", "pending retirement"), ("failed", "that could not be retired")):
        if now.pages.get(kind):
            bad.append((f"{now.pages[kind]} bad memory pages {words}", 0))
    bad += [FLAG_FINDINGS[name] for name, on in now.flags.items() if on and name in FLAG_FINDINGS]
    if now.recovery_action:
        bad.append((f"the driver's recovery action is {now.recovery_action!r} (gpu_recovery_action)",
                    RECOVERY_RANKS.get(now.recovery_action.lower(), RESET)))
    if bad:
        return Finding("fail", f"{where}: " + "; ".join(what for what, _ in bad),
                       _action(max(rank for _, rank in bad), index, now.address), m)
    warns = []
    if before is not None:
        rose = rises(before.ce, now.ce)
        if rose:
            warns.append("correctable errors rose during the run: " +
                         ", ".join(f"{k} {a} -> {b} (+{b - a})" for k, (a, b) in sorted(rose.items())))
        first, last = before.pcie_replays, now.pcie_replays
        if first is not None and last is not None and last > first:
            warns.append(f"PCIe replays rose during the run: {first} -> {last} (+{last - first}): a marginal link, "
                         "slot or riser")
    warns += [f"throttled at idle: {why}" for why in throttled(idle)]
    warns += [f"cannot read {what}" for what in now.unreadable]
    if warns:
        return Finding("warn", f"{where}: " + "; ".join(warns), None, m)
    if not now.has_error_counters:
        return Finding("skip", f"{where}: no error counters to judge: " + "; ".join(now.not_exposed), None, m)
    return Finding("pass", f"{where}: no uncorrectable errors, no pages pending retirement, "
                           f"{sum(now.ce.values())} correctable errors{' (none new)' if before else ''}, "
                           f"PCIe replays {now.pcie_replays if now.pcie_replays is not None else 'not exposed'}, "
                           f"not throttled at idle", None, m)


# --- for probes that load the GPU (gpu-memory, sustained-load) -------------------------------------


def of_device(device_facts: Dict[str, Any], device: str) -> Optional[GpuHealth]:
    """The counters of torch device `device` ("cuda:N", "simgpu:N") now, found by the PCI address the
    run's device facts give it; None on the CPU, or where the address is unknown or no driver
    answers for it. Read from files and libraries in the probe's own process: no GPU runtime call."""
    if ":" not in device:
        return None
    index = int(device.split(":")[1])
    address = next((d.get("pci_address") for d in device_facts.get("devices") or []
                    if d and d.get("index") == index), None)
    if not address:
        return None
    address = canonical_address(address)
    return snapshot(only=address).get(address)


def error_counts_change(before: Optional[GpuHealth], after: Optional[GpuHealth]) -> str:
    """Node-health's ECC/RAS counts before and after some work, in words ("uncorrectable 0 -> 0,
    correctable 3 -> 5 (+2)"), or why there are none: what a memory or load failure points at."""
    if before is None or after is None:
        return "no ECC/RAS counters read for this GPU (no PCI address or driver counters; see node-health)"
    if not (before.has_error_counters or after.has_error_counters):
        return f"ECC/RAS counters not exposed ({after.source}: {'; '.join(after.not_exposed) or 'none'})"
    parts = []
    for name, then, now in (("uncorrectable", before.ue, after.ue), ("correctable", before.ce, after.ce)):
        a, b = sum(then.values()), sum(now.values())
        parts.append(f"{name} {a} -> {b}" + (f" (+{b - a})" if b > a else ""))
    return f"ECC/RAS from {after.source}: " + ", ".join(parts)
