"""Matrix products on the catalogue's shapes, per dtype and BLAS backend, against float64 numpy.

Targets silent zeros on tall-skinny shapes (hipBLASLt on gfx1201, rocm-libraries #5706),
split-K NaN (bf16 546x2560 @ 2560x9728 on gfx950, rocm-libraries #9055), TF32 accuracy
(PR #188168) and backend-specific breakage (docs/failure-catalogue.md §9). Variants are dtype x
BLAS backend: `default` is whatever torch picked, `cublas` / `cublaslt` force
`torch.backends.cuda.preferred_blas_library` (rocBLAS/hipBLAS and hipBLASLt on ROCm), so the
matrix shows whether the known workaround, another backend, helps. The CPU has one BLAS:
there only the `default` variants run and the others skip with the reason.

Inputs are uniform in [0.25, 1), drawn in float32 and cut to the dtype by numpy (`numeric.truncate_to`: the
device gets them and the reference uses them unchanged), so every product is positive:
an exact zero or a NaN anywhere in the whole output is a hard failure without a full
reference, and the error relative to the float64 reference equals the error relative to
|A|.|B|. The float64 reference covers sampled rows element by element, and every row through
its sum: sum_j (A B)_ij = A_i . (B 1), in O(mk). With positive terms the error of a row sum
is at most the sum of its elements' allowed errors, so the dtype's tolerance applies to it
unchanged: a wrong tile anywhere fails, however few rows are sampled. On the CPU the tall-skinny, split-K,
square and batched shapes are scaled down (measured as `cpu_scaled`) to keep the self-test short.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import rocmcheck
from rocmcheck import numeric, torchapi
from rocmcheck.lazy import np, torch

DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp64": "float64"}
BACKENDS = ("default", "cublas", "cublaslt")
SAMPLED_ROWS = 32

# name -> (batch, m, k, n) on a GPU (gate), in the full profile, and on the CPU. batch 0: a plain 2-D product.
SHAPES: Dict[str, Tuple[Tuple[int, int, int, int], ...]] = {
    "square": ((0, 1024, 1024, 1024), (0, 4096, 4096, 4096), (0, 192, 192, 192)),
    "tall-skinny": ((0, 2_000_000, 4, 4), (0, 9_530_399, 4, 4), (0, 20_000, 4, 4)),
    "split-k": ((0, 546, 2560, 9728), (0, 546, 2560, 9728), (0, 546, 2560, 128)),
    "batched": ((8, 256, 512, 256), (32, 512, 512, 512), (4, 64, 96, 64)),
    "odd": ((0, 127, 253, 61), (0, 1023, 1025, 257), (0, 127, 253, 61)),
    "vector": ((0, 1, 1, 1), (0, 1, 4097, 1), (0, 1, 1, 1)),
}

LINKS = (
    "https://github.com/ROCm/rocm-libraries/issues/5706",
    "https://github.com/ROCm/rocm-libraries/issues/9055",
    "https://github.com/pytorch/pytorch/issues/182952",
    "https://github.com/pytorch/pytorch/pull/188168",
    "https://github.com/pytorch/pytorch/issues/161256",
)


def shape_for(ctx: rocmcheck.ProbeContext, name: str) -> Tuple[int, int, int, int]:
    gpu_gate, gpu_full, cpu = SHAPES[name]
    return (gpu_full if ctx.full else gpu_gate) if ctx.gpu_sized else cpu


def select_backend(ctx: rocmcheck.ProbeContext, blas: str) -> str:
    """Set the requested BLAS backend; skip when it does not apply or torch overrides it."""
    if not ctx.on_gpu:
        if blas != "default":
            ctx.skip("the CPU has one BLAS backend (the default variants run it); "
                     "preferred_blas_library only selects GPU libraries")
        return "cpu (one BLAS backend)"
    if ctx.simulated:  # its products run on the CPU's BLAS
        if blas != "default":
            torchapi.cuda_only(ctx.device, "BLAS library selection (preferred_blas_library)")
        return "cpu (simulated GPU)"
    preferred = torchapi.preferred_blas_library()
    if preferred is None:  # torch < 2.4: GEMMs go to the build's one BLAS, which cannot be named
        if blas != "default":
            torchapi.require("torch.backends.cuda.preferred_blas_library")  # skips, naming the torch that has it
        return "default (this torch cannot name or choose its BLAS)"
    current = preferred()
    if blas == "default":
        return current.name.lower()
    chosen = preferred(blas).name.lower()
    if chosen != blas:
        ctx.skip(f"preferred_blas_library({blas!r}) was overridden to {chosen!r}: that library is not "
                 f"available for this GPU")
    return chosen


def operands(shape: Tuple[int, int, int, int], dtype: str, seed: int) -> Tuple[Any, Any]:
    """A and B as the device will hold them: float32 arrays of values `dtype` holds exactly.

    Drawn in float32 and cut to the dtype in place, where rounding went through float64 copies of each: at a
    GPU's gate sizes (split-K's B has 25M elements) the whole bf16 variant took 0.88-0.91 s with the rounding
    and 0.58-0.61 s without on the project's 2-core CPU, the CPU doing the products too (best of 8; fp16
    0.76 -> 0.66 s, fp32 about the same: issue 39). float32 never draws 1.0, which a float64 draw just
    below it rounds to."""
    batch, m, k, n = shape
    lead = (batch,) if batch else ()
    rng = np.random.default_rng(seed)

    def uniform(shape: Tuple[int, ...]) -> Any:
        x = rng.random(shape, dtype=np.float32)
        x *= np.float32(0.75)
        x += np.float32(0.25)
        return x if dtype == "float64" else numeric.truncate_to(x, dtype)

    return uniform(lead + (m, k)), uniform(lead + (k, n))


def product(ctx: rocmcheck.ProbeContext, a: Any, b: Any, dtype: str) -> Any:
    """A @ B on the device, read back as float64."""
    ta = numeric.from_numpy(a, dtype).to(ctx.device)
    tb = numeric.from_numpy(b, dtype).to(ctx.device)
    out = torch.matmul(ta, tb)
    ctx.synchronize()
    return numeric.to_numpy(out).astype(np.float64)


def references(a: Any, b: Any, rows: Any) -> Tuple[Any, Any]:
    """float64 A @ B on the sampled rows, and every row's sum A (B 1), from the operands as the device
    holds them (each product of two of them is exact in float64)."""
    sampled = a[..., rows, :].astype(np.float64) @ b.astype(np.float64)
    row_sums = (a.astype(np.float64) @ b.sum(-1, dtype=np.float64)[..., None])[..., 0]
    return sampled, row_sums


def check_shape(ctx: rocmcheck.ProbeContext, name: str, dtype: str, seed: int,
                tol_name: str = "") -> Tuple[Any, Any, Any]:
    """Run one shape; returns (CloseCheck on sampled rows, CloseCheck on every row's sum, full-output counts)."""
    shape = shape_for(ctx, name)
    a, b = operands(shape, dtype, seed)
    got = product(ctx, a, b, dtype)
    m = shape[1]
    tol = numeric.TOLERANCE[tol_name or dtype]
    rows = np.sort(np.random.default_rng(seed).choice(m, min(m, SAMPLED_ROWS), replace=False))
    sampled, sums = references(a, b, rows)
    check = numeric.close(got[..., rows, :], sampled, dtype, tol=tol)
    row_sums = numeric.close(got.sum(-1), sums, dtype, tol=tol)
    counts = {"zeros": int(np.count_nonzero(got == 0)), "nans": int(np.count_nonzero(np.isnan(got))),
              "elements": int(got.size)}
    return check, row_sums, counts


def tf32_report(ctx: rocmcheck.ProbeContext) -> Dict[str, Any]:
    """Error of the square fp32 product with TF32 allowed; reported, never failed (PR #188168)."""
    if not ctx.gpu_sized:
        return {"tf32": "n/a on the CPU" if not ctx.on_gpu else "n/a on a simulated GPU (its products run on the CPU)"}
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        check, _, _ = check_shape(ctx, "square", "float32", seed=0, tol_name="tf32")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return {"tf32_max_err": check.max_err, "tf32_within_2e-3": check.ok}


@rocmcheck.probe(
    "gemm",
    title="Matrix products per dtype and BLAS backend on the catalogue's shapes, against float64",
    targets="silent zeros on tall-skinny shapes, split-K NaN, wrong results from one BLAS backend",
    links=LINKS,
    timeout=180,
    # 1.0-2.6 s a gate variant on an H100 and an H200, 3-6 s a full one (bf16 the slowest, every size checked)
    budget=8.0,
    gate=lambda p: p["blas"] == "default" and p["dtype"] != "fp64",
    variants={"dtype": list(DTYPES), "blas": list(BACKENDS)},
)
def gemm(ctx: rocmcheck.ProbeContext, dtype: str, blas: str) -> None:
    name = DTYPES[dtype]
    ctx.strict_fp32()
    backend = select_backend(ctx, blas)
    ctx.measure(blas=backend, cpu_scaled=not ctx.on_gpu)
    failures: List[str] = []
    for seed, shape in enumerate(SHAPES):
        check, row_sums, counts = check_shape(ctx, shape, name, seed)
        label = "x".join(str(d) for d in shape_for(ctx, shape) if d)  # batch x m x k x n, no batch for 2-D
        ctx.measure(**{f"{shape}_shape": label, f"{shape}_max_err": check.max_err,
                       f"{shape}_row_sum_max_err": row_sums.max_err,
                       f"{shape}_zeros": counts["zeros"], f"{shape}_nans": counts["nans"]})
        problems = [f"{counts[k]} {label} of {counts['elements']}" for k, label in (("zeros", "exact zeros"),
                                                                                    ("nans", "NaN")) if counts[k]]
        if not check.ok:
            problems.append(f"sampled rows: {check.summary()}")
        if not row_sums.ok:
            problems.append(f"row sums: {row_sums.summary()}")
        if problems:
            failures.append(f"{shape} {label}: {', '.join(problems)}")
    if name == "float32":
        ctx.measure(**tf32_report(ctx))
    if failures:
        ctx.fail(f"{name} matmul wrong under BLAS {backend}: " + "; ".join(failures))
