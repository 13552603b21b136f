"""bf16 / fp16 numerics on the device against references computed in numpy.

Targets bf16 conversion or math returning zeros or NaN, fp16 flush-to-zero in backward and
emulated bf16 (docs/failure-catalogue.md §2, §9). Variants are check x dtype:
- cast: float32 -> bf16/fp16 -> float32 on the device, compared bit for bit with numpy's
  round-to-nearest-even (bf16 by bit manipulation in `numeric.bf16_bits`, fp16 by numpy's
  own float16 cast) over +-0, subnormals, powers of two, rounding ties, the largest finite
  values, inf and NaN (any NaN matches any NaN: payloads are the implementation's choice).
  A device that only flushes subnormals to zero gets `warn`; any other difference fails.
- ops: linear, conv2d and matmul in bf16/fp16 against float64 numpy, error scaled by |A|.|B|.
- autocast: forward and backward of a tiny conv+MLP (a VAE-encoder-like block) under
  `torch.autocast`, against a float64 numpy forward and hand-derived backward.
- ftz: backward of x @ w with x holding fp16 subnormals; the weight gradient is exactly
  M * tiny/2, and zero means the backward GEMM flushed subnormals (pytorch #182952).
Zero fractions and NaN counts are measured apart from the error.

`torch.cuda.is_bf16_supported()` is True on every ROCm GPU (PR #80410), so it is never
asked: bf16 variants read the arch (`gcnArchName`) and, on archs where bf16 is only emulated
(gfx9 before gfx908, gfx10xx), end as `warn` when the results are right; wrong results still fail.
MI100 (gfx908, CDNA1) is not among them: its matrix cores have bf16 MFMA instructions
(V_MFMA_F32_*BF16, https://llvm.org/docs/AMDGPU/AMDGPUAsmGFX908.html).
"""
from __future__ import annotations

import contextlib
import re
from typing import Any, Dict, Tuple

import rocmcheck
from rocmcheck import numeric, torchapi
from rocmcheck.lazy import np, torch

DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
AUTOCAST_TOL = {"bfloat16": 5e-2, "float16": 1e-2}  # relative L2 error, docs/failure-catalogue.md §2
EMULATED_BF16 = re.compile(r"gfx(90[0-69c]|10[0-9]{2})$")  # gfx900-906, gfx909, gfx90c, and gfx10xx

LINKS = (
    "https://github.com/pytorch/pytorch/pull/80410",
    "https://github.com/pytorch/pytorch/issues/103973",
    "https://github.com/pytorch/pytorch/issues/182952",
    "https://github.com/ROCm/rocm-libraries/issues/9055",
    "https://github.com/unslothai/unsloth/issues/3385",
)

VARIANTS = [{"check": "cast", "dtype": "bf16"}, {"check": "cast", "dtype": "fp16"},
            {"check": "ops", "dtype": "bf16"}, {"check": "ops", "dtype": "fp16"},
            {"check": "autocast", "dtype": "bf16"}, {"check": "autocast", "dtype": "fp16"},
            {"check": "ftz", "dtype": "fp16"}]
GATE = ({"check": "cast", "dtype": "bf16"}, {"check": "cast", "dtype": "fp16"},
        {"check": "autocast", "dtype": "bf16"}, {"check": "ftz", "dtype": "fp16"})


def device_arch(ctx: rocmcheck.ProbeContext) -> str:
    """'gfx906' from gcnArchName 'gfx906:sramecc+:xnack-'; '' off ROCm."""
    if not ctx.on_gpu:
        return ""
    name = getattr(torchapi.device_properties(ctx.device), "gcnArchName", "") or ""
    return name.split(":")[0] if torch.version.hip else ""


# --- cast ------------------------------------------------------------------------------------


