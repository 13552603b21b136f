"""Speed: matrix-product throughput per dtype and device-memory bandwidth, measured as figures.

A GPU at half its clocks, a wrong BLAS path or a memory stack running slow computes right and
passes every correctness check; this probe measures how fast it is, and the runner judges the
figures (`rocmcheck.knowledge.speed`): against the device's published figures (a data table with
sources), and, once every GPU ran, against the node's other GPUs of the same model. The probe
itself only measures: it never warns on a number.

Figures (`ctx.measure_speed`, each with its samples and method):
- `matmul-fp32`, `matmul-tf32`, `matmul-fp16`, `matmul-bf16`, `matmul-fp8`, TFLOPS: `torch.mm` into
  a preallocated output (2·m·n·k operations a product) on square shapes, 8192 on a GPU (RVS's `gst`
  targets use 4096-8640), 256 (gate) or 512 (full) on the CPU and the simulated GPUs, whose
  products run on the CPU. fp32 is strict fp32 (TF32 pinned off); tf32 is measured where the
  device has TF32 tensor cores that torch drives (NVIDIA compute capability 8.0 and later); fp8 is
  `torch._scaled_mm` on the fp8 format the device has (e4m3fn on NVIDIA 8.9+, gfx950 and RDNA4,
  e4m3fnuz on gfx94x), with unit scales and a bf16 output; fp16 is left out on the CPU and the
  simulated GPUs, where torch has no fast fp16 path and its samples swing with the host's load;
  bf16 is left out on the CPU itself, whose bf16 speed swung up to 2.4x between healthy runs.
  A dtype not measured is named in `not_measured` with the reason.
- `device-memory-copy` and `device-memory-triad`, GB/s: STREAM's copy (b = a, 2 arrays' bytes
  moved) and triad (a = b + s·c, 3 arrays' bytes) over arrays much larger than the caches: 1 GiB
  each on a GPU (4x MI300X's 256 MiB Infinity Cache, 20x H100's 50 MB L2), at most 1/16 of its
  memory; 64 MiB (gate) or 256 MiB (full) on the CPU and the simulated GPUs, a self-test of the
  measurement there (a simulated GPU's triad runs through torch's CPU fallback, which copies).

Timing: `ctx.time_samples`, device events around each call on a GPU (the thread's CPU time on the CPU),
after untimed warm-up calls (kernel selection, code loading, clocks ramping up), the figure being
the samples' median. The gate takes 5 samples a figure, fewer (at least 3) once a figure has spent
0.15 s, so the gate's speed checks stay within a design budget of 2 s per GPU on a real GPU; the
full profile takes 20 samples within 2 s a figure.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import rocmcheck
from rocmcheck import torchapi
from rocmcheck.lazy import torch

MIB = 1 << 20
MATMUL_N = {("gpu", "gate"): 8192, ("gpu", "full"): 8192, ("cpu", "gate"): 256, ("cpu", "full"): 512}
ARRAY_BYTES = {("gpu", "gate"): 1024 * MIB, ("gpu", "full"): 1024 * MIB,
               ("cpu", "gate"): 64 * MIB, ("cpu", "full"): 256 * MIB}
MEMORY_SHARE = 16  # an array takes at most 1/16 of the GPU's memory (triad holds three)
SAMPLES = {"gate": 5, "full": 20}
WARMUP = {"gate": 3, "full": 3}
BUDGET_S = {"gate": 0.15, "full": 2.0}  # timed seconds a figure may take before it stops at 3 samples
TRIAD_SCALAR = 3.0
DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}

LINKS = (
    "https://github.com/ROCm/ROCmValidationSuite/tree/master/rvs/conf",
    "https://www.cs.virginia.edu/stream/ref.html",
    "https://github.com/ROCm/rocm-systems/issues/6524",
)


def size_key(ctx: rocmcheck.ProbeContext) -> Tuple[str, str]:
    """(gpu or cpu, profile): a simulated GPU computes on the CPU, so it takes the CPU's sizes."""
    return ("gpu" if ctx.gpu_sized else "cpu", ctx.profile)


def device_facts(ctx: rocmcheck.ProbeContext) -> Dict[str, Any]:
    """This GPU's entry in the run's device facts (arch, compute capability), {} on the CPU."""
    index = torch.device(ctx.device).index or 0
    return next((d for d in ctx.device_facts.get("devices") or [] if d and d.get("index") == index), {})


