"""Data-path probes (transfer, numerics, gemm, training): every detector proven by fault injection.

Each run goes through the real runner (children + watchdog) on the CPU. Runs are batched:
faults scoped to different copy kinds or probes share one run, so the file stays fast.
"""
from __future__ import annotations

import fnmatch
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import by_variant, probe_module
from rocmcheck.testing import Status, run_inline

OUR_PROBES = ("transfer", "numerics", "gemm", "training")
OURS = "(transfer[ or numerics[ or gemm[ or training[) and not hf-training["  # -k expression: our variants only
TRANSFER_METHODS = ("to", "cuda", "to-nonblocking", "pinned", "tensor", "as-tensor", "copy_", "side-stream", "d2h",
                    "d2d")
ROOT = Path(__file__).resolve().parent.parent


def status(verdicts, variant):
    return verdicts[variant]["status"], verdicts[variant]["message"]


def test_every_variant_passes_without_faults_or_skips_with_its_reason(rocm_run):
    verdicts = by_variant(rocm_run(probe="*", keyword=OURS, profile="gate"))
    assert len(verdicts) == 20 + 7 + 12 + 5
    for variant, v in verdicts.items():
        if variant.startswith("gemm[") and not variant.endswith("-default]"):
            assert v["status"] == "skip" and "one BLAS backend" in v["message"], variant
        elif variant == "training[lora]" and importlib.util.find_spec("peft") is None:
            assert v["status"] == "skip" and "peft" in v["message"]
        else:
            assert v["status"] == "pass", (variant, v["message"])
    transfer = verdicts["transfer[to-isolated]"]["measurements"]
    assert transfer["copies"] == 32 and transfer["bfloat16_mismatches"] == 0
    assert verdicts["gemm[fp32-default]"]["measurements"]["blas"].startswith("cpu")
    assert verdicts["training[bf16-autocast]"]["measurements"]["grad_rel_err"] > 0  # a real comparison ran


def test_one_broken_copy_kind_fails_only_its_method(rocm_run):
    """Zeros from torch.tensor, stale data from as_tensor, one flipped bit from copy_: each fails its
    own method's variants (both contexts) and the five other methods pass; the gate's every-method
    variant fails naming those three methods alone, with their counts."""
    verdicts = by_variant(rocm_run(probe="transfer", profile="gate", gate_only=None,
                                   inject="copy-zeros:tensor,copy-stale:as_tensor,copy-flip:copy_"))
    every = verdicts.pop("transfer[every-training]")
    assert every["status"] == "fail" and every["message"].startswith(
        "3 of 9 methods wrong in a training context (tensor 32 of 32 copies, as-tensor 24 of 32 copies, "
        "copy_ 32 of 32 copies); first: tensor: float32 4 KiB contiguous repeat 1: 1024 of 1024 elements differ "
        "(1024 zeros, 0 NaN)"), every["message"]
    m = every["measurements"]
    assert (m["copies"], m["methods"], m["bad_methods"]) == (9 * 32, 9, 3)
    assert (m["tensor_bad_copies"], m["as-tensor_bad_copies"], m["copy__bad_copies"]) == (32, 24, 32)
    assert "to_bad_copies" not in m
    broken = {"tensor", "as-tensor", "copy_"}
    for method in TRANSFER_METHODS:
        for context in ("isolated", "training"):
            st, message = status(verdicts, f"transfer[{method}-{context}]")
            assert st == ("fail" if method in broken else "pass"), (method, context, message)
    zeros = verdicts["transfer[tensor-isolated]"]
    assert "host-to-device" in zeros["message"]
    assert all(zeros["measurements"][f"{d}_zeros"] == zeros["measurements"][f"{d}_mismatches"] > 0
               for d in ("float32", "float16", "bfloat16", "int32"))
    stale = verdicts["transfer[as-tensor-training]"]["measurements"]
    assert stale["float32_bad_copies"] == stale["float32_copies"] - 2  # all but the first copy of each size
    assert stale["float32_zeros"] == 0 and stale["float32_nans"] == 0
    flip = verdicts["transfer[copy_-isolated]"]["measurements"]
    assert flip["int32_mismatches"] == flip["int32_bad_copies"] == flip["int32_copies"]  # one element per copy
    assert "1 of 1024 elements differ" in verdicts["transfer[copy_-isolated]"]["message"]


