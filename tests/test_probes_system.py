"""System probes (attention, allocator, multi-GPU, workers): each detector proven by fault injection.

Runs the real runner (children + watchdog) on the CPU. GPU-only detectors are proven
without a GPU: the allocator probe's body runs on a fake GPU (torch.cuda's memory queries
patched to a healthy allocator) with the real faults installed on top; inventory decisions
are pure functions fed with data. Hang cases use small timeouts so the file stays fast.
"""
from __future__ import annotations

import json
import sys
import textwrap

import pytest

from conftest import by_variant, probe_module
from rocmcheck.errors import ProbeFailure


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/environ")
def test_per_variant_env_is_in_the_childs_initial_environment_and_recorded(rocm_run, tmp_path):
    (tmp_path / "envprobe.py").write_text(textwrap.dedent('''
        import os
        import sys
        import rocmcheck

        @rocmcheck.probe("env-probe", title="t", targets="t", variants={"value": ["a1", "b2"]},
                         env=lambda params: {"ROCMCHECK_TEST_VALUE": params["value"]})
        def env_probe(ctx, value):
            # /proc/self/environ is the environment the process was started with (before any import)
            with open("/proc/self/environ", "rb") as fh:
                initial = dict(e.split(b"=", 1) for e in fh.read().split(b"\\0") if b"=" in e)
            got = initial.get(b"ROCMCHECK_TEST_VALUE", b"").decode()
            assert got == value, f"child started with {got!r}, expected {value!r}"
    '''))
    verdicts = by_variant(rocm_run(probe="env-probe", probes_path=[str(tmp_path)], env={"ROCMCHECK_OTHER": "1"}))
    for value in ("a1", "b2"):
        v = verdicts[f"env-probe[{value}]"]
        assert v["status"] == "pass", v["message"]
        assert v["env"] == {"ROCMCHECK_OTHER": "1", "ROCMCHECK_TEST_VALUE": value}


# --- every probe without faults: pass or an honest skip -------------------------------------


def test_system_probes_pass_or_skip_with_reason_on_cpu(rocm_run):
    verdicts = by_variant(rocm_run(probe="*", keyword="attention or allocator or multigpu or workers", profile="gate"))
    statuses = {v["status"] for v in verdicts.values()}
    assert statuses <= {"pass", "skip"}, {k: (v["status"], v["message"]) for k, v in verdicts.items()
                                          if v["status"] not in ("pass", "skip")}
    for name in ("attention-sdpa[math-fp32]", "attention-sdpa[math-bf16]", "attention-sdpa[flash-fp16]",
                 "attention-model[math]", "multigpu-gloo", "workers-dataloader[2]", "workers-dataloader[0]",
                 "workers-ipc"):
        assert verdicts[name]["status"] == "pass", (name, verdicts[name]["message"])
    for name, v in verdicts.items():
        if v["status"] == "skip":  # every skip says why: no GPU here, or no such kernel in this build
            assert "needs a GPU" in v["message"] or "needs 2 GPUs" in v["message"] or (
                name.startswith("attention") and "attention is not available for" in v["message"]
                or "has no kernel" in v["message"]), (name, v["message"])
    for name in ("allocator[expandable]", "multigpu-peer-copy[direct]", "multigpu-nccl[disabled]"):
        assert verdicts[name]["status"] == "skip"
    model = verdicts["attention-model[math]"]["measurements"]
    assert 2_800_000 < model["parameters"] < 3_000_000 and model["worst_error"] < 1e-4
    cases = verdicts["attention-sdpa[flash-bf16]"]["measurements"]["cases"]
    assert set(cases) == {"d64", "causal", "left-pad", "mha"}  # the gate profile's cases
    ranks = verdicts["multigpu-gloo"]["measurements"]["ranks"]
    assert len(ranks) == 2 and all(c["ok"] for r in ranks.values() for c in r.values())
    assert set(ranks["0"]) == {"all_reduce", "ddp", "fsdp"}


# --- attention ---------------------------------------------------------------------------


