"""Sustained load: a matrix product at the device's best dtype held for the level's budget on every
GPU of the node at once, as a job loads them, while the driver's clocks, power, temperature and
throttle reasons are sampled: DCGM's targeted stress and power tests (r3), RVS `gst` and `iet`.

A GPU can pass every quick check and still fail a job ten minutes in: it heats up and its clocks
fall (a fan, a heat sink, a clogged filter), its power delivery brakes it, its correctable errors
climb under load. The gate's `speed` probe takes seconds and node-health reads the counters at
idle; this probe keeps the GPU busy for its share of the level's budget (`LEVEL_SHARE` of
`rocmcheck.engine.options.LEVEL_BUDGETS_S`, or of `--duration`: level 2 about a minute per GPU)
and judges what happens over that time:

- *throughput over time*: the products are timed in windows of about `WINDOW_S` (device events on
  a GPU, the thread's CPU time on the CPU); the median of the last quarter of the windows below
  `SAG_FRACTION` of the best median of three windows in a row of the first half is a GPU that sags
  under load: fail (the best three, not the first quarter: a GPU that sags early, or a shared host
  that slows the first windows, must not hide the sag in the reference). The windows of the
  second half are the figure `matmul-<dtype>` (`ctx.measure_speed`), which the runner holds against
  the spec table's target and the node's other GPUs of the same model (`rocmcheck.knowledge.speed`);
- *throttling under load*: a thermal or hardware slowdown or a power brake (`nodehealth.THROTTLE_BITS`)
  active in any sample fails; the software power cap does not (a GPU at its power cap under a
  full load is the cap working as designed), nor are clocks below their maximum judged alone;
- *temperature*: any sensor at or above its critical limit in any sample fails;
- *errors*: correctable ECC/RAS errors that rose during the load warn (node-health's readers,
  before and after).

The telemetry is read by node-health's readers (amdgpu sysfs/hwmon, NVML or nvidia-smi) in a thread
beside the work every `SAMPLE_EVERY_S`, so reading it never pauses the GPU. On the CPU and the
simulated GPUs the products are fp32 256^3 (the CPU's), and telemetry is whatever the host root
exposes for the simulated GPU's PCI address (the tests' fixture trees), else not exposed.
"""
from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import rocmcheck
from rocmcheck import torchapi
from rocmcheck.host import nodehealth
from rocmcheck.lazy import torch

LEVEL_SHARE = 0.4  # of each GPU's level-2/3 budget: sdc 0.35, gpu-memory 0.25 take the rest
WINDOW_S = 0.5  # wall seconds of products per timed window
SAMPLE_EVERY_S = 2.0  # telemetry sampling period
SAG_FRACTION = 0.6  # late throughput below this share of the early throughput: sagging under load
N = {"gpu": 8192, "cpu": 256}
# throttle reasons that are not the power cap working as designed
BAD_THROTTLE = tuple(name for name in nodehealth.THROTTLE_BITS.values() if name != "sw_power_cap")

LINKS = (
    "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html",
    "https://github.com/ROCm/ROCmValidationSuite/tree/master/rvs/conf",
    "https://github.com/wilicc/gpu-burn",
    "https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html",
)


@dataclass
class Telemetry:
    """The driver's readings during the load, one `GpuHealth` per sample, read in a thread."""

    read: Callable[[], Optional[nodehealth.GpuHealth]]
    samples: List[nodehealth.GpuHealth] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            health = self.read()
            if health is not None:
                self.samples.append(health)
            self.stop.wait(SAMPLE_EVERY_S)

    def summary(self) -> Dict[str, Any]:
        """Ranges of what was sampled, for the verdict's measurements."""
        def span(values: List[float]) -> Optional[List[float]]:
            return [min(values), max(values)] if values else None

        temps = [t["celsius"] for s in self.samples for t in s.temperatures]
        return {"samples": len(self.samples),
                "clock_mhz": span([s.clock_mhz for s in self.samples if s.clock_mhz is not None]),
                "clock_max_mhz": next((s.clock_max_mhz for s in self.samples if s.clock_max_mhz), None),
                "power_w": span([s.power_w for s in self.samples if s.power_w is not None]),
                "power_cap_w": next((s.power_cap_w for s in self.samples if s.power_cap_w), None),
                "temperature_c": span(temps),
                "throttle": sorted({r for s in self.samples for r in s.throttle})}


def best_dtype(ctx: rocmcheck.ProbeContext) -> str:
    """bf16 where the GPU multiplies it natively, else fp16; fp32 on the CPU and the simulated GPUs
    (torch's CPU products in half precision take a slow path)."""
    if not ctx.gpu_sized:
        return "fp32"
    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


def load(ctx: rocmcheck.ProbeContext, deadline: float) -> Tuple[List[float], List[float]]:
    """Products until `deadline`, timed in windows: each window's TFLOPS, in order, the first left out;
    on a simulated GPU also the host's same products on host tensors, timed by the same clock right
    after each window (its TFLOPS: the speed of the core this GPU's process ran on, at that moment),
    else no host rates."""
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[best_dtype(ctx)]
    n = N["gpu" if ctx.gpu_sized else "cpu"]
    a, b = (torch.randn(n, n, device=ctx.device, dtype=dtype) for _ in range(2))
    out = torch.empty(n, n, device=ctx.device, dtype=dtype)
    host = (a.cpu(), b.cpu(), out.cpu()) if ctx.simulated else None
    clock = torchapi.clock(ctx.device)
    per_window, rates, host_rates = 1, [], []
    clock.seconds(lambda: torch.mm(a, b, out=out))  # warm-up: kernel selection
    while time.time() < deadline:
        began = time.time()
        seconds = clock.seconds(lambda: [torch.mm(a, b, out=out) for _ in range(per_window)])
        rates.append(2 * n ** 3 * per_window / max(seconds, 1e-9) / 1e12)
        if host is not None:
            ha, hb, hout = host
            seconds = clock.seconds(lambda: [torch.mm(ha, hb, out=hout) for _ in range(per_window)])
            host_rates.append(2 * n ** 3 * per_window / max(seconds, 1e-9) / 1e12)
        wall = time.time() - began
        per_window = max(1, round(per_window * WINDOW_S / max(wall, 1e-6)))
    return rates[1:], host_rates[1:]  # the first window sized the others (one product): clocks ramp up in it