def test_a_copy_that_writes_into_its_source_fails_though_every_copy_matches_it(monkeypatch):
    """Each copy is compared with its source, and the source with its pattern after its last copy: a copy
    that wrote into the source it only had to read (here `cuda`, after a right copy) leaves the methods after
    it matching a wrong source, and only the source's own check sees it."""
    transfer = probe_module("transfer")
    send = transfer.Sender.send

    def clobbering(self, staged, dtype):
        out = send(self, staged, dtype)
        if self.method == "cuda":  # on the CPU the staged source is the host source's memory
            import torch

            staged.view(-1)[:1].view(torch.uint8)[:1].bitwise_xor_(1)
        return out

    monkeypatch.setattr(transfer.Sender, "send", clobbering)
    v = run_inline("transfer", method="every", context="training")
    assert v.status is Status.FAIL, v.message
    assert v.message.startswith("the host source of float32 4 KiB contiguous repeat 1 changed while to, cuda, "
                                "to-nonblocking, pinned, tensor, as-tensor, copy_, side-stream, d2h copied it: "
                                "1 of 1024 elements differ"), v.message


def test_a_copy_that_raises_in_the_every_method_variant_is_named_by_its_last_output_line(monkeypatch, capsys):
    """One variant sends by nine methods: the error of the one that raised (or hung) names it in the output's
    last line, which the verdict's evidence keeps."""
    transfer = probe_module("transfer")
    send = transfer.Sender.send

    def failing(self, staged, dtype):
        if self.method == "pinned":
            raise RuntimeError("HIP error: an illegal memory access was encountered")
        return send(self, staged, dtype)

    monkeypatch.setattr(transfer.Sender, "send", failing)
    v = run_inline("transfer", method="every", context="training")
    assert v.status is Status.ERROR and "illegal memory access" in v.message, v.message
    assert capsys.readouterr().out.splitlines()[-1] == "transfer pinned: float32 4 KiB contiguous repeat 1"


def test_device_to_host_and_device_to_device_copies_fail_under_their_faults(rocm_run):
    """Zeros on reads back to the host, one flipped bit then stale data on copies within the device:
    the d2h and d2d variants fail, each attributed to its own direction; host-to-device methods pass."""
    verdicts = by_variant(rocm_run(probe="transfer", keyword="isolated", profile="gate",
                                   inject="copy-zeros:d2h,copy-flip:d2d"))
    for method in TRANSFER_METHODS:
        st, message = status(verdicts, f"transfer[{method}-isolated]")
        assert st == ("fail" if method in ("d2h", "d2d") else "pass"), (method, message)
    d2h, d2d = verdicts["transfer[d2h-isolated]"], verdicts["transfer[d2d-isolated]"]
    assert "; device-to-host (the device holds the right data" in d2h["message"]
    assert d2h["measurements"]["int32_zeros"] == d2h["measurements"]["int32_mismatches"] == 2 * 2 * (1024 + 262144)
    assert "; device-to-device (the source on the device is right" in d2d["message"]
    assert d2d["measurements"]["float16_bad_copies"] == d2d["measurements"]["float16_copies"] == 8
    (stale,) = rocm_run(probe="transfer", keyword="d2d-isolated", profile="gate", inject="copy-stale:d2d")
    m = stale["measurements"]
    # all but the first of each size
    assert stale["status"] == "fail" and m["float32_bad_copies"] == m["float32_copies"] - 2
    assert m["float32_zeros"] == 0


def test_low_precision_faults_fail_their_checks(rocm_run):
    """bf16 casts to zero, fp16 flush-to-zero in backward, zero gradients after autocast."""
    verdicts = by_variant(rocm_run(probe="*", keyword="(numerics[ or training[) and not hf-training",  # own test
                                   profile="gate", inject="bf16-zeros,fp16-ftz,grad-zeros"))
    expected_fail = {
        "numerics[cast-bf16]": "bfloat16 cast wrong on normal values",
        "numerics[autocast-bf16]": "100% zeros",
        "numerics[autocast-fp16]": "100% zeros",
        "numerics[ftz-fp16]": "flush-to-zero",
        "training[bf16-autocast]": "only zero gradients",
        "training[fp16-scaler]": "only zero gradients",
    }
    for variant, v in verdicts.items():
        if variant in expected_fail:
            assert v["status"] == "fail" and expected_fail[variant] in v["message"], (variant, v["message"])
        else:
            assert v["status"] in ("pass", "skip"), (variant, v["message"])
    assert verdicts["training[plain]"]["status"] == verdicts["training[checkpoint]"]["status"] == "pass"
    assert verdicts["numerics[cast-bf16]"]["measurements"]["normal_cast_zeros"] > 800