def tf32_reason(ctx: rocmcheck.ProbeContext) -> Optional[str]:
    """Why TF32 is not measured here, or None where the device has it."""
    if not ctx.gpu_sized:
        return "no TF32 tensor cores on the CPU" if not ctx.on_gpu else "a simulated GPU computes on the CPU"
    if torch.version.hip:
        return "ROCm: torch's TF32 setting does not choose a TF32 (xf32) path on every AMD GPU"
    major = torchapi.device_properties(ctx.device).major
    return None if major >= 8 else f"compute capability {major}.x has no TF32 tensor cores (8.0 and later)"


def fp16_reason(ctx: rocmcheck.ProbeContext) -> Optional[str]:
    """Why fp16 is not measured here: on the CPU (and the simulated GPUs, which compute there) torch
    has no fp16 matrix path: its fp16 products ran ~100x slower than fp32 here (30 ms for 256^3),
    long enough for a loaded host's scheduler to split most samples, which then swung 2x between
    runs and GPUs."""
    if ctx.gpu_sized:
        return None
    return "torch multiplies fp16 on the CPU through a slow path whose time swings with the host's load"


def bf16_reason(ctx: rocmcheck.ProbeContext) -> Optional[str]:
    """Why bf16 is not measured on the CPU itself: its bf16 products' speed is the process's (the
    fastest sample of one healthy `rocmcheck run` was 0.58-2.4x the previous one's over 5 pairs on
    a loaded 2-core machine, scripts/speed_noise.py), so against a baseline it could only raise false
    alarms or hide a 2x loss. A simulated GPU's are measured: judged beside the host's same product
    timed with each sample, they held within 22% (rocmcheck.outputs.diff)."""
    if ctx.on_gpu:
        return None
    return "the CPU's bf16 product speed swings up to 2.4x between healthy runs (a baseline could not judge it)"


def fp8_format(ctx: rocmcheck.ProbeContext) -> Tuple[Optional[str], str]:
    """(torch dtype name, why) of the fp8 format this device multiplies in, (None, why not) without one."""
    if not ctx.gpu_sized:
        return None, "no fp8 matrix units on the CPU" if not ctx.on_gpu else "a simulated GPU computes on the CPU"
    if torch.version.hip:
        arch = str(device_facts(ctx).get("arch") or "")
        if arch.startswith("gfx94"):
            return "float8_e4m3fnuz", f"{arch}: fnuz fp8"
        if arch == "gfx950" or arch.startswith("gfx12"):
            return "float8_e4m3fn", f"{arch}: OCP fp8"
        return None, f"{arch or 'this GPU'} has no fp8 matrix instructions (gfx94x, gfx950 and gfx12 do)"
    props = torchapi.device_properties(ctx.device)
    if (props.major, props.minor) >= (8, 9):
        return "float8_e4m3fn", f"compute capability {props.major}.{props.minor}"
    return None, f"compute capability {props.major}.{props.minor} has no fp8 tensor cores (8.9 and later)"


@contextlib.contextmanager
def tf32_on() -> Iterator[None]:
    """TF32 allowed for this block's fp32 products (the new precision flag where torch has it)."""
    matmul = torch.backends.cuda.matmul
    name, value = ("fp32_precision", "tf32") if hasattr(matmul, "fp32_precision") else ("allow_tf32", True)
    before = getattr(matmul, name)
    setattr(matmul, name, value)
    try:
        yield
    finally:
        setattr(matmul, name, before)


