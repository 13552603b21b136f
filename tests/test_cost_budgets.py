"""Cost budgets by design and a decided gate that stops (issue 39): every variant has a cost budget per GPU at
each level, the runner splits what it cost into setup, first use and work, the run's wall time is held
against the per-GPU sum of budgets, a variant over its own is named in every output and is no failure;
the gate stops a GPU's queue at its first failing verdict (`--keep-going` runs everything); heavy profiles
run only at `--level 2`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import rocmcheck
from conftest import probe_module
from rocmcheck.cli import main
from rocmcheck.engine.runner import covered
from rocmcheck.model import DEFAULT_BUDGET_S, LEVEL_BUDGETS_S, NOT_RUN_DECIDED, Status, VariantCost, Verdict, budget_at
from rocmcheck.records import COST_SECTION, Report, RunCost
from rocmcheck.registry import load_all

# --- the declared budgets ---------------------------------------------------------------------------------


def test_a_budget_is_a_number_a_mapping_by_level_or_a_function_of_the_parameters():
    assert budget_at(None, {}, 1) == DEFAULT_BUDGET_S and budget_at(None, {}, 3) == DEFAULT_BUDGET_S
    assert budget_at(7.5, {}, 2) == 7.5
    assert [budget_at({1: 8.0, 2: 120.0}, {}, n) for n in (1, 2, 3)] == [8.0, 120.0, 120.0]  # 3 takes 2's
    assert budget_at({2: 60.0}, {}, 1) == DEFAULT_BUDGET_S  # no level at or below 1: the default
    by_backend = lambda p: 12.0 if p["backend"] == "cudnn" else {1: 3.0}  # noqa: E731
    assert (budget_at(by_backend, {"backend": "cudnn"}, 1), budget_at(by_backend, {"backend": "math"}, 1)) == (12, 3)


def test_a_variant_with_a_level_is_given_its_levels_work_on_top_of_its_declared_budget():
    specs = load_all()
    sdc = specs["sdc"]
    for level in (1, 2, 3):
        declared = budget_at(sdc.budget, {"level": level}, level)
        share = 1.0 if level == 1 else sdc.level_share  # levels 2 and 3 are shared with gpu-memory, sustained-load
        assert sdc.cost_budget({"level": level}, level) == pytest.approx(declared + LEVEL_BUDGETS_S[level] * share)
    assert sdc.cost_budget({"level": 2}, 2, duration=30.0) == pytest.approx(
        budget_at(sdc.budget, {}, 2) + 30.0 * sdc.level_share)
    assert specs["device-smoke"].cost_budget({}, 1) == DEFAULT_BUDGET_S  # no level, nothing declared


def test_every_builtin_variant_has_a_positive_budget_at_every_level_and_heavy_ones_grow_with_the_level():
    for spec in load_all().values():
        for variant in spec.expand():
            budgets = [spec.cost_budget(variant.params, level) for level in LEVEL_BUDGETS_S]
            assert all(b > 0 for b in budgets), variant.id
    specs = load_all()
    for heavy in ("transfer", "allocator"):  # their long profiles run at level 2: so does their budget
        params = specs[heavy].expand()[0].params
        assert specs[heavy].cost_budget(params, 2) > specs[heavy].cost_budget(params, 1)


# --- the records --------------------------------------------------------------------------------------------


def test_the_time_inside_variants_counts_overlapping_queues_once():
    assert covered([]) == 0
    assert covered([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == pytest.approx(4.0)  # two GPUs at once, then one
    assert covered([(1.0, 4.0), (2.0, 3.0)]) == pytest.approx(3.0)  # one inside another


def verdict(variant: str, device: str, cost: VariantCost) -> Verdict:
    return Verdict(variant.split("[")[0], variant, Status.PASS, device={"name": device}, cost=cost)


def test_the_run_cost_is_per_gpu_and_names_each_variant_over_its_budget_round_trip_included():
    verdicts = [verdict("a", "cuda:0", VariantCost(0.5, 0.0, 1.0, 2.0)),
                verdict("a", "cuda:1", VariantCost(0.5, 0.0, 3.0, 2.0)),
                verdict("b", "cuda:0", VariantCost(0.1, 1.0, 0.4, 5.0)),
                Verdict("c", "c", Status.SKIP, message="needs 2 GPUs")]  # not run: no cost, no budget
    cost = RunCost.of(verdicts, wall_s=10.0, in_variants_s=6.0)
    assert (cost.budget_s, cost.outside_s, cost.setup_s, cost.first_use_s, cost.work_s) == (7.0, 4.0, 1.1, 1.0, 4.4)
    assert cost.over == [{"variant": "a", "device": "cuda:1", "total_s": 3.5, "budget_s": 2.0}]
    assert "over budget (not a failure): a on cuda:1 (3.5s of 2s)" in cost.text()
    assert RunCost.from_dict(json.loads(json.dumps(cost.to_dict()))) == cost
    assert RunCost.from_dict(None) is None and RunCost.from_dict({"wall_s": "x"}) is None  # older or foreign
    assert cost.before_first_s is None and "before the first" not in cost.text()  # no variant's start given
    split = RunCost.of(verdicts, wall_s=10.0, in_variants_s=6.0, before_first_s=2.5)
    assert (split.before_first_s, split.between_s) == (2.5, 1.5)  # the 4 s outside: 2.5 before, 1.5 in the gaps
    assert "outside any variant 4.0s (before the first 2.5s, between variants 1.5s)" in split.text()
    assert RunCost.from_dict(json.loads(json.dumps(split.to_dict()))) == split
    imported = RunCost.of(verdicts, wall_s=10.0, in_variants_s=6.0, before_first_s=2.5,
                          imports_s={"torch": 1.3, "torch._dynamo": 0.9, "accelerate": 0.04, "probes": 0.2})
    assert imported.text().split("outside any variant ")[1].startswith(
        "4.0s (before the first 2.5s, between variants 1.5s; of the first, the isolation server's imports torch 1.3s, "
        "torch._dynamo 0.9s, probes 0.2s)")  # accelerate's 0.04 s only in the JSON
    assert RunCost.from_dict(json.loads(json.dumps(imported.to_dict()))) == imported
    with_facts = RunCost.of(verdicts, wall_s=10.0, in_variants_s=6.0, before_first_s=2.5, imports_s={"torch": 1.3},
                            facts_s=0.42)
    assert with_facts.text().split("outside any variant ")[1].startswith(
        "4.0s (before the first 2.5s, between variants 1.5s; of the first, the isolation server's imports torch 1.3s, "
        "the device facts 0.4s)")
    assert RunCost.from_dict(json.loads(json.dumps(with_facts.to_dict()))) == with_facts
    assert imported.facts_s is None and "device facts" not in imported.text()  # a report from before facts_s
    again = Verdict.from_dict(json.loads(json.dumps(verdicts[1].to_dict())))
    assert again.cost == verdicts[1].cost and again.cost.over_budget
    assert "cost" not in verdicts[3].to_dict() and Verdict.from_dict(verdicts[3].to_dict()).cost is None


# --- levels: the heavy profiles at level 2 and 3 ------------------------------------------------------------


def test_transfers_full_sizes_and_the_allocators_long_cycles_run_only_at_level_2_and_3(monkeypatch):
    transfer = probe_module("transfer")
    monkeypatch.setattr(transfer, "largest_bytes", lambda ctx: transfer.LARGEST["gpu"][1])
    sizes = {level: {(c.nbytes, c.repeats) for c in transfer.plan(rocmcheck.ProbeContext(device="cuda:0",
                                                                                          profile="full", level=level))}
             for level in (1, 2)}
    gate = {(c.nbytes, c.repeats) for c in transfer.plan(rocmcheck.ProbeContext(device="cuda:0", profile="gate"))}
    assert sizes[1] == gate and max(n for n, _ in sizes[1]) == 64 << 20  # the level-1 run copies the gate's sizes
    assert max(n for n, _ in sizes[2]) > 4 << 30  # level 2: the full plan, past 32-bit indexes
    assert [rocmcheck.ProbeContext(profile=p, level=n).heavy for p, n in (("full", 1), ("full", 2), ("gate", 3))] \
        == [False, True, False]  # the gate is level 1 whatever is asked
    allocator = probe_module("allocator")
    assert allocator.CYCLES["full"] > allocator.CYCLES["gate"]


# --- a run: the split, the overrun named in every output, never a failure -----------------------------------

SLOW = '''
import time
import rocmcheck

@rocmcheck.probe("over-budget", title="works past its budget", targets="-", timeout=30, budget=0.3, gate=True)
def over_budget(ctx):
    with ctx.first_use():
        time.sleep(0.4)
    time.sleep(0.6)

@rocmcheck.probe("within-budget", title="quick", targets="-", timeout=30, budget={1: 60.0}, gate=True)
def within_budget(ctx):
    pass
'''


@pytest.mark.children
def test_a_variant_over_its_budget_is_named_in_the_terminal_json_and_markdown_and_still_passes(tmp_path, capsys):
    (tmp_path / "probes").mkdir()
    (tmp_path / "probes" / "slow.py").write_text(SLOW)
    out = tmp_path / "out"
    code = main(["run", "--device", "cpu", "--probes-path", str(tmp_path / "probes"), "--probe", "*-budget",
                 "--out-dir", str(out), "--json", str(tmp_path / "r.json"), "--md", str(tmp_path / "r.md")])
    printed = capsys.readouterr().out
    assert code == 0  # an overrun is not a failure
    report = Report.from_dict(json.loads((tmp_path / "r.json").read_text()))
    costs = {v.variant: v.cost for v in report.verdicts}
    slow = costs["over-budget"]
    assert slow is not None and slow.budget_s == 0.3 and costs["within-budget"].budget_s == 60.0
    assert slow.first_use_s == pytest.approx(0.4, abs=0.15) and slow.work_s >= 0.55 and slow.setup_s >= 0
    run_cost = RunCost.from_dict(report.sections[COST_SECTION])
    assert [o["variant"] for o in run_cost.over] == ["over-budget"]
    assert run_cost.budget_s == 60.3 and run_cost.wall_s > run_cost.in_variants_s >= slow.first_use_s + slow.work_s
    # the process's imports and the zygote's `import torch` come before the first variant; the zygote's imports,
    # module by module, are part of that (its own server: the probe folder is this test's)
    assert run_cost.before_first_s > 0 and run_cost.before_first_s + run_cost.between_s == pytest.approx(
        run_cost.outside_s, abs=0.002)
    assert list(run_cost.imports_s)[0] == "torch" and list(run_cost.imports_s)[-1] == "probes"
    assert run_cost.imports_s["torch"] > 0 and sum(run_cost.imports_s.values()) < run_cost.before_first_s
    # and the device facts' child, after the server was ready: its wall time is part of the time before the first
    assert run_cost.facts_s is not None and 0 < run_cost.facts_s < run_cost.before_first_s - sum(
        run_cost.imports_s.values())
    assert f"the device facts {run_cost.facts_s:.1f}s" in printed
    said = "over budget (not a failure): over-budget"
    assert said in printed and said in (tmp_path / "r.md").read_text()
    assert "## Time against budgets" in (tmp_path / "r.md").read_text()
    assert f"wall against a budget of {run_cost.budget_s:.1f}s per GPU" in printed


# --- a decided gate stops --------------------------------------------------------------------------------------


def gate_json(capsys, *argv: str) -> tuple:
    code = main(["gate", *argv, "--json", "-"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.children
def test_the_gate_stops_the_bad_gpus_queue_and_the_good_one_finishes(tmp_path, capsys):
    """simgpu-wrong-device:1 fails device-smoke on simulated GPU 1 (the first probe of its queue): that GPU's
    NO-GO is decided, so its gemm variants are skips that say so, while GPU 0 runs them; the node verdict
    names GPU 1 and lists what it did not run."""
    code, node = gate_json(capsys, "--inject", "simgpu:2,simgpu-wrong-device:1", "--device", "all",
                           "--probe", "device-smoke", "--probe", "gemm", "--out-dir", str(tmp_path))
    assert code == 1 and node["status"] == "NO-GO"
    assert {f["device"]["name"] for f in node["failing"]} == {"simgpu:1"}
    assert {(n["check"], n["device"]) for n in node["not_run"]} == {
        (v, "simgpu:1") for v in ("gemm[fp32-default]", "gemm[fp16-default]", "gemm[bf16-default]")}
    report = Report.from_dict(json.loads(next(tmp_path.glob("rocmcheck-*.json")).read_text()))
    by_gpu = {(v.variant, v.device["name"]): v for v in report.verdicts}
    assert all(by_gpu[(v, "simgpu:0")].status is Status.PASS for v in ("device-smoke", "gemm[fp32-default]",
                                                                          "gemm[fp16-default]", "gemm[bf16-default]"))
    skipped = by_gpu[("gemm[fp32-default]", "simgpu:1")]
    assert skipped.status is Status.SKIP and skipped.message.startswith(f"{NOT_RUN_DECIDED} simgpu:1 was decided by "
                                                                        "device-smoke (fail)")
    assert skipped.cost is None  # not run: it costs nothing and has no budget in the sum
    assert any(n.startswith("simgpu:1: NO-GO decided by device-smoke") for n in report.run.notes)


@pytest.mark.children
def test_under_a_planted_backward_hang_the_cpu_gate_stops_at_the_first_hang_and_keep_going_runs_all(tmp_path,
                                                                                                      capsys):
    """The hang of issue 39: 16 hang verdicts in 252 s before NO-GO. Now the first hang decides the CPU's
    NO-GO and the other backward probes are not run; `--keep-going` runs (and hangs in) every one."""
    argv = ["--inject", "backward-hang", "--device", "cpu", "--timeout", "2", "--probe", "attention-model",
            "--probe", "training"]
    code, node = gate_json(capsys, *argv, "--out-dir", str(tmp_path / "stop"))
    assert code == 1 and [f["status"] for f in node["failing"]] == ["hang"]
    assert len(node["not_run"]) == node["counts"]["skip"] == 3
    code, node = gate_json(capsys, *argv, "--keep-going", "--out-dir", str(tmp_path / "all"))
    assert code == 1 and [f["status"] for f in node["failing"]] == ["hang"] * 4 and node["not_run"] == []


@pytest.mark.children
def test_run_keeps_going_after_a_failing_verdict(tmp_path, capsys):
    code = main(["run", "--inject", "simgpu:2,simgpu-wrong-device:1", "--device", "simgpu:1", "--probe",
                 "device-smoke", "--probe", "gemm", "-k", "device-smoke or fp32-default", "--out-dir", str(tmp_path)])
    capsys.readouterr()
    report = Report.from_dict(json.loads(next(Path(tmp_path).glob("rocmcheck-*.json")).read_text()))
    statuses = {v.variant: v.status for v in report.verdicts}
    assert code == 1 and statuses["device-smoke"] is Status.FAIL  # the first fails, and the next still runs:
    assert statuses["gemm[fp32-default]"] is not Status.SKIP
