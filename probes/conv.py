"""Convolution forward and backward (cuDNN on CUDA, MIOpen on ROCm) against float64 numpy.

Targets convolutions that come out wrong with no error: MIOpen's order-dependent sequence
that left later convolutions about 30% off, and kernels found by a search that compute
wrong (docs/failure-catalogue.md §10). Variants are dtypes: fp32 (TF32 pinned off with
`ctx.strict_fp32()`), fp16, bf16. Each case (3x3, 3x3 stride 2, 1x1, 3x3 in channels-last) runs
`conv2d` forward and backward (`y.backward(g)` with a fixed upstream gradient) twice: the
first forward call, where MIOpen or cuDNN searches for kernels, inside `ctx.first_use()` (its
time is `first_use_s`, kept out of the timeout), then a second one that uses what the search chose,
timed as `check_s` with the comparisons. Both are compared, output and the gradients of input,
weight and bias, with the dtype's tolerance of `numeric.close`. Inputs and the upstream gradient
are uniform in [0.25, 1), as in gemm: every sum has positive terms, so an exact zero or a NaN
anywhere is a fault (never a cancellation), and the error relative to the float64 value is
the error relative to the problem's scale.

The reference is numpy float64 by explicit im2col (`numeric.conv2d_ref`, and
`numeric.conv2d_backward_ref`: the weight gradient from the same windows, the input gradient
scattered back), from the inputs rounded to the dtype by numpy: no torch convolution is
involved. Full profile; on the CPU it runs for real with smaller shapes as a self-test.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Dict, List

import rocmcheck
from rocmcheck import numeric
from rocmcheck.lazy import np, torch

DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
# name -> (kernel, stride, padding, channels_last)
CASES = {"k3": (3, 1, 1, False), "k3-stride2": (3, 2, 1, False), "k1": (1, 1, 0, False),
         "k3-channels-last": (3, 1, 1, True)}
SHAPES = {"gpu": (8, 32, 28, 28, 64), "cpu": (2, 4, 10, 10, 8)}  # (N, C, H, W, output channels)
PARTS = ("output", "grad_input", "grad_weight", "grad_bias")

LINKS = (
    "https://github.com/ROCm/legacy-rocm-build/issues/4729",
    "https://rocm.docs.amd.com/projects/MIOpen/en/latest/how-to/find-and-immediate.html",
)


def references(data: Dict[str, Any], dtype: str, stride: int, pad: int) -> Dict[str, Any]:
    """part -> float64 reference, from the inputs as the device holds them (rounded by numpy)."""
    r = {n: numeric.round_to(v, dtype) for n, v in data.items()}
    want = (numeric.conv2d_ref(r["x"], r["w"], r["b"], stride, pad),
            *numeric.conv2d_backward_ref(r["x"], r["w"], r["g"], stride, pad))
    return dict(zip(PARTS, want))


def run_conv(ctx: rocmcheck.ProbeContext, data: Dict[str, Any], dtype: str, stride: int, pad: int,
             channels_last: bool, first: bool = False) -> Dict[str, Any]:
    """One forward and backward on the device; part -> result as a numpy array. `first`: the
    forward is the first call, where the kernel search runs (`ctx.first_use()`)."""
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    t = {n: numeric.from_numpy(v, dtype).to(ctx.device) for n, v in data.items()}
    x = t["x"].to(memory_format=fmt).requires_grad_()
    w = t["w"].to(memory_format=fmt).requires_grad_()
    b = t["b"].requires_grad_()
    with ctx.first_use() if first else contextlib.nullcontext():
        y = torch.nn.functional.conv2d(x, w, b, stride=stride, padding=pad)
    y.backward(t["g"].to(memory_format=fmt))
    ctx.synchronize()
    return dict(zip(PARTS, (numeric.to_numpy(v) for v in (y, x.grad, w.grad, b.grad))))


@rocmcheck.probe(
    "conv",
    title="conv2d forward and backward (cuDNN/MIOpen) in fp32/fp16/bf16 against float64 numpy im2col",
    targets="convolutions wrong with no error (MIOpen's order-dependent ~30% error, a bad kernel found by search)",
    links=LINKS,
    timeout=120,
    variants={"dtype": list(DTYPES)},
)
def conv(ctx: rocmcheck.ProbeContext, dtype: str) -> None:
    name = DTYPES[dtype]
    if name == "float32":
        ctx.strict_fp32()
    n, c, h, w, o = SHAPES["gpu" if ctx.gpu_sized else "cpu"]
    rng = np.random.default_rng(13)
    failures: List[str] = []
    errors: Dict[str, float] = {}
    check_s = 0.0
    for case, (k, stride, pad, channels_last) in CASES.items():
        ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        shapes = {"x": (n, c, h, w), "w": (o, c, k, k), "b": (o,), "g": (n, o, ho, wo)}
        data = {key: rng.uniform(0.25, 1.0, shape).astype(np.float32) for key, shape in shapes.items()}
        refs = references(data, name, stride, pad)
        first = run_conv(ctx, data, name, stride, pad, channels_last, first=True)
        start = time.perf_counter()
        runs = {"first call": first, "second call": run_conv(ctx, data, name, stride, pad, channels_last)}
        for which, got in runs.items():
            for part, want in refs.items():
                check = numeric.close(got[part], want, name)
                key = f"{case} {part}"
                errors[key] = max(errors.get(key, 0.0), check.max_err)
                if not check.ok:
                    failures.append(f"{case} {part} ({which}): {check.summary()}")
        check_s += time.perf_counter() - start
    ctx.measure(max_err=errors, tol=numeric.TOLERANCE[name], shape=[n, c, h, w, o], check_s=round(check_s, 4))
    if failures:
        ctx.fail(f"conv2d {name}: {len(failures)} wrong; first: {failures[0]}")