def test_nan_in_a_matmul_fails_gemm_and_numerics(rocm_run):
    verdicts = by_variant(rocm_run(probe="*", keyword="gemm[ and default or numerics[ops", profile="gate",
                                   inject="matmul-nan"))
    assert len(verdicts) == 6
    for variant, v in verdicts.items():
        assert v["status"] == "fail" and "NaN" in v["message"], (variant, v["message"])
    assert verdicts["gemm[bf16-default]"]["measurements"]["split-k_nans"] == 1


def test_excess_zeros_in_a_product_fail_gemm():
    v = run_inline("gemm", dtype="fp32", blas="default", inject="matmul-zeros")  # in this process: no child needed
    assert v.status is Status.FAIL and "exact zeros" in v.message
    m = v.measurements
    assert m["tall-skinny_zeros"] == 40000 and m["square_zeros"] == 192 * 192 // 2


def test_excess_zeros_in_a_product_fail_numerics_ops_however_near_zero_the_rest_may_round():
    """Half of every product zeroed: matmul and linear fail on the zeros outside the tolerance (most of the
    half; the few whose reference is within the tolerance of zero are not counted), conv2d stays clean."""
    for variant, (dtype, elements) in {"numerics[ops-bf16]": ("bfloat16", 6912),
                                       "numerics[ops-fp16]": ("float16", 6912)}.items():
        v = run_inline("numerics", check="ops", dtype=variant.split("-")[1].rstrip("]"), inject="matmul-zeros")
        m = v.measurements
        assert v.status is Status.FAIL and v.message.startswith(f"{dtype} matmul: "), v.message
        assert "unexpected zeros" in v.message and "linear: " in v.message and "conv2d" not in v.message
        assert m["matmul_zero_fraction"] == m["linear_zero_fraction"] == 0.5
        assert m["matmul_bad"] == m["matmul_zeros"] > 0.8 * (elements // 2) and m["matmul_first_bad"] >= elements // 2
        assert m["linear_bad"] == m["linear_zeros"] > 0 and m["conv2d_bad"] == m["conv2d_zeros"] == 0


@pytest.mark.children
def test_list_shows_every_variant_with_its_profile():
    out = subprocess.run([sys.executable, "-m", "rocmcheck", "list", *(f"--probe={p}" for p in OUR_PROBES)],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines() if line.split() and "[" in line.split()[0]}
    assert len(rows) == 45
    for method in TRANSFER_METHODS:
        assert (rows[f"transfer[{method}-training]"], rows[f"transfer[{method}-isolated]"]) == ("full", "full")
    assert rows["transfer[every-training]"] == "gate-only"
    assert {v for v, p in rows.items() if p == "gate" and not v.startswith("transfer")} == {
        "numerics[cast-bf16]", "numerics[cast-fp16]", "numerics[autocast-bf16]", "numerics[ftz-fp16]",
        "gemm[fp32-default]", "gemm[fp16-default]", "gemm[bf16-default]", "training[plain]", "training[bf16-autocast]"}


def test_known_issues_name_our_probes_and_match_their_failures():
    from rocmcheck import registry
    from rocmcheck.knowledge import known_issues
    from rocmcheck.model import Status, Verdict

    data = json.loads((ROOT / "rocmcheck/knowledge/data/known_issues/datapath.json").read_text())
    specs = registry.load_all()
    for entry in data["issues"]:
        assert entry["probe"] in OUR_PROBES and entry["links"] and entry["workaround"], entry["id"]
        if "variant" in entry:
            variants = [v.id for v in specs[entry["probe"]].expand()]
            assert any(fnmatch.fnmatchcase(v, entry["variant"]) for v in variants), entry["id"]

    def matched(probe, variant, verdict_status, message, arch, backend="rocm"):
        verdict = Verdict(probe=probe, variant=variant, status=Status(verdict_status), message=message)
        fingerprint = {"device": {"arch": arch}, "host": {"system": "Linux"},
                       "device_facts": {"backend": backend, "torch": "2.9.1", "rocm": "6.4.2"}}
        return {issue["id"] for issue in known_issues.match(verdict, fingerprint)}

    assert "fp16-ftz-backward-gfx90a" in matched(
        "numerics", "numerics[ftz-fp16]", "fail", "float16 backward flushes subnormals to zero (flush-to-zero)",
        "gfx90a")
    assert {"h2d-nan-on-repeat-gfx1030", "h2d-wrong-data-sdma"} <= matched(
        "transfer", "transfer[to-isolated]", "fail", "to: 3 of 48 copies wrong; first: ... 2 NaN ...; host-to-device",
        "gfx1030")
    assert "bf16-emulated" in matched("numerics", "numerics[cast-bf16]", "warn", "bfloat16 is only emulated on gfx906",
                                      "gfx906")
    assert not matched("transfer", "transfer[to-isolated]", "fail", "host-to-device", "sm_90", backend="cuda")


@pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="peft is not installed")
def test_lora_trains_adapters_and_keeps_the_base_frozen(rocm_run):
    (v,) = rocm_run(probe="training", keyword="lora", profile="gate")
    assert v["status"] == "pass", v["message"]
    assert 0 < v["measurements"]["trainable"] < v["measurements"]["params"]