def test_backward_hang_under_one_backend_is_hang_for_that_backend_only(rocm_run):
    verdicts = by_variant(rocm_run(probe="attention-*", keyword="fp32 and (math or flash) or model and flash",
                                   inject="sdpa-backward-hang:flash", timeout=5, profile="gate"))
    assert len(verdicts) == 3
    hung = {k for k, v in verdicts.items() if v["status"] == "hang"}
    assert hung == {"attention-sdpa[flash-fp32]", "attention-model[flash]"}
    assert verdicts["attention-sdpa[math-fp32]"]["status"] == "pass"  # same fault, other backend: unaffected
    for name in hung:
        evidence = verdicts[name]["evidence"]
        assert "in backward" in evidence["stack"] and "_engine_run_backward" in evidence["stack"]
        assert evidence["output_tail"].strip().splitlines()[-1].startswith("attention flash")
        assert evidence["output_tail"].strip().endswith("backward")
        assert "attention-backward-hang" in [k["id"] for k in verdicts[name]["known_issues"]]


def test_wrong_output_with_non_contiguous_v_fails_naming_the_case(rocm_run):
    verdicts = by_variant(rocm_run(probe="attention-sdpa", keyword="fp32 and (math or flash)",
                                   inject="sdpa-wrong:flash"))
    assert verdicts["attention-sdpa[math-fp32]"]["status"] == "pass"
    flash = verdicts["attention-sdpa[flash-fp32]"]
    assert flash["status"] == "fail" and "v-strided: out error" in flash["message"]
    assert "d64" not in flash["message"]  # contiguous cases stay right
    assert flash["measurements"]["cases"]["v-strided"]["out"] > 0.01
    assert set(flash["measurements"]["cases"]) == {"d64", "d80", "d128", "causal", "left-pad", "v-strided", "len-77",
                                                   "mha"}


def test_one_case_raising_is_error_naming_it_and_the_other_cases_are_still_compared(rocm_run):
    verdicts = by_variant(rocm_run(probe="attention-sdpa", keyword="fp32 and (math or flash)",
                                   inject="sdpa-case-error:80,sdpa-wrong:flash"))
    frontend = "RuntimeError: cuDNN Frontend error: No execution plans support the graph."
    for verdict in verdicts.values():
        assert verdict["measurements"]["case_errors"] == {"d80": frontend}
        assert set(verdict["measurements"]["cases"]) == {"d64", "d128", "causal", "left-pad", "v-strided", "len-77",
                                                         "mha"}
    math = verdicts["attention-sdpa[math-fp32]"]
    assert math["status"] == "error", math["message"]
    assert math["message"] == f"math fp32: d80 raised, 7 other cases compared; d80: {frontend}"
    flash = verdicts["attention-sdpa[flash-fp32]"]  # a wrong result outranks another case's error
    assert flash["status"] == "fail" and "v-strided: out error" in flash["message"]


def test_a_case_without_kernel_is_skipped_alone_and_every_case_without_one_skips(rocm_run):
    (verdict,) = rocm_run(probe="attention-sdpa", keyword="math and fp32", inject="sdpa-no-kernel:80")
    assert verdict["status"] == "pass", verdict["message"]
    measured = verdict["measurements"]
    assert set(measured["unsupported"]) == {"d80"} and "No available kernel" in measured["unsupported"]["d80"]
    assert "d80" not in measured["cases"] and "d128" in measured["cases"] and measured["case_errors"] == {}
    (verdict,) = rocm_run(probe="attention-sdpa", keyword="math and fp32", inject="sdpa-no-kernel:64", profile="gate")
    assert verdict["status"] == "skip", verdict["message"]  # the gate's cases all have head dim 64
    assert "math attention is not available for fp32" in verdict["message"]
    assert set(verdict["measurements"]["unsupported"]) == {"d64", "causal", "left-pad", "mha"}


def test_nan_in_fully_masked_rows_passes_and_nan_leaking_into_valid_keys_fails(rocm_run):
    # NaN in fully masked rows' out/dq and in the dk/dv of keys no query sees: a convention, not compared
    (verdict,) = rocm_run(probe="attention-sdpa", keyword="math and fp32", inject="sdpa-masked-nan:masked",
                          profile="gate")
    assert verdict["status"] == "pass", verdict["message"]
    (verdict,) = rocm_run(probe="attention-sdpa", keyword="math and fp32", inject="sdpa-masked-nan:leak",
                          profile="gate")
    assert verdict["status"] == "fail"  # every valid key of the padded rows: (64 - 5 + 64 - 19) keys x 4 heads x d 64
    assert verdict["message"] == "math fp32: left-pad: dk has 26624 NaN/Inf; left-pad: dv has 26624 NaN/Inf"