def cast_values() -> Any:
    """float32 values that expose rounding and range faults."""
    f32 = lambda bits: np.array(bits, dtype=np.uint32).view(np.float32)  # noqa: E731
    rng = np.random.default_rng(7)
    upper = rng.integers(0, 1 << 16, 64, dtype=np.uint32) << 16
    m10 = rng.integers(0, 1 << 10, 32, dtype=np.uint32) << 13
    exps = (rng.integers(-14, 16, 32) + 127).astype(np.uint32) << 23
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 3.4028235e38, -3.4028235e38, 65504.0, 65519.996, 65520.0,
               -65504.0, 2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -25, 2.0 ** -15, 2.0 ** -14, 1.0, -1.0,
               1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11]
    parts = [
        np.array(special, dtype=np.float32),
        f32([1, 0x80000001, 0x007FFFFF, 0x00400000, 0x00008000, 0x00018000]),  # float32 subnormals, bf16 ties
        f32([0x7F7F0000, 0x7F7F8000, 0x7F7F7FFF, 0xFF7F8000, 0x7F800001, 0xFFC00000, 0x7FC00001]),  # bf16 max, NaNs
        np.float32(2.0) ** np.arange(-149, 128, dtype=np.float32),  # every power of two
        -(np.float32(2.0) ** np.arange(-149, 128, 7, dtype=np.float32)),
        f32(upper | 0x8000), f32(upper | 0x7FFF), f32(upper | 0x8001),  # bf16 ties, just below, just above
        f32(exps | m10 | 0x1000), f32(exps | m10 | 0x0FFF), f32(exps | m10 | 0x1001),  # fp16 ties
        (rng.standard_normal(256) * 10.0 ** rng.integers(-6, 6, 256)).astype(np.float32),
    ]
    return np.concatenate(parts).astype(np.float32)


def cast_reference(x: Any, dtype: str) -> Tuple[Any, Any]:
    """(bits of x in `dtype`, float32 bits after widening back) by numpy alone."""
    if dtype == "bfloat16":
        low = numeric.bf16_bits(x)
        return low, numeric.bits(numeric.bf16_value(low))
    with np.errstate(over="ignore"):
        low = x.astype(np.float16)
    return numeric.bits(low), numeric.bits(low.astype(np.float32))


def subnormal(b: Any, fmt: str) -> Any:
    """Mask of non-zero bit patterns with a zero exponent field."""
    exp_bits, man_bits = numeric.FLOAT_FORMATS[fmt]
    exp_mask = ((1 << exp_bits) - 1) << man_bits
    return ((b & exp_mask) == 0) & ((b & ((1 << man_bits) - 1)) != 0)


def check_cast(ctx: rocmcheck.ProbeContext, dtype: str) -> None:
    x = cast_values()
    want_low, want_back = cast_reference(x, dtype)
    dev = torch.from_numpy(x).to(ctx.device, copy=True)
    low = dev.to(getattr(torch, dtype))  # the cast under test
    back = low.to(torch.float32)
    got_low, got_back = numeric.tensor_bits(low), numeric.tensor_bits(back)
    tiny = subnormal(numeric.bits(x), "float32") | subnormal(want_low, dtype)
    results = {}
    for group, mask in (("normal", ~tiny), ("subnormal", tiny)):
        results[group] = (numeric.bitwise(got_low[mask], want_low[mask], fmt=dtype, nan_equal=True),
                          numeric.bitwise(got_back[mask], want_back[mask], fmt="float32", nan_equal=True))
    ctx.measure(values=int(x.size), subnormal_values=int(tiny.sum()),
                **{f"{g}_{step}_{k}": v for g, pair in results.items() for step, check in zip(("cast", "widen"), pair)
                   for k, v in check.measurements().items()})
    steps = (f"float32 -> {dtype}", f"{dtype} -> float32")
    for step, check in zip(steps, results["normal"]):
        if not check.ok:
            ctx.fail(f"{step} cast wrong on normal values: {check.summary()} "
                     f"(input {float(x[~tiny][check.first_bad])!r})")
    for step, check in zip(steps, results["subnormal"]):
        if not check.ok and check.zeros == check.mismatches:
            ctx.warn(f"{step} flushes {check.zeros} subnormal values to zero (flush-to-zero mode)")
        elif not check.ok:
            ctx.fail(f"{step} cast wrong on subnormal values: {check.summary()} "
                     f"(input {float(x[tiny][check.first_bad])!r})")


# --- ops -------------------------------------------------------------------------------------


