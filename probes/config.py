"""Configuration lint: settings known to break ROCm training, read from the fingerprint.

No GPU work. Each check is its own variant so the matrix says which one failed.
Facts: docs/failure-catalogue.md §0 (allocator variables), §6 (HSA_OVERRIDE_GFX_VERSION),
§10 (arch missing from the wheel); TF32 forced on by the environment. Libraries that need a
newer torch (torch.int1) are found by importing them: the `library-imports` probe.
"""
import os
import re
import sys

import rocmcheck
from rocmcheck import torchapi
from rocmcheck.host.hostgpu import gfx_from_kfd, gfx_from_override, gfx_major, gfx_version  # noqa: F401 - gfx_version: the tests

CHECKS = ("hsa-override", "arch-in-wheel", "alloc-conf", "python-version", "tf32-override")

LINKS = (
    "https://github.com/ROCm/legacy-rocm-build/issues/5238",
    "https://github.com/ROCm/legacy-rocm-build/issues/5824",
    "https://github.com/pytorch/pytorch/issues/132570",
    "https://github.com/pytorch/pytorch/issues/183387",
    "https://github.com/pytorch/pytorch/pull/167659",
    "https://docs.monai.io/en/stable/precision_accelerating.html",
    "https://github.com/pytorch/pytorch/pull/139869",
)

# Newest Python each torch minor has wheels for (older torch on newer Python breaks the stack).
NEWEST_PYTHON = ((2, 1, (3, 11)), (2, 4, (3, 12)), (2, 8, (3, 13)), (99, 99, (3, 14)))
ALLOC_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")


def check_hsa_override(facts):
    env = facts["env"]
    if "HSA_OVERRIDE_GFX_VERSION" not in env:
        return [], []
    value = env["HSA_OVERRIDE_GFX_VERSION"]
    wanted = gfx_from_override(value)
    if not value.strip():
        return [], ["HSA_OVERRIDE_GFX_VERSION is set but empty (older runtimes fell back to gfx000)"]
    if wanted is None:
        return [f"HSA_OVERRIDE_GFX_VERSION={value!r} is not of the form MAJOR.MINOR.STEP"], []
    physical = [gfx_from_kfd(t) for t in facts["kfd_gfx_targets"]]
    mismatched = [a for a in physical if gfx_major(a) != gfx_major(wanted)]
    if mismatched:
        return [f"HSA_OVERRIDE_GFX_VERSION={value} makes {', '.join(mismatched)} report as {wanted}: a different "
                f"major version (a stale override causes 'Memory access fault ... (nil)')"], []
    if wanted in physical:
        return [], [f"HSA_OVERRIDE_GFX_VERSION={value} names the GPU's own arch {wanted}: it does nothing, unset it"]
    arch_list = facts["arch_list"]
    if physical and all(a in arch_list for a in physical):
        return [], [f"HSA_OVERRIDE_GFX_VERSION={value} is set although the wheel supports {', '.join(physical)} "
                    "natively"]
    return [], [f"HSA_OVERRIDE_GFX_VERSION={value} is set (AMD: meant for internal debugging, not a workaround)"]


def cuda_capability(arch):
    """'sm_89' -> 89, 'compute_120' -> 120, 'sm_90a' -> 90 (arch-specific and family suffixes dropped)."""
    match = re.fullmatch(r"(?:sm|compute)_(\d+)[af]?", arch)
    return int(match.group(1)) if match else None


# Jetson iGPUs run only cubins built for them: torch's DEVICE_REQUIREMENT keeps them out of
# their major's range (https://github.com/pytorch/pytorch/blob/main/torch/cuda/__init__.py)
TEGRA_CAPABILITIES = {53, 62, 72, 87}