def test_attention_reference_matches_finite_differences():
    import numpy as np

    att = probe_module("attention")
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((1, 1, 5, 3)) for _ in range(4))
    allowed = np.tril(np.ones((5, 5), dtype=bool))
    allowed[0, :] = False  # a fully masked row: output 0, no gradient
    ref = att.attention_reference(q, k, v, allowed, g)
    assert np.all(ref["out"][0, 0, 0] == 0)
    eps = 1e-6
    for name, x in (("dq", q), ("dk", k), ("dv", v)):
        bumped = x.copy()
        bumped[0, 0, 2, 1] += eps
        args = {"dq": (bumped, k, v), "dk": (q, bumped, v), "dv": (q, k, bumped)}[name]
        numeric = ((att.attention_reference(*args, allowed, g)["out"] - ref["out"]) * g).sum() / eps
        assert abs(numeric - ref[name][0, 0, 2, 1]) < 1e-4, name


# --- multi-GPU -----------------------------------------------------------------------------


def test_all_reduce_never_returning_is_hang_with_the_ranks_stacks(rocm_run):
    """The probe declares the hang once its ranks gave up (`ctx.hang`): the verdict comes before
    the watchdog's deadline, by the engine's kill policy, with each rank's stack."""
    (verdict,) = rocm_run(probe="multigpu-gloo", inject="all_reduce-hang", timeout=5)
    assert verdict["status"] == "hang"
    assert verdict["message"].startswith("rank 0 did not finish; rank 1 did not finish; child killed with its ")
    assert verdict["duration_s"] < 5  # the probe did not block until the deadline
    assert verdict["evidence"]["kill_steps"][0] == "SIGUSR1 (stack dump)"
    tail = verdict["evidence"]["output_tail"]
    assert "all_reduce_never_returns" in tail and "check_all_reduce" in tail
    assert "run_distributed" in verdict["evidence"]["stack"]  # where the probe declared it


def test_all_reduce_wrong_sum_fails(rocm_run):
    (verdict,) = rocm_run(probe="multigpu-gloo", inject="all_reduce-wrong")
    assert verdict["status"] == "fail"
    assert "rank 0 all_reduce: 4099 of 4099 sums wrong" in verdict["message"]
    ranks = verdict["measurements"]["ranks"]
    assert ranks["1"]["ddp"]["ok"] and ranks["1"]["fsdp"]["ok"]  # the C++ reducer was not patched