def check_ops(ctx: rocmcheck.ProbeContext, dtype: str) -> None:
    import torch.nn.functional as F

    rng = np.random.default_rng(11)
    data = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in
            (("a", (96, 160)), ("b", (160, 72)), ("x", (32, 160)), ("w", (72, 160)), ("bias", (72,)),
             ("img", (2, 3, 17, 17)), ("k", (8, 3, 3, 3)), ("kb", (8,)))}
    ref = {n: numeric.round_to(v, dtype) for n, v in data.items()}  # what the device holds, exactly
    t = {n: numeric.from_numpy(v, dtype).to(ctx.device) for n, v in data.items()}
    a, ab = ref, {n: np.abs(v) for n, v in ref.items()}
    cases = {
        "matmul": (lambda: torch.matmul(t["a"], t["b"]), a["a"] @ a["b"], ab["a"] @ ab["b"]),
        "linear": (lambda: F.linear(t["x"], t["w"], t["bias"]), a["x"] @ a["w"].T + a["bias"],
                   ab["x"] @ ab["w"].T + ab["bias"]),
        "conv2d": (lambda: F.conv2d(t["img"], t["k"], t["kb"], padding=1),
                   numeric.conv2d_ref(a["img"], a["k"], a["kb"]), numeric.conv2d_ref(ab["img"], ab["k"], ab["kb"])),
    }
    failures = []
    for op, (run, want, scale) in cases.items():
        # the first convolution may search for kernels (MIOpen find, cuDNN autotune): out of the timeout
        with ctx.first_use() if op == "conv2d" else contextlib.nullcontext():
            got = numeric.to_numpy(run())
        check = numeric.close(got, want, dtype, scale=scale)
        ctx.measure(**{f"{op}_{k}": v for k, v in check.measurements().items()})
        if not check.ok:
            failures.append(f"{op}: {check.summary()}")
    if failures:
        ctx.fail(f"{dtype} " + "; ".join(failures))


# --- autocast forward/backward of a conv+MLP -------------------------------------------------------


def encoder_weights() -> Dict[str, Any]:
    rng = np.random.default_rng(5)
    shapes = {"conv.weight": (8, 3, 3, 3), "conv.bias": (8,), "fc1.weight": (64, 512), "fc1.bias": (64,),
              "fc2.weight": (16, 64), "fc2.bias": (16,)}
    fan_in = {"conv": 27, "fc1": 512, "fc2": 64}
    return {n: (rng.standard_normal(s) / np.sqrt(fan_in[n.split(".")[0]])).astype(np.float32)
            for n, s in shapes.items()}


def encoder_ref(x: Any, p: Dict[str, Any]) -> Tuple[Any, Dict[str, Any]]:
    """float64 forward and hand-derived backward of conv(3->8, k3, s2) . SiLU . fc(512->64) . SiLU . fc(64->16),
    loss = mean(z**2); returns (z, gradients by parameter name)."""
    p = {n: v.astype(np.float64) for n, v in p.items()}
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    dsilu = lambda v: sig(v) * (1.0 + v * (1.0 - sig(v)))  # noqa: E731
    cols = numeric.windows(x.astype(np.float64), 3, 2, 1)
    h1 = np.einsum("nchwij,ocij->nohw", cols, p["conv.weight"]) + p["conv.bias"][None, :, None, None]
    f = (h1 * sig(h1)).reshape(x.shape[0], -1)
    h2 = f @ p["fc1.weight"].T + p["fc1.bias"]
    a2 = h2 * sig(h2)
    z = a2 @ p["fc2.weight"].T + p["fc2.bias"]
    dz = 2.0 * z / z.size
    dh2 = (dz @ p["fc2.weight"]) * dsilu(h2)
    dh1 = (dh2 @ p["fc1.weight"]).reshape(h1.shape) * dsilu(h1)
    grads = {"fc2.weight": dz.T @ a2, "fc2.bias": dz.sum(0), "fc1.weight": dh2.T @ f, "fc1.bias": dh2.sum(0),
             "conv.weight": np.einsum("nohw,nchwij->ocij", dh1, cols), "conv.bias": dh1.sum((0, 2, 3))}
    return z, grads


