"""The GPU's PCIe link against its maximum, with host-to-device and device-to-host bandwidth.

A card in a Gen3 slot, behind a x4 riser or with a link that trained down after a bad seat
runs every copy at a fraction of its speed and passes every correctness check
(docs/failure-catalogue.md §11). The link is read from the host's own files
(`current_link_speed`/`width` against `max_link_speed`/`width` of the GPU's PCI function,
`rocmcheck.host.hostgpu.pci_device`), at the address the run's device facts give (torch's
`pci_bus_id`), right after the copies below: GPUs lower their link speed when idle, and
traffic brings it back up. A lower generation or a narrower link is `warn`, with the copy
bandwidth beside it.

Bandwidth: host-to-device and device-to-host, from pageable and pinned host memory, `SAMPLES`
copies each into buffers allocated before the clock starts (one untimed warm-up copy too), each
recorded as a speed figure (`ctx.measure_speed`: every sample's GB/s, its median the figure's
value) named "h2d-pageable", "h2d-pinned", "d2h-pageable", "d2h-pinned": the names the
judgements read (the pinned ones against the PCIe link's rate, `rocmcheck.knowledge.speed`) and
`rocmcheck diff` and `--rocm-baseline` match across runs to catch a copy that got slower. On a GPU
the clock is a pair of device events around the copy (the copy's own time, without launch
overhead or host scheduling); on the CPU, the thread's CPU time (copies there are synchronous). The
strided source from pinned memory is a figure of its own, "h2d-strided": torch first gathers a
non-dense source into a pageable contiguous temporary on the host, so that copy is not a pinned
copy whatever its source was. On the CPU there is neither pinned memory nor a link: the pageable
copies are measured host to host (a self-test of the timing, and figures a baseline can still
hold), then the probe skips.

Limit: on Radeon cards the GPU function sits behind a switch inside the card, whose own links
may report the internal link, not the slot's; the link read is the GPU function's.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import rocmcheck
from rocmcheck import torchapi
from rocmcheck.host import hostgpu
from rocmcheck.host.hostgpu import PciGpu
from rocmcheck.lazy import torch

MIB = 1 << 20
BYTES = {("gpu", "gate"): 64 * MIB, ("gpu", "full"): 256 * MIB, ("cpu", "gate"): 4 * MIB, ("cpu", "full"): 4 * MIB}
# A GPU's copies are timed by its own events, 64-256 MiB each: a few samples agree within a few
# percent (an H100: 54.5-55.2 GB/s over 10). A 4 MiB copy on the CPU or a simulated GPU takes
# 0.1 ms, timed on a host other processes share: 40 of them cost 4 ms, and their median holds two
# healthy runs closer together than 10 did (scripts/speed_noise.py; a baseline's tolerance comes
# from that noise).
SAMPLES = {("gpu", "gate"): 5, ("gpu", "full"): 10, ("cpu", "gate"): 40, ("cpu", "full"): 40}

LINKS = (
    "https://docs.kernel.org/PCI/sysfs-pci.html",
    "https://github.com/NVIDIA/cuda-samples/tree/master/Samples/1_Utilities/bandwidthTest",
)


def gbps(nbytes: int, seconds: List[float]) -> List[float]:
    """GB/s of each timed copy of `nbytes`."""
    return [nbytes / s / 1e9 for s in seconds]


def copies(ctx: rocmcheck.ProbeContext, nbytes: int) -> Dict[str, Tuple[Callable[[], Any], Callable[[], Any]]]:
    """Each figure's copy between buffers allocated here, outside any clock: `copy_` into a
    destination that already exists, so no timed copy allocates; beside it, the same copy from
    the same source done by the host alone (into a host buffer), which bounds a simulated GPU's."""
    n = nbytes // 4
    host = torch.ones(n, dtype=torch.float32)
    dev = torch.ones(n, dtype=torch.float32, device=ctx.device)
    dev_out = torch.empty_like(dev)
    host_out = torch.empty_like(host)
    def on_host() -> Any:
        return host_out.copy_(host)

    cases = {"h2d-pageable": (lambda: dev_out.copy_(host), on_host),
             "d2h-pageable": (lambda: host_out.copy_(dev), on_host)}
    if ctx.on_gpu:
        pinned, pinned_out = host.pin_memory(), torch.empty(n, dtype=torch.float32, pin_memory=True)
        strided = torch.ones(2 * n, dtype=torch.float32, pin_memory=True)[::2]
        cases.update({"h2d-pinned": (lambda: dev_out.copy_(pinned, non_blocking=True), lambda: host_out.copy_(pinned)),
                      "d2h-pinned": (lambda: pinned_out.copy_(dev, non_blocking=True), lambda: pinned_out.copy_(host)),
                      "h2d-strided": (lambda: dev_out.copy_(strided, non_blocking=True),
                                      lambda: host_out.copy_(strided))})  # the gather, host to host
    return cases