@pytest.mark.children
def test_rank_program_runs_under_torchrun_and_takes_exported_faults(tmp_path):
    """The fleet path: the documented torchrun command, with a fault exported to the ranks."""
    import os
    import subprocess

    script = probe_module("multigpu").__file__
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", script,
           "--backend", "gloo", "--checks", "all_reduce", "--timeout", "60"]
    # TMPDIR: torchrun keeps its logs in a torchelastic_* folder it never removes
    env = {**os.environ, "ROCMCHECK_RANK_FAULTS": "all_reduce-wrong", "TMPDIR": str(tmp_path)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode != 0 and len(lines) == 2
    assert {r["rank"] for r in lines} == {0, 1}
    assert all(not r["checks"]["all_reduce"]["ok"] for r in lines)


def test_inventory_flags_mixed_archs_and_missing_iommu_pt():
    mg = probe_module("multigpu")
    assert mg.inventory_risks(["gfx1100", "gfx1100"], ["iommu=pt"], "rocm") == []
    assert mg.inventory_risks(["gfx1100"], [], "rocm") == []  # one GPU: RCCL not involved
    risks = mg.inventory_risks(["gfx1030", "gfx1201"], ["amdgpu.ppfeaturemask=0xffffffff"], "rocm")
    assert len(risks) == 2 and "mixed architectures gfx1030, gfx1201" in risks[0] and "iommu=pt" in risks[1]
    assert mg.inventory_risks(["sm_90", "sm_90"], [], "cuda") == []
    assert mg.inventory_risks(["gfx942", "gfx942"], None, "rocm") == []  # command line unreadable: no claim


def test_dataparallel_hang_fault_blocks_forward(monkeypatch):
    import threading

    import torch

    from rocmcheck import faults

    monkeypatch.setattr(torch.nn.DataParallel, "forward", torch.nn.DataParallel.forward)
    faults.install(faults.parse("dataparallel-hang"), "multigpu-dataparallel")
    parallel = torch.nn.DataParallel(torch.nn.Linear(2, 2))
    call = threading.Thread(target=parallel, args=(torch.ones(1, 2),), daemon=True)
    call.start()
    call.join(0.5)
    assert call.is_alive()


# --- allocator (GPU-only: the decisions, fed with what the faults produce) -----------------


def test_allocator_variable_follows_the_torch_version():
    alloc = probe_module("allocator")
    assert alloc.read_order("2.4.1+rocm6.0", "rocm") == ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF"]
    assert alloc.read_order("2.9.1+cu128", "cuda") == ["PYTORCH_CUDA_ALLOC_CONF"]  # pytorch #183387
    assert alloc.read_order("2.13.0+rocm7.2", "rocm")[0] == "PYTORCH_ALLOC_CONF"
    assert alloc.variable_to_set("2.10.0") == "PYTORCH_CUDA_ALLOC_CONF"
    assert alloc.variable_to_set("2.13.0+rocm7.2") == "PYTORCH_ALLOC_CONF"
    assert alloc.variant_env({"setting": "default"}) == {}
    assert alloc.variant_env({"setting": "expandable-split128"}) == {
        alloc.variable_to_set(alloc.installed_torch_version()): "expandable_segments:True,max_split_size_mb:128"}
    environ = {"PYTORCH_HIP_ALLOC_CONF": "a:1", "PYTORCH_CUDA_ALLOC_CONF": "b:2"}
    assert alloc.effective_conf(environ, alloc.read_order("2.4.1", "rocm")) == ("PYTORCH_CUDA_ALLOC_CONF", "b:2")
    assert alloc.parse_conf(" Expandable_Segments:True, max_split_size_mb:128") == {
        "expandable_segments": "True", "max_split_size_mb": "128"}


HEALTHY_SNAPSHOT = {"allocator_settings": {"expandable_segments": True, "max_split_size": 128 << 20,
                                           "garbage_collection_threshold": 0.0},
                    "segments": [{"is_expandable": True, "total_size": 2 << 20}]}


def test_allocator_options_not_in_effect_are_named():
    alloc = probe_module("allocator")
    requested = alloc.parse_conf("garbage_collection_threshold:0.8,max_split_size_mb:128")
    settings = {"max_split_size": 2**64 - 1, "garbage_collection_threshold": 0.0}
    problems = alloc.ignored_options(requested, {"allocator_settings": settings}, [])
    assert len(problems) == 2
    assert "max_split_size_mb:128 is not in effect" in problems[0]
    assert "garbage_collection_threshold:0.8 is not in effect" in problems[1]


@pytest.fixture
def fake_gpu(monkeypatch):
    """A healthy 48 MiB 'GPU' for the allocator probe's body on the CPU: torch.cuda's memory
    queries answer like a working allocator with expandable_segments:True in effect."""
    import types

    import torch

    alloc = probe_module("allocator")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: types.SimpleNamespace(total_memory=48 << 20))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: 0)
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda *a, **k: HEALTHY_SNAPSHOT)
    monkeypatch.setattr(torch.cuda, "get_allocator_backend", lambda: "native")
    monkeypatch.setattr(torch, "empty", torch.empty)  # restored after faults that patch it
    for name in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF"):
        monkeypatch.delenv(name, raising=False)

    def run(spec="", setting="expandable"):
        from rocmcheck import ProbeContext, faults

        for name, value in alloc.variant_env({"setting": setting}).items():  # what the runner gives the child
            monkeypatch.setenv(name, value)
        faults.install(faults.parse(spec), "allocator")
        ctx = ProbeContext(device="cpu", profile="gate")
        alloc.allocator(ctx, setting=setting)
        return ctx

    return run


def test_allocator_body_on_a_healthy_allocator_passes_with_the_setting_in_effect(fake_gpu):
    ctx = fake_gpu()
    assert ctx.warnings == [] and ctx.measurements["in_effect"] is True
    assert len(ctx.measurements["slack_mib"]) == 64 and ctx.measurements["canary_mib"] == 3