def check_autocast(ctx: rocmcheck.ProbeContext, dtype: str) -> None:
    if ctx.simulated and dtype == "float16":
        ctx.skip("float16 autocast on a simulated GPU runs the CPU's float16 kernels, whose gradients hold zeros "
                 "the float64 reference lacks: a kernel fact only GPU hardware can judge")
    weights = encoder_weights()
    x = np.random.default_rng(6).standard_normal((4, 3, 16, 16)).astype(np.float32)
    want_z, want_grads = encoder_ref(x, weights)
    model = torch.nn.ModuleDict({"conv": torch.nn.Conv2d(3, 8, 3, stride=2, padding=1),
                                 "fc1": torch.nn.Linear(512, 64), "fc2": torch.nn.Linear(64, 16)})
    model.load_state_dict({n: torch.from_numpy(v) for n, v in weights.items()})
    model.to(ctx.device)
    params = dict(model.named_parameters())
    with torch.autocast(torch.device(ctx.device).type, dtype=getattr(torch, dtype)):
        inputs = torch.from_numpy(x).to(ctx.device)
        with ctx.first_use():  # only the model's first call, its convolution (MIOpen find, cuDNN autotune)
            h = model["conv"](inputs)
        z = model["fc2"](torch.nn.functional.silu(model["fc1"](torch.nn.functional.silu(h).flatten(1))))
    loss = z.float().square().mean()
    loss.backward()
    tol = AUTOCAST_TOL[dtype]
    results = [("output", numeric.to_numpy(z), want_z)]
    results += [(f"{n} gradient", numeric.to_numpy(params[n].grad) if params[n].grad is not None
                 else np.zeros_like(g), g) for n, g in want_grads.items()]
    failures = []
    for name, got, want in results:
        err, nans = numeric.rel_l2(got, want), int(np.isnan(got).sum())
        zero_frac, want_zero = float((got == 0).mean()), float((want == 0).mean())
        key = name.replace(" gradient", "_grad").replace(".", "_")
        ctx.measure(**{f"{key}_rel_err": err, f"{key}_nans": nans, f"{key}_zero_fraction": zero_frac})
        if nans or zero_frac > want_zero or not err <= tol:
            failures.append(f"{name}: relative error {err:.3g} (tolerance {tol:g}), {nans} NaN, "
                            f"{zero_frac:.0%} zeros (reference {want_zero:.0%})")
    if failures:
        ctx.fail(f"autocast {dtype} forward/backward wrong: " + "; ".join(failures))


# --- fp16 flush-to-zero in backward -------------------------------------------------------------


def check_ftz(ctx: rocmcheck.ProbeContext) -> None:
    m, k, n = 64, 32, 48
    half_tiny = float(np.finfo(np.float16).tiny) / 2  # 2**-15: a float16 subnormal
    x = numeric.from_numpy(np.full((m, k), half_tiny, dtype=np.float32), "float16").to(ctx.device)
    w_np = np.random.default_rng(3).standard_normal((k, n)).astype(np.float32)
    w = numeric.from_numpy(w_np, "float16").to(ctx.device).requires_grad_()
    y = x @ w
    y.sum().backward()
    expected = np.full((k, n), m * half_tiny)  # exact: a sum of M equal subnormals
    grad = numeric.close(numeric.to_numpy(w.grad), expected, "float16")
    w16 = numeric.round_to(w_np, "float16")
    forward = numeric.close(numeric.to_numpy(y), np.broadcast_to(half_tiny * w16.sum(0), (m, n)), "float16",
                            scale=np.broadcast_to(half_tiny * np.abs(w16).sum(0), (m, n)))
    ctx.measure(**{f"grad_{k_}": v for k_, v in grad.measurements().items()},
                forward_zero_fraction=forward.zero_fraction, forward_max_err=forward.max_err)
    if not grad.ok:
        what = "flushes subnormals to zero (flush-to-zero)" if grad.zeros == grad.bad else "is wrong"
        ctx.fail(f"float16 backward {what}: the weight gradient should be "
                 f"{m} * 2**-15 = {m * half_tiny:g} everywhere; {grad.summary()}")
    if not forward.ok and forward.bad == forward.zeros:
        ctx.warn(f"float16 forward flushes subnormal inputs to zero ({forward.zeros} of {forward.total} outputs zero; "
                 f"MI200 MFMA behaviour, which PyTorch compensates in backward only)")
    elif not forward.ok:
        ctx.fail(f"float16 forward with subnormal inputs wrong: {forward.summary()}")


CHECKS = {"cast": check_cast, "ops": check_ops, "autocast": check_autocast}


@rocmcheck.probe(
    "numerics",
    title="bf16/fp16 casts, linear/conv2d/matmul, autocast and fp16 backward against numpy",
    targets="bf16 casts or math returning zeros/NaN, fp16 flush-to-zero in backward, emulated bf16",
    links=LINKS,
    timeout=120,
    gate=lambda p: p in GATE,
    variants=VARIANTS,
)
def numerics(ctx: rocmcheck.ProbeContext, check: str, dtype: str) -> None:
    name = DTYPES[dtype]
    arch = device_arch(ctx)
    if arch:
        ctx.measure(arch=arch)
    if check == "ftz":
        check_ftz(ctx)
    else:
        CHECKS[check](ctx, name)
    if name == "bfloat16" and EMULATED_BF16.match(arch):
        ctx.warn(f"bfloat16 is only emulated on {arch} (slow; torch.cuda.is_bf16_supported() says True regardless)")