def measure_bandwidth(ctx: rocmcheck.ProbeContext) -> None:
    """Record every copy's speed figure (its samples in GB/s, and how they were taken; on a simulated
    GPU with the same copy host to host timed after each, `ProbeContext.time_beside`)."""
    sized = ("gpu" if ctx.gpu_sized else "cpu", ctx.profile)
    nbytes, samples = BYTES[sized], SAMPLES[sized]
    clock = "device events" if ctx.on_gpu else "thread CPU time"
    method = f"{clock} around each copy_ of {nbytes // MIB} MiB into an allocated buffer, 1 warm-up, {samples} samples"
    if ctx.simulated:
        method += ", each followed by the same copy host to host"
    ctx.measure(bandwidth_bytes=nbytes)
    for name, (copy, on_host) in copies(ctx, nbytes).items():
        seconds, host_seconds = ctx.time_beside(copy, on_host, samples)
        ctx.measure_speed(name, "GB/s", gbps(nbytes, seconds), method, gbps(nbytes, host_seconds))


def link_verdict(gpu: PciGpu) -> Tuple[Optional[bool], str]:
    """(True, ...) at the maximum, (False, why) when slower or narrower, (None, why) when the
    link files cannot be read."""
    cur, top = hostgpu.transfer_rate(gpu.link_speed), hostgpu.transfer_rate(gpu.max_link_speed)
    if cur is None or top is None or gpu.link_width is None or gpu.max_link_width is None:
        return None, (f"the PCIe link of {gpu.address} cannot be read (current {gpu.link_speed} x{gpu.link_width}, "
                      f"maximum {gpu.max_link_speed} x{gpu.max_link_width})")
    now, best = hostgpu.describe_link(cur, gpu.link_width), hostgpu.describe_link(top, gpu.max_link_width)
    slower, narrower = cur < top, gpu.link_width < gpu.max_link_width
    if not (slower or narrower):
        return True, f"PCIe link {now} at its maximum"
    why = " and ".join(w for w, bad in (("a lower generation", slower), ("fewer lanes", narrower)) if bad)
    return False, (f"PCIe link degraded: {now} on a {best} link ({why}; a slot, riser, BIOS setting or "
                   f"a link that trained down after a bad seat): every host-device copy is slower")


def device_address(ctx: rocmcheck.ProbeContext, index: int) -> Optional[str]:
    """The PCI address of device `index`: from the run's device facts, else torch's properties."""
    devices = ctx.device_facts.get("devices") or []
    known = next((d.get("pci_address") for d in devices if d and d.get("index") == index), None)
    if known or not ctx.on_gpu:
        return known
    from rocmcheck.host.fingerprint import pci_address

    kind = ctx.device.split(":")[0]
    return pci_address(torchapi.device_properties(f"{kind}:{index}"))


def check_link(ctx: rocmcheck.ProbeContext, index: int) -> None:
    """Compare device `index`'s link with its maximum: measured, `warn` when degraded, `skip` when unreadable."""
    address = device_address(ctx, index)
    if not address:
        ctx.skip(f"the PCI address of device {index} is unknown (torch gives no pci_bus_id)")
    gpu = hostgpu.pci_device(address)
    if gpu is None:
        ctx.skip(f"no GPU function at {address} under {hostgpu.host_root() / 'sys/bus/pci/devices'}")
    ctx.measure(pci_address=gpu.address, link_speed=gpu.link_speed, link_width=gpu.link_width,
                max_link_speed=gpu.max_link_speed, max_link_width=gpu.max_link_width)
    ok, message = link_verdict(gpu)
    if ok is None:
        ctx.skip(message)
    if not ok:
        ctx.warn(message)


@rocmcheck.probe(
    "pcie-link",
    title="PCIe link speed and width against the maximum, with H2D/D2H bandwidth (pageable and pinned)",
    targets="a GPU on a Gen3 or x4 link that passes every correctness check at a fraction of the speed",
    links=LINKS,
    timeout=120,
    gate=True,
)
def pcie_link(ctx: rocmcheck.ProbeContext) -> None:
    measure_bandwidth(ctx)
    if not ctx.on_gpu:
        ctx.skip("no PCIe link to read on the CPU (the bandwidth was measured host to host)")
    if ctx.simulated:
        ctx.skip("a simulated GPU has no PCIe link to read (the bandwidth was measured with its events, host to host)")
    check_link(ctx, torch.device(ctx.device).index or 0)