def test_expandable_segments_ignored_with_the_warning_is_warned(fake_gpu):
    ctx = fake_gpu("expandable-ignored")
    (problem,) = ctx.warnings
    assert problem.startswith("expandable_segments:True is silently ignored")
    for evidence in ("not supported on this platform", "expandable_segments=False", "none of 1 segments"):
        assert evidence in problem
    assert ctx.measurements["in_effect"] is False
    assert "expandable-segments-ignored" in _known_issue_ids("allocator", "warn", problem, backend="rocm")
    assert "expandable-segments-ignored" not in _known_issue_ids("allocator", "warn", problem, backend="cuda")


def test_corrupted_canary_fails(fake_gpu):
    import rocmcheck

    with pytest.raises(rocmcheck.ProbeFailure, match=r"canary corrupted at cycle \d+ under \w+_ALLOC_CONF="
                                                     r"'expandable_segments:True': 786432 of 786432 words "
                                                     r"changed \(786432 now zero\)"):
        fake_gpu("canary-corrupt")


def test_a_changed_word_between_the_sampled_ones_is_caught_by_the_check_at_the_end(fake_gpu, monkeypatch):
    """Each cycle reads one canary word per 512 bytes; a word between them (a fault smaller than any block
    the allocator hands out) is still caught, bit for bit, by the full read after the last cycle."""
    import torch

    import rocmcheck

    alloc = probe_module("allocator")
    assert alloc.CANARY_STRIDE > 1
    made = []

    def empty(*args, **kwargs):  # the canary is the first int32 tensor the probe makes; the 30th makes it change
        out = torch.ones(1).new_empty(*args, **kwargs)
        made.append(out)
        if len(made) == 30:
            made[0][alloc.CANARY_STRIDE + 5] ^= 1
        return out

    monkeypatch.setattr(torch, "empty", empty)
    with pytest.raises(rocmcheck.ProbeFailure, match=r"canary corrupted by the end of 64 cycles under \w+_ALLOC_CONF="
                                                     r"'expandable_segments:True': 1 of 786432 words changed \(0 now "
                                                     r"zero\); first at word 133: "):
        fake_gpu()


def test_reserved_memory_growing_every_cycle_fails(fake_gpu):
    import rocmcheck

    with pytest.raises(rocmcheck.ProbeFailure, match=r"kept growing: .* \(\+138\.0 MiB per cycle\) while the "
                                                     r"step pattern repeats, under "
                                                     r"\w+_ALLOC_CONF='expandable_segments:True'$"):
        fake_gpu("reserved-growth")


GROWTH_ISSUES = {"reserved-growth-expandable-split", "reserved-growth-expandable-split-cuda"}


@pytest.mark.parametrize("setting, backend, torch_version, issues", [
    # allocator[expandable-split128] on an H100, torch 2.11.0+cu130: +47.5 MiB per cycle, while [expandable] and
    # [gc-split128] stayed flat. get_free_block refuses free blocks >= max_split_size inside an expandable segment
    # for smaller requests, so a freed region fenced off by a live small block is never reused (pytorch #123548)
    ("expandable-split128", "cuda", "2.11.0+cu130", {"reserved-growth-expandable-split-cuda"}),
    ("expandable-split128", "cuda", "2.2.2+cu121", set()),  # no evidence before 2.3 (the pair could assert: #119452)
    ("expandable-split128", "rocm", "2.12.0+rocm7.2", {"reserved-growth-expandable-split"}),  # gfx1201, the issue
    ("expandable-split128", "rocm", "2.9.1+rocm6.4", set()),  # ROCm wheels before 2.12 ignore expandable_segments
    ("expandable", "cuda", "2.11.0+cu130", set()),  # either option alone: a growth is some other fault
    ("gc-split128", "rocm", "2.12.0+rocm7.2", set()),
    ("default", "cuda", "2.11.0+cu130", set()),
])
def test_reserved_growth_names_the_upstream_issue_only_under_both_options(fake_gpu, setting, backend, torch_version,
                                                                          issues):
    with pytest.raises(ProbeFailure, match="kept growing") as failure:
        fake_gpu("reserved-growth", setting=setting)
    message = str(failure.value)
    assert message.endswith("under the allocator's defaults" if setting == "default" else
                            f"ALLOC_CONF={probe_module('allocator').SETTINGS[setting]!r}"), message
    assert set(_known_issue_ids("allocator", "fail", message, backend, torch_version)) & GROWTH_ISSUES == issues