def judge(rates: List[float], telemetry: Telemetry, host_rates: Sequence[float] = ()) -> List[str]:
    """What failed under load (see the module): a sag in throughput (with the host's rates, in each
    window's share of the host's same products: a sag of the device's, not of the core it shares),
    a bad throttle reason, a temperature at its critical limit."""
    problems = []
    paced = [r / h if h > 0 else 0.0 for r, h in zip(rates, host_rates)] if host_rates else list(rates)

    def said(x: float, unit: bool = True) -> str:
        return f"{x:.0%} of the host's same products" if host_rates else f"{x:.4g}{' TFLOPS' if unit else ''}"

    if len(paced) >= 6:
        half, quarter = len(paced) // 2, max(1, len(paced) // 4)
        early = max(statistics.median(paced[i:i + 3]) for i in range(half - 2)) if half >= 3 else paced[0]
        late = statistics.median(paced[-quarter:])
        if late < SAG_FRACTION * early:
            problems.append(f"throughput sagged under load: {said(early)} at best in the first half (3 windows' "
                            f"median), {said(late, unit=False)} in the last {quarter} windows "
                            f"({late / early:.0%}; below {SAG_FRACTION:.0%})")
    throttled = {r: sum(r in s.throttle for s in telemetry.samples) for r in BAD_THROTTLE}
    problems += [f"throttle reason {r} active under load in {n} of {len(telemetry.samples)} samples"
                 for r, n in throttled.items() if n]
    hot = [(t["sensor"], t["celsius"], t["critical"]) for s in telemetry.samples for t in s.temperatures
           if t.get("critical") and t["celsius"] >= t["critical"]]
    if hot:
        sensor, celsius, critical = max(hot, key=lambda h: h[1])
        problems.append(f"{sensor} reached {celsius:g} C under load, at or above its critical {critical:g} C "
                        f"(in {len(hot)} readings)")
    return problems


@rocmcheck.probe(
    "sustained-load",
    title="Sustained load: a matrix product held on every GPU at once while clocks, power, temperature and "
          "throttle reasons are sampled",
    targets="a GPU that passes quick checks but sags under a job's load: thermal or power throttling, a "
            "temperature at its limit, throughput falling over time or below its peers, errors rising",
    links=LINKS,
    timeout=60,
    variants=[{"level": 2}, {"level": 3}],
    level_share=LEVEL_SHARE,
)
def sustained_load(ctx: rocmcheck.ProbeContext, level: int) -> None:
    budget = ctx.budget_s or 0.0  # its share of the level's budget (level_share)
    ctx.strict_fp32()
    before = nodehealth.of_device(ctx.device_facts, ctx.device) if ctx.on_gpu else None
    telemetry = Telemetry(lambda: nodehealth.of_device(ctx.device_facts, ctx.device) if ctx.on_gpu else None)
    sampler = threading.Thread(target=telemetry.run, name="rocmcheck-telemetry", daemon=True)
    sampler.start()
    dtype = best_dtype(ctx)
    ctx.progress(f"sustained-load: {dtype} products for {budget:.0f} s")
    try:
        rates, host_rates = load(ctx, ctx.started + budget)
    finally:
        telemetry.stop.set()
        sampler.join(nodehealth.SMI_TIMEOUT_S)
    after = nodehealth.of_device(ctx.device_facts, ctx.device) if ctx.on_gpu else None
    n = N["gpu" if ctx.gpu_sized else "cpu"]
    second = slice(len(rates) // 2 if len(rates) > 1 else 0, None)
    beside = ", each followed by the same on host tensors" if host_rates else ""
    ctx.measure_speed(f"matmul-{dtype}", "TFLOPS", [float(f"{r:.4g}") for r in rates[second]],
                      f"{'device events' if ctx.on_gpu else 'thread CPU time'}, windows of ~{WINDOW_S:g} s of "
                      f"torch.mm {n}x{n}x{n} {dtype}{beside}, the second half of {budget:.0f} s of sustained load",
                      host_samples=[float(f"{r:.4g}") for r in host_rates[second]])
    ctx.measure(level=level, budget_s=round(budget, 3), elapsed_s=round(time.time() - ctx.started, 3),
                windows=len(rates), tflops_first=rates[:3], tflops_last=rates[-3:], telemetry=telemetry.summary(),
                ecc=nodehealth.error_counts_change(before, after) if ctx.on_gpu else "the CPU has no GPU counters")
    problems = judge(rates, telemetry, host_rates)
    if problems:
        ctx.measure(action=f"drain the node; check {ctx.device}'s cooling, power and clocks under load "
                           "(rocm-smi / nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER)")
        ctx.fail(f"{ctx.device} under sustained load: " + "; ".join(problems))
    if before is not None and after is not None:
        rose = nodehealth.rises(before.ce, after.ce)
        if rose:
            ctx.warn("correctable errors rose under load: " +
                     ", ".join(f"{k} {a} -> {b} (+{b - a})" for k, (a, b) in sorted(rose.items())))
