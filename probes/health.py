"""The GPU's own error counters, read from the driver before and after the run: node health.

A node whose GPU computes right today but is failing must be drained before the job, not after:
uncorrectable memory errors since boot, pages pending retirement, correctable errors or PCIe
replays rising while the gate works, clocks held down at idle. The counters come from files and
libraries (`rocmcheck.host.nodehealth`: amdgpu sysfs, NVML or nvidia-smi), so this probe runs in the
parent (`runs_in="parent"`): no child, no GPU runtime, a few milliseconds per GPU. The counters are read
once before the run's first probe (`baseline`) and again at the end of each GPU's queue.
"""
import rocmcheck
from rocmcheck.host import hostgpu, nodehealth


def device_address(ctx: rocmcheck.ProbeContext) -> str:
    """The PCI address of the device under test, from the run's device facts (torch's pci_bus_id)."""
    index = int(ctx.device.split(":")[1])
    devices = ctx.device_facts.get("devices") or []
    address = next((d.get("pci_address") for d in devices if d and d.get("index") == index), None)
    if not address:
        ctx.skip(f"the PCI address of GPU {index} is unknown (torch gives no pci_bus_id), so its counters cannot "
                 "be found")
    return nodehealth.canonical_address(address)


@rocmcheck.probe(
    "node-health",
    title="The GPU's own error counters: ECC/RAS, retired pages, PCIe replays, throttling at idle",
    targets="a GPU that computes right today but is failing: uncorrectable errors since boot, pages pending "
            "retirement, correctable errors or PCIe replays rising during the run, thermal or power throttling",
    links=("https://docs.kernel.org/gpu/amdgpu/ras.html", "https://docs.kernel.org/gpu/amdgpu/thermal.html",
           "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html"),
    timeout=30,
    gate=True,
    requires={"gpu": True},
    runs_in="parent",
    baseline=nodehealth.snapshot,
)
def node_health(ctx):
    address = device_address(ctx)
    index = int(ctx.device.split(":")[1])
    now = nodehealth.snapshot(only=address).get(address)
    if now is None:
        ctx.skip(f"GPU {index}: no GPU function bound to its driver at {address} under "
                 f"{hostgpu.host_root() / 'sys/bus/pci/devices'}")
    finding = nodehealth.judge((ctx.baseline or {}).get(address), now, index)
    ctx.measure(**finding.measurements)
    if finding.status == "fail":
        ctx.measure(action=finding.action)
        ctx.fail(finding.message)
    if finding.status == "skip":
        ctx.skip(finding.message)
    if finding.status == "warn":
        ctx.warn(finding.message)
    ctx.measure(summary=finding.message)  # a pass says what was read, not just "ok"