@pytest.mark.parametrize("conf, named", [
    ("max_split_size_mb:128,expandable_segments:True", True),  # the order pytorch #123548's reproducer used
    ("expandable_segments: true, max_split_size_mb:512", True),
    ("expandable_segments:False,max_split_size_mb:128", False),
])
def test_the_growth_issue_reads_the_options_in_any_order(conf, named):
    message = (f"reserved-minus-allocated kept growing: peak 8345 -> 9865 MiB over the last 32 cycles (+47.5 MiB per "
               f"cycle) while the step pattern repeats, under PYTORCH_ALLOC_CONF={conf!r}")
    ids = set(_known_issue_ids("allocator", "fail", message, "cuda", "2.11.0+cu130"))
    assert (ids & GROWTH_ISSUES == {"reserved-growth-expandable-split-cuda"}) is named and len(ids & GROWTH_ISSUES) <= 1


def test_out_of_memory_names_the_setting_not_torchs_own_hint(fake_gpu, monkeypatch):
    """torch's OOM text suggests expandable_segments:True; only the setting in effect decides the known issue."""
    import torch

    hint = ("CUDA out of memory. Tried to allocate 300.00 MiB. GPU 0 has a total capacity of 79.19 GiB. If reserved "
            "but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
            "fragmentation.")
    original, calls = torch.empty, []

    def empty(*args, **kwargs):  # the 20th allocation (in cycle 4, after the canary) fails
        calls.append(args)
        if len(calls) == 20:
            raise torch.cuda.OutOfMemoryError(hint)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch, "empty", empty)
    for setting, issues in (("gc-split128", set()), ("expandable-split128", {"reserved-growth-expandable-split-cuda"})):
        calls.clear()
        with pytest.raises(ProbeFailure, match=r"out of memory at cycle \d+ under \w+_ALLOC_CONF='") as failure:
            fake_gpu(setting=setting)
        message = str(failure.value)
        assert hint in message
        assert set(_known_issue_ids("allocator", "fail", message, "cuda", "2.11.0")) & GROWTH_ISSUES == issues


def _known_issue_ids(probe, status, message, backend=None, torch_version=None):
    from rocmcheck.knowledge import known_issues
    from rocmcheck.model import Status, Verdict

    facts = {k: v for k, v in (("backend", backend), ("torch", torch_version)) if v}
    fingerprint = {"device_facts": facts} if facts else {}
    return [k["id"] for k in known_issues.match(Verdict(probe, probe, Status(status), message=message), fingerprint)]


def test_growth_detector_ignores_warm_up_plateaus_and_jitter():
    alloc = probe_module("allocator")
    period = alloc.PERIOD
    steady = [100 + 40 * (i % period) + (300 if i < 2 * period else 0) for i in range(200)]
    assert alloc.unbounded_growth(steady) is None
    creeping = [v + 0.5 * (i // period) for i, v in enumerate(steady)]  # +0.5 MiB per period: noise
    assert alloc.unbounded_growth(creeping) is None
    leak = [v + 20 * i for i, v in enumerate(steady)]
    assert "+20.0 MiB per cycle" in alloc.unbounded_growth(leak)
    stopped = leak[:100] + [leak[99]] * 100  # grew, then flat for many periods
    assert alloc.unbounded_growth(stopped) is None
    assert alloc.unbounded_growth(leak[:5 * period]) is None  # too few periods to tell


# --- workers and IPC ------------------------------------------------------------------------


def test_corrupted_batches_and_lost_ipc_writes_fail(rocm_run):
    verdicts = by_variant(rocm_run(probe="workers-*", inject="loader-corrupt@workers-dataloader,"
                                                            "ipc-corrupt@workers-ipc"))
    loader, ipc = verdicts["workers-dataloader[2]"], verdicts["workers-ipc"]
    assert loader["status"] == "fail" and "batch 0: 1 values differ from the dataset" in loader["message"]
    assert verdicts["workers-dataloader[0]"]["status"] == "pass"  # the fault lives in worker processes only
    assert ipc["status"] == "fail" and "65536 of 65536 elements do not show the child's change" in ipc["message"]


def test_gpu_ipc_on_windows_is_a_skip_not_a_failure(monkeypatch):
    import rocmcheck

    workers = probe_module("workers")
    monkeypatch.setattr(sys, "platform", "win32")
    with pytest.raises(rocmcheck.Skip, match="unsupported on Windows"):
        workers.workers_ipc(rocmcheck.ProbeContext(device="cuda:0"))
