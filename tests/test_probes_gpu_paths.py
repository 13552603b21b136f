"""GPU-only code paths of the probes, proven on the CPU.

Each condition is made for real as far as a CPU allows: an environment variable set in the
probe's child, a torch function patched inside the child to behave (and fail with the text)
as the GPU library does, device facts fed to the deciding function, a clean interpreter in
which rocmcheck is importable only from the source checkout.
"""
from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import by_variant, probe_module

ROOT = Path(__file__).resolve().parent.parent


def write_probe(folder, source):
    """A probe module in `folder` (loaded in the child with --probes-path)."""
    (folder / "gpupaths_probe.py").write_text(textwrap.dedent(source))
    return [str(folder)]


# --- row 2: fp32 pinned in every fp32 check; TF32 forced by the environment is linted ------------

TF32_ENV = {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1", "HIPBLASLT_ALLOW_TF32": "1"}


def test_tf32_forcing_variables_are_warned_and_matched_to_the_known_issue(rocm_run):
    verdicts = by_variant(rocm_run(probe="config-lint", keyword="tf32", env=TF32_ENV))
    lint = verdicts["config-lint[tf32-override]"]
    assert lint["status"] == "warn", lint["message"]
    for name in TF32_ENV:
        assert f"{name}=1" in lint["message"]
    assert "TF32" in lint["message"] and "pins full fp32" in lint["message"]
    assert "tf32-forced-by-environment" in [k["id"] for k in lint["known_issues"]]
    (clean,) = rocm_run(probe="config-lint", keyword="tf32", env={"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "0",
                                                                  "NVIDIA_TF32_OVERRIDE": "0"})
    assert clean["status"] == "pass", clean["message"]


def test_fp32_checks_pin_full_precision_inside_the_child_even_under_the_container_override(rocm_run, tmp_path):
    """NVIDIA's containers set TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1: a child that does not pin reads
    TF32 on from torch itself; the fp32 checks read it back off, in the child and in the ranks."""
    path = write_probe(tmp_path, '''
        import rocmcheck

        @rocmcheck.probe("tf32-unpinned", title="t", targets="t")
        def tf32_unpinned(ctx):
            import torch
            ctx.measure(allow_tf32=torch.backends.cuda.matmul.allow_tf32)
    ''')
    verdicts = by_variant(rocm_run(probe="*", keyword="tf32-unpinned or gemm[fp32-default] or multigpu-gloo or "
                                                     "attention-sdpa[math-fp32] or multigpu-dataparallel",
                                   probes_path=path, env=TF32_ENV, profile="gate"))
    assert verdicts["tf32-unpinned"]["measurements"]["allow_tf32"] is True  # the condition is real here
    pinned = {"matmul_allow_tf32": False, "cudnn_allow_tf32": False, "matmul_fp32_precision": "ieee",
              "cudnn_fp32_precision": "ieee"}
    for name in ("gemm[fp32-default]", "attention-sdpa[math-fp32]"):
        assert verdicts[name]["status"] == "pass", verdicts[name]["message"]
        assert verdicts[name]["measurements"]["fp32_flags"] == pinned, name
    gloo = verdicts["multigpu-gloo"]
    assert gloo["status"] == "pass", gloo["message"]
    assert gloo["measurements"]["rank_fp32_flags"] == {"0": pinned, "1": pinned}
    assert verdicts["multigpu-dataparallel"]["status"] == "skip"  # 2 GPUs: its pin is the same call


# --- row 3: arch in the wheel by the loader's compatibility rule --------------------------------


@pytest.mark.parametrize("arch, arch_list, runs", [
    ("sm_89", ["sm_80", "sm_86", "sm_90"], True),  # L4, L40S, RTX 4090 on the stock wheel
    ("sm_121", ["sm_80", "sm_90", "sm_100", "compute_120"], True),  # DGX Spark through PTX
    ("sm_121", ["sm_80", "sm_90", "sm_100", "sm_120"], True),
    ("sm_103", ["sm_100"], True),
    ("sm_90", ["sm_90a"], True),
    ("sm_103", ["sm_100a"], False),  # arch-specific code runs on its own arch only
    ("sm_75", ["sm_80"], False),
    ("sm_80", ["sm_86"], False),  # a cubin never runs on a lower minor
    ("sm_90", ["sm_80", "compute_100"], False),  # PTX newer than the device
    ("sm_87", ["sm_80", "sm_86"], False),  # Jetson Orin: torch's own table excludes it
    ("sm_87", ["sm_87"], True),
    ("gfx1201", ["gfx1100"], False),
    ("gfx1100", ["gfx900", "gfx1100"], True),
    ("gfx90a", ["gfx90a:xnack-", "gfx942"], True),
    ("gfx1151", ["gfx1150"], False),  # one ISA per code object on ROCm
])
def test_arch_in_wheel_follows_the_loaders_rule(arch, arch_list, runs):
    config = probe_module("config")
    problems, _ = config.check_arch_in_wheel({"devices": [{"arch": arch}], "arch_list": arch_list})
    assert (problems == []) is runs, problems
    if not runs:
        assert arch in problems[0] and "invalid device function" in problems[0]


# --- row 8: gfx versions and HSA_OVERRIDE_GFX_VERSION across majors -------------------------------


@pytest.mark.parametrize("arch, version", [("gfx90a", (9, 0, 10)), ("gfx1201", (12, 0, 1)), ("gfx1100", (11, 0, 0)),
                                           ("gfx942", (9, 4, 2)), ("gfx1151", (11, 5, 1)), ("gfx906", (9, 0, 6)),
                                           ("gfx1030", (10, 3, 0)), ("gfx11-generic", None), ("sm_90", None)])
def test_gfx_version_is_major_digits_then_minor_and_stepping_hex(arch, version):
    config = probe_module("config")
    assert config.gfx_version(arch) == version
    assert config.gfx_major(arch) == (version[0] if version else None)


@pytest.mark.parametrize("kfd_target, override, verdict", [
    (110000, "10.3.0", "fail"),  # gfx1100 told it is gfx1030
    (120001, "11.0.0", "fail"),  # gfx1201 told it is gfx1100
    (90010, "11.0.0", "fail"),  # gfx90a told it is gfx1100
    (100302, "10.3.0", "warn"),  # gfx1032 as gfx1030: the classic same-major override
    (110501, "11.0.0", "warn"),
    (90006, "9.0.6", "warn"),  # its own arch: does nothing
])
def test_an_override_to_another_major_fails_and_within_the_major_warns(kfd_target, override, verdict):
    config = probe_module("config")
    facts = {"env": {"HSA_OVERRIDE_GFX_VERSION": override}, "kfd_gfx_targets": [kfd_target], "arch_list": []}
    problems, risks = config.check_hsa_override(facts)
    assert ("fail" if problems else "warn" if risks else "pass") == verdict, (problems, risks)


# --- row 13: bf16 emulation list -----------------------------------------------------------------


@pytest.mark.parametrize("arch, emulated", [("gfx908", False), ("gfx906", True), ("gfx90a", False)])
def test_mi100_has_bf16_matrix_cores_and_mi50_does_not(monkeypatch, arch, emulated):
    import rocmcheck

    numerics = probe_module("numerics")
    monkeypatch.setattr(numerics, "device_arch", lambda ctx: arch)  # the fact a ROCm GPU would report
    ctx = rocmcheck.ProbeContext(device="cpu")
    numerics.numerics(ctx, check="cast", dtype="bf16")
    assert ctx.measurements["arch"] == arch
    assert any("only emulated" in w for w in ctx.warnings) is emulated


# --- new error signatures --------------------------------------------------------------------------

GPU_ERRORS = {  # case -> (what raises, torch's text, the signature it must give)
    "cublas": ("matmul", "CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, "
                         "n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`", "cuBLAS error"),
    "hipblaslt": ("matmul", "CUDA error: HIPBLAS_STATUS_INTERNAL_ERROR when calling `hipblasLtMatmul( ltHandle, "
                            "computeDesc.descriptor(), &alpha_val, mat1_ptr, Adesc.descriptor(), ...)`",
                  "hipBLAS/hipBLASLt error"),
    "cudnn": ("conv2d", "cuDNN error: CUDNN_STATUS_EXECUTION_FAILED", "cuDNN error"),
    "miopen": ("conv2d", "miopenStatusUnknownError", "MIOpen error"),
    "fragmented": ("oom", "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.98 GiB of "
                          "which 1.19 GiB is free. Of the allocated memory 17.96 GiB is allocated by PyTorch, and "
                          "4.12 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
                          "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
                          "fragmentation.", "allocator fragmentation"),
}


def test_gpu_library_errors_raised_inside_real_probes_are_named_in_the_evidence(rocm_run, tmp_path):
    path = write_probe(tmp_path, f'''
        import rocmcheck

        CASES = {GPU_ERRORS!r}

        @rocmcheck.probe("gpu-library-error", title="t", targets="t", variants={{"case": list(CASES)}})
        def gpu_library_error(ctx, case):
            import torch
            import torch.nn.functional as F
            from rocmcheck import registry

            where, text, _ = CASES[case]

            def fail(*args, **kwargs):
                raise (torch.OutOfMemoryError if where == "oom" else RuntimeError)(text)

            if where == "conv2d":
                F.conv2d = fail
                registry.get("numerics").func(ctx, check="ops", dtype="fp16")
            else:
                torch.matmul = fail
                registry.get("gemm").func(ctx, dtype="fp32", blas="default")
    ''')
    verdicts = by_variant(rocm_run(probe="gpu-library-error", probes_path=path))
    for case, (_, text, signature) in GPU_ERRORS.items():
        v = verdicts[f"gpu-library-error[{case}]"]
        assert v["status"] == "error", (case, v["message"])
        assert any(signature in s for s in v["evidence"]["signatures"]), (case, v["evidence"].get("signatures"))
    fragmented = verdicts["gpu-library-error[fragmented]"]
    assert fragmented["message"].startswith("out of memory")
    assert "oom-fragmentation" in [k["id"] for k in fragmented["known_issues"]]
    assert "allocator fragmentation" not in verdicts["gpu-library-error[cublas]"]["evidence"]["signatures"]


# --- row 7: the ranks' deadline runs from the task's start ----------------------------------------


def test_rank_deadline_runs_from_the_task_start_under_spawn_isolation(rocm_run, tmp_path):
    """Under spawn isolation the next child is started while the current probe runs: by the time
    multigpu-gloo gets its task, its process is seconds old, but its deadline has just begun."""
    path = write_probe(tmp_path, '''
        import time
        import rocmcheck

        @rocmcheck.probe("a-wait", title="t", targets="t")
        def a_wait(ctx):
            time.sleep(4)  # the standby child for the next probe ages meanwhile
    ''')
    timeout = 60
    verdicts = by_variant(rocm_run(probe="*", keyword="a-wait or multigpu-gloo", probes_path=path,
                                   isolation="spawn", timeout=timeout))
    gloo = verdicts["multigpu-gloo"]
    assert gloo["status"] == "pass", gloo["message"]
    assert gloo["measurements"]["rank_timeout_s"] > timeout - probe_module("multigpu").HANG_MARGIN_S - 1.0


# --- row 15: ranks in fresh interpreters from a source checkout ------------------------------------


@pytest.mark.children
@pytest.mark.skipif(not hasattr(os, "fork"), reason="builds a POSIX virtual environment")
def test_fresh_interpreter_ranks_work_from_a_source_checkout_without_rocmcheck_installed(tmp_path):
    """A clean interpreter that has torch but not rocmcheck (not even the editable install); the
    checkout is importable only as the current directory, as when running from a clone."""
    import site
    import venv

    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "torch_only.pth").write_text(site.getsitepackages()[0] + "\n")  # a plain path: no .pth run there
    clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    outside = subprocess.run([str(python), "-c", "import torch, rocmcheck"], cwd=tmp_path, env=clean,
                             capture_output=True, text=True)
    assert "No module named 'rocmcheck'" in outside.stderr  # torch yes, rocmcheck only from the checkout
    driver = textwrap.dedent('''
        import json, sys
        import torch
        from rocmcheck import ProbeContext, registry

        registry.load_all()
        multigpu = sys.modules["rocmcheck.probes.multigpu"]
        torch.cuda.is_initialized = lambda: True  # as after GPU runtime init: ranks are fresh interpreters
        ctx = ProbeContext(timeout=120)
        multigpu.run_distributed(ctx, "gloo")
        print(json.dumps(ctx.measurements["ranks"]))
    ''')
    proc = subprocess.run([str(python), "-c", driver], cwd=ROOT, env=clean, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    ranks = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(ranks) == {"0", "1"} and all(c["ok"] for r in ranks.values() for c in r.values())


# --- row 9: every row of a product checked, not only the sampled ones -------------------------------


def test_a_wrong_tile_away_from_the_sampled_rows_fails_gemm(rocm_run, tmp_path):
    """torch.matmul patched in the child to scale one 16x16 tile by 1 + 1e-3 in rows the element
    check never samples: no zero, no NaN, every sampled row right; only the row sums can see it."""
    path = write_probe(tmp_path, '''
        import numpy as np
        import rocmcheck

        M = 192  # the square shape on the CPU
        SAMPLED = sorted(np.random.default_rng(0).choice(M, 32, replace=False))  # gemm's rows for seed 0
        GAP, START = max((b - a - 1, a + 1) for a, b in zip([-1] + SAMPLED, SAMPLED + [M]))

        @rocmcheck.probe("gemm-wrong-tile", title="t", targets="t")
        def gemm_wrong_tile(ctx):
            import torch
            from rocmcheck import registry

            assert GAP >= 16
            matmul = torch.matmul

            def wrong_tile(a, b, *args, **kwargs):
                out = matmul(a, b, *args, **kwargs)
                if tuple(out.shape) == (M, M):
                    out[START:START + 16, 100:116] *= 1 + 1e-3
                return out

            torch.matmul = wrong_tile
            ctx.measure(tile_rows=[int(START), int(START) + 16])
            registry.get("gemm").func(ctx, dtype="fp32", blas="default")
    ''')
    (v,) = rocm_run(probe="gemm-wrong-tile", probes_path=path)
    m = v["measurements"]
    assert v["status"] == "fail", v["message"]
    assert "square" in v["message"] and "row sums" in v["message"] and "sampled rows" not in v["message"]
    assert m["square_max_err"] <= 1e-5 and m["square_zeros"] == 0  # the sampled check saw nothing
    assert m["square_row_sum_max_err"] > 1e-5
    assert all(m[f"{s}_row_sum_max_err"] <= 1e-5 for s in ("tall-skinny", "split-k", "batched", "odd", "vector"))


# --- row 5: the allocator probe under backend:cudaMallocAsync -------------------------------------

MALLOC_ASYNC_SNAPSHOT_ERROR = (
    "Calling snapshot with backend:cudaMallocAsync is not meaningful. (For backend:native, snapshot returns a "
    "detailed summary of all blocks tracked by the allocator, but the cudaMallocAsync backend does not track "
    "individual blocks.)")  # torch's CUDAMallocAsyncAllocator.cpp


def test_allocator_under_cuda_malloc_async_skips_the_snapshot_and_says_why(rocm_run, tmp_path):
    """In the child, torch.cuda answers as a 48 MiB GPU whose allocator backend is cudaMallocAsync:
    get_allocator_backend() names it and memory._snapshot() raises torch's own error."""
    path = write_probe(tmp_path, f'''
        import types
        import rocmcheck

        @rocmcheck.probe("allocator-async", title="t", targets="t", variants={{"setting": ["default", "expandable"]}})
        def allocator_async(ctx, setting):
            import torch
            from rocmcheck import registry

            def snapshot(*args, **kwargs):
                raise RuntimeError({MALLOC_ASYNC_SNAPSHOT_ERROR!r})

            torch.cuda.get_allocator_backend = lambda: "cudaMallocAsync"
            torch.cuda.memory._snapshot = snapshot
            torch.cuda.get_device_properties = lambda *a: types.SimpleNamespace(total_memory=48 << 20)
            torch.cuda.memory_reserved = torch.cuda.memory_allocated = lambda *a: 0
            registry.get("allocator").func(ctx, setting=setting)
    ''')
    verdicts = by_variant(rocm_run(probe="allocator-async", probes_path=path, profile="gate"))
    default, expandable = verdicts["allocator-async[default]"], verdicts["allocator-async[expandable]"]
    assert default["status"] == "pass", default["message"]
    for v in (default, expandable):
        assert v["measurements"]["allocator_backend"] == "cudaMallocAsync"
        assert "keeps no per-block records" in v["measurements"]["snapshot_skipped"]
        assert len(v["measurements"]["slack_mib"]) == 64  # the canary and growth checks still ran
    assert expandable["status"] == "warn"
    assert "expandable_segments do not apply under backend:cudaMallocAsync" in expandable["message"]