def test_device_checksum_tells_the_failing_direction():
    import torch

    from rocmcheck import numeric

    origin = probe_module("transfer").origin
    pattern = numeric.Pattern(3_000_000, "bfloat16")
    want = pattern.values(1)
    assert origin(torch.from_numpy(want.copy()).view(torch.bfloat16), pattern, 1, 2_999_999).startswith(
        "device-to-host")
    bad = want.copy()
    bad[2_999_999] ^= 1
    verdict = origin(torch.from_numpy(bad).view(torch.bfloat16), pattern, 1, 2_999_999)
    assert verdict.startswith("host-to-device") and "elements 1951424..2999999" in verdict  # a bounded window


@pytest.mark.parametrize("flush_all", [False, True])
def test_a_cast_that_only_flushes_subnormals_warns_and_any_other_error_fails(monkeypatch, flush_all):
    import torch

    import rocmcheck

    numerics = probe_module("numerics")
    tiny = torch.finfo(torch.float32).tiny
    original = torch.Tensor.to

    def flushing_to(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if out.dtype == torch.bfloat16:
            wide = original(out, torch.float32)
            keep = wide.abs() >= (1e-3 if flush_all else tiny)  # multiplying keeps the sign of the zeros
            out = original(wide * keep, torch.bfloat16)
        return out

    monkeypatch.setattr(torch.Tensor, "to", flushing_to)
    ctx = rocmcheck.ProbeContext(device="cpu")
    if flush_all:
        with pytest.raises(rocmcheck.ProbeFailure, match="normal values"):
            numerics.check_cast(ctx, "bfloat16")
    else:
        numerics.check_cast(ctx, "bfloat16")
        assert ctx.warnings and "flushes" in ctx.warnings[0] and "subnormal" in ctx.warnings[0]
        assert ctx.measurements["subnormal_cast_zeros"] == ctx.measurements["subnormal_cast_mismatches"] > 0


@pytest.mark.parametrize("arch, emulated", [("gfx906", True), ("gfx908", False), ("gfx90c", True), ("gfx1030", True),
                                            ("gfx1010", True), ("gfx90a", False), ("gfx942", False),
                                            ("gfx1100", False), ("gfx1151", False), ("gfx950", False), ("", False)])
def test_bf16_emulation_is_read_from_the_arch(arch, emulated):
    assert bool(probe_module("numerics").EMULATED_BF16.match(arch)) is emulated


def cgroup_tree(root, v2=None, v1=None, path="/job/step"):
    """A fixture host root: /proc/self/cgroup naming `path`, and memory files (limit, usage) per level
    ('' is the hierarchy's root) under a cgroup v2 or v1 hierarchy."""
    (root / "proc/self").mkdir(parents=True)
    lines = []
    for version, levels in (("v2", v2), ("v1", v1)):
        if levels is None:
            continue
        base = root / ("sys/fs/cgroup" if version == "v2" else "sys/fs/cgroup/memory")
        lines.append(f"0::{path}" if version == "v2" else f"7:memory:{path}")
        for level, (limit, usage) in levels.items():
            d = base / level
            d.mkdir(parents=True, exist_ok=True)
            names = ("memory.max", "memory.current") if version == "v2" else ("memory.limit_in_bytes",
                                                                             "memory.usage_in_bytes")
            (d / names[0]).write_text(f"{limit}\n")
            (d / names[1]).write_text(f"{usage}\n")
    (root / "proc/self/cgroup").write_text("\n".join(lines) + "\n")
    return root


MIB = 1 << 20


@pytest.mark.children
def test_cgroup_limits_are_read_at_every_level(tmp_path):
    free = probe_module("transfer").cgroup_free_bytes
    assert free(tmp_path) is None  # no /proc/self/cgroup
    v2 = cgroup_tree(tmp_path / "v2", v2={"job/step": ("max", 5 * MIB), "job": (300 * MIB, 280 * MIB),
                                          "": ("max", 0)})
    assert free(v2) == 20 * MIB  # the parent's limit binds
    v1 = cgroup_tree(tmp_path / "v1", v1={"job/step": (9223372036854771712, 10 * MIB), "job": (64 * MIB, 14 * MIB)})
    assert free(v1) == 50 * MIB  # the step's "unlimited" is v1's huge number
    unlimited = cgroup_tree(tmp_path / "none", v2={"job/step": ("max", 1)})
    assert free(unlimited) is None


def test_the_full_gpu_plan_keeps_every_coverage_class_within_its_budget(monkeypatch):
    """Every dtype both ways at every size up to 64 MiB, one copy past 32-bit indexes where memory allows,
    and at most the 12.6 GiB per variant that transfer's docstring budgets (33 GiB outlasted 150 s on an H100)."""
    import rocmcheck
    from rocmcheck import numeric

    transfer = probe_module("transfer")
    monkeypatch.setattr(transfer, "largest_bytes", lambda ctx: transfer.LARGEST["gpu"][1])
    cases = transfer.plan(rocmcheck.ProbeContext(device="cuda:0", profile="full", level=2))
    for size in (4 << 10, MIB, 64 * MIB):
        assert {(c.dtype, c.contiguous) for c in cases if c.nbytes == size} == {
            (dtype, contiguous) for dtype in numeric.PATTERN_DTYPES for contiguous in (True, False)}
    largest = max(cases, key=lambda c: c.nbytes)
    assert largest.nbytes // numeric.Pattern.itemsize(largest.dtype) > 2**31 and largest.nbytes > 2**32
    assert sum(c.nbytes * c.repeats for c in cases) <= 12.6 * 2**30
    monkeypatch.setattr(transfer, "largest_bytes", lambda ctx: 3 << 30)  # memory allows less: the largest that fits
    heavy = rocmcheck.ProbeContext(device="cuda:0", profile="full", level=2)  # the full plan: level 2 and 3
    assert max(c.nbytes for c in transfer.plan(heavy)) == 3 << 30


def test_largest_copy_is_sized_by_the_cgroup_and_a_bad_one_fails_in_time(rocm_run, tmp_path, monkeypatch):
    """Full profile on the CPU at level 2 (the largest copy is the heavy profile's): the cgroup leaves 96 MiB, so
    the largest copy is a third of it; zeros
    on every copy end in FAIL well inside the timeout, the direction judged on a bounded window."""
    root = cgroup_tree(tmp_path, v2={"job/step": (400 * MIB, 304 * MIB)})
    monkeypatch.setenv("ROCMCHECK_HOST_ROOT", str(root))  # the children inherit it (no fresh interpreter each)
    (ok,) = rocm_run(probe="transfer", keyword="to-isolated", level=2)
    assert ok["status"] == "pass" and ok["measurements"]["largest_bytes"] == 32 * MIB
    (bad,) = rocm_run(probe="transfer", keyword="to-isolated", inject="copy-zeros:to", timeout=120, level=2)
    m = bad["measurements"]
    assert bad["status"] == "fail" and m["largest_bytes"] == 32 * MIB and bad["duration_s"] < 120
    assert m["float32_bad_copies"] == m["float32_copies"] == 2 * 10 * 2 + 2  # 4 KiB and 1 MiB both ways, largest
    assert m["float32_zeros"] == m["float32_mismatches"] == (20 * (4 * 1024 + MIB) + 2 * 32 * MIB) // 4  # every element
    assert "judged on elements 0..1023" in bad["message"]
