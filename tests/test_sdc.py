"""Silent data corruption (issue 33): the `sdc` probe's deterministic workload, its checks against
the exact answer and across repeats, the budgets of its levels, and the one-bit faults that prove
them, which the tolerance-based probes pass. The node check across GPUs: test_agreement.py; levels
in general: test_levels.py."""
from __future__ import annotations

import json
import textwrap

import pytest

from conftest import probe_module, run_ok_script
from rocmcheck import faults, simgpu
from rocmcheck.cli import main
from rocmcheck.engine.selection import select
from rocmcheck.errors import UsageError
from rocmcheck.model import SDC_EXACT, SDC_MEASUREMENTS, Status, WorkloadHashes
from rocmcheck.registry import load_all
from rocmcheck.testing import run_inline


@pytest.fixture(scope="module")
def simgpu_built():
    simgpu.build()


# --- the probe on the CPU, in-process ----------------------------------------------------------


def test_the_workload_agrees_with_the_exact_answer_and_its_repeats_and_records_its_hashes(one_thread):
    result = run_inline("sdc")
    assert result.status is Status.PASS, result.message
    record = WorkloadHashes.from_dict(result.measurements[SDC_MEASUREMENTS])
    assert set(record.hashes) == {"chain-fp32", "chain-fp16", "chain-bf16", "exact-fp32", "exact-fp16",
                                  "exact-bf16", "conv-fp32", "attention-fp32", "optimizer-fp32"}
    assert record.left_out == {} and record.compared["rounds"] >= 2 and record.compared["exact_outputs"] >= 6
    assert {"torch", "arch", "device", "cpu_capability", "threads", "blas"} <= set(record.key)
    assert result.measurements[SDC_EXACT] == {"ops": ["exact-bf16", "exact-fp16", "exact-fp32"], "wrong": []}
    again = WorkloadHashes.from_dict(run_inline("sdc").measurements[SDC_MEASUREMENTS])
    assert again.hashes == record.hashes  # the same work in another run: the same bits