def product(ctx: rocmcheck.ProbeContext, dtype: str, n: int, device: Optional[str] = None) -> Callable[[], Any]:
    """One n x n x n product on the device (or on `device`: "cpu" for the host's own), its operands
    and output allocated before any clock."""
    device = device or ctx.device
    if dtype == "fp8":
        fmt = getattr(torch, fp8_format(ctx)[0] or "")
        a = torch.randn(n, n, device=device).to(fmt)
        b = torch.randn(n, n, device=device).to(fmt).t()  # _scaled_mm takes B column-major
        one = torch.ones((), device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    kind = getattr(torch, DTYPES[dtype])
    a, b = (torch.randn(n, n, device=device, dtype=kind) for _ in range(2))
    out = torch.empty(n, n, device=device, dtype=kind)
    return lambda: torch.mm(a, b, out=out)


def clock_name(ctx: rocmcheck.ProbeContext) -> str:
    return "device events" if ctx.on_gpu else "thread CPU time"


def beside_note(ctx: rocmcheck.ProbeContext) -> str:
    """What a figure's method adds where the host's own work is timed beside each sample."""
    return ", each followed by the same on host tensors" if ctx.simulated else ""


def rates(amount: float, seconds: List[float]) -> List[float]:
    """Each sample's rate, `amount` (operations or bytes, in the unit's scale) over its seconds, to 4 digits."""
    return [float(f"{amount / s:.4g}") for s in seconds]


def measure_matmul(ctx: rocmcheck.ProbeContext, dtype: str, n: int) -> None:
    work = product(ctx, dtype, n)
    on_host = (lambda: None) if not ctx.simulated else product(ctx, dtype, n, "cpu")
    with tf32_on() if dtype == "tf32" else contextlib.nullcontext():
        seconds, host_seconds = ctx.time_beside(work, on_host, SAMPLES[ctx.profile], WARMUP[ctx.profile],
                                                BUDGET_S[ctx.profile])
    tflop = 2 * n ** 3 / 1e12
    ctx.measure_speed(f"matmul-{dtype}", "TFLOPS", rates(tflop, seconds),
                      f"{clock_name(ctx)}, {WARMUP[ctx.profile]} warm-up, {len(seconds)} samples of "
                      f"torch.{'_scaled_mm' if dtype == 'fp8' else 'mm'} {n}x{n}x{n} {dtype}{beside_note(ctx)}",
                      rates(tflop, host_seconds))


def array_bytes(ctx: rocmcheck.ProbeContext) -> int:
    wanted = ARRAY_BYTES[size_key(ctx)]
    if not ctx.gpu_sized:
        return wanted
    return min(wanted, torchapi.memory_info(ctx.device)[1] // MEMORY_SHARE // MIB * MIB)


def stream_kernels(device: str, nbytes: int) -> Dict[str, Tuple[Callable[[], Any], int]]:
    """STREAM's copy and triad over three fp32 arrays of `nbytes` on `device`, allocated here,
    before any clock: name -> (the kernel, the arrays' bytes it moves)."""
    a, b, c = (torch.full((nbytes // 4,), 1.0 + i, device=device) for i in range(3))
    return {"copy": (lambda: b.copy_(a), 2), "triad": (lambda: torch.add(b, c, alpha=TRIAD_SCALAR, out=a), 3)}


def measure_memory(ctx: rocmcheck.ProbeContext) -> None:
    """STREAM's copy and triad in fp32 over three arrays of `array_bytes` (on a simulated GPU, the
    same over host arrays timed beside each sample)."""
    nbytes = array_bytes(ctx)
    on_host = stream_kernels("cpu", nbytes) if ctx.simulated else {}
    for name, (work, arrays) in stream_kernels(ctx.device, nbytes).items():
        seconds, host_seconds = ctx.time_beside(work, on_host.get(name, (lambda: None, 0))[0], SAMPLES[ctx.profile],
                                                1, BUDGET_S[ctx.profile])  # 1 warm-up: no kernel to choose
        gigabytes = arrays * nbytes / 1e9
        ctx.measure_speed(f"device-memory-{name}", "GB/s", rates(gigabytes, seconds),
                          f"{clock_name(ctx)}, 1 warm-up, {len(seconds)} samples of STREAM "
                          f"{name} over {arrays} fp32 arrays of {nbytes // MIB} MiB{beside_note(ctx)}",
                          rates(gigabytes, host_seconds))


@rocmcheck.probe(
    "speed",
    title="Matrix-product throughput per dtype and device-memory bandwidth, judged against the spec and the node",
    targets="a GPU at a fraction of its speed (clocks, power, a wrong BLAS path, slow memory) that computes right",
    links=LINKS,
    timeout=180,
    budget={1: 5.0, 2: 20.0},  # up to 5 figures of BUDGET_S timed seconds each, plus warm-up and kernel choice
    gate=True,
)
def speed(ctx: rocmcheck.ProbeContext) -> None:
    ctx.strict_fp32()  # matmul-fp32 is fp32; tf32 is its own figure
    n = MATMUL_N[size_key(ctx)]
    skipped: Dict[str, str] = {}
    fp8, why = fp8_format(ctx)
    reasons = {"tf32": tf32_reason(ctx), "fp16": fp16_reason(ctx), "bf16": bf16_reason(ctx),
               "fp8": None if fp8 else why}
    for dtype in ("fp32", "tf32", "fp16", "bf16", "fp8"):
        reason = reasons.get(dtype)
        if reason:
            skipped[f"matmul-{dtype}"] = reason
            continue
        ctx.progress(f"speed: matmul {dtype} {n}x{n}x{n}")
        measure_matmul(ctx, dtype, n)
    ctx.progress("speed: device memory copy and triad")
    measure_memory(ctx)
    ctx.measure(not_measured=skipped, cpu_scaled=not ctx.gpu_sized)