def wheel_runs_on(arch, arch_list):
    """Whether a wheel built for `arch_list` has code the GPU `arch` can run.

    CUDA, as the driver loads code: a cubin sm_XY runs on the same major with an equal or
    higher minor (an arch-specific sm_XYa and Tegra parts only on their own), and PTX
    compute_XY is JIT-compiled for any device of capability XY or newer. ROCm: code objects are
    per ISA, so the bare gfx name must be in the list (torch itself checks nothing on ROCm).
    """
    if not arch.startswith("sm_"):
        return arch in {a.split(":")[0] for a in arch_list}
    device = cuda_capability(arch)
    for entry in arch_list:
        code = cuda_capability(entry)
        if code is None:
            continue
        if entry.startswith("compute_") and code <= device:
            return True
        exact_only = entry.endswith("a") or device in TEGRA_CAPABILITIES
        if entry.startswith("sm_") and (code == device or (
                not exact_only and code // 10 == device // 10 and code % 10 <= device % 10)):
            return True
    return False


def gpu_archs(facts):
    return sorted({d["arch"] for d in facts["devices"] if d and d.get("arch")})


def check_arch_in_wheel(facts):
    arch_list = facts["arch_list"]
    missing = [a for a in gpu_archs(facts) if not wheel_runs_on(a, arch_list)]
    if missing:
        return [f"GPU arch {', '.join(missing)} is not in this wheel's arch list ({' '.join(arch_list) or 'empty'}): "
                f"expect 'invalid device function'"], []
    return [], []


def check_alloc_conf(facts):
    env, torch_version, backend = facts["env"], torchapi.version_tuple(facts["torch"]), facts["backend"]
    set_vars = [v for v in ALLOC_VARS if v in env]
    problems = []
    if "PYTORCH_ALLOC_CONF" in env and torch_version < (2, 8):
        problems.append(f"PYTORCH_ALLOC_CONF is ignored by torch {facts['torch']} (read from 2.8 on)")
    if "PYTORCH_ALLOC_CONF" in env and backend == "cuda" and (2, 9) <= torch_version < (2, 11):
        problems.append("PYTORCH_ALLOC_CONF was silently ignored on CUDA builds 2.9-2.10 (pytorch #183387)")
    if "PYTORCH_HIP_ALLOC_CONF" in env:
        if backend == "cuda":
            problems.append("PYTORCH_HIP_ALLOC_CONF is ignored by a CUDA build")
        elif "PYTORCH_CUDA_ALLOC_CONF" in env or ("PYTORCH_ALLOC_CONF" in env and torch_version >= (2, 8)):
            problems.append("PYTORCH_HIP_ALLOC_CONF is ignored: it is read only when PYTORCH_CUDA_ALLOC_CONF "
                            "(and PYTORCH_ALLOC_CONF) are unset")
    if len({env[v] for v in set_vars}) > 1:
        problems.append("allocator variables disagree: " + ", ".join(f"{v}={env[v]}" for v in set_vars))
    return [], problems  # an ignored setting is a known risk (warn), the run itself works


def check_python_version(facts):
    py = torchapi.version_tuple(facts["python"])
    tv = torchapi.version_tuple(facts["torch"])
    newest = next(limit for major, minor, limit in NEWEST_PYTHON if tv <= (major, minor))
    if py > newest:
        return [], [f"Python {facts['python']} is newer than torch {facts['torch']} supports "
                    f"(newest {newest[0]}.{newest[1]}): binary extensions may break"]
    return [], []


TF32_ENV = {
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "makes PyTorch run fp32 matmuls in TF32 (about 1e-3 relative error instead "
                                        "of 1e-7) whatever allow_tf32 says; NVIDIA's PyTorch containers set it",
    "HIPBLASLT_ALLOW_TF32": "lets hipBLASLt run fp32 GEMMs in TF32 (xf32) where torch's TF32 setting asks for it "
                            "(gfx942 and newer; PR #139869)",
}
FALSE_WORDS = ("", "0", "false", "no", "off")


def check_tf32_override(facts):
    """Environment variables that make fp32 GEMMs silently TF32 (a warning: a choice, not a fault)."""
    env = facts["env"]
    risks = [f"{name}={env[name]} {what}: fp32 results lose precision; rocmcheck pins full fp32 in its own checks"
             for name, what in TF32_ENV.items() if env.get(name, "").strip().lower() not in FALSE_WORDS]
    return [], risks


CHECK_FUNCS = {"hsa-override": check_hsa_override, "arch-in-wheel": check_arch_in_wheel,
               "alloc-conf": check_alloc_conf,
               "python-version": check_python_version, "tf32-override": check_tf32_override}


def gather_facts(run_facts):
    """The run's device facts (gathered once per run by the runner), else this child's own."""
    from rocmcheck.host.fingerprint import device_facts, env_vars, kfd_gfx_targets

    dev = run_facts if run_facts.get("torch") else device_facts()
    return {"env": env_vars(), "kfd_gfx_targets": kfd_gfx_targets(),
            "python": sys.version.split()[0], "torch": dev.get("torch"),
            "arch_list": dev.get("arch_list") or [], "devices": dev.get("devices") or [],
            "backend": dev.get("backend")}


@rocmcheck.probe(
    "config-lint",
    per_device=False,
    title="Configuration lint",
    targets="stale HSA_OVERRIDE_GFX_VERSION, arch missing from the wheel, "
            "allocator variable this build ignores, Python too new for torch, TF32 forced on by the environment",
    links=LINKS,
    timeout=60,
    gate=True,
    variants={"check": CHECKS},
)
def config_lint(ctx, check):
    if check == "arch-in-wheel":
        torchapi.cuda_only(ctx.device, "a GPU arch compiled into the wheel")
    facts = gather_facts(ctx.device_facts)
    if check == "arch-in-wheel" and not gpu_archs(facts):
        ctx.skip("no GPU visible: nothing to compare with the wheel's arch list")
    problems, risks = CHECK_FUNCS[check](facts)
    for risk in risks:
        ctx.warn(risk)
    if problems:
        ctx.fail("; ".join(problems))
    ctx.measure(env_checked=sorted(k for k in os.environ if k.startswith(("HSA_", "PYTORCH_"))))