def test_exact_inputs_are_bounded_so_that_every_sum_is_exact():
    sdc = probe_module("sdc")
    import numpy as np

    from rocmcheck.context import ProbeContext

    ctx, rng = ProbeContext(), np.random.default_rng(0)
    for dtype, longest in (("float16", 2048 // 16), ("bfloat16", 256 // 4), ("float32", 2 ** 24 // 64)):
        assert sdc.exact_product(ctx, dtype, (0, 1, longest, 1), rng).exact is not None
        with pytest.raises(ValueError, match="not exact"):
            sdc.exact_product(ctx, dtype, (0, 1, longest + 1, 1), rng)
    for name in ("exact-fp32", "exact-half"):  # the sizes the workload uses, on a GPU and on the CPU
        for batch, m, k, n in sdc.SIZES[name]:
            dtypes = ("float32",) if name == "exact-fp32" else ("float16", "bfloat16")
            assert all(k * sdc.EXACT_LIMIT[d] ** 2 <= sdc.exact_bound(d) for d in dtypes)


@pytest.mark.parametrize("level, duration", [(1, None), (2, 8.0)])
def test_a_level_keeps_its_budget_within_ten_percent_and_says_what_it_compared(one_thread, level, duration):
    """Level 1 is sdc's alone; at level 2 it takes its share (the rest is gpu-memory's and sustained-load's)."""
    result = run_inline("sdc", level=level, duration=duration)
    assert result.status is Status.PASS, result.message
    budget = duration * probe_module("sdc").LEVEL_SHARE if duration else 2.0
    assert result.measurements["budget_s"] == budget
    assert abs(result.measurements["elapsed_s"] - budget) <= 0.1 * budget, result.measurements
    compared = result.measurements[SDC_MEASUREMENTS]["compared"]
    assert compared["rounds"] > 2 and compared["outputs"] > compared["exact_outputs"] > 0 and compared["bytes"] > 0


def test_a_one_bit_flip_in_every_product_fails_sdc_against_the_exact_answer_and_passes_the_tolerance_probes():
    """The CPU form (`bitflip`): the point of the bitwise check is that float64 tolerances cannot see it."""
    flipped = run_inline("sdc", inject="bitflip")
    assert flipped.status is Status.FAIL
    assert "computed wrong bits" in flipped.message and "differ from the exact answer" in flipped.message
    assert flipped.measurements[SDC_EXACT]["wrong"] == ["exact-fp32", "exact-fp16", "exact-bf16"]
    tolerant = (("gemm", {"dtype": "fp32", "blas": "default"}), ("gemm", {"dtype": "bf16", "blas": "default"}),
                ("numerics", {"check": "ops", "dtype": "fp16"}))
    for probe, params in tolerant:
        result = run_inline(probe, inject="bitflip", **params)
        assert result.status is Status.PASS and result.faults_installed == ("bitflip",), (probe, result.message)


def test_a_one_off_wrong_result_fails_and_work_that_is_not_deterministic_is_left_out():
    """The rule for a repeat that differed: CONFIRM more runs; all but one agreeing is a wrong result,
    more disagreement with every exact answer right is work this device does not do deterministically."""
    sdc = probe_module("sdc")
    import torch

    steady = sdc.Work("steady", lambda: [torch.ones(4)])
    first = sdc.digest(steady.run())
    tally, left_out = sdc.Tally(), {}
    assert sdc.judge_repeat(steady, 1, first, "2-9", tally, left_out) is True
    assert "a wrong result" in tally.problems[0] and left_out == {}
    noisy = sdc.Work("noisy", lambda: [torch.rand(4)])
    tally, left_out = sdc.Tally(), {}
    assert sdc.judge_repeat(noisy, 3, sdc.digest(noisy.run()), "2-9", tally, left_out) is False
    assert tally.problems == [] and "not deterministic here" in left_out["noisy"]
    tally.exact_wrong.append("exact-fp32")  # a GPU that got an exact answer wrong is not excused
    assert sdc.judge_repeat(noisy, 3, sdc.digest(noisy.run()), "2-9", tally, left_out) is True


# --- levels, options and faults -------------------------------------------------------------


def test_the_level_chooses_the_variants_and_list_shows_them_all():
    specs = load_all()
    assert [v.id for v in select(specs, ["sdc"])] == ["sdc[1]"]
    assert [v.id for v in select(specs, ["sdc"], level=3)] == ["sdc[3]"]
    assert [v.id for v in select(specs, ["sdc"], level=None)] == ["sdc[1]", "sdc[2]", "sdc[3]"]
    assert [v.id for v in select(specs, ["sdc"], gate_only=True)] == ["sdc[1]"]


def test_the_cpu_bitflip_flips_the_lowest_bit_of_one_element_of_every_product():
    import torch

    from rocmcheck.numeric import bitwise, tensor_bits

    a, b = torch.randn(8, 16), torch.randn(16, 4)
    right = a @ b
    with faults.reverting():
        faults.install(faults.parse("bitflip"), "sdc")
        flipped = [torch.matmul(a, b), a @ b, torch.nn.functional.linear(a, b.T)]
    for got in flipped:
        check = bitwise(tensor_bits(got), tensor_bits(right))
        assert (check.mismatches, check.first_bad) == (1, right.numel() // 2)
        assert int(tensor_bits(got).reshape(-1)[16] ^ tensor_bits(right).reshape(-1)[16]) == 1
    assert torch.equal(a @ b, right)  # put back


SIMULATED_FLIP = textwrap.dedent('''
    import torch
    from rocmcheck import simgpu
    simgpu.enable(2)
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    right = (a @ b).view(torch.int32)
    def differing(gpu):
        got = (a.to(f"simgpu:{gpu}") @ b.to(f"simgpu:{gpu}")).cpu().view(torch.int32)
        return (got != right).nonzero().flatten().tolist(), int((got ^ right).abs().max())
    simgpu.set_bitflip(1, 1.0)
    assert differing(0) == ([], 0), differing(0)
    assert differing(1) == ([4, 0], 1), differing(1)  # row 4, column 0: the middle element, its lowest bit
    simgpu.set_bitflip(1, 0.25)
    hits = sum(bool(differing(1)[0]) for _ in range(400))
    assert 60 <= hits <= 140, hits  # about a quarter of the products
    print("ok", flush=True)
    import os; os._exit(0)
''')


@pytest.mark.children
def test_the_simulated_gpu_flips_one_low_bit_in_its_products_every_time_or_at_a_rate(simgpu_built):
    run_ok_script(SIMULATED_FLIP)


@pytest.mark.parametrize("spec, refused", [
    ("bitflip:0", "fault 'bitflip' takes rate per call"), ("bitflip:x", "fault 'bitflip' takes rate per call"),
    ("simgpu:2,simgpu-bitflip-rate:1", "takes IDX:RATE"), ("simgpu:2,simgpu-bitflip-rate:1:2", "takes IDX:RATE"),
    ("simgpu-bitflip:1", "needs 'simgpu' in the same spec"),
])
def test_a_bad_bitflip_spec_is_refused(spec, refused):
    with pytest.raises(UsageError, match=refused):
        faults.parse(spec)


def test_good_bitflip_specs_parse():
    assert [str(r) for r in faults.parse("simgpu:2,simgpu-bitflip-rate:1:2e-5,bitflip:0.5")] == [
        "simgpu:2", "simgpu-bitflip-rate:1:2e-5", "bitflip:0.5"]


# --- on the simulated GPUs, through the runner --------------------------------------------------------

@pytest.mark.children
def test_the_gate_names_the_gpu_that_flips_a_bit_and_the_tolerance_probes_pass_it(tmp_path, capsys, simgpu_built):
    """`gate --inject simgpu:2,simgpu-bitflip:1 --keep-going`: NO-GO naming GPU 1; gemm and numerics pass on
    both (without --keep-going GPU 1's queue stops at its NO-GO: tests/test_cost_budgets.py)."""
    requires = [a for p in ("sdc", "gemm", "numerics") for a in ("--require", p)]
    code = main(["gate", "--keep-going", "--inject", "simgpu:2,simgpu-bitflip:1", *requires, "--out-dir", str(tmp_path),
                 "--json", "-"])
    node = json.loads(capsys.readouterr().out)
    assert code == 1 and node["status"] == "NO-GO"
    assert [(f["check"], f["device"]["name"]) for f in node["failing"]] == [("sdc[1]", "simgpu:1")]
    assert "differ from the exact answer" in node["failing"][0]["message"]
    (report,) = tmp_path.glob("*.json")
    verdicts = json.loads(report.read_text())["verdicts"]
    tolerant = [v for v in verdicts if v["probe"] in ("gemm", "numerics")]
    assert len(tolerant) == 2 * (3 + 4) and {v["status"] for v in tolerant} == {"pass"}  # their gate variants, each GPU


@pytest.mark.children
def test_a_healthy_node_is_go_and_says_its_gpus_agree(tmp_path, capsys, simgpu_built):
    code = main(["gate", "--inject", "simgpu:2", "--require", "sdc", "--out-dir", str(tmp_path), "--json", "-"])
    node = json.loads(capsys.readouterr().out)
    assert code == 0 and node["status"] == "GO", node
    assert "sdc[1]: 2 GPUs (simgpu:0, simgpu:1) agree bit for bit on 9 ops" in node["notes"]


@pytest.mark.children
def test_level_2_catches_a_low_rate_flip_within_its_budget(tmp_path, capsys, simgpu_built):
    """A short level 2 at a rate high enough to flip within it: the repeat check names the op;
    benchmarks/bench_sdc.py measures the detection probability at low rates."""
    code = main(["run", "--probe", "sdc", "--level", "2", "--duration", "12", "--device", "simgpu:0", "--inject",
                 "simgpu:1,simgpu-bitflip-rate:0:0.02", "--out-dir", str(tmp_path), "--json", str(tmp_path / "r.json")])
    (verdict,) = json.loads((tmp_path / "r.json").read_text())["verdicts"]
    assert code == 1 and verdict["variant"] == "sdc[2]" and verdict["status"] == "fail", verdict["message"]
    assert "computed wrong bits" in verdict["message"]
    assert verdict["env"] == {}  # every child has CUBLAS_WORKSPACE_CONFIG=:4096:8: sdc shares its GPU's worker


def test_sdc_needs_an_interpreter_of_its_own_only_where_the_users_cublas_workspace_is_not_deterministic(monkeypatch):
    """Issue 39: every child gets CUBLAS_WORKSPACE_CONFIG=:4096:8 unless the user set it, so sdc
    runs in its GPU's worker; a user's value under which cuBLAS is not deterministic gives it a
    fresh interpreter with ours, and the user's value reaches every other child unchanged."""
    from rocmcheck import torchapi
    from rocmcheck.engine.launch import child_env

    env_of = load_all()["sdc"].expand()[0].env
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    assert env_of() == {} and child_env({}, [])["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    assert env_of() == {} and child_env({}, [])["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0")
    assert env_of() == {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    assert child_env({}, [])["CUBLAS_WORKSPACE_CONFIG"] == ":0:0"
    assert child_env(env_of(), [])["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert torchapi.DETERMINISTIC_CUBLAS_WORKSPACES[0] == ":4096:8"


